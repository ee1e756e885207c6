//! `PgDeadLetters`: the dead-letter table `dead_letters` in a PostgreSQL database, for many
//! service instances at once.
//!
//! Design notes (the why of each choice):
//! - The table and its semantics are `SqliteDeadLetters`'s (feature `sqlite`): the same columns,
//!   the same upsert, the same ordering. Connections, pooling, the migration lock and the error
//!   messages are `PgStore`'s: the plumbing both stores share (`sql/postgres.rs`).
//! - `park` is one autocommit `INSERT .. ON CONFLICT (msg_id) DO UPDATE`: it returns once the
//!   server has committed it (durable with the server's default `synchronous_commit = on`), and
//!   two instances parking the same `msg_id` at once cannot both insert.
//! - Ordering is by `first_failed_utc` ([`format_utc`] text) then `msg_id`, both `COLLATE "C"`,
//!   so text order is byte order (time order for the timestamp) whatever the database's default
//!   collation, the index serves it, and the order is the SQLite store's.
//! - `attempts` is `BIGINT` (a `u32` does not fit PostgreSQL's `INTEGER`); statements cast it
//!   (`$4::bigint`, `attempts::bigint`), so a table made by hand with `INTEGER` works too.
//! - The migration runs under the same `pg_advisory_xact_lock` key as `PgStore`'s: both create
//!   `retry_core_schema`, and `CREATE TABLE IF NOT EXISTS` alone can fail when two sessions run
//!   it at once. A schema already at this version is left alone (no `CREATE` privilege needed).

use std::fmt;
use std::time::SystemTime;

use deadpool_postgres::Pool;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::row::{self, NewRow, corrupt};
use super::{DeadLetter, DeadLetterSink, DlqError, LegacyStore, RedriveRecord};
use crate::sql::postgres::{Db, Schema};
use crate::time::format_utc;

/// The version of the `dead_letters` layout this code writes, kept in `retry_core_schema`.
const SCHEMA_VERSION: i32 = 1;

/// The table, created after the shared `retry_core_schema`.
const TABLES: &str = "CREATE TABLE IF NOT EXISTS dead_letters (
    msg_id TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    original TEXT NOT NULL,
    reason TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    first_failed_at TEXT NOT NULL,
    last_failed_at TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('system', 'data')),
    error_type TEXT NOT NULL,
    idempotency_key TEXT,
    parked_at TEXT COLLATE \"C\" NOT NULL,
    first_failed_utc TEXT COLLATE \"C\" NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_first_failed ON dead_letters (first_failed_utc, msg_id);
CREATE TABLE IF NOT EXISTS dead_letter_redrives (
    run_id TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    started_utc TEXT COLLATE \"C\" NOT NULL,
    record TEXT NOT NULL
);
";

const TABLES_EXIST: &str = "SELECT to_regclass('retry_core_schema') IS NOT NULL, \
     to_regclass('dead_letters') IS NOT NULL AND to_regclass('dead_letter_redrives') IS NOT NULL";
const SELECT_VERSION: &str =
    "SELECT version FROM retry_core_schema WHERE component = 'dead_letters'";
const RECORD_VERSION: &str = "INSERT INTO retry_core_schema (component, version) VALUES ('dead_letters', $1) \
     ON CONFLICT (component) DO NOTHING";

const SCHEMA: Schema = Schema {
    component: "dead_letters",
    version: SCHEMA_VERSION,
    tables: TABLES,
    tables_exist: TABLES_EXIST,
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};

// A pending `msg_id` is replaced, except for when it first failed (and so its place in the
// order).
const UPSERT: &str = "INSERT INTO dead_letters \
     (msg_id, original, reason, attempts, first_failed_at, last_failed_at, trace_id, class, \
      error_type, idempotency_key, parked_at, first_failed_utc) \
     VALUES ($1, $2, $3, $4::bigint, $5, $6, $7, $8, $9, $10, $11, $12) \
     ON CONFLICT (msg_id) DO UPDATE SET original = excluded.original, reason = excluded.reason, \
      attempts = excluded.attempts, last_failed_at = excluded.last_failed_at, \
      trace_id = excluded.trace_id, class = excluded.class, error_type = excluded.error_type, \
      idempotency_key = excluded.idempotency_key, parked_at = excluded.parked_at";
const DELETE: &str = "DELETE FROM dead_letters WHERE msg_id = $1";
const INSERT_REDRIVE: &str =
    "INSERT INTO dead_letter_redrives (run_id, started_utc, record) VALUES ($1, $2, $3)";
const SELECT_REDRIVES: &str =
    "SELECT run_id, record FROM dead_letter_redrives ORDER BY started_utc, run_id";
const COUNT: &str = "SELECT count(*) FROM dead_letters";
const SELECT_ALL: &str = "SELECT msg_id, original, reason, attempts::bigint, first_failed_at, \
     last_failed_at, trace_id, class, error_type, idempotency_key FROM dead_letters \
     ORDER BY first_failed_utc, msg_id";
const SELECT_OLDEST: &str = "SELECT msg_id, original, reason, attempts::bigint, first_failed_at, \
     last_failed_at, trace_id, class, error_type, idempotency_key FROM dead_letters \
     ORDER BY first_failed_utc, msg_id LIMIT 1";
const SELECT_ONE: &str = "SELECT msg_id, original, reason, attempts::bigint, first_failed_at, \
     last_failed_at, trace_id, class, error_type, idempotency_key FROM dead_letters \
     WHERE msg_id = $1";

/// Dead letters in the table `dead_letters` of one PostgreSQL database, for any number of
/// service instances: a [`DeadLetterSink`] for `#[retryable(dlq(sink = ...))]`, and a
/// [`LegacyStore`] to monitor and redrive from. The database may be the one of a
/// [`PgStore`](crate::idempotency::PgStore).
///
/// - `park` is one autocommit upsert: it returns once the server committed the letter. Parking
///   a `msg_id` that is already pending replaces its letter but keeps its `first_failed_at`.
/// - [`list`](LegacyStore::list) and [`oldest`](LegacyStore::oldest) order by the
///   instant of the first failure (whatever the offsets), then by `msg_id`.
/// - A letter whose `first_failed_at` or `last_failed_at` is not RFC 3339 is refused with
///   [`DlqError::Corrupt`]; a row that cannot be read back is [`DlqError::Corrupt`] naming its
///   `msg_id`, never skipped.
/// - Connections come from a [deadpool-postgres pool](deadpool_postgres::Pool), 16 by default.
///   An operation waits at most 5 s for a free connection, and opening one at most 5 s; after
///   that it fails with [`DlqError::Io`] naming the server (`host:port` and database, never the
///   password). Bound waits on the server itself with a `statement_timeout` in the URL
///   (`?options=-c%20statement_timeout%3D5000`).
/// - The pool made by [`connect`](Self::connect) uses no TLS; for TLS, build a pool with your
///   TLS connector and pass it to [`from_pool`](Self::from_pool).
///
/// ```no_run
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, PgDeadLetters};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let letters = PgDeadLetters::connect("postgres://app@db.internal:5432/payments").await?;
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
/// assert_eq!(letters.get(&letter.msg_id).await?, Some(letter.clone()));
/// // Redriven: no longer pending.
/// assert!(letters.ack(&letter.msg_id).await?);
/// # Ok(())
/// # }
/// ```
pub struct PgDeadLetters {
    db: Db,
}

impl fmt::Debug for PgDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.db.pool.status();
        f.debug_struct("PgDeadLetters")
            .field("server", &self.db.server)
            .field("pool_size", &status.max_size)
            .field("connections", &status.size)
            .finish()
    }
}

impl PgDeadLetters {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, or
    /// the `key=value` form), with a pool of up to 16 connections and no TLS, and creates the
    /// table `dead_letters` if it is missing. Safe to call from several instances at once.
    ///
    /// Missing settings get defaults: `connect_timeout` 5 s, `application_name` "retry-core".
    /// Must run inside a Tokio runtime; the store belongs to that runtime (its connections run
    /// as tasks there).
    ///
    /// # Errors
    /// [`DlqError::Io`] when the URL is invalid, the server cannot be reached or refuses the
    /// login, the migration fails (no permission to create the table), or the table was
    /// written by a newer version of this crate. The message names the server, never the
    /// password.
    ///
    /// ```no_run
    /// use retry_core::dlq::PgDeadLetters;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::dlq::DlqError> {
    /// let letters = PgDeadLetters::connect("postgres://app:secret@db.internal:5432/payments").await?;
    ///
    /// let error = PgDeadLetters::connect("postgres://app:secret@127.0.0.1:1/payments").await.unwrap_err();
    /// assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
    /// assert!(!error.to_string().contains("secret"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, DlqError> {
        let db = Db::connect(url, &SCHEMA).await.map_err(DlqError::Io)?;
        Ok(PgDeadLetters { db })
    }

    /// Uses `pool` (for TLS, other pool settings, or the pool of a
    /// [`PgStore`](crate::idempotency::PgStore) or of the application), and creates the table
    /// `dead_letters` if it is missing, like [`connect`](Self::connect). The pool's own
    /// timeouts apply; error messages name the server as it reports its address.
    ///
    /// # Errors
    /// As [`connect`](Self::connect): [`DlqError::Io`] when no connection can be had from the
    /// pool or the migration fails.
    ///
    /// ```no_run
    /// use retry_core::dlq::PgDeadLetters;
    /// use retry_core::idempotency::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@db.internal/payments").await?;
    /// // One pool for the idempotency log and the dead letters.
    /// let letters = PgDeadLetters::from_pool(store.pool().clone()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_pool(pool: Pool) -> Result<Self, DlqError> {
        let db = Db::from_pool(pool, "PgDeadLetters", &SCHEMA)
            .await
            .map_err(DlqError::Io)?;
        Ok(PgDeadLetters { db })
    }

    /// The store's connection pool, to share with the application.
    ///
    /// ```no_run
    /// use retry_core::dlq::PgDeadLetters;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// let client = letters.pool().get().await?;
    /// let row = client
    ///     .query_one("SELECT count(*) FROM dead_letters WHERE class = 'data'", &[])
    ///     .await?;
    /// let data_errors: i64 = row.get(0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn pool(&self) -> &Pool {
        &self.db.pool
    }

    /// Where the store's rows are, as its error messages name it: `host:port (database
    /// name)`, without user or password.
    ///
    /// ```no_run
    /// use retry_core::dlq::PgDeadLetters;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::dlq::DlqError> {
    /// let letters = PgDeadLetters::connect("postgres://app:secret@127.0.0.1:5432/payments").await?;
    /// assert_eq!(letters.server(), "127.0.0.1:5432 (database payments)");
    /// # Ok(())
    /// # }
    /// ```
    pub fn server(&self) -> &str {
        &self.db.server
    }

    /// A connection of the pool.
    async fn get(&self) -> Result<deadpool_postgres::Object, DlqError> {
        self.db.get().await.map_err(DlqError::Io)
    }

    /// A failed statement (or a lost connection): names the server.
    fn error(&self, e: tokio_postgres::Error) -> DlqError {
        DlqError::Io(self.db.error(e))
    }

    /// A `SELECT` of the ten letter columns, every row read; the first unreadable one fails the
    /// whole read.
    async fn select(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<DeadLetter>, DlqError> {
        let client = self.get().await?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.error(e))?;
        let rows = client
            .query(&statement, params)
            .await
            .map_err(|e| self.error(e))?;
        rows.iter().map(decode).collect()
    }
}

impl DeadLetterSink for PgDeadLetters {
    /// Parks `letter` with one autocommit upsert and returns once the server committed it. If
    /// its `msg_id` is already pending (the same message gave up again), the pending letter is
    /// replaced, keeping its `first_failed_at`.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] when `first_failed_at` or `last_failed_at` is not RFC 3339 (the
    /// server is not asked); [`DlqError::Io`] naming the server when it cannot be reached or
    /// fails.
    ///
    /// ```no_run
    /// use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, PgDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// let letter = DeadLetter {
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
    /// // The same message gives up again later: one pending letter, first failure kept.
    /// letters
    ///     .park(&DeadLetter { last_failed_at: "2026-08-19T03:01:40+09:00".into(), ..letter.clone() })
    ///     .await?;
    /// assert_eq!(letters.get("M-1").await?.unwrap().first_failed_at, "2026-08-19T02:11:03+09:00");
    /// # Ok(())
    /// # }
    /// ```
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        let row = NewRow::new(letter)?;
        let parked_at = format_utc(SystemTime::now());
        let client = self.get().await?;
        let statement = client
            .prepare_cached(UPSERT)
            .await
            .map_err(|e| self.error(e))?;
        let params: [&(dyn ToSql + Sync); 12] = [
            &row.msg_id,
            &row.original,
            &row.reason,
            &row.attempts,
            &row.first_failed_at,
            &row.last_failed_at,
            &row.trace_id,
            &row.class,
            &row.error_type,
            &row.idempotency_key,
            &parked_at,
            &row.first_failed_utc,
        ];
        client
            .execute(&statement, &params)
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }
}

impl LegacyStore for PgDeadLetters {
    /// Every pending letter, ordered by the instant of the first failure (whatever offsets the
    /// times were written with), then by `msg_id`.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] naming the `msg_id` of a row that cannot be read (nothing is
    /// skipped); [`DlqError::Io`] naming the server when it cannot be reached or fails.
    ///
    /// ```no_run
    /// use retry_core::dlq::{LegacyStore, FailureClass, PgDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// for letter in letters.list().await? {
    ///     if letter.class == FailureClass::Data {
    ///         println!("{} needs a look: {}", letter.msg_id, letter.reason);
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    async fn list(&self) -> Result<Vec<DeadLetter>, DlqError> {
        self.select(SELECT_ALL, &[]).await
    }

    /// How many letters are pending (what to alert on).
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the server when it cannot be reached or fails.
    ///
    /// ```no_run
    /// use retry_core::dlq::{LegacyStore, PgDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// if letters.count().await? > 100 {
    ///     eprintln!("the dead-letter queue is filling up");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    async fn count(&self) -> Result<u64, DlqError> {
        let client = self.get().await?;
        let statement = client
            .prepare_cached(COUNT)
            .await
            .map_err(|e| self.error(e))?;
        let count: i64 = client
            .query_one(&statement, &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| self.error(e))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The pending letter with the earliest first failure (ties: the smallest `msg_id`): its
    /// `first_failed_at` is the age to alert on.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] naming the `msg_id` if that row cannot be read; [`DlqError::Io`]
    /// naming the server when it cannot be reached or fails.
    ///
    /// ```no_run
    /// use retry_core::dlq::{LegacyStore, PgDeadLetters};
    /// use retry_core::time::parse_rfc3339;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// if let Some(oldest) = letters.oldest().await? {
    ///     let since = parse_rfc3339(&oldest.first_failed_at).unwrap();
    ///     println!("oldest dead letter failed {:?} ago", since.elapsed().unwrap_or_default());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    async fn oldest(&self) -> Result<Option<DeadLetter>, DlqError> {
        let mut found = self.select(SELECT_OLDEST, &[]).await?;
        Ok(found.pop())
    }

    /// The pending letter `msg_id`, as it was parked.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] naming the `msg_id` if its row cannot be read; [`DlqError::Io`]
    /// naming the server when it cannot be reached or fails.
    ///
    /// ```no_run
    /// use retry_core::dlq::{LegacyStore, PgDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// match letters.get("M-20260819-000123").await? {
    ///     Some(letter) => println!("{}: {}", letter.msg_id, letter.original),
    ///     None => println!("not pending"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        let mut found = self.select(SELECT_ONE, &[&msg_id]).await?;
        Ok(found.pop())
    }

    /// Deletes `msg_id` from the pending letters (one autocommit `DELETE`); `true` if it was
    /// pending.
    ///
    /// # Errors
    /// [`DlqError::Io`] naming the server when it cannot be reached or fails.
    ///
    /// ```no_run
    /// use retry_core::dlq::{LegacyStore, PgDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// // Redriven successfully: no longer pending.
    /// if !letters.ack("M-20260819-000123").await? {
    ///     println!("someone else acknowledged it first");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    async fn ack(&self, msg_id: &str) -> Result<bool, DlqError> {
        let client = self.get().await?;
        let statement = client
            .prepare_cached(DELETE)
            .await
            .map_err(|e| self.error(e))?;
        let deleted = client
            .execute(&statement, &[&msg_id])
            .await
            .map_err(|e| self.error(e))?;
        Ok(deleted > 0)
    }

    /// The same upsert as [`park`](DeadLetterSink::park): the pending letter takes the new
    /// `attempts`, `last_failed_at`, `reason` (and the rest) and keeps its `first_failed_at`;
    /// a letter no longer pending is parked again.
    ///
    /// # Errors
    /// As [`park`](DeadLetterSink::park).
    ///
    /// ```no_run
    /// use retry_core::dlq::{DeadLetter, LegacyStore, PgDeadLetters};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// let pending = letters.get("M-1").await?.expect("pending");
    /// // The redrive failed again.
    /// let failed_again = DeadLetter {
    ///     attempts: pending.attempts + 1,
    ///     last_failed_at: retry_core::time::format_rfc3339(std::time::SystemTime::now()),
    ///     reason: "redrive: 503 Service Unavailable".into(),
    ///     ..pending
    /// };
    /// letters.put_back(&failed_again).await?;
    /// # Ok(())
    /// # }
    /// ```
    async fn put_back(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        self.park(letter).await
    }

    /// Inserts the record into `dead_letter_redrives` (one autocommit `INSERT`).
    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        let (run_id, started_utc, json) = row::record_row(record)?;
        let client = self.get().await?;
        let statement = client
            .prepare_cached(INSERT_REDRIVE)
            .await
            .map_err(|e| self.error(e))?;
        client
            .execute(&statement, &[&run_id, &started_utc, &json])
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        let client = self.get().await?;
        let statement = client
            .prepare_cached(SELECT_REDRIVES)
            .await
            .map_err(|e| self.error(e))?;
        let rows = client
            .query(&statement, &[])
            .await
            .map_err(|e| self.error(e))?;
        rows.iter()
            .map(|r| {
                let run_id: String = r.try_get(0).map_err(|e| self.error(e))?;
                let json: String = r.try_get(1).map_err(|e| self.error(e))?;
                row::record(&run_id, &json)
            })
            .collect()
    }
}

// ---- rows ----

/// A row of one of the `SELECT`s, every column checked.
fn decode(row: &Row) -> Result<DeadLetter, DlqError> {
    let msg_id: String = row.try_get(0).map_err(|e| {
        DlqError::Corrupt(format!("dead_letters row with an unreadable msg_id: {e}"))
    })?;
    let id = msg_id.as_str();
    let text = |i: usize, column: &str| -> Result<String, DlqError> {
        row.try_get::<_, String>(i)
            .map_err(|e| corrupt(id, format_args!("bad {column} ({e})")))
    };
    let original = row::original(id, &text(1, "original")?)?;
    let attempts: i64 = row
        .try_get(3)
        .map_err(|e| corrupt(id, format_args!("bad attempts ({e})")))?;
    let attempts = row::attempts(id, attempts)?;
    let time = |i: usize, column: &str| row::time(id, column, text(i, column)?);
    let class = row::class(id, &text(7, "class")?)?;
    let idempotency_key: Option<String> = row
        .try_get(9)
        .map_err(|e| corrupt(id, format_args!("bad idempotency_key ({e})")))?;
    Ok(DeadLetter {
        original,
        reason: text(2, "reason")?,
        attempts,
        first_failed_at: time(4, "first_failed_at")?,
        last_failed_at: time(5, "last_failed_at")?,
        trace_id: text(6, "trace_id")?,
        class,
        error_type: text(8, "error_type")?,
        idempotency_key,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
        msg_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_connection_string_is_io_and_does_not_echo_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let error = runtime
            .block_on(PgDeadLetters::connect(
                "postgres://app:s3cret@host:notaport/db",
            ))
            .unwrap_err();
        assert!(matches!(error, DlqError::Io(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("invalid PostgreSQL connection string"),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
    }
}
