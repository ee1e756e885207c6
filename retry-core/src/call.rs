//! Retrying a closure with a run-time [`Policy`], without the macro.

use std::future::{Future, IntoFuture};
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
    /// [`RetryCall::on_retry`] and [`RetryCall::name`] before awaiting it.
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
    pub fn retry<Op, Fut, T, E>(&self, op: Op) -> RetryCall<'_, Op, ByClassify, NoHook>
    where
        Op: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        RetryCall {
            policy: self,
            op,
            classify: ByClassify,
            on_retry: NoHook,
            name: DEFAULT_NAME,
            caller: Location::caller(),
        }
    }
}

/// A closure retry being set up; `.await` it to run it. Made by [`Policy::retry`].
#[must_use = "a retry does nothing until it is awaited"]
#[derive(Debug)]
pub struct RetryCall<'p, Op, C, H> {
    policy: &'p Policy,
    op: Op,
    classify: C,
    on_retry: H,
    name: &'static str,
    caller: &'static Location<'static>,
}

impl<'p, Op, C, H> RetryCall<'p, Op, C, H> {
    /// Classifies errors with `classify` instead of their [`Classify`](crate::Classify) impl.
    ///
    /// ```
    /// use retry_core::{Decision, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut calls = 0;
    /// let r: Result<(), u16> = Policy::new()
    ///     .retry(|| { calls += 1; async { Err(404) } })
    ///     .retry_if(|status: &u16| if *status >= 500 { Decision::Retry } else { Decision::Stop })
    ///     .await;
    /// assert_eq!((r, calls), (Err(404), 1));
    /// # }
    /// ```
    pub fn retry_if<E, C2>(self, classify: C2) -> RetryCall<'p, Op, C2, H>
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
    /// let _: io::Result<()> = Policy::new()
    ///     .retry(|| async { Err(io::ErrorKind::TimedOut.into()) })
    ///     .on_retry(|attempt, _e: &io::Error, _wait: Duration| seen.push(attempt))
    ///     .await;
    /// assert_eq!(seen, [1, 2]);
    /// # }
    /// ```
    pub fn on_retry<E, H2>(self, hook: H2) -> RetryCall<'p, Op, C, H2>
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

impl<'p, Op, Fut, T, E, C, H> RetryCall<'p, Op, C, H>
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

impl<'p, Op, Fut, T, E, C, H> IntoFuture for RetryCall<'p, Op, C, H>
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
