//! Classification of HTTP over real loopback sockets (axum server, reqwest client, real clock):
//! what the server sees for each kind of failure inside `#[retryable(max = 4)]`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use retry_core::reqwest::{HttpError, RequestBuilderExt, client_builder};
use retry_core::{Classify, Decision, retryable};

/// When each path was requested.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<HashMap<String, Vec<Instant>>>>);

impl Seen {
    fn record(&self, path: String) {
        self.0
            .lock()
            .unwrap()
            .entry(path)
            .or_default()
            .push(Instant::now());
    }
    fn count(&self, path: &str) -> usize {
        self.0.lock().unwrap().get(path).map_or(0, Vec::len)
    }
    fn times(&self, path: &str) -> Vec<Instant> {
        self.0
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }
}

async fn status(State(seen): State<Seen>, Path(code): Path<u16>) -> StatusCode {
    seen.record(format!("/status/{code}"));
    StatusCode::from_u16(code).unwrap()
}

async fn limited(
    State(seen): State<Seen>,
    Path(secs): Path<u64>,
) -> (StatusCode, HeaderMap, &'static str) {
    seen.record(format!("/limited/{secs}"));
    let mut headers = HeaderMap::new();
    headers.insert("retry-after", secs.to_string().parse().unwrap());
    (StatusCode::TOO_MANY_REQUESTS, headers, "slow down")
}

async fn slow(State(seen): State<Seen>, Path(name): Path<String>) -> &'static str {
    seen.record(format!("/slow/{name}"));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    "too late"
}

/// Answers after 500 ms: longer than the `attempt_timeout` below, which cuts it off.
async fn sleepy(State(seen): State<Seen>, Path(name): Path<String>) -> &'static str {
    seen.record(format!("/sleepy/{name}"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    "too late"
}

async fn server() -> (String, Seen) {
    let seen = Seen::default();
    let router = Router::new()
        .route("/status/{code}", get(status).post(status))
        .route("/limited/{secs}", get(limited))
        .route("/slow/{name}", get(slow).post(slow))
        .route("/sleepy/{name}", get(sleepy).post(sleepy))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (base, seen)
}

/// Its timeout cuts off `/slow` (1 s) and nothing else, even on a loaded machine, where a
/// loopback answer has been seen to take longer than 50 ms.
fn client() -> reqwest::Client {
    client_builder()
        .timeout(Duration::from_millis(250))
        .build()
        .unwrap()
}

#[retryable(max = 4, base = "1ms", cap = "5ms")]
async fn get_url(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    Ok(client
        .get(url)
        .send_checked()
        .await?
        .text()
        .await
        .unwrap_or_default())
}

#[retryable(max = 4, base = "1ms", cap = "5ms")]
async fn post_url(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
) -> Result<String, HttpError> {
    let mut request = client.post(url).body("{\"amount\": 10}");
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    Ok(request
        .send_checked()
        .await?
        .text()
        .await
        .unwrap_or_default())
}

#[retryable(max = 4, base = "1ms", cap = "5ms", max_retry_after = "60s")]
async fn get_patiently(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    Ok(client
        .get(url)
        .send_checked()
        .await?
        .text()
        .await
        .unwrap_or_default())
}

#[tokio::test]
async fn connection_refused_is_retried_to_max() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let attempts = Arc::new(Mutex::new(0));
    let counted = attempts.clone();
    let on_retry = move |_: u32, e: &HttpError, _: Duration| {
        assert!(e.transport().is_some_and(reqwest::Error::is_connect));
        *counted.lock().unwrap() += 1;
    };
    let result = retry_core::Policy::new()
        .max_attempts(4)
        .base(Duration::from_millis(1))
        .retry(|| client().get(&closed).send_checked())
        .on_retry(on_retry)
        .await;
    let error = result.unwrap_err();
    assert_eq!(*attempts.lock().unwrap(), 3, "3 waits: 4 attempts");
    assert_eq!(error.classify(), Decision::Retry);
    assert_eq!(error.reason().as_deref(), Some("connect error"));
    // The same through the attribute.
    assert!(get_url(&client(), &closed).await.is_err());
}

#[tokio::test]
async fn a_get_that_times_out_is_retried_to_max() {
    let (base, seen) = server().await;
    let error = get_url(&client(), &format!("{base}/slow/get"))
        .await
        .unwrap_err();
    assert_eq!(seen.count("/slow/get"), 4);
    assert_eq!(error.reason().as_deref(), Some("timeout"));
}

#[tokio::test]
async fn server_errors_are_retried_to_max() {
    let (base, seen) = server().await;
    for code in [500, 502, 503, 504] {
        let error = get_url(&client(), &format!("{base}/status/{code}"))
            .await
            .unwrap_err();
        assert_eq!(seen.count(&format!("/status/{code}")), 4, "{code}");
        assert_eq!(error.status().map(|s| s.as_u16()), Some(code));
    }
}

#[tokio::test]
async fn client_errors_are_sent_once() {
    let (base, seen) = server().await;
    for code in [400, 401, 403, 404, 409, 422] {
        let error = get_url(&client(), &format!("{base}/status/{code}"))
            .await
            .unwrap_err();
        assert_eq!(seen.count(&format!("/status/{code}")), 1, "{code}");
        assert_eq!(error.classify(), Decision::Stop);
    }
    let error = get_url(&client(), &format!("{base}/status/404"))
        .await
        .unwrap_err();
    assert_eq!(error.reason().as_deref(), Some("404 Not Found"));
}

#[retryable(max = 2, base = "1ms", cap = "5ms")]
async fn get_twice(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    Ok(client
        .get(url)
        .send_checked()
        .await?
        .text()
        .await
        .unwrap_or_default())
}

#[tokio::test]
async fn retry_after_is_waited_for_at_least_as_long_as_asked() {
    let (base, seen) = server().await;
    let error = get_twice(&client(), &format!("{base}/limited/2"))
        .await
        .unwrap_err();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(2)));
    assert_eq!(error.body_excerpt(), "slow down");
    let times = seen.times("/limited/2");
    assert_eq!(times.len(), 2);
    let waited = times[1] - times[0];
    assert!(
        waited >= Duration::from_secs(2),
        "came back after {waited:?}, not the 2 s asked"
    );
}

#[tokio::test]
async fn retry_after_beyond_max_retry_after_gives_up_at_once() {
    let (base, seen) = server().await;
    let started = Instant::now();
    assert!(
        get_patiently(&client(), &format!("{base}/limited/120"))
            .await
            .is_err()
    );
    assert_eq!(seen.count("/limited/120"), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_post_that_times_out_is_resent_only_with_an_idempotency_key() {
    let (base, seen) = server().await;
    let error = post_url(&client(), &format!("{base}/slow/bare"), None)
        .await
        .unwrap_err();
    assert_eq!(seen.count("/slow/bare"), 1);
    assert_eq!(error.classify(), Decision::Stop);
    assert_eq!(
        error.reason().as_deref(),
        Some("POST without Idempotency-Key after timeout")
    );

    assert!(
        post_url(&client(), &format!("{base}/slow/keyed"), Some("k-1"))
            .await
            .is_err()
    );
    assert_eq!(seen.count("/slow/keyed"), 4);
}

#[tokio::test]
async fn a_post_answered_503_is_resent_only_with_an_idempotency_key() {
    let (base, seen) = server().await;
    let error = post_url(&client(), &format!("{base}/status/503"), None)
        .await
        .unwrap_err();
    assert_eq!(seen.count("/status/503"), 1);
    let reason = error.reason();
    assert_eq!(
        reason.as_deref(),
        Some("POST without Idempotency-Key after 503 Service Unavailable")
    );
    // The error a caller prints says why there was one request, not four.
    let shown = error.to_string();
    assert!(
        shown.ends_with(
            "answered 503 Service Unavailable (not sent again: without Idempotency-Key it may have taken effect)"
        ),
        "{shown}"
    );

    let (base, seen) = server().await;
    assert!(
        post_url(&client(), &format!("{base}/status/503"), Some("k-2"))
            .await
            .is_err()
    );
    assert_eq!(seen.count("/status/503"), 4);
    let keyed = post_url(&client(), &format!("{base}/status/503"), Some("k-3"))
        .await
        .unwrap_err();
    assert!(!keyed.to_string().contains("not sent again"), "{keyed}");
    // A refused request had no effect: 429 is resent even without a key.
    assert!(
        post_url(&client(), &format!("{base}/status/429"), None)
            .await
            .is_err()
    );
    assert_eq!(seen.count("/status/429"), 4);
}

#[tokio::test]
async fn a_304_or_a_redirect_not_followed_is_an_answer_not_an_error() {
    let (base, seen) = server().await;
    let no_redirects = client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    for code in [304, 301, 302] {
        let response = no_redirects
            .get(format!("{base}/status/{code}"))
            .send_checked()
            .await
            .unwrap_or_else(|e| panic!("{code} came back as an error: {e}"));
        assert_eq!(response.status().as_u16(), code);
        assert_eq!(seen.count(&format!("/status/{code}")), 1);
    }
}

#[tokio::test]
async fn a_host_name_that_does_not_exist_is_not_retried() {
    // RFC 6761: resolvers answer "no such name" for `.invalid` without asking the network.
    let started = Instant::now();
    let mut attempts = 0;
    let error = retry_core::Policy::new()
        .max_attempts(4)
        .base(Duration::from_millis(1))
        .retry(|| {
            attempts += 1;
            client()
                .get("http://no-such-host.retry-core.invalid/")
                .send_checked()
        })
        .await
        .unwrap_err();
    assert!(error.transport().is_some_and(reqwest::Error::is_connect));
    assert_eq!(error.classify(), Decision::Stop, "{error:?}");
    assert_eq!(error.reason().as_deref(), Some("no such host"));
    assert_eq!(attempts, 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    // The bare reqwest error says the same.
    assert_eq!(error.transport().unwrap().classify(), Decision::Stop);
}

#[retryable(max = 3, base = "1ms", cap = "5ms", attempt_timeout = "100ms")]
async fn post_cut_off(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
) -> Result<String, HttpError> {
    let mut request = client.post(url).body("{\"amount\": 10}");
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    Ok(request
        .send_checked()
        .await?
        .text()
        .await
        .unwrap_or_default())
}

#[retryable(max = 3, base = "1ms", cap = "5ms", attempt_timeout = "100ms")]
async fn get_cut_off(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    Ok(client
        .get(url)
        .send_checked()
        .await?
        .text()
        .await
        .unwrap_or_default())
}

/// No timeout of reqwest's own: only `attempt_timeout` cuts the requests off.
fn patient_client() -> reqwest::Client {
    client_builder().build().unwrap()
}

#[tokio::test]
async fn a_post_cut_off_by_attempt_timeout_is_resent_only_with_an_idempotency_key() {
    let (base, seen) = server().await;
    let error = post_cut_off(&patient_client(), &format!("{base}/sleepy/bare"), None)
        .await
        .unwrap_err();
    assert_eq!(seen.count("/sleepy/bare"), 1, "the unkeyed POST was resent");
    assert_eq!(error.classify(), Decision::Stop);
    assert_eq!(
        error.reason().as_deref(),
        Some("POST without Idempotency-Key cut off by attempt_timeout (100ms)")
    );

    let error = post_cut_off(
        &patient_client(),
        &format!("{base}/sleepy/keyed"),
        Some("k-3"),
    )
    .await
    .unwrap_err();
    assert_eq!(seen.count("/sleepy/keyed"), 3);
    assert_eq!(
        error.reason().as_deref(),
        Some("attempt timed out after 100ms")
    );

    assert!(
        get_cut_off(&patient_client(), &format!("{base}/sleepy/get"))
            .await
            .is_err()
    );
    assert_eq!(seen.count("/sleepy/get"), 3);
}

#[tokio::test]
async fn a_post_refused_before_the_timeout_is_resent() {
    // Never connected: the timeout that follows cuts off nothing that reached a server.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let calls = std::sync::atomic::AtomicU32::new(0);
    let error = retry_core::Policy::new()
        .max_attempts(3)
        .base(Duration::from_millis(1))
        .retry(|| async {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            retry_core::__private::with_timeout(Duration::from_millis(100), async {
                let refused = patient_client().post(&closed).send_checked().await;
                assert!(refused.is_err());
                std::future::pending::<Result<(), HttpError>>().await
            })
            .await
        })
        .await
        .unwrap_err();
    assert_eq!(error.classify(), Decision::Retry);
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 3);
}
