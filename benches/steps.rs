//! The cost of steps on the success path (BENCHMARKS.md, "Steps"): an `#[idempotent]` body
//! making three effects, written with three `step`s and without, on `SqliteStore` and (with
//! the `postgres` feature and `DATABASE_URL`) on `PgStore`, at 1 and 8 concurrent callers on a
//! 2-worker Tokio runtime. The effects themselves cost nothing (a counter), so the difference
//! is the journal: per step, `started` before the effect and the output after it (two fenced
//! writes), and one read of the journal per call, at its first step; a transactional step
//! (`step_in_transaction`) writes its output in its own transaction instead (one commit).
//!
//! `cargo bench --bench steps` (SQLite), `cargo bench --bench steps --features postgres`
//! (both; needs DATABASE_URL). `STEPS_BENCH_CALLS` (default 400) and `STEPS_BENCH_ROUNDS`
//! (default 5) scale it; the figures are the medians of the rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use retry_core::idempotency::{
    IdempotencyError, IdempotencyStore, TransactionalStore, step, step_in_transaction,
};
use retry_core::idempotent;

#[derive(Debug)]
struct Failed;

impl From<IdempotencyError> for Failed {
    fn from(e: IdempotencyError) -> Self {
        panic!("the bench's call failed: {e}")
    }
}

/// The effects: a counter, so the store's work is all that is measured.
static EFFECTS: AtomicU64 = AtomicU64::new(0);

fn effect() -> u64 {
    EFFECTS.fetch_add(1, Ordering::Relaxed)
}

#[idempotent(key = order, store = store, namespace = "bench.plain")]
async fn plain<S: IdempotencyStore>(store: &S, order: u64) -> Result<[u64; 3], Failed> {
    Ok([effect(), effect(), effect()])
}

#[idempotent(key = order, store = store, namespace = "bench.steps")]
async fn stepped<S: IdempotencyStore>(store: &S, order: u64) -> Result<[u64; 3], Failed> {
    let ride = step("ride", async |_| Ok::<_, Failed>(effect())).await?;
    let charge = step("charge", async |_| Ok::<_, Failed>(effect())).await?;
    let receipt = step("receipt", async |_| Ok::<_, Failed>(effect())).await?;
    Ok([ride, charge, receipt])
}

#[idempotent(key = order, store = store, namespace = "bench.transactional_steps")]
async fn transactional<S: TransactionalStore>(store: &S, order: u64) -> Result<[u64; 3], Failed> {
    let ride = step_in_transaction("ride", store, async |_, _| Ok::<_, Failed>(effect())).await?;
    let charge =
        step_in_transaction("charge", store, async |_, _| Ok::<_, Failed>(effect())).await?;
    let receipt =
        step_in_transaction("receipt", store, async |_, _| Ok::<_, Failed>(effect())).await?;
    Ok([ride, charge, receipt])
}

/// `calls` new orders from `first`, `clients` at a time: calls per second.
async fn run<S, F, Fut>(store: &Arc<S>, clients: u64, calls: u64, first: u64, call: F) -> f64
where
    S: IdempotencyStore + 'static,
    F: Fn(Arc<S>, u64) -> Fut + Send + Sync + Copy + 'static,
    Fut: Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicU64::new(first));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (store, next) = (Arc::clone(store), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let order = next.fetch_add(1, Ordering::Relaxed);
                    if order >= first + calls {
                        return;
                    }
                    call(Arc::clone(&store), order).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client task");
    }
    calls as f64 / started.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One store's rows: for 1 and 8 clients, calls/s without steps, with three steps, and with
/// three transactional steps.
async fn measure<S: TransactionalStore + 'static>(name: &str, store: Arc<S>) {
    let calls: u64 = env("STEPS_BENCH_CALLS", 400);
    let rounds: u64 = env("STEPS_BENCH_ROUNDS", 5);
    let mut first = 0;
    for clients in [1, 8] {
        let (mut without, mut with, mut with_tx) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            without.push(
                run(
                    &store,
                    clients,
                    calls,
                    first,
                    async |store: Arc<S>, order| {
                        plain(&*store, order).await.expect("plain");
                    },
                )
                .await,
            );
            first += calls;
            with.push(
                run(
                    &store,
                    clients,
                    calls,
                    first,
                    async |store: Arc<S>, order| {
                        stepped(&*store, order).await.expect("stepped");
                    },
                )
                .await,
            );
            first += calls;
            with_tx.push(
                run(
                    &store,
                    clients,
                    calls,
                    first,
                    async |store: Arc<S>, order| {
                        transactional(&*store, order).await.expect("transactional");
                    },
                )
                .await,
            );
            first += calls;
        }
        let (without, with, with_tx) = (median(without), median(with), median(with_tx));
        // What one step adds to a call, at this concurrency.
        let per_step = |rate: f64| (1e6 / rate - 1e6 / without) * clients as f64 / 3.0;
        println!(
            "| {name} | {clients} | {without:.0} | {with:.0} ({:.2}x, {:.0} µs a step) | {with_tx:.0} ({:.2}x, {:.0} µs a step) |",
            with / without,
            per_step(with),
            with_tx / without,
            per_step(with_tx),
        );
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let dir = std::env::temp_dir().join(format!("retry-core-bench-steps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    println!(
        "| store | callers | calls/s without steps | with 3 steps | with 3 transactional steps |"
    );
    println!("|---|---:|---:|---:|---:|");
    rt.block_on(async {
        let sqlite = retry_sqlite::SqliteStore::open(dir.join("steps.sqlite3")).expect("open");
        measure("SqliteStore (synchronous=FULL)", Arc::new(sqlite)).await;
        #[cfg(feature = "postgres")]
        {
            let Ok(url) = std::env::var("DATABASE_URL") else {
                eprintln!("steps bench: DATABASE_URL is not set; PostgreSQL skipped");
                return;
            };
            let schema = format!("retry_core_bench_steps_{}", std::process::id());
            let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect to DATABASE_URL");
            tokio::spawn(connection);
            admin
                .batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .expect("create the bench's schema");
            let separator = if url.contains('?') { '&' } else { '?' };
            let in_schema = format!("{url}{separator}options=-c%20search_path%3D{schema}");
            let pg = retry_postgres::PgStore::connect(&in_schema)
                .await
                .expect("PgStore::connect");
            measure("PgStore", Arc::new(pg)).await;
            admin
                .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                .await
                .expect("drop the bench's schema");
        }
    });
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
}
