//! The thread of a file's write queue: one group of writes per transaction, until every store
//! of the file is gone (see the [module docs](super) for why it works this way).

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use rusqlite::Connection;

use super::job::{Answer, Failed, Job, MAX_GROUP, Ran, Wait};
use crate::sql;
use crate::sql::What;

const SAVEPOINT: &str = "SAVEPOINT retry_sqlite_write";
const RELEASE: &str = "RELEASE retry_sqlite_write";
const ROLLBACK_TO: &str = "ROLLBACK TO retry_sqlite_write";

/// The thread: runs groups until the queue's sender is dropped, then finishes what it holds.
pub(super) fn serve(path: &Path, jobs: &Receiver<Box<dyn Job>>) {
    let mut writer = Writer {
        path: path.to_path_buf(),
        conn: None,
        next: VecDeque::new(),
    };
    loop {
        let first = match writer.next.pop_front() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        if first.take() {
            writer.group(first, jobs);
        }
    }
}

/// The thread's state between groups.
struct Writer {
    /// The file, for the connection and the thread's own messages.
    path: PathBuf,
    /// The write connection: opened when first needed, and again after a failure left it in
    /// a transaction it could not end.
    conn: Option<(Connection, Settings)>,
    /// Writes for the next group: those that must begin after this group's commit, and those
    /// that ask for a durability the running group does not have.
    next: VecDeque<Box<dyn Job>>,
}

/// What the connection is set to now.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Settings {
    busy: Duration,
    full: bool,
}

/// The writes of the running transaction, waiting for its end.
#[derive(Default)]
struct Group {
    answers: Vec<Answer>,
    then: Vec<Box<dyn Job>>,
}

impl Group {
    /// The transaction ended without being committed: every write in it is told.
    fn fail(&mut self, failed: &Failed) {
        for answer in self.answers.drain(..) {
            answer(Some(failed));
        }
        for job in self.then.drain(..) {
            job.fail(failed);
        }
    }
}

impl Writer {
    /// One transaction: `first`, then every write waiting once it finished.
    fn group(&mut self, first: Box<dyn Job>, jobs: &Receiver<Box<dyn Job>>) {
        let full = first.wait().full;
        if let Err(failed) = self.begin(first.wait()) {
            first.fail(&failed);
            return;
        }
        let mut group = Group::default();
        self.run(first, full, &mut group);
        let held = self.next.len();
        let waiting: Vec<Box<dyn Job>> = self
            .next
            .drain(..)
            .chain(jobs.try_iter().take(MAX_GROUP.saturating_sub(held)))
            .collect();
        for job in waiting {
            if job.wait().full && !full {
                // `synchronous` cannot change inside a transaction: the next group syncs.
                self.next.push_back(job);
                continue;
            }
            if job.take() {
                self.run(job, full, &mut group);
            }
        }
        self.commit(group);
    }

    /// The connection (opened if needed) set for `wait`, inside `BEGIN IMMEDIATE`.
    fn begin(&mut self, wait: Wait) -> Result<&Connection, Failed> {
        let wanted = Settings {
            busy: sql::clamp_busy(wait.busy),
            full: wait.full,
        };
        let failed = |what, e: rusqlite::Error| Failed {
            what,
            cause: Some(Arc::new(e)),
        };
        if self.conn.is_none() {
            let conn = sql::connect(&self.path, wanted.busy, wanted.full).map_err(|e| {
                let cause = match e {
                    sql::Error::OpenFailed(e) => Some(e.into_source()),
                    sql::Error::Locked(e) => Some(e.into_source()),
                    sql::Error::Sql { source, .. } => Some(source),
                    _ => None,
                };
                Failed {
                    what: What::Begin,
                    cause: cause.map(Arc::new),
                }
            })?;
            self.conn = Some((conn, wanted));
        }
        let Some((conn, settings)) = &mut self.conn else {
            return Err(Failed {
                what: What::Begin,
                cause: None,
            });
        };
        if settings.busy != wanted.busy {
            conn.busy_timeout(wanted.busy)
                .map_err(|e| failed(What::Begin, e))?;
            settings.busy = wanted.busy;
        }
        if settings.full != wanted.full {
            conn.pragma_update(None, "synchronous", sql::synchronous(wanted.full))
                .map_err(|e| failed(What::Begin, e))?;
            settings.full = wanted.full;
        }
        conn.prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut s| s.execute([]))
            .map_err(|e| failed(What::Begin, e))?;
        Ok(conn)
    }

    /// Runs `job` in a savepoint of the group's transaction (begun again if an earlier write
    /// ended it).
    fn run(&mut self, job: Box<dyn Job>, full: bool, group: &mut Group) {
        let open = self.conn.as_ref().is_some_and(|(c, _)| !c.is_autocommit());
        if !open {
            let wait = Wait { full, ..job.wait() };
            if let Err(failed) = self.begin(wait) {
                job.fail(&failed);
                return;
            }
        }
        let Some((conn, _)) = &self.conn else {
            return;
        };
        if let Err(e) = execute(conn, SAVEPOINT) {
            job.fail(&Failed {
                what: What::Begin,
                cause: Some(Arc::new(e)),
            });
            return;
        }
        // A panic in a write (there should be none; a handler's own closures are caught where
        // they run) drops the write: its caller hears that the writer stopped.
        let ran = catch_unwind(AssertUnwindSafe(|| job.run(conn)));
        if conn.is_autocommit() {
            // SQLite (or the write's own SQL) ended the group's transaction: nothing of the
            // group can be committed as one any more.
            let failed = Failed {
                what: What::Ended,
                cause: None,
            };
            group.fail(&failed);
            if let Ok(Ran { answer, then, .. }) = ran {
                if let Some(answer) = answer {
                    answer(Some(&failed));
                }
                if let Some(then) = then {
                    then.fail(&failed);
                }
            }
            return;
        }
        let keep = matches!(ran, Ok(Ran { keep: true, .. }));
        let ended = if keep {
            execute(conn, RELEASE)
        } else {
            execute(conn, ROLLBACK_TO).and_then(|()| execute(conn, RELEASE))
        };
        if let Ok(Ran { answer, then, .. }) = ran {
            group.answers.extend(answer);
            group.then.extend(then);
        }
        if let Err(e) = ended {
            tracing::warn!(target: "retry_core::idempotency", path = %self.path.display(), error = %retry_core::error_chain(&e), "ending a write's savepoint failed; rolling back its group");
            self.roll_back();
            group.fail(&Failed {
                what: What::Ended,
                cause: Some(Arc::new(e)),
            });
        }
    }

    /// `COMMIT`, then every write of the group is answered; the writes to begin after it go
    /// first in the next group.
    fn commit(&mut self, mut group: Group) {
        let Some((conn, _)) = &self.conn else {
            return;
        };
        if conn.is_autocommit() {
            // Ended by a write, whose failure was told already; nothing is left to answer.
            return;
        }
        match execute(conn, "COMMIT") {
            Ok(()) => {
                for answer in group.answers.drain(..) {
                    answer(None);
                }
                self.next.extend(group.then.drain(..));
            }
            Err(e) => {
                self.roll_back();
                group.fail(&Failed {
                    what: What::Commit,
                    cause: Some(Arc::new(e)),
                });
            }
        }
    }

    /// `ROLLBACK` of the group's transaction; a connection that stays in it is closed.
    fn roll_back(&mut self) {
        let Some((conn, _)) = &self.conn else {
            return;
        };
        if conn.is_autocommit() {
            return;
        }
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            tracing::warn!(target: "retry_core::idempotency", path = %self.path.display(), error = %retry_core::error_chain(&e), "rolling back a write transaction failed; closing its connection");
        }
        if self.conn.as_ref().is_some_and(|(c, _)| !c.is_autocommit()) {
            self.conn = None;
        }
    }
}

fn execute(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
