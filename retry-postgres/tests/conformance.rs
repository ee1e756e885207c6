//! retry-core's conformance suites (`idempotency::conformance`, `dlq::conformance`) on this
//! crate's stores, each check in a schema of its own on the server of `DATABASE_URL`.
//!
//! They need a server, so they are built with feature `server-tests` only (`--all-features`, as
//! scripts/test runs them after starting one). Built, they never pass without one: a missing
//! `DATABASE_URL` or an unreachable server fails each test, saying so.
#![cfg(feature = "server-tests")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use retry_core::{dlq, idempotency};
use retry_postgres::{PgDeadLetters, PgStore};

fn database_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "PostgreSQL tests need DATABASE_URL (scripts/test sets it): \
             postgres://USER@HOST:PORT/DATABASE of a server these tests may create schemas in"
        ),
    }
}

/// A plain client, failing the test loudly if the server cannot be reached.
async fn admin() -> tokio_postgres::Client {
    let connected = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_postgres::connect(&database_url(), tokio_postgres::NoTls),
    )
    .await;
    let (client, connection) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => panic!(
            "PostgreSQL tests need a reachable server at DATABASE_URL (scripts/test starts one): {}",
            retry_core::error_chain(&e)
        ),
        Err(_) => panic!(
            "PostgreSQL tests need a reachable server at DATABASE_URL (scripts/test starts one): no answer within 10s"
        ),
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A schema of one check's own, created afresh; its URL resolves unqualified names in it.
struct Schema {
    name: String,
    url: String,
}

impl Schema {
    async fn new(test: &str, n: usize) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("rp_{test}_{n}_{}_{nanos}", std::process::id());
        admin()
            .await
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .await
            .unwrap();
        let url = database_url();
        let url = if url.contains("://") {
            let separator = if url.contains('?') { '&' } else { '?' };
            format!("{url}{separator}options=-c%20search_path%3D{name}")
        } else {
            format!("{url} options='-c search_path={name}'")
        };
        Schema { name, url }
    }

    async fn drop_all(self) {
        admin()
            .await
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_store_conforms() {
    let mut schemas = Vec::new();
    let report = idempotency::conformance::check_all(async || {
        let schema = Schema::new("conf", schemas.len()).await;
        let store = PgStore::connect(&schema.url).await.unwrap();
        schemas.push(schema);
        store
    })
    .await;
    // Dropped whatever the outcome: the report says what each failed check found.
    for schema in schemas {
        schema.drop_all().await;
    }
    assert!(report.passed(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_dead_letters_conform() {
    let mut schemas = Vec::new();
    dlq::conformance::run(async || {
        let schema = Schema::new("dlq_conf", schemas.len()).await;
        let store = PgDeadLetters::connect(&schema.url).await.unwrap();
        schemas.push(schema);
        store
    })
    .await;
    for schema in schemas {
        schema.drop_all().await;
    }
}
