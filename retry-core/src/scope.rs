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

use ::metrics::Label;
use pin_project_lite::pin_project;

use crate::metrics::Site;

/// A retry running on this thread's current poll.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// The outermost retrying function: the one layer that retries.
    pub(crate) outer: &'static Site,
    /// Whether the retry that set this frame must make a single attempt.
    pub(crate) single: bool,
    /// Set by the caller on purpose (the `Caller-Retries` header): nested retries are expected,
    /// not a mistake to warn about.
    pub(crate) quiet: bool,
    /// The logical call's trace id: on its tracing events and its dead letter. `0` until
    /// something asks for it ([`current_trace_id`]): a call that succeeds at once and that no
    /// subscriber watches never draws one.
    pub(crate) trace_id: u64,
}

impl Frame {
    pub(crate) const fn outermost(site: &'static Site, trace_id: u64) -> Frame {
        Frame {
            outer: site,
            single: false,
            quiet: false,
            trace_id,
        }
    }
}

#[cfg(not(retry_core_loom))]
thread_local! {
    /// The last trace id drawn on this thread; `0` until the first one is seeded from the
    /// thread's random generator.
    static LAST_TRACE_ID: Cell<u64> = const { Cell::new(0) };
}

// loom runs its threads on one OS thread: only its own thread-locals are per model thread.
#[cfg(retry_core_loom)]
loom::thread_local! {
    static LAST_TRACE_ID: Cell<u64> = Cell::new(0);
}

/// A fresh trace id for a logical call: never `0`.
///
/// Ids only need to be distinct, not secret, so each thread seeds a counter once from its
/// random generator and mixes each step with splitmix64 (a bijection, so a thread never repeats
/// itself): a few instructions instead of a draw from the thread's ChaCha generator.
pub(crate) fn new_trace_id() -> u64 {
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    let state = LAST_TRACE_ID.with(|last| {
        let mut state = last.get();
        if state == 0 {
            state = rand::random::<u64>() | 1;
        }
        state = state.wrapping_add(GOLDEN);
        last.set(state);
        state
    });
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    match z ^ (z >> 31) {
        0 => GOLDEN,
        id => id,
    }
}

/// The trace id of the call running here (drawn now if it has none yet, and kept in its frame),
/// or a fresh one outside any retry.
pub(crate) fn current_trace_id() -> u64 {
    CURRENT.with(|current| match current.get() {
        Some(frame) if frame.trace_id != 0 => frame.trace_id,
        Some(frame) => {
            let trace_id = new_trace_id();
            current.set(Some(Frame { trace_id, ..frame }));
            trace_id
        }
        None => new_trace_id(),
    })
}

#[cfg(not(retry_core_loom))]
thread_local! {
    static CURRENT: Cell<Option<Frame>> = const { Cell::new(None) };
}

#[cfg(retry_core_loom)]
loom::thread_local! {
    static CURRENT: Cell<Option<Frame>> = Cell::new(None);
}

/// The frame of the retry being polled on this thread, if any.
#[inline]
pub(crate) fn current() -> Option<Frame> {
    CURRENT.with(Cell::get)
}

/// Makes `frame` current until the guard drops (or [`Entered::leave`]), then restores the
/// previous one (also on panic).
#[inline]
pub(crate) fn enter(frame: Frame) -> Entered {
    Entered {
        previous: CURRENT.with(|c| c.replace(Some(frame))),
    }
}

pub(crate) struct Entered {
    previous: Option<Frame>,
}

impl Entered {
    /// Restores the previous frame and returns the trace id the frame ended with: a trace id
    /// drawn inside it is kept by whoever entered it.
    #[inline]
    pub(crate) fn leave(self) -> u64 {
        let trace_id = restore(self.previous);
        std::mem::forget(self);
        trace_id
    }
}

/// Puts `previous` back; a trace id drawn inside the frame being left belongs to the same
/// logical call as `previous` (every nested frame is derived from its outer one), so an outer
/// frame without one adopts it. Returns the left frame's trace id.
#[inline]
fn restore(previous: Option<Frame>) -> u64 {
    CURRENT.with(|c| {
        let left = c.get().map_or(0, |f| f.trace_id);
        let previous = previous.map(|p| match p.trace_id {
            0 => Frame {
                trace_id: left,
                ..p
            },
            _ => p,
        });
        c.set(previous);
        left
    })
}

impl Drop for Entered {
    fn drop(&mut self) {
        restore(self.previous);
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
    // The id is drawn now, so a copy polled on another thread shares it.
    let trace_id = current().map(|_| current_trace_id());
    InScope {
        future,
        frame: current().map(|f| Frame {
            single: true,
            trace_id: trace_id.unwrap_or(f.trace_id),
            ..f
        }),
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
            outer: {
                static LABELS: [Label; 1] = Site::labels("the caller");
                static CALLER: Site = Site::new("the caller", &LABELS);
                &CALLER
            },
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
            outer: {
                static LABELS: [Label; 1] = Site::labels("single_attempt()");
                static SINGLE: Site = Site::new("single_attempt()", &LABELS);
                &SINGLE
            },
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
        let Some(frame) = this.frame else {
            return this.future.poll(cx);
        };
        let entered = enter(*frame);
        let poll = this.future.poll(cx);
        frame.trace_id = entered.leave();
        poll
    }
}

impl<F> std::fmt::Debug for InScope<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InScope")
            .field("active", &self.frame.is_some())
            .finish_non_exhaustive()
    }
}
