//! Retry in only one layer, across services.
//!
//! A gateway, service A and service B each retry their downstream call with `max = 4`; the
//! final system answers 503. One request to the gateway reaches the final system
//! 4 × 4 × 4 = 64 times when every layer retries on its own, and 4 times when requests made
//! inside a retry carry `Caller-Retries: ?1` and the servers honour it (`CallerRetriesLayer`).
//!
//! Run it with `cargo run --example layers`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use retry_core::reqwest::{RequestBuilderExt, client_builder};
use retry_core::tower::CallerRetriesLayer;
use retry_core::{Classify, Decision, retryable};

/// A failed call to the next hop.
#[derive(Debug)]
pub enum Upstream {
    Status(StatusCode),
    Transport(reqwest::Error),
}

impl Classify for Upstream {
    fn classify(&self) -> Decision {
        match self {
            Upstream::Status(status) if status.is_server_error() => Decision::Retry,
            Upstream::Status(_) => Decision::Stop,
            Upstream::Transport(_) => Decision::Retry,
        }
    }
}

/// One service in the chain: where it forwards to, and whether it speaks `Caller-Retries`.
struct Hop {
    next: String,
    client: reqwest::Client,
    honour_header: bool,
}

#[retryable(max = 4, base = "1ms", cap = "4ms")]
async fn forward(hop: &Hop) -> Result<String, Upstream> {
    let mut request = hop.client.get(&hop.next);
    if hop.honour_header {
        request = request.caller_retries();
    }
    let response = request.send().await.map_err(Upstream::Transport)?;
    match response.status() {
        status if status.is_success() => response.text().await.map_err(Upstream::Transport),
        status => Err(Upstream::Status(status)),
    }
}

async fn hop(State(hop): State<Arc<Hop>>) -> (StatusCode, String) {
    match forward(&hop).await {
        Ok(body) => (StatusCode::OK, body),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("gave up: {error:?}"),
        ),
    }
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

/// What one press of the button caused.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// Requests the final system received.
    pub final_requests: u32,
    /// The status the user got from the gateway.
    pub status: StatusCode,
    /// Wall time of the user's request.
    pub elapsed: Duration,
}

/// Starts final system, B, A and the gateway on loopback and sends one request to the gateway.
pub async fn run(honour_header: bool) -> Result<Outcome, Box<dyn std::error::Error>> {
    let seen = Arc::new(AtomicU32::new(0));
    let mut next = serve(
        Router::new()
            .route("/", get(final_system))
            .with_state(seen.clone()),
    )
    .await?;
    for _ in ["service B", "service A", "gateway"] {
        let state = Arc::new(Hop {
            next,
            client: client_builder().build()?,
            honour_header,
        });
        let router = Router::new().route("/", get(hop)).with_state(state);
        let router = if honour_header {
            router.layer(CallerRetriesLayer)
        } else {
            router
        };
        next = serve(router).await?;
    }
    let started = Instant::now();
    let status = client_builder().build()?.get(&next).send().await?.status();
    Ok(Outcome {
        final_requests: seen.load(Ordering::SeqCst),
        status: StatusCode::from_u16(status.as_u16())?,
        elapsed: started.elapsed(),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let plain = run(false).await?;
    let honoured = run(true).await?;
    println!(
        "gateway -> service A -> service B -> final system (answers 503); each caller: max = 4\n"
    );
    println!(
        "{:<34} {:>14} {:>10} {:>8}",
        "", "final requests", "wall time", "status"
    );
    for (name, outcome) in [
        ("every layer retries on its own", plain),
        ("Caller-Retries honoured", honoured),
    ] {
        println!(
            "{name:<34} {:>14} {:>8} ms {:>8}",
            outcome.final_requests,
            outcome.elapsed.as_millis(),
            outcome.status.as_u16()
        );
    }
    Ok(())
}
