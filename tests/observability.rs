//! What operators see: the documented metric names, and one warning per collapsed nested retry.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use retry_core::metrics::names;
use retry_core::retryable;
use tracing_subscriber::layer::SubscriberExt;

#[retryable(max = 3, base = "1ms")]
async fn inner() -> std::io::Result<()> {
    Err(std::io::ErrorKind::ConnectionReset.into())
}

async fn hidden() -> std::io::Result<()> {
    inner().await
}

#[retryable(max = 2, base = "1ms")]
async fn outer() -> std::io::Result<()> {
    hidden().await
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// A counter's name, labels and value.
type Counter = (String, Vec<(String, String)>, u64);

/// Every counter recorded, sorted.
fn counters(recorder: &DebuggingRecorder) -> Vec<Counter> {
    let mut out = Vec::new();
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        if let DebugValue::Counter(n) = value {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            out.push((key.name().to_owned(), labels, n));
        }
    }
    out.sort();
    out
}

#[test]
fn calls_retries_give_ups_and_nested_suppressions_are_counted_by_function() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        paused_runtime().block_on(async { assert!(outer().await.is_err()) })
    });
    let function = |f: &str| vec![("function".to_owned(), f.to_owned())];
    let gave_up = |f: &str, reason: &str| {
        vec![
            ("function".to_owned(), f.to_owned()),
            ("reason".to_owned(), reason.to_owned()),
        ]
    };
    let mut expected = vec![
        // The outer call, and the inner one started once per outer attempt.
        (names::CALLS.to_owned(), function("inner"), 2),
        (names::CALLS.to_owned(), function("outer"), 1),
        (names::RETRIES.to_owned(), function("outer"), 1),
        (
            names::GIVE_UPS.to_owned(),
            gave_up("inner", "single_attempt"),
            2,
        ),
        (names::GIVE_UPS.to_owned(), gave_up("outer", "exhausted"), 1),
        (names::NESTED_SUPPRESSED.to_owned(), function("inner"), 2),
    ];
    expected.sort();
    assert_eq!(counters(&recorder), expected);
}

/// Counts WARN events mentioning "retry in only one layer".
#[derive(Clone, Default)]
struct Warnings {
    count: Arc<AtomicUsize>,
    messages: Arc<Mutex<Vec<String>>>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={:?} ", field.name(), value));
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut message = Message(String::new());
            event.record(&mut message);
            if message.0.contains("retry in only one layer") {
                self.count.fetch_add(1, Ordering::SeqCst);
                self.messages.lock().unwrap().push(message.0);
            }
        }
    }
}

#[test]
fn each_collapsed_nested_retry_warns_once_naming_both_functions_and_the_call_site() {
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    tracing::subscriber::with_default(subscriber, || {
        paused_runtime().block_on(async { assert!(outer().await.is_err()) })
    });
    // Two outer attempts, each starting the inner retry once: one warning each, not one per
    // inner attempt.
    assert_eq!(warnings.count.load(Ordering::SeqCst), 2);
    let first = warnings.messages.lock().unwrap()[0].clone();
    assert!(first.contains("function=\"inner\""), "{first}");
    assert!(first.contains("outer=\"outer\""), "{first}");
    // Where `hidden` calls `inner()`.
    assert!(
        first.contains("tests/observability.rs:17"),
        "the call site: {first}"
    );
}

/// Records the `reason` field of "giving up" events.
#[derive(Clone, Default)]
struct GiveUps(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for GiveUps {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Reason(Option<String>);
        impl tracing::field::Visit for Reason {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "reason" {
                    self.0 = Some(value.to_owned());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut reason = Reason(None);
        event.record(&mut reason);
        if let Some(reason) = reason.0 {
            self.0.lock().unwrap().push(reason);
        }
    }
}

#[retryable(max = 3, base = "1ms")]
async fn not_found() -> Result<(), axum::http::StatusCode> {
    Err(axum::http::StatusCode::NOT_FOUND)
}

#[retryable(max = 3, base = "1ms")]
async fn unavailable() -> Result<(), axum::http::StatusCode> {
    Err(axum::http::StatusCode::SERVICE_UNAVAILABLE)
}

fn decide(decision: &retry_core::Decision) -> retry_core::Decision {
    *decision
}

#[retryable(max = 3, base = "1ms", max_retry_after = "5m", retry_if = decide)]
async fn asks_for_ten_minutes_too() -> Result<(), retry_core::Decision> {
    Err(retry_core::Decision::RetryAfter(
        std::time::Duration::from_secs(600),
    ))
}

#[test]
fn the_give_up_event_says_why() {
    let give_ups = GiveUps::default();
    let subscriber = tracing_subscriber::registry().with(give_ups.clone());
    tracing::subscriber::with_default(subscriber, || {
        paused_runtime().block_on(async {
            assert!(not_found().await.is_err());
            assert!(unavailable().await.is_err());
            assert!(asks_for_ten_minutes_too().await.is_err());
        })
    });
    assert_eq!(
        *give_ups.0.lock().unwrap(),
        [
            "not retryable: 404 Not Found",
            "gave up after 3 attempts: 503 Service Unavailable",
            "Retry-After 600 s exceeds max_retry_after 300 s",
        ]
    );
}
