//! What an OpenTelemetry user sees (feature `opentelemetry`), with the API alone: a span context
//! made by hand, and a span that keeps the attributes set on it, made current with
//! `FutureExt::with_context` (no SDK, no exporter).
//!
//! - A dead letter parked under a span carries the span's 128-bit trace id (32 lowercase hex
//!   digits); without one, the call's own 64-bit id (16).
//! - `send_checked` sets `http.request.resend_count` on the current span for each resend: 1 on
//!   the second attempt, 2 on the third, nothing on the first; inside a retry collapsed into an
//!   outer one, the outer attempt's count; `RetryMiddleware` does the same for its resends.
#![cfg(feature = "opentelemetry")]

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, KeyValue, Value};
use retry_core::dlq::{DeadLetterStore as _, DlqFailed, MemoryDeadLetters};
use retry_core::reqwest::{HttpError, RequestBuilderExt as _};
use retry_core::{Classify, Decision, Policy, retryable};

// ---- dead letters ----

#[derive(Debug)]
enum Failed {
    Upstream,
    NotParked,
}

impl Classify for Failed {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

impl From<DlqFailed> for Failed {
    fn from(_: DlqFailed) -> Self {
        Failed::NotParked
    }
}

#[retryable(max = 2, base = "10ms", dlq(sink = letters, id = id, original = id))]
async fn give_up(letters: &MemoryDeadLetters, id: &str) -> Result<(), Failed> {
    Err(Failed::Upstream)
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn under_span(trace: &str) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_hex(trace).unwrap(),
        SpanId::from_hex("00f067aa0ba902b7").unwrap(),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

async fn trace_id_of(letters: &MemoryDeadLetters, id: &str) -> String {
    letters.get(id).await.unwrap().unwrap().trace_id
}

#[tokio::test(start_paused = true)]
async fn a_letter_parked_under_a_span_carries_its_trace_id() {
    let letters = MemoryDeadLetters::new();
    let parked = give_up(&letters, "M-1")
        .with_context(under_span(TRACE))
        .await;
    assert!(matches!(parked, Err(Failed::Upstream)), "{parked:?}");
    assert_eq!(trace_id_of(&letters, "M-1").await, TRACE);

    // No span: the call's own id, 16 hex digits.
    give_up(&letters, "M-2").await.unwrap_err();
    let own = trace_id_of(&letters, "M-2").await;
    assert_eq!(own.len(), 16, "{own}");
    assert!(own.bytes().all(|b| b.is_ascii_hexdigit()), "{own}");

    // A span context that is not valid (all zeros) is no trace to lead to.
    let invalid = Context::new().with_remote_span_context(SpanContext::empty_context());
    give_up(&letters, "M-3")
        .with_context(invalid)
        .await
        .unwrap_err();
    assert_eq!(trace_id_of(&letters, "M-3").await.len(), 16);
}

// ---- resends ----

/// A span that keeps the attributes set on it.
#[derive(Debug, Clone, Default)]
struct Recorded(Arc<Mutex<Vec<KeyValue>>>);

impl Recorded {
    fn span(&self) -> RecordingSpan {
        RecordingSpan {
            recorded: self.clone(),
            context: SpanContext::new(
                TraceId::from_hex(TRACE).unwrap(),
                SpanId::from_hex("00f067aa0ba902b7").unwrap(),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
        }
    }

    /// The values of `http.request.resend_count`, in the order they were set.
    fn resend_counts(&self) -> Vec<i64> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|kv| kv.key.as_str() == "http.request.resend_count")
            .map(|kv| match kv.value {
                Value::I64(n) => n,
                ref other => panic!("http.request.resend_count is an int, not {other:?}"),
            })
            .collect()
    }
}

#[derive(Debug)]
struct RecordingSpan {
    recorded: Recorded,
    context: SpanContext,
}

impl opentelemetry::trace::Span for RecordingSpan {
    fn add_event_with_timestamp<T>(&mut self, _: T, _: SystemTime, _: Vec<KeyValue>)
    where
        T: Into<Cow<'static, str>>,
    {
    }
    fn span_context(&self) -> &SpanContext {
        &self.context
    }
    fn is_recording(&self) -> bool {
        true
    }
    fn set_attribute(&mut self, attribute: KeyValue) {
        self.recorded.0.lock().unwrap().push(attribute);
    }
    fn set_status(&mut self, _: Status) {}
    fn update_name<T>(&mut self, _: T)
    where
        T: Into<Cow<'static, str>>,
    {
    }
    fn add_link(&mut self, _: SpanContext, _: Vec<KeyValue>) {}
    fn end_with_timestamp(&mut self, _: SystemTime) {}
}

/// A loopback server whose `/quote` answers 503 `failures` times, then 200.
async fn flaky_server(failures: u32) -> String {
    let hits = Arc::new(AtomicU32::new(0));
    let app = Router::new().route(
        "/quote",
        get(move || {
            let hits = hits.clone();
            async move {
                if hits.fetch_add(1, Ordering::SeqCst) < failures {
                    (StatusCode::SERVICE_UNAVAILABLE, "busy")
                } else {
                    (StatusCode::OK, "42")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/quote", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[retryable(max = 3, base = "1ms", cap = "1ms")]
async fn quote(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    let response = client.get(url).send_checked().await?;
    Ok(response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn each_resend_sets_its_count_on_the_current_span() {
    let client = retry_core::reqwest::client_builder().build().unwrap();
    let url = flaky_server(2).await;
    let recorded = Recorded::default();
    let answer = quote(&client, &url)
        .with_context(Context::new().with_span(recorded.span()))
        .await
        .unwrap();
    assert_eq!(answer, "42");
    assert_eq!(
        recorded.resend_counts(),
        [1, 2],
        "attempt 2 -> 1, attempt 3 -> 2"
    );

    // A request that goes through at once is no resend: nothing is set.
    let recorded = Recorded::default();
    quote(&client, &flaky_server(0).await)
        .with_context(Context::new().with_span(recorded.span()))
        .await
        .unwrap();
    assert_eq!(recorded.resend_counts(), Vec::<i64>::new());
}

/// The same through `RetryMiddleware`, the client-wide retry: each resend sets its count too.
#[cfg(feature = "reqwest-middleware")]
#[tokio::test]
async fn each_resend_through_the_middleware_sets_its_count() {
    use retry_core::reqwest_middleware::RetryMiddleware;

    let policy = Policy::new()
        .max_attempts(3)
        .base(Duration::from_millis(1))
        .cap(Duration::from_millis(1));
    let client = reqwest_middleware::ClientBuilder::new(
        retry_core::reqwest::client_builder().build().unwrap(),
    )
    .with(RetryMiddleware::new(policy))
    .build();
    let url = flaky_server(2).await;
    let recorded = Recorded::default();
    let response = client
        .get(&url)
        .send()
        .with_context(Context::new().with_span(recorded.span()))
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "42");
    assert_eq!(recorded.resend_counts(), [1, 2]);
}

static INNER: Policy = Policy::new()
    .max_attempts(3)
    .base(Duration::from_millis(1))
    .cap(Duration::from_millis(1));

/// A retry the compiler cannot see inside the caller's: it runs one attempt per outer attempt.
async fn through_a_helper(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    INNER
        .retry(|| async {
            let response = client.get(url).send_checked().await?;
            Ok::<_, HttpError>(response.text().await.unwrap_or_default())
        })
        .await
}

#[retryable(max = 3, base = "1ms", cap = "1ms")]
async fn outer(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    through_a_helper(client, url).await
}

#[tokio::test]
async fn a_collapsed_inner_retry_counts_the_outer_attempts() {
    let client = retry_core::reqwest::client_builder().build().unwrap();
    let url = flaky_server(2).await;
    let recorded = Recorded::default();
    let answer = outer(&client, &url)
        .with_context(Context::new().with_span(recorded.span()))
        .await
        .unwrap();
    assert_eq!(answer, "42");
    assert_eq!(recorded.resend_counts(), [1, 2]);
}
