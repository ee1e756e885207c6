//! retry-core's conformance suites (`idempotency::conformance`, `dlq::conformance`) on this
//! crate's stores, each check in a schema of its own on the server of `DATABASE_URL`.
//!
//! They need a server, so they are built with feature `server-tests` only (`--all-features`, as
//! scripts/test runs them after starting one). Built, they never pass without one: a missing
//! `DATABASE_URL` or an unreachable server fails each test, saying so.
#![cfg(feature = "server-tests")]

mod common;

use retry_core::{dlq, idempotency};
use retry_postgres::{PgDeadLetters, PgStore};

use common::Schema;

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
