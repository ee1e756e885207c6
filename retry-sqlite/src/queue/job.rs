//! What the file's write queue carries: its entries ([`Job`]), when the thread starts them or
//! their callers give up ([`Ticket`]), what a write leaves for the end of its group ([`Ran`])
//! and why a group was not kept ([`Failed`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use rusqlite::Connection;

use crate::sql::{self, SharedFailed, What};

/// At most this many writes per transaction: bounds what one transaction adds to the WAL and
/// how long the first of them waits for its answer.
pub(super) const MAX_GROUP: usize = 4096;

/// How one store's writes wait and commit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    /// The longest wait for the queue, and for another process's lock ([`sql::clamp_busy`]).
    pub(crate) busy: Duration,
    /// The write's group commits with `synchronous=FULL`.
    pub(crate) full: bool,
}

/// Whether a write was started by the thread or given up by its caller: whichever comes first.
#[derive(Clone, Default)]
pub(super) struct Ticket(Arc<AtomicU8>);

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

impl Ticket {
    /// The thread starts the write; `false` if its caller gave up.
    pub(super) fn take(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The caller gives up; `false` if the thread started the write first.
    pub(super) fn abandon(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// One entry of the queue, as the thread sees it.
pub(super) trait Job: Send {
    /// The thread starts it; `false` if its caller gave up (it is then dropped unrun).
    fn take(&self) -> bool;

    fn wait(&self) -> Wait;

    /// Runs it inside its savepoint of the group's transaction.
    fn run(self: Box<Self>, conn: &Connection) -> Ran;

    /// It cannot run: its group's transaction could not begin.
    fn fail(self: Box<Self>, failed: &Failed);
}

/// What a write left for the end of its group.
pub(super) struct Ran {
    /// Its savepoint is released into the group (otherwise rolled back).
    pub(super) keep: bool,
    /// Called once the group ended: `None` when it committed.
    pub(super) answer: Option<Answer>,
    /// A write to start first in the next group, once this one committed (a transaction that
    /// must begin after its claim's mark is on disk: `begin_for`).
    pub(super) then: Option<Box<dyn Job>>,
}

pub(super) type Answer = Box<dyn FnOnce(Option<&Failed>) + Send>;

/// Why a group's writes were not kept, shared by all of them.
#[derive(Debug, Clone)]
pub(crate) struct Failed {
    pub(super) what: What,
    pub(super) cause: Option<Arc<rusqlite::Error>>,
}

impl Failed {
    /// The group's failure as the plumbing's error for one write of `path`: SQLite's "locked"
    /// (another process held the file for the busy timeout) reads as every locked error does.
    pub(super) fn error(&self, path: &Path, busy: Duration) -> sql::Error {
        if let Some(rusqlite::Error::SqliteFailure(code, message)) = self.cause.as_deref()
            && matches!(
                code.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        {
            let copy = rusqlite::Error::SqliteFailure(*code, message.clone());
            return sql::error(path, busy, copy);
        }
        sql::Error::Shared(SharedFailed::new(path, self.what, self.cause.clone()))
    }
}
