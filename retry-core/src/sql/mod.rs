//! The plumbing the SQL stores share: the idempotency log (`idempotency/{sqlite,postgres}.rs`)
//! and the dead letters (`dlq/{sqlite,postgres}.rs`) open, pool and migrate their databases the
//! same way, so that one file or one database can hold both.
//!
//! Each store keeps what is its own: its tables and statements, the decoding of its rows, its
//! public API, and how a failure of this plumbing reads as its own error type. The plumbing
//! returns an inner error (`sqlite::Error`, or a boxed error for PostgreSQL) that the store wraps
//! into its `StoreError` or `DlqError`, so each store's messages stay exactly its own.

#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "postgres")]
mod postgres_tls;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// The schema table every store records its layout version in: a table of our own rather than
/// SQLite's `PRAGMA user_version` or the application's migration tool, because the
/// application's tables may live in the same file or database, and its migration tool may own
/// `user_version`. The same text works on SQLite and PostgreSQL.
///
/// A store's migration is this text followed by its own `CREATE TABLE IF NOT EXISTS` statements,
/// run as one batch.
const SCHEMA_TABLE: &str = "
CREATE TABLE IF NOT EXISTS retry_core_schema (
    component TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
);
";

/// Why an operation failed before its errors get the file's or the server's name: a failed call
/// of the driver (`S`: `rusqlite::Error`, `tokio_postgres::Error`), or the store's own verdict
/// (`E`: a corrupt row, a fenced claim). `?` turns the driver's errors into `Sql`.
pub(crate) enum Fail<S, E> {
    Sql(S),
    Store(E),
}

impl<S, E> From<S> for Fail<S, E> {
    fn from(e: S) -> Self {
        Fail::Sql(e)
    }
}

/// A failure of the PostgreSQL plumbing, for the store to wrap into its own error type.
#[cfg(feature = "postgres")]
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// [`SCHEMA_TABLE`] and then a store's own tables, as one batch.
pub(crate) fn migration(tables: &str) -> String {
    format!("{SCHEMA_TABLE}{tables}")
}
