//! Group commit: every write of a store goes to one thread of its own, which owns the store's
//! write connection and commits whatever arrived while it was busy in one transaction.
//!
//! Design notes:
//! - An outage makes many calls give up at once, and `synchronous=FULL` costs one `fsync` per
//!   commit: one letter per transaction parks a few thousand letters a second. The writer takes
//!   every job waiting in its channel (up to [`MAX_GROUP`]), runs them in one `BEGIN IMMEDIATE`
//!   transaction and answers each caller only after the commit, so "parked" still means "on
//!   disk". The longer a commit takes, the more letters the next one carries.
//! - Callers send a job down an unbounded channel (which never blocks: a runtime worker is never
//!   held up by parking) and await a oneshot with its answer. The queue is bounded by the
//!   callers waiting on it, one job each.
//! - Each job runs inside a savepoint: a verdict of its own (a stored row that cannot be read)
//!   undoes its writes and answers that caller alone. A failed SQLite call fails the whole
//!   transaction (disk full, `SQLITE_BUSY` past the busy timeout, a corrupt file): it is rolled
//!   back and every job of the group gets the same error, naming the file; the writer goes on
//!   with the next group.
//! - The connection comes from a pool of one, the writer's own: the pool opens it when first
//!   needed (and again after a failure left it unusable) with the store's settings.
//! - A panic in a job (there should be none) ends the group's callers with an error, not the
//!   writer; if the thread is gone anyway, the next write starts another.
//! - The thread ends when the store is dropped, after the jobs already sent.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::error::{Fail, FileError};
use crate::sql::Failure as Failed;
use crate::sql::Pool;
use crate::sql::Reservation;
use retry_core::dlq::DlqError;

/// At most this many jobs per transaction: bounds what one transaction adds to the WAL (a few
/// MB of letters) and how long its first caller waits.
const MAX_GROUP: usize = 4096;

/// The store's writer: where its writes are sent.
pub(super) struct Writer {
    pool: Arc<Pool>,
    /// The channel to the running thread; `None` until the first write.
    jobs: Mutex<Option<Sender<Box<dyn Job>>>>,
}

impl Writer {
    /// A writer on `pool` (a pool of one connection: the writer's). Its thread starts with the
    /// first write.
    pub(super) fn new(pool: Pool) -> Self {
        Writer {
            pool: Arc::new(pool),
            jobs: Mutex::new(None),
        }
    }

    pub(super) fn path(&self) -> &PathBuf {
        &self.pool.path
    }

    pub(super) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs `op` in the next group's transaction and answers once that transaction committed.
    /// `op` runs inside a savepoint: returning `Fail::Store` undoes its writes and answers with
    /// that error; `Fail::Sql` fails the whole group.
    pub(super) async fn write<T, F>(&self, op: F) -> Result<T, DlqError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Fail> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.send(Box::new(Pending {
            op: Some(op),
            result: None,
            reply,
        }))?;
        answer.await.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Hands `job` to the thread, starting one if there is none (or it died).
    fn send(&self, job: Box<dyn Job>) -> Result<(), DlqError> {
        // Sending never blocks; the lock is held for the send alone.
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let job = match jobs.as_ref() {
            Some(sender) => match sender.send(job) {
                Ok(()) => return Ok(()),
                // The thread is gone (it cannot be, short of a panic outside a group).
                Err(returned) => returned.0,
            },
            None => job,
        };
        let (sender, receiver) = channel();
        let pool = Arc::clone(&self.pool);
        std::thread::Builder::new()
            .name("retry-core-dlq-writer".to_owned())
            .spawn(move || serve(&pool, &receiver))
            .map_err(|e| {
                FileError::message(format!(
                    "cannot start the writer thread of database file {}: {e}",
                    self.path().display()
                ))
                .into_dlq()
            })?;
        // The thread holds the receiver until this sender (and the store) is dropped.
        let sent = sender.send(job).map_err(|_| self.gone());
        *jobs = Some(sender);
        sent
    }

    /// The writer stopped before it answered.
    fn gone(&self) -> DlqError {
        FileError::message(format!(
            "the writer of database file {} stopped before it answered (a panic in a write); \
             the write may or may not have been committed",
            self.path().display()
        ))
        .into_dlq()
    }
}

/// The writer thread: one group per transaction until the store is dropped.
fn serve(pool: &Arc<Pool>, jobs: &Receiver<Box<dyn Job>>) {
    let mut group: Vec<Box<dyn Job>> = Vec::new();
    while let Ok(first) = jobs.recv() {
        group.push(first);
        group.extend(jobs.try_iter().take(MAX_GROUP - 1));
        let committed = catch_unwind(AssertUnwindSafe(|| {
            pool.with_connection(Reservation::none(), |conn| commit(conn, &mut group))
        }));
        match committed {
            Ok(outcome) => {
                let outcome = outcome.err();
                for job in group.drain(..) {
                    job.answer(outcome.as_ref());
                }
            }
            // Dropping the jobs drops their reply channels: their callers hear the writer is
            // gone. The transaction was rolled back as the panic unwound through it.
            Err(_) => group.clear(),
        }
    }
}

/// Runs `group` in one `BEGIN IMMEDIATE` transaction and commits it.
fn commit(
    conn: &mut Connection,
    group: &mut [Box<dyn Job>],
) -> Result<(), Failed<rusqlite::Error, FileError>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in group.iter_mut() {
        job.run(&tx)?;
    }
    tx.commit()?;
    Ok(())
}

/// One write waiting for its group.
trait Job: Send {
    /// Runs the write inside the group's transaction. An error fails the group.
    fn run(&mut self, tx: &Connection) -> rusqlite::Result<()>;

    /// Answers the caller once the group is over: the write's own result if the group
    /// committed, otherwise the group's error.
    fn answer(self: Box<Self>, failed: Option<&FileError>);
}

/// A write and, once it ran, its result, waiting for the commit.
struct Pending<T, F> {
    op: Option<F>,
    result: Option<Result<T, DlqError>>,
    reply: oneshot::Sender<Result<T, DlqError>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, Fail> + Send,
{
    fn run(&mut self, tx: &Connection) -> rusqlite::Result<()> {
        let Some(op) = self.op.take() else {
            return Ok(());
        };
        tx.prepare_cached("SAVEPOINT job")?.execute([])?;
        match op(tx) {
            Ok(value) => {
                tx.prepare_cached("RELEASE job")?.execute([])?;
                self.result = Some(Ok(value));
            }
            Err(Failed::Store(verdict)) => {
                tx.prepare_cached("ROLLBACK TO job")?.execute([])?;
                tx.prepare_cached("RELEASE job")?.execute([])?;
                self.result = Some(Err(verdict));
            }
            Err(Failed::Sql(e)) => return Err(e),
        }
        Ok(())
    }

    fn answer(self: Box<Self>, failed: Option<&FileError>) {
        let answer = match (failed, self.result) {
            (Some(error), _) => Err(error.clone().into_dlq()),
            (None, Some(result)) => result,
            // Committed without running it: cannot happen (every job of a group runs before
            // the commit), but the caller must hear something true.
            (None, None) => Err(FileError::message(
                "a dead-letter write was skipped by its group commit".to_owned(),
            )
            .into_dlq()),
        };
        // The caller may have stopped waiting (its future was dropped): nothing to tell.
        let _ = self.reply.send(answer);
    }
}
