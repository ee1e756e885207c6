//! What the idempotency-store benches share: `callers` concurrent tasks sharing a fixed number
//! of operations, raw SQL and the store measured in alternation, medians over rounds, and the
//! markdown table with the store ÷ raw ratio; and the store side's operations, the same for
//! every store.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore};

/// `url` with `schema` first on the `search_path` of every connection made from it, so the tables
/// a bench creates, and the ones a store creates for itself, are new ones in that schema.
pub fn in_schema(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}")
}

/// The hand-written side's pool of `size` connections to `url`, set up as `PgStore`'s own is
/// (deadpool-postgres, fast recycling, no TLS, 5 s timeouts), so the two sides differ only in
/// what they run.
pub fn pg_pool(url: &str, size: usize) -> deadpool_postgres::Pool {
    use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

    let config: tokio_postgres::Config = url.parse().expect("DATABASE_URL");
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .expect("the hand-written side's pool")
}

/// The response every completion stores and every replay expects.
pub const RESPONSE: &str = "\"ok\"";
/// Keys completed before the replay measurements; replay `n` asks for key `n % REPLAY_KEYS`.
pub const REPLAY_KEYS: u64 = 256;

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(86_400),
    }
}

/// The store's claim of a new key, then its completion.
pub async fn store_claim_complete<S: IdempotencyStore>(store: Arc<S>, key: String) {
    let outcome = store.claim(&request(&key)).await.expect("store claim");
    let ClaimOutcome::Claimed(claim) = outcome else {
        panic!("store claim of a new key {key}: {outcome:?}");
    };
    store
        .complete(&claim, RESPONSE)
        .await
        .expect("store complete");
}

/// The store's claim of a key that is done: a replay of [`RESPONSE`].
pub async fn store_replay<S: IdempotencyStore>(store: Arc<S>, key: String) {
    let outcome = store.claim(&request(&key)).await.expect("store claim");
    assert_eq!(outcome, ClaimOutcome::Done(RESPONSE.to_owned()));
}

/// Concurrent callers measured, as BENCHMARKS.md reports them.
pub const CALLERS: [usize; 3] = [1, 8, 64];

/// How much work a bench does: `STORE_BENCH_ROUNDS` rounds (default 5) of `STORE_BENCH_OPS`
/// claim + complete operations (default 2,000) and five times as many replays per measurement;
/// a single small round when not run by `cargo bench`.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub rounds: usize,
    pub claim_ops: usize,
    pub replay_ops: usize,
}

impl Config {
    pub fn from_env() -> Self {
        // `cargo bench` passes `--bench`; without it (`cargo test --benches`) one small round
        // only shows that both sides work.
        if !std::env::args().any(|arg| arg == "--bench") {
            return Config {
                rounds: 1,
                claim_ops: CALLERS[2],
                replay_ops: CALLERS[2],
            };
        }
        let claim_ops = number("STORE_BENCH_OPS", 2_000).max(CALLERS[2]);
        Config {
            rounds: number("STORE_BENCH_ROUNDS", 5).max(1),
            claim_ops,
            replay_ops: claim_ops * 5,
        }
    }
}

/// The whole number in the environment variable `name`, or `default` when it is unset.
pub fn number(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, not {v:?}"))
    })
}

/// One measurement: operations per second over the whole run, and the median and 99th
/// percentile latency of one operation as a caller saw it.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub ops_per_sec: f64,
    pub p50: Duration,
    pub p99: Duration,
}

/// Runs `ops` operations (rounded down to a multiple of `callers`) split over `callers` Tokio
/// tasks; operation `i` gets the number `first + i`, unique across measurements when the caller
/// advances `first`.
pub async fn measure<F, Fut>(callers: usize, ops: usize, first: u64, op: F) -> Stats
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    measure_each(callers, ops, first, |_| op.clone()).await
}

/// [`measure`], with each caller's operations made by `caller_op(caller)`: one on a connection
/// of the caller's own, say.
pub async fn measure_each<M, F, Fut>(callers: usize, ops: usize, first: u64, caller_op: M) -> Stats
where
    M: Fn(usize) -> F,
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let per_caller = (ops / callers).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let op = caller_op(caller);
            let first = first + (caller * per_caller) as u64;
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_caller);
                for i in 0..per_caller as u64 {
                    let began = Instant::now();
                    op(first + i).await;
                    latencies.push(began.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(per_caller * callers);
    for task in tasks {
        latencies.extend(task.await.expect("a bench caller panicked"));
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Stats {
        ops_per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// One line of the table: the medians of the rounds of both sides.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub operation: &'static str,
    pub callers: usize,
    pub raw: Stats,
    pub store: Stats,
}

/// Measures `raw` and `store` at every number of [`CALLERS`], `rounds` times each, alternating
/// which side goes first; `next` numbers the operations (advanced past every one used).
pub async fn compare<R, RF, S, SF>(
    operation: &'static str,
    config: Config,
    ops: usize,
    next: &mut u64,
    raw: R,
    store: S,
) -> Vec<Row>
where
    R: Fn(u64) -> RF + Clone + Send + 'static,
    RF: Future<Output = ()> + Send + 'static,
    S: Fn(u64) -> SF + Clone + Send + 'static,
    SF: Future<Output = ()> + Send + 'static,
{
    let mut rows = Vec::new();
    for callers in CALLERS {
        let (mut raws, mut stores) = (Vec::new(), Vec::new());
        for round in 0..config.rounds {
            for side in [round % 2, 1 - round % 2] {
                let stats = if side == 0 {
                    measure(callers, ops, *next, raw.clone()).await
                } else {
                    measure(callers, ops, *next, store.clone()).await
                };
                *next += ops as u64;
                if side == 0 {
                    raws.push(stats);
                } else {
                    stores.push(stats);
                }
            }
        }
        let row = Row {
            operation,
            callers,
            raw: median(raws),
            store: median(stores),
        };
        eprintln!(
            "{operation} x{callers}: raw {:.0} ops/s, store {:.0} ops/s ({:.2}x)",
            row.raw.ops_per_sec,
            row.store.ops_per_sec,
            row.store.ops_per_sec / row.raw.ops_per_sec
        );
        rows.push(row);
    }
    rows
}

/// The median round by throughput, with the medians of the rounds' percentiles.
pub fn median(mut rounds: Vec<Stats>) -> Stats {
    let mid = rounds.len() / 2;
    rounds.sort_unstable_by_key(|s| s.p50);
    let p50 = rounds[mid].p50;
    rounds.sort_unstable_by_key(|s| s.p99);
    let p99 = rounds[mid].p99;
    rounds.sort_unstable_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    Stats {
        ops_per_sec: rounds[mid].ops_per_sec,
        p50,
        p99,
    }
}

/// The markdown table of BENCHMARKS.md ("store" is the store's name in the header).
pub fn print_table(store: &str, rows: &[Row]) {
    println!(
        "| operation | callers | raw SQL (ops/s) | {store} (ops/s) | store ÷ raw | raw p50 | store p50 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {} | {} | {} | {:.2}× | {} | {} |",
            row.operation,
            row.callers,
            thousands(row.raw.ops_per_sec),
            thousands(row.store.ops_per_sec),
            row.store.ops_per_sec / row.raw.ops_per_sec,
            micros(row.raw.p50),
            micros(row.store.p50),
        );
    }
}

/// `1234.5` as `1,235`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}
