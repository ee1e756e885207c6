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
//! - **layer, non-transactional**: `IdempotencyLayer` on the store; the handler books on its own
//!   connection, the layer claims before and stores the response after;
//! - **layer, transactional**: `IdempotencyLayer::transactional()`; the handler books in the
//!   layer's transaction (`RequestTransaction`), committed with the response; the claim commits
//!   on its own before the handler runs;
//! - **layer, one commit**: `transactional().effects_in_transaction()`, the same handler; the
//!   claim is written in the handler's transaction too, so each request commits once, as the
//!   floor does.
//!
//! SQLite: one file per side; the handler's own connection is one writer behind a mutex (as
//! SQLite allows), the store is a `SqliteStore` on the same file. PostgreSQL (`DATABASE_URL`):
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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Extension, Router};
use retry_core::idempotency::SqliteStore;
use retry_core::tower::{IdempotencyLayer, RequestTransaction};
use rusqlite::{Connection, TransactionBehavior};
use tokio::runtime::Runtime;

// The harness the benches share: its table formatting (`store::thousands`).
#[path = "../support/mod.rs"]
mod support;

const CLIENTS: [usize; 3] = [1, 8, 64];
const TABLE: &str =
    "CREATE TABLE IF NOT EXISTS payments (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, response TEXT)";
const INSERT: &str = "INSERT INTO payments (body) VALUES (?1)";
// The floor's statements: the key first (a duplicate finds it and stops there), the response
// once the booking gave it its id.
const CLAIM_SEEN: &str = "INSERT INTO seen (key) VALUES (?1) ON CONFLICT DO NOTHING";
const READ_SEEN: &str = "SELECT response FROM seen WHERE key = ?1";
const STORE_SEEN: &str = "UPDATE seen SET response = ?1 WHERE key = ?2";
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

/// The handler's own connection (every side but the transactional one): one writer, as SQLite
/// allows.
type Own = Arc<Mutex<Connection>>;

async fn book_on_own_connection(State(db): State<Own>, body: String) -> (StatusCode, String) {
    let id = tokio::task::spawn_blocking(move || {
        let db = db.lock().expect("the connection's lock");
        let mut insert = db.prepare_cached(INSERT).expect("prepare");
        insert.execute([body]).expect("the booking");
        db.last_insert_rowid()
    })
    .await
    .expect("the blocking task");
    (StatusCode::CREATED, payment(id))
}

/// The floor on SQLite: key, booking and response in one `BEGIN IMMEDIATE` transaction.
async fn dedup_by_hand(
    State(db): State<Own>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let Some(key) = key(&headers) else {
        return no_key();
    };
    tokio::task::spawn_blocking(move || {
        let mut db = db.lock().expect("the connection's lock");
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("BEGIN");
        let new = tx
            .prepare_cached(CLAIM_SEEN)
            .and_then(|mut s| s.execute([&key]))
            .expect("the key")
            == 1;
        if !new {
            let stored: String = tx
                .prepare_cached(READ_SEEN)
                .and_then(|mut s| s.query_row([&key], |row| row.get(0)))
                .expect("the stored response");
            tx.rollback().expect("ROLLBACK");
            return (StatusCode::CREATED, stored);
        }
        tx.prepare_cached(INSERT)
            .and_then(|mut s| s.execute([body]))
            .expect("the booking");
        let response = payment(tx.last_insert_rowid());
        tx.prepare_cached(STORE_SEEN)
            .and_then(|mut s| s.execute([&response, &key]))
            .expect("the response");
        tx.commit().expect("COMMIT");
        (StatusCode::CREATED, response)
    })
    .await
    .expect("the blocking task")
}

async fn book_in_transaction(
    Extension(tx): Extension<RequestTransaction<SqliteStore>>,
    body: String,
) -> (StatusCode, String) {
    let mut tx = tx.get().await.expect("the transaction");
    let id = tx
        .run(move |c| {
            c.prepare_cached(INSERT)?.execute([body])?;
            Ok(c.last_insert_rowid())
        })
        .await
        .expect("the booking");
    drop(tx);
    (StatusCode::CREATED, payment(id))
}

fn pragmas(full: bool) -> String {
    let sync = if full { "FULL" } else { "NORMAL" };
    format!("PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA busy_timeout=5000;")
}

/// Serves `side` on its own SQLite file in `dir`; returns the `/payments` URL.
async fn serve_sqlite(side: Side, dir: &Path, full: bool) -> String {
    let path = dir.join(format!("{}.sqlite3", side.slug()));
    let own = || -> Own {
        let db = Connection::open(&path).expect("open the service's file");
        db.execute_batch(&format!("{}{TABLE}", pragmas(full)))
            .expect("the tables");
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
        Side::Floor => Router::new()
            .route("/payments", post(dedup_by_hand))
            .with_state(own()),
        Side::Plain => {
            let layer = IdempotencyLayer::unauthenticated(store());
            Router::new()
                .route("/payments", post(book_on_own_connection))
                .layer(layer)
                .with_state(own())
        }
        Side::Transactional | Side::OneCommit => {
            let layer = IdempotencyLayer::unauthenticated(store()).transactional();
            let layer = if side == Side::OneCommit {
                layer.effects_in_transaction()
            } else {
                layer
            };
            drop(own()); // the table, created beside the store's
            Router::new()
                .route("/payments", post(book_in_transaction))
                .layer(layer)
        }
    };
    listen(router).await
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

#[cfg(feature = "postgres")]
mod pg {
    //! The same four sides on PostgreSQL.

    use std::time::Duration;

    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    use axum::{Extension, Router};
    use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
    use retry_core::idempotency::PgStore;
    use retry_core::tower::{IdempotencyLayer, RequestTransaction};
    use tokio_postgres::NoTls;

    use super::{Side, key, listen, no_key, payment};

    const TABLES: &str = "CREATE TABLE payments (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);
        CREATE TABLE seen (key TEXT PRIMARY KEY, response TEXT)";
    const INSERT: &str = "INSERT INTO payments (body) VALUES ($1) RETURNING id";
    // Under READ COMMITTED a duplicate's insert waits for the first request's transaction, then
    // finds its committed row (or, if it rolled back, takes the key).
    const CLAIM_SEEN: &str = "INSERT INTO seen (key) VALUES ($1) ON CONFLICT DO NOTHING";
    const READ_SEEN: &str = "SELECT response FROM seen WHERE key = $1";
    const STORE_SEEN: &str = "UPDATE seen SET response = $1 WHERE key = $2";

    async fn store(url: &str) -> PgStore {
        PgStore::connect(url)
            .await
            .unwrap_or_else(|e| panic!("PgStore::connect({url}): {e}"))
            .with_pool_size(POOL_SIZE)
    }

    /// The handler's own pool, set up as `PgStore`'s (fast recycling, no TLS, 5 s timeouts).
    fn pool(url: &str) -> Pool {
        let config: tokio_postgres::Config = url.parse().expect("DATABASE_URL");
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(5)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .build()
            .expect("the handler's pool")
    }

    async fn book_on_own_connection(
        State(pool): State<Pool>,
        body: String,
    ) -> (StatusCode, String) {
        let client = pool.get().await.expect("a connection");
        let insert = client.prepare_cached(INSERT).await.expect("prepare");
        let row = client
            .query_one(&insert, &[&body])
            .await
            .expect("the booking");
        (StatusCode::CREATED, payment(row.get(0)))
    }

    /// The floor on PostgreSQL: key, booking and response in one transaction.
    async fn dedup_by_hand(
        State(pool): State<Pool>,
        headers: HeaderMap,
        body: String,
    ) -> (StatusCode, String) {
        let Some(key) = key(&headers) else {
            return no_key();
        };
        let mut client = pool.get().await.expect("a connection");
        let tx = client.transaction().await.expect("BEGIN");
        let claim = tx.prepare_cached(CLAIM_SEEN).await.expect("prepare");
        if tx.execute(&claim, &[&key]).await.expect("the key") == 0 {
            let read = tx.prepare_cached(READ_SEEN).await.expect("prepare");
            let row = tx
                .query_one(&read, &[&key])
                .await
                .expect("the stored response");
            tx.rollback().await.expect("ROLLBACK");
            return (StatusCode::CREATED, row.get(0));
        }
        let insert = tx.prepare_cached(INSERT).await.expect("prepare");
        let row = tx.query_one(&insert, &[&body]).await.expect("the booking");
        let response = payment(row.get(0));
        let store = tx.prepare_cached(STORE_SEEN).await.expect("prepare");
        tx.execute(&store, &[&response, &key])
            .await
            .expect("the response");
        tx.commit().await.expect("COMMIT");
        (StatusCode::CREATED, response)
    }

    async fn book_in_transaction(
        Extension(tx): Extension<RequestTransaction<PgStore>>,
        body: String,
    ) -> (StatusCode, String) {
        let tx = tx.get().await.expect("the transaction");
        let insert = tx.prepare_cached(INSERT).await.expect("prepare");
        let row = tx
            .client()
            .query_one(&insert, &[&body])
            .await
            .expect("the booking");
        drop(tx);
        (StatusCode::CREATED, payment(row.get(0)))
    }

    /// Connections in each pool, the store's and the handler's alike.
    pub const POOL_SIZE: usize = 16;

    /// The bench's schemas on the server, dropped by [`Cluster::drop_schemas`].
    pub struct Cluster {
        admin: tokio_postgres::Client,
        url: String,
        schemas: Vec<String>,
    }

    impl Cluster {
        pub async fn connect(url: String) -> Cluster {
            let (admin, connection) = tokio_postgres::connect(&url, NoTls)
                .await
                .unwrap_or_else(|e| panic!("connect to DATABASE_URL ({url}): {e}"));
            tokio::spawn(connection);
            Cluster {
                admin,
                url,
                schemas: Vec::new(),
            }
        }

        /// The server's durability settings, for the table's caption.
        pub async fn settings(&self) -> String {
            let mut shown = Vec::new();
            for name in ["fsync", "synchronous_commit"] {
                let row = self
                    .admin
                    .query_one(&format!("SHOW {name}"), &[])
                    .await
                    .expect("SHOW");
                shown.push(format!("`{name}={}`", row.get::<_, String>(0)));
            }
            shown.join(", ")
        }

        /// Serves `side` in a new schema of its own; returns the `/payments` URL.
        pub async fn serve(&mut self, side: Side) -> String {
            let schema = format!(
                "retry_core_bench_http_{}_{}",
                std::process::id(),
                side.slug()
            );
            self.admin
                .batch_execute(&format!(
                    "CREATE SCHEMA {schema}; SET search_path TO {schema}; {TABLES}; RESET search_path"
                ))
                .await
                .expect("the side's schema and tables");
            self.schemas.push(schema.clone());
            // Every connection of the side, the store's too (which creates its `inbox_log`
            // there), sees the side's schema first.
            let separator = if self.url.contains('?') { '&' } else { '?' };
            let url = format!("{}{separator}options=-c%20search_path%3D{schema}", self.url);
            let router = match side {
                Side::Alone => Router::new()
                    .route("/payments", post(book_on_own_connection))
                    .with_state(pool(&url)),
                Side::Floor => Router::new()
                    .route("/payments", post(dedup_by_hand))
                    .with_state(pool(&url)),
                Side::Plain => Router::new()
                    .route("/payments", post(book_on_own_connection))
                    .layer(IdempotencyLayer::unauthenticated(store(&url).await))
                    .with_state(pool(&url)),
                Side::Transactional => Router::new()
                    .route("/payments", post(book_in_transaction))
                    .layer(IdempotencyLayer::unauthenticated(store(&url).await).transactional()),
                Side::OneCommit => Router::new()
                    .route("/payments", post(book_in_transaction))
                    .layer(
                        IdempotencyLayer::unauthenticated(store(&url).await)
                            .transactional()
                            .effects_in_transaction(),
                    ),
            };
            listen(router).await
        }

        pub async fn drop_schemas(self) {
            for schema in &self.schemas {
                self.admin
                    .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                    .await
                    .expect("drop the bench's schema");
            }
        }
    }
}

/// One measurement: requests per second, and p50 / p99 of one request's latency.
#[derive(Clone, Copy)]
struct Stats {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

/// `ops` requests (rounded down to a multiple of the clients), each with the key
/// `{run}-{client}-{n}`, from each client in `connections` on a connection of its own.
async fn measure(url: &str, connections: &[reqwest::Client], ops: usize, run: &str) -> Stats {
    let clients = connections.len();
    let per_client = (ops / clients).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = connections
        .iter()
        .cloned()
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

/// One key sent twice to a side that deduplicates: the resend must get the first answer (the
/// booking ran once), or the side would be measured doing less than it claims.
async fn check_dedup(side: Side, url: &str) {
    let client = reqwest::Client::new();
    let key = format!("\"check-{}\"", std::process::id());
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let response = client
            .post(url)
            .header("idempotency-key", &key)
            .body(ORDER)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 201, "{}", side.name());
        bodies.push(response.text().await.expect("the body"));
    }
    assert_eq!(
        bodies[0],
        bodies[1],
        "{}: the resend was booked again",
        side.name()
    );
}

/// What every store's measurement shares: the clients and what to run.
struct Plan {
    /// The clients' runtime.
    clients: Runtime,
    /// One client per concurrent caller.
    connections: Vec<reqwest::Client>,
    callers_each: Vec<usize>,
    ops: usize,
    rounds: usize,
}

impl Plan {
    /// Measures `store`'s `urls` (one server per side) and prints their table under `caption`.
    fn measure(&self, store: &str, urls: &[(Side, String)], caption: &str) {
        let table = run_sides(self, urls, store);
        print_table(caption, &self.callers_each, &table);
    }
}

/// Every side at every client count, `rounds` times; the medians, by client count then side.
fn run_sides(plan: &Plan, urls: &[(Side, String)], store: &str) -> Vec<(Side, usize, Stats)> {
    let Plan {
        clients,
        connections,
        callers_each,
        ops,
        rounds,
    } = plan;
    let (ops, rounds) = (*ops, *rounds);
    for (side, url) in urls {
        if *side != Side::Alone {
            clients.block_on(check_dedup(*side, url));
        }
    }
    let mut table = Vec::new();
    let mut run = 0;
    for &callers in callers_each {
        let mut results: Vec<Vec<Stats>> = vec![Vec::new(); urls.len()];
        for round in 0..rounds {
            // Each round starts with another side, so no side always meets a warm (or a
            // checkpointing) database.
            for offset in 0..urls.len() {
                let index = (round + offset) % urls.len();
                run += 1;
                let stats = clients.block_on(measure(
                    &urls[index].1,
                    &connections[..callers],
                    ops,
                    &format!("r{run}"),
                ));
                // Every round on stderr, so the spread behind a median can be seen (and lined
                // up with the server's log, e.g. its checkpoints).
                eprintln!(
                    "{store}, {} x{callers}, round {}: {:.0} req/s",
                    urls[index].0.name(),
                    round + 1,
                    stats.per_sec
                );
                results[index].push(stats);
            }
        }
        for ((side, _), stats) in urls.iter().zip(results) {
            let stats = median(stats);
            eprintln!(
                "{store}, {} x{callers}: {:.0} req/s, p50 {:?}, p99 {:?}",
                side.name(),
                stats.per_sec,
                stats.p50,
                stats.p99
            );
            table.push((*side, callers, stats));
        }
    }
    table
}

fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.0}")
    }
}

/// One row per client count: each side's requests/s (p50 / p99), then each layer mode's
/// requests/s divided by the floor's.
fn print_table(caption: &str, callers_each: &[usize], table: &[(Side, usize, Stats)]) {
    println!("\n{caption}\n");
    print!("| clients |");
    for side in Side::ALL {
        print!(" {}: req/s (p50 / p99) |", side.name());
    }
    println!(" non-transactional ÷ floor | transactional ÷ floor | one commit ÷ floor |");
    println!("|---:|---|---|---|---|---|---:|---:|---:|");
    for &callers in callers_each {
        let of = |side: Side| {
            table
                .iter()
                .find(|(s, c, _)| *s == side && *c == callers)
                .map(|(_, _, stats)| *stats)
        };
        print!("| {callers} |");
        for side in Side::ALL {
            match of(side) {
                Some(s) => print!(
                    " {} ({} / {} ms) |",
                    support::store::thousands(s.per_sec),
                    millis(s.p50),
                    millis(s.p99)
                ),
                None => print!(" – |"),
            }
        }
        for side in Side::LAYERS {
            match (of(side), of(Side::Floor)) {
                (Some(layer), Some(floor)) => print!(" {:.2}× |", layer.per_sec / floor.per_sec),
                _ => print!(" – |"),
            }
        }
        println!();
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
            .map(|&side| (side, server.block_on(serve_sqlite(side, &dir.0, full))))
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
