//! The flow of one idempotent call: claim, run, store or release.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Claim, ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, StoreError};
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
    pub(crate) fn new(inner: F) -> Self {
        Idempotent {
            inner,
            kind: PhantomData,
        }
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
        f.debug_struct("Idempotent").finish_non_exhaustive()
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
    /// `on_err = "keep"`: a failed call marks the key failed instead of releasing it.
    pub keep_failed: bool,
    /// The function, for events and metrics.
    pub function: &'static str,
}

/// How often, and how long apart, storing a response is tried before giving up on it.
const COMPLETE_TRIES: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(20),
    Duration::from_millis(100),
];

/// Runs `body` at most once per key in `store`; see the [module docs](super).
pub(crate) async fn run<S, B, T, E>(store: &S, call: Settings, body: B) -> Result<T, E>
where
    S: IdempotencyStore + ?Sized,
    B: Future<Output = Result<T, E>>,
    T: Serialize + DeserializeOwned,
    E: From<IdempotencyError>,
{
    let limits = store.limits();
    if call.key.len() > limits.max_key_bytes {
        return Err(IdempotencyError::KeyTooLong {
            len: call.key.len(),
            max: limits.max_key_bytes,
        }
        .into());
    }
    let request = ClaimRequest {
        key: &call.key,
        biz_key: call.biz_key.as_deref().unwrap_or(&call.key),
        fingerprint: call.fingerprint.as_deref(),
        lease: call.lease,
        retention: call.retention,
    };
    let claim = match store.claim(&request).await {
        Ok(ClaimOutcome::Claimed(claim)) => claim,
        Ok(ClaimOutcome::Done(stored)) => {
            metrics::duplicate_answered(call.function);
            return serde_json::from_str(&stored).map_err(|e| {
                IdempotencyError::Serde(format!("stored response of `{}`: {e}", call.key)).into()
            });
        }
        Ok(ClaimOutcome::InProgress) => return Err(IdempotencyError::InProgress.into()),
        Ok(ClaimOutcome::Failed) => return Err(IdempotencyError::PreviouslyFailed.into()),
        Ok(ClaimOutcome::KeyReused) => return Err(IdempotencyError::KeyReused.into()),
        // Fail closed: without a claim the body must not run.
        Err(e) => return Err(IdempotencyError::Store(e).into()),
    };
    let mut held = Held {
        store,
        claim: Some(claim),
        function: call.function,
    };
    let outcome = body.await;
    let Some(claim) = held.claim.take() else {
        // `held` is only emptied here.
        return outcome;
    };
    match outcome {
        Ok(value) => {
            finish(store, &call, &claim, &value, limits.max_response_bytes).await;
            Ok(value)
        }
        Err(error) => {
            let undone = if call.keep_failed {
                store.mark_failed(&claim).await
            } else {
                store.release(&claim).await
            };
            if let Err(e) = undone {
                // The lease frees the claim later; a resend meanwhile gets `InProgress`.
                tracing::warn!(function = call.function, key = %call.key, error = %e, "could not release the claim of a failed call");
            }
            Err(error)
        }
    }
}

/// Stores the response of a call whose effect happened. Failing that is reported, not returned:
/// the caller's effect is real. A later duplicate then gets `InProgress` until the lease ends,
/// and after it runs the body again (transactional mode closes that gap).
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
            tracing::error!(function = call.function, key = %call.key, error = %e, "response not stored: duplicates will run the body again after the lease");
            metrics::response_not_stored(call.function);
            return;
        }
        Err(e) => {
            tracing::error!(function = call.function, key = %call.key, error = %e, "response not serialisable: duplicates will run the body again after the lease");
            metrics::response_not_stored(call.function);
            return;
        }
    };
    for (attempt, pause) in COMPLETE_TRIES.iter().enumerate() {
        if !pause.is_zero() {
            tokio::time::sleep(*pause).await;
        }
        match store.complete(claim, &response).await {
            Ok(()) => return,
            Err(StoreError::Fenced) => {
                tracing::error!(function = call.function, key = %call.key, token = claim.token, "late completion refused: the lease ran out and another call took the key over; both ran the body");
                metrics::fenced(call.function);
                return;
            }
            Err(e) if attempt + 1 < COMPLETE_TRIES.len() => {
                tracing::warn!(function = call.function, key = %call.key, error = %e, "storing the response failed; trying again");
            }
            Err(e) => {
                tracing::error!(function = call.function, key = %call.key, error = %e, "response not stored: duplicates get InProgress until the lease ends, then run the body again");
                metrics::response_not_stored(call.function);
            }
        }
    }
}

/// A claim held while the body runs: if the call is dropped first (a client went away), the
/// claim is handed back to the store to release.
struct Held<'s, S: IdempotencyStore + ?Sized> {
    store: &'s S,
    claim: Option<Claim>,
    function: &'static str,
}

impl<S: IdempotencyStore + ?Sized> Drop for Held<'_, S> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            let released = self.store.abandon(claim);
            metrics::abandoned(self.function, released);
        }
    }
}

/// Wraps the flow future of an `#[idempotent]` function.
pub(crate) fn wrap<F: Future, K>(flow: F) -> Idempotent<F, K> {
    Idempotent::new(flow)
}
