//! Soak: 1,000 concurrent senders against an idempotent receiver on `SqliteStore` and
//! `PgStore`, through an unreliable upstream, for a bounded time; invariants checked at the end
//! and figures printed.
//!
//! Each sender sends a stream of logical operations (unique ids) through a `#[retryable]`
//! function with a dead-letter sink to an `#[idempotent(transaction = tx)]` receiver, whose side
//! effect is a row in the same database, committed with the `done` row. Between them a seeded
//! generator injects:
//!
//! - upstream failures (a 503 before the receiver: retried);
//! - lost responses (the receiver ran and its answer never arrived: retried with the same key,
//!   so the receiver must answer from its store);
//! - later duplicates (a completed operation sent again) and concurrent duplicates (one
//!   operation sent by two tasks at once);
//! - an outage for a few operations (every attempt fails, or every answer is lost), so some
//!   letters are always parked. Operations that run out of attempts are parked, and redriven
//!   into the receiver at the end.
//!
//! At the end: exactly one effect row per logical operation (and no other rows); every caller
//! got the response of the body run that committed; every key is `done` in `inbox_log`; the
//! dead-letter queue is empty after the redrive; duplicates were absorbed; nothing hung.
//!
//! The run is bounded and stops by itself: senders start new operations for `SOAK_SECS` seconds
//! (default 3, at most 50) or until `SOAK_OPS` operations (default 1,000,000) were started;
//! whatever is in flight then, and the redrive, must finish within 10 s more, or the test fails
//! as hung. So a run lasts at most 60 s per store. `cargo test` (and `scripts/test`) runs the
//! short version; the long one, with its figures:
//!
//! ```sh
//! SOAK_SECS=60 cargo test --release --all-features --test soak -- --nocapture
//! ```
//!
//! (`SOAK_SECS=60` is taken as the 50 s maximum of load: 60 s in all with the drain.) Without
//! `--all-features` only the SQLite run is built; with it, the PostgreSQL run needs
//! `DATABASE_URL` (as `scripts/test` sets it) and fails without one. `SOAK_SEED` changes the
//! injected faults.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use retry_core::dlq::{DeadLetterStore, DlqFailed, Redrive};
use retry_core::idempotency::{
    IdempotencyError, StoreError, TransactionalStore, encode_key, encode_namespaced_key,
};
use retry_core::{Classify, Decision, idempotent, retryable};
use retry_sqlite::SqliteDeadLetters;
use retry_sqlite::{SqliteStore, SqliteTransaction};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;

#[path = "common/tempdir.rs"]
mod tempdir;

#[cfg(feature = "postgres")]
#[path = "common/pg.rs"]
mod pg;

use tempdir::TempDir;

const SENDERS: usize = 1_000;
/// The longest load phase; with the drain, a run lasts at most 60 s.
const MAX_LOAD: Duration = Duration::from_secs(50);
/// How long in-flight operations and the redrive may take once the load phase is over.
const DRAIN: Duration = Duration::from_secs(10);
const DEFAULT_SECS: f64 = 3.0;
const DEFAULT_OPS: u64 = 1_000_000;
const DEFAULT_SEED: u64 = 0x5eed_0011;

/// Per attempt: a 503 before the receiver.
const UPSTREAM_FAILURE: f64 = 0.10;
/// Per attempt that reached the receiver and was answered: the answer is lost.
const LOST_RESPONSE: f64 = 0.10;
/// Per operation a sender sends: an operation that already completed, again.
const LATER_DUPLICATE: f64 = 0.15;
/// Per new operation: sent by a second task at the same time.
const CONCURRENT_DUPLICATE: f64 = 0.03;
/// Operation ids `≡ 0 (mod OUTAGE_EVERY)` always get a 503; `≡ OUTAGE_EVERY / 2` always lose
/// their answer. Both are parked, whatever the dice say.
const OUTAGE_EVERY: u64 = 500;
/// Letters redriven per second at the end.
const REDRIVE_RATE: u32 = 2_000;

// ---- the receiver ----

/// A logical operation, as the sender sends it and a dead letter keeps it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Op {
    op: u64,
}

/// The receiver's answer: which body run produced it (stored, and returned to duplicates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Receipt {
    op: u64,
    run: u64,
}

#[derive(Debug)]
enum SoakError {
    /// A 503 from the upstream, before the receiver.
    Upstream,
    /// The receiver answered; the answer was lost on the way back.
    LostResponse,
    /// The receiver refused (a concurrent duplicate in progress, a busy store, ...).
    Receiver(IdempotencyError),
    /// The effect's write failed (rolled back with its transaction).
    Db(String),
    /// Given up, and the dead-letter sink failed: not parked.
    NotParked(Box<DlqFailed>),
}

impl Classify for SoakError {
    fn classify(&self) -> Decision {
        match self {
            SoakError::Upstream | SoakError::LostResponse | SoakError::Db(_) => Decision::Retry,
            SoakError::Receiver(e) => e.classify(),
            SoakError::NotParked(_) => Decision::Stop,
        }
    }
}

impl fmt::Display for SoakError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SoakError::Upstream => f.write_str("503 Service Unavailable"),
            SoakError::LostResponse => f.write_str("connection reset before the response"),
            SoakError::Receiver(e) => write!(f, "{e}"),
            SoakError::Db(e) => write!(f, "effect not written: {e}"),
            SoakError::NotParked(e) => write!(f, "not parked: {e:?}"),
        }
    }
}

impl From<IdempotencyError> for SoakError {
    fn from(e: IdempotencyError) -> Self {
        SoakError::Receiver(e)
    }
}

impl From<StoreError> for SoakError {
    fn from(e: StoreError) -> Self {
        SoakError::Db(e.to_string())
    }
}

impl From<DlqFailed> for SoakError {
    fn from(e: DlqFailed) -> Self {
        SoakError::NotParked(Box::new(e))
    }
}

/// A store whose transaction can carry the receiver's effect: one row in `effects`.
trait Effects: TransactionalStore + Send + Sync + 'static {
    fn write_effect(
        tx: &mut Self::Transaction,
        op: u64,
        run: u64,
    ) -> impl Future<Output = Result<(), SoakError>> + Send;
}

impl Effects for SqliteStore {
    async fn write_effect(tx: &mut SqliteTransaction, op: u64, run: u64) -> Result<(), SoakError> {
        tx.run(move |c| {
            c.execute(
                "INSERT INTO effects (op, run) VALUES (?1, ?2)",
                rusqlite::params![as_sql(op), as_sql(run)],
            )
        })
        .await?;
        Ok(())
    }
}

#[cfg(feature = "postgres")]
impl Effects for retry_postgres::PgStore {
    async fn write_effect(
        tx: &mut retry_postgres::PgTransaction,
        op: u64,
        run: u64,
    ) -> Result<(), SoakError> {
        tx.client()
            .execute(
                "INSERT INTO effects (op, run) VALUES ($1, $2)",
                &[&as_sql(op), &as_sql(run)],
            )
            .await
            .map_err(|e| SoakError::Db(e.to_string()))?;
        Ok(())
    }
}

fn as_sql(n: u64) -> i64 {
    i64::try_from(n).expect("ids fit in an i64")
}

/// The receiver: its effect and its `done` row commit together.
#[idempotent(key = op, store = inbox, transaction = tx)]
async fn receive<S: Effects>(
    inbox: &S,
    tx: &mut S::Transaction,
    tally: &Tally,
    op: u64,
) -> Result<Receipt, SoakError> {
    let run = tally.bodies_run.fetch_add(1, Ordering::Relaxed) + 1;
    S::write_effect(tx, op, run).await?;
    Ok(Receipt { op, run })
}

// ---- the sender and its upstream ----

/// The network between a sender and the receiver: latency and injected faults, from a seeded
/// generator of the sender's own.
struct Upstream {
    rng: Mutex<SmallRng>,
}

impl Upstream {
    fn new(seed: u64) -> Self {
        Upstream {
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        }
    }

    fn roll(&self, p: f64) -> bool {
        self.rng.lock().unwrap().random_bool(p)
    }

    /// One hop: up to 2 ms.
    async fn hop(&self) {
        let micros = self.rng.lock().unwrap().random_range(0..2_000);
        tokio::time::sleep(Duration::from_micros(micros)).await;
    }

    fn fails(&self, op: u64) -> bool {
        op.is_multiple_of(OUTAGE_EVERY) || self.roll(UPSTREAM_FAILURE)
    }

    fn loses(&self, op: u64) -> bool {
        op % OUTAGE_EVERY == OUTAGE_EVERY / 2 || self.roll(LOST_RESPONSE)
    }
}

/// The sender's one retrying layer. A letter's `msg_id` is the receiver's idempotency key.
#[retryable(max = 4, base = "1ms", cap = "20ms",
    dlq(sink = letters, id = encode_key(&req.op), original = &req))]
async fn send<S: Effects>(
    letters: &SqliteDeadLetters,
    inbox: &S,
    upstream: &Upstream,
    tally: &Tally,
    req: Op,
) -> Result<Receipt, SoakError> {
    tally.attempts.fetch_add(1, Ordering::Relaxed);
    upstream.hop().await;
    if upstream.fails(req.op) {
        tally.upstream_failures.fetch_add(1, Ordering::Relaxed);
        return Err(SoakError::Upstream);
    }
    tally.receiver_calls.fetch_add(1, Ordering::Relaxed);
    let receipt = receive(inbox, tally, req.op)
        .await
        .inspect_err(|e| tally.refused(e))?;
    tally.answered(receipt);
    upstream.hop().await;
    if upstream.loses(req.op) {
        tally.lost_responses.fetch_add(1, Ordering::Relaxed);
        return Err(SoakError::LostResponse);
    }
    Ok(receipt)
}

// ---- counting ----

#[derive(Default)]
struct Tally {
    /// Logical operations started (ids `1..=started`).
    started: AtomicU64,
    sends: AtomicU64,
    later_duplicates: AtomicU64,
    concurrent_duplicates: AtomicU64,
    attempts: AtomicU64,
    upstream_failures: AtomicU64,
    receiver_calls: AtomicU64,
    answered: AtomicU64,
    bodies_run: AtomicU64,
    lost_responses: AtomicU64,
    in_progress: AtomicU64,
    store_busy: AtomicU64,
    effect_failed: AtomicU64,
    parked: AtomicU64,
    /// Errors no injected fault explains: must stay empty.
    unexpected: Mutex<Vec<String>>,
    /// The first answer each operation got (op → body run); later ones must be the same.
    answers: Mutex<HashMap<u64, u64>>,
    /// Completed operations, for later duplicates.
    completed: Mutex<Vec<u64>>,
}

impl Tally {
    fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn unexpected(&self, what: String) {
        let mut unexpected = self.unexpected.lock().unwrap();
        if unexpected.len() < 20 {
            unexpected.push(what);
        }
    }

    fn refused(&self, e: &SoakError) {
        match e {
            SoakError::Receiver(IdempotencyError::InProgress) => &self.in_progress,
            SoakError::Receiver(IdempotencyError::Store(StoreError::Unavailable(_))) => {
                &self.store_busy
            }
            SoakError::Db(_) => &self.effect_failed,
            other => return self.unexpected(format!("receiver: {other}")),
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// The main counters, for a run that did not finish.
    fn snapshot(&self) -> String {
        let c = Self::count;
        format!(
            "so far: {} operations, {} attempts, {} answered, {} bodies run, {} in progress, \
             {} store busy, {} effect writes failed, {} parked",
            c(&self.started),
            c(&self.attempts),
            c(&self.answered),
            c(&self.bodies_run),
            c(&self.in_progress),
            c(&self.store_busy),
            c(&self.effect_failed),
            c(&self.parked)
        )
    }

    fn answered(&self, receipt: Receipt) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        let first = *self
            .answers
            .lock()
            .unwrap()
            .entry(receipt.op)
            .or_insert(receipt.run);
        if first != receipt.run {
            self.unexpected(format!(
                "operation {} answered from body run {} and from body run {first}",
                receipt.op, receipt.run
            ));
        }
    }
}

// ---- the run ----

struct Settings {
    load: Duration,
    ops: u64,
    seed: u64,
}

impl Settings {
    fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let secs = var("SOAK_SECS").map_or(DEFAULT_SECS, |v| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or_else(|| panic!("SOAK_SECS={v:?}: expected seconds, e.g. 3 or 0.5"))
        });
        let ops = var("SOAK_OPS").map_or(DEFAULT_OPS, |v| {
            v.trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| panic!("SOAK_OPS={v:?}: expected a positive count"))
        });
        let seed = var("SOAK_SEED").map_or(DEFAULT_SEED, |v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("SOAK_SEED={v:?}: expected a number"))
        });
        Settings {
            load: Duration::from_secs_f64(secs.min(MAX_LOAD.as_secs_f64())),
            ops,
            seed,
        }
    }
}

struct Ctx<S> {
    store: S,
    letters: SqliteDeadLetters,
    tally: Tally,
    ops: u64,
    stop_at: Instant,
}

impl<S: Effects> Ctx<S> {
    /// A new operation id, unless the budget is spent.
    fn next_op(&self) -> Option<u64> {
        let op = self.tally.started.fetch_add(1, Ordering::Relaxed) + 1;
        if op <= self.ops {
            Some(op)
        } else {
            self.tally.started.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }

    /// One send of `op`, acknowledged once answered or parked.
    async fn deliver(&self, upstream: &Upstream, op: u64) -> bool {
        self.tally.sends.fetch_add(1, Ordering::Relaxed);
        match send(&self.letters, &self.store, upstream, &self.tally, Op { op }).await {
            Ok(receipt) => {
                if receipt.op != op {
                    self.tally
                        .unexpected(format!("operation {op} got the receipt of {receipt:?}"));
                }
                true
            }
            Err(SoakError::NotParked(e)) => {
                self.tally
                    .unexpected(format!("operation {op} gave up and was not parked: {e:?}"));
                false
            }
            Err(_) => {
                self.tally.parked.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// One sender: new operations, later duplicates and concurrent duplicates until the stop.
async fn sender<S: Effects>(ctx: Arc<Ctx<S>>, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let upstream = Upstream::new(rng.random());
    while Instant::now() < ctx.stop_at {
        if rng.random_bool(LATER_DUPLICATE) {
            let done = {
                let completed = ctx.tally.completed.lock().unwrap();
                (!completed.is_empty()).then(|| completed[rng.random_range(0..completed.len())])
            };
            if let Some(op) = done {
                ctx.tally.later_duplicates.fetch_add(1, Ordering::Relaxed);
                ctx.deliver(&upstream, op).await;
                continue;
            }
        }
        let Some(op) = ctx.next_op() else { break };
        let completed = if rng.random_bool(CONCURRENT_DUPLICATE) {
            ctx.tally
                .concurrent_duplicates
                .fetch_add(1, Ordering::Relaxed);
            // Another task, so its retry is a layer of its own (a retry scope is per task).
            let twin = tokio::spawn({
                let ctx = ctx.clone();
                let upstream = Upstream::new(rng.random());
                async move { ctx.deliver(&upstream, op).await }
            });
            let mine = ctx.deliver(&upstream, op).await;
            twin.await.unwrap() | mine
        } else {
            ctx.deliver(&upstream, op).await
        };
        if completed {
            ctx.tally.completed.lock().unwrap().push(op);
        }
    }
}

/// What a run did, and the figures to print.
struct Run {
    name: &'static str,
    load: Duration,
    drain: Duration,
    redrive: Duration,
    pending_before_redrive: u64,
    redriven: u64,
    redrive_failed: u64,
    redrive_skipped: u64,
    pending_after_redrive: u64,
    system_letters: bool,
    tally: Tally,
}

/// The run on `store`: 1,000 senders for the load phase, then the drain and the redrive, all
/// within `DRAIN` of the stop or the test fails as hung.
async fn soak<S: Effects>(
    name: &'static str,
    store: S,
    letters: SqliteDeadLetters,
    settings: &Settings,
) -> Run {
    let started = Instant::now();
    let stop_at = started + settings.load;
    let hard_stop = stop_at + DRAIN;
    let ctx = Arc::new(Ctx {
        store,
        letters,
        tally: Tally::default(),
        ops: settings.ops,
        stop_at,
    });
    let mut senders = JoinSet::new();
    for i in 0..SENDERS as u64 {
        let seed = settings.seed ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        senders.spawn(sender(ctx.clone(), seed));
    }
    while !senders.is_empty() {
        match tokio::time::timeout_at(hard_stop, senders.join_next()).await {
            Ok(Some(done)) => done.unwrap(),
            Ok(None) => break,
            Err(_) => panic!(
                "{name}: {} of {SENDERS} senders still running {DRAIN:?} after the stop: a call hung ({})",
                senders.len(),
                ctx.tally.snapshot()
            ),
        }
    }
    let load = stop_at.min(Instant::now()) - started;
    let drain = Instant::now().saturating_duration_since(stop_at);

    // Every letter is the receiver's own input: redrive them all into it.
    let redrive_started = Instant::now();
    let before = ctx.letters.stats().await.unwrap();
    let pending_before_redrive = before.pending;
    let system_letters = before.data == 0;
    let redrive = Redrive::new(&ctx.letters, "soak")
        .limit(usize::MAX)
        .rate(REDRIVE_RATE)
        .stop_after_failures(u32::MAX)
        .target("receive")
        .run(|req: Op| receive(&ctx.store, &ctx.tally, req.op));
    let report = match tokio::time::timeout_at(hard_stop, redrive).await {
        Ok(report) => report.unwrap(),
        Err(_) => panic!(
            "{name}: the redrive was still running {DRAIN:?} after the stop: hung ({})",
            ctx.tally.snapshot()
        ),
    };
    let pending_after_redrive = ctx.letters.stats().await.unwrap().pending;
    let redrive = redrive_started.elapsed();

    let Ok(ctx) = Arc::try_unwrap(ctx) else {
        panic!("{name}: a sender outlived the run")
    };
    let r = report.record;
    ctx.tally.answered.fetch_add(r.succeeded, Ordering::Relaxed);
    Run {
        name,
        load,
        drain,
        redrive,
        pending_before_redrive,
        redriven: r.succeeded,
        redrive_failed: r.failed,
        redrive_skipped: r.skipped,
        pending_after_redrive,
        system_letters,
        tally: ctx.tally,
    }
}

/// What the database holds at the end.
struct Tables {
    /// `(op, run)` of every effect row.
    effects: Vec<(i64, i64)>,
    /// `msg_id → status` of every `inbox_log` row.
    inbox: HashMap<String, String>,
}

impl Run {
    fn check(&self, tables: &Tables) {
        let t = &self.tally;
        let name = self.name;
        let unique = Tally::count(&t.started);

        // One effect per logical operation, and no other.
        let mut effects: HashMap<u64, Vec<u64>> = HashMap::new();
        for &(op, run) in &tables.effects {
            effects
                .entry(u64::try_from(op).unwrap())
                .or_default()
                .push(u64::try_from(run).unwrap());
        }
        let repeated: Vec<_> = effects
            .iter()
            .filter(|(_, runs)| runs.len() != 1)
            .take(10)
            .collect();
        assert!(
            repeated.is_empty(),
            "{name}: side effects per key must be exactly 1; (op, body runs) with more: {repeated:?}"
        );
        let missing: Vec<u64> = (1..=unique)
            .filter(|op| !effects.contains_key(op))
            .take(10)
            .collect();
        assert!(
            missing.is_empty(),
            "{name}: operations without an effect: {missing:?}"
        );
        assert_eq!(
            tables.effects.len() as u64,
            unique,
            "{name}: total effects == unique logical operations"
        );

        // Every caller got the response of the body run that committed.
        let answers = t.answers.lock().unwrap();
        let wrong: Vec<_> = answers
            .iter()
            .filter(|&(op, run)| effects.get(op).is_none_or(|runs| runs[0] != *run))
            .take(10)
            .collect();
        assert!(
            wrong.is_empty(),
            "{name}: answered with a response not from the committed body run: {wrong:?}"
        );

        // No inbox row lost: every key done, and no other row.
        let not_done: Vec<_> = (1..=unique)
            .filter_map(|op| {
                let key = encode_namespaced_key("receive", None::<&str>, &op);
                match tables.inbox.get(&key).map(String::as_str) {
                    Some("done") => None,
                    other => Some((op, other.map(str::to_owned))),
                }
            })
            .take(10)
            .collect();
        assert!(
            not_done.is_empty(),
            "{name}: keys not done in inbox_log: {not_done:?}"
        );
        assert_eq!(tables.inbox.len() as u64, unique, "{name}: inbox rows");

        // The dead-letter queue: parked what gave up, all of it redriven.
        if unique >= OUTAGE_EVERY {
            assert!(
                Tally::count(&t.parked) > 0,
                "{name}: the outage parked nothing"
            );
        }
        assert!(
            self.system_letters,
            "{name}: a letter was parked as a data failure"
        );
        assert_eq!(
            (self.redrive_failed, self.redrive_skipped),
            (0, 0),
            "{name}: every letter redriven"
        );
        assert_eq!(self.redriven, self.pending_before_redrive);
        assert_eq!(
            self.pending_after_redrive, 0,
            "{name}: DLQ empty after the redrive"
        );

        // The faults were injected, and the receiver absorbed the duplicates.
        for (what, counter) in [
            ("upstream failures", &t.upstream_failures),
            ("lost responses", &t.lost_responses),
            ("later duplicates", &t.later_duplicates),
            ("concurrent duplicates", &t.concurrent_duplicates),
        ] {
            assert!(Tally::count(counter) > 0, "{name}: no {what} injected");
        }
        assert!(
            self.absorbed() > 0,
            "{name}: no duplicate was absorbed, with {} injected",
            Tally::count(&t.later_duplicates) + Tally::count(&t.lost_responses)
        );
        let unexpected = t.unexpected.lock().unwrap();
        assert!(
            unexpected.is_empty(),
            "{name}: unexpected errors: {unexpected:#?}"
        );
        assert!(
            self.load + self.drain + self.redrive <= MAX_LOAD + DRAIN,
            "{name}: the run took longer than its bound"
        );
    }

    /// Calls answered without a new effect: the stored response, returned to a duplicate.
    fn absorbed(&self) -> u64 {
        Tally::count(&self.tally.answered).saturating_sub(Tally::count(&self.tally.started))
    }

    fn print(&self, tables: &Tables) {
        let t = &self.tally;
        let c = Tally::count;
        let calls = c(&t.receiver_calls) + self.redriven + self.redrive_failed;
        let total = self.load + self.drain + self.redrive;
        let per_second = (calls as f64 / total.as_secs_f64()).round() as u64;
        let rows: [(&str, String); 18] = [
            (
                "calls/s",
                format!(
                    "{} (receiver calls {} in {:.2} s)",
                    n(per_second),
                    n(calls),
                    total.as_secs_f64()
                ),
            ),
            ("logical operations", n(c(&t.started))),
            (
                "sends",
                format!(
                    "{} (with {} later and {} concurrent duplicates)",
                    n(c(&t.sends)),
                    n(c(&t.later_duplicates)),
                    n(c(&t.concurrent_duplicates))
                ),
            ),
            ("attempts", n(c(&t.attempts))),
            ("calls answered", n(c(&t.answered))),
            ("bodies run", n(c(&t.bodies_run))),
            ("effects committed", n(tables.effects.len() as u64)),
            ("duplicates absorbed", n(self.absorbed())),
            ("lost responses injected", n(c(&t.lost_responses))),
            ("upstream failures injected", n(c(&t.upstream_failures))),
            ("in progress (concurrent)", n(c(&t.in_progress))),
            ("store busy", n(c(&t.store_busy))),
            ("effect writes failed", n(c(&t.effect_failed))),
            (
                "letters parked",
                format!(
                    "{} ({} pending before the redrive)",
                    n(c(&t.parked)),
                    n(self.pending_before_redrive)
                ),
            ),
            ("letters redriven", n(self.redriven)),
            ("DLQ after the redrive", n(self.pending_after_redrive)),
            (
                "duration",
                format!(
                    "{:.2} s (load {:.2} s, drain {:.2} s, redrive {:.2} s)",
                    total.as_secs_f64(),
                    self.load.as_secs_f64(),
                    self.drain.as_secs_f64(),
                    self.redrive.as_secs_f64()
                ),
            ),
            ("senders", n(SENDERS as u64)),
        ];
        let mut out = format!("soak {}:\n", self.name);
        for (label, value) in rows {
            out.push_str(&format!("  {label:<27} {value}\n"));
        }
        eprint!("{out}");
    }
}

/// `1234567` → `1,234,567`.
fn n(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// The two runs share two cores: one at a time, so their figures are their own.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---- the two stores ----

#[test]
fn soak_sqlite() {
    let _serial = one_at_a_time();
    let settings = Settings::from_env();
    let dir = TempDir::new("soak");
    let db = dir.file("inbox.sqlite3");
    runtime().block_on(async {
        let store = SqliteStore::open(&db).unwrap();
        let raw = rusqlite::Connection::open(&db).unwrap();
        raw.execute_batch("CREATE TABLE effects (op INTEGER NOT NULL, run INTEGER NOT NULL)")
            .unwrap();
        let letters = SqliteDeadLetters::open(dir.file("dlq.sqlite3")).unwrap();

        let run = soak("SqliteStore", store, letters, &settings).await;
        let mut effects = raw.prepare("SELECT op, run FROM effects").unwrap();
        let effects = effects
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut inbox = raw.prepare("SELECT msg_id, status FROM inbox_log").unwrap();
        let inbox = inbox
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let tables = Tables { effects, inbox };
        run.print(&tables);
        run.check(&tables);
    });
}

#[cfg(feature = "postgres")]
#[test]
fn soak_postgres() {
    let _serial = one_at_a_time();
    let settings = Settings::from_env();
    let dir = TempDir::new("soak-pg");
    runtime().block_on(async {
        let schema = pg::Schema::new("soak").await;
        let client = schema.client().await;
        client
            .batch_execute("CREATE TABLE effects (op BIGINT NOT NULL, run BIGINT NOT NULL)")
            .await
            .unwrap();
        let store = schema.store().await;
        let letters = SqliteDeadLetters::open(dir.file("dlq.sqlite3")).unwrap();

        let run = soak("PgStore", store, letters, &settings).await;
        let effects = client
            .query("SELECT op, run FROM effects", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let inbox = client
            .query("SELECT msg_id, status FROM inbox_log", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let tables = Tables { effects, inbox };
        run.print(&tables);
        run.check(&tables);
        drop(client);
        schema.drop_all().await;
    });
}
