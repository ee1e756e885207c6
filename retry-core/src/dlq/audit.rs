//! The record a redrive run leaves behind: when, who, which letters, and how it went.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// One redrive run, as its audit log keeps it. Every store keeps these beside its letters
/// ([`DeadLetterStore::record_redrive`](super::DeadLetterStore::record_redrive)), so "who sent
/// what again, and when" is answered from the same place as "what is pending".
///
/// ```
/// use retry_core::dlq::RedriveRecord;
///
/// let record: RedriveRecord = serde_json::from_str(r#"{
///     "run_id": "5f0c8a1e2b3d4c6f", "who": "alice", "filter": "class=system",
///     "target": "deposit", "started_at": "2026-08-20T09:00:00.000+00:00",
///     "finished_at": "2026-08-20T09:00:02.000+00:00", "limit": 10, "rate_per_second": 5,
///     "selected": 10, "succeeded": 9, "failed": 1, "skipped": 0
/// }"#).unwrap();
/// assert_eq!(record.selected, record.succeeded + record.failed + record.skipped);
/// assert_eq!(record.stopped, None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedriveRecord {
    /// A random id for this run (16 hex digits).
    pub run_id: String,
    /// Who started the run (a person or a job), as they said.
    pub who: String,
    /// Which letters the run chose, in words: `class=system reason~"503" age>=5m`.
    pub filter: String,
    /// Where the letters were sent: a function's name or a URL.
    pub target: String,
    /// When the run took its snapshot of the letters (RFC 3339 when serialised).
    #[serde(with = "crate::time::rfc3339")]
    pub started_at: SystemTime,
    /// When the run ended (RFC 3339 when serialised).
    #[serde(with = "crate::time::rfc3339")]
    pub finished_at: SystemTime,
    /// At most this many letters per run.
    pub limit: u64,
    /// At most this many sends per second.
    pub rate_per_second: u32,
    /// Letters in the snapshot: the ones the filter chose, up to `limit`.
    pub selected: u64,
    /// Sent and answered `Ok`: acknowledged, no longer pending.
    pub succeeded: u64,
    /// Sent and failed again: put back with `attempts` increased.
    pub failed: u64,
    /// Not sent: already gone, original unreadable, key mismatch, or the run stopped first.
    pub skipped: u64,
    /// Why the run stopped before the end of its snapshot, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// One letter in one redrive run, as the audit keeps it: written before the letter is sent
/// (`outcome: None`, the intent) and completed after it. A run that died between the two
/// leaves the intent row, which says so: the letter may or may not have reached the target.
///
/// ```
/// use retry_core::dlq::AuditEntry;
/// use std::time::{Duration, SystemTime};
///
/// let sent = SystemTime::now();
/// let intent = AuditEntry::intent("5f0c8a1e2b3d4c6f", "M-1", "alice", "deposit", sent);
/// assert!(intent.outcome.is_none());
/// let done = intent.finished("redriven", sent + Duration::from_secs(1));
/// assert_eq!(done.outcome.as_deref(), Some("redriven"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The run.
    pub run_id: String,
    /// The letter.
    pub msg_id: String,
    /// Who started the run.
    pub who: String,
    /// Where the letter was sent.
    pub target: String,
    /// When the intent was written, just before the send (RFC 3339 when serialised).
    #[serde(with = "crate::time::rfc3339")]
    pub at: SystemTime,
    /// How it went: `redriven`, `failed again: ..`, `skipped: ..`; `None` while in flight (or
    /// when the run died before it knew).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// When the outcome was written (RFC 3339 when serialised).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::time::rfc3339::option"
    )]
    pub finished_at: Option<SystemTime>,
}

impl AuditEntry {
    /// The row written before `msg_id` is sent.
    pub fn intent(
        run_id: impl Into<String>,
        msg_id: impl Into<String>,
        who: impl Into<String>,
        target: impl Into<String>,
        at: SystemTime,
    ) -> Self {
        AuditEntry {
            run_id: run_id.into(),
            msg_id: msg_id.into(),
            who: who.into(),
            target: target.into(),
            at,
            outcome: None,
            finished_at: None,
        }
    }

    /// The same row with its outcome.
    pub fn finished(mut self, outcome: impl Into<String>, at: SystemTime) -> Self {
        self.outcome = Some(outcome.into());
        self.finished_at = Some(at);
        self
    }
}
