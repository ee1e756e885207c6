//! The future a retrying call returns.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::metrics::{self, Site};
use crate::scope::{self, AttemptCell, Frame};

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
        #[pin]
        inner: F,
        site: &'static Site,
        stage: Stage,
        // The attempt this call is on, between polls (see `AttemptCell`).
        attempt: AttemptCell,
    }

    impl<F> PinnedDrop for Retrying<F> {
        fn drop(this: Pin<&mut Self>) {
            let placeholder = Stage::Running {
                layer: Layer::Outermost,
                trace_id: 0,
            };
            if let Stage::Traced { traced, .. } = std::mem::replace(this.project().stage, placeholder) {
                drop(ManuallyDrop::into_inner(traced));
            }
        }
    }
}

/// How far the call has got, with what that stage needs, in 16 bytes: the caller's location is
/// only read before the first poll, the trace id and the span only after it.
#[derive(Debug)]
enum Stage {
    /// Not polled yet. `single`: asked for one attempt with [`Retrying::single_attempt`].
    NotStarted {
        caller: &'static Location<'static>,
        single: bool,
    },
    /// Polled, nobody wanting its span. `trace_id` is `0` until drawn: only a failure, a dead
    /// letter or an enabled span needs one.
    Running { layer: Layer, trace_id: u64 },
    /// Polled, with the `retry` span a subscriber wanted (boxed: a span takes 40 bytes).
    /// Dropped by `Retrying`'s drop, so that `Stage` has no drop glue: replacing it, and
    /// dropping a call that has no span, costs nothing.
    Traced {
        layer: Layer,
        traced: ManuallyDrop<Box<Traced>>,
    },
}

/// The `retry` span of a call and the trace id it records, drawn when the span started.
#[derive(Debug)]
struct Traced {
    span: tracing::Span,
    trace_id: u64,
}

/// Where this retry stands among the retries of its task; decided on the first poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// The one layer that retries.
    Outermost,
    /// Started inside another retry: one attempt only. That retry's frame is current whenever
    /// this one is polled (same task), so it need not be kept here.
    Nested,
    /// Asked for one attempt with [`Retrying::single_attempt`].
    Single,
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
            site,
            stage: Stage::NotStarted {
                caller,
                single: false,
            },
            attempt: AttemptCell::new(0),
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

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let site = *this.site;
        if let Stage::NotStarted { caller, single } = *this.stage {
            // Three loads on the common path: no single attempt was asked for, nobody listens
            // at debug level, and no retry is running here.
            *this.stage = if !single
                && !tracing::level_enabled!(tracing::Level::DEBUG)
                && !scope::is_active()
            {
                Stage::Running {
                    layer: Layer::Outermost,
                    trace_id: 0,
                }
            } else {
                start(site, caller, single)
            };
        }
        let (layer, trace_id, span) = match &*this.stage {
            Stage::Running { layer, trace_id } => (*layer, *trace_id, None),
            Stage::Traced { layer, traced } => (*layer, traced.trace_id, Some(&traced.span)),
            // Left by the first poll, above.
            Stage::NotStarted { .. } => (Layer::Outermost, 0, None),
        };
        let span = span.map(tracing::Span::enter);
        let frame = match layer {
            // The one layer that retries needs nothing from outside.
            Layer::Outermost => {
                let frame = Frame::outermost(site, trace_id);
                frame.attempt.set(this.attempt.get());
                frame
            }
            // A single attempt, inside whatever frame is current now (the outer retry's, when
            // nested).
            Layer::Nested | Layer::Single => scope::with_current(|outer| match outer {
                Some(outer) => outer.single_inside(trace_id),
                None => Frame::new(site, true, false, trace_id),
            }),
        };
        let entered = scope::enter(&frame);
        let poll = this.inner.poll(cx);
        drop(entered);
        drop(span);
        // A trace id drawn inside (a failure, a dead letter) stays with the call.
        if let Stage::Running { trace_id, .. } = this.stage {
            *trace_id = frame.trace_id();
        }
        this.attempt.set(frame.attempt.get());
        poll
    }
}

/// The first poll of a call that is not simply the outermost with nobody listening: starts the
/// `retry` span if a subscriber wants it, and decides the layer.
#[cold]
#[inline(never)]
fn start(site: &'static Site, caller: &'static Location<'static>, single: bool) -> Stage {
    let traced = tracing::level_enabled!(tracing::Level::DEBUG)
        .then(|| start_span(site))
        .flatten();
    // The nesting warning belongs to the new span.
    let entered = traced.as_ref().map(|traced| traced.span.enter());
    let layer = match scope::with_current(|outer| outer.map(|f| (f.outer, f.quiet))) {
        _ if single => Layer::Single,
        Some((outer, quiet)) => {
            nested(site, caller, outer, quiet);
            Layer::Nested
        }
        None => Layer::Outermost,
    };
    drop(entered);
    match traced {
        Some(traced) => Stage::Traced {
            layer,
            traced: ManuallyDrop::new(Box::new(traced)),
        },
        None => Stage::Running { layer, trace_id: 0 },
    }
}

/// The `retry` span of a call starting now, if a subscriber wants it, with the call's trace id
/// (drawn now: a nested retry shares its outer call's).
fn start_span(site: &'static Site) -> Option<Traced> {
    let (function, module) = (site.function(), site.module());
    let span = tracing::debug_span!("retry", function, module, trace_id = tracing::field::Empty);
    if span.is_disabled() {
        return None;
    }
    let trace_id = scope::current_trace_id();
    span.record(
        "trace_id",
        tracing::field::display(format_args!("{:016x}", trace_id)),
    );
    Some(Traced { span, trace_id })
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
        tracing::debug!(
            function,
            outer = outer_function,
            "single attempt: {} retries",
            outer_function,
        );
    } else {
        tracing::warn!(
            function,
            outer = outer_function,
            caller = %caller,
            "retry in only one layer: `{}` started inside the retry of `{}`, so it makes a single attempt",
            function,
            outer_function,
        );
    }
    metrics::nested_suppressed(site);
}

/// What a call site is told once, at WARN: once per call site is news, once per call would flood
/// the log during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warning {
    /// A retry started inside another, so it made a single attempt.
    Nested,
    /// A policy's `attempt_timeout` that the call cannot apply (see `State::bound`).
    Untimed,
}

/// Whether `what` was not said at `caller` yet (and marks it said). Only the calls that have
/// something to say come here, so the lock is off the common path.
pub(crate) fn first_time_at(what: Warning, caller: &'static Location<'static>) -> bool {
    static SAID: std::sync::Mutex<Vec<(Warning, &'static str, u32, u32)>> =
        std::sync::Mutex::new(Vec::new());
    let key = (what, caller.file(), caller.line(), caller.column());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.contains(&key) {
        return false;
    }
    said.push(key);
    true
}

impl<F> std::fmt::Debug for Retrying<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrying")
            .field("function", &self.site.function())
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}
