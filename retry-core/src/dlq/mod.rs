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
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod http;
mod jsonl;
mod letter;
mod memory;
mod monitor;
#[cfg(feature = "postgres")]
mod postgres;
pub mod redrive;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod row;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::future::Future;

pub use audit::RedriveRecord;
pub use jsonl::{JsonlSink, TornLine};
pub use letter::{DeadLetter, DlqError, DlqFailed, FailureClass, NotParked};
pub use memory::MemoryDeadLetters;
pub use monitor::{Pending, pending, spawn_monitor};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PgDeadLetters;
pub use redrive::{
    AssumeIdempotent, Filter, Outcome, Redrive, RedriveError, RedriveFuture, RedriveReport,
    RedriveRun, assume_idempotent,
};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::SqliteDeadLetters;

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

/// A sink that can also be read and worked through: what monitoring and redrive need.
pub trait DeadLetterStore: DeadLetterSink {
    /// Every pending letter, oldest first failure first.
    fn list(&self) -> impl Future<Output = Result<Vec<DeadLetter>, DlqError>> + Send;

    /// How many letters are pending.
    fn count(&self) -> impl Future<Output = Result<u64, DlqError>> + Send;

    /// The pending letter with the oldest first failure.
    fn oldest(&self) -> impl Future<Output = Result<Option<DeadLetter>, DlqError>> + Send;

    /// The pending letter `msg_id`, if any.
    fn get(
        &self,
        msg_id: &str,
    ) -> impl Future<Output = Result<Option<DeadLetter>, DlqError>> + Send;

    /// Removes `msg_id` from the pending letters (it was redriven, or judged); `false` if it was
    /// not pending.
    fn ack(&self, msg_id: &str) -> impl Future<Output = Result<bool, DlqError>> + Send;

    /// Puts a letter back after a redrive failed again (same `msg_id`, `attempts` increased,
    /// `last_failed_at` updated, `first_failed_at` kept), replacing the pending one.
    fn put_back(&self, letter: &DeadLetter) -> impl Future<Output = Result<(), DlqError>> + Send;

    /// Appends a redrive run's audit record durably, beside the letters.
    fn record_redrive(
        &self,
        record: &RedriveRecord,
    ) -> impl Future<Output = Result<(), DlqError>> + Send;

    /// Every recorded redrive run, in the order they started.
    fn redrives(&self) -> impl Future<Output = Result<Vec<RedriveRecord>, DlqError>> + Send;
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
