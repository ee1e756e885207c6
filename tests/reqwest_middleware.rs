//! `RetryMiddleware` in a reqwest-middleware stack, against a real loopback server on the real
//! clock: the same rules as `RetryLayer`.

#[allow(dead_code)]
use crate::scripted;

use crate::example;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response, StatusCode};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use retry_core::reqwest_middleware::RetryMiddleware;
use retry_core::{Elapsed, Jitter, Policy, RetryBudget};

use scripted::{Answer, Scripted};

/// 3 attempts, 5 ms then 10 ms apart.
fn policy() -> Policy {
    Policy::new()
        .max_attempts(3)
        .base(Duration::from_millis(5))
        .jitter(Jitter::None)
}

fn client(retries: RetryMiddleware) -> ClientWithMiddleware {
    let reqwest = retry_core::reqwest::client_builder().build().unwrap();
    ClientBuilder::new(reqwest).with(retries).build()
}

/// A client whose retries are followed by a [`Witness`] of every attempt.
fn witnessed(retries: RetryMiddleware) -> (ClientWithMiddleware, Witness) {
    let witness = Witness::default();
    let reqwest = retry_core::reqwest::client_builder().build().unwrap();
    let client = ClientBuilder::new(reqwest)
        .with(retries)
        .with(witness.clone())
        .build();
    (client, witness)
}

/// What a caller put in the request's extensions.
#[derive(Debug, Clone, PartialEq)]
struct Tenant(&'static str);

/// A middleware after the retries: sees every attempt and the extensions it got.
#[derive(Default, Clone)]
struct Witness {
    attempts: Arc<AtomicU32>,
    tenants: Arc<Mutex<Vec<Option<Tenant>>>>,
}

#[async_trait::async_trait]
impl Middleware for Witness {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.tenants
            .lock()
            .unwrap()
            .push(extensions.get::<Tenant>().cloned());
        next.run(request, extensions).await
    }
}

#[tokio::test]
async fn a_503_is_retried_and_every_attempt_runs_the_rest_of_the_stack() {
    let server = Scripted::start().await;
    server.script(
        "/quote",
        [
            Answer::status(503),
            Answer::status(503),
            Answer::status(200),
        ],
    );
    let (client, witness) = witnessed(RetryMiddleware::new(policy()));
    let response = client
        .get(server.at("/quote"))
        .with_extension(Tenant("acme"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "answer 200");
    assert_eq!(witness.attempts.load(Ordering::SeqCst), 3);
    assert_eq!(
        *witness.tenants.lock().unwrap(),
        vec![Some(Tenant("acme")); 3]
    );
    let hits = server.hits("/quote");
    assert_eq!(hits.len(), 3);
    let announced: Vec<_> = hits.iter().map(|h| h.caller_retries.as_deref()).collect();
    assert_eq!(
        announced,
        [
            Some("?1;attempt=1;max=3"),
            Some("?1;attempt=2;max=3"),
            Some("?1;attempt=3;max=3")
        ]
    );
}

#[tokio::test]
async fn a_429_waits_at_least_its_retry_after() {
    let server = Scripted::start().await;
    server.script(
        "/busy",
        [Answer::status(429).retry_after("1"), Answer::status(200)],
    );
    let client = client(RetryMiddleware::new(policy()));
    let response = client.get(server.at("/busy")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let hits = server.hits("/busy");
    assert_eq!(hits.len(), 2);
    let waited = hits[1].at - hits[0].at;
    assert!(waited >= Duration::from_millis(1005), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn a_400_stops_and_the_caller_gets_the_response() {
    let server = Scripted::start().await;
    server.script("/bad", [Answer::status(400), Answer::status(200)]);
    let client = client(RetryMiddleware::new(policy()));
    let response = client.get(server.at("/bad")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(server.hits("/bad").len(), 1);
}

#[tokio::test]
async fn a_post_without_idempotency_key_is_not_sent_again_after_a_5xx() {
    let server = Scripted::start().await;
    server.script("/pay", [Answer::status(500), Answer::status(201)]);
    let client = client(RetryMiddleware::new(policy()));
    let response = client
        .post(server.at("/pay"))
        .body("{\"cents\":100}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(server.hits("/pay").len(), 1);

    server.script("/pay-keyed", [Answer::status(500), Answer::status(201)]);
    let response = client
        .post(server.at("/pay-keyed"))
        .header("idempotency-key", "\"k-1\"")
        .body("{\"cents\":100}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let hits = server.hits("/pay-keyed");
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.body == b"{\"cents\":100}"));
}

#[tokio::test]
async fn an_attempt_timeout_keeps_the_post_rule_and_gives_the_extensions_back() {
    let server = Scripted::start().await;
    let slow = Answer::status(201).after(Duration::from_millis(800));
    server.script("/pay", [slow.clone()]);
    let timed = policy().attempt_timeout(Duration::from_millis(100));
    let (client, witness) = witnessed(RetryMiddleware::new(timed));
    let error = client
        .post(server.at("/pay"))
        .body("{}")
        .send()
        .await
        .unwrap_err();
    let reqwest_middleware::Error::Middleware(cause) = &error else {
        panic!("{error:?}");
    };
    let elapsed = cause.downcast_ref::<Elapsed>().expect("cut off");
    assert_eq!(elapsed.unsafe_request(), Some("POST"));
    assert_eq!(server.hits("/pay").len(), 1);

    // A GET cut off the same way is sent again, with the caller's extensions.
    server.script("/quote", [slow, Answer::status(200)]);
    let response = client
        .get(server.at("/quote"))
        .with_extension(Tenant("acme"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(server.hits("/quote").len(), 2);
    let tenants = witness.tenants.lock().unwrap();
    assert_eq!(tenants[1..], [Some(Tenant("acme")), Some(Tenant("acme"))]);
}

#[tokio::test]
async fn a_streamed_body_is_sent_once_and_not_retried() {
    let server = Scripted::start().await;
    server.script("/upload", [Answer::status(503), Answer::status(200)]);
    let client = client(RetryMiddleware::new(policy()));
    // Any body given as a stream: reqwest cannot clone it.
    let streamed = reqwest::Body::wrap(http_body_util::Full::new(bytes::Bytes::from_static(
        b"0123456789",
    )));
    let response = client
        .put(server.at("/upload"))
        .body(streamed)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let hits = server.hits("/upload");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].body, b"0123456789");
}

#[tokio::test]
async fn an_empty_budget_means_no_retry() {
    let server = Scripted::start().await;
    server.script("/quote", [Answer::status(503), Answer::status(200)]);
    let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 0, 0.0));
    let client = client(RetryMiddleware::new(policy().budget(budget)));
    let response = client.get(server.at("/quote")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.hits("/quote").len(), 1);
}

#[tokio::test]
async fn a_forwarded_announcement_is_passed_on_with_its_callers_numbers() {
    let server = Scripted::start().await;
    server.script("/quote", [Answer::status(503), Answer::status(200)]);
    let client = client(RetryMiddleware::new(policy()));
    let response = client
        .get(server.at("/quote"))
        .header("caller-retries", "?1; max=4; attempt=2")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "one attempt"
    );
    let hits = server.hits("/quote");
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].caller_retries.as_deref(),
        Some("?1;attempt=2;max=4"),
        "the caller's attempt, not this middleware's"
    );
}

#[tokio::test]
async fn a_request_whose_caller_retries_already_makes_one_attempt() {
    let server = Scripted::start().await;
    server.script("/quote", [Answer::status(503), Answer::status(200)]);
    let client = client(RetryMiddleware::new(policy()));
    let response = client
        .get(server.at("/quote"))
        .header("caller-retries", "?1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.hits("/quote").len(), 1);
}

#[tokio::test]
async fn a_refused_connection_is_retried_and_its_error_returned() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (client, witness) = witnessed(RetryMiddleware::new(policy()));
    let error = client
        .post(format!("http://127.0.0.1:{port}/pay"))
        .body("{}")
        .send()
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(witness.attempts.load(Ordering::SeqCst), 3);
}

#[test]
fn the_example_shows_what_reaches_the_upstream() {
    let stdout = example::stdout_of_success("reqwest_middleware", &[]);
    for expected in [
        "GET /quote (503, 503, 200)             -> 200 after 3 request(s), 3 with",
        "GET /rates (429 Retry-After: 1, 200)   -> 200 after 2 request(s), 2 with",
        "POST /payments, no key (503, ...)      -> 503 after 1 request(s), 1 with",
        "POST /refunds, keyed (503, 201)        -> 201 after 2 request(s), 2 with",
        "PUT /uploads, streamed body (503, 201) -> 503 after 1 request(s), 0 with",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in\n{stdout}"
        );
    }
}
