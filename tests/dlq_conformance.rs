//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on every built-in store,
//! each check on a fresh store (a fresh file for the file-backed ones).

use retry_core::dlq::{JsonlSink, MemoryDeadLetters, conformance};

use crate::tempdir;

#[tokio::test]
async fn memory_dead_letters_conform() {
    conformance::run(async || MemoryDeadLetters::new()).await;
}

#[tokio::test]
async fn jsonl_dead_letters_conform() {
    let dir = tempdir::TempDir::new("dlq-conformance-jsonl");
    let mut stores = 0;
    conformance::run(async || {
        stores += 1;
        JsonlSink::open(dir.file(&format!("dlq-{stores}.jsonl"))).unwrap()
    })
    .await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dead_letters_conform() {
    let dir = tempdir::TempDir::new("dlq-conformance-sqlite");
    let mut files = 0u32;
    conformance::run(async || {
        files += 1;
        retry_sqlite::SqliteDeadLetters::open(dir.file(&format!("dlq-{files}.sqlite3"))).unwrap()
    })
    .await;
}

#[cfg(feature = "postgres")]
use crate::pg;

/// Each check on a store in a schema of its own, on the server of `DATABASE_URL` (a loud
/// failure without one); the schemas are dropped after a pass and kept after a failure.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_dead_letters_conform() {
    let mut schemas = Vec::new();
    conformance::run(async || {
        let schema = pg::Schema::new("dlq_conformance").await;
        let store = retry_postgres::PgDeadLetters::connect(&schema.url)
            .await
            .unwrap();
        schemas.push(schema);
        store
    })
    .await;
    for schema in schemas {
        schema.drop_all().await;
    }
}
