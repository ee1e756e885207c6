//! `RetryLayer` around hyper-util's legacy HTTP client: a flaky loopback upstream, and what the
//! layer sends it.
//!
//! The layer retries any tower HTTP client with a `Policy`, in the same state machine as
//! `#[retryable]`: a 503 is retried, a 429's `Retry-After` is the floor of the next wait, a POST
//! without `Idempotency-Key` is not sent again after a 5xx (the first one may have charged the
//! card), and every attempt carries `Caller-Retries: ?1` so the upstream does not retry on
//! its behalf.
//!
//! Run it with `cargo run --example tower_retry_client`.

// Its request records hold more than this example prints.
#[allow(dead_code)]
#[path = "common/scripted.rs"]
mod scripted;

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retry_core::Policy;
use retry_core::tower::{BoxError, Retry, RetryBody, RetryLayer};
use tower::{Layer, ServiceExt};

use scripted::Scripted;

type HttpClient = Retry<Client<HttpConnector, RetryBody>>;

/// Sends `request` and prints what the caller got and what the upstream saw.
async fn show(
    client: &HttpClient,
    upstream: &Scripted,
    what: &str,
    path: &str,
    request: Request<Full<Bytes>>,
) -> Result<(), BoxError> {
    let before = upstream.hits(path).len();
    let response = client.clone().oneshot(request).await?;
    let status = response.status();
    response.into_body().collect().await?;
    println!(
        "{what:<38} -> {} after {}",
        status.as_u16(),
        upstream.describe(path, before)
    );
    Ok(())
}

fn request(method: &str, url: String, key: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::builder().method(method).uri(url);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let body = Full::new(Bytes::from_static(b"{\"cents\":700}"));
    request.body(body).expect("a valid request")
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let upstream = Scripted::flaky_upstream().await;

    let policy = Policy::new()
        .max_attempts(4)
        .base(Duration::from_millis(50))
        .cap(Duration::from_secs(1));
    let http = Client::builder(TokioExecutor::new()).build_http::<RetryBody>();
    let client = RetryLayer::new(policy).name("upstream").layer(http);

    println!("RetryLayer: max 4 attempts, base 50 ms, full jitter\n");
    let url = |path: &str| upstream.at(path);
    show(
        &client,
        &upstream,
        "GET /quote (503, 503, 200)",
        "/quote",
        request("GET", url("/quote"), None),
    )
    .await?;
    show(
        &client,
        &upstream,
        "GET /rates (429 Retry-After: 1, 200)",
        "/rates",
        request("GET", url("/rates"), None),
    )
    .await?;
    show(
        &client,
        &upstream,
        "POST /payments, no key (503, ...)",
        "/payments",
        request("POST", url("/payments"), None),
    )
    .await?;
    show(
        &client,
        &upstream,
        "POST /refunds, keyed (503, 201)",
        "/refunds",
        request("POST", url("/refunds"), Some("\"r-7\"")),
    )
    .await?;
    show(
        &client,
        &upstream,
        "GET /orders/7 (404)",
        "/orders/7",
        request("GET", url("/orders/7"), None),
    )
    .await?;
    Ok(())
}
