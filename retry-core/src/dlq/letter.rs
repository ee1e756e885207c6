//! The dead letter itself.

use std::fmt;
use std::time::SystemTime;

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
/// // The offset is read and the instant kept: written again, it is in UTC.
/// let tokyo = retry_core::time::parse_rfc3339("2026-08-18T17:11:03Z").unwrap();
/// assert_eq!(letter.first_failed_at, tokyo);
/// let json = serde_json::to_value(&letter).unwrap();
/// assert_eq!(json["first_failed_at"], "2026-08-18T17:11:03.000+00:00");
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
    /// When the first attempt failed. Serialised as RFC 3339 (read with any offset, written
    /// in UTC: [`time::rfc3339`](crate::time::rfc3339)).
    #[serde(with = "crate::time::rfc3339")]
    pub first_failed_at: SystemTime,
    /// When the last attempt failed (RFC 3339 when serialised, as `first_failed_at`).
    #[serde(with = "crate::time::rfc3339")]
    pub last_failed_at: SystemTime,
    /// The logical call's trace id, as on its tracing events (16 hex digits). With the feature
    /// `opentelemetry`, parked while an OpenTelemetry span is current: that span's trace id, in
    /// W3C form (32 lowercase hex digits), so the letter leads to the trace.
    pub trace_id: String,
    /// `system` or `data`.
    pub class: FailureClass,
    /// The Rust type of the error.
    pub error_type: String,
    /// The idempotency key of the original call, when it had one. A redrive claims this key
    /// (or skips the letter), so the receiver answers from its store if the effect happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The function that gave up (`module::function`), so a redrive can pick the letters of one
    /// source and send them to the right target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Whether `original` went through a redaction function: then it is not the payload, and a
    /// redrive refuses to send it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// The scope (namespace) the idempotency key was claimed in at the receiver, when known: a
    /// redrive into another scope would not find the first run's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_scope: Option<String>,
    /// When the receiver forgets the idempotency key, when known: after it, a resend could
    /// repeat the effect, so a redrive refuses the letter. RFC 3339 when serialised.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::time::rfc3339::option"
    )]
    pub key_expires_at: Option<SystemTime>,
    /// The earlier give-ups of this `msg_id` (parked again, or redriven and failed again),
    /// oldest first; at most [`HISTORY_LIMIT`] are kept. The latest is the letter's own
    /// `reason` and `last_failed_at`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Failure>,
    /// Set when the letter was acknowledged (redriven, or judged by a person): it is no longer
    /// pending, and is kept until purged by age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Resolution>,
}

/// How many earlier give-ups a letter keeps in [`DeadLetter::history`]; older ones are dropped.
pub const HISTORY_LIMIT: usize = 16;

/// How deep a letter's [`original`](DeadLetter::original) may nest (arrays and objects; a
/// scalar is 0 deep, `[]` is 1): 126. Every store refuses a deeper one when it is parked
/// ([`DeadLetter::check_readable`]), because it could not be read back: letters are read with
/// serde_json, which stops at 128 levels, so the letter around the original (one level more)
/// may nest 127. A body serde_json itself parsed nests at most 127, so this refuses only the
/// deepest bodies, with an error, instead of a letter nobody can read.
///
/// ```
/// # use retry_core::dlq::{DeadLetter, MAX_ORIGINAL_DEPTH};
/// # let mut letter: DeadLetter = serde_json::from_value(serde_json::json!({
/// #   "msg_id": "M-1", "original": null, "reason": "r", "attempts": 1,
/// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
/// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
/// let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
/// letter.original = serde_json::from_str(&nested(MAX_ORIGINAL_DEPTH)).unwrap();
/// let line = serde_json::to_string(&letter).unwrap();
/// assert!(serde_json::from_str::<DeadLetter>(&line).is_ok(), "the deepest letter reads back");
/// letter.original = serde_json::from_str(&nested(MAX_ORIGINAL_DEPTH + 1)).unwrap();
/// let line = serde_json::to_string(&letter).unwrap();
/// assert!(serde_json::from_str::<DeadLetter>(&line).is_err(), "one level more does not");
/// ```
pub const MAX_ORIGINAL_DEPTH: usize = 126;

/// One give-up of a letter's message, as its history keeps it.
///
/// ```
/// use retry_core::dlq::Failure;
/// use retry_core::time::parse_rfc3339;
///
/// let failure: Failure = serde_json::from_str(
///     r#"{"at": "2026-08-19T02:12:47+09:00", "reason": "upstream 503 after 5 attempts", "trace_id": "a1b2"}"#,
/// ).unwrap();
/// assert_eq!(failure.reason, "upstream 503 after 5 attempts");
/// assert_eq!(Some(failure.at), parse_rfc3339("2026-08-18T17:12:47Z"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// When it gave up (RFC 3339 when serialised).
    #[serde(with = "crate::time::rfc3339")]
    pub at: SystemTime,
    /// Why, in words.
    pub reason: String,
    /// The trace id of the call (or redrive run) that gave up.
    pub trace_id: String,
}

/// Who acknowledged a letter, when, and in which redrive run (none when a person judged it).
///
/// ```
/// use retry_core::dlq::Resolution;
/// use std::time::SystemTime;
///
/// let by_hand = Resolution::new("alice", SystemTime::now());
/// assert_eq!(by_hand.run_id, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// When (RFC 3339 when serialised).
    #[serde(with = "crate::time::rfc3339")]
    pub at: SystemTime,
    /// Who: a person, or the redrive run's `who`.
    pub by: String,
    /// The redrive run that sent it, when it was redriven.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl Resolution {
    /// Acknowledged by `by` at `at`, outside a redrive run.
    pub fn new(by: impl Into<String>, at: SystemTime) -> Self {
        Resolution {
            at,
            by: by.into(),
            run_id: None,
        }
    }

    /// Acknowledged by the redrive run `run_id`.
    pub fn in_run(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }
}

impl DeadLetter {
    /// Whether every store can read this letter back once it is parked: its `original` nests
    /// at most [`MAX_ORIGINAL_DEPTH`] levels. Every store calls this before it writes anything
    /// (the conformance suite holds stores to it), so a letter that parks is a letter that
    /// reads back, and one that could not is refused, not parked, with the reason.
    ///
    /// # Errors
    ///
    /// [`DlqError::Serialize`] saying how deep the original is and how deep it may be.
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DlqError, MAX_ORIGINAL_DEPTH};
    /// # let mut letter: DeadLetter = serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": null, "reason": "r", "attempts": 1,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
    /// let depth = MAX_ORIGINAL_DEPTH + 1;
    /// letter.original = serde_json::from_str(&format!("{}{}", "[".repeat(depth), "]".repeat(depth))).unwrap();
    /// let Err(DlqError::Serialize(why)) = letter.check_readable() else { panic!("accepted") };
    /// assert!(why.contains("nested 127 deep"), "{why}");
    /// ```
    pub fn check_readable(&self) -> Result<(), DlqError> {
        let depth = nesting(&self.original);
        if depth > MAX_ORIGINAL_DEPTH {
            return Err(DlqError::Serialize(format!(
                "dead letter `{}`: the letter's original is nested {depth} deep; originals nest \
                 at most {MAX_ORIGINAL_DEPTH} levels so that their letters can be read back \
                 (serde_json reads at most 128)",
                self.msg_id
            )));
        }
        Ok(())
    }

    /// Whether the letter is still waiting (not [`resolved`](Self::resolved)).
    pub fn is_pending(&self) -> bool {
        self.resolved.is_none()
    }

    /// The same message gave up again and `again` was parked for it: every store merges the two
    /// this way, so a letter is never overwritten. The first `original`, `first_failed_at`,
    /// `idempotency_key` and `source` stay; attempts add up; the newer give-up becomes the
    /// letter's `reason`, `last_failed_at`, `trace_id` and `class`, and the older one goes to
    /// the history. A resolved letter that gives up again is pending again.
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, FailureClass};
    /// # use retry_core::time::parse_rfc3339;
    /// # fn letter(original: u32, reason: &str, at: &str) -> DeadLetter { serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": original, "reason": reason, "attempts": 5,
    /// #   "first_failed_at": at, "last_failed_at": at,
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap() }
    /// let mut first = letter(1, "503", "2026-08-19T02:00:00Z");
    /// first.absorb(&letter(2, "timeout", "2026-08-19T03:00:00Z"));
    /// assert_eq!(first.original, serde_json::json!(1), "the first original stays");
    /// assert_eq!((first.attempts, first.reason.as_str()), (10, "timeout"));
    /// assert_eq!(Some(first.first_failed_at), parse_rfc3339("2026-08-19T02:00:00Z"));
    /// assert_eq!(first.history[0].reason, "503");
    /// ```
    pub fn absorb(&mut self, again: &DeadLetter) {
        self.failed_again(
            again.attempts,
            Failure {
                at: again.last_failed_at,
                reason: again.reason.clone(),
                trace_id: again.trace_id.clone(),
            },
        );
        self.class = again.class;
        self.error_type.clone_from(&again.error_type);
        if self.idempotency_key.is_none() {
            self.idempotency_key.clone_from(&again.idempotency_key);
        }
        if self.source.is_none() {
            self.source.clone_from(&again.source);
        }
        if self.key_scope.is_none() {
            self.key_scope.clone_from(&again.key_scope);
        }
        if self.key_expires_at.is_none() {
            self.key_expires_at = again.key_expires_at;
        }
    }

    /// `attempts` more attempts failed, the last as `failure` (a redrive that failed again
    /// makes one): the letter's latest give-up becomes history, and it is pending again.
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, Failure};
    /// # use retry_core::time::parse_rfc3339;
    /// # let mut letter: DeadLetter = serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": null, "reason": "503", "attempts": 5,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
    /// let at = parse_rfc3339("2026-08-20T09:00:00Z").unwrap();
    /// letter.failed_again(1, Failure {
    ///     at, reason: "redrive failed: 503".into(), trace_id: "run".into(),
    /// });
    /// assert_eq!((letter.attempts, letter.history.len()), (6, 1));
    /// assert_eq!(letter.last_failed_at, at);
    /// ```
    pub fn failed_again(&mut self, attempts: u32, failure: Failure) {
        let Failure {
            at,
            reason,
            trace_id,
        } = failure;
        let earlier = Failure {
            at: std::mem::replace(&mut self.last_failed_at, at),
            reason: std::mem::replace(&mut self.reason, reason),
            trace_id: std::mem::replace(&mut self.trace_id, trace_id),
        };
        self.history.push(earlier);
        if self.history.len() > HISTORY_LIMIT {
            let drop = self.history.len() - HISTORY_LIMIT;
            self.history.drain(..drop);
        }
        self.attempts = self.attempts.saturating_add(attempts);
        self.resolved = None;
    }
}

/// How many arrays and objects deep `value` nests (a scalar: 0), without recursion: a value
/// built in memory can be far deeper than the stack.
fn nesting(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut todo = vec![(value, 0)];
    while let Some((value, above)) = todo.pop() {
        let depth = above + 1;
        match value {
            serde_json::Value::Array(items) => todo.extend(items.iter().map(|v| (v, depth))),
            serde_json::Value::Object(fields) => todo.extend(fields.values().map(|v| (v, depth))),
            _ => continue,
        }
        deepest = deepest.max(depth);
    }
    deepest
}

/// A dead-letter sink or store failed.
///
/// `Io` says only that; why (the file, the server, the driver's error) is its
/// [`source`](std::error::Error::source). Print the whole chain with
/// [`error_chain`](crate::error_chain) (or anyhow's `{:#}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DlqError {
    /// Writing or reading failed (disk full, read-only, server down).
    #[error("dead-letter store failed")]
    Io(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A stored letter cannot be read; nothing was skipped silently.
    #[error("dead-letter store is corrupt: {0}")]
    Corrupt(String),
    /// The original could not be turned into JSON.
    #[error("dead letter not serialisable: {0}")]
    Serialize(String),
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

/// The letter's reason, with what kept it from being parked; the sink's error (if that was it)
/// is the source, not part of the message.
impl fmt::Display for DlqFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            NotParked::Sink(_) => write!(f, "not parked (the sink failed): {}", self.letter.reason),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_rfc3339;

    fn at(text: &str) -> SystemTime {
        parse_rfc3339(text).unwrap()
    }

    fn letter(original: serde_json::Value) -> DeadLetter {
        DeadLetter {
            msg_id: "M-1".into(),
            original,
            reason: "r".into(),
            attempts: 1,
            first_failed_at: at("2026-08-19T02:00:00Z"),
            last_failed_at: at("2026-08-19T02:00:00Z"),
            trace_id: "t".into(),
            class: FailureClass::System,
            error_type: "E".into(),
            idempotency_key: None,
            source: None,
            redacted: false,
            key_scope: None,
            key_expires_at: None,
            history: vec![Failure {
                at: at("2026-08-19T01:00:00Z"),
                reason: "r".into(),
                trace_id: "t".into(),
            }],
            resolved: Some(Resolution::new("alice", at("2026-08-20T00:00:00Z"))),
        }
    }

    /// The check must agree with the reader itself at the boundary, for arrays and objects
    /// alike: what it accepts serde_json reads back as a letter, what it refuses it cannot.
    #[test]
    fn the_depth_check_is_exactly_what_serde_json_reads() {
        for (open, close) in [("[", "]"), ("{\"k\":", "}")] {
            for depth in MAX_ORIGINAL_DEPTH - 2..=MAX_ORIGINAL_DEPTH + 2 {
                // The innermost level holds a scalar, so objects are well formed.
                let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                let Ok(original) = serde_json::from_str::<serde_json::Value>(&text) else {
                    // Deeper than serde_json parses on its own: build it by hand.
                    assert!(depth > MAX_ORIGINAL_DEPTH);
                    continue;
                };
                let letter = letter(original);
                assert_eq!(nesting(&letter.original), depth);
                let line = serde_json::to_string(&letter).unwrap();
                let read = serde_json::from_str::<DeadLetter>(&line);
                assert_eq!(
                    letter.check_readable().is_ok(),
                    read.is_ok(),
                    "{open} nested {depth} deep: {read:?}"
                );
                if let Ok(read) = read {
                    assert_eq!(read, letter);
                }
            }
        }
    }

    #[test]
    fn originals_built_deeper_than_any_parser_allows_are_refused_with_their_depth() {
        let mut original = serde_json::json!(1);
        for _ in 0..1000 {
            original = serde_json::Value::Array(vec![original]);
        }
        let Err(DlqError::Serialize(why)) = letter(original).check_readable() else {
            panic!("accepted");
        };
        assert!(
            why.contains("`M-1`")
                && why.contains("nested 1000 deep")
                && why.contains("at most 126"),
            "{why}"
        );
    }
}
