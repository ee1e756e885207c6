//! `SqliteDeadLetters`: the dead-letter table `dead_letters` in one SQLite file.
//!
//! Design notes (the why of each choice):
//! - Connections, WAL, the busy timeout and the schema table are `SqliteStore`'s: the connection
//!   pool, the blocking helper and the version check are the plumbing both stores share
//!   (`sql.rs`), with the same `retry_core_schema` table (component `dead_letters`), so
//!   dead letters and the idempotency log can share one file. The layout and its upgrade from
//!   version 1 are in `schema.rs`.
//! - Every write goes through the file's write queue ([`crate::queue`], shared with a
//!   `SqliteStore` on the same file): one thread, one connection, and group commit, so a burst
//!   of give-ups costs one `fsync` per group rather than per letter,
//!   and `park` still returns only once its letter is on disk (`synchronous=FULL`). Each group
//!   is one `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so nothing fails
//!   with `SQLITE_BUSY` half-way, and waiting for another process is bounded by the busy
//!   timeout.
//! - Reads are one `SELECT` each on a small pool of reader connections (a consistent snapshot
//!   in WAL), in `tokio::task::spawn_blocking` (in place outside a runtime).
//! - A letter is never overwritten: `park` inserts a new `msg_id`, and merges into an existing
//!   one ([`DeadLetter::absorb`]) by reading and writing it back in the group's transaction,
//!   where nothing else can write it in between.
//! - A lease is one `UPDATE .. RETURNING` whose `WHERE` says "pending, and nobody else's live
//!   lease": whichever transaction (of any process) commits first takes it, and the other's
//!   `UPDATE` then matches no row.
//! - Times are RFC 3339 text in their columns (written in UTC, [`format_rfc3339`]; rows written
//!   by earlier versions may carry other offsets, and read the same), parsed once when a row is
//!   read; a time that does not parse fails the read, naming the letter and the column.
//!   Ordering and comparing times is done on extra columns in [`format_utc`] text (fixed width,
//!   so text order is time order): `first_failed_utc`, `resolved_utc`, `lease_until`.
//!
//! [`format_rfc3339`]: retry_core::time::format_rfc3339

mod error;
mod queries;
mod schema;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

use crate::queue::{Wait, Writes};
use crate::sql::{self, DEFAULT_BUSY_TIMEOUT, FromSqliteError, Pool, Reservation, Settings};
use error::Fail;
use retry_core::dlq::row::{self, LetterRow, ResolutionRow};
use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, Page,
    RedriveRecord, Resolution, Stats,
};
use retry_core::time::{format_utc, later};

/// Reader connections opened to the file at most: a few, so a slow page does not hold up a
/// count. Writes have the file's write queue.
const READERS: usize = 4;

/// The readers' settings: the busy timeout until [`SqliteDeadLetters::with_busy_timeout`]
/// changes it.
const READ_SETTINGS: Settings = Settings {
    busy_timeout: DEFAULT_BUSY_TIMEOUT,
    synchronous_full: true,
    max_connections: READERS,
};

/// How the store's writes wait in the file's queue, and their durability: `synchronous=FULL`
/// (a letter's commit is synced before `park` returns), whatever the file's other stores ask.
fn write_wait(busy: Duration) -> Wait {
    Wait {
        busy: sql::clamp_busy(busy),
        full: true,
    }
}

/// Dead letters in the table `dead_letters` of one SQLite file: a [`DeadLetterSink`] for
/// `#[retryable(dlq(sink = ...))]`, and a [`DeadLetterStore`] to monitor, resolve and redrive
/// from. Any number of threads and processes may use the same file at once (it may also be the
/// file of a [`SqliteStore`](crate::SqliteStore)).
///
/// - `journal_mode=WAL` and `synchronous=FULL`: `park` returns once the letter is committed and
///   synced, so it survives a crash of the process and a power loss.
/// - Group commit: the store's writes go to the file's write queue (one thread per file in a
///   process, shared with a [`SqliteStore`](crate::SqliteStore) on the same file), which
///   commits every write that arrived while the previous transaction committed in one
///   transaction (one `fsync`), then answers each caller. Parking never blocks the caller's
///   thread. Each write runs in a savepoint: a failed statement fails that write alone. If the
///   transaction fails (disk full, the file locked past the busy timeout, a corrupt file),
///   every write of the group fails with a [`DlqError::Io`] naming the file; later groups go
///   on.
/// - A letter is never overwritten: parking its `msg_id` again merges as
///   [`DeadLetter::absorb`] says (first `original` and first failure kept, attempts added,
///   history kept). [`resolve`](DeadLetterStore::resolve) keeps the letter with who, when and
///   which run; only [`purge_resolved`](DeadLetterStore::purge_resolved) deletes, by age.
/// - Pages and counts are SQL over partial indexes of the pending letters: a page is a range
///   scan in the order (`first_failed_at` as an instant, then `msg_id`), and
///   [`stats`](DeadLetterStore::stats) never loads a letter.
/// - Leases are atomic across processes: two redrive runs on the same file never hold one
///   letter at once.
/// - Times are RFC 3339 text in their columns, written in UTC and read with any offset; a row
///   that cannot be read back (a stored time that does not parse included) is
///   [`DlqError::Corrupt`] naming its `msg_id` and the column, never skipped.
/// - A write whose future is dropped still finishes in its group: a letter may be parked
///   although its `park` was cancelled.
/// - A file of the version-1 layout (before letters were resolved and merged) is upgraded when
///   opened; its pending letters stay pending.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, FailureClass, Page, Resolution};
/// use retry_sqlite::SqliteDeadLetters;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-{}.sqlite3", std::process::id()));
/// let letters = SqliteDeadLetters::open(&path)?;
/// let at = |text| retry_core::time::parse_rfc3339(text).unwrap();
/// let letter = DeadLetter {
///     msg_id: "M-20260819-000123".into(),
///     original: serde_json::json!({"amount": 10}),
///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(),
///     attempts: 5,
///     first_failed_at: at("2026-08-19T02:11:03+09:00"),
///     last_failed_at: at("2026-08-19T02:12:47+09:00"),
///     trace_id: "a1b2c3d4".into(),
///     class: FailureClass::System,
///     error_type: "FetchError".into(),
///     idempotency_key: None,
///     source: Some("payments::deposit".into()),
///     redacted: false,
///     key_scope: None,
///     key_expires_at: None,
///     history: Vec::new(),
///     resolved: None,
/// };
/// letters.park(&letter).await?;
/// assert_eq!(letters.stats().await?.pending, 1);
/// assert_eq!(letters.page(&Page::first(10)).await?, [letter.clone()]);
///
/// // Acknowledged: no longer pending, still readable with who and when.
/// let by_hand = Resolution::new("alice", at("2026-08-20T09:00:00Z"));
/// assert!(letters.resolve(&letter.msg_id, &by_hand).await?);
/// let stats = letters.stats().await?;
/// assert_eq!((stats.pending, stats.resolved), (0, 1));
/// assert_eq!(letters.get(&letter.msg_id).await?.unwrap().resolved, Some(by_hand));
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
    reads: Arc<Pool>,
    /// Every write: the file's queue (shared with a `SqliteStore` on the same file).
    writes: Writes,
}

impl fmt::Debug for SqliteDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteDeadLetters")
            .field("path", &self.reads.path)
            .field("busy_timeout", &self.reads.settings.busy_timeout)
            .finish()
    }
}

impl SqliteDeadLetters {
    /// Opens (creating it if needed) the SQLite file at `path`, switches it to WAL, creates the
    /// tables `dead_letters`, `dead_letter_redrives` and `dead_letter_audit` if they are
    /// missing, and upgrades a file written by an older retry-core. Safe to call from several
    /// processes at once, and on a file that already holds other tables (an idempotency
    /// store's, the application's). Opening waits up to the busy timeout (5 s) for a lock
    /// another process holds on the file.
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the file when it cannot be opened or created (its directory is
    /// missing, no permission, not a database), cannot use WAL, stays locked, or holds a
    /// `dead_letters` table written by a newer version of this crate.
    ///
    /// ```
    /// use retry_sqlite::SqliteDeadLetters;
    ///
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-open-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// // Opening again is harmless: the tables are created only once.
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
    /// // The error says "dead-letter store failed"; its source, why.
    /// let why = retry_core::error_chain(&error).to_string();
    /// assert!(why.contains("does not exist"), "{why}");
    /// # Ok::<(), retry_core::dlq::DlqError>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        let path = path.as_ref().to_path_buf();
        let reads = Arc::new(
            Pool::open(path.clone(), READ_SETTINGS, &schema::SCHEMA)
                .map_err(DlqError::from_sqlite)?,
        );
        reads.with_connection(Reservation::none(), |conn| {
            schema::upgrade(conn).map_err(Fail::Sql)
        })?;
        let writes = Writes::open(&path, write_wait(DEFAULT_BUSY_TIMEOUT));
        Ok(SqliteDeadLetters { reads, writes })
    }

    /// How long an operation waits for a lock held by another connection or process before it
    /// fails with [`DlqError::Io`] ("database file ... is locked by another process (busy for
    /// 5s)"); also bounds the wait in the file's write queue, behind this process's other
    /// writes, and for a free reader connection. Default 5 s; longer than about 24 days counts
    /// as 24 days. Zero fails at once when another process holds the file, and after a
    /// millisecond in the queue.
    ///
    /// ```
    /// use retry_sqlite::SqliteDeadLetters;
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
    pub fn with_busy_timeout(self, timeout: Duration) -> Self {
        // Idle connections of the old pool close; the next reads open connections with the
        // new timeout, and the next writes wait for the queue at most that long.
        let reads = self.reads.with_settings(Settings {
            busy_timeout: timeout,
            ..self.reads.settings
        });
        SqliteDeadLetters {
            reads: Arc::new(reads),
            writes: self.writes.with_wait(write_wait(timeout)),
        }
    }

    /// The file this store keeps its letters in.
    ///
    /// ```
    /// use retry_sqlite::SqliteDeadLetters;
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
        &self.reads.path
    }

    /// Runs the read `op` on a reader connection, off the async executor.
    async fn read<T, F>(&self, op: F) -> Result<T, DlqError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Fail> + Send + 'static,
    {
        self.reads.run(move |conn| op(conn)).await
    }
}

impl DeadLetterSink for SqliteDeadLetters {
    /// Parks `letter` in the file's queue's next group and returns once that group is committed (and
    /// synced). If its `msg_id` is already there (the same message gave up again, or its
    /// letter was resolved since), the two merge as [`DeadLetter::absorb`] says.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] when the stored letter it merges into cannot be read;
    /// [`DlqError::Serialize`]
    /// when its original nests deeper than [`MAX_ORIGINAL_DEPTH`](retry_core::dlq::MAX_ORIGINAL_DEPTH)
    /// (nothing is written); [`DlqError::Io`]
    /// naming the file when the group's transaction fails or the file stays locked.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore};
    /// use retry_sqlite::SqliteDeadLetters;
    /// use retry_core::time::parse_rfc3339;
    /// # fn letter(reason: &str, at: &str) -> DeadLetter { serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": {"amount": 10}, "reason": reason, "attempts": 5,
    /// #   "first_failed_at": at, "last_failed_at": at,
    /// #   "trace_id": "t", "class": "system", "error_type": "FetchError" })).unwrap() }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-park-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// letters.park(&letter("503", "2026-08-19T02:11:03+09:00")).await?;
    ///
    /// // The same message gives up again later: one letter, merged.
    /// let mut again = letter("timeout", "2026-08-19T03:00:00+09:00");
    /// again.original = serde_json::json!({"amount": 999});
    /// letters.park(&again).await?;
    /// let merged = letters.get("M-1").await?.unwrap();
    /// assert_eq!(merged.original, serde_json::json!({"amount": 10}), "the first original stays");
    /// assert_eq!(Some(merged.first_failed_at), parse_rfc3339("2026-08-19T02:11:03+09:00"));
    /// assert_eq!((merged.attempts, merged.reason.as_str()), (10, "timeout"));
    /// assert_eq!(merged.history[0].reason, "503");
    ///
    /// // A letter whose times cannot be ordered is no letter: refused where it is read.
    /// let mut unordered = serde_json::to_value(letter("503", "2026-08-19T02:11:03Z"))?;
    /// unordered["first_failed_at"] = "yesterday".into();
    /// assert!(serde_json::from_value::<DeadLetter>(unordered).is_err());
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
        // Checked and serialised here, on the caller's thread: the queue's thread only writes.
        let row = LetterRow::new(letter)?;
        let letter = letter.clone();
        self.writes
            .write(move |conn| queries::park(conn, &row, &letter))
            .await
    }
}

impl DeadLetterStore for SqliteDeadLetters {
    /// One `SELECT` over the pending index that fits the page's filters, from after its cursor.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] naming the first row of the page that cannot be read (nothing is
    /// skipped); [`DlqError::Io`] naming the file when SQLite fails.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, DeadLetterStore, Page};
    /// use retry_sqlite::SqliteDeadLetters;
    /// # fn letter(msg_id: &str, at: &str) -> retry_core::dlq::DeadLetter { serde_json::from_value(serde_json::json!({
    /// #   "msg_id": msg_id, "original": null, "reason": "503", "attempts": 5,
    /// #   "first_failed_at": at, "last_failed_at": at,
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap() }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-page-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// letters.park(&letter("late", "2026-08-19T01:00:00Z")).await?;
    /// // 02:00 in Tokyo is 17:00 UTC the day before: the earlier failure.
    /// letters.park(&letter("early", "2026-08-19T02:00:00+09:00")).await?;
    /// let first = letters.page(&Page::first(1)).await?;
    /// assert_eq!(first[0].msg_id, "early");
    /// let next = letters.page(&Page::first(1).next_after(&first[0])).await?;
    /// assert_eq!(next[0].msg_id, "late");
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn page(&self, page: &Page) -> Result<Vec<DeadLetter>, DlqError> {
        let after = page
            .after
            .as_ref()
            .map(|cursor| (format_utc(cursor.first_failed_at), cursor.msg_id.clone()));
        let page = page.clone();
        self.read(move |conn| {
            let after = after.as_ref().map(|(at, id)| (at.as_str(), id.as_str()));
            queries::page(conn, &page, after)
        })
        .await
    }

    /// One `SELECT` of counts over the partial indexes; no letter is read.
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the file when SQLite fails.
    ///
    /// ```
    /// use retry_core::dlq::DeadLetterStore;
    /// use retry_sqlite::SqliteDeadLetters;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-stats-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// let stats = letters.stats().await?;
    /// assert_eq!((stats.pending, stats.resolved, stats.oldest_first_failed_at), (0, 0, None));
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn stats(&self) -> Result<Stats, DlqError> {
        let now = format_utc(SystemTime::now());
        self.read(move |conn| queries::stats(conn, &now)).await
    }

    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        let msg_id = msg_id.to_owned();
        self.read(move |conn| queries::get(conn, &msg_id)).await
    }

    /// One `UPDATE .. RETURNING` in the file's queue's next group; the clock is read when it runs.
    /// Atomic across processes: of two runs asking at once, on one store or two, one gets the
    /// letter.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] if the letter's row cannot be read (it is not leased then);
    /// [`DlqError::Io`] naming the file when the group's transaction fails.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, DeadLetterStore, Resolution};
    /// use retry_sqlite::SqliteDeadLetters;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let letter: retry_core::dlq::DeadLetter = serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": null, "reason": "503", "attempts": 5,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" }))?;
    /// let path = std::env::temp_dir().join(format!("retry-core-doc-dlq-lease-{}.sqlite3", std::process::id()));
    /// let letters = SqliteDeadLetters::open(&path)?;
    /// letters.park(&letter).await?;
    /// let ttl = Duration::from_secs(60);
    /// assert!(letters.lease("M-1", "run-a", ttl).await?.is_some());
    /// assert!(letters.lease("M-1", "run-b", ttl).await?.is_none(), "run-a holds it");
    /// // Sent, and the target answered: run-a resolves it.
    /// let done = Resolution::new("alice", std::time::SystemTime::now()).in_run("run-a");
    /// assert!(letters.resolve("M-1", &done).await?);
    /// # drop(letters);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let mut file = path.clone().into_os_string();
    /// #     file.push(suffix);
    /// #     let _ = std::fs::remove_file(file);
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    async fn lease(
        &self,
        msg_id: &str,
        run_id: &str,
        ttl: Duration,
    ) -> Result<Option<DeadLetter>, DlqError> {
        let (msg_id, run_id) = (msg_id.to_owned(), run_id.to_owned());
        self.writes
            .write(move |conn| {
                let now = SystemTime::now();
                let until = format_utc(later(now, ttl));
                queries::lease(conn, &msg_id, &run_id, &until, &format_utc(now))
            })
            .await
    }

    async fn release(&self, msg_id: &str, run_id: &str) -> Result<bool, DlqError> {
        let (msg_id, run_id) = (msg_id.to_owned(), run_id.to_owned());
        self.writes
            .write(move |conn| queries::release(conn, &msg_id, &run_id))
            .await
    }

    /// # Errors
    /// [`DlqError::Io`] naming the file when the group's transaction fails.
    async fn resolve(&self, msg_id: &str, resolution: &Resolution) -> Result<bool, DlqError> {
        let resolution = ResolutionRow::new(resolution);
        let msg_id = msg_id.to_owned();
        self.writes
            .write(move |conn| {
                let now = format_utc(SystemTime::now());
                queries::resolve(conn, &msg_id, &resolution, &now)
            })
            .await
    }

    /// # Errors
    /// [`DlqError::Corrupt`] when the stored letter cannot be read; [`DlqError::Io`] naming the
    /// file when the group's transaction fails.
    async fn put_back(
        &self,
        msg_id: &str,
        run_id: &str,
        failure: &Failure,
    ) -> Result<bool, DlqError> {
        let (msg_id, run_id, failure) = (msg_id.to_owned(), run_id.to_owned(), failure.clone());
        self.writes
            .write(move |conn| queries::put_back(conn, &msg_id, &run_id, &failure))
            .await
    }

    async fn purge_resolved(&self, before: SystemTime) -> Result<u64, DlqError> {
        let before = format_utc(before);
        self.writes
            .write(move |conn| queries::purge(conn, &before))
            .await
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), DlqError> {
        let entry = entry.clone();
        self.writes
            .write(move |conn| queries::audit(conn, &entry))
            .await
    }

    async fn audit_rows(&self, run_id: Option<&str>) -> Result<Vec<AuditEntry>, DlqError> {
        let run_id = run_id.map(str::to_owned);
        self.read(move |conn| queries::audit_rows(conn, run_id.as_deref()))
            .await
    }

    /// Appended to `dead_letter_redrives` in the file's queue's next group (`synchronous=FULL` like
    /// the letters).
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the file when the group's transaction fails (a `run_id` recorded
    /// before, too).
    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        let row = row::record_row(record)?;
        self.writes
            .write(move |conn| queries::record_redrive(conn, &row))
            .await
    }

    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        self.read(queries::redrives).await
    }
}
