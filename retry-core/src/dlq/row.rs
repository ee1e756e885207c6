//! A dead letter as both SQL tables store it: encoding checked before anything is written, and
//! the column checks of decoding, with one wording for both stores.

use std::fmt;
use std::time::SystemTime;

use super::{DeadLetter, DlqError, Failure, FailureClass, RedriveRecord, Resolution};
use crate::time::{format_rfc3339, format_utc, parse_rfc3339};

/// A letter as its row stores it, checked before anything is written: its times as RFC 3339
/// text ([`format_rfc3339`]), as the text columns keep them.
pub(super) struct NewRow {
    pub(super) msg_id: String,
    pub(super) original: String,
    pub(super) reason: String,
    pub(super) attempts: i64,
    pub(super) first_failed_at: String,
    pub(super) last_failed_at: String,
    pub(super) trace_id: String,
    pub(super) class: &'static str,
    pub(super) error_type: String,
    pub(super) idempotency_key: Option<String>,
    /// `first_failed_at` as fixed-width UTC: what rows are ordered by, whatever the offset.
    pub(super) first_failed_utc: String,
    pub(super) source: Option<String>,
    pub(super) redacted: bool,
    pub(super) key_scope: Option<String>,
    pub(super) key_expires_at: Option<String>,
    /// The earlier give-ups, as a JSON array of [`Failure`]s.
    pub(super) history: String,
    /// Set when the letter arrives resolved already (only a letter copied from another store
    /// does).
    pub(super) resolved: Option<ResolvedRow>,
}

/// A [`Resolution`] as its columns store it, checked before anything is written.
pub(super) struct ResolvedRow {
    pub(super) at: String,
    pub(super) by: String,
    pub(super) run_id: Option<String>,
    /// `at` as fixed-width UTC: what purging by age compares, whatever the offset.
    pub(super) at_utc: String,
}

impl ResolvedRow {
    /// `resolution` as its columns store it.
    pub(super) fn new(resolution: &Resolution) -> Self {
        ResolvedRow {
            at: format_rfc3339(resolution.at),
            by: resolution.by.clone(),
            run_id: resolution.run_id.clone(),
            at_utc: format_utc(resolution.at),
        }
    }
}

impl NewRow {
    pub(super) fn new(letter: &DeadLetter) -> Result<Self, DlqError> {
        letter.check_readable()?;
        let original = serde_json::to_string(&letter.original).map_err(|e| {
            DlqError::Serialize(format!("dead letter `{}`: original: {e}", letter.msg_id))
        })?;
        let resolved = letter.resolved.as_ref().map(ResolvedRow::new);
        Ok(NewRow {
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
pub(super) fn history_json(msg_id: &str, history: &[Failure]) -> Result<String, DlqError> {
    serde_json::to_string(history)
        .map_err(|e| DlqError::Serialize(format!("dead letter `{msg_id}`: history: {e}")))
}

/// The stored `history` column, which must be a JSON array of failures (SQLite's text column;
/// PostgreSQL's `jsonb` arrives decoded).
#[cfg(feature = "sqlite")]
pub(super) fn history(msg_id: &str, text: &str) -> Result<Vec<Failure>, DlqError> {
    serde_json::from_str(text).map_err(|e| {
        corrupt(
            msg_id,
            format_args!("history is not a list of failures ({e})"),
        )
    })
}

/// The stored `original` column, which must be JSON.
pub(super) fn original(msg_id: &str, text: &str) -> Result<serde_json::Value, DlqError> {
    serde_json::from_str(text)
        .map_err(|e| corrupt(msg_id, format_args!("original is not JSON ({e})")))
}

/// The stored `attempts` column, which must fit a `u32`.
pub(super) fn attempts(msg_id: &str, stored: i64) -> Result<u32, DlqError> {
    u32::try_from(stored)
        .map_err(|_| corrupt(msg_id, format_args!("attempts {stored} is out of range")))
}

/// A stored time column (`column`), which must be RFC 3339 with an offset: read once, here.
pub(super) fn time(msg_id: &str, column: &str, text: &str) -> Result<SystemTime, DlqError> {
    parse_rfc3339(text).ok_or_else(|| {
        corrupt(
            msg_id,
            format_args!("{column} {text:?} is not an RFC 3339 time"),
        )
    })
}

/// A stored time column (`column`) of the audit row of `run_id` and `msg_id`, which must be
/// RFC 3339 with an offset.
pub(super) fn audit_time(
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
pub(super) fn class(msg_id: &str, text: &str) -> Result<FailureClass, DlqError> {
    match text {
        "system" => Ok(FailureClass::System),
        "data" => Ok(FailureClass::Data),
        other => Err(corrupt(msg_id, format_args!("unknown class {other:?}"))),
    }
}

/// A row that cannot be read, named by its `msg_id`.
pub(super) fn corrupt(msg_id: &str, what: impl fmt::Display) -> DlqError {
    DlqError::Corrupt(format!("dead_letters row `{msg_id}`: {what}"))
}

/// A redrive record as its row stores it: `(run_id, started_utc, record JSON)`.
pub(super) fn record_row(record: &RedriveRecord) -> Result<(String, String, String), DlqError> {
    let json = serde_json::to_string(record)
        .map_err(|e| DlqError::Serialize(format!("redrive record `{}`: {e}", record.run_id)))?;
    Ok((record.run_id.clone(), format_utc(record.started_at), json))
}

/// A stored redrive record, named by its `run_id` when unreadable.
pub(super) fn record(run_id: &str, json: &str) -> Result<RedriveRecord, DlqError> {
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
        let row = NewRow::new(&letter).unwrap();
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
