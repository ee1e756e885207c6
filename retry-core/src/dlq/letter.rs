//! The dead letter itself.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a call gave up, in the two piles a person sorts dead letters into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureClass {
    /// Transient errors until attempts, deadline or budget ran out: redrive once the dependency
    /// has recovered.
    System,
    /// An error that must not be retried (`Stop`): the message itself needs a look.
    Data,
}

impl FailureClass {
    /// `"system"` or `"data"`, as letters and tables store it.
    ///
    /// ```
    /// assert_eq!(retry_core::dlq::FailureClass::Data.as_str(), "data");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureClass::System => "system",
            FailureClass::Data => "data",
        }
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call that gave up, with everything a person needs weeks later. Serialises with exactly the
/// field names of DESIGN.md's seed, plus `class`, `error_type` and `idempotency_key`.
///
/// ```
/// use retry_core::dlq::{DeadLetter, FailureClass};
///
/// let letter: DeadLetter = serde_json::from_str(r#"{
///     "msg_id": "M-20260819-000123", "original": {"amount": 10},
///     "reason": "upstream 503 after 5 attempts", "attempts": 5,
///     "first_failed_at": "2026-08-19T02:11:03+09:00", "last_failed_at": "2026-08-19T02:12:47+09:00",
///     "trace_id": "a1b2c3d4", "class": "system", "error_type": "FetchError"
/// }"#).unwrap();
/// assert_eq!(letter.class, FailureClass::System);
/// assert_eq!(letter.idempotency_key, None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The message's id: the receiver's idempotency key where there is one, so a redrive can
    /// never repeat an effect that already happened.
    pub msg_id: String,
    /// The original request (after redaction), as JSON.
    pub original: serde_json::Value,
    /// Why, in words: "gave up after 5 attempts: 503 Service Unavailable",
    /// "not retryable: 400 Bad Request".
    pub reason: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the first attempt failed (RFC 3339 with offset).
    pub first_failed_at: String,
    /// When the last attempt failed (RFC 3339 with offset).
    pub last_failed_at: String,
    /// The logical call's trace id, as on its tracing events.
    pub trace_id: String,
    /// `system` or `data`.
    pub class: FailureClass,
    /// The Rust type of the error.
    pub error_type: String,
    /// The idempotency key of the original call, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// A dead-letter sink or store failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DlqError {
    /// Writing or reading failed (disk full, read-only, server down).
    Io(Box<dyn std::error::Error + Send + Sync>),
    /// A stored letter cannot be read; nothing was skipped silently.
    Corrupt(String),
    /// The original could not be turned into JSON.
    Serialize(String),
}

impl fmt::Display for DlqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DlqError::Io(e) => write!(f, "dead-letter store failed: {e}"),
            DlqError::Corrupt(what) => write!(f, "dead-letter store is corrupt: {what}"),
            DlqError::Serialize(e) => write!(f, "dead letter not serialisable: {e}"),
        }
    }
}

impl std::error::Error for DlqError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DlqError::Io(e) => Some(&**e),
            _ => None,
        }
    }
}

/// A call gave up and its dead letter was NOT parked: do not acknowledge the message.
/// Functions with `dlq(...)` need `E: From<DlqFailed>`; [`why`](Self::why) tells the sink
/// failing from a call that left the give-up to an outer layer.
///
/// [`decision`](Self::decision) lets an outer retry treat it as the error it replaced: a
/// collapsed call's error keeps its own decision, a sink failure is not retried (the call has
/// given up already).
///
/// ```
/// use retry_core::dlq::{DlqError, DlqFailed, NotParked};
/// # fn letter() -> retry_core::dlq::DeadLetter { serde_json::from_value(serde_json::json!({
/// #   "msg_id": "M-1", "original": null, "reason": "r", "attempts": 1,
/// #   "first_failed_at": "2026-01-01T00:00:00+00:00", "last_failed_at": "2026-01-01T00:00:00+00:00",
/// #   "trace_id": "0", "class": "system", "error_type": "E" })).unwrap() }
/// let failed = DlqFailed::new(letter(), NotParked::OuterLayer { decision: retry_core::Decision::Retry });
/// assert!(failed.outer_layer_owns_give_up());
/// assert!(failed.sink_error().is_none());
/// assert_eq!(failed.decision(), retry_core::Decision::Retry);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct DlqFailed {
    /// The letter that was not parked.
    pub letter: DeadLetter,
    /// Why it was not parked.
    pub why: NotParked,
}

/// Why a dead letter was not parked; see [`DlqFailed`].
#[derive(Debug)]
#[non_exhaustive]
pub enum NotParked {
    /// The sink refused the letter.
    Sink(DlqError),
    /// The call ran as a single attempt (inside another retry, or `.single_attempt()`), so the
    /// give-up, and the letter, belong to the layer outside it. `decision` is how the call's own
    /// error was classified.
    OuterLayer {
        /// The classification of the error this outcome replaced.
        decision: crate::Decision,
    },
}

impl DlqFailed {
    /// A letter that was not parked, and why.
    pub fn new(letter: DeadLetter, why: NotParked) -> Self {
        DlqFailed { letter, why }
    }

    /// The sink's error, when the sink refused the letter.
    pub fn sink_error(&self) -> Option<&DlqError> {
        match &self.why {
            NotParked::Sink(error) => Some(error),
            NotParked::OuterLayer { .. } => None,
        }
    }

    /// Whether nothing was parked because an outer layer owns the give-up.
    pub fn outer_layer_owns_give_up(&self) -> bool {
        matches!(self.why, NotParked::OuterLayer { .. })
    }

    /// How an outer retry should treat this outcome: as the error it replaced, when the call
    /// left the give-up to the outer layer; [`Decision::Stop`](crate::Decision::Stop) when the
    /// sink failed (the call has given up already). For an error enum's `Classify` impl.
    /// (A method, not a `Classify` impl: `DlqFailed` is never a function's error type itself.)
    pub fn decision(&self) -> crate::Decision {
        match self.why {
            NotParked::Sink(_) => crate::Decision::Stop,
            NotParked::OuterLayer { decision } => decision,
        }
    }
}

impl fmt::Display for DlqFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            NotParked::Sink(error) => write!(f, "not parked ({error}): {}", self.letter.reason),
            NotParked::OuterLayer { .. } => write!(
                f,
                "not parked (single attempt: the outer layer owns the give-up): {}",
                self.letter.reason
            ),
        }
    }
}

impl std::error::Error for DlqFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.sink_error().map(|e| e as _)
    }
}
