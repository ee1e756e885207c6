//! `SqliteDeadLetters`: the dead-letter table `dead_letters` in one SQLite file.
//!
//! Design notes (the why of each choice):
//! - Connections, WAL, the busy timeout and the schema table are `SqliteStore`'s: the connection
//!   pool, the blocking helper and the migration are the plumbing both stores share
//!   (`sql/sqlite.rs`), with the same `retry_core_schema` table (component `dead_letters`), so
//!   dead letters and the idempotency log can share one file.
//! - Every write (`park`, `put_back`, `ack`) is one `BEGIN IMMEDIATE` transaction: the write
//!   lock is taken up front, so nothing fails with `SQLITE_BUSY` half-way, and waiting for it is
//!   bounded by the busy timeout. Reads are one `SELECT` each (a consistent snapshot in WAL).
//! - `synchronous=FULL`: `park` returns only once the letter is on disk, power loss included.
//!   Dead letters are rare, so the `fsync` per letter costs nothing that matters.
//! - `park` is an upsert under the primary key (`INSERT .. ON CONFLICT (msg_id) DO UPDATE`),
//!   never check-then-insert: a message that gives up again replaces its pending letter but
//!   keeps the first failure.
//! - The RFC 3339 strings are stored as given (with their offsets); ordering is by the instant,
//!   through the extra column `first_failed_utc` ([`format_utc`] text, fixed width, so text order
//!   is time order). A letter whose times do not parse is refused, so every row can be ordered.
//! - SQLite calls block: they run in `tokio::task::spawn_blocking` (in place outside a runtime).

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::types::Value;
use rusqlite::{Connection, TransactionBehavior, params};

use super::row::{self, NewRow, corrupt};
use super::{DeadLetter, DeadLetterSink, DlqError, LegacyStore, RedriveRecord};
use crate::sql::sqlite::{
    self as sql, DEFAULT_BUSY_TIMEOUT, FromSqliteError, Pool, Schema, Settings,
};
use crate::time::format_utc;

/// The version of the `dead_letters` layout this code writes, kept in `retry_core_schema`.
const SCHEMA_VERSION: i64 = 1;

/// Connections opened to the file at most. Every write takes the one write lock of the file, so
/// more would not make parking faster; a few keep a slow `list` from holding up a `park`.
const MAX_CONNECTIONS: usize = 4;

/// The busy timeout until [`SqliteDeadLetters::with_busy_timeout`] changes it, and
/// `synchronous=FULL` (see the note at the top).
const DEFAULT_SETTINGS: Settings = Settings {
    busy_timeout: DEFAULT_BUSY_TIMEOUT,
    synchronous_full: true,
    max_connections: MAX_CONNECTIONS,
};

/// The table, created after the shared `retry_core_schema`.
const TABLES: &str = "CREATE TABLE IF NOT EXISTS dead_letters (
    msg_id TEXT NOT NULL PRIMARY KEY,
    original TEXT NOT NULL,
    reason TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    first_failed_at TEXT NOT NULL,
    last_failed_at TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('system', 'data')),
    error_type TEXT NOT NULL,
    idempotency_key TEXT,
    parked_at TEXT NOT NULL,
    first_failed_utc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_first_failed ON dead_letters (first_failed_utc, msg_id);
CREATE TABLE IF NOT EXISTS dead_letter_redrives (
    run_id TEXT NOT NULL PRIMARY KEY,
    started_utc TEXT NOT NULL,
    record TEXT NOT NULL
);
";

const SELECT_VERSION: &str =
    "SELECT version FROM retry_core_schema WHERE component = 'dead_letters'";
const RECORD_VERSION: &str = "INSERT INTO retry_core_schema (component, version) VALUES ('dead_letters', ?1) \
     ON CONFLICT(component) DO NOTHING";

const SCHEMA: Schema = Schema {
    store: "SqliteDeadLetters",
    component: "dead_letters",
    version: SCHEMA_VERSION,
    tables: TABLES,
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};

// A pending `msg_id` is replaced, except for when it first failed (and so its place in the
// order).
const UPSERT: &str = "INSERT INTO dead_letters \
     (msg_id, original, reason, attempts, first_failed_at, last_failed_at, trace_id, class, \
      error_type, idempotency_key, parked_at, first_failed_utc) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
     ON CONFLICT(msg_id) DO UPDATE SET original = excluded.original, reason = excluded.reason, \
      attempts = excluded.attempts, last_failed_at = excluded.last_failed_at, \
      trace_id = excluded.trace_id, class = excluded.class, error_type = excluded.error_type, \
      idempotency_key = excluded.idempotency_key, parked_at = excluded.parked_at";
const DELETE: &str = "DELETE FROM dead_letters WHERE msg_id = ?1";
const INSERT_REDRIVE: &str =
    "INSERT INTO dead_letter_redrives (run_id, started_utc, record) VALUES (?1, ?2, ?3)";
const SELECT_REDRIVES: &str =
    "SELECT run_id, record FROM dead_letter_redrives ORDER BY started_utc, run_id";
const COUNT: &str = "SELECT count(*) FROM dead_letters";
const SELECT_ALL: &str = "SELECT msg_id, original, reason, attempts, first_failed_at, \
     last_failed_at, trace_id, class, error_type, idempotency_key FROM dead_letters \
     ORDER BY first_failed_utc, msg_id";
const SELECT_OLDEST: &str = "SELECT msg_id, original, reason, attempts, first_failed_at, \
     last_failed_at, trace_id, class, error_type, idempotency_key FROM dead_letters \
     ORDER BY first_failed_utc, msg_id LIMIT 1";
const SELECT_ONE: &str = "SELECT msg_id, original, reason, attempts, first_failed_at, \
     last_failed_at, trace_id, class, error_type, idempotency_key FROM dead_letters \
     WHERE msg_id = ?1";

/// Dead letters in the table `dead_letters` of one SQLite file: a [`DeadLetterSink`] for
/// `#[retryable(dlq(sink = ...))]`, and a [`LegacyStore`] to monitor and redrive from. Any
/// number of threads and processes may use the same file at once (it may also be the file of a
/// [`SqliteStore`](crate::idempotency::SqliteStore)).
///
/// - `journal_mode=WAL` and `synchronous=FULL`: `park` returns once the letter is committed and
///   synced, so it survives a crash of the process and a power loss.
/// - Every write is one `BEGIN IMMEDIATE` transaction, waiting at most the busy timeout
///   (default 5 s) for another writer; after that it fails with [`DlqError::Io`] saying which
///   file is locked.
/// - Parking a `msg_id` that is already pending replaces its letter but keeps its
///   `first_failed_at`; [`list`](LegacyStore::list) and [`oldest`](LegacyStore::oldest)
///   order by the instant of the first failure (whatever the offsets), then by `msg_id`.
/// - A letter whose `first_failed_at` or `last_failed_at` is not RFC 3339 is refused with
///   [`DlqError::Corrupt`]; a row that cannot be read back is [`DlqError::Corrupt`] naming its
///   `msg_id`, never skipped.
/// - SQLite calls run on Tokio's blocking pool (in place outside a runtime). An operation whose
///   future is dropped still finishes there: a letter may be parked although its `park` was
///   cancelled.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, SqliteDeadLetters};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-{}.sqlite3", std::process::id()));
/// let letters = SqliteDeadLetters::open(&path)?;
/// let letter = DeadLetter {
///     msg_id: "M-20260819-000123".into(),
///     original: serde_json::json!({"amount": 10}),
///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(),
///     attempts: 5,
///     first_failed_at: "2026-08-19T02:11:03+09:00".into(),
///     last_failed_at: "2026-08-19T02:12:47+09:00".into(),
///     trace_id: "a1b2c3d4".into(),
///     class: FailureClass::System,
///     error_type: "FetchError".into(),
///     idempotency_key: None,
///     source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
/// };
/// letters.park(&letter).await?;
/// assert_eq!(letters.count().await?, 1);
/// assert_eq!(letters.oldest().await?, Some(letter.clone()));
/// // Redriven: no longer pending.
/// assert!(letters.ack(&letter.msg_id).await?);
/// assert_eq!(letters.count().await?, 0);
/// # drop(letters);
/// # for suffix in ["", "-wal", "-shm"] {
/// #     let mut file = path.clone().into_os_string();
/// #     file.push(suffix);
/// #     let _ = std::fs::remove_file(file);
/// # }
/// # Ok(())
/// # }
/// ```
pub struct SqliteDeadLetters {
    pool: Arc<Pool>,
}

impl fmt::Debug for SqliteDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteDeadLetters")
            .field("path", &self.pool.path)
            .field("busy_timeout", &self.pool.settings.busy_timeout)
            .finish()
    }
}

impl SqliteDeadLetters {
    /// Opens (creating it if needed) the SQLite file at `path`, switches it to WAL and creates
    /// the table `dead_letters` if it is missing. Safe to call from several processes at once,
    /// and on a file that already holds other tables (an idempotency store's, the
    /// application's). Opening waits up to the busy timeout (5 s) for a lock another process
    /// holds on the file.
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the file when it cannot be opened or created (its directory is
    /// missing, no permission, not a database), cannot use WAL, stays locked, or holds a
    /// `dead_letters` table written by a newer version of this crate.
    ///
    /// ```
    /// use retry_core::dlq::SqliteDeadLetters;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-open-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// // Opening again is harmless: the table is created only once.
    /// let again = SqliteDeadLetters::open(&path)?;
    /// # drop((letters, again));
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    ///
    /// let missing = std::env::temp_dir().join("retry-core-no-such-dir").join("dlq.sqlite3");
    /// let error = SqliteDeadLetters::open(&missing).unwrap_err();
    /// assert!(error.to_string().contains("does not exist"), "{error}");
    /// # Ok::<(), retry_core::dlq::DlqError>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        let pool = Pool::open(path.as_ref().to_path_buf(), DEFAULT_SETTINGS, &SCHEMA)
            .map_err(DlqError::from_sqlite)?;
        Ok(SqliteDeadLetters {
            pool: Arc::new(pool),
        })
    }

    /// How long an operation waits for a lock held by another connection or process before it
    /// fails with [`DlqError::Io`] ("database file ... is locked by another process (busy for
    /// 5s)"); also bounds the wait for a free connection. Default 5 s; longer than about 24
    /// days counts as 24 days. Zero fails at once when the file is locked.
    ///
    /// ```
    /// use retry_core::dlq::SqliteDeadLetters;
    /// use std::time::Duration;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-busy-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?.with_busy_timeout(Duration::from_millis(250));
    /// assert!(format!("{letters:?}").contains("250ms"));
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::dlq::DlqError>(())
    /// ```
    #[must_use]
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        // Idle connections of the old pool close; the next operation opens one with the new
        // timeout.
        self.pool = Arc::new(self.pool.with_settings(Settings {
            busy_timeout: timeout,
            ..self.pool.settings
        }));
        self
    }

    /// The file this store keeps its letters in.
    ///
    /// ```
    /// use retry_core::dlq::SqliteDeadLetters;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-path-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// assert_eq!(letters.path(), path);
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok::<(), retry_core::dlq::DlqError>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.pool.path
    }

    /// Runs `op` on a pooled connection, off the async executor.
    async fn run<T, F>(&self, op: F) -> Result<T, DlqError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, Fail> + Send + 'static,
    {
        self.pool.run(op).await
    }
}

impl DeadLetterSink for SqliteDeadLetters {
    /// Parks `letter` in one `BEGIN IMMEDIATE` transaction and returns once it is committed
    /// (and synced). If its `msg_id` is already pending (the same message gave up again), the
    /// pending letter is replaced, keeping its `first_failed_at`.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] when `first_failed_at` or `last_failed_at` is not RFC 3339 (nothing
    /// is written); [`DlqError::Io`] naming the file when SQLite fails or the file stays
    /// locked.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, DlqError, FailureClass, SqliteDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-park-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// let mut letter = DeadLetter {
    ///     msg_id: "M-1".into(),
    ///     original: serde_json::json!({"amount": 10}),
    ///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(),
    ///     attempts: 5,
    ///     first_failed_at: "2026-08-19T02:11:03+09:00".into(),
    ///     last_failed_at: "2026-08-19T02:12:47+09:00".into(),
    ///     trace_id: "a1b2c3d4".into(),
    ///     class: FailureClass::System,
    ///     error_type: "FetchError".into(),
    ///     idempotency_key: None,
    ///     source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
    /// };
    /// letters.park(&letter).await?;
    ///
    /// // The same message gives up again later: one pending letter, first failure kept.
    /// let again = DeadLetter {
    ///     attempts: 5,
    ///     first_failed_at: "2026-08-19T03:00:00+09:00".into(),
    ///     last_failed_at: "2026-08-19T03:01:40+09:00".into(),
    ///     ..letter.clone()
    /// };
    /// letters.park(&again).await?;
    /// let pending = letters.get("M-1").await?.unwrap();
    /// assert_eq!(pending.first_failed_at, "2026-08-19T02:11:03+09:00");
    /// assert_eq!(pending.last_failed_at, "2026-08-19T03:01:40+09:00");
    ///
    /// // A letter whose times cannot be ordered is refused.
    /// letter.first_failed_at = "yesterday".into();
    /// assert!(matches!(letters.park(&letter).await, Err(DlqError::Corrupt(_))));
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        let row = NewRow::new(letter)?;
        self.run(move |conn| upsert(conn, &row)).await
    }
}

impl LegacyStore for SqliteDeadLetters {
    /// Every pending letter, ordered by the instant of the first failure (whatever offsets the
    /// times were written with), then by `msg_id`.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] naming the `msg_id` of a row that cannot be read (nothing is
    /// skipped); [`DlqError::Io`] naming the file when SQLite fails.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, LegacyStore, SqliteDeadLetters};
    /// # use retry_core::dlq::{DeadLetter, FailureClass};
    /// # fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    /// #     DeadLetter {
    /// #         msg_id: msg_id.into(), original: serde_json::json!({}), reason: "gave up".into(),
    /// #         attempts: 3, first_failed_at: first_failed_at.into(),
    /// #         last_failed_at: first_failed_at.into(), trace_id: "t".into(),
    /// #         class: FailureClass::System, error_type: "E".into(), idempotency_key: None,
    /// #         source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
    /// #     }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-list-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// letters.park(&letter("late", "2026-08-19T01:00:00Z")).await?;
    /// // 02:00 in Tokyo is 17:00 UTC the day before: the earlier failure.
    /// letters.park(&letter("early", "2026-08-19T02:00:00+09:00")).await?;
    /// let ids: Vec<String> = letters.list().await?.into_iter().map(|l| l.msg_id).collect();
    /// assert_eq!(ids, ["early", "late"]);
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn list(&self) -> Result<Vec<DeadLetter>, DlqError> {
        self.run(|conn| select(conn, SELECT_ALL, [])).await
    }

    /// How many letters are pending (what to alert on).
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the file when SQLite fails.
    ///
    /// ```
    /// use retry_core::dlq::{LegacyStore, SqliteDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-count-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// assert_eq!(letters.count().await?, 0);
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn count(&self) -> Result<u64, DlqError> {
        self.run(|conn| {
            let count: i64 = conn
                .prepare_cached(COUNT)?
                .query_row([], |row| row.get(0))?;
            Ok(u64::try_from(count).unwrap_or(0))
        })
        .await
    }

    /// The pending letter with the earliest first failure (ties: the smallest `msg_id`): its
    /// `first_failed_at` is the age to alert on.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] naming the `msg_id` if that row cannot be read; [`DlqError::Io`]
    /// naming the file when SQLite fails.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, LegacyStore, SqliteDeadLetters};
    /// # use retry_core::dlq::{DeadLetter, FailureClass};
    /// # fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    /// #     DeadLetter {
    /// #         msg_id: msg_id.into(), original: serde_json::json!({}), reason: "gave up".into(),
    /// #         attempts: 3, first_failed_at: first_failed_at.into(),
    /// #         last_failed_at: first_failed_at.into(), trace_id: "t".into(),
    /// #         class: FailureClass::System, error_type: "E".into(), idempotency_key: None,
    /// #         source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
    /// #     }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-oldest-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// assert_eq!(letters.oldest().await?, None);
    /// letters.park(&letter("b", "2026-08-19T10:00:00Z")).await?;
    /// letters.park(&letter("a", "2026-08-19T12:00:00+02:00")).await?; // 10:00 UTC too
    /// assert_eq!(letters.oldest().await?.unwrap().msg_id, "a");
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn oldest(&self) -> Result<Option<DeadLetter>, DlqError> {
        let mut found = self.run(|conn| select(conn, SELECT_OLDEST, [])).await?;
        Ok(found.pop())
    }

    /// The pending letter `msg_id`, as it was parked.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] naming the `msg_id` if its row cannot be read; [`DlqError::Io`]
    /// naming the file when SQLite fails.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, LegacyStore, SqliteDeadLetters};
    /// # use retry_core::dlq::{DeadLetter, FailureClass};
    /// # fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    /// #     DeadLetter {
    /// #         msg_id: msg_id.into(), original: serde_json::json!({"amount": 10}), reason: "gave up".into(),
    /// #         attempts: 3, first_failed_at: first_failed_at.into(),
    /// #         last_failed_at: first_failed_at.into(), trace_id: "t".into(),
    /// #         class: FailureClass::System, error_type: "E".into(), idempotency_key: None,
    /// #         source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
    /// #     }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-get-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// let parked = letter("M-7", "2026-08-19T02:11:03+09:00");
    /// letters.park(&parked).await?;
    /// assert_eq!(letters.get("M-7").await?, Some(parked));
    /// assert_eq!(letters.get("M-8").await?, None);
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        let msg_id = msg_id.to_owned();
        let mut found = self
            .run(move |conn| select(conn, SELECT_ONE, [msg_id]))
            .await?;
        Ok(found.pop())
    }

    /// Deletes `msg_id` from the pending letters, in one `BEGIN IMMEDIATE` transaction;
    /// `true` if it was pending.
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the file when SQLite fails or the file stays locked.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, LegacyStore, SqliteDeadLetters};
    /// # use retry_core::dlq::{DeadLetter, FailureClass};
    /// # fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    /// #     DeadLetter {
    /// #         msg_id: msg_id.into(), original: serde_json::json!({}), reason: "gave up".into(),
    /// #         attempts: 3, first_failed_at: first_failed_at.into(),
    /// #         last_failed_at: first_failed_at.into(), trace_id: "t".into(),
    /// #         class: FailureClass::System, error_type: "E".into(), idempotency_key: None,
    /// #         source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
    /// #     }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-ack-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// letters.park(&letter("M-1", "2026-08-19T02:11:03+09:00")).await?;
    /// assert!(letters.ack("M-1").await?);
    /// assert!(!letters.ack("M-1").await?, "no longer pending");
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn ack(&self, msg_id: &str) -> Result<bool, DlqError> {
        let msg_id = msg_id.to_owned();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let deleted = tx.prepare_cached(DELETE)?.execute([msg_id])?;
            tx.commit()?;
            Ok(deleted > 0)
        })
        .await
    }

    /// The same upsert as [`park`](DeadLetterSink::park): the pending letter takes the new
    /// `attempts`, `last_failed_at`, `reason` (and the rest) and keeps its `first_failed_at`;
    /// a letter no longer pending is parked again.
    ///
    /// # Errors
    /// As [`park`](DeadLetterSink::park).
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, SqliteDeadLetters};
    /// # use retry_core::dlq::FailureClass;
    /// # fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    /// #     DeadLetter {
    /// #         msg_id: msg_id.into(), original: serde_json::json!({}), reason: "gave up".into(),
    /// #         attempts: 5, first_failed_at: first_failed_at.into(),
    /// #         last_failed_at: first_failed_at.into(), trace_id: "t".into(),
    /// #         class: FailureClass::System, error_type: "E".into(), idempotency_key: None,
    /// #         source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
    /// #     }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-put-back-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// letters.park(&letter("M-1", "2026-08-19T02:11:03+09:00")).await?;
    ///
    /// // The redrive failed again.
    /// let pending = letters.get("M-1").await?.unwrap();
    /// let failed_again = DeadLetter {
    ///     attempts: pending.attempts + 1,
    ///     last_failed_at: "2026-08-20T09:00:00+09:00".into(),
    ///     reason: "redrive: 503 Service Unavailable".into(),
    ///     ..pending
    /// };
    /// letters.put_back(&failed_again).await?;
    /// let now = letters.get("M-1").await?.unwrap();
    /// assert_eq!((now.attempts, now.first_failed_at.as_str()), (6, "2026-08-19T02:11:03+09:00"));
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn put_back(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        self.park(letter).await
    }

    /// Inserts the record into `dead_letter_redrives` (one `BEGIN IMMEDIATE` transaction,
    /// `synchronous=FULL` like the letters).
    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        let (run_id, started_utc, json) = row::record_row(record)?;
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.prepare_cached(INSERT_REDRIVE)?
                .execute(params![run_id, started_utc, json])?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        self.run(|conn| {
            let mut statement = conn.prepare_cached(SELECT_REDRIVES)?;
            let rows: Vec<(String, String)> = statement
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            rows.iter()
                .map(|(run_id, json)| row::record(run_id, json))
                .collect::<Result<_, _>>()
                .map_err(Fail::Store)
        })
        .await
    }
}

// ---- rows ----

/// The upsert, in one `BEGIN IMMEDIATE` transaction.
fn upsert(conn: &mut Connection, row: &NewRow) -> Result<(), Fail> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Read after the lock is taken: the time the letter was (re)parked.
    let parked_at = format_utc(SystemTime::now());
    tx.prepare_cached(UPSERT)?.execute(params![
        row.msg_id,
        row.original,
        row.reason,
        row.attempts,
        row.first_failed_at,
        row.last_failed_at,
        row.trace_id,
        row.class,
        row.error_type,
        row.idempotency_key,
        parked_at,
        row.first_failed_utc,
    ])?;
    tx.commit()?;
    Ok(())
}

/// The columns of one `SELECT`, as SQLite holds them.
type RawRow = [Value; 10];

/// Runs a `SELECT` of the ten letter columns and reads every row; the first unreadable one fails
/// the whole read.
fn select(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<DeadLetter>, Fail> {
    let mut statement = conn.prepare_cached(sql)?;
    let rows: Vec<RawRow> = statement
        .query_map(params, |row| {
            Ok([
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
                row.get(7)?,
                row.get(8)?,
                row.get(9)?,
            ])
        })?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(decode)
        .collect::<Result<_, _>>()
        .map_err(Fail::Store)
}

/// A row read back, every column checked.
fn decode(row: RawRow) -> Result<DeadLetter, DlqError> {
    let [
        msg_id,
        original,
        reason,
        attempts,
        first_failed_at,
        last_failed_at,
        trace_id,
        class,
        error_type,
        idempotency_key,
    ] = row;
    let msg_id = match msg_id {
        Value::Text(text) => text,
        other => {
            return Err(DlqError::Corrupt(format!(
                "dead_letters row with msg_id {other:?}: msg_id is not text"
            )));
        }
    };
    let id = msg_id.as_str();
    let original = row::original(id, &text(id, "original", original)?)?;
    let attempts = match attempts {
        Value::Integer(n) => row::attempts(id, n)?,
        other => return Err(corrupt(id, format_args!("bad attempts {other:?}"))),
    };
    let first_failed_at = row::time(
        id,
        "first_failed_at",
        text(id, "first_failed_at", first_failed_at)?,
    )?;
    let last_failed_at = row::time(
        id,
        "last_failed_at",
        text(id, "last_failed_at", last_failed_at)?,
    )?;
    let class = row::class(id, &text(id, "class", class)?)?;
    let idempotency_key = match idempotency_key {
        Value::Null => None,
        Value::Text(text) => Some(text),
        other => return Err(corrupt(id, format_args!("bad idempotency_key {other:?}"))),
    };
    Ok(DeadLetter {
        reason: text(id, "reason", reason)?,
        trace_id: text(id, "trace_id", trace_id)?,
        error_type: text(id, "error_type", error_type)?,
        msg_id,
        original,
        attempts,
        first_failed_at,
        last_failed_at,
        class,
        idempotency_key,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    })
}

fn text(msg_id: &str, column: &str, value: Value) -> Result<String, DlqError> {
    match value {
        Value::Text(text) => Ok(text),
        other => Err(corrupt(msg_id, format_args!("bad {column} {other:?}"))),
    }
}

// ---- errors ----

/// Why an operation failed before its errors get the file's name.
type Fail = sql::Fail<DlqError>;

impl FromSqliteError for DlqError {
    /// The plumbing's failures, as this store has always reported them: `Io` with a message
    /// naming the file, SQLite's error (if any) as the source and at the end of the message.
    fn from_sqlite(error: sql::Error) -> Self {
        let (message, source) = match error {
            sql::Error::Locked(e) => (e.to_string(), Some(e.into_source())),
            sql::Error::Sql { path, source } => {
                (format!("database file {}", path.display()), Some(source))
            }
            sql::Error::OpenFailed(e) => (e.what(), Some(e.into_source())),
            sql::Error::PoolExhausted(e) => (e.to_string(), None),
            sql::Error::Message(message) => (message, None),
            sql::Error::Worker { path, source } => (
                format!(
                    "SQLite worker task for database file {} failed: {source}",
                    path.display()
                ),
                None,
            ),
        };
        DlqError::Io(Box::new(FileError { message, source }))
    }
}

/// A failure of the file or of SQLite, naming the file; SQLite's own error, if any, is the
/// source (and the end of the message).
#[derive(Debug)]
struct FileError {
    message: String,
    source: Option<rusqlite::Error>,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}
