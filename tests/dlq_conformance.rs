//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on every built-in store.
//! The SQLite, PostgreSQL and JSONL stores add their runs here as they implement
//! `DeadLetterStore`.

use retry_core::dlq::{MemoryDeadLetters, conformance};

#[tokio::test]
async fn memory_dead_letters_conform() {
    conformance::run(async || MemoryDeadLetters::new()).await;
}

#[cfg(feature = "postgres")]
#[path = "common/pg.rs"]
mod pg;

/// Each check on a store in a schema of its own, on the server of `DATABASE_URL` (a loud
/// failure without one); the schemas are dropped after a pass and kept after a failure.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_dead_letters_conform() {
    let mut schemas = Vec::new();
    conformance::run(async || {
        let schema = pg::Schema::new("dlq_conformance").await;
        let store = retry_core::dlq::PgDeadLetters::connect(&schema.url)
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
