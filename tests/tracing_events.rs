//! What operators see in logs: one warning per collapsed nested retry, and give-up events that
//! say why. One test, one subscriber: tracing caches per-callsite interest process-wide, so
//! scoped subscribers in parallel tests would miss events.

use std::sync::{Arc, Mutex};

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

/// Every WARN event mentioning "retry in only one layer", with its fields.
#[derive(Clone, Default)]
struct Warnings {
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
                self.messages.lock().unwrap().push(message.0);
            }
        }
    }
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
fn nested_retries_warn_once_and_give_ups_say_why() {
    let warnings = Warnings::default();
    let give_ups = GiveUps::default();
    let subscriber = tracing_subscriber::registry()
        .with(warnings.clone())
        .with(give_ups.clone());
    tracing::subscriber::with_default(subscriber, || {
        paused_runtime().block_on(async {
            assert!(outer().await.is_err());
            assert!(not_found().await.is_err());
            assert!(unavailable().await.is_err());
            assert!(asks_for_ten_minutes_too().await.is_err());
        })
    });
    // Two outer attempts, each starting the inner retry once at the same call site: one
    // warning for the call site, then DEBUG.
    let messages = warnings.messages.lock().unwrap().clone();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let first = &messages[0];
    assert!(first.contains("function=\"inner\""), "{first}");
    assert!(first.contains("outer=\"outer\""), "{first}");
    // Where `hidden` calls `inner()`.
    assert!(
        first.contains("tests/tracing_events.rs:16"),
        "the call site: {first}"
    );
    assert_eq!(
        *give_ups.0.lock().unwrap(),
        [
            "single attempt: the outer layer retries: connection reset",
            "single attempt: the outer layer retries: connection reset",
            "gave up after 2 attempts: connection reset",
            "not retryable: 404 Not Found",
            "gave up after 3 attempts: 503 Service Unavailable",
            // The error has no reason of its own: its `Debug` says what it was.
            "Retry-After 600 s exceeds max_retry_after 300 s: RetryAfter(600s)",
        ]
    );
    at_info_retries_and_give_ups_name_the_function_and_the_error();
    events_come_from_the_public_modules_they_are_about();
    a_request_not_sent_again_is_a_warning_once_per_function();
    an_amplified_operation_is_one_warning_naming_it_and_its_limit();
}

/// Twenty sends of one key, nobody announcing: one WARN at the sixth, naming the key, the
/// limit and the source; the other operation of the same route, within the minute, is DEBUG.
fn an_amplified_operation_is_one_warning_naming_it_and_its_limit() {
    use retry_core::tower::{AmplificationLayer, AmplificationObserver};
    use tower::{Layer, ServiceExt, service_fn};

    let infos = Infos::default();
    let subscriber = tracing_subscriber::registry().with(infos.clone());
    let observer = AmplificationObserver::new();
    let service = AmplificationLayer::new(observer.clone())
        .route("POST /pay")
        .layer(service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    tracing::subscriber::with_default(subscriber, || {
        paused_runtime().block_on(async {
            for key in ["\"k-1\"", "\"k-2\""] {
                for _ in 0..20 {
                    let request = http::Request::post("/pay")
                        .header("idempotency-key", key)
                        .header("via", "1.1 gateway")
                        .body(())
                        .unwrap();
                    service.clone().oneshot(request).await.unwrap();
                }
            }
        });
    });
    let warnings: Vec<String> = infos
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|fields| fields.contains("retries are layered upstream"))
        .cloned()
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    assert!(warning.starts_with("WARN "), "{warning}");
    for expected in [
        "operation key \"k-1\" arrived 6 times within 0 ms",
        "no attempt number was announced, and 5 is the most",
        "from 1 source",
        "via: 1.1 gateway",
        "route=\"POST /pay\"",
    ] {
        assert!(warning.contains(expected), "{expected:?} in {warning}");
    }
    assert_eq!(observer.stats().amplified, 2);
}

/// Every WARN and INFO event's fields.
#[derive(Clone, Default)]
struct Infos(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Infos {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={:?} ", field.name(), value));
            }
        }
        if *event.metadata().level() <= tracing::Level::INFO {
            let mut fields = Fields(format!("{} ", event.metadata().level()));
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

/// An error that says what happened in `Display` and gives no `Classify::reason`.
#[derive(Debug)]
struct Overloaded;

impl std::fmt::Display for Overloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the pricing service is overloaded")
    }
}

impl retry_core::Classify for Overloaded {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

#[retryable(max = 2, base = "1ms")]
async fn overloaded() -> Result<(), Overloaded> {
    Err(Overloaded)
}

/// An error with neither `Display` nor a reason: its `Debug` is what there is.
#[derive(Debug)]
struct Opaque {
    #[expect(dead_code, reason = "read only through Debug, which is the point")]
    code: u16,
}

fn always(_: &Opaque) -> retry_core::Decision {
    retry_core::Decision::Retry
}

#[retryable(max = 2, base = "1ms", retry_if = always)]
async fn opaque() -> Result<(), Opaque> {
    Err(Opaque { code: 7 })
}

/// Part of the one test above (one subscriber at a time, see the module's doc).
fn at_info_retries_and_give_ups_name_the_function_and_the_error() {
    let infos = Infos::default();
    let subscriber = tracing_subscriber::registry()
        .with(infos.clone())
        .with(tracing_subscriber::filter::LevelFilter::INFO);
    tracing::subscriber::with_default(subscriber, || {
        paused_runtime().block_on(async {
            assert!(unavailable().await.is_err());
            assert!(overloaded().await.is_err());
            assert!(opaque().await.is_err());
        })
    });
    let events = infos.0.lock().unwrap().clone();
    // No event says `error=""`: without a reason, the error's `Display`, else its `Debug`.
    assert!(
        !events.iter().any(|e| e.contains("error=\"\"")),
        "{events:?}"
    );
    for (function, error) in [
        ("overloaded", "error=\"the pricing service is overloaded\""),
        ("opaque", "error=\"Opaque { code: 7 }\""),
    ] {
        let said: Vec<_> = events
            .iter()
            .filter(|e| e.contains(&format!("function=\"{function}\"")))
            .collect();
        assert_eq!(said.len(), 2, "a retry and a give-up: {said:?}");
        assert!(said.iter().all(|e| e.contains(error)), "{said:?}");
    }
    let events: Vec<_> = events
        .into_iter()
        .filter(|e| e.contains("function=\"unavailable\""))
        .collect();
    let retries: Vec<_> = events.iter().filter(|e| e.contains("retrying")).collect();
    assert_eq!(retries.len(), 2, "{events:?}");
    for retry in retries {
        assert!(retry.starts_with("INFO"), "{retry}");
        assert!(retry.contains("function=\"unavailable\""), "{retry}");
        assert!(
            retry.contains("error=\"503 Service Unavailable\""),
            "{retry}"
        );
    }
    let give_up = events
        .iter()
        .find(|e| e.contains("giving up"))
        .expect("a give-up");
    assert!(give_up.starts_with("WARN"), "{give_up}");
    assert!(give_up.contains("function=\"unavailable\""), "{give_up}");
    assert!(give_up.contains("module=\"tracing_events\""), "{give_up}");
    assert!(
        give_up.contains("error=\"503 Service Unavailable\""),
        "{give_up}"
    );
}

/// The target of every event and span retry-core emits.
#[derive(Clone, Default)]
struct Targets(Arc<Mutex<std::collections::BTreeSet<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Targets {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.record(event.metadata().target());
    }
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.record(attrs.metadata().target());
    }
}

impl Targets {
    fn record(&self, target: &str) {
        if target.starts_with("retry_core") {
            self.0.lock().unwrap().insert(target.to_owned());
        }
    }
}

#[derive(Debug)]
struct Refused;

impl retry_core::Classify for Refused {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

impl From<retry_core::dlq::DlqFailed> for Refused {
    fn from(_: retry_core::dlq::DlqFailed) -> Self {
        Refused
    }
}

impl From<retry_core::IdempotencyError> for Refused {
    fn from(_: retry_core::IdempotencyError) -> Self {
        Refused
    }
}

#[retryable(max = 2, base = "1ms", dlq(sink = letters, id = "m-1", original = "m-1"))]
async fn parked(letters: &retry_core::dlq::MemoryDeadLetters) -> Result<(), Refused> {
    Err(Refused)
}

/// A response JSON cannot hold (a map whose keys are not strings): the body runs, its response
/// is not stored, and the store says so.
#[retry_core::idempotent(key = n, store = inbox)]
async fn unstorable(
    inbox: &retry_core::idempotency::MemoryStore,
    n: u32,
) -> Result<std::collections::BTreeMap<(u32, u32), u32>, Refused> {
    Ok([((n, n), n)].into())
}

/// Part of the one test above. A filter names the modules a user can find in the docs
/// (`retry_core=info`, `retry_core::dlq=debug`), never a private file of the crate.
fn events_come_from_the_public_modules_they_are_about() {
    let targets = Targets::default();
    let subscriber = tracing_subscriber::registry().with(targets.clone());
    tracing::subscriber::with_default(subscriber, || {
        paused_runtime().block_on(async {
            assert!(unavailable().await.is_err());
            let letters = retry_core::dlq::MemoryDeadLetters::new();
            assert!(parked(&letters).await.is_err());
            let inbox = retry_core::idempotency::MemoryStore::new();
            assert!(unstorable(&inbox, 7).await.is_ok());
        })
    });
    let targets: Vec<String> = targets.0.lock().unwrap().iter().cloned().collect();
    assert_eq!(
        targets,
        ["retry_core", "retry_core::dlq", "retry_core::idempotency"],
        "the retries and the span, the parked letter, the response not stored"
    );
}

/// Every event at WARN or DEBUG saying a request was not sent again, with its level.
#[derive(Clone, Default)]
struct NotSentAgain(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NotSentAgain {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={:?} ", field.name(), value));
            }
        }
        let mut fields = Fields(format!("{} ", event.metadata().level()));
        event.record(&mut fields);
        if fields.0.contains("not sent again") {
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

/// Part of the one test above. A POST without `Idempotency-Key` answered 503 through
/// `RetryMiddleware` is not sent again and returns `Ok(503)`: the log is where a team learns
/// why, once per client (every call of an outage would flood it), with what to do.
fn a_request_not_sent_again_is_a_warning_once_per_function() {
    let said = NotSentAgain::default();
    let subscriber = tracing_subscriber::registry().with(said.clone());
    tracing::subscriber::with_default(subscriber, || {
        // Real sockets, so the real clock.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let app = axum::Router::new().route(
                "/pay",
                axum::routing::post(|| async { axum::http::StatusCode::SERVICE_UNAVAILABLE }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/pay", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await });
            let policy = retry_core::Policy::new()
                .max_attempts(3)
                .base(std::time::Duration::from_millis(1));
            let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(
                    retry_core::reqwest_middleware::RetryMiddleware::new(policy)
                        .name("payments-client"),
                )
                .build();
            for _ in 0..3 {
                let answer = client.post(&url).body("{}").send().await.unwrap();
                assert_eq!(answer.status(), 503);
            }
        })
    });
    let said = said.0.lock().unwrap().clone();
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(said[0].starts_with("WARN"), "{said:?}");
    assert!(said[0].contains("function=\"payments-client\""), "{said:?}");
    assert!(said[0].contains("send an Idempotency-Key"), "{said:?}");
    assert!(said[1..].iter().all(|e| e.starts_with("DEBUG")), "{said:?}");
}
