//! The write queue of a SQLite file: every write this process makes on the file through the
//! crate (`SqliteStore`'s claims, renewals, completions, releases, purges and transactions,
//! `SqliteDeadLetters`' writes, and the application's own writes through
//! [`SqliteStore::write`](crate::SqliteStore::write) and
//! [`begin`](retry_core::idempotency::TransactionalStore::begin)) goes to one thread per file,
//! which owns the file's write connection and commits whatever waited while it was busy in one
//! transaction (group commit).
//!
//! Design notes (the why of each choice):
//! - SQLite lets one writer into a file at a time. Writers of one process that each took
//!   SQLite's lock for themselves waited for it in SQLite's busy handler, which sleeps (up to
//!   100 ms) between tries and leaves the lock idle under contention, and each paid a commit of
//!   its own (an `fsync` with `synchronous=FULL`). Queued in the process, they are served in
//!   arrival order as soon as the lock is free, and the writes waiting at the same time share
//!   one transaction and its `COMMIT`.
//! - Durability is unchanged: a write's caller is answered only after the `COMMIT` of its
//!   group returned, so "claimed", "completed" and "parked" still mean "on disk" with
//!   `synchronous=FULL`. Group commit only shares an `fsync` between writes that were waiting
//!   at the same time; no write waits for later ones.
//! - A group is the write at the head of the queue and every write waiting when it finished
//!   (at most [`MAX_GROUP`]). Writes arriving later go to the next group, so a group never
//!   grows while it runs, and an answer waits at most for the writes queued with it.
//! - Each write runs in a savepoint of the group's transaction: a refusal of its own (a fenced
//!   claim, a corrupt row) or a failed statement undoes its writes alone and answers it alone.
//!   A `COMMIT` that fails, or a statement after which SQLite ended the whole transaction (a
//!   full disk, a handler's own `COMMIT`), fails every write of the group: none was kept.
//! - A transaction lent to the caller ([`Session`]: the handler's transaction) is a write of its
//!   group that holds the writer until it ends: the caller's statements are sent to the thread
//!   and run there, in its savepoint. Its `COMMIT` is the group's, shared with the writes queued
//!   behind it.
//! - A write waits in the queue at most its store's busy timeout, then fails with the same
//!   "locked" error SQLite's busy handler gives; one the thread has started is always answered.
//!   Other processes still meet at SQLite's lock: each group's `BEGIN IMMEDIATE` waits for them
//!   at most the busy timeout of the write that starts it.
//! - `synchronous` is chosen per group (SQLite refuses to change it inside a transaction):
//!   `FULL` when a write of the group asks for it (every write of a store with the default
//!   settings), so stores opened with other settings on the same file still share one queue.
//! - Outside a Tokio runtime a caller blocks its thread until the answer, as any SQLite call
//!   does; the thread itself never needs a runtime.
//! - Queues are kept by file (its canonical path) in a process-wide registry, weakly: the thread
//!   ends once every store of the file was dropped and the writes already sent are done.
//! - Opening a store (the file's WAL mode, its tables) is the one write outside the queue: it
//!   runs once, before the store exists, and `PRAGMA journal_mode` cannot run inside the
//!   queue's transactions.

mod job;
mod session;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::sql::{self, Fail, Failure, FromSqliteError};

pub(crate) use job::Wait;
pub(crate) use session::{Opened, Prelude, Session, Start};

use job::{Failed, Job, Ran, Ticket};

/// The shortest wait for the queue, whatever the busy timeout (see [`Writes::answer`]).
const MIN_QUEUE_WAIT: Duration = Duration::from_millis(1);

/// The write queue of one file: where a store's writes are sent.
pub(crate) struct Queue {
    /// The channel to the file's writer thread; `None` until the first write.
    jobs: Mutex<Option<Sender<Box<dyn Job>>>>,
}

/// The process's queues, by canonical path.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<Queue>>> {
    static QUEUES: OnceLock<Mutex<HashMap<PathBuf, Weak<Queue>>>> = OnceLock::new();
    QUEUES.get_or_init(Mutex::default)
}

/// A store's handle on its file's queue: the queue, the file as the store names it (in its
/// errors) and how the store's writes wait.
#[derive(Clone)]
pub(crate) struct Writes {
    queue: Arc<Queue>,
    path: Arc<Path>,
    pub(crate) wait: Wait,
}

impl Writes {
    /// The queue of the file at `path` (which must exist: opening the store created it).
    pub(crate) fn open(path: &Path, wait: Wait) -> Self {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        // Every update of the map is one insert or one retain: a panic cannot tear it.
        let mut queues = registry().lock().unwrap_or_else(PoisonError::into_inner);
        let queue = match queues.get(&key).and_then(Weak::upgrade) {
            Some(queue) => queue,
            None => {
                queues.retain(|_, queue| queue.strong_count() > 0);
                let queue = Arc::new(Queue {
                    jobs: Mutex::new(None),
                });
                queues.insert(key, Arc::downgrade(&queue));
                queue
            }
        };
        Writes {
            queue,
            path: Arc::from(path),
            wait,
        }
    }

    /// The same queue with other waits.
    pub(crate) fn with_wait(&self, wait: Wait) -> Self {
        Writes {
            wait,
            ..self.clone()
        }
    }

    /// Whether both write through the same queue (the same file).
    pub(crate) fn same_file(&self, other: &Writes) -> bool {
        Arc::ptr_eq(&self.queue, &other.queue)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `op` in the next group's transaction and answers once that transaction committed.
    /// `op` runs in a savepoint: an error (a verdict of the store's own, or a failed
    /// statement) undoes its writes and answers with that error.
    pub(crate) async fn write<T, E, F>(&self, op: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: FromSqliteError + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Fail<E>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let ticket = Ticket::default();
        self.send(Box::new(Write {
            ticket: ticket.clone(),
            writes: self.clone(),
            op,
            reply,
        }))?;
        self.answer(&ticket, answer).await
    }

    /// Hands `job` to the file's thread, starting one if there is none (or it died).
    fn send<E: FromSqliteError>(&self, job: Box<dyn Job>) -> Result<(), E> {
        // Sending never blocks; the lock is held for the send alone.
        let mut jobs = self
            .queue
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let job = match jobs.as_ref() {
            Some(sender) => match sender.send(job) {
                Ok(()) => return Ok(()),
                // The thread is gone (it cannot be, short of a panic outside a group).
                Err(returned) => returned.0,
            },
            None => job,
        };
        let (sender, receiver) = std::sync::mpsc::channel();
        let path = self.path.to_path_buf();
        std::thread::Builder::new()
            .name("retry-sqlite-writer".to_owned())
            .spawn(move || writer::serve(&path, &receiver))
            .map_err(|e| {
                E::from_sqlite(sql::Error::Message(format!(
                    "cannot start the writer thread of database file {}: {e}",
                    self.path.display()
                )))
            })?;
        // The thread holds the receiver until this sender (and every store of the file) is
        // dropped.
        let sent = sender.send(job).map_err(|_| E::from_sqlite(self.gone()));
        *jobs = Some(sender);
        sent
    }

    /// The answer to the write holding `ticket`: at most the busy timeout while it waits in
    /// the queue, however long once the thread has started it (it is then always answered).
    async fn answer<T, E: FromSqliteError>(
        &self,
        ticket: &Ticket,
        mut answer: oneshot::Receiver<Result<T, E>>,
    ) -> Result<T, E> {
        if tokio::runtime::Handle::try_current().is_err() {
            // No runtime to wait on: this thread waits, as for any SQLite call.
            return answer
                .blocking_recv()
                .unwrap_or_else(|_| Err(E::from_sqlite(self.gone())));
        }
        // A zero busy timeout still lets a write be picked up by an idle queue: the thread
        // needs a moment to get to it even when nothing else is queued.
        let wait = self.wait.busy.max(MIN_QUEUE_WAIT);
        match tokio::time::timeout(wait, &mut answer).await {
            Ok(result) => result.unwrap_or_else(|_| Err(E::from_sqlite(self.gone()))),
            Err(_) if ticket.abandon() => Err(E::from_sqlite(self.queue_busy())),
            Err(_) => answer
                .await
                .unwrap_or_else(|_| Err(E::from_sqlite(self.gone()))),
        }
    }

    /// A write waited for the queue for its whole busy timeout: what SQLite's own lock says
    /// then.
    fn queue_busy(&self) -> sql::Error {
        let busy = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY);
        let message = "another transaction of this process held the write lock";
        sql::error(
            &self.path,
            self.wait.busy,
            rusqlite::Error::SqliteFailure(busy, Some(message.to_owned())),
        )
    }

    /// The thread stopped before it answered.
    fn gone(&self) -> sql::Error {
        sql::Error::Message(format!(
            "the writer of database file {} stopped before it answered (a panic in a write); \
             the write may or may not have been committed",
            self.path.display()
        ))
    }
}

/// A one-off write: [`Writes::write`].
struct Write<T, E, F> {
    ticket: Ticket,
    writes: Writes,
    op: F,
    reply: oneshot::Sender<Result<T, E>>,
}

impl<T, E, F> Job for Write<T, E, F>
where
    T: Send + 'static,
    E: FromSqliteError + Send + 'static,
    F: FnOnce(&Connection) -> Result<T, Fail<E>> + Send + 'static,
{
    fn take(&self) -> bool {
        self.ticket.take()
    }

    fn wait(&self) -> Wait {
        self.writes.wait
    }

    fn run(self: Box<Self>, conn: &Connection) -> Ran {
        let Write {
            writes, op, reply, ..
        } = *self;
        let (keep, result) = match op(conn) {
            Ok(value) => (true, Ok(value)),
            Err(Failure::Store(verdict)) => (false, Err(verdict)),
            Err(Failure::Sql(e)) => (
                false,
                Err(E::from_sqlite(sql::error(
                    &writes.path,
                    writes.wait.busy,
                    e,
                ))),
            ),
        };
        Ran {
            keep,
            answer: Some(Box::new(move |failed: Option<&Failed>| {
                // A write whose own result was an error kept nothing: its error stands. One
                // that succeeded is answered only if its group committed.
                let answer = match (failed, result) {
                    (Some(failed), Ok(_)) => {
                        Err(E::from_sqlite(failed.error(&writes.path, writes.wait.busy)))
                    }
                    (_, result) => result,
                };
                // The caller may have stopped waiting (its future was dropped): nothing to tell.
                let _ = reply.send(answer);
            })),
            then: None,
        }
    }

    fn fail(self: Box<Self>, failed: &Failed) {
        let error = failed.error(&self.writes.path, self.writes.wait.busy);
        let _ = self.reply.send(Err(E::from_sqlite(error)));
    }
}
