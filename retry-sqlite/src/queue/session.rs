//! A transaction lent out of the queue ([`Session`]): a write of its group that holds the
//! file's writer until it ends, its statements sent to the thread and run there.
//!
//! - It works in its own savepoint of the group's transaction: ended with
//!   [`end`](Session::end) and a write that keeps it, it is released into the group and its
//!   answer waits for the group's `COMMIT`; dropped (a rollback, a crash of the handler, a
//!   dropped future), the thread rolls the savepoint back and goes on with the group.
//! - Its opening can be refused by what it reads first (a claim of a key that is done): then
//!   nothing of it stays, and the answer waits for the group's `COMMIT` like a write's, since
//!   what it read may be the group's.
//! - A prelude (`begin_for`'s mark on the claim's row) runs as a write of the running group;
//!   the transaction itself opens first in the next group, once the prelude is on disk.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::Writes;
use super::job::{Answer, Failed, Job, Ran, Ticket, Wait};
use crate::sql::{self, Fail, Failure, FromSqliteError};

/// How a lent transaction starts: lent with `T`, or refused with `R` (nothing of it kept).
pub(crate) enum Opened<T, R> {
    Lent(T, Session),
    Refused(R),
}

/// A transaction lent out of the queue: its statements run on the file's writer thread, in
/// its savepoint of the group's transaction. Dropped, it is rolled back there.
pub(crate) struct Session {
    /// `None` once it ended.
    calls: Option<Sender<Call>>,
}

/// The session ended before the call (an earlier statement ended the group's transaction, a
/// panic rolled it back, or its thread is gone).
#[derive(Debug)]
pub(crate) struct Closed;

enum Call {
    /// A statement; `false` when the session is over after it (it panicked).
    Run(Box<dyn FnOnce(&Connection) -> bool + Send>),
    /// The last statement, and whether the session's writes are kept.
    End(Box<dyn FnOnce(&Connection) -> Ending + Send>),
}

struct Ending {
    keep: bool,
    answer: Option<Answer>,
}

/// What a statement run in the session returned, and whether the transaction is still open.
struct Ran1<R> {
    value: std::thread::Result<R>,
    open: bool,
}

impl Session {
    /// Runs `f` on the session's connection and returns what it returned, and whether the
    /// transaction is still open after it (`f` may end it). A panic in `f` rolls the session
    /// back and goes on unwinding here.
    pub(crate) async fn run<R, F>(&mut self, f: F) -> Result<(R, bool), Closed>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> R + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let call = Call::Run(Box::new(move |conn: &Connection| {
            let value = catch_unwind(AssertUnwindSafe(|| f(conn)));
            let go_on = value.is_ok();
            let open = go_on && !conn.is_autocommit();
            let _ = reply.send(Ran1 { value, open });
            open
        }));
        let sent = self.calls.as_ref().is_some_and(|c| c.send(call).is_ok());
        if !sent {
            self.calls = None;
            return Err(Closed);
        }
        let ran = receive(answer).await.ok_or(Closed)?;
        if !ran.open {
            self.calls = None;
        }
        match ran.value {
            Ok(value) => Ok((value, ran.open)),
            Err(panic) => resume_unwind(panic),
        }
    }

    /// Runs `finish` as the session's last statement: `Ok` keeps the session's writes in the
    /// group and is answered once the group committed; an error rolls them back.
    pub(crate) async fn end<T, E, F>(mut self, writes: &Writes, finish: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: FromSqliteError + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Fail<E>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let (path, busy) = (writes.path.clone(), writes.wait.busy);
        let call = Call::End(Box::new(move |conn: &Connection| {
            let (keep, result) = match finish(conn) {
                Ok(value) => (true, Ok(value)),
                Err(Failure::Store(verdict)) => (false, Err(verdict)),
                Err(Failure::Sql(e)) => (false, Err(E::from_sqlite(sql::error(&path, busy, e)))),
            };
            Ending {
                keep,
                answer: Some(Box::new(move |failed: Option<&Failed>| {
                    let answer = match (failed, result) {
                        (Some(failed), Ok(_)) => Err(E::from_sqlite(failed.error(&path, busy))),
                        (_, result) => result,
                    };
                    let _ = reply.send(answer);
                })),
            }
        }));
        let sent = self.calls.take().is_some_and(|c| c.send(call).is_ok());
        if !sent {
            return Err(E::from_sqlite(writes.gone()));
        }
        receive(answer)
            .await
            .unwrap_or_else(|| Err(E::from_sqlite(writes.gone())))
    }

    /// Whether the session can still run statements.
    pub(crate) fn is_open(&self) -> bool {
        self.calls.is_some()
    }
}

/// A reply of the thread: awaited in a runtime, waited for on this thread outside one.
async fn receive<T>(answer: oneshot::Receiver<T>) -> Option<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return answer.blocking_recv().ok();
    }
    answer.await.ok()
}

/// What decides whether a session opens, run first in its savepoint.
pub(crate) type Start<T, R, E> =
    Box<dyn FnOnce(&Connection) -> Result<Result<T, R>, Fail<E>> + Send>;
/// A write of the running group that the session opens after, once it is on disk.
pub(crate) type Prelude<E> = Box<dyn FnOnce(&Connection) -> Result<(), Fail<E>> + Send>;

impl Writes {
    /// Lends a transaction out of the queue: `start` runs first in its savepoint, and decides
    /// whether it is lent (`Ok(Ok(t))`) or refused (`Ok(Err(r))`, its writes undone and the
    /// answer given once the group committed). With a `prelude`, that runs first as a write of
    /// the running group, and the transaction opens at the head of the next group.
    pub(crate) async fn session<T, R, E>(
        &self,
        prelude: Option<Prelude<E>>,
        start: Start<T, R, E>,
    ) -> Result<Opened<T, R>, E>
    where
        T: Send + 'static,
        R: Send + 'static,
        E: FromSqliteError + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let ticket = Ticket::default();
        self.send(Box::new(Open {
            ticket: ticket.clone(),
            writes: self.clone(),
            prelude,
            continued: false,
            start,
            reply,
        }))?;
        self.answer(&ticket, answer).await
    }
}

/// The queue's entry for a lent transaction.
struct Open<T, R, E> {
    ticket: Ticket,
    writes: Writes,
    prelude: Option<Prelude<E>>,
    /// Its prelude ran in the group before: it was taken then.
    continued: bool,
    start: Start<T, R, E>,
    reply: oneshot::Sender<Result<Opened<T, R>, E>>,
}

/// The answer of an entry once its group ended: `result` if the group committed (or `result`
/// is an error of its own), the group's failure otherwise.
fn answer_later<T, R, E>(
    reply: oneshot::Sender<Result<Opened<T, R>, E>>,
    writes: Writes,
    result: Result<Opened<T, R>, E>,
) -> Option<Answer>
where
    T: Send + 'static,
    R: Send + 'static,
    E: FromSqliteError + Send + 'static,
{
    Some(Box::new(move |failed: Option<&Failed>| {
        let answer = match (failed, result) {
            (Some(failed), Ok(_)) => {
                Err(E::from_sqlite(failed.error(&writes.path, writes.wait.busy)))
            }
            (_, result) => result,
        };
        let _ = reply.send(answer);
    }))
}

impl<T, R, E> Job for Open<T, R, E>
where
    T: Send + 'static,
    R: Send + 'static,
    E: FromSqliteError + Send + 'static,
{
    fn take(&self) -> bool {
        self.continued || self.ticket.take()
    }

    fn wait(&self) -> Wait {
        self.writes.wait
    }

    fn run(mut self: Box<Self>, conn: &Connection) -> Ran {
        let sql_error =
            |writes: &Writes, e| E::from_sqlite(sql::error(&writes.path, writes.wait.busy, e));
        if let Some(prelude) = self.prelude.take() {
            let failed = match prelude(conn) {
                Ok(()) => None,
                Err(Failure::Store(verdict)) => Some(verdict),
                Err(Failure::Sql(e)) => Some(sql_error(&self.writes, e)),
            };
            if let Some(e) = failed {
                return Ran {
                    keep: false,
                    answer: answer_later(self.reply, self.writes, Err(e)),
                    then: None,
                };
            }
            self.continued = true;
            return Ran {
                keep: true,
                answer: None,
                then: Some(self),
            };
        }
        let Open {
            writes,
            start,
            reply,
            ..
        } = *self;
        let refused = match start(conn) {
            Ok(Ok(value)) => {
                let (calls, session) = channel();
                let lent = Session { calls: Some(calls) };
                // A caller that stopped waiting drops the session with the failed send: the
                // loop then finds no sender and rolls back.
                let _ = reply.send(Ok(Opened::Lent(value, lent)));
                return serve_session(conn, &session);
            }
            Ok(Err(refused)) => Ok(Opened::Refused(refused)),
            Err(Failure::Store(verdict)) => Err(verdict),
            Err(Failure::Sql(e)) => Err(sql_error(&writes, e)),
        };
        Ran {
            keep: false,
            answer: answer_later(reply, writes, refused),
            then: None,
        }
    }

    fn fail(self: Box<Self>, failed: &Failed) {
        let error = failed.error(&self.writes.path, self.writes.wait.busy);
        let _ = self.reply.send(Err(E::from_sqlite(error)));
    }
}

/// Runs the statements of a lent transaction until it ends.
fn serve_session(conn: &Connection, session: &Receiver<Call>) -> Ran {
    loop {
        match session.recv() {
            Ok(Call::Run(statement)) => {
                if !statement(conn) {
                    return Ran::undone();
                }
            }
            Ok(Call::End(finish)) => {
                let Ending { keep, answer } = finish(conn);
                return Ran {
                    keep,
                    answer,
                    then: None,
                };
            }
            // Dropped without an end: rolled back.
            Err(_) => return Ran::undone(),
        }
    }
}

impl Ran {
    /// A write whose savepoint is rolled back, with nothing to answer.
    fn undone() -> Self {
        Ran {
            keep: false,
            answer: None,
            then: None,
        }
    }
}
