//! The client's `Idempotency-Key` over real loopback sockets (axum server, reqwest client, real
//! clock): one key per logical operation, the same key on every attempt of a `#[retryable]` call,
//! and, against an `IdempotencyLayer`, one effect per operation however often it is sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use retry_core::http::{IDEMPOTENCY_KEY, IdempotencyKey};
use retry_core::idempotency::MemoryStore;
use retry_core::reqwest::{HttpError, RequestBuilderExt, client_builder};
use retry_core::retryable;
use retry_core::tower::{IdempotencyLayer, NotApplied};

/// The `Idempotency-Key` of every request, in order of arrival.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Option<String>>>>);

impl Seen {
    fn keys(&self) -> Vec<Option<String>> {
        self.0.lock().unwrap().clone()
    }
}

/// Records the key, then fails the first two requests of each key with 503.
async fn pay(State(seen): State<Seen>, headers: HeaderMap) -> (StatusCode, String) {
    let key = headers
        .get(IDEMPOTENCY_KEY)
        .map(|value| value.to_str().unwrap().to_owned());
    let mut seen = seen.0.lock().unwrap();
    seen.push(key.clone());
    let attempt = seen.iter().filter(|k| **k == key).count();
    if attempt <= 2 {
        (StatusCode::SERVICE_UNAVAILABLE, "busy".to_owned())
    } else {
        (StatusCode::OK, format!("paid on attempt {attempt}"))
    }
}

async fn server(router: Router<Seen>) -> (String, Seen) {
    let seen = Seen::default();
    let router = router.with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (base, seen)
}

fn client() -> reqwest::Client {
    client_builder().build().unwrap()
}

/// The key comes in from outside: the same one on every attempt.
#[retryable(max = 3, base = "1ms", cap = "5ms")]
async fn pay_with(
    client: &reqwest::Client,
    url: &str,
    key: &IdempotencyKey,
) -> Result<String, HttpError> {
    let response = client
        .post(url)
        .idempotency_key(key)
        .body("{\"amount\":10}")
        .send_checked()
        .await?;
    Ok(response.text().await.unwrap_or_default())
}

/// By value: the macro clones the argument for each attempt, so this too sends one key.
#[retryable(max = 3, base = "1ms", cap = "5ms")]
async fn pay_owning(
    client: &reqwest::Client,
    url: &str,
    key: IdempotencyKey,
) -> Result<String, HttpError> {
    let response = client
        .post(url)
        .idempotency_key(&key)
        .body("{\"amount\":10}")
        .send_checked()
        .await?;
    Ok(response.text().await.unwrap_or_default())
}

/// The mistake: a key made inside the retried body is new on every attempt.
#[retryable(max = 3, base = "1ms", cap = "5ms")]
async fn pay_with_a_new_key_each_attempt(
    client: &reqwest::Client,
    url: &str,
) -> Result<String, HttpError> {
    let response = client
        .post(url)
        .idempotency_key(&IdempotencyKey::new())
        .body("{\"amount\":10}")
        .send_checked()
        .await?;
    Ok(response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn every_attempt_of_one_operation_carries_the_same_key() {
    let (base, seen) = server(Router::new().route("/pay", post(pay))).await;
    let (client, url) = (client(), format!("{base}/pay"));

    let first = IdempotencyKey::new();
    assert_eq!(
        pay_with(&client, &url, &first).await.unwrap(),
        "paid on attempt 3"
    );
    let second = IdempotencyKey::new();
    assert_eq!(
        pay_owning(&client, &url, second.clone()).await.unwrap(),
        "paid on attempt 3"
    );

    let keys = seen.keys();
    assert_eq!(keys.len(), 6, "three attempts per operation: {keys:?}");
    let sent = |key: &IdempotencyKey| Some(key.header_value().to_str().unwrap().to_owned());
    assert_eq!(keys[..3], [sent(&first), sent(&first), sent(&first)]);
    assert_eq!(keys[3..], [sent(&second), sent(&second), sent(&second)]);
    assert_ne!(first, second, "two logical operations, two keys");
    // Sent as the draft's structured-field string.
    assert_eq!(
        keys[0].as_deref(),
        Some(format!("\"{}\"", first.as_str()).as_str())
    );
}

#[tokio::test]
async fn a_key_made_inside_the_retry_changes_on_every_attempt() {
    let (base, seen) = server(Router::new().route("/pay", post(pay))).await;
    // Every attempt has a fresh key, so the server sees each as a first attempt: 503 three times.
    let error = pay_with_a_new_key_each_attempt(&client(), &format!("{base}/pay"))
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    let keys: HashMap<_, usize> = seen.keys().into_iter().fold(HashMap::new(), |mut n, k| {
        *n.entry(k).or_default() += 1;
        n
    });
    assert_eq!(keys.len(), 3, "three attempts, three keys: {keys:?}");
}

/// Refuses its first run with a 503 marked `NotApplied` (it charged nothing, so the layer frees
/// the key); counts its runs.
async fn charge(State(seen): State<Seen>) -> Response {
    let mut seen = seen.0.lock().unwrap();
    seen.push(None);
    match seen.len() {
        1 => (
            StatusCode::SERVICE_UNAVAILABLE,
            Extension(NotApplied),
            "busy",
        )
            .into_response(),
        n => (StatusCode::OK, format!("charged on run {n}")).into_response(),
    }
}

#[tokio::test]
async fn a_retried_operation_against_an_idempotency_layer_takes_effect_once() {
    let layer = IdempotencyLayer::unauthenticated(MemoryStore::new());
    let (base, seen) = server(Router::new().route("/charge", post(charge)).layer(layer)).await;
    let (client, url) = (client(), format!("{base}/charge"));

    let key = IdempotencyKey::new();
    // Attempt 1 gets 503 marked not applied (released), attempt 2 runs the handler and is stored.
    assert_eq!(
        pay_with(&client, &url, &key).await.unwrap(),
        "charged on run 2"
    );
    // The whole operation sent again (a manual resend, a redrive): answered from the store.
    assert_eq!(
        pay_with(&client, &url, &key).await.unwrap(),
        "charged on run 2"
    );
    assert_eq!(
        seen.keys().len(),
        2,
        "the handler ran twice: once failing, once charging"
    );

    // A new operation is a new key, and runs.
    let next = IdempotencyKey::new();
    assert_eq!(
        pay_with(&client, &url, &next).await.unwrap(),
        "charged on run 3"
    );
}

/// A key kept with the operation (an outbox row as JSON) reads back as the same key, and a
/// corrupted one is refused with the reason instead of being sent.
#[cfg(feature = "serde")]
#[test]
fn a_key_kept_in_a_serialised_row_reads_back_validated() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Outbox {
        payment: u64,
        key: IdempotencyKey,
    }
    let row = Outbox {
        payment: 7,
        key: IdempotencyKey::new(),
    };
    let text = serde_json::to_string(&row).unwrap();
    assert!(text.contains(&format!(r#""key":"{}""#, row.key)), "{text}");
    let back: Outbox = serde_json::from_str(&text).unwrap();
    assert_eq!(back.key, row.key);
    assert_eq!(back.payment, 7);
    let corrupt = serde_json::from_str::<Outbox>(r#"{"payment": 7, "key": "caf\u00e9"}"#)
        .err()
        .expect("a key that is not printable ASCII is refused");
    assert!(corrupt.to_string().contains("printable ASCII"), "{corrupt}");
    let wrong_type = serde_json::from_str::<Outbox>(r#"{"payment": 7, "key": 12}"#);
    assert!(wrong_type.is_err(), "a number is not a key");
}
