//! What a redrive run reports: each letter's outcome, the run's summary, and why a run could
//! not be done or recorded.

use std::future::Future;

use crate::dlq::{DlqError, RedriveRecord};

/// What a run did with one letter of its snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Sent, answered `Ok`, resolved.
    Redriven,
    /// Sent and failed again: put back with `attempts` increased and this reason.
    FailedAgain(String),
    /// Not sent, for this reason.
    Skipped(String),
}

impl Outcome {
    /// The outcome as the audit row keeps it: `redriven`, `failed again: ..`, `skipped: ..`.
    ///
    /// ```
    /// use retry_core::dlq::Outcome;
    ///
    /// assert_eq!(Outcome::Skipped("the original was redacted".into()).audit_text(), "skipped: the original was redacted");
    /// ```
    pub fn audit_text(&self) -> String {
        match self {
            Outcome::Redriven => "redriven".to_owned(),
            Outcome::FailedAgain(why) => format!("failed again: {why}"),
            Outcome::Skipped(why) => format!("skipped: {why}"),
        }
    }
}

/// What a run did: its summary record, and each letter's outcome in the order they were taken.
#[derive(Debug, Clone)]
pub struct RedriveReport {
    /// The record written to the store's audit log.
    pub record: RedriveRecord,
    /// `(msg_id, outcome)` for every letter of the snapshot.
    pub letters: Vec<(String, Outcome)>,
}

/// A redrive could not be done, or could not be recorded. The store's error is the source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedriveError {
    /// The letters could not be listed: nothing was sent.
    #[error("redrive sent nothing: the letters could not be listed")]
    Select(#[source] DlqError),
    /// The run happened (see `report`), but its summary record could not be written.
    #[error(
        "redrive {} ran ({} succeeded, {} failed, {} skipped) but its audit record was not written",
        .report.record.run_id, .report.record.succeeded, .report.record.failed, .report.record.skipped
    )]
    Audit {
        /// What the run did.
        report: Box<RedriveReport>,
        /// Why the record was not written.
        #[source]
        error: DlqError,
    },
}

/// The future of a redrive run ([`Redrive::run`](super::Redrive::run),
/// [`Redrive::run_letters`](super::Redrive::run_letters)): its report, or why it stopped.
pub type RedriveRun<'r> =
    std::pin::Pin<Box<dyn Future<Output = Result<RedriveReport, RedriveError>> + Send + 'r>>;
