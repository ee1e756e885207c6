//! `IdempotencyLayer` on a real axum server over loopback (reqwest client, real clock), against a
//! `MemoryStore` and a `SqliteStore` on a file: every answer of the `Idempotency-Key` draft, the
//! replay, scoping by client, credentials never replayed, limits, 5xx stored and replayed,
//! `NotApplied` freeing the key, a panic keeping it failed, namespaces, and a store that is
//! down.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::routing::post;
use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, Limits, MemoryStore, StoreError,
};
use retry_core::tower::{IdempotencyLayer, NotApplied};
use retry_sqlite::SqliteStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::tempdir;

use tempdir::TempDir;

const CHARGE_ID: HeaderName = HeaderName::from_static("x-charge-id");
const NOT_LISTED: HeaderName = HeaderName::from_static("x-not-listed");
const REPLAYED: &str = "idempotent-replayed";
const MAX_BODY: usize = 1024;

/// What the handlers share with the test.
#[derive(Clone, Default)]
struct App {
    /// How many times any handler ran.
    runs: Arc<AtomicU32>,
    /// Signalled when `/slow` has started.
    entered: Arc<Notify>,
    /// `/slow` waits for it.
    gate: Arc<Notify>,
}

impl App {
    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }
    fn run(&self) -> u32 {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// A payment: 201 with a body naming the caller and the charge, headers on and off the replay
/// allow-list, and a session cookie.
async fn pay(
    State(app): State<App>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, HeaderMap, String) {
    let charge = app.run();
    let by = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("nobody");
    let mut out = HeaderMap::new();
    out.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    out.insert(LOCATION, format!("/payments/{charge}").parse().unwrap());
    out.insert(CHARGE_ID, charge.to_string().parse().unwrap());
    out.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    out.insert(
        SET_COOKIE,
        HeaderValue::from_static("session=secret; HttpOnly"),
    );
    out.insert(NOT_LISTED, HeaderValue::from_static("yes"));
    let json = serde_json::json!({ "charge": charge, "by": by, "request": body });
    (StatusCode::CREATED, out, json.to_string())
}

/// Answers with the client's key, as the layer hands it to the handler.
async fn echo_key(
    State(app): State<App>,
    axum::Extension(key): axum::Extension<retry_core::http::IdempotencyKey>,
) -> String {
    app.run();
    // The same key, as the claim's body reads it (for code that has no request at hand).
    let current = retry_core::idempotency::current_key().unwrap_or_default();
    format!("{}\n{current}", key.as_str())
}

/// Runs until the test opens the gate.
async fn slow(State(app): State<App>, body: String) -> String {
    app.run();
    app.entered.notify_one();
    app.gate.notified().await;
    format!("slow done: {body}")
}

/// 503 on its first run, 200 after.
async fn flaky(State(app): State<App>) -> (StatusCode, String) {
    match app.run() {
        1 => (StatusCode::SERVICE_UNAVAILABLE, "try again".to_owned()),
        n => (StatusCode::OK, format!("ok on run {n}")),
    }
}

/// 503 marked `NotApplied` on its first run (nothing was done), 200 after.
async fn refused(State(app): State<App>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match app.run() {
        1 => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Extension(NotApplied),
            "nothing done",
        )
            .into_response(),
        n => (StatusCode::OK, format!("ok on run {n}")).into_response(),
    }
}

/// Counts its run, then panics.
async fn panics(State(app): State<App>) -> String {
    app.run();
    panic!("the handler broke after its effect");
}

/// A 10 kB body.
async fn big(State(app): State<App>) -> String {
    app.run();
    "x".repeat(10_000)
}

/// The test's authentication: the bearer token is the client.
fn bearer(parts: &Parts) -> Option<String> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

struct Server {
    base: String,
    app: App,
    http: reqwest::Client,
    _dir: Option<TempDir>,
}

/// A response, read whole.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The RFC 9457 problem it carries.
    fn problem(&self) -> serde_json::Value {
        assert_eq!(
            self.headers[CONTENT_TYPE],
            "application/problem+json",
            "{}: {}",
            self.status,
            self.text()
        );
        let problem: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        assert_eq!(problem["status"], self.status, "{problem}");
        problem
    }

    fn replayed(&self) -> bool {
        match self.headers.get(REPLAYED) {
            Some(value) => {
                assert_eq!(value, "?1");
                true
            }
            None => false,
        }
    }
}

/// Serves `/payments`, `/slow`, `/flaky` and `/big` behind an authenticated layer, and
/// `/open/flaky` behind an unauthenticated one whose key is optional, both on `store`.
async fn serve<St: IdempotencyStore + 'static>(store: Arc<St>, dir: Option<TempDir>) -> Server {
    let app = App::default();
    let authenticated = IdempotencyLayer::new(Arc::clone(&store), bearer)
        .replay_headers([CONTENT_TYPE, LOCATION, CACHE_CONTROL])
        .unwrap()
        .max_body_bytes(MAX_BODY)
        .name("test_payments");
    let open = IdempotencyLayer::unauthenticated(store).required(false);
    let router = Router::new()
        .route("/payments", post(pay).get(|| async { "listed" }))
        .route("/slow", post(slow))
        .route("/flaky", post(flaky))
        .route("/big", post(big))
        .route("/refused", post(refused))
        .route("/panics", post(panics))
        .route("/echo-key", post(echo_key))
        .layer(authenticated)
        .merge(Router::new().route("/open/flaky", post(flaky)).layer(open))
        .with_state(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let http = retry_core::reqwest::client_builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    Server {
        base,
        app,
        http,
        _dir: dir,
    }
}

impl Server {
    /// POSTs `body` to `path` as `client` (a bearer token) with `key` (the raw header value).
    async fn post(
        &self,
        path: &str,
        client: Option<&str>,
        key: Option<&str>,
        body: &str,
    ) -> Answer {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .body(body.to_owned());
        if let Some(client) = client {
            request = request.header(AUTHORIZATION, format!("Bearer {client}"));
        }
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = request.send().await.unwrap();
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.unwrap().to_vec(),
        }
    }
}

async fn memory() -> Server {
    serve(Arc::new(MemoryStore::new()), None).await
}

async fn sqlite() -> Server {
    let dir = TempDir::new("idempotency-layer");
    let store = SqliteStore::open(dir.file("idempotency.sqlite3")).unwrap();
    serve(Arc::new(store), Some(dir)).await
}

/// The same scenarios against each store.
macro_rules! scenarios {
    ($($store:ident),*) => {$(
        mod $store {
            #[tokio::test]
            async fn missing_key_is_400() {
                super::missing_key_is_400(super::$store().await).await;
            }
            #[tokio::test]
            async fn same_key_in_flight_is_409() {
                super::same_key_in_flight_is_409(super::$store().await).await;
            }
            #[tokio::test]
            async fn same_key_with_another_request_is_422() {
                super::same_key_with_another_request_is_422(super::$store().await).await;
            }
            #[tokio::test]
            async fn a_resend_gets_the_first_response_byte_for_byte() {
                super::a_resend_gets_the_first_response_byte_for_byte(super::$store().await).await;
            }
            #[tokio::test]
            async fn another_client_never_reads_a_response_by_its_key() {
                super::another_client_never_reads_a_response_by_its_key(super::$store().await)
                    .await;
            }
            #[tokio::test]
            async fn malformed_or_oversize_keys_are_400() {
                super::malformed_or_oversize_keys_are_400(super::$store().await).await;
            }
            #[tokio::test]
            async fn oversize_bodies_are_413() {
                super::oversize_bodies_are_413(super::$store().await).await;
            }
            #[tokio::test]
            async fn unauthenticated_requests_are_401() {
                super::unauthenticated_requests_are_401(super::$store().await).await;
            }
            #[tokio::test]
            async fn a_server_error_is_stored_and_replayed() {
                super::a_server_error_is_stored_and_replayed(super::$store().await).await;
            }
            #[tokio::test]
            async fn not_applied_frees_the_key() {
                super::not_applied_frees_the_key(super::$store().await).await;
            }
            #[tokio::test]
            async fn a_panic_keeps_the_key_failed() {
                super::a_panic_keeps_the_key_failed(super::$store().await).await;
            }
            #[tokio::test]
            async fn the_handler_reads_the_clients_key_unescaped() {
                super::the_handler_reads_the_clients_key_unescaped(super::$store().await).await;
            }
            #[tokio::test]
            async fn an_unauthenticated_layer_with_an_optional_key() {
                super::an_unauthenticated_layer_with_an_optional_key(super::$store().await).await;
            }
        }
    )*};
}

scenarios!(memory, sqlite);

async fn missing_key_is_400(server: Server) {
    let answer = server.post("/payments", Some("alice"), None, "{}").await;
    assert_eq!(answer.status, 400);
    let problem = answer.problem();
    assert_eq!(problem["title"], "Idempotency-Key is missing");
    assert_eq!(server.app.runs(), 0, "the handler must not run");

    // Safe methods pass straight through, key or not.
    let listed = server
        .http
        .get(format!("{}/payments", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(listed.text().await.unwrap(), "listed");
}

async fn same_key_in_flight_is_409(server: Server) {
    let server = Arc::new(server);
    let first = tokio::spawn({
        let server = Arc::clone(&server);
        async move {
            server
                .post("/slow", Some("alice"), Some("\"k-slow\""), "one")
                .await
        }
    });
    server.app.entered.notified().await;

    let second = server
        .post("/slow", Some("alice"), Some("\"k-slow\""), "one")
        .await;
    assert_eq!(second.status, 409, "{}", second.text());
    assert_eq!(
        second.problem()["title"],
        "A request is outstanding for this Idempotency-Key"
    );
    assert_eq!(second.headers["retry-after"], "1");

    server.app.gate.notify_one();
    let first = first.await.unwrap();
    assert_eq!(
        (first.status, first.text()),
        (200, "slow done: one".to_owned())
    );
    assert!(!first.replayed());

    let third = server
        .post("/slow", Some("alice"), Some("\"k-slow\""), "one")
        .await;
    assert_eq!((third.status, &third.body), (200, &first.body));
    assert!(third.replayed());
    assert_eq!(
        server.app.runs(),
        1,
        "the handler ran once for three requests"
    );
}

async fn same_key_with_another_request_is_422(server: Server) {
    let first = server
        .post(
            "/payments",
            Some("alice"),
            Some("\"k-422\""),
            "{\"amount\":10}",
        )
        .await;
    assert_eq!(first.status, 201);

    let other_body = server
        .post(
            "/payments",
            Some("alice"),
            Some("\"k-422\""),
            "{\"amount\":99}",
        )
        .await;
    assert_eq!(other_body.status, 422, "{}", other_body.text());
    let problem = other_body.problem();
    assert_eq!(problem["title"], "Idempotency-Key is already used");
    assert_eq!(
        problem["type"],
        "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"
    );

    let other_query = server
        .post(
            "/payments?currency=eur",
            Some("alice"),
            Some("\"k-422\""),
            "{\"amount\":10}",
        )
        .await;
    assert_eq!(other_query.status, 422);
    let other_path = server
        .post(
            "/flaky",
            Some("alice"),
            Some("\"k-422\""),
            "{\"amount\":10}",
        )
        .await;
    assert_eq!(other_path.status, 422);
    assert_eq!(server.app.runs(), 1);
}

async fn a_resend_gets_the_first_response_byte_for_byte(server: Server) {
    let first = server
        .post(
            "/payments",
            Some("alice"),
            Some("\"k-replay\""),
            "{\"amount\":10}",
        )
        .await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    // The first response is the handler's own, cookie and all.
    assert_eq!(first.headers[SET_COOKIE], "session=secret; HttpOnly");
    assert_eq!(first.headers[NOT_LISTED], "yes");

    let resend = server
        .post(
            "/payments",
            Some("alice"),
            Some("\"k-replay\""),
            "{\"amount\":10}",
        )
        .await;
    assert!(resend.replayed());
    assert_eq!(resend.status, first.status);
    assert_eq!(
        resend.body,
        first.body,
        "{} vs {}",
        resend.text(),
        first.text()
    );
    for name in [CONTENT_TYPE, LOCATION, CACHE_CONTROL] {
        assert_eq!(
            resend.headers.get(&name),
            first.headers.get(&name),
            "{name}"
        );
    }
    assert!(
        resend.headers.get(SET_COOKIE).is_none(),
        "a replay never carries Set-Cookie"
    );
    for name in [NOT_LISTED, CHARGE_ID] {
        assert!(
            resend.headers.get(&name).is_none(),
            "only allow-listed headers are replayed: {name}"
        );
    }

    // The bare form of the same key is the same key.
    let bare = server
        .post(
            "/payments",
            Some("alice"),
            Some("k-replay"),
            "{\"amount\":10}",
        )
        .await;
    assert!(bare.replayed());
    assert_eq!(bare.body, first.body);
    assert_eq!(server.app.runs(), 1, "the handler ran once");
}

async fn another_client_never_reads_a_response_by_its_key(server: Server) {
    let alice = server
        .post(
            "/payments",
            Some("alice"),
            Some("\"shared\""),
            "{\"amount\":10}",
        )
        .await;
    assert_eq!(alice.status, 201);
    assert!(alice.text().contains("Bearer alice"));

    let bob = server
        .post(
            "/payments",
            Some("bob"),
            Some("\"shared\""),
            "{\"amount\":10}",
        )
        .await;
    assert_eq!(bob.status, 201);
    assert!(!bob.replayed(), "bob's request ran on its own");
    assert!(bob.text().contains("Bearer bob"), "{}", bob.text());
    assert!(
        !bob.text().contains("alice"),
        "bob must never see alice's response"
    );
    assert_eq!(server.app.runs(), 2);

    let bob_again = server
        .post(
            "/payments",
            Some("bob"),
            Some("\"shared\""),
            "{\"amount\":10}",
        )
        .await;
    assert!(bob_again.replayed());
    assert_eq!(bob_again.body, bob.body);
    assert_eq!(server.app.runs(), 2);
}

async fn malformed_or_oversize_keys_are_400(server: Server) {
    let long = format!("\"{}\"", "k".repeat(256));
    let answer = server
        .post("/payments", Some("alice"), Some(&long), "{}")
        .await;
    assert_eq!(answer.status, 400);
    let problem = answer.problem();
    assert_eq!(problem["title"], "Idempotency-Key is too long");
    assert_eq!(
        problem["detail"],
        "the key is 256 bytes; at most 255 are allowed"
    );

    let longest = format!("\"{}\"", "k".repeat(255));
    assert_eq!(
        server
            .post("/payments", Some("alice"), Some(&longest), "{}")
            .await
            .status,
        201
    );

    for bad in ["\"unterminated", "\"\"", "\"k\";param=1", "two words"] {
        let answer = server
            .post("/payments", Some("alice"), Some(bad), "{}")
            .await;
        assert_eq!(answer.status, 400, "{bad}");
        assert_eq!(
            answer.problem()["title"],
            "Idempotency-Key is malformed",
            "{bad}"
        );
    }
    assert_eq!(server.app.runs(), 1);
}

async fn oversize_bodies_are_413(server: Server) {
    let body = "x".repeat(MAX_BODY + 1);
    let answer = server
        .post("/payments", Some("alice"), Some("\"k-big\""), &body)
        .await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.problem()["title"], "Payload Too Large");

    // Without Content-Length the limit holds while the body streams in.
    let address = server.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let chunk = "y".repeat(MAX_BODY);
    let request = format!(
        "POST /payments HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer alice\r\n\
         Idempotency-Key: \"k-chunked\"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         {len:x}\r\n{chunk}\r\n{len:x}\r\n{chunk}\r\n0\r\n\r\n",
        len = chunk.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 413 "), "{response}");

    // At the limit it runs.
    let fits = "x".repeat(MAX_BODY);
    assert_eq!(
        server
            .post("/payments", Some("alice"), Some("\"k-fits\""), &fits)
            .await
            .status,
        201
    );
    assert_eq!(server.app.runs(), 1);
}

async fn unauthenticated_requests_are_401(server: Server) {
    let answer = server
        .post("/payments", None, Some("\"k-anon\""), "{}")
        .await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.problem()["title"], "Unauthorized");
    // Authentication is judged before the key.
    assert_eq!(server.post("/payments", None, None, "{}").await.status, 401);
    assert_eq!(server.app.runs(), 0);
}

async fn a_server_error_is_stored_and_replayed(server: Server) {
    let failed = server
        .post("/flaky", Some("alice"), Some("\"k-flaky\""), "")
        .await;
    assert_eq!(
        (failed.status, failed.text()),
        (503, "try again".to_owned())
    );

    // The handler started: its 503 may have come after its effect, so it is the answer.
    let resent = server
        .post("/flaky", Some("alice"), Some("\"k-flaky\""), "")
        .await;
    assert!(resent.replayed(), "the 503 was stored");
    assert_eq!(
        (resent.status, resent.text()),
        (503, "try again".to_owned())
    );
    assert_eq!(server.app.runs(), 1, "the handler ran once");
}

async fn not_applied_frees_the_key(server: Server) {
    let refused = server
        .post("/refused", Some("alice"), Some("\"k-refused\""), "")
        .await;
    assert_eq!(
        (refused.status, refused.text()),
        (503, "nothing done".to_owned())
    );
    assert!(!refused.replayed());

    let resent = server
        .post("/refused", Some("alice"), Some("\"k-refused\""), "")
        .await;
    assert!(
        !resent.replayed(),
        "the key was freed: the handler ran again"
    );
    assert_eq!(
        (resent.status, resent.text()),
        (200, "ok on run 2".to_owned())
    );

    let again = server
        .post("/refused", Some("alice"), Some("\"k-refused\""), "")
        .await;
    assert!(again.replayed());
    assert_eq!(again.text(), "ok on run 2");
    assert_eq!(server.app.runs(), 2);
}

async fn a_panic_keeps_the_key_failed(server: Server) {
    let first = server
        .post("/panics", Some("alice"), Some("\"k-panic\""), "")
        .await;
    assert_eq!(first.status, 500, "{}", first.text());
    let detail = first.problem()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("may have had its effect"), "{detail}");
    assert!(!detail.contains("broke"), "the panic message is not sent");

    let resent = server
        .post("/panics", Some("alice"), Some("\"k-panic\""), "")
        .await;
    assert_eq!(resent.status, 500);
    assert_eq!(resent.problem()["detail"], detail.as_str());
    assert_eq!(server.app.runs(), 1, "an unknown outcome never runs again");
}

async fn an_unauthenticated_layer_with_an_optional_key(server: Server) {
    // No key, key not required: straight through, every time.
    assert_eq!(server.post("/open/flaky", None, None, "").await.status, 503);
    assert_eq!(server.post("/open/flaky", None, None, "").await.status, 200);
    assert_eq!(server.app.runs(), 2);

    let first = server
        .post("/open/flaky", None, Some("\"k-open\""), "")
        .await;
    let again = server
        .post("/open/flaky", None, Some("\"k-open\""), "")
        .await;
    assert_eq!((first.status, again.status), (200, 200));
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(server.app.runs(), 3);
}

/// A store whose server is down.
struct Down;

impl IdempotencyStore for Down {
    async fn claim(&self, _: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        Err(StoreError::Unavailable("connection refused".into()))
    }
    async fn complete(&self, _: &Claim, _: &str) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("connection refused".into()))
    }
    async fn release(&self, _: &Claim) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("connection refused".into()))
    }
    async fn mark_failed(&self, _: &Claim, _: &str) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("connection refused".into()))
    }
    async fn renew(&self, _: &Claim, _: Duration) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("connection refused".into()))
    }
    async fn purge_older_than(&self, _: Duration) -> Result<u64, StoreError> {
        Err(StoreError::Unavailable("connection refused".into()))
    }
}

#[tokio::test]
async fn a_store_that_is_down_fails_closed_with_503() {
    let server = serve(Arc::new(Down), None).await;
    let answer = server
        .post("/payments", Some("alice"), Some("\"k-down\""), "{}")
        .await;
    assert_eq!(answer.status, 503);
    let problem = answer.problem();
    assert_eq!(problem["title"], "Service Unavailable");
    assert_eq!(
        server.app.runs(),
        0,
        "the handler must not run without a claim"
    );
}

#[tokio::test]
async fn a_response_too_large_to_store_is_sent_once_and_never_repeated() {
    let dir = TempDir::new("idempotency-layer-limits");
    let limits = Limits {
        max_key_bytes: 512,
        max_response_bytes: 4096,
    };
    let store = SqliteStore::open(dir.file("idempotency.sqlite3"))
        .unwrap()
        .with_limits(limits);
    let server = serve(Arc::new(store), Some(dir)).await;

    let first = server
        .post("/big", Some("alice"), Some("\"k-big\""), "")
        .await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.body,
        "x".repeat(10_000).into_bytes(),
        "the first client gets all of it"
    );

    let resend = server
        .post("/big", Some("alice"), Some("\"k-big\""), "")
        .await;
    assert_eq!(resend.status, 409);
    assert_eq!(
        resend.problem()["title"],
        "Response for this Idempotency-Key was not kept"
    );
    assert_eq!(
        server.app.runs(),
        1,
        "its effect happened: it must not run again"
    );
}

#[test]
fn credentials_cannot_be_put_on_the_replay_list() {
    for name in [
        SET_COOKIE,
        AUTHORIZATION,
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::header::PROXY_AUTHENTICATE,
        axum::http::header::PROXY_AUTHORIZATION,
        axum::http::header::COOKIE,
    ] {
        let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
            .replay_headers([CONTENT_TYPE, name.clone()])
            .unwrap_err();
        assert_eq!(refused.name(), &name);
        assert!(refused.to_string().contains("credentials"), "{refused}");
    }
}

/// Answers with its store's namespace and run count.
fn counted(name: &'static str, runs: Arc<AtomicU32>) -> Router {
    Router::new().route(
        "/pay",
        post(move || {
            let runs = Arc::clone(&runs);
            async move { format!("{name} run {}", runs.fetch_add(1, Ordering::SeqCst) + 1) }
        }),
    )
}

async fn listen(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

async fn pay_at(http: &reqwest::Client, base: &str, key: &str) -> (bool, String) {
    let response = http
        .post(format!("{base}/pay"))
        .header("idempotency-key", key)
        .send()
        .await
        .unwrap();
    let replayed = response.headers().contains_key(REPLAYED);
    (replayed, response.text().await.unwrap())
}

#[tokio::test]
async fn layers_with_different_namespaces_on_one_store_never_answer_for_each_other() {
    let store = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicU32::new(0));
    let layer = |namespace: &str| {
        IdempotencyLayer::unauthenticated(Arc::clone(&store)).namespace(namespace)
    };
    // The same route, request and key on three services sharing one store.
    let payments = listen(counted("payments", runs.clone()).layer(layer("payments.v1"))).await;
    let refunds = listen(counted("refunds", runs.clone()).layer(layer("refunds.v1"))).await;
    let payments_too =
        listen(counted("payments-2", runs.clone()).layer(layer("payments.v1"))).await;
    let http = reqwest::Client::new();

    assert_eq!(
        pay_at(&http, &payments, "k-1").await,
        (false, "payments run 1".into())
    );
    assert_eq!(
        pay_at(&http, &refunds, "k-1").await,
        (false, "refunds run 2".into())
    );
    assert_eq!(
        pay_at(&http, &refunds, "k-1").await,
        (true, "refunds run 2".into())
    );
    assert_eq!(
        pay_at(&http, &payments, "k-1").await,
        (true, "payments run 1".into())
    );
    // The same namespace is the same key space, whichever service answers.
    assert_eq!(
        pay_at(&http, &payments_too, "k-1").await,
        (true, "payments run 1".into())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// The key reaches the handler as the client meant it: quotes and escapes undone, the same for
/// the bare form, and the same on a resend that is answered from the store.
async fn the_handler_reads_the_clients_key_unescaped(server: Server) {
    let sent = r#""order \"7\" \\ eur""#;
    let first = server
        .post("/echo-key", Some("alice"), Some(sent), "")
        .await;
    assert_eq!(first.status, 200, "{}", first.text());
    // The extension's key, then `current_key()`'s: the same.
    assert_eq!(first.text(), "order \"7\" \\ eur\norder \"7\" \\ eur");
    let again = server
        .post("/echo-key", Some("alice"), Some(sent), "")
        .await;
    assert!(again.replayed());
    assert_eq!(again.text(), first.text());
    let bare = server
        .post("/echo-key", Some("alice"), Some("order-8"), "")
        .await;
    assert_eq!(bare.text(), "order-8\norder-8");
    assert_eq!(server.app.runs(), 2);
}
