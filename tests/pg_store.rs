#![cfg(feature = "postgres")]
//! `PgStore` on a real PostgreSQL server (`DATABASE_URL`, as `scripts/test` sets it), beyond the
//! store contract that `tests/conformance.rs` checks on every store: every answer step by step
//! against `MemoryStore`, the database's clock, concurrent claims through a small pool
//! and from two processes, a claim left by a killed process, purging by age, the migration,
//! transactional mode, and a server that cannot be reached.
//!
//! Without `DATABASE_URL`, or with a server that cannot be reached, every test fails (never
//! passes silently). Each test works in a schema of its own (`search_path` in the URL), so the
//! tests run in parallel on one database and a purge in one never sees another's rows.
//!
//! Three tests re-run this binary as a child process (`--exact <test> --nocapture`, with
//! `RETRY_CORE_PG_CHILD=<schema>` and `DATABASE_URL`); the child side of each is at its top.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, MemoryStore, StoreError,
    TransactionalStore,
};
use retry_core::time::{Clock, ManualClock};
use retry_postgres::PgStore;

#[path = "common/pg.rs"]
mod pg;

use pg::{Schema, database_url, raw_client};

/// Set in a child process: the schema to work in.
const CHILD_ENV: &str = "RETRY_CORE_PG_CHILD";
const DAY: Duration = Duration::from_secs(86_400);

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease: Duration::from_secs(30),
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

// ---- the contract ----

#[tokio::test]
async fn claim_complete_done_and_the_answer_survives_reconnecting() {
    let schema = Schema::new("contract").await;
    let store = schema.store().await;
    let claim = claimed(store.claim(&request("m-1")).await);
    assert_eq!(
        claim,
        Claim {
            key: "m-1".into(),
            token: 1
        }
    );
    assert_eq!(
        store.claim(&request("m-1")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    store.complete(&claim, r#"{"receipt":7}"#).await.unwrap();
    let done = ClaimOutcome::Done(r#"{"receipt":7}"#.into());
    assert_eq!(store.claim(&request("m-1")).await.unwrap(), done);
    // Completing again under the same token is a retry whose first answer was lost: `Ok`, and
    // the first response stays. Anything else on a finished claim is refused.
    store.complete(&claim, "\"again\"").await.unwrap();
    assert!(matches!(
        store.release(&claim).await,
        Err(StoreError::Fenced)
    ));
    assert!(matches!(
        store.mark_failed(&claim, "late").await,
        Err(StoreError::Fenced)
    ));
    drop(store);

    let reconnected = schema.store().await;
    assert_eq!(reconnected.claim(&request("m-1")).await.unwrap(), done);
    // The row is as the SQLite store writes it.
    let row = schema
        .client()
        .await
        .query_one(
            "SELECT biz_key, status, token, pg_typeof(created_at)::text, \
             created_at < lease_until, lease_until < expires_at FROM inbox_log \
             WHERE msg_id = 'm-1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "m-1");
    assert_eq!(row.get::<_, String>(1), "done");
    assert_eq!(row.get::<_, i64>(2), 1);
    assert_eq!(row.get::<_, String>(3), "timestamp with time zone");
    assert!(row.get::<_, bool>(4) && row.get::<_, bool>(5));
    drop(reconnected);
    schema.drop_all().await;
}

#[tokio::test]
async fn release_keeps_the_row_and_the_token_grows() {
    let schema = Schema::new("release").await;
    let store = schema.store().await;
    let first = claimed(store.claim(&request("m-2")).await);
    store.release(&first).await.unwrap();
    // Released again: a retry of the release, `Ok`; completing a released claim is refused.
    store.release(&first).await.unwrap();
    assert!(matches!(
        store.complete(&first, "\"late\"").await,
        Err(StoreError::Fenced)
    ));
    let status: String = schema
        .client()
        .await
        .query_one("SELECT status FROM inbox_log WHERE msg_id = 'm-2'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "released", "a released row is kept");
    let second = claimed(store.claim(&request("m-2")).await);
    assert_eq!(
        second.token,
        first.token + 1,
        "a released key is claimed with a larger token"
    );
    store.release(&second).await.unwrap();
    // A released key is claimed afresh whatever its payload.
    let third = claimed(
        store
            .claim(&ClaimRequest {
                fingerprint: Some("other"),
                ..request("m-2")
            })
            .await,
    );
    assert_eq!(third.token, 3);
    // No ABA: the first holder cannot finish the third claim.
    assert!(matches!(
        store.complete(&first, "\"stale\"").await,
        Err(StoreError::Fenced)
    ));
    store.complete(&third, "\"third\"").await.unwrap();
    assert_eq!(
        store
            .claim(&ClaimRequest {
                fingerprint: Some("other"),
                ..request("m-2")
            })
            .await
            .unwrap(),
        ClaimOutcome::Done("\"third\"".into())
    );
    drop(store);
    schema.drop_all().await;
}

/// A small deterministic generator (xorshift64*): the same script on every run.
struct Script(u64);

impl Script {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let value = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33;
        usize::try_from(value).unwrap() % below
    }
}

fn same_result(pg: &Result<(), StoreError>, memory: &Result<(), StoreError>) -> bool {
    matches!(
        (pg, memory),
        (Ok(()), Ok(())) | (Err(StoreError::Fenced), Err(StoreError::Fenced))
    )
}

/// Thousands of random operations (claims with and without fingerprints, leases running out,
/// stale and current claims completing, releasing and failing, purges) give the same answers
/// from both stores, on one clock.
#[tokio::test]
async fn every_answer_matches_the_memory_store() {
    let schema = Schema::new("differential").await;
    let clock = manual_clock();
    let pg = schema.store().await.with_clock(clock.clone());
    let memory = MemoryStore::with_clock(clock.clone());
    let keys = ["k0", "k1", "k2", "k3", "k4"];
    let fingerprints = [None, Some("fa"), Some("fb")];
    let leases = [0, 3, 10].map(Duration::from_secs);
    let retentions = [Duration::from_secs(1), 5 * DAY, 20 * DAY];
    let advances = [0, 0, 1, 4, 10, 2 * 86_400, 11 * 86_400].map(Duration::from_secs);
    let mut script = Script(0x9e37_79b9_7f4a_7c15);
    let mut claims: Vec<Claim> = Vec::new();
    let mut seen = [0usize; 5];
    for step in 0..2_000 {
        match script.next(10) {
            0..=3 => {
                let request = ClaimRequest {
                    key: keys[script.next(keys.len())],
                    biz_key: "biz",
                    fingerprint: fingerprints[script.next(fingerprints.len())],
                    lease: leases[script.next(leases.len())],
                    retention: retentions[script.next(retentions.len())],
                };
                let (p, m) = (
                    pg.claim(&request).await.unwrap(),
                    memory.claim(&request).await.unwrap(),
                );
                assert_eq!(p, m, "step {step}: claim {request:?}");
                seen[match &p {
                    ClaimOutcome::Claimed(_) => 0,
                    ClaimOutcome::Done(_) => 1,
                    ClaimOutcome::InProgress => 2,
                    ClaimOutcome::Failed(_) => 3,
                    ClaimOutcome::KeyReused => 4,
                }] += 1;
                if let ClaimOutcome::Claimed(claim) = p {
                    claims.push(claim);
                }
            }
            4..=6 if !claims.is_empty() => {
                // Mostly the latest claims, sometimes a stale one.
                let pick = claims.len() - 1 - script.next(claims.len().min(4));
                let claim = claims[pick].clone();
                let (p, m) = match script.next(3) {
                    0 => {
                        let response = format!("\"r{step}\"");
                        (
                            pg.complete(&claim, &response).await,
                            memory.complete(&claim, &response).await,
                        )
                    }
                    1 => (pg.release(&claim).await, memory.release(&claim).await),
                    _ => (
                        pg.mark_failed(&claim, "declined").await,
                        memory.mark_failed(&claim, "declined").await,
                    ),
                };
                assert!(
                    same_result(&p, &m),
                    "step {step}: {claim:?}: postgres {p:?}, memory {m:?}"
                );
            }
            7 | 8 => clock.advance(advances[script.next(advances.len())]),
            _ => {
                let age = [Duration::ZERO, DAY, 10 * DAY][script.next(3)];
                let (p, m) = (
                    pg.purge_older_than(age).await.unwrap(),
                    memory.purge_older_than(age).await.unwrap(),
                );
                assert_eq!(p, m, "step {step}: purge_older_than({age:?})");
            }
        }
    }
    assert!(
        seen.iter().all(|&n| n > 10),
        "every outcome was exercised: {seen:?}"
    );
    drop(pg);
    schema.drop_all().await;
}

// ---- concurrency ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_claims_through_four_connections_have_one_winner() {
    let schema = Schema::new("concurrent").await;
    let store = Arc::new(schema.store().await.with_pool_size(4));
    let claim_all = || {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { store.claim(&request("hot")).await.unwrap() })
            })
            .collect();
        async move {
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(task.await.unwrap());
            }
            outcomes
        }
    };
    let outcomes = claim_all().await;
    let winners: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            ClaimOutcome::Claimed(claim) => Some(claim.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == ClaimOutcome::InProgress)
            .count(),
        63
    );
    assert!(store.pool().status().size <= 4, "{store:?}");

    store.complete(&winners[0], "\"first\"").await.unwrap();
    let after = claim_all().await;
    assert!(
        after
            .iter()
            .all(|o| *o == ClaimOutcome::Done("\"first\"".into())),
        "{after:?}"
    );
    assert!(store.pool().status().size <= 4, "{store:?}");
    drop(store);
    schema.drop_all().await;
}

/// What one process saw while hammering the shared schema.
#[derive(Debug, Default, PartialEq)]
struct Counts {
    shared_claimed: usize,
    shared_in_progress: usize,
    shared_done: usize,
    distinct_done: usize,
    errors: usize,
}

impl Counts {
    fn line(&self) -> String {
        format!(
            "COUNTS {} {} {} {} {}",
            self.shared_claimed,
            self.shared_in_progress,
            self.shared_done,
            self.distinct_done,
            self.errors
        )
    }

    fn parse(line: &str) -> Option<Counts> {
        // The harness may have started the line with "test <name> ... ".
        let (_, numbers) = line.split_once("COUNTS ")?;
        let numbers: Vec<usize> = numbers
            .split(' ')
            .map(|n| n.parse().ok())
            .collect::<Option<_>>()?;
        let [
            shared_claimed,
            shared_in_progress,
            shared_done,
            distinct_done,
            errors,
        ] = numbers[..]
        else {
            return None;
        };
        Some(Counts {
            shared_claimed,
            shared_in_progress,
            shared_done,
            distinct_done,
            errors,
        })
    }
}

/// 32 claims of one shared key (the winner completes it) and 100 keys of its own, each claimed
/// and completed, all at once.
async fn hammer(store: Arc<PgStore>, who: &'static str) -> Counts {
    enum Did {
        Shared(Result<ClaimOutcome, StoreError>),
        Distinct(Result<(), StoreError>),
    }
    let mut tasks = Vec::new();
    for i in 0..132 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            // 32 shared claims spread among the 100 others.
            if i % 4 == 0 && i / 4 < 32 {
                let shared = ClaimRequest {
                    lease: Duration::from_secs(60),
                    ..request("shared")
                };
                let outcome = store.claim(&shared).await;
                if let Ok(ClaimOutcome::Claimed(claim)) = &outcome
                    && let Err(e) = store.complete(claim, &format!("\"{who}\"")).await
                {
                    return Did::Shared(Err(e));
                }
                Did::Shared(outcome)
            } else {
                let key = format!("{who}-{i}");
                let done = match store.claim(&request(&key)).await {
                    Ok(ClaimOutcome::Claimed(claim)) => store.complete(&claim, "\"ok\"").await,
                    Ok(other) => Err(StoreError::Corrupt(format!("{key}: {other:?}"))),
                    Err(e) => Err(e),
                };
                Did::Distinct(done)
            }
        }));
    }
    let mut counts = Counts::default();
    for task in tasks {
        match task.await {
            Ok(Did::Shared(Ok(ClaimOutcome::Claimed(_)))) => counts.shared_claimed += 1,
            Ok(Did::Shared(Ok(ClaimOutcome::InProgress))) => counts.shared_in_progress += 1,
            Ok(Did::Shared(Ok(ClaimOutcome::Done(_)))) => counts.shared_done += 1,
            Ok(Did::Distinct(Ok(()))) => counts.distinct_done += 1,
            Ok(Did::Shared(Ok(other))) => {
                eprintln!("{who}: unexpected {other:?}");
                counts.errors += 1;
            }
            Ok(Did::Shared(Err(e)) | Did::Distinct(Err(e))) => {
                eprintln!("{who}: {e}");
                counts.errors += 1;
            }
            Err(e) => {
                eprintln!("{who}: task failed: {e}");
                counts.errors += 1;
            }
        }
    }
    counts
}

/// Starts this test binary again, running only `test`, as a child working in `schema`.
fn spawn_child(test: &str, schema: &Schema, stdin: Stdio) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &schema.name)
        .env("DATABASE_URL", database_url())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_claim_one_key_and_one_wins() {
    if let Ok(name) = std::env::var(CHILD_ENV) {
        // The child: connect, say so, wait for the parent's go, hammer, report.
        let store = Arc::new(Schema::existing(&name).store().await);
        println!("READY");
        std::io::stdout().flush().unwrap();
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
        let counts = hammer(store, "child").await;
        println!("{}", counts.line());
        return;
    }

    let schema = Schema::new("two_processes").await;
    let store = Arc::new(schema.store().await);
    let mut child = spawn_child(
        "two_processes_claim_one_key_and_one_wins",
        &schema,
        Stdio::piped(),
    );
    // The child's stdout, line by line, read off the runtime; a child that hangs fails the test.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut next_line = async || {
        tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .ok()
            .flatten()
    };
    let mut ready = false;
    while let Some(line) = next_line().await {
        if line.ends_with("READY") {
            ready = true;
            break;
        }
    }
    if !ready {
        let _ = child.kill();
        panic!("the child never got ready");
    }
    writeln!(child.stdin.take().unwrap(), "go").unwrap();

    let parent = hammer(store.clone(), "parent").await;
    let mut child_counts = None;
    while let Some(line) = next_line().await {
        if let Some(counts) = Counts::parse(&line) {
            child_counts = Some(counts);
            break;
        }
    }
    let Some(child_counts) = child_counts else {
        let _ = child.kill();
        panic!("the child did not report its counts");
    };
    assert!(child.wait().unwrap().success(), "the child failed");

    for (who, counts) in [("parent", &parent), ("child", &child_counts)] {
        assert_eq!(counts.errors, 0, "{who}: {counts:?}");
        assert_eq!(counts.distinct_done, 100, "{who}: {counts:?}");
        assert_eq!(
            counts.shared_claimed + counts.shared_in_progress + counts.shared_done,
            32,
            "{who}: {counts:?}"
        );
    }
    assert_eq!(
        parent.shared_claimed + child_counts.shared_claimed,
        1,
        "parent {parent:?}, child {child_counts:?}"
    );
    let winner = if parent.shared_claimed == 1 {
        "parent"
    } else {
        "child"
    };
    assert_eq!(
        store.claim(&request("shared")).await.unwrap(),
        ClaimOutcome::Done(format!("\"{winner}\""))
    );
    assert_eq!(
        store.claim(&request("child-1")).await.unwrap(),
        ClaimOutcome::Done("\"ok\"".into())
    );
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_claim_left_by_a_killed_process_is_taken_over_after_its_lease() {
    let one_second = |key| ClaimRequest {
        lease: Duration::from_secs(1),
        ..request(key)
    };
    if let Ok(name) = std::env::var(CHILD_ENV) {
        // The child: claim, then die without releasing anything.
        let store = Schema::existing(&name).store().await;
        let claim = claimed(store.claim(&one_second("crash")).await);
        println!("CLAIMED {}", claim.token);
        std::io::stdout().flush().unwrap();
        std::process::abort();
    }

    let schema = Schema::new("killed").await;
    let store = schema.store().await;
    let mut child = spawn_child(
        "a_claim_left_by_a_killed_process_is_taken_over_after_its_lease",
        &schema,
        Stdio::null(),
    );
    let stdout = child.stdout.take().unwrap();
    let watch = tokio::task::spawn_blocking(move || {
        // When the claim was surely made: as soon as the child says so.
        let claimed_at = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|line| line.ends_with("CLAIMED 1"))
            .map(|_| Instant::now());
        (claimed_at, child.wait().unwrap())
    });
    let (claimed_at, status) = tokio::time::timeout(Duration::from_secs(30), watch)
        .await
        .expect("the child neither claimed nor died")
        .unwrap();
    let claimed_at = claimed_at.expect("the child claimed the key");
    assert!(!status.success(), "the child was meant to abort");

    // The child is gone but its claim holds until the lease ends; then it is taken over.
    let checked = Instant::now();
    let taken = match store.claim(&one_second("crash")).await.unwrap() {
        ClaimOutcome::InProgress => {
            tokio::time::sleep_until((claimed_at + Duration::from_millis(1_100)).into()).await;
            claimed(store.claim(&one_second("crash")).await)
        }
        // Only if dying took the whole lease (writing a core dump can).
        ClaimOutcome::Claimed(claim) if checked - claimed_at >= Duration::from_secs(1) => {
            eprintln!("the child took {:?} to die", checked - claimed_at);
            claim
        }
        other => panic!("the dead child's claim within its lease: {other:?}"),
    };
    assert_eq!(
        taken,
        Claim {
            key: "crash".into(),
            token: 2
        }
    );
    store.complete(&taken, "\"recovered\"").await.unwrap();
    drop(store);
    schema.drop_all().await;
}

#[test]
fn abandon_outside_a_runtime_starts_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(Schema::new("abandon_no_rt"));
    let store = runtime.block_on(schema.store());
    let claim = claimed(runtime.block_on(store.claim(&request("k"))));
    // Here, outside the runtime: nothing can be spawned.
    assert!(!store.abandon(claim));
    assert_eq!(
        runtime.block_on(store.claim(&request("k"))).unwrap(),
        ClaimOutcome::InProgress
    );
    drop(store);
    runtime.block_on(schema.drop_all());
}

// ---- purging ----

/// Claims every key, 16 at a time.
async fn claim_all(store: &Arc<PgStore>, keys: impl Iterator<Item = String>, retention: Duration) {
    let mut tasks = tokio::task::JoinSet::new();
    for key in keys {
        if tasks.len() == 16 {
            tasks.join_next().await.unwrap().unwrap();
        }
        let store = Arc::clone(store);
        tasks.spawn(async move {
            let request = ClaimRequest {
                retention,
                ..request(&key)
            };
            claimed(store.claim(&request).await);
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_deletes_by_age_only() {
    let schema = Schema::new("purge").await;
    let clock = manual_clock();
    let store = Arc::new(schema.store().await.with_clock(clock.clone()));
    let started = Instant::now();
    claim_all(&store, (0..100).map(|i| format!("old-{i}")), 30 * DAY).await;
    clock.advance(31 * DAY);
    claim_all(&store, (0..1_000).map(|i| format!("new-{i}")), 30 * DAY).await;
    let filled = started.elapsed();

    assert_eq!(store.purge_older_than(30 * DAY).await.unwrap(), 100);
    assert_eq!(store.purge_older_than(30 * DAY).await.unwrap(), 0);
    // The old keys are gone (claimed afresh); the new ones are all still there.
    assert_eq!(claimed(store.claim(&request("old-0")).await).token, 1);
    assert_eq!(claimed(store.claim(&request("old-99")).await).token, 1);
    for i in (0..1_000).step_by(97) {
        assert_eq!(
            store.claim(&request(&format!("new-{i}"))).await.unwrap(),
            ClaimOutcome::InProgress
        );
    }
    // A row is never purged before its own retention has passed, whatever the age asked.
    claim_all(&store, (0..100).map(|i| format!("kept-{i}")), 60 * DAY).await;
    clock.advance(31 * DAY);
    assert_eq!(
        store.purge_older_than(30 * DAY).await.unwrap(),
        1_000 + 2,
        "only the 30-day rows"
    );
    clock.advance(29 * DAY);
    assert_eq!(store.purge_older_than(30 * DAY).await.unwrap(), 100);
    eprintln!("purge test: 1,200 claims took {filled:?}");
    drop(store);
    schema.drop_all().await;
}

/// A purge that meets a row claimed again while it was deciding (a released key, resent) keeps
/// it: the purge's conditions are checked again on the row as it is now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_keeps_a_row_claimed_again_meanwhile() {
    let schema = Schema::new("purge_race").await;
    let clock = manual_clock();
    let app = format!("purge_race_{}", std::process::id());
    let url = format!("{}&application_name={app}", schema.url);
    let store = Arc::new(
        PgStore::connect(&url)
            .await
            .unwrap()
            .with_clock(clock.clone()),
    );
    let first = claimed(store.claim(&request("k")).await);
    store.release(&first).await.unwrap();
    clock.advance(31 * DAY);

    // Another instance locks the released row, as its claim would...
    let mut other = schema.client().await;
    let other_tx = other.transaction().await.unwrap();
    other_tx
        .query_one(
            "SELECT token FROM inbox_log WHERE msg_id = 'k' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    // ...while the purge finds the row old and released, and waits for the lock.
    let purge = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.purge_older_than(30 * DAY).await }
    });
    wait_for_lock_wait(&schema.client().await, &app).await;
    // The other instance claims the key again (the store's RECLAIM, by hand) and commits.
    other_tx
        .execute(
            "UPDATE inbox_log SET status = 'in_progress', token = token + 1, created_at = $1, \
             lease_until = $2, expires_at = $3 WHERE msg_id = 'k'",
            &[
                &clock.now(),
                &(clock.now() + Duration::from_secs(30)),
                &(clock.now() + 30 * DAY),
            ],
        )
        .await
        .unwrap();
    other_tx.commit().await.unwrap();

    assert_eq!(purge.await.unwrap().unwrap(), 0, "the fresh claim was kept");
    assert_eq!(
        store.claim(&request("k")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    drop(store);
    schema.drop_all().await;
}

/// Waits until a backend of `app` waits for a lock.
async fn wait_for_lock_wait(watcher: &tokio_postgres::Client, app: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
                 AND wait_event_type = 'Lock'",
                &[&app],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == 1 {
            return;
        }
        assert!(Instant::now() < deadline, "{app} never waited for the row");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A claim whose insert met a row that is purged before the claim can lock it inserts again,
/// and wins the key afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_meeting_a_row_purged_meanwhile_inserts_again() {
    let schema = Schema::new("claim_race").await;
    let app = format!("claim_race_{}", std::process::id());
    let url = format!("{}&application_name={app}", schema.url);
    let clock = manual_clock();
    let store = Arc::new(
        PgStore::connect(&url)
            .await
            .unwrap()
            .with_clock(clock.clone()),
    );
    let first = claimed(store.claim(&request("k")).await);
    store.complete(&first, "\"old\"").await.unwrap();
    // Past its retention, as a purge needs (a done row within it is answered from a plain read,
    // which waits for no lock).
    clock.advance(31 * DAY);

    // A purge elsewhere has locked the row and is about to delete it...
    let mut other = schema.client().await;
    let other_tx = other.transaction().await.unwrap();
    other_tx
        .query_one(
            "SELECT token FROM inbox_log WHERE msg_id = 'k' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    // ...while a claim's insert meets the row and waits to lock it.
    let claim = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.claim(&request("k")).await }
    });
    wait_for_lock_wait(&schema.client().await, &app).await;
    other_tx
        .execute("DELETE FROM inbox_log WHERE msg_id = 'k'", &[])
        .await
        .unwrap();
    other_tx.commit().await.unwrap();

    assert_eq!(
        claimed(claim.await.unwrap()),
        Claim {
            key: "k".into(),
            token: 1
        }
    );
    drop(store);
    schema.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purger_runs_in_the_background() {
    let schema = Schema::new("purger").await;
    let clock = manual_clock();
    let store = Arc::new(schema.store().await.with_clock(clock.clone()));
    let stale = claimed(store.claim(&request("stale")).await);
    store.complete(&stale, "\"old\"").await.unwrap();
    clock.advance(31 * DAY);
    let purger = store.spawn_purger(30 * DAY, Duration::from_secs(3600));
    // The first round runs at once: the done row disappears and the key can be claimed afresh.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.claim(&request("stale")).await.unwrap() {
            ClaimOutcome::Claimed(claim) => {
                assert_eq!(claim.token, 1);
                break;
            }
            ClaimOutcome::Done(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            other => panic!("the purger never purged: {other:?}"),
        }
    }
    assert!(!purger.is_finished(), "the purger keeps running");
    purger.abort();
    drop(store);
    schema.drop_all().await;
}

// ---- the migration ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_starting_together_migrate_once() {
    let schema = Schema::new("migrate").await;
    let url = Arc::new(schema.url.clone());
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let url = Arc::clone(&url);
            tokio::spawn(async move { PgStore::connect(&url).await })
        })
        .collect();
    for start in starts {
        start.await.unwrap().unwrap();
    }
    let client = schema.client().await;
    let versions: Vec<(String, i32)> = client
        .query("SELECT component, version FROM retry_core_schema", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(versions, [("inbox_log".to_owned(), 4)]);
    // The times are times, which the server compares as such.
    let types: Vec<(String, String)> = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
             WHERE a.attrelid = 'inbox_log'::regclass \
             AND a.attname IN ('created_at', 'lease_until', 'expires_at') ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let timestamptz = "timestamp with time zone".to_owned();
    assert_eq!(
        types,
        [
            ("created_at".to_owned(), timestamptz.clone()),
            ("expires_at".to_owned(), timestamptz.clone()),
            ("lease_until".to_owned(), timestamptz),
        ]
    );

    client
        .execute("UPDATE retry_core_schema SET version = 5", &[])
        .await
        .unwrap();
    let error = PgStore::connect(&schema.url).await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("has inbox_log schema version 5, newer than the 4"),
        "{error}"
    );
    schema.drop_all().await;
}

/// A row made by hand (the store never writes one like it). Its times are typed columns, so
/// only what the store's own checks refuse can be stored: a time that is no time cannot.
const ROW: &str = "INSERT INTO inbox_log \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES ($1, 'b', $2, $3, '2025-01-01T00:00:00.000000Z', NULL, $4, \
     '2999-01-01T00:00:00.000000Z', '2999-01-01T00:00:00.000000Z')";

fn corrupt_message(outcome: Result<ClaimOutcome, StoreError>) -> String {
    match outcome {
        Err(StoreError::Corrupt(what)) => what,
        other => panic!("expected a corrupt row, got {other:?}"),
    }
}

#[tokio::test]
async fn unreadable_rows_are_corrupt_and_name_their_key() {
    let schema = Schema::new("corrupt").await;
    let store = schema.store().await;
    let raw = schema.client().await;
    let none: Option<&str> = None;
    for (key, status, token) in [
        ("no-response", "done", 1_i64),
        ("zero-token", "failed", 0),
        // The table takes any text (BENCHMARKS.md: a `CHECK` costs every write); the store
        // takes only its own four.
        ("odd", "paused", 1),
    ] {
        raw.execute(ROW, &[&key, &status, &none, &token])
            .await
            .unwrap();
    }
    for (key, what) in [
        ("no-response", "done without a text response"),
        ("zero-token", "bad token"),
        ("odd", "unknown status \"paused\""),
    ] {
        let message = corrupt_message(store.claim(&request(key)).await);
        assert!(
            message.contains(&format!("`{key}`")) && message.contains(what),
            "{message}"
        );
    }
    drop(store);
    schema.drop_all().await;
}

// ---- a server that is down ----

#[tokio::test]
async fn a_server_that_cannot_be_reached_is_unavailable_and_named() {
    // Make sure the real server is there, so this test too fails without one.
    drop(raw_client(&database_url()).await);
    // Nothing listens on port 1 of the loopback address.
    let started = Instant::now();
    let error = PgStore::connect("postgres://app:s3cret-pw@127.0.0.1:1/inbox")
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    let message = retry_core::error_chain(&error).to_string();
    assert!(
        message.contains("cannot connect to PostgreSQL at 127.0.0.1:1 (database inbox)"),
        "{message}"
    );
    assert!(!message.contains("s3cret-pw"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once"
    );
}

// ---- transactional mode ----

/// The application's own table, next to `inbox_log` in the test's schema.
async fn balances(schema: &Schema) -> tokio_postgres::Client {
    let client = schema.client().await;
    client
        .batch_execute(
            "CREATE TABLE balances (account TEXT PRIMARY KEY, amount BIGINT NOT NULL); \
             INSERT INTO balances VALUES ('a', 100)",
        )
        .await
        .unwrap();
    client
}

async fn balance(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT amount FROM balances WHERE account = 'a'", &[])
        .await
        .unwrap()
        .get(0)
}

const DEPOSIT: &str = "UPDATE balances SET amount = amount + $1 WHERE account = 'a'";

#[tokio::test]
async fn commit_done_commits_the_handlers_writes_with_the_response() {
    let schema = Schema::new("tx_commit").await;
    let store = schema.store().await;
    let reader = balances(&schema).await;
    let claim = claimed(store.claim(&request("dep-1")).await);
    let tx = store.begin().await.unwrap();
    tx.client().execute(DEPOSIT, &[&10_i64]).await.unwrap();
    let add = tx.prepare_cached(DEPOSIT).await.unwrap();
    tx.client().execute(&add, &[&5_i64]).await.unwrap();
    // Not visible outside before the commit.
    assert_eq!(balance(&reader).await, 100);
    store
        .commit_done(tx, &claim, "{\"receipt\":1}")
        .await
        .unwrap();
    assert_eq!(balance(&reader).await, 115);
    assert_eq!(
        store.claim(&request("dep-1")).await.unwrap(),
        ClaimOutcome::Done("{\"receipt\":1}".into())
    );
    // The connection went back to the pool, outside any transaction.
    let pooled = store.pool().get().await.unwrap();
    let txid: Option<i64> = pooled
        .query_one("SELECT txid_current_if_assigned()::bigint", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(txid, None);
    drop((pooled, store));
    schema.drop_all().await;
}

#[tokio::test]
async fn a_fenced_commit_done_rolls_back_the_handlers_writes() {
    let schema = Schema::new("tx_fenced").await;
    let clock = manual_clock();
    let store = schema.store().await.with_clock(clock.clone());
    let reader = balances(&schema).await;
    let lease = ClaimRequest {
        lease: Duration::from_secs(10),
        ..request("dep-2")
    };
    let slow = claimed(store.claim(&lease).await);
    let tx = store.begin().await.unwrap();
    tx.client().execute(DEPOSIT, &[&10_i64]).await.unwrap();
    // Meanwhile the slow holder's lease runs out and a duplicate takes the key over: its claim
    // does not wait for the slow holder's open transaction.
    clock.advance(Duration::from_secs(11));
    let fast = claimed(store.claim(&lease).await);
    assert_eq!(fast.token, 2);

    assert!(matches!(
        store.commit_done(tx, &slow, "\"slow\"").await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(balance(&reader).await, 100, "the stale deposit rolled back");
    assert_eq!(
        store.claim(&lease).await.unwrap(),
        ClaimOutcome::InProgress,
        "the new holder still holds the key"
    );

    let tx = store.begin().await.unwrap();
    tx.client().execute(DEPOSIT, &[&10_i64]).await.unwrap();
    store.commit_done(tx, &fast, "\"fast\"").await.unwrap();
    assert_eq!(balance(&reader).await, 110, "deposited exactly once");
    assert_eq!(
        store.claim(&lease).await.unwrap(),
        ClaimOutcome::Done("\"fast\"".into())
    );
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_dropped_transaction_rolls_back_and_its_connection_is_not_reused() {
    let schema = Schema::new("tx_dropped").await;
    let store = schema.store().await.with_pool_size(1);
    let reader = balances(&schema).await;
    let claim = claimed(store.claim(&request("dep-3")).await);
    let tx = store.begin().await.unwrap();
    tx.client().execute(DEPOSIT, &[&10_i64]).await.unwrap();
    assert_eq!(store.pool().status().size, 1);
    drop(tx);
    assert_eq!(
        store.pool().status().size,
        0,
        "the connection was detached, not pooled"
    );
    assert_eq!(balance(&reader).await, 100);
    // The server rolled back: the row lock is gone, so another write goes through at once.
    reader
        .batch_execute("SET statement_timeout = 5000")
        .await
        .unwrap();
    reader.execute(DEPOSIT, &[&1_i64]).await.unwrap();
    assert_eq!(balance(&reader).await, 101);
    // The pool's next connection is a fresh one, outside any transaction.
    let pooled = store.pool().get().await.unwrap();
    let txid: Option<i64> = pooled
        .query_one("SELECT txid_current_if_assigned()::bigint", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(txid, None);
    drop(pooled);
    // The claim itself is untouched: its holder finishes or releases it.
    assert_eq!(
        store.claim(&request("dep-3")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    store.release(&claim).await.unwrap();
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn rollback_undoes_the_writes_and_pools_the_connection() {
    let schema = Schema::new("tx_rollback").await;
    let store = schema.store().await.with_pool_size(1);
    let reader = balances(&schema).await;
    let tx = store.begin().await.unwrap();
    tx.client().execute(DEPOSIT, &[&10_i64]).await.unwrap();
    store.rollback(tx).await.unwrap();
    assert_eq!(balance(&reader).await, 100);
    assert_eq!(store.pool().status().size, 1, "pooled again");
    // A failed statement aborts the transaction: commit_done refuses it and rolls back.
    let claim = claimed(store.claim(&request("dep-4")).await);
    let tx = store.begin().await.unwrap();
    tx.client().execute(DEPOSIT, &[&10_i64]).await.unwrap();
    assert!(
        tx.client()
            .execute("INSERT INTO no_such_table VALUES (1)", &[])
            .await
            .is_err()
    );
    let error = store.commit_done(tx, &claim, "\"x\"").await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("aborted"),
        "{error}"
    );
    assert_eq!(balance(&reader).await, 100);
    assert_eq!(
        store.claim(&request("dep-4")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_transaction_ended_by_the_handler_cannot_store_its_response() {
    let schema = Schema::new("tx_ended").await;
    let store = schema.store().await;
    let reader = balances(&schema).await;
    let claim = claimed(store.claim(&request("dep-5")).await);
    let tx = store.begin().await.unwrap();
    tx.client().execute(DEPOSIT, &[&10_i64]).await.unwrap();
    // The handler commits on its own, then (worse) begins another transaction.
    tx.client().batch_execute("COMMIT; BEGIN").await.unwrap();
    let error = store.commit_done(tx, &claim, "\"x\"").await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("ended the transaction"),
        "{error}"
    );
    // Its own commit stands; the response was not stored.
    assert_eq!(balance(&reader).await, 110);
    assert_eq!(
        store.claim(&request("dep-5")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    // And a transaction of another store is refused.
    let other_schema = Schema::new("tx_other").await;
    let other = other_schema.store().await;
    let tx = other.begin().await.unwrap();
    let error = store.commit_done(tx, &claim, "\"x\"").await.unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("another store"),
        "{error}"
    );
    store.complete(&claim, "\"ok\"").await.unwrap();
    drop((store, other));
    schema.drop_all().await;
    other_schema.drop_all().await;
}

// ---- time, renewal, conflicts ----

/// The database server's clock, as the store reads it.
async fn db_now(client: &tokio_postgres::Client) -> std::time::SystemTime {
    client
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

/// `created_at`, `lease_until` and `expires_at` of `key`, as times.
async fn row_times(
    client: &tokio_postgres::Client,
    key: &str,
) -> (
    std::time::SystemTime,
    std::time::SystemTime,
    std::time::SystemTime,
) {
    let row = client
        .query_one(
            "SELECT created_at, lease_until, expires_at FROM inbox_log WHERE msg_id = $1",
            &[&key],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// What proves the database's clock decides: on one machine the server's clock and this
/// process's are the same clock, so no test here can skew one against the other. What it can
/// show: a default store's times are the server's `clock_timestamp()` in UTC (bracketed by two
/// reads of it, whatever the session's time zone), and every decision of a default store
/// follows that clock, whatever time another instance's clock wrote: a claim written an hour
/// ahead is live to it for that hour, while an instance deciding on its own fast clock (the
/// injected one) takes over a claim that is live on the server's. The default store never
/// reads a Rust clock at all (its statements bind `NULL` for the time).
#[tokio::test]
async fn the_database_clock_decides_not_an_instances_own() {
    let schema = Schema::new("db_clock").await;
    let raw = schema.client().await;
    // A session in UTC+14: the stored times must still be UTC.
    let url = format!("{}%20-c%20TimeZone%3DEtc%2FGMT-14", schema.url);
    let server = PgStore::connect(&url).await.unwrap();
    let other = schema.store().await;
    let minute = |key| ClaimRequest {
        lease: Duration::from_secs(60),
        retention: DAY,
        ..request(key)
    };

    let before = db_now(&raw).await;
    let claim = claimed(server.claim(&minute("k")).await);
    let after = db_now(&raw).await;
    let (created, lease_until, expires) = row_times(&raw, "k").await;
    assert!(
        before <= created && created <= after,
        "{created:?} is the server's clock, in UTC: between {before:?} and {after:?}"
    );
    assert_eq!(
        lease_until.duration_since(created).unwrap(),
        Duration::from_secs(60)
    );
    assert_eq!(expires.duration_since(created).unwrap(), DAY);
    // Another default instance agrees the claim is live.
    assert_eq!(
        other.claim(&minute("k")).await.unwrap(),
        ClaimOutcome::InProgress
    );

    // An instance an hour fast, deciding on its own clock, takes over the live claim...
    let fast_clock = Arc::new(ManualClock::new(after + Duration::from_secs(3_600)));
    let fast = schema.store().await.with_clock(fast_clock.clone());
    assert_eq!(claimed(fast.claim(&minute("k")).await).token, 2);
    assert!(matches!(
        server.complete(&claim, "\"lost\"").await,
        Err(StoreError::Fenced)
    ));
    // ...and its own claims carry its own time, exactly: the injected clock overrides the
    // server's.
    claimed(fast.claim(&minute("f")).await);
    let (created, lease_until, _) = row_times(&raw, "f").await;
    assert_eq!(created, fast_clock.now());
    assert_eq!(lease_until, fast_clock.now() + Duration::from_secs(60));
    // The server's clock says that lease runs for another hour: no default instance takes it.
    assert_eq!(
        server.claim(&minute("f")).await.unwrap(),
        ClaimOutcome::InProgress
    );
    assert_eq!(
        other.claim(&minute("f")).await.unwrap(),
        ClaimOutcome::InProgress
    );

    // A claim whose lease ended on the server's clock (written by an instance an hour slow) is
    // taken over by a default instance at once, its retention counted again from the server's
    // now.
    let slow = schema.store().await.with_clock(Arc::new(ManualClock::new(
        before - Duration::from_secs(3_600),
    )));
    claimed(slow.claim(&minute("s")).await);
    let before = db_now(&raw).await;
    assert_eq!(claimed(server.claim(&minute("s")).await).token, 2);
    let after = db_now(&raw).await;
    let (_, lease_until, expires) = row_times(&raw, "s").await;
    assert!(before + Duration::from_secs(60) <= lease_until);
    assert!(lease_until <= after + Duration::from_secs(60));
    assert!(before + DAY <= expires && expires <= after + DAY);
    drop((server, other, fast, slow));
    schema.drop_all().await;
}

#[tokio::test]
async fn renew_extends_the_lease_on_the_servers_clock_and_is_fenced() {
    let schema = Schema::new("renew").await;
    let raw = schema.client().await;
    let store = schema.store().await;
    let second = |key| ClaimRequest {
        lease: Duration::from_secs(1),
        ..request(key)
    };
    let claim = claimed(store.claim(&second("k")).await);
    let before = db_now(&raw).await;
    store
        .renew(&claim, Duration::from_secs(3_600))
        .await
        .unwrap();
    let after = db_now(&raw).await;
    let (_, lease_until, _) = row_times(&raw, "k").await;
    let hour = Duration::from_secs(3_600);
    assert!(
        before + hour <= lease_until && lease_until <= after + hour,
        "{lease_until:?} is an hour after the server's now ({before:?}..{after:?})"
    );
    // Long after the first lease would have ended, the key is still held.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        store.claim(&second("k")).await.unwrap(),
        ClaimOutcome::InProgress
    );

    // Fenced: another token, a token beyond the table's, a finished claim, a missing key.
    for stale in [
        Claim {
            token: 2,
            ..claim.clone()
        },
        Claim {
            token: u64::MAX,
            ..claim.clone()
        },
        Claim {
            key: "nobody".into(),
            token: 1,
        },
    ] {
        assert!(
            matches!(store.renew(&stale, hour).await, Err(StoreError::Fenced)),
            "{stale:?}"
        );
    }
    store.complete(&claim, "\"ok\"").await.unwrap();
    assert!(matches!(
        store.renew(&claim, hour).await,
        Err(StoreError::Fenced)
    ));
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_takeover_counts_the_retention_again_and_the_purge_spares_live_leases() {
    let schema = Schema::new("retention").await;
    let raw = schema.client().await;
    let clock = manual_clock();
    let start = clock.now();
    let store = schema.store().await.with_clock(clock.clone());
    let short = ClaimRequest {
        lease: Duration::from_secs(30),
        retention: DAY,
        ..request("k")
    };
    claimed(store.claim(&short).await);
    // Two days on, its holder long dead and its retention over: taken over, and kept a day
    // from now.
    clock.advance(2 * DAY);
    assert_eq!(claimed(store.claim(&short).await).token, 2);
    let (created, lease_until, expires) = row_times(&raw, "k").await;
    assert_eq!(created, start, "a takeover keeps the row's age");
    assert_eq!(lease_until, start + 2 * DAY + Duration::from_secs(30));
    assert_eq!(expires, start + 3 * DAY);
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(store.purge_older_than(Duration::ZERO).await.unwrap(), 0);

    // A row past its retention but whose lease is live is never purged under its holder.
    let long_lease = ClaimRequest {
        lease: 10 * DAY,
        retention: Duration::from_secs(1),
        ..request("busy")
    };
    let busy = claimed(store.claim(&long_lease).await);
    clock.advance(2 * DAY);
    assert_eq!(
        store.purge_older_than(Duration::ZERO).await.unwrap(),
        1,
        "`k` only"
    );
    store.renew(&busy, 10 * DAY).await.unwrap();
    clock.advance(9 * DAY);
    assert_eq!(store.purge_older_than(Duration::ZERO).await.unwrap(), 0);
    assert_eq!(
        store.claim(&long_lease).await.unwrap(),
        ClaimOutcome::InProgress
    );
    clock.advance(DAY);
    assert_eq!(store.purge_older_than(Duration::ZERO).await.unwrap(), 1);
    drop(store);
    schema.drop_all().await;
}

/// Every event of the process that says the store ran an operation again after a
/// serialization failure or a deadlock. One global subscriber (tracing caches per-callsite
/// interest process-wide), set before the conflicts are provoked.
fn conflict_retries() -> Arc<std::sync::Mutex<Vec<String>>> {
    use std::sync::{Mutex, OnceLock};
    use tracing_subscriber::layer::SubscriberExt as _;

    #[derive(Clone)]
    struct Retries(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Retries {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Fields(String);
            impl tracing::field::Visit for Fields {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    self.0.push_str(&format!("{}={:?} ", field.name(), value));
                }
            }
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            if fields.0.contains("serialization failure or deadlock") {
                self.0.lock().unwrap().push(fields.0);
            }
        }
    }

    static RETRIES: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    RETRIES
        .get_or_init(|| {
            let retries = Retries(Arc::default());
            let subscriber = tracing_subscriber::registry().with(retries.clone());
            tracing::subscriber::set_global_default(subscriber).unwrap();
            retries.0
        })
        .clone()
}

/// Waits until `n` backends whose application name starts with `prefix` wait for a lock.
async fn wait_for_lock_waits(watcher: &tokio_postgres::Client, prefix: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 || '%' \
                 AND wait_event_type = 'Lock'",
                &[&prefix],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{prefix}: {waiting} waiting, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// On a server whose sessions default to SERIALIZABLE, a write that waited for a row another
/// transaction then updated fails to serialize (`40001`): a plain client shows it, and the
/// store runs the write again and succeeds. The claim's own transaction is READ COMMITTED, so
/// a claim that waited for such a row decides on it without a serialization failure at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serialization_failures_are_tried_again_and_claims_are_read_committed() {
    let retries = conflict_retries();
    let schema = Schema::new("serializable").await;
    let app = format!("ser_{}", std::process::id());
    let serializable = format!(
        "{}%20-c%20default_transaction_isolation%3Dserializable",
        schema.url
    );
    let store = Arc::new(
        PgStore::connect(&format!("{serializable}&application_name={app}_store"))
            .await
            .unwrap()
            .with_pool_size(1),
    );
    let control = raw_client(&format!("{serializable}&application_name={app}_control")).await;
    let mine = |retries: &std::sync::Mutex<Vec<String>>, what: &str| {
        retries
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.contains(&format!("what=\"{what}\"")) && r.contains("attempt=1 "))
            .count()
    };
    let claim = claimed(store.claim(&request("k")).await);

    // Another transaction updates the row and holds it...
    let mut other = schema.client().await;
    let other_tx = other.transaction().await.unwrap();
    other_tx
        .execute(
            "UPDATE inbox_log SET biz_key = biz_key WHERE msg_id = 'k'",
            &[],
        )
        .await
        .unwrap();
    // ...while a plain serializable client and the store both try to complete the claim.
    let plain = tokio::spawn(async move {
        control
            .execute(
                "UPDATE inbox_log SET status = 'done', response = '\"plain\"' \
                 WHERE msg_id = 'k' AND token = 1 AND status = 'in_progress'",
                &[],
            )
            .await
    });
    let retried_before = mine(&retries, "done");
    let completed = tokio::spawn({
        let (store, claim) = (Arc::clone(&store), claim.clone());
        async move { store.complete(&claim, "\"store\"").await }
    });
    wait_for_lock_waits(&schema.client().await, &app, 2).await;
    other_tx.commit().await.unwrap();

    let failure = plain.await.unwrap().unwrap_err();
    assert_eq!(
        failure.code(),
        Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE),
        "the conflict is real: {failure:?}"
    );
    completed.await.unwrap().unwrap();
    assert_eq!(
        mine(&retries, "done"),
        retried_before + 1,
        "tried again once"
    );
    assert_eq!(
        store.claim(&request("k")).await.unwrap(),
        ClaimOutcome::Done("\"store\"".into())
    );

    // A released key, locked and claimed again (expired at once) by another instance while
    // this store's claim waits for the row.
    let released = claimed(store.claim(&request("r")).await);
    store.release(&released).await.unwrap();
    let other_tx = other.transaction().await.unwrap();
    other_tx
        .execute(
            "UPDATE inbox_log SET status = 'in_progress', token = token + 1, \
             lease_until = '2000-01-01T00:00:00.000000Z' WHERE msg_id = 'r'",
            &[],
        )
        .await
        .unwrap();
    let claimed_before = mine(&retries, "claim");
    let claiming = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.claim(&request("r")).await }
    });
    wait_for_lock_waits(&schema.client().await, &format!("{app}_store"), 1).await;
    other_tx.commit().await.unwrap();
    // The other instance's claim (token 2) had expired: taken over, on the first attempt.
    assert_eq!(claimed(claiming.await.unwrap()).token, 3);
    assert_eq!(mine(&retries, "claim"), claimed_before, "never tried again");
    drop(store);
    schema.drop_all().await;
}
