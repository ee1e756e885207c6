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
        first_failed_at: an_hour_ago,
        last_failed_at: an_hour_ago,
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

/// A dead-letter store whose reads fail while `down` is set (its database went away), over the
/// memory store: the monitor must say so instead of showing the last count.
#[derive(Default)]
struct Unreachable {
    letters: retry_core::dlq::MemoryDeadLetters,
    down: std::sync::atomic::AtomicBool,
}

impl Unreachable {
    fn check(&self) -> Result<(), retry_core::dlq::DlqError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(retry_core::dlq::DlqError::Io("connection refused".into()));
        }
        Ok(())
    }
}

impl retry_core::dlq::DeadLetterSink for Unreachable {
    async fn park(
        &self,
        letter: &retry_core::dlq::DeadLetter,
    ) -> Result<(), retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.park(letter).await
    }
}

/// Every read goes through `check`, then to the memory store.
impl retry_core::dlq::DeadLetterStore for Unreachable {
    async fn page(
        &self,
        page: &retry_core::dlq::Page,
    ) -> Result<Vec<retry_core::dlq::DeadLetter>, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.page(page).await
    }
    async fn stats(&self) -> Result<retry_core::dlq::Stats, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.stats().await
    }
    async fn get(
        &self,
        msg_id: &str,
    ) -> Result<Option<retry_core::dlq::DeadLetter>, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.get(msg_id).await
    }
    async fn lease(
        &self,
        msg_id: &str,
        run_id: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<retry_core::dlq::DeadLetter>, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.lease(msg_id, run_id, ttl).await
    }
    async fn release(&self, msg_id: &str, run_id: &str) -> Result<bool, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.release(msg_id, run_id).await
    }
    async fn resolve(
        &self,
        msg_id: &str,
        resolution: &retry_core::dlq::Resolution,
    ) -> Result<bool, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.resolve(msg_id, resolution).await
    }
    async fn put_back(
        &self,
        msg_id: &str,
        run_id: &str,
        failure: &retry_core::dlq::Failure,
    ) -> Result<bool, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.put_back(msg_id, run_id, failure).await
    }
    async fn purge_resolved(
        &self,
        before: std::time::SystemTime,
    ) -> Result<u64, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.purge_resolved(before).await
    }
    async fn audit(
        &self,
        entry: &retry_core::dlq::AuditEntry,
    ) -> Result<(), retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.audit(entry).await
    }
    async fn audit_rows(
        &self,
        run_id: Option<&str>,
    ) -> Result<Vec<retry_core::dlq::AuditEntry>, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.audit_rows(run_id).await
    }
    async fn record_redrive(
        &self,
        record: &retry_core::dlq::RedriveRecord,
    ) -> Result<(), retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.record_redrive(record).await
    }
    async fn redrives(
        &self,
    ) -> Result<Vec<retry_core::dlq::RedriveRecord>, retry_core::dlq::DlqError> {
        self.check()?;
        self.letters.redrives().await
    }
}

/// The gauges and counters of one queue, by name.
fn dlq_values(recorder: &DebuggingRecorder) -> std::collections::BTreeMap<String, f64> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| {
            key.key()
                .labels()
                .any(|l| l.key() == "queue" && l.value() == "payments")
        })
        .filter_map(|(key, _, _, value)| {
            let value = match value {
                DebugValue::Gauge(v) => v.into_inner(),
                DebugValue::Counter(n) => n as f64,
                DebugValue::Histogram(_) => return None,
            };
            Some((key.key().name().to_owned(), value))
        })
        .collect()
}

#[test]
fn a_monitor_that_cannot_read_its_store_says_so_instead_of_a_stale_count() {
    use retry_core::dlq::{DeadLetterSink, FailureClass};
    let recorder = DebuggingRecorder::new();
    let store = Unreachable::default();
    let an_hour_ago = retry_core::time::format_rfc3339(
        std::time::SystemTime::now() - std::time::Duration::from_secs(3600),
    );
    let letter: retry_core::dlq::DeadLetter = serde_json::from_value(serde_json::json!({
        "msg_id": "M-1", "original": {}, "reason": "503", "attempts": 5,
        "first_failed_at": an_hour_ago, "last_failed_at": an_hour_ago,
        "trace_id": "0", "class": FailureClass::System, "error_type": "E"
    }))
    .unwrap();
    let runtime = paused_runtime();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            store.park(&letter).await.unwrap();
            assert_eq!(
                retry_core::dlq::pending(&store, "payments")
                    .await
                    .unwrap()
                    .count,
                1
            );
        })
    });
    let up = dlq_values(&recorder);
    assert_eq!(up[names::DLQ_PENDING], 1.0, "{up:?}");
    assert_eq!(up[names::DLQ_MONITOR_UP], 1.0, "{up:?}");

    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            for _ in 0..2 {
                assert!(retry_core::dlq::pending(&store, "payments").await.is_err());
            }
        })
    });
    let down = dlq_values(&recorder);
    assert_eq!(
        down[names::DLQ_MONITOR_ERRORS],
        2.0,
        "each failed read counted: {down:?}"
    );
    assert_eq!(down[names::DLQ_MONITOR_UP], 0.0, "{down:?}");
    assert_eq!(
        down[names::DLQ_PENDING],
        0.0,
        "not the last count: {down:?}"
    );
    assert_eq!(
        down[names::DLQ_OLDEST_AGE],
        0.0,
        "not the last age: {down:?}"
    );

    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async { retry_core::dlq::pending(&store, "payments").await.unwrap() })
    });
    let back = dlq_values(&recorder);
    assert_eq!(
        (back[names::DLQ_MONITOR_UP], back[names::DLQ_PENDING]),
        (1.0, 1.0),
        "{back:?}"
    );
}

/// A sink that refuses every letter: the disk is full.
struct Full;

impl retry_core::dlq::DeadLetterSink for Full {
    async fn park(&self, _: &retry_core::dlq::DeadLetter) -> Result<(), retry_core::dlq::DlqError> {
        Err(retry_core::dlq::DlqError::Io(
            "no space left on device".into(),
        ))
    }
}

#[derive(Debug)]
struct NotParked;

impl From<retry_core::dlq::DlqFailed> for NotParked {
    fn from(_: retry_core::dlq::DlqFailed) -> Self {
        NotParked
    }
}

impl From<std::io::Error> for NotParked {
    fn from(_: std::io::Error) -> Self {
        NotParked
    }
}

impl retry_core::Classify for NotParked {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

#[retryable(max = 2, base = "1ms", dlq(sink = sink, id = "M-1", original = "payload"))]
async fn park_into(sink: &Full) -> Result<(), NotParked> {
    Err(NotParked)
}

#[test]
fn a_letter_the_sink_refused_is_counted_by_function() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        paused_runtime().block_on(async {
            for _ in 0..3 {
                assert!(park_into(&Full).await.is_err());
            }
        })
    });
    let failures: Vec<_> = counters(&recorder)
        .into_iter()
        .filter(|(name, _, _)| name == names::DLQ_PARK_FAILURES)
        .collect();
    assert_eq!(
        failures,
        [(
            names::DLQ_PARK_FAILURES.to_owned(),
            vec![
                ("function".to_owned(), "park_into".to_owned()),
                ("module".to_owned(), "metrics".to_owned())
            ],
            3
        )]
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

/// Two idempotency layers of one service, told apart by their namespaces alone: a duplicate
/// answered by each is counted under its own `function` label, and a named layer under its name.
#[test]
fn the_idempotency_layers_metrics_follow_its_name_or_namespace() {
    use retry_core::idempotency::MemoryStore;
    use retry_core::tower::IdempotencyLayer;
    use tower::ServiceExt as _;

    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = std::sync::Arc::new(MemoryStore::new());
            let ok = axum::routing::post(|| async { "done" });
            for layer in [
                IdempotencyLayer::unauthenticated(store.clone()).namespace("payments"),
                IdempotencyLayer::unauthenticated(store.clone()).namespace("refunds"),
                IdempotencyLayer::unauthenticated(store.clone())
                    .namespace("payments.v2")
                    .name("create_payment"),
                IdempotencyLayer::unauthenticated(store.clone()),
            ] {
                let app = axum::Router::new().route("/", ok.clone()).layer(layer);
                for _ in 0..2 {
                    let request = axum::http::Request::post("/")
                        .header("idempotency-key", "\"k-1\"")
                        .body(axum::body::Body::empty())
                        .unwrap();
                    let answer = app.clone().oneshot(request).await.unwrap();
                    assert_eq!(answer.status(), 200);
                }
            }
        })
    });
    let duplicates: Vec<String> = counters(&recorder)
        .into_iter()
        .filter(|(name, _, _)| name == names::DUPLICATES)
        .map(|(_, labels, n)| format!("{labels:?} {n}"))
        .collect();
    assert_eq!(
        duplicates,
        [
            r#"[("function", "create_payment")] 1"#,
            r#"[("function", "idempotency_layer")] 1"#,
            r#"[("function", "payments")] 1"#,
            r#"[("function", "refunds")] 1"#,
        ]
    );
}

#[test]
fn the_amplification_observer_counts_arrivals_and_operations_by_route() {
    use retry_core::tower::{AmplificationLayer, AmplificationObserver};
    use tower::{Layer, ServiceExt, service_fn};

    let recorder = DebuggingRecorder::new();
    let observer = AmplificationObserver::new();
    let service = AmplificationLayer::new(observer.clone())
        .route("POST /pay")
        .layer(service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    metrics::with_local_recorder(&recorder, || {
        paused_runtime().block_on(async {
            // Attempts 1 and 2 of one layer, then six sends nobody announced.
            for caller_retries in [Some("?1;attempt=1;max=2"), Some("?1;attempt=2;max=2")]
                .into_iter()
                .chain([None; 6])
            {
                let mut request = http::Request::post("/pay").header("idempotency-key", "\"k\"");
                if let Some(value) = caller_retries {
                    request = request.header("caller-retries", value);
                }
                service
                    .clone()
                    .oneshot(request.body(()).unwrap())
                    .await
                    .unwrap();
            }
        });
        observer.flush();
    });
    let route = |extra: &[(&str, &str)]| {
        let mut labels = vec![("route".to_owned(), "POST /pay".to_owned())];
        labels.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        labels
    };
    let attempt = |a: &str| route(&[("attempt", a)]);
    // A snapshot takes what was recorded: read it once.
    let mut counted = Vec::new();
    let mut histograms = Vec::new();
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        let key = key.key();
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect::<Vec<_>>();
        match value {
            DebugValue::Counter(n) => counted.push((key.name().to_owned(), labels, n)),
            DebugValue::Histogram(values) => histograms.push((
                key.name().to_owned(),
                labels,
                values.iter().map(|v| v.into_inner()).collect::<Vec<f64>>(),
            )),
            DebugValue::Gauge(_) => {}
        }
    }
    counted.sort();
    assert_eq!(
        counted,
        [
            (names::AMPLIFIED_OPERATIONS.to_owned(), route(&[]), 1),
            (names::ARRIVALS.to_owned(), attempt("first"), 1),
            (names::ARRIVALS.to_owned(), attempt("retry"), 1),
            (names::ARRIVALS.to_owned(), attempt("unannounced"), 6),
        ]
    );
    assert_eq!(
        histograms,
        [(
            names::OPERATION_ARRIVALS.to_owned(),
            route(&[("grouped_by", "idempotency_key")]),
            vec![8.0]
        )]
    );
}
