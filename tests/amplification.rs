//! Retries layered by loops that are not ours, seen by the final system's
//! `AmplificationLayer` (the chain of `examples/amplification.rs`, real sockets, real clock):
//! 64 arrivals of one operation and one warning when every layer loops on its own, 4 and none
//! with the library's clients in every layer; grouped by `Idempotency-Key` or by `traceparent`.
//! Then the observer's bounds: 20,000 operations through a table of 1,024.

#[allow(dead_code)]
#[path = "../examples/amplification.rs"]
mod example;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use http::{Request, StatusCode};
use retry_core::retryable;
use retry_core::tower::{AmplificationLayer, AmplificationObserver, CallerRetriesLayer, GroupedBy};
use tower::{Layer, ServiceExt, service_fn};

use example::{Chain, Identity};

#[tokio::test]
async fn plain_loops_in_every_layer_reach_the_final_system_64_times_and_it_warns_once() {
    let outcome = example::run(Chain::PlainLoops(Identity::Key))
        .await
        .unwrap();
    assert_eq!(outcome.final_requests, 64);
    assert_eq!(outcome.status, 503);
    let operations = outcome.observer.operations();
    assert_eq!(operations.len(), 1, "{operations:?}");
    let operation = &operations[0];
    assert_eq!(operation.grouped_by, GroupedBy::IdempotencyKey);
    assert_eq!(operation.arrivals, 64);
    assert_eq!(operation.largest_attempt, None, "nothing was announced");
    assert!(operation.amplified);
    let stats = outcome.observer.stats();
    assert_eq!((stats.arrivals, stats.operations), (64, 1));
    assert_eq!((stats.amplified, stats.warnings), (1, 1), "{stats:?}");
}

#[tokio::test]
async fn the_library_in_every_layer_reaches_it_4_times_announced_and_it_does_not_warn() {
    let outcome = example::run(Chain::Library).await.unwrap();
    assert_eq!(outcome.final_requests, 4);
    assert_eq!(outcome.status, 503);
    let operations = outcome.observer.operations();
    assert_eq!(operations.len(), 1, "{operations:?}");
    let operation = &operations[0];
    assert_eq!(operation.grouped_by, GroupedBy::IdempotencyKey);
    assert_eq!(operation.arrivals, 4);
    assert_eq!(
        (operation.largest_attempt, operation.largest_max),
        (Some(4), Some(4)),
        "each hop carried the gateway's numbers on"
    );
    assert!(!operation.amplified);
    let stats = outcome.observer.stats();
    assert_eq!(stats.announced_retries, 3, "attempts 2, 3 and 4");
    assert_eq!((stats.amplified, stats.warnings), (0, 0), "{stats:?}");
}

#[tokio::test]
async fn with_only_a_traceparent_the_arrivals_are_grouped_the_same_way() {
    let outcome = example::run(Chain::PlainLoops(Identity::Trace))
        .await
        .unwrap();
    assert_eq!(outcome.final_requests, 64);
    let operations = outcome.observer.operations();
    assert_eq!(operations.len(), 1, "{operations:?}");
    assert_eq!(operations[0].grouped_by, GroupedBy::TraceId);
    assert_eq!(operations[0].arrivals, 64);
    let stats = outcome.observer.stats();
    assert_eq!((stats.amplified, stats.warnings), (1, 1), "{stats:?}");
}

fn keyed(n: u32) -> Request<()> {
    Request::post("/payments")
        .header("idempotency-key", format!("\"op-{n}\""))
        .body(())
        .unwrap()
}

#[tokio::test]
async fn twenty_thousand_operations_stay_within_the_configured_bound() {
    let observer = AmplificationObserver::builder().capacity(1_024).build();
    let bound = observer.footprint_bytes();
    // At most 150 bytes an operation, as documented.
    assert!(bound <= 1_024 * 150, "{bound} bytes");
    let service =
        AmplificationLayer::new(observer.clone()).layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(())
        }));
    for n in 0..20_000 {
        service.clone().oneshot(keyed(n)).await.unwrap();
        if n % 1_000 == 0 {
            assert_eq!(observer.footprint_bytes(), bound, "after {n} operations");
        }
    }
    assert_eq!(observer.footprint_bytes(), bound);
    assert!(observer.operations().len() <= observer.capacity());
    let stats = observer.stats();
    assert_eq!((stats.arrivals, stats.operations), (20_000, 20_000));
    assert_eq!(stats.amplified, 0, "every operation arrived once");
}

#[tokio::test]
async fn a_malformed_caller_retries_or_traceparent_never_fails_a_request() {
    let observer = AmplificationObserver::new();
    let service =
        AmplificationLayer::new(observer.clone()).layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(StatusCode::OK)
        }));
    for (name, value) in [
        ("caller-retries", &b"?1;attempt=;max=x"[..]),
        ("caller-retries", b"?1;attempt=99999999999999999999"),
        ("caller-retries", b"\x80\xff?1"),
        ("traceparent", b"00-zz-yy-01"),
        ("idempotency-key", b"\"unterminated"),
        ("idempotency-key", b"\xfe\xff"),
    ] {
        let value = http::HeaderValue::from_bytes(value).unwrap();
        let request = Request::get("/")
            .header(name, value.clone())
            .body(())
            .unwrap();
        let status = service.clone().oneshot(request).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{name}: {value:?}");
    }
    assert_eq!(observer.stats().arrivals, 6);
    assert_eq!(observer.stats().announced_retries, 0);
}

#[retryable(max = 4, base = "1ms")]
async fn look_up(calls: &AtomicU32) -> std::io::Result<()> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(std::io::ErrorKind::ConnectionReset.into())
}

#[tokio::test(start_paused = true)]
async fn a_server_still_reads_the_bare_marker_of_older_senders() {
    for value in ["?1", "?1;attempt=2;max=4"] {
        let calls = Arc::new(AtomicU32::new(0));
        let handler = {
            let calls = calls.clone();
            service_fn(move |_: Request<()>| {
                let calls = calls.clone();
                async move { Ok::<_, Infallible>(look_up(&calls).await.is_err()) }
            })
        };
        let server = CallerRetriesLayer.layer(handler);
        let request = Request::get("/").header("caller-retries", value).body(());
        assert!(server.oneshot(request.unwrap()).await.unwrap());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{value}");
    }
    // Unmarked, the handler's retry makes its 4 attempts.
    let calls = AtomicU32::new(0);
    assert!(look_up(&calls).await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn an_idempotency_layer_observes_by_its_own_scope_and_key() {
    use axum::body::Body;
    use retry_core::idempotency::MemoryStore;
    use retry_core::tower::IdempotencyLayer;

    let observer = AmplificationObserver::new();
    let app = axum::Router::new()
        .route("/payments", axum::routing::post(|| async { "paid" }))
        .layer(
            IdempotencyLayer::new(MemoryStore::new(), |parts: &http::request::Parts| {
                parts
                    .headers
                    .get("x-client")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })
            .name("create_payment")
            .observe(observer.clone()),
        );
    // One key, two clients: two operations. Bare and quoted forms of a key are one.
    for (client, key) in [("alice", "\"k\""), ("alice", "k"), ("bob", "\"k\"")] {
        let request = Request::post("/payments")
            .header("x-client", client)
            .header("idempotency-key", key)
            .body(Body::empty())
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let mut arrivals: Vec<(String, u32)> = observer
        .operations()
        .into_iter()
        .map(|op| (op.route, op.arrivals))
        .collect();
    arrivals.sort();
    assert_eq!(
        arrivals,
        [
            ("create_payment".to_owned(), 1),
            ("create_payment".to_owned(), 2)
        ]
    );
}
