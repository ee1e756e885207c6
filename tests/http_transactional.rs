//! `IdempotencyLayer` in transactional mode: the handler's booking, the `done` row
//! and the stored response commit together, or not at all.
//!
//! - `examples/payments_server.rs` as a process, on SQLite and (feature `postgres`) on
//!   PostgreSQL, with a real `curl`: killed by its failpoint after the booking was written and
//!   before the commit, restarted, resent to: booked once, then replayed. And 64 duplicates
//!   over 8 connections: one booking, one stored response, the rest `409` or the replay.
//! - In process, on SQLite: which answers commit and which roll back and free the key (`5xx`, a
//!   panic, a guard kept past the answer, a handler that never asks for the transaction).
//!
//! The process tests build the example with this test binary's features, and need `curl`.
#![cfg(all(feature = "tower", feature = "sqlite"))]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Extension, Router};
use retry_core::tower::{IdempotencyLayer, RequestTransaction};
use retry_sqlite::SqliteStore;
use tower_service::Service as _;

use crate::curl;
use crate::example;
#[cfg(feature = "postgres")]
use crate::pg;
use crate::tempdir;

use curl::curl;
use tempdir::TempDir;

// ---- the payments server, as a process ----

/// The exit code of the example's `after_write` failpoint.
const FAILPOINT_EXIT: i32 = 86;
/// The lease the server runs with: a minute, far longer than any test waits, so a key that
/// frees up did not wait for its lease.
const LEASE_MS: &str = "60000";
const ORDER: &str = r#"{"order":"order-77","cents":1250}"#;

/// `examples/payments_server`, built once with this test binary's features (so nothing else is
/// rebuilt), next to this binary's own directory.
fn server_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let features = example::features();
        let build = [
            "--example",
            "payments_server",
            "--no-default-features",
            "--features",
        ];
        built(
            &[&build[..], &[features.as_str()]].concat(),
            "examples/payments_server",
        )
    })
}

/// Runs `cargo build --quiet ARGS` in this package and returns `artifact`, a path below the
/// profile directory this test binary was built in (target/<profile>/deps/<this test>).
fn built(args: &[&str], artifact: &str) -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build {args:?} failed: {status}");
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let binary = profile.join(artifact);
    assert!(binary.exists(), "{} was not built", binary.display());
    binary
}

/// Where the server keeps its store and its `payments` table.
enum Db {
    Sqlite(TempDir),
    #[cfg(feature = "postgres")]
    Pg(pg::Schema),
}

impl Db {
    fn args(&self) -> Vec<String> {
        match self {
            Db::Sqlite(dir) => vec!["--db".into(), path_text(&dir.file("payments.sqlite3"))],
            #[cfg(feature = "postgres")]
            Db::Pg(schema) => vec!["--pg".into(), schema.url.clone()],
        }
    }

    /// Rows in the service's own table.
    async fn payments(&self) -> i64 {
        match self {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.file("payments.sqlite3"))
                .unwrap()
                .query_row("SELECT count(*) FROM payments", [], |row| row.get(0))
                .unwrap(),
            #[cfg(feature = "postgres")]
            Db::Pg(schema) => schema
                .client()
                .await
                .query_one("SELECT count(*) FROM payments", &[])
                .await
                .unwrap()
                .get(0),
        }
    }

    /// The status of every key in the store.
    async fn keys(&self) -> Vec<String> {
        match self {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.file("payments.sqlite3"))
                .unwrap()
                .prepare("SELECT status FROM inbox_log")
                .unwrap()
                .query_map([], |row| row.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap(),
            #[cfg(feature = "postgres")]
            Db::Pg(schema) => schema
                .client()
                .await
                .query("SELECT status FROM inbox_log", &[])
                .await
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect(),
        }
    }

    #[cfg(feature = "postgres")]
    async fn drop_all(self) {
        match self {
            Db::Sqlite(_) => {}
            Db::Pg(schema) => schema.drop_all().await,
        }
    }
}

fn path_text(path: &Path) -> String {
    path.to_str().expect("temp paths are UTF-8").to_owned()
}

/// Where the layer writes the claim: the transactional layer's two ways.
#[derive(Debug, Clone, Copy)]
enum Claim {
    /// On its own, before the handler runs (`transactional()`).
    OnItsOwn,
    /// In the handler's transaction (`transactional().effects_in_transaction()`).
    WithTheWrites,
}

const BOTH: [Claim; 2] = [Claim::OnItsOwn, Claim::WithTheWrites];

/// A running `payments_server`, killed when dropped.
struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    base: String,
    addr: String,
}

impl Server {
    /// Starts the server on `addr` (port 0: any) with `env`, and waits until it listens.
    fn start(db: &Db, claim: Claim, addr: &str, env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(server_binary())
            .args(db.args())
            .args(["--addr", addr, "--lease-ms", LEASE_MS])
            .args(matches!(claim, Claim::WithTheWrites).then_some("--one-commit"))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("the server never said where it listens: {e}"));
        let base = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        // The rest of its output (the failpoint's line) is not needed: drain it.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        let addr = base.trim_start_matches("http://").to_owned();
        Server { child, base, addr }
    }

    fn payments(&self) -> String {
        format!("{}/payments", self.base)
    }

    /// Waits (at most 10 s) for the server to end by itself.
    fn exit_status(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The failpoint kills the server after the booking was written and before the commit: the
/// transaction rolled back, so nothing happened, and the restarted server books the resend at
/// once (not after the minute-long lease), once, and replays it after that. A claim written on
/// its own is left in progress (a transaction that ended without its commit lets the resend
/// take it over); one written with the booking is gone with it.
async fn a_crash_before_the_commit_books_the_resend_once(db: &Db, claim: Claim) {
    let mut crashing = Server::start(
        db,
        claim,
        "127.0.0.1:0",
        &[("PAYMENTS_FAILPOINT", "after_write")],
    );
    let lost = curl(crashing.payments(), "pay-77", ORDER, Some("10")).await;
    assert_eq!(
        lost.status, 0,
        "the server died before it answered: {lost:?}"
    );
    assert_eq!(lost.exit, 52, "curl: empty reply from server: {lost:?}");
    assert_eq!(crashing.exit_status().code(), Some(FAILPOINT_EXIT));
    assert_eq!(db.payments().await, 0, "the booking was never committed");
    let left: &[&str] = match claim {
        Claim::OnItsOwn => &["in_progress"],
        Claim::WithTheWrites => &[],
    };
    assert_eq!(db.keys().await, left, "{claim:?}");

    let addr = crashing.addr.clone();
    drop(crashing);
    let server = Server::start(db, claim, &addr, &[]);
    let started = Instant::now();
    let booked = curl(server.payments(), "pay-77", ORDER, Some("10")).await;
    assert_eq!(booked.status, 201, "the key was free at once: {booked:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "booked after {:?}",
        started.elapsed()
    );
    assert!(!booked.replayed(), "the resend ran the handler: {booked:?}");
    let receipt: serde_json::Value = serde_json::from_str(&booked.body).unwrap();
    assert_eq!(receipt["order"], "order-77");
    assert_eq!(receipt["cents"], 1250);

    let again = curl(server.payments(), "pay-77", ORDER, Some("10")).await;
    assert_eq!(
        (again.status, &again.body),
        (201, &booked.body),
        "{again:?}"
    );
    assert!(again.replayed(), "{again:?}");
    assert_eq!(db.payments().await, 1, "booked exactly once");
    assert_eq!(db.keys().await, ["done"]);
}

/// 64 requests with one key over 8 connections (8 each, one after another), against a handler
/// that holds its transaction 100 ms after its write: one booking, one stored response, every
/// other answer a `409` or that response replayed (on SQLite a claim written with the writes
/// makes duplicates wait for the transaction, then replay).
async fn duplicates_book_once(db: &Db, claim: Claim) {
    let server = Server::start(
        db,
        claim,
        "127.0.0.1:0",
        &[("PAYMENTS_WRITE_DELAY_MS", "100")],
    );
    let url = server.payments();
    let mut connections = Vec::new();
    for _ in 0..8 {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let url = url.clone();
        connections.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for _ in 0..8 {
                let response = client
                    .post(&url)
                    .header("idempotency-key", "\"dup-1\"")
                    .header("content-type", "application/json")
                    .body(ORDER)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                let replayed = response.headers().get("idempotent-replayed").is_some();
                answers.push((status, replayed, response.text().await.unwrap()));
            }
            answers
        }));
    }
    let mut answers = Vec::new();
    for connection in connections {
        answers.extend(connection.await.unwrap());
    }
    assert_eq!(answers.len(), 64);
    let fresh: Vec<_> = answers
        .iter()
        .filter(|(status, replayed, _)| *status == 201 && !replayed)
        .collect();
    assert_eq!(fresh.len(), 1, "one request ran the handler: {answers:?}");
    let receipt = &fresh[0].2;
    let (mut conflicts, mut replays) = (0, 0);
    for (status, replayed, body) in &answers {
        match (status, replayed) {
            (409, _) => conflicts += 1,
            (201, true) if body == receipt => replays += 1,
            (201, false) => {}
            other => panic!("unexpected answer {other:?}: {body}"),
        }
    }
    assert_eq!(conflicts + replays, 63);
    println!("{claim:?}: {conflicts} answers 409, {replays} replays");
    let after = curl(url, "dup-1", ORDER, Some("10")).await;
    assert_eq!((after.status, &after.body), (201, receipt), "{after:?}");
    assert!(
        after.replayed(),
        "once answered, the key replays: {after:?}"
    );
    assert_eq!(db.payments().await, 1, "one booking");
    assert_eq!(db.keys().await, ["done"], "one stored response");
}

/// `retry-dlq`, the operator's command, built once (it is another package of the workspace).
fn retry_dlq_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| built(&["-p", "retry-dlq"], "retry-dlq"))
}

/// The card network is down: the charge gives up, its payment is parked under the client's own
/// key (read unescaped from the layer), and the client gets `503` with the key freed. Once the
/// network is back, `retry-dlq redrive` sends the parked payment under that key: it is booked,
/// the letter resolved, and the client's own resend gets the same answer replayed: one booking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_charge_given_up_is_parked_under_the_clients_key_and_redriven_once() {
    let dir = TempDir::new("http-tx-card-down");
    let file = dir.file("payments.sqlite3");
    let db = Db::Sqlite(dir);
    let key = r#"order-77 \"first\""#; // sent as "order-77 \"first\"": an escaped quote
    let down = Server::start(
        &db,
        Claim::OnItsOwn,
        "127.0.0.1:0",
        &[("PAYMENTS_CARD_NETWORK", "down")],
    );
    let refused = curl(down.payments(), key, ORDER, Some("10")).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(db.payments().await, 0);
    assert_eq!(db.keys().await, ["released"], "the key was freed");
    let addr = down.addr.clone();
    drop(down);

    let cli = |args: &[&str]| {
        let output = Command::new(retry_dlq_binary())
            .arg("--sqlite")
            .arg(&file)
            .args(args)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (_, listed, _) = cli(&["list"]);
    assert!(
        listed.contains(r#"order-77 "first""#),
        "parked under the key as the client meant it: {listed}"
    );

    let server = Server::start(&db, Claim::OnItsOwn, &addr, &[]);
    let (code, out, err) = cli(&["redrive", "--to", &server.payments(), "--who", "ops"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(db.payments().await, 1, "the redrive booked it");
    let (code, _, _) = cli(&["stats", "--check"]);
    assert_eq!(code, Some(0), "nothing pending after the redrive");

    let resend = curl(server.payments(), key, ORDER, Some("10")).await;
    assert_eq!(resend.status, 201, "{resend:?}");
    assert!(
        resend.replayed(),
        "the redrive's answer, replayed: {resend:?}"
    );
    assert_eq!(db.payments().await, 1, "booked once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_crash_before_the_commit_books_the_resend_once() {
    for claim in BOTH {
        let db = Db::Sqlite(TempDir::new(&format!("http-tx-crash-{claim:?}")));
        a_crash_before_the_commit_books_the_resend_once(&db, claim).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_64_duplicates_over_8_connections_book_once() {
    for claim in BOTH {
        let db = Db::Sqlite(TempDir::new(&format!("http-tx-dups-{claim:?}")));
        duplicates_book_once(&db, claim).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_crash_before_the_commit_books_the_resend_once() {
    for claim in BOTH {
        let db = Db::Pg(pg::Schema::new(&format!("http_tx_crash_{claim:?}")).await);
        a_crash_before_the_commit_books_the_resend_once(&db, claim).await;
        db.drop_all().await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_64_duplicates_over_8_connections_book_once() {
    for claim in BOTH {
        let db = Db::Pg(pg::Schema::new(&format!("http_tx_dups_{claim:?}")).await);
        duplicates_book_once(&db, claim).await;
        db.drop_all().await;
    }
}

// ---- in process: which answers commit ----

type Tx = Extension<RequestTransaction<SqliteStore>>;

/// A SQLite store with a `bookings` table beside it, and a count of handler runs.
struct Bench {
    _dir: TempDir,
    path: PathBuf,
    runs: Arc<AtomicU32>,
}

impl Bench {
    fn new(name: &str) -> (Bench, SqliteStore) {
        let dir = TempDir::new(name);
        let path = dir.file("bookings.sqlite3");
        let store = SqliteStore::open(&path).unwrap();
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE bookings (id INTEGER PRIMARY KEY, run INTEGER NOT NULL)")
            .unwrap();
        let bench = Bench {
            _dir: dir,
            path,
            runs: Arc::default(),
        };
        (bench, store)
    }

    fn bookings(&self) -> i64 {
        rusqlite::Connection::open(&self.path)
            .unwrap()
            .query_row("SELECT count(*) FROM bookings", [], |row| row.get(0))
            .unwrap()
    }
}

/// Books one row for this run in the request's transaction; returns the run's number.
async fn book(runs: &AtomicU32, tx: &RequestTransaction<SqliteStore>) -> u32 {
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    let mut tx = tx.get().await.unwrap();
    tx.run(move |c| c.execute("INSERT INTO bookings (run) VALUES (?1)", [run]))
        .await
        .unwrap();
    run
}

/// Sends `POST /pay` with `key` through `app`: status, replayed?, body.
async fn send(app: &mut Router, key: &str) -> (StatusCode, bool, String) {
    let request = Request::post("/pay")
        .header("idempotency-key", format!("\"{key}\""))
        .body(Body::from("{}"))
        .unwrap();
    let response = app.call(request).await.unwrap();
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        replayed,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn transactional(
    store: SqliteStore,
    claim: Claim,
    runs: &Arc<AtomicU32>,
    handler: axum::routing::MethodRouter<Arc<AtomicU32>>,
) -> Router {
    let layer = IdempotencyLayer::unauthenticated(store).transactional();
    let layer = match claim {
        Claim::OnItsOwn => layer,
        Claim::WithTheWrites => layer.effects_in_transaction(),
    };
    Router::new()
        .route("/pay", handler)
        .layer(layer)
        .with_state(Arc::clone(runs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_rolls_the_write_back_and_frees_the_key() {
    for claim in BOTH {
        let (bench, store) = Bench::new(&format!("http-tx-5xx-{claim:?}"));
        let handler = post(
            |State(runs): State<Arc<AtomicU32>>, Extension(tx): Tx| async move {
                match book(&runs, &tx).await {
                    1 => (StatusCode::BAD_GATEWAY, "ledger did not confirm").into_response(),
                    run => (StatusCode::CREATED, format!("booked on run {run}")).into_response(),
                }
            },
        );
        let mut app = transactional(store, claim, &bench.runs, handler);

        let failed = send(&mut app, "k-5xx").await;
        assert_eq!(
            failed,
            (
                StatusCode::BAD_GATEWAY,
                false,
                "ledger did not confirm".into()
            )
        );
        assert_eq!(bench.bookings(), 0, "its write rolled back");
        let resent = send(&mut app, "k-5xx").await;
        assert_eq!(
            resent,
            (StatusCode::CREATED, false, "booked on run 2".into()),
            "ran again"
        );
        let again = send(&mut app, "k-5xx").await;
        assert_eq!(
            again,
            (StatusCode::CREATED, true, "booked on run 2".into()),
            "replayed"
        );
        assert_eq!(bench.bookings(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_processed_status_rolls_the_write_back_and_frees_the_key() {
    for claim in BOTH {
        let (bench, store) = Bench::new(&format!("http-tx-422-{claim:?}"));
        let handler = post(
            |State(runs): State<Arc<AtomicU32>>, Extension(tx): Tx| async move {
                match book(&runs, &tx).await {
                    1 => (StatusCode::UNPROCESSABLE_ENTITY, "cents missing").into_response(),
                    run => (StatusCode::CREATED, format!("booked on run {run}")).into_response(),
                }
            },
        );
        let mut app = transactional(store, claim, &bench.runs, handler);

        let refused = send(&mut app, "k-422").await;
        assert_eq!(
            refused,
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                false,
                "cents missing".into()
            )
        );
        assert_eq!(bench.bookings(), 0, "its write rolled back");
        let resent = send(&mut app, "k-422").await;
        assert_eq!(
            resent,
            (StatusCode::CREATED, false, "booked on run 2".into()),
            "ran again"
        );
        let again = send(&mut app, "k-422").await;
        assert_eq!(again, (StatusCode::CREATED, true, "booked on run 2".into()));
        assert_eq!(bench.bookings(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_commits_with_its_writes_and_is_replayed() {
    for claim in BOTH {
        let (bench, store) = Bench::new(&format!("http-tx-4xx-{claim:?}"));
        let handler = post(
            |State(runs): State<Arc<AtomicU32>>, Extension(tx): Tx| async move {
                // A declined card: the attempt is booked, and the refusal stands for every resend.
                let run = book(&runs, &tx).await;
                (
                    StatusCode::PAYMENT_REQUIRED,
                    format!("declined on run {run}"),
                )
            },
        );
        let mut app = transactional(store, claim, &bench.runs, handler);
        let first = send(&mut app, "k-402").await;
        assert_eq!(
            first,
            (
                StatusCode::PAYMENT_REQUIRED,
                false,
                "declined on run 1".into()
            )
        );
        let again = send(&mut app, "k-402").await;
        assert_eq!(
            again,
            (
                StatusCode::PAYMENT_REQUIRED,
                true,
                "declined on run 1".into()
            )
        );
        assert_eq!(bench.bookings(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_after_the_write_rolls_it_back_and_frees_the_key() {
    for claim in BOTH {
        let (bench, store) = Bench::new(&format!("http-tx-panic-{claim:?}"));
        let handler = post(
            |State(runs): State<Arc<AtomicU32>>, Extension(tx): Tx| async move {
                let run = book(&runs, &tx).await;
                assert!(run > 1, "the receipt printer broke on run {run}");
                format!("booked on run {run}")
            },
        );
        let mut app = transactional(store, claim, &bench.runs, handler);

        let (status, replayed, body) = send(&mut app, "k-panic").await;
        assert_eq!(
            (status, replayed),
            (StatusCode::INTERNAL_SERVER_ERROR, false)
        );
        assert!(body.contains("nothing of it was committed"), "{body}");
        assert_eq!(bench.bookings(), 0);
        let resent = send(&mut app, "k-panic").await;
        assert_eq!(resent, (StatusCode::OK, false, "booked on run 2".into()));
        assert_eq!(bench.bookings(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_kept_past_the_answer_is_never_committed() {
    for claim in BOTH {
        let (bench, store) = Bench::new(&format!("http-tx-kept-{claim:?}"));
        let handler = post(
            |State(runs): State<Arc<AtomicU32>>, Extension(tx): Tx| async move {
                let run = book(&runs, &tx).await;
                if run == 1 {
                    // A mistake: the guard goes to a task that outlives the answer.
                    let guard = tx.get().await.unwrap();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        drop(guard);
                    });
                }
                format!("booked on run {run}")
            },
        );
        let mut app = transactional(store, claim, &bench.runs, handler);

        let (status, _, body) = send(&mut app, "k-kept").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        // The kept guard rolls back when its task drops it; only then is the write lock free.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(bench.bookings(), 0);
        let resent = send(&mut app, "k-kept").await;
        assert_eq!(resent, (StatusCode::OK, false, "booked on run 2".into()));
        assert_eq!(bench.bookings(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_never_asks_follows_the_non_transactional_rules() {
    let (bench, store) = Bench::new("http-tx-plain");
    let handler = post(|State(runs): State<Arc<AtomicU32>>| async move {
        // An effect elsewhere (say, a card network), then a failure: the outcome is unknown.
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        (StatusCode::BAD_GATEWAY, format!("charged? run {run}"))
    });
    let mut app = transactional(store, Claim::OnItsOwn, &bench.runs, handler);
    let first = send(&mut app, "k-plain").await;
    assert_eq!(
        first,
        (StatusCode::BAD_GATEWAY, false, "charged? run 1".into())
    );
    let again = send(&mut app, "k-plain").await;
    assert_eq!(
        again,
        (StatusCode::BAD_GATEWAY, true, "charged? run 1".into()),
        "kept and replayed, never run again"
    );
    assert_eq!(bench.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_promise_a_handler_that_never_asks_is_held_to_it() {
    let (bench, store) = Bench::new("http-tx-promised");
    let handler = post(|State(runs): State<Arc<AtomicU32>>| async move {
        // Nothing outside the transaction, as the layer's promise says: a failure rolls back
        // (there is nothing to roll back) and frees the key; an answer commits with the claim.
        match runs.fetch_add(1, Ordering::SeqCst) + 1 {
            1 => (StatusCode::BAD_GATEWAY, "run 1".to_owned()),
            run => (StatusCode::OK, format!("run {run}")),
        }
    });
    let mut app = transactional(store, Claim::WithTheWrites, &bench.runs, handler);
    let first = send(&mut app, "k-promised").await;
    assert_eq!(first, (StatusCode::BAD_GATEWAY, false, "run 1".into()));
    let resent = send(&mut app, "k-promised").await;
    assert_eq!(
        resent,
        (StatusCode::OK, false, "run 2".into()),
        "freed, ran again"
    );
    let again = send(&mut app, "k-promised").await;
    assert_eq!(
        again,
        (StatusCode::OK, true, "run 2".into()),
        "stored, replayed"
    );
    assert_eq!(bench.runs.load(Ordering::SeqCst), 2);
}

/// A handler written for a transactional route, mounted behind a layer built without
/// `.transactional()`: its first request is refused with a `500` that says so (not axum's
/// "Missing request extension", stored and replayed to every resend), nothing is booked, and
/// the key stays free, so once the layer is fixed the same resend books.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_handler_behind_a_plain_layer_is_refused_and_burns_no_key() {
    let (bench, store) = Bench::new("http-tx-plain-layer");
    // As a handler is written: a store that fails is a 503 for the client to resend.
    let handler = post(
        |State(runs): State<Arc<AtomicU32>>,
         Extension(tx): Extension<RequestTransaction<SqliteStore>>| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let Ok(mut tx) = tx.get().await else {
                return StatusCode::SERVICE_UNAVAILABLE;
            };
            tx.run(|c| c.execute("INSERT INTO bookings (run) VALUES (1)", []))
                .await
                .unwrap();
            StatusCode::CREATED
        },
    );
    let mut plain = Router::new()
        .route("/pay", handler.clone())
        .layer(IdempotencyLayer::unauthenticated(store))
        .with_state(Arc::clone(&bench.runs));
    for _ in 0..2 {
        let (status, replayed, body) = send(&mut plain, "k-plain").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(!replayed, "never stored, so never replayed: {body}");
        assert!(body.contains("not transactional"), "{body}");
    }
    assert_eq!(bench.bookings(), 0, "nothing booked");

    let store = SqliteStore::open(&bench.path).unwrap();
    let mut fixed = Router::new()
        .route("/pay", handler)
        .layer(IdempotencyLayer::unauthenticated(store).transactional())
        .with_state(Arc::clone(&bench.runs));
    let (status, replayed, body) = send(&mut fixed, "k-plain").await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false), "{body}");
    assert_eq!(bench.bookings(), 1);
}

/// The same mistake, with a handler that answers `201` when it gets no transaction: it may have
/// acted elsewhere, so its answer is kept and replayed, never run twice, as in transactional mode
/// when `begin` fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_plain_layer_an_answer_below_500_after_asking_is_kept() {
    let (bench, store) = Bench::new("http-tx-plain-layer-kept");
    let handler = post(
        |State(runs): State<Arc<AtomicU32>>,
         Extension(tx): Extension<RequestTransaction<SqliteStore>>| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            assert!(
                tx.get().await.is_err(),
                "a plain layer offers no transaction"
            );
            StatusCode::CREATED
        },
    );
    let mut plain = Router::new()
        .route("/pay", handler)
        .layer(IdempotencyLayer::unauthenticated(store))
        .with_state(Arc::clone(&bench.runs));
    let (status, replayed, _) = send(&mut plain, "k-kept").await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false));
    let (status, replayed, _) = send(&mut plain, "k-kept").await;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(bench.runs.load(Ordering::SeqCst), 1, "run once");
}
