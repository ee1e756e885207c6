//! `#[idempotent]` on a real SQLite file: 64 concurrent duplicates run the body once, and later
//! duplicates get the stored response. (The store's contract, leases, two processes and purging
//! are tested in `tests/sqlite_store.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_core::idempotency::IdempotencyError;
use retry_core::idempotent;
use retry_sqlite::SqliteStore;

#[derive(Debug)]
struct Rejected(IdempotencyError);

impl From<IdempotencyError> for Rejected {
    fn from(e: IdempotencyError) -> Self {
        Rejected(e)
    }
}

#[idempotent(key = ("bank-a", msg_no), store = inbox)]
async fn deposit(
    inbox: &SqliteStore,
    msg_no: u64,
    effects: &AtomicU32,
    caller: u32,
) -> Result<(u64, u32), Rejected> {
    effects.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(30)).await;
    Ok((msg_no, caller))
}

struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_duplicates_run_the_body_once_on_sqlite() {
    let file = TempFile(
        std::env::temp_dir().join(format!("retry-core-idem-{}.sqlite", std::process::id())),
    );
    let inbox = Arc::new(SqliteStore::open(&file.0).unwrap());
    let effects = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|caller| {
            let (inbox, effects) = (inbox.clone(), effects.clone());
            tokio::spawn(async move { deposit(&inbox, 42, &effects, caller).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(answer) => answers.push(answer),
            Err(Rejected(IdempotencyError::InProgress)) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "the body ran exactly once"
    );
    assert!(!answers.is_empty());
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "every caller got the same response: {answers:?}"
    );
    for late in 0..5 {
        assert_eq!(
            deposit(&inbox, 42, &effects, 100 + late).await.unwrap(),
            answers[0]
        );
    }
    assert_eq!(effects.load(Ordering::SeqCst), 1);
}
