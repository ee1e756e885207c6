//! `IdempotencyLayer` over HTTP on loopback (BENCHMARKS.md, "`IdempotencyLayer`"): an axum
//! service that books one payment per `POST` (one `INSERT`), measured four ways on the same work,
//! on SQLite and, with the `postgres` feature, on PostgreSQL:
//!
//! - **handler alone**: no dedup at all; the handler books on its own connection;
//! - **hand-written dedup (the floor)**: no layer; the handler reads the `Idempotency-Key` header
//!   itself and, in one transaction on its own connection, inserts the key
//!   (`INSERT INTO seen .. ON CONFLICT DO NOTHING`; a key already there answers its stored
//!   response), books, stores the response and commits: one commit per request, what a careful
//!   service author writes without this library (DESIGN.md, "HTTP servers and clients");
//! - **layer, non-transactional**: `IdempotencyLayer` on the store; the layer claims before and
//!   stores the response after, and the handler books through `SqliteStore::write` (on SQLite:
//!   the file's write queue, shared with the store's writes) or on its own pooled connection
//!   (PostgreSQL);
//! - **layer, transactional**: `IdempotencyLayer::transactional()`; the handler books in the
//!   layer's transaction (`RequestTransaction`), committed with the response; the claim commits
//!   on its own before the handler runs;
//! - **layer, one commit**: `transactional().effects_in_transaction()`, the same handler; the
//!   claim is written in the handler's transaction too, so each request commits once, as the
//!   floor does.
//!
//! SQLite: one file per side; without the layer the handler's own connection is one writer
//! behind a mutex (as SQLite allows); with it the store is a `SqliteStore` on the same file and
//! the handler writes through the file's write queue (its transaction, or `SqliteStore::write`). PostgreSQL (`DATABASE_URL`):
//! one schema per side (`retry_core_bench_http_<pid>_<side>`, dropped at the end), a `PgStore`
//! and, for the handler's own work, a deadpool-postgres pool of the same size and settings as the
//! store's (as benches/pg_store.rs does), statements prepared once per connection; the server's
//! own durability settings are used as they are (the bench's figures assume `fsync` and
//! `synchronous_commit` on, PostgreSQL's defaults).
//!
//! 1, 8 and 64 concurrent clients, each on a keep-alive connection of its own (reqwest), every
//! request a new `Idempotency-Key`. The server runs on a 2-worker Tokio runtime, the clients on
//! another. Before measuring, each dedup side gets one key twice and must answer the same body.
//! Prints requests per second and the p50 / p99 latency a client saw, medians over the rounds, as
//! one markdown table per store, with each layer mode's throughput divided by the floor's.
//!
//! `cargo bench --bench http_layer [--features postgres]`; `HTTP_BENCH_OPS` (requests per
//! measurement, default 2,000), `HTTP_BENCH_ROUNDS` (default 3) and `HTTP_BENCH_SYNC_FULL=1`
//! (SQLite's `synchronous=FULL`, the store's default, on every connection, the floor's included;
//! the default here is `NORMAL`, as in the store benches) change it. With the `postgres` feature
//! `DATABASE_URL` must be set: the bench fails rather than leave PostgreSQL out. Without `--bench`
//! (`cargo test --benches`) one small round only shows that every side works.
//!
//! To look at one part (a profile, a change to one mode), `HTTP_BENCH_STORES` (`sqlite`,
//! `postgres`), `HTTP_BENCH_SIDES` (`alone`, `floor`, `plain`, `transactional`, `one_commit`) and
//! `HTTP_BENCH_CLIENTS` (`1`, `8`, `64`) each take a comma-separated subset; the tables then show
//! `–` for what was left out. E.g. `HTTP_BENCH_STORES=postgres HTTP_BENCH_SIDES=floor,one_commit
//! HTTP_BENCH_CLIENTS=64`.

use std::path::PathBuf;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use tokio::runtime::Runtime;

use load::Plan;
use support::store::number;

mod load;
#[cfg(feature = "postgres")]
mod pg;
mod sqlite;

// The harness the benches share: `store` holds the load driver, its medians, the settings
// reader, the number formatting and the hand-written side's PostgreSQL pool.
#[path = "../support/mod.rs"]
mod support;

const CLIENTS: [usize; 3] = [1, 8, 64];
const ORDER: &str = r#"{"order":"order-1","cents":1250}"#;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Alone,
    Floor,
    Plain,
    Transactional,
    OneCommit,
}

impl Side {
    const ALL: [Side; 5] = [
        Side::Alone,
        Side::Floor,
        Side::Plain,
        Side::Transactional,
        Side::OneCommit,
    ];
    /// The layer's modes, each compared with the floor.
    const LAYERS: [Side; 3] = [Side::Plain, Side::Transactional, Side::OneCommit];

    fn name(self) -> &'static str {
        match self {
            Side::Alone => "handler alone",
            Side::Floor => "hand-written dedup (floor)",
            Side::Plain => "layer, non-transactional",
            Side::Transactional => "layer, transactional",
            Side::OneCommit => "layer, one commit",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Side::Alone => "alone",
            Side::Floor => "floor",
            Side::Plain => "plain",
            Side::Transactional => "transactional",
            Side::OneCommit => "one_commit",
        }
    }
}

fn payment(id: i64) -> String {
    format!("{{\"payment\":{id}}}")
}

/// The floor's key: the header as it came (the layer parses it as a structured-field string;
/// a service deduplicating by hand only needs the bytes to be the same on a resend).
fn key(headers: &HeaderMap) -> Option<String> {
    headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn no_key() -> (StatusCode, String) {
    (
        StatusCode::BAD_REQUEST,
        "an Idempotency-Key header is required".to_owned(),
    )
}

/// Serves `router` on a loopback port; returns its `/payments` URL.
async fn listen(router: Router) -> String {
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

/// The comma-separated subset of `all` named by the environment variable `name` (all of it when
/// unset); an unknown name stops the bench with the ones it knows.
fn subset<T: Copy>(name: &str, all: &[T], label: impl Fn(T) -> String) -> Vec<T> {
    let Ok(list) = std::env::var(name) else {
        return all.to_vec();
    };
    let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
    for w in &wanted {
        if !all.iter().any(|&t| label(t) == *w) {
            let known: Vec<String> = all.iter().map(|&t| label(t)).collect();
            eprintln!(
                "http_layer bench: {name}: unknown {w:?}; choose from {}",
                known.join(", ")
            );
            std::process::exit(2);
        }
    }
    all.iter()
        .copied()
        .filter(|&t| wanted.contains(&label(t).as_str()))
        .collect()
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
    let stores = subset(
        "HTTP_BENCH_STORES",
        if cfg!(feature = "postgres") {
            &["sqlite", "postgres"]
        } else {
            &["sqlite"]
        },
        str::to_owned,
    );
    let sides = subset("HTTP_BENCH_SIDES", &Side::ALL, |side| {
        side.slug().to_owned()
    });
    let callers_each = subset("HTTP_BENCH_CLIENTS", &CLIENTS, |n| n.to_string());
    // Checked first, so a missing server fails the run before minutes of SQLite.
    #[cfg(feature = "postgres")]
    let Some(database_url) = std::env::var("DATABASE_URL")
        .ok()
        .or_else(|| (!stores.contains(&"postgres")).then(String::new))
    else {
        eprintln!(
            "http_layer bench: built with the `postgres` feature, so it measures PostgreSQL too, \
             but DATABASE_URL is not set. Point it at a throwaway PostgreSQL database \
             (postgres://user@host:port/db); the bench creates and drops schemas of its own \
             there (retry_core_bench_http_<pid>_<side>). Set HTTP_BENCH_STORES=sqlite, or \
             build without `--features postgres`, to measure SQLite only."
        );
        std::process::exit(2);
    };
    let dir =
        TempDir(std::env::temp_dir().join(format!("retry-core-bench-http-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("a temp dir");

    let server = runtime();
    let plan = Plan {
        clients: runtime(),
        // Built once, before any clock starts (each loads the system's TLS roots); each keeps
        // one keep-alive connection per server, its own.
        connections: (0..CLIENTS[CLIENTS.len() - 1])
            .map(|_| {
                reqwest::Client::builder()
                    .pool_max_idle_per_host(1)
                    .build()
                    .expect("a client")
            })
            .collect(),
        callers_each,
        ops,
        rounds,
    };
    if stores.contains(&"sqlite") {
        let urls: Vec<(Side, String)> = sides
            .iter()
            .map(|&side| {
                (
                    side,
                    server.block_on(sqlite::serve_sqlite(side, &dir.0, full)),
                )
            })
            .collect();
        let sync = if full { "FULL" } else { "NORMAL" };
        plan.measure(
            "SQLite",
            &urls,
            &format!(
                "SQLite `synchronous={sync}`, {ops} requests per measurement, median of {rounds} rounds"
            ),
        );
    }

    #[cfg(feature = "postgres")]
    if stores.contains(&"postgres") {
        let mut cluster = server.block_on(pg::Cluster::connect(database_url));
        let settings = server.block_on(cluster.settings());
        let urls: Vec<(Side, String)> = sides
            .iter()
            .map(|&side| (side, server.block_on(cluster.serve(side))))
            .collect();
        plan.measure(
            "PostgreSQL",
            &urls,
            &format!(
                "PostgreSQL ({settings}; pools of {} connections), {ops} requests per measurement, median of {rounds} rounds",
                pg::POOL_SIZE
            ),
        );
        server.block_on(cluster.drop_schemas());
    }
}
