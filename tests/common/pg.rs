//! A PostgreSQL test harness shared by the `pg_*` test files: the server from `DATABASE_URL`
//! (a loud failure without one), and a schema of each test's own.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use retry_postgres::PgStore;

pub(crate) fn database_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "PostgreSQL tests need DATABASE_URL (scripts/test sets it): \
             postgres://USER@HOST:PORT/DATABASE of a server these tests may create schemas in"
        ),
    }
}

/// `url` with `search_path` set to `schema` (both URL and `key=value` forms).
pub(crate) fn with_search_path(url: &str, schema: &str) -> String {
    if url.contains("://") {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}options=-c%20search_path%3D{schema}")
    } else {
        format!("{url} options='-c search_path={schema}'")
    }
}

/// A plain client (not the store's), failing the test loudly if the server cannot be reached.
pub(crate) async fn raw_client(url: &str) -> tokio_postgres::Client {
    let connected = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await;
    let (client, connection) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => {
            let mut message = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(inner) = cause {
                message = format!("{message}: {inner}");
                cause = inner.source();
            }
            panic!(
                "PostgreSQL tests need a reachable server at DATABASE_URL (scripts/test starts one): {message}"
            )
        }
        Err(_) => panic!(
            "PostgreSQL tests need a reachable server at DATABASE_URL (scripts/test starts one): no answer within 10s"
        ),
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A schema of one test's own, created afresh: its own `inbox_log`, `retry_core_schema` and
/// `balances`.
pub(crate) struct Schema {
    pub(crate) name: String,
    pub(crate) url: String,
}

impl Schema {
    pub(crate) async fn new(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("t_{test}_{}_{nanos}", std::process::id());
        assert!(name.len() <= 63, "schema name too long: {name}");
        let admin = raw_client(&database_url()).await;
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .await
            .unwrap();
        Self::existing(&name)
    }

    /// The schema a parent test made (for its child process).
    pub(crate) fn existing(name: &str) -> Self {
        Schema {
            name: name.to_owned(),
            url: with_search_path(&database_url(), name),
        }
    }

    pub(crate) async fn store(&self) -> PgStore {
        PgStore::connect(&self.url).await.unwrap()
    }

    /// A plain client whose unqualified names resolve in this schema.
    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        raw_client(&self.url).await
    }

    /// Removes the schema (a failed test leaves it behind, for a look).
    pub(crate) async fn drop_all(self) {
        let admin = raw_client(&database_url()).await;
        admin
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name))
            .await
            .unwrap();
    }
}
