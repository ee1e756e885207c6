//! `cargo run --example demo`: payments end to end on loopback, with the embedded defaults.
//!
//! - **The receiver** ("bank") is an axum server whose `POST /payments` handler books each
//!   payment in a ledger: the side effect. In front of it sits `tower::IdempotencyLayer` on a
//!   SQLite file (`SqliteStore`), scoped by the calling shop (the principal its bearer token
//!   authenticates, never the token itself).
//! - **The upstream is flaky**: an outer middleware injects scripted faults before (or after) the
//!   idempotency layer: `503`s, a `429` with `Retry-After: 1`, and once a response that is lost
//!   on the way back (the payment is booked, the answer comes too late).
//! - **The client** is one `#[retryable]` function with a dead-letter store on a SQLite file
//!   (`SqliteDeadLetters`), sending one `IdempotencyKey` per payment on every attempt.
//!
//! The story: payment 1 meets two `503`s and a `429` and gets through; payment 2's response is
//! lost and the resend is answered from the store; payment 3 meets an outage longer than its
//! attempts and is parked; payment 4 goes through and is then redelivered by the "queue" with the
//! same key. After the outage the dead letter is redriven to the same receiver. The summary
//! checks that side effects equal logical operations and that the dead-letter queue is empty.
//!
//! `--keep` leaves the SQLite files in place (their paths are printed) for
//! `retry-dlq --sqlite <file> audit` and friends.

#[path = "common/timeline.rs"]
mod timeline;

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Json, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use retry_core::dlq::http::post_letter;
use retry_core::dlq::{DeadLetterStore, DlqFailed, Redrive};
use retry_core::http::{IDEMPOTENT_REPLAYED, IdempotencyKey};
use retry_core::reqwest::{HttpError, RequestBuilderExt};
use retry_core::tower::IdempotencyLayer;
use retry_core::{Classify, Decision, Elapsed, retryable};
use retry_sqlite::{SqliteDeadLetters, SqliteStore};
use serde::{Deserialize, Serialize};

use timeline::{Scratch, event, start};

// ---- the client: what a user of the library writes ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    payment_id: String,
    account: String,
    cents: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    payment_id: String,
    booking: u32,
}

#[derive(Debug)]
enum PayError {
    /// A status or transport failure, classified by retry-core's HTTP table.
    Http(HttpError),
    /// The attempt ran past `attempt_timeout`.
    TimedOut,
    /// The answer was not a receipt.
    BadAnswer(String),
    /// Gave up and the dead letter could not be parked: do not acknowledge.
    NotParked(Box<DlqFailed>),
}

impl Classify for PayError {
    fn classify(&self) -> Decision {
        match self {
            PayError::Http(e) => e.classify(),
            PayError::TimedOut => Decision::Retry,
            PayError::BadAnswer(_) | PayError::NotParked(_) => Decision::Stop,
        }
    }

    fn reason(&self) -> Option<String> {
        match self {
            PayError::Http(e) => e.reason(),
            other => Some(other.to_string()),
        }
    }
}

impl fmt::Display for PayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayError::Http(e) => match e.status() {
                Some(status) => write!(f, "{status}"),
                None => write!(f, "{e}"),
            },
            PayError::TimedOut => f.write_str("no answer within 300 ms"),
            PayError::BadAnswer(why) => write!(f, "bad answer: {why}"),
            PayError::NotParked(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PayError {}

impl From<HttpError> for PayError {
    fn from(e: HttpError) -> Self {
        PayError::Http(e)
    }
}

impl From<Elapsed> for PayError {
    fn from(_: Elapsed) -> Self {
        PayError::TimedOut
    }
}

impl From<DlqFailed> for PayError {
    fn from(e: DlqFailed) -> Self {
        PayError::NotParked(Box::new(e))
    }
}

/// One payment, retried: the same `key` on every attempt, and a dead letter (id = the key, so a
/// redrive resends under it) when it gives up.
#[retryable(
    max = 4,
    base = "100ms",
    cap = "1s",
    jitter = "full",
    attempt_timeout = "300ms",
    on_retry = log_retry,
    dlq(sink = letters, id = key.to_string(), original = payment)
)]
async fn pay(
    client: &reqwest::Client,
    url: &str,
    letters: &SqliteDeadLetters,
    key: &IdempotencyKey,
    payment: &Payment,
) -> Result<Receipt, PayError> {
    let body = serde_json::to_string(payment).map_err(|e| PayError::BadAnswer(e.to_string()))?;
    let response = client
        .post(url)
        .bearer_auth(SHOP_TOKEN)
        .idempotency_key(key)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .send_checked()
        .await?;
    let bytes = response
        .bytes()
        .await
        .map_err(|e| PayError::BadAnswer(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| PayError::BadAnswer(e.to_string()))
}

fn log_retry(attempt: u32, error: &PayError, wait: Duration) {
    event(
        "client",
        format_args!(
            "attempt {attempt} failed: {error} -> retry in {} ms",
            wait.as_millis()
        ),
    );
}

// ---- the receiver ----

/// The bank's books: every booking is a side effect.
#[derive(Default)]
struct Bank {
    ledger: Mutex<Vec<Payment>>,
}

async fn book(State(bank): State<Arc<Bank>>, Json(payment): Json<Payment>) -> Json<Receipt> {
    let mut ledger = bank.ledger.lock().unwrap();
    ledger.push(payment.clone());
    let booking = u32::try_from(ledger.len()).unwrap();
    event(
        "bank",
        format_args!(
            "booked {} ({} cents to {}) as booking {booking}",
            payment.payment_id, payment.cents, payment.account
        ),
    );
    Json(Receipt {
        payment_id: payment.payment_id,
        booking,
    })
}

/// What the flaky upstream does to the next request.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `503 Service Unavailable`, before the bank sees the request.
    Unavailable,
    /// `429 Too Many Requests` with `Retry-After: 1`, before the bank sees the request.
    TooManyRequests,
    /// The bank books the payment; its answer arrives after the client stopped waiting.
    LoseResponse,
}

/// The faults still to come, and what the network saw.
#[derive(Default)]
struct Upstream {
    faults: Mutex<VecDeque<Fault>>,
    requests: AtomicU32,
    replays: AtomicU32,
}

impl Upstream {
    fn script(&self, faults: &[Fault]) {
        self.faults.lock().unwrap().extend(faults);
    }
}

async fn flaky(State(upstream): State<Arc<Upstream>>, request: Request, next: Next) -> Response {
    upstream.requests.fetch_add(1, Ordering::SeqCst);
    let fault = upstream.faults.lock().unwrap().pop_front();
    match fault {
        Some(Fault::Unavailable) => {
            event("upstream", format_args!("503 Service Unavailable (outage)"));
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        Some(Fault::TooManyRequests) => {
            event(
                "upstream",
                format_args!("429 Too Many Requests, Retry-After: 1"),
            );
            let mut response = StatusCode::TOO_MANY_REQUESTS.into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return response;
        }
        Some(Fault::LoseResponse) | None => {}
    }
    let response = next.run(request).await;
    if response.headers().contains_key(IDEMPOTENT_REPLAYED) {
        upstream.replays.fetch_add(1, Ordering::SeqCst);
        event(
            "bank",
            format_args!("duplicate absorbed: stored response replayed, nothing booked"),
        );
    }
    if let Some(Fault::LoseResponse) = fault {
        event(
            "upstream",
            format_args!("the answer is held up for 1 s: lost to the client"),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    response
}

/// The calling shop's API token (the stand-in authentication knows it as shop 42).
const SHOP_TOKEN: &str = "sk_test_4f7c2a9e";

async fn start_bank(
    store: SqliteStore,
    bank: Arc<Bank>,
    upstream: Arc<Upstream>,
) -> std::io::Result<String> {
    let idempotency = IdempotencyLayer::new(store, |parts: &axum::http::request::Parts| {
        // The shop the (stand-in) authentication recognised: keys are kept apart per shop. The
        // scope is the shop's stable id, never the token (which rotates, and must not be kept).
        let auth = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        (auth.strip_prefix("Bearer ")? == SHOP_TOKEN).then(|| "shop-42".to_owned())
    })
    .name("payments");
    let app = axum::Router::new()
        .route("/payments", axum::routing::post(book))
        .with_state(bank)
        .layer(idempotency)
        .layer(middleware::from_fn_with_state(upstream, flaky));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/payments", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service()).await;
    });
    Ok(url)
}

// ---- the run ----

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keep = std::env::args().any(|a| a == "--keep");
    start();
    let files = Scratch::new("demo", keep)?;
    let inbox_path = files.dir.join("inbox.sqlite3");
    let dlq_path = files.dir.join("dead-letters.sqlite3");
    println!(
        "payments on loopback: idempotency store {}",
        inbox_path.display()
    );
    println!(
        "                      dead letters      {}",
        dlq_path.display()
    );
    println!();

    let bank = Arc::new(Bank::default());
    let upstream = Arc::new(Upstream::default());
    let url = start_bank(
        SqliteStore::open(&inbox_path)?,
        bank.clone(),
        upstream.clone(),
    )
    .await?;
    let client = retry_core::reqwest::client_builder().build()?;
    let letters = SqliteDeadLetters::open(&dlq_path)?;

    let payments: Vec<(IdempotencyKey, Payment)> = (1..=4)
        .map(|n| {
            let payment = Payment {
                payment_id: format!("P{n}"),
                account: format!("DE00-{n:04}"),
                cents: 1000 * n,
            };
            (IdempotencyKey::new(), payment)
        })
        .collect();
    let scripts: [(&str, &[Fault]); 4] = [
        (
            "two 503s, then a 429 with Retry-After: 1",
            &[
                Fault::Unavailable,
                Fault::Unavailable,
                Fault::TooManyRequests,
            ],
        ),
        ("booked, but the answer is lost", &[Fault::LoseResponse]),
        (
            "an outage longer than its 4 attempts",
            &[Fault::Unavailable; 4],
        ),
        ("no trouble", &[]),
    ];

    for ((key, payment), (story, faults)) in payments.iter().zip(scripts) {
        println!();
        event(
            "client",
            format_args!("{}: {story} (Idempotency-Key {key})", payment.payment_id),
        );
        upstream.script(faults);
        match pay(&client, &url, &letters, key, payment).await {
            Ok(receipt) => {
                event(
                    "client",
                    format_args!("{} done: booking {}", receipt.payment_id, receipt.booking),
                );
            }
            Err(e) => event(
                "client",
                format_args!(
                    "{} gave up ({e}); parked as a dead letter",
                    payment.payment_id
                ),
            ),
        }
    }

    // The queue delivers payment 4 a second time: same key, same request.
    println!();
    let (key, payment) = &payments[3];
    event(
        "client",
        format_args!("{}: the queue redelivers it", payment.payment_id),
    );
    let again = pay(&client, &url, &letters, key, payment).await?;
    event(
        "client",
        format_args!(
            "{} answered with booking {} again",
            again.payment_id, again.booking
        ),
    );

    // The outage is over: redrive what was parked, under the keys the originals carried.
    println!();
    let parked = letters.stats().await?.pending;
    event(
        "ops",
        format_args!("the outage is over; {parked} dead letter(s) pending, redriving"),
    );
    let report = Redrive::new(&letters, "demo")
        .target(url.as_str())
        .run_letters(|letter| post_letter(client.post(&url).bearer_auth(SHOP_TOKEN), letter))
        .await?;
    for (msg_id, outcome) in &report.letters {
        event("ops", format_args!("redrive {msg_id}: {outcome:?}"));
    }
    let pending = letters.stats().await?.pending;

    let booked = bank.ledger.lock().unwrap().clone();
    let mut ids: Vec<&str> = booked.iter().map(|p| p.payment_id.as_str()).collect();
    ids.sort_unstable();
    let unique = {
        let mut u = ids.clone();
        u.dedup();
        u.len()
    };
    println!();
    println!("summary");
    println!("  logical operations   {}", payments.len());
    println!(
        "  requests sent        {}",
        upstream.requests.load(Ordering::SeqCst)
    );
    println!(
        "  duplicates absorbed  {}",
        upstream.replays.load(Ordering::SeqCst)
    );
    println!(
        "  side effects         {} ({})",
        booked.len(),
        ids.join(", ")
    );
    println!("  letters parked       {parked}");
    println!("  letters redriven     {}", report.record.succeeded);
    println!("  letters pending      {pending}");
    println!("  audit records        {}", letters.redrives().await?.len());
    println!(
        "  took                 {} ms",
        start().elapsed().as_millis()
    );
    if keep {
        println!(
            "  files kept in        {} (try: cargo run -p retry-dlq -- --sqlite {} audit)",
            files.dir.display(),
            dlq_path.display()
        );
    }

    let ok = booked.len() == payments.len() && unique == payments.len() && pending == 0;
    println!(
        "  check                {}",
        if ok {
            "OK: side effects == logical operations, dead-letter queue empty"
        } else {
            "FAILED"
        }
    );
    if ok {
        Ok(())
    } else {
        Err("side effects differ from logical operations, or letters are still pending".into())
    }
}
