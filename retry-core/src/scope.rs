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
use std::task::{Context, Poll};

use ::metrics::Label;
use pin_project_lite::pin_project;

use crate::loom_sync::thread_local_cell;
use crate::site::Site;

/// A retry running on this thread's current poll.
///
/// Plain data, copied into the thread-local while its retry is polled and copied back when the
/// poll leaves it (with the trace id or attempt set meanwhile): a few words each way, and no
/// reference into another future's memory.
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
    trace_id: u64,
    /// The attempt the retrying layer is on (1 for the first; `0` before it, or unknown); a
    /// single-attempt frame inside another has the outer one's, and a server's frame for a
    /// caller that retries has the one its request announced. Read by the `Caller-Retries`
    /// header (`attempt=`, feature `http`) and `http.request.resend_count` (features
    /// `opentelemetry` and `reqwest`), and only written when those readers are built.
    attempt: u32,
    /// The attempts the retrying layer may make (its policy's `max`; `0`: unknown), kept and
    /// inherited as `attempt` is, for the header's `max=`.
    max: u32,
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
            trace_id,
            attempt: 0,
            max: 0,
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
            0 => self.trace_id,
            id => id,
        };
        Frame {
            attempt: self.attempt,
            max: self.max,
            ..Frame::new(self.outer, true, self.quiet, trace_id)
        }
    }

    /// The trace id, `0` if none has been drawn.
    #[inline]
    pub(crate) fn trace_id(&self) -> u64 {
        self.trace_id
    }

    /// The trace id, drawn now if the frame has none yet.
    fn trace_id_or_draw(&mut self) -> u64 {
        if self.trace_id == 0 {
            self.trace_id = new_trace_id();
        }
        self.trace_id
    }
}

/// The retry running here starts attempt `attempt` of at most `max`. A single attempt inside
/// another retry leaves its frame on the outer retry's attempt: that is the one being resent.
#[inline(always)]
pub(crate) fn note_attempt(attempt: u32, max: u32) {
    #[cfg(feature = "http")]
    CURRENT.with(|current| {
        if current.outer.get().is_some() && !current.single.get() {
            current.attempt.set(attempt);
            current.max.set(max);
        }
    });
    #[cfg(not(feature = "http"))]
    let _ = (attempt, max);
}

/// The attempt of the retry running here (1 for the first), `0` outside any retry.
#[cfg(all(feature = "opentelemetry", feature = "reqwest"))]
pub(crate) fn current_attempt() -> u32 {
    with_current(|frame| frame.map_or(0, |frame| frame.attempt))
}

/// The attempt of the retry running here and the attempts its layer may make, as the
/// `Caller-Retries` header announces them: `None` outside any retry, `(0, 0)` inside one whose
/// numbers are unknown (a `.single_attempt()`, a caller that announced none).
#[cfg(feature = "http")]
pub(crate) fn current_attempt_of() -> Option<(u32, u32)> {
    with_current(|frame| frame.map(|frame| (frame.attempt, frame.max)))
}

/// A fresh trace id for a logical call: never `0` (which means "none drawn yet").
///
/// Drawn from the thread's generator, and only when something asks for it (a dead letter, a
/// span a subscriber wants, an event): a call that succeeds unwatched draws none.
pub(crate) fn new_trace_id() -> u64 {
    crate::random::next_u64() | 1
}

/// The trace id of the call running here (drawn now if it has none yet, and kept in its frame),
/// or a fresh one outside any retry.
pub(crate) fn current_trace_id() -> u64 {
    update_current(|frame| frame.map_or_else(new_trace_id, Frame::trace_id_or_draw))
}

/// The frame of the retry being polled on this thread, one cell a field, so a poll reads and
/// writes only the fields it needs: entering a frame checks `outer` and writes the frame,
/// leaving it reads the trace id (and the attempt, where it is kept) back and clears `outer`.
/// The other fields mean nothing while `outer` is `None`.
struct Current {
    /// The retrying function of the frame: `None` outside any retry.
    outer: Cell<Option<&'static Site>>,
    single: Cell<bool>,
    quiet: Cell<bool>,
    trace_id: Cell<u64>,
    attempt: Cell<u32>,
    max: Cell<u32>,
}

impl Current {
    const fn new() -> Current {
        Current {
            outer: Cell::new(None),
            single: Cell::new(false),
            quiet: Cell::new(false),
            trace_id: Cell::new(0),
            attempt: Cell::new(0),
            max: Cell::new(0),
        }
    }

    /// The current frame, if any.
    #[inline]
    fn get(&self) -> Option<Frame> {
        let outer = self.outer.get()?;
        Some(Frame {
            outer,
            single: self.single.get(),
            quiet: self.quiet.get(),
            trace_id: self.trace_id.get(),
            attempt: self.attempt.get(),
            max: self.max.get(),
        })
    }

    /// Makes `frame` current; `None`: no frame.
    #[inline]
    fn set(&self, frame: Option<Frame>) {
        match frame {
            Some(frame) => self.set_frame(&frame),
            None => self.outer.set(None),
        }
    }

    /// Makes `frame` current.
    #[inline]
    fn set_frame(&self, frame: &Frame) {
        self.outer.set(Some(frame.outer));
        self.single.set(frame.single);
        self.quiet.set(frame.quiet);
        self.trace_id.set(frame.trace_id);
        self.attempt.set(frame.attempt);
        self.max.set(frame.max);
    }
}

thread_local_cell! {
    /// The frame of the retry being polled on this thread. Set by [`enter_alone`] and cleared
    /// when its guard drops, which reads what changed back into the call's frame; [`leave`]
    /// sets a frame aside around another entered alone, and puts it back.
    static CURRENT: Current = Current::new();
}

/// Runs `f` with the frame of the retry being polled on this thread, if any.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Frame>) -> R) -> R {
    f(CURRENT.with(Current::get).as_ref())
}

/// Runs `f` with the frame of the retry being polled on this thread, if any, keeping what `f`
/// changes in it.
fn update_current<R>(f: impl FnOnce(Option<&mut Frame>) -> R) -> R {
    CURRENT.with(|current| {
        let mut frame = current.get();
        let result = f(frame.as_mut());
        current.set(frame);
        result
    })
}

/// Whether the retry being polled here must make a single attempt (nested in another, or
/// `.single_attempt()`).
#[inline]
pub(crate) fn single_attempt_here() -> bool {
    CURRENT.with(|current| current.outer.get().is_some() && current.single.get())
}

/// Makes `frame` current on a thread where no frame is (the caller has checked
/// [`is_active`], or hidden the current one with [`leave`]) until the guard drops, which writes
/// back to `frame` the trace id drawn meanwhile (and the attempt, where it is kept) and leaves
/// no frame current. The poll of a call that retries: all it touches is the frame's fields.
#[inline]
pub(crate) fn enter_alone(frame: &mut Frame) -> Alone<'_> {
    CURRENT.with(|current| {
        debug_assert!(current.outer.get().is_none(), "entered over another frame");
        current.set_frame(frame);
    });
    Alone { frame }
}

/// See [`enter_alone`].
pub(crate) struct Alone<'a> {
    frame: &'a mut Frame,
}

impl Drop for Alone<'_> {
    /// Takes back what code inside set in the frame, and leaves no frame current.
    #[inline]
    fn drop(&mut self) {
        CURRENT.with(|current| {
            self.frame.trace_id = current.trace_id.get();
            self.frame.attempt = current.attempt.get();
            self.frame.max = current.max.get();
            current.outer.set(None);
        });
    }
}

/// See [`Left::rejoin`]: the frame current again takes `id` if it has none.
#[cold]
#[inline(never)]
fn adopt_trace_id(id: u64) {
    update_current(|previous| {
        if let Some(previous) = previous
            && id != 0
            && previous.trace_id == 0
        {
            previous.trace_id = id;
        }
    });
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
    CURRENT.with(|current| current.outer.get().is_some())
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
        frame: update_current(|frame| {
            frame.map(|f| {
                let trace_id = f.trace_id_or_draw();
                f.single_inside(trace_id)
            })
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
    caller_retries_at(future, 0, 0)
}

/// [`caller_retries`] for a caller that announced its attempt `attempt` of at most `max`
/// (`0`: not announced): requests sent inside carry the same numbers on, so the service at the
/// end of the chain sees which attempt of the one retrying layer each arrival is.
pub(crate) fn caller_retries_at<F: Future>(future: F, attempt: u32, max: u32) -> InScope<F> {
    static LABELS: [Label; 2] = Site::labels("the caller", "");
    static CALLER: Site = Site::new("the caller", "", &LABELS);
    let mut scoped = quietly_single(future, &CALLER);
    if let Some(frame) = scoped.frame.as_mut() {
        frame.attempt = attempt;
        frame.max = max;
    }
    scoped
}

/// `future` with every retry inside it making one attempt, quietly: asked for explicitly.
#[cfg(feature = "idempotency")]
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
pub(crate) fn leave() -> Left {
    Left {
        previous: CURRENT.with(|current| {
            let previous = current.get();
            current.set(None);
            previous
        }),
    }
}

/// See [`leave`].
pub(crate) struct Left {
    previous: Option<Frame>,
}

impl Left {
    /// Restores the frame left, which takes `trace_id`, drawn in a frame entered meanwhile, if it
    /// has none: every frame entered inside another is derived from it, so the id belongs to the
    /// same logical call. Outside any retry (the common case) there is none to restore.
    #[inline]
    pub(crate) fn rejoin(self, trace_id: u64) {
        let outer = self.previous.is_some();
        drop(self);
        if outer {
            adopt_trace_id(trace_id);
        }
    }
}

impl Drop for Left {
    #[inline]
    fn drop(&mut self) {
        CURRENT.with(|current| current.set(self.previous));
    }
}

/// `future` with no scope of its own, in the same type as the scoped ones.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
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
        let Some(frame) = this.frame.as_mut() else {
            return this.future.poll(cx);
        };
        let left = leave();
        let entered = enter_alone(frame);
        let poll = this.future.poll(cx);
        drop(entered);
        left.rejoin(frame.trace_id);
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

#[cfg(test)]
mod tests {
    use super::*;

    static LABELS: [Label; 2] = Site::labels("outer", "");
    static OUTER: Site = Site::new("outer", "", &LABELS);

    /// Makes `frame` current until the guard drops, then restores the previous one (also on
    /// panic), writing back to `frame` the trace id drawn meanwhile (and the attempt, where it is
    /// kept), and passing that trace id on to the previous frame.
    fn enter(frame: &mut Frame) -> Entered<'_> {
        let left = leave();
        Entered {
            alone: Some(enter_alone(frame)),
            left: Some(left),
        }
    }

    /// See [`enter`].
    struct Entered<'a> {
        alone: Option<Alone<'a>>,
        left: Option<Left>,
    }

    impl Drop for Entered<'_> {
        fn drop(&mut self) {
            let trace_id = CURRENT.with(|current| current.trace_id.get());
            drop(self.alone.take());
            if let Some(left) = self.left.take() {
                left.rejoin(trace_id);
            }
        }
    }

    fn current_trace_id_here() -> Option<u64> {
        with_current(|frame| frame.map(Frame::trace_id))
    }

    #[test]
    fn frames_nest_and_each_guard_restores_the_one_before_it() {
        assert!(!is_active());
        let mut outer = Frame::outermost(&OUTER, 1);
        {
            let _outer = enter(&mut outer);
            assert_eq!(current_trace_id_here(), Some(1));
            let mut inner = with_current(|f| f.unwrap().single_inside(0));
            {
                let _inner = enter(&mut inner);
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
        let mut outer = Frame::outermost(&OUTER, 7);
        let _outer = enter(&mut outer);
        let caught = std::panic::catch_unwind(|| {
            let mut inner = Frame::new(&OUTER, true, true, 9);
            let _inner = enter(&mut inner);
            panic!("inside the inner frame");
        });
        assert!(caught.is_err());
        assert_eq!(current_trace_id_here(), Some(7));
        assert!(with_current(|f| f.is_some_and(|f| !f.quiet)));
    }

    #[test]
    fn leaving_the_scope_hides_it_until_the_guard_drops() {
        let mut outer = Frame::outermost(&OUTER, 3);
        {
            let _outer = enter(&mut outer);
            {
                let _left = leave();
                assert!(!is_active());
                let mut inner = Frame::outermost(&OUTER, 4);
                let _inner = enter(&mut inner);
                assert_eq!(current_trace_id_here(), Some(4));
            }
            assert_eq!(current_trace_id_here(), Some(3));
        }
        assert_eq!(outer.trace_id(), 3, "an isolated call's id is its own");
    }

    #[test]
    fn a_trace_id_drawn_inside_is_adopted_by_an_outer_frame_without_one() {
        let mut outer = Frame::outermost(&OUTER, 0);
        let drawn = {
            let _outer = enter(&mut outer);
            let mut inner = with_current(|f| f.unwrap().single_inside(0));
            let _inner = enter(&mut inner);
            current_trace_id()
        };
        assert_ne!(drawn, 0);
        assert_eq!(outer.trace_id(), drawn);

        let mut kept = Frame::outermost(&OUTER, 5);
        {
            let _kept = enter(&mut kept);
            let mut inner = Frame::new(&OUTER, true, false, 6);
            let _inner = enter(&mut inner);
        }
        assert_eq!(
            kept.trace_id(),
            5,
            "an outer frame's own id is never replaced"
        );
    }
}
