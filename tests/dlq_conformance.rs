//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on every built-in store,
//! each check on a fresh store (a fresh file for the file-backed ones).

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

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dead_letters_conform() {
    let dir = tempdir::TempDir::new("dlq-conformance-sqlite");
    let mut files = 0u32;
    conformance::run(async || {
        files += 1;
        retry_core::dlq::SqliteDeadLetters::open(dir.file(&format!("dlq-{files}.sqlite3"))).unwrap()
    })
    .await;
}
