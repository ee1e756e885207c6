//! `#[idempotent(transaction = tx)]` on PostgreSQL: the business write and the `done` row commit
//! together. Deliveries repeat, arrive out of order and crash between the write and the commit;
//! every balance still ends exactly right, and a batch rerun repeats no effect.
#![cfg(feature = "postgres")]

use crate::pg;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pg::Schema;
use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, StoreError,
    TransactionalStore, encode_namespaced_key,
};
use retry_core::idempotent;
use retry_postgres::{PgStore, PgTransaction};

#[derive(Debug)]
enum Rejected {
    Idempotency(IdempotencyError),
    Db(#[allow(dead_code, reason = "read through Debug when a test fails")] tokio_postgres::Error),
}

impl From<IdempotencyError> for Rejected {
    fn from(e: IdempotencyError) -> Self {
        Rejected::Idempotency(e)
    }
}

impl From<tokio_postgres::Error> for Rejected {
    fn from(e: tokio_postgres::Error) -> Self {
        Rejected::Db(e)
    }
}

impl From<StoreError> for Rejected {
    fn from(e: StoreError) -> Self {
        Rejected::Idempotency(IdempotencyError::Store(e))
    }
}

#[idempotent(key = deposit_no, store = inbox, transaction = tx, lease = "5s")]
async fn deposit(
    inbox: &PgStore,
    tx: &mut PgTransaction,
    deposit_no: u64,
    account: i32,
    amount: i64,
    crash: bool,
) -> Result<i64, Rejected> {
    tx.client()
        .execute(
            "UPDATE balances SET amount = amount + $1 WHERE account = $2",
            &[&amount, &account],
        )
        .await?;
    tx.client()
        .execute(
            "INSERT INTO effects (deposit_no) VALUES ($1)",
            &[&(deposit_no as i64)],
        )
        .await?;
    if crash {
        // The process dies between the business write and the commit: the caller drops us here.
        std::future::pending::<()>().await;
    }
    Ok(amount)
}

/// A small seeded generator: the test is the same every run.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

async fn setup(test: &str, accounts: i32) -> (Schema, Arc<PgStore>, tokio_postgres::Client) {
    let schema = Schema::new(test).await;
    let client = schema.client().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE balances (account INT PRIMARY KEY, amount BIGINT NOT NULL);
             INSERT INTO balances SELECT a, 0 FROM generate_series(0, {}) a;
             CREATE TABLE effects (deposit_no BIGINT NOT NULL);",
            accounts - 1
        ))
        .await
        .unwrap();
    let store = Arc::new(schema.store().await.with_pool_size(4));
    (schema, store, client)
}

#[derive(Clone, Copy)]
struct Delivery {
    deposit_no: u64,
    account: i32,
    amount: i64,
    crash: bool,
}

/// Works through `queue` with `workers` concurrent consumers, acknowledging a delivery only when
/// the call returned its response; crashed and in-progress deliveries are redelivered.
async fn consume(store: &Arc<PgStore>, queue: VecDeque<Delivery>, workers: usize) -> u32 {
    let queue = Arc::new(Mutex::new(queue));
    let crashes = Arc::new(Mutex::new(0u32));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (store, queue, crashes) = (store.clone(), queue.clone(), crashes.clone());
            tokio::spawn(async move {
                loop {
                    let Some(d) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let call = deposit(&store, d.deposit_no, d.account, d.amount, d.crash);
                    match tokio::time::timeout(Duration::from_millis(50), call).await {
                        Ok(Ok(amount)) => assert_eq!(amount, d.amount),
                        Ok(Err(Rejected::Idempotency(IdempotencyError::InProgress))) | Err(_) => {
                            if d.crash {
                                *crashes.lock().unwrap() += 1;
                            }
                            // Redelivered later, and without the crash this time.
                            queue
                                .lock()
                                .unwrap()
                                .push_back(Delivery { crash: false, ..d });
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Ok(Err(other)) => panic!("deposit {}: {other:?}", d.deposit_no),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    *crashes.lock().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivered_shuffled_and_crashing_deposits_leave_every_balance_exact() {
    const ACCOUNTS: i32 = 50;
    const DEPOSITS: u64 = 1_000;
    let (schema, store, client) = setup("balances", ACCOUNTS).await;
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut expected = vec![0i64; ACCOUNTS as usize];
    let mut deliveries = Vec::new();
    for deposit_no in 0..DEPOSITS {
        let account = rng.below(ACCOUNTS as u64) as i32;
        let amount = 1 + rng.below(100) as i64;
        expected[account as usize] += amount;
        for _ in 0..2 + rng.below(2) {
            deliveries.push(Delivery {
                deposit_no,
                account,
                amount,
                crash: false,
            });
        }
    }
    for i in (1..deliveries.len()).rev() {
        deliveries.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for d in &mut deliveries {
        d.crash = rng.below(100) < 5;
    }
    let crashes = consume(&store, deliveries.into(), 4).await;
    assert!(crashes > 50, "the crash injection ran: {crashes}");

    let rows = client
        .query("SELECT account, amount FROM balances ORDER BY account", &[])
        .await
        .unwrap();
    let balances: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(balances, expected, "every balance exactly right");
    let effects: i64 = client
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(effects, DEPOSITS as i64, "one committed effect per deposit");
    let done: i64 = client
        .query_one("SELECT count(*) FROM inbox_log WHERE status = 'done'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(done, DEPOSITS as i64);
    drop(client);
    schema.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_rerun_whole_after_stopping_half_way_repeats_no_effect() {
    const MESSAGES: u64 = 10_000;
    let (schema, store, client) = setup("rerun", 10).await;
    let batch = |range: std::ops::Range<u64>| -> VecDeque<Delivery> {
        range
            .map(|n| Delivery {
                deposit_no: n,
                account: (n % 10) as i32,
                amount: 1,
                crash: false,
            })
            .collect()
    };
    consume(&store, batch(0..MESSAGES / 2), 4).await;
    consume(&store, batch(0..MESSAGES), 4).await;
    let effects: i64 = client
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(effects, MESSAGES as i64);
    let total: i64 = client
        .query_one("SELECT sum(amount)::BIGINT FROM balances", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, MESSAGES as i64);
    drop(client);
    schema.drop_all().await;
}

#[idempotent(key = deposit_no, store = inbox, transaction = tx, lease = "300ms")]
async fn slow_deposit(
    inbox: &PgStore,
    tx: &mut PgTransaction,
    deposit_no: u64,
) -> Result<u64, Rejected> {
    tx.client()
        .execute(
            "INSERT INTO effects (deposit_no) VALUES ($1)",
            &[&(deposit_no as i64)],
        )
        .await?;
    // Longer than the lease: the flow renews it (on another connection) while this runs.
    tokio::time::sleep(Duration::from_millis(700)).await;
    Ok(deposit_no)
}

/// On a server whose sessions default to REPEATABLE READ, a body slower than its lease still
/// commits with its `done` row. Its transaction, not the lease, holds the key meanwhile (no
/// renewal touches the row): a duplicate after the lease ran out is told `InProgress` at once,
/// and after the commit gets the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_its_lease_commits_under_a_repeatable_read_default() {
    let (schema, _, client) = setup("slow_rr", 1).await;
    let url = format!(
        "{}%20-c%20default_transaction_isolation%3Drepeatable%5C%20read",
        schema.url
    );
    let store = Arc::new(PgStore::connect(&url).await.unwrap());
    let first = tokio::spawn({
        let store = Arc::clone(&store);
        async move { slow_deposit(&store, 7).await }
    });
    tokio::time::sleep(Duration::from_millis(450)).await; // past the 300 ms lease
    let started = std::time::Instant::now();
    let duplicate = slow_deposit(&store, 7).await;
    assert!(
        matches!(
            duplicate,
            Err(Rejected::Idempotency(IdempotencyError::InProgress))
        ),
        "{duplicate:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "the duplicate waited {:?} for the handler",
        started.elapsed()
    );
    assert_eq!(first.await.unwrap().unwrap(), 7);
    // Keys made by `#[idempotent]` are namespaced by the function's name.
    let key: String = client
        .query_one("SELECT msg_id FROM inbox_log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        key,
        encode_namespaced_key("slow_deposit", None::<&str>, &7u64)
    );
    // A duplicate gets the response without running the body again.
    assert_eq!(slow_deposit(&store, 7).await.unwrap(), 7);
    let effects: i64 = client
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(effects, 1);
    drop(client);
    drop(store);
    schema.drop_all().await;
}

// ---- a claim its transaction holds (`begin_for`) ----

fn request(key: &str, lease: Duration) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease,
        retention: Duration::from_secs(86_400),
    }
}

fn claimed(outcome: Result<ClaimOutcome, StoreError>) -> Claim {
    match outcome {
        Ok(ClaimOutcome::Claimed(claim)) => claim,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn effects(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0)
}

/// The handler's connection is lost inside its transaction (its process died): the server
/// rolls back, nothing of the call happened, and the resend claims the key at once, long before
/// the hour-long lease.
#[tokio::test]
async fn a_transaction_that_ended_without_its_commit_frees_the_key_at_once() {
    let (schema, store, client) = setup("held_ended", 1).await;
    let hour = Duration::from_secs(3_600);
    let first = claimed(store.claim(&request("dep-1", hour)).await);
    let tx = store.begin_for(&first).await.unwrap();
    tx.client()
        .execute("INSERT INTO effects (deposit_no) VALUES (1)", &[])
        .await
        .unwrap();
    drop(tx); // the connection is closed; the server rolls back when it notices
    // The server notices the closed connection a moment later: until then its lock holds the
    // key, and a claim is told `InProgress`.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let second = loop {
        match store.claim(&request("dep-1", hour)).await.unwrap() {
            ClaimOutcome::InProgress if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => break claimed(Ok(other)),
        }
    };
    assert_eq!(second.token, first.token + 1);
    assert_eq!(effects(&client).await, 0, "rolled back");
    let tx = store.begin_for(&second).await.unwrap();
    tx.client()
        .execute("INSERT INTO effects (deposit_no) VALUES (1)", &[])
        .await
        .unwrap();
    store.commit_done(tx, &second, "1").await.unwrap();
    assert_eq!(
        store.claim(&request("dep-1", hour)).await.unwrap(),
        ClaimOutcome::Done("1".into())
    );
    assert_eq!(effects(&client).await, 1, "the deposit once");
    drop(client);
    schema.drop_all().await;
}

/// Before the handler asks for its transaction the lease holds the key; once the transaction
/// holds it, a claim past the lease is told `InProgress` at once (it does not wait for the
/// handler), and the renewal neither waits for the row's lock nor is refused.
#[tokio::test]
async fn a_live_transaction_keeps_its_key_past_the_lease_without_making_duplicates_wait() {
    let (schema, store, client) = setup("held_live", 1).await;
    let lease = Duration::from_millis(300);
    let first = claimed(store.claim(&request("dep-2", lease)).await);
    assert_eq!(
        store.claim(&request("dep-2", lease)).await.unwrap(),
        ClaimOutcome::InProgress
    );
    let tx = store.begin_for(&first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // past the lease
    let started = std::time::Instant::now();
    assert_eq!(
        store.claim(&request("dep-2", lease)).await.unwrap(),
        ClaimOutcome::InProgress
    );
    store
        .renew(&first, lease)
        .await
        .expect("held: nothing to renew");
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "waited {:?} for the handler's lock",
        started.elapsed()
    );
    store.commit_done(tx, &first, "2").await.unwrap();
    assert_eq!(
        store.claim(&request("dep-2", lease)).await.unwrap(),
        ClaimOutcome::Done("2".into())
    );
    drop(client);
    schema.drop_all().await;
}

/// A claim taken over before its holder asked for the transaction: `begin_for` is refused
/// before anything was written, and the new holder is untouched.
#[tokio::test]
async fn begin_for_a_claim_taken_over_is_fenced() {
    let (schema, store, client) = setup("held_fenced", 1).await;
    let lease = Duration::from_millis(100);
    let slow = claimed(store.claim(&request("dep-3", lease)).await);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let fast = claimed(
        store
            .claim(&request("dep-3", Duration::from_secs(60)))
            .await,
    );
    assert!(matches!(
        store.begin_for(&slow).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(
        store.claim(&request("dep-3", lease)).await.unwrap(),
        ClaimOutcome::InProgress
    );
    let tx = store.begin_for(&fast).await.unwrap();
    store.commit_done(tx, &fast, "3").await.unwrap();
    drop(client);
    schema.drop_all().await;
}

/// A database whose `inbox_log` has the version-1 layout (no `in_transaction`, times as text)
/// is upgraded when a store connects: its claims kept, the version recorded.
#[tokio::test]
async fn a_version_1_table_is_upgraded_and_keeps_its_claims() {
    let schema = Schema::new("held_upgrade").await;
    let client = schema.client().await;
    client
        .batch_execute(
            "CREATE TABLE retry_core_schema (component TEXT PRIMARY KEY, version INT NOT NULL);
             INSERT INTO retry_core_schema VALUES ('inbox_log', 1);
             CREATE TABLE inbox_log (msg_id TEXT NOT NULL PRIMARY KEY, biz_key TEXT NOT NULL,
               status TEXT NOT NULL CHECK (status IN ('in_progress', 'done', 'failed', 'released')),
               response TEXT, created_at TEXT COLLATE \"C\" NOT NULL, fingerprint TEXT,
               token BIGINT NOT NULL, lease_until TEXT COLLATE \"C\" NOT NULL,
               expires_at TEXT COLLATE \"C\" NOT NULL);
             INSERT INTO inbox_log VALUES ('kept', 'kept', 'done', '\"kept\"',
               '2026-01-01T00:00:00.000000Z', NULL, 1, '2026-01-01T00:00:10.000000Z',
               '2100-01-01T00:00:00.000000Z');",
        )
        .await
        .unwrap();
    let store = schema.store().await;
    let version: i32 = client
        .query_one(
            "SELECT version FROM retry_core_schema WHERE component = 'inbox_log'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 4);
    assert_eq!(
        store
            .claim(&request("kept", Duration::from_secs(10)))
            .await
            .unwrap(),
        ClaimOutcome::Done("\"kept\"".into())
    );
    let claim = claimed(store.claim(&request("new", Duration::from_secs(10))).await);
    let tx = store.begin_for(&claim).await.unwrap();
    store.commit_done(tx, &claim, "1").await.unwrap();
    drop((client, store));
    schema.drop_all().await;
}

// ---- the claim inside the handler's transaction (`claim_in_transaction`): one commit ----

use retry_core::idempotency::{ClaimedTransaction, TransactionClaim};

fn claimed_in(
    outcome: Result<TransactionClaim<PgTransaction>, StoreError>,
) -> ClaimedTransaction<PgTransaction> {
    match outcome {
        Ok(TransactionClaim::Claimed(claimed)) => claimed,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Records the transaction id of every write to `inbox_log` and `effects`: the commits a
/// request made are the distinct ids it left.
async fn record_writers(client: &tokio_postgres::Client) {
    client
        .batch_execute(
            "CREATE TABLE writers (txid BIGINT NOT NULL, what TEXT NOT NULL);
             CREATE FUNCTION record_writer() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO writers VALUES (txid_current(), TG_TABLE_NAME); RETURN NULL; END $$;
             CREATE TRIGGER inbox_writer AFTER INSERT OR UPDATE ON inbox_log
                 FOR EACH ROW EXECUTE FUNCTION record_writer();
             CREATE TRIGGER effect_writer AFTER INSERT ON effects
                 FOR EACH ROW EXECUTE FUNCTION record_writer();",
        )
        .await
        .unwrap();
}

async fn writer_transactions(client: &tokio_postgres::Client) -> i64 {
    let n = client
        .query_one("SELECT count(DISTINCT txid) FROM writers", &[])
        .await
        .unwrap()
        .get(0);
    client.execute("DELETE FROM writers", &[]).await.unwrap();
    n
}

/// The claim, the handler's write and the stored response are written by one transaction (one
/// commit); the old path (`claim`, then `begin_for`) wrote them in three.
#[tokio::test]
async fn a_request_claimed_in_its_transaction_commits_once() {
    let (schema, store, client) = setup("in_tx_once", 1).await;
    record_writers(&client).await;
    let hour = Duration::from_secs(3_600);
    for i in 0..5 {
        let key = format!("once-{i}");
        let call = claimed_in(store.claim_in_transaction(&request(&key, hour)).await);
        assert!(call.in_transaction);
        call.transaction
            .client()
            .execute(
                "INSERT INTO effects (deposit_no) VALUES ($1)",
                &[&i64::from(i)],
            )
            .await
            .unwrap();
        store
            .commit_done(call.transaction, &call.claim, "1")
            .await
            .unwrap();
        assert_eq!(writer_transactions(&client).await, 1, "request {i}");
    }
    let old = claimed(store.claim(&request("old", hour)).await);
    let tx = store.begin_for(&old).await.unwrap();
    store.commit_done(tx, &old, "1").await.unwrap();
    assert_eq!(writer_transactions(&client).await, 3, "the old path");
    drop(client);
    schema.drop_all().await;
}

/// Rolled back, the key is free at once (a first claim again); dropped (the connection closed,
/// as when the process dies) it is free as soon as the server has rolled back; committed, a
/// duplicate replays and the write is there once.
#[tokio::test]
async fn a_claim_in_a_transaction_that_did_not_commit_leaves_the_key_free() {
    let (schema, store, client) = setup("in_tx_rollback", 1).await;
    let hour = Duration::from_secs(3_600);
    let insert = "INSERT INTO effects (deposit_no) VALUES (1)";
    let first = claimed_in(store.claim_in_transaction(&request("dep", hour)).await);
    first
        .transaction
        .client()
        .execute(insert, &[])
        .await
        .unwrap();
    store.rollback(first.transaction).await.unwrap();
    let second = claimed_in(store.claim_in_transaction(&request("dep", hour)).await);
    assert_eq!(second.claim.token, 1, "no row was ever committed");
    second
        .transaction
        .client()
        .execute(insert, &[])
        .await
        .unwrap();
    drop(second);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let third = loop {
        match store
            .claim_in_transaction(&request("dep", hour))
            .await
            .unwrap()
        {
            TransactionClaim::Refused(ClaimOutcome::InProgress)
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => break claimed_in(Ok(other)),
        }
    };
    assert_eq!(third.claim.token, 1);
    assert_eq!(effects(&client).await, 0, "rolled back");
    third
        .transaction
        .client()
        .execute(insert, &[])
        .await
        .unwrap();
    store
        .commit_done(third.transaction, &third.claim, "\"done\"")
        .await
        .unwrap();
    assert!(matches!(
        store.claim_in_transaction(&request("dep", hour)).await,
        Ok(TransactionClaim::Refused(ClaimOutcome::Done(r))) if r == "\"done\""
    ));
    assert_eq!(
        store.claim(&request("dep", hour)).await.unwrap(),
        ClaimOutcome::Done("\"done\"".into())
    );
    assert_eq!(effects(&client).await, 1, "the write once");
    drop(client);
    schema.drop_all().await;
}

/// A duplicate while the first call's transaction is open is told `InProgress` at once (the
/// key's lock is not waited for), whatever the lease; after the commit it replays.
#[tokio::test]
async fn a_duplicate_during_the_transaction_is_in_progress_without_waiting() {
    let (schema, store, client) = setup("in_tx_duplicate", 1).await;
    let lease = Duration::from_millis(100);
    let first = claimed_in(store.claim_in_transaction(&request("dup", lease)).await);
    tokio::time::sleep(Duration::from_millis(200)).await; // past the lease
    let started = std::time::Instant::now();
    assert!(matches!(
        store.claim_in_transaction(&request("dup", lease)).await,
        Ok(TransactionClaim::Refused(ClaimOutcome::InProgress))
    ));
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "waited {:?}",
        started.elapsed()
    );
    store
        .commit_done(first.transaction, &first.claim, "7")
        .await
        .unwrap();
    assert!(matches!(
        store.claim_in_transaction(&request("dup", lease)).await,
        Ok(TransactionClaim::Refused(ClaimOutcome::Done(r))) if r == "7"
    ));
    drop(client);
    schema.drop_all().await;
}

/// The rules of `claim` hold inside the transaction: a live lease of the non-transactional mode
/// is `InProgress`; a `begin_for` mark whose transaction is gone is taken over at once.
#[tokio::test]
async fn the_claim_rules_hold_inside_the_transaction() {
    let (schema, store, client) = setup("in_tx_rules", 1).await;
    let hour = Duration::from_secs(3_600);
    let leased = claimed(store.claim(&request("leased", hour)).await);
    assert!(matches!(
        store.claim_in_transaction(&request("leased", hour)).await,
        Ok(TransactionClaim::Refused(ClaimOutcome::InProgress))
    ));
    store.complete(&leased, "1").await.unwrap();

    let marked = claimed(store.claim(&request("marked", hour)).await);
    let tx = store.begin_for(&marked).await.unwrap();
    store.rollback(tx).await.unwrap();
    let taken = claimed_in(store.claim_in_transaction(&request("marked", hour)).await);
    assert_eq!(taken.claim.token, marked.token + 1);
    store
        .commit_done(taken.transaction, &taken.claim, "2")
        .await
        .unwrap();
    drop(client);
    schema.drop_all().await;
}

/// The handler's write: one row in `effects`, in its transaction.
async fn write_effect(tx: &PgTransaction, deposit_no: i64) {
    tx.client()
        .execute(
            "INSERT INTO effects (deposit_no) VALUES ($1)",
            &[&deposit_no],
        )
        .await
        .unwrap();
}

/// `commit_done` sends its update and the `COMMIT` in one round trip: an update that writes no
/// row (here a claim with another token than the row's) must turn that `COMMIT` into a rollback,
/// so the handler's write is never committed without the response, whichever way the
/// transaction was begun. The key stays as it was, and the connection goes back to the pool
/// outside any transaction.
#[tokio::test]
async fn a_fenced_commit_done_commits_none_of_the_handlers_writes() {
    let (schema, store, client) = setup("in_tx_fenced", 1).await;
    let hour = Duration::from_secs(3_600);
    let not_ours = |claim: &Claim| Claim {
        key: claim.key.clone(),
        token: claim.token + 1,
    };

    // Claimed in the transaction: the claim goes with the rollback, the key is free.
    let call = claimed_in(store.claim_in_transaction(&request("in-tx", hour)).await);
    write_effect(&call.transaction, 1).await;
    let stale = not_ours(&call.claim);
    assert!(matches!(
        store.commit_done(call.transaction, &stale, "\"x\"").await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(
        effects(&client).await,
        0,
        "the write was committed without its response"
    );
    let again = claimed_in(store.claim_in_transaction(&request("in-tx", hour)).await);
    assert_eq!(
        again.claim.token, 1,
        "nothing of the first call was committed"
    );
    store.rollback(again.transaction).await.unwrap();

    // Begun for a claim that committed on its own (`begin_for`), and begun without one:
    // the claim stays in progress under its own token.
    for (key, held) in [("held", true), ("leased", false)] {
        let claim = claimed(store.claim(&request(key, hour)).await);
        let tx = if held {
            store.begin_for(&claim).await.unwrap()
        } else {
            store.begin().await.unwrap()
        };
        write_effect(&tx, 2).await;
        assert!(matches!(
            store.commit_done(tx, &not_ours(&claim), "\"x\"").await,
            Err(StoreError::Fenced)
        ));
        assert_eq!(effects(&client).await, 0, "{key}: the write was committed");
        let tx = store.begin().await.unwrap();
        store.commit_done(tx, &claim, "\"ok\"").await.unwrap();
        assert_eq!(
            store.claim(&request(key, hour)).await.unwrap(),
            ClaimOutcome::Done("\"ok\"".into())
        );
    }

    // A key with no row at all is refused the same way.
    let call = claimed_in(store.claim_in_transaction(&request("real", hour)).await);
    write_effect(&call.transaction, 3).await;
    let missing = Claim {
        key: "no-such-key".into(),
        token: 1,
    };
    assert!(matches!(
        store.commit_done(call.transaction, &missing, "\"x\"").await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(effects(&client).await, 0);

    // Every connection went back to the pool outside any transaction.
    let status = store.pool().status();
    assert_eq!(status.size, status.available, "{status:?}");
    let mut pooled = Vec::new();
    for _ in 0..status.size {
        pooled.push(store.pool().get().await.unwrap());
    }
    for pooled in &pooled {
        let txid: Option<i64> = pooled
            .query_one("SELECT txid_current_if_assigned()::bigint", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(txid, None);
    }
    drop(client);
    schema.drop_all().await;
}

/// A call that knows its response (a queue consumer's handler answers nothing) claims with
/// `claim_answered_in_transaction`: the new key's row is written `done` with the claim, once,
/// and `commit_done` with that response writes it no more. Nothing else changes: a duplicate is
/// in progress while the transaction is open, a rollback frees the key, another response at the
/// commit is the one stored, and a claim that is not the transaction's commits nothing.
#[tokio::test]
async fn an_answered_claim_writes_its_row_once_and_keeps_every_rule() {
    let (schema, store, client) = setup("in_tx_answered", 1).await;
    record_writers(&client).await;
    let hour = Duration::from_secs(3_600);
    let inbox_writes = async || -> i64 {
        client
            .query_one("SELECT count(*) FROM writers WHERE what = 'inbox_log'", &[])
            .await
            .unwrap()
            .get(0)
    };

    let call = claimed_in(
        store
            .claim_answered_in_transaction(&request("ans", hour), "null")
            .await,
    );
    assert!(call.in_transaction);
    write_effect(&call.transaction, 1).await;
    assert!(matches!(
        store.claim_in_transaction(&request("ans", hour)).await,
        Ok(TransactionClaim::Refused(ClaimOutcome::InProgress))
    ));
    store
        .commit_done(call.transaction, &call.claim, "null")
        .await
        .unwrap();
    assert_eq!(
        inbox_writes().await,
        1,
        "the row written once: the claim, done"
    );
    assert_eq!(writer_transactions(&client).await, 1, "one commit");
    assert_eq!(
        store.claim(&request("ans", hour)).await.unwrap(),
        ClaimOutcome::Done("null".into())
    );
    assert_eq!(effects(&client).await, 1);

    // Rolled back: nothing of it, and the key is free (a first claim again).
    let call = claimed_in(
        store
            .claim_answered_in_transaction(&request("back", hour), "null")
            .await,
    );
    write_effect(&call.transaction, 2).await;
    store.rollback(call.transaction).await.unwrap();
    let again = claimed_in(store.claim_in_transaction(&request("back", hour)).await);
    assert_eq!(again.claim.token, 1);
    store.rollback(again.transaction).await.unwrap();
    assert_eq!(effects(&client).await, 1);

    // Another response at the commit is the one stored.
    let call = claimed_in(
        store
            .claim_answered_in_transaction(&request("other", hour), "null")
            .await,
    );
    store
        .commit_done(call.transaction, &call.claim, "7")
        .await
        .unwrap();
    assert_eq!(
        store.claim(&request("other", hour)).await.unwrap(),
        ClaimOutcome::Done("7".into())
    );

    // A claim that is not the transaction's: fenced, and nothing committed.
    let call = claimed_in(
        store
            .claim_answered_in_transaction(&request("fenced", hour), "null")
            .await,
    );
    write_effect(&call.transaction, 3).await;
    let stale = Claim {
        key: call.claim.key.clone(),
        token: call.claim.token + 1,
    };
    assert!(matches!(
        store.commit_done(call.transaction, &stale, "null").await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(effects(&client).await, 1, "the write was committed");
    let free = claimed_in(store.claim_in_transaction(&request("fenced", hour)).await);
    assert_eq!(free.claim.token, 1, "nothing of the call was committed");
    store.rollback(free.transaction).await.unwrap();

    // A handler that ends the transaction itself: the commit says so. Its own commit stands,
    // and with it the key's row, done, with its writes: never run twice.
    let call = claimed_in(
        store
            .claim_answered_in_transaction(&request("ended", hour), "null")
            .await,
    );
    write_effect(&call.transaction, 4).await;
    call.transaction
        .client()
        .batch_execute("COMMIT; BEGIN")
        .await
        .unwrap();
    let error = store
        .commit_done(call.transaction, &call.claim, "null")
        .await
        .unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("ended the transaction"),
        "{error}"
    );
    assert_eq!(effects(&client).await, 2);
    assert_eq!(
        store.claim(&request("ended", hour)).await.unwrap(),
        ClaimOutcome::Done("null".into())
    );

    // A key that has a row already is claimed in progress, as `claim_in_transaction` does.
    let leased = claimed(
        store
            .claim(&request("leased", Duration::from_millis(1)))
            .await,
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let call = claimed_in(
        store
            .claim_answered_in_transaction(&request("leased", hour), "null")
            .await,
    );
    assert!(call.claim.token > leased.token, "taken over");
    store
        .commit_done(call.transaction, &call.claim, "null")
        .await
        .unwrap();
    assert_eq!(
        store.claim(&request("leased", hour)).await.unwrap(),
        ClaimOutcome::Done("null".into())
    );
    drop(client);
    schema.drop_all().await;
}
