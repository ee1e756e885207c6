//! The flow of one idempotent call: claim, run, store or release.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::held::HeldClaim;
pub(crate) use super::operation_timeout::bounded;
use super::settle::{OnErr, store_response, undo};
use super::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, StoreError,
    TransactionClaim, TransactionalStore,
};
use crate::metrics;

pin_project! {
    /// The future returned by an `#[idempotent]` function. `K` says whether the body retries
    /// ([`Retries`]: `#[idempotent]` above `#[retryable]`, one claim with the retries inside) or
    /// not ([`Once`]), so the compile-time nesting check still sees a retrying call.
    ///
    /// ```
    /// use retry_core::idempotency::{IdempotencyError, MemoryStore};
    /// use retry_core::idempotent;
    ///
    /// #[derive(Debug)]
    /// struct Rejected(IdempotencyError);
    /// impl From<IdempotencyError> for Rejected {
    ///     fn from(e: IdempotencyError) -> Self { Rejected(e) }
    /// }
    ///
    /// #[idempotent(key = msg_no, store = inbox)]
    /// async fn deposit(inbox: &MemoryStore, msg_no: u64, amount: u64) -> Result<u64, Rejected> {
    ///     Ok(amount)
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let inbox = MemoryStore::new();
    /// assert_eq!(deposit(&inbox, 1, 10).await.unwrap(), 10);
    /// // A resend of message 1 gets the first response, whatever it carries.
    /// assert_eq!(deposit(&inbox, 1, 99).await.unwrap(), 10);
    /// # }
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Idempotent<F, K = Once> {
        #[pin]
        inner: F,
        key: String,
        kind: PhantomData<K>,
    }
}

/// The body of an [`Idempotent`] call runs once per claim.
#[derive(Debug, Clone, Copy)]
pub struct Once;

/// The body of an [`Idempotent`] call retries inside its one claim.
#[derive(Debug, Clone, Copy)]
pub struct Retries;

impl<F, K> Idempotent<F, K> {
    pub(crate) fn new(key: String, inner: F) -> Self {
        Idempotent {
            inner,
            key,
            kind: PhantomData,
        }
    }

    /// The encoded idempotency key (scope included) this call claims: what a dead letter of it
    /// records as `idempotency_key`, and what a redrive checks before resending.
    ///
    /// ```
    /// use retry_core::idempotency::{IdempotencyError, MemoryStore};
    /// use retry_core::idempotent;
    ///
    /// #[derive(Debug)]
    /// struct Rejected(IdempotencyError);
    /// impl From<IdempotencyError> for Rejected {
    ///     fn from(e: IdempotencyError) -> Self { Rejected(e) }
    /// }
    ///
    /// #[idempotent(key = ("acme", msg_no), store = inbox)]
    /// async fn deposit(inbox: &MemoryStore, msg_no: u64) -> Result<u64, Rejected> { Ok(msg_no) }
    ///
    /// let inbox = MemoryStore::new();
    /// let call = deposit(&inbox, 7);
    /// // Namespaced by the function: (namespace, scope, key).
    /// assert_eq!(
    ///     call.idempotency_key(),
    ///     retry_core::idempotency::encode_namespaced_key("deposit", None::<&str>, &("acme", 7u64))
    /// );
    /// ```
    pub fn idempotency_key(&self) -> &str {
        &self.key
    }
}

impl<F: Future> Idempotent<F, Retries> {
    /// Runs the call with a single attempt inside its claim: the explicit way to await an
    /// idempotent, retrying function inside another retry's body.
    ///
    /// ```
    /// use retry_core::idempotency::{IdempotencyError, MemoryStore};
    /// use retry_core::{idempotent, retryable, Classify, Decision, Elapsed};
    ///
    /// #[derive(Debug)]
    /// struct Failed;
    /// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
    /// impl From<Elapsed> for Failed { fn from(_: Elapsed) -> Self { Failed } }
    /// impl Classify for Failed { fn classify(&self) -> Decision { Decision::Retry } }
    ///
    /// #[idempotent(key = id, store = inbox, lease = "1m")]
    /// #[retryable(max = 3, deadline = "20s", attempt_timeout = "5s")]
    /// async fn charge(inbox: &MemoryStore, id: u64) -> Result<u64, Failed> { Ok(id) }
    ///
    /// #[retryable(max = 3)]
    /// async fn settle(inbox: &MemoryStore) -> Result<u64, Failed> {
    ///     charge(inbox, 7).single_attempt().await
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() { assert_eq!(settle(&MemoryStore::new()).await.unwrap(), 7); }
    /// ```
    pub fn single_attempt(self) -> crate::scope::InScope<Self> {
        crate::scope::single_attempt(self)
    }
}

impl<F: Future, K> Future for Idempotent<F, K> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<F, K> std::fmt::Debug for Idempotent<F, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotent")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// What an `#[idempotent]` attribute says about one call.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The encoded key, scope included.
    pub key: String,
    /// The key as people know it; the encoded key when not given.
    pub biz_key: Option<String>,
    /// The payload's digest.
    pub fingerprint: Option<String>,
    /// See [`ClaimRequest::lease`].
    pub lease: Duration,
    /// See [`ClaimRequest::retention`].
    pub retention: Duration,
    /// The function (or the layer), for events and metrics: its `function` label.
    pub function: Cow<'static, str>,
}

impl Settings {
    /// A call with an already encoded `key` (see [`encode_key`](super::encode_key)), made by
    /// `function`, with the default lease and retention.
    pub fn new(key: impl Into<String>, function: impl Into<Cow<'static, str>>) -> Self {
        Settings {
            key: key.into(),
            biz_key: None,
            fingerprint: None,
            lease: super::DEFAULT_LEASE,
            retention: super::DEFAULT_RETENTION,
            function: function.into(),
        }
    }
}

/// What claiming a call's key found: run the body, or answer with what is stored.
#[derive(Debug)]
pub enum Begun<'s, S: IdempotencyStore + ?Sized> {
    /// The key is ours: run the body, then finish with the held claim.
    Claimed(HeldClaim<'s, S>),
    /// A call with this key already succeeded: its stored response (JSON).
    Stored(String),
}

/// Claims the call's key: the first step of the flow, public for the plain (non-attribute)
/// transactional API. Fails with [`IdempotencyError`] for an oversized key, a concurrent or
/// failed duplicate, a reused key, or a store that cannot be reached or does not answer within
/// its [`operation_timeout`](IdempotencyStore::operation_timeout) (fail closed).
///
/// ```
/// use retry_core::idempotency::{begin_call, Begun, MemoryStore, Settings};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let call = Settings::new("s3:m-1", "deposit");
/// let Begun::Claimed(held) = begin_call(&store, &call).await.unwrap() else { panic!() };
/// held.complete("\"ok\"").await.unwrap();
/// assert!(matches!(begin_call(&store, &call).await.unwrap(), Begun::Stored(r) if r == "\"ok\""));
/// # }
/// ```
pub async fn begin_call<'s, S: IdempotencyStore + ?Sized>(
    store: &'s S,
    call: &Settings,
) -> Result<Begun<'s, S>, IdempotencyError> {
    let request = claim_request(store, call)?;
    match bounded(store, "claim", store.claim(&request)).await {
        Ok(ClaimOutcome::Claimed(claim)) => Ok(Begun::Claimed(HeldClaim::new(
            store,
            claim,
            call.function.clone(),
            call.lease,
            call.biz_key.clone(),
        ))),
        Ok(refused) => refused_with(refused, call).map(Begun::Stored),
        // Fail closed: without a claim the body must not run.
        Err(e) => Err(IdempotencyError::Store(e)),
    }
}

/// What `call` asks of the store, once its key is known to fit.
fn claim_request<'c, S: IdempotencyStore + ?Sized>(
    store: &S,
    call: &'c Settings,
) -> Result<ClaimRequest<'c>, IdempotencyError> {
    let limits = store.limits();
    if call.key.len() > limits.max_key_bytes {
        return Err(IdempotencyError::KeyTooLong {
            len: call.key.len(),
            max: limits.max_key_bytes,
        });
    }
    Ok(ClaimRequest {
        key: &call.key,
        biz_key: call.biz_key.as_deref().unwrap_or(&call.key),
        fingerprint: call.fingerprint.as_deref(),
        lease: call.lease,
        retention: call.retention,
    })
}

/// A claim that did not get the key: the stored response to answer with, or why not.
fn refused_with(outcome: ClaimOutcome, call: &Settings) -> Result<String, IdempotencyError> {
    match outcome {
        ClaimOutcome::Done(stored) => {
            metrics::duplicate_answered(&call.function);
            Ok(stored)
        }
        ClaimOutcome::InProgress => Err(IdempotencyError::InProgress),
        ClaimOutcome::Failed(failure) => {
            metrics::duplicate_answered(&call.function);
            Err(IdempotencyError::PreviouslyFailed(failure))
        }
        ClaimOutcome::KeyReused => Err(IdempotencyError::KeyReused),
        // Only `claim_in_transaction` can say this, and only by mistake: its claim (if any was
        // committed) is left to its lease.
        ClaimOutcome::Claimed(_) => Err(IdempotencyError::Store(StoreError::Corrupt(
            "the store refused a claim with a claim".to_owned(),
        ))),
    }
}

/// What claiming a transactional call's key found ([`begin_transactional`]).
pub enum BegunTransaction<'s, S: TransactionalStore + ?Sized> {
    /// The key is ours, held by the handler's transaction: run the body in it.
    Claimed(HeldClaim<'s, S>, S::Transaction),
    /// A call with this key already succeeded: its stored response (JSON).
    Stored(String),
}

impl<S: TransactionalStore + ?Sized> std::fmt::Debug for BegunTransaction<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BegunTransaction::Claimed(held, _) => f
                .debug_tuple("Claimed")
                .field(&held.claim())
                .finish_non_exhaustive(),
            BegunTransaction::Stored(stored) => f.debug_tuple("Stored").field(stored).finish(),
        }
    }
}

/// Claims the call's key inside the handler's transaction
/// ([`TransactionalStore::claim_in_transaction`]): the transactional counterpart of
/// [`begin_call`], shared by `#[idempotent(transaction = ..)]`, the transactional HTTP layer
/// and drivers that run handlers of their own (a queue consumer): one commit per call, the
/// claim, the handler's writes and the response together. Finish a claimed call with
/// [`finish_transactional`]. Fails as [`begin_call`] does.
///
/// ```
/// use retry_core::idempotency::{
///     begin_transactional, finish_transactional, BegunTransaction, IdempotencyError,
///     Settings, TransactionalStore,
/// };
///
/// /// Runs the handler's writes at most once per `key`, committed with its response.
/// async fn deposit<S: TransactionalStore>(store: &S, key: &str) -> Result<u64, IdempotencyError> {
///     let call = Settings::new(key, "deposit");
///     match begin_transactional(store, &call).await? {
///         BegunTransaction::Stored(json) => {
///             serde_json::from_str(&json).map_err(|e| IdempotencyError::Serde(e.to_string()))
///         }
///         BegunTransaction::Claimed(held, transaction) => {
///             // ... the handler's own writes, through `transaction` ...
///             finish_transactional(held, transaction, &call, Ok(10)).await
///         }
///     }
/// }
/// ```
pub async fn begin_transactional<'s, S: TransactionalStore + ?Sized>(
    store: &'s S,
    call: &Settings,
) -> Result<BegunTransaction<'s, S>, IdempotencyError> {
    begin_transactional_in(store, call, None).await
}

/// [`begin_transactional`] for a call that knows its response before it runs (a queue
/// consumer's handler answers nothing: `"null"`), through
/// [`TransactionalStore::claim_answered_in_transaction`]: a store may write the key `done`
/// with the claim, so that [`finish_transactional`] with that response only commits. Nothing
/// else changes: a call that fails, is dropped or dies rolls back, and the key is free.
///
/// ```
/// use retry_core::idempotency::{
///     begin_transactional_answered, finish_transactional, BegunTransaction, IdempotencyError,
///     Settings, TransactionalStore,
/// };
///
/// /// Books `key` at most once; its success answers nothing.
/// async fn book<S: TransactionalStore>(store: &S, key: &str) -> Result<(), IdempotencyError> {
///     let call = Settings::new(key, "book");
///     match begin_transactional_answered(store, &call, "null").await? {
///         BegunTransaction::Stored(_) => Ok(()), // booked before
///         BegunTransaction::Claimed(held, transaction) => {
///             // ... the booking, through `transaction` ...
///             finish_transactional(held, transaction, &call, Ok(())).await
///         }
///     }
/// }
/// ```
pub async fn begin_transactional_answered<'s, S: TransactionalStore + ?Sized>(
    store: &'s S,
    call: &Settings,
    response: &str,
) -> Result<BegunTransaction<'s, S>, IdempotencyError> {
    begin_transactional_in(store, call, Some(response)).await
}

async fn begin_transactional_in<'s, S: TransactionalStore + ?Sized>(
    store: &'s S,
    call: &Settings,
    response: Option<&str>,
) -> Result<BegunTransaction<'s, S>, IdempotencyError> {
    let request = claim_request(store, call)?;
    let claimed = match response {
        Some(response) => {
            bounded(
                store,
                "claim",
                store.claim_answered_in_transaction(&request, response),
            )
            .await
        }
        None => bounded(store, "claim", store.claim_in_transaction(&request)).await,
    };
    match claimed {
        Ok(TransactionClaim::Claimed(claimed)) => {
            let mut held = HeldClaim::new(
                store,
                claimed.claim,
                call.function.clone(),
                call.lease,
                call.biz_key.clone(),
            );
            held.transactional = true;
            held.in_transaction = claimed.in_transaction;
            // A claim only the transaction has is invisible to every other connection: there
            // is no row to renew, and its rollback frees the key.
            held.renews = !claimed.in_transaction && !store.transaction_holds_claim();
            Ok(BegunTransaction::Claimed(held, claimed.transaction))
        }
        Ok(TransactionClaim::Refused(refused)) => {
            refused_with(refused, call).map(BegunTransaction::Stored)
        }
        // Fail closed: a timeout is an unknown, never a second run; whatever the store opened
        // is dropped with the future, and rolls back.
        Err(e) => Err(IdempotencyError::Store(e)),
    }
}

/// The stored response, decoded.
fn decode<T: DeserializeOwned, E: From<IdempotencyError>>(
    call: &Settings,
    stored: &str,
) -> Result<T, E> {
    serde_json::from_str(stored).map_err(|e| {
        IdempotencyError::Serde(format!("stored response of `{}`: {e}", call.key)).into()
    })
}

/// Runs `body` at most once per key in `store`; see the [module docs](super). A failed body
/// settles its claim as `on_err` decides for its error.
pub(crate) async fn run<S, B, T, E>(
    store: &S,
    call: Settings,
    on_err: impl FnOnce(&E) -> OnErr,
    body: B,
) -> Result<T, E>
where
    S: IdempotencyStore + ?Sized,
    B: Future<Output = Result<T, E>>,
    T: Serialize + DeserializeOwned,
    E: From<IdempotencyError> + std::fmt::Debug,
{
    let mut held = match begin_call(store, &call).await? {
        Begun::Stored(stored) => return decode(&call, &stored),
        Begun::Claimed(held) => held,
    };
    let outcome = held.hold(body).await;
    let Some(claim) = held.take() else {
        return outcome;
    };
    match outcome {
        Ok(value) => {
            finish(
                store,
                &call,
                &claim,
                &value,
                store.limits().max_response_bytes,
            )
            .await;
            Ok(value)
        }
        Err(error) => {
            let choice = on_err(&error);
            give_up(store, &claim, &call, choice, &format!("{error:?}")).await;
            Err(error)
        }
    }
}

/// Gives up the claim of a failed call (see [`undo`]); a failure is logged, and the lease frees
/// the claim later.
async fn give_up<S: IdempotencyStore + ?Sized>(
    store: &S,
    claim: &Claim,
    call: &Settings,
    on_err: OnErr,
    failure: &str,
) {
    if let Err(e) = undo(store, claim, on_err, failure).await {
        // The lease frees the claim later; a resend meanwhile gets `InProgress`.
        tracing::warn!(target: "retry_core::idempotency", function = &*call.function, key = %call.key, error = %crate::error_chain(&e), "could not settle the claim of a failed call");
    }
}

/// The transactional flow, for `#[idempotent(transaction = tx)]`: the claim inside the store's
/// transaction, then the body with that transaction, then the response and `done` committed in
/// it: one commit (see [`TransactionalStore::claim_in_transaction`]).
pub(crate) async fn claim_transactional<'s, S, T, E>(
    store: &'s S,
    call: &Settings,
) -> Result<(HeldClaim<'s, S>, S::Transaction), Result<T, E>>
where
    S: TransactionalStore + ?Sized,
    T: DeserializeOwned,
    E: From<IdempotencyError>,
{
    match begin_transactional(store, call).await {
        Ok(BegunTransaction::Claimed(held, transaction)) => Ok((held, transaction)),
        Ok(BegunTransaction::Stored(stored)) => Err(decode(call, &stored)),
        Err(e) => Err(Err(e.into())),
    }
}

/// Finishes a transactional call: on `Ok`, the response and `done` commit with the body's
/// writes (a claim taken over meanwhile rolls everything back: `Fenced`); on `Err`, the
/// transaction rolls back and the claim is given up.
///
/// ```
/// use retry_core::idempotency::{
///     begin_call, finish_transactional, Begun, IdempotencyError, Settings, StoreError,
///     TransactionalStore,
/// };
///
/// async fn deposit<S: TransactionalStore>(store: &S, key: &str) -> Result<u64, IdempotencyError> {
///     let call = Settings::new(key, "deposit");
///     let held = match begin_call(store, &call).await? {
///         Begun::Stored(json) => {
///             return serde_json::from_str(&json).map_err(|e| IdempotencyError::Serde(e.to_string()));
///         }
///         Begun::Claimed(held) => held,
///     };
///     let Some(claim) = held.claim() else { return Err(IdempotencyError::Store(StoreError::Fenced)) };
///     let transaction = store.begin_for(claim).await?;
///     // ... the handler's own writes, through `transaction` ...
///     finish_transactional(held, transaction, &call, Ok(10)).await
/// }
/// ```
pub async fn finish_transactional<S, T, E>(
    mut held: HeldClaim<'_, S>,
    transaction: S::Transaction,
    call: &Settings,
    outcome: Result<T, E>,
) -> Result<T, E>
where
    S: TransactionalStore + ?Sized,
    T: Serialize,
    E: From<IdempotencyError>,
{
    let store = held.store;
    let in_transaction = held.in_transaction;
    let Some(claim) = held.take() else {
        return outcome;
    };
    // What a rollback leaves to release: a claim that committed on its own. One written in the
    // transaction goes with its rollback.
    let to_release = (!in_transaction).then_some(&claim);
    let value = match outcome {
        Ok(value) => value,
        Err(error) => {
            roll_back(store, transaction, to_release, call).await;
            return Err(error);
        }
    };
    let max = store.limits().max_response_bytes;
    let response = match serde_json::to_string(&value) {
        Ok(json) if json.len() <= max => json,
        // Nothing committed yet: the body's writes roll back and the call fails cleanly.
        Ok(json) => {
            let error = IdempotencyError::ResponseTooLarge {
                len: json.len(),
                max,
            };
            return abort(store, transaction, to_release, call, error).await;
        }
        Err(e) => {
            let error = IdempotencyError::Serde(e.to_string());
            return abort(store, transaction, to_release, call, error).await;
        }
    };
    match bounded(
        store,
        "commit_done",
        store.commit_done(transaction, &claim, &response),
    )
    .await
    {
        Ok(()) => Ok(value),
        Err(StoreError::Fenced) => {
            tracing::error!(target: "retry_core::idempotency", function = &*call.function, key = %call.key, token = claim.token, "claim taken over while the body ran: its writes were rolled back");
            metrics::fenced(&call.function);
            Err(IdempotencyError::Store(StoreError::Fenced).into())
        }
        // The commit may or may not have happened: a duplicate finds out (done, or the lease
        // frees the claim and the body runs once).
        Err(e) => Err(IdempotencyError::Store(e).into()),
    }
}

/// Rolls back a call whose response cannot be stored (see [`roll_back`]).
async fn abort<S, T, E>(
    store: &S,
    transaction: S::Transaction,
    to_release: Option<&Claim>,
    call: &Settings,
    error: IdempotencyError,
) -> Result<T, E>
where
    S: TransactionalStore + ?Sized,
    E: From<IdempotencyError>,
{
    tracing::error!(target: "retry_core::idempotency", function = &*call.function, key = %call.key, error = %crate::error_chain(&error), "response cannot be stored: the body's writes were rolled back");
    roll_back(store, transaction, to_release, call).await;
    Err(error.into())
}

/// Rolls `transaction` back: nothing of the body's writes happened, so the key is free again,
/// by the rollback itself or, for a claim that committed on its own (`to_release`), by
/// releasing it. Failures are logged: the store rolls back when the connection closes, and the
/// lease frees the claim later.
async fn roll_back<S: TransactionalStore + ?Sized>(
    store: &S,
    transaction: S::Transaction,
    to_release: Option<&Claim>,
    call: &Settings,
) {
    if let Err(e) = bounded(store, "rollback", store.rollback(transaction)).await {
        tracing::warn!(target: "retry_core::idempotency", function = &*call.function, key = %call.key, error = %crate::error_chain(&e), "rollback failed; the store rolls back when the connection closes");
    }
    if let Some(claim) = to_release {
        give_up(store, claim, call, OnErr::Release, "").await;
    }
}

/// Stores the response of a call whose effect happened. Failing that is reported, not returned:
/// the caller's effect is real. A response that cannot be kept marks the key failed; a store
/// that cannot be written leaves it in progress, so a later duplicate gets `InProgress` until
/// the lease ends and after it runs the body again (transactional mode closes that gap).
async fn finish<S: IdempotencyStore + ?Sized, T: Serialize>(
    store: &S,
    call: &Settings,
    claim: &Claim,
    value: &T,
    max: usize,
) {
    let response = match serde_json::to_string(value) {
        Ok(json) if json.len() <= max => json,
        Ok(json) => {
            let e = IdempotencyError::ResponseTooLarge {
                len: json.len(),
                max,
            };
            return keep_unstorable(store, call, claim, &e).await;
        }
        Err(e) => {
            let e = IdempotencyError::Serde(e.to_string());
            return keep_unstorable(store, call, claim, &e).await;
        }
    };
    match store_response(store, claim, &response, &call.function).await {
        Ok(()) => {}
        Err(StoreError::Fenced) => {
            tracing::error!(target: "retry_core::idempotency", function = &*call.function, key = %call.key, token = claim.token, "late completion refused: the lease ran out and another call took the key over; both ran the body");
            metrics::fenced(&call.function);
        }
        Err(e) => {
            tracing::error!(target: "retry_core::idempotency", function = &*call.function, key = %call.key, error = %crate::error_chain(&e), "response not stored: duplicates get InProgress until the lease ends, then run the body again");
            metrics::response_not_stored(&call.function);
        }
    }
}

/// The body's effect happened but its response cannot be kept (too large, not serialisable):
/// the key is kept failed with the reason, so duplicates are refused rather than left to run
/// the body again once the lease runs out (the HTTP layer does the same).
async fn keep_unstorable<S: IdempotencyStore + ?Sized>(
    store: &S,
    call: &Settings,
    claim: &Claim,
    error: &IdempotencyError,
) {
    tracing::error!(target: "retry_core::idempotency", function = &*call.function, key = %call.key, error = %crate::error_chain(&error), "response not stored: the key is kept failed, so duplicates are refused instead of running the body again");
    metrics::response_not_stored(&call.function);
    let failure = format!("the response was not stored: {error}");
    give_up(store, claim, call, OnErr::Keep, &failure).await;
}

/// Wraps the flow future of an `#[idempotent]` function that claims `key`.
pub(crate) fn wrap<F: Future, K>(key: String, flow: F) -> Idempotent<F, K> {
    Idempotent::new(key, flow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::OverMemory;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A third-party transactional store without `claim_in_transaction` of its own: the
    /// default (`claim`, then `begin_for`) serves it.
    type ThirdParty = OverMemory<FailBegin>;

    #[derive(Default)]
    struct FailBegin {
        fail_begin: AtomicBool,
    }

    impl TransactionalStore for ThirdParty {
        type Transaction = ();
        async fn begin(&self) -> Result<(), StoreError> {
            if self.fail_begin.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("down".into()));
            }
            Ok(())
        }
        async fn commit_done(
            &self,
            (): (),
            claim: &Claim,
            response: &str,
        ) -> Result<(), StoreError> {
            self.inner.complete(claim, response).await
        }
        async fn rollback(&self, (): ()) -> Result<(), StoreError> {
            Ok(())
        }
    }

    fn request(key: &str) -> ClaimRequest<'_> {
        ClaimRequest {
            key,
            biz_key: key,
            fingerprint: None,
            lease: Duration::from_secs(30),
            retention: Duration::from_secs(86_400),
        }
    }

    #[tokio::test]
    async fn the_default_claims_then_begins_and_releases_when_begin_fails() {
        let store = ThirdParty::default();
        let TransactionClaim::Claimed(first) =
            store.claim_in_transaction(&request("k")).await.unwrap()
        else {
            panic!("claimed");
        };
        assert!(!first.in_transaction, "the claim committed on its own");
        assert!(matches!(
            store.claim_in_transaction(&request("k")).await.unwrap(),
            TransactionClaim::Refused(ClaimOutcome::InProgress)
        ));
        store.commit_done((), &first.claim, "1").await.unwrap();
        assert!(matches!(
            store.claim_in_transaction(&request("k")).await.unwrap(),
            TransactionClaim::Refused(ClaimOutcome::Done(r)) if r == "1"
        ));

        store.fail_begin.store(true, Ordering::SeqCst);
        assert!(store.claim_in_transaction(&request("m")).await.is_err());
        store.fail_begin.store(false, Ordering::SeqCst);
        assert!(
            matches!(
                store.claim(&request("m")).await.unwrap(),
                ClaimOutcome::Claimed(_)
            ),
            "released after the failed begin"
        );
    }

    #[tokio::test]
    async fn a_failed_transactional_body_releases_a_claim_that_committed_on_its_own() {
        let store = ThirdParty::default();
        let call = Settings::new("k", "deposit");
        let Ok((held, transaction)) =
            claim_transactional::<_, u32, IdempotencyError>(&store, &call).await
        else {
            panic!("claimed");
        };
        assert!(!held.in_transaction);
        let failed: Result<u32, IdempotencyError> =
            finish_transactional(held, transaction, &call, Err(IdempotencyError::InProgress)).await;
        assert!(failed.is_err());
        assert!(matches!(
            store.claim(&request("k")).await.unwrap(),
            ClaimOutcome::Claimed(_)
        ));
    }
}
