//! `PgStore`: the idempotency store for many service instances sharing one PostgreSQL database.
//!
//! Design notes (the why of each choice):
//! - The table and its semantics are `SqliteStore`'s (feature `sqlite`):
//!   the same columns (the times `timestamptz` here, `format_utc` text there), and exactly
//!   [`MemoryStore`](retry_core::idempotency::MemoryStore)'s decisions. The statements are SQLite's, except that
//!   here the times they write and compare are computed in SQL, on the server's clock.
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
//! - Time is the database's: every claim, takeover, renewal and purge decides at the server's
//!   `clock_timestamp()` (UTC), computed by the statement that needs it, in the same round
//!   trip (no extra query for "now"). Instances whose own clocks disagree therefore agree on
//!   whether a lease is live: a fast clock never takes over a live claim, a slow one never
//!   keeps a dead one. [`PgStore::with_clock`] (for tests) sends its time as a parameter of
//!   the same statements instead; the arithmetic stays in SQL either way.
//! - The clock is read again once the row is locked (in the outer query around the `FOR
//!   UPDATE`, whose own select list is computed before the lock is waited for), so a claim
//!   that waited for another transaction decides at the time it decides.
//! - The claim's transaction is READ COMMITTED whatever the server's default: a row lock waited
//!   for must show the row as the other transaction committed it. Serialization failures and
//!   deadlocks (`40001`, `40P01`: a server whose default isolation is SERIALIZABLE, the
//!   application's own transactions locking rows) roll the operation back whole, so the claim
//!   and every single-statement write run again, up to 3 times with a short pause.
//! - `complete`, `release` and `mark_failed` are one autocommit `UPDATE` each, guarded by the
//!   claim's token and `status = 'in_progress'`. Zero rows is [`StoreError::Fenced`], unless a
//!   second read finds the row already in the state written under the claim's own token: a
//!   retried call whose first try committed but whose answer was lost, answered `Ok`. `renew`
//!   is the same guarded `UPDATE` of `lease_until` (without that exception).
//! - A takeover counts the row's retention again from now (if that ends later), and the purge
//!   never deletes a row whose lease is live, so a row is never purged under its holder.
//! - Times are `timestamptz` (microseconds), computed and compared by the server as times and
//!   read back as `SystemTime`; the `created_at` index serves the purge. `response` is `text`:
//!   the exact text the store was given (see the schema's version 3).
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
//! - Transactional mode ([`PgTransaction`]): `begin` takes a pooled connection and runs
//!   `BEGIN ISOLATION LEVEL READ COMMITTED` (the claim's lease is renewed by another
//!   connection while the handler runs, which a REPEATABLE READ or SERIALIZABLE transaction
//!   would refuse to update after).
//!   A transaction that ends any other way than a successful `COMMIT` or `ROLLBACK` through the
//!   store (dropped, cancelled, failed) never goes back to the pool: its connection is detached
//!   and closed, and the server rolls back.
//! - A call that knows its response before it runs (`claim_answered_in_transaction`: a queue
//!   consumer's handler answers nothing) has a new key's row inserted `done` with that
//!   response, in the transaction; its commit then writes nothing more (only the check that
//!   the transaction is the one begun goes out with the `COMMIT`).
//!   The row is the transaction's until it commits, so nobody can tell it from a claim in
//!   progress, and a rollback removes it.

// `key_lock!()`: the advisory lock number of the claim whose key is `$1`, held by the
// connection of the transaction that holds the claim (`begin_for`). Hashed with a seed of our
// own, so an application hashing the same text for its own advisory locks gets another number.
macro_rules! key_lock {
    () => {
        "hashtextextended($1, 7306093102405)"
    };
}

mod claim;
mod steps;
mod transactional;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

pub use transactional::PgTransaction;

use crate::sql::{Db, Schema};
use claim::{COMPLETE, MARK_FAILED, RELEASE};
use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, Limits, StepEntry, StepWrite, StoreError,
};
use retry_core::time::Clock;

/// The version of the `inbox_log` layout this code writes, kept in `retry_core_schema`.
const SCHEMA_VERSION: i32 = 4;

/// The table, created after the shared `retry_core_schema` (a schema table of our own rather
/// than the application's migration tool's: the same one the SQLite store keeps).
///
/// `status` has no `CHECK`: PostgreSQL reads a check's stored expression back and prepares it
/// at every statement that writes the table (it keeps no prepared form across statements),
/// which cost a claim and its `done` about 20 µs of the server's time together, a sixth of
/// the store's statements in a transactional request (BENCHMARKS.md). Only this store's
/// statements write `status`, as constants, and every read rejects any other value
/// (`StoreError::Corrupt`). Tables made before keep their check, which changes nothing else
/// (`ALTER TABLE inbox_log DROP CONSTRAINT inbox_log_status_check` takes it away).
const TABLES: &str = "CREATE TABLE IF NOT EXISTS inbox_log (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL,
    response TEXT,
    created_at TEXT COLLATE \"C\" NOT NULL,
    fingerprint TEXT,
    token BIGINT NOT NULL,
    lease_until TEXT COLLATE \"C\" NOT NULL,
    expires_at TEXT COLLATE \"C\" NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_log_created_at ON inbox_log (created_at);
";

/// Version 2: a claim can be held by the handler's transaction instead of its lease
/// ([`TransactionalStore::begin_for`](retry_core::idempotency::TransactionalStore::begin_for)).
///
/// Version 3: the times are `timestamptz` (they were `format_utc` text, `COLLATE "C"` so that
/// text order was time order), so the server compares and does arithmetic on them as times and
/// the `created_at` index (rebuilt by the change of type) orders them as times. `response`
/// stays `text`: it is what the store was given, returned byte for byte (`IdempotencyStore`
/// speaks in `&str`, and the conformance suite replays a response that is not JSON, and a kept
/// failure's plain text lives in the same column), where `jsonb` would refuse what is not JSON
/// and give back its own spacing and key order. An HTTP response's bytes reach the store
/// already encoded as JSON text by `IdempotencyLayer` (base64 for a body that is not UTF-8),
/// so no column here is `bytea`.
///
/// Version 4: the step journal, `inbox_steps`
/// ([`IdempotencyStore::read_steps`](retry_core::idempotency::IdempotencyStore::read_steps)),
/// its rows deleted with their key's by the foreign key's cascade. `output` is `text` for the
/// reason `response` is.
const UPGRADES: &[&str] = &[
    "ALTER TABLE inbox_log ADD COLUMN IF NOT EXISTS in_transaction BOOLEAN NOT NULL DEFAULT false",
    "ALTER TABLE inbox_log
        ALTER COLUMN created_at TYPE timestamptz USING created_at::text::timestamptz,
        ALTER COLUMN lease_until TYPE timestamptz USING lease_until::text::timestamptz,
        ALTER COLUMN expires_at TYPE timestamptz USING expires_at::text::timestamptz",
    steps::STEPS_TABLE,
];

const TABLES_EXIST: &str = "SELECT to_regclass('retry_core_schema') IS NOT NULL, \
     to_regclass('inbox_log') IS NOT NULL";
const SELECT_VERSION: &str = "SELECT version FROM retry_core_schema WHERE component = 'inbox_log'";
const RECORD_VERSION: &str = "INSERT INTO retry_core_schema (component, version) VALUES ('inbox_log', $1) \
     ON CONFLICT (component) DO NOTHING";

const SCHEMA: Schema = Schema {
    component: "inbox_log",
    version: SCHEMA_VERSION,
    tables: TABLES,
    upgrades: UPGRADES,
    tables_exist: TABLES_EXIST,
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};

/// Keeps claims and responses in the table `inbox_log` of one PostgreSQL database, for any
/// number of service instances at once.
///
/// - A duplicate of a key that is done (or kept failed) is answered from one plain primary-key
///   `SELECT`, without a transaction or a lock; a new key by one `INSERT .. ON CONFLICT
///   (msg_id) DO NOTHING` under the primary key, in autocommit. Every other claim is one short
///   transaction: the same `INSERT` and, if the key was there, `SELECT .. FOR UPDATE` and the
///   decision, in the same transaction. `complete`, `release`, `mark_failed` and `renew` are
///   one statement each, guarded by the claim's fencing token.
/// - Leases and retention are measured on the database server's clock (`clock_timestamp()`,
///   UTC), never on an instance's own, so instances with skewed clocks agree on every lease
///   ([`with_clock`](Self::with_clock) overrides it, for tests). Times are `timestamptz`, to
///   the microsecond, as `SqliteStore` keeps them in its text.
/// - The claim's transaction is READ COMMITTED whatever the server's default; serialization
///   failures and deadlocks are tried again inside the store (3 attempts).
/// - Connections come from a [deadpool-postgres pool](deadpool_postgres::Pool), 16 by default.
///   An operation waits at most 5 s for a free connection, and opening one at most 5 s; after
///   that it fails with [`StoreError::Unavailable`] naming the server (`host:port` and database,
///   never the password).
/// - The pool made by [`connect`](Self::connect) connects over TLS when the URL asks for it, as libpq reads it: `sslmode=require` encrypts (the
///   certificate checked against `sslrootcert=FILE` when given), `verify-ca` checks the chain to
///   `sslrootcert`, `verify-full` the chain and the host name, to `sslrootcert` or the platform's
///   trust store (feature `tls`: rustls with the ring provider; without it such a URL
///   fails to connect). `prefer` (the default) and `disable` stay plain. For another TLS setup,
///   build a pool with your connector and pass it to [`from_pool`](Self::from_pool).
/// - An `#[idempotent]` call waits at most
///   [`operation_timeout`](retry_core::idempotency::IdempotencyStore::operation_timeout) (10 s) for
///   each store operation, then fails closed; to have the server itself give up sooner (row
///   locks, a stuck disk) and free its connection, add a `statement_timeout` to the URL:
///   `?options=-c%20statement_timeout%3D5000`.
/// - The store belongs to the Tokio runtime it was made in (its connections run as tasks
///   there).
///
/// The operations have exactly [`MemoryStore`](retry_core::idempotency::MemoryStore)'s semantics. One thing the
/// memory store cannot show: an operation whose future is dropped half-way is rolled back, or,
/// if its `COMMIT` was already sent, takes effect (a claim made that way is freed by its lease,
/// as after a crash).
///
/// ```no_run
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore};
/// use retry_postgres::PgStore;
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
    /// `None`: the database's clock decides (see [`PgStore::with_clock`]).
    clock: Option<Arc<dyn Clock>>,
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
            .field(
                "clock",
                match &self.clock {
                    Some(clock) => clock as &dyn fmt::Debug,
                    None => &"the database's clock_timestamp()",
                },
            )
            .finish()
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, or
    /// the `key=value` form), with a pool of up to 16 connections (over TLS when `url` says
    /// `sslmode=require`, `verify-ca` or `verify-full`: see [`PgStore`]), and creates the
    /// table `inbox_log` if it is missing. Safe to call from several instances at once, and on
    /// a database where an earlier version of this store made the table.
    ///
    /// Missing settings get defaults: `connect_timeout` 5 s, `application_name` "retry-core".
    /// The store decides on the database's clock with the default [`Limits`]; the `with_*` methods
    /// change that. Must run inside a Tokio runtime.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL is invalid, the server cannot be reached or
    /// refuses the login, the migration fails (no permission to create the table), or the
    /// table was written by a newer version of this store. The message names the server, never
    /// the password.
    ///
    /// ```no_run
    /// use retry_postgres::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), retry_core::idempotency::StoreError> {
    /// let store = PgStore::connect("postgres://app:secret@db.internal:5432/payments").await?;
    /// // Connecting again is harmless: the table is created only once.
    /// let again = PgStore::connect("host=db.internal user=app password=secret dbname=payments").await?;
    /// // Over TLS, the server's certificate checked against the CA of `sslrootcert` (feature
    /// // `tls`).
    /// let tls = PgStore::connect(
    ///     "postgres://app@db.internal/payments?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
    /// )
    /// .await?;
    ///
    /// let error = PgStore::connect("postgres://app:secret@127.0.0.1:1/payments").await.unwrap_err();
    /// // The error names the store; its sources, the server (never the password) and why.
    /// let why = retry_core::error_chain(&error).to_string();
    /// assert!(why.contains("127.0.0.1:1"), "{why}");
    /// assert!(!why.contains("secret"));
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
    /// use retry_postgres::PgStore;
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
            clock: None,
            limits: Limits::default(),
        }
    }

    /// A failed statement (or a lost connection): names the server.
    fn error(&self, e: tokio_postgres::Error) -> StoreError {
        StoreError::Unavailable(self.db.error(e))
    }

    /// Decides with `clock` instead of the database's clock: for tests of leases and
    /// retention, which move time by hand.
    ///
    /// By default no instance's own clock is read at all: every claim, takeover, renewal and
    /// purge decides at the server's `clock_timestamp()` (in UTC), computed by the statement
    /// that needs it, so instances whose clocks disagree still agree on whether a lease is
    /// live, and a fast clock never takes over a live claim. With `clock`, its time is sent
    /// with each of those statements and used instead (the arithmetic stays in SQL), in whole
    /// microseconds and within the years 1 to 9999. Every instance sharing a
    /// database must then read the same time: the lease check compares one instance's clock
    /// with the `lease_until` another one wrote.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore};
    /// use retry_postgres::PgStore;
    /// use retry_core::time::ManualClock;
    /// use std::sync::Arc;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_750_000_000)));
    /// let store = PgStore::connect("postgres://app@localhost/test").await?.with_clock(clock.clone());
    /// let request = ClaimRequest {
    ///     key: "m-1",
    ///     biz_key: "m-1",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(10),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let ClaimOutcome::Claimed(_crashed) = store.claim(&request).await? else { panic!() };
    /// clock.advance(Duration::from_secs(11)); // no waiting for the lease to run out
    /// assert!(matches!(store.claim(&request).await?, ClaimOutcome::Claimed(c) if c.token == 2));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The injected clock, if any; `None` means the database's.
    fn clock(&self) -> Option<&dyn Clock> {
        self.clock.as_deref()
    }

    /// Sets the size limits for keys and stored responses, checked before the store is touched.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{IdempotencyStore, Limits};
    /// use retry_postgres::PgStore;
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
    /// use retry_postgres::PgStore;
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
    /// use retry_postgres::PgStore;
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
    /// use retry_postgres::PgStore;
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
    /// use retry_postgres::PgStore;
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
        retry_core::idempotency::spawn_purger(self, age, every, self.db.server.to_string())
    }
}

impl IdempotencyStore for PgStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        claim::claim(&self.db, self.clock(), request).await
    }

    /// A retry whose first try committed (the row is already `done` under this claim's token)
    /// answers `Ok`, whatever response the first try stored.
    async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
        claim::settle(&self.db, COMPLETE, "done", claim, &[&response]).await
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        claim::settle(&self.db, RELEASE, "released", claim, &[]).await
    }

    async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
        claim::settle(&self.db, MARK_FAILED, "failed", claim, &[&failure]).await
    }

    /// One guarded `UPDATE`; the new `lease_until` is the server's `clock_timestamp()` (or the
    /// injected clock's time) plus `lease`.
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        claim::renew(&self.db, self.clock(), claim, lease).await
    }

    /// For a *transactional* call dropped before its commit: its transaction rolled back, so
    /// the key is released, by a Tokio task when called inside a runtime. Returns whether the
    /// release was started (outside a runtime nothing happens and the lease frees the claim).
    /// The outcome is logged: a claim taken over meanwhile is left alone.
    fn abandon(&self, claim: Claim) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let db = self.db.clone();
        runtime.spawn(async move {
            let token = claim.token;
            match claim::settle(&db, RELEASE, "released", &claim, &[]).await {
                Ok(()) => {
                    tracing::debug!(target: "retry_core::idempotency", server = %db.server, key = %claim.key, token, "released an abandoned claim");
                }
                Err(StoreError::Fenced) => {
                    tracing::debug!(target: "retry_core::idempotency", server = %db.server, token, "abandoned claim was already taken over");
                }
                Err(e) => {
                    tracing::warn!(target: "retry_core::idempotency", server = %db.server, token, error = %retry_core::error_chain(&e), "could not release an abandoned claim; its lease will free it");
                }
            }
        });
        true
    }

    /// The rows of `inbox_steps` of the claim's key: one plain `SELECT`.
    async fn read_steps(&self, claim: &Claim) -> Result<Vec<StepEntry>, StoreError> {
        steps::read_steps(&self.db, claim).await
    }

    /// One statement in autocommit: the claim's row locked `FOR SHARE` if its token still holds
    /// the key, and the step written beside it.
    async fn write_step(
        &self,
        claim: &Claim,
        label: &str,
        write: StepWrite<'_>,
    ) -> Result<(), StoreError> {
        steps::write_step(&self.db, claim, label, write).await
    }

    /// Deletes by age only; the keys' step journals go with them (`ON DELETE CASCADE`).
    async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
        claim::purge(&self.db, self.clock(), age).await
    }

    fn limits(&self) -> Limits {
        self.limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_core::time::{format_utc, later};
    use std::time::UNIX_EPOCH;

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
        // The message says which store; its sources, what is wrong.
        let message = retry_core::error_chain(&error).to_string();
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
