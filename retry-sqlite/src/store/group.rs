//! Group commit: the claims taken in the handler's transaction
//! ([`claim_in_transaction`](TransactionalStore::claim_in_transaction)) of concurrent requests
//! share one write transaction and its `COMMIT`, one `fsync` for all of them with
//! `synchronous=FULL` (DESIGN.md, "Cost": stores may share commits between concurrent requests).
//!
//! Why: SQLite has one writer. Requests of this store queue for its writer permit and, without
//! this, each paid its own `COMMIT` (an `fsync`) while all the others waited for the lock.
//!
//! How:
//! - Each request (a member) works inside `SAVEPOINT retry_core_member` of the shared
//!   transaction. A failure, a refused claim or a drop rolls back to it (its claim and its writes
//!   go, the others' stay); its `commit_done` writes `done` and releases it.
//! - A member done with the connection while other claims wait for the writer permit parks the
//!   open transaction in [`Shared`] and lets the permit go: the next claim in line joins it. A
//!   task spawned at the group's first park queues for the permit behind them and commits the
//!   group; a member done while nobody waits commits it at once, and so does any other writer of
//!   the store that gets the permit first (`begin`, `begin_for`).
//! - The task queues behind the claims waiting at the group's first park; claims that come later
//!   queue behind the task, so a group is never larger than the number of requests that were
//!   waiting at once, and a member's answer waits at most for their handlers.
//! - A member's answer waits for the group's `COMMIT`: `commit_done` returns after it, and a
//!   claim that joined and was refused (a duplicate of a key done in the group) is answered only
//!   once what it read is durable. If the `COMMIT` fails, or a member's SQL ends the transaction,
//!   every member gets an error: nothing of the group happened, and its keys are free. That is
//!   the contract's rule (a key is freed only when its run's effect is known not to have
//!   happened): under this path the run's effects are its writes in the transaction.
//!
//! Every transaction of the store runs on a [`TxConnection`]: one of its own (`begin`,
//! `begin_for`) or a member of a group, rolled back as it should be wherever it is dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

use super::*;
use crate::sql::Reservation;

/// The savepoint of the member using the shared transaction.
const SAVEPOINT: &str = "SAVEPOINT retry_core_member";
const RELEASE_SAVEPOINT: &str = "RELEASE retry_core_member";
const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO retry_core_member; RELEASE retry_core_member";

/// A store's shared transaction, while no member uses it, and who waits to join it.
#[derive(Default)]
pub(super) struct Shared {
    /// Claims waiting for the writer permit: each will join a parked transaction.
    joiners: AtomicUsize,
    parked: Mutex<Option<Parked>>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("joiners", &self.joiners.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// An open shared transaction between two members, on a connection that holds no writer permit.
struct Parked {
    conn: PooledConnection,
    group: Group,
}

/// What the members of one shared transaction have in common besides its connection.
pub(super) struct Group {
    /// Members whose savepoint was released: their writes wait for the `COMMIT`.
    members: usize,
    outcome: watch::Sender<Option<Outcome>>,
    /// A task is queued for the writer permit to commit the group.
    committer: bool,
}

/// How a shared transaction ended.
#[derive(Clone, Debug)]
pub(super) enum Outcome {
    Committed,
    Failed(Arc<StoreError>),
}

/// What a claim got with the writer permit: a parked shared transaction to join, or the
/// reservation of a connection for a new one.
pub(super) enum Seat {
    Joined(TxConnection),
    New(Reservation, Arc<Shared>),
}

impl Seat {
    /// The claim's connection, a member of its shared transaction.
    pub(super) fn connection(self, pool: &Arc<Pool>) -> Result<TxConnection, StoreError> {
        Ok(match self {
            Seat::Joined(conn) => conn,
            Seat::New(reservation, shared) => {
                let conn = pool
                    .checkout(reservation)
                    .map_err(StoreError::from_sqlite)?;
                TxConnection::member(conn, shared, Group::new())
            }
        })
    }
}

/// A member's part of a shared transaction, carried by its [`TxConnection`].
pub(super) struct Member {
    shared: Arc<Shared>,
    group: Group,
    /// Its savepoint is open.
    savepoint: bool,
}

/// How a member learns the end of the shared transaction it was in.
pub(super) enum Commit {
    Known(Outcome),
    Pending(watch::Receiver<Option<Outcome>>),
}

impl Commit {
    /// `Ok` once the group's writes are committed; the error of its `COMMIT` otherwise.
    pub(super) async fn committed(self, path: &Path) -> Result<(), StoreError> {
        let outcome = match self {
            Commit::Known(outcome) => outcome,
            // `None` only if the transaction was dropped uncommitted (its store went away with
            // it): rolled back. Never taken for a commit that was not seen.
            Commit::Pending(mut pending) => pending
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|outcome| outcome.clone())
                .unwrap_or_else(|| {
                    Outcome::Failed(Arc::new(StoreError::Unavailable(
                        "the store was dropped before the shared transaction committed".into(),
                    )))
                }),
        };
        match outcome {
            Outcome::Committed => Ok(()),
            Outcome::Failed(cause) => Err(StoreError::Unavailable(Box::new(SharedCommitFailed {
                path: path.to_path_buf(),
                cause,
            }))),
        }
    }
}

/// The shared transaction a member's writes were in did not commit.
#[derive(Debug, thiserror::Error)]
#[error(
    "the transaction on database file {} that this call shared with concurrent ones did not commit; nothing of it was kept",
    .path.display()
)]
struct SharedCommitFailed {
    path: PathBuf,
    #[source]
    cause: Arc<StoreError>,
}

impl Group {
    fn new() -> Self {
        Group {
            members: 0,
            outcome: watch::Sender::new(None),
            committer: false,
        }
    }

    /// Tells the members how the transaction ended; `None` when it had none.
    fn end(self, outcome: Outcome) -> Option<Commit> {
        if self.members == 0 {
            return None;
        }
        self.outcome.send_replace(Some(outcome.clone()));
        Some(Commit::Known(outcome))
    }
}

impl Parked {
    /// `COMMIT` (a `ROLLBACK` if it failed with the transaction still open), then the members
    /// are told; the connection goes back to the pool.
    fn commit(self) {
        let Parked { conn, group } = self;
        let outcome = commit(&conn);
        drop(conn);
        group.end(outcome);
    }
}

fn commit(conn: &PooledConnection) -> Outcome {
    let result = conn
        .connection()
        .map_err(StoreError::from_sqlite)
        .and_then(|c| {
            c.execute_batch("COMMIT").map_err(|e| {
                roll_back_in_place(conn);
                StoreError::from_sqlite(conn.pool().error(e))
            })
        });
    match result {
        Ok(()) => Outcome::Committed,
        Err(e) => Outcome::Failed(Arc::new(e)),
    }
}

impl Shared {
    /// Waits (at most the busy timeout) for the writer permit as a claim that may join a parked
    /// shared transaction, counted as a joiner meanwhile.
    pub(super) async fn seat(self: &Arc<Self>, pool: &Pool) -> Result<Seat, StoreError> {
        struct Joining<'a>(&'a AtomicUsize);
        impl Drop for Joining<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.joiners.fetch_add(1, Ordering::SeqCst);
        let joining = Joining(&self.joiners);
        let writer = pool
            .writer_permit()
            .await
            .map_err(StoreError::from_sqlite)?;
        drop(joining);
        // Stable while the permit is held: only its holder parks or takes a transaction.
        if let Some(Parked { mut conn, group }) = self.take() {
            conn.hold_writer(writer);
            // A member from now on: dropped before its claim, it parks the transaction again.
            return Ok(Seat::Joined(TxConnection::member(
                conn,
                Arc::clone(self),
                group,
            )));
        }
        let reservation = pool.reserve().await.map_err(StoreError::from_sqlite)?;
        Ok(Seat::New(reservation.with_writer(writer), Arc::clone(self)))
    }

    /// Commits the parked transaction, if any: for a writer that holds the permit and will not
    /// join it.
    pub(super) fn commit_parked(&self) {
        if let Some(parked) = self.take() {
            parked.commit();
        }
    }

    fn take(&self) -> Option<Parked> {
        self.parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn park(&self, parked: Parked) {
        *self.parked.lock().unwrap_or_else(PoisonError::into_inner) = Some(parked);
    }
}

/// The task that commits a parked group: it queues for the writer permit behind the claims that
/// were waiting when the group first parked, so they join first.
async fn commit_in_turn(shared: Arc<Shared>, pool: Arc<Pool>) {
    let writer = pool.writer_in_turn().await;
    let Some(parked) = shared.take() else {
        // Committed already, by a member or another writer.
        return;
    };
    let path = pool.path.clone();
    let committed = holding_lock(&path, move || {
        parked.commit();
        Ok::<_, StoreError>(())
    })
    .await;
    if let Err(e) = committed {
        // The blocking task failed before its `COMMIT`: the transaction was dropped, rolled back,
        // and the members were told (their wait ends with the sender).
        tracing::warn!(target: "retry_core::idempotency", path = %path.display(), error = %retry_core::error_chain(&e), "committing a shared transaction failed");
    }
    drop(writer);
}

/// A pooled connection inside `BEGIN IMMEDIATE`, rolled back in place when dropped. Then the
/// pooled connection goes back to the pool if the rollback worked, and is closed otherwise.
/// A member of a shared transaction (see the [module docs](self)) rolls back only its
/// savepoint, and leaves the transaction to the others.
pub(super) struct TxConnection {
    /// `None` once parked for the next member of its shared transaction.
    pub(super) pooled: Option<PooledConnection>,
    pub(super) member: Option<Member>,
}

impl TxConnection {
    /// A connection of a transaction of its own (`begin`, `begin_for`).
    pub(super) fn plain(pooled: PooledConnection) -> Self {
        TxConnection {
            pooled: Some(pooled),
            member: None,
        }
    }

    pub(super) fn connection(&self) -> Result<&Connection, Fail> {
        self.pooled
            .as_ref()
            .ok_or_else(sql::lost_connection)
            .and_then(PooledConnection::connection)
            .map_err(|e| Fail::Store(StoreError::from_sqlite(e)))
    }

    pub(super) fn pool(&self) -> Result<&Arc<Pool>, Fail> {
        self.pooled
            .as_ref()
            .map(PooledConnection::pool)
            .ok_or_else(|| Fail::Store(StoreError::from_sqlite(sql::lost_connection())))
    }

    /// Whether its transaction is still open.
    pub(super) fn is_open(&self) -> bool {
        self.connection().is_ok_and(|c| !c.is_autocommit())
    }
}

impl Drop for TxConnection {
    fn drop(&mut self) {
        if self.member.is_some() {
            self.roll_back_savepoint();
            // Never an `fsync` here: the shared transaction is parked for a task to commit.
            let _ = self.leave(false);
            return;
        }
        if let Some(pooled) = &self.pooled {
            roll_back_in_place(pooled);
        }
    }
}

/// `ROLLBACK` of `conn`'s open transaction, if any, in place: cheap enough for any thread, async
/// ones included (rolling back a WAL transaction discards its pages and releases the write lock,
/// with no disk write and no lock wait). A failure is logged; the connection, still in its
/// transaction, is then closed rather than pooled (`PooledConnection::drop`).
pub(super) fn roll_back_in_place(conn: &PooledConnection) {
    let Ok(c) = conn.connection() else {
        return;
    };
    if c.is_autocommit() {
        return;
    }
    if let Err(e) = c.execute_batch("ROLLBACK") {
        tracing::warn!(target: "retry_core::idempotency", path = %conn.pool().path.display(), error = %retry_core::error_chain(&e), "rolling back a transaction failed; closing its connection instead");
    }
}

impl TxConnection {
    /// `conn` (holding the writer permit) as a member of `group`.
    fn member(conn: PooledConnection, shared: Arc<Shared>, group: Group) -> Self {
        TxConnection {
            pooled: Some(conn),
            member: Some(Member {
                shared,
                group,
                savepoint: false,
            }),
        }
    }

    /// Opens the member's savepoint (after `BEGIN IMMEDIATE` for a new group).
    pub(super) fn open_savepoint(&mut self) -> Result<(), Fail> {
        let c = self.connection()?;
        if c.is_autocommit() {
            c.execute_batch("BEGIN IMMEDIATE")?;
        }
        c.execute_batch(SAVEPOINT)?;
        if let Some(member) = &mut self.member {
            member.savepoint = true;
        }
        Ok(())
    }

    /// Whether this connection is a member of a shared transaction.
    pub(super) fn is_member(&self) -> bool {
        self.member.is_some()
    }

    /// The member's writes are final: its savepoint is released into the group.
    pub(super) fn release_savepoint(&mut self) -> Result<(), Fail> {
        let c = self.connection()?;
        c.execute_batch(RELEASE_SAVEPOINT)?;
        if let Some(member) = &mut self.member {
            member.savepoint = false;
            member.group.members += 1;
        }
        Ok(())
    }

    /// Undoes the member's writes (its savepoint), if it has any. Should that fail, the whole
    /// transaction is rolled back and [`leave`](Self::leave) tells the group.
    pub(super) fn roll_back_savepoint(&mut self) {
        let Some(member) = &mut self.member else {
            return;
        };
        if !std::mem::take(&mut member.savepoint) {
            return;
        }
        let Some(conn) = &self.pooled else {
            return;
        };
        let Ok(c) = conn.connection() else {
            return;
        };
        if c.is_autocommit() {
            return;
        }
        if let Err(e) = c.execute_batch(ROLLBACK_TO_SAVEPOINT) {
            tracing::warn!(target: "retry_core::idempotency", path = %conn.pool().path.display(), error = %retry_core::error_chain(&e), "rolling back to a member's savepoint failed; rolling back the shared transaction");
            roll_back_in_place(conn);
        }
    }

    /// The member is done with the connection (its savepoint released or rolled back). With no
    /// members left in the group, the transaction is rolled back. Otherwise, while claims wait
    /// for the writer permit (or when `commit_here` is false: a drop, which must not wait for an
    /// `fsync`), the transaction is parked for them and a task commits it in turn; else it is
    /// committed here. `None`: nothing to wait for (no member's writes were pending).
    pub(super) fn leave(&mut self, commit_here: bool) -> Option<Commit> {
        let Member { shared, group, .. } = self.member.take()?;
        let conn = self.pooled.as_ref()?;
        let Ok(c) = conn.connection() else {
            return group.end(Outcome::Failed(Arc::new(StoreError::from_sqlite(
                sql::lost_connection(),
            ))));
        };
        if c.is_autocommit() {
            // A member's SQL ended it, or SQLite rolled it back after an error.
            let ended = TransactionEnded {
                path: conn.pool().path.clone(),
                source: None,
            };
            return group.end(Outcome::Failed(Arc::new(StoreError::Unavailable(
                Box::new(ended),
            ))));
        }
        if group.members == 0 {
            roll_back_in_place(conn);
            return None;
        }
        let runtime = tokio::runtime::Handle::try_current().ok();
        match runtime {
            Some(runtime) if !commit_here || shared.joiners.load(Ordering::SeqCst) > 0 => {
                let mut conn = self.pooled.take()?;
                let writer = conn.take_writer();
                let mut group = group;
                let pending = group.outcome.subscribe();
                if !std::mem::replace(&mut group.committer, true) {
                    let pool = Arc::clone(conn.pool());
                    runtime.spawn(commit_in_turn(Arc::clone(&shared), pool));
                }
                shared.park(Parked { conn, group });
                // After the park: the writer that gets the permit finds the transaction.
                drop(writer);
                Some(Commit::Pending(pending))
            }
            _ => {
                let outcome = commit(conn);
                group.end(outcome)
            }
        }
    }
}

/// The handler's transaction is no longer open.
#[derive(Debug, thiserror::Error)]
#[error(
    "the transaction on database file {} is no longer open (a cancelled or panicked `run` rolled it back, or the handler's SQL ended it)",
    .path.display()
)]
pub(super) struct TransactionEnded {
    pub(super) path: PathBuf,
    /// The handler's error after which SQLite rolled the transaction back, if any.
    pub(super) source: Option<rusqlite::Error>,
}
