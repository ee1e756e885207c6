//! `IdempotencyLayer` against careless clients and hostile input, with a real `curl` over
//! loopback against an axum server: requests axum refuses before the handler runs are not
//! stored (the corrected resend runs), bodies that differ in ways `serde_json::Value` hides are
//! other requests, scopes and keys that are not what they claim are refused, and a response
//! header off the replay allow-list never reaches another client.
//!
//! These tests need `/usr/bin/curl` (or `curl` on `PATH`); without it they fail, never pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::extract::{Json, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::routing::post;
use retry_core::idempotency::MemoryStore;
use retry_core::tower::IdempotencyLayer;
use serde::Deserialize;

use crate::curl;
use curl::{curl, curl_as};

/// A payment as the handler's `Json` extractor reads it.
#[derive(Deserialize)]
struct Payment {
    to: String,
    cents: u64,
}

/// Counts its effects: one per payment booked.
#[derive(Clone, Default)]
struct Ledger(Arc<AtomicU32>);

impl Ledger {
    fn booked(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Books a payment: axum refuses the request before this runs when its body is not JSON of
/// this shape.
async fn pay(State(ledger): State<Ledger>, Json(payment): Json<Payment>) -> (StatusCode, String) {
    let booking = ledger.0.fetch_add(1, Ordering::SeqCst) + 1;
    let Payment { to, cents } = payment;
    (
        StatusCode::CREATED,
        format!("booking {booking}: {cents} to {to}"),
    )
}

/// Books whatever body it gets, read as text: the layer alone tells bodies apart.
async fn book(State(ledger): State<Ledger>, body: String) -> (StatusCode, String) {
    let booking = ledger.0.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::CREATED, format!("booking {booking}: {body}"))
}

/// Serves `/payments` and `/bookings` behind `layer`; returns the URL of `/payments`.
async fn serve(ledger: &Ledger, layer: IdempotencyLayer<MemoryStore>) -> String {
    let router = Router::new()
        .route("/payments", post(pay))
        .route("/bookings", post(book))
        .layer(layer)
        .with_state(ledger.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("{base}/payments")
}

const PAYMENT: &str = r#"{"to":"alice","cents":500}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_content_type_is_not_stored_and_the_corrected_resend_runs() {
    let ledger = Ledger::default();
    let url = serve(
        &ledger,
        IdempotencyLayer::unauthenticated(MemoryStore::new()),
    )
    .await;

    let refused = curl_as(url.clone(), "ct-1", "text/plain", PAYMENT, None).await;
    assert_eq!(refused.status, 415, "{refused:?}");
    assert_eq!(ledger.booked(), 0);

    let corrected = curl(url.clone(), "ct-1", PAYMENT, None).await;
    assert_eq!(
        corrected.status, 201,
        "the same key runs anew: {corrected:?}"
    );
    assert!(!corrected.replayed(), "{corrected:?}");
    assert_eq!(corrected.body, "booking 1: 500 to alice");

    let again = curl(url, "ct-1", PAYMENT, None).await;
    assert_eq!((again.status, &again.body), (201, &corrected.body));
    assert!(again.replayed(), "the answer that ran is stored: {again:?}");
    assert_eq!(ledger.booked(), 1, "one effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_typo_refused_with_422_is_not_stored_and_the_fix_runs() {
    let ledger = Ledger::default();
    let url = serve(
        &ledger,
        IdempotencyLayer::unauthenticated(MemoryStore::new()),
    )
    .await;

    let typo = curl(url.clone(), "typo-1", r#"{"to":"alice","cnets":500}"#, None).await;
    assert_eq!(typo.status, 422, "{typo:?}");
    assert!(!typo.replayed());

    let fixed = curl(url.clone(), "typo-1", PAYMENT, None).await;
    assert_eq!(fixed.status, 201, "the fixed body runs: {fixed:?}");
    let again = curl(url, "typo-1", PAYMENT, None).await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(ledger.booked(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_left_out_of_the_not_processed_set_is_stored() {
    let ledger = Ledger::default();
    // This service answers 422 after effects of its own, so 422 must be kept.
    let layer = IdempotencyLayer::unauthenticated(MemoryStore::new())
        .not_processed_statuses([StatusCode::UNSUPPORTED_MEDIA_TYPE]);
    let url = serve(&ledger, layer).await;

    let typo = r#"{"to":"alice","cnets":500}"#;
    let first = curl(url.clone(), "kept-422", typo, None).await;
    assert_eq!(first.status, 422, "{first:?}");
    let resent = curl(url.clone(), "kept-422", typo, None).await;
    assert_eq!((resent.status, &resent.body), (422, &first.body));
    assert!(resent.replayed(), "the 422 was stored: {resent:?}");
    let fixed = curl(url.clone(), "kept-422", PAYMENT, None).await;
    assert_eq!(fixed.status, 422, "the key is used: {fixed:?}");
    assert!(fixed.body.contains("already used"), "{fixed:?}");

    // 415 is still in the set.
    let refused = curl_as(url.clone(), "kept-415", "text/plain", PAYMENT, None).await;
    assert_eq!(refused.status, 415, "{refused:?}");
    let corrected = curl(url, "kept-415", PAYMENT, None).await;
    assert_eq!(corrected.status, 201, "{corrected:?}");
    assert_eq!(ledger.booked(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_serde_json_value_confuses_are_another_request() {
    let ledger = Ledger::default();
    let url = serve(
        &ledger,
        IdempotencyLayer::unauthenticated(MemoryStore::new()),
    )
    .await;
    let url = url.replace("/payments", "/bookings");
    let pairs = [
        (
            r#"{"to":"alice","cents":12345678901234567890123}"#,
            r#"{"to":"alice","cents":12345678901234567890124}"#,
        ),
        (r#"{"rate":0.1}"#, r#"{"rate":0.10000000000000001}"#),
        (r#"{"to":"alice","to":"mallory"}"#, r#"{"to":"mallory"}"#),
    ];
    for (i, (first, other)) in pairs.into_iter().enumerate() {
        let key = format!("confused-{i}");
        let booked = curl(url.clone(), &key, first, None).await;
        assert_eq!(booked.status, 201, "{booked:?}");
        let reused = curl(url.clone(), &key, other, None).await;
        assert_eq!(reused.status, 422, "{other} is not {first}: {reused:?}");
        assert!(reused.body.contains("already used"), "{reused:?}");
        assert!(!reused.replayed(), "{reused:?}");
    }
    assert_eq!(ledger.booked(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_order_whitespace_and_a_redrive_resend_are_the_same_request() {
    let ledger = Ledger::default();
    let url = serve(
        &ledger,
        IdempotencyLayer::unauthenticated(MemoryStore::new()),
    )
    .await;
    let url = url.replace("/payments", "/bookings");
    let sent = r#"{"to":"al\u00efce","cents":500,"memo":{"z":[1.5,true],"a":null}}"#;
    let first = curl(url.clone(), "same-1", sent, None).await;
    assert_eq!(first.status, 201, "{first:?}");

    let reordered = r#" { "memo" : { "a" : null , "z" : [ 1.5 , true ] } , "cents" : 500 ,
        "to" : "al\u00efce" } "#;
    let again = curl(url.clone(), "same-1", reordered, None).await;
    assert!(again.replayed(), "{again:?}");
    // A redrive resends a dead letter's `original`, which went through `serde_json::Value`.
    let redriven = serde_json::from_str::<serde_json::Value>(sent)
        .unwrap()
        .to_string();
    assert_ne!(redriven, sent);
    let redrive = curl(url, "same-1", &redriven, None).await;
    assert!(redrive.replayed(), "{redrive:?}");
    assert_eq!(redrive.body, first.body);
    assert_eq!(ledger.booked(), 1);
}

// ---- scopes, keys and replayed headers, with reqwest ----

const ECHO_AUTH: HeaderName = HeaderName::from_static("x-echo-auth");

/// The test's authentication: the tenant a request names is its client.
fn tenant(parts: &Parts) -> Option<String> {
    let value = parts.headers.get("x-tenant")?.to_str().ok()?;
    Some(value.to_owned())
}

/// Answers with the caller's `X-Echo-Auth` echoed in a header of the same name (a credential
/// of that one caller), after counting its effect.
async fn echo(State(ledger): State<Ledger>, headers: HeaderMap) -> (StatusCode, HeaderMap, String) {
    let booking = ledger.0.fetch_add(1, Ordering::SeqCst) + 1;
    let mut out = HeaderMap::new();
    if let Some(auth) = headers.get(&ECHO_AUTH) {
        out.insert(ECHO_AUTH, auth.clone());
    }
    out.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    (StatusCode::CREATED, out, format!("booking {booking}"))
}

/// Serves `/echo` behind an authenticated `layer`; returns its URL.
async fn serve_echo(ledger: &Ledger, layer: IdempotencyLayer<MemoryStore>) -> String {
    let router = Router::new()
        .route("/echo", post(echo))
        .layer(layer)
        .with_state(ledger.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("{base}/echo")
}

/// A response, read whole.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn detail(&self) -> String {
        let problem: serde_json::Value = serde_json::from_str(&self.body).unwrap();
        problem["detail"].as_str().unwrap_or_default().to_owned()
    }
}

/// POSTs `{}` to `url` with `headers` through reqwest.
async fn post_with(url: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = reqwest::Client::new().post(url).body("{}");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_credential_header_never_reaches_another_client() {
    let layer = || IdempotencyLayer::new(MemoryStore::new(), tenant);
    let refused = layer()
        .replay_headers([CONTENT_TYPE, ECHO_AUTH])
        .unwrap_err();
    assert_eq!(refused.name(), &ECHO_AUTH);

    let ledger = Ledger::default();
    let url = serve_echo(&ledger, layer()).await;
    let alice = [
        ("x-tenant", "acme"),
        ("x-echo-auth", "alice-secret"),
        ("idempotency-key", "\"op-1\""),
    ];
    let first = post_with(&url, &alice).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(
        first.headers[&ECHO_AUTH], "alice-secret",
        "the first answer is the handler's own"
    );

    let bob = [
        ("x-tenant", "acme"),
        ("x-echo-auth", "bob-secret"),
        ("idempotency-key", "\"op-1\""),
    ];
    let replay = post_with(&url, &bob).await;
    assert_eq!(replay.headers["idempotent-replayed"], "?1");
    assert_eq!(replay.body, first.body);
    assert!(
        replay.headers.get(&ECHO_AUTH).is_none(),
        "{:?}",
        replay.headers
    );
    assert_eq!(replay.headers[CONTENT_TYPE], "text/plain");
    assert_eq!(ledger.booked(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_too_long_for_the_store_is_named_not_the_key() {
    let ledger = Ledger::default();
    let url = serve_echo(&ledger, IdempotencyLayer::new(MemoryStore::new(), tenant)).await;
    let long = "t".repeat(600);
    let answer = post_with(&url, &[("x-tenant", &long), ("idempotency-key", "\"k\"")]).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let detail = answer.detail();
    assert!(
        detail.contains("client id") && detail.contains("600 bytes"),
        "{detail}"
    );
    assert!(!detail.contains("the key is"), "{detail}");

    // With a short scope, the key is what is too long, and its own length is named.
    let wide = IdempotencyLayer::new(MemoryStore::new(), tenant).max_key_bytes(10_000);
    let url = serve_echo(&ledger, wide).await;
    let key = format!("\"{}\"", "k".repeat(500));
    let answer = post_with(&url, &[("x-tenant", "acme"), ("idempotency-key", &key)]).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.detail().starts_with("the key is 500 bytes"),
        "{}",
        answer.detail()
    );
    assert_eq!(ledger.booked(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_scope_is_not_a_client() {
    let ledger = Ledger::default();
    let url = serve_echo(&ledger, IdempotencyLayer::new(MemoryStore::new(), tenant)).await;
    let answer = post_with(&url, &[("x-tenant", ""), ("idempotency-key", "\"k-1\"")]).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert_eq!(ledger.booked(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_are_other_structured_field_types_are_400() {
    let ledger = Ledger::default();
    let url = serve_echo(
        &ledger,
        IdempotencyLayer::unauthenticated(MemoryStore::new()),
    )
    .await;
    for key in ["?1", ":YWJj:", "42"] {
        let answer = post_with(&url, &[("idempotency-key", key)]).await;
        assert_eq!(answer.status, 400, "{key}: {}", answer.body);
        assert!(
            answer.body.contains("Idempotency-Key is malformed"),
            "{}",
            answer.body
        );
        assert!(
            answer.detail().contains("structured-field"),
            "{key}: {}",
            answer.detail()
        );
    }
    assert_eq!(ledger.booked(), 0);
    // The bare token form and bare UUIDs are still keys.
    for key in ["8e03978e", "123e4567-e89b-12d3-a456-426614174000"] {
        let answer = post_with(&url, &[("idempotency-key", key)]).await;
        assert_eq!(answer.status, 201, "{key}: {}", answer.body);
    }
    assert_eq!(ledger.booked(), 2);
}
