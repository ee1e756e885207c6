//! The run-time retry scope: where the compiler cannot see one retrying call inside another
//! (through an un-annotated function, a trait object, [`Policy::retry`](crate::Policy::retry)),
//! an inner retry that starts while an outer one is running in the same task makes exactly one
//! attempt, so the attempts of both layers never multiply.
//!
//! The scope is a thread-local frame set while a [`Retrying`](crate::Retrying) future is being
//! polled. Everything polled inside that poll belongs to the same task, so the frame is in effect
//! task-local without any runtime support; a task started with `tokio::spawn` is polled elsewhere
//! and does not inherit it. Carry it across explicitly with [`in_current_scope`].

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

/// A retry running on this thread's current poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The outermost retrying function: the one layer that retries.
    pub(crate) outer: &'static str,
    /// Whether the retry that set this frame must make a single attempt.
    pub(crate) single: bool,
    /// Set by the caller on purpose (the `Caller-Retries` header): nested retries are expected,
    /// not a mistake to warn about.
    pub(crate) quiet: bool,
    /// The logical call's trace id: on its tracing events and its dead letter.
    pub(crate) trace_id: u64,
}

impl Frame {
    pub(crate) const fn outermost(function: &'static str, trace_id: u64) -> Frame {
        Frame {
            outer: function,
            single: false,
            quiet: false,
            trace_id,
        }
    }
}

/// A fresh trace id for a logical call.
pub(crate) fn new_trace_id() -> u64 {
    rand::random()
}

/// The trace id of the call running here, or a fresh one.
pub(crate) fn current_trace_id() -> u64 {
    current().map_or_else(new_trace_id, |frame| frame.trace_id)
}

thread_local! {
    static CURRENT: Cell<Option<Frame>> = const { Cell::new(None) };
}

/// The frame of the retry being polled on this thread, if any.
pub(crate) fn current() -> Option<Frame> {
    CURRENT.with(Cell::get)
}

/// Makes `frame` current until the guard drops, then restores the previous one (also on panic).
pub(crate) fn enter(frame: Frame) -> Entered {
    Entered {
        previous: CURRENT.with(|c| c.replace(Some(frame))),
    }
}

pub(crate) struct Entered {
    previous: Option<Frame>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
    }
}

/// Whether a retry is running in the current task (on the current poll).
///
/// ```
/// use retry_core::{retryable, scope};
///
/// #[retryable(max = 2, base = "1ms")]
/// async fn inside() -> std::io::Result<bool> {
///     Ok(scope::is_active())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert!(!scope::is_active());
/// assert!(inside().await.unwrap());
/// # }
/// ```
pub fn is_active() -> bool {
    current().is_some()
}

/// Carries the retry scope active now into `future`, typically one about to be spawned: retries
/// started inside it then make a single attempt, as they would without the spawn.
///
/// ```
/// use retry_core::{retryable, scope};
///
/// #[retryable(max = 3, base = "1ms")]
/// async fn outer() -> std::io::Result<(bool, bool)> {
///     let plain = tokio::spawn(async { scope::is_active() });
///     let carried = tokio::spawn(scope::in_current_scope(async { scope::is_active() }));
///     Ok((plain.await?, carried.await?))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(outer().await.unwrap(), (false, true));
/// # }
/// ```
pub fn in_current_scope<F: Future>(future: F) -> InScope<F> {
    InScope {
        future,
        frame: current().map(|f| Frame { single: true, ..f }),
    }
}

/// Runs `future` as if a caller further up the chain were retrying: every retry started inside
/// it makes a single attempt, quietly. Used by servers for requests whose caller retries (see
/// the `Caller-Retries` header in `retry_core::http`).
///
/// ```
/// use retry_core::{retryable, scope};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// static CALLS: AtomicU32 = AtomicU32::new(0);
///
/// #[retryable(max = 4, base = "1ms")]
/// async fn handler() -> std::io::Result<()> {
///     CALLS.fetch_add(1, Ordering::SeqCst);
///     Err(std::io::ErrorKind::ConnectionReset.into())
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// assert!(scope::caller_retries(handler()).await.is_err());
/// assert_eq!(CALLS.load(Ordering::SeqCst), 1);
/// # }
/// ```
pub fn caller_retries<F: Future>(future: F) -> InScope<F> {
    InScope {
        future,
        frame: Some(Frame {
            outer: "the caller",
            single: true,
            quiet: true,
            trace_id: current_trace_id(),
        }),
    }
}

/// `future` with every retry inside it making one attempt, quietly: asked for explicitly.
pub(crate) fn single_attempt<F: Future>(future: F) -> InScope<F> {
    InScope {
        future,
        frame: Some(Frame {
            outer: "single_attempt()",
            single: true,
            quiet: true,
            trace_id: current_trace_id(),
        }),
    }
}

/// `future` with no scope of its own, in the same type as the scoped ones.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn unscoped<F: Future>(future: F) -> InScope<F> {
    InScope {
        future,
        frame: None,
    }
}

pin_project! {
    /// A future polled inside a carried retry scope; see [`in_current_scope`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct InScope<F> {
        #[pin]
        future: F,
        frame: Option<Frame>,
    }
}

impl<F: Future> Future for InScope<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.frame.map(enter);
        this.future.poll(cx)
    }
}

impl<F> std::fmt::Debug for InScope<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InScope")
            .field("active", &self.frame.is_some())
            .finish_non_exhaustive()
    }
}
