//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on every built-in store.
//! The SQLite, PostgreSQL and JSONL stores add their runs here as they implement
//! `DeadLetterStore`.

use retry_core::dlq::{MemoryDeadLetters, conformance};

#[path = "common/tempdir.rs"]
mod tempdir;

#[tokio::test]
async fn memory_dead_letters_conform() {
    conformance::run(async || MemoryDeadLetters::new()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dead_letters_conform() {
    // A fresh file per check.
    let dir = tempdir::TempDir::new("dlq-conformance-sqlite");
    let mut files = 0u32;
    conformance::run(async || {
        files += 1;
        retry_core::dlq::SqliteDeadLetters::open(dir.file(&format!("dlq-{files}.sqlite3"))).unwrap()
    })
    .await;
}
