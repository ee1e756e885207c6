//! How the SQLite plumbing's failures read as [`DlqError`]s: `Io`, naming the file, with
//! SQLite's own error as the source.

use std::fmt;
use std::sync::Arc;

use crate::sql::{self as sql, FromSqliteError};
use retry_core::dlq::DlqError;

/// Why an operation failed before its errors get the file's name.
pub(super) type Fail = sql::Fail<DlqError>;

impl FromSqliteError for DlqError {
    /// The plumbing's failures, as this store has always reported them: `Io` with a message
    /// naming the file, SQLite's error (if any) as the source.
    fn from_sqlite(error: sql::Error) -> Self {
        FileError::from_sqlite(error).into_dlq()
    }
}

/// A failure of the file or of SQLite, naming the file; SQLite's own error, if any, is the
/// source. Cloned for every letter of a group commit that failed: each caller gets the same
/// error, sharing SQLite's.
#[derive(Debug, Clone)]
pub(super) struct FileError {
    message: String,
    source: Option<Arc<rusqlite::Error>>,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// By hand: the source is SQLite's error itself, not the `Arc` around it, so it downcasts.
impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

impl FileError {
    pub(super) fn into_dlq(self) -> DlqError {
        DlqError::Io(Box::new(self))
    }
}

impl FromSqliteError for FileError {
    fn from_sqlite(error: sql::Error) -> Self {
        let (message, source) = match error {
            sql::Error::Locked(e) => (e.to_string(), Some(Arc::new(e.into_source()))),
            sql::Error::Sql { path, source } => (
                format!("database file {}", path.display()),
                Some(Arc::new(source)),
            ),
            sql::Error::OpenFailed(e) => (e.to_string(), Some(Arc::new(e.into_source()))),
            sql::Error::Shared(e) => (e.to_string(), e.cause()),
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
        FileError { message, source }
    }
}
