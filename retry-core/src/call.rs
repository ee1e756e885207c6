//! Retrying a closure with a run-time [`Policy`], without the macro.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::panic::Location;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::classify::{ByClassify, Classifier, Decision};
use crate::metrics::Site;
use crate::policy::Policy;
use crate::retrying::{Retrying, SingleAttempt};
use crate::state::{Next, NoHook, RetryHook, State};

/// What tracing and metrics call a closure retry that was not given a [`RetryCall::name`].
pub(crate) const DEFAULT_NAME: &str = "closure";

impl Policy {
    /// Retries the future `op` makes, classifying errors with [`Classify`](crate::Classify); `.await` the result.
    ///
    /// `op` is called once per attempt. Adjust the call with [`RetryCall::retry_if`],
    /// [`RetryCall::on_retry`] and [`RetryCall::name`] before awaiting it. The call knows the
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
            name: DEFAULT_NAME,
            caller: Location::caller(),
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
    pub fn on_retry<H2>(self, hook: H2) -> RetryCall<'p, Op, C, H2, T, E>
    where
        H2: FnMut(u32, &E, Duration),
    {
        RetryCall {
            policy: self.policy,
            op: self.op,
            classify: self.classify,
            on_retry: hook,
            name: self.name,
            caller: self.caller,
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
            ..
        } = self;
        Retrying::new(site, caller, async move {
            let mut state = State::new(policy);
            loop {
                state.start_attempt(site);
                let outcome = op().await;
                match state.after_attempt(site, outcome, &mut classify, &mut on_retry) {
                    Next::Return(result) => return result,
                    // `pause` arms no timer for a zero wait.
                    Next::Retry(wait) => crate::__private::pause(wait).await,
                }
            }
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
    pub fn single_attempt(self) -> SingleAttempt<RetryFuture<'p, Op, Fut, C, H>> {
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
    type IntoFuture = Retrying<RetryFuture<'p, Op, Fut, C, H>>;

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
                phase: Phase::Idle,
            },
        )
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<Fut> {
        Idle,
        Running { #[pin] attempt: Fut },
        // Boxed (in `Pause`): a timer is only needed after a failure.
        Waiting { #[pin] sleep: crate::__private::Pause },
        Done,
    }
}

pin_project! {
    /// The loop of a closure retry; see [`Policy::retry`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct RetryFuture<'p, Op, Fut, C, H> {
        state: State<'p>,
        site: &'static Site,
        op: Op,
        classify: C,
        on_retry: H,
        #[pin]
        phase: Phase<Fut>,
    }
}

impl<Op, Fut, T, E, C, H> Future for RetryFuture<'_, Op, Fut, C, H>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classifier<E>,
    H: RetryHook<E>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.phase.as_mut().project() {
                PhaseProj::Idle => {
                    this.state.start_attempt(this.site);
                    let attempt = (this.op)();
                    this.phase.set(Phase::Running { attempt });
                }
                PhaseProj::Running { attempt } => {
                    let outcome = ready!(attempt.poll(cx));
                    let next =
                        this.state
                            .after_attempt(this.site, outcome, this.classify, this.on_retry);
                    match next {
                        Next::Return(result) => {
                            this.phase.set(Phase::Done);
                            return Poll::Ready(result);
                        }
                        // A zero wait arms no timer.
                        Next::Retry(wait) if wait.is_zero() => this.phase.set(Phase::Idle),
                        Next::Retry(wait) => this.phase.set(Phase::Waiting {
                            sleep: crate::__private::pause(wait),
                        }),
                    }
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
