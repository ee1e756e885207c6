//! What can go wrong with an idempotent call, and with its store.

/// A store failed: unreachable, locked, corrupt, or the claim was fenced.
///
/// `Unavailable` says only that; why (the server, the file, the driver's error) is its
/// [`source`](std::error::Error::source). Print the whole chain with
/// [`error_chain`](crate::error_chain) (or anyhow's `{:#}`).
///
/// ```
/// use retry_core::idempotency::StoreError;
///
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
/// let error = StoreError::Unavailable(Box::new(refused));
/// assert_eq!(error.to_string(), "idempotency store unavailable");
/// assert_eq!(retry_core::error_chain(&error).to_string(), "idempotency store unavailable: refused");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or did not answer (the body does not run: fail closed).
    #[error("idempotency store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The claim's lease was taken over: this holder may no longer complete or release it.
    #[error("claim was taken over after its lease expired")]
    Fenced,
    /// A stored row cannot be read.
    #[error("idempotency store row is corrupt: {0}")]
    Corrupt(String),
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
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// Another call holds the key; try again after it finishes.
    #[error("a call with the same idempotency key is in progress")]
    InProgress,
    /// The key was used before with another payload.
    #[error("the idempotency key was used before with another payload")]
    KeyReused,
    /// A call with this key failed after it may have had its effect, and its failure was kept
    /// (`on_err = "keep"`, the default in non-transactional mode): the resend is answered with
    /// the first call's failure instead of running a second time. Holds that failure's text
    /// (empty when the store kept none). Whether the effect happened is for a person to find out
    /// (dead letter, support), never a silent second run.
    #[error("a call with the same idempotency key failed before{}", colon_then(.0))]
    PreviouslyFailed(String),
    /// The encoded key is longer than the store's limit.
    #[error("idempotency key is {len} bytes, more than the {max} allowed")]
    KeyTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The response is larger than the store's limit (the body ran; nothing was stored).
    #[error("response is {len} bytes, more than the {max} the store keeps")]
    ResponseTooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The response could not be serialised, or a stored one deserialised.
    #[error("idempotent response (de)serialisation failed: {0}")]
    Serde(String),
    /// The store failed; the body did not run. Shows as the store's error itself (its message
    /// and its source), not as a layer of its own.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `": text"`, or nothing for an empty text: a kept failure without words adds no colon.
fn colon_then(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
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

    /// The whole chain: a dead letter's reason names the server or file that failed.
    fn reason(&self) -> Option<String> {
        Some(crate::error_chain(self).to_string())
    }
}
