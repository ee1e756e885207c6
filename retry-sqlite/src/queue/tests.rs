//! The queue as the stores use it: writes waiting at the same time share one transaction, each
//! failure stays its own, and the stores of one file share one queue.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, FailureClass};
use retry_core::idempotency::{StoreError, TransactionalStore};
use rusqlite::Connection;

use crate::{SqliteDeadLetters, SqliteStore};

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "retry-sqlite-queue-{test}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn db(&self) -> std::path::PathBuf {
        self.0.join("queue.sqlite3")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Frames in the file's WAL: each commit appends the pages it changed.
fn wal_frames(raw: &Connection) -> i64 {
    raw.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
        .unwrap()
}

/// 32 writes queued behind an open transaction run in one transaction once it ends: one
/// commit, a few WAL frames, where a commit each would append at least one frame each. A
/// write whose statement fails undoes its own write alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_waiting_together_share_one_commit_and_fail_alone() {
    let dir = TempDir::new("group");
    let store = Arc::new(SqliteStore::open(dir.db()).unwrap());
    store
        .write(|c| c.execute_batch("CREATE TABLE t (n INTEGER NOT NULL UNIQUE)"))
        .await
        .unwrap();
    let raw = Connection::open(dir.db()).unwrap();
    raw.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    assert_eq!(wal_frames(&raw), 0);

    let held = store.begin().await.unwrap();
    let writes: Vec<_> = (0..32)
        .map(|n| {
            let store = Arc::clone(&store);
            // Every fourth write inserts a duplicate of the one before: a failure of its own.
            let value = if n % 4 == 3 { n - 1 } else { n };
            tokio::spawn(async move {
                store
                    .write(move |c| c.execute("INSERT INTO t VALUES (?1)", [value]))
                    .await
            })
        })
        .collect();
    // All of them queued behind the open transaction.
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.rollback(held).await.unwrap();
    let mut failed = 0;
    for write in writes {
        match write.await.unwrap() {
            Ok(1) => {}
            Err(StoreError::Unavailable(e)) => {
                assert!(e.to_string().contains("UNIQUE"), "{e}");
                failed += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(failed, 8, "each duplicate failed alone");
    let rows: i64 = raw
        .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 24, "every other write committed");
    let frames = wal_frames(&raw);
    assert!(
        (1..=8).contains(&frames),
        "one commit for the group, not one per write: {frames} WAL frames"
    );
}

/// A `SqliteStore` and a `SqliteDeadLetters` on one file share its queue: a letter waits for
/// the store's open transaction (at most its busy timeout, then "locked"), and parks once it
/// ended, with no lock fought over in SQLite's busy handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_of_one_file_share_its_queue() {
    let dir = TempDir::new("shared");
    let store = SqliteStore::open(dir.db()).unwrap();
    let letters = SqliteDeadLetters::open(dir.db())
        .unwrap()
        .with_busy_timeout(Duration::from_millis(100));
    let letter = DeadLetter {
        msg_id: "M-1".into(),
        original: serde_json::json!({"order": 1}),
        reason: "gave up after 1 attempt: upstream 503".into(),
        attempts: 1,
        first_failed_at: SystemTime::now(),
        last_failed_at: SystemTime::now(),
        trace_id: "a1b2c3d4".into(),
        class: FailureClass::System,
        error_type: "FetchError".into(),
        idempotency_key: None,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    };

    let held = store.begin().await.unwrap();
    let error = letters.park(&letter).await.unwrap_err();
    let why = retry_core::error_chain(&error).to_string();
    assert!(why.contains("is locked"), "{why}");
    assert!(
        why.contains("another transaction of this process held the write lock"),
        "queued in the process, not in SQLite's busy handler: {why}"
    );

    let parked = tokio::spawn(async move {
        letters.park(&letter).await.unwrap();
        letters
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.rollback(held).await.unwrap();
    let letters = parked.await.unwrap();
    assert_eq!(letters.stats().await.unwrap().pending, 1);
}
