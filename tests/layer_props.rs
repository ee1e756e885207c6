//! The HTTP layer's header handling under bad input.
//!
//! `IdempotencyLayer`, called as a tower `Service` (no socket): whatever `Idempotency-Key` bytes
//! arrive, the answer is a `400` problem+json with the handler not run, or one run of the
//! handler; the quoted and bare forms of a key are one key; over-long keys are `400` naming the
//! limit; bodies over the limit are `413`, with or without a length up front; two key fields are
//! `400`; whatever status the handler answers, it is stored and replayed unless the handler
//! marks it `NotApplied`. `Retry-After`: whatever the server sends, the wait is a clear error or at most 2^31
//! seconds (the parser's own properties are in `retry-core/src/http/retry_after.rs`; these add
//! the bound for any input, negative, fractional and huge numbers, dates far ahead and behind,
//! error messages, and the classification of a response).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use axum::routing::post;
use proptest::prelude::*;
use retry_core::http::{IdempotencyKey, RetryAfterError, parse_retry_after};
use retry_core::idempotency::MemoryStore;
use retry_core::tower::{DEFAULT_MAX_KEY_BYTES, IdempotencyLayer, NotApplied};
use retry_core::{Classify, Decision};
use serde_json::Value;
use tower_service::Service as _;

use crate::runtime;

use runtime::RUNTIME;

const MAX_BODY: usize = 1024;
const KEY: &str = "idempotency-key";

/// A payment route behind the layer, on a store of its own, counting its runs.
struct App {
    router: Router,
    runs: Arc<AtomicU32>,
}

impl App {
    fn new() -> Self {
        let runs = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&runs);
        let router = Router::new()
            .route(
                "/pay",
                post(move |body: Bytes| async move {
                    let run = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    (
                        StatusCode::CREATED,
                        format!("run {run}, {} bytes", body.len()),
                    )
                }),
            )
            .layer(IdempotencyLayer::unauthenticated(MemoryStore::new()).max_body_bytes(MAX_BODY));
        App { router, runs }
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// POSTs `body` with the `Idempotency-Key` fields `keys`.
    fn post(&mut self, keys: &[HeaderValue], body: Body) -> Answer {
        let mut request = Request::post("/pay");
        for key in keys {
            request = request.header(KEY, key.clone());
        }
        let response: Response<Body> = RUNTIME
            .block_on(self.router.call(request.body(body).unwrap()))
            .unwrap();
        let (parts, body) = response.into_parts();
        let body = RUNTIME
            .block_on(axum::body::to_bytes(body, usize::MAX))
            .unwrap();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    fn post_key(&mut self, key: &HeaderValue) -> Answer {
        self.post(std::slice::from_ref(key), Body::from("{\"amount\":10}"))
    }
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    /// The RFC 9457 problem this answer must be, with `status`: its JSON.
    fn problem(&self, status: StatusCode) -> Result<Value, TestCaseError> {
        prop_assert_eq!(self.status, status, "{:?}", self);
        prop_assert_eq!(
            self.headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes),
            Some(&b"application/problem+json"[..])
        );
        let problem: Value = serde_json::from_slice(&self.body)
            .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {self:?}")))?;
        prop_assert_eq!(&problem["status"], &Value::from(status.as_u16()));
        for field in ["type", "title", "detail"] {
            prop_assert!(
                problem[field].as_str().is_some_and(|text| !text.is_empty()),
                "no {}: {}",
                field,
                problem
            );
        }
        Ok(problem)
    }

    fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|value| value == "?1")
    }
}

/// A byte a `HeaderValue` may hold (hyper lets the same through): visible ASCII and space, tab,
/// and obs-text (UTF-8 among it), with the key syntax's own bytes more often than by chance.
/// Other control characters and DEL never reach the layer: `HeaderValue` refuses them.
fn header_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        8 => 0x20u8..=0x7e,
        1 => Just(b'\t'),
        2 => 0x80u8..=0xff,
        3 => prop::sample::select(&b"\"\\;,= "[..]),
    ]
}

/// Values near the key syntax: quoted with escapes, parameters, lists, padding, non-ASCII.
fn key_like() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(header_byte(), 0..40),
        "[ \t]{0,2}\"([ -!#-\\[\\]-~]|\\\\[\"\\\\a-z])*\"?(;[a-z]=[0-9]|, ?\"x\"| )?[ \t]{0,2}"
            .prop_map(String::into_bytes),
        "[ \t]{0,2}[!-~]{0,20}[ \t]{0,2}".prop_map(String::into_bytes),
        "\"?[a-z0-9\u{80}-\u{10ffff}]{1,8}\"?".prop_map(String::into_bytes),
    ]
}

/// Keys that can be sent bare: printable ASCII without space, `"`, `\`, `,` or `;`, starting
/// with a letter (a bare `?1`, `:YWJj:`, `@1` or `42` is another structured-field type).
const BARE_KEY: &str = "[a-zA-Z][!#-+\\--:<-\\[\\]-~]{0,39}";

fn bare(key: &str) -> HeaderValue {
    HeaderValue::from_str(key).unwrap()
}

fn quoted(key: &str) -> HeaderValue {
    key.parse::<IdempotencyKey>().unwrap().header_value()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any value: a `400` problem with the handler not run, or one run, and a resend of the
    /// same request gets the same verdict (the stored response, for a run).
    #[test]
    fn any_key_value_is_a_problem_or_one_run(bytes in key_like()) {
        let Ok(value) = HeaderValue::from_bytes(&bytes) else {
            return Err(TestCaseError::reject("not a header value"));
        };
        let mut app = App::new();
        let first = app.post_key(&value);
        let again = app.post_key(&value);
        if first.status == StatusCode::BAD_REQUEST {
            let problem = first.problem(StatusCode::BAD_REQUEST)?;
            prop_assert_eq!(app.runs(), 0, "the handler ran for a refused key");
            prop_assert_eq!(again.problem(StatusCode::BAD_REQUEST)?, problem);
        } else {
            prop_assert_eq!(first.status, StatusCode::CREATED, "{:?}", first);
            prop_assert!(!first.replayed());
            prop_assert_eq!(app.runs(), 1);
            prop_assert!(again.replayed(), "{:?}", again);
            prop_assert_eq!((again.status, &again.body), (first.status, &first.body));
        }
    }

    /// A key sent bare and then quoted, or the other way round, is one key: the second request
    /// is a replay. Another key is another operation.
    #[test]
    fn bare_and_quoted_forms_are_one_key(key in BARE_KEY, bare_first in any::<bool>()) {
        let mut app = App::new();
        let (one, other) = if bare_first { (bare(&key), quoted(&key)) } else { (quoted(&key), bare(&key)) };
        let first = app.post_key(&one);
        let second = app.post_key(&other);
        prop_assert_eq!(first.status, StatusCode::CREATED);
        prop_assert!(second.replayed(), "{:?} then {:?} ran twice", one, other);
        prop_assert_eq!(&second.body, &first.body);
        let different = app.post_key(&quoted(&format!("{key}.")));
        prop_assert!(!different.replayed());
        prop_assert_eq!(app.runs(), 2);
    }

    /// Every printable key, quotes and backslashes included, runs once in its quoted form, and
    /// the escapes are part of the key: `a"b` and `a\"b` are two keys.
    #[test]
    fn escaped_keys_run_once_and_stay_distinct(key in "[ -~]{1,64}") {
        let mut app = App::new();
        prop_assert_eq!(app.post_key(&quoted(&key)).status, StatusCode::CREATED);
        prop_assert!(app.post_key(&quoted(&key)).replayed());
        let escaped = key.replace('\\', "\\\\").replace('"', "\\\"");
        if escaped != key {
            prop_assert!(!app.post_key(&quoted(&escaped)).replayed());
            prop_assert_eq!(app.runs(), 2);
        } else {
            prop_assert_eq!(app.runs(), 1);
        }
    }

    /// A key longer than the limit is `400` naming its length and the limit, in either form,
    /// however long; the handler does not run.
    #[test]
    fn over_long_keys_are_400_naming_the_limit(
        len in prop_oneof![200usize..320, 320usize..70_000],
        quote in any::<bool>(),
    ) {
        let key = "k".repeat(len);
        let value = if quote { quoted(&key) } else { bare(&key) };
        let mut app = App::new();
        let answer = app.post_key(&value);
        if len <= DEFAULT_MAX_KEY_BYTES {
            prop_assert_eq!(answer.status, StatusCode::CREATED);
            prop_assert_eq!(app.runs(), 1);
        } else {
            let problem = answer.problem(StatusCode::BAD_REQUEST)?;
            prop_assert_eq!(&problem["title"], "Idempotency-Key is too long");
            let detail = format!("the key is {len} bytes; at most {DEFAULT_MAX_KEY_BYTES} are allowed");
            prop_assert_eq!(&problem["detail"], &Value::from(detail));
            prop_assert_eq!(app.runs(), 0);
        }
    }

    /// A body over the limit is `413` naming the limit, whether its length is known up front or
    /// only found while reading; up to the limit it runs. Nothing runs for a refused body.
    #[test]
    fn bodies_over_the_limit_are_413(len in 0usize..3 * MAX_BODY, streamed in any::<bool>()) {
        let body = Body::from(vec![b'x'; len]);
        let body = if streamed { Body::from_stream(body.into_data_stream()) } else { body };
        let mut app = App::new();
        let answer = app.post(&[quoted("order-1")], body);
        if len <= MAX_BODY {
            prop_assert_eq!(answer.status, StatusCode::CREATED, "{:?}", answer);
            prop_assert_eq!(app.runs(), 1);
        } else {
            let problem = answer.problem(StatusCode::PAYLOAD_TOO_LARGE)?;
            let detail = problem["detail"].as_str().unwrap_or_default();
            prop_assert!(detail.contains(&format!("{MAX_BODY} bytes")), "{}", detail);
            prop_assert_eq!(app.runs(), 0);
        }
    }

    /// Two `Idempotency-Key` fields are malformed, even when they agree: `400`, nothing runs.
    #[test]
    fn two_key_fields_are_400(one in BARE_KEY, other in BARE_KEY, same in any::<bool>(), quote in any::<bool>()) {
        let other = if same { one.clone() } else { other };
        let form = |key: &str| if quote { quoted(key) } else { bare(key) };
        let mut app = App::new();
        let answer = app.post(&[form(&one), form(&other)], Body::from("{}"));
        let problem = answer.problem(StatusCode::BAD_REQUEST)?;
        prop_assert_eq!(&problem["title"], "Idempotency-Key is malformed");
        let detail = problem["detail"].as_str().unwrap_or_default();
        prop_assert!(detail.starts_with("more than one Idempotency-Key field was sent"), "{}", detail);
        prop_assert_eq!(app.runs(), 0);
    }
}

/// A route whose handler answers `status`, with `NotApplied` when `not_applied`, counting its
/// runs.
fn answering(status: StatusCode, not_applied: bool) -> App {
    let runs = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&runs);
    let router = Router::new()
        .route(
            "/pay",
            post(move || async move {
                let run = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let mut response = Response::new(Body::from(format!("run {run}")));
                *response.status_mut() = status;
                if not_applied {
                    response.extensions_mut().insert(NotApplied);
                }
                response
            }),
        )
        .layer(IdempotencyLayer::unauthenticated(MemoryStore::new()));
    App { router, runs }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Once the handler started, its answer is the answer, whatever the status (`5xx`, `408` and
    /// `429` included): a resend gets it replayed and the handler ran once. Only an answer
    /// marked `NotApplied`, or with a status that says nothing was processed (what extractors
    /// answer: `405`, `406`, `411`, `413`, `414`, `415`, `422`), frees the key, and then a resend
    /// runs the handler again.
    #[test]
    fn every_answer_is_stored_unless_not_applied(code in 200u16..600, marked in any::<bool>()) {
        let not_applied = marked || [405, 406, 411, 413, 414, 415, 422].contains(&code);
        let status = StatusCode::from_u16(code).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut app = answering(status, marked);
        let first = app.post_key(&quoted("order-1"));
        let again = app.post_key(&quoted("order-1"));
        prop_assert_eq!(first.status, status);
        prop_assert_eq!(again.status, status);
        prop_assert!(!first.replayed());
        if not_applied {
            prop_assert!(!again.replayed(), "{:?}", again);
            prop_assert_eq!(&again.body[..], b"run 2");
            prop_assert_eq!(app.runs(), 2);
        } else {
            prop_assert!(again.replayed(), "{:?}", again);
            prop_assert_eq!(&again.body, &first.body);
            prop_assert_eq!(app.runs(), 1);
        }
    }
}

/// Hostile values, one by one: each is refused with a `400` whose detail says why (and never
/// echoes the value), or, where it is a valid key, runs once.
#[test]
fn hostile_key_values() {
    let long_quoted = format!("\"{}\"", "q".repeat(65_536));
    let cases: [(&[u8], Option<&str>); 17] = [
        (br#""a\"b""#, None),
        (b"\t\"padded\" ", None),
        (br#""a\\b""#, None),
        (br#""k";x=1"#, Some("parameters are not supported")),
        (br#""k", "j""#, Some("nothing may follow the quoted string")),
        (br#""k" "j""#, Some("nothing may follow the quoted string")),
        (b"k;x=1", Some("an unquoted key may only hold")),
        (b"a,b", Some("an unquoted key may only hold")),
        (br#""""#, Some("the key is empty")),
        (b"   ", Some("the value is empty")),
        (b"\"open", Some("no closing")),
        (br#""bad \n escape""#, Some("may be escaped")),
        (
            b"\"caf\xc3\xa9\"",
            Some("a quoted string may only hold printable ASCII"),
        ),
        (b"caf\xc3\xa9", Some("an unquoted key may only hold")),
        (
            b"\"tab\there\"",
            Some("a quoted string may only hold printable ASCII"),
        ),
        (
            b"<script>alert(1)</script>;",
            Some("an unquoted key may only hold"),
        ),
        (long_quoted.as_bytes(), Some("at most 255 are allowed")),
    ];
    for (bytes, refused) in cases {
        let value = HeaderValue::from_bytes(bytes).unwrap();
        let mut app = App::new();
        let answer = app.post_key(&value);
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(40)]);
        match refused {
            None => {
                assert_eq!(answer.status, StatusCode::CREATED, "{shown}: {answer:?}");
                assert_eq!(app.runs(), 1, "{shown}");
            }
            Some(reason) => {
                let problem = answer
                    .problem(StatusCode::BAD_REQUEST)
                    .unwrap_or_else(|e| panic!("{shown}: {e}"));
                let detail = problem["detail"].as_str().unwrap();
                assert!(detail.contains(reason), "{shown}: {detail}");
                assert!(
                    !detail.contains("<script>"),
                    "{shown}: the value was echoed"
                );
                assert_eq!(app.runs(), 0, "{shown}: the handler ran");
            }
        }
    }
    // What HeaderValue itself refuses (so no server built on `http` ever sees it).
    for bytes in [
        &b"a\0b"[..],
        b"a\rb",
        b"a\nb",
        b"a\x01b",
        b"a\x1bb",
        b"a\x7fb",
    ] {
        assert!(HeaderValue::from_bytes(bytes).is_err(), "{bytes:?}");
    }
}

// ---- Retry-After ----

/// 2^31 seconds: the longest wait `parse_retry_after` ever returns.
const CAP: Duration = Duration::from_secs(1 << 31);

/// 1994-11-06T08:49:37Z, the RFC's example date.
const EXAMPLE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
const EXAMPLE_SECS: u64 = 784_111_777;

fn at(unix_seconds: i64) -> SystemTime {
    match u64::try_from(unix_seconds) {
        Ok(after) => UNIX_EPOCH + Duration::from_secs(after),
        Err(_) => UNIX_EPOCH - Duration::from_secs(unix_seconds.unsigned_abs()),
    }
}

/// What servers send, broken ways included.
fn retry_after_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        "[ \t]{0,2}[-+]?[0-9]{0,30}(\\.[0-9]{0,5})?[ \t]{0,2}",
        "(Sun|Mon|sun|Sunday|Fri|Sat)[, ]{1,2}[0-9 ]{1,3}[ -](Nov|Feb|nov|Foo)[ -][0-9]{2,5} [0-9]{2}:[0-9]{2}:[0-9]{2}( GMT| UTC)?",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the value and whatever our clock says, the wait is never longer than 2^31
    /// seconds, and an error is one line of bounded length however long the value was.
    #[test]
    fn retry_after_is_bounded_or_a_one_line_error(
        text in retry_after_text(),
        padding in prop_oneof![Just(0usize), 0usize..100_000],
        now in -100_000_000_000i64..300_000_000_000,
    ) {
        let text = format!("{text}{}", "9".repeat(padding));
        match parse_retry_after(&text, at(now)) {
            Ok(wait) => prop_assert!(wait <= CAP, "{:?} from {:?}", wait, text),
            Err(error) => {
                let message = error.to_string();
                prop_assert!(!message.chars().any(char::is_control), "{:?}", message);
                prop_assert!(message.len() <= 1_000, "{} bytes", message.len());
            }
        }
    }

    #[test]
    fn negative_numbers_are_negative(digits in "[0-9]{1,40}", now in any::<u32>()) {
        let value = format!("-{digits}");
        let negative = matches!(parse_retry_after(&value, at(now.into())), Err(RetryAfterError::Negative { .. }));
        prop_assert!(negative, "{}", value);
    }

    #[test]
    fn fractions_are_fractional(whole in "[0-9]{0,20}", fraction in "[0-9]{0,20}") {
        prop_assume!(!(whole.is_empty() && fraction.is_empty()));
        let value = format!("{whole}.{fraction}");
        let fractional = matches!(parse_retry_after(&value, SystemTime::now()), Err(RetryAfterError::Fractional { .. }));
        prop_assert!(fractional, "{}", value);
    }

    /// Past the cap, by any number of digits: too large, never a wrapped or clamped wait.
    #[test]
    fn huge_numbers_are_too_large(digits in "[1-9][0-9]{10,300}") {
        let too_large = matches!(parse_retry_after(&digits, SystemTime::now()), Err(RetryAfterError::TooLarge { .. }));
        prop_assert!(too_large, "{}", digits);
    }

    /// A date more than 2^31 seconds ahead is too large, not a wait of decades; a date in the
    /// past, however far, means now, and one before 1970 is not an HTTP-date.
    #[test]
    fn far_dates_are_too_large_or_now(
        ahead in (1u64 << 31) + 1..400_000_000_000,
        behind in 0u64..300_000_000_000,
    ) {
        let early = at(EXAMPLE_SECS as i64 - ahead as i64);
        let too_large = matches!(parse_retry_after(EXAMPLE, early), Err(RetryAfterError::TooLarge { .. }));
        prop_assert!(too_large, "{} s ahead", ahead);
        let last = "Fri, 31 Dec 9999 23:59:59 GMT";
        let too_large = matches!(parse_retry_after(last, early), Err(RetryAfterError::TooLarge { .. }));
        prop_assert!(too_large);
        let late = UNIX_EPOCH + Duration::from_secs(EXAMPLE_SECS + behind);
        prop_assert_eq!(parse_retry_after(EXAMPLE, late), Ok(Duration::ZERO));
        prop_assert_eq!(parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", late), Ok(Duration::ZERO));
        let before_1970 = matches!(
            parse_retry_after("Sat, 01 Jan 0000 00:00:00 GMT", late),
            Err(RetryAfterError::InvalidDate { .. })
        );
        prop_assert!(before_1970);
    }

    /// A 429 or 503 with any `Retry-After` bytes classifies as a retry: after the server's wait
    /// (at most 2^31 s; `max_retry_after` then decides whether to wait it) or, for a value that
    /// is not valid, after plain backoff.
    #[test]
    fn responses_with_any_retry_after_classify_as_bounded_retries(
        bytes in prop_oneof![
            retry_after_text().prop_map(String::into_bytes),
            prop::collection::vec(header_byte(), 0..40),
        ],
        busy in any::<bool>(),
    ) {
        let Ok(value) = HeaderValue::from_bytes(&bytes) else {
            return Err(TestCaseError::reject("not a header value"));
        };
        let status = if busy { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::TOO_MANY_REQUESTS };
        let response = Response::builder().status(status).header(RETRY_AFTER, value).body(()).unwrap();
        match response.classify() {
            Decision::Retry => {}
            Decision::RetryAfter(wait) => prop_assert!(wait <= CAP, "{:?}", wait),
            Decision::Stop => prop_assert!(false, "a {} stopped on Retry-After {:?}", status, bytes),
        }
    }
}
