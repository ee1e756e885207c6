//! `SqliteStore` on real files, beyond the store contract that `tests/conformance.rs` checks on
//! every store: every answer step by step against `MemoryStore`,
//! concurrent claims in one process and across two, a claim left by a killed process, purging
//! by age, and a store that is down.
//!
//! Two tests re-run this binary as a child process (`--exact <test> --nocapture`, with
//! `RETRY_CORE_SQLITE_CHILD=<file>`); the child side of each test is at its top.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, MemoryStore, StoreError,
    encode_namespaced_key,
};
use retry_core::idempotent;
use retry_core::time::ManualClock;
use retry_sqlite::SqliteStore;

/// Set in a child process: the database file to work on.
const CHILD_ENV: &str = "RETRY_CORE_SQLITE_CHILD";
const DAY: Duration = Duration::from_secs(86_400);

#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

impl TempDir {
    fn db(&self) -> PathBuf {
        self.file("inbox.sqlite3")
    }
}

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
async fn claim_complete_done_and_the_answer_survives_reopening() {
    let dir = TempDir::new("contract");
    let store = SqliteStore::open(dir.db()).unwrap();
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
    // Completing again under the same token is a retry whose first try committed: `Ok`, and
    // the first response stays.
    store.complete(&claim, "\"again\"").await.unwrap();
    assert_eq!(store.claim(&request("m-1")).await.unwrap(), done);
    drop(store);

    let reopened = SqliteStore::open(dir.db()).unwrap();
    assert_eq!(reopened.claim(&request("m-1")).await.unwrap(), done);
}

// ---- durability, renewal, retried writes, retention under a holder ----

#[tokio::test]
async fn synchronous_full_is_the_default_and_normal_is_an_opt_in() {
    let dir = TempDir::new("synchronous");
    let store = SqliteStore::open(dir.db()).unwrap();
    let debug = format!("{store:?}");
    assert!(debug.contains("synchronous_full: true"), "{debug}");
    let claim = claimed(store.claim(&request("m-sync")).await);
    store.complete(&claim, "\"ok\"").await.unwrap();

    let normal = store.with_synchronous_full(false);
    let debug = format!("{normal:?}");
    assert!(debug.contains("synchronous_full: false"), "{debug}");
    // The same file, with its rows, whatever the setting.
    assert_eq!(
        normal.claim(&request("m-sync")).await.unwrap(),
        ClaimOutcome::Done("\"ok\"".into())
    );
}

// ---- through `#[idempotent]` (real time) ----

#[idempotent(key = n, store = inbox, lease = "1s")]
async fn slow_deposit(
    inbox: &SqliteStore,
    runs: &AtomicUsize,
    n: u64,
    hold: Duration,
) -> Result<u64, IdempotencyError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(hold).await;
    Ok(n)
}

/// A body three times slower than its lease: the flow renews the lease on the file while it
/// runs, so duplicates past the first lease still get `InProgress`, and the body runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_its_lease_is_renewed_not_taken_over() {
    let dir = TempDir::new("slow-body");
    let inbox = SqliteStore::open(dir.db()).unwrap();
    let runs = AtomicUsize::new(0);
    let (first, duplicates) = tokio::join!(
        slow_deposit(&inbox, &runs, 1, Duration::from_secs(3)),
        async {
            // 1.5 s and 2.5 s after the claim: past its first lease, and past a second one.
            let started = Instant::now();
            let mut answers = Vec::new();
            for at in [1_500, 2_500] {
                tokio::time::sleep_until((started + Duration::from_millis(at)).into()).await;
                answers.push(slow_deposit(&inbox, &runs, 1, Duration::ZERO).await);
            }
            answers
        }
    );
    assert_eq!(first.unwrap(), 1);
    for answer in duplicates {
        assert!(
            matches!(answer, Err(IdempotencyError::InProgress)),
            "{answer:?}"
        );
    }
    assert_eq!(
        slow_deposit(&inbox, &runs, 1, Duration::ZERO)
            .await
            .unwrap(),
        1
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran once");
}

/// A non-transactional call dropped mid-body (a timeout) may have had its effect: its key is
/// not freed, duplicates get `InProgress` until its lease runs out (nothing renews it any
/// more), and only then may a resend run the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_keeps_its_key_in_progress_until_the_lease_ends() {
    let dir = TempDir::new("dropped-call");
    let inbox = SqliteStore::open(dir.db()).unwrap();
    let runs = AtomicUsize::new(0);
    let started = Instant::now();
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        slow_deposit(&inbox, &runs, 2, Duration::from_secs(60)),
    )
    .await;
    assert!(dropped.is_err(), "timed out");
    assert!(matches!(
        slow_deposit(&inbox, &runs, 2, Duration::ZERO).await,
        Err(IdempotencyError::InProgress)
    ));
    let key = encode_namespaced_key("slow_deposit", None::<&str>, &2u64);
    let status: String = rusqlite::Connection::open(dir.db())
        .unwrap()
        .query_row(
            "SELECT status FROM inbox_log WHERE msg_id = ?1",
            [&key],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(status, "in_progress", "not released");
    tokio::time::sleep_until((started + Duration::from_millis(1_300)).into()).await;
    assert_eq!(
        slow_deposit(&inbox, &runs, 2, Duration::ZERO)
            .await
            .unwrap(),
        2
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
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

fn same_result(sqlite: &Result<(), StoreError>, memory: &Result<(), StoreError>) -> bool {
    matches!(
        (sqlite, memory),
        (Ok(()), Ok(())) | (Err(StoreError::Fenced), Err(StoreError::Fenced))
    )
}

/// Thousands of random operations (claims with and without fingerprints, leases running out,
/// stale and current claims completing, releasing and failing, purges) give the same answers
/// from both stores, on one clock.
#[tokio::test]
async fn every_answer_matches_the_memory_store() {
    let dir = TempDir::new("differential");
    let clock = manual_clock();
    let sqlite = SqliteStore::open(dir.db())
        .unwrap()
        .with_clock(clock.clone());
    let memory = MemoryStore::with_clock(clock.clone());
    let keys = ["k0", "k1", "k2", "k3", "k4"];
    let fingerprints = [None, Some("fa"), Some("fb")];
    let leases = [0, 3, 10].map(Duration::from_secs);
    let retentions = [Duration::from_secs(1), 5 * DAY, 20 * DAY];
    let advances = [0, 0, 1, 4, 10, 2 * 86_400, 11 * 86_400].map(Duration::from_secs);
    let mut script = Script(0x9e37_79b9_7f4a_7c15);
    let mut claims: Vec<Claim> = Vec::new();
    let mut seen = [0usize; 5];
    for step in 0..3_000 {
        match script.next(10) {
            0..=3 => {
                let request = ClaimRequest {
                    key: keys[script.next(keys.len())],
                    biz_key: "biz",
                    fingerprint: fingerprints[script.next(fingerprints.len())],
                    lease: leases[script.next(leases.len())],
                    retention: retentions[script.next(retentions.len())],
                };
                let (s, m) = (
                    sqlite.claim(&request).await.unwrap(),
                    memory.claim(&request).await.unwrap(),
                );
                assert_eq!(s, m, "step {step}: claim {request:?}");
                seen[match &s {
                    ClaimOutcome::Claimed(_) => 0,
                    ClaimOutcome::Done(_) => 1,
                    ClaimOutcome::InProgress => 2,
                    ClaimOutcome::Failed(_) => 3,
                    ClaimOutcome::KeyReused => 4,
                }] += 1;
                if let ClaimOutcome::Claimed(claim) = s {
                    claims.push(claim);
                }
            }
            4..=6 if !claims.is_empty() => {
                // Mostly the latest claims, sometimes a stale one.
                let pick = claims.len() - 1 - script.next(claims.len().min(4));
                let claim = claims[pick].clone();
                let (s, m) = match script.next(3) {
                    0 => {
                        let response = format!("\"r{step}\"");
                        (
                            sqlite.complete(&claim, &response).await,
                            memory.complete(&claim, &response).await,
                        )
                    }
                    1 => (sqlite.release(&claim).await, memory.release(&claim).await),
                    _ => (
                        sqlite.mark_failed(&claim, "declined").await,
                        memory.mark_failed(&claim, "declined").await,
                    ),
                };
                assert!(
                    same_result(&s, &m),
                    "step {step}: {claim:?}: sqlite {s:?}, memory {m:?}"
                );
            }
            7 | 8 => clock.advance(advances[script.next(advances.len())]),
            _ => {
                let age = [Duration::ZERO, DAY, 10 * DAY][script.next(3)];
                let (s, m) = (
                    sqlite.purge_older_than(age).await.unwrap(),
                    memory.purge_older_than(age).await.unwrap(),
                );
                assert_eq!(s, m, "step {step}: purge_older_than({age:?})");
            }
        }
    }
    assert!(
        seen.iter().all(|&n| n > 20),
        "every outcome was exercised: {seen:?}"
    );
}

// ---- concurrency ----

/// What one process saw while hammering the shared file.
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

/// 32 claims of one shared key (the winner completes it) and 200 keys of its own, each
/// claimed and completed, all at once.
async fn hammer(store: Arc<SqliteStore>, who: &'static str) -> Counts {
    enum Did {
        Shared(Result<ClaimOutcome, StoreError>),
        Distinct(Result<(), StoreError>),
    }
    let mut tasks = Vec::new();
    for i in 0..232 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            // 32 shared claims spread among the 200 others.
            if i % 7 == 0 && i / 7 < 32 {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_claim_on_one_file() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        // The child: open, say so, wait for the parent's go, hammer, report.
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        println!("READY");
        std::io::stdout().flush().unwrap();
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
        let counts = hammer(store, "child").await;
        println!("{}", counts.line());
        return;
    }

    let dir = TempDir::new("two-processes");
    let store = Arc::new(SqliteStore::open(dir.db()).unwrap());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_processes_claim_on_one_file",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.db())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
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
        assert_eq!(counts.distinct_done, 200, "{who}: {counts:?}");
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
}

#[tokio::test]
async fn a_claim_left_by_a_killed_process_is_taken_over_after_its_lease() {
    let one_second = |key| ClaimRequest {
        lease: Duration::from_secs(1),
        ..request(key)
    };
    if let Ok(path) = std::env::var(CHILD_ENV) {
        // The child: claim, then die without releasing anything.
        let store = SqliteStore::open(&path).unwrap();
        let claim = claimed(store.claim(&one_second("crash")).await);
        println!("CLAIMED {}", claim.token);
        std::io::stdout().flush().unwrap();
        std::process::abort();
    }

    let dir = TempDir::new("killed");
    let store = SqliteStore::open(dir.db()).unwrap();
    let db = dir.db();
    let child = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_claim_left_by_a_killed_process_is_taken_over_after_its_lease",
                "--nocapture",
            ])
            .env(CHILD_ENV, db)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        // When the claim was surely made: as soon as the child says so.
        let claimed_at = stdout
            .lines()
            .map_while(Result::ok)
            .find(|line| line.ends_with("CLAIMED 1"))
            .map(|_| Instant::now());
        (claimed_at, child.wait().unwrap())
    });
    let (claimed_at, status) = tokio::time::timeout(Duration::from_secs(30), child)
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
}

#[test]
fn abandon_outside_a_runtime_starts_nothing() {
    let dir = TempDir::new("abandon-no-runtime");
    let store = SqliteStore::open(dir.db()).unwrap();
    assert!(!store.abandon(Claim {
        key: "k".into(),
        token: 1
    }));
}

// ---- purging ----

/// Claims every key, 16 at a time: the writes still take turns, but the hand-offs to the
/// blocking pool overlap.
async fn claim_all(
    store: &Arc<SqliteStore>,
    keys: impl Iterator<Item = String>,
    retention: Duration,
) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_by_age_only() {
    let dir = TempDir::new("purge");
    let clock = manual_clock();
    // NORMAL: 21,000 writes with an `fsync` each take a shared CI machine most of a minute, and
    // surviving a power cut is not what this test checks (the default's durability is the
    // default's business; every other test here runs on it).
    let store = Arc::new(
        SqliteStore::open(dir.db())
            .unwrap()
            .with_synchronous_full(false)
            .with_clock(clock.clone()),
    );
    let started = Instant::now();
    claim_all(&store, (0..500).map(|i| format!("old-{i}")), 30 * DAY).await;
    clock.advance(31 * DAY);
    claim_all(&store, (0..10_000).map(|i| format!("new-{i}")), 30 * DAY).await;
    let filled = started.elapsed();

    assert_eq!(store.purge_older_than(30 * DAY).await.unwrap(), 500);
    assert_eq!(store.purge_older_than(30 * DAY).await.unwrap(), 0);
    // The old keys are gone (claimed afresh); the new ones are all still there.
    assert_eq!(claimed(store.claim(&request("old-0")).await).token, 1);
    assert_eq!(claimed(store.claim(&request("old-499")).await).token, 1);
    for i in (0..10_000).step_by(97) {
        assert_eq!(
            store.claim(&request(&format!("new-{i}"))).await.unwrap(),
            ClaimOutcome::InProgress
        );
    }
    // A row is never purged before its own retention has passed, whatever the age asked.
    claim_all(&store, (0..500).map(|i| format!("kept-{i}")), 60 * DAY).await;
    clock.advance(31 * DAY);
    assert_eq!(
        store.purge_older_than(30 * DAY).await.unwrap(),
        10_000 + 2,
        "only the 30-day rows"
    );
    clock.advance(29 * DAY);
    assert_eq!(store.purge_older_than(30 * DAY).await.unwrap(), 500);
    eprintln!("purge test: 10,500 claims took {filled:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purger_runs_in_the_background() {
    let dir = TempDir::new("purger");
    let clock = manual_clock();
    let store = Arc::new(
        SqliteStore::open(dir.db())
            .unwrap()
            .with_clock(clock.clone()),
    );
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
}

// ---- a store that is down ----

#[test]
fn opening_in_a_missing_directory_is_unavailable() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("no-such-dir").join("inbox.sqlite3");
    let error = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    let message = retry_core::error_chain(&error).to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("does not exist"), "{message}");
}

#[tokio::test]
async fn a_locked_file_fails_after_the_busy_timeout() {
    let dir = TempDir::new("locked");
    let store = SqliteStore::open(dir.db())
        .unwrap()
        .with_busy_timeout(Duration::from_millis(100));
    let locker = rusqlite::Connection::open(dir.db()).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let started = Instant::now();
    let error = store.claim(&request("m-6")).await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    let message = retry_core::error_chain(&error).to_string();
    let expected = format!(
        "database file {} is locked by another process (busy for 100ms)",
        dir.db().display()
    );
    assert!(message.contains(&expected), "{message}");
    assert!(
        waited >= Duration::from_millis(90) && waited < Duration::from_secs(3),
        "waited {waited:?}"
    );

    // Once the lock is gone the store works again: nothing was claimed meanwhile.
    locker.execute_batch("COMMIT").unwrap();
    assert_eq!(claimed(store.claim(&request("m-6")).await).token, 1);
}
