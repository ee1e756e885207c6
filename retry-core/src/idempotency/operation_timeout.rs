//! The time bound on every store operation of an idempotent call: a hung store fails the call
//! closed instead of hanging it.

use std::future::Future;
use std::time::Duration;

use super::{IdempotencyStore, StoreError};

/// Waits for `future`, the store's `operation`, at most the store's
/// [`operation_timeout`](IdempotencyStore::operation_timeout): a hung store must not hang the
/// call, nor a retry loop around it. Giving up drops the operation; whatever of it still lands
/// later is what a crash at that point would leave (a claim is freed by its lease, a commit is
/// found by the next duplicate).
pub(crate) async fn bounded<S, T>(
    store: &S,
    operation: &'static str,
    future: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError>
where
    S: IdempotencyStore + ?Sized,
{
    // Outside a Tokio runtime there is no timer to bound the wait with (and a store that
    // answers at once, like the memory store, needs none).
    if tokio::runtime::Handle::try_current().is_err() {
        return future.await;
    }
    let limit = store.operation_timeout();
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result,
        Err(_) => Err(no_answer(operation, limit)),
    }
}

/// The error of a store operation that did not answer in time: `Unavailable`, so the call fails
/// closed and a retry layer retries it, with an `io::Error` of kind `TimedOut` as its source.
fn no_answer(operation: &'static str, limit: Duration) -> StoreError {
    StoreError::Unavailable(Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("`{operation}` did not answer within {limit:?}"),
    )))
}

/// Whether `e` says the store already waited out a timeout (ours, or its own): asking again at
/// once would only wait as long again.
pub(super) fn timed_out(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(source)
        if source.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut))
}
