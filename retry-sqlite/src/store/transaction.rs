//! Transactional mode: [`SqliteTransaction`], and the store's side of it (`begin`, the claim in
//! the handler's transaction, `commit_done`, `rollback`).

use super::group::{Commit, Shared, TransactionEnded, TxConnection};
use super::*;

impl SqliteStore {
    /// Runs `work` on a pooled connection that is to hold the write lock: this store's writer
    /// permit is taken first ([`Pool::reserve_writer`]), and `work` runs where the lock's
    /// holder should ([`holding_lock`]).
    async fn writing<T: Send + 'static>(
        &self,
        work: impl FnOnce(Arc<Pool>, TxConnection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let pool = Arc::clone(&self.pool);
        let shared = Arc::clone(&self.shared);
        let reservation = pool
            .reserve_writer()
            .await
            .map_err(StoreError::from_sqlite)?;
        holding_lock(&self.pool.path, move || {
            // A shared transaction of claims waits for the write lock: it commits first.
            shared.commit_parked();
            let pooled = pool
                .checkout(reservation)
                .map_err(StoreError::from_sqlite)?;
            work(pool, TxConnection::plain(pooled))
        })
        .await
    }

    /// `BEGIN IMMEDIATE` on a pooled connection (see [`writing`](Self::writing)); with `hold` (a claim's
    /// key and token) the transaction holds that claim (see `begin_for`).
    async fn begin_holding(
        &self,
        hold: Option<(String, i64)>,
    ) -> Result<SqliteTransaction, StoreError> {
        self.writing(move |pool, conn| {
            conn.connection()
                .and_then(|c| {
                    if let Some((key, token)) = &hold {
                        let marked = c.prepare_cached(HOLD)?.execute(params![key, token])?;
                        if marked == 0 {
                            return Err(Fail::Store(StoreError::Fenced));
                        }
                    }
                    c.execute_batch("BEGIN IMMEDIATE")?;
                    match &hold {
                        // Taken over between the mark and the lock: dropping `conn` rolls
                        // back, and nothing was written yet.
                        Some((key, token)) if !held_by_transaction(c, key, *token)? => {
                            Err(Fail::Store(StoreError::Fenced))
                        }
                        _ => Ok(()),
                    }
                })
                .map_err(|e| pool.fail(e))?;
            Ok(SqliteTransaction {
                conn: Some(conn),
                pool,
            })
        })
        .await
    }
}

/// The claim inside the handler's transaction (`claim_in_transaction`), on `conn` (a member of
/// a shared transaction, see [`group`](super::group)): a key that is over is answered from a
/// plain read (no lock, no transaction of its own); any other key gets its savepoint (after
/// `BEGIN IMMEDIATE` when the transaction is new) and then exactly `claim_in`'s
/// insert-or-decide, whose writes stay in it. `Ok(Err(outcome))`: the key is not ours, and
/// nothing of this claim is left in the transaction.
fn claim_in_transaction_on(
    conn: &mut TxConnection,
    clock: &dyn Clock,
    request: &OwnedRequest,
) -> Result<Result<Claim, ClaimOutcome>, Fail> {
    if let Some(row) = read_row(conn.connection()?, &request.key)?
        && let Some(outcome) = settled(&row, request)?
    {
        return Ok(Err(outcome));
    }
    // Waits for the write lock (another process's writer) at most the busy timeout; the
    // decision below is taken under it, with the time read after it was granted.
    conn.open_savepoint()?;
    let c = conn.connection()?;
    let now = clock.now();
    let outcome = if insert_claim(c, request, now)? == 1 {
        ClaimOutcome::Claimed(Claim::first(&request.key))
    } else {
        decide(c, request, &now, &format_utc(now))?
    };
    match outcome {
        ClaimOutcome::Claimed(claim) => Ok(Ok(claim)),
        // Nothing of this claim is kept.
        refused => {
            conn.roll_back_savepoint();
            Ok(Err(refused))
        }
    }
}

/// The handler's transaction in transactional mode: one pooled connection of a [`SqliteStore`]
/// inside `BEGIN IMMEDIATE`. The handler's own SQL runs on it through [`run`](Self::run), and
/// [`commit_done`](TransactionalStore::commit_done) writes the response and `done` in it and
/// commits, so the handler's writes and the stored response commit together or not at all.
///
/// - **The write lock is taken by `begin`, up front**, so neither the handler's writes nor the
///   final `done` update can fail with `SQLITE_BUSY` half-way. The lock is held until commit or
///   rollback, for the whole body: **keep handlers short**. Every other writer of the file
///   (claims of other keys, completions, other handlers, other processes) waits meanwhile, up to
///   the [busy timeout](SqliteStore::with_busy_timeout), and then fails with
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
///   a panic), it rolls back synchronously in `Drop`, on the dropping thread: a `ROLLBACK` of a
///   WAL transaction discards its pages and releases the lock, with no disk write and no wait.
///   If that `ROLLBACK` fails, the connection is closed instead (SQLite rolls back on close): a
///   connection with an open transaction never goes back to the pool. A dropped transaction
///   does not release a claim committed before it; that is the claim's holder's business (the
///   `#[idempotent]` flow [abandons](IdempotencyStore::abandon) it, which releases it in the
///   background since nothing of the body's writes happened; otherwise its lease frees it). A
///   claim taken in the transaction itself
///   ([`claim_in_transaction`](TransactionalStore::claim_in_transaction)) goes with the
///   rollback: the key is free at once. Such a transaction may be shared with concurrent
///   claims (group commit): then only its savepoint is rolled back, and the others' writes
///   commit without it.
/// - It holds one of the store's [connections](SqliteStore::with_max_connections) until it
///   ends.
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
    /// connection was rolled back where it was), or the handler's SQL ended the transaction.
    conn: Option<TxConnection>,
    pool: Arc<Pool>,
}

impl fmt::Debug for SqliteTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteTransaction")
            .field("path", &self.pool.path)
            .field("open", &self.conn.is_some())
            .finish()
    }
}

impl SqliteTransaction {
    /// Runs the handler's SQL in this transaction, on a blocking thread when a Tokio runtime is
    /// present (in place otherwise, like every operation of the store), and returns what `f`
    /// returns. Call it as often as needed; everything commits with the response in
    /// [`commit_done`](TransactionalStore::commit_done), or not at all.
    ///
    /// `f` must not end the transaction (no `COMMIT`, `ROLLBACK` or `END` of its own;
    /// `SAVEPOINT` / `RELEASE` / `ROLLBACK TO` of its own savepoints are fine). In a
    /// transaction shared with concurrent claims, ending it fails every request in it. An error returned by `f` leaves the
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
        let conn = self.take()?;
        // The connection travels with the work and comes back with its result; if this future
        // is dropped meanwhile, it is dropped (rolled back) on the blocking thread instead.
        let work = move || {
            let result = run_in(&conn, f);
            (conn, result)
        };
        let (conn, result) = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => match runtime.spawn_blocking(work).await {
                Ok(done) => done,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => {
                    return Err(StoreError::Unavailable(
                        format!("SQLite worker task failed: {e}").into(),
                    ));
                }
            },
            Err(_) => work(),
        };
        if conn.is_open() {
            self.conn = Some(conn);
        }
        result.map_err(|e| self.pool.fail(e))
    }

    /// The connection, for one operation; the transaction is unusable until it is put back.
    fn take(&mut self) -> Result<TxConnection, StoreError> {
        self.conn.take().ok_or_else(|| {
            StoreError::Unavailable(Box::new(TransactionEnded {
                path: self.pool.path.clone(),
                source: None,
            }))
        })
    }
}

/// `f` on the transaction's connection; an error if the transaction ended inside it.
fn run_in<R>(
    conn: &TxConnection,
    f: impl FnOnce(&Connection) -> rusqlite::Result<R>,
) -> Result<R, Fail> {
    let c = conn.connection()?;
    let result = f(c);
    if c.is_autocommit() {
        // Its writes may have committed (a COMMIT of its own) or been rolled back by SQLite:
        // either way `done` can no longer commit with them.
        return Err(Fail::Store(StoreError::Unavailable(Box::new(
            TransactionEnded {
                path: conn.pool()?.path.clone(),
                source: result.err(),
            },
        ))));
    }
    Ok(result?)
}

impl TransactionalStore for SqliteStore {
    type Transaction = SqliteTransaction;

    /// Takes a connection from the pool and runs `BEGIN IMMEDIATE` on it, on a blocking thread
    /// (in place outside a Tokio runtime). The write lock is taken now and held until the
    /// transaction ends: see [`SqliteTransaction`] for what that means for handlers and for
    /// other writers.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when no connection frees up within the busy timeout, or the
    /// lock stays held by another writer for the busy timeout ("database file ... is locked").
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

    /// Marks the claim's row as held by a transaction (in autocommit, guarded by its token),
    /// then runs `BEGIN IMMEDIATE` on the same connection and checks the mark under the write
    /// lock; [`StoreError::Fenced`] when the claim was taken over before either.
    ///
    /// A claim that takes the write lock finds no transaction open (SQLite has one writer), so a
    /// marked row it finds has lost its transaction and is taken over. Between the mark's commit
    /// and the `BEGIN IMMEDIATE` (two statements in a row on one thread) another writer may get
    /// the lock first: a duplicate arriving in exactly that instant takes the key over, and this
    /// call is refused with `Fenced` before writing anything. The effect still happens once;
    /// the first caller gets an error and its resend gets the duplicate's answer.
    async fn begin_for(&self, claim: &Claim) -> Result<SqliteTransaction, StoreError> {
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.begin_holding(Some((claim.key.clone(), token))).await
    }

    /// `BEGIN IMMEDIATE` on a pooled connection, then the claim's `INSERT` (or the decision
    /// about the key's row: a released key claimed again, a lease that ran out or a
    /// transaction of the old [`begin_for`](TransactionalStore::begin_for) path that ended
    /// without its commit taken over, by the rules of [`claim`](IdempotencyStore::claim)) in
    /// that transaction, which is handed over with the claim: the claim, the handler's writes
    /// and the response commit together in [`commit_done`](TransactionalStore::commit_done),
    /// one `COMMIT` (one `fsync` with `synchronous=FULL`). Dropped or rolled back, the
    /// transaction leaves the key as it was: free at once.
    ///
    /// Concurrent claims share that `COMMIT` (group commit): a request that finishes while
    /// others wait for the store's writer permit leaves the transaction open for them, and each
    /// works in a savepoint of its own, so a failure or a drop undoes only its own claim and
    /// writes. Every request is answered after the shared `COMMIT`; if it fails, all of them get
    /// [`StoreError::Unavailable`] and their keys are free, since nothing of them was kept. The
    /// price is latency: a request's answer also waits for the handlers of the requests that
    /// joined its transaction (only those already queued when it finished, so a group is never
    /// larger than the concurrency), which is one more reason to keep the SQL run in the
    /// transaction short.
    ///
    /// A key that is done (or kept failed) is answered from a plain read first, which in WAL
    /// mode neither takes nor waits for the write lock. A duplicate of a key whose transaction
    /// is open waits for the writer permit (at most the busy timeout, then
    /// [`StoreError::Unavailable`]) and then finds the `done` row: a replay, never a second
    /// run, answered once that row is committed. Runs on a blocking thread (in place outside a
    /// Tokio runtime).
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
        let pool = Arc::clone(&self.pool);
        let seat = Shared::seat(&self.shared, &pool).await?;
        let (claimed, commit) = holding_lock(&self.pool.path, move || {
            let mut conn = seat.connection(&pool)?;
            // On an error `conn` is dropped, which rolls back what this claim began.
            let claimed =
                claim_in_transaction_on(&mut conn, &*clock, &request).map_err(|e| pool.fail(e))?;
            Ok(match claimed {
                Ok(claim) => {
                    let transaction = SqliteTransaction {
                        conn: Some(conn),
                        pool,
                    };
                    let claimed = ClaimedTransaction {
                        claim,
                        transaction,
                        in_transaction: true,
                    };
                    (TransactionClaim::Claimed(claimed), None)
                }
                // What was read may be the shared transaction's: answered once it committed.
                Err(refused) => (TransactionClaim::Refused(refused), conn.leave(true)),
            })
        })
        .await?;
        if let Some(commit) = commit {
            commit.committed(&self.pool.path).await?;
        }
        Ok(claimed)
    }

    /// In `transaction`: `UPDATE inbox_log SET status = 'done', response = ?` for the claim's
    /// key, only if its token and `in_progress` still hold. One row: `COMMIT`, so the handler's
    /// writes and the response commit together (for a claim taken in the transaction, the
    /// `COMMIT` it shares with concurrent ones: see
    /// [`claim_in_transaction`](TransactionalStore::claim_in_transaction); this call returns
    /// once it is made). No row (the claim was taken over, or already finished): `ROLLBACK`
    /// and [`StoreError::Fenced`]. Runs on a blocking thread (in place outside a Tokio
    /// runtime); if this future is dropped, the commit still finishes there.
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
        if !Arc::ptr_eq(&transaction.pool, &self.pool) && transaction.pool.path != self.pool.path {
            return Err(StoreError::Unavailable(
                format!(
                    "a transaction on database file {} cannot complete a claim kept in {}",
                    transaction.pool.path.display(),
                    self.pool.path.display()
                )
                .into(),
            ));
        }
        let conn = transaction.take()?;
        let Ok(token) = i64::try_from(claim.token) else {
            // No row can hold this token; dropping `conn` rolls back.
            return Err(StoreError::Fenced);
        };
        let (key, response) = (claim.key.clone(), response.to_owned());
        let pool = Arc::clone(&self.pool);
        let (conn, committed) = holding_lock(&self.pool.path, move || {
            let mut conn = conn;
            let committed = commit_in(&mut conn, &response, &key, token).map_err(|e| pool.fail(e));
            Ok::<_, StoreError>((conn, committed))
        })
        .await?;
        // Given back here, on the runtime's thread, with the store's writer permit: the next
        // writer is woken from a worker (it runs next there), not from a blocking thread.
        drop(conn);
        match committed? {
            Some(shared) => shared.committed(&self.pool.path).await,
            None => Ok(()),
        }
    }

    /// `ROLLBACK`, in place: it is as cheap as the rollback on drop (see
    /// [`SqliteTransaction`]). A transaction that already ended (see
    /// [`SqliteTransaction::run`]) has nothing left to roll back: `Ok`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if SQLite refuses the `ROLLBACK`; the connection is then
    /// closed, which rolls back as well.
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
        let Some(conn) = transaction.conn.take() else {
            return Ok(());
        };
        if conn.is_member() {
            // What its drop does: its savepoint is rolled back, and the other members' writes
            // commit without it, by a task (no `fsync` here).
            drop(conn);
            return Ok(());
        }
        let c = conn.connection().map_err(|e| transaction.pool.fail(e))?;
        if conn.is_open() {
            c.execute_batch("ROLLBACK")
                .map_err(|e| StoreError::from_sqlite(transaction.pool.error(e)))?;
        }
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

/// The `done` update and the commit of the handler's transaction: its own `COMMIT`, or for a
/// member of a shared transaction its savepoint released and its part in the group's commit
/// (`Some`: wait for it).
fn commit_in(
    conn: &mut TxConnection,
    response: &str,
    key: &str,
    token: i64,
) -> Result<Option<Commit>, Fail> {
    let c = conn.connection()?;
    let changed = c
        .prepare_cached(COMPLETE)?
        .execute(params![response, key, token])?;
    if changed == 0 {
        // Taken over (or finished) meanwhile: dropping `conn` rolls the handler's writes back.
        return Err(Fail::Store(StoreError::Fenced));
    }
    if conn.is_member() {
        conn.release_savepoint()?;
        return Ok(conn.leave(true));
    }
    c.execute_batch("COMMIT")?;
    Ok(None)
}
