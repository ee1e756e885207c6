//! `cargo run --example reqwest_client`: a `#[retryable]` reqwest client, with the server it
//! calls in the same program.
//!
//! - **The client** is what a service writes: one `#[retryable]` function around a reqwest
//!   `POST`, sent with `send_checked()` (an error status becomes an `HttpError` that knows its
//!   status, `Retry-After` and method), `.idempotency_key(&key)` (the same key on every attempt,
//!   which is also what makes a `POST` that got a `503` safe to send again) and
//!   `.caller_retries()` (servers behind it see that their caller retries). When it gives up, the
//!   order is parked in a `JsonlSink` under its idempotency key, for a redrive later.
//! - **The server** is a small axum app on 127.0.0.1 that fails each order the way a script
//!   says before accepting it, and prints every request it sees.
//!
//! Four orders: two `503`s then accepted; a `429` with `Retry-After: 1` then accepted; an outage
//! longer than the client's four attempts (parked, class `system`); a `422` the server will never
//! accept (not retried: parked at once, class `data`). The letters are listed at the end.
//! The letters are read back from the file with `JsonlReader`. `--keep` leaves the JSONL file in
//! place for `cargo run -p retry-dlq -- import FILE --into dlq.sqlite`, which moves its letters
//! into a store to list, acknowledge and redrive.

#[path = "common/timeline.rs"]
mod timeline;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Json, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use retry_core::dlq::{DlqFailed, JsonlLine, JsonlReader, JsonlSink};
use retry_core::http::IdempotencyKey;
use retry_core::reqwest::{HttpError, RequestBuilderExt};
use retry_core::{Classify, Decision, retryable};
use serde::{Deserialize, Serialize};

use timeline::{Scratch, event, start};

// ---- the client: what a user of the library writes ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    order_id: String,
    sku: String,
    quantity: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Accepted {
    order_id: String,
    number: u32,
}

#[derive(Debug)]
enum OrderError {
    /// A status or transport failure, classified by retry-core's HTTP rules.
    Http(HttpError),
    /// A `2xx` whose body was not the answer expected.
    BadAnswer(String),
    /// Gave up, and the letter could not be parked: the caller must not forget the order.
    NotParked(Box<DlqFailed>),
}

impl Classify for OrderError {
    fn classify(&self) -> Decision {
        match self {
            OrderError::Http(e) => e.classify(),
            OrderError::BadAnswer(_) | OrderError::NotParked(_) => Decision::Stop,
        }
    }

    // The letter's `reason`: the status and the start of the server's answer.
    fn reason(&self) -> Option<String> {
        match self {
            OrderError::Http(e) => e.reason(),
            other => Some(other.to_string()),
        }
    }
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderError::Http(e) => match e.status() {
                Some(status) => write!(f, "{status}"),
                None => write!(f, "{e}"),
            },
            OrderError::BadAnswer(why) => write!(f, "bad answer: {why}"),
            OrderError::NotParked(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OrderError {}

impl From<HttpError> for OrderError {
    fn from(e: HttpError) -> Self {
        OrderError::Http(e)
    }
}

impl From<DlqFailed> for OrderError {
    fn from(e: DlqFailed) -> Self {
        OrderError::NotParked(Box::new(e))
    }
}

/// Places one order. The key is made once per order by the caller, outside the retries; the
/// letter's id is that key, so a redrive sends the order again under it.
#[retryable(
    max = 4,
    base = "100ms",
    cap = "1s",
    on_retry = log_retry,
    dlq(sink = letters, id = key.to_string(), original = order)
)]
async fn place_order(
    client: &reqwest::Client,
    url: &str,
    letters: &JsonlSink,
    key: &IdempotencyKey,
    order: &Order,
) -> Result<Accepted, OrderError> {
    let body = serde_json::to_string(order).map_err(|e| OrderError::BadAnswer(e.to_string()))?;
    let response = client
        .post(url)
        .idempotency_key(key)
        .caller_retries()
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .send_checked()
        .await?;
    let bytes = response
        .bytes()
        .await
        .map_err(|e| OrderError::BadAnswer(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| OrderError::BadAnswer(e.to_string()))
}

fn log_retry(attempt: u32, error: &OrderError, wait: std::time::Duration) {
    event(
        "client",
        format_args!(
            "attempt {attempt} failed: {error} -> retry in {} ms",
            wait.as_millis()
        ),
    );
}

// ---- the server: a stand-in for the service the client calls ----

/// What the server answers instead of accepting an order.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Unavailable,
    TooManyRequests,
    Unprocessable,
}

#[derive(Default)]
struct Server {
    /// Per order id, the faults still to come.
    script: Mutex<HashMap<String, VecDeque<Fault>>>,
    /// Per order id, the requests seen.
    seen: Mutex<HashMap<String, u32>>,
    accepted: Mutex<Vec<String>>,
}

async fn orders(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Json(order): Json<Order>,
) -> Response {
    let id = order.order_id;
    let attempt = {
        let mut seen = server.seen.lock().unwrap();
        let n = seen.entry(id.clone()).or_default();
        *n += 1;
        *n
    };
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    let fault = server
        .script
        .lock()
        .unwrap()
        .get_mut(&id)
        .and_then(VecDeque::pop_front);
    let (status, answer) = match fault {
        Some(Fault::Unavailable) => (StatusCode::SERVICE_UNAVAILABLE, "outage".to_owned()),
        Some(Fault::TooManyRequests) => (
            StatusCode::TOO_MANY_REQUESTS,
            "slow down, come back in 1 s".to_owned(),
        ),
        Some(Fault::Unprocessable) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("unknown sku {}", order.sku),
        ),
        None => {
            let mut accepted = server.accepted.lock().unwrap();
            accepted.push(id.clone());
            let number = u32::try_from(accepted.len()).unwrap_or(u32::MAX);
            let body = serde_json::to_string(&Accepted {
                order_id: id.clone(),
                number,
            })
            .unwrap_or_default();
            (StatusCode::CREATED, body)
        }
    };
    event(
        "server",
        format_args!(
            "{id} request {attempt} (Idempotency-Key {}, Caller-Retries {}): {status}",
            text("idempotency-key"),
            text("caller-retries")
        ),
    );
    let mut response = (status, answer).into_response();
    if let Some(Fault::TooManyRequests) = fault {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

async fn start_server(server: Arc<Server>) -> std::io::Result<String> {
    let app = axum::Router::new()
        .route("/orders", axum::routing::post(orders))
        .with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/orders", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service()).await;
    });
    Ok(url)
}

// ---- the run ----

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    start();
    let files = Scratch::new("reqwest-client", std::env::args().any(|a| a == "--keep"))?;
    let letters_path = files.dir.join("dead-letters.jsonl");
    let server = Arc::new(Server::default());
    let url = start_server(server.clone()).await?;
    // reqwest's own retries off: they would be a second layer under `#[retryable]`.
    let client = retry_core::reqwest::client_builder().build()?;
    let letters = JsonlSink::open(&letters_path)?;
    println!(
        "orders to {url}; dead letters in {}",
        letters_path.display()
    );

    let orders: [(&str, &str, &[Fault]); 4] = [
        (
            "A-1",
            "two 503s, then accepted",
            &[Fault::Unavailable, Fault::Unavailable],
        ),
        (
            "A-2",
            "a 429 with Retry-After: 1, then accepted",
            &[Fault::TooManyRequests],
        ),
        (
            "A-3",
            "an outage longer than its 4 attempts",
            &[Fault::Unavailable; 5],
        ),
        (
            "A-4",
            "a 422 the server will never accept",
            &[Fault::Unprocessable; 5],
        ),
    ];
    let (mut placed, mut parked) = (0, 0);
    for (id, story, faults) in orders {
        server
            .script
            .lock()
            .unwrap()
            .insert(id.to_owned(), faults.iter().copied().collect());
        let order = Order {
            order_id: id.to_owned(),
            sku: if id == "A-4" { "X-0" } else { "SKU-7" }.to_owned(),
            quantity: 1,
        };
        let key = IdempotencyKey::new();
        println!();
        event("client", format_args!("{id}: {story}"));
        let began = Instant::now();
        match place_order(&client, &url, &letters, &key, &order).await {
            Ok(accepted) => {
                placed += 1;
                event(
                    "client",
                    format_args!(
                        "{id} accepted as order {} after {} ms",
                        accepted.number,
                        began.elapsed().as_millis()
                    ),
                );
            }
            Err(OrderError::NotParked(e)) => {
                // Nothing was parked: a real service would keep the order (not acknowledge it).
                return Err(format!("{id} gave up and could not be parked: {e}").into());
            }
            Err(e) => {
                parked += 1;
                event(
                    "client",
                    format_args!("{id} gave up ({e}); parked as a dead letter"),
                );
            }
        }
    }

    println!();
    println!("summary");
    println!("  orders accepted  {placed}");
    println!("  orders parked    {parked}");
    println!("  dead letters (JSONL, id = the order's Idempotency-Key):");
    for line in JsonlReader::open(&letters_path)? {
        let JsonlLine::Letter(letter) = line? else {
            continue;
        };
        let order = letter
            .original
            .get("order_id")
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        println!(
            "    {order}  class {:<6}  attempts {}  reason {}  key {}",
            letter.class.as_str(),
            letter.attempts,
            letter.reason,
            letter.msg_id
        );
    }
    if files.keep {
        println!(
            "  kept: cargo run -p retry-dlq -- import {} --into dlq.sqlite",
            letters_path.display()
        );
    }
    Ok(())
}
