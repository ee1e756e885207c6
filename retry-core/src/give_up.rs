//! Why a retrying call stopped trying.

use std::fmt;
use std::time::Duration;

/// Why a retrying call stopped trying and returned its last error.
///
/// ```
/// use retry_core::GiveUp;
/// assert_eq!(GiveUp::Exhausted { attempts: 5 }.to_string(), "gave up after 5 attempts");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUp {
    /// The error was classified [`Decision::Stop`](crate::Decision::Stop).
    NotRetryable,
    /// Every attempt the policy allows failed.
    Exhausted {
        /// Attempts made.
        attempts: u32,
    },
    /// The server asked for a longer wait than `max_retry_after`.
    RetryAfterTooLong {
        /// What the server asked for.
        asked: Duration,
        /// The policy's `max_retry_after`.
        limit: Duration,
    },
    /// The shared [`RetryBudget`](crate::RetryBudget) had no retry left.
    BudgetExhausted,
    /// An outer retry is running in the same task (or `.single_attempt()` was asked for), so
    /// this one made a single attempt and leaves the retrying, the budget and the dead letter
    /// to the outer layer, whatever its error.
    SingleAttempt,
    /// The next wait would cross the policy's deadline.
    Deadline {
        /// The policy's deadline.
        deadline: Duration,
        /// Time already spent since the first attempt started.
        spent: Duration,
        /// The wait that did not fit.
        wait: Duration,
    },
}

impl GiveUp {
    /// A short stable name, used as the `reason` label of metrics.
    ///
    /// ```
    /// assert_eq!(retry_core::GiveUp::NotRetryable.label(), "not_retryable");
    /// ```
    pub const fn label(&self) -> &'static str {
        match self {
            GiveUp::NotRetryable => "not_retryable",
            GiveUp::Exhausted { .. } => "exhausted",
            GiveUp::SingleAttempt => "single_attempt",
            GiveUp::BudgetExhausted => "budget_exhausted",
            GiveUp::RetryAfterTooLong { .. } => "retry_after_too_long",
            GiveUp::Deadline { .. } => "deadline",
        }
    }
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUp::NotRetryable => f.write_str("not retryable"),
            GiveUp::Exhausted { attempts } => write!(f, "gave up after {attempts} attempts"),
            GiveUp::SingleAttempt => f.write_str("single attempt: the outer layer retries"),
            GiveUp::BudgetExhausted => f.write_str("retry budget exhausted"),
            GiveUp::RetryAfterTooLong { asked, limit } => write!(
                f,
                "Retry-After {} s exceeds max_retry_after {} s",
                asked.as_secs(),
                limit.as_secs()
            ),
            GiveUp::Deadline {
                deadline,
                spent,
                wait,
            } => write!(
                f,
                "a {wait:?} wait after {spent:?} would cross the {deadline:?} deadline"
            ),
        }
    }
}
