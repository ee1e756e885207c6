//! `#[retryable(dlq(...))]`: on give-up the letter is parked before the error returns, and a
//! caller can tell parked from not parked.

use std::sync::atomic::{AtomicU32, Ordering};

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, DlqFailed, FailureClass,
    MemoryDeadLetters, Page,
};
use retry_core::time::parse_rfc3339;
use retry_core::{Classify, Decision, retryable};
use serde::Serialize;

#[derive(Debug)]
enum FetchError {
    Upstream(u16),
    NotParked(Box<DlqFailed>),
}

impl Classify for FetchError {
    fn classify(&self) -> Decision {
        match self {
            FetchError::Upstream(s) if *s >= 500 => Decision::Retry,
            _ => Decision::Stop,
        }
    }
    fn reason(&self) -> Option<String> {
        match self {
            FetchError::Upstream(503) => Some("upstream 503".into()),
            FetchError::Upstream(400) => Some("400 Bad Request".into()),
            other => Some(format!("{other:?}")),
        }
    }
}

impl From<DlqFailed> for FetchError {
    fn from(e: DlqFailed) -> Self {
        FetchError::NotParked(Box::new(e))
    }
}

#[derive(Debug, Clone, Serialize)]
struct Order {
    id: String,
    amount: u64,
    card_number: String,
}

fn redact(mut original: serde_json::Value) -> serde_json::Value {
    original["card_number"] = serde_json::Value::String("****".into());
    original
}

#[retryable(max = 5, base = "10ms", dlq(sink = letters, id = order.id, original = order, redact = redact))]
async fn submit(
    letters: &MemoryDeadLetters,
    order: Order,
    status: u16,
    calls: &AtomicU32,
) -> Result<(), FetchError> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(FetchError::Upstream(status))
}

fn order(id: &str) -> Order {
    Order {
        id: id.into(),
        amount: 10,
        card_number: "4111111111111111".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_call_parks_a_system_letter_before_its_error_returns() {
    let (letters, calls) = (MemoryDeadLetters::new(), AtomicU32::new(0));
    let err = submit(&letters, order("M-1"), 503, &calls)
        .await
        .unwrap_err();
    assert!(
        matches!(err, FetchError::Upstream(503)),
        "parked: the caller gets its own error"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    let letter = letters.get("M-1").await.unwrap().expect("parked");
    assert_eq!(letter.attempts, 5);
    assert_eq!(letter.class, FailureClass::System);
    assert_eq!(letter.reason, "gave up after 5 attempts: upstream 503");
    assert_eq!(
        letter.original["card_number"], "****",
        "redacted before it was written"
    );
    assert_eq!(letter.original["amount"], 10);
    assert!(letter.error_type.ends_with("FetchError"));
    assert_eq!(letter.trace_id.len(), 16);
    let (first, last) = (letter.first_failed_at, letter.last_failed_at);
    assert!(first <= last);
    // The seed's field names, exactly.
    let json = serde_json::to_value(&letter).unwrap();
    assert!(
        json["first_failed_at"]
            .as_str()
            .is_some_and(|t| t.ends_with("+00:00") && parse_rfc3339(t) == Some(first)),
        "RFC 3339 with offset: {}",
        json["first_failed_at"]
    );
    for field in [
        "msg_id",
        "original",
        "reason",
        "attempts",
        "first_failed_at",
        "last_failed_at",
        "trace_id",
    ] {
        assert!(json.get(field).is_some(), "{field}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stop_error_parks_a_data_letter_after_one_attempt() {
    let (letters, calls) = (MemoryDeadLetters::new(), AtomicU32::new(0));
    assert!(submit(&letters, order("M-2"), 400, &calls).await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let letter = letters.get("M-2").await.unwrap().expect("parked");
    assert_eq!((letter.class, letter.attempts), (FailureClass::Data, 1));
    assert_eq!(letter.reason, "not retryable: 400 Bad Request");
}

/// A payment: a declined card (`400`, `Stop`) is an answer for the caller, not a letter.
#[retryable(max = 3, base = "10ms", dlq(sink = letters, id = id, original = id, classes = "system"))]
async fn pay_card(letters: &MemoryDeadLetters, id: &str, status: u16) -> Result<(), FetchError> {
    Err(FetchError::Upstream(status))
}

#[tokio::test(start_paused = true)]
async fn classes_system_parks_only_give_ups_after_transient_failures() {
    let letters = MemoryDeadLetters::new();
    let declined = pay_card(&letters, "card-declined", 400).await;
    assert!(
        matches!(declined, Err(FetchError::Upstream(400))),
        "the Stop returns as it is: {declined:?}"
    );
    assert!(letters.get("card-declined").await.unwrap().is_none());
    let down = pay_card(&letters, "gateway-down", 503).await;
    assert!(matches!(down, Err(FetchError::Upstream(503))), "{down:?}");
    let letter = letters.get("gateway-down").await.unwrap().expect("parked");
    assert_eq!((letter.class, letter.attempts), (FailureClass::System, 3));
}

/// A sink whose disk is full.
struct Full;

impl DeadLetterSink for Full {
    async fn park(&self, _: &DeadLetter) -> Result<(), DlqError> {
        Err(DlqError::Io("no space left on device".into()))
    }
}

#[retryable(max = 2, base = "10ms", dlq(sink = Full, id = id, original = id))]
async fn into_full_sink(id: &str) -> Result<(), FetchError> {
    Err(FetchError::Upstream(503))
}

#[tokio::test(start_paused = true)]
async fn a_failing_sink_makes_the_caller_see_not_parked() {
    match into_full_sink("M-3").await.unwrap_err() {
        FetchError::NotParked(failed) => {
            assert_eq!(failed.letter.msg_id, "M-3");
            assert_eq!(
                retry_core::error_chain(&failed).to_string(),
                "not parked (the sink failed): gave up after 2 attempts: upstream 503: dead-letter store failed: no space left on device"
            );
        }
        other => panic!("the caller must see that nothing was parked: {other:?}"),
    }
}

#[retryable(max = 3, base = "10ms", dlq(sink = letters, id = id, original = id))]
async fn inner(letters: &MemoryDeadLetters, id: &str) -> Result<(), FetchError> {
    Err(FetchError::Upstream(503))
}

async fn hidden(letters: &MemoryDeadLetters) -> Result<(), FetchError> {
    inner(letters, "inner").await
}

#[retryable(max = 2, base = "10ms", dlq(sink = letters, id = "outer", original = "outer"))]
async fn outer(letters: &MemoryDeadLetters) -> Result<(), FetchError> {
    hidden(letters).await
}

#[tokio::test(start_paused = true)]
async fn a_retry_collapsed_by_nesting_parks_nothing() {
    let letters = MemoryDeadLetters::new();
    assert!(outer(&letters).await.is_err());
    let parked: Vec<_> = letters
        .page(&Page::first(usize::MAX))
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.msg_id)
        .collect();
    assert_eq!(parked, ["outer"], "only the layer that retried parks");
}

#[retryable(max = 5, base = "10ms", dlq(sink = letters, id = order.id, original = order))]
async fn submit_to_file(
    letters: &retry_core::dlq::JsonlSink,
    order: Order,
) -> Result<(), FetchError> {
    Err(FetchError::Upstream(503))
}

#[tokio::test(start_paused = true)]
async fn a_give_up_writes_one_jsonl_line_in_the_seed_shape() {
    let path =
        std::env::temp_dir().join(format!("retry-core-dlq-seed-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let letters = retry_core::dlq::JsonlSink::open(&path).unwrap();
    assert!(
        submit_to_file(&letters, order("M-20260819-000123"))
            .await
            .is_err()
    );
    drop(letters);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(line["msg_id"], "M-20260819-000123");
    assert_eq!(line["attempts"], 5);
    assert_eq!(line["reason"], "gave up after 5 attempts: upstream 503");
    assert_eq!(line["original"]["id"], "M-20260819-000123");
    assert!(line["trace_id"].as_str().is_some_and(|t| !t.is_empty()));
    let first = parse_rfc3339(line["first_failed_at"].as_str().unwrap()).unwrap();
    let last = parse_rfc3339(line["last_failed_at"].as_str().unwrap()).unwrap();
    assert!(first <= last);
}

#[derive(Debug)]
struct Declined;

impl Classify for Declined {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

impl From<DlqFailed> for Declined {
    fn from(_: DlqFailed) -> Self {
        Declined
    }
}

impl From<retry_core::IdempotencyError> for Declined {
    fn from(_: retry_core::IdempotencyError) -> Self {
        Declined
    }
}

#[retryable(max = 2, base = "10ms", dlq(sink = letters, id = msg_no, original = msg_no))]
#[retry_core::idempotent(key = ("bank-a", msg_no), store = inbox, on_err = "release")]
async fn charge(
    inbox: &retry_core::idempotency::MemoryStore,
    letters: &MemoryDeadLetters,
    msg_no: u64,
) -> Result<u64, Declined> {
    Err(Declined)
}

#[tokio::test(start_paused = true)]
async fn a_letter_carries_the_idempotency_key_of_the_call() {
    let (inbox, letters) = (
        retry_core::idempotency::MemoryStore::new(),
        MemoryDeadLetters::new(),
    );
    assert!(charge(&inbox, &letters, 9).await.is_err());
    let letter = letters.get("9").await.unwrap().expect("parked");
    // Namespaced by the function: (namespace, key).
    assert_eq!(
        letter.idempotency_key.as_deref(),
        Some("~s6:charges6:bank-a,n9")
    );
    // The namespace it was claimed in, and when the store forgets it (the default retention,
    // 30 days, from the first failure): what a redrive checks before it claims the key again.
    assert_eq!(letter.key_scope.as_deref(), Some("charge"));
    let expires = letter.key_expires_at.expect("an expiry");
    let first = letter.first_failed_at;
    assert_eq!(
        expires.duration_since(first).unwrap(),
        std::time::Duration::from_secs(30 * 86_400)
    );
    assert_eq!(
        letter.source.as_deref(),
        Some(concat!(module_path!(), "::charge"))
    );
    assert!(!letter.redacted);
}

/// Counts serialisations: `dlq(original = ..)` must serialise only on give-up.
#[derive(Debug, Clone)]
struct Counted<'a>(&'a AtomicU32);

impl Serialize for Counted<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.fetch_add(1, Ordering::SeqCst);
        serializer.serialize_str("counted")
    }
}

#[retryable(max = 3, base = "10ms", dlq(sink = letters, id = "M-lazy", original = original))]
async fn lazily_parked(
    letters: &MemoryDeadLetters,
    original: Counted<'_>,
    fail: bool,
) -> Result<(), FetchError> {
    if fail {
        Err(FetchError::Upstream(503))
    } else {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_original_is_serialised_only_on_give_up() {
    let (letters, serialised) = (MemoryDeadLetters::new(), AtomicU32::new(0));
    for _ in 0..3 {
        lazily_parked(&letters, Counted(&serialised), false)
            .await
            .unwrap();
    }
    assert_eq!(serialised.load(Ordering::SeqCst), 0, "no give-up, no JSON");
    assert!(
        lazily_parked(&letters, Counted(&serialised), true)
            .await
            .is_err()
    );
    assert_eq!(serialised.load(Ordering::SeqCst), 1);
    assert_eq!(letters.stats().await.unwrap().pending, 1);
}

#[tokio::test(start_paused = true)]
async fn a_single_attempt_parks_nothing_and_says_the_outer_layer_owns_the_give_up() {
    let (letters, calls) = (MemoryDeadLetters::new(), AtomicU32::new(0));
    // Transient and permanent errors alike: nothing parked, and not the function's own error.
    for (status, decision) in [(503, Decision::Retry), (400, Decision::Stop)] {
        let err = submit(&letters, order("M-single"), status, &calls)
            .single_attempt()
            .await
            .unwrap_err();
        let FetchError::NotParked(failed) = err else {
            panic!("a consumer acking on the function's own error would lose the message: {err:?}");
        };
        assert!(failed.outer_layer_owns_give_up(), "{failed}");
        assert!(failed.sink_error().is_none());
        assert_eq!(failed.decision(), decision, "the replaced error's decision");
        assert_eq!(failed.letter.msg_id, "M-single");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one attempt each");
    assert_eq!(letters.stats().await.unwrap().pending, 0, "nothing parked");
}

/// Hides the nesting from the compiler: the inner retry collapses at run time.
async fn hidden_submit(letters: &MemoryDeadLetters, calls: &AtomicU32) -> Result<(), FetchError> {
    submit(letters, order("M-inner"), 400, calls).await
}

#[retryable(max = 2, base = "10ms", dlq(sink = letters, id = "M-outer", original = "outer"))]
async fn outer_submit(letters: &MemoryDeadLetters, calls: &AtomicU32) -> Result<(), FetchError> {
    hidden_submit(letters, calls).await
}

#[tokio::test(start_paused = true)]
async fn a_collapsed_nested_call_whose_error_is_stop_parks_nothing_of_its_own() {
    let (letters, calls) = (MemoryDeadLetters::new(), AtomicU32::new(0));
    assert!(outer_submit(&letters, &calls).await.is_err());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "Stop: the outer layer does not retry"
    );
    let parked = letters.page(&Page::first(usize::MAX)).await.unwrap();
    let ids: Vec<_> = parked.iter().map(|l| l.msg_id.as_str()).collect();
    assert_eq!(ids, ["M-outer"], "one letter, the outer layer's");
    assert_eq!(parked[0].class, FailureClass::Data);
}
