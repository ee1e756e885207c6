//! Transactional mode: [`SqliteTransaction`], and the store's side of it (`begin`, the claim in
//! the handler's transaction, `commit_done`, `rollback`), as transactions lent out of the
//! file's write queue ([`crate::queue::Session`]).

use super::*;
use crate::queue::{Opened, Session};

impl SqliteStore {
    /// A transaction lent out of the file's write queue, opened once `start` says so (see
    /// [`Writes::session`]).
    async fn lend<T: Send + 'static, R: Send + 'static>(
        &self,
        prelude: Option<crate::queue::Prelude<StoreError>>,
        start: crate::queue::Start<T, R, StoreError>,
    ) -> Result<Result<(T, SqliteTransaction), R>, StoreError> {
        Ok(match self.writes.session(prelude, start).await? {
            Opened::Lent(value, session) => Ok((
                value,
                SqliteTransaction {
                    session: Some(session),
                    writes: self.writes.clone(),
                },
            )),
            Opened::Refused(refused) => Err(refused),
        })
    }

    /// A transaction of the handler that holds no claim, or (`hold`: a claim's key and token)
    /// holds that claim (see `begin_for`).
    async fn begin_holding(
        &self,
        hold: Option<(String, i64)>,
    ) -> Result<SqliteTransaction, StoreError> {
        let (prelude, start): (Option<crate::queue::Prelude<StoreError>>, _) = match hold {
            None => (None, None),
            Some((key, token)) => {
                let mark = key.clone();
                let prelude: crate::queue::Prelude<StoreError> = Box::new(move |c: &Connection| {
                    let marked = c.prepare_cached(HOLD)?.execute(params![mark, token])?;
                    if marked == 0 {
                        return Err(Fail::Store(StoreError::Fenced));
                    }
                    Ok(())
                });
                (Some(prelude), Some((key, token)))
            }
        };
        let start: crate::queue::Start<(), (), StoreError> =
            Box::new(move |c: &Connection| match &start {
                // Taken over between the mark's commit and this transaction: nothing was
                // written yet.
                Some((key, token)) if !held_by_transaction(c, key, *token)? => {
                    Err(Fail::Store(StoreError::Fenced))
                }
                _ => Ok(Ok(())),
            });
        match self.lend(prelude, start).await? {
            Ok(((), transaction)) => Ok(transaction),
            Err(()) => Err(StoreError::Fenced),
        }
    }
}

/// The claim inside the handler's transaction (`claim_in_transaction`), as the start of a
/// transaction lent out of the queue: a key that is over is answered from a read; any other key
/// gets exactly `claim_in`'s insert-or-decide, whose writes stay in the transaction.
/// `Ok(Err(outcome))`: the key is not ours, and nothing of this claim is kept.
fn claim_in_transaction_on(
    c: &Connection,
    clock: &dyn Clock,
    request: &OwnedRequest,
) -> Result<Result<Claim, ClaimOutcome>, Fail> {
    if let Some(row) = read_row(c, &request.key)?
        && let Some(outcome) = settled(&row, request)?
    {
        return Ok(Err(outcome));
    }
    Ok(match claim_in(c, clock, request)? {
        ClaimOutcome::Claimed(claim) => Ok(claim),
        refused => Err(refused),
    })
}

/// The handler's transaction in transactional mode: a transaction lent out of the file's write
/// queue (see [`SqliteStore::write`]), holding the file's writer until it ends. The handler's
/// own SQL runs in it through [`run`](Self::run), and
/// [`commit_done`](TransactionalStore::commit_done) writes the response and `done` in it and
/// commits, so the handler's writes and the stored response commit together or not at all.
///
/// - **The write lock is taken by `begin`, up front**, so neither the handler's writes nor the
///   final `done` update can fail with `SQLITE_BUSY` half-way. The lock is held until commit or
///   rollback, for the whole body: **keep handlers short**. Every other writer of the file
///   (claims of other keys, completions, other handlers, other processes) waits meanwhile, the
///   writers of this process in the file's queue, each up to its
///   [busy timeout](SqliteStore::with_busy_timeout), and then fails with
///   [`StoreError::Unavailable`] ("database file ... is locked"). Readers are not blocked (WAL).
/// - So **do not call the store's other operations from inside the body** (`claim`,
///   `complete`, a nested `begin`): they need the same lock and fail after the busy timeout.
/// - Because a takeover is itself a write, no claim can be taken over while its holder's
///   transaction is open (so the flow does not renew its lease meanwhile:
///   [`transaction_holds_claim`](TransactionalStore::transaction_holds_claim) is `true`): on
///   SQLite a holder is fenced only when its lease ran out and another call took the key over
///   *before* this `begin`; `commit_done` then finds another token, rolls everything back and
///   returns [`StoreError::Fenced`].
/// - **Dropped without `commit_done` or `rollback`** (a crash of the handler, a dropped future,
///   a panic), it is rolled back by the queue's thread before the file's next write: its
///   savepoint goes, with no disk write. A dropped transaction
///   does not release a claim committed before it; that is the claim's holder's business (the
///   `#[idempotent]` flow [abandons](IdempotencyStore::abandon) it, which releases it in the
///   background since nothing of the body's writes happened; otherwise its lease frees it). A
///   claim taken in the transaction itself
///   ([`claim_in_transaction`](TransactionalStore::claim_in_transaction)) goes with the
///   rollback: the key is free at once. The transaction is a savepoint of one the queue shares
///   with the writes waiting beside it (group commit): only its own writes are rolled back,
///   and the others' commit without it; committed, its `COMMIT` (its `fsync`) is theirs too.
///
/// The closure given to [`run`](Self::run) gets a `&rusqlite::Connection`. Closures rarely need
/// to name rusqlite's types (`|c| c.execute(...)` infers them); to use `rusqlite::params!` or
/// name `rusqlite::Error`, depend on the same `rusqlite` version as retry-core (0.43).
///
/// ```
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, TransactionalStore};
/// use retry_sqlite::SqliteStore;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("retry-core-doc-tx-{}.sqlite3", std::process::id()));
/// let store = SqliteStore::open(&path)?;
/// // The application's own table, in the same file (created here with rusqlite directly).
/// rusqlite::Connection::open(&path)?.execute_batch(
///     "CREATE TABLE balances (account TEXT PRIMARY KEY, amount INTEGER NOT NULL);
///      INSERT INTO balances VALUES ('a', 0);",
/// )?;
/// let request = ClaimRequest {
///     key: "deposit:7",
///     biz_key: "7",
///     fingerprint: None,
///     lease: Duration::from_secs(30),
///     retention: Duration::from_secs(86_400),
/// };
/// let ClaimOutcome::Claimed(claim) = store.claim(&request).await? else { panic!() };
/// let mut tx = store.begin().await?;
/// tx.run(|c| c.execute("UPDATE balances SET amount = amount + 10 WHERE account = 'a'", []))
///     .await?;
/// store.commit_done(tx, &claim, "{\"receipt\":7}").await?;
///
/// // The deposit and its response committed together; a duplicate gets the response.
/// assert_eq!(store.claim(&request).await?, ClaimOutcome::Done("{\"receipt\":7}".into()));
/// let amount: i64 = rusqlite::Connection::open(&path)?
///     .query_row("SELECT amount FROM balances WHERE account = 'a'", [], |row| row.get(0))?;
/// assert_eq!(amount, 10);
/// # drop(store);
/// # for suffix in ["", "-wal", "-shm"] {
/// #     let mut file = path.clone().into_os_string();
/// #     file.push(suffix);
/// #     let _ = std::fs::remove_file(file);
/// # }
/// # Ok(())
/// # }
/// ```
#[must_use = "a transaction rolls back when dropped: finish it with `commit_done` or `rollback`"]
pub struct SqliteTransaction {
    /// `None` once the transaction can no longer commit: a `run` was cancelled or panicked (the
    /// thread rolled it back), or the handler's SQL ended the transaction.
    session: Option<Session>,
    /// The file's queue it was lent out of.
    writes: Writes,
}

impl fmt::Debug for SqliteTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteTransaction")
            .field("path", &self.writes.path())
            .field("open", &self.session.as_ref().is_some_and(Session::is_open))
            .finish()
    }
}

impl SqliteTransaction {
    /// Runs the handler's SQL in this transaction, on the file's writer thread (the caller
    /// awaits it; outside a Tokio runtime its thread waits, like every operation of the store),
    /// and returns what `f` returns. Call it as often as needed; everything commits with the response in
    /// [`commit_done`](TransactionalStore::commit_done), or not at all.
    ///
    /// `f` must not end the transaction (no `COMMIT`, `ROLLBACK` or `END` of its own;
    /// `SAVEPOINT` / `RELEASE` / `ROLLBACK TO` of its own savepoints are fine). The transaction
    /// is shared with the writes queued beside it: ending it fails every one of them. An error returned by `f` leaves the
    /// transaction open: SQLite undoes only the failed statement, so the handler may go on or
    /// give up (roll back). To tell the handler's own failures apart from the store's, return
    /// them inside `R` (`Ok(Err(my_error))`).
    ///
    /// A panic in `f` rolls the transaction back and goes on unwinding in the caller.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`] wrapping `f`'s `rusqlite::Error` (mapped like every other
    ///   error of the store: a locked file names the file and the wait);
    /// - [`StoreError::Unavailable`] if the transaction is no longer open: an earlier `run` was
    ///   cancelled (its future dropped) or panicked, which rolled the transaction back; or the
    ///   handler's SQL ended it (a `COMMIT` of its own, or an error after which SQLite rolled
    ///   the whole transaction back, such as a full disk). Such a transaction can only be
    ///   dropped or rolled back; `commit_done` refuses it, so no `done` is ever written without
    ///   the writes it stands for.
    ///
    /// ```
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_sqlite::SqliteStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-tx-run-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// # rusqlite::Connection::open(&path)?.execute_batch(
    /// #     "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)",
    /// # )?;
    /// let mut tx = store.begin().await?;
    /// let id = tx
    ///     .run(|c| {
    ///         c.execute("INSERT INTO orders (item) VALUES (?1)", ["book"])?;
    ///         Ok(c.last_insert_rowid())
    ///     })
    ///     .await?;
    /// // Later statements see the earlier ones: it is one transaction.
    /// let item: String = tx
    ///     .run(move |c| c.query_row("SELECT item FROM orders WHERE id = ?1", [id], |row| row.get(0)))
    ///     .await?;
    /// assert_eq!(item, "book");
    /// // A failed statement is an error; the transaction stays open.
    /// assert!(tx.run(|c| c.execute("INSERT INTO no_such_table VALUES (1)", [])).await.is_err());
    /// store.rollback(tx).await?;
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<R, F>(&mut self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
        R: Send + 'static,
    {
        // Moved into this future: if it is dropped meanwhile, the transaction is dropped with
        // it, and the thread rolls it back once `f` returned.
        let mut session = self.take()?;
        let Ok((result, open)) = session.run(f).await else {
            return Err(self.ended(None));
        };
        if !open {
            // Its writes may have committed (a COMMIT of its own) or been rolled back by
            // SQLite: either way `done` can no longer commit with them.
            return Err(self.ended(result.err()));
        }
        self.session = Some(session);
        result.map_err(|e| {
            StoreError::from_sqlite(sql::error(self.writes.path(), self.writes.wait.busy, e))
        })
    }

    /// The transaction, for one operation; unusable until it is put back.
    fn take(&mut self) -> Result<Session, StoreError> {
        self.session
            .take()
            .filter(Session::is_open)
            .ok_or_else(|| self.ended(None))
    }

    /// The transaction is no longer open (after `source`, the handler's error, if any).
    fn ended(&self, source: Option<rusqlite::Error>) -> StoreError {
        StoreError::Unavailable(Box::new(TransactionEnded {
            path: self.writes.path().to_path_buf(),
            source,
        }))
    }
}

/// The handler's transaction is no longer open.
#[derive(Debug, thiserror::Error)]
#[error(
    "the transaction on database file {} is no longer open (a cancelled or panicked `run` rolled it back, or the handler's SQL ended it)",
    .path.display()
)]
struct TransactionEnded {
    path: PathBuf,
    /// The handler's error after which SQLite rolled the transaction back, if any.
    source: Option<rusqlite::Error>,
}

impl TransactionalStore for SqliteStore {
    type Transaction = SqliteTransaction;

    /// A transaction lent out of the file's write queue, once the writes queued before it are
    /// done: the write lock is held from now until the transaction ends. See
    /// [`SqliteTransaction`] for what that means for handlers and for other writers. The
    /// application's own transaction on the store's file is begun here too, so that it queues
    /// with the store's writes instead of fighting them for the lock (or, for a single write,
    /// [`SqliteStore::write`]).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the queue, or another process, holds the write lock for
    /// the busy timeout ("database file ... is locked").
    ///
    /// ```
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_sqlite::SqliteStore;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-tx-begin-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?.with_busy_timeout(Duration::from_millis(50));
    /// let tx = store.begin().await?;
    /// // One writer at a time: a second transaction waits for the first, here at most 50 ms.
    /// let error = store.begin().await.unwrap_err();
    /// let why = retry_core::error_chain(&error).to_string();
    /// assert!(why.contains("is locked"), "{why}");
    /// drop(tx); // rolls back and releases the lock
    /// let again = store.begin().await?;
    /// # drop((again, store));
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn begin(&self) -> Result<SqliteTransaction, StoreError> {
        self.begin_holding(None).await
    }

    /// Marks the claim's row as held by a transaction (a write of the file's queue, guarded by
    /// its token, committed before the transaction opens, so the mark outlives a crash of this
    /// process), then opens the transaction first in the queue's next group and checks the
    /// mark under the write lock; [`StoreError::Fenced`] when the claim was taken over before
    /// either.
    ///
    /// A claim that takes the write lock finds no transaction open (SQLite has one writer), so a
    /// marked row it finds has lost its transaction and is taken over. Between the mark's commit
    /// and the transaction's `BEGIN IMMEDIATE` another process may get the lock first: a
    /// duplicate arriving there in exactly that instant takes the key over, and this call is
    /// refused with `Fenced` before writing anything. The effect still happens once; the first
    /// caller gets an error and its resend gets the duplicate's answer.
    async fn begin_for(&self, claim: &Claim) -> Result<SqliteTransaction, StoreError> {
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.begin_holding(Some((claim.key.clone(), token))).await
    }

    /// A transaction lent out of the file's write queue, and the claim's `INSERT` (or the decision
    /// about the key's row: a released key claimed again, a lease that ran out or a
    /// transaction of the old [`begin_for`](TransactionalStore::begin_for) path that ended
    /// without its commit taken over, by the rules of [`claim`](IdempotencyStore::claim)) in
    /// that transaction, which is handed over with the claim: the claim, the handler's writes
    /// and the response commit together in [`commit_done`](TransactionalStore::commit_done),
    /// one `COMMIT` (one `fsync` with `synchronous=FULL`). Dropped or rolled back, the
    /// transaction leaves the key as it was: free at once.
    ///
    /// Concurrent claims share that `COMMIT` (group commit): a request that finishes while
    /// others wait in the file's queue leaves the transaction open for them, and each works in
    /// a savepoint of its own, so a failure or a drop undoes only its own claim and
    /// writes. Every request is answered after the shared `COMMIT`; if it fails, all of them get
    /// [`StoreError::Unavailable`] and their keys are free, since nothing of them was kept. The
    /// price is latency: a request's answer also waits for the handlers of the requests that
    /// joined its transaction (only those already queued when it finished, so a group is never
    /// larger than the concurrency), which is one more reason to keep the SQL run in the
    /// transaction short.
    ///
    /// A duplicate of a key whose transaction is open waits in the queue (at most the busy
    /// timeout, then [`StoreError::Unavailable`]) and then finds the `done` row: a replay,
    /// never a second run, answered once that row is committed. Runs on the file's writer
    /// thread (the caller's thread waits for it outside a Tokio runtime).
    ///
    /// ```
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, TransactionClaim, TransactionalStore};
    /// use retry_sqlite::SqliteStore;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-sqlite-claim-in-tx-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// let request = ClaimRequest {
    ///     key: "m-1",
    ///     biz_key: "m-1",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(30),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let TransactionClaim::Claimed(call) = store.claim_in_transaction(&request).await? else { panic!() };
    /// // The claim is not committed: another connection does not see it.
    /// let rows: i64 = rusqlite::Connection::open(&path)?
    ///     .query_row("SELECT count(*) FROM inbox_log", [], |row| row.get(0))?;
    /// assert_eq!(rows, 0);
    /// store.commit_done(call.transaction, &call.claim, "\"ok\"").await?;
    /// assert_eq!(store.claim(&request).await?, ClaimOutcome::Done("\"ok\"".into()));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn claim_in_transaction(
        &self,
        request: &ClaimRequest<'_>,
    ) -> Result<TransactionClaim<SqliteTransaction>, StoreError> {
        let request = OwnedRequest::from(request);
        let clock = Arc::clone(&self.clock);
        let start: crate::queue::Start<Claim, ClaimOutcome, StoreError> =
            Box::new(move |c: &Connection| claim_in_transaction_on(c, &*clock, &request));
        Ok(match self.lend(None, start).await? {
            Ok((claim, transaction)) => TransactionClaim::Claimed(ClaimedTransaction {
                claim,
                transaction,
                in_transaction: true,
            }),
            // Answered once what it read is committed: it may be the group's.
            Err(refused) => TransactionClaim::Refused(refused),
        })
    }

    /// In `transaction`: `UPDATE inbox_log SET status = 'done', response = ?` for the claim's
    /// key, only if its token and `in_progress` still hold. One row: `COMMIT`, so the handler's
    /// writes and the response commit together (for a claim taken in the transaction, the
    /// `COMMIT` it shares with concurrent ones: see
    /// [`claim_in_transaction`](TransactionalStore::claim_in_transaction); this call returns
    /// once it is made). No row (the claim was taken over, or already finished): `ROLLBACK`
    /// and [`StoreError::Fenced`]. Runs on the file's writer thread; if this future is dropped,
    /// the commit still finishes there.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] as above; [`StoreError::Unavailable`] if the transaction belongs
    /// to another database file, is no longer open (see [`SqliteTransaction::run`]), or SQLite
    /// fails; the transaction is then rolled back.
    ///
    /// ```
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, StoreError, TransactionalStore};
    /// use retry_sqlite::SqliteStore;
    /// use retry_core::time::ManualClock;
    /// use std::sync::Arc;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-tx-commit-{}.sqlite3", std::process::id()));
    /// let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_750_000_000)));
    /// let store = SqliteStore::open(&path)?.with_clock(clock.clone());
    /// # rusqlite::Connection::open(&path)?.execute_batch("CREATE TABLE effects (key TEXT NOT NULL)")?;
    /// let request = ClaimRequest {
    ///     key: "m-1",
    ///     biz_key: "m-1",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(10),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let ClaimOutcome::Claimed(slow) = store.claim(&request).await? else { panic!() };
    /// // The slow holder's lease runs out and a duplicate takes the key over.
    /// clock.advance(Duration::from_secs(11));
    /// let ClaimOutcome::Claimed(fast) = store.claim(&request).await? else { panic!() };
    ///
    /// // The slow holder's write and response are refused together.
    /// let mut tx = store.begin().await?;
    /// tx.run(|c| c.execute("INSERT INTO effects VALUES ('slow')", [])).await?;
    /// assert!(matches!(store.commit_done(tx, &slow, "\"slow\"").await, Err(StoreError::Fenced)));
    ///
    /// let mut tx = store.begin().await?;
    /// tx.run(|c| c.execute("INSERT INTO effects VALUES ('fast')", [])).await?;
    /// store.commit_done(tx, &fast, "\"fast\"").await?;
    ///
    /// let effects: Vec<String> = rusqlite::Connection::open(&path)?
    ///     .prepare("SELECT key FROM effects")?
    ///     .query_map([], |row| row.get(0))?
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(effects, ["fast"]);
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn commit_done(
        &self,
        mut transaction: SqliteTransaction,
        claim: &Claim,
        response: &str,
    ) -> Result<(), StoreError> {
        if !transaction.writes.same_file(&self.writes) {
            return Err(StoreError::Unavailable(
                format!(
                    "a transaction on database file {} cannot complete a claim kept in {}",
                    transaction.writes.path().display(),
                    self.writes.path().display()
                )
                .into(),
            ));
        }
        let session = transaction.take()?;
        let Ok(token) = i64::try_from(claim.token) else {
            // No row can hold this token; dropping the session rolls back.
            return Err(StoreError::Fenced);
        };
        let (key, response) = (claim.key.clone(), response.to_owned());
        session
            .end(&self.writes, move |c: &Connection| {
                let changed = c
                    .prepare_cached(COMPLETE)?
                    .execute(params![response, key, token])?;
                if changed == 0 {
                    // Taken over (or finished) meanwhile: the handler's writes are rolled back.
                    return Err(Fail::Store(StoreError::Fenced));
                }
                Ok(())
            })
            .await
    }

    /// The step's journal entry, written in the step's transaction (begun with
    /// [`begin`](TransactionalStore::begin)) after the claim's hold on its key is checked, and
    /// committed with the step's writes; [`StoreError::Fenced`] (and a rollback) when the key
    /// was taken over.
    async fn commit_step(
        &self,
        mut transaction: SqliteTransaction,
        claim: &Claim,
        label: &str,
        output: &str,
    ) -> Result<(), StoreError> {
        if !transaction.writes.same_file(&self.writes) {
            return Err(StoreError::Unavailable(
                format!(
                    "a transaction on database file {} cannot journal a step of a claim kept in {}",
                    transaction.writes.path().display(),
                    self.writes.path().display()
                )
                .into(),
            ));
        }
        let session = transaction.take()?;
        let write = retry_core::idempotency::StepWrite::Finished(output);
        let (key, token, label, output) = super::steps::owned_write(claim, label, write)?;
        session
            .end(&self.writes, move |c: &Connection| {
                super::steps::write_step(c, &key, token, &label, output.as_deref())
            })
            .await
    }

    /// Rolls the transaction back, as its drop does (see [`SqliteTransaction`]): the queue's
    /// thread undoes its savepoint before the file's next write. A transaction that already
    /// ended (see [`SqliteTransaction::run`]) has nothing left to roll back. Always `Ok`.
    ///
    /// ```
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_sqlite::SqliteStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-tx-rollback-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// # rusqlite::Connection::open(&path)?.execute_batch("CREATE TABLE effects (key TEXT NOT NULL)")?;
    /// let mut tx = store.begin().await?;
    /// tx.run(|c| c.execute("INSERT INTO effects VALUES ('m-1')", [])).await?;
    /// store.rollback(tx).await?; // the body failed: its writes go
    /// let count: i64 = rusqlite::Connection::open(&path)?
    ///     .query_row("SELECT count(*) FROM effects", [], |row| row.get(0))?;
    /// assert_eq!(count, 0);
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn rollback(&self, mut transaction: SqliteTransaction) -> Result<(), StoreError> {
        // Dropped, its savepoint is rolled back by the queue's thread, before the next write.
        drop(transaction.session.take());
        Ok(())
    }

    /// `true`: on SQLite an open transaction keeps its claim by itself. A takeover is a write,
    /// and the transaction holds the file's write lock from its `BEGIN IMMEDIATE` until it
    /// ends, so no other call (of this process or another) can take the key over meanwhile; it
    /// waits for the lock, at most its busy timeout. A lease renewal is a write too: it would
    /// only wait for the same lock, and fail after the busy timeout under a long body. So the
    /// flow does not renew while a transactional body runs. (A takeover before `begin` is still
    /// possible; `commit_done` then answers [`StoreError::Fenced`] and rolls back.)
    ///
    /// ```
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-tx-holds-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// assert!(store.transaction_holds_claim());
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    fn transaction_holds_claim(&self) -> bool {
        true
    }
}
