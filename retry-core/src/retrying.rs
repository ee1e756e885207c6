//! The future a retrying call returns.

use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::scope::{self, Frame};
use crate::site::{self, Site, Warning, first_time_at};

pin_project! {
    /// The future returned by a `#[retryable]` function and by [`Policy::retry`](crate::Policy::retry).
    ///
    /// It resolves to the function's own `Result<T, E>`: the first success, or the last error on
    /// give-up. Awaiting it works as for any future; being a named type lets the compiler see
    /// where one retrying call is awaited inside another.
    ///
    /// When it starts inside another retry in the same task (see [`scope`](crate::scope)), it
    /// makes a single attempt and says so: a `tracing` warning once per call site (then at
    /// DEBUG), and the `retry_core_nested_suppressed_total` metric every time.
    ///
    /// ```
    /// use retry_core::{retryable, Retrying};
    ///
    /// #[retryable(max = 2, base = "1ms")]
    /// async fn ping() -> std::io::Result<u8> {
    ///     Ok(1)
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let fut = ping();
    /// let _: &Retrying<_> = &fut;
    /// assert_eq!(fut.await.unwrap(), 1);
    /// # }
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Retrying<F> {
        // The retry loop. Left in place once it has finished (its own state says so, and the
        // stage guards against polling it again), and dropped with the call, as any future
        // inside another is.
        #[pin]
        inner: F,
        // The call's retry scope, made current while `inner` is polled. Before the first poll
        // its `outer` is this call's own site.
        frame: Frame,
        stage: Stage,
        // The `retry` span a subscriber wanted (boxed: a span takes 40 bytes). Declared after
        // `inner`: fields drop in order, so the span outlives the future it describes.
        span: Option<Box<tracing::Span>>,
    }
}

/// How far the call has got, with what that stage needs: the caller's location is only read
/// before the first poll, the layer only after it.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// Not polled yet. `single`: asked for one attempt with [`Retrying::single_attempt`].
    NotStarted {
        caller: &'static Location<'static>,
        single: bool,
    },
    /// The one layer that retries, nobody wanting its span: the only stage the poll handles
    /// inline. Its frame, made with the future, never changes (but for the trace id drawn in
    /// it).
    Outermost,
    /// The one layer that retries, with the span a subscriber wanted.
    Spanned,
    /// Started inside another retry (`site`): one attempt only. That retry's frame is current
    /// whenever this one is polled (same task); this call's frame is made from it at each poll.
    Nested { site: &'static Site },
    /// Asked for one attempt with [`Retrying::single_attempt`].
    Single { site: &'static Site },
    /// Finished: the loop has returned (its locals dropped with it), and the span has ended.
    Done,
}

impl<F> Retrying<F> {
    /// Wraps the retry loop of the function `site`, called from `caller`.
    ///
    /// Inlined, so the caller builds the (possibly large) inner future in place instead of
    /// moving it through this call; the span is made at the first poll, not here.
    #[inline]
    pub(crate) fn new(site: &'static Site, caller: &'static Location<'static>, inner: F) -> Self {
        Retrying {
            inner,
            frame: Frame::outermost(site, 0),
            stage: Stage::NotStarted {
                caller,
                single: false,
            },
            span: None,
        }
    }

    /// The retrying function: the frame's until the first poll, and of the outermost layer.
    fn site(&self) -> &'static Site {
        match self.stage {
            Stage::Nested { site } | Stage::Single { site } => site,
            Stage::NotStarted { .. } | Stage::Outermost | Stage::Spanned | Stage::Done => {
                self.frame.outer
            }
        }
    }

    /// Runs the retrying call exactly once, without retries: the explicit way to call a
    /// retryable function inside another retry's body.
    ///
    /// ```
    /// use retry_core::retryable;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// #[retryable(max = 4, base = "1ms")]
    /// async fn flaky() -> std::io::Result<()> {
    ///     CALLS.fetch_add(1, Ordering::SeqCst);
    ///     Err(std::io::ErrorKind::TimedOut.into())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// assert!(flaky().single_attempt().await.is_err());
    /// assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    /// # }
    /// ```
    pub fn single_attempt(mut self) -> SingleAttempt<F> {
        if let Stage::NotStarted { single, .. } = &mut self.stage {
            *single = true;
        }
        SingleAttempt { inner: self }
    }
}

pin_project! {
    /// A retrying call made to run exactly once; see [`Retrying::single_attempt`]. A distinct
    /// type, so awaiting it inside a retry body compiles.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    #[derive(Debug)]
    pub struct SingleAttempt<F> {
        #[pin]
        inner: Retrying<F>,
    }
}

impl<F: Future> Future for SingleAttempt<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<F: Future> Future for Retrying<F> {
    type Output = F::Output;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.as_mut().project();
        match *this.stage {
            // The one layer that retries, with no span: the only stage polled inline. No retry
            // is being polled around it, unless it was first polled elsewhere.
            Stage::Outermost if !scope::is_active() => {}
            // The common first poll: no single attempt was asked for, no retry is running
            // here, and nobody listens at debug level.
            Stage::NotStarted { single: false, .. }
                if !scope::is_active() && !tracing::level_enabled!(tracing::Level::DEBUG) =>
            {
                site::call_started(this.frame.outer);
                *this.stage = Stage::Outermost;
            }
            Stage::Done => panic!("`Retrying` polled after completion"),
            // Out of line: with no span and no flag to test on the way out, the common path
            // keeps its locals in registers.
            _ => return self.poll_prepared(cx),
        }
        let entered = scope::enter_alone(this.frame);
        let poll = this.inner.poll(cx);
        if poll.is_ready() {
            *this.stage = Stage::Done;
        }
        drop(entered);
        poll
    }
}

impl<F: Future> Retrying<F> {
    /// A poll of any stage but `Outermost` (and the first poll that does not lead there, and an
    /// `Outermost` call polled inside another retry): the first poll's decision (see
    /// [`start`]), a single attempt's frame and the span, around a poll of the common path
    /// with the stage `Outermost` and the retry around it, if any, left for its length. The
    /// inner future is polled in one place only, so the compiler can inline it there.
    #[inline(never)]
    fn poll_prepared(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.as_mut().project();
        prepare(this.stage, this.frame, this.span);
        let stage = std::mem::replace(this.stage, Stage::Outermost);
        // Out of the call for the length of the poll, which never reads it: should the poll
        // panic, the unwinding drops it here, and the call's drop finds `None`.
        let span = this.span.take();
        let entered = span.as_deref().map(tracing::Span::enter);
        let left = scope::leave();
        let poll = self.as_mut().poll(cx);
        left.rejoin(self.frame.trace_id());
        drop(entered);
        let this = self.project();
        match poll.is_ready() {
            // `Done`: the loop has returned, so its span ends now.
            true => drop(span),
            false => {
                *this.stage = stage;
                *this.span = span;
            }
        }
        poll
    }
}

/// Everything but the outermost layer with nobody listening: the first poll's decision (see
/// [`start`]), and for a single attempt, its frame made inside the one current now (the outer
/// retry's, when nested).
#[cold]
#[inline(never)]
fn prepare(stage: &mut Stage, frame: &mut Frame, span: &mut Option<Box<tracing::Span>>) {
    if let Stage::NotStarted { caller, single } = *stage {
        *stage = start(frame, span, caller, single);
    }
    let site = match *stage {
        Stage::Nested { site } | Stage::Single { site } => site,
        Stage::NotStarted { .. } | Stage::Outermost | Stage::Spanned | Stage::Done => return,
    };
    let trace_id = frame.trace_id();
    *frame = scope::with_current(|outer| match outer {
        Some(outer) => outer.single_inside(trace_id),
        None => Frame::new(site, true, false, trace_id),
    });
}

/// The first poll of a call that is not simply the outermost with nobody listening: starts the
/// `retry` span if a subscriber wants it (its trace id goes into `frame`), and decides the
/// layer. `frame` is the call's own, still made for its site.
fn start(
    frame: &mut Frame,
    span: &mut Option<Box<tracing::Span>>,
    caller: &'static Location<'static>,
    single: bool,
) -> Stage {
    let site = frame.outer;
    site::call_started(site);
    if tracing::level_enabled!(tracing::Level::DEBUG)
        && let Some((started, trace_id)) = start_span(site)
    {
        *frame = Frame::outermost(site, trace_id);
        *span = Some(Box::new(started));
    }
    // The nesting warning belongs to the new span.
    let entered = span.as_deref().map(tracing::Span::enter);
    let stage = match scope::with_current(|outer| outer.map(|f| (f.outer, f.quiet))) {
        _ if single => Stage::Single { site },
        Some((outer, quiet)) => {
            nested(site, caller, outer, quiet);
            Stage::Nested { site }
        }
        None => Stage::Outermost,
    };
    drop(entered);
    match stage {
        Stage::Outermost if span.is_some() => Stage::Spanned,
        stage => stage,
    }
}

/// The `retry` span of a call starting now, if a subscriber wants it, with the call's trace id
/// (drawn now: a nested retry shares its outer call's).
fn start_span(site: &'static Site) -> Option<(tracing::Span, u64)> {
    let (function, module) = (site.function(), site.module());
    let span = tracing::debug_span!(
        target: "retry_core",
        "retry",
        function,
        module,
        trace_id = tracing::field::Empty
    );
    if span.is_disabled() {
        return None;
    }
    let trace_id = scope::current_trace_id();
    span.record(
        "trace_id",
        tracing::field::display(format_args!("{:016x}", trace_id)),
    );
    Some((span, trace_id))
}

/// Says once, when a retry starts inside another, that it makes a single attempt.
fn nested(
    site: &'static Site,
    caller: &'static Location<'static>,
    outer: &'static Site,
    quiet: bool,
) {
    let function = site.function();
    let outer_function = outer.function();
    if quiet || !first_time_at(Warning::Nested, caller) {
        // Asked for by the caller (expected, not a mistake), or already said at this call site:
        // once per call site is news, once per call would flood the log during an outage.
        tracing::debug!(target: "retry_core",
            function,
            outer = outer_function,
            "single attempt: {} retries",
            outer_function,
        );
    } else {
        tracing::warn!(target: "retry_core",
            function,
            outer = outer_function,
            caller = %caller,
            "retry in only one layer: `{}` started inside the retry of `{}`, so it makes a single attempt",
            function,
            outer_function,
        );
    }
    site::nested_suppressed(site);
}

impl<F> std::fmt::Debug for Retrying<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrying")
            .field("function", &self.site().function())
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}
