//! A dead letter as a row of text columns, for the authors of SQL dead-letter stores: the
//! encoding of a letter checked before anything is written ([`LetterRow`]), and the checks of
//! each column when a row is read back, with one wording for every store (a row that cannot be
//! read is [`DlqError::Corrupt`] naming its `msg_id` and the column). `retry-sqlite`'s
//! `SqliteDeadLetters` keeps its letters this way; `retry-postgres`'s `PgDeadLetters`, whose
//! columns are typed (`timestamptz`, `jsonb`), uses only the checks of its other columns.
//!
//! Times are written as RFC 3339 text in UTC ([`format_rfc3339`]) and read with any offset;
//! the columns a store orders or compares by (`first_failed_utc`, `at_utc`) are
//! [`format_utc`] text, whose text order is time order.
//!
//! ```
//! use retry_core::dlq::row::{self, LetterRow};
//! use retry_core::dlq::{DeadLetter, FailureClass};
//! use retry_core::time::parse_rfc3339;
//!
//! let at = |text| parse_rfc3339(text).unwrap();
//! let letter = DeadLetter {
//!     msg_id: "M-1".into(),
//!     original: serde_json::json!({"amount": 10}),
//!     reason: "503 after 5 attempts".into(),
//!     attempts: 5,
//!     first_failed_at: at("2026-08-19T02:11:03+09:00"),
//!     last_failed_at: at("2026-08-19T02:12:47+09:00"),
//!     trace_id: "a1b2c3d4".into(),
//!     class: FailureClass::System,
//!     error_type: "FetchError".into(),
//!     idempotency_key: None,
//!     source: None,
//!     redacted: false,
//!     key_scope: None,
//!     key_expires_at: None,
//!     history: Vec::new(),
//!     resolved: None,
//! };
//! // Written: text columns, checked first.
//! let columns = LetterRow::new(&letter)?;
//! assert_eq!(columns.first_failed_utc, "2026-08-18T17:11:03.000000Z");
//! // Read back: each column checked, a bad one named.
//! assert_eq!(row::time(&columns.msg_id, "first_failed_at", &columns.first_failed_at)?, letter.first_failed_at);
//! assert_eq!(row::class(&columns.msg_id, columns.class)?, FailureClass::System);
//! let bad = row::attempts("M-1", -1).unwrap_err();
//! assert_eq!(bad.to_string(), "dead-letter store is corrupt: dead_letters row `M-1`: attempts -1 is out of range");
//! # Ok::<(), retry_core::dlq::DlqError>(())
//! ```

use std::fmt;
use std::time::SystemTime;

use super::{DeadLetter, DlqError, Failure, FailureClass, RedriveRecord, Resolution};
use crate::time::{format_rfc3339, format_utc, parse_rfc3339};

/// A letter as its row stores it, checked before anything is written: its times as RFC 3339
/// text ([`format_rfc3339`]), as the text columns keep them.
#[derive(Debug, Clone)]
pub struct LetterRow {
    /// The letter's `msg_id`, the primary key.
    pub msg_id: String,
    /// `original` as JSON text.
    pub original: String,
    /// Why the call gave up.
    pub reason: String,
    /// The attempts made, as SQL's integer.
    pub attempts: i64,
    /// The first failure, RFC 3339 text in UTC.
    pub first_failed_at: String,
    /// The last failure, RFC 3339 text in UTC.
    pub last_failed_at: String,
    /// The trace id of the call that gave up.
    pub trace_id: String,
    /// The failure class: `system` or `data` (read back with [`class`]).
    pub class: &'static str,
    /// The error's type name.
    pub error_type: String,
    /// The key of the `#[idempotent]` call, if it was one.
    pub idempotency_key: Option<String>,
    /// `first_failed_at` as fixed-width UTC: what rows are ordered by, whatever the offset.
    pub first_failed_utc: String,
    /// The function that gave up.
    pub source: Option<String>,
    /// Whether `original` went through a redaction function.
    pub redacted: bool,
    /// The idempotency key's scope.
    pub key_scope: Option<String>,
    /// When the idempotency key's stored response expires, RFC 3339 text in UTC.
    pub key_expires_at: Option<String>,
    /// The earlier give-ups, as a JSON array of [`Failure`]s.
    pub history: String,
    /// Set when the letter arrives resolved already (only a letter copied from another store
    /// does).
    pub resolved: Option<ResolutionRow>,
}

/// A [`Resolution`] as its columns store it, checked before anything is written.
#[derive(Debug, Clone)]
pub struct ResolutionRow {
    /// When it was resolved, RFC 3339 text in UTC.
    pub at: String,
    /// Who resolved it.
    pub by: String,
    /// The redrive run that resolved it, if one did.
    pub run_id: Option<String>,
    /// `at` as fixed-width UTC: what purging by age compares, whatever the offset.
    pub at_utc: String,
}

impl ResolutionRow {
    /// `resolution` as its columns store it.
    pub fn new(resolution: &Resolution) -> Self {
        ResolutionRow {
            at: format_rfc3339(resolution.at),
            by: resolution.by.clone(),
            run_id: resolution.run_id.clone(),
            at_utc: format_utc(resolution.at),
        }
    }
}

impl LetterRow {
    /// `letter` as its row stores it. Fails with [`DlqError`] when the letter could not be read
    /// back (its original nests too deep) or cannot be serialised.
    pub fn new(letter: &DeadLetter) -> Result<Self, DlqError> {
        letter.check_readable()?;
        let original = serde_json::to_string(&letter.original).map_err(|e| {
            DlqError::Serialize(format!("dead letter `{}`: original: {e}", letter.msg_id))
        })?;
        let resolved = letter.resolved.as_ref().map(ResolutionRow::new);
        Ok(LetterRow {
            msg_id: letter.msg_id.clone(),
            original,
            reason: letter.reason.clone(),
            attempts: i64::from(letter.attempts),
            first_failed_at: format_rfc3339(letter.first_failed_at),
            last_failed_at: format_rfc3339(letter.last_failed_at),
            trace_id: letter.trace_id.clone(),
            class: letter.class.as_str(),
            error_type: letter.error_type.clone(),
            idempotency_key: letter.idempotency_key.clone(),
            first_failed_utc: format_utc(letter.first_failed_at),
            source: letter.source.clone(),
            redacted: letter.redacted,
            key_scope: letter.key_scope.clone(),
            key_expires_at: letter.key_expires_at.map(format_rfc3339),
            history: history_json(&letter.msg_id, &letter.history)?,
            resolved,
        })
    }
}

/// A letter's history as its column stores it: a JSON array.
pub fn history_json(msg_id: &str, history: &[Failure]) -> Result<String, DlqError> {
    serde_json::to_string(history)
        .map_err(|e| DlqError::Serialize(format!("dead letter `{msg_id}`: history: {e}")))
}

/// The stored `history` column, which must be a JSON array of failures (SQLite's text column;
/// PostgreSQL's `jsonb` arrives decoded).
pub fn history(msg_id: &str, text: &str) -> Result<Vec<Failure>, DlqError> {
    serde_json::from_str(text).map_err(|e| {
        corrupt(
            msg_id,
            format_args!("history is not a list of failures ({e})"),
        )
    })
}

/// The stored `original` column, which must be JSON.
pub fn original(msg_id: &str, text: &str) -> Result<serde_json::Value, DlqError> {
    serde_json::from_str(text)
        .map_err(|e| corrupt(msg_id, format_args!("original is not JSON ({e})")))
}

/// The stored `attempts` column, which must fit a `u32`.
pub fn attempts(msg_id: &str, stored: i64) -> Result<u32, DlqError> {
    u32::try_from(stored)
        .map_err(|_| corrupt(msg_id, format_args!("attempts {stored} is out of range")))
}

/// A stored time column (`column`), which must be RFC 3339 with an offset: read once, here.
pub fn time(msg_id: &str, column: &str, text: &str) -> Result<SystemTime, DlqError> {
    parse_rfc3339(text).ok_or_else(|| {
        corrupt(
            msg_id,
            format_args!("{column} {text:?} is not an RFC 3339 time"),
        )
    })
}

/// A stored time column (`column`) of the audit row of `run_id` and `msg_id`, which must be
/// RFC 3339 with an offset.
pub fn audit_time(
    run_id: &str,
    msg_id: &str,
    column: &str,
    text: &str,
) -> Result<SystemTime, DlqError> {
    parse_rfc3339(text).ok_or_else(|| {
        DlqError::Corrupt(format!(
            "dead_letter_audit row `{run_id}`, letter `{msg_id}`: {column} {text:?} is not an RFC 3339 time"
        ))
    })
}

/// The stored `class` column.
pub fn class(msg_id: &str, text: &str) -> Result<FailureClass, DlqError> {
    match text {
        "system" => Ok(FailureClass::System),
        "data" => Ok(FailureClass::Data),
        other => Err(corrupt(msg_id, format_args!("unknown class {other:?}"))),
    }
}

/// A row that cannot be read, named by its `msg_id`.
pub fn corrupt(msg_id: &str, what: impl fmt::Display) -> DlqError {
    DlqError::Corrupt(format!("dead_letters row `{msg_id}`: {what}"))
}

/// A redrive record as its row stores it: `(run_id, started_utc, record JSON)`.
pub fn record_row(record: &RedriveRecord) -> Result<(String, String, String), DlqError> {
    let json = serde_json::to_string(record)
        .map_err(|e| DlqError::Serialize(format!("redrive record `{}`: {e}", record.run_id)))?;
    Ok((record.run_id.clone(), format_utc(record.started_at), json))
}

/// A stored redrive record, named by its `run_id` when unreadable.
pub fn record(run_id: &str, json: &str) -> Result<RedriveRecord, DlqError> {
    serde_json::from_str(json).map_err(|e| {
        DlqError::Corrupt(format!(
            "dead_letter_redrives row `{run_id}`: record is unreadable ({e})"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_are_written_as_rfc3339_text_and_ordered_by_utc() {
        let letter = DeadLetter {
            msg_id: "M-1".into(),
            original: serde_json::json!({}),
            reason: "r".into(),
            attempts: 1,
            first_failed_at: parse_rfc3339("2026-08-19T02:11:03+09:00").unwrap(),
            last_failed_at: parse_rfc3339("2026-08-19T02:12:47Z").unwrap(),
            trace_id: "t".into(),
            class: FailureClass::Data,
            error_type: "E".into(),
            idempotency_key: None,
            source: None,
            redacted: false,
            key_scope: None,
            key_expires_at: None,
            history: Vec::new(),
            resolved: None,
        };
        let row = LetterRow::new(&letter).unwrap();
        assert_eq!(row.first_failed_at, "2026-08-18T17:11:03.000+00:00");
        assert_eq!(row.last_failed_at, "2026-08-19T02:12:47.000+00:00");
        assert_eq!(row.first_failed_utc, "2026-08-18T17:11:03.000000Z");
        assert_eq!(row.class, "data");
    }

    #[test]
    fn stored_times_are_read_once_and_unreadable_ones_name_the_letter_and_column() {
        let read = time("M-1", "first_failed_at", "2026-08-19T02:11:03+09:00");
        assert_eq!(read.ok(), parse_rfc3339("2026-08-18T17:11:03Z"));
        let Err(DlqError::Corrupt(message)) = time("M-1", "last_failed_at", "2026-08-19 02:12:47")
        else {
            panic!("accepted");
        };
        assert!(
            message.contains("`M-1`") && message.contains("last_failed_at"),
            "{message}"
        );
    }
}
