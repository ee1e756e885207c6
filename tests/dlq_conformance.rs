//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on retry-core's own stores,
//! each check on a fresh store (a fresh file for JSONL). The engines run it on theirs:
//! `retry-sqlite/tests/conformance.rs` and `retry-postgres/tests/conformance.rs`.

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
