//! `PgDeadLetters`: the dead letters in a PostgreSQL database, for many service instances at
//! once.
//!
//! Design notes (the why of each choice):
//! - Parking is group-committed (`writer.rs`): one task per store writes every letter parked
//!   while its previous write ran, with one connection, and answers each caller after the
//!   commit its letter was in. An outage that makes hundreds of calls give up at once costs a
//!   few commits, not hundreds, and no caller blocks a runtime worker while it waits.
//! - A letter is never overwritten: a `msg_id` parked again is merged by
//!   [`DeadLetter::absorb`] itself, read and written under the row's lock
//!   (`SELECT .. FOR UPDATE`) in one transaction, rather than by a second copy of the merge
//!   rules in SQL; a redrive that failed again ([`DeadLetter::redrive_failed`]) goes the same
//!   way. New letters, the usual case, need no lock: one multi-row `INSERT .. ON CONFLICT DO
//!   NOTHING`.
//! - Acknowledging resolves (`resolved_at`, `_by`, `_run`); only resolved rows are purged, by
//!   `resolved_at`. Pending means `resolved_at IS NULL`, and the order index is partial on it,
//!   so pages and the oldest pending letter never read resolved rows.
//! - Times are `timestamptz`, which the server orders and compares; the nanoseconds below its
//!   microsecond are a `_ns` column beside each (0 for the library's own times, which are
//!   milliseconds), so a letter reads back to the nanosecond as it was parked. `original`,
//!   `history` and redrive records are `jsonb`, bound and read as serde_json values.
//! - Leases are decided on the database's clock (`lease_until` is `now() + ttl`, compared with
//!   `now()`), by one `UPDATE .. WHERE` the lease is free: under READ COMMITTED a second run
//!   waiting for the row lock re-checks that condition on the row as the first run left it, so
//!   one run wins however many ask, and instances whose clocks disagree still agree.
//! - Pages are keyset pages: `(first_failed_at, first_failed_ns, msg_id) > cursor ORDER BY ..
//!   LIMIT`, `msg_id` `COLLATE "C"` (byte order) whatever the database's collation, as the
//!   SQLite store orders them. Counts are `count(*) FILTER` in one statement.
//! - `attempts` is `BIGINT` (a `u32` does not fit PostgreSQL's `INTEGER`); statements cast it.
//! - Texts may not hold NUL (PostgreSQL's `text` cannot, nor a string or key of `jsonb`,
//!   `original`'s included): such a letter is refused before it reaches the writer, so it cannot
//!   fail the others of its group.
//! - The schema is version 3 (`schema.rs`); a database of version 1 or 2 is upgraded in place
//!   at connect, in one transaction under the advisory lock every store migrates under, every
//!   letter, audit row and redrive record kept.
//! - Every write runs READ COMMITTED, whatever the session's default (a single statement in a
//!   transaction of its own whose `BEGIN` and `COMMIT` are pipelined with it: one round trip,
//!   as autocommit): under SERIALIZABLE a letter that many writers merge, or a lease many runs
//!   ask for, would fail with serialization errors where READ COMMITTED waits for the row and
//!   checks it again. Deadlocks (`40P01`, the application locking rows) and any serialization
//!   failure (`40001`) are tried again, 3 times in all, as `PgStore` does.

mod queries;
mod rows;
mod schema;
mod writer;

use std::fmt;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Pool;

use crate::sql::Db;
use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, Page,
    RedriveRecord, Resolution, Stats,
};

use schema::SCHEMA;
use writer::Writer;

/// Dead letters in the table `dead_letters` of one PostgreSQL database, for any number of
/// service instances: a [`DeadLetterSink`] for `#[retryable(dlq(sink = ...))]`, and a
/// [`DeadLetterStore`] to monitor, page through, lease, resolve and redrive from. The database
/// may be the one of a [`PgStore`](crate::PgStore).
///
/// - `park` is group-committed: letters parked at the same time are written together (up to
///   512 in one commit) by one task of the store, and each `park` returns once the commit
///   holding its letter is done (durable with the server's default `synchronous_commit = on`).
///   If that write fails, every letter written with it fails with the server's error (a letter
///   the server refuses for what it holds fails alone); nothing acknowledged is lost, and the
///   next letters take a new connection.
/// - A `msg_id` parked again is merged as [`DeadLetter::absorb`] says: the first `original` and
///   `first_failed_at` stay, attempts add up, the earlier give-up goes to the history.
/// - Pages and [`stats`](DeadLetterStore::stats) are computed by the server; pages follow the
///   instant of the first failure (whatever the offsets), then `msg_id`.
/// - Leases are measured on the database server's clock.
/// - Times are `timestamptz` columns (with the nanoseconds below the microsecond beside them,
///   so every letter reads back exactly) and JSON is `jsonb`, so SQL can read both as what they
///   are; a letter holding a NUL character (in a text, or a string of `original`) is refused
///   with [`DlqError::Serialize`]; a row that cannot be read back is [`DlqError::Corrupt`]
///   naming its `msg_id` and the column, never skipped.
/// - Connections come from a [deadpool-postgres pool](deadpool_postgres::Pool), 16 by default;
///   the writer holds one of them while letters keep coming. An operation waits at most 5 s for
///   a free connection, and opening one at most 5 s; after that it fails with
///   [`DlqError::Io`] naming the server (`host:port` and database, never the password). A
///   group of letters gets 30 s in all. Bound waits on the server itself with a
///   `statement_timeout` in the URL (`?options=-c%20statement_timeout%3D5000`).
/// - The pool made by [`connect`](Self::connect) connects over TLS when the URL asks for it, as libpq reads it: `sslmode=require` encrypts (the
///   certificate checked against `sslrootcert=FILE` when given), `verify-ca` checks the chain to
///   `sslrootcert`, `verify-full` the chain and the host name, to `sslrootcert` or the platform's
///   trust store (feature `tls`: rustls with the ring provider; without it such a URL
///   fails to connect). `prefer` (the default) and `disable` stay plain. For another TLS setup,
///   build a pool with your connector and pass it to [`from_pool`](Self::from_pool).
/// - The store belongs to the Tokio runtime it was made in (its writer and its connections run
///   as tasks there).
///
/// ```no_run
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, FailureClass, Page, Resolution};
/// use retry_postgres::PgDeadLetters;
/// use std::time::{Duration, SystemTime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let letters = PgDeadLetters::connect("postgres://app@db.internal:5432/payments").await?;
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
/// assert_eq!(letters.get(&letter.msg_id).await?, Some(letter.clone()));
///
/// // A redrive run takes the letter, sends it, and resolves it.
/// let page = letters.page(&Page::first(100).source("payments::deposit")).await?;
/// for pending in page {
///     if letters.lease(&pending.msg_id, "run-7", Duration::from_secs(60)).await?.is_some() {
///         // ... send it to an idempotent target ...
///         let done = Resolution::new("alice", SystemTime::now()).in_run("run-7");
///         letters.resolve(&pending.msg_id, &done).await?;
///     }
/// }
/// assert_eq!(letters.stats().await?.pending, 0);
/// # Ok(())
/// # }
/// ```
pub struct PgDeadLetters {
    db: Db,
    writer: Writer,
}

impl fmt::Debug for PgDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.db.pool.status();
        f.debug_struct("PgDeadLetters")
            .field("server", &self.db.server)
            .field("pool_size", &status.max_size)
            .field("connections", &status.size)
            .finish_non_exhaustive()
    }
}

impl PgDeadLetters {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, or
    /// the `key=value` form), with a pool of up to 16 connections (over TLS when `url` says
    /// `sslmode=require`, `verify-ca` or `verify-full`: see [`PgDeadLetters`]), creates the
    /// tables if they are missing (or brings tables of an earlier version up to date, keeping
    /// every letter), and starts the store's writer. Safe to call from several instances at
    /// once.
    ///
    /// Missing settings get defaults: `connect_timeout` 5 s, `application_name` "retry-core".
    /// Must run inside a Tokio runtime; the store belongs to that runtime.
    ///
    /// # Errors
    /// [`DlqError::Io`] when the URL is invalid, the server cannot be reached or refuses the
    /// login, the migration fails (no permission to create or alter the tables), or the tables
    /// were written by a newer version of this crate. The message names the server, never the
    /// password.
    ///
    /// ```no_run
    /// use retry_postgres::PgDeadLetters;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::dlq::DlqError> {
    /// let letters = PgDeadLetters::connect("postgres://app:secret@db.internal:5432/payments").await?;
    ///
    /// let error = PgDeadLetters::connect("postgres://app:secret@127.0.0.1:1/payments").await.unwrap_err();
    /// // The error names the store; its sources, the server (never the password) and why.
    /// let why = retry_core::error_chain(&error).to_string();
    /// assert!(why.contains("127.0.0.1:1"), "{why}");
    /// assert!(!why.contains("secret"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, DlqError> {
        let db = Db::connect(url, &SCHEMA).await.map_err(DlqError::Io)?;
        Ok(PgDeadLetters::with_db(db))
    }

    /// Uses `pool` (for TLS, other pool settings, or the pool of a
    /// [`PgStore`](crate::PgStore) or of the application), and creates or
    /// upgrades the tables like [`connect`](Self::connect). The pool's own timeouts apply;
    /// error messages name the server as it reports its address.
    ///
    /// # Errors
    /// As [`connect`](Self::connect): [`DlqError::Io`] when no connection can be had from the
    /// pool or the migration fails.
    ///
    /// ```no_run
    /// use retry_postgres::PgDeadLetters;
    /// use retry_postgres::PgStore;
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
        Ok(PgDeadLetters::with_db(db))
    }

    fn with_db(db: Db) -> Self {
        let writer = Writer::spawn(db.clone());
        PgDeadLetters { db, writer }
    }

    /// The store's connection pool, to share with the application.
    ///
    /// ```no_run
    /// use retry_postgres::PgDeadLetters;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let letters = PgDeadLetters::connect("postgres://app@localhost/payments").await?;
    /// let client = letters.pool().get().await?;
    /// let row = client
    ///     .query_one(
    ///         "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL AND class = 'data'",
    ///         &[],
    ///     )
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
    /// use retry_postgres::PgDeadLetters;
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
}

impl DeadLetterSink for PgDeadLetters {
    /// Hands `letter` to the store's writer and returns once the commit holding it is done
    /// (group commit: see [`PgDeadLetters`]). A `msg_id` parked already is merged
    /// ([`DeadLetter::absorb`]), never overwritten.
    ///
    /// # Errors
    /// [`DlqError::Corrupt`] when the stored letter it merges into cannot be read, and
    /// [`DlqError::Serialize`] when a text (or a string of the original) holds a NUL or the
    /// original nests deeper than
    /// [`MAX_ORIGINAL_DEPTH`](retry_core::dlq::MAX_ORIGINAL_DEPTH) (the server is not asked);
    /// [`DlqError::Io`] naming the server when it cannot be reached or fails, for this letter
    /// and every other written with it.
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        self.writer.park(&self.db.server, letter).await
    }
}

impl DeadLetterStore for PgDeadLetters {
    async fn page(&self, page: &Page) -> Result<Vec<DeadLetter>, DlqError> {
        queries::page(&self.db, page).await
    }

    /// One statement: `count(*) FILTER (..)` of each kind and the oldest pending letter by the
    /// order index. `leased` counts leases live by the database's clock.
    async fn stats(&self) -> Result<Stats, DlqError> {
        queries::stats(&self.db).await
    }

    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        queries::get(&self.db, msg_id).await
    }

    /// One `UPDATE .. RETURNING`; the lease ends at the database's `now()` plus `ttl` (at most
    /// 100 years).
    async fn lease(
        &self,
        msg_id: &str,
        run_id: &str,
        ttl: Duration,
    ) -> Result<Option<DeadLetter>, DlqError> {
        queries::lease(&self.db, msg_id, run_id, ttl).await
    }

    async fn release(&self, msg_id: &str, run_id: &str) -> Result<bool, DlqError> {
        queries::release(&self.db, msg_id, run_id).await
    }

    /// # Errors
    /// [`DlqError::Serialize`] when a text of the resolution holds a NUL (PostgreSQL text
    /// cannot); [`DlqError::Io`] naming the server when it cannot be reached or fails.
    async fn resolve(&self, msg_id: &str, resolution: &Resolution) -> Result<bool, DlqError> {
        queries::resolve(&self.db, msg_id, resolution).await
    }

    async fn put_back(
        &self,
        msg_id: &str,
        run_id: &str,
        failure: &Failure,
    ) -> Result<bool, DlqError> {
        queries::put_back(&self.db, msg_id, run_id, failure).await
    }

    /// Deletes in batches of 5000 rows, each its own statement.
    async fn purge_resolved(&self, before: SystemTime) -> Result<u64, DlqError> {
        queries::purge_resolved(&self.db, before).await
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), DlqError> {
        queries::audit(&self.db, entry).await
    }

    async fn audit_rows(&self, run_id: Option<&str>) -> Result<Vec<AuditEntry>, DlqError> {
        queries::audit_rows(&self.db, run_id).await
    }

    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        queries::record_redrive(&self.db, record).await
    }

    /// In the order they started (ties: the order they were recorded).
    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        queries::redrives(&self.db).await
    }
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
        // The message says which store; its sources, what is wrong.
        let message = retry_core::error_chain(&error).to_string();
        assert!(
            message.contains("invalid PostgreSQL connection string"),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
    }
}
