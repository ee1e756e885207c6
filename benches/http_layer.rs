//! `IdempotencyLayer` over HTTP on loopback (BENCHMARKS.md, "HTTP layer"): an axum service
//! that books one payment per `POST` in a SQLite table, measured three ways on the same work:
//!
//! - **handler alone**: no layer; the handler books on its own connection (the floor);
//! - **layer, non-transactional**: `IdempotencyLayer` on a `SqliteStore` in the same file; the
//!   handler books on its own connection, the layer claims before and stores the response after
//!   (three commits per request);
//! - **layer, transactional**: `IdempotencyLayer::transactional()`; the handler books in the
//!   layer's transaction (`RequestTransaction`), committed with the response (two commits: the
//!   claim, then the booking with the response).
//!
//! 1, 8 and 64 concurrent clients, each on a keep-alive connection of its own (reqwest), every
//! request a new `Idempotency-Key`. The server runs on a 2-worker Tokio runtime, the clients on
//! another. Prints requests per second and the p50 / p99 latency a client saw, medians over the
//! rounds, as a markdown table.
//!
//! `cargo bench --bench http_layer`; `HTTP_BENCH_OPS` (requests per measurement, default 2,000),
//! `HTTP_BENCH_ROUNDS` (default 3) and `HTTP_BENCH_SYNC_FULL=1` (the store's default
//! `synchronous=FULL` on every connection; the default here is `NORMAL`, as in the store
//! benches) change it. Without `--bench` (`cargo test --benches`) one small round only shows
//! that every side works.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use retry_core::idempotency::SqliteStore;
use retry_core::tower::{IdempotencyLayer, RequestTransaction};
use rusqlite::Connection;
use tokio::runtime::Runtime;

const CLIENTS: [usize; 3] = [1, 8, 64];
const TABLE: &str =
    "CREATE TABLE IF NOT EXISTS payments (id INTEGER PRIMARY KEY, body TEXT NOT NULL)";
const INSERT: &str = "INSERT INTO payments (body) VALUES (?1)";
const ORDER: &str = r#"{"order":"order-1","cents":1250}"#;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Alone,
    Plain,
    Transactional,
}

impl Side {
    const ALL: [Side; 3] = [Side::Alone, Side::Plain, Side::Transactional];

    fn name(self) -> &'static str {
        match self {
            Side::Alone => "handler alone",
            Side::Plain => "layer, non-transactional",
            Side::Transactional => "layer, transactional",
        }
    }
}

/// The handler's own connection (non-transactional sides): one writer, as SQLite allows.
type Own = Arc<Mutex<Connection>>;

async fn book_on_own_connection(State(db): State<Own>, body: String) -> (StatusCode, String) {
    let id = tokio::task::spawn_blocking(move || {
        let db = db.lock().expect("the connection's lock");
        db.execute(INSERT, [body]).expect("the booking");
        db.last_insert_rowid()
    })
    .await
    .expect("the blocking task");
    (StatusCode::CREATED, format!("{{\"payment\":{id}}}"))
}

async fn book_in_transaction(
    Extension(tx): Extension<RequestTransaction<SqliteStore>>,
    body: String,
) -> (StatusCode, String) {
    let mut tx = tx.get().await.expect("the transaction");
    let id = tx
        .run(move |c| {
            c.execute(INSERT, [body])?;
            Ok(c.last_insert_rowid())
        })
        .await
        .expect("the booking");
    drop(tx);
    (StatusCode::CREATED, format!("{{\"payment\":{id}}}"))
}

fn pragmas(full: bool) -> String {
    let sync = if full { "FULL" } else { "NORMAL" };
    format!("PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA busy_timeout=5000;")
}

/// Serves `side` on its own SQLite file in `dir`; returns the `/payments` URL.
async fn serve(side: Side, dir: &Path, full: bool) -> String {
    let path = dir.join(format!("{}.sqlite3", side.name().replace([' ', ','], "-")));
    let own = || -> Own {
        let db = Connection::open(&path).expect("open the service's file");
        db.execute_batch(&(pragmas(full) + TABLE))
            .expect("the table");
        Arc::new(Mutex::new(db))
    };
    let store = || {
        SqliteStore::open(&path)
            .expect("open the store")
            .with_synchronous_full(full)
    };
    let router = match side {
        Side::Alone => Router::new()
            .route("/payments", post(book_on_own_connection))
            .with_state(own()),
        Side::Plain => {
            let layer = IdempotencyLayer::unauthenticated(store());
            Router::new()
                .route("/payments", post(book_on_own_connection))
                .layer(layer)
                .with_state(own())
        }
        Side::Transactional => {
            let layer = IdempotencyLayer::unauthenticated(store()).transactional();
            drop(own()); // the table, created beside the store's
            Router::new()
                .route("/payments", post(book_in_transaction))
                .layer(layer)
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!(
        "http://{}/payments",
        listener.local_addr().expect("its address")
    );
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

/// One measurement: requests per second, and p50 / p99 of one request's latency.
#[derive(Clone, Copy)]
struct Stats {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

/// `ops` requests (rounded down to a multiple of `clients`), each with the key `{run}-{n}`,
/// from `clients` clients on connections of their own.
async fn measure(url: &str, clients: usize, ops: usize, run: &str) -> Stats {
    let per_client = (ops / clients).max(1);
    // Built before the clock starts: building a client loads the system's TLS roots.
    let connections: Vec<_> = (0..clients)
        .map(|_| {
            reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .expect("a client")
        })
        .collect();
    let start = Instant::now();
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(client_no, client)| {
            let (url, run) = (url.to_owned(), run.to_owned());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_client);
                for i in 0..per_client {
                    let began = Instant::now();
                    let response = client
                        .post(&url)
                        .header("idempotency-key", format!("\"{run}-{client_no}-{i}\""))
                        .body(ORDER)
                        .send()
                        .await
                        .expect("an answer");
                    assert_eq!(
                        response.status(),
                        201,
                        "{}",
                        response.text().await.unwrap_or_default()
                    );
                    response.bytes().await.expect("the body");
                    latencies.push(began.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(per_client * clients);
    for task in tasks {
        latencies.extend(task.await.expect("a client panicked"));
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Stats {
        per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// The median round by throughput, with the medians of the rounds' percentiles.
fn median(mut rounds: Vec<Stats>) -> Stats {
    let mid = rounds.len() / 2;
    rounds.sort_unstable_by_key(|s| s.p50);
    let p50 = rounds[mid].p50;
    rounds.sort_unstable_by_key(|s| s.p99);
    let p99 = rounds[mid].p99;
    rounds.sort_unstable_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
    Stats {
        per_sec: rounds[mid].per_sec,
        p50,
        p99,
    }
}

fn number(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, not {v:?}"))
    })
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// Removed with its files when the bench ends.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    let bench = std::env::args().any(|arg| arg == "--bench");
    let (ops, rounds) = if bench {
        (
            number("HTTP_BENCH_OPS", 2_000).max(64),
            number("HTTP_BENCH_ROUNDS", 3).max(1),
        )
    } else {
        (64, 1)
    };
    let full = std::env::var("HTTP_BENCH_SYNC_FULL").is_ok_and(|v| v == "1");
    let dir =
        TempDir(std::env::temp_dir().join(format!("retry-core-bench-http-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("a temp dir");

    let server = runtime();
    let clients = runtime();
    let urls: Vec<(Side, String)> = Side::ALL
        .into_iter()
        .map(|side| (side, server.block_on(serve(side, &dir.0, full))))
        .collect();

    let mut table = Vec::new();
    let mut run = 0;
    for callers in CLIENTS {
        let mut results: Vec<Vec<Stats>> = vec![Vec::new(); urls.len()];
        for round in 0..rounds {
            // Each round starts with another side, so no side always meets a warm (or a
            // checkpointing) file.
            for offset in 0..urls.len() {
                let index = (round + offset) % urls.len();
                run += 1;
                let stats =
                    clients.block_on(measure(&urls[index].1, callers, ops, &format!("r{run}")));
                results[index].push(stats);
            }
        }
        for ((side, _), stats) in urls.iter().zip(results) {
            let stats = median(stats);
            eprintln!(
                "{} x{callers}: {:.0} req/s, p50 {:?}, p99 {:?}",
                side.name(),
                stats.per_sec,
                stats.p50,
                stats.p99
            );
            table.push((*side, callers, stats));
        }
    }

    let sync = if full { "FULL" } else { "NORMAL" };
    println!(
        "\nSQLite `synchronous={sync}`, {ops} requests per measurement, median of {rounds} rounds\n"
    );
    println!("| clients | side | requests/s | p50 | p99 | ÷ non-transactional |");
    println!("|--------:|------|-----------:|----:|----:|--------------------:|");
    for (side, callers, stats) in &table {
        let plain = table
            .iter()
            .find(|(s, c, _)| *s == Side::Plain && c == callers)
            .map_or(f64::NAN, |(_, _, plain)| stats.per_sec / plain.per_sec);
        println!(
            "| {callers} | {} | {:.0} | {:.2} ms | {:.2} ms | {plain:.2}x |",
            side.name(),
            stats.per_sec,
            stats.p50.as_secs_f64() * 1e3,
            stats.p99.as_secs_f64() * 1e3,
        );
    }
}
