//! `RetryMiddleware` in a reqwest-middleware client: a flaky loopback upstream, and what the
//! middleware sends it.
//!
//! The same retries as `RetryLayer` (and `#[retryable]`), for code that already sends its
//! requests through a `reqwest_middleware::ClientWithMiddleware`: a 503 is retried, a 429's
//! `Retry-After` is the floor of the next wait, a POST without `Idempotency-Key` is not sent
//! again after a 5xx, a body given as a stream is sent once, and every attempt carries
//! `Caller-Retries: ?1`. The middlewares after it run on every attempt.
//!
//! Run it with `cargo run --example reqwest_middleware`.

// Its request records hold more than this example prints.
#[allow(dead_code)]
#[path = "common/scripted.rs"]
mod scripted;

use std::time::Duration;

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, RequestBuilder};
use retry_core::Policy;
use retry_core::reqwest_middleware::RetryMiddleware;

use scripted::Scripted;

/// Sends `request` and prints what the caller got and what the upstream saw.
async fn show(
    upstream: &Scripted,
    what: &str,
    path: &str,
    request: RequestBuilder,
) -> Result<(), Box<dyn std::error::Error>> {
    let before = upstream.hits(path).len();
    let response = request.send().await?;
    let status = response.status();
    println!(
        "{what:<38} -> {} after {}",
        status.as_u16(),
        upstream.describe(path, before)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let upstream = Scripted::flaky_upstream().await;

    let policy = Policy::new()
        .max_attempts(4)
        .base(Duration::from_millis(50))
        .cap(Duration::from_secs(1));
    // reqwest's own retries off: they would be a second layer under this one.
    let reqwest = retry_core::reqwest::client_builder().build()?;
    let client: ClientWithMiddleware = ClientBuilder::new(reqwest)
        .with(RetryMiddleware::new(policy).name("upstream"))
        .build();

    println!("RetryMiddleware: max 4 attempts, base 50 ms, full jitter\n");
    let url = |path: &str| upstream.at(path);
    show(
        &upstream,
        "GET /quote (503, 503, 200)",
        "/quote",
        client.get(url("/quote")),
    )
    .await?;
    show(
        &upstream,
        "GET /rates (429 Retry-After: 1, 200)",
        "/rates",
        client.get(url("/rates")),
    )
    .await?;
    let payment = client.post(url("/payments")).body("{\"cents\":700}");
    show(
        &upstream,
        "POST /payments, no key (503, ...)",
        "/payments",
        payment,
    )
    .await?;
    let refund = client
        .post(url("/refunds"))
        .header("idempotency-key", "\"r-7\"")
        .body("{\"cents\":700}");
    show(
        &upstream,
        "POST /refunds, keyed (503, 201)",
        "/refunds",
        refund,
    )
    .await?;
    // A body reqwest cannot clone: read as it is sent, so there is nothing to send again.
    let streamed = reqwest::Body::wrap(http_body_util::Full::new(bytes::Bytes::from_static(
        b"scan",
    )));
    let upload = client.put(url("/uploads")).body(streamed);
    show(
        &upstream,
        "PUT /uploads, streamed body (503, 201)",
        "/uploads",
        upload,
    )
    .await?;
    Ok(())
}
