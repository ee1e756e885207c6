//! Group commit: one task writes every letter parked while its previous write ran, together,
//! and answers each caller once its letter is committed.
//!
//! - Callers send their letter (checked and encoded already, so a bad letter never reaches the
//!   writer) over a bounded channel and await a oneshot answer: parking never blocks a runtime
//!   worker, and a full queue makes callers wait their turn instead of growing without bound.
//! - The writer takes everything queued (up to [`MAX_GROUP`]) and writes it with one
//!   connection. New `msg_id`s, the usual case, go in one multi-row `INSERT .. ON CONFLICT DO
//!   NOTHING`, in a READ COMMITTED transaction of its own whose `BEGIN` and `COMMIT` are
//!   pipelined with it: one round trip, one commit, one WAL flush for the whole group. A
//!   `msg_id` that is there already (and a second letter of one `msg_id` in the same group) is
//!   merged ([`DeadLetter::absorb`]) in one READ COMMITTED transaction that locks those rows
//!   (`SELECT .. FOR UPDATE`, in `msg_id` order), so merges never lose an update and never
//!   overwrite. Each caller hears the outcome of the commit its letter was in; a caller is told
//!   "parked" only after that commit (durable with the server's default `synchronous_commit =
//!   on`).
//! - Both run READ COMMITTED whatever the session's default, so a row another writer just
//!   changed is waited for, never a serialization failure; deadlocks (and serialization
//!   failures, should one come) are tried again ([`retrying_conflicts`]). A group the
//!   server refuses for something in one letter (a data error) is written again one `msg_id`
//!   at a time, so only that letter's caller hears of it. Any other failure (the server down,
//!   the connection lost) fails every letter of the group with the server's error; the writer
//!   takes a new connection for the next group.
//! - The connection is a pooled one, held while letters keep coming and given back when the
//!   queue is empty, so a small shared pool is not starved.
//! - A group that takes longer than [`WRITE_TIMEOUT`] fails with an error saying its letters
//!   may or may not be parked, and its connection is closed (the server rolls back whatever
//!   had not committed).
//! - The task ends when the store is dropped, after writing what was queued.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use deadpool_postgres::Object;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::IsolationLevel;
use tokio_postgres::error::SqlState;

use super::rows::{self, Encoded, Fail, In};
use crate::sql::{Db, retrying_conflicts};
use retry_core::dlq::{DeadLetter, DlqError};

/// The most letters written together.
pub(super) const MAX_GROUP: usize = 512;

/// How many letters may wait for the writer before `park` waits for room.
const QUEUE: usize = 4 * MAX_GROUP;

/// How long one group may take, connecting included.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The answer a caller awaits.
type Answer = Result<(), DlqError>;

/// One letter waiting to be written, and its caller.
struct Job {
    /// The letter, checked and as its row stores it.
    encoded: Encoded,
    reply: oneshot::Sender<Answer>,
}

/// The handle `park` sends letters through; the task ends when it is dropped.
#[derive(Debug)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Starts the writing task for `db` on the current Tokio runtime.
    pub(super) fn spawn(db: Db) -> Self {
        let (jobs, queue) = mpsc::channel(QUEUE);
        tokio::spawn(run(db, queue));
        Writer { jobs }
    }

    /// Queues `letter` and waits until its group is committed (or failed).
    pub(super) async fn park(&self, server: &str, letter: &DeadLetter) -> Answer {
        let encoded = Encoded::new(letter.clone())?;
        let (reply, answer) = oneshot::channel();
        let job = Job { encoded, reply };
        if self.jobs.send(job).await.is_err() {
            return Err(stopped(server, "the letter was not parked"));
        }
        answer.await.unwrap_or_else(|_| {
            Err(stopped(
                server,
                "before it answered: the letter may or may not be parked",
            ))
        })
    }
}

/// The writer's task went away (its runtime shut down).
fn stopped(server: &str, what: &str) -> DlqError {
    DlqError::Io(format!("the dead-letter writer for PostgreSQL at {server} stopped {what}").into())
}

async fn run(db: Db, mut queue: mpsc::Receiver<Job>) {
    let mut connection: Option<Object> = None;
    let mut group = Vec::with_capacity(MAX_GROUP);
    while queue.recv_many(&mut group, MAX_GROUP).await > 0 {
        let jobs = std::mem::take(&mut group);
        let answers = match tokio::time::timeout(WRITE_TIMEOUT, write(&db, &mut connection, &jobs))
            .await
        {
            Ok(answers) => answers,
            Err(_) => {
                // Mid-statement: the session's state is unknown, so it is closed, not
                // pooled; the server rolls back whatever had not committed.
                if let Some(connection) = connection.take() {
                    drop(Object::take(connection));
                }
                let message = format!(
                    "PostgreSQL at {} did not finish writing {} dead letters within {WRITE_TIMEOUT:?}; they may or may not be parked",
                    db.server,
                    jobs.len()
                );
                jobs.iter().map(|_| Err(io(&message))).collect()
            }
        };
        let failed = answers.iter().filter(|a| a.is_err()).count();
        tracing::trace!(target: "retry_core::dlq", server = %db.server, letters = jobs.len(), failed, "dead-letter group written");
        for (job, answer) in jobs.into_iter().zip(answers) {
            // A caller that stopped waiting is not told; its letter was written all the same.
            let _ = job.reply.send(answer);
        }
        // The callers just answered often park again at once (a batch working through an
        // outage): let them run first, so that their letters join the next group instead of
        // waiting a whole commit for the one after.
        tokio::task::yield_now().await;
        if queue.is_empty() || connection.as_ref().is_some_and(|c| c.is_closed()) {
            connection = None;
        }
    }
}

fn io(message: &str) -> DlqError {
    DlqError::Io(message.into())
}

/// Writes `jobs` and answers each, in order.
async fn write(db: &Db, connection: &mut Option<Object>, jobs: &[Job]) -> Vec<Answer> {
    let client = match connection {
        Some(client) if !client.is_closed() => client,
        _ => match db.get().await {
            Ok(client) => connection.insert(client),
            Err(e) => {
                let message = format!(
                    "{}; {} dead letters not parked",
                    retry_core::error_chain(&*e),
                    jobs.len()
                );
                return jobs.iter().map(|_| Err(io(&message))).collect();
            }
        },
    };
    // Every letter of one `msg_id`, in the order they came; the `msg_id`s in byte order, the
    // order every writer locks rows in.
    let mut by_id: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, job) in jobs.iter().enumerate() {
        by_id.entry(job.encoded.msg_id()).or_default().push(i);
    }
    let ids: Vec<(&str, &[usize])> = by_id.iter().map(|(id, v)| (*id, v.as_slice())).collect();
    let mut answers: Vec<Option<Answer>> = jobs.iter().map(|_| None).collect();
    match write_ids(db, client, jobs, &ids, &mut answers).await {
        Ok(()) => {}
        Err(Fail::Sql(e)) if is_letter_error(&e) && ids.len() > 1 => {
            // One letter the server refuses must not fail the others: each `msg_id` alone.
            tracing::debug!(target: "retry_core::dlq", server = %db.server, error = %retry_core::error_chain(&e), "a dead-letter group was refused; writing its letters one by one");
            for one in &ids {
                if let Err(e) =
                    write_ids(db, client, jobs, std::slice::from_ref(one), &mut answers).await
                {
                    fail(&mut answers, one.1, &error(db, e, 1));
                }
            }
        }
        Err(e) => {
            let message = error(db, e, jobs.len());
            for (_, letters) in &ids {
                fail(&mut answers, letters, &message);
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(io("dead letter left unanswered by its group"))))
        .collect()
}

/// A failure of writing `letters` letters together, as each of their callers hears it: the
/// whole chain in words (each caller gets a `DlqError::Io` of its own, which says "dead-letter
/// store failed" above it).
fn error(db: &Db, e: Fail, letters: usize) -> String {
    let e = match e {
        Fail::Sql(e) => retry_core::error_chain(&*db.error(e)).to_string(),
        Fail::Store(e) => retry_core::error_chain(&e).to_string(),
    };
    if letters > 1 {
        format!("{e} (not parked, nor the other letters written with it: {letters} in all)")
    } else {
        format!("{e} (not parked)")
    }
}

fn fail(answers: &mut [Option<Answer>], letters: &[usize], message: &str) {
    for &i in letters {
        answers[i].get_or_insert_with(|| Err(io(message)));
    }
}

/// Whether the server refused a statement for what a letter holds (a data exception, a
/// constraint, a row or key too large), rather than for its own state.
fn is_letter_error(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        matches!(&code.code()[..2], "22" | "23" | "54") && *code != SqlState::UNIQUE_VIOLATION
    })
}

/// Writes the letters of `ids` (each `msg_id` with its letters' indexes in `jobs`), filling in
/// their answers. `Err` when nothing of them was written.
async fn write_ids(
    db: &Db,
    client: &mut Object,
    jobs: &[Job],
    ids: &[(&str, &[usize])],
    answers: &mut [Option<Answer>],
) -> Result<(), Fail> {
    let parked_at = SystemTime::now();
    let firsts: Vec<&Encoded> = ids.iter().map(|(_, v)| &jobs[v[0]].encoded).collect();
    let inserted: HashSet<String> = retrying_conflicts!(
        db,
        "park",
        rows::insert_new(&*client, &firsts, &parked_at, In::Own)
    )?;
    // What is left to merge: every letter of a `msg_id` that was there, the later letters of
    // one that was not.
    let mut merges: Vec<(&str, &[usize])> = Vec::new();
    for &(id, letters) in ids {
        if inserted.contains(id) {
            answers[letters[0]] = Some(Ok(()));
            if letters.len() > 1 {
                merges.push((id, &letters[1..]));
            }
        } else {
            merges.push((id, letters));
        }
    }
    if merges.is_empty() {
        return Ok(());
    }
    let merged = retrying_conflicts!(db, "park", merge(client, jobs, &merges, &parked_at));
    match merged {
        Ok(outcomes) => {
            for (letters, outcome) in merges.iter().map(|m| m.1).zip(outcomes) {
                match outcome {
                    Ok(()) => letters.iter().for_each(|&i| answers[i] = Some(Ok(()))),
                    Err(e) => {
                        for &i in letters {
                            answers[i] = Some(Err(rows::same_error(&e)));
                        }
                    }
                }
            }
        }
        Err(e) => {
            let letters: Vec<usize> = merges.iter().flat_map(|m| m.1.iter().copied()).collect();
            fail(answers, &letters, &error(db, e, letters.len()));
        }
    }
    Ok(())
}

/// Merges each `msg_id`'s letters into its row, in one transaction: the outcome for each.
async fn merge(
    client: &mut Object,
    jobs: &[Job],
    merges: &[(&str, &[usize])],
    parked_at: &SystemTime,
) -> Result<Vec<Result<(), DlqError>>, Fail> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await?;
    let ids: Vec<&str> = merges.iter().map(|m| m.0).collect();
    let mut stored = rows::lock_letters(&tx, &ids).await?;
    let mut outcomes = Vec::with_capacity(merges.len());
    let (mut updates, mut inserts) = (Vec::new(), Vec::new());
    for &(id, letters) in merges {
        let (merged, there) = match stored.remove(id) {
            Some(Ok(mut letter)) => {
                for &i in letters {
                    letter.absorb(jobs[i].encoded.letter());
                }
                (letter, true)
            }
            Some(Err(e)) => {
                outcomes.push(Err(e));
                continue;
            }
            // Purged (it was resolved) since the insert found it: a new letter after all.
            None => {
                let mut letter = jobs[letters[0]].encoded.letter().clone();
                for &i in &letters[1..] {
                    letter.absorb(jobs[i].encoded.letter());
                }
                (letter, false)
            }
        };
        match Encoded::new(merged) {
            Ok(encoded) if there => updates.push(encoded),
            Ok(encoded) => inserts.push(encoded),
            Err(e) => {
                outcomes.push(Err(e));
                continue;
            }
        }
        outcomes.push(Ok(()));
    }
    rows::update_merged(&tx, &updates.iter().collect::<Vec<_>>(), parked_at).await?;
    let inserted = rows::insert_new(
        &tx,
        &inserts.iter().collect::<Vec<_>>(),
        parked_at,
        In::Caller,
    )
    .await?;
    tx.commit().await?;
    // A purged letter parked again by someone else at the same moment: rare enough to hand
    // back to the caller rather than loop.
    for (outcome, &(id, _)) in outcomes.iter_mut().zip(merges) {
        let lost_race =
            outcome.is_ok() && inserts.iter().any(|e| e.msg_id() == id) && !inserted.contains(id);
        if lost_race {
            *outcome = Err(DlqError::Io(
                format!("dead letter `{id}` was purged and parked again by another writer at the same moment; not parked, park it again").into(),
            ));
        }
    }
    Ok(outcomes)
}
