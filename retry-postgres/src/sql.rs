//! The PostgreSQL plumbing of `PgStore` and `PgDeadLetters`: the deadpool-postgres pool (as
//! `connect` builds it, or as the application gives it), naming the server in errors without
//! the password, and the migration through `retry_core_schema` under one advisory lock.
//!
//! Design notes (the why of each choice):
//! - Connections come from a deadpool-postgres pool (default 16). Waiting for a free
//!   connection, and opening one, are bounded (5 s by default for pools made by [`Db::connect`]);
//!   after that the operation fails with an error naming the server.
//! - Errors name the server as `host:port (database name)`, never the user or password; they
//!   carry the whole chain of causes in their message ([`ServerError`]).
//! - The migration runs under `pg_advisory_xact_lock`, one key for every store, so instances
//!   starting together cannot race on the catalog (`CREATE TABLE IF NOT EXISTS` alone can fail
//!   with a duplicate-key error when two sessions run it at once, and every store creates
//!   `retry_core_schema`); a schema already at this version is left alone, so the service's role
//!   needs no `CREATE` privilege once the table exists. An older version is brought up to date
//!   by the store's upgrade steps, in the same transaction; a new database runs the same steps
//!   after the first layout, so both end with one layout.
//! - Serialization failures and deadlocks are tried again by every store the same way
//!   ([`retrying_conflicts`]).
//! - TLS is as the connection string asks (`sslmode`, `sslrootcert`), in `tls`.
//! - Failures come back as a boxed error, which each store wraps into its own error type
//!   (`StoreError::Unavailable`, `DlqError::Io`).

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{
    ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
};
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;

use crate::BoxError;

/// The most connections a pool made by [`Db::connect`] holds.
const DEFAULT_POOL_SIZE: usize = 16;

/// For pools made by [`Db::connect`]: how long opening a connection, and waiting for a free
/// one, may take.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The advisory lock key that serialises retry-core's migrations: "retrycor" in ASCII, one key
/// for every store (they all create `retry_core_schema`).
const MIGRATION_LOCK: i64 = 0x7265_7472_7963_6f72;

const LOCK_MIGRATION: &str = "SELECT pg_advisory_xact_lock($1)";
const UPDATE_VERSION: &str = "UPDATE retry_core_schema SET version = $2 WHERE component = $1";
const SERVER_ADDRESS: &str =
    "SELECT host(inet_server_addr()), inet_server_port(), current_database()::text";

/// The schema table every store of this crate records its layout version in: a table of our own
/// rather than a catalog of the server's or the application's migration tool, because the application's tables
/// may live in the same database, and its migration tool may own its own version table. retry-sqlite keeps its
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

/// Why an operation failed before its errors get the server's name: a failed call of the driver
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

/// A store's table in the database, and how its layout version is kept in `retry_core_schema`.
#[derive(Debug)]
pub(crate) struct Schema {
    /// The store's table: its row in `retry_core_schema`, named when the database is newer.
    pub(crate) component: &'static str,
    /// The version of the layout this code writes.
    pub(crate) version: i32,
    /// The store's `CREATE TABLE IF NOT EXISTS` / `CREATE INDEX IF NOT EXISTS` statements: the
    /// layout of version 1.
    pub(crate) tables: &'static str,
    /// The steps from each version to the next: `upgrades[0]` takes version 1 to 2, and so on
    /// up to `version`. A new database gets `tables` and then every step, so the layout it
    /// ends with is exactly the one an upgraded database has.
    pub(crate) upgrades: &'static [&'static str],
    /// Whether `retry_core_schema` and the store's table exist: two booleans.
    pub(crate) tables_exist: &'static str,
    /// Reads the store's row of `retry_core_schema`.
    pub(crate) select_version: &'static str,
    /// Records `$1` as the store's version, unless a row is there.
    pub(crate) record_version: &'static str,
}

/// Why an operation failed before its errors get the server's name: a failed statement, or the
/// store's own verdict (a corrupt row, a fenced claim).
pub(crate) type Fail<E> = Failure<tokio_postgres::Error, E>;

/// The pool and how to name its server in errors.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: Pool,
    pub(crate) server: Arc<str>,
}

impl Db {
    /// A pool of up to 16 connections to the database at `url`, over TLS when `url` asks for it
    /// (see `tls`), and the table of `schema` created if it is missing. Missing
    /// settings get defaults: `connect_timeout` 5 s, `application_name` "retry-core". Must run
    /// inside a Tokio runtime.
    pub(crate) async fn connect(url: &str, schema: &Schema) -> Result<Self, BoxError> {
        let (url, tls) = crate::tls::split(url).map_err(|e| {
            Box::new(ServerError {
                context: "invalid PostgreSQL connection string".to_owned(),
                source: e,
            }) as BoxError
        })?;
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| server_error("invalid PostgreSQL connection string".to_owned(), e))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("retry-core");
        }
        let server: Arc<str> = describe_server(&config).into();
        let manager = tls
            .manager(
                config,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            )
            .map_err(|e| {
                Box::new(ServerError {
                    context: format!("cannot set up TLS for PostgreSQL at {server}"),
                    source: e,
                }) as BoxError
            })?;
        let pool = Pool::builder(manager)
            .max_size(DEFAULT_POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(DEFAULT_TIMEOUT))
            .create_timeout(Some(DEFAULT_TIMEOUT))
            .recycle_timeout(Some(DEFAULT_TIMEOUT))
            .build()
            .map_err(|e| {
                server_error(
                    format!("cannot build a connection pool for PostgreSQL at {server}"),
                    e,
                )
            })?;
        let db = Db { pool, server };
        db.migrate(schema).await?;
        Ok(db)
    }

    /// `pool` as the application gave it to `store` (`"PgStore"`), with the table of `schema`
    /// created if it is missing. The server is named as it reports its address.
    pub(crate) async fn from_pool(
        pool: Pool,
        store: &str,
        schema: &Schema,
    ) -> Result<Self, BoxError> {
        let mut db = Db {
            pool,
            server: Arc::from(format!(
                "the server of the pool given to {store}::from_pool"
            )),
        };
        if let Some(server) = db.migrate(schema).await? {
            db.server = server.into();
        }
        Ok(db)
    }

    /// A connection of the pool.
    pub(crate) async fn get(&self) -> Result<Object, BoxError> {
        self.pool.get().await.map_err(|e| self.pool_error(e))
    }

    /// Creates what is missing of the schema, under an advisory lock; refuses a schema newer
    /// than this code. Returns the server's address as it reports it.
    async fn migrate(&self, schema: &Schema) -> Result<Option<String>, BoxError> {
        let mut client = self.get().await?;
        self.migrate_on(&mut client, schema)
            .await
            .map_err(|e| self.fail(e, |e| e))
    }

    async fn migrate_on(
        &self,
        client: &mut Object,
        schema: &Schema,
    ) -> Result<Option<String>, Fail<BoxError>> {
        let tx = client.transaction().await?;
        tx.execute(LOCK_MIGRATION, &[&MIGRATION_LOCK]).await?;
        let exist = tx.query_one(schema.tables_exist, &[]).await?;
        let (schema_table, own_table): (bool, bool) = (exist.try_get(0)?, exist.try_get(1)?);
        let version: Option<i32> = if schema_table {
            tx.query_opt(schema.select_version, &[])
                .await?
                .map(|row| row.try_get(0))
                .transpose()?
        } else {
            None
        };
        match version {
            Some(version) if version > schema.version => {
                return Err(Fail::Store(
                    format!(
                        "PostgreSQL at {} has {} schema version {version}, newer than the {} this retry-core understands",
                        self.server, schema.component, schema.version
                    )
                    .into(),
                ));
            }
            Some(version) if own_table => {
                let done = usize::try_from(version.max(1) - 1).unwrap_or(0);
                if let Some(steps) = schema.upgrades.get(done..).filter(|s| !s.is_empty()) {
                    for step in steps {
                        tx.batch_execute(step).await?;
                    }
                    tx.execute(UPDATE_VERSION, &[&schema.component, &schema.version])
                        .await?;
                }
            }
            _ => {
                tx.batch_execute(&migration(schema.tables)).await?;
                for step in schema.upgrades {
                    tx.batch_execute(step).await?;
                }
                // A version row of its own, or one left by tables dropped by hand.
                tx.execute(schema.record_version, &[&schema.version])
                    .await?;
                tx.execute(UPDATE_VERSION, &[&schema.component, &schema.version])
                    .await?;
            }
        }
        let address = tx.query_one(SERVER_ADDRESS, &[]).await?;
        tx.commit().await?;
        let host: Option<String> = address.try_get(0)?;
        let port: Option<i32> = address.try_get(1)?;
        let database: String = address.try_get(2)?;
        Ok(Some(match (host, port) {
            (Some(host), Some(port)) if host.contains(':') => {
                format!("[{host}]:{port} (database {database})")
            }
            (Some(host), Some(port)) => format!("{host}:{port} (database {database})"),
            _ => format!("a local socket (database {database})"),
        }))
    }

    /// `e` as the store's error: a failed statement names the server and becomes the store's
    /// error through `unavailable`.
    pub(crate) fn fail<E>(&self, e: Fail<E>, unavailable: impl FnOnce(BoxError) -> E) -> E {
        match e {
            Fail::Sql(e) => unavailable(self.error(e)),
            Fail::Store(e) => e,
        }
    }

    /// A failed statement (or a lost connection): names the server.
    pub(crate) fn error(&self, e: tokio_postgres::Error) -> BoxError {
        server_error(format!("PostgreSQL at {}", self.server), e)
    }

    /// No connection could be had from the pool: says why, naming the server.
    fn pool_error(&self, e: PoolError) -> BoxError {
        let server = &self.server;
        let timeouts = self.pool.timeouts();
        let message = |text: String| -> BoxError { text.into() };
        match e {
            PoolError::Timeout(TimeoutType::Wait) => message(format!(
                "all {} connections to PostgreSQL at {server} stayed busy (waited {:?})",
                self.pool.status().max_size,
                timeouts.wait.unwrap_or_default()
            )),
            PoolError::Timeout(TimeoutType::Create) => message(format!(
                "cannot connect to PostgreSQL at {server}: no answer within {:?}",
                timeouts.create.unwrap_or_default()
            )),
            PoolError::Timeout(TimeoutType::Recycle) => message(format!(
                "PostgreSQL at {server} did not answer a connection check within {:?}",
                timeouts.recycle.unwrap_or_default()
            )),
            PoolError::Backend(e) => {
                server_error(format!("cannot connect to PostgreSQL at {server}"), e)
            }
            PoolError::Closed => message(format!(
                "the connection pool for PostgreSQL at {server} is closed"
            )),
            PoolError::NoRuntimeSpecified => message(format!(
                "the connection pool for PostgreSQL at {server} has timeouts but no runtime (build it with deadpool_postgres::Runtime::Tokio1)"
            )),
            PoolError::PostCreateHook(e) => message(format!(
                "cannot connect to PostgreSQL at {server}: the pool's post_create hook failed: {e}"
            )),
        }
    }
}

// ---- serialization failures and deadlocks ----

/// How many times an operation runs when the server aborts it with a serialization failure
/// (`40001`) or a deadlock (`40P01`): both roll the statement back whole, so running it again
/// is safe, and both are expected now and then (a server whose default isolation is
/// SERIALIZABLE, the application's own transactions locking the store's rows).
const SERIALIZATION_ATTEMPTS: u32 = 3;

/// The pause before the next attempt, times the attempts so far: short, since the transaction
/// the operation collided with has ended by the time the server reports the failure.
const SERIALIZATION_PAUSE: Duration = Duration::from_millis(5);

/// Whether the server rolled the statement back for a conflict with another transaction that
/// may not recur: a serialization failure or a deadlock.
pub(crate) fn is_transient_conflict(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

/// The pause before attempt `attempt + 1`, after a serialization failure or a deadlock `e` of
/// an operation `what`; `None` when `e` is something else, or the attempts are used up.
pub(crate) fn conflict_pause(
    db: &Db,
    what: &str,
    attempt: u32,
    e: &tokio_postgres::Error,
) -> Option<Duration> {
    if attempt >= SERIALIZATION_ATTEMPTS || !is_transient_conflict(e) {
        return None;
    }
    tracing::debug!(server = %db.server, what, attempt, error = %retry_core::error_chain(&e), "serialization failure or deadlock; trying again");
    Some(SERIALIZATION_PAUSE * attempt)
}

/// Awaits `$op` (an expression making a new future each time, failing with a [`Fail`]) until
/// it does not fail with a serialization failure or a deadlock, at most
/// [`SERIALIZATION_ATTEMPTS`] times; the last failure is returned as it is. `$op` must be whole
/// on its own (one statement, or one transaction), since the server rolled back all of it. A
/// macro rather than a function taking an async closure: the futures of async closures cannot
/// yet be shown `Send`.
macro_rules! retrying_conflicts {
    ($db:expr, $what:expr, $op:expr) => {{
        let mut attempt = 1;
        loop {
            match $op.await {
                Err($crate::sql::Fail::Sql(e)) => {
                    match $crate::sql::conflict_pause($db, $what, attempt, &e) {
                        Some(pause) => {
                            tokio::time::sleep(pause).await;
                            attempt += 1;
                        }
                        None => break Err($crate::sql::Fail::Sql(e)),
                    }
                }
                other => break other,
            }
        }
    }};
}
pub(crate) use retrying_conflicts;

/// `host:port (database name)` for each host of `config`: never the user or the password.
fn describe_server(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| match ports {
        [] => 5432,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(5432),
    };
    let mut hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) if name.contains(':') => format!("[{name}]:{}", port(i)),
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            #[cfg(unix)]
            Host::Unix(path) => format!("{}:{}", path.display(), port(i)),
        })
        .collect();
    if hosts.is_empty() {
        hosts = config
            .get_hostaddrs()
            .iter()
            .enumerate()
            .map(|(i, addr)| match addr {
                std::net::IpAddr::V4(v4) => format!("{v4}:{}", port(i)),
                std::net::IpAddr::V6(v6) => format!("[{v6}]:{}", port(i)),
            })
            .collect();
    }
    let hosts = if hosts.is_empty() {
        "(no host given)".to_owned()
    } else {
        hosts.join(",")
    };
    match config.get_dbname() {
        Some(database) => format!("{hosts} (database {database})"),
        None => hosts,
    }
}

/// An error of the server or of reaching it: which server, and in doing what; the driver's
/// error is the source (tokio-postgres says only "db error" at the top, the server's message
/// is its source in turn).
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
struct ServerError {
    context: String,
    source: BoxError,
}

/// `source` in `context`, as a [`ServerError`] for the store to wrap.
fn server_error(
    context: String,
    source: impl std::error::Error + Send + Sync + 'static,
) -> BoxError {
    Box::new(ServerError {
        context,
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_core::idempotency::StoreError;

    fn config(url: &str) -> tokio_postgres::Config {
        url.parse().unwrap()
    }

    #[test]
    fn the_server_is_named_without_user_or_password() {
        for (url, expected) in [
            (
                "postgres://app:s3cret@db.internal:6543/payments",
                "db.internal:6543 (database payments)",
            ),
            (
                "postgres://app:s3cret@db.internal/payments",
                "db.internal:5432 (database payments)",
            ),
            (
                "postgres://app:s3cret@a:1,b:2/payments",
                "a:1,b:2 (database payments)",
            ),
            ("postgres://app@[::1]:5433", "[::1]:5433"),
            ("postgres://app:s3cret@[::1]:5433", "[::1]:5433"),
            (
                "host=/run/postgresql user=app password=s3cret dbname=x",
                "/run/postgresql:5432 (database x)",
            ),
            (
                "hostaddr=10.0.0.7 port=7 user=app password=s3cret",
                "10.0.0.7:7",
            ),
            ("user=app password=s3cret", "(no host given)"),
        ] {
            let named = describe_server(&config(url));
            assert_eq!(named, expected, "{url}");
            assert!(
                !named.contains("s3cret") && !named.contains("app"),
                "{named}"
            );
        }
    }

    #[test]
    fn server_errors_name_the_server_and_keep_the_cause_as_the_source() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = ServerError {
            context: "cannot connect to PostgreSQL at h:1".to_owned(),
            source: Box::new(StoreError::Unavailable(Box::new(inner))),
        };
        assert_eq!(error.to_string(), "cannot connect to PostgreSQL at h:1");
        assert_eq!(
            retry_core::error_chain(&error).to_string(),
            "cannot connect to PostgreSQL at h:1: idempotency store unavailable: refused"
        );
    }
}
