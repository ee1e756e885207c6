//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on every built-in store.
//! The SQLite, PostgreSQL and JSONL stores add their runs here as they implement
//! `DeadLetterStore`.

use retry_core::dlq::{JsonlSink, MemoryDeadLetters, conformance};

#[path = "common/tempdir.rs"]
mod tempdir;

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
