//! `SqliteStore` in transactional mode, on real files, through the plain trait API
//! (`claim` → `begin` → `SqliteTransaction::run` → `commit_done` / `rollback`): the handler's
//! writes and the `done` row commit together or not at all, a fenced holder's writes roll back,
//! a dropped transaction rolls back and leaves the pool clean, and the acceptance scenario
//! (duplicated, shuffled, concurrent deliveries with crashes) ends with exact balances.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, StoreError,
    TransactionalStore,
};
use retry_core::idempotent;
use retry_core::time::ManualClock;
use retry_sqlite::{SqliteStore, SqliteTransaction};

const DAY: Duration = Duration::from_secs(86_400);

use crate::tempdir;

use tempdir::TempDir;

impl TempDir {
    fn inbox_db(&self) -> PathBuf {
        self.file("inbox.sqlite3")
    }

    /// A plain connection for setting up and checking the application's tables.
    fn raw(&self) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(self.inbox_db()).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn
    }
}

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease: Duration::from_secs(10),
        retention: 30 * DAY,
    }
}

fn claimed(outcome: Result<ClaimOutcome, StoreError>) -> Claim {
    match outcome {
        Ok(ClaimOutcome::Claimed(claim)) => claim,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(1_750_000_000),
    ))
}

/// Opens the store (creating `inbox_log`) and the application's tables in the same file.
fn open_with_balances(dir: &TempDir, accounts: usize) -> SqliteStore {
    let store = SqliteStore::open(dir.inbox_db()).unwrap();
    let raw = dir.raw();
    raw.execute_batch(
        "CREATE TABLE balances (account TEXT PRIMARY KEY, amount INTEGER NOT NULL);
         CREATE TABLE ledger (deposit INTEGER NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL);",
    )
    .unwrap();
    for i in 0..accounts {
        raw.execute("INSERT INTO balances VALUES (?1, 0)", [account_name(i)])
            .unwrap();
    }
    store
}

fn account_name(i: usize) -> String {
    if i == 0 {
        "a".to_owned()
    } else {
        format!("acct-{i:02}")
    }
}

fn balance(dir: &TempDir, account: &str) -> i64 {
    dir.raw()
        .query_row(
            "SELECT amount FROM balances WHERE account = ?1",
            [account],
            |row| row.get(0),
        )
        .unwrap()
}

fn count(dir: &TempDir, sql: &str) -> i64 {
    dir.raw().query_row(sql, [], |row| row.get(0)).unwrap()
}

/// The business write of a deposit: the balance and a ledger row (no UNIQUE constraint: a
/// deposit applied twice shows as two rows).
fn deposit_sql(
    deposit: u64,
    account: String,
    amount: i64,
) -> impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<()> + Send + 'static {
    move |c| {
        let changed = c.execute(
            "UPDATE balances SET amount = amount + ?1 WHERE account = ?2",
            rusqlite::params![amount, account],
        )?;
        assert_eq!(changed, 1, "no account {account}");
        c.execute(
            "INSERT INTO ledger (deposit, account, amount) VALUES (?1, ?2, ?3)",
            rusqlite::params![i64::try_from(deposit).unwrap(), account, amount],
        )?;
        Ok(())
    }
}

// ---- the basic path ----

#[tokio::test]
async fn the_handlers_write_and_done_commit_together_and_duplicates_get_the_response() {
    let dir = TempDir::new("basic");
    let store = open_with_balances(&dir, 1);

    let claim = claimed(store.claim(&request("dep-1")).await);
    let mut tx = store.begin().await.unwrap();
    let changed = tx
        .run(|c| {
            c.execute(
                "UPDATE balances SET amount = amount + 10 WHERE account = 'a'",
                [],
            )
        })
        .await
        .unwrap();
    assert_eq!(changed, 1);
    // Until the commit, another connection sees neither the write nor `done`.
    assert_eq!(balance(&dir, "a"), 0);
    store
        .commit_done(tx, &claim, r#"{"balance":10}"#)
        .await
        .unwrap();

    assert_eq!(balance(&dir, "a"), 10);
    assert_eq!(
        count(
            &dir,
            "SELECT count(*) FROM inbox_log WHERE msg_id = 'dep-1' AND status = 'done'"
        ),
        1
    );
    for _ in 0..3 {
        assert_eq!(
            store.claim(&request("dep-1")).await.unwrap(),
            ClaimOutcome::Done(r#"{"balance":10}"#.into())
        );
    }
    assert_eq!(balance(&dir, "a"), 10, "duplicates ran nothing");
}

#[tokio::test]
async fn rollback_undoes_the_handlers_writes_and_the_claim_can_be_released() {
    let dir = TempDir::new("rollback");
    let store = open_with_balances(&dir, 1);
    let claim = claimed(store.claim(&request("dep-2")).await);
    let mut tx = store.begin().await.unwrap();
    tx.run(deposit_sql(2, "a".into(), 10)).await.unwrap();
    store.rollback(tx).await.unwrap();
    store.release(&claim).await.unwrap();
    assert_eq!(balance(&dir, "a"), 0);

    // A resend runs the body again, once.
    let again = claimed(store.claim(&request("dep-2")).await);
    let mut tx = store.begin().await.unwrap();
    tx.run(deposit_sql(2, "a".into(), 10)).await.unwrap();
    store.commit_done(tx, &again, "null").await.unwrap();
    assert_eq!(balance(&dir, "a"), 10);
    assert_eq!(count(&dir, "SELECT count(*) FROM ledger"), 1);
}

// ---- fencing ----

/// Holder A's lease runs out and B takes the key over; A's write and `done` are refused together.
///
/// The order differs from PostgreSQL on purpose. There, A can begin, stall inside its
/// transaction while B takes over, writes and commits, and only then be fenced at
/// `commit_done`. SQLite has one writer per file: A's `begin` (`BEGIN IMMEDIATE`) takes the
/// write lock, and B's claim is a write, so B could not take over while A's transaction is open
/// (it would wait for A, up to the busy timeout). On SQLite a holder can therefore only be
/// fenced for a takeover that happened before its `begin`: A claims, stalls *before* beginning,
/// B takes over, then A begins, writes and is fenced (rolled back), then B does its work.
#[tokio::test]
async fn a_fenced_holders_write_is_rolled_back_with_its_response() {
    let dir = TempDir::new("fenced");
    let clock = manual_clock();
    let store = open_with_balances(&dir, 1).with_clock(clock.clone());

    let a = claimed(store.claim(&request("dep-3")).await);
    // A stalls past its 10 s lease; a duplicate delivered to B takes the key over.
    clock.advance(Duration::from_secs(11));
    let b = claimed(store.claim(&request("dep-3")).await);
    assert!(b.token > a.token);

    // A wakes up, writes its business update, and tries to commit it with its response.
    let mut tx_a = store.begin().await.unwrap();
    tx_a.run(deposit_sql(3, "a".into(), 10)).await.unwrap();
    assert!(matches!(
        store.commit_done(tx_a, &a, r#""from A""#).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(balance(&dir, "a"), 0, "A's write was rolled back");
    assert_eq!(
        store.claim(&request("dep-3")).await.unwrap(),
        ClaimOutcome::InProgress,
        "B still holds the key"
    );

    let mut tx_b = store.begin().await.unwrap();
    tx_b.run(deposit_sql(3, "a".into(), 10)).await.unwrap();
    store.commit_done(tx_b, &b, r#""from B""#).await.unwrap();

    assert_eq!(balance(&dir, "a"), 10, "only B's deposit");
    assert_eq!(count(&dir, "SELECT count(*) FROM ledger"), 1);
    assert_eq!(
        store.claim(&request("dep-3")).await.unwrap(),
        ClaimOutcome::Done(r#""from B""#.into())
    );
    // A cannot come back later either.
    let mut late = store.begin().await.unwrap();
    late.run(deposit_sql(3, "a".into(), 10)).await.unwrap();
    assert!(matches!(
        store.commit_done(late, &a, "null").await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(balance(&dir, "a"), 10);
}

#[tokio::test]
async fn a_finished_claim_cannot_commit_a_second_time() {
    let dir = TempDir::new("twice");
    let store = open_with_balances(&dir, 1);
    let claim = claimed(store.claim(&request("dep-4")).await);
    let mut tx = store.begin().await.unwrap();
    tx.run(deposit_sql(4, "a".into(), 10)).await.unwrap();
    store.commit_done(tx, &claim, "1").await.unwrap();

    let mut again = store.begin().await.unwrap();
    again.run(deposit_sql(4, "a".into(), 10)).await.unwrap();
    assert!(matches!(
        store.commit_done(again, &claim, "2").await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(balance(&dir, "a"), 10);
    assert_eq!(
        store.claim(&request("dep-4")).await.unwrap(),
        ClaimOutcome::Done("1".into())
    );
}

// ---- dropped transactions ----

/// Claim, begin, write, commit with a one-connection pool: proves the pool's only connection
/// came back clean (a connection left inside a transaction would fail with "cannot start a
/// transaction within a transaction", or be closed and reopened).
async fn the_pool_still_works(store: &SqliteStore, dir: &TempDir, key: &str) {
    let before = balance(dir, "a");
    let claim = claimed(store.claim(&request(key)).await);
    let mut tx = store.begin().await.unwrap();
    tx.run(deposit_sql(99, "a".into(), 1)).await.unwrap();
    store.commit_done(tx, &claim, "null").await.unwrap();
    assert_eq!(balance(dir, "a"), before + 1);
}

#[tokio::test]
async fn a_dropped_transaction_rolls_back_and_the_pool_still_works() {
    let dir = TempDir::new("dropped");
    let store = open_with_balances(&dir, 1).with_max_connections(1);
    let claim = claimed(store.claim(&request("dep-5")).await);
    let mut tx = store.begin().await.unwrap();
    tx.run(deposit_sql(5, "a".into(), 10)).await.unwrap();
    drop(tx); // a crash between the write and the commit
    assert_eq!(balance(&dir, "a"), 0);
    assert_eq!(count(&dir, "SELECT count(*) FROM ledger"), 0);

    the_pool_still_works(&store, &dir, "after-drop").await;
    // The claim itself is still held (dropping the transaction does not release it).
    assert_eq!(
        store.claim(&request("dep-5")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    store.release(&claim).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_in_an_aborted_task_rolls_back_and_the_pool_still_works() {
    let dir = TempDir::new("aborted");
    let store = Arc::new(open_with_balances(&dir, 1).with_max_connections(1));
    let (written, wrote) = tokio::sync::oneshot::channel();
    let task = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            let claim = claimed(store.claim(&request("dep-6")).await);
            let mut tx = store.begin().await.unwrap();
            tx.run(deposit_sql(6, "a".into(), 10)).await.unwrap();
            written.send(()).unwrap();
            // Stalls inside the transaction until aborted.
            std::future::pending::<()>().await;
            store.commit_done(tx, &claim, "null").await
        }
    });
    wrote.await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    assert_eq!(balance(&dir, "a"), 0);
    assert_eq!(count(&dir, "SELECT count(*) FROM ledger"), 0);
    the_pool_still_works(&store, &dir, "after-abort").await;
}

/// The future of `run` is dropped while the handler's SQL is still running on the blocking
/// thread: the connection is rolled back there when the SQL finishes, the transaction can no
/// longer commit, and the pool gets the connection back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_mid_flight_rolls_back_and_the_transaction_cannot_commit() {
    let dir = TempDir::new("cancelled-run");
    let store = open_with_balances(&dir, 1).with_max_connections(1);
    let claim = claimed(store.claim(&request("dep-7")).await);
    let mut tx = store.begin().await.unwrap();
    let slow = tx.run(|c| {
        deposit_sql(7, "a".into(), 10)(c)?;
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(20), slow)
            .await
            .is_err()
    );

    let error = store.commit_done(tx, &claim, "null").await.unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("is no longer open"),
        "{error}"
    );
    // `begin` waits for the pool's only connection, which comes back rolled back.
    let mut next = store.begin().await.unwrap();
    next.run(|c| c.query_row("SELECT 1", [], |row| row.get::<_, i64>(0)))
        .await
        .unwrap();
    store.rollback(next).await.unwrap();
    assert_eq!(balance(&dir, "a"), 0);
    assert_eq!(
        store.claim(&request("dep-7")).await.unwrap(),
        ClaimOutcome::InProgress,
        "the claim is untouched: still its holder's to release"
    );
    store.release(&claim).await.unwrap();
    the_pool_still_works(&store, &dir, "after-cancel").await;
}

#[tokio::test]
async fn a_panicking_handler_rolls_back_and_the_panic_reaches_the_caller() {
    let dir = TempDir::new("panic");
    let store = Arc::new(open_with_balances(&dir, 1).with_max_connections(1));
    let task = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            let mut tx = store.begin().await.unwrap();
            tx.run(|c| -> rusqlite::Result<()> {
                deposit_sql(8, "a".into(), 10)(c)?;
                panic!("handler bug");
            })
            .await
        }
    });
    let panic = task.await.unwrap_err().into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"handler bug"));
    assert_eq!(balance(&dir, "a"), 0);
    the_pool_still_works(&store, &dir, "after-panic").await;
}

/// SQL of the handler that ends the transaction itself is refused: `commit_done` never writes
/// `done` outside the transaction it stands for.
#[tokio::test]
async fn a_handler_that_ends_the_transaction_cannot_commit_done() {
    let dir = TempDir::new("own-commit");
    let store = open_with_balances(&dir, 1).with_max_connections(1);
    let claim = claimed(store.claim(&request("dep-9")).await);
    let mut tx = store.begin().await.unwrap();
    let error = tx.run(|c| c.execute_batch("ROLLBACK")).await.unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("is no longer open"),
        "{error}"
    );
    assert!(tx.run(|c| c.execute("SELECT 1", [])).await.is_err());
    assert!(store.commit_done(tx, &claim, "null").await.is_err());
    assert_eq!(
        store.claim(&request("dep-9")).await.unwrap(),
        ClaimOutcome::InProgress,
        "not done"
    );
    store.release(&claim).await.unwrap();
    the_pool_still_works(&store, &dir, "after-own-rollback").await;
}

#[tokio::test]
async fn a_failed_statement_leaves_the_transaction_open() {
    let dir = TempDir::new("failed-statement");
    let store = open_with_balances(&dir, 1);
    let claim = claimed(store.claim(&request("dep-10")).await);
    let mut tx = store.begin().await.unwrap();
    tx.run(deposit_sql(10, "a".into(), 10)).await.unwrap();
    let error = tx
        .run(|c| c.execute("INSERT INTO balances VALUES ('a', 0)", []))
        .await
        .unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("UNIQUE"),
        "{error}"
    );
    store.commit_done(tx, &claim, "null").await.unwrap();
    assert_eq!(balance(&dir, "a"), 10, "the earlier write committed");
}

#[tokio::test]
async fn another_writer_waits_for_the_transaction_at_most_the_busy_timeout() {
    let dir = TempDir::new("lock");
    let store = open_with_balances(&dir, 1).with_busy_timeout(Duration::from_millis(100));
    let tx = store.begin().await.unwrap();
    let started = Instant::now();
    let error = store.claim(&request("dep-11")).await.unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("is locked"),
        "{error}"
    );
    // Readers are not blocked (WAL).
    assert_eq!(balance(&dir, "a"), 0);
    store.rollback(tx).await.unwrap();
    claimed(store.claim(&request("dep-11")).await);
}

#[tokio::test]
async fn a_transaction_of_another_file_cannot_commit_here() {
    let dir = TempDir::new("other-file");
    let other = TempDir::new("other-file-2");
    let store = open_with_balances(&dir, 1);
    let elsewhere = SqliteStore::open(other.inbox_db()).unwrap();
    let claim = claimed(store.claim(&request("dep-12")).await);
    let tx = elsewhere.begin().await.unwrap();
    let error = store.commit_done(tx, &claim, "null").await.unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("cannot complete a claim kept in"),
        "{error}"
    );
    // The same file through another handle (other settings) is fine.
    let same = SqliteStore::open(dir.inbox_db())
        .unwrap()
        .with_busy_timeout(Duration::from_secs(1));
    let tx = same.begin().await.unwrap();
    store.commit_done(tx, &claim, "null").await.unwrap();
}

// ---- the claim while the transaction is open ----

/// On SQLite an open transaction keeps its claim by itself (`transaction_holds_claim`): a
/// takeover is a write and waits for the transaction's write lock, so a body that outlives its
/// lease inside its transaction is not taken over, without renewing.
#[tokio::test]
async fn an_open_transaction_keeps_its_claim_past_the_lease() {
    let dir = TempDir::new("holds-claim");
    let clock = manual_clock();
    let store = open_with_balances(&dir, 1).with_clock(clock.clone());
    assert!(store.transaction_holds_claim());
    let other = SqliteStore::open(dir.inbox_db())
        .unwrap()
        .with_clock(clock.clone())
        .with_busy_timeout(Duration::from_millis(100));

    let claim = claimed(store.claim(&request("dep-13")).await);
    let mut tx = store.begin().await.unwrap();
    tx.run(deposit_sql(13, "a".into(), 10)).await.unwrap();
    clock.advance(Duration::from_secs(11)); // past the 10 s lease
    let error = other.claim(&request("dep-13")).await.unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("is locked"),
        "{error}"
    );
    store.commit_done(tx, &claim, "13").await.unwrap();

    assert_eq!(
        other.claim(&request("dep-13")).await.unwrap(),
        ClaimOutcome::Done("13".into())
    );
    assert_eq!(balance(&dir, "a"), 10);
}

#[idempotent(key = deposit_no, store = inbox, transaction = tx, lease = "30s")]
async fn held_deposit(
    inbox: &SqliteStore,
    tx: &mut SqliteTransaction,
    deposit_no: u64,
    hold: Duration,
) -> Result<u64, IdempotencyError> {
    tx.run(deposit_sql(deposit_no, "a".into(), 10)).await?;
    tokio::time::sleep(hold).await;
    Ok(deposit_no)
}

/// A transactional call dropped mid-body (a timeout) rolled back: nothing happened, so its
/// key is released at once (in the background), long before its 30 s lease, and a resend runs
/// the body, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transactional_call_rolls_back_and_frees_its_key() {
    let dir = TempDir::new("dropped-tx-call");
    let store = open_with_balances(&dir, 1);
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        held_deposit(&store, 14, Duration::from_secs(60)),
    )
    .await;
    assert!(dropped.is_err(), "timed out");
    assert_eq!(balance(&dir, "a"), 0, "rolled back");

    let deadline = Instant::now() + Duration::from_secs(5);
    let answer = loop {
        match held_deposit(&store, 14, Duration::ZERO).await {
            Err(IdempotencyError::InProgress) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => break other,
        }
    };
    assert_eq!(answer.unwrap(), 14);
    assert_eq!(balance(&dir, "a"), 10, "the deposit once");
    assert_eq!(count(&dir, "SELECT count(*) FROM ledger"), 1);
}

// ---- a claim its transaction holds (`begin_for`) ----

/// The process dies inside the handler's transaction: SQLite rolls it back, so nothing of the
/// call happened, and the resend claims the key at once instead of waiting out the lease.
/// (Dropping the transaction rolls back exactly as a dead process does; no flow is involved
/// to release the claim.)
#[tokio::test]
async fn a_transaction_that_ended_without_its_commit_frees_the_key_at_once() {
    let dir = TempDir::new("held-ended");
    let store = open_with_balances(&dir, 1);
    let long_lease = ClaimRequest {
        lease: Duration::from_secs(3_600),
        ..request("dep-21")
    };
    let first = claimed(store.claim(&long_lease).await);
    let mut tx = store.begin_for(&first).await.unwrap();
    tx.run(deposit_sql(21, "a".into(), 10)).await.unwrap();
    drop(tx);
    assert_eq!(balance(&dir, "a"), 0, "rolled back");

    // Reopened, as a restarted process would.
    drop(store);
    let store = SqliteStore::open(dir.inbox_db()).unwrap();
    let second = claimed(store.claim(&long_lease).await);
    assert_eq!(second.token, first.token + 1);
    let mut tx = store.begin_for(&second).await.unwrap();
    tx.run(deposit_sql(21, "a".into(), 10)).await.unwrap();
    store.commit_done(tx, &second, "21").await.unwrap();
    assert_eq!(
        store.claim(&long_lease).await.unwrap(),
        ClaimOutcome::Done("21".into())
    );
    assert_eq!(balance(&dir, "a"), 10, "the deposit once");
}

/// Until the transaction ends, nobody takes its claim over, lease or not; and a claim that
/// never asked for a transaction still waits out its lease.
#[tokio::test]
async fn a_claim_waits_out_its_lease_until_its_transaction_holds_it() {
    let dir = TempDir::new("held-lease");
    let clock = manual_clock();
    let store = open_with_balances(&dir, 1).with_clock(clock.clone());
    let first = claimed(store.claim(&request("dep-22")).await);
    assert_eq!(
        store.claim(&request("dep-22")).await.unwrap(),
        ClaimOutcome::InProgress,
        "no transaction yet: the lease holds the key"
    );
    let other = SqliteStore::open(dir.inbox_db())
        .unwrap()
        .with_clock(clock.clone())
        .with_busy_timeout(Duration::from_millis(100));
    let tx = store.begin_for(&first).await.unwrap();
    clock.advance(Duration::from_secs(11)); // past the 10 s lease
    let error = other.claim(&request("dep-22")).await.unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("is locked"),
        "{error}"
    );
    store.commit_done(tx, &first, "22").await.unwrap();
    assert_eq!(
        other.claim(&request("dep-22")).await.unwrap(),
        ClaimOutcome::Done("22".into())
    );
}

/// A claim taken over before its holder asked for the transaction: `begin_for` is refused,
/// before anything was written.
#[tokio::test]
async fn begin_for_a_claim_taken_over_is_fenced() {
    let dir = TempDir::new("held-fenced");
    let clock = manual_clock();
    let store = open_with_balances(&dir, 1).with_clock(clock.clone());
    let slow = claimed(store.claim(&request("dep-23")).await);
    clock.advance(Duration::from_secs(11));
    let fast = claimed(store.claim(&request("dep-23")).await);
    assert!(matches!(
        store.begin_for(&slow).await,
        Err(StoreError::Fenced)
    ));
    // The new holder is untouched: its lease holds the key, and its transaction works.
    assert_eq!(
        store.claim(&request("dep-23")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    let tx = store.begin_for(&fast).await.unwrap();
    store.commit_done(tx, &fast, "23").await.unwrap();
}

/// The lease of a claim its transaction holds is not renewed, and renewing it does not wait
/// for the transaction's write lock (which would fail after the busy timeout under a long
/// handler).
#[tokio::test]
async fn renewing_a_claim_its_transaction_holds_does_not_wait_for_its_lock() {
    let dir = TempDir::new("held-renew");
    let store = open_with_balances(&dir, 1).with_busy_timeout(Duration::from_millis(200));
    let claim = claimed(store.claim(&request("dep-24")).await);
    let tx = store.begin_for(&claim).await.unwrap();
    let started = Instant::now();
    store
        .renew(&claim, Duration::from_secs(10))
        .await
        .expect("held by its transaction: nothing to renew");
    assert!(
        started.elapsed() < Duration::from_millis(150),
        "waited {:?}",
        started.elapsed()
    );
    store.commit_done(tx, &claim, "24").await.unwrap();
}

// ---- the acceptance scenario ----

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        (self.next_u64() >> 11) % n
    }
}

/// A decision that depends only on the delivery and its attempt number, so it does not
/// depend on how the workers happen to interleave (and a redelivery may decide otherwise).
fn roll(seed: u64, delivery: usize, attempt: u32) -> u64 {
    let mut rng = Rng::new(
        seed ^ (delivery as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ u64::from(attempt).wrapping_mul(0xc2b2_ae3d_27d4_eb4f),
    );
    rng.next_u64();
    rng.below(100)
}

#[derive(Debug, Clone, Copy)]
struct Deposit {
    number: u64,
    account: usize,
    amount: i64,
}

#[derive(Debug)]
struct Delivery {
    id: usize,
    deposit: Deposit,
    attempt: u32,
}

#[derive(Debug, Default)]
struct Tally {
    committed: AtomicUsize,
    duplicates_done: AtomicUsize,
    in_progress: AtomicUsize,
    crashed_abandoned: AtomicUsize,
    crashed_left: AtomicUsize,
    fenced: AtomicUsize,
}

/// 50 accounts, 1,000 deposits, every deposit delivered 2 or 3 times in a shuffled order to 4
/// concurrent workers. A worker claims; on `Claimed` it begins, writes the deposit, and then
/// either "crashes" (5 %, seeded) — drops the transaction uncommitted and either abandons the
/// claim (as a dropped transactional `#[idempotent]` future does: its transaction rolled back,
/// so the claim is released in the background) or leaves it
/// for its lease to expire — or commits the response with `done`. `Done` is acked; `InProgress`
/// and crashes are redelivered later. Each `InProgress` moves the manual clock by a second, so
/// claims left by crashes expire (and, now and then, a slow holder is fenced: it rolls back and
/// is redelivered too). At the end every balance is exactly the sum of its deposits and there
/// are 1,000 done keys and 1,000 ledger rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acceptance_duplicated_shuffled_concurrent_deliveries_with_crashes_sum_exactly() {
    const SEED: u64 = 0x5eed_2026_0819;
    const ACCOUNTS: usize = 50;
    const DEPOSITS: u64 = 1_000;
    const WORKERS: usize = 4;

    let started = Instant::now();
    let dir = TempDir::new("acceptance");
    let clock = manual_clock();
    let store = Arc::new(open_with_balances(&dir, ACCOUNTS).with_clock(clock.clone()));

    let mut rng = Rng::new(SEED);
    let deposits: Vec<Deposit> = (1..=DEPOSITS)
        .map(|number| Deposit {
            number,
            account: usize::try_from(rng.below(ACCOUNTS as u64)).unwrap(),
            amount: i64::try_from(1 + rng.below(100)).unwrap(),
        })
        .collect();
    let mut expected: HashMap<String, i64> = (0..ACCOUNTS).map(|i| (account_name(i), 0)).collect();
    for deposit in &deposits {
        *expected.get_mut(&account_name(deposit.account)).unwrap() += deposit.amount;
    }
    let mut deliveries: Vec<Deposit> = Vec::new();
    for deposit in &deposits {
        for _ in 0..2 + rng.below(2) {
            deliveries.push(*deposit);
        }
    }
    for i in (1..deliveries.len()).rev() {
        let j = usize::try_from(rng.below(i as u64 + 1)).unwrap();
        deliveries.swap(i, j);
    }
    let total_deliveries = deliveries.len();
    let queue: Arc<Mutex<VecDeque<Delivery>>> = Arc::new(Mutex::new(
        deliveries
            .into_iter()
            .enumerate()
            .map(|(id, deposit)| Delivery {
                id,
                deposit,
                attempt: 0,
            })
            .collect(),
    ));
    let unacked = Arc::new(AtomicUsize::new(total_deliveries));
    let tally = Arc::new(Tally::default());

    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (store, clock, queue, unacked, tally) = (
                Arc::clone(&store),
                Arc::clone(&clock),
                Arc::clone(&queue),
                Arc::clone(&unacked),
                Arc::clone(&tally),
            );
            tokio::spawn(async move {
                loop {
                    let next = queue.lock().unwrap().pop_front();
                    let Some(mut delivery) = next else {
                        if unacked.load(Ordering::SeqCst) == 0 {
                            return;
                        }
                        // Others are in flight and may redeliver.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    };
                    let acked = deliver(&store, &clock, &tally, &delivery, SEED).await;
                    if acked {
                        unacked.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        delivery.attempt += 1;
                        assert!(delivery.attempt < 200, "delivery never acked: {delivery:?}");
                        queue.lock().unwrap().push_back(delivery);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }

    let raw = dir.raw();
    let mut balances = raw.prepare("SELECT account, amount FROM balances").unwrap();
    let actual: HashMap<String, i64> = balances
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        actual, expected,
        "every balance is the exact sum of its deposits"
    );
    assert_eq!(
        count(&dir, "SELECT count(*) FROM inbox_log WHERE status = 'done'"),
        1_000
    );
    assert_eq!(count(&dir, "SELECT count(*) FROM inbox_log"), 1_000);
    assert_eq!(count(&dir, "SELECT count(*) FROM ledger"), 1_000);
    assert_eq!(
        count(&dir, "SELECT count(DISTINCT deposit) FROM ledger"),
        1_000
    );
    // Every stored response is the one its deposit's handler wrote.
    let wrong = count(
        &dir,
        "SELECT count(*) FROM inbox_log JOIN ledger ON msg_id = 'deposit:' || deposit \
         WHERE response <> '{\"deposit\":' || deposit || '}'",
    );
    assert_eq!(wrong, 0);

    let t = &tally;
    let crashes =
        t.crashed_abandoned.load(Ordering::SeqCst) + t.crashed_left.load(Ordering::SeqCst);
    assert_eq!(t.committed.load(Ordering::SeqCst), 1_000);
    assert!(crashes > 0, "the scenario crashed nothing: {t:?}");
    assert_eq!(
        t.duplicates_done.load(Ordering::SeqCst),
        total_deliveries - 1_000,
        "every other delivery was acked as a duplicate: {t:?}"
    );
    eprintln!(
        "acceptance: {total_deliveries} deliveries, {t:?}, {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

/// One delivery of one deposit; returns whether it is acknowledged.
async fn deliver(
    store: &SqliteStore,
    clock: &ManualClock,
    tally: &Tally,
    delivery: &Delivery,
    seed: u64,
) -> bool {
    let deposit = delivery.deposit;
    let key = format!("deposit:{}", deposit.number);
    match store.claim(&request(&key)).await.unwrap() {
        ClaimOutcome::Claimed(claim) => {
            let mut tx = store.begin().await.unwrap();
            tx.run(deposit_sql(
                deposit.number,
                account_name(deposit.account),
                deposit.amount,
            ))
            .await
            .unwrap();
            let roll = roll(seed, delivery.id, delivery.attempt);
            if roll < 5 {
                // A crash after the business write: the transaction goes uncommitted.
                drop(tx);
                if roll < 3 {
                    // As a dropped transactional `#[idempotent]` future does: rolled back,
                    // so released in the background.
                    assert!(store.abandon(claim));
                    tally.crashed_abandoned.fetch_add(1, Ordering::SeqCst);
                } else {
                    // A killed process: the claim stays until its lease expires.
                    tally.crashed_left.fetch_add(1, Ordering::SeqCst);
                }
                return false;
            }
            let response = format!("{{\"deposit\":{}}}", deposit.number);
            match store.commit_done(tx, &claim, &response).await {
                Ok(()) => {
                    tally.committed.fetch_add(1, Ordering::SeqCst);
                    true
                }
                Err(StoreError::Fenced) => {
                    tally.fenced.fetch_add(1, Ordering::SeqCst);
                    false
                }
                Err(e) => panic!("commit failed: {e}"),
            }
        }
        ClaimOutcome::Done(response) => {
            assert_eq!(response, format!("{{\"deposit\":{}}}", deposit.number));
            tally.duplicates_done.fetch_add(1, Ordering::SeqCst);
            true
        }
        ClaimOutcome::InProgress => {
            // Time passes while the delivery waits to be redelivered.
            clock.advance(Duration::from_secs(1));
            tally.in_progress.fetch_add(1, Ordering::SeqCst);
            false
        }
        other => panic!("unexpected {other:?} for {key}"),
    }
}

// ---- batch rerun ----

/// A batch of 10,000 messages stops half-way: 5,000 done through the transactional path, and
/// the next one crashed after its business write (its transaction rolled back, its claim left
/// to its lease). After a restart (the lease has passed) the whole batch is rerun: exactly
/// 10,000 side effects, every key done.
#[tokio::test]
async fn a_batch_rerun_after_a_crash_half_way_repeats_no_side_effect() {
    const MESSAGES: usize = 10_000;
    let dir = TempDir::new("rerun");
    let clock = manual_clock();
    // NORMAL: 15,000 transactions with an `fsync` each take a shared CI machine most of a
    // minute, and surviving a power cut is not what this test checks.
    let store = SqliteStore::open(dir.inbox_db())
        .unwrap()
        .with_synchronous_full(false)
        .with_clock(clock.clone());
    dir.raw()
        .execute_batch("CREATE TABLE effects (msg INTEGER NOT NULL)")
        .unwrap();
    let keys: Vec<String> = (0..MESSAGES).map(|i| format!("batch-7:{i}")).collect();

    let process = async |i: usize, crash: bool| -> bool {
        let claim = match store.claim(&request(&keys[i])).await.unwrap() {
            ClaimOutcome::Claimed(claim) => claim,
            ClaimOutcome::Done(_) => return false,
            other => panic!("unexpected {other:?}"),
        };
        let mut tx = store.begin().await.unwrap();
        let msg = i64::try_from(i).unwrap();
        tx.run(move |c| c.execute("INSERT INTO effects (msg) VALUES (?1)", [msg]))
            .await
            .unwrap();
        if crash {
            drop(tx);
            return false;
        }
        store.commit_done(tx, &claim, "\"ok\"").await.unwrap();
        true
    };

    let first_run = Instant::now();
    for i in 0..MESSAGES / 2 {
        assert!(process(i, false).await);
    }
    assert!(!process(MESSAGES / 2, true).await, "crashed");
    let first_run = first_run.elapsed();
    assert_eq!(count(&dir, "SELECT count(*) FROM effects"), 5_000);

    clock.advance(Duration::from_secs(11)); // the restart took longer than the lease
    let rerun = Instant::now();
    let mut ran = 0;
    for i in 0..MESSAGES {
        if process(i, false).await {
            ran += 1;
        }
    }
    let rerun = rerun.elapsed();
    assert_eq!(ran, 5_000);
    assert_eq!(count(&dir, "SELECT count(*) FROM effects"), 10_000);
    assert_eq!(
        count(&dir, "SELECT count(DISTINCT msg) FROM effects"),
        10_000
    );
    assert_eq!(
        count(&dir, "SELECT count(*) FROM inbox_log WHERE status = 'done'"),
        10_000
    );
    eprintln!("batch: first run (5,000 transactional) {first_run:?}, rerun of 10,000 {rerun:?}");
}

// ---- the claim inside the handler's transaction (`claim_in_transaction`): one commit ----

use retry_core::idempotency::{ClaimedTransaction, TransactionClaim};

/// The commits in the file's write-ahead log since it was last reset: frames whose header
/// carries the database size after a commit (non-zero) and the log's current salts. A commit
/// of any connection, of this process or another, shows there.
fn wal_commits(dir: &TempDir) -> usize {
    let mut wal = dir.inbox_db().into_os_string();
    wal.push("-wal");
    let Ok(bytes) = std::fs::read(&wal) else {
        return 0;
    };
    if bytes.len() < 32 {
        return 0;
    }
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let page_size = word(8) as usize;
    let salts = &bytes[16..24];
    let mut commits = 0;
    let mut at = 32;
    while at + 24 + page_size <= bytes.len() {
        if &bytes[at + 8..at + 16] != salts {
            break;
        }
        if word(at + 4) != 0 {
            commits += 1;
        }
        at += 24 + page_size;
    }
    commits
}

fn claimed_in(
    outcome: Result<TransactionClaim<SqliteTransaction>, StoreError>,
) -> ClaimedTransaction<SqliteTransaction> {
    match outcome {
        Ok(TransactionClaim::Claimed(claimed)) => claimed,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn ledger_rows(dir: &TempDir) -> i64 {
    dir.raw()
        .query_row("SELECT count(*) FROM ledger", [], |row| row.get(0))
        .unwrap()
}

/// The claim, the handler's write and the stored response commit once: one commit frame in
/// the log per request (the claim committed on its own, then `begin_for`'s mark, made three).
#[tokio::test]
async fn a_request_claimed_in_its_transaction_commits_once() {
    let dir = TempDir::new("one-commit");
    let store = open_with_balances(&dir, 1);
    for i in 0..5 {
        let key = format!("k{i}");
        let before = wal_commits(&dir);
        let mut call = claimed_in(store.claim_in_transaction(&request(&key)).await);
        assert!(call.in_transaction);
        call.transaction
            .run(|c| c.execute("INSERT INTO ledger VALUES (1, 'a', 10)", []))
            .await
            .unwrap();
        store
            .commit_done(call.transaction, &call.claim, "\"ok\"")
            .await
            .unwrap();
        assert_eq!(wal_commits(&dir) - before, 1, "request {i}");
    }
    // The helper counts what it should: the old path commits three times.
    let before = wal_commits(&dir);
    let claim = claimed(store.claim(&request("old")).await);
    let tx = store.begin_for(&claim).await.unwrap();
    store.commit_done(tx, &claim, "\"ok\"").await.unwrap();
    assert_eq!(wal_commits(&dir) - before, 3);
}

/// Rolled back or dropped (a crash), the transaction leaves nothing: the next claim gets the
/// key at once, as a first claim (token 1), and nothing of the first call's writes is there.
#[tokio::test]
async fn a_claim_whose_transaction_rolled_back_leaves_the_key_free_at_once() {
    let dir = TempDir::new("claim-in-tx-rollback");
    let store = open_with_balances(&dir, 1);
    let hour = ClaimRequest {
        lease: Duration::from_secs(3_600),
        ..request("k")
    };
    let mut first = claimed_in(store.claim_in_transaction(&hour).await);
    first
        .transaction
        .run(|c| c.execute("INSERT INTO ledger VALUES (1, 'a', 10)", []))
        .await
        .unwrap();
    store.rollback(first.transaction).await.unwrap();
    let mut second = claimed_in(store.claim_in_transaction(&hour).await);
    assert_eq!(second.claim.token, 1, "no row was ever committed");
    second
        .transaction
        .run(|c| c.execute("INSERT INTO ledger VALUES (1, 'a', 10)", []))
        .await
        .unwrap();
    drop(second); // the process dies before its commit
    let third = claimed_in(store.claim_in_transaction(&hour).await);
    assert_eq!(third.claim.token, 1);
    store
        .commit_done(third.transaction, &third.claim, "3")
        .await
        .unwrap();
    assert_eq!(ledger_rows(&dir), 0);
    assert_eq!(
        store.claim(&hour).await.unwrap(),
        ClaimOutcome::Done("3".into())
    );
}

/// A duplicate arriving while the first call's transaction is open waits for the file's write
/// lock and then replays the committed response; the write happened once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_during_the_transaction_waits_then_replays() {
    let dir = TempDir::new("claim-in-tx-duplicate");
    let store = Arc::new(open_with_balances(&dir, 1));
    let mut first = claimed_in(store.claim_in_transaction(&request("k")).await);
    first
        .transaction
        .run(|c| c.execute("INSERT INTO ledger VALUES (1, 'a', 10)", []))
        .await
        .unwrap();
    let duplicate = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            let started = Instant::now();
            let outcome = store.claim_in_transaction(&request("k")).await;
            (outcome, started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!duplicate.is_finished(), "the duplicate waits for the lock");
    store
        .commit_done(first.transaction, &first.claim, "\"first\"")
        .await
        .unwrap();
    let (outcome, waited) = duplicate.await.unwrap();
    assert!(
        matches!(&outcome, Ok(TransactionClaim::Refused(ClaimOutcome::Done(r))) if r == "\"first\""),
        "{outcome:?}"
    );
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    assert_eq!(ledger_rows(&dir), 1, "the write once");
}

/// A key the old `begin_for` path marked, whose transaction ended without its commit, is taken
/// over at once, inside the new transaction.
#[tokio::test]
async fn a_begin_for_mark_whose_transaction_ended_is_taken_over_in_the_transaction() {
    let dir = TempDir::new("claim-in-tx-mark");
    let store = open_with_balances(&dir, 1);
    let hour = ClaimRequest {
        lease: Duration::from_secs(3_600),
        ..request("k")
    };
    let old = claimed(store.claim(&hour).await);
    drop(store.begin_for(&old).await.unwrap());
    let taken = claimed_in(store.claim_in_transaction(&hour).await);
    assert_eq!(taken.claim.token, old.token + 1);
    store
        .commit_done(taken.transaction, &taken.claim, "1")
        .await
        .unwrap();
    // A live lease of the non-transactional mode is still `InProgress`.
    let held = claimed(store.claim(&ClaimRequest { ..request("m") }).await);
    assert!(matches!(
        store.claim_in_transaction(&request("m")).await,
        Ok(TransactionClaim::Refused(ClaimOutcome::InProgress))
    ));
    store.complete(&held, "2").await.unwrap();
}

// ---- group commit: concurrent claims in transactions share one commit ----

/// A first call holding the store's writer permit, with its ledger write done, and a second
/// claim (`second`) already queued behind it for the permit.
async fn a_claim_with_one_queued_behind(
    store: &Arc<SqliteStore>,
    first: &'static str,
    second: &'static str,
) -> (
    ClaimedTransaction<SqliteTransaction>,
    tokio::task::JoinHandle<Result<TransactionClaim<SqliteTransaction>, StoreError>>,
) {
    let mut call = claimed_in(store.claim_in_transaction(&request(first)).await);
    call.transaction
        .run(|c| c.execute("INSERT INTO ledger VALUES (1, 'a', 10)", []))
        .await
        .unwrap();
    let queued = tokio::spawn({
        let store = Arc::clone(store);
        async move { store.claim_in_transaction(&request(second)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !queued.is_finished(),
        "the second claim waits for the writer permit"
    );
    (call, queued)
}

/// `commit_done` of `call` in a task of its own: it answers once the shared commit is made.
fn commit_in_background(
    store: &Arc<SqliteStore>,
    call: ClaimedTransaction<SqliteTransaction>,
    response: &'static str,
) -> tokio::task::JoinHandle<Result<(), StoreError>> {
    let store = Arc::clone(store);
    tokio::spawn(async move {
        store
            .commit_done(call.transaction, &call.claim, response)
            .await
    })
}

/// A call that finishes while another claim waits leaves its transaction open for it: the
/// second request joins, and both commit with one commit frame. The first is answered only
/// after that commit, and nothing of it is visible before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_waiting_for_the_lock_share_one_commit() {
    two_requests_share_one_commit("group-commit").await;
}

/// The same on a current-thread runtime (`#[tokio::main(flavor = "current_thread")]`, and
/// `#[tokio::test]`), where the store's steps run on the blocking pool instead of in place.
#[tokio::test]
async fn claims_waiting_for_the_lock_share_one_commit_on_a_current_thread_runtime() {
    two_requests_share_one_commit("group-commit-current-thread").await;
}

async fn two_requests_share_one_commit(test: &str) {
    let dir = TempDir::new(test);
    let store = Arc::new(open_with_balances(&dir, 1));
    let before = wal_commits(&dir);
    let (first, queued) = a_claim_with_one_queued_behind(&store, "k1", "k2").await;
    let first_done = commit_in_background(&store, first, "\"one\"");
    let mut second = claimed_in(queued.await.unwrap());
    assert!(
        !first_done.is_finished(),
        "answered only after the shared commit"
    );
    assert_eq!(ledger_rows(&dir), 0, "nothing is committed yet");
    second
        .transaction
        .run(|c| c.execute("INSERT INTO ledger VALUES (2, 'a', 10)", []))
        .await
        .unwrap();
    store
        .commit_done(second.transaction, &second.claim, "\"two\"")
        .await
        .unwrap();
    first_done.await.unwrap().unwrap();
    assert_eq!(
        wal_commits(&dir) - before,
        1,
        "one commit for both requests"
    );
    assert_eq!(ledger_rows(&dir), 2);
    for (key, response) in [("k1", "\"one\""), ("k2", "\"two\"")] {
        assert_eq!(
            store.claim(&request(key)).await.unwrap(),
            ClaimOutcome::Done(response.into())
        );
    }
}

/// The request that joined fails (rolled back) or dies (dropped) before its commit: only its
/// own claim and writes go, its key is free at once, and the first request's writes commit
/// (by a task: the first's own answer was dropped too, as a client that hung up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_fails_or_dies_leaves_the_others_to_commit() {
    for drop_it in [false, true] {
        let dir = TempDir::new("group-member-fails");
        let store = Arc::new(open_with_balances(&dir, 1));
        let (first, queued) = a_claim_with_one_queued_behind(&store, "k1", "k2").await;
        let first_done = commit_in_background(&store, first, "\"one\"");
        let mut second = claimed_in(queued.await.unwrap());
        first_done.abort();
        second
            .transaction
            .run(|c| c.execute("INSERT INTO ledger VALUES (2, 'a', 10)", []))
            .await
            .unwrap();
        if drop_it {
            drop(second);
        } else {
            store.rollback(second.transaction).await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.claim(&request("k1")).await.unwrap() != ClaimOutcome::Done("\"one\"".into()) {
            assert!(
                Instant::now() < deadline,
                "the first request's writes never committed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            dir.raw()
                .query_row("SELECT deposit FROM ledger", [], |row| row.get::<_, i64>(0))
                .unwrap(),
            1,
            "only the first request's write (dropped: {drop_it})"
        );
        let again = claimed(store.claim(&request("k2")).await);
        assert_eq!(again.token, 1, "the second key was never committed");
    }
}

/// A request whose SQL ends the shared transaction (its own `ROLLBACK`) takes the others'
/// uncommitted writes with it: every member is told its commit failed, and their keys are free,
/// since nothing of them happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_ends_the_shared_transaction_fails_every_member() {
    let dir = TempDir::new("group-ended");
    let store = Arc::new(open_with_balances(&dir, 1));
    let (first, queued) = a_claim_with_one_queued_behind(&store, "k1", "k2").await;
    let first_done = commit_in_background(&store, first, "\"one\"");
    let mut second = claimed_in(queued.await.unwrap());
    assert!(
        second
            .transaction
            .run(|c| c.execute_batch("ROLLBACK"))
            .await
            .is_err()
    );
    let error = first_done.await.unwrap().unwrap_err();
    let why = retry_core::error_chain(&error).to_string();
    assert!(why.contains("did not commit"), "{why}");
    assert!(
        store
            .commit_done(second.transaction, &second.claim, "\"two\"")
            .await
            .is_err()
    );
    assert_eq!(ledger_rows(&dir), 0);
    for key in ["k1", "k2"] {
        assert_eq!(
            claimed(store.claim(&request(key)).await).token,
            1,
            "{key} is free"
        );
    }
}
