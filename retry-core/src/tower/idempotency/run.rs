//! Running the handler of a claimed key: on a task of its own, so it finishes when the client
//! goes away; under its claim, so its lease is renewed and `idempotency::current()` sees it; and
//! with its panics caught, so a panic settles the key instead of leaving it in progress.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use ::bytes::Bytes;
use ::http::Response;
use ::http::response::Parts;
use ::http_body::Body;
use pin_project_lite::pin_project;

use super::body::{BoxError, Buffered, IdempotencyBody, buffer};
use super::not_applied::{NotApplied, NotProcessed};
use crate::idempotency::{HeldClaim, IdempotencyStore};

/// How the handler's run ended.
pub(super) enum Ran<E> {
    /// It answered, and its response says its effect did not happen (why): [`NotApplied`] (taken
    /// out of the response), or a status of [`NotProcessed`].
    NotApplied(Response<IdempotencyBody>, &'static str),
    /// It answered: the response head, and its body read as far as the store keeps it.
    Answered { parts: Parts, body: Buffered },
    /// The inner service returned `Err`: the outcome is unknown.
    Failed(E),
    /// The handler panicked (the panic's message): the outcome is unknown.
    Panicked(String),
}

/// Runs `handler` under `held` (lease renewed every `lease / 3`, the claim visible to
/// `idempotency::current()`) and reads its response body, at most `max` bytes of it: a
/// streaming body is part of the handler's work, so the lease is kept while it streams. A
/// response whose status is in `not_processed` is a refusal before the handler's body ran.
pub(super) async fn run_handler<St, F, RB, E>(
    held: &HeldClaim<'_, St>,
    handler: F,
    max: usize,
    not_processed: &NotProcessed,
) -> Ran<E>
where
    St: IdempotencyStore + ?Sized,
    F: Future<Output = Result<Response<RB>, E>>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let run = async {
        let (mut parts, body) = match handler.await {
            Ok(response) => response.into_parts(),
            Err(e) => return Ran::Failed(e),
        };
        let body = IdempotencyBody::new(body);
        // The marker is for this layer only: it is never sent on, nor stored.
        if parts.extensions.remove::<NotApplied>().is_some() {
            let why = "the handler marked its response NotApplied";
            return Ran::NotApplied(Response::from_parts(parts, body), why);
        }
        if not_processed.contains(parts.status) {
            let why = "the response's status says the request was refused before it was processed";
            return Ran::NotApplied(Response::from_parts(parts, body), why);
        }
        let body = buffer(body, max).await;
        Ran::Answered { parts, body }
    };
    match held.hold(CatchUnwind { inner: run }).await {
        Ok(ran) => ran,
        Err(payload) => Ran::Panicked(panic_message(payload.as_ref())),
    }
}

/// Runs `task` on a Tokio task of its own and waits for it: dropping the wait (the client
/// disconnected, a timeout above this layer) leaves the task running to its end. Outside a
/// Tokio runtime there is nowhere to spawn, so `task` runs in place.
pub(super) async fn detached<T: Send + 'static>(
    task: impl Future<Output = T> + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn(task).await,
        Err(_) => Ok(task.await),
    }
}

pin_project! {
    /// A future whose panics are caught and returned, as `futures`' `catch_unwind` does (this
    /// crate does not depend on `futures`).
    struct CatchUnwind<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.project().inner;
        // Unwind safety: after a panic the future is dropped, never polled again, and nothing
        // it touched is read by this layer.
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

/// The message of a panic, as `panic!` formats it (`&str` or `String` payloads).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn panics_are_caught_and_named() {
        let caught = CatchUnwind {
            inner: async { panic!("handler broke") },
        }
        .await;
        // The body's output is `!`: only the caught panic can come back.
        let Err(payload) = caught;
        assert_eq!(panic_message(payload.as_ref()), "handler broke");
        let fine = CatchUnwind { inner: async { 7 } }.await;
        assert_eq!(fine.ok(), Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_detached_task_outlives_its_waiter() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Duration;

        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let waiter = detached(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            flag.store(true, Ordering::SeqCst);
        });
        // The wait is dropped after it started: the task must not be cancelled with it.
        let _ = tokio::time::timeout(Duration::from_millis(1), waiter).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(finished.load(Ordering::SeqCst), "the task ran to its end");
    }
}
