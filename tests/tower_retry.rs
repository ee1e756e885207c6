//! `RetryLayer` around hyper-util's legacy client, against a real loopback server on the real
//! clock: what it retries, what it refuses to send twice, and the one-layer rule.

#[allow(dead_code)]
use crate::scripted;

use crate::example;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retry_core::tower::{BoxError, Retry, RetryBody, RetryLayer};
use retry_core::{Decision, Elapsed, Jitter, Policy, RetryBudget};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use scripted::{Answer, Scripted};

type Http = Client<HttpConnector, RetryBody>;

/// 3 attempts, 5 ms then 10 ms apart.
fn policy() -> Policy {
    Policy::new()
        .max_attempts(3)
        .base(Duration::from_millis(5))
        .jitter(Jitter::None)
}

fn client(layer: RetryLayer) -> Retry<Http> {
    layer.layer(Client::builder(TokioExecutor::new()).build_http())
}

fn request(method: &str, url: &str, body: &'static str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

/// The status and body the caller got.
async fn send(
    client: &Retry<Http>,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, String), BoxError> {
    let response = client.clone().oneshot(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test]
async fn a_503_is_retried_until_the_answer_and_every_attempt_says_its_caller_retries() {
    let server = Scripted::start().await;
    server.script(
        "/quote",
        [
            Answer::status(503),
            Answer::status(503),
            Answer::status(200),
        ],
    );
    let client = client(RetryLayer::new(policy()));
    let got = send(&client, request("GET", &server.at("/quote"), "")).await;
    assert_eq!(got.unwrap(), (StatusCode::OK, "answer 200".to_owned()));
    let hits = server.hits("/quote");
    assert_eq!(hits.len(), 3);
    for (n, hit) in hits.iter().enumerate() {
        let announced = format!("?1;attempt={};max=3", n + 1);
        assert_eq!(hit.caller_retries, Some(announced), "{hit:?}");
    }
}

#[tokio::test]
async fn a_429_waits_at_least_its_retry_after() {
    let server = Scripted::start().await;
    server.script(
        "/busy",
        [Answer::status(429).retry_after("1"), Answer::status(200)],
    );
    let client = client(RetryLayer::new(policy()));
    let got = send(&client, request("GET", &server.at("/busy"), "")).await;
    assert_eq!(got.unwrap().0, StatusCode::OK);
    let hits = server.hits("/busy");
    assert_eq!(hits.len(), 2);
    let waited = hits[1].at - hits[0].at;
    // The server's second, then our own 5 ms backoff above it.
    assert!(waited >= Duration::from_millis(1005), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn a_retry_after_longer_than_the_policy_accepts_gives_up_at_once() {
    let server = Scripted::start().await;
    server.script(
        "/later",
        [Answer::status(503).retry_after("60"), Answer::status(200)],
    );
    let client = client(RetryLayer::new(
        policy().max_retry_after(Duration::from_secs(5)),
    ));
    let got = send(&client, request("GET", &server.at("/later"), "")).await;
    assert_eq!(got.unwrap().0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.hits("/later").len(), 1);
}

#[tokio::test]
async fn a_400_stops_and_the_caller_gets_the_response() {
    let server = Scripted::start().await;
    server.script("/bad", [Answer::status(400), Answer::status(200)]);
    let client = client(RetryLayer::new(policy()));
    let got = send(&client, request("GET", &server.at("/bad"), "")).await;
    assert_eq!(
        got.unwrap(),
        (StatusCode::BAD_REQUEST, "answer 400".to_owned())
    );
    assert_eq!(server.hits("/bad").len(), 1);
}

#[tokio::test]
async fn every_attempt_gives_up_with_the_last_response() {
    let server = Scripted::start().await;
    server.script("/down", [Answer::status(502)]);
    let client = client(RetryLayer::new(policy()));
    let got = send(&client, request("GET", &server.at("/down"), "")).await;
    assert_eq!(got.unwrap().0, StatusCode::BAD_GATEWAY);
    assert_eq!(server.hits("/down").len(), 3);
}

#[tokio::test]
async fn a_post_without_idempotency_key_is_not_sent_again_after_a_5xx() {
    let server = Scripted::start().await;
    server.script("/pay", [Answer::status(503), Answer::status(201)]);
    let client = client(RetryLayer::new(policy()));
    let got = send(
        &client,
        request("POST", &server.at("/pay"), "{\"cents\":100}"),
    )
    .await;
    assert_eq!(got.unwrap().0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        server.hits("/pay").len(),
        1,
        "the first POST may have charged"
    );

    // The same POST with a key is safe to send again, with the same body.
    server.script("/pay-keyed", [Answer::status(503), Answer::status(201)]);
    let mut keyed = request("POST", &server.at("/pay-keyed"), "{\"cents\":100}");
    keyed
        .headers_mut()
        .insert("idempotency-key", "\"k-1\"".parse().unwrap());
    assert_eq!(send(&client, keyed).await.unwrap().0, StatusCode::CREATED);
    let hits = server.hits("/pay-keyed");
    assert_eq!(hits.len(), 2);
    assert!(
        hits.iter()
            .all(|h| h.body == b"{\"cents\":100}" && h.method == "POST")
    );
}

#[tokio::test]
async fn a_post_without_idempotency_key_cut_off_by_attempt_timeout_is_not_sent_again() {
    let server = Scripted::start().await;
    let slow = Answer::status(201).after(Duration::from_millis(800));
    server.script("/pay", [slow.clone()]);
    let timed = policy().attempt_timeout(Duration::from_millis(100));
    let client = client(RetryLayer::new(timed));
    let error = send(&client, request("POST", &server.at("/pay"), "{}"))
        .await
        .unwrap_err();
    let elapsed = error
        .downcast_ref::<Elapsed>()
        .expect("cut off by the timeout");
    assert_eq!(elapsed.unsafe_request(), Some("POST"));
    assert_eq!(server.hits("/pay").len(), 1);

    // A GET cut off the same way is sent again.
    server.script("/quote", [slow, Answer::status(200)]);
    let got = send(&client, request("GET", &server.at("/quote"), "")).await;
    assert_eq!(got.unwrap().0, StatusCode::OK);
    assert_eq!(server.hits("/quote").len(), 2);
}

#[tokio::test]
async fn a_refused_connection_is_retried_even_for_a_post() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = client(RetryLayer::new(policy().base(Duration::from_millis(50))));
    let started = Instant::now();
    let url = format!("http://127.0.0.1:{port}/pay");
    let error = send(&client, request("POST", &url, "{}"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("Connect"), "{error}");
    // Three attempts: 50 ms, then 100 ms of backoff between them.
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_sent_once_whole_and_not_retried() {
    let server = Scripted::start().await;
    server.script("/upload", [Answer::status(503), Answer::status(200)]);
    let client = client(RetryLayer::new(policy()).body_limit(16));
    let large = "x".repeat(100).leak();
    let got = send(&client, request("PUT", &server.at("/upload"), large)).await;
    assert_eq!(got.unwrap().0, StatusCode::SERVICE_UNAVAILABLE);
    let hits = server.hits("/upload");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].body.len(), 100, "streamed whole");

    // Within the limit the same PUT is kept and sent again.
    server.script("/small", [Answer::status(503), Answer::status(200)]);
    let got = send(&client, request("PUT", &server.at("/small"), "0123456789")).await;
    assert_eq!(got.unwrap().0, StatusCode::OK);
    let hits = server.hits("/small");
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.body == b"0123456789"));
}

#[tokio::test]
async fn an_empty_budget_means_no_retry() {
    let server = Scripted::start().await;
    server.script("/quote", [Answer::status(503), Answer::status(200)]);
    // No floor and no share of calls: not one retry to spend.
    let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 0, 0.0));
    let client = client(RetryLayer::new(policy().budget(budget)));
    let got = send(&client, request("GET", &server.at("/quote"), "")).await;
    assert_eq!(got.unwrap().0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.hits("/quote").len(), 1);
}

#[tokio::test]
async fn a_request_whose_caller_retries_already_makes_one_attempt() {
    let server = Scripted::start().await;
    server.script("/quote", [Answer::status(503), Answer::status(200)]);
    let client = client(RetryLayer::new(policy()));
    let mut marked = request("GET", &server.at("/quote"), "");
    marked
        .headers_mut()
        .insert("caller-retries", "?1".parse().unwrap());
    let got = send(&client, marked).await;
    assert_eq!(got.unwrap().0, StatusCode::SERVICE_UNAVAILABLE);
    let hits = server.hits("/quote");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].caller_retries.as_deref(), Some("?1"), "passed on");
}

#[tokio::test]
async fn a_forwarded_announcement_is_passed_on_with_its_callers_numbers() {
    let server = Scripted::start().await;
    server.script("/quote", [Answer::status(503), Answer::status(200)]);
    let client = client(RetryLayer::new(policy()));
    let mut marked = request("GET", &server.at("/quote"), "");
    marked.headers_mut().insert(
        "caller-retries",
        "?1;attempt=3;max=4;via=gw".parse().unwrap(),
    );
    let got = send(&client, marked).await;
    assert_eq!(
        got.unwrap().0,
        StatusCode::SERVICE_UNAVAILABLE,
        "one attempt"
    );
    let hits = server.hits("/quote");
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].caller_retries.as_deref(),
        Some("?1;attempt=3;max=4"),
        "the caller's attempt, not this layer's"
    );
}

#[tokio::test]
async fn inside_another_retry_the_layer_makes_one_attempt_per_outer_attempt() {
    let server = Scripted::start().await;
    server.script("/quote", [Answer::status(503)]);
    let client = client(RetryLayer::new(policy()));
    let url = server.at("/quote");
    let outer = Policy::new().max_attempts(2).base(Duration::from_millis(5));
    let result = outer
        .retry(|| async {
            match send(&client, request("GET", &url, "")).await {
                Ok((status, _)) if status.is_success() => Ok(status),
                Ok((status, _)) => Err(status),
                Err(_) => Err(StatusCode::BAD_GATEWAY),
            }
        })
        .retry_if(|_| Decision::Retry)
        .await;
    assert_eq!(result, Err(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(
        server.hits("/quote").len(),
        2,
        "2 outer attempts, not 2 × 3"
    );
}

#[test]
fn the_example_shows_what_reaches_the_upstream() {
    let stdout = example::stdout_of_success("tower_retry_client", &[]);
    for expected in [
        "GET /quote (503, 503, 200)             -> 200 after 3 request(s), 3 with",
        "GET /rates (429 Retry-After: 1, 200)   -> 200 after 2 request(s), 2 with",
        "POST /payments, no key (503, ...)      -> 503 after 1 request(s), 1 with",
        "POST /refunds, keyed (503, 201)        -> 201 after 2 request(s), 2 with",
        "GET /orders/7 (404)                    -> 404 after 1 request(s), 1 with",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in\n{stdout}"
        );
    }
}
