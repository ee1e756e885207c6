use super::*;
use crate::sql::Reservation;
use rusqlite::ErrorCode;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Instant, UNIX_EPOCH};

struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "retry-core-sqlite-unit-{test}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn db(&self) -> PathBuf {
        self.0.join("inbox.sqlite3")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(86_400),
    }
}

const ROW: &str = "INSERT INTO inbox_log \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES (?1, 'b', ?2, ?3, '2025-01-01T00:00:00.000000Z', NULL, ?4, ?5, '2999-01-01T00:00:00.000000Z')";

fn corrupt_message(outcome: Result<ClaimOutcome, StoreError>) -> String {
    match outcome {
        Err(StoreError::Corrupt(what)) => what,
        other => panic!("expected a corrupt row, got {other:?}"),
    }
}

#[tokio::test]
async fn unreadable_rows_are_corrupt_and_name_their_key() {
    let dir = TempDir::new("corrupt");
    let store = SqliteStore::open(dir.db()).unwrap();
    let raw = Connection::open(dir.db()).unwrap();
    let far = "2999-01-01T00:00:00.000000Z";
    raw.execute(
        ROW,
        params!["bad-lease", "in_progress", None::<String>, 1, "yesterday"],
    )
    .unwrap();
    raw.execute(ROW, params!["no-response", "done", None::<String>, 1, far])
        .unwrap();
    raw.execute(
        ROW,
        params!["text-token", "in_progress", None::<String>, "one", far],
    )
    .unwrap();
    raw.execute(ROW, params!["zero-token", "failed", None::<String>, 0, far])
        .unwrap();
    for (key, what) in [
        ("bad-lease", "bad lease_until"),
        ("no-response", "done without a text response"),
        ("text-token", "bad token"),
        ("zero-token", "bad token"),
    ] {
        let message = corrupt_message(store.claim(&request(key)).await);
        assert!(
            message.contains(&format!("`{key}`")) && message.contains(what),
            "{message}"
        );
    }
}

#[tokio::test]
async fn an_unknown_status_is_corrupt() {
    let dir = TempDir::new("status");
    // A table made by hand, without the CHECK constraint: `open` keeps it as it is.
    let raw = Connection::open(dir.db()).unwrap();
    raw.execute_batch(
        "CREATE TABLE inbox_log (msg_id TEXT PRIMARY KEY, biz_key TEXT NOT NULL, status TEXT NOT NULL, \
         response TEXT, created_at TEXT NOT NULL, fingerprint TEXT, token INTEGER NOT NULL, \
         lease_until TEXT NOT NULL, expires_at TEXT NOT NULL)",
    )
    .unwrap();
    let store = SqliteStore::open(dir.db()).unwrap();
    raw.execute(
        ROW,
        params![
            "odd",
            "paused",
            None::<String>,
            1,
            "2999-01-01T00:00:00.000000Z"
        ],
    )
    .unwrap();
    let message = corrupt_message(store.claim(&request("odd")).await);
    assert!(
        message.contains("`odd`") && message.contains("unknown status \"paused\""),
        "{message}"
    );
}

#[test]
fn the_status_is_checked_by_the_table() {
    let dir = TempDir::new("check");
    let _store = SqliteStore::open(dir.db()).unwrap();
    let raw = Connection::open(dir.db()).unwrap();
    let refused = raw.execute(
        ROW,
        params![
            "odd",
            "paused",
            None::<String>,
            1,
            "2999-01-01T00:00:00.000000Z"
        ],
    );
    assert_eq!(
        refused.unwrap_err().sqlite_error_code(),
        Some(ErrorCode::ConstraintViolation)
    );
}

#[test]
fn opening_twice_migrates_once_and_a_newer_schema_is_refused() {
    let dir = TempDir::new("schema");
    let first = SqliteStore::open(dir.db()).unwrap();
    let second = SqliteStore::open(dir.db()).unwrap();
    drop((first, second));
    let raw = Connection::open(dir.db()).unwrap();
    let mode: String = raw
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let versions: Vec<(String, i64)> = raw
        .prepare("SELECT component, version FROM retry_core_schema")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, [("inbox_log".to_owned(), 3)]);
    let user_version: i64 = raw
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, 0, "user_version is left to the application");

    raw.execute("UPDATE retry_core_schema SET version = 4", [])
        .unwrap();
    let error = retry_core::error_chain(&SqliteStore::open(dir.db()).unwrap_err()).to_string();
    assert!(
        error.contains("schema version 4, newer than the 3"),
        "{error}"
    );
}

/// A file written by the version-1 layout (no `in_transaction`, no `inbox_steps`) is upgraded
/// when opened: its claims kept, their lease rules unchanged, the step journal there.
#[tokio::test]
async fn a_version_1_file_is_upgraded_and_keeps_its_claims() {
    let dir = TempDir::new("upgrade");
    let raw = Connection::open(dir.db()).unwrap();
    raw.execute_batch(&crate::sql::migration(TABLES)).unwrap();
    raw.execute(RECORD_VERSION, [1]).unwrap();
    raw.execute(
        ROW,
        params![
            "kept",
            "in_progress",
            None::<String>,
            1,
            "2100-01-01T00:00:00.000000Z"
        ],
    )
    .unwrap();
    let store = SqliteStore::open(dir.db()).unwrap();
    let version: i64 = raw.query_row(SELECT_VERSION, [], |row| row.get(0)).unwrap();
    assert_eq!(version, 3);
    assert_eq!(
        store.claim(&request("kept")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    let ClaimOutcome::Claimed(claim) = store.claim(&request("new")).await.unwrap() else {
        panic!("a new key is claimed");
    };
    store
        .write_step(&claim, "charge", StepWrite::Finished("1"))
        .await
        .unwrap();
    assert_eq!(store.read_steps(&claim).await.unwrap().len(), 1);
    let tx = store.begin_for(&claim).await.unwrap();
    store.commit_done(tx, &claim, "1").await.unwrap();
}

#[test]
fn connections_use_the_configured_synchronous_mode() {
    let dir = TempDir::new("synchronous");
    let synchronous = |store: &SqliteStore| -> i64 {
        store
            .pool
            .with_connection(Reservation::none(), |conn| -> Result<i64, Fail> {
                Ok(conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?)
            })
            .unwrap()
    };
    let store = SqliteStore::open(dir.db()).unwrap();
    assert_eq!(synchronous(&store), 2, "FULL by default");
    let store = store.with_synchronous_full(false);
    assert_eq!(synchronous(&store), 1, "NORMAL when asked");
    let store = store.with_synchronous_full(true);
    assert_eq!(synchronous(&store), 2, "FULL again");
}

#[test]
fn without_a_runtime_operations_run_in_place() {
    let dir = TempDir::new("no-runtime");
    let store = SqliteStore::open(dir.db()).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let request = request("k");
    let mut claim = pin!(store.claim(&request));
    let Poll::Ready(Ok(ClaimOutcome::Claimed(claim))) = claim.as_mut().poll(&mut cx) else {
        panic!("the claim did not finish in place");
    };
    assert!(
        !store.abandon(claim.clone()),
        "no runtime, no background release"
    );
    let mut complete = pin!(store.complete(&claim, "1"));
    assert!(matches!(
        complete.as_mut().poll(&mut cx),
        Poll::Ready(Ok(()))
    ));
}

#[tokio::test]
async fn a_huge_busy_timeout_is_capped_not_a_panic() {
    let dir = TempDir::new("huge-timeout");
    let store = SqliteStore::open(dir.db())
        .unwrap()
        .with_busy_timeout(Duration::MAX);
    assert!(matches!(
        store.claim(&request("k")).await,
        Ok(ClaimOutcome::Claimed(_))
    ));
}

#[tokio::test]
async fn a_locked_file_fails_after_the_busy_timeout_naming_the_file() {
    let dir = TempDir::new("locked");
    let store = SqliteStore::open(dir.db())
        .unwrap()
        .with_busy_timeout(Duration::from_millis(50));
    let locker = Connection::open(dir.db()).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let error = store.claim(&request("k")).await.unwrap_err();
    let expected = format!(
        "database file {} is locked by another process (busy for 50ms)",
        dir.db().display()
    );
    let chain = retry_core::error_chain(&error).to_string();
    assert!(chain.contains(&expected), "{chain}");
    let source = std::error::Error::source(&error).and_then(std::error::Error::source);
    assert!(
        source.is_some_and(|e| e.is::<rusqlite::Error>()),
        "the SQLite error is kept as the source"
    );
    locker.execute_batch("COMMIT").unwrap();
    assert!(matches!(
        store.claim(&request("k")).await,
        Ok(ClaimOutcome::Claimed(_))
    ));
}

#[test]
fn the_pool_waits_for_a_connection_at_most_the_busy_timeout() {
    let dir = TempDir::new("pool");
    let store = SqliteStore::open(dir.db())
        .unwrap()
        .with_max_connections(1)
        .with_busy_timeout(Duration::from_millis(50));
    let held = store.pool.checkout(Reservation::none()).unwrap();
    let started = Instant::now();
    let error = StoreError::from_sqlite(store.pool.checkout(Reservation::none()).err().unwrap());
    assert!(started.elapsed() >= Duration::from_millis(50));
    let chain = retry_core::error_chain(&error).to_string();
    assert!(
        chain.contains("all 1 connections to database file"),
        "{chain}"
    );
    drop(held);
    assert!(store.pool.checkout(Reservation::none()).is_ok());
}

#[test]
fn a_connection_left_in_a_transaction_is_not_reused() {
    let dir = TempDir::new("dirty");
    let store = SqliteStore::open(dir.db()).unwrap();
    let mut pooled = store.pool.checkout(Reservation::none()).unwrap();
    let conn = pooled.connection_mut().unwrap();
    conn.execute_batch("BEGIN").unwrap();
    drop(pooled);
    let state = store.pool.state();
    assert_eq!((state.open, state.idle.len()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_opens_at_most_max_connections() {
    let dir = TempDir::new("max");
    let store = Arc::new(SqliteStore::open(dir.db()).unwrap().with_max_connections(2));
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let key = format!("k{i}");
                let ClaimOutcome::Claimed(claim) = store.claim(&request(&key)).await.unwrap()
                else {
                    panic!()
                };
                store.complete(&claim, "1").await.unwrap();
                store.pool.state().open
            })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap() <= 2);
    }
}

#[test]
fn transactions_run_in_place_without_a_runtime() {
    let dir = TempDir::new("tx-no-runtime");
    let store = SqliteStore::open(dir.db()).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(ClaimOutcome::Claimed(claim))) =
        pin!(store.claim(&request("k"))).poll(&mut cx)
    else {
        panic!("the claim did not finish in place");
    };
    let Poll::Ready(Ok(mut tx)) = pin!(store.begin()).poll(&mut cx) else {
        panic!("begin did not finish in place");
    };
    let created = pin!(tx.run(|c| c.execute_batch("CREATE TABLE t (x)"))).poll(&mut cx);
    assert!(matches!(created, Poll::Ready(Ok(()))));
    let committed = pin!(store.commit_done(tx, &claim, "1")).poll(&mut cx);
    assert!(matches!(committed, Poll::Ready(Ok(()))));
    let raw = Connection::open(dir.db()).unwrap();
    let tables: i64 = raw
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 't'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1);
}

#[test]
fn a_dropped_transaction_rolls_back_and_the_queue_goes_on() {
    let dir = TempDir::new("tx-drop");
    let store = SqliteStore::open(dir.db()).unwrap().with_max_connections(1);
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(mut tx)) = pin!(store.begin()).poll(&mut cx) else {
        panic!("begin did not finish in place");
    };
    let created = pin!(tx.run(|c| c.execute_batch("CREATE TABLE t (x)"))).poll(&mut cx);
    assert!(matches!(created, Poll::Ready(Ok(()))));
    assert!(format!("{tx:?}").contains("open: true"), "{tx:?}");
    drop(tx);
    // The next write of the queue runs after the rollback, on the same connection.
    let seen = pin!(store.write(|c| {
        c.query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 't'",
            [],
            |row| row.get::<_, i64>(0),
        )
    }))
    .poll(&mut cx);
    assert!(matches!(seen, Poll::Ready(Ok(0))), "rolled back: {seen:?}");
    let raw = Connection::open(dir.db()).unwrap();
    let tables: i64 = raw
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 't'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0);
}

#[test]
fn a_transaction_the_handler_ended_cannot_commit_and_the_queue_goes_on() {
    let dir = TempDir::new("tx-ended");
    let store = SqliteStore::open(dir.db()).unwrap().with_max_connections(1);
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(ClaimOutcome::Claimed(claim))) =
        pin!(store.claim(&request("k"))).poll(&mut cx)
    else {
        panic!("the claim did not finish in place");
    };
    let Poll::Ready(Ok(mut tx)) = pin!(store.begin()).poll(&mut cx) else {
        panic!("begin did not finish in place");
    };
    let ended = pin!(tx.run(|c| c.execute_batch("CREATE TABLE t (x); COMMIT"))).poll(&mut cx);
    let Poll::Ready(Err(error)) = ended else {
        panic!("ending the transaction inside the handler was accepted");
    };
    let chain = retry_core::error_chain(&error).to_string();
    assert!(chain.contains("no longer open"), "{chain}");
    assert!(format!("{tx:?}").contains("open: false"), "{tx:?}");
    let next = pin!(store.write(|c| c.execute_batch("CREATE TABLE u (x)"))).poll(&mut cx);
    assert!(matches!(next, Poll::Ready(Ok(()))), "{next:?}");
    let refused = pin!(store.commit_done(tx, &claim, "1")).poll(&mut cx);
    assert!(matches!(
        refused,
        Poll::Ready(Err(StoreError::Unavailable(_)))
    ));
    let raw = Connection::open(dir.db()).unwrap();
    let status: String = raw
        .query_row(
            "SELECT status FROM inbox_log WHERE msg_id = 'k'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(status, "in_progress", "no `done` without its transaction");
}

#[test]
fn leases_past_the_end_of_time_are_clamped() {
    let now = UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    assert_eq!(
        format_utc(later(now, Duration::MAX)),
        "9999-12-31T23:59:59.000000Z"
    );
    assert_eq!(
        later(now, Duration::from_secs(1)),
        now + Duration::from_secs(1)
    );
}
