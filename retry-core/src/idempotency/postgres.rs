//! `PgStore`: the idempotency store for many service instances sharing one PostgreSQL database.
//!
//! Design notes (the why of each choice):
//! - The table and its semantics are `SqliteStore`'s (feature `sqlite`):
//!   the same columns, the same `format_utc` timestamps, the same statements (with `$n`
//!   placeholders), and exactly [`MemoryStore`](super::MemoryStore)'s decisions.
//! - A key that is done (or kept failed) is final, so a claim first reads the row with one plain
//!   `SELECT` by primary key in autocommit (no transaction, no row lock: under READ COMMITTED it
//!   sees the last committed row) and answers such a row at once, `KeyReused` included. Through
//!   the write path a duplicate cost four round trips and queued on the row lock behind every
//!   other duplicate of its key: replay ran at 0.2-0.3x a primary-key `SELECT` (BENCHMARKS.md).
//!   A row whose retention has run out is left to the write path, whatever its status.
//! - A key with no row is claimed by `INSERT .. ON CONFLICT (msg_id) DO NOTHING` under the
//!   primary key, alone, in autocommit: one statement is atomic on its own, and a transaction
//!   around it cost two more round trips. An insert that changes nothing (another instance
//!   inserted the key since the read) goes on like any key that has a row.
//! - Any other key (in progress, released, past its retention) goes on to the claim proper, one
//!   short transaction: the same `INSERT`, never a check-then-insert. If the row was there,
//!   `SELECT .. FOR UPDATE` locks it and the decision (reclaim, take over, `InProgress`, `Done`,
//!   ...) is taken and written in the same transaction, so two instances can never both win a
//!   key. Nothing else is locked: claims of other keys never wait.
//! - The clock is read again once the row is locked, so a claim that waited for another
//!   transaction decides at the time it decides, not the time it started waiting.
//! - `complete`, `release` and `mark_failed` are one autocommit `UPDATE` each, guarded by the
//!   claim's token and `status = 'in_progress'`: zero rows is [`StoreError::Fenced`].
//! - Timestamps are [`format_utc`] text, compared as text: the timestamp columns are
//!   `COLLATE "C"` so the comparison is byte order (time order) whatever the database's default
//!   collation, and the `created_at` index serves it.
//! - Statements are prepared once per connection (`prepare_cached`) and only ever get values
//!   through bound parameters.
//! - Connections come from a deadpool-postgres pool (default 16). Waiting for a free
//!   connection, and opening one, are bounded (5 s by default for pools made by
//!   [`PgStore::connect`]); after that the operation fails with [`StoreError::Unavailable`]
//!   naming the server, and the body does not run (fail closed).
//! - The migration runs under `pg_advisory_xact_lock`, so instances starting together cannot
//!   race on the catalog (`CREATE TABLE IF NOT EXISTS` alone can fail with a duplicate-key error
//!   when two sessions run it at once); a schema already at this version is left alone, so the
//!   service's role needs no `CREATE` privilege once the table exists.
//! - Transactional mode ([`PgTransaction`]): `begin` takes a pooled connection and runs `BEGIN`.
//!   A transaction that ends any other way than a successful `COMMIT` or `ROLLBACK` through the
//!   store (dropped, cancelled, failed) never goes back to the pool: its connection is detached
//!   and closed, and the server rolls back.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::{GenericClient, Object, Pool};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, Limits, StoreError, TransactionalStore,
};
use crate::sql::postgres::{self as sql, Db, Schema};
use crate::time::{Clock, SystemClock, format_utc, later, parse_utc};

/// The version of the `inbox_log` layout this code writes, kept in `retry_core_schema`.
const SCHEMA_VERSION: i32 = 1;

/// Rows deleted per purge statement: each batch commits on its own, so a purge of millions of
/// rows never becomes one long transaction. Every matching row is deleted; the batch size only
/// decides how many statements that takes.
const PURGE_BATCH: i64 = 5_000;

/// How often a claim inserts again when the row that refused its insert was purged before it
/// could be locked (a purge racing a resend of a long-expired key).
const CLAIM_ATTEMPTS: usize = 3;

/// The table, created after the shared `retry_core_schema` (a schema table of our own rather
/// than the application's migration tool's: the same one the SQLite store keeps).
const TABLES: &str = "CREATE TABLE IF NOT EXISTS inbox_log (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('in_progress', 'done', 'failed', 'released')),
    response TEXT,
    created_at TEXT COLLATE \"C\" NOT NULL,
    fingerprint TEXT,
    token BIGINT NOT NULL,
    lease_until TEXT COLLATE \"C\" NOT NULL,
    expires_at TEXT COLLATE \"C\" NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_log_created_at ON inbox_log (created_at);
";

const TABLES_EXIST: &str = "SELECT to_regclass('retry_core_schema') IS NOT NULL, \
     to_regclass('inbox_log') IS NOT NULL";
const SELECT_VERSION: &str = "SELECT version FROM retry_core_schema WHERE component = 'inbox_log'";
const RECORD_VERSION: &str = "INSERT INTO retry_core_schema (component, version) VALUES ('inbox_log', $1) \
     ON CONFLICT (component) DO NOTHING";

const SCHEMA: Schema = Schema {
    component: "inbox_log",
    version: SCHEMA_VERSION,
    tables: TABLES,
    tables_exist: TABLES_EXIST,
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};

const INSERT_CLAIM: &str = "INSERT INTO inbox_log \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES ($1, $2, 'in_progress', NULL, $3, $4, 1, $5, $6) \
     ON CONFLICT (msg_id) DO NOTHING";
// The same columns in both reads, so that one decoder (`Stored::decode`) serves both.
const READ_ROW: &str = "SELECT status, response, fingerprint, token, lease_until, expires_at \
     FROM inbox_log WHERE msg_id = $1";
const LOCK_ROW: &str = "SELECT status, response, fingerprint, token, lease_until, expires_at \
     FROM inbox_log WHERE msg_id = $1 FOR UPDATE";
const TAKE_OVER: &str = "UPDATE inbox_log SET token = token + 1, lease_until = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress'";
const COMPLETE: &str = "UPDATE inbox_log SET status = 'done', response = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress'";
// A released row stays (until purged) so its token keeps growing: a holder fenced before the
// release can never complete the next claim of the same key (no ABA).
const RELEASE: &str = "UPDATE inbox_log SET status = 'released' \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
const RECLAIM: &str = "UPDATE inbox_log SET status = 'in_progress', token = token + 1, \
     biz_key = $1, created_at = $2, fingerprint = $3, lease_until = $4, expires_at = $5 \
     WHERE msg_id = $6 AND token = $7 AND status = 'released'";
const RENEW: &str = "UPDATE inbox_log SET lease_until = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress'";
const MARK_FAILED: &str = "UPDATE inbox_log SET status = 'failed', response = $3 \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
// The conditions are repeated outside the sub-select on purpose: under READ COMMITTED a row
// updated meanwhile (a released key claimed again) is re-checked against the outer conditions
// only, and must then be kept.
const PURGE: &str = "DELETE FROM inbox_log WHERE msg_id IN \
     (SELECT msg_id FROM inbox_log WHERE created_at < $1 AND expires_at <= $2 LIMIT $3) \
     AND created_at < $1 AND expires_at <= $2";

// Transactional mode. `BEGIN` and the transaction's id in one round trip; the `done` update is
// guarded by that id as well, so it can only ever commit inside the transaction `begin` opened
// (not in autocommit, nor in another transaction, should the handler's SQL have ended it).
const BEGIN: &str = "BEGIN; SELECT txid_current()::text";
const COMMIT_DONE: &str = "UPDATE inbox_log SET status = 'done', response = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress' AND txid_current() = $4";
const SAME_TRANSACTION: &str = "SELECT txid_current() = $1";

/// Keeps claims and responses in the table `inbox_log` of one PostgreSQL database, for any
/// number of service instances at once.
///
/// - A duplicate of a key that is done (or kept failed) is answered from one plain primary-key
///   `SELECT`, without a transaction or a lock; a new key by one `INSERT .. ON CONFLICT
///   (msg_id) DO NOTHING` under the primary key, in autocommit. Every other claim is one short
///   transaction: the same `INSERT` and, if the key was there, `SELECT .. FOR UPDATE` and the
///   decision, in the same transaction. `complete`, `release` and `mark_failed` are one
///   statement each, guarded by the claim's fencing token.
/// - Timestamps (from the store's [`Clock`]) are fixed-width UTC text with microsecond
///   precision, exactly as `SqliteStore` writes them.
/// - Connections come from a [deadpool-postgres pool](deadpool_postgres::Pool), 16 by default.
///   An operation waits at most 5 s for a free connection, and opening one at most 5 s; after
///   that it fails with [`StoreError::Unavailable`] naming the server (`host:port` and database,
///   never the password).
/// - The pool made by [`connect`](Self::connect) uses no TLS; for TLS, build a pool with your TLS
///   connector and pass it to [`from_pool`](Self::from_pool).
/// - An `#[idempotent]` call waits at most
///   [`operation_timeout`](crate::idempotency::IdempotencyStore::operation_timeout) (10 s) for
///   each store operation, then fails closed; to have the server itself give up sooner (row
///   locks, a stuck disk) and free its connection, add a `statement_timeout` to the URL:
///   `?options=-c%20statement_timeout%3D5000`.
/// - The store belongs to the Tokio runtime it was made in (its connections run as tasks
///   there).
///
/// The operations have exactly [`MemoryStore`](super::MemoryStore)'s semantics. One thing the
/// memory store cannot show: an operation whose future is dropped half-way is rolled back, or,
/// if its `COMMIT` was already sent, takes effect (a claim made that way is freed by its lease,
/// as after a crash).
///
/// ```no_run
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, PgStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PgStore::connect("postgres://app@db.internal:5432/payments").await?;
/// let request = ClaimRequest {
///     key: "s3:m-1",
///     biz_key: "m-1",
///     fingerprint: None,
///     lease: Duration::from_secs(30),
///     retention: Duration::from_secs(86_400),
/// };
/// let ClaimOutcome::Claimed(claim) = store.claim(&request).await? else { panic!() };
/// // Another instance asking now gets `InProgress`; after `complete`, the response.
/// assert_eq!(store.claim(&request).await?, ClaimOutcome::InProgress);
/// store.complete(&claim, "\"ok\"").await?;
/// assert_eq!(store.claim(&request).await?, ClaimOutcome::Done("\"ok\"".into()));
/// # Ok(())
/// # }
/// ```
pub struct PgStore {
    db: Db,
    clock: Arc<dyn Clock>,
    limits: Limits,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.db.pool.status();
        f.debug_struct("PgStore")
            .field("server", &self.db.server)
            .field("pool_size", &status.max_size)
            .field("connections", &status.size)
            .field("limits", &self.limits)
            .field("clock", &self.clock)
            .finish()
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, or
    /// the `key=value` form), with a pool of up to 16 connections and no TLS, and creates the
    /// table `inbox_log` if it is missing. Safe to call from several instances at once, and on
    /// a database where an earlier version of this store made the table.
    ///
    /// Missing settings get defaults: `connect_timeout` 5 s, `application_name` "retry-core".
    /// The store starts on the system clock with the default [`Limits`]; the `with_*` methods
    /// change that. Must run inside a Tokio runtime.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL is invalid, the server cannot be reached or
    /// refuses the login, the migration fails (no permission to create the table), or the
    /// table was written by a newer version of this store. The message names the server, never
    /// the password.
    ///
    /// ```no_run
    /// use retry_core::idempotency::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::idempotency::StoreError> {
    /// let store = PgStore::connect("postgres://app:secret@db.internal:5432/payments").await?;
    /// // Connecting again is harmless: the table is created only once.
    /// let again = PgStore::connect("host=db.internal user=app password=secret dbname=payments").await?;
    ///
    /// let error = PgStore::connect("postgres://app:secret@127.0.0.1:1/payments").await.unwrap_err();
    /// assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
    /// assert!(!error.to_string().contains("secret"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let db = Db::connect(url, &SCHEMA)
            .await
            .map_err(StoreError::Unavailable)?;
        Ok(PgStore::with_db(db))
    }

    /// Uses `pool` (for TLS, other pool settings, or a pool the application shares), and
    /// creates the table `inbox_log` if it is missing, like [`connect`](Self::connect). The
    /// pool's own timeouts apply; error messages name the server as it reports its address.
    ///
    /// # Errors
    /// As [`connect`](Self::connect): [`StoreError::Unavailable`] when no connection can be
    /// had from the pool or the migration fails.
    ///
    /// ```no_run
    /// use deadpool_postgres::{Manager, Pool};
    /// use retry_core::idempotency::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config: tokio_postgres::Config = "postgres://app@db.internal/payments".parse()?;
    /// let pool = Pool::builder(Manager::new(config, tokio_postgres::NoTls))
    ///     .max_size(32)
    ///     .build()?;
    /// let store = PgStore::from_pool(pool.clone()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_pool(pool: Pool) -> Result<Self, StoreError> {
        let db = Db::from_pool(pool, "PgStore", &SCHEMA)
            .await
            .map_err(StoreError::Unavailable)?;
        Ok(PgStore::with_db(db))
    }

    fn with_db(db: Db) -> Self {
        PgStore {
            db,
            clock: Arc::new(SystemClock),
            limits: Limits::default(),
        }
    }

    /// A failed statement (or a lost connection): names the server.
    fn error(&self, e: tokio_postgres::Error) -> StoreError {
        StoreError::Unavailable(self.db.error(e))
    }

    /// Reads time from `clock` instead of the system clock (for tests of leases and retention).
    /// Every instance sharing a database should read the same time: the lease check compares
    /// one instance's clock with the `lease_until` another one wrote.
    ///
    /// ```no_run
    /// use retry_core::idempotency::PgStore;
    /// use retry_core::time::ManualClock;
    /// use std::sync::Arc;
    /// use std::time::UNIX_EPOCH;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::idempotency::StoreError> {
    /// let clock = Arc::new(ManualClock::new(UNIX_EPOCH));
    /// let store = PgStore::connect("postgres://app@localhost/test").await?.with_clock(clock.clone());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the size limits for keys and stored responses, checked before the store is touched.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{IdempotencyStore, Limits, PgStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::idempotency::StoreError> {
    /// let limits = Limits { max_key_bytes: 128, max_response_bytes: 4096 };
    /// let store = PgStore::connect("postgres://app@localhost/test").await?.with_limits(limits);
    /// assert_eq!(store.limits(), limits);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The most connections the store's pool holds (default 16, at least 1); a transaction of
    /// transactional mode holds one until it ends. Resizes the pool in place: a pool given to
    /// [`from_pool`](Self::from_pool) is resized for everyone sharing it. Idle connections
    /// beyond the new size are closed.
    ///
    /// ```no_run
    /// use retry_core::idempotency::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::idempotency::StoreError> {
    /// let store = PgStore::connect("postgres://app@localhost/test").await?.with_pool_size(4);
    /// assert_eq!(store.pool().status().max_size, 4);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_pool_size(self, size: usize) -> Self {
        self.db.pool.resize(size.max(1));
        self
    }

    /// The store's connection pool, to share with the application (its connections are plain
    /// tokio-postgres clients).
    ///
    /// ```no_run
    /// use retry_core::idempotency::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/test").await?;
    /// let client = store.pool().get().await?;
    /// let rows = client.query("SELECT count(*) FROM inbox_log", &[]).await?;
    /// let count: i64 = rows[0].get(0);
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
    /// use retry_core::idempotency::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::idempotency::StoreError> {
    /// let store = PgStore::connect("postgres://app:secret@127.0.0.1:5432/payments").await?;
    /// assert_eq!(store.server(), "127.0.0.1:5432 (database payments)");
    /// # Ok(())
    /// # }
    /// ```
    pub fn server(&self) -> &str {
        &self.db.server
    }

    /// Purges rows older than `age` (whose own retention has passed too) every `every`, off the
    /// request path, starting now. Errors are logged with `tracing` and the next round tries
    /// again; the task never panics. It holds the store only weakly: it ends by itself at the
    /// first round after every other `Arc` to the store is dropped, or when the handle is
    /// aborted. An `every` of less than a second counts as one second. Several instances may
    /// each run one: a row is deleted once, whoever gets there first.
    ///
    /// # Panics
    /// Outside a Tokio runtime (like `tokio::spawn`).
    ///
    /// ```no_run
    /// use retry_core::idempotency::PgStore;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(PgStore::connect("postgres://app@localhost/test").await?);
    /// let purger = store.spawn_purger(Duration::from_secs(30 * 86_400), Duration::from_secs(3600));
    /// // ... serve requests with `&*store` ...
    /// purger.abort();
    /// # Ok(())
    /// # }
    /// ```
    pub fn spawn_purger(
        self: &Arc<Self>,
        age: Duration,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        super::purge::spawn_purger(self, age, every, self.db.server.to_string())
    }
}

impl IdempotencyStore for PgStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let mut client = self.db.get().await.map_err(StoreError::Unavailable)?;
        claim_in(&mut client, &*self.clock, request)
            .await
            .map_err(|e| self.db.fail(e, StoreError::Unavailable))
    }

    async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        guarded(&self.db, COMPLETE, &[&response, &claim.key, &token]).await
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        guarded(&self.db, RELEASE, &[&claim.key, &token]).await
    }

    async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        guarded(&self.db, MARK_FAILED, &[&claim.key, &token, &failure]).await
    }

    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        let lease_until = format_utc(later(self.clock.now(), lease));
        guarded(&self.db, RENEW, &[&lease_until, &claim.key, &token]).await
    }

    /// Starts the release as a Tokio task when called inside a runtime; returns whether it was
    /// started (outside a runtime nothing happens and the lease frees the claim). The outcome
    /// is logged: a claim taken over meanwhile is left alone.
    fn abandon(&self, claim: Claim) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let Ok(token) = i64::try_from(claim.token) else {
            return false;
        };
        let db = self.db.clone();
        let key = claim.key;
        runtime.spawn(async move {
            match guarded(&db, RELEASE, &[&key, &token]).await {
                Ok(()) => {
                    tracing::debug!(server = %db.server, %key, token, "released an abandoned claim");
                }
                Err(StoreError::Fenced) => {
                    tracing::debug!(server = %db.server, token, "abandoned claim was already taken over");
                }
                Err(e) => {
                    tracing::warn!(server = %db.server, token, error = %e, "could not release an abandoned claim; its lease will free it");
                }
            }
        });
        true
    }

    async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
        let client = self.db.get().await.map_err(StoreError::Unavailable)?;
        purge_in(&client, &*self.clock, age)
            .await
            .map_err(|e| self.db.fail(e, StoreError::Unavailable))
    }

    fn limits(&self) -> Limits {
        self.limits
    }
}

// ---- transactional mode ----

/// The handler's transaction in transactional mode: one pooled connection of a [`PgStore`]
/// inside `BEGIN`. The handler's own SQL runs on [`client`](Self::client), and
/// [`commit_done`](TransactionalStore::commit_done) writes the response and `done` in the same
/// transaction and commits, so the handler's writes and the stored response commit together or
/// not at all.
///
/// - The claim's row is not locked while the handler runs (only by `commit_done`'s update, just
///   before the `COMMIT`): a duplicate arriving meanwhile gets `InProgress` at once, and one
///   arriving after the lease ran out takes the key over. `commit_done` then finds another token,
///   rolls everything back (the handler's writes included) and returns [`StoreError::Fenced`].
/// - The handler's SQL must not end the transaction (no `COMMIT`, `ROLLBACK` or `BEGIN` of its
///   own; savepoints are fine). If it does, `commit_done` notices (the `done` update is also
///   guarded by the transaction's id), writes nothing and fails with
///   [`StoreError::Unavailable`]; whatever the handler committed itself stays committed.
/// - After a failed statement PostgreSQL refuses everything until the transaction ends: roll
///   back (or use a savepoint); `commit_done` on such a transaction fails with
///   [`StoreError::Unavailable`] and rolls back.
/// - **Dropped without `commit_done` or `rollback`** (a crash of the handler, a dropped future,
///   a panic): the connection is detached from the pool
///   ([`Object::take`](deadpool_postgres::Object::take)) and closed, and the server rolls the
///   transaction back when it sees the connection go; a connection with an open transaction
///   never goes back to the pool. The same happens when `commit_done` or `rollback` fails half
///   way. A dropped transaction does not release the claim; that is the claim's holder's
///   business (the `#[idempotent]` flow releases it, otherwise its lease frees it).
/// - It holds one of the store's [connections](PgStore::with_pool_size) until it ends.
///
/// The client is tokio-postgres 0.7's: depend on the same version to name its types.
///
/// ```no_run
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, PgStore, TransactionalStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PgStore::connect("postgres://app@localhost/payments").await?;
/// let request = ClaimRequest {
///     key: "deposit:7",
///     biz_key: "7",
///     fingerprint: None,
///     lease: Duration::from_secs(30),
///     retention: Duration::from_secs(86_400),
/// };
/// let ClaimOutcome::Claimed(claim) = store.claim(&request).await? else { panic!() };
/// let tx = store.begin().await?;
/// tx.client()
///     .execute("UPDATE balances SET amount = amount + $1 WHERE account = $2", &[&10_i64, &"a"])
///     .await?;
/// store.commit_done(tx, &claim, "{\"receipt\":7}").await?;
/// // The deposit and its response committed together; a duplicate gets the response.
/// assert_eq!(store.claim(&request).await?, ClaimOutcome::Done("{\"receipt\":7}".into()));
/// # Ok(())
/// # }
/// ```
pub struct PgTransaction {
    /// `Some` until the transaction is consumed; taken out only to go back to the pool after a
    /// successful `COMMIT` or `ROLLBACK`. Whatever is still here on drop is detached.
    conn: Option<Object>,
    /// What `txid_current()` said right after `BEGIN`.
    txid: i64,
    server: Arc<str>,
}

impl fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTransaction")
            .field("server", &self.server)
            .field("txid", &self.txid)
            .finish()
    }
}

impl PgTransaction {
    /// The connection the transaction runs on, for the handler's own SQL. Everything run on it
    /// commits with the response in [`commit_done`](TransactionalStore::commit_done), or not at
    /// all. Do not end the transaction on it (see [`PgTransaction`]).
    ///
    /// ```no_run
    /// use retry_core::idempotency::{PgStore, TransactionalStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// let row = tx
    ///     .client()
    ///     .query_one("INSERT INTO orders (item) VALUES ($1) RETURNING id", &[&"book"])
    ///     .await?;
    /// let id: i64 = row.get(0);
    /// // Later statements see the earlier ones: it is one transaction.
    /// let row = tx.client().query_one("SELECT item FROM orders WHERE id = $1", &[&id]).await?;
    /// assert_eq!(row.get::<_, String>(0), "book");
    /// store.rollback(tx).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn client(&self) -> &tokio_postgres::Client {
        self.pooled()
    }

    /// Prepares `sql` on the transaction's connection, reusing the statement if this
    /// connection prepared the same text before (the pool's statement cache).
    ///
    /// # Errors
    /// The server's error, when `sql` does not prepare.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{PgStore, TransactionalStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// let add = tx.prepare_cached("UPDATE balances SET amount = amount + $1 WHERE account = $2").await?;
    /// tx.client().execute(&add, &[&5_i64, &"a"]).await?;
    /// store.rollback(tx).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prepare_cached(
        &self,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
        self.pooled().prepare_cached(sql).await
    }

    fn pooled(&self) -> &deadpool_postgres::ClientWrapper {
        // Only `commit_done` and `rollback` take the connection out, and they consume `self`.
        self.conn
            .as_ref()
            .expect("a PgTransaction keeps its connection until it is consumed")
    }

    /// Ends the transaction's use of the connection: back to the pool (the transaction is
    /// over on the server).
    fn give_back(mut self) {
        drop(self.conn.take());
    }
}

impl Drop for PgTransaction {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Never pooled again: closing it (the client's connection task is aborted when the
            // wrapper drops) makes the server roll the transaction back.
            drop(Object::take(conn));
            tracing::debug!(server = %self.server, "a transaction ended without commit or rollback; its connection was closed");
        }
    }
}

impl TransactionalStore for PgStore {
    type Transaction = PgTransaction;

    /// Takes a connection from the pool and runs `BEGIN` on it (and reads the transaction's id,
    /// in the same round trip). See [`PgTransaction`] for what handlers may do with it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when no connection frees up within the pool's wait timeout,
    /// or the server fails.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{PgStore, TransactionalStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// tx.client().execute("INSERT INTO audit (what) VALUES ($1)", &[&"begin"]).await?;
    /// drop(tx); // rolled back: the connection is closed, never pooled
    /// # Ok(())
    /// # }
    /// ```
    async fn begin(&self) -> Result<PgTransaction, StoreError> {
        let conn = self.db.get().await.map_err(StoreError::Unavailable)?;
        // Wrapped before `BEGIN` is sent, so that from here on a drop detaches the connection.
        let mut tx = PgTransaction {
            conn: Some(conn),
            txid: 0,
            server: Arc::clone(&self.db.server),
        };
        let messages = tx
            .client()
            .simple_query(BEGIN)
            .await
            .map_err(|e| self.error(e))?;
        let txid = messages.iter().find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse::<i64>().ok(),
            _ => None,
        });
        let Some(txid) = txid else {
            return Err(StoreError::Unavailable(
                format!(
                    "PostgreSQL at {}: BEGIN did not report a transaction id",
                    self.db.server
                )
                .into(),
            ));
        };
        tx.txid = txid;
        Ok(tx)
    }

    /// In `transaction`: `UPDATE inbox_log SET status = 'done', response = $1` for the claim's
    /// key, only if its token and `in_progress` still hold (and the transaction is still the one
    /// `begin` opened). One row: `COMMIT`, so the handler's writes and the response commit
    /// together. No row (the claim was taken over, or already finished): `ROLLBACK` and
    /// [`StoreError::Fenced`].
    ///
    /// If this future is dropped before it finishes, the connection is closed and the server
    /// rolls back, unless the `COMMIT` had already reached it. An error from the `COMMIT`
    /// itself (the connection lost at that moment) leaves the outcome unknown: the next claim
    /// of the key tells (`Done`, or `InProgress` until the lease runs out).
    ///
    /// # Errors
    /// [`StoreError::Fenced`] as above; [`StoreError::Unavailable`] if the transaction belongs to
    /// another store's pool, was ended by the handler's SQL, is aborted by a failed statement,
    /// or the server fails; the transaction is then rolled back.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, PgStore, StoreError, TransactionalStore};
    /// use retry_core::time::ManualClock;
    /// use std::sync::Arc;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_750_000_000)));
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?.with_clock(clock.clone());
    /// let request = ClaimRequest {
    ///     key: "m-1",
    ///     biz_key: "m-1",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(10),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let ClaimOutcome::Claimed(slow) = store.claim(&request).await? else { panic!() };
    /// let tx = store.begin().await?;
    /// tx.client().execute("INSERT INTO effects VALUES ('slow')", &[]).await?;
    /// // The slow holder's lease runs out and a duplicate takes the key over.
    /// clock.advance(Duration::from_secs(11));
    /// let ClaimOutcome::Claimed(fast) = store.claim(&request).await? else { panic!() };
    ///
    /// // The slow holder's write and response are refused together.
    /// assert!(matches!(store.commit_done(tx, &slow, "\"slow\"").await, Err(StoreError::Fenced)));
    /// let tx = store.begin().await?;
    /// tx.client().execute("INSERT INTO effects VALUES ('fast')", &[]).await?;
    /// store.commit_done(tx, &fast, "\"fast\"").await?;
    /// # Ok(())
    /// # }
    /// ```
    async fn commit_done(
        &self,
        transaction: PgTransaction,
        claim: &Claim,
        response: &str,
    ) -> Result<(), StoreError> {
        let tx = transaction;
        let same_pool = tx
            .conn
            .as_ref()
            .and_then(Object::pool)
            .is_some_and(|pool| std::ptr::eq(pool.manager(), self.db.pool.manager()));
        if !same_pool {
            // Dropped: detached and rolled back.
            return Err(StoreError::Unavailable(
                format!(
                    "the transaction given to commit_done was begun by another store (PostgreSQL at {}), not this one (PostgreSQL at {})",
                    tx.server, self.db.server
                )
                .into(),
            ));
        }
        let token = i64::try_from(claim.token).unwrap_or(i64::MAX);
        let client = tx.pooled();
        let statement = client
            .prepare_cached(COMMIT_DONE)
            .await
            .map_err(|e| self.error(e))?;
        let updated = client
            .execute(&statement, &[&response, &claim.key, &token, &tx.txid])
            .await
            .map_err(|e| self.error(e))?;
        if updated == 1 {
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| self.error(e))?;
            tx.give_back();
            return Ok(());
        }
        // Nothing was written: taken over, or the transaction is not the one `begin` opened.
        let statement = client
            .prepare_cached(SAME_TRANSACTION)
            .await
            .map_err(|e| self.error(e))?;
        let same: bool = client
            .query_one(&statement, &[&tx.txid])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| self.error(e))?;
        match client.batch_execute("ROLLBACK").await {
            Ok(()) => tx.give_back(),
            // Nothing of this transaction can commit any more: dropped, its connection closes
            // and the server rolls back. The answer below stands.
            Err(e) => {
                tracing::debug!(server = %self.db.server, error = %e, "ROLLBACK after a refused commit_done failed; closing the connection");
                drop(tx);
            }
        }
        if same {
            Err(StoreError::Fenced)
        } else {
            Err(StoreError::Unavailable(
                format!(
                    "PostgreSQL at {}: the handler's SQL ended the transaction begun for it (a COMMIT or ROLLBACK of its own), so the response was not stored with its writes",
                    self.db.server
                )
                .into(),
            ))
        }
    }

    /// Rolls the handler's transaction back and returns its connection to the pool.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server fails; the connection is then closed (and
    /// the server rolls back anyway).
    ///
    /// ```no_run
    /// use retry_core::idempotency::{PgStore, TransactionalStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// tx.client().execute("DELETE FROM orders", &[]).await?;
    /// store.rollback(tx).await?; // the orders are all still there
    /// # Ok(())
    /// # }
    /// ```
    async fn rollback(&self, transaction: PgTransaction) -> Result<(), StoreError> {
        let tx = transaction;
        tx.client()
            .batch_execute("ROLLBACK")
            .await
            .map_err(|e| self.error(e))?;
        tx.give_back();
        Ok(())
    }
}

// ---- the statements ----

/// Why an operation failed before its errors get the server's name.
type Fail = sql::Fail<StoreError>;

fn corrupt(key: &str, what: impl fmt::Display) -> Fail {
    Fail::Store(StoreError::Corrupt(format!(
        "inbox_log row `{key}`: {what}"
    )))
}

/// One statement guarded by the claim's token, in autocommit: no row touched means the claim
/// was taken over (or finished): [`StoreError::Fenced`].
async fn guarded(db: &Db, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<(), StoreError> {
    let client = db.get().await.map_err(StoreError::Unavailable)?;
    let statement = client
        .prepare_cached(sql)
        .await
        .map_err(|e| StoreError::Unavailable(db.error(e)))?;
    let changed = client
        .execute(&statement, params)
        .await
        .map_err(|e| StoreError::Unavailable(db.error(e)))?;
    if changed == 0 {
        Err(StoreError::Fenced)
    } else {
        Ok(())
    }
}

/// The claim: insert under the primary key, or lock and decide about the row that is there, in
/// one transaction. Mirrors `MemoryStore::claim_now` line by line.
///
/// Two shortcuts, each one round trip, before that transaction (four round trips):
/// - a key that is done (or kept failed) is final: a duplicate is answered from a plain read,
///   which neither opens a transaction nor waits for a row lock;
/// - a key that read no row is claimed by the `INSERT` alone, in autocommit: one statement
///   under the primary key is as atomic as the transaction around it was. If another instance
///   inserted the key meanwhile, the insert changes nothing and the transaction decides, so
///   two concurrent first calls still cannot both win.
async fn claim_in(
    client: &mut Object,
    clock: &dyn Clock,
    request: &ClaimRequest<'_>,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let read = client.prepare_cached(READ_ROW).await?;
    match client.query_opt(&read, &[&key]).await? {
        Some(row) => {
            let row = Stored::decode(key, &row)?;
            if row.retained(&format_utc(clock.now()))
                && let Some(outcome) = settled(&row, request)?
            {
                return Ok(outcome);
            }
        }
        None => {
            // Prepared here, not before the read: a replay never needs it.
            let insert = client.prepare_cached(INSERT_CLAIM).await?;
            if insert_claim(&*client, &insert, clock, request).await? == 1 {
                return Ok(ClaimOutcome::Claimed(Claim::first(key)));
            }
        }
    }
    let tx = client.transaction().await?;
    let insert = tx.prepare_cached(INSERT_CLAIM).await?;
    let select = tx.prepare_cached(LOCK_ROW).await?;
    for _ in 0..CLAIM_ATTEMPTS {
        if insert_claim(&tx, &insert, clock, request).await? == 1 {
            tx.commit().await?;
            return Ok(ClaimOutcome::Claimed(Claim::first(key)));
        }
        // Locked until the commit: no other instance decides about this key meanwhile.
        if let Some(row) = tx.query_opt(&select, &[&key]).await? {
            let row = Stored::decode(key, &row)?;
            let outcome = decide(&tx, request, &row, clock.now()).await?;
            tx.commit().await?;
            return Ok(outcome);
        }
        // Purged between the insert and the lock: insert again.
    }
    Err(Fail::Store(StoreError::Unavailable(
        format!(
            "inbox_log row `{key}` refused the claim's insert and vanished before it could be read, {CLAIM_ATTEMPTS} times in a row"
        )
        .into(),
    )))
}

/// Runs [`INSERT_CLAIM`] for `request` at the clock's now: `1` when it inserted the claim, `0`
/// when the key was there.
async fn insert_claim(
    client: &impl GenericClient,
    insert: &Statement,
    clock: &dyn Clock,
    request: &ClaimRequest<'_>,
) -> Result<u64, Fail> {
    let now = clock.now();
    let inserted = client
        .execute(
            insert,
            &[
                &request.key,
                &request.biz_key,
                &format_utc(now),
                &request.fingerprint,
                &format_utc(later(now, request.lease)),
                &format_utc(later(now, request.retention)),
            ],
        )
        .await?;
    Ok(inserted)
}

/// A row of `inbox_log` as [`READ_ROW`] and [`LOCK_ROW`] return it, its columns checked.
struct Stored {
    status: String,
    response: Option<String>,
    fingerprint: Option<String>,
    token: i64,
    /// Checked only where it counts: an `in_progress` row's lease.
    lease_until: Option<String>,
    expires_at: Option<String>,
}

impl Stored {
    fn decode(key: &str, row: &Row) -> Result<Self, Fail> {
        let status: String = row
            .try_get(0)
            .map_err(|e| corrupt(key, format_args!("bad status ({e})")))?;
        let response: Option<String> = row
            .try_get(1)
            .map_err(|e| corrupt(key, format_args!("bad response ({e})")))?;
        let fingerprint: Option<String> = row
            .try_get(2)
            .map_err(|e| corrupt(key, format_args!("bad fingerprint ({e})")))?;
        let token: i64 = row
            .try_get(3)
            .map_err(|e| corrupt(key, format_args!("bad token ({e})")))?;
        if token < 1 {
            return Err(corrupt(key, format_args!("bad token {token}")));
        }
        Ok(Stored {
            status,
            response,
            fingerprint,
            token,
            lease_until: row.try_get(4).ok(),
            expires_at: row.try_get(5).ok(),
        })
    }

    /// Whether the row's retention still runs at `now_text` (a `format_utc` time). Only the
    /// read-first answer asks: it is a shortcut for rows in their retention, and a row past it
    /// (or with an unreadable `expires_at`) belongs to the purge, so whatever the locked
    /// decision makes of it stands (today the same answer, a round trip or three later).
    fn retained(&self, now_text: &str) -> bool {
        self.expires_at
            .as_deref()
            .is_some_and(|expires| expires > now_text && parse_utc(expires).is_some())
    }
}

/// The answer for a key whose call is over (done, or kept failed); `None` for any other row.
/// Final whoever asks, so the read-first path and the locked decision share it.
fn settled(row: &Stored, request: &ClaimRequest<'_>) -> Result<Option<ClaimOutcome>, Fail> {
    if row.status != "done" && row.status != "failed" {
        return Ok(None);
    }
    if request.fingerprint.is_some() && row.fingerprint.as_deref() != request.fingerprint {
        return Ok(Some(ClaimOutcome::KeyReused));
    }
    match (row.status.as_str(), &row.response) {
        ("done", Some(response)) => Ok(Some(ClaimOutcome::Done(response.clone()))),
        ("done", None) => Err(corrupt(request.key, "done without a text response (NULL)")),
        (_, failure) => Ok(Some(ClaimOutcome::Failed(
            failure.clone().unwrap_or_default(),
        ))),
    }
}

/// What the locked row found at `request.key` means, taking it over if its lease has ended.
async fn decide(
    tx: &deadpool_postgres::Transaction<'_>,
    request: &ClaimRequest<'_>,
    row: &Stored,
    now: SystemTime,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let token = row.token;
    let now_text = format_utc(now);
    if row.status == "released" {
        // Nothing was kept for this key: claim it afresh, whatever its payload.
        let next = token
            .checked_add(1)
            .ok_or_else(|| corrupt(key, "token cannot grow any more"))?;
        let reclaim = tx.prepare_cached(RECLAIM).await?;
        let reclaimed = tx
            .execute(
                &reclaim,
                &[
                    &request.biz_key,
                    &now_text,
                    &request.fingerprint,
                    &format_utc(later(now, request.lease)),
                    &format_utc(later(now, request.retention)),
                    &key,
                    &token,
                ],
            )
            .await?;
        if reclaimed != 1 {
            return Err(corrupt(key, "the released row could not be claimed again"));
        }
        let token = u64::try_from(next).map_err(|_| corrupt(key, "bad token"))?;
        return Ok(ClaimOutcome::Claimed(Claim {
            key: key.to_owned(),
            token,
        }));
    }
    if let Some(outcome) = settled(row, request)? {
        return Ok(outcome);
    }
    if request.fingerprint.is_some() && row.fingerprint.as_deref() != request.fingerprint {
        return Ok(ClaimOutcome::KeyReused);
    }
    match row.status.as_str() {
        "in_progress" => {
            let lease_until = match &row.lease_until {
                Some(text) if parse_utc(text).is_some() => text.as_str(),
                other => return Err(corrupt(key, format_args!("bad lease_until {other:?}"))),
            };
            // Both sides are `format_utc` text: comparing them is comparing the times.
            if lease_until > now_text.as_str() {
                return Ok(ClaimOutcome::InProgress);
            }
            let Some(next) = token.checked_add(1) else {
                return Err(corrupt(key, "token cannot grow any more"));
            };
            let take_over = tx.prepare_cached(TAKE_OVER).await?;
            let taken = tx
                .execute(
                    &take_over,
                    &[&format_utc(later(now, request.lease)), &key, &token],
                )
                .await?;
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

/// Deletes by age only, in batches of [`PURGE_BATCH`] rows, each its own (autocommit)
/// statement.
async fn purge_in(client: &Object, clock: &dyn Clock, age: Duration) -> Result<u64, Fail> {
    let now = clock.now();
    let cutoff = format_utc(now.checked_sub(age).unwrap_or(UNIX_EPOCH));
    let now = format_utc(now);
    let purge = client.prepare_cached(PURGE).await?;
    let mut purged = 0u64;
    loop {
        let deleted = client
            .execute(&purge, &[&cutoff, &now, &PURGE_BATCH])
            .await?;
        purged += deleted;
        if deleted < PURGE_BATCH.unsigned_abs() {
            return Ok(purged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_connection_string_is_unavailable_and_does_not_echo_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let error = runtime
            .block_on(PgStore::connect("postgres://app:s3cret@host:notaport/db"))
            .unwrap_err();
        assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("invalid PostgreSQL connection string"),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
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
