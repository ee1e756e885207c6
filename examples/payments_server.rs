//! A payments service as a team would write it: axum, `IdempotencyLayer` in transactional mode,
//! and a handler that books each payment in the service's own table, in the layer's
//! transaction. The booking, the `done` row and the stored response commit together or not at
//! all, so no crash, however timed, books a payment twice.
//!
//! ```text
//! cargo run --example payments_server                           # SQLite, ./payments.sqlite3
//! cargo run --example payments_server -- --db /tmp/pay.sqlite3 --addr 127.0.0.1:8080
//! cargo run --features postgres --example payments_server -- --pg postgres://app@localhost/pay
//!
//! curl -i -X POST http://127.0.0.1:3000/payments \
//!      -H 'Idempotency-Key: "order-1234-attempt"' -d '{"order":"order-1234","cents":1250}'
//! ```
//!
//! The first request books payment 1 and answers `201`; every resend with the same key gets the
//! same answer with `Idempotent-Replayed: ?1`, and books nothing.
//!
//! Options: `--db PATH` (SQLite file, default `payments.sqlite3`), `--pg URL` (PostgreSQL
//! instead, feature `postgres`), `--addr HOST:PORT` (default `127.0.0.1:3000`; port 0 picks
//! one), `--lease-ms N` (the claim's lease, default 5000: how long resends get `409` after a
//! crash; live handlers renew it), `--one-commit` (the handler's effects are its writes in the
//! transaction, so the layer claims in it too:
//! [`effects_in_transaction`](retry_core::tower::IdempotencyLayer::effects_in_transaction); one
//! commit per request, and after a crash the resend runs at once).
//!
//! Before booking, the handler charges the card at the card network (simulated here). When the
//! network cannot be reached, the charge is retried three times and then parked as a dead letter
//! in the same SQLite file, under the client's `Idempotency-Key` (`dlq(id = key, ..)`), and the
//! client gets `503` with the key freed (nothing was charged or booked). Once the network is
//! back, `retry-dlq --sqlite payments.sqlite3 redrive --to http://127.0.0.1:3000/payments
//! --who ops` sends each letter's payment again under that key: the payment is booked once,
//! whether the client or the redrive comes first (the other gets the stored answer).
//!
//! Fault injection, for tests and demos:
//! - `PAYMENTS_CARD_NETWORK=down`: the card network is unreachable.
//! - `PAYMENTS_FAILPOINT=after_write`: the process exits (code 86) inside the handler, after
//!   its booking was written and before the layer commits it. Restart without it and resend:
//!   after the lease (`409` until then) the payment is booked once, then replayed.
//! - `PAYMENTS_WRITE_DELAY_MS=N`: the handler waits N ms after its write, inside the
//!   transaction (to make concurrent duplicates meet it).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use retry_core::dlq::{DeadLetter, DeadLetterSink, DlqError, DlqFailed};
use retry_core::http::IdempotencyKey;
use retry_core::idempotency::{StoreError, TransactionalStore};
use retry_core::tower::{IdempotencyLayer, InTransaction, NotApplied, RequestTransaction};
use retry_core::{Classify, Decision, retryable};
use retry_sqlite::{SqliteDeadLetters, SqliteStore};
use serde::{Deserialize, Serialize};

/// The exit code of the `after_write` failpoint.
const FAILPOINT_EXIT: i32 = 86;

/// The service's own table, next to the store's `inbox_log` (same SQLite file / same schema).
const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS payments (
    id INTEGER PRIMARY KEY,
    order_id TEXT NOT NULL,
    cents INTEGER NOT NULL
)";

/// What a client asks for (and what a dead letter keeps, to send again).
#[derive(Serialize, Deserialize)]
struct Payment {
    order: String,
    cents: i64,
}

/// What it gets back (and what resends get replayed).
#[derive(Serialize)]
struct Booked {
    payment: i64,
    order: String,
    cents: i64,
}

/// What the handlers share: the fault injection and the dead letters.
#[derive(Clone)]
struct App {
    faults: Faults,
    letters: std::sync::Arc<Letters>,
}

/// Where charges the card network refused are parked: the service's own database.
enum Letters {
    Sqlite(SqliteDeadLetters),
    #[cfg(feature = "postgres")]
    Pg(retry_postgres::PgDeadLetters),
}

impl DeadLetterSink for Letters {
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        match self {
            Letters::Sqlite(letters) => letters.park(letter).await,
            #[cfg(feature = "postgres")]
            Letters::Pg(letters) => letters.park(letter).await,
        }
    }
}

/// Why a charge failed.
#[derive(Debug)]
enum CardError {
    /// The card network could not be reached: nothing was charged.
    Unreachable,
    /// The charge gave up and its dead letter could not be parked either.
    NotParked,
}

impl Classify for CardError {
    fn classify(&self) -> Decision {
        match self {
            CardError::Unreachable => Decision::Retry,
            CardError::NotParked => Decision::Stop,
        }
    }
    fn reason(&self) -> Option<String> {
        Some(match self {
            CardError::Unreachable => "card network unreachable".into(),
            CardError::NotParked => "card network unreachable; not parked".into(),
        })
    }
}

impl From<DlqFailed> for CardError {
    fn from(failed: DlqFailed) -> Self {
        eprintln!("payments: dead letter not parked: {failed}");
        CardError::NotParked
    }
}

/// Charges the card at the (simulated) card network. Given up, the payment is parked under the
/// client's key, so a redrive sends it again as the same operation.
#[retryable(max = 3, base = "10ms", dlq(sink = letters, id = key.as_str(), original = payment))]
async fn charge_card(
    letters: &Letters,
    key: &IdempotencyKey,
    payment: &Payment,
    network_down: bool,
) -> Result<(), CardError> {
    if network_down {
        Err(CardError::Unreachable)
    } else {
        Ok(())
    }
}

/// The fault injection read from the environment at start.
#[derive(Clone, Copy, Default)]
struct Faults {
    exit_after_write: bool,
    delay_after_write: Duration,
    card_network_down: bool,
}

impl Faults {
    fn from_env() -> Self {
        let exit_after_write = match std::env::var("PAYMENTS_FAILPOINT") {
            Ok(point) if point == "after_write" => true,
            Ok(other) if !other.is_empty() => {
                eprintln!("unknown PAYMENTS_FAILPOINT {other:?} (known: after_write)");
                std::process::exit(2);
            }
            _ => false,
        };
        let delay_after_write = std::env::var("PAYMENTS_WRITE_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        let card_network_down = std::env::var("PAYMENTS_CARD_NETWORK").is_ok_and(|v| v == "down");
        Faults {
            exit_after_write,
            delay_after_write,
            card_network_down,
        }
    }

    /// Called after the booking was written, before the handler answers (so before the commit).
    async fn after_write(self) {
        if self.exit_after_write {
            println!("failpoint after_write: exiting before the commit");
            let _ = std::io::stdout().flush();
            std::process::exit(FAILPOINT_EXIT);
        }
        if !self.delay_after_write.is_zero() {
            tokio::time::sleep(self.delay_after_write).await;
        }
    }
}

/// The refusal of a payment that cannot be booked, decided before any transaction is asked
/// for (so it is stored and replayed as any answer of the non-transactional rules).
fn refusal(payment: &Payment) -> Option<Response> {
    let invalid = payment.cents <= 0 || payment.order.is_empty();
    invalid.then(|| {
        let why = "a payment needs an order and a positive amount in cents";
        (StatusCode::UNPROCESSABLE_ENTITY, why).into_response()
    })
}

/// The card was not charged (the network was down, the payment is parked): a `503` whose key
/// the layer frees ([`NotApplied`]), since nothing happened; a resend or a redrive runs it again.
fn not_charged() -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        "card network unreachable: try again",
    )
        .into_response();
    response.extensions_mut().insert(NotApplied);
    response
}

/// The store failed: nothing was booked (the transaction rolls back), and a `503` tells the
/// layer so: the key is freed and the client's resend runs again.
fn unavailable(error: &StoreError) -> Response {
    eprintln!("payments: store failed: {error}");
    (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response()
}

fn booked(payment: i64, request: Payment) -> Response {
    let booked = Booked {
        payment,
        order: request.order,
        cents: request.cents,
    };
    (StatusCode::CREATED, Json(booked)).into_response()
}

/// `POST /payments` on SQLite: the booking runs on the store's blocking thread, in the
/// transaction the layer commits with the response.
async fn pay_sqlite(
    State(app): State<App>,
    Extension(key): Extension<IdempotencyKey>,
    Extension(tx): Extension<RequestTransaction<SqliteStore>>,
    Json(request): Json<Payment>,
) -> Response {
    if let Some(refusal) = refusal(&request) {
        return refusal;
    }
    let faults = app.faults;
    if charge_card(&app.letters, &key, &request, faults.card_network_down)
        .await
        .is_err()
    {
        return not_charged();
    }
    // Taken as late as possible: on SQLite it holds the file's write lock until the commit.
    let mut tx = match tx.get().await {
        Ok(tx) => tx,
        Err(e) => return unavailable(&e),
    };
    let (order, cents) = (request.order.clone(), request.cents);
    let written = tx
        .run(move |c| {
            c.execute(
                "INSERT INTO payments (order_id, cents) VALUES (?1, ?2)",
                rusqlite::params![order, cents],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await;
    let id = match written {
        Ok(id) => id,
        Err(e) => return unavailable(&e),
    };
    faults.after_write().await;
    drop(tx);
    booked(id, request)
}

/// `POST /payments` on PostgreSQL: the booking runs on the transaction's tokio-postgres client.
#[cfg(feature = "postgres")]
async fn pay_pg(
    State(app): State<App>,
    Extension(key): Extension<IdempotencyKey>,
    Extension(tx): Extension<RequestTransaction<retry_postgres::PgStore>>,
    Json(request): Json<Payment>,
) -> Response {
    if let Some(refusal) = refusal(&request) {
        return refusal;
    }
    let faults = app.faults;
    if charge_card(&app.letters, &key, &request, faults.card_network_down)
        .await
        .is_err()
    {
        return not_charged();
    }
    let tx = match tx.get().await {
        Ok(tx) => tx,
        Err(e) => return unavailable(&e),
    };
    let written = tx
        .client()
        .query_one(
            "INSERT INTO payments (order_id, cents) VALUES ($1, $2) RETURNING id",
            &[&request.order, &request.cents],
        )
        .await;
    let id: i64 = match written {
        Ok(row) => row.get(0),
        Err(e) => {
            eprintln!("payments: booking failed: {e}");
            return (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response();
        }
    };
    faults.after_write().await;
    drop(tx);
    booked(id, request)
}

/// Command-line options.
struct Options {
    db: String,
    pg: Option<String>,
    addr: SocketAddr,
    lease: Duration,
    one_commit: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        db: "payments.sqlite3".into(),
        pg: None,
        addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
        lease: Duration::from_secs(5),
        one_commit: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--db" => options.db = value()?,
            "--pg" => options.pg = Some(value()?),
            "--addr" => options.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--lease-ms" => {
                let ms = value()?.parse().map_err(|e| format!("--lease-ms: {e}"))?;
                options.lease = Duration::from_millis(ms);
            }
            "--one-commit" => options.one_commit = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

/// `layer` with the handler's promise (`--one-commit`): its effects are its writes in the
/// transaction, so the claim is written there too.
fn one_commit_if_asked<St>(
    layer: IdempotencyLayer<St, InTransaction>,
    options: &Options,
) -> IdempotencyLayer<St, InTransaction>
where
    St: TransactionalStore + 'static,
{
    if options.one_commit {
        layer.effects_in_transaction()
    } else {
        layer
    }
}

/// The router for the store the options name.
async fn app(options: &Options, faults: Faults) -> Result<Router, Box<dyn std::error::Error>> {
    if let Some(url) = &options.pg {
        return pg_app(url, options, faults).await;
    }
    let store = SqliteStore::open(&options.db)?;
    rusqlite::Connection::open(&options.db)?.execute_batch(SQLITE_TABLE)?;
    let letters = Letters::Sqlite(SqliteDeadLetters::open(&options.db)?);
    // Keys are unguessable here; a real service scopes them by its authenticated client
    // (`IdempotencyLayer::new(store, |parts| ...)`).
    let layer = IdempotencyLayer::unauthenticated(store)
        .name("create_payment")
        .lease(options.lease)
        .transactional();
    let layer = one_commit_if_asked(layer, options);
    let state = App {
        faults,
        letters: std::sync::Arc::new(letters),
    };
    Ok(Router::new()
        .route("/payments", post(pay_sqlite))
        .layer(layer)
        .with_state(state))
}

#[cfg(feature = "postgres")]
async fn pg_app(
    url: &str,
    options: &Options,
    faults: Faults,
) -> Result<Router, Box<dyn std::error::Error>> {
    use retry_postgres::PgStore;

    let store = PgStore::connect(url).await?;
    // On a connection of the store's own pool (TLS and all, as the URL says).
    store
        .pool()
        .get()
        .await?
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS payments (
                id BIGSERIAL PRIMARY KEY,
                order_id TEXT NOT NULL,
                cents BIGINT NOT NULL
            )",
        )
        .await?;
    let letters =
        Letters::Pg(retry_postgres::PgDeadLetters::from_pool(store.pool().clone()).await?);
    let layer = IdempotencyLayer::unauthenticated(store)
        .name("create_payment")
        .lease(options.lease)
        .transactional();
    let layer = one_commit_if_asked(layer, options);
    let state = App {
        faults,
        letters: std::sync::Arc::new(letters),
    };
    Ok(Router::new()
        .route("/payments", post(pay_pg))
        .layer(layer)
        .with_state(state))
}

#[cfg(not(feature = "postgres"))]
async fn pg_app(_: &str, _: &Options, _: Faults) -> Result<Router, Box<dyn std::error::Error>> {
    Err("--pg needs the `postgres` feature: cargo run --features postgres --example payments_server".into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("payments_server: {e}");
            std::process::exit(2);
        }
    };
    let app = app(&options, Faults::from_env()).await?;
    let listener = tokio::net::TcpListener::bind(options.addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}
