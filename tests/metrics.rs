//! What operators see in metrics: the documented names, labelled by function.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use retry_core::metrics::names;
use retry_core::retryable;

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
    // `module`: the functions' module path (this test crate's root), so a `fetch` in one module
    // is told from a `fetch` in another.
    let function = |f: &str| {
        vec![
            ("function".to_owned(), f.to_owned()),
            ("module".to_owned(), "metrics".to_owned()),
        ]
    };
    let gave_up = |f: &str, reason: &str| {
        vec![
            ("function".to_owned(), f.to_owned()),
            ("module".to_owned(), "metrics".to_owned()),
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

#[test]
fn the_dead_letter_queue_reports_pending_letters_and_the_oldest_age() {
    use retry_core::dlq::{DeadLetter, DeadLetterSink, FailureClass, MemoryDeadLetters};
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let letter = |id: &str| DeadLetter {
        msg_id: id.into(),
        original: serde_json::json!({}),
        reason: "gave up".into(),
        attempts: 5,
        first_failed_at: retry_core::time::format_rfc3339(an_hour_ago),
        last_failed_at: retry_core::time::format_rfc3339(an_hour_ago),
        trace_id: "0".into(),
        class: FailureClass::System,
        error_type: "E".into(),
        idempotency_key: None,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    };
    let recorder = DebuggingRecorder::new();
    let pending = metrics::with_local_recorder(&recorder, || {
        paused_runtime().block_on(async {
            let letters = MemoryDeadLetters::new();
            letters.park(&letter("a")).await.unwrap();
            letters.park(&letter("b")).await.unwrap();
            retry_core::dlq::pending(&letters, "payments")
                .await
                .unwrap()
        })
    });
    assert_eq!(pending.count, 2);
    let age = pending.oldest_age.unwrap().as_secs();
    assert!((3600..3610).contains(&age), "{age}");
    let gauges: Vec<_> = recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Gauge(v) => Some((key.key().name().to_owned(), v.into_inner())),
            _ => None,
        })
        .collect();
    assert!(
        gauges.contains(&(names::DLQ_PENDING.to_owned(), 2.0)),
        "{gauges:?}"
    );
    assert!(
        gauges
            .iter()
            .any(|(n, v)| n == names::DLQ_OLDEST_AGE && *v >= 3600.0),
        "{gauges:?}"
    );
}

mod client {
    pub struct Client;
    impl Client {
        #[retry_core::retryable(max = 2, base = "1ms")]
        pub async fn fetch(&self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::ConnectionReset.into())
        }
    }
}

mod cache {
    pub struct Cache;
    impl Cache {
        #[retry_core::retryable(max = 2, base = "1ms")]
        pub async fn fetch(&self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

#[test]
fn two_methods_of_one_name_in_different_modules_are_counted_apart() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        paused_runtime().block_on(async {
            assert!(client::Client.fetch().await.is_err());
            assert!(cache::Cache.fetch().await.is_ok());
        })
    });
    let calls: Vec<_> = counters(&recorder)
        .into_iter()
        .filter(|(name, _, _)| name == names::CALLS)
        .map(|(_, labels, n)| (labels, n))
        .collect();
    let labels = |module: &str| {
        vec![
            ("function".to_owned(), "fetch".to_owned()),
            ("module".to_owned(), module.to_owned()),
        ]
    };
    assert_eq!(
        calls,
        [
            (labels("metrics::cache"), 1),
            (labels("metrics::client"), 1)
        ]
    );
}
