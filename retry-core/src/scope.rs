//! The run-time retry scope: where the compiler cannot see one retrying call inside another
//! (through an un-annotated function, a trait object, [`Policy::retry`](crate::Policy::retry)),
//! an inner retry that starts while an outer one is running in the same task makes exactly one
//! attempt, so the attempts of both layers never multiply.
//!
//! The scope is a thread-local frame set while a [`Retrying`](crate::Retrying) future is being
//! polled. Everything polled inside that poll belongs to the same task, so the frame is in effect
//! task-local without any runtime support; a task started with `tokio::spawn` is polled elsewhere
//! and does not inherit it. Carry it across explicitly with [`in_current_scope`]; mark a future
//! polled in this task as independent all the same with [`isolated`].

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use ::metrics::Label;
use pin_project_lite::pin_project;

use crate::metrics::Site;
use crate::sync::thread_local_cell;

/// A retry running on this thread's current poll.
///
/// It lives on the stack of the poll that entered it (or in an [`InScope`]); the thread-local
/// holds only its address, so entering and leaving a scope is one pointer swap each way, not a
/// copy of the frame in and out.
#[derive(Debug)]
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
    ///
    /// Atomic only so that futures holding a frame stay `Sync`: a frame is read and written by
    /// the one thread polling it, and a relaxed load or store costs what a `Cell`'s does.
    trace_id: AtomicU64,
    /// The attempt the retrying layer is on; a single-attempt frame inside another has the
    /// outer one's.
    pub(crate) attempt: AttemptCell,
}

impl Frame {
    /// A frame whose one retrying layer is `outer`'s.
    #[inline]
    pub(crate) const fn new(
        outer: &'static Site,
        single: bool,
        quiet: bool,
        trace_id: u64,
    ) -> Frame {
        Frame {
            outer,
            single,
            quiet,
            trace_id: AtomicU64::new(trace_id),
            attempt: AttemptCell::new(0),
        }
    }

    /// The frame of the one layer that retries, `site`.
    #[inline]
    pub(crate) const fn outermost(site: &'static Site, trace_id: u64) -> Frame {
        Frame::new(site, false, false, trace_id)
    }

    /// A frame inside this one: the same outer function, and `trace_id` or else this frame's
    /// trace id; a single attempt.
    #[inline]
    pub(crate) fn single_inside(&self, trace_id: u64) -> Frame {
        let trace_id = match trace_id {
            0 => self.trace_id(),
            id => id,
        };
        let inside = Frame::new(self.outer, true, self.quiet, trace_id);
        inside.attempt.set(self.attempt.get());
        inside
    }

    /// The trace id, `0` if none has been drawn.
    #[inline]
    pub(crate) fn trace_id(&self) -> u64 {
        self.trace_id.load(Relaxed)
    }

    /// The trace id, drawn now if the frame has none yet.
    fn trace_id_or_draw(&self) -> u64 {
        match self.trace_id.load(Relaxed) {
            0 => {
                let id = new_trace_id();
                self.trace_id.store(id, Relaxed);
                id
            }
            id => id,
        }
    }
}

/// The attempt a retry is on (1 for the first; `0` before it, or outside any retry), kept in
/// its frame (which its `Retrying` keeps between polls) so that code running inside the attempt
/// can read it: `send_checked` records `http.request.resend_count` from it. Kept only with the
/// `opentelemetry` and `reqwest` features, its one reader: without them this holds nothing, and
/// keeping it costs nothing on the retry path.
#[derive(Debug)]
pub(crate) struct AttemptCell(
    #[cfg(all(feature = "opentelemetry", feature = "reqwest"))] std::sync::atomic::AtomicU32,
);

impl AttemptCell {
    #[inline]
    pub(crate) const fn new(attempt: u32) -> Self {
        #[cfg(all(feature = "opentelemetry", feature = "reqwest"))]
        {
            AttemptCell(std::sync::atomic::AtomicU32::new(attempt))
        }
        #[cfg(not(all(feature = "opentelemetry", feature = "reqwest")))]
        {
            let _ = attempt;
            AttemptCell()
        }
    }

    #[inline]
    pub(crate) fn get(&self) -> u32 {
        #[cfg(all(feature = "opentelemetry", feature = "reqwest"))]
        {
            self.0.load(Relaxed)
        }
        #[cfg(not(all(feature = "opentelemetry", feature = "reqwest")))]
        {
            0
        }
    }

    #[inline]
    pub(crate) fn set(&self, attempt: u32) {
        #[cfg(all(feature = "opentelemetry", feature = "reqwest"))]
        self.0.store(attempt, Relaxed);
        #[cfg(not(all(feature = "opentelemetry", feature = "reqwest")))]
        let _ = attempt;
    }
}

/// The retry running here starts attempt `attempt`. A single attempt inside another retry
/// leaves its frame on the outer retry's attempt: that is the one being resent.
#[inline(always)]
pub(crate) fn note_attempt(attempt: u32) {
    #[cfg(all(feature = "opentelemetry", feature = "reqwest"))]
    with_current(|frame| {
        if let Some(frame) = frame.filter(|frame| !frame.single) {
            frame.attempt.set(attempt);
        }
    });
    #[cfg(not(all(feature = "opentelemetry", feature = "reqwest")))]
    let _ = attempt;
}

/// The attempt of the retry running here (1 for the first), `0` outside any retry.
#[cfg(all(feature = "opentelemetry", feature = "reqwest"))]
pub(crate) fn current_attempt() -> u32 {
    with_current(|frame| frame.map_or(0, |frame| frame.attempt.get()))
}

thread_local_cell! {
    /// The last trace id drawn on this thread; `0` until the first one is seeded from the
    /// thread's random generator.
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
    with_current(|frame| frame.map_or_else(new_trace_id, Frame::trace_id_or_draw))
}

thread_local_cell! {
    /// The frame of the retry being polled on this thread: null outside any. Non-null only
    /// between [`enter`] and the drop of its guard, which borrows the frame.
    static CURRENT: Cell<*const Frame> = Cell::new(ptr::null());
}

/// Runs `f` with the frame of the retry being polled on this thread, if any.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Frame>) -> R) -> R {
    let current = CURRENT.with(Cell::get);
    // SAFETY: a non-null pointer was stored by `enter` from a `&'a Frame` held by the guard it
    // returned, and is replaced by the previous value when that guard drops. Guards are locals
    // of nested polls, so they drop in reverse order of entry: while the pointer is current,
    // its guard, and so the borrow of the frame, is alive further up this thread's stack.
    // Frames are only mutated through atomics, so a shared reference is all anyone takes.
    f(unsafe { current.as_ref() })
}

/// Whether the retry being polled here must make a single attempt (nested in another, or
/// `.single_attempt()`).
#[inline]
pub(crate) fn single_attempt_here() -> bool {
    with_current(|frame| frame.is_some_and(|frame| frame.single))
}

/// The frame current now, as a pointer: null outside any retry. For [`enter_over`], which
/// restores it.
#[inline(always)]
pub(crate) fn current() -> *const Frame {
    CURRENT.with(Cell::get)
}

/// Makes `frame` current until the guard drops, then restores the previous one (also on
/// panic), passing a trace id drawn inside `frame` on to it.
#[inline]
pub(crate) fn enter(frame: &Frame) -> Entered<'_> {
    enter_over(frame, current())
}

/// [`enter`], where the caller has just read the current frame (`previous`, from [`current`]).
#[inline(always)]
pub(crate) fn enter_over(frame: &Frame, previous: *const Frame) -> Entered<'_> {
    CURRENT.with(|c| c.set(frame));
    Entered { frame, previous }
}

/// See [`enter`]. Never forgotten: its drop is what keeps the thread-local valid.
pub(crate) struct Entered<'a> {
    frame: &'a Frame,
    previous: *const Frame,
}

impl Drop for Entered<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
        // A trace id drawn inside the frame being left belongs to the same logical call as the
        // previous frame (every nested frame is derived from its outer one), so an outer frame
        // without one adopts it. Outside any retry (the common case) there is none.
        if !self.previous.is_null() {
            adopt_trace_id(self.frame, self.previous);
        }
    }
}

/// See [`Entered`]'s drop.
#[cold]
#[inline(never)]
fn adopt_trace_id(left: &Frame, previous: *const Frame) {
    let id = left.trace_id();
    // SAFETY: `previous` was current when the guard leaving `left` was made, so its own guard
    // is still alive further up the stack (see `with_current`).
    if let Some(previous) = unsafe { previous.as_ref() }
        && id != 0
        && previous.trace_id() == 0
    {
        previous.trace_id.store(id, Relaxed);
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
#[inline]
pub fn is_active() -> bool {
    with_current(|frame| frame.is_some())
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
        // The id is drawn now, so a copy polled on another thread shares it.
        frame: with_current(|frame| frame.map(|f| f.single_inside(f.trace_id_or_draw()))),
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
    static LABELS: [Label; 2] = Site::labels("the caller", "");
    static CALLER: Site = Site::new("the caller", "", &LABELS);
    quietly_single(future, &CALLER)
}

/// `future` with every retry inside it making one attempt, quietly: asked for explicitly.
pub(crate) fn single_attempt<F: Future>(future: F) -> InScope<F> {
    static LABELS: [Label; 2] = Site::labels("single_attempt()", "");
    static SINGLE: Site = Site::new("single_attempt()", "", &LABELS);
    quietly_single(future, &SINGLE)
}

/// `future` with every retry inside it making one attempt, quietly, as if `outer` retried: the
/// call's trace id is drawn now.
fn quietly_single<F: Future>(future: F, outer: &'static Site) -> InScope<F> {
    InScope {
        future,
        frame: Some(Frame::new(outer, true, true, current_trace_id())),
    }
}

/// Runs `future` as an independent layer: no retry scope is active while it is polled, so a
/// retry inside it makes all its attempts even when `future` is awaited inside another retry.
/// The retries inside do not multiply with the outer ones by accident: the caller says they are
/// a separate job, as a spawned task is.
///
/// For work that lives longer than one attempt of the retry around it: a supervisor whose loop
/// retries each job on its own, a background refresh started from a retrying handler. Inside a
/// `#[retryable]` body, the compile-time nesting check does not look into the argument of
/// `isolated(..)` (nor into `tokio::spawn(..)` and the other `spawn*` calls), so
/// `scope::isolated(audit(id)).await` compiles where `audit(id).await` is the error "retry in
/// only one layer".
///
/// ```
/// use retry_core::{retryable, scope};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// static AUDITS: AtomicU32 = AtomicU32::new(0);
///
/// #[retryable(max = 3, base = "1ms")]
/// async fn audit() -> std::io::Result<()> {
///     AUDITS.fetch_add(1, Ordering::SeqCst);
///     Err(std::io::ErrorKind::ConnectionReset.into())
/// }
///
/// #[retryable(max = 2, base = "1ms")]
/// async fn handle() -> std::io::Result<bool> {
///     let _ = scope::isolated(audit()).await;
///     Ok(scope::isolated(async { scope::is_active() }).await)
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// assert!(!handle().await.unwrap(), "no scope inside `isolated`");
/// assert_eq!(AUDITS.load(Ordering::SeqCst), 3, "the audit made all its attempts");
/// # }
/// ```
pub fn isolated<F: Future>(future: F) -> Isolated<F> {
    Isolated { future }
}

pin_project! {
    /// A future polled outside any retry scope; see [`isolated`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    #[derive(Debug)]
    pub struct Isolated<F> {
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Isolated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _left = leave();
        self.project().future.poll(cx)
    }
}

/// Makes no frame current until the guard drops, then restores the one before (also on panic).
#[inline]
fn leave() -> Left {
    Left {
        previous: CURRENT.with(|c| c.replace(ptr::null())),
    }
}

/// See [`leave`]. Never forgotten: its drop is what keeps the thread-local valid.
struct Left {
    previous: *const Frame,
}

impl Drop for Left {
    #[inline]
    fn drop(&mut self) {
        // `previous` was current when this guard was made, so its own guard is still alive
        // further up the stack (see `with_current`): restoring it keeps the invariant.
        CURRENT.with(|c| c.set(self.previous));
    }
}

/// `future` with no scope of its own, in the same type as the scoped ones.
#[cfg_attr(not(any(feature = "tower", feature = "tonic")), allow(dead_code))]
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
        let _entered = enter(frame);
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

#[cfg(test)]
mod tests {
    use super::*;

    static LABELS: [Label; 2] = Site::labels("outer", "");
    static OUTER: Site = Site::new("outer", "", &LABELS);

    fn current_trace_id_here() -> Option<u64> {
        with_current(|frame| frame.map(Frame::trace_id))
    }

    #[test]
    fn frames_nest_and_each_guard_restores_the_one_before_it() {
        assert!(!is_active());
        let outer = Frame::outermost(&OUTER, 1);
        {
            let _outer = enter(&outer);
            assert_eq!(current_trace_id_here(), Some(1));
            let inner = outer.single_inside(0);
            {
                let _inner = enter(&inner);
                assert!(with_current(|f| f.is_some_and(|f| f.single)));
                assert_eq!(
                    current_trace_id_here(),
                    Some(1),
                    "inherited from the outer frame"
                );
            }
            assert!(with_current(|f| f.is_some_and(|f| !f.single)));
        }
        assert!(!is_active());
    }

    #[test]
    fn a_panic_inside_a_frame_restores_the_frame_outside_it() {
        let outer = Frame::outermost(&OUTER, 7);
        let _outer = enter(&outer);
        let caught = std::panic::catch_unwind(|| {
            let inner = Frame::new(&OUTER, true, true, 9);
            let _inner = enter(&inner);
            panic!("inside the inner frame");
        });
        assert!(caught.is_err());
        assert_eq!(current_trace_id_here(), Some(7));
        assert!(with_current(|f| f.is_some_and(|f| !f.quiet)));
    }

    #[test]
    fn leaving_the_scope_hides_it_until_the_guard_drops() {
        let outer = Frame::outermost(&OUTER, 3);
        let _outer = enter(&outer);
        {
            let _left = leave();
            assert!(!is_active());
            let inner = Frame::outermost(&OUTER, 4);
            let _inner = enter(&inner);
            assert_eq!(current_trace_id_here(), Some(4));
        }
        assert_eq!(current_trace_id_here(), Some(3));
        assert_eq!(outer.trace_id(), 3, "an isolated call's id is its own");
    }

    #[test]
    fn a_trace_id_drawn_inside_is_adopted_by_an_outer_frame_without_one() {
        let outer = Frame::outermost(&OUTER, 0);
        let drawn = {
            let _outer = enter(&outer);
            let inner = outer.single_inside(0);
            let _inner = enter(&inner);
            current_trace_id()
        };
        assert_ne!(drawn, 0);
        assert_eq!(outer.trace_id(), drawn);

        let kept = Frame::outermost(&OUTER, 5);
        {
            let _kept = enter(&kept);
            let inner = Frame::new(&OUTER, true, false, 6);
            let _inner = enter(&inner);
        }
        assert_eq!(
            kept.trace_id(),
            5,
            "an outer frame's own id is never replaced"
        );
    }
}
