//! retry-core's conformance suites (`idempotency::conformance`, `dlq::conformance`) on this
//! crate's stores, each check on a fresh file of a temporary directory of its own.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use retry_core::{dlq, idempotency};
use retry_sqlite::{SqliteDeadLetters, SqliteStore};

/// A directory of a test's own under the system temp dir, removed (with its files) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "retry-sqlite-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms() {
    let dir = TempDir::new("conformance");
    let mut made = 0;
    idempotency::conformance::run(async || {
        made += 1;
        SqliteStore::open(dir.file(&format!("check-{made}.sqlite3")))
            .unwrap_or_else(|e| panic!("opening a fresh SqliteStore in {:?}: {e}", dir.0))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dead_letters_conform() {
    let dir = TempDir::new("dlq-conformance");
    let mut files = 0u32;
    dlq::conformance::run(async || {
        files += 1;
        SqliteDeadLetters::open(dir.file(&format!("dlq-{files}.sqlite3"))).unwrap()
    })
    .await;
}
