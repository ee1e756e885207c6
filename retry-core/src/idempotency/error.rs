//! What can go wrong with an idempotent call, and with its store.

use std::fmt;

/// A store failed: unreachable, locked, corrupt, or the claim was fenced.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or did not answer (the body does not run: fail closed).
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
    /// The claim's lease was taken over: this holder may no longer complete or release it.
    Fenced,
    /// A stored row cannot be read.
    Corrupt(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(e) => write!(f, "idempotency store unavailable: {e}"),
            StoreError::Fenced => f.write_str("claim was taken over after its lease expired"),
            StoreError::Corrupt(what) => write!(f, "idempotency store row is corrupt: {what}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Unavailable(e) => Some(&**e),
            _ => None,
        }
    }
}

/// Why an idempotent call did not run its body (or could not finish it). `E: From<Self>` lets
/// an `#[idempotent]` function return it as its own error.
///
/// ```
/// use retry_core::idempotency::IdempotencyError;
/// assert_eq!(
///     IdempotencyError::InProgress.to_string(),
///     "a call with the same idempotency key is in progress"
/// );
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// Another call holds the key; try again after it finishes.
    InProgress,
    /// The key was used before with another payload.
    KeyReused,
    /// A call with this key failed after it may have had its effect, and its failure was kept
    /// (`on_err = "keep"`, the default in non-transactional mode): the resend is answered with
    /// the first call's failure instead of running a second time. Holds that failure's text
    /// (empty when the store kept none). Whether the effect happened is for a person to find out
    /// (dead letter, support), never a silent second run.
    PreviouslyFailed(String),
    /// The encoded key is longer than the store's limit.
    KeyTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The response is larger than the store's limit (the body ran; nothing was stored).
    ResponseTooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The response could not be serialised, or a stored one deserialised.
    Serde(String),
    /// The store failed; the body did not run.
    Store(StoreError),
}

impl fmt::Display for IdempotencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdempotencyError::InProgress => {
                f.write_str("a call with the same idempotency key is in progress")
            }
            IdempotencyError::KeyReused => {
                f.write_str("the idempotency key was used before with another payload")
            }
            IdempotencyError::PreviouslyFailed(first) if first.is_empty() => {
                f.write_str("a call with the same idempotency key failed before")
            }
            IdempotencyError::PreviouslyFailed(first) => {
                write!(
                    f,
                    "a call with the same idempotency key failed before: {first}"
                )
            }
            IdempotencyError::KeyTooLong { len, max } => write!(
                f,
                "idempotency key is {len} bytes, more than the {max} allowed"
            ),
            IdempotencyError::ResponseTooLarge { len, max } => write!(
                f,
                "response is {len} bytes, more than the {max} the store keeps"
            ),
            IdempotencyError::Serde(e) => {
                write!(f, "idempotent response (de)serialisation failed: {e}")
            }
            IdempotencyError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for IdempotencyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IdempotencyError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for IdempotencyError {
    fn from(e: StoreError) -> Self {
        IdempotencyError::Store(e)
    }
}

/// A duplicate in progress may be retried later; everything else will answer the same.
impl crate::Classify for IdempotencyError {
    fn classify(&self) -> crate::Decision {
        match self {
            IdempotencyError::InProgress | IdempotencyError::Store(StoreError::Unavailable(_)) => {
                crate::Decision::Retry
            }
            _ => crate::Decision::Stop,
        }
    }

    fn reason(&self) -> Option<String> {
        Some(self.to_string())
    }
}
