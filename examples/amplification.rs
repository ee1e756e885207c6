//! Amplification seen from the receiving side.
//!
//! The chain of `examples/layers.rs` (gateway → service A → service B → final system, which
//! answers 503), but the middle layers are plain retry loops that are not ours: each makes 4
//! attempts and forwards the request's headers as a proxy does. The gateway gives the operation
//! one `Idempotency-Key`. The final system counts arrivals with
//! `retry_core::tower::AmplificationLayer` and prints what its team would see: 64 arrivals of
//! one operation in the `retry_core_operation_arrivals` histogram, and a WARN saying retries are
//! layered upstream. Then the same chain with the library in every layer (a `#[retryable]`
//! reqwest call in the gateway, `RetryLayer` in A, `RetryMiddleware` in B): 4 arrivals, each
//! announcing its attempt, and no warning.
//!
//! Run it with `cargo run --example amplification`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retry_core::http::IdempotencyKey;
use retry_core::reqwest::{HttpError, RequestBuilderExt, client_builder};
use retry_core::reqwest_middleware::RetryMiddleware;
use retry_core::tower::{AmplificationLayer, AmplificationObserver, Retry, RetryBody, RetryLayer};
use retry_core::{Jitter, Policy, retryable};
use tower::{Layer, ServiceExt};

/// How the operation is told apart at the final system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// The gateway adds one `Idempotency-Key`.
    Key,
    /// The gateway adds one W3C `traceparent` and no key.
    Trace,
}

/// Who retries in the gateway, A and B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chain {
    /// A plain loop of 4 attempts in each, none of them ours.
    PlainLoops(Identity),
    /// The library's clients in each.
    Library,
}

/// What one request to the gateway caused at the final system.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The final system's observer.
    pub observer: AmplificationObserver,
    /// Requests the final system answered.
    pub final_requests: u32,
    /// The status the user got from the gateway.
    pub status: u16,
}

/// Headers a proxy does not forward: they describe one connection, not the request.
const HOP_BY_HOP: [&str; 5] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
];

fn forwarded(incoming: &HeaderMap) -> HeaderMap {
    let mut headers = incoming.clone();
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers
}

/// One service of the chain.
struct Hop {
    /// `gateway`, `A` or `B`: the gateway adds the operation's identity; A and B forward what
    /// they got.
    name: &'static str,
    next: String,
    chain: Chain,
    reqwest: reqwest::Client,
    /// A's client in the library chain: `RetryLayer` around hyper-util.
    tower: Retry<Client<HttpConnector, RetryBody>>,
    /// B's client in the library chain: `RetryMiddleware` in a reqwest-middleware stack.
    middleware: reqwest_middleware::ClientWithMiddleware,
}

fn policy() -> Policy {
    Policy::new()
        .max_attempts(4)
        .base(Duration::from_millis(1))
        .cap(Duration::from_millis(4))
        .jitter(Jitter::Full)
}

/// A loop of 4 attempts that is not ours: no `Caller-Retries`, only what a proxy forwards.
async fn plain_loop(hop: &Hop, headers: HeaderMap) -> StatusCode {
    let mut last = StatusCode::BAD_GATEWAY;
    for attempt in 0..4 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let sent = hop.reqwest.get(&hop.next).headers(headers.clone()).send();
        match sent.await {
            Ok(response) if response.status().is_success() => return StatusCode::OK,
            Ok(response) => last = response.status(),
            Err(_) => last = StatusCode::BAD_GATEWAY,
        }
    }
    last
}

/// The gateway's call in the library chain: every attempt carries the key and says which
/// attempt it is.
#[retryable(max = 4, base = "1ms", cap = "4ms")]
async fn gateway_call(hop: &Hop, key: &IdempotencyKey) -> Result<StatusCode, HttpError> {
    let response = hop
        .reqwest
        .get(&hop.next)
        .idempotency_key(key)
        .caller_retries()
        .send_checked()
        .await?;
    Ok(response.status())
}

async fn library_call(hop: &Hop, headers: HeaderMap) -> StatusCode {
    if hop.name == "gateway" {
        let key = IdempotencyKey::new();
        return match gateway_call(hop, &key).await {
            Ok(status) => status,
            Err(error) => error.status().unwrap_or(StatusCode::BAD_GATEWAY),
        };
    }
    if hop.name == "B" {
        // B: reqwest-middleware with `RetryMiddleware`; the forwarded `Caller-Retries` makes
        // it one attempt, announced with the gateway's numbers.
        let sent = hop.middleware.get(&hop.next).headers(headers).send().await;
        return sent.map_or(StatusCode::BAD_GATEWAY, |r| r.status());
    }
    // A: `RetryLayer` around hyper-util, the same rule.
    let mut request = http::Request::get(hop.next.as_str()).body(Empty::<Bytes>::new());
    if let Ok(request) = request.as_mut() {
        *request.headers_mut() = headers;
    }
    let Ok(request) = request else {
        return StatusCode::INTERNAL_SERVER_ERROR;
    };
    match hop.tower.clone().oneshot(request).await {
        Ok(response) => response.status(),
        Err(_) => StatusCode::BAD_GATEWAY,
    }
}

async fn hop(State(hop): State<Arc<Hop>>, incoming: HeaderMap) -> StatusCode {
    let mut headers = forwarded(&incoming);
    match hop.chain {
        Chain::PlainLoops(identity) => {
            if hop.name == "gateway" {
                let (name, value) = match identity {
                    Identity::Key => (
                        "idempotency-key",
                        format!("\"{}\"", IdempotencyKey::new().as_str()),
                    ),
                    Identity::Trace => ("traceparent", traceparent()),
                };
                if let Ok(value) = value.parse() {
                    headers.insert(name, value);
                }
            }
            plain_loop(&hop, headers).await
        }
        Chain::Library => library_call(&hop, headers).await,
    }
}

/// A fresh `traceparent`: version 00, a random trace id and parent id, sampled.
fn traceparent() -> String {
    format!(
        "00-{:032x}-{:016x}-01",
        rand::random::<u128>() | 1,
        rand::random::<u64>() | 1
    )
}

async fn final_system(State(seen): State<Arc<AtomicU32>>) -> StatusCode {
    seen.fetch_add(1, Ordering::SeqCst);
    StatusCode::SERVICE_UNAVAILABLE
}

async fn serve(router: Router) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(url)
}

/// Starts final system, B, A and the gateway on loopback and sends one request to the gateway.
pub async fn run(chain: Chain) -> Result<Outcome, Box<dyn std::error::Error>> {
    let seen = Arc::new(AtomicU32::new(0));
    let observer = AmplificationObserver::new();
    let route = match chain {
        Chain::PlainLoops(_) => "GET /final (plain loops)",
        Chain::Library => "GET /final (library)",
    };
    let final_router = Router::new()
        .route("/final", get(final_system))
        .with_state(seen.clone())
        .layer(AmplificationLayer::new(observer.clone()).route(route));
    let mut next = format!("{}final", serve(final_router).await?);
    for name in ["B", "A", "gateway"] {
        let state = Arc::new(Hop {
            name,
            next,
            chain,
            reqwest: client_builder().build()?,
            tower: RetryLayer::new(policy())
                .name("service A")
                .layer(Client::builder(TokioExecutor::new()).build_http()),
            middleware: reqwest_middleware::ClientBuilder::new(client_builder().build()?)
                .with(RetryMiddleware::new(policy()).name("service B"))
                .build(),
        });
        next = serve(Router::new().route("/", get(hop)).with_state(state)).await?;
    }
    let status = client_builder().build()?.get(&next).send().await?.status();
    Ok(Outcome {
        observer,
        final_requests: seen.load(Ordering::SeqCst),
        status: status.as_u16(),
    })
}

/// Prints the final system's metrics for `route`, as its dashboard would show them.
fn print_metrics(snapshotter: &metrics_util::debugging::Snapshotter, route: &str) {
    use metrics_util::debugging::DebugValue;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if !key
            .labels()
            .any(|l| l.key() == "route" && l.value() == route)
        {
            continue;
        }
        let labels: Vec<String> = key
            .labels()
            .filter(|l| l.key() != "route")
            .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
            .collect();
        let value = match value {
            DebugValue::Counter(n) => n.to_string(),
            DebugValue::Gauge(g) => g.to_string(),
            DebugValue::Histogram(values) => {
                let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                format!("observations [{}]", values.join(", "))
            }
        };
        println!("  {}{{{}}} {value}", key.name(), labels.join(","));
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_target(true)
        .with_max_level(tracing::Level::WARN)
        .init();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder)?;

    println!("gateway -> service A -> service B -> final system (answers 503)\n");
    for (title, chain, route) in [
        (
            "plain retry loops in every layer (4 attempts each, headers forwarded), one Idempotency-Key",
            Chain::PlainLoops(Identity::Key),
            "GET /final (plain loops)",
        ),
        (
            "the library in every layer (#[retryable] + reqwest, RetryLayer, RetryMiddleware)",
            Chain::Library,
            "GET /final (library)",
        ),
    ] {
        println!("{title}:");
        let outcome = run(chain).await?;
        for operation in outcome.observer.operations() {
            println!(
                "  one operation ({:?}): {} arrivals in {} ms, largest attempt announced {:?} of max {:?}, amplified: {}",
                operation.grouped_by,
                operation.arrivals,
                operation.spread.as_millis(),
                operation.largest_attempt,
                operation.largest_max,
                operation.amplified
            );
        }
        // The window is still open: close it so the histogram has the operation now.
        outcome.observer.flush();
        println!("  the final system's metrics:");
        print_metrics(&snapshotter, route);
        println!(
            "  {} requests reached the final system; the user got {}\n",
            outcome.final_requests, outcome.status
        );
    }
    Ok(())
}
