//! `#[idempotent(transaction = tx)]` on SQLite: the business write and the `done` row commit
//! together, so a crash between them loses nothing and repeats nothing.

use std::sync::Arc;

use retry_core::idempotency::{IdempotencyError, StoreError};
use retry_core::idempotent;
use retry_sqlite::{SqliteStore, SqliteTransaction};

#[derive(Debug)]
enum Rejected {
    Idempotency(IdempotencyError),
}

impl From<IdempotencyError> for Rejected {
    fn from(e: IdempotencyError) -> Self {
        Rejected::Idempotency(e)
    }
}

impl From<StoreError> for Rejected {
    fn from(e: StoreError) -> Self {
        Rejected::Idempotency(IdempotencyError::Store(e))
    }
}

#[idempotent(key = deposit_no, store = inbox, transaction = tx)]
async fn deposit(
    inbox: &SqliteStore,
    tx: &mut SqliteTransaction,
    deposit_no: u64,
    account: &'static str,
    amount: i64,
    pause: Option<Arc<tokio::sync::Notify>>,
) -> Result<i64, Rejected> {
    tx.run(move |c| {
        c.execute(
            "UPDATE balances SET amount = amount + ?1 WHERE account = ?2",
            rusqlite::params![amount, account],
        )
    })
    .await?;
    if let Some(pause) = pause {
        // A crash between the business write and the commit.
        pause.notified().await;
    }
    Ok(amount)
}

struct Db(std::path::PathBuf);

impl Db {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "retry-core-tx-{name}-{}.sqlite",
            std::process::id()
        ));
        let db = Db(path);
        db.clean();
        let conn = rusqlite::Connection::open(&db.0).unwrap();
        conn.execute_batch("CREATE TABLE balances (account TEXT PRIMARY KEY, amount INTEGER NOT NULL); INSERT INTO balances VALUES ('a', 0);")
            .unwrap();
        db
    }
    fn balance(&self) -> i64 {
        let conn = rusqlite::Connection::open(&self.0).unwrap();
        conn.query_row("SELECT amount FROM balances WHERE account = 'a'", [], |r| {
            r.get(0)
        })
        .unwrap()
    }
    fn clean(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.clean();
    }
}

#[tokio::test]
async fn a_duplicate_changes_the_balance_once() {
    let db = Db::new("dup");
    let inbox = SqliteStore::open(&db.0).unwrap();
    assert_eq!(deposit(&inbox, 1, "a", 25, None).await.unwrap(), 25);
    assert_eq!(deposit(&inbox, 1, "a", 25, None).await.unwrap(), 25);
    assert_eq!(deposit(&inbox, 2, "a", 5, None).await.unwrap(), 5);
    assert_eq!(db.balance(), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_write_and_the_commit_loses_and_repeats_nothing() {
    let db = Db::new("crash");
    let inbox = SqliteStore::open(&db.0).unwrap();
    let pause = Arc::new(tokio::sync::Notify::new());
    {
        // The future is dropped after the business write, before the commit.
        let crashed = deposit(&inbox, 7, "a", 40, Some(pause.clone()));
        let _ = tokio::time::timeout(std::time::Duration::from_millis(100), crashed).await;
    }
    assert_eq!(
        db.balance(),
        0,
        "the write rolled back with the transaction"
    );
    // The redelivery runs once, after the abandoned claim is released in the background.
    let mut tries = 0;
    let result = loop {
        match deposit(&inbox, 7, "a", 40, None).await {
            Err(Rejected::Idempotency(IdempotencyError::InProgress)) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            other => break other,
        }
    };
    assert_eq!(result.unwrap(), 40);
    assert_eq!(deposit(&inbox, 7, "a", 40, None).await.unwrap(), 40);
    assert_eq!(db.balance(), 40);
}
