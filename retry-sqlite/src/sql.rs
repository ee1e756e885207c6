//! The SQLite plumbing of `SqliteStore` and `SqliteDeadLetters`: the small pool of reader
//! connections to one file, the helper that runs blocking SQLite calls off the async executor,
//! the preparation of the file (WAL, busy timeout, `synchronous`) and the migration through
//! `retry_core_schema`. Writes go through the file's write queue ([`crate::queue`]).
//!
//! Design notes (the why of each choice):
//! - SQLite calls block: reads run in `tokio::task::spawn_blocking` (in place outside a
//!   runtime), on a connection from a small pool of our own (idle connections reused, at most
//!   `max_connections`, waiting for one at most the busy timeout). Our own because the
//!   maintained pools (`deadpool-sqlite`, `r2d2_sqlite`) depend on an older rusqlite, whose
//!   `libsqlite3-sys` cannot be linked beside this crate's (one `links = "sqlite3"` per build;
//!   BENCHMARKS.md). It is a read pool only: a connection is held for one blocking call, never
//!   across an `.await`.
//! - The wait for a connection is asynchronous ([`Pool::reserve`], a semaphore with a permit per
//!   connection), before any blocking thread is taken, so a burst of reads never holds Tokio's
//!   blocking threads waiting for connections.
//! - `journal_mode=WAL` (a property of the file): readers never block the writer, and the file is
//!   safe for several processes on one machine (not on a network file system: WAL needs shared
//!   memory).
//! - A connection still inside a transaction when it comes back (its rollback failed) is closed,
//!   never pooled.
//! - Failures come back as [`Error`], which names the file; each store turns it into its own
//!   error type ([`FromSqliteError`]), so their messages stay their own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};

/// Records an upgraded layout's version (`?1`) for its component (`?2`).
const UPDATE_VERSION: &str = "UPDATE retry_core_schema SET version = ?1 WHERE component = ?2";

/// The schema table every store of this crate records its layout version in: a table of our own
/// rather than SQLite's `PRAGMA user_version` or the application's migration tool, because the application's tables
/// may live in the same file, and its migration tool may own `user_version`. retry-postgres keeps its
/// versions in a table of the same name and layout.
///
/// A store's migration is this text followed by its own `CREATE TABLE IF NOT EXISTS` statements,
/// run as one batch.
const SCHEMA_TABLE: &str = "
CREATE TABLE IF NOT EXISTS retry_core_schema (
    component TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
);
";

/// [`SCHEMA_TABLE`] and then a store's own tables, as one batch.
pub(crate) fn migration(tables: &str) -> String {
    format!("{SCHEMA_TABLE}{tables}")
}

/// Why an operation failed before its errors get the file's name: a failed call of the driver
/// (`S`), or the store's own verdict (`E`: a corrupt row, a fenced claim). `?` turns the
/// driver's errors into `Sql`.
pub(crate) enum Failure<S, E> {
    Sql(S),
    Store(E),
}

impl<S, E> From<S> for Failure<S, E> {
    fn from(e: S) -> Self {
        Failure::Sql(e)
    }
}

/// How long an operation waits for a lock held by another connection or process.
pub(crate) const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Per-connection settings, and the pool's size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// How long a call waits for a lock another connection holds; also bounds the wait for a
    /// free connection of the pool.
    pub(crate) busy_timeout: Duration,
    /// `synchronous=FULL` (every commit synced) rather than `NORMAL`.
    pub(crate) synchronous_full: bool,
    /// Connections opened to the file at most.
    pub(crate) max_connections: usize,
}

/// A store's table in the file, and how its layout version is kept in `retry_core_schema`.
#[derive(Debug)]
pub(crate) struct Schema {
    /// The store's type, named when the file cannot use WAL.
    pub(crate) store: &'static str,
    /// The store's table: its row in `retry_core_schema`, named when the file is newer.
    pub(crate) component: &'static str,
    /// The version of the layout this code writes.
    pub(crate) version: i64,
    /// The store's `CREATE TABLE IF NOT EXISTS` / `CREATE INDEX IF NOT EXISTS` statements: the
    /// layout of version 1.
    pub(crate) tables: &'static str,
    /// The steps from each version to the next: `upgrades[0]` takes version 1 to 2, and so on
    /// up to `version`. A new file gets `tables` and then every step, so the layout it ends with
    /// is exactly the one an upgraded file has (as in the PostgreSQL plumbing).
    pub(crate) upgrades: &'static [&'static str],
    /// Reads the store's row of `retry_core_schema`.
    pub(crate) select_version: &'static str,
    /// Records `?1` as the store's version, unless a row is there.
    pub(crate) record_version: &'static str,
}

/// What went wrong in the plumbing, before a store turns it into its own error.
#[derive(Debug)]
pub(crate) enum Error {
    /// SQLITE_BUSY / SQLITE_LOCKED after the busy timeout.
    Locked(Locked),
    /// Any other failed SQLite call on the file.
    Sql {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file could not be opened or created.
    OpenFailed(OpenFailed),
    /// Every connection of the pool stayed in use for the busy timeout.
    PoolExhausted(PoolExhausted),
    /// Any other failure, in words (naming the file where there is one).
    Message(String),
    /// The blocking task running the work failed (it panicked, or the runtime shut down).
    Worker {
        /// The file.
        path: PathBuf,
        /// Why the task failed.
        source: tokio::task::JoinError,
    },
    /// The transaction of the file's write queue that this write shared with others failed
    /// (see [`crate::queue`]).
    Shared(SharedFailed),
}

/// A store's own error type: how an [`Error`] of the plumbing reads as one.
pub(crate) trait FromSqliteError {
    fn from_sqlite(error: Error) -> Self;
}

/// Why an operation failed before its errors get the file's name: a failed SQLite call, or the
/// store's own verdict (a corrupt row, a fenced claim).
pub(crate) type Fail<E> = Failure<rusqlite::Error, E>;

/// Runs `work` off the async executor when a Tokio runtime is present (in place otherwise: the
/// call then blocks its thread, as any SQLite call does). `path` names the file if the blocking
/// task fails.
pub(crate) async fn blocking<T: Send + 'static, E: FromSqliteError + Send + 'static>(
    path: &Path,
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, E> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn_blocking(work).await.unwrap_or_else(|e| {
            Err(E::from_sqlite(Error::Worker {
                path: path.to_path_buf(),
                source: e,
            }))
        }),
        Err(_) => work(),
    }
}

/// Connections to one file: idle ones are reused, a new one is opened while fewer than
/// `max_connections` exist, and otherwise an operation waits for one to come back (at most the
/// busy timeout).
pub(crate) struct Pool {
    pub(crate) path: PathBuf,
    pub(crate) settings: Settings,
    state: Mutex<PoolState>,
    returned: Condvar,
    /// One permit per connection: taken asynchronously before a blocking thread is.
    permits: Arc<tokio::sync::Semaphore>,
}

/// The right to hold one of the pool's connections, taken by [`Pool::reserve`] and given back
/// with the connection. Outside a Tokio runtime there is nothing to reserve: the blocking
/// checkout bounds the connections alone.
#[derive(Debug)]
pub(crate) struct Reservation {
    /// Held, never read: dropping it gives the permit back.
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Reservation {
    /// No reservation: for code that runs outside a runtime or on its own thread (tests).
    pub(crate) fn none() -> Self {
        Reservation { _permit: None }
    }
}

/// A permit of `semaphore`, waiting at most `limit` (on the runtime's timer, as every wait in
/// retry-core: `enable_time`); `None` when it stayed taken.
async fn acquire(
    semaphore: &Arc<tokio::sync::Semaphore>,
    limit: Duration,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(permit) = Arc::clone(semaphore).try_acquire_owned() {
        return Some(permit);
    }
    match tokio::time::timeout(limit, Arc::clone(semaphore).acquire_owned()).await {
        Ok(Ok(permit)) => Some(permit),
        Ok(Err(_)) | Err(_) => None,
    }
}

pub(crate) struct PoolState {
    pub(crate) idle: Vec<Connection>,
    /// Connections that exist: idle, in use, or being opened.
    pub(crate) open: usize,
    /// Checkouts blocked on `returned`: a connection coming back wakes one only when there is
    /// one (with the async reservation taken first, there rarely is), as `notify_one` is a
    /// system call even when nobody waits.
    waiting: usize,
}

impl Pool {
    pub(crate) fn new(path: PathBuf, settings: Settings) -> Self {
        Pool {
            path,
            settings,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            returned: Condvar::new(),
            permits: Arc::new(tokio::sync::Semaphore::new(settings.max_connections)),
        }
    }

    /// Waits, without holding a thread, until one of the pool's connections is free for this
    /// operation: at most the busy timeout, then [`Error::PoolExhausted`]. Call it before the
    /// blocking work that checks the connection out.
    pub(crate) async fn reserve(&self) -> Result<Reservation, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(Reservation::none());
        }
        let permit = acquire(&self.permits, self.busy_timeout())
            .await
            .ok_or_else(|| self.exhausted())?;
        Ok(Reservation {
            _permit: Some(permit),
        })
    }

    fn exhausted(&self) -> Error {
        Error::PoolExhausted(PoolExhausted {
            path: self.path.clone(),
            connections: self.settings.max_connections,
            busy_for: self.busy_timeout(),
        })
    }

    /// Opens (creating it if needed) the file at `path`, switches it to WAL and creates what is
    /// missing of `schema`; the first connection stays in the pool. Safe to call from several
    /// processes at once. Waits up to the busy timeout for a lock another process holds.
    pub(crate) fn open(path: PathBuf, settings: Settings, schema: &Schema) -> Result<Self, Error> {
        let pool = Pool::new(path, settings);
        pool.create_owner_only();
        let mut first = pool.connect()?;
        pool.prepare_file(&mut first, schema)?;
        pool.give_back_new(first);
        Ok(pool)
    }

    /// The same file with other settings: a new pool, whose first operation opens a connection
    /// with them (idle connections of this one close when it is dropped).
    pub(crate) fn with_settings(&self, settings: Settings) -> Self {
        Pool::new(self.path.clone(), settings)
    }

    /// The pool's bookkeeping (the unit tests look at it too).
    pub(crate) fn state(&self) -> MutexGuard<'_, PoolState> {
        // Every update of the state is a single push, pop or count: a panic cannot tear it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The busy timeout as SQLite takes it (see [`clamp_busy`]).
    pub(crate) fn busy_timeout(&self) -> Duration {
        clamp_busy(self.settings.busy_timeout)
    }

    /// Creates a missing file readable by its owner only, before SQLite would create it with the
    /// umask's permissions (usually world-readable): stored responses and dead letters carry
    /// payloads. SQLite gives the `-wal` and `-shm` files the database file's permissions. An
    /// existing file is left as its owner set it.
    fn create_owner_only(&self) {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        // Any failure (it exists, a missing directory, no permission) is left to SQLite's own
        // open, which comes next and reports it in the words both stores use.
        let _ = options.open(&self.path);
    }

    /// Opens a connection with the per-connection settings. Does not count it.
    fn connect(&self) -> Result<Connection, Error> {
        connect(
            &self.path,
            self.busy_timeout(),
            self.settings.synchronous_full,
        )
    }

    /// Once per `open`: WAL mode (a property of the file) and the table.
    fn prepare_file(&self, conn: &mut Connection, schema: &Schema) -> Result<(), Error> {
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .map_err(|e| self.open_error(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            let mode: String = conn
                .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
                .map_err(|e| self.open_error(e))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::Message(format!(
                    "database file {} cannot use WAL (journal mode stays {mode:?}); {} needs a local file",
                    self.path.display(),
                    schema.store
                )));
            }
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.error(e))?;
        self.migrate(&tx, schema)?;
        tx.commit().map_err(|e| self.error(e))
    }

    /// Creates what is missing of the schema; refuses a schema newer than this code.
    fn migrate(&self, conn: &Connection, schema: &Schema) -> Result<(), Error> {
        conn.execute_batch(&migration(schema.tables))
            .map_err(|e| self.error(e))?;
        let version: Option<i64> = conn
            .query_row(schema.select_version, [], |row| row.get(0))
            .optional()
            .map_err(|e| self.error(e))?;
        match version {
            Some(version) if version > schema.version => Err(Error::Message(format!(
                "database file {} has {} schema version {version}, newer than the {} this retry-core understands",
                self.path.display(),
                schema.component,
                schema.version
            ))),
            Some(version) => {
                let done = usize::try_from(version.max(1) - 1).unwrap_or(0);
                if let Some(steps) = schema.upgrades.get(done..).filter(|s| !s.is_empty()) {
                    for step in steps {
                        conn.execute_batch(step).map_err(|e| self.error(e))?;
                    }
                    conn.execute(UPDATE_VERSION, params![schema.version, schema.component])
                        .map_err(|e| self.error(e))?;
                }
                Ok(())
            }
            None => {
                for step in schema.upgrades {
                    conn.execute_batch(step).map_err(|e| self.error(e))?;
                }
                conn.execute(schema.record_version, [schema.version])
                    .map_err(|e| self.error(e))?;
                Ok(())
            }
        }
    }

    /// Puts a connection opened outside [`Self::checkout`] into the pool.
    fn give_back_new(&self, conn: Connection) {
        let mut state = self.state();
        state.open += 1;
        state.idle.push(conn);
    }

    /// Runs `op` on a connection of the pool, off the async executor: the connection is
    /// reserved first ([`Pool::reserve`]), then checked out on a blocking thread ([`blocking`]).
    pub(crate) async fn run<T, E>(
        self: &Arc<Self>,
        op: impl FnOnce(&mut Connection) -> Result<T, Fail<E>> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: FromSqliteError + Send + 'static,
    {
        let reservation = self.reserve().await.map_err(E::from_sqlite)?;
        let pool = Arc::clone(self);
        blocking(&self.path, move || pool.with_connection(reservation, op)).await
    }

    /// Runs `op` on a connection of the pool, on this thread.
    pub(crate) fn with_connection<T, E: FromSqliteError>(
        self: &Arc<Self>,
        reservation: Reservation,
        op: impl FnOnce(&mut Connection) -> Result<T, Fail<E>>,
    ) -> Result<T, E> {
        let mut pooled = self.checkout(reservation).map_err(E::from_sqlite)?;
        let conn = pooled.connection_mut().map_err(E::from_sqlite)?;
        op(conn).map_err(|e| self.fail(e))
    }

    /// A connection for the holder of `reservation` (see [`Pool::reserve`]).
    pub(crate) fn checkout(
        self: &Arc<Self>,
        reservation: Reservation,
    ) -> Result<PooledConnection, Error> {
        let deadline = Instant::now() + self.busy_timeout();
        let mut state = self.state();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(PooledConnection {
                    pool: Arc::clone(self),
                    conn: Some(conn),
                    _reservation: reservation,
                });
            }
            if state.open < self.settings.max_connections {
                state.open += 1;
                drop(state);
                return match self.connect() {
                    Ok(conn) => Ok(PooledConnection {
                        pool: Arc::clone(self),
                        conn: Some(conn),
                        _reservation: reservation,
                    }),
                    Err(e) => {
                        self.forget_one();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.exhausted());
            }
            state.waiting += 1;
            state = self
                .returned
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.waiting -= 1;
        }
    }

    /// A connection was closed (or never opened): make room for another.
    fn forget_one(&self) {
        let mut state = self.state();
        state.open = state.open.saturating_sub(1);
        self.wake_one(state);
    }

    /// Wakes one blocked checkout, if any, once `state` (changed by the caller) is released.
    fn wake_one(&self, state: MutexGuard<'_, PoolState>) {
        let waiting = state.waiting > 0;
        drop(state);
        if waiting {
            self.returned.notify_one();
        }
    }

    /// `e` as the store's error: a failed SQLite call names the file.
    pub(crate) fn fail<E: FromSqliteError>(&self, e: Fail<E>) -> E {
        match e {
            Fail::Sql(e) => E::from_sqlite(self.error(e)),
            Fail::Store(e) => e,
        }
    }

    /// A failed SQLite call: "locked" errors name the file and the wait.
    pub(crate) fn error(&self, e: rusqlite::Error) -> Error {
        error(&self.path, self.busy_timeout(), e)
    }

    /// A failure to open the file: says which file, and why when it is plain.
    fn open_error(&self, e: rusqlite::Error) -> Error {
        open_error(&self.path, self.busy_timeout(), e)
    }
}

/// A busy timeout as SQLite takes it (whole milliseconds in an `i32`; rusqlite panics on
/// more).
pub(crate) fn clamp_busy(busy: Duration) -> Duration {
    busy.min(Duration::from_millis(i32::MAX.unsigned_abs().into()))
}

/// Opens a connection to `path` (creating the file if needed) with the per-connection settings:
/// for the pools and for the file's write queue.
pub(crate) fn connect(
    path: &Path,
    busy: Duration,
    synchronous_full: bool,
) -> Result<Connection, Error> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, busy, e))?;
    conn.busy_timeout(clamp_busy(busy))
        .map_err(|e| open_error(path, busy, e))?;
    conn.pragma_update(None, "synchronous", synchronous(synchronous_full))
        .map_err(|e| error(path, busy, e))?;
    Ok(conn)
}

/// `PRAGMA synchronous`'s value for the setting.
pub(crate) fn synchronous(full: bool) -> &'static str {
    if full { "FULL" } else { "NORMAL" }
}

/// A failed SQLite call on `path`: "locked" errors name the file and the wait.
pub(crate) fn error(path: &Path, busy: Duration, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Locked(Locked {
            path: path.to_path_buf(),
            busy_for: clamp_busy(busy),
            source: e,
        }),
        _ => Error::Sql {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

/// A failure to open `path`: says which file, and why when it is plain.
fn open_error(path: &Path, busy: Duration, e: rusqlite::Error) -> Error {
    if matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    ) {
        return error(path, busy, e);
    }
    let hint = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            format!(" (directory {} does not exist)", dir.display())
        }
        _ => String::new(),
    };
    Error::OpenFailed(OpenFailed {
        path: path.to_path_buf(),
        hint,
        source: e,
    })
}

/// A connection taken from the pool; goes back when dropped. It owns a handle on the pool so a
/// store can keep it across `.await`s and blocking threads (`SqliteStore`'s transactions do).
pub(crate) struct PooledConnection {
    pool: Arc<Pool>,
    conn: Option<Connection>,
    /// Given back after the connection (fields drop in order), so a waiter that gets the permit
    /// finds the connection idle.
    _reservation: Reservation,
}

impl PooledConnection {
    /// The connection; `None` only if the pool lost it, which it never does.
    pub(crate) fn connection_mut(&mut self) -> Result<&mut Connection, Error> {
        self.conn.as_mut().ok_or_else(lost_connection)
    }
}

pub(crate) fn lost_connection() -> Error {
    Error::Message("SQLite connection pool lost a connection".to_owned())
}

impl Drop for PooledConnection {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        if conn.is_autocommit() {
            let mut state = self.pool.state();
            state.idle.push(conn);
            self.pool.wake_one(state);
        } else {
            // A transaction is still open (its rollback failed): never reuse the connection.
            drop(conn);
            self.pool.forget_one();
        }
    }
}

/// SQLITE_BUSY / SQLITE_LOCKED after the busy timeout.
#[derive(Debug, thiserror::Error)]
#[error(
    "database file {} is locked by another process (busy for {busy_for:?})",
    .path.display()
)]
pub(crate) struct Locked {
    path: PathBuf,
    busy_for: Duration,
    source: rusqlite::Error,
}

impl Locked {
    /// SQLite's own error.
    pub(crate) fn into_source(self) -> rusqlite::Error {
        self.source
    }
}

/// Every connection of the pool stayed in use for the busy timeout.
#[derive(Debug, thiserror::Error)]
#[error(
    "all {connections} connections to database file {} stayed busy (waited {busy_for:?})",
    .path.display()
)]
pub(crate) struct PoolExhausted {
    path: PathBuf,
    connections: usize,
    busy_for: Duration,
}

/// The file could not be opened or created; SQLite's error is the source.
#[derive(Debug, thiserror::Error)]
#[error("cannot open database file {}{hint}", .path.display())]
pub(crate) struct OpenFailed {
    path: PathBuf,
    hint: String,
    source: rusqlite::Error,
}

impl OpenFailed {
    /// SQLite's own error.
    pub(crate) fn into_source(self) -> rusqlite::Error {
        self.source
    }
}

/// Where a transaction of the file's write queue failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum What {
    Begin,
    Commit,
    Ended,
}

/// A write's group did not commit.
#[derive(Debug)]
pub(crate) struct SharedFailed {
    path: PathBuf,
    what: What,
    cause: Option<Arc<rusqlite::Error>>,
}

impl std::fmt::Display for SharedFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display();
        match self.what {
            What::Begin => write!(
                f,
                "cannot begin a write transaction on database file {path}"
            ),
            What::Commit => write!(
                f,
                "the transaction on database file {path} that this write shared with concurrent ones did not commit; nothing of it was kept"
            ),
            What::Ended => write!(
                f,
                "the transaction on database file {path} that this write shared with concurrent ones did not commit: it ended before its COMMIT (a handler's SQL ended it, or SQLite rolled it back), so this write may not have been kept"
            ),
        }
    }
}

impl SharedFailed {
    pub(crate) fn new(path: &Path, what: What, cause: Option<Arc<rusqlite::Error>>) -> Self {
        SharedFailed {
            path: path.to_path_buf(),
            what,
            cause,
        }
    }

    /// SQLite's error, if the group failed on one.
    pub(crate) fn cause(&self) -> Option<Arc<rusqlite::Error>> {
        self.cause.clone()
    }
}

/// By hand: the source is SQLite's error itself, not the `Arc` around it, so it downcasts.
impl std::error::Error for SharedFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|e| e as _)
    }
}
