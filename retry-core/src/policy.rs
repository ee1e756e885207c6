//! The knobs of a retry: how many attempts, how long to wait, when to give up.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::RetryBudget;

/// How random the wait before a retry is, after Marc Brooker's
/// ["Exponential Backoff And Jitter"](https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/).
///
/// `d` is the exponential backoff `min(cap, base · 2^(attempt-1))`.
///
/// ```
/// use retry_core::Jitter;
///
/// assert_eq!("equal".parse::<Jitter>(), Ok(Jitter::Equal));
/// assert_eq!(Jitter::default(), Jitter::Full);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Jitter {
    /// Exactly `d`. Clients that failed together retry together: use only in tests.
    None,
    /// Uniform in `[0, d]`. The default: it spreads a herd the widest and drains it first. (With
    /// an outage and an attempt limit, `Equal` can send slightly fewer requests in all; see the
    /// thundering-herd figures in docs/herd.md.)
    #[default]
    Full,
    /// Uniform in `[d/2, d]`: the common `random(d × 0.5, d)`, never much shorter than `d`.
    Equal,
    /// `min(cap, uniform in [base, 3 · previous wait])`: grows from the previous wait, not from
    /// the attempt number.
    Decorrelated,
}

impl Jitter {
    /// The names the `jitter = "..."` argument and [`FromStr`] accept.
    pub const NAMES: [&'static str; 4] = ["none", "full", "equal", "decorrelated"];

    /// The name of this jitter as written in `jitter = "..."`.
    ///
    /// ```
    /// assert_eq!(retry_core::Jitter::Decorrelated.name(), "decorrelated");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Jitter::None => "none",
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
        }
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A jitter name that is not one of [`Jitter::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownJitter(String);

impl fmt::Display for UnknownJitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown jitter `{}`; expected one of \"none\", \"full\", \"equal\", \"decorrelated\"",
            self.0
        )
    }
}

impl std::error::Error for UnknownJitter {}

impl FromStr for Jitter {
    type Err = UnknownJitter;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Jitter::None),
            "full" => Ok(Jitter::Full),
            "equal" => Ok(Jitter::Equal),
            "decorrelated" => Ok(Jitter::Decorrelated),
            other => Err(UnknownJitter(other.to_owned())),
        }
    }
}

/// Why a zero [`Policy::deadline`] is refused: the builder panics with it, configuration
/// reports it as an error.
pub(crate) const ZERO_DEADLINE: &str =
    "`deadline` must be longer than zero: no attempt could start";
/// Why a zero [`Policy::attempt_timeout`] is refused.
pub(crate) const ZERO_ATTEMPT_TIMEOUT: &str =
    "`attempt_timeout` must be longer than zero: every attempt would be cut off at once";

/// A retry policy: the same knobs as `#[retryable(...)]`, built at run time (e.g. from config).
///
/// Every builder method but [`budget`](Self::budget) is `const`, so a policy can live in a
/// `static`. `max_attempts(0)` is clamped to one (at least one attempt is always made); a zero
/// [`deadline`](Self::deadline) or [`attempt_timeout`](Self::attempt_timeout) is refused with a
/// panic, a compile-time error in a `static`. Read the knobs back with [`knobs`](Self::knobs).
///
/// With feature `serde` a policy is also read from configuration (and written back), under the
/// builder's names with durations as the attribute writes them, e.g. JSON
/// `{"max_attempts": 5, "base": "250ms", "cap": "30s", "jitter": "full", "deadline": "2m"}`;
/// mistakes there are errors, not panics (see its `Deserialize` impl).
///
/// ```
/// use retry_core::{Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::new()
///     .max_attempts(5)
///     .base(Duration::from_millis(100))
///     .cap(Duration::from_secs(10))
///     .jitter(Jitter::Equal)
///     .deadline(Duration::from_secs(60));
/// assert_eq!(policy.knobs().max_attempts, 5);
/// ```
#[derive(Debug, Clone)]
pub struct Policy {
    max_attempts: u32,
    base: Duration,
    cap: Duration,
    jitter: Jitter,
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
    max_retry_after: Duration,
    seed: Option<u64>,
    budget: Option<Arc<RetryBudget>>,
}

/// Lets `#[retryable(policy = expr)]` take a `Policy`, a `&Policy` or an `Arc<Policy>`.
impl AsRef<Policy> for Policy {
    fn as_ref(&self) -> &Policy {
        self
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new()
    }
}

impl Policy {
    /// Default total attempts.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
    /// Default first wait.
    pub const DEFAULT_BASE: Duration = Duration::from_secs(1);
    /// Default longest single wait of our own backoff.
    pub const DEFAULT_CAP: Duration = Duration::from_secs(30);
    /// Default longest `Retry-After` we accept.
    pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

    /// The defaults: 3 attempts, base 1 s, cap 30 s, full jitter, no deadline, `Retry-After` up
    /// to 5 min.
    ///
    /// ```
    /// let p = retry_core::Policy::new();
    /// assert_eq!(p.knobs().max_attempts, 3);
    /// ```
    pub const fn new() -> Self {
        Policy {
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            base: Self::DEFAULT_BASE,
            cap: Self::DEFAULT_CAP,
            jitter: Jitter::Full,
            deadline: None,
            attempt_timeout: None,
            max_retry_after: Self::DEFAULT_MAX_RETRY_AFTER,
            seed: None,
            budget: None,
        }
    }

    /// Total attempts, the first one included; `0` is taken as `1`.
    ///
    /// ```
    /// assert_eq!(retry_core::Policy::new().max_attempts(0).knobs().max_attempts, 1);
    /// ```
    pub const fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = if n == 0 { 1 } else { n };
        self
    }

    /// The wait after the first failed attempt, before jitter.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let p = retry_core::Policy::new().base(Duration::from_millis(50));
    /// assert_eq!(p.knobs().base, Duration::from_millis(50));
    /// ```
    pub const fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// The longest single wait of our own backoff (a server's `Retry-After` may ask for more).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let p = retry_core::Policy::new().cap(Duration::from_secs(5));
    /// assert_eq!(p.knobs().cap, Duration::from_secs(5));
    /// ```
    pub const fn cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// How the wait is randomised; see [`Jitter`].
    ///
    /// ```
    /// use retry_core::{Jitter, Policy};
    /// assert_eq!(Policy::new().jitter(Jitter::None).knobs().jitter, Jitter::None);
    /// ```
    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Total time from the start of the first attempt: no attempt starts at or after it, and a
    /// wait that would reach it means give up now. Time spent inside attempts counts; with
    /// [`attempt_timeout`](Self::attempt_timeout) each attempt is also cut off when the deadline
    /// comes, so the call never outlives it (without one, an attempt in flight is not cancelled).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let p = retry_core::Policy::new().deadline(Duration::from_secs(120));
    /// assert_eq!(p.knobs().deadline, Some(Duration::from_secs(120)));
    /// ```
    ///
    /// # Panics
    ///
    /// If `deadline` is zero: no attempt could ever start. Refused rather than clamped, so a
    /// configuration mistake is found where it is made; in a `static` (as `#[retryable]`
    /// emits for literal knobs) this is a compile-time error.
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        if deadline.is_zero() {
            panic!("{}", ZERO_DEADLINE);
        }
        self.deadline = Some(deadline);
        self
    }

    /// Bounds each attempt: an attempt still running after `timeout` (or when the
    /// [`deadline`](Self::deadline) comes, if that is sooner) is cut off and fails with
    /// `E::from(`[`Elapsed`](crate::Elapsed)`)`, which is then classified like any error.
    ///
    /// Only an error type with `From<Elapsed>` can report the timeout (`io::Error` and
    /// `retry_core::reqwest::HttpError` have it), so where that is not known the call still
    /// compiles and runs, without cutting attempts off, and says so at WARN once per call site:
    /// - [`Policy::retry`]: applied once the call is made [`.timed()`](crate::RetryCall::timed),
    ///   which asks for `E: From<Elapsed>`.
    /// - `#[retryable(policy = expr)]`: applied whenever the function's error type has
    ///   `From<Elapsed>`. An `attempt_timeout = ".."` written on the attribute beside `policy`
    ///   wins over the policy's own (and needs `From<Elapsed>`, as it does alone).
    ///
    /// ```
    /// use retry_core::{Classify, Decision, Policy};
    /// use std::{io, time::Duration};
    /// use tokio::time::{Instant, sleep};
    ///
    /// // Like `reqwest::Error`: no `From<Elapsed>`.
    /// #[derive(Debug)]
    /// struct Transport;
    /// impl Classify for Transport {
    ///     fn classify(&self) -> Decision { Decision::Retry }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let policy = Policy::new().max_attempts(2).attempt_timeout(Duration::from_secs(2));
    /// assert_eq!(policy.knobs().attempt_timeout, Some(Duration::from_secs(2)));
    ///
    /// // `io::Error` can report the timeout: each hanging attempt is cut off after 2 s.
    /// let cut: io::Result<()> = policy
    ///     .retry(|| std::future::pending())
    ///     .timed()
    ///     .await;
    /// assert_eq!(cut.unwrap_err().kind(), io::ErrorKind::TimedOut);
    ///
    /// // `Transport` cannot: the attempt runs to its end (and a WARN says what to write).
    /// let started = Instant::now();
    /// let slow = policy
    ///     .retry(|| async {
    ///         sleep(Duration::from_secs(5)).await;
    ///         Ok::<_, Transport>("done")
    ///     })
    ///     .await;
    /// assert_eq!(slow.unwrap(), "done");
    /// assert_eq!(started.elapsed(), Duration::from_secs(5));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `timeout` is zero: every attempt would be cut off before it starts.
    pub const fn attempt_timeout(mut self, timeout: Duration) -> Self {
        if timeout.is_zero() {
            panic!("{}", ZERO_ATTEMPT_TIMEOUT);
        }
        self.attempt_timeout = Some(timeout);
        self
    }

    /// The longest `Retry-After` we accept; a server asking for more makes us give up at once
    /// rather than come back sooner than asked.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let p = retry_core::Policy::new().max_retry_after(Duration::from_secs(60));
    /// assert_eq!(p.knobs().max_retry_after, Duration::from_secs(60));
    /// ```
    pub const fn max_retry_after(mut self, limit: Duration) -> Self {
        self.max_retry_after = limit;
        self
    }

    /// Makes the jitter reproducible. For tests only: clients sharing a seed wait in lockstep,
    /// which is the thundering herd jitter exists to prevent.
    ///
    /// ```
    /// let p = retry_core::Policy::new().seed(7);
    /// assert_eq!(p.knobs().seed, Some(7));
    /// ```
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Shares `budget` among every call made with this policy: a retry the budget cannot pay
    /// for is skipped and the last error returned.
    ///
    /// ```
    /// use retry_core::{Policy, RetryBudget};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 10, 0.1));
    /// let policy = Policy::new().budget(budget.clone());
    /// assert!(policy.knobs().budget.is_some());
    /// ```
    pub fn budget(mut self, budget: Arc<RetryBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Every knob, read back. The builder methods take the knobs' names (as the attribute's
    /// arguments do), so the getters live on this view rather than beside them (the API
    /// guidelines' "no `get_` prefix", without a second name for each knob).
    ///
    /// ```
    /// use retry_core::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::new().max_attempts(5).deadline(Duration::from_secs(60));
    /// let knobs = policy.knobs();
    /// assert_eq!(knobs.max_attempts, 5);
    /// assert_eq!(knobs.deadline, Some(Duration::from_secs(60)));
    /// assert_eq!(knobs.attempt_timeout, None);
    /// assert!(knobs.budget.is_none());
    /// ```
    #[inline]
    pub fn knobs(&self) -> Knobs<'_> {
        Knobs {
            max_attempts: self.max_attempts,
            base: self.base,
            cap: self.cap,
            jitter: self.jitter,
            deadline: self.deadline,
            attempt_timeout: self.attempt_timeout,
            max_retry_after: self.max_retry_after,
            seed: self.seed,
            budget: self.budget.as_deref(),
        }
    }
}

/// The knobs of a [`Policy`], as [`Policy::knobs`] reads them back.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Knobs<'p> {
    /// Total attempts, the first one included.
    pub max_attempts: u32,
    /// First wait, before jitter.
    pub base: Duration,
    /// Longest single wait of our own backoff.
    pub cap: Duration,
    /// How waits are randomised.
    pub jitter: Jitter,
    /// Total time from the start of the first attempt, if bounded.
    pub deadline: Option<Duration>,
    /// The bound on each attempt, if any.
    pub attempt_timeout: Option<Duration>,
    /// Longest accepted `Retry-After`.
    pub max_retry_after: Duration,
    /// The test seed, if any.
    pub seed: Option<u64>,
    /// The shared retry budget, if any.
    pub budget: Option<&'p RetryBudget>,
}
