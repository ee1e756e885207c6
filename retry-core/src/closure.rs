//! Retrying a closure with a run-time [`Policy`], without the macro.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::panic::Location;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::attempt_timeout::{Bounded, OnTimeout};
use crate::classify::{ByClassify, Classifier, Decision, Elapsed};
use crate::decide::{Next, State};
use crate::hook::{Hook, NoHook, RetryContext, RetryHook, ThreeArguments, WithContext};
use crate::policy::Policy;
use crate::retrying::{Retrying, SingleAttempt};
use crate::site::{CLOSURE_NAME, Site};

/// What a closure retry that cannot report its policy's `attempt_timeout` is told to write.
const CLOSURE_FIX: &str = "call `.timed()` (needs `E: From<Elapsed>`)";

impl Policy {
    /// Retries the future `op` makes, classifying errors with [`Classify`](crate::Classify); `.await` the result.
    ///
    /// `op` is called once per attempt. Adjust the call with [`RetryCall::retry_if`],
    /// [`RetryCall::on_retry`], [`RetryCall::name`] and [`RetryCall::timed`] (which applies the
    /// policy's [`attempt_timeout`](Policy::attempt_timeout)) before awaiting it. The call knows the
    /// attempt's `Result<T, E>` from `op`, so the closures given to those need no annotations.
    ///
    /// Two kinds of `op`:
    /// - a closure returning a future, `|| async { .. }` (or a function): `.await` the call.
    ///   Each attempt's future owns or borrows what the closure borrowed, not the closure itself.
    /// - an async closure, `async || { .. }`, whose attempts borrow the closure's own state
    ///   (`AsyncFnMut`): `.run().await` it ([`RetryCall::run`]). `.await` cannot take it: the
    ///   future of such an attempt has no name on stable Rust, and awaiting needs one.
    ///
    /// ```
    /// use retry_core::{Jitter, Policy};
    /// use std::{io, time::Duration};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let policy = Policy::new().max_attempts(3).base(Duration::from_millis(10));
    /// let mut calls = 0;
    /// let result: io::Result<&str> = policy
    ///     .retry(|| {
    ///         calls += 1;
    ///         let n = calls;
    ///         async move {
    ///             if n < 3 { Err(io::ErrorKind::ConnectionReset.into()) } else { Ok("paid") }
    ///         }
    ///     })
    ///     .await;
    /// assert_eq!(result.unwrap(), "paid");
    /// assert_eq!(calls, 3);
    /// # }
    /// ```
    #[track_caller]
    pub fn retry<Op, T, E>(&self, op: Op) -> RetryCall<'_, Op, ByClassify, NoHook, T, E>
    where
        Op: AsyncFnMut() -> Result<T, E>,
    {
        RetryCall {
            policy: self,
            op,
            classify: ByClassify,
            on_retry: NoHook,
            name: CLOSURE_NAME,
            caller: Location::caller(),
            on_timeout: OnTimeout::RunOn { fix: CLOSURE_FIX },
            output: PhantomData,
        }
    }
}

/// A closure retry being set up; `.await` it (or [`run`](Self::run) it) to run it. Made by
/// [`Policy::retry`]. `T` and `E` are the attempt's `Result<T, E>`, carried so that the
/// closures of [`retry_if`](Self::retry_if) and [`on_retry`](Self::on_retry) get `&E` without
/// annotations.
#[must_use = "a retry does nothing until it is awaited"]
pub struct RetryCall<'p, Op, C, H, T, E> {
    policy: &'p Policy,
    op: Op,
    classify: C,
    on_retry: H,
    name: &'static str,
    caller: &'static Location<'static>,
    on_timeout: OnTimeout<E>,
    /// `fn() -> ..`: the call neither owns a `T` nor an `E` (no drop check, no auto-trait
    /// effect beyond what the output already has).
    output: PhantomData<fn() -> Result<T, E>>,
}

impl<Op, C, H, T, E> std::fmt::Debug for RetryCall<'_, Op, C, H, T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryCall")
            .field("policy", self.policy)
            .field("name", &self.name)
            .field("caller", self.caller)
            .field("on_timeout", &self.on_timeout)
            .finish_non_exhaustive()
    }
}

impl<'p, Op, C, H, T, E> RetryCall<'p, Op, C, H, T, E> {
    /// Classifies errors with `classify` instead of their [`Classify`](crate::Classify) impl.
    /// The closure's argument is the attempt's `&E`, known from the retried closure.
    ///
    /// ```
    /// use retry_core::{Decision, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut calls = 0;
    /// let r = Policy::new()
    ///     .retry(|| { calls += 1; async { Err::<(), u16>(404) } })
    ///     .retry_if(|status| if *status >= 500 { Decision::Retry } else { Decision::Stop })
    ///     .await;
    /// assert_eq!((r, calls), (Err(404), 1));
    /// # }
    /// ```
    pub fn retry_if<C2>(self, classify: C2) -> RetryCall<'p, Op, C2, H, T, E>
    where
        C2: FnMut(&E) -> Decision,
    {
        RetryCall {
            policy: self.policy,
            op: self.op,
            classify,
            on_retry: self.on_retry,
            name: self.name,
            caller: self.caller,
            on_timeout: self.on_timeout,
            output: PhantomData,
        }
    }

    /// Calls `hook(attempt, &error, wait)` before each wait; `attempt` is the one that failed.
    ///
    /// ```
    /// use retry_core::Policy;
    /// use std::{io, time::Duration};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut seen = Vec::new();
    /// let _ = Policy::new()
    ///     .retry(|| async { io::Result::<()>::Err(io::ErrorKind::TimedOut.into()) })
    ///     .on_retry(|attempt, e, wait| seen.push((attempt, e.kind(), wait)))
    ///     .await;
    /// assert_eq!(seen.len(), 2);
    /// assert_eq!(seen[0].1, io::ErrorKind::TimedOut);
    /// # }
    /// ```
    pub fn on_retry<H2>(self, hook: H2) -> RetryCall<'p, Op, C, Hook<H2, ThreeArguments>, T, E>
    where
        H2: FnMut(u32, &E, Duration),
    {
        RetryCall {
            policy: self.policy,
            op: self.op,
            classify: self.classify,
            on_retry: Hook::new(hook),
            name: self.name,
            caller: self.caller,
            on_timeout: self.on_timeout,
            output: PhantomData,
        }
    }

    /// Calls `hook` with the failed attempt's [`RetryContext`] before each wait: the call's
    /// name, module and trace id besides the attempt, error and wait, so the log lines of many
    /// concurrent calls can be told apart. Replaces [`on_retry`](Self::on_retry).
    ///
    /// ```
    /// use retry_core::Policy;
    /// use std::io;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut seen = Vec::new();
    /// let _ = Policy::new()
    ///     .retry(|| async { io::Result::<()>::Err(io::ErrorKind::TimedOut.into()) })
    ///     .name("fetch_quote")
    ///     .on_retry_context(|ctx| seen.push((ctx.function(), ctx.attempt(), ctx.trace_id())))
    ///     .await;
    /// assert_eq!(seen.len(), 2);
    /// assert_eq!((seen[0].0, seen[0].1), ("fetch_quote", 1));
    /// assert_eq!(seen[0].2, seen[1].2, "one logical call, one trace id");
    /// # }
    /// ```
    pub fn on_retry_context<H2>(self, hook: H2) -> RetryCall<'p, Op, C, Hook<H2, WithContext>, T, E>
    where
        H2: FnMut(&RetryContext<'_, E>),
    {
        RetryCall {
            policy: self.policy,
            op: self.op,
            classify: self.classify,
            on_retry: Hook::new(hook),
            name: self.name,
            caller: self.caller,
            on_timeout: self.on_timeout,
            output: PhantomData,
        }
    }

    /// Names the operation in tracing events (default `"closure"`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = retry_core::Policy::new();
    /// let ok = policy
    ///     .retry(|| async { std::io::Result::Ok(()) })
    ///     .name("fetch_quote")
    ///     .await;
    /// assert!(ok.is_ok());
    /// # }
    /// ```
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }
}

impl<Op, C, H, T, E> RetryCall<'_, Op, C, H, T, E> {
    /// Applies the policy's [`attempt_timeout`](Policy::attempt_timeout): an attempt still
    /// running after it, or when the [`deadline`](Policy::deadline) comes if that is sooner,
    /// is cut off and fails with `E::from(`[`Elapsed`]`)`, classified like any other error (so
    /// an attempt cut off after sending a POST without `Idempotency-Key` is not sent again:
    /// see [`Elapsed::unsafe_request`]).
    ///
    /// Asked for, not implied, because only an `E` made from `Elapsed` can report the
    /// timeout: `io::Error`, `retry_core::reqwest::HttpError`, or an error of your own with a
    /// `From<Elapsed>` impl. A call that is not `.timed()` (say, one returning
    /// `reqwest::Error`) still compiles and runs, but has no error to cut an attempt off with:
    /// its policy's `attempt_timeout` is not applied, and it says so at WARN, once per call
    /// site. With no `attempt_timeout` on the policy, `.timed()` changes nothing.
    ///
    /// ```
    /// use retry_core::Policy;
    /// use std::{io, time::Duration};
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let policy = Policy::new()
    ///     .max_attempts(3)
    ///     .base(Duration::from_millis(100))
    ///     .jitter(retry_core::Jitter::None)
    ///     .attempt_timeout(Duration::from_secs(2));
    /// let started = Instant::now();
    /// let mut calls = 0;
    /// let result: io::Result<&str> = policy
    ///     .retry(|| {
    ///         calls += 1;
    ///         let hangs = calls == 1;
    ///         async move {
    ///             if hangs {
    ///                 std::future::pending::<()>().await;
    ///             }
    ///             Ok("quote")
    ///         }
    ///     })
    ///     .timed()
    ///     .await;
    /// assert_eq!(result.unwrap(), "quote");
    /// assert_eq!(calls, 2);
    /// // The first attempt was cut off after 2 s, the second started 100 ms later.
    /// assert_eq!(started.elapsed(), Duration::from_millis(2100));
    /// # }
    /// ```
    pub fn timed(mut self) -> Self
    where
        E: From<Elapsed>,
    {
        self.on_timeout = OnTimeout::Fail(E::from);
        self
    }
}

impl<'p, Op, T, E, C, H> RetryCall<'p, Op, C, H, T, E>
where
    Op: AsyncFnMut() -> Result<T, E>,
    C: Classifier<E>,
    H: RetryHook<E>,
{
    /// Runs the retry for any `op`, including an async closure whose attempts borrow the
    /// closure's own state, which `.await` cannot take (see [`Policy::retry`]). The loop is
    /// the same: every decision is the state machine's. The future is `Send` when `op`'s
    /// attempts are.
    ///
    /// ```
    /// use retry_core::{Decision, Policy};
    /// use std::time::Duration;
    ///
    /// async fn fetch(url: &str) -> Result<usize, u16> {
    ///     if url.ends_with("/3") { Ok(url.len()) } else { Err(503) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut url = String::from("https://example.invalid/quote/");
    /// let mut attempt = 0;
    /// let len = Policy::new()
    ///     .max_attempts(3)
    ///     .base(Duration::from_millis(10))
    ///     // Each attempt borrows `url`, which the closure owns and changes.
    ///     .retry(async move || {
    ///         attempt += 1;
    ///         url.truncate(url.rfind('/').unwrap_or(0) + 1);
    ///         url.push_str(&attempt.to_string());
    ///         fetch(&url).await
    ///     })
    ///     .retry_if(|status| if *status >= 500 { Decision::Retry } else { Decision::Stop })
    ///     .run()
    ///     .await;
    /// assert_eq!(len, Ok("https://example.invalid/quote/3".len()));
    /// # }
    /// ```
    pub fn run(self) -> Retrying<impl Future<Output = Result<T, E>>> {
        let site = Site::named(self.name);
        let RetryCall {
            policy,
            mut op,
            mut classify,
            mut on_retry,
            caller,
            on_timeout,
            ..
        } = self;
        Retrying::new(site, caller, async move {
            let mut state = State::new(policy);
            loop {
                state.start_attempt(site);
                let outcome = state.bound(site, caller, on_timeout, op()).await;
                match state.after_attempt(site, outcome, &mut classify, &mut on_retry) {
                    Next::Return(result) => return result,
                    // `pause` arms no timer for a zero wait.
                    Next::Retry(wait) => crate::pause::pause(wait).await,
                }
            }
        })
    }
}

#[cfg(feature = "dlq")]
impl<'p, Op, Fut, T, E, C, H> RetryCall<'p, Op, C, H, T, E>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classifier<E>,
    H: RetryHook<E>,
    E: From<crate::dlq::DlqFailed>,
{
    /// [`run`](Self::run), and on give-up (attempts spent, the deadline, or a `Stop`) parks a
    /// [`DeadLetter`](crate::dlq::DeadLetter) in `sink` before the error returns, as
    /// `#[retryable(dlq(sink, id, original))]` does: the same letter (reason, attempts, first
    /// and last failure, class, trace id), assembled by the same code. `original` is called
    /// only when the call gives up. `op` is a closure returning a future (`|| async { .. }`), as
    /// for `.await`: the future is then `Send` whenever the attempts' futures are.
    ///
    /// The caller gets its own last error when the letter was parked, and
    /// `E::from(`[`DlqFailed`](crate::dlq::DlqFailed)`)` when it was not (the sink failed, or the
    /// call ran as a single attempt inside another retry, which owns the give-up): so a queue
    /// consumer acknowledges a message only once its letter is parked.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterStore, DlqFailed, FailureClass, MemoryDeadLetters};
    /// use retry_core::{Classify, Decision, Policy};
    /// use std::time::Duration;
    ///
    /// #[derive(Debug)]
    /// enum Failed { Unavailable, NotParked(DlqFailed) }
    /// impl Classify for Failed {
    ///     fn classify(&self) -> Decision {
    ///         match self { Failed::Unavailable => Decision::Retry, Failed::NotParked(_) => Decision::Stop }
    ///     }
    ///     fn reason(&self) -> Option<String> { Some("upstream 503".into()) }
    /// }
    /// impl From<DlqFailed> for Failed {
    ///     fn from(e: DlqFailed) -> Self { Failed::NotParked(e) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let letters = MemoryDeadLetters::new();
    /// let policy = Policy::new().max_attempts(3).base(Duration::from_millis(10));
    /// let result: Result<(), Failed> = policy
    ///     .retry(|| async { Err(Failed::Unavailable) })
    ///     .name("deposit")
    ///     .run_with_dlq(&letters, "M-7", || serde_json::json!({"amount": 10}))
    ///     .await;
    /// assert!(matches!(result, Err(Failed::Unavailable)), "parked: the call's own error");
    /// let letter = letters.get("M-7").await.unwrap().unwrap();
    /// assert_eq!((letter.attempts, letter.class), (3, FailureClass::System));
    /// assert_eq!(letter.original, serde_json::json!({"amount": 10}));
    /// assert!(letter.reason.ends_with("upstream 503"), "{}", letter.reason);
    /// # }
    /// ```
    pub fn run_with_dlq<S, I>(
        self,
        sink: &S,
        id: I,
        original: impl FnOnce() -> serde_json::Value,
    ) -> Retrying<impl Future<Output = Result<T, E>>>
    where
        S: crate::dlq::DeadLetterSink,
        I: std::fmt::Display,
    {
        use crate::dlq::parking::{ParkClasses, letter_input, letter_on_give_up, park_on_give_up};

        let site = Site::named(self.name);
        let RetryCall {
            policy,
            mut op,
            mut classify,
            mut on_retry,
            caller,
            on_timeout,
            ..
        } = self;
        Retrying::new(site, caller, async move {
            let mut state = State::new(policy).recording_failures();
            let result = loop {
                state.start_attempt(site);
                let outcome = state.bound(site, caller, on_timeout, op()).await;
                match state.after_attempt(site, outcome, &mut classify, &mut on_retry) {
                    Next::Return(result) => break result,
                    Next::Retry(wait) => crate::pause::pause(wait).await,
                }
            };
            let input = letter_on_give_up(&state, &result, || {
                letter_input(&id, &original(), None, None)
            });
            park_on_give_up(site, &state, result, sink, input, ParkClasses::All, E::from).await
        })
    }
}

impl<'p, Op, Fut, T, E, C, H> RetryCall<'p, Op, C, H, T, E>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classifier<E>,
    H: RetryHook<E>,
{
    /// Makes exactly one attempt, without retries: the explicit way to await a closure retry
    /// inside another retry's body, as [`Retrying::single_attempt`] is for a retrying function.
    ///
    /// ```
    /// use retry_core::{Policy, retryable};
    /// use std::io;
    ///
    /// #[retryable(max = 3, base = "1ms")]
    /// async fn outer(calls: &std::cell::Cell<u32>) -> io::Result<()> {
    ///     Policy::new()
    ///         .retry(|| {
    ///             calls.set(calls.get() + 1);
    ///             async { Err(io::ErrorKind::ConnectionReset.into()) }
    ///         })
    ///         .single_attempt()
    ///         .await
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let calls = std::cell::Cell::new(0);
    /// assert!(outer(&calls).await.is_err());
    /// assert_eq!(calls.get(), 3, "one attempt per attempt of `outer`");
    /// # }
    /// ```
    pub fn single_attempt(self) -> SingleAttempt<RetryFuture<'p, Op, Fut, C, H, E>> {
        self.into_future().single_attempt()
    }
}

impl<'p, Op, Fut, T, E, C, H> IntoFuture for RetryCall<'p, Op, C, H, T, E>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classifier<E>,
    H: RetryHook<E>,
{
    type Output = Result<T, E>;
    type IntoFuture = Retrying<RetryFuture<'p, Op, Fut, C, H, E>>;

    fn into_future(self) -> Self::IntoFuture {
        let site = Site::named(self.name);
        Retrying::new(
            site,
            self.caller,
            RetryFuture {
                state: State::new(self.policy),
                site,
                op: self.op,
                classify: self.classify,
                on_retry: self.on_retry,
                caller: self.caller,
                on_timeout: self.on_timeout,
                phase: Phase::Idle,
            },
        )
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<Fut, E> {
        Idle,
        Running { #[pin] attempt: Bounded<Fut, E> },
        // Boxed (in `Pause`): a timer is only needed after a failure.
        Waiting { #[pin] sleep: crate::pause::Pause },
        Done,
    }
}

pin_project! {
    /// The loop of a closure retry; see [`Policy::retry`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct RetryFuture<'p, Op, Fut, C, H, E> {
        state: State<'p>,
        site: &'static Site,
        op: Op,
        classify: C,
        on_retry: H,
        caller: &'static Location<'static>,
        on_timeout: OnTimeout<E>,
        #[pin]
        phase: Phase<Fut, E>,
    }
}

impl<Op, Fut, T, E, C, H> Future for RetryFuture<'_, Op, Fut, C, H, E>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classifier<E>,
    H: RetryHook<E>,
{
    type Output = Result<T, E>;

    // Inlined into `Retrying`'s poll, its only caller: one frame per poll, not two.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.phase.as_mut().project() {
                // First: where every call finishes, and the only phase of a first attempt that
                // is still running.
                PhaseProj::Running { attempt } => {
                    let result = match ready!(attempt.poll(cx)) {
                        // A success is returned as it is: nothing to decide.
                        Ok(value) => Ok(value),
                        Err(error) => match this.state.after_attempt(
                            this.site,
                            Err(error),
                            this.classify,
                            this.on_retry,
                        ) {
                            Next::Return(result) => result,
                            // A zero wait arms no timer.
                            Next::Retry(wait) if wait.is_zero() => {
                                this.phase.set(Phase::Idle);
                                continue;
                            }
                            Next::Retry(wait) => {
                                this.phase.set(Phase::Waiting {
                                    sleep: crate::pause::pause(wait),
                                });
                                continue;
                            }
                        },
                    };
                    this.phase.set(Phase::Done);
                    return Poll::Ready(result);
                }
                PhaseProj::Idle => {
                    this.state.start_attempt(this.site);
                    let attempt =
                        this.state
                            .bound(this.site, this.caller, *this.on_timeout, (this.op)());
                    this.phase.set(Phase::Running { attempt });
                }
                PhaseProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.phase.set(Phase::Idle);
                }
                PhaseProj::Done => panic!("`RetryFuture` polled after completion"),
            }
        }
    }
}
