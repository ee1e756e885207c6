//! Fault: PostgreSQL restarts (`pg_ctl restart -m fast`) in the middle of 1,000 idempotent
//! deposits (`#[retryable]` above `#[idempotent(transaction = tx)]` on `PgStore`, eight at a
//! time). Calls caught by the restart either succeed on a later attempt or fail with an error
//! naming the cause; every failed deposit is then resent until it is done. Afterwards the effects
//! table holds each of the 1,000 deposits exactly once and every inbox row is `done`.
//!
//! It restarts the cluster `scripts/test` started (`RETRY_CORE_PG_CTL`, `RETRY_CORE_PG_DATA`,
//! `RETRY_CORE_PG_PORT`, `DATABASE_URL`); without them it fails, saying so. A guard starts the
//! cluster again if the test ends while it is down, since the other PostgreSQL test binaries of
//! the same `cargo test` run use it after this one. Keep this the only test of this binary: the
//! tests of one binary run at the same time.
#![cfg(feature = "postgres")]

use crate::pg;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg::Schema;
use retry_core::idempotency::IdempotencyError;
use retry_core::{Classify, Decision, retryable};
use retry_postgres::{PgStore, PgTransaction};

const DEPOSITS: u64 = 1_000;
const WORKERS: usize = 8;
/// The restart starts once this many deposits are done.
const RESTART_AFTER: u64 = 200;

// ---- the cluster ----

/// The cluster `scripts/test` started, through its `pg_ctl`.
struct Cluster {
    pg_ctl: PathBuf,
    data: PathBuf,
}

impl Cluster {
    fn from_env() -> Self {
        let var = |name: &str| match std::env::var(name) {
            Ok(value) if !value.trim().is_empty() => value,
            _ => panic!(
                "tests/fault_pg_restart.rs restarts the PostgreSQL cluster scripts/test starts \
                 and needs {name}, which scripts/test exports (with the other RETRY_CORE_PG_* \
                 variables and DATABASE_URL): run it through scripts/test"
            ),
        };
        Cluster {
            pg_ctl: var("RETRY_CORE_PG_CTL").into(),
            data: var("RETRY_CORE_PG_DATA").into(),
        }
    }

    /// Runs `pg_ctl -D <data> <args>`; its server log goes beside the data directory, as
    /// scripts/test's does, so the server never holds this process's pipes.
    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        let log = self.data.parent().unwrap_or(Path::new("/tmp")).join("log");
        Command::new(&self.pg_ctl)
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .arg("-l")
            .arg(log)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.pg_ctl.display()))
    }

    fn restart(&self) {
        let output = self.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60"]);
        assert!(
            output.status.success(),
            "pg_ctl restart failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn running(&self) -> bool {
        self.pg_ctl(&["status"]).status.success()
    }
}

/// Starts the cluster again if it is down when the test ends, pass or fail.
struct KeepRunning(Cluster);

impl Drop for KeepRunning {
    fn drop(&mut self) {
        if !self.0.running() {
            let output = self.0.pg_ctl(&["start", "-w", "-t", "60"]);
            eprintln!(
                "fault_pg_restart: started the cluster again ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stdout)
            );
        }
    }
}

// ---- the deposits ----

#[derive(Debug)]
enum Failed {
    Idempotency(IdempotencyError),
    Db(tokio_postgres::Error),
}

impl From<IdempotencyError> for Failed {
    fn from(e: IdempotencyError) -> Self {
        Failed::Idempotency(e)
    }
}

impl From<tokio_postgres::Error> for Failed {
    fn from(e: tokio_postgres::Error) -> Self {
        Failed::Db(e)
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Idempotency(e) => write!(f, "{}", retry_core::error_chain(e)),
            Failed::Db(e) => {
                // tokio-postgres says "db error"; what the server said is in the source.
                write!(f, "handler's statement failed: {e}")?;
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    write!(f, ": {cause}")?;
                    source = cause.source();
                }
                Ok(())
            }
        }
    }
}

/// The store's own errors as it classifies them; a failed statement of the handler is worth
/// another attempt too, since its transaction rolled back with it (transactional mode).
impl Classify for Failed {
    fn classify(&self) -> Decision {
        match self {
            Failed::Idempotency(e) => e.classify(),
            Failed::Db(_) => Decision::Retry,
        }
    }
}

/// What every attempt that failed and was tried again saw.
static RETRIED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record_retry(_attempt: u32, error: &Failed, _wait: Duration) {
    RETRIED.lock().unwrap().push(error.to_string());
}

#[retryable(max = 8, base = "50ms", cap = "500ms", on_retry = record_retry)]
#[idempotent(key = deposit_no, store = inbox, transaction = tx, lease = "2s")]
async fn deposit(inbox: &PgStore, tx: &mut PgTransaction, deposit_no: u64) -> Result<u64, Failed> {
    tx.client()
        .execute(
            "INSERT INTO effects (deposit_no) VALUES ($1)",
            &[&(deposit_no as i64)],
        )
        .await?;
    Ok(deposit_no)
}

/// The causes a failure during a restart may name; anything else fails the test.
const CAUSES: [&str; 8] = [
    "Connection refused",
    "connection closed",
    "terminating connection due to administrator command",
    "the database system is shutting down",
    "the database system is starting up",
    "Connection reset",
    "Broken pipe",
    "a call with the same idempotency key is in progress",
];

/// `message` with its numbers as `N`, so a summary groups alike messages.
fn shape(message: &str) -> String {
    let mut shaped = String::new();
    for c in message.chars() {
        if c.is_ascii_digit() {
            if !shaped.ends_with('N') {
                shaped.push('N');
            }
        } else {
            shaped.push(c);
        }
    }
    shaped
}

/// Every message names a known cause, and every store error names the server.
fn assert_named(messages: &[String], server: &str, what: &str) {
    for message in messages {
        assert!(
            CAUSES.iter().any(|cause| message.contains(cause)),
            "{what}: `{message}` names none of the expected causes {CAUSES:?}"
        );
        if message.starts_with("idempotency store unavailable") {
            assert!(
                message.contains(server),
                "{what}: `{message}` does not name the server {server}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_mid_run_loses_and_repeats_no_deposit() {
    let cluster = Arc::new(Cluster::from_env());
    let keep_running = KeepRunning(Cluster::from_env());
    let port = std::env::var("RETRY_CORE_PG_PORT").unwrap_or_else(|_| {
        panic!("tests/fault_pg_restart.rs needs RETRY_CORE_PG_PORT: run it through scripts/test")
    });
    let server = format!("PostgreSQL at 127.0.0.1:{port}");

    let schema = Schema::new("pg_restart").await;
    let client = schema.client().await;
    client
        .batch_execute("CREATE TABLE effects (deposit_no BIGINT NOT NULL)")
        .await
        .unwrap();
    drop(client);
    let store = Arc::new(schema.store().await);

    // Eight workers through the 1,000 deposits; the restart starts after the first 200.
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(BTreeMap::<u64, String>::new()));
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (store, next, done, failed) =
                (store.clone(), next.clone(), done.clone(), failed.clone());
            tokio::spawn(async move {
                loop {
                    let deposit_no = next.fetch_add(1, Ordering::SeqCst);
                    if deposit_no >= DEPOSITS {
                        break;
                    }
                    match deposit(&store, deposit_no).await {
                        Ok(answer) => assert_eq!(answer, deposit_no),
                        Err(e) => {
                            failed.lock().unwrap().insert(deposit_no, e.to_string());
                        }
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let restart = {
        let (cluster, done) = (cluster.clone(), done.clone());
        tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < RESTART_AFTER {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let at = done.load(Ordering::SeqCst);
            let began = Instant::now();
            tokio::task::spawn_blocking(move || cluster.restart())
                .await
                .unwrap();
            (at, began.elapsed(), done.load(Ordering::SeqCst))
        })
    };
    for worker in workers {
        worker.await.unwrap();
    }
    let (restarted_at, restart_took, done_after_restart) = restart.await.unwrap();
    let first_pass = started.elapsed();
    assert!(cluster.running(), "the cluster is up again");

    // Every failed call named its cause; the retried attempts did too.
    let failed = std::mem::take(&mut *failed.lock().unwrap());
    let retried = std::mem::take(&mut *RETRIED.lock().unwrap());
    assert_named(
        &failed.values().cloned().collect::<Vec<_>>(),
        &server,
        "a failed deposit",
    );
    assert_named(&retried, &server, "a retried attempt");
    assert!(
        !failed.is_empty() || !retried.is_empty(),
        "the restart (after {restarted_at} deposits, {restart_took:?}) hit no call: the test \
         proved nothing"
    );

    // Resend every failed deposit until it is done (a claim left by a broken connection holds
    // until its 2 s lease ends).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut resent = 0;
    let mut pending: BTreeSet<u64> = failed.keys().copied().collect();
    while !pending.is_empty() {
        assert!(
            Instant::now() < deadline,
            "still failing after 30 s: {pending:?}"
        );
        for deposit_no in pending.clone() {
            resent += 1;
            match deposit(&store, deposit_no).await {
                Ok(answer) => {
                    assert_eq!(answer, deposit_no);
                    pending.remove(&deposit_no);
                }
                Err(e) => assert_named(&[e.to_string()], &server, "a resend"),
            }
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Side effects == unique keys, each exactly once; no inbox row lost.
    let client = schema.client().await;
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT deposit_no), min(deposit_no), max(deposit_no) \
             FROM effects",
            &[],
        )
        .await
        .unwrap();
    let (effects, distinct, min, max): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (effects, distinct, min, max),
        (DEPOSITS as i64, DEPOSITS as i64, 0, DEPOSITS as i64 - 1),
        "side effects == unique keys, each once"
    );
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE status = 'done') FROM inbox_log",
            &[],
        )
        .await
        .unwrap();
    let (rows, done_rows): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(
        (rows, done_rows),
        (DEPOSITS as i64, DEPOSITS as i64),
        "every inbox row done"
    );

    // What happened, for RELIABILITY.md.
    let mut kinds = BTreeMap::<String, usize>::new();
    for message in retried.iter().chain(failed.values()) {
        *kinds.entry(shape(message)).or_default() += 1;
    }
    eprintln!(
        "fault_pg_restart: restart after {restarted_at} deposits took {restart_took:?} \
         ({done_after_restart} done when it ended); first pass {first_pass:?}; {} attempts \
         retried, {} deposits failed after their retries and were resent ({resent} resends)",
        retried.len(),
        failed.len()
    );
    for (kind, n) in kinds {
        eprintln!("  {n:>4} × {kind}");
    }
    drop(client);
    drop(store);
    schema.drop_all().await;
    drop(keep_running);
}
