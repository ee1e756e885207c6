//! `SqliteStore`: the embedded idempotency store, one SQLite file shared by the threads of a
//! process and by several processes.
//!
//! Design notes (the why of each choice):
//! - A read-then-write (the claim of a key that has a row: insert, read the row, maybe take it
//!   over) is one write transaction opened with `BEGIN IMMEDIATE`: the write lock is taken up
//!   front, so it can never fail with `SQLITE_BUSY` half-way; waiting for the lock is bounded by
//!   the busy timeout. A single write (the claim of a new key, `complete`, `release`,
//!   `mark_failed`, `renew`) runs alone in autocommit: SQLite takes the write lock at the
//!   statement's start, with the same busy handler, so a transaction around it only added two
//!   statements.
//! - `synchronous=FULL` by default: the contract frees a key for a second run only when the
//!   first run's effect is known not to have happened, and a claim or `done` row lost to a power
//!   cut would let a resend run the body again. `NORMAL` (WAL synced only at checkpoints) is an
//!   opt-in for receivers that can afford that ([`SqliteStore::with_synchronous_full`]).
//! - A guarded write (`complete`, `release`, `mark_failed`) that changes no row looks once more:
//!   a row already in the state it writes, under the claim's own token, is a retried call whose
//!   first try committed, so it answers `Ok`, not [`StoreError::Fenced`]. The extra read is on
//!   that path only; the hot path stays one statement.
//! - A takeover refreshes the row's `expires_at` to at least now + retention, and purging never
//!   deletes a row whose lease is live: a row is never purged under a holder at work.
//! - The claim is an `INSERT .. ON CONFLICT(msg_id) DO NOTHING` under the primary key, never a
//!   check-then-insert; an existing row is then read and decided on in one transaction, exactly
//!   as [`MemoryStore`](super::MemoryStore) decides under its lock.
//! - The clock is read after the lock is taken, so a call that waited for another process sees
//!   the time at which it decides, not the time at which it started waiting.
//! - SQLite calls block: they run in `tokio::task::spawn_blocking`, on a connection from a small
//!   pool (see [`SqliteStore::with_max_connections`]). The steps of a transaction that holds the
//!   write lock and belong to the store (its `BEGIN IMMEDIATE` with the claim, its commit) run
//!   in place instead on a multi-thread runtime (`block_in_place`), so the task goes straight on
//!   while every other writer waits; the handler's own [`SqliteTransaction::run`] stays on the
//!   blocking pool, so dropping its future never waits for its SQL.
//! - The write transactions of one store queue in the process, in arrival order, for one
//!   writer permit (at most the busy timeout, then the same "locked" error SQLite gives),
//!   instead of all retrying the file's lock from SQLite's busy handler, which sleeps up to
//!   100 ms between tries and leaves the lock idle under contention. Other processes, and this
//!   store's writes outside a transaction (claims, completions), still meet at SQLite's lock.
//! - Timestamps are [`format_utc`] text (fixed width, microseconds), so SQL compares them as
//!   strings and the lease check compares the same text.
//! - Transactional mode ([`SqliteTransaction`]): `begin` takes a pooled connection and runs
//!   `BEGIN IMMEDIATE` on it, so the write lock is held from the first write of the handler to
//!   the guarded `done` update and its `COMMIT`; nothing in between can fail with `SQLITE_BUSY`.
//!   The connection moves to the blocking thread with each piece of work and comes back with
//!   its result; wherever it is dropped before the commit, it is rolled back in place (cheap in
//!   WAL mode) and a connection still inside a transaction is closed, never pooled. Because a
//!   takeover is a write, an open transaction keeps its claim by itself
//!   ([`TransactionalStore::transaction_holds_claim`] is `true`): no lease renewal is needed,
//!   and one would only wait for the lock the transaction holds.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{
    Claim, ClaimOutcome, ClaimRequest, ClaimedTransaction, IdempotencyStore, Limits, StoreError,
    TransactionClaim, TransactionalStore,
};
use crate::sql::sqlite::{
    self as sql, DEFAULT_BUSY_TIMEOUT, FromSqliteError, Pool, PooledConnection, Schema, Settings,
    holding_lock,
};
use crate::time::{Clock, SystemClock, format_utc, later, parse_utc};

/// The version of the `inbox_log` layout this code writes, kept in `retry_core_schema`.
const SCHEMA_VERSION: i64 = 2;

/// See [`SqliteStore::with_max_connections`].
const DEFAULT_MAX_CONNECTIONS: usize = 4;

/// A store's settings until the `with_*` methods change them: a 5 s busy timeout,
/// `synchronous=FULL` (see [`SqliteStore::with_synchronous_full`] for why), up to 4 connections.
const DEFAULT_SETTINGS: Settings = Settings {
    busy_timeout: DEFAULT_BUSY_TIMEOUT,
    synchronous_full: true,
    max_connections: DEFAULT_MAX_CONNECTIONS,
};

/// Rows deleted per purge transaction: the write lock is released between batches so claims on
/// the request path never wait behind one huge delete. Every matching row is deleted; the batch
/// size only decides how many transactions that takes.
const PURGE_BATCH: usize = 5_000;

/// The table, created after the shared `retry_core_schema` (its version is kept there rather than
/// in `PRAGMA user_version`: with transactional mode the application's tables may live in the
/// same file, and its migration tool may own `user_version`).
const TABLES: &str = "CREATE TABLE IF NOT EXISTS inbox_log (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('in_progress', 'done', 'failed', 'released')),
    response TEXT,
    created_at TEXT NOT NULL,
    fingerprint TEXT,
    token INTEGER NOT NULL,
    lease_until TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_log_created_at ON inbox_log (created_at);
";

/// Version 2: a claim can be held by the handler's transaction instead of its lease
/// ([`TransactionalStore::begin_for`]).
const UPGRADES: &[&str] =
    &["ALTER TABLE inbox_log ADD COLUMN in_transaction INTEGER NOT NULL DEFAULT 0"];

const SELECT_VERSION: &str = "SELECT version FROM retry_core_schema WHERE component = 'inbox_log'";
const RECORD_VERSION: &str = "INSERT INTO retry_core_schema (component, version) VALUES ('inbox_log', ?1) \
     ON CONFLICT(component) DO NOTHING";

const SCHEMA: Schema = Schema {
    store: "SqliteStore",
    component: "inbox_log",
    version: SCHEMA_VERSION,
    tables: TABLES,
    upgrades: UPGRADES,
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};

const INSERT_CLAIM: &str = "INSERT INTO inbox_log \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES (?1, ?2, 'in_progress', NULL, ?3, ?4, 1, ?5, ?6) \
     ON CONFLICT(msg_id) DO NOTHING";
const SELECT_ROW: &str = "SELECT status, response, fingerprint, token, lease_until, in_transaction \
     FROM inbox_log WHERE msg_id = ?1";
// The taker-over's row keeps its retention counted from now at least (`max` of two
// `format_utc` texts is the later time), so it cannot be purged under its new holder.
const TAKE_OVER: &str = "UPDATE inbox_log SET token = token + 1, in_transaction = 0, lease_until = ?1, \
     expires_at = max(expires_at, ?4) \
     WHERE msg_id = ?2 AND token = ?3 AND status = 'in_progress'";
const COMPLETE: &str = "UPDATE inbox_log SET status = 'done', response = ?1 \
     WHERE msg_id = ?2 AND token = ?3 AND status = 'in_progress'";
// A released row stays (until purged) so its token keeps growing: a holder fenced before the
// release can never complete the next claim of the same key (no ABA).
const RELEASE: &str = "UPDATE inbox_log SET status = 'released' \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
const RECLAIM: &str = "UPDATE inbox_log SET status = 'in_progress', token = token + 1, in_transaction = 0, \
     biz_key = ?1, created_at = ?2, fingerprint = ?3, lease_until = ?4, expires_at = ?5 \
     WHERE msg_id = ?6 AND token = ?7 AND status = 'released'";
// Only the holder (its token) of a row still in progress extends the lease; whether the old
// lease already ran out does not matter: until another call took the key, it is still the
// holder's (as in `MemoryStore::renew`).
const RENEW: &str = "UPDATE inbox_log SET lease_until = ?1 \
     WHERE msg_id = ?2 AND token = ?3 AND status = 'in_progress' AND in_transaction = 0";
// `begin_for`: the claim's row is marked as held by a transaction, in autocommit before the
// `BEGIN IMMEDIATE` (so the mark outlives this process), then checked under the write lock. A
// claim that finds the mark holds the write lock itself, so that transaction is over.
const HOLD: &str = "UPDATE inbox_log SET in_transaction = 1 \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
const HELD: &str = "SELECT in_transaction FROM inbox_log \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
const MARK_FAILED: &str = "UPDATE inbox_log SET status = 'failed', response = ?3 \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
// A row whose lease is live has a holder at work: never purged under it, whatever its age
// (`lease_until` and `?2` are both `format_utc` text, so `>` compares the times).
const PURGE: &str = "DELETE FROM inbox_log WHERE rowid IN \
     (SELECT rowid FROM inbox_log WHERE created_at < ?1 AND expires_at <= ?2 \
      AND NOT (status = 'in_progress' AND lease_until > ?2) LIMIT ?3)";
// What a guarded write that changed no row finds: a retried call whose first try committed
// finds the row in the state it writes under its own token.
const SELECT_SETTLED: &str = "SELECT status, token FROM inbox_log WHERE msg_id = ?1";

/// Keeps claims and responses in the table `inbox_log` of one SQLite file: the embedded default
/// store. Any number of threads and processes may use the same file at once.
///
/// - `journal_mode=WAL`: readers never block the writer, and the file is safe for several
///   processes on one machine (not on a network file system: WAL needs shared memory).
/// - `synchronous=FULL` by default: every commit is synced to disk before the operation
///   returns, so a claim, a kept failure or a stored response survives a power loss or an OS
///   crash, not only a crash of the process. A forgotten claim or response would let a resend
///   run the body a second time, which the store's contract forbids; the price is one `fsync`
///   per write. [`with_synchronous_full(false)`](Self::with_synchronous_full) opts into
///   `synchronous=NORMAL` where that risk is acceptable.
/// - Every write is one statement in autocommit or one `BEGIN IMMEDIATE` transaction (a claim
///   that meets an existing row), waiting at most the busy timeout (default 5 s) for another
///   writer; after that it fails with [`StoreError::Unavailable`] saying which file is locked.
/// - Timestamps (from the store's [`Clock`]) are stored as fixed-width UTC text with
///   microsecond precision.
///
/// The operations have exactly [`MemoryStore`](super::MemoryStore)'s semantics: fenced writes,
/// a retried `complete` / `release` / `mark_failed` whose first try committed answers `Ok`,
/// [`renew`](IdempotencyStore::renew) extends a live holder's lease, a takeover refreshes the
/// row's retention, and purging never deletes a row whose lease is live. One thing the memory
/// store cannot show: an operation whose future is dropped still finishes in the background (a
/// claim made that way is freed by its lease, as after a crash).
///
/// ```
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, SqliteStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("retry-core-doc-store-{}.sqlite3", std::process::id()));
/// let store = SqliteStore::open(&path)?;
/// let request = ClaimRequest {
///     key: "s3:m-1",
///     biz_key: "m-1",
///     fingerprint: None,
///     lease: Duration::from_secs(30),
///     retention: Duration::from_secs(86_400),
/// };
/// let ClaimOutcome::Claimed(claim) = store.claim(&request).await? else { panic!() };
/// assert_eq!(store.claim(&request).await?, ClaimOutcome::InProgress);
/// store.complete(&claim, "\"ok\"").await?;
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
pub struct SqliteStore {
    pool: Arc<Pool>,
    clock: Arc<dyn Clock>,
    limits: Limits,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.pool.path)
            .field("busy_timeout", &self.pool.settings.busy_timeout)
            .field("synchronous_full", &self.pool.settings.synchronous_full)
            .field("max_connections", &self.pool.settings.max_connections)
            .field("limits", &self.limits)
            .field("clock", &self.clock)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating it if needed) the SQLite file at `path`, switches it to WAL and creates
    /// the table `inbox_log` if it is missing. Safe to call from several processes at once, and
    /// on a file created by an earlier version of this store.
    ///
    /// The store starts on the system clock, with a 5 s busy timeout, `synchronous=FULL`, up
    /// to 4 connections and the default [`Limits`]; the `with_*` methods change that. Opening
    /// waits up to 5 s for a lock another process holds on the file.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or created (its directory is
    /// missing, no permission, not a database), cannot use WAL, stays locked, or was written by a
    /// newer version of this store.
    ///
    /// ```
    /// use retry_core::idempotency::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-open-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// assert_eq!(store.path(), path);
    /// // Opening again is harmless: the table is created only once.
    /// let again = SqliteStore::open(&path)?;
    /// # drop((store, again));
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    ///
    /// let missing = std::env::temp_dir().join("retry-core-no-such-dir").join("inbox.sqlite3");
    /// let error = SqliteStore::open(&missing).unwrap_err();
    /// // The error says "idempotency store unavailable"; its source, why.
    /// let why = retry_core::error_chain(&error).to_string();
    /// assert!(why.contains("does not exist"), "{why}");
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let pool = Pool::open(path.as_ref().to_path_buf(), DEFAULT_SETTINGS, &SCHEMA)
            .map_err(StoreError::from_sqlite)?;
        Ok(SqliteStore {
            pool: Arc::new(pool),
            clock: Arc::new(SystemClock),
            limits: Limits::default(),
        })
    }

    /// Reads time from `clock` instead of the system clock (for tests of leases and retention).
    ///
    /// ```
    /// use retry_core::idempotency::SqliteStore;
    /// use retry_core::time::ManualClock;
    /// use std::sync::Arc;
    /// use std::time::UNIX_EPOCH;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-clock-{}.sqlite3", std::process::id()));
    /// let clock = Arc::new(ManualClock::new(UNIX_EPOCH));
    /// let store = SqliteStore::open(&path)?.with_clock(clock.clone());
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long an operation waits for a lock held by another connection or process before it
    /// fails with [`StoreError::Unavailable`] ("database file ... is locked by another process
    /// (busy for 5s)"); also bounds the wait for a free connection of the pool. Default 5 s;
    /// longer than about 24 days counts as 24 days. Zero fails at once when the file is locked.
    ///
    /// ```
    /// use retry_core::idempotency::SqliteStore;
    /// use std::time::Duration;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-busy-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?.with_busy_timeout(Duration::from_millis(250));
    /// assert!(format!("{store:?}").contains("250ms"));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    #[must_use]
    pub fn with_busy_timeout(self, timeout: Duration) -> Self {
        self.reconfigure(|settings| settings.busy_timeout = timeout)
    }

    /// `true` (the default): `synchronous=FULL`, every commit is synced to disk before the
    /// operation returns and survives a power loss or an OS crash.
    /// `false`: `synchronous=NORMAL`, which in WAL mode survives any crash of the process but
    /// may lose the last commits on a power loss or an OS crash (the WAL is only synced at
    /// checkpoints), and is much faster (no `fsync` per write). A lost claim or response lets a
    /// resend run the body a second time, so opt out only where that is acceptable (tests,
    /// caches of work that is safe to repeat).
    ///
    /// ```
    /// use retry_core::idempotency::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-sync-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// assert!(format!("{store:?}").contains("synchronous_full: true"), "FULL by default");
    /// let store = store.with_synchronous_full(false);
    /// assert!(format!("{store:?}").contains("synchronous_full: false"));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    #[must_use]
    pub fn with_synchronous_full(self, full: bool) -> Self {
        self.reconfigure(|settings| settings.synchronous_full = full)
    }

    /// The most connections this store opens to its file (default 4, at least 1). An operation
    /// that finds them all in use waits for one, at most the busy timeout.
    ///
    /// Every operation writes, and SQLite lets one writer at a time into a file, so more
    /// connections do not make writes faster: within a process they only change who waits on
    /// SQLite's busy handler rather than on the pool. They keep one slow operation (a large
    /// purge batch) from holding up every other.
    ///
    /// ```
    /// use retry_core::idempotency::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-max-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?.with_max_connections(1);
    /// assert!(format!("{store:?}").contains("max_connections: 1"));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    #[must_use]
    pub fn with_max_connections(self, max: usize) -> Self {
        self.reconfigure(|settings| settings.max_connections = max.max(1))
    }

    /// Size limits for keys and responses (checked by the `#[idempotent]` flow before the store
    /// is touched).
    ///
    /// ```
    /// use retry_core::idempotency::{IdempotencyStore, Limits, SqliteStore};
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-limits-{}.sqlite3", std::process::id()));
    /// let limits = Limits { max_key_bytes: 128, max_response_bytes: 4096 };
    /// let store = SqliteStore::open(&path)?.with_limits(limits);
    /// assert_eq!(store.limits(), limits);
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The file this store keeps its rows in.
    ///
    /// ```
    /// use retry_core::idempotency::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-path-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// assert_eq!(store.path(), path);
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::idempotency::StoreError>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.pool.path
    }

    /// Purges rows older than `age` (whose own retention has passed too) every `every`, off the
    /// request path, starting now. Errors are logged with `tracing` and the next round tries
    /// again; the task never panics. It holds the store only weakly: it ends by itself at the
    /// first round after every other `Arc` to the store is dropped, or when the handle is
    /// aborted. An `every` of
    /// less than a second counts as one second.
    ///
    /// # Panics
    /// Outside a Tokio runtime (like `tokio::spawn`).
    ///
    /// ```
    /// use retry_core::idempotency::SqliteStore;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-purger-{}.sqlite3", std::process::id()));
    /// let store = Arc::new(SqliteStore::open(&path)?);
    /// let purger = store.spawn_purger(Duration::from_secs(30 * 86_400), Duration::from_secs(3600));
    /// // ... serve requests with `&*store` ...
    /// purger.abort();
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    pub fn spawn_purger(
        self: &Arc<Self>,
        age: Duration,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        super::purge::spawn_purger(self, age, every, self.pool.path.display().to_string())
    }

    /// The same store with other connection settings: idle connections are closed, and the
    /// next operation opens one with the new settings.
    fn reconfigure(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.pool.settings;
        change(&mut settings);
        self.pool = Arc::new(self.pool.with_settings(settings));
        self
    }

    /// Runs `op` on a pooled connection, off the async executor (see [`Pool::run`]).
    async fn run<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &dyn Clock) -> Result<T, Fail> + Send + 'static,
    {
        let clock = Arc::clone(&self.clock);
        self.pool.run(move |conn| op(conn, &*clock)).await
    }

    /// Runs `work` on a pooled connection that is to hold the write lock: this store's writer
    /// permit is taken first ([`Pool::reserve_writer`]), and `work` runs where the lock's
    /// holder should ([`holding_lock`]).
    async fn writing<T: Send + 'static>(
        &self,
        work: impl FnOnce(Arc<Pool>, TxConnection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let pool = Arc::clone(&self.pool);
        let reservation = pool
            .reserve_writer()
            .await
            .map_err(StoreError::from_sqlite)?;
        holding_lock(&self.pool.path, move || {
            let pooled = pool
                .checkout(reservation)
                .map_err(StoreError::from_sqlite)?;
            work(pool, TxConnection(pooled))
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

/// The claim inside the handler's transaction (`claim_in_transaction`), on `conn`: a key that
/// is over is answered from a plain read (no lock, no transaction); any other key gets
/// `BEGIN IMMEDIATE` and then exactly `claim_in`'s insert-or-decide, whose writes stay in the
/// open transaction. `Ok(Err(outcome))`: the key is not ours, and `conn` is back in autocommit.
fn claim_in_transaction_on(
    conn: &TxConnection,
    clock: &dyn Clock,
    request: &OwnedRequest,
) -> Result<Result<Claim, ClaimOutcome>, Fail> {
    let c = conn.connection()?;
    if let Some(row) = read_row(c, &request.key)?
        && let Some(outcome) = settled(&row, request)?
    {
        return Ok(Err(outcome));
    }
    // Waits for the write lock (a duplicate's transaction, any other writer) at most the busy
    // timeout; the decision below is taken under it, with the time read after it was granted.
    c.execute_batch("BEGIN IMMEDIATE")?;
    let now = clock.now();
    let outcome = if insert_claim(c, request, now)? == 1 {
        ClaimOutcome::Claimed(Claim::first(&request.key))
    } else {
        decide(c, request, &now, &format_utc(now))?
    };
    match outcome {
        ClaimOutcome::Claimed(claim) => Ok(Ok(claim)),
        // Nothing of this transaction is kept: end it now, so the connection is pooled.
        refused => {
            c.execute_batch("ROLLBACK")?;
            Ok(Err(refused))
        }
    }
}

impl IdempotencyStore for SqliteStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let request = OwnedRequest::from(request);
        self.run(move |conn, clock| claim_in(conn, clock, &request))
            .await
    }

    async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
        let (key, response) = (claim.key.clone(), response.to_owned());
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.run(move |conn, _| {
            settle(
                conn,
                COMPLETE,
                params![response, key, token],
                &key,
                token,
                "done",
            )
        })
        .await
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        let key = claim.key.clone();
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.run(move |conn, _| settle(conn, RELEASE, params![key, token], &key, token, "released"))
            .await
    }

    async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
        let (key, failure) = (claim.key.clone(), failure.to_owned());
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.run(move |conn, _| {
            settle(
                conn,
                MARK_FAILED,
                params![key, token, failure],
                &key,
                token,
                "failed",
            )
        })
        .await
    }

    /// `UPDATE inbox_log SET lease_until = now + lease` for the claim's key, only while its
    /// token is the claim's and it is still `in_progress` (otherwise [`StoreError::Fenced`]):
    /// one statement in autocommit, `now` from the store's clock. A holder whose lease ran out
    /// but whose key nobody took over yet may still renew: the key is still its own.
    ///
    /// ```
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, SqliteStore, StoreError};
    /// use retry_core::time::ManualClock;
    /// use std::sync::Arc;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-renew-{}.sqlite3", std::process::id()));
    /// let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_750_000_000)));
    /// let store = SqliteStore::open(&path)?.with_clock(clock.clone());
    /// let request = ClaimRequest {
    ///     key: "m-1",
    ///     biz_key: "m-1",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(10),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let ClaimOutcome::Claimed(claim) = store.claim(&request).await? else { panic!() };
    /// clock.advance(Duration::from_secs(8));
    /// store.renew(&claim, Duration::from_secs(10)).await?;
    /// // Past the first lease, but the renewed one holds: no takeover.
    /// clock.advance(Duration::from_secs(8));
    /// assert_eq!(store.claim(&request).await?, ClaimOutcome::InProgress);
    /// store.complete(&claim, "\"ok\"").await?;
    /// // A finished claim has nothing left to renew.
    /// assert!(matches!(store.renew(&claim, Duration::from_secs(10)).await, Err(StoreError::Fenced)));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        let key = claim.key.clone();
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.run(move |conn, clock| {
            // A claim its transaction holds needs no lease; a write would only wait for that
            // transaction's lock. The read does not wait (WAL).
            if held_by_transaction(conn, &key, token)? {
                return Ok(());
            }
            let lease_until = format_utc(later(clock.now(), lease));
            guarded(conn, RENEW, params![lease_until, key, token])
        })
        .await
    }

    /// Releases the claim of a *transactional* call that was dropped before its commit (the
    /// flow calls it for nothing else): the call's [`SqliteTransaction`] rolled back when it was
    /// dropped, so none of the body's writes happened and the key may be freed. A dropped
    /// non-transactional call is never abandoned: its effect is unknown, so its key stays in
    /// progress until the lease runs out.
    ///
    /// Starts the release on Tokio's blocking pool when called inside a runtime; returns whether
    /// it was started (outside a runtime nothing happens and the lease frees the claim). The
    /// release waits for the write lock like any write, so it lands after the dropped
    /// transaction's rollback. The outcome is logged: a claim taken over meanwhile is left
    /// alone.
    fn abandon(&self, claim: Claim) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let Ok(token) = i64::try_from(claim.token) else {
            return false;
        };
        let key = claim.key;
        let pool = Arc::clone(&self.pool);
        // A task of its own: the wait for a connection must not hold a blocking thread either.
        runtime.spawn(async move {
            let path = pool.path.clone();
            let released = pool
                .run(move |conn| guarded(conn, RELEASE, params![key, token]).map(|()| key))
                .await;
            match released {
                Ok(key) => tracing::debug!(path = %path.display(), %key, token, "released an abandoned claim"),
                Err(StoreError::Fenced) => {
                    tracing::debug!(path = %path.display(), token, "abandoned claim was already taken over")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), token, error = %crate::error_chain(&e), "could not release an abandoned claim; its lease will free it")
                }
            }
        });
        true
    }

    async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
        self.run(move |conn, clock| purge_in(conn, clock, age))
            .await
    }

    fn limits(&self) -> Limits {
        self.limits
    }
}

// ---- transactional mode ----

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
///   rollback: the key is free at once.
/// - It holds one of the store's [connections](SqliteStore::with_max_connections) until it
///   ends.
///
/// The closure given to [`run`](Self::run) gets a `&rusqlite::Connection`. Closures rarely need
/// to name rusqlite's types (`|c| c.execute(...)` infers them); to use `rusqlite::params!` or
/// name `rusqlite::Error`, depend on the same `rusqlite` version as retry-core (0.43).
///
/// ```
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, SqliteStore, TransactionalStore};
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
    /// `SAVEPOINT` / `RELEASE` / `ROLLBACK TO` are fine). An error returned by `f` leaves the
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
    /// use retry_core::idempotency::{SqliteStore, TransactionalStore};
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
                path: conn.0.pool().path.clone(),
                source: result.err(),
            },
        ))));
    }
    Ok(result?)
}

/// A pooled connection inside `BEGIN IMMEDIATE`, rolled back in place when dropped. Then the
/// pooled connection goes back to the pool if the rollback worked, and is closed otherwise.
struct TxConnection(PooledConnection);

impl TxConnection {
    fn connection(&self) -> Result<&Connection, Fail> {
        self.0
            .connection()
            .map_err(|e| Fail::Store(StoreError::from_sqlite(e)))
    }

    /// Whether its transaction is still open.
    fn is_open(&self) -> bool {
        self.0.connection().is_ok_and(|c| !c.is_autocommit())
    }
}

impl Drop for TxConnection {
    fn drop(&mut self) {
        if !self.is_open() {
            return;
        }
        let Ok(conn) = self.0.connection() else {
            return;
        };
        // Cheap enough for any thread, async ones included: rolling back a WAL transaction
        // discards its pages and releases the write lock, with no disk write and no lock wait.
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            tracing::warn!(path = %self.0.pool().path.display(), error = %crate::error_chain(&e), "rolling back a dropped transaction failed; closing its connection instead");
        }
        // `PooledConnection::drop` closes the connection if the transaction is still open.
    }
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
    /// use retry_core::idempotency::{SqliteStore, TransactionalStore};
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
    /// A key that is done (or kept failed) is answered from a plain read first, which in WAL
    /// mode neither takes nor waits for the write lock. A duplicate of a key whose transaction
    /// is open waits for the write lock in `BEGIN IMMEDIATE` (at most the busy timeout, then
    /// [`StoreError::Unavailable`]) and then finds the committed `done` row: a replay, never a
    /// second run. Runs on a blocking thread (in place outside a Tokio runtime).
    ///
    /// ```
    /// use retry_core::idempotency::{
    ///     ClaimOutcome, ClaimRequest, IdempotencyStore, SqliteStore, TransactionClaim,
    ///     TransactionalStore,
    /// };
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
        self.writing(move |pool, conn| {
            // On an error `conn` is dropped, which rolls back whatever was begun.
            let claimed =
                claim_in_transaction_on(&conn, &*clock, &request).map_err(|e| pool.fail(e))?;
            Ok(match claimed {
                Ok(claim) => TransactionClaim::Claimed(ClaimedTransaction {
                    claim,
                    transaction: SqliteTransaction {
                        conn: Some(conn),
                        pool,
                    },
                    in_transaction: true,
                }),
                Err(refused) => TransactionClaim::Refused(refused),
            })
        })
        .await
    }

    /// In `transaction`: `UPDATE inbox_log SET status = 'done', response = ?` for the claim's
    /// key, only if its token and `in_progress` still hold. One row: `COMMIT`, so the handler's
    /// writes and the response commit together. No row (the claim was taken over, or already
    /// finished): `ROLLBACK` and [`StoreError::Fenced`]. Runs on a blocking thread (in place
    /// outside a Tokio runtime); if this future is dropped, the commit still finishes there.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] as above; [`StoreError::Unavailable`] if the transaction belongs
    /// to another database file, is no longer open (see [`SqliteTransaction::run`]), or SQLite
    /// fails; the transaction is then rolled back.
    ///
    /// ```
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, SqliteStore, StoreError, TransactionalStore};
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
            let committed = commit_in(&conn, &response, &key, token).map_err(|e| pool.fail(e));
            Ok::<_, StoreError>((conn, committed))
        })
        .await?;
        // Given back here, on the runtime's thread, with the store's writer permit: the next
        // writer is woken from a worker (it runs next there), not from a blocking thread.
        drop(conn);
        committed
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
    /// use retry_core::idempotency::{SqliteStore, TransactionalStore};
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
    /// use retry_core::idempotency::{SqliteStore, TransactionalStore};
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

/// The `done` update and the commit of the handler's transaction.
fn commit_in(conn: &TxConnection, response: &str, key: &str, token: i64) -> Result<(), Fail> {
    let c = conn.connection()?;
    let changed = c
        .prepare_cached(COMPLETE)?
        .execute(params![response, key, token])?;
    if changed == 0 {
        // Taken over (or finished) meanwhile: dropping `conn` rolls the handler's writes back.
        return Err(Fail::Store(StoreError::Fenced));
    }
    c.execute_batch("COMMIT")?;
    Ok(())
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

/// A [`ClaimRequest`] that can move to the blocking pool.
struct OwnedRequest {
    key: String,
    biz_key: String,
    fingerprint: Option<String>,
    lease: Duration,
    retention: Duration,
}

impl From<&ClaimRequest<'_>> for OwnedRequest {
    fn from(request: &ClaimRequest<'_>) -> Self {
        OwnedRequest {
            key: request.key.to_owned(),
            biz_key: request.biz_key.to_owned(),
            fingerprint: request.fingerprint.map(str::to_owned),
            lease: request.lease,
            retention: request.retention,
        }
    }
}

/// Why an operation failed before its errors get the file's name.
type Fail = sql::Fail<StoreError>;

impl FromSqliteError for StoreError {
    /// The plumbing's failures, as this store has always reported them: `Unavailable`, with
    /// SQLite's error (or the plumbing's own error naming the file) as the source.
    fn from_sqlite(error: sql::Error) -> Self {
        StoreError::Unavailable(match error {
            sql::Error::Locked(e) => Box::new(e),
            sql::Error::Sql { source, .. } => Box::new(source),
            sql::Error::OpenFailed(e) => Box::new(e),
            sql::Error::PoolExhausted(e) => Box::new(e),
            sql::Error::Message(message) => message.into(),
            sql::Error::Worker { source, .. } => {
                format!("SQLite worker task failed: {source}").into()
            }
        })
    }
}

fn corrupt(key: &str, what: impl fmt::Display) -> Fail {
    Fail::Store(StoreError::Corrupt(format!(
        "inbox_log row `{key}`: {what}"
    )))
}

/// The claim: insert under the primary key, or decide about the row that is there, in one
/// `BEGIN IMMEDIATE` transaction. Mirrors `MemoryStore::claim_now` line by line.
///
/// A key that is done (or kept failed) is final: a duplicate is answered from a plain read
/// first, which in WAL mode neither takes nor waits for the write lock (a write transaction
/// for every duplicate made replay half as fast as a primary-key `SELECT`; see BENCHMARKS.md).
/// A key that read no row is claimed by the `INSERT` alone, in autocommit. Any other key (or
/// one inserted by another connection since the read) goes on to the `INSERT` in the
/// transaction, so two concurrent first calls still cannot both win.
fn claim_in(
    conn: &mut Connection,
    clock: &dyn Clock,
    request: &OwnedRequest,
) -> Result<ClaimOutcome, Fail> {
    match read_row(conn, &request.key)? {
        Some(row) => {
            if let Some(outcome) = settled(&row, request)? {
                return Ok(outcome);
            }
        }
        None => {
            if insert_claim(conn, request, clock.now())? == 1 {
                return Ok(ClaimOutcome::Claimed(Claim::first(&request.key)));
            }
        }
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = clock.now();
    let outcome = if insert_claim(&tx, request, now)? == 1 {
        ClaimOutcome::Claimed(Claim::first(&request.key))
    } else {
        decide(&tx, request, &now, &format_utc(now))?
    };
    tx.commit()?;
    Ok(outcome)
}

/// Runs [`INSERT_CLAIM`] for `request` at `now`: `1` when it inserted the claim, `0` when the
/// key was there. On a transaction, through its `Deref` to the connection.
fn insert_claim(conn: &Connection, request: &OwnedRequest, now: SystemTime) -> Result<usize, Fail> {
    Ok(conn.prepare_cached(INSERT_CLAIM)?.execute(params![
        request.key,
        request.biz_key,
        format_utc(now),
        request.fingerprint,
        format_utc(later(now, request.lease)),
        format_utc(later(now, request.retention)),
    ])?)
}

/// A row of `inbox_log`, its columns checked.
struct Row {
    status: String,
    response: Value,
    fingerprint: Option<String>,
    token: i64,
    lease_until: Value,
    /// Held by a handler's transaction (`begin_for`) rather than by its lease.
    in_transaction: bool,
}

/// The row at `key`, if there is one.
fn read_row(conn: &Connection, key: &str) -> Result<Option<Row>, Fail> {
    let row = conn
        .prepare_cached(SELECT_ROW)?
        .query_row([key], |row| {
            Ok([
                row.get::<_, Value>(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ])
        })
        .optional()?;
    let Some(
        [
            status,
            response,
            fingerprint,
            token,
            lease_until,
            in_transaction,
        ],
    ) = row
    else {
        return Ok(None);
    };
    let in_transaction = match in_transaction {
        Value::Integer(0) => false,
        Value::Integer(1) => true,
        other => return Err(corrupt(key, format_args!("bad in_transaction {other:?}"))),
    };
    let token = match token {
        Value::Integer(token) if token >= 1 => token,
        other => return Err(corrupt(key, format_args!("bad token {other:?}"))),
    };
    let fingerprint = match fingerprint {
        Value::Null => None,
        Value::Text(text) => Some(text),
        other => return Err(corrupt(key, format_args!("bad fingerprint {other:?}"))),
    };
    let status = match status {
        Value::Text(status) => status,
        other => return Err(corrupt(key, format_args!("bad status {other:?}"))),
    };
    Ok(Some(Row {
        status,
        response,
        fingerprint,
        token,
        lease_until,
        in_transaction,
    }))
}

/// Whether the claim (`key`, `token`) is in progress and held by its transaction.
fn held_by_transaction(conn: &Connection, key: &str, token: i64) -> Result<bool, Fail> {
    let held: Option<i64> = conn
        .prepare_cached(HELD)?
        .query_row(params![key, token], |row| row.get(0))
        .optional()?;
    Ok(held == Some(1))
}

/// The answer for a key whose call is over (done, or kept failed); `None` for any other row.
fn settled(row: &Row, request: &OwnedRequest) -> Result<Option<ClaimOutcome>, Fail> {
    if row.status != "done" && row.status != "failed" {
        return Ok(None);
    }
    if request.fingerprint.is_some() && row.fingerprint != request.fingerprint {
        return Ok(Some(ClaimOutcome::KeyReused));
    }
    match (row.status.as_str(), &row.response) {
        ("done", Value::Text(response)) => Ok(Some(ClaimOutcome::Done(response.clone()))),
        ("done", other) => Err(corrupt(
            &request.key,
            format_args!("done without a text response ({other:?})"),
        )),
        (_, Value::Text(failure)) => Ok(Some(ClaimOutcome::Failed(failure.clone()))),
        _ => Ok(Some(ClaimOutcome::Failed(String::new()))),
    }
}

/// What the row found at `request.key` means, taking it over if its lease has ended.
fn decide(
    tx: &Connection,
    request: &OwnedRequest,
    now: &SystemTime,
    now_text: &str,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key.as_str();
    // The insert met this row under the write lock, which is still held.
    let Some(row) = read_row(tx, key)? else {
        return Err(corrupt(
            key,
            "the row that refused the insert cannot be read back",
        ));
    };
    let token = row.token;
    if row.status == "released" {
        // Nothing was kept for this key: claim it afresh, whatever its payload.
        let next = token
            .checked_add(1)
            .ok_or_else(|| corrupt(key, "token cannot grow any more"))?;
        let reclaimed = tx.prepare_cached(RECLAIM)?.execute(params![
            request.biz_key,
            now_text,
            request.fingerprint,
            format_utc(later(*now, request.lease)),
            format_utc(later(*now, request.retention)),
            key,
            token
        ])?;
        if reclaimed != 1 {
            return Err(corrupt(key, "the released row could not be claimed again"));
        }
        let token = u64::try_from(next).map_err(|_| corrupt(key, "bad token"))?;
        return Ok(ClaimOutcome::Claimed(Claim {
            key: key.to_owned(),
            token,
        }));
    }
    if let Some(outcome) = settled(&row, request)? {
        return Ok(outcome);
    }
    if request.fingerprint.is_some() && row.fingerprint != request.fingerprint {
        return Ok(ClaimOutcome::KeyReused);
    }
    let lease_until = row.lease_until;
    match row.status.as_str() {
        "in_progress" => {
            let lease_until = match lease_until {
                Value::Text(text) if parse_utc(&text).is_some() => text,
                other => return Err(corrupt(key, format_args!("bad lease_until {other:?}"))),
            };
            // A row a handler's transaction holds is decided by that transaction, not the
            // lease: this claim holds the write lock, so no transaction is open, and as the row
            // is still in progress its transaction ended without committing (rolled back, its
            // process gone): nothing of it happened, the key is free now.
            if row.in_transaction {
                tracing::info!(
                    key,
                    "the transaction that held this key ended without committing: the key is claimed again at once"
                );
            } else if lease_until.as_str() > now_text {
                // Both sides are `format_utc` text: comparing them is comparing the times.
                return Ok(ClaimOutcome::InProgress);
            }
            let Some(next) = token.checked_add(1) else {
                return Err(corrupt(key, "token cannot grow any more"));
            };
            let lease_until = format_utc(later(*now, request.lease));
            let expires_at = format_utc(later(*now, request.retention));
            let taken = tx.prepare_cached(TAKE_OVER)?.execute(params![
                lease_until,
                key,
                token,
                expires_at
            ])?;
            if taken != 1 {
                return Err(corrupt(key, "the expired claim could not be taken over"));
            }
            // `next` is at least 2.
            let token = u64::try_from(next).map_err(|_| corrupt(key, "bad token"))?;
            Ok(ClaimOutcome::Claimed(Claim {
                key: key.to_owned(),
                token,
            }))
        }
        other => Err(corrupt(key, format_args!("unknown status {other:?}"))),
    }
}

/// One statement guarded by the claim's token, in autocommit: no row touched means the claim
/// was taken over (or finished): [`StoreError::Fenced`].
fn guarded(conn: &mut Connection, sql: &str, params: impl rusqlite::Params) -> Result<(), Fail> {
    // One statement: atomic in autocommit, with the write lock taken at its start.
    let changed = conn.prepare_cached(sql)?.execute(params)?;
    if changed == 0 {
        Err(Fail::Store(StoreError::Fenced))
    } else {
        Ok(())
    }
}

/// [`guarded`] for a write that settles the claim (`complete`, `release`, `mark_failed`) into
/// `status`: when it changes no row but the row is already in `status` under the claim's own
/// token, it is a retry of a call whose first try committed and whose answer was lost (a
/// timeout, a dropped connection): `Ok`, as [`MemoryStore`](super::MemoryStore) answers.
///
/// The extra read is on the zero-rows path only: the hot path stays one statement. It need not
/// be in the update's transaction: a row in a settled state under a token leaves it only by
/// being purged or, once released, claimed again with a larger token, and either is a
/// [`StoreError::Fenced`] for this claim at the moment of the read.
fn settle(
    conn: &mut Connection,
    sql: &str,
    params: impl rusqlite::Params,
    key: &str,
    token: i64,
    status: &str,
) -> Result<(), Fail> {
    match guarded(conn, sql, params) {
        Err(Fail::Store(StoreError::Fenced)) => {
            let row = conn
                .prepare_cached(SELECT_SETTLED)?
                .query_row([key], |row| {
                    Ok((row.get::<_, Value>(0)?, row.get::<_, Value>(1)?))
                })
                .optional()?;
            match row {
                Some((Value::Text(found), Value::Integer(found_token)))
                    if found == status && found_token == token =>
                {
                    Ok(())
                }
                _ => Err(Fail::Store(StoreError::Fenced)),
            }
        }
        other => other,
    }
}

/// Deletes by age only, in batches of [`PURGE_BATCH`] rows, each its own transaction.
fn purge_in(conn: &mut Connection, clock: &dyn Clock, age: Duration) -> Result<u64, Fail> {
    let now = clock.now();
    let cutoff = format_utc(now.checked_sub(age).unwrap_or(UNIX_EPOCH));
    let now = format_utc(now);
    let batch = i64::try_from(PURGE_BATCH).unwrap_or(i64::MAX);
    let mut purged = 0u64;
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let deleted = tx
            .prepare_cached(PURGE)?
            .execute(params![cutoff, now, batch])?;
        tx.commit()?;
        purged += deleted as u64;
        if deleted < PURGE_BATCH {
            return Ok(purged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::sqlite::Reservation;
    use rusqlite::ErrorCode;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Instant;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(test: &str) -> Self {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir().join(format!(
                "retry-core-sqlite-unit-{test}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn db(&self) -> PathBuf {
            self.0.join("inbox.sqlite3")
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn request(key: &str) -> ClaimRequest<'_> {
        ClaimRequest {
            key,
            biz_key: key,
            fingerprint: None,
            lease: Duration::from_secs(30),
            retention: Duration::from_secs(86_400),
        }
    }

    const ROW: &str = "INSERT INTO inbox_log \
         (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
         VALUES (?1, 'b', ?2, ?3, '2025-01-01T00:00:00.000000Z', NULL, ?4, ?5, '2999-01-01T00:00:00.000000Z')";

    fn corrupt_message(outcome: Result<ClaimOutcome, StoreError>) -> String {
        match outcome {
            Err(StoreError::Corrupt(what)) => what,
            other => panic!("expected a corrupt row, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn unreadable_rows_are_corrupt_and_name_their_key() {
        let dir = TempDir::new("corrupt");
        let store = SqliteStore::open(dir.db()).unwrap();
        let raw = Connection::open(dir.db()).unwrap();
        let far = "2999-01-01T00:00:00.000000Z";
        raw.execute(
            ROW,
            params!["bad-lease", "in_progress", None::<String>, 1, "yesterday"],
        )
        .unwrap();
        raw.execute(ROW, params!["no-response", "done", None::<String>, 1, far])
            .unwrap();
        raw.execute(
            ROW,
            params!["text-token", "in_progress", None::<String>, "one", far],
        )
        .unwrap();
        raw.execute(ROW, params!["zero-token", "failed", None::<String>, 0, far])
            .unwrap();
        for (key, what) in [
            ("bad-lease", "bad lease_until"),
            ("no-response", "done without a text response"),
            ("text-token", "bad token"),
            ("zero-token", "bad token"),
        ] {
            let message = corrupt_message(store.claim(&request(key)).await);
            assert!(
                message.contains(&format!("`{key}`")) && message.contains(what),
                "{message}"
            );
        }
    }

    #[tokio::test]
    async fn an_unknown_status_is_corrupt() {
        let dir = TempDir::new("status");
        // A table made by hand, without the CHECK constraint: `open` keeps it as it is.
        let raw = Connection::open(dir.db()).unwrap();
        raw.execute_batch(
            "CREATE TABLE inbox_log (msg_id TEXT PRIMARY KEY, biz_key TEXT NOT NULL, status TEXT NOT NULL, \
             response TEXT, created_at TEXT NOT NULL, fingerprint TEXT, token INTEGER NOT NULL, \
             lease_until TEXT NOT NULL, expires_at TEXT NOT NULL)",
        )
        .unwrap();
        let store = SqliteStore::open(dir.db()).unwrap();
        raw.execute(
            ROW,
            params![
                "odd",
                "paused",
                None::<String>,
                1,
                "2999-01-01T00:00:00.000000Z"
            ],
        )
        .unwrap();
        let message = corrupt_message(store.claim(&request("odd")).await);
        assert!(
            message.contains("`odd`") && message.contains("unknown status \"paused\""),
            "{message}"
        );
    }

    #[test]
    fn the_status_is_checked_by_the_table() {
        let dir = TempDir::new("check");
        let _store = SqliteStore::open(dir.db()).unwrap();
        let raw = Connection::open(dir.db()).unwrap();
        let refused = raw.execute(
            ROW,
            params![
                "odd",
                "paused",
                None::<String>,
                1,
                "2999-01-01T00:00:00.000000Z"
            ],
        );
        assert_eq!(
            refused.unwrap_err().sqlite_error_code(),
            Some(ErrorCode::ConstraintViolation)
        );
    }

    #[test]
    fn opening_twice_migrates_once_and_a_newer_schema_is_refused() {
        let dir = TempDir::new("schema");
        let first = SqliteStore::open(dir.db()).unwrap();
        let second = SqliteStore::open(dir.db()).unwrap();
        drop((first, second));
        let raw = Connection::open(dir.db()).unwrap();
        let mode: String = raw
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let versions: Vec<(String, i64)> = raw
            .prepare("SELECT component, version FROM retry_core_schema")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(versions, [("inbox_log".to_owned(), 2)]);
        let user_version: i64 = raw
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(user_version, 0, "user_version is left to the application");

        raw.execute("UPDATE retry_core_schema SET version = 3", [])
            .unwrap();
        let error = crate::error_chain(&SqliteStore::open(dir.db()).unwrap_err()).to_string();
        assert!(
            error.contains("schema version 3, newer than the 2"),
            "{error}"
        );
    }

    /// A file written by the version-1 layout (no `in_transaction`) is upgraded when opened:
    /// its claims kept, their lease rules unchanged.
    #[tokio::test]
    async fn a_version_1_file_is_upgraded_and_keeps_its_claims() {
        let dir = TempDir::new("upgrade");
        let raw = Connection::open(dir.db()).unwrap();
        raw.execute_batch(&crate::sql::migration(TABLES)).unwrap();
        raw.execute(RECORD_VERSION, [1]).unwrap();
        raw.execute(
            ROW,
            params![
                "kept",
                "in_progress",
                None::<String>,
                1,
                "2100-01-01T00:00:00.000000Z"
            ],
        )
        .unwrap();
        let store = SqliteStore::open(dir.db()).unwrap();
        let version: i64 = raw.query_row(SELECT_VERSION, [], |row| row.get(0)).unwrap();
        assert_eq!(version, 2);
        assert_eq!(
            store.claim(&request("kept")).await.unwrap(),
            ClaimOutcome::InProgress
        );
        let ClaimOutcome::Claimed(claim) = store.claim(&request("new")).await.unwrap() else {
            panic!("a new key is claimed");
        };
        let tx = store.begin_for(&claim).await.unwrap();
        store.commit_done(tx, &claim, "1").await.unwrap();
    }

    #[test]
    fn connections_use_the_configured_synchronous_mode() {
        let dir = TempDir::new("synchronous");
        let synchronous = |store: &SqliteStore| -> i64 {
            store
                .pool
                .with_connection(Reservation::none(), |conn| -> Result<i64, Fail> {
                    Ok(conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?)
                })
                .unwrap()
        };
        let store = SqliteStore::open(dir.db()).unwrap();
        assert_eq!(synchronous(&store), 2, "FULL by default");
        let store = store.with_synchronous_full(false);
        assert_eq!(synchronous(&store), 1, "NORMAL when asked");
        let store = store.with_synchronous_full(true);
        assert_eq!(synchronous(&store), 2, "FULL again");
    }

    #[test]
    fn without_a_runtime_operations_run_in_place() {
        let dir = TempDir::new("no-runtime");
        let store = SqliteStore::open(dir.db()).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let request = request("k");
        let mut claim = pin!(store.claim(&request));
        let Poll::Ready(Ok(ClaimOutcome::Claimed(claim))) = claim.as_mut().poll(&mut cx) else {
            panic!("the claim did not finish in place");
        };
        assert!(
            !store.abandon(claim.clone()),
            "no runtime, no background release"
        );
        let mut complete = pin!(store.complete(&claim, "1"));
        assert!(matches!(
            complete.as_mut().poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
    }

    #[tokio::test]
    async fn a_huge_busy_timeout_is_capped_not_a_panic() {
        let dir = TempDir::new("huge-timeout");
        let store = SqliteStore::open(dir.db())
            .unwrap()
            .with_busy_timeout(Duration::MAX);
        assert!(matches!(
            store.claim(&request("k")).await,
            Ok(ClaimOutcome::Claimed(_))
        ));
    }

    #[tokio::test]
    async fn a_locked_file_fails_after_the_busy_timeout_naming_the_file() {
        let dir = TempDir::new("locked");
        let store = SqliteStore::open(dir.db())
            .unwrap()
            .with_busy_timeout(Duration::from_millis(50));
        let locker = Connection::open(dir.db()).unwrap();
        locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let error = store.claim(&request("k")).await.unwrap_err();
        let expected = format!(
            "database file {} is locked by another process (busy for 50ms)",
            dir.db().display()
        );
        let chain = crate::error_chain(&error).to_string();
        assert!(chain.contains(&expected), "{chain}");
        let source = std::error::Error::source(&error).and_then(std::error::Error::source);
        assert!(
            source.is_some_and(|e| e.is::<rusqlite::Error>()),
            "the SQLite error is kept as the source"
        );
        locker.execute_batch("COMMIT").unwrap();
        assert!(matches!(
            store.claim(&request("k")).await,
            Ok(ClaimOutcome::Claimed(_))
        ));
    }

    #[test]
    fn the_pool_waits_for_a_connection_at_most_the_busy_timeout() {
        let dir = TempDir::new("pool");
        let store = SqliteStore::open(dir.db())
            .unwrap()
            .with_max_connections(1)
            .with_busy_timeout(Duration::from_millis(50));
        let held = store.pool.checkout(Reservation::none()).unwrap();
        let started = Instant::now();
        let error =
            StoreError::from_sqlite(store.pool.checkout(Reservation::none()).err().unwrap());
        assert!(started.elapsed() >= Duration::from_millis(50));
        let chain = crate::error_chain(&error).to_string();
        assert!(
            chain.contains("all 1 connections to database file"),
            "{chain}"
        );
        drop(held);
        assert!(store.pool.checkout(Reservation::none()).is_ok());
    }

    #[test]
    fn a_connection_left_in_a_transaction_is_not_reused() {
        let dir = TempDir::new("dirty");
        let store = SqliteStore::open(dir.db()).unwrap();
        let mut pooled = store.pool.checkout(Reservation::none()).unwrap();
        let conn = pooled.connection_mut().unwrap();
        conn.execute_batch("BEGIN").unwrap();
        drop(pooled);
        let state = store.pool.state();
        assert_eq!((state.open, state.idle.len()), (0, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_opens_at_most_max_connections() {
        let dir = TempDir::new("max");
        let store = Arc::new(SqliteStore::open(dir.db()).unwrap().with_max_connections(2));
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let key = format!("k{i}");
                    let ClaimOutcome::Claimed(claim) = store.claim(&request(&key)).await.unwrap()
                    else {
                        panic!()
                    };
                    store.complete(&claim, "1").await.unwrap();
                    store.pool.state().open
                })
            })
            .collect();
        for task in tasks {
            assert!(task.await.unwrap() <= 2);
        }
    }

    #[test]
    fn transactions_run_in_place_without_a_runtime() {
        let dir = TempDir::new("tx-no-runtime");
        let store = SqliteStore::open(dir.db()).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(Ok(ClaimOutcome::Claimed(claim))) =
            pin!(store.claim(&request("k"))).poll(&mut cx)
        else {
            panic!("the claim did not finish in place");
        };
        let Poll::Ready(Ok(mut tx)) = pin!(store.begin()).poll(&mut cx) else {
            panic!("begin did not finish in place");
        };
        let created = pin!(tx.run(|c| c.execute_batch("CREATE TABLE t (x)"))).poll(&mut cx);
        assert!(matches!(created, Poll::Ready(Ok(()))));
        let committed = pin!(store.commit_done(tx, &claim, "1")).poll(&mut cx);
        assert!(matches!(committed, Poll::Ready(Ok(()))));
        let raw = Connection::open(dir.db()).unwrap();
        let tables: i64 = raw
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 't'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(tables, 1);
    }

    #[test]
    fn a_dropped_transaction_rolls_back_in_place_and_its_connection_is_pooled() {
        let dir = TempDir::new("tx-drop");
        let store = SqliteStore::open(dir.db()).unwrap().with_max_connections(1);
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(Ok(mut tx)) = pin!(store.begin()).poll(&mut cx) else {
            panic!("begin did not finish in place");
        };
        let created = pin!(tx.run(|c| c.execute_batch("CREATE TABLE t (x)"))).poll(&mut cx);
        assert!(matches!(created, Poll::Ready(Ok(()))));
        assert!(format!("{tx:?}").contains("open: true"), "{tx:?}");
        drop(tx);
        {
            let state = store.pool.state();
            assert_eq!((state.open, state.idle.len()), (1, 1), "kept, not closed");
            assert!(
                state.idle[0].is_autocommit(),
                "rolled back before it was pooled"
            );
        }
        let raw = Connection::open(dir.db()).unwrap();
        let tables: i64 = raw
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 't'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(tables, 0);
    }

    #[test]
    fn a_transaction_the_handler_ended_is_pooled_and_cannot_commit() {
        let dir = TempDir::new("tx-ended");
        let store = SqliteStore::open(dir.db()).unwrap().with_max_connections(1);
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(Ok(ClaimOutcome::Claimed(claim))) =
            pin!(store.claim(&request("k"))).poll(&mut cx)
        else {
            panic!("the claim did not finish in place");
        };
        let Poll::Ready(Ok(mut tx)) = pin!(store.begin()).poll(&mut cx) else {
            panic!("begin did not finish in place");
        };
        let ended = pin!(tx.run(|c| c.execute_batch("CREATE TABLE t (x); COMMIT"))).poll(&mut cx);
        let Poll::Ready(Err(error)) = ended else {
            panic!("ending the transaction inside the handler was accepted");
        };
        let chain = crate::error_chain(&error).to_string();
        assert!(chain.contains("no longer open"), "{chain}");
        assert!(format!("{tx:?}").contains("open: false"), "{tx:?}");
        {
            let state = store.pool.state();
            assert_eq!((state.open, state.idle.len()), (1, 1));
        }
        let refused = pin!(store.commit_done(tx, &claim, "1")).poll(&mut cx);
        assert!(matches!(
            refused,
            Poll::Ready(Err(StoreError::Unavailable(_)))
        ));
        let raw = Connection::open(dir.db()).unwrap();
        let status: String = raw
            .query_row(
                "SELECT status FROM inbox_log WHERE msg_id = 'k'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(status, "in_progress", "no `done` without its transaction");
    }

    #[test]
    fn leases_past_the_end_of_time_are_clamped() {
        let now = UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        assert_eq!(
            format_utc(later(now, Duration::MAX)),
            "9999-12-31T23:59:59.000000Z"
        );
        assert_eq!(
            later(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }
}
