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
    /// The store does not offer what was asked of it: the default of an optional method of
    /// [`IdempotencyStore`](super::IdempotencyStore), such as the step journal, that the store
    /// did not implement. Names what is missing.
    ///
    /// ```
    /// use retry_core::idempotency::StoreError;
    ///
    /// let error = StoreError::Unsupported("a step journal".into());
    /// assert_eq!(error.to_string(), "the idempotency store does not keep a step journal");
    /// ```
    #[error("the idempotency store does not keep {0}")]
    Unsupported(String),
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
    /// A step of the body ([`step`](super::step)) cannot be run as it was asked: see
    /// [`StepError`]. Never a silent second run of the step.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The store failed; the body did not run. Shows as the store's error itself (its message
    /// and its source), not as a layer of its own.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a step ([`step`](super::step)) refused to run or to answer: each is a mistake in the
/// body or in what the journal holds, so a person looks, rather than the step running again.
///
/// ```
/// use retry_core::idempotency::{IdempotencyError, StepError};
///
/// let error = IdempotencyError::from(StepError::LabelReused("charge".into()));
/// assert_eq!(
///     error.to_string(),
///     "step `charge` ran twice in one run of the body; give each step its own label"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// `step` was called outside the body of an `#[idempotent]` function or an
    /// `IdempotencyLayer` handler: there is no claim to journal it under.
    #[error(
        "`step` called outside an idempotent call: there is no claim to journal it under; call it from the body of an `#[idempotent]` function or an `IdempotencyLayer` handler"
    )]
    OutsideClaim,
    /// The body called two steps with the same label in one run: the second would be answered
    /// with the first one's output on a resend, so it is refused now.
    #[error("step `{0}` ran twice in one run of the body; give each step its own label")]
    LabelReused(String),
    /// The journaled output of the step no longer deserialises into the step's type (the
    /// code changed between the runs): the step's effect happened, so it is not run again.
    #[error("the journaled output of step `{label}` does not deserialise: {error}")]
    Undecodable {
        /// The step's label.
        label: String,
        /// serde's error.
        error: String,
    },
    /// The output of the step cannot be serialised, so it cannot be journaled (its effect
    /// happened: the step answers this error, and a resend runs it again as in doubt).
    #[error("the output of step `{label}` does not serialise: {error}")]
    Unserializable {
        /// The step's label.
        label: String,
        /// serde's error.
        error: String,
    },
    /// The call's claim is held by its transaction (`#[idempotent(transaction = ..)]`, the
    /// transactional `IdempotencyLayer`): the whole body already commits or rolls back as one,
    /// so it has no steps to journal.
    #[error(
        "steps need a claim of its own: this call's body runs in one transaction, which already commits or rolls back as a whole"
    )]
    Transactional,
    /// The body ended while the step was being journaled (the holder stopped serving it).
    #[error("the call's claim was given up while step `{0}` was being journaled")]
    Gone(String),
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
