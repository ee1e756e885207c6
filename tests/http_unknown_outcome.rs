//! `IdempotencyLayer` when the outcome of a request is unknown to its client, with a real `curl`
//! over loopback against an axum server on the real clock: a `500` after the effect is replayed,
//! a client that gives up does not stop the handler (the resend gets its stored answer), a
//! concurrent duplicate gets `409` with `Retry-After`, and only a `NotApplied` answer frees the
//! key for a second run.
//!
//! These tests need `/usr/bin/curl` (or `curl` on `PATH`); without it they fail, never pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use retry_core::idempotency::MemoryStore;
use retry_core::tower::{IdempotencyLayer, NotApplied};

use crate::curl;
use curl::curl;

/// What the handlers share with the test.
#[derive(Clone, Default)]
struct Effects {
    /// Effects that happened (a booking, a charge).
    done: Arc<AtomicU32>,
    /// Runs of a handler, effect or not.
    runs: Arc<AtomicU32>,
    /// Set when `/slow` has started.
    entered: Arc<AtomicBool>,
}

impl Effects {
    fn done(&self) -> u32 {
        self.done.load(Ordering::SeqCst)
    }
    fn book(&self) -> u32 {
        self.done.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn run(&self) -> u32 {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// Books, then fails: the effect happened, the answer is a `500`.
async fn fails_after_effect(State(effects): State<Effects>) -> (StatusCode, String) {
    let booking = effects.book();
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("booking {booking} written, then the receipt failed"),
    )
}

/// Takes 800 ms, then books and answers `200`: longer than a client that gives up after 200 ms.
async fn slow(State(effects): State<Effects>, body: String) -> String {
    effects.entered.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let booking = effects.book();
    format!("booking {booking} for {body}")
}

/// Refuses its first run before doing anything (`NotApplied`), books on the next.
async fn refuses_first(State(effects): State<Effects>) -> Response {
    if effects.run() == 1 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Extension(NotApplied),
            "ledger unreachable: nothing booked",
        )
            .into_response();
    }
    let booking = effects.book();
    (StatusCode::CREATED, format!("booking {booking}")).into_response()
}

/// Serves the handlers behind one layer on a memory store; returns the base URL.
async fn serve(effects: &Effects) -> String {
    let router = Router::new()
        .route("/fails", post(fails_after_effect))
        .route("/slow", post(slow))
        .route("/refuses", post(refuses_first))
        .layer(IdempotencyLayer::unauthenticated(MemoryStore::new()))
        .with_state(effects.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_after_the_effect_is_replayed_not_run_again() {
    let effects = Effects::default();
    let base = serve(&effects).await;

    let first = curl(format!("{base}/fails"), "a-500", "{\"cents\":500}", None).await;
    assert_eq!(first.exit, 0, "{first:?}");
    assert_eq!(first.status, 500, "{first:?}");
    assert_eq!(first.body, "booking 1 written, then the receipt failed");
    assert!(!first.replayed());

    let resend = curl(format!("{base}/fails"), "a-500", "{\"cents\":500}", None).await;
    assert_eq!(
        (resend.status, &resend.body),
        (500, &first.body),
        "{resend:?}"
    );
    assert!(resend.replayed(), "the 500 was stored: {resend:?}");
    assert_eq!(effects.done(), 1, "one effect for two requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_gets_the_finished_answer_on_its_resend() {
    let effects = Effects::default();
    let base = serve(&effects).await;

    let started = Instant::now();
    let gave_up = curl(format!("{base}/slow"), "b-slow", "\"order-7\"", Some("0.2")).await;
    assert_eq!(gave_up.exit, 28, "curl gave up after 200 ms: {gave_up:?}");
    assert!(
        started.elapsed() < Duration::from_millis(800),
        "{gave_up:?}"
    );
    assert_eq!(effects.done(), 0, "the handler is still running");

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        effects.done(),
        1,
        "the handler ran to its end after its client went away"
    );
    let resend = curl(format!("{base}/slow"), "b-slow", "\"order-7\"", None).await;
    assert_eq!(resend.exit, 0, "{resend:?}");
    assert_eq!(
        (resend.status, resend.body.as_str()),
        (200, "booking 1 for \"order-7\""),
        "{resend:?}"
    );
    assert!(resend.replayed(), "{resend:?}");
    assert_eq!(effects.done(), 1, "one effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_gets_409_with_retry_after() {
    let effects = Effects::default();
    let base = serve(&effects).await;

    let first = tokio::spawn(curl(format!("{base}/slow"), "c-dup", "\"order-8\"", None));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !effects.entered.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the first request never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let duplicate = curl(format!("{base}/slow"), "c-dup", "\"order-8\"", None).await;
    assert_eq!(duplicate.status, 409, "{duplicate:?}");
    assert_eq!(duplicate.header("retry-after"), Some("1"), "{duplicate:?}");
    assert_eq!(
        duplicate.header("content-type"),
        Some("application/problem+json")
    );
    let problem: serde_json::Value = serde_json::from_str(&duplicate.body).unwrap();
    assert_eq!(
        problem["title"],
        "A request is outstanding for this Idempotency-Key"
    );

    let first = first.await.unwrap();
    assert_eq!(
        (first.status, first.body.as_str()),
        (200, "booking 1 for \"order-8\""),
        "{first:?}"
    );
    assert_eq!(effects.done(), 1, "one effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_applied_frees_the_key_for_a_second_run() {
    let effects = Effects::default();
    let base = serve(&effects).await;

    let refused = curl(format!("{base}/refuses"), "d-na", "{}", None).await;
    assert_eq!(
        (refused.status, refused.body.as_str()),
        (503, "ledger unreachable: nothing booked"),
        "{refused:?}"
    );
    assert_eq!(effects.done(), 0);

    let resend = curl(format!("{base}/refuses"), "d-na", "{}", None).await;
    assert_eq!(
        (resend.status, resend.body.as_str()),
        (201, "booking 1"),
        "{resend:?}"
    );
    assert!(!resend.replayed(), "the handler ran again");

    let again = curl(format!("{base}/refuses"), "d-na", "{}", None).await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, "booking 1");
    assert_eq!(effects.runs.load(Ordering::SeqCst), 2, "two runs");
    assert_eq!(effects.done(), 1, "one effect");
}
