//! A claim while its body runs: the lease kept alive, the claim visible to the body, and what a
//! dropped call leaves behind.

use std::borrow::Cow;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use super::operation_timeout::bounded;
use super::recorder::{self, Recorder};
use super::settle::{store_response, undo};
use super::{Claim, IdempotencyStore, StoreError};
use crate::metrics;

tokio::task_local! {
    static CURRENT: Current;
}

/// What a running body can ask of its call: the claim, and the key as its caller gave it.
#[derive(Clone)]
struct Current {
    claim: Claim,
    /// `Settings::biz_key`: the client's `Idempotency-Key` under the layer, an `#[idempotent]`
    /// function's `biz_key`.
    given: Option<String>,
    /// Where the body's steps are journaled; `None` for a claim its transaction holds.
    recorder: Option<Recorder>,
}

/// The claim the body running in this task holds, and where its steps are journaled (see
/// [`step`](super::step)): `None` outside an idempotent call.
pub(super) fn current_steps() -> Option<(Claim, Option<Recorder>)> {
    CURRENT
        .try_with(|current| (current.claim.clone(), current.recorder.clone()))
        .ok()
}

/// A retry inside the claim (`#[idempotent]` above `#[retryable]`) starts another attempt of
/// the body: its steps are a new run for the label check, and a step that finished in an
/// earlier attempt is answered from the journal. (A retry nested deeper in the body does the
/// same: the check is then looser, never the journal.)
pub(crate) fn attempt_retried() {
    let _ = CURRENT.try_with(|current| {
        if let Some(recorder) = &current.recorder {
            recorder.new_run();
        }
    });
}

/// The claim of the `#[idempotent]` call whose body is running in this task, if any: its key
/// and fencing token. A body uses it to derive stable keys for its own downstream calls
/// (`Claim::derive`, feature `http`), so idempotency carries on into the services it calls. Work spawned onto
/// another task does not see it (pass the claim along).
///
/// ```
/// use retry_core::idempotency::{current, IdempotencyError, MemoryStore};
/// use retry_core::idempotent;
///
/// #[derive(Debug)]
/// struct Failed;
/// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
///
/// #[idempotent(key = order, store = inbox)]
/// async fn charge(inbox: &MemoryStore, order: u64) -> Result<String, Failed> {
///     let claim = current().expect("inside an #[idempotent] body");
///     Ok(claim.key)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let inbox = MemoryStore::new();
/// assert!(current().is_none());
/// assert!(charge(&inbox, 7).await.unwrap().ends_with("n7"));
/// # }
/// ```
pub fn current() -> Option<Claim> {
    CURRENT.try_with(|current| current.claim.clone()).ok()
}

/// The key of the call whose body is running in this task, as its caller gave it: under an
/// `IdempotencyLayer` the client's `Idempotency-Key` (unquoted, unescaped), in an
/// `#[idempotent(biz_key = ..)]` function its `biz_key`, otherwise the stored key
/// ([`current`]`().key`); `None` outside. The key to park a dead letter under (`dlq(id =
/// ..)`), so that a redrive is answered by the stored response.
///
/// ```
/// use retry_core::idempotency::{current_key, IdempotencyError, MemoryStore};
/// use retry_core::idempotent;
///
/// #[derive(Debug)]
/// struct Failed;
/// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
///
/// #[idempotent(key = order, store = inbox, biz_key = format!("order {order}"))]
/// async fn charge(inbox: &MemoryStore, order: u64) -> Result<String, Failed> {
///     Ok(current_key().expect("inside an #[idempotent] body"))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(charge(&MemoryStore::new(), 7).await.unwrap(), "order 7");
/// assert!(current_key().is_none());
/// # }
/// ```
pub fn current_key() -> Option<String> {
    CURRENT
        .try_with(|current| {
            current
                .given
                .clone()
                .unwrap_or_else(|| current.claim.key.clone())
        })
        .ok()
}

/// A claim held while the body runs. While it is [held](Self::hold) its lease is renewed every
/// `lease / 3`, so a slow body is never taken over while its process lives.
///
/// Dropped before it is finished (a timeout, a cancelled task, a shut-down), a non-transactional
/// claim is left in progress: the body may have had its effect, so the key is not freed; a
/// duplicate gets `InProgress` until the lease runs out (the lease frees keys of dead holders).
/// A transactional claim is released, since its transaction rolled back. Either way the drop is
/// counted in [`metrics::names::ABANDONED`](crate::metrics::names::ABANDONED).
#[derive(Debug)]
pub struct HeldClaim<'s, S: IdempotencyStore + ?Sized> {
    pub(super) store: &'s S,
    pub(super) claim: Option<Claim>,
    pub(super) function: Cow<'static, str>,
    pub(super) lease: Duration,
    /// The key as the caller gave it, for [`current_key`].
    given: Option<String>,
    /// Whether the flow renews the lease while the body runs (not where an open transaction
    /// already keeps the claim: [`TransactionalStore::transaction_holds_claim`](super::TransactionalStore::transaction_holds_claim)).
    pub(super) renews: bool,
    /// Transactional mode: a drop means a rollback, so the claim is released.
    pub(super) transactional: bool,
    /// The claim was written in the handler's transaction and exists nowhere else
    /// ([`ClaimedTransaction::in_transaction`](super::ClaimedTransaction::in_transaction)): its
    /// rollback frees the key, so there is nothing to renew or release.
    pub(crate) in_transaction: bool,
}

impl<'s, S: IdempotencyStore + ?Sized> HeldClaim<'s, S> {
    /// `claim`, on `store`, of a call named `function` whose caller gave `given` as its key.
    pub(super) fn new(
        store: &'s S,
        claim: Claim,
        function: Cow<'static, str>,
        lease: Duration,
        given: Option<String>,
    ) -> Self {
        HeldClaim {
            store,
            claim: Some(claim),
            function,
            lease,
            given,
            renews: true,
            transactional: false,
            in_transaction: false,
        }
    }

    /// The claim.
    pub fn claim(&self) -> Option<&Claim> {
        self.claim.as_ref()
    }

    /// Takes the claim out, so dropping the holder leaves nothing to do.
    pub(super) fn take(&mut self) -> Option<Claim> {
        self.claim.take()
    }

    /// Runs `body` under this claim: [`current`] returns the claim inside it, and the lease is
    /// renewed every `lease / 3` until `body` finishes. A renewal that fails is logged and
    /// counted ([`metrics::names::RENEWAL_FAILURES`](crate::metrics::names::RENEWAL_FAILURES));
    /// after a fenced one (the claim was taken over) renewing stops, and the body's completion
    /// will be refused as fenced.
    ///
    /// ```
    /// use retry_core::idempotency::{begin_call, current, Begun, MemoryStore, Settings};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// let call = Settings::new("n1", "deposit");
    /// let Begun::Claimed(held) = begin_call(&store, &call).await.unwrap() else { panic!() };
    /// let token = held.hold(async { current().map(|claim| claim.token) }).await;
    /// assert_eq!(token, Some(1));
    /// held.complete("10").await.unwrap();
    /// # }
    /// ```
    pub async fn hold<F: Future>(&self, body: F) -> F::Output {
        let Some(claim) = &self.claim else {
            return body.await;
        };
        // A transactional body commits or rolls back as a whole: it has no steps to journal.
        let (recorder, requests) = match self.transactional {
            true => (None, None),
            false => {
                let (recorder, requests) = recorder::channel();
                (Some(recorder), Some(requests))
            }
        };
        let current = Current {
            claim: claim.clone(),
            given: self.given.clone(),
            recorder,
        };
        let mut body = pin!(CURRENT.scope(current, body));
        // Outside a Tokio runtime there is no timer to renew with.
        let mut renewing = self.renews && tokio::runtime::Handle::try_current().is_ok();
        let mut renewal = pin!(renew_while_running(
            self.store,
            claim,
            self.lease,
            &self.function
        ));
        let mut serving = requests.is_some();
        let mut steps = pin!(async {
            if let Some(requests) = requests {
                recorder::serve(self.store, claim, &self.function, requests).await;
            }
        });
        poll_fn(|cx| {
            if let Poll::Ready(output) = body.as_mut().poll(cx) {
                return Poll::Ready(output);
            }
            if renewing && renewal.as_mut().poll(cx).is_ready() {
                renewing = false;
            }
            if serving && steps.as_mut().poll(cx).is_ready() {
                serving = false;
            }
            Poll::Pending
        })
        .await
    }

    /// Stores the response (non-transactional mode): up to three tries, each waiting at most the
    /// store's [`operation_timeout`](IdempotencyStore::operation_timeout).
    pub async fn complete(mut self, response: &str) -> Result<(), StoreError> {
        match self.take() {
            Some(claim) => store_response(self.store, &claim, response, &self.function).await,
            None => Err(StoreError::Fenced),
        }
    }

    /// Settles the claim after a failed body: [`OnErr::Keep`](super::OnErr::Keep) marks the
    /// key failed and keeps `failure` for duplicates; [`OnErr::Release`](super::OnErr::Release)
    /// frees the key for a resend (only when the body's effect is known not to have happened).
    /// Waits at most the store's [`operation_timeout`](IdempotencyStore::operation_timeout).
    ///
    /// A claim written in the handler's transaction is released by that transaction's rollback:
    /// releasing it here is then a no-op.
    pub async fn fail(mut self, on_err: super::OnErr, failure: &str) -> Result<(), StoreError> {
        match self.take() {
            Some(_) if self.in_transaction && on_err != super::OnErr::Keep => Ok(()),
            Some(claim) => undo(self.store, &claim, on_err, failure).await,
            None => Ok(()),
        }
    }
}

/// Renews `claim`'s lease every `lease / 3`; ends only when the claim was fenced.
async fn renew_while_running<S: IdempotencyStore + ?Sized>(
    store: &S,
    claim: &Claim,
    lease: Duration,
    function: &str,
) {
    let every = (lease / 3).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(every).await;
        match bounded(store, "renew", store.renew(claim, lease)).await {
            Ok(()) => {}
            Err(StoreError::Fenced) => {
                tracing::error!(target: "retry_core::idempotency", function, key = %claim.key, token = claim.token, "lease renewal refused: the claim was taken over while the body ran");
                metrics::renewal_failed(function, true);
                return;
            }
            Err(e) => {
                // The next renewal may reach the store; the lease holds until it ends.
                tracing::warn!(target: "retry_core::idempotency", function, key = %claim.key, error = %crate::error_chain(&e), "lease renewal failed; trying again at the next renewal");
                metrics::renewal_failed(function, false);
            }
        }
    }
}

impl<S: IdempotencyStore + ?Sized> Drop for HeldClaim<'_, S> {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        // A claim written in the transaction went with its rollback: the key is free already.
        let released =
            self.in_transaction || (self.transactional && self.store.abandon(claim.clone()));
        if !self.transactional {
            tracing::warn!(target: "retry_core::idempotency", function = &*self.function, key = %claim.key, lease = ?self.lease, "call dropped while its body ran: its effect is unknown, so the key stays in progress until its lease runs out");
        } else if !released {
            tracing::warn!(target: "retry_core::idempotency", function = &*self.function, key = %claim.key, lease = ?self.lease, "transactional call dropped: rolled back; the store cannot release the claim now, so its lease frees it");
        }
        metrics::abandoned(&self.function, released);
    }
}
