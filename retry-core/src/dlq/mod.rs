//! Dead letters: calls that gave up, parked with everything a person needs to judge them later.
//!
//! `#[retryable(max = 5, dlq(sink = letters, id = msg.id.clone(), original = &msg))]` parks a
//! [`DeadLetter`] when the call gives up (exhausted, or an error that must not be retried), before
//! the error returns. If nothing was parked, the caller gets `E::from(DlqFailed)` instead of its
//! own error, so a consumer acknowledges only what was parked: either the sink failed
//! ([`NotParked::Sink`]), or the call ran as a single attempt (nested in another retry, or
//! `.single_attempt()`) and leaves the give-up and its letter to the outer layer
//! ([`NotParked::OuterLayer`]).

mod audit;
// Reached by generated code through `__private` only.
#[cfg(feature = "test-suite")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-suite")))]
pub mod conformance;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod http;
mod jsonl;
mod letter;
mod memory;
mod monitor;
pub(crate) mod parking;
pub mod redrive;
pub mod row;

use std::future::Future;
use std::time::{Duration, SystemTime};

pub use audit::{AuditEntry, RedriveRecord};
pub use jsonl::{JsonlLine, JsonlReader, JsonlSink, TornLine, UnreadableLine};
pub use letter::{
    DeadLetter, DlqError, DlqFailed, Failure, FailureClass, HISTORY_LIMIT, MAX_ORIGINAL_DEPTH,
    NotParked, Resolution,
};
pub use memory::MemoryDeadLetters;
pub use monitor::{Pending, pending, spawn_monitor};
pub use redrive::{
    AssumeIdempotent, Filter, Outcome, Redrive, RedriveError, RedriveFuture, RedriveReport,
    RedriveRun, assume_idempotent,
};

/// Where dead letters are parked. `park` returns only once the letter is durable.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a dead-letter sink",
    label = "`sink = ...` must name a `DeadLetterSink`",
    note = "use a `JsonlSink`, a SQL dead-letter table, or implement `retry_core::dlq::DeadLetterSink`"
)]
pub trait DeadLetterSink: Send + Sync {
    /// Parks `letter` durably.
    fn park(&self, letter: &DeadLetter) -> impl Future<Output = Result<(), DlqError>> + Send;
}

/// A sink that can also be read and worked through: what monitoring, the CLI and redrive need.
///
/// Letters are never overwritten or deleted while they matter: parking a `msg_id` again merges
/// ([`DeadLetter::absorb`]), acknowledging [`resolve`](Self::resolve)s, and only resolved
/// letters are purged, by age. Listings and counts are answered by the store a page at a time,
/// never by loading every letter. The module `conformance` (feature `test-suite`) checks all of
/// this against any store.
pub trait DeadLetterStore: DeadLetterSink {
    /// Pending letters in the order a redrive takes them (oldest `first_failed_at` first, then
    /// `msg_id`), at most `page.limit`, after `page`'s cursor, of its class and source.
    fn page(&self, page: &Page) -> impl Future<Output = Result<Vec<DeadLetter>, DlqError>> + Send;

    /// How many letters are pending, resolved and leased, and the oldest pending first failure.
    fn stats(&self) -> impl Future<Output = Result<Stats, DlqError>> + Send;

    /// The letter `msg_id`, pending or resolved.
    fn get(
        &self,
        msg_id: &str,
    ) -> impl Future<Output = Result<Option<DeadLetter>, DlqError>> + Send;

    /// Takes the pending letter `msg_id` for the redrive run `run_id` for `ttl`, atomically: `None`
    /// when it is not pending, or another run holds it and that lease has not run out. A run
    /// that already holds it gets it again (the lease renewed).
    fn lease(
        &self,
        msg_id: &str,
        run_id: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<DeadLetter>, DlqError>> + Send;

    /// Ends `run_id`'s lease on `msg_id` without a send (the letter was skipped): pending for any
    /// run again. `false` if the run did not hold it.
    fn release(
        &self,
        msg_id: &str,
        run_id: &str,
    ) -> impl Future<Output = Result<bool, DlqError>> + Send;

    /// Acknowledges `msg_id`: no longer pending, kept with who, when and which run until purged.
    /// With `resolution.run_id`, only while that run holds the lease (or no run does). `false`
    /// if the letter was not pending (or another run holds it).
    fn resolve(
        &self,
        msg_id: &str,
        resolution: &Resolution,
    ) -> impl Future<Output = Result<bool, DlqError>> + Send;

    /// The redrive run `run_id` sent `msg_id` and it failed again: the failure is merged in
    /// ([`DeadLetter::redrive_failed`]: into its history) and the lease ends. `false` if the run did
    /// not hold it.
    fn put_back(
        &self,
        msg_id: &str,
        run_id: &str,
        failure: &Failure,
    ) -> impl Future<Output = Result<bool, DlqError>> + Send;

    /// Deletes the letters resolved before `before`; how many. Pending letters are never purged.
    fn purge_resolved(
        &self,
        before: SystemTime,
    ) -> impl Future<Output = Result<u64, DlqError>> + Send;

    /// Writes a redrive's audit row for one letter durably: first as the intent (no
    /// `outcome`), before the letter is sent, then again with its outcome, replacing the
    /// intent row of the same `(run_id, msg_id)`.
    fn audit(&self, entry: &AuditEntry) -> impl Future<Output = Result<(), DlqError>> + Send;

    /// The audit rows of `run_id` (every run's, when `None`), in the order they were first
    /// written.
    fn audit_rows(
        &self,
        run_id: Option<&str>,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, DlqError>> + Send;

    /// Appends a redrive run's summary record durably, beside the letters.
    fn record_redrive(
        &self,
        record: &RedriveRecord,
    ) -> impl Future<Output = Result<(), DlqError>> + Send;

    /// Every recorded redrive run, in the order they started.
    fn redrives(&self) -> impl Future<Output = Result<Vec<RedriveRecord>, DlqError>> + Send;
}

/// Which pending letters [`DeadLetterStore::page`] returns: at most `limit`, after a cursor, of
/// one class or source.
///
/// ```
/// use retry_core::dlq::{FailureClass, Page};
///
/// let first = Page::first(100).class(FailureClass::System).source("payments::deposit");
/// assert_eq!(first.limit, 100);
/// assert!(first.after.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page {
    /// At most this many letters.
    pub limit: usize,
    /// Only letters after this one in the order (`first_failed_at`, `msg_id`): the last letter
    /// of the previous page.
    pub after: Option<Cursor>,
    /// Only letters of this class.
    pub class: Option<FailureClass>,
    /// Only letters of this source function.
    pub source: Option<String>,
}

/// Where a page starts: after the letter with this first failure and `msg_id`.
///
/// ```
/// use retry_core::dlq::Cursor;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let after = Cursor { first_failed_at: UNIX_EPOCH + Duration::from_secs(60), msg_id: "M-7".into() };
/// assert_eq!(after.msg_id, "M-7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The letter's `first_failed_at`.
    pub first_failed_at: SystemTime,
    /// The letter's `msg_id`.
    pub msg_id: String,
}

impl Page {
    /// The first `limit` pending letters.
    pub fn first(limit: usize) -> Self {
        Page {
            limit,
            after: None,
            class: None,
            source: None,
        }
    }

    /// Only letters of `class`.
    pub fn class(mut self, class: FailureClass) -> Self {
        self.class = Some(class);
        self
    }

    /// Only letters parked by the function `source`.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same page, starting after `last` (the last letter of the previous page).
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, Page};
    /// # let last: DeadLetter = serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-7", "original": null, "reason": "r", "attempts": 1,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
    /// let next = Page::first(100).next_after(&last);
    /// assert_eq!(next.after.unwrap().msg_id, "M-7");
    /// ```
    pub fn next_after(mut self, last: &DeadLetter) -> Self {
        self.after = Some(Cursor {
            first_failed_at: last.first_failed_at,
            msg_id: last.msg_id.clone(),
        });
        self
    }
}

/// What a dead-letter store holds, counted by the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Letters waiting for a person or a redrive.
    pub pending: u64,
    /// Pending letters of class `system`.
    pub system: u64,
    /// Pending letters of class `data`.
    pub data: u64,
    /// Pending letters a redrive run holds a live lease on.
    pub leased: u64,
    /// Acknowledged letters not purged yet.
    pub resolved: u64,
    /// The oldest pending `first_failed_at`.
    pub oldest_first_failed_at: Option<SystemTime>,
}

impl<S: DeadLetterSink + ?Sized> DeadLetterSink for &S {
    fn park(&self, letter: &DeadLetter) -> impl Future<Output = Result<(), DlqError>> + Send {
        (**self).park(letter)
    }
}

impl<S: DeadLetterSink + ?Sized> DeadLetterSink for std::sync::Arc<S> {
    fn park(&self, letter: &DeadLetter) -> impl Future<Output = Result<(), DlqError>> + Send {
        (**self).park(letter)
    }
}
