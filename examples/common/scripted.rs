//! A loopback HTTP server that answers each path from a script and records every request it
//! got: the upstream of the retrying clients' examples (`tower_retry_client`,
//! `reqwest_middleware`) and tests (`tests/tower_retry.rs`, `tests/reqwest_middleware.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    status: u16,
    retry_after: Option<&'static str>,
    delay: Duration,
}

impl Answer {
    /// `status`, at once, with the body "answer <status>".
    pub(crate) fn status(status: u16) -> Self {
        Answer {
            status,
            retry_after: None,
            delay: Duration::ZERO,
        }
    }

    /// With a `Retry-After` header.
    pub(crate) fn retry_after(mut self, value: &'static str) -> Self {
        self.retry_after = Some(value);
        self
    }

    /// Answered only after `delay` (the request is recorded at once).
    pub(crate) fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A request the server got.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    pub(crate) method: String,
    /// Its `Caller-Retries` header, if any.
    pub(crate) caller_retries: Option<String>,
    pub(crate) body: Vec<u8>,
    pub(crate) at: Instant,
}

#[derive(Default)]
struct Inner {
    scripts: Mutex<HashMap<String, VecDeque<Answer>>>,
    hits: Mutex<HashMap<String, Vec<Hit>>>,
}

/// The running server.
pub(crate) struct Scripted {
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub(crate) url: String,
    inner: Arc<Inner>,
}

impl Scripted {
    /// Starts a server on a free loopback port.
    pub(crate) async fn start() -> Scripted {
        let inner = Arc::new(Inner::default());
        let router = Router::new().fallback(answer).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        tokio::spawn(async move { axum::serve(listener, router).await });
        Scripted { url, inner }
    }

    /// The examples' upstream: a quote that fails twice with 503, rates behind a 429 with
    /// `Retry-After: 1`, payments and refunds that fail once with 503, uploads likewise, and an
    /// order that does not exist.
    pub(crate) async fn flaky_upstream() -> Scripted {
        let upstream = Scripted::start().await;
        let once_unavailable = || [Answer::status(503), Answer::status(201)];
        upstream.script(
            "/quote",
            [
                Answer::status(503),
                Answer::status(503),
                Answer::status(200),
            ],
        );
        upstream.script(
            "/rates",
            [Answer::status(429).retry_after("1"), Answer::status(200)],
        );
        upstream.script("/payments", once_unavailable());
        upstream.script("/refunds", once_unavailable());
        upstream.script("/uploads", once_unavailable());
        upstream.script("/orders/7", [Answer::status(404)]);
        upstream
    }

    /// `path` answers these in turn; the last one repeats.
    pub(crate) fn script(&self, path: &str, answers: impl IntoIterator<Item = Answer>) {
        let answers: VecDeque<Answer> = answers.into_iter().collect();
        assert!(!answers.is_empty(), "a script needs an answer");
        self.inner
            .scripts
            .lock()
            .unwrap()
            .insert(path.to_owned(), answers);
    }

    /// The requests `path` got so far.
    pub(crate) fn hits(&self, path: &str) -> Vec<Hit> {
        self.inner
            .hits
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    /// What `path` got after its first `since` requests, in words: "3 request(s), 3 with
    /// Caller-Retries, 53 ms, 95 ms apart".
    pub(crate) fn describe(&self, path: &str, since: usize) -> String {
        let hits = self.hits(path);
        let hits = hits.get(since..).unwrap_or_default();
        let marked = hits
            .iter()
            .filter(|hit| {
                hit.caller_retries
                    .as_deref()
                    .and_then(|value| retry_core::http::Announcement::parse(value.as_bytes()))
                    .is_some()
            })
            .count();
        let gaps: Vec<String> = hits
            .windows(2)
            .map(|pair| format!("{} ms", (pair[1].at - pair[0].at).as_millis()))
            .collect();
        let mut text = format!("{} request(s), {marked} with Caller-Retries", hits.len());
        if !gaps.is_empty() {
            text.push_str(&format!(", {} apart", gaps.join(", ")));
        }
        text
    }

    /// The URL of `path`.
    pub(crate) fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }
}

async fn answer(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    inner
        .hits
        .lock()
        .unwrap()
        .entry(path.clone())
        .or_default()
        .push(Hit {
            method: parts.method.to_string(),
            caller_retries: parts
                .headers
                .get("caller-retries")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body,
            at: Instant::now(),
        });
    let next = {
        let mut scripts = inner.scripts.lock().unwrap();
        scripts.get_mut(&path).and_then(|answers| {
            if answers.len() > 1 {
                answers.pop_front()
            } else {
                answers.front().cloned()
            }
        })
    };
    let Some(next) = next else {
        return (StatusCode::NOT_FOUND, "no script").into_response();
    };
    tokio::time::sleep(next.delay).await;
    let status = StatusCode::from_u16(next.status).expect("a valid status");
    let mut response = (status, Body::from(format!("answer {}", next.status))).into_response();
    if let Some(value) = next.retry_after {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static(value));
    }
    response
}
