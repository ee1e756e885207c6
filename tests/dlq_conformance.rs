//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on every built-in store.
//! The SQLite, PostgreSQL and JSONL stores add their runs here as they implement
//! `DeadLetterStore`.

use retry_core::dlq::{MemoryDeadLetters, conformance};

#[tokio::test]
async fn memory_dead_letters_conform() {
    conformance::run(async || MemoryDeadLetters::new()).await;
}
