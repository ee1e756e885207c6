//! The stores behind a reference or an `Arc`: `&S` and `Arc<S>` are stores wherever `S` is,
//! every method forwarded (a default left in place would answer for the wrapper, not for `S`).

use std::future::Future;
use std::time::Duration;

use super::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, Limits, StepEntry, StepWrite, StoreError,
    TransactionClaim, TransactionalStore,
};

// One body for both wrappers: the forwarding is the same method by method.
macro_rules! forward {
    ($($wrapper:ty),*) => {$(
        impl<S: IdempotencyStore + ?Sized> IdempotencyStore for $wrapper {
            fn claim(
                &self,
                request: &ClaimRequest<'_>,
            ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send {
                (**self).claim(request)
            }
            fn complete(
                &self,
                claim: &Claim,
                response: &str,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).complete(claim, response)
            }
            fn release(&self, claim: &Claim) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).release(claim)
            }
            fn mark_failed(
                &self,
                claim: &Claim,
                failure: &str,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).mark_failed(claim, failure)
            }
            fn renew(
                &self,
                claim: &Claim,
                lease: Duration,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).renew(claim, lease)
            }
            fn abandon(&self, claim: Claim) -> bool {
                (**self).abandon(claim)
            }
            fn read_steps(
                &self,
                claim: &Claim,
            ) -> impl Future<Output = Result<Vec<StepEntry>, StoreError>> + Send {
                (**self).read_steps(claim)
            }
            fn write_step(
                &self,
                claim: &Claim,
                label: &str,
                write: StepWrite<'_>,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).write_step(claim, label, write)
            }
            fn purge_older_than(
                &self,
                age: Duration,
            ) -> impl Future<Output = Result<u64, StoreError>> + Send {
                (**self).purge_older_than(age)
            }
            fn limits(&self) -> Limits {
                (**self).limits()
            }
            fn operation_timeout(&self) -> Duration {
                (**self).operation_timeout()
            }
        }

        impl<S: TransactionalStore + ?Sized> TransactionalStore for $wrapper {
            type Transaction = S::Transaction;
            fn begin(&self) -> impl Future<Output = Result<Self::Transaction, StoreError>> + Send {
                (**self).begin()
            }
            fn begin_for(
                &self,
                claim: &Claim,
            ) -> impl Future<Output = Result<Self::Transaction, StoreError>> + Send {
                (**self).begin_for(claim)
            }
            fn claim_in_transaction(
                &self,
                request: &ClaimRequest<'_>,
            ) -> impl Future<Output = Result<TransactionClaim<Self::Transaction>, StoreError>> + Send {
                (**self).claim_in_transaction(request)
            }
            fn claim_answered_in_transaction(
                &self,
                request: &ClaimRequest<'_>,
                response: &str,
            ) -> impl Future<Output = Result<TransactionClaim<Self::Transaction>, StoreError>> + Send {
                (**self).claim_answered_in_transaction(request, response)
            }
            fn commit_done(
                &self,
                transaction: Self::Transaction,
                claim: &Claim,
                response: &str,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).commit_done(transaction, claim, response)
            }
            fn rollback(
                &self,
                transaction: Self::Transaction,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).rollback(transaction)
            }
            fn transaction_holds_claim(&self) -> bool {
                (**self).transaction_holds_claim()
            }
            fn commit_step(
                &self,
                transaction: Self::Transaction,
                claim: &Claim,
                label: &str,
                output: &str,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).commit_step(transaction, claim, label, output)
            }
        }
    )*};
}

forward!(&S, std::sync::Arc<S>);
