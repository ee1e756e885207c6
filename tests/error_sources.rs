//! Every public error type says its own part in `Display` and hands its cause out through
//! `source()`, never both: printed as a chain (anyhow's `{:#}`, `retry_core::error_chain`, a
//! `tracing` error field), no cause appears twice.
//!
//! Representative values of each type are walked link by link: a link's message must not
//! contain its source's message, and no later link's message may be inside an earlier one.
//! Values made by real failures (a store that cannot open its file, a server that refuses the
//! connection) cover the crate's inner error types too, which only ever show as sources.

use crate::tempdir;

use std::error::Error;
use std::time::{Duration, SystemTime};

use retry_core::dlq::{
    DeadLetter, DlqError, DlqFailed, FailureClass, JsonlSink, NotParked, RedriveError,
    RedriveRecord, RedriveReport,
};
use retry_core::idempotency::{IdempotencyError, StoreError};
use retry_core::{Decision, Elapsed, Jitter, error_chain};
use retry_sqlite::SqliteDeadLetters;
use retry_sqlite::SqliteStore;
use tempdir::TempDir;

/// The messages of `error` and of each of its sources, outermost first.
fn links(error: &(dyn Error + 'static)) -> Vec<String> {
    let mut links = vec![error.to_string()];
    let mut next = error.source();
    while let Some(e) = next {
        links.push(e.to_string());
        next = e.source();
    }
    links
}

/// Fails with the whole chain when a message repeats its source, or any cause under it.
fn assert_says_each_cause_once(name: &str, error: &(dyn Error + 'static)) {
    let links = links(error);
    let chain = error_chain(error).to_string();
    assert!(!links[0].is_empty(), "{name}: an empty message");
    for (i, outer) in links.iter().enumerate() {
        for inner in links[i + 1..].iter().filter(|m| !m.is_empty()) {
            assert!(
                !outer.contains(inner.as_str()),
                "{name}: the message {outer:?} repeats its cause {inner:?}; printed as a chain: {chain}"
            );
        }
    }
    assert_eq!(chain, links.join(": "), "{name}");
}

fn io(kind: std::io::ErrorKind, text: &str) -> Box<dyn Error + Send + Sync> {
    Box::new(std::io::Error::new(kind, text.to_owned()))
}

fn letter() -> DeadLetter {
    serde_json::from_value(serde_json::json!({
        "msg_id": "M-1", "original": {"amount": 10}, "reason": "upstream 503 after 5 attempts",
        "attempts": 5, "first_failed_at": "2026-08-19T02:11:03+09:00",
        "last_failed_at": "2026-08-19T02:12:47+09:00", "trace_id": "a1b2c3d4",
        "class": "system", "error_type": "FetchError"
    }))
    .unwrap()
}

fn record() -> RedriveRecord {
    serde_json::from_value(serde_json::json!({
        "run_id": "00000000000000ab", "who": "alice", "filter": "any", "target": "deposit",
        "started_at": "2026-08-20T09:00:00.000+00:00", "finished_at": "2026-08-20T09:00:02.000+00:00",
        "limit": 10, "rate_per_second": 5, "selected": 2, "succeeded": 1, "failed": 1, "skipped": 0
    }))
    .unwrap()
}

#[test]
fn store_and_idempotency_errors() {
    use std::io::ErrorKind::ConnectionRefused;
    let unavailable = || StoreError::Unavailable(io(ConnectionRefused, "connection refused"));
    let values: Vec<(&str, Box<dyn Error>)> = vec![
        ("StoreError::Unavailable", Box::new(unavailable())),
        ("StoreError::Fenced", Box::new(StoreError::Fenced)),
        (
            "StoreError::Corrupt",
            Box::new(StoreError::Corrupt("row `k`: bad status".into())),
        ),
        (
            "IdempotencyError::InProgress",
            Box::new(IdempotencyError::InProgress),
        ),
        (
            "IdempotencyError::KeyReused",
            Box::new(IdempotencyError::KeyReused),
        ),
        (
            "IdempotencyError::PreviouslyFailed",
            Box::new(IdempotencyError::PreviouslyFailed("card declined".into())),
        ),
        (
            "IdempotencyError::PreviouslyFailed (no text)",
            Box::new(IdempotencyError::PreviouslyFailed(String::new())),
        ),
        (
            "IdempotencyError::KeyTooLong",
            Box::new(IdempotencyError::KeyTooLong { len: 600, max: 512 }),
        ),
        (
            "IdempotencyError::ResponseTooLarge",
            Box::new(IdempotencyError::ResponseTooLarge { len: 9, max: 8 }),
        ),
        (
            "IdempotencyError::Serde",
            Box::new(IdempotencyError::Serde("eof".into())),
        ),
        (
            "IdempotencyError::Store",
            Box::new(IdempotencyError::from(unavailable())),
        ),
    ];
    for (name, error) in &values {
        assert_says_each_cause_once(name, error.as_ref());
    }
    // A store error inside an `IdempotencyError` shows as itself: no layer of its own.
    let wrapped = IdempotencyError::from(unavailable());
    assert_eq!(
        error_chain(&wrapped).to_string(),
        "idempotency store unavailable: connection refused"
    );
}

#[test]
fn dead_letter_errors() {
    let io_error = || DlqError::Io(io(std::io::ErrorKind::StorageFull, "disk full"));
    let values: Vec<(&str, Box<dyn Error>)> = vec![
        ("DlqError::Io", Box::new(io_error())),
        (
            "DlqError::Corrupt",
            Box::new(DlqError::Corrupt("line 3 is not JSON".into())),
        ),
        (
            "DlqError::Serialize",
            Box::new(DlqError::Serialize("key must be a string".into())),
        ),
        (
            "DlqFailed (sink)",
            Box::new(DlqFailed::new(letter(), NotParked::Sink(io_error()))),
        ),
        (
            "DlqFailed (outer layer)",
            Box::new(DlqFailed::new(
                letter(),
                NotParked::OuterLayer {
                    decision: Decision::Retry,
                },
            )),
        ),
        (
            "RedriveError::Select",
            Box::new(RedriveError::Select(io_error())),
        ),
        (
            "RedriveError::Audit",
            Box::new(RedriveError::Audit {
                report: Box::new(RedriveReport {
                    record: record(),
                    letters: Vec::new(),
                }),
                error: io_error(),
            }),
        ),
    ];
    for (name, error) in &values {
        assert_says_each_cause_once(name, error.as_ref());
    }
}

#[test]
fn leaf_errors() {
    let key = "tab\there"
        .parse::<retry_core::http::IdempotencyKey>()
        .unwrap_err();
    let jitter = "wobbly".parse::<Jitter>().unwrap_err();
    let refused = retry_core::tower::IdempotencyLayer::unauthenticated(
        retry_core::idempotency::MemoryStore::new(),
    )
    .replay_headers([axum::http::header::SET_COOKIE])
    .unwrap_err();
    let mut values: Vec<(String, Box<dyn Error>)> = vec![
        (
            "Elapsed".into(),
            Box::new(Elapsed::new(Duration::from_secs(2))),
        ),
        ("InvalidIdempotencyKey".into(), Box::new(key.clone())),
        ("UnknownJitter".into(), Box::new(jitter)),
        (
            "DurationError".into(),
            Box::new(retry_core::duration::parse("5 fortnights").unwrap_err()),
        ),
        ("RefusedHeader".into(), Box::new(refused)),
        (
            "PostLetterError::Key".into(),
            Box::new(retry_core::dlq::http::PostLetterError::Key(key)),
        ),
        (
            "PostLetterError::NotAcknowledged".into(),
            Box::new(retry_core::dlq::http::PostLetterError::NotAcknowledged(
                retry_core::dlq::http::NotAcknowledged {
                    url: "http://127.0.0.1:9/letters".into(),
                    status: http::StatusCode::FOUND,
                    location: Some("http://127.0.0.1:9/login".into()),
                    redirected_from: None,
                    title: None,
                },
            )),
        ),
        (
            "HttpError (attempt timeout)".into(),
            Box::new(retry_core::reqwest::HttpError::from(Elapsed::new(
                Duration::from_secs(1),
            ))),
        ),
    ];
    for bad in [
        "",
        "abc",
        "-1",
        "1.5",
        "99999999999",
        "Sun, 06 Nov 1994 08:49:37 UTC",
    ] {
        let error = retry_core::http::parse_retry_after(bad, SystemTime::now()).unwrap_err();
        values.push((format!("RetryAfterError for {bad:?}"), Box::new(error)));
    }
    for (name, error) in &values {
        assert_says_each_cause_once(name, error.as_ref());
    }
}

/// A refused connection through reqwest: `HttpError` says the method, URL and kind of failure,
/// reqwest's error (and hyper's, and the OS's under it) says the rest, once.
#[tokio::test]
async fn http_errors_of_a_refused_connection() {
    use retry_core::reqwest::RequestBuilderExt;
    // A port that was just free: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = retry_core::reqwest::client_builder().build().unwrap();
    let error = client
        .post(format!("http://127.0.0.1:{port}/letters"))
        .send_checked()
        .await
        .unwrap_err();
    assert!(error.source().is_some(), "{error:?}");
    assert_says_each_cause_once("HttpError (connection refused)", &error);
    assert!(
        error.to_string().starts_with(&format!(
            "POST http://127.0.0.1:{port}/letters failed: connect error"
        )),
        "{error}"
    );
    let post = retry_core::dlq::http::PostLetterError::Http(error);
    assert_says_each_cause_once("PostLetterError::Http", &post);
}

/// The stores' own failures: a file that cannot be opened, named once, SQLite's or the OS's
/// error under it.
#[test]
fn store_errors_of_files_that_cannot_be_opened() {
    let dir = TempDir::new("error-sources");
    // A directory where the store wants its file.
    let not_a_file = dir.file("a-directory");
    std::fs::create_dir(&not_a_file).unwrap();
    let sqlite = SqliteStore::open(&not_a_file).unwrap_err();
    assert_says_each_cause_once("SqliteStore::open", &sqlite);
    let letters = SqliteDeadLetters::open(&not_a_file).unwrap_err();
    assert_says_each_cause_once("SqliteDeadLetters::open", &letters);
    let jsonl = JsonlSink::open(&not_a_file).unwrap_err();
    assert_says_each_cause_once("JsonlSink::open", &jsonl);
    for error in [&letters, &jsonl] {
        assert!(
            error_chain(error).to_string().contains("a-directory"),
            "the chain names the file: {}",
            error_chain(error)
        );
    }
    let _ = FailureClass::System;
}

/// PostgreSQL: a URL that does not parse, and a server that refuses the connection. Neither
/// needs a server.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_errors_without_a_server() {
    use retry_postgres::PgDeadLetters;
    use retry_postgres::PgStore;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = format!("postgres://app:s3cret@127.0.0.1:{port}/payments?connect_timeout=5");
    let store = PgStore::connect(&refused).await.unwrap_err();
    assert_says_each_cause_once("PgStore::connect (refused)", &store);
    let letters = PgDeadLetters::connect(&refused).await.unwrap_err();
    assert_says_each_cause_once("PgDeadLetters::connect (refused)", &letters);
    let chain = error_chain(&store).to_string();
    assert!(chain.contains(&format!("127.0.0.1:{port}")), "{chain}");
    assert!(!chain.contains("s3cret"), "{chain}");
    let bad = PgStore::connect("postgres://app@db/payments?sslmode=sometimes")
        .await
        .unwrap_err();
    assert_says_each_cause_once("PgStore::connect (bad URL)", &bad);
}
