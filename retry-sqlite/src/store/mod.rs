//! `SqliteStore`: the embedded idempotency store, one SQLite file shared by the threads of a
//! process and by several processes.
//!
//! Design notes (the why of each choice):
//! - Every write (a claim, `complete`, `release`, `mark_failed`, `renew`, a purge batch, the
//!   handler's transaction, the application's [`SqliteStore::write`]) is a write of the file's
//!   queue ([`crate::queue`]): one thread per file runs the writes waiting at the same time in
//!   one `BEGIN IMMEDIATE` transaction, each in its own savepoint, and answers each once that
//!   transaction committed. Nothing waits in SQLite's busy handler for a writer of this
//!   process, and concurrent requests share an `fsync`; other processes still meet at SQLite's
//!   lock, waited for at most the busy timeout.
//! - `synchronous=FULL` by default: the contract frees a key for a second run only when the
//!   first run's effect is known not to have happened, and a claim or `done` row lost to a power
//!   cut would let a resend run the body again. A write's answer comes after its group's
//!   `COMMIT` returned, so a claim is on disk before the handler starts and a response before
//!   it is sent. `NORMAL` (WAL synced only at checkpoints) is an opt-in for receivers that can
//!   afford that ([`SqliteStore::with_synchronous_full`]).
//! - A guarded write (`complete`, `release`, `mark_failed`) that changes no row looks once more:
//!   a row already in the state it writes, under the claim's own token, is a retried call whose
//!   first try committed, so it answers `Ok`, not [`StoreError::Fenced`]. The extra read is on
//!   that path only; the hot path stays one statement.
//! - A takeover refreshes the row's `expires_at` to at least now + retention, and purging never
//!   deletes a row whose lease is live: a row is never purged under a holder at work.
//! - The claim is an `INSERT .. ON CONFLICT(msg_id) DO NOTHING` under the primary key, never a
//!   check-then-insert; an existing row is then read and decided on in the same write, exactly
//!   as [`MemoryStore`](retry_core::idempotency::MemoryStore) decides under its lock. A key that
//!   is done is answered first from a plain read on a reader connection, which in WAL mode
//!   neither takes nor waits for the write lock.
//! - The clock is read inside the write, so a call that waited for the lock sees the time at
//!   which it decides, not the time at which it started waiting.
//! - Reads block: they run in `tokio::task::spawn_blocking`, on a connection from a small pool
//!   of our own (see [`SqliteStore::with_max_connections`]). The maintained pools
//!   (`deadpool-sqlite`, `r2d2_sqlite`) are built on an older rusqlite whose SQLite cannot be
//!   linked beside this crate's (BENCHMARKS.md).
//! - Timestamps are [`format_utc`] text (fixed width, microseconds), so SQL compares them as
//!   strings and the lease check compares the same text.
//! - Transactional mode ([`SqliteTransaction`]): the handler's transaction is lent out of the
//!   file's queue, so the write lock is held from its start to the guarded `done` update; the
//!   handler's statements are sent to the queue's thread and run there, and nothing in between
//!   can fail with `SQLITE_BUSY`. Its `COMMIT` is its group's, shared with the writes queued
//!   behind it. Dropped before its commit, it is rolled back by that thread. Because a takeover
//!   is a write, an open transaction keeps its claim by itself
//!   ([`TransactionalStore::transaction_holds_claim`] is `true`): no lease renewal is needed,
//!   and one would only wait for the lock the transaction holds.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use crate::queue::{Wait, Writes};
use crate::sql::{self as sql, DEFAULT_BUSY_TIMEOUT, FromSqliteError, Pool, Schema, Settings};
use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, ClaimedTransaction, IdempotencyStore, Limits, StepEntry,
    StepWrite, StoreError, TransactionClaim, TransactionalStore,
};
use retry_core::time::{Clock, SystemClock, format_utc, later, parse_utc};

/// The version of the `inbox_log` layout this code writes, kept in `retry_core_schema`.
const SCHEMA_VERSION: i64 = 3;

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
/// ([`TransactionalStore::begin_for`]). Version 3: the step journal, `inbox_steps`
/// ([`IdempotencyStore::read_steps`]).
const UPGRADES: &[&str] = &[
    "ALTER TABLE inbox_log ADD COLUMN in_transaction INTEGER NOT NULL DEFAULT 0",
    steps::STEPS_TABLE,
];

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

mod rows;
mod steps;
#[cfg(test)]
mod tests;
mod transaction;

use rows::*;
pub use transaction::SqliteTransaction;

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
/// - Every write goes through the file's write queue, shared by every store of this process on
///   the file: the writes waiting at the same time commit together (one `fsync`), and each is
///   answered once committed. A write waits at most the busy timeout (default 5 s) for the
///   queue or for another process; after that it fails with [`StoreError::Unavailable`] saying
///   which file is locked.
/// - Timestamps (from the store's [`Clock`]) are stored as fixed-width UTC text with
///   microsecond precision.
///
/// The operations have exactly [`MemoryStore`](retry_core::idempotency::MemoryStore)'s semantics: fenced writes,
/// a retried `complete` / `release` / `mark_failed` whose first try committed answers `Ok`,
/// [`renew`](IdempotencyStore::renew) extends a live holder's lease, a takeover refreshes the
/// row's retention, and purging never deletes a row whose lease is live. One thing the memory
/// store cannot show: an operation whose future is dropped still finishes in the background (a
/// claim made that way is freed by its lease, as after a crash).
///
/// ```
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore};
/// use retry_sqlite::SqliteStore;
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
    /// Reader connections: the claim's first read, the lease check of a renewal.
    pool: Arc<Pool>,
    /// Every write: the file's queue.
    writes: Writes,
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
    /// use retry_sqlite::SqliteStore;
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
        let writes = Writes::open(&pool.path, wait(&pool));
        Ok(SqliteStore {
            pool: Arc::new(pool),
            writes,
            clock: Arc::new(SystemClock),
            limits: Limits::default(),
        })
    }

    /// Reads time from `clock` instead of the system clock (for tests of leases and retention).
    ///
    /// ```
    /// use retry_sqlite::SqliteStore;
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
    /// (busy for 5s)"); also bounds the wait in the file's write queue, behind this process's
    /// other writes, and for a free reader connection. Default 5 s; longer than about 24 days
    /// counts as 24 days. Zero fails at once when another process holds the file, and after a
    /// millisecond in the queue.
    ///
    /// ```
    /// use retry_sqlite::SqliteStore;
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
    /// use retry_sqlite::SqliteStore;
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

    /// The most reader connections this store opens to its file (default 4, at least 1): the
    /// claim's first read (a duplicate of a finished key is answered from it) and a renewal's
    /// lease check. A read that finds them all in use waits for one, at most the busy timeout.
    ///
    /// Writes do not use them: every write goes through the file's write queue, whose one
    /// connection is the file's writer in this process (SQLite lets one writer at a time into a
    /// file, so more writing connections would only wait for each other).
    ///
    /// ```
    /// use retry_sqlite::SqliteStore;
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
    /// use retry_core::idempotency::{IdempotencyStore, Limits};
    /// use retry_sqlite::SqliteStore;
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
    /// use retry_sqlite::SqliteStore;
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
    /// use retry_sqlite::SqliteStore;
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
        retry_core::idempotency::spawn_purger(
            self,
            age,
            every,
            self.pool.path.display().to_string(),
        )
    }

    /// Runs the application's own write `f` in this file's write queue, the queue every write
    /// of the store goes through, and returns what `f` returned once it is committed (synced
    /// to disk with the store's default `synchronous=FULL`).
    ///
    /// A handler whose writes live in the store's file (a booking, an order) should write
    /// through here (or through a transaction from
    /// [`begin`](TransactionalStore::begin)) rather than through a connection of its own: the
    /// store's claims and completions and the handler's writes then queue in the process, in
    /// arrival order, and the writes waiting at the same time share one transaction and its
    /// `fsync` (group commit), instead of each waiting for SQLite's file lock in its busy
    /// handler and paying a commit of its own.
    ///
    /// `f` runs on the file's writer thread, in a savepoint of a transaction it may share with
    /// concurrent writes: an error returned by `f` undoes its statements alone; `f` must not
    /// end the transaction (no `COMMIT`, `ROLLBACK` or `END` of its own), and should be short,
    /// since every other write of the file waits meanwhile. It waits in the queue at most the
    /// [busy timeout](Self::with_busy_timeout).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] wrapping `f`'s `rusqlite::Error`; when the queue stayed busy
    /// (or another process held the file) for the busy timeout ("database file ... is
    /// locked"); or when the transaction it shared could not commit (nothing of it was kept).
    ///
    /// ```
    /// use retry_sqlite::SqliteStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-write-{}.sqlite3", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// store.write(|c| c.execute_batch("CREATE TABLE bookings (id INTEGER PRIMARY KEY, seat TEXT)")).await?;
    /// let id = store
    ///     .write(|c| {
    ///         c.execute("INSERT INTO bookings (seat) VALUES (?1)", ["12A"])?;
    ///         Ok(c.last_insert_rowid())
    ///     })
    ///     .await?;
    /// // Committed: any connection sees it.
    /// let seat: String = rusqlite::Connection::open(&path)?
    ///     .query_row("SELECT seat FROM bookings WHERE id = ?1", [id], |row| row.get(0))?;
    /// assert_eq!(seat, "12A");
    /// // A failed statement undoes its own write only.
    /// assert!(store.write(|c| c.execute("INSERT INTO nowhere VALUES (1)", [])).await.is_err());
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
        R: Send + 'static,
    {
        self.writes.write(move |c| Ok(f(c)?)).await
    }

    /// The same store with other connection settings: idle connections are closed, and the
    /// next operation opens one with the new settings.
    fn reconfigure(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.pool.settings;
        change(&mut settings);
        self.pool = Arc::new(self.pool.with_settings(settings));
        self.writes = self.writes.with_wait(wait(&self.pool));
        self
    }

    /// Runs the read `op` on a reader connection, off the async executor (see [`Pool::run`]).
    async fn read<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Fail> + Send + 'static,
    {
        self.pool.run(move |conn| op(conn)).await
    }

    /// Runs the write `op` in the file's write queue, with the store's clock; answered once its
    /// group committed (see [`crate::queue`]).
    async fn write_store<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &dyn Clock) -> Result<T, Fail> + Send + 'static,
    {
        let clock = Arc::clone(&self.clock);
        self.writes.write(move |conn| op(conn, &*clock)).await
    }
}

/// How a store on `pool`'s settings writes: its busy timeout, its `synchronous`.
fn wait(pool: &Pool) -> Wait {
    Wait {
        busy: pool.busy_timeout(),
        full: pool.settings.synchronous_full,
    }
}

impl IdempotencyStore for SqliteStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let request = Arc::new(OwnedRequest::from(request));
        let read = Arc::clone(&request);
        if let Some(outcome) = self.read(move |conn| claim_settled(conn, &read)).await? {
            return Ok(outcome);
        }
        self.write_store(move |conn, clock| claim_in(conn, clock, &request))
            .await
    }

    async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
        let (key, response) = (claim.key.clone(), response.to_owned());
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.write_store(move |conn, _| {
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
        self.write_store(move |conn, _| {
            settle(conn, RELEASE, params![key, token], &key, token, "released")
        })
        .await
    }

    async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
        let (key, failure) = (claim.key.clone(), failure.to_owned());
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        self.write_store(move |conn, _| {
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
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, StoreError};
    /// use retry_sqlite::SqliteStore;
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
        // A claim its transaction holds needs no lease; a write would only wait for that
        // transaction's lock. The read does not wait (WAL).
        let read = key.clone();
        if self
            .read(move |conn| held_by_transaction(conn, &read, token))
            .await?
        {
            return Ok(());
        }
        self.write_store(move |conn, clock| {
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
        let writes = self.writes.clone();
        // A task of its own: the wait for the queue must not hold a blocking thread either.
        runtime.spawn(async move {
            let path = writes.path().to_path_buf();
            let released = writes
                .write(move |conn| guarded(conn, RELEASE, params![key, token]).map(|()| key))
                .await;
            match released {
                Ok(key) => tracing::debug!(target: "retry_core::idempotency", path = %path.display(), %key, token, "released an abandoned claim"),
                Err(StoreError::Fenced) => {
                    tracing::debug!(target: "retry_core::idempotency", path = %path.display(), token, "abandoned claim was already taken over")
                }
                Err(e) => {
                    tracing::warn!(target: "retry_core::idempotency", path = %path.display(), token, error = %retry_core::error_chain(&e), "could not release an abandoned claim; its lease will free it")
                }
            }
        });
        true
    }

    /// The journal's rows of the claim's key (`inbox_steps`), on a reader connection.
    async fn read_steps(&self, claim: &Claim) -> Result<Vec<StepEntry>, StoreError> {
        let key = claim.key.clone();
        self.read(move |conn| steps::read_steps(conn, &key)).await
    }

    /// A write of the file's queue: the claim's hold on its key checked and the step written
    /// in the same transaction.
    async fn write_step(
        &self,
        claim: &Claim,
        label: &str,
        write: StepWrite<'_>,
    ) -> Result<(), StoreError> {
        let (key, token, label, output) = steps::owned_write(claim, label, write)?;
        self.write_store(move |conn, _| {
            steps::write_step(conn, &key, token, &label, output.as_deref())
        })
        .await
    }

    /// Deletes by age only (the keys' step journals with them), in batches of 5,000 rows, each
    /// a write of the file's queue: claims on the request path are served between batches,
    /// never behind one huge
    /// delete. Every matching row is deleted; the batch size only decides how many writes that
    /// takes.
    async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
        let mut purged = 0u64;
        loop {
            let deleted = self
                .write_store(move |conn, clock| steps::purge_batch(conn, clock, age, PURGE_BATCH))
                .await?;
            purged += deleted as u64;
            if deleted < PURGE_BATCH {
                return Ok(purged);
            }
        }
    }

    fn limits(&self) -> Limits {
        self.limits
    }
}

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
            sql::Error::Shared(e) => Box::new(e),
        })
    }
}
