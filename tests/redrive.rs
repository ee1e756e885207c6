//! Redrive over every dead-letter store: a small batch out of many, on the record; a second run
//! repeats no effect; a lost response parked and redriven is one effect in total; a target that
//! keeps failing stops the run at its threshold with its letters back and counted; the snapshot,
//! the filter, the dry run, the rate, and the idempotency-key check. Then the safety check's
//! refusals, the audit row per letter (and the one a killed run leaves), and two runs at once
//! over the same letters, which send each exactly once.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, FailureClass,
    Filter, MemoryDeadLetters, Outcome, Page, Redrive, RedriveRecord, Resolution, Stats,
    assume_idempotent,
};
use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::time::{Clock, ManualClock, format_rfc3339};
use retry_core::{Classify, Decision, idempotent, retryable};
use retry_sqlite::SqliteDeadLetters;
use serde::{Deserialize, Serialize};

use crate::tempdir;

use tempdir::TempDir;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Deposit {
    msg_no: u64,
    amount: u64,
}

#[derive(Debug)]
enum DepositError {
    Idempotency(IdempotencyError),
    Unavailable,
    LostResponse,
}

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError::Idempotency(e)
    }
}

impl From<retry_core::dlq::DlqFailed> for DepositError {
    fn from(_: retry_core::dlq::DlqFailed) -> Self {
        DepositError::Unavailable
    }
}

impl fmt::Display for DepositError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DepositError::Idempotency(e) => write!(f, "{e}"),
            DepositError::Unavailable => f.write_str("503 Service Unavailable"),
            DepositError::LostResponse => f.write_str("connection reset before the response"),
        }
    }
}

impl Classify for DepositError {
    fn classify(&self) -> Decision {
        match self {
            DepositError::Idempotency(_) => Decision::Stop,
            DepositError::Unavailable | DepositError::LostResponse => Decision::Retry,
        }
    }
}

/// The receiver's side: balances changed by each deposit's effect, counted per message.
#[derive(Default)]
struct Ledger {
    effects: Mutex<HashMap<u64, u32>>,
    /// While set, the receiver answers 503 without an effect.
    down: std::sync::atomic::AtomicBool,
    /// Fail (without effect) after this many more successes.
    healthy_for: AtomicU32,
}

impl Ledger {
    fn total_effects(&self) -> u32 {
        self.effects.lock().unwrap().values().sum()
    }

    fn max_effects_per_message(&self) -> u32 {
        self.effects
            .lock()
            .unwrap()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

#[idempotent(key = req.msg_no, store = inbox)]
async fn deposit(inbox: &MemoryStore, ledger: &Ledger, req: Deposit) -> Result<u64, DepositError> {
    if ledger.down.load(Ordering::SeqCst) {
        return Err(DepositError::Unavailable);
    }
    if ledger
        .healthy_for
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_err()
    {
        return Err(DepositError::Unavailable);
    }
    *ledger
        .effects
        .lock()
        .unwrap()
        .entry(req.msg_no)
        .or_default() += 1;
    Ok(req.amount)
}

/// A day ago, to the second: the letters' first failures follow it, one second per message, so
/// they are in order and well within the target's retention.
static A_DAY_AGO: LazyLock<SystemTime> = LazyLock::new(|| {
    let now = SystemTime::now() - Duration::from_secs(86_400);
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
});

fn letter(msg_no: u64, class: FailureClass) -> DeadLetter {
    DeadLetter {
        msg_id: msg_no.to_string(),
        original: serde_json::to_value(Deposit { msg_no, amount: 10 }).unwrap(),
        reason: "gave up after 5 attempts: 503 Service Unavailable".to_owned(),
        attempts: 5,
        first_failed_at: *A_DAY_AGO + Duration::from_secs(msg_no),
        last_failed_at: *A_DAY_AGO + Duration::from_secs(3600),
        trace_id: format!("{msg_no:016x}"),
        class,
        error_type: "DepositError".to_owned(),
        idempotency_key: None,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

async fn pending<S: DeadLetterStore>(store: &S) -> u64 {
    store.stats().await.unwrap().pending
}

async fn park_all<S: DeadLetterSink>(store: &S, letters: impl IntoIterator<Item = DeadLetter>) {
    for letter in letters {
        store.park(&letter).await.unwrap();
    }
}

fn healthy() -> Ledger {
    let ledger = Ledger::default();
    ledger.healthy_for.store(u32::MAX, Ordering::SeqCst);
    ledger
}

/// 100 `system` letters (and 5 `data` ones) with a limit of 10: exactly 10 sent, one audit row,
/// 90 left; then every letter again, the first 10 re-parked as if their acks were lost: the
/// receiver answers those from its store, so each message has exactly one effect.
async fn small_batch_then_everything_again<S: DeadLetterStore>(store: &S) {
    park_all(store, (1..=100).map(|n| letter(n, FailureClass::System))).await;
    park_all(store, (101..=105).map(|n| letter(n, FailureClass::Data))).await;
    let inbox = MemoryStore::new();
    let ledger = healthy();
    let system = Filter::any().class(FailureClass::System);

    let report = Redrive::new(store, "alice")
        .filter(system.clone())
        .limit(10)
        .rate(1000)
        .target("deposit")
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    let r = &report.record;
    assert_eq!(
        (r.selected, r.succeeded, r.failed, r.skipped),
        (10, 10, 0, 0)
    );
    assert_eq!(ledger.total_effects(), 10, "exactly 10 sent");
    assert_eq!(pending(store).await, 95, "90 system + 5 data left");
    let rows = store.audit_rows(Some(&r.run_id)).await.unwrap();
    assert_eq!(rows.len(), 10, "one audit row per letter");
    assert!(
        rows.iter()
            .all(|row| row.outcome.as_deref() == Some("redriven")),
        "{rows:?}"
    );
    let resolved = store.get("1").await.unwrap().unwrap().resolved.unwrap();
    assert_eq!(
        (resolved.by.as_str(), resolved.run_id.as_deref()),
        ("alice", Some(r.run_id.as_str()))
    );
    let audit = store.redrives().await.unwrap();
    assert_eq!(audit.len(), 1, "one audit row");
    assert_eq!(audit[0], report.record);
    assert_eq!(
        (audit[0].who.as_str(), audit[0].filter.as_str()),
        ("alice", "class=system")
    );
    let sent: Vec<&str> = report.letters.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        sent,
        (1..=10).map(|n| n.to_string()).collect::<Vec<_>>(),
        "oldest first"
    );

    // The acks of the first run were lost: those 10 are pending again.
    park_all(store, (1..=10).map(|n| letter(n, FailureClass::System))).await;
    let report = Redrive::new(store, "bob")
        .filter(system)
        .limit(1000)
        .rate(1000)
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    assert_eq!(
        (report.record.selected, report.record.succeeded),
        (100, 100)
    );
    assert_eq!(ledger.total_effects(), 100, "no duplicate effect");
    assert_eq!(ledger.max_effects_per_message(), 1);
    assert_eq!(pending(store).await, 5, "only the data letters are left");
    assert_eq!(store.redrives().await.unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_small_batch_is_sent_recorded_and_a_second_run_repeats_nothing_in_memory() {
    small_batch_then_everything_again(&MemoryDeadLetters::new()).await;
}

#[tokio::test]
async fn a_small_batch_is_sent_recorded_and_a_second_run_repeats_nothing_in_sqlite() {
    let dir = TempDir::new("redrive-sqlite");
    let path = dir.file("dlq.sqlite3");
    small_batch_then_everything_again(&SqliteDeadLetters::open(&path).unwrap()).await;
    let reopened = SqliteDeadLetters::open(&path).unwrap();
    let audit = reopened.redrives().await.unwrap();
    assert_eq!(
        audit.iter().map(|r| r.who.as_str()).collect::<Vec<_>>(),
        ["alice", "bob"]
    );
}

#[cfg(feature = "postgres")]
use crate::pg;

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_small_batch_is_sent_recorded_and_a_second_run_repeats_nothing_in_postgres() {
    let schema = pg::Schema::new("redrive").await;
    let letters = retry_postgres::PgDeadLetters::connect(&schema.url)
        .await
        .unwrap();
    small_batch_then_everything_again(&letters).await;
    let again = retry_postgres::PgDeadLetters::connect(&schema.url)
        .await
        .unwrap();
    assert_eq!(again.redrives().await.unwrap().len(), 2);
    schema.drop_all().await;
}

// ---- a lost response ----

/// The sender: every response from the receiver is lost on the way back while the network is
/// bad, so the sender retries (the receiver answers those from its store) and finally parks.
#[retryable(max = 3, base = "10ms", dlq(sink = letters, id = req.msg_no.to_string(), original = &req))]
async fn send(
    letters: &MemoryDeadLetters,
    inbox: &MemoryStore,
    ledger: &Ledger,
    network_bad: &std::sync::atomic::AtomicBool,
    req: Deposit,
) -> Result<u64, DepositError> {
    let receipt = deposit(inbox, ledger, req).await?;
    if network_bad.load(Ordering::SeqCst) {
        return Err(DepositError::LostResponse);
    }
    Ok(receipt)
}

#[tokio::test(start_paused = true)]
async fn an_effect_whose_response_was_lost_is_parked_and_redriven_once_in_total() {
    let letters = MemoryDeadLetters::new();
    let inbox = MemoryStore::new();
    let ledger = healthy();
    let network_bad = std::sync::atomic::AtomicBool::new(true);
    let req = Deposit {
        msg_no: 7,
        amount: 10,
    };

    let gave_up = send(&letters, &inbox, &ledger, &network_bad, req).await;
    assert!(matches!(gave_up, Err(DepositError::LostResponse)));
    assert_eq!(
        ledger.total_effects(),
        1,
        "the first attempt's effect happened"
    );
    let parked = letters.get("7").await.unwrap().expect("parked");
    assert_eq!(parked.attempts, 3);

    network_bad.store(false, Ordering::SeqCst);
    let report = Redrive::new(&letters, "ops")
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    assert_eq!(report.letters, [("7".to_owned(), Outcome::Redriven)]);
    assert_eq!(ledger.total_effects(), 1, "one side effect in total");
    assert_eq!(pending(&letters).await, 0);
}

// ---- a target that fails ----

#[tokio::test(start_paused = true)]
async fn a_run_whose_target_starts_failing_stops_at_the_threshold_and_puts_letters_back() {
    let letters = MemoryDeadLetters::new();
    park_all(&letters, (1..=20).map(|n| letter(n, FailureClass::System))).await;
    let inbox = MemoryStore::new();
    let ledger = Ledger::default();
    ledger.healthy_for.store(5, Ordering::SeqCst);
    let clock = Arc::new(ManualClock::new(SystemTime::now()));

    let report = Redrive::new(&letters, "alice")
        .limit(20)
        .rate(1000)
        .stop_after_failures(3)
        .clock(clock.clone())
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    let r = &report.record;
    assert_eq!(
        (r.selected, r.succeeded, r.failed, r.skipped),
        (20, 5, 3, 12)
    );
    let stopped = r.stopped.as_deref().expect("stopped");
    assert!(stopped.contains("3 letters failed again"), "{stopped}");
    assert_eq!(pending(&letters).await, 15, "3 failed + 12 never sent");

    for n in 6..=8 {
        let back = letters.get(&n.to_string()).await.unwrap().unwrap();
        let before = letter(n, FailureClass::System);
        // The letter still says how the service gave up; the redrive's failure is history.
        assert_eq!(
            (
                back.attempts,
                &back.reason,
                back.first_failed_at,
                back.last_failed_at
            ),
            (
                before.attempts,
                &before.reason,
                before.first_failed_at,
                before.last_failed_at
            ),
            "the service's attempts, reason and times"
        );
        let failed = back.history.last().unwrap();
        assert!(
            failed.reason.contains("redrive by alice failed: 503"),
            "{}",
            failed.reason
        );
        // The clock's time, to the millisecond the library writes.
        let since = clock.now().duration_since(failed.at).unwrap();
        assert!(since < Duration::from_millis(1), "{since:?}");
        assert_eq!(
            format_rfc3339(failed.at).len(),
            "2026-08-19T02:11:03.123+00:00".len()
        );
    }
    for n in 9..=20 {
        assert_eq!(
            letters.get(&n.to_string()).await.unwrap(),
            Some(letter(n, FailureClass::System)),
            "a letter the run did not reach is untouched"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_letter_that_fails_again_is_not_sent_again_by_the_same_run() {
    let letters = MemoryDeadLetters::new();
    park_all(&letters, (1..=5).map(|n| letter(n, FailureClass::System))).await;
    let inbox = MemoryStore::new();
    let ledger = Ledger::default();
    ledger.down.store(true, Ordering::SeqCst);
    let sends = Mutex::new(HashMap::<u64, u32>::new());

    let report = Redrive::new(&letters, "alice")
        .stop_after_failures(100)
        .run(|req: Deposit| {
            *sends.lock().unwrap().entry(req.msg_no).or_default() += 1;
            deposit(&inbox, &ledger, req)
        })
        .await
        .unwrap();
    assert_eq!(report.record.failed, 5);
    assert_eq!(sends.lock().unwrap().len(), 5);
    assert!(sends.lock().unwrap().values().all(|&n| n == 1), "{sends:?}");
}

// ---- choosing, judging, pacing ----

#[tokio::test(start_paused = true)]
async fn the_filter_chooses_by_class_reason_and_age_and_the_dry_run_sends_nothing() {
    let letters = MemoryDeadLetters::new();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let failed_ago = |n: u64, ago: u64, reason: &str| DeadLetter {
        last_failed_at: now - Duration::from_secs(ago),
        first_failed_at: now - Duration::from_secs(ago + 60),
        reason: reason.to_owned(),
        ..letter(n, FailureClass::System)
    };
    park_all(
        &letters,
        [
            failed_ago(1, 3600, "gave up after 5 attempts: 503 Service Unavailable"),
            failed_ago(2, 60, "gave up after 5 attempts: 503 Service Unavailable"),
            failed_ago(3, 3600, "gave up after 5 attempts: 502 Bad Gateway"),
            DeadLetter {
                class: FailureClass::Data,
                ..failed_ago(4, 3600, "not retryable: 503 from a proxy")
            },
        ],
    )
    .await;
    let filter = Filter::any()
        .class(FailureClass::System)
        .reason_contains("503")
        .older_than(Duration::from_secs(600));
    let redrive = Redrive::new(&letters, "alice")
        .filter(filter)
        .clock(Arc::new(ManualClock::new(now)));
    let plan = redrive.plan().await.unwrap();
    assert_eq!(
        plan.iter().map(|l| l.msg_id.as_str()).collect::<Vec<_>>(),
        ["1"]
    );
    assert_eq!(pending(&letters).await, 4, "the dry run changed nothing");
    assert!(
        letters.redrives().await.unwrap().is_empty(),
        "and recorded nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn sends_are_paced_by_the_rate() {
    let letters = MemoryDeadLetters::new();
    park_all(&letters, (1..=10).map(|n| letter(n, FailureClass::System))).await;
    let inbox = MemoryStore::new();
    let ledger = healthy();
    let start = tokio::time::Instant::now();
    let report = Redrive::new(&letters, "alice")
        .rate(5)
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    assert_eq!(report.record.succeeded, 10);
    // The first send goes at once, then one every 200 ms.
    assert_eq!(start.elapsed(), Duration::from_millis(1800));
}

#[tokio::test(start_paused = true)]
async fn a_letter_whose_key_differs_from_the_targets_is_not_sent() {
    let letters = MemoryDeadLetters::new();
    let inbox = MemoryStore::new();
    let ledger = healthy();
    // The original call claimed key 7; the letter's original was edited (or redacted) to 8.
    let key_of_7 = deposit(
        &inbox,
        &ledger,
        Deposit {
            msg_no: 7,
            amount: 1,
        },
    )
    .idempotency_key()
    .to_owned();
    let edited = DeadLetter {
        idempotency_key: Some(key_of_7.clone()),
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
        ..letter(8, FailureClass::System)
    };
    let intact = DeadLetter {
        idempotency_key: Some(key_of_7),
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
        ..letter(7, FailureClass::System)
    };
    park_all(&letters, [edited, intact]).await;

    let report = Redrive::new(&letters, "alice")
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    let outcomes: HashMap<_, _> = report.letters.into_iter().collect();
    assert_eq!(outcomes["7"], Outcome::Redriven);
    let Outcome::Skipped(why) = &outcomes["8"] else {
        panic!("{outcomes:?}")
    };
    assert!(why.contains("not the original call's"), "{why}");
    assert_eq!(ledger.total_effects(), 1);
    assert!(letters.get("8").await.unwrap().is_some(), "still pending");
}

#[tokio::test(start_paused = true)]
async fn a_letter_whose_original_does_not_decode_is_skipped_and_kept() {
    let letters = MemoryDeadLetters::new();
    park_all(
        &letters,
        [DeadLetter {
            original: serde_json::json!({"msg_no": "seven"}),
            ..letter(7, FailureClass::System)
        }],
    )
    .await;
    let inbox = MemoryStore::new();
    let ledger = healthy();
    let report = Redrive::new(&letters, "alice")
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    assert!(
        matches!(&report.letters[0].1, Outcome::Skipped(why) if why.contains("does not decode")),
        "{:?}",
        report.letters
    );
    assert_eq!(report.record.skipped, 1);
    assert_eq!(pending(&letters).await, 1);
}

#[tokio::test(start_paused = true)]
async fn the_escape_hatch_is_explicit_and_still_checks_a_given_key() {
    let letters = MemoryDeadLetters::new();
    park_all(
        &letters,
        [DeadLetter {
            idempotency_key: Some("M-1".into()),
            source: None,
            redacted: false,
            key_scope: None,
            key_expires_at: None,
            history: Vec::new(),
            resolved: None,
            ..letter(1, FailureClass::System)
        }],
    )
    .await;
    let sent = AtomicU32::new(0);
    let report = Redrive::new(&letters, "alice")
        .run_letters(|letter: &DeadLetter| {
            let key = letter.idempotency_key.clone().unwrap_or_default();
            let sent = &sent;
            assume_idempotent(async move {
                sent.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(())
            })
            .with_key(key)
        })
        .await
        .unwrap();
    assert_eq!(report.record.succeeded, 1);
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

// ---- over HTTP, through the IdempotencyLayer ----

/// Fields deliberately not in alphabetical order: the letter's `original` (a `serde_json::Value`)
/// re-serialises them sorted, and the redrive must still be the same request to the layer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Transfer {
    to: String,
    cents: u64,
    from: String,
}

#[derive(Debug)]
struct Lost;

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the response was lost")
    }
}

impl From<retry_core::dlq::DlqFailed> for Lost {
    fn from(_: retry_core::dlq::DlqFailed) -> Self {
        Lost
    }
}

impl Classify for Lost {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

/// The sender: its request reaches the receiver every time, but every answer is lost.
#[retryable(max = 2, base = "1ms", dlq(sink = letters, id = key.to_string(), original = transfer))]
async fn transfer_losing_answers(
    client: &reqwest::Client,
    url: &str,
    letters: &MemoryDeadLetters,
    key: &retry_core::http::IdempotencyKey,
    transfer: &Transfer,
) -> Result<(), Lost> {
    use retry_core::reqwest::RequestBuilderExt;
    let body = serde_json::to_string(transfer).unwrap();
    let answer = client
        .post(url)
        .idempotency_key(key)
        .header("content-type", "application/json")
        .body(body)
        .send_checked()
        .await;
    assert!(answer.is_ok(), "the receiver answered: {answer:?}");
    Err(Lost)
}

#[tokio::test]
async fn a_lost_response_redriven_over_http_is_replayed_not_repeated() {
    use retry_core::tower::IdempotencyLayer;

    let effects = Arc::new(AtomicU32::new(0));
    let counted = effects.clone();
    let handler = move |body: String| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            format!("booked {body}")
        }
    };
    let app = axum::Router::new()
        .route("/transfers", axum::routing::post(handler))
        .layer(IdempotencyLayer::unauthenticated(MemoryStore::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/transfers", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = retry_core::reqwest::client_builder().build().unwrap();

    let letters = MemoryDeadLetters::new();
    let key = retry_core::http::IdempotencyKey::new();
    let transfer = Transfer {
        to: "B".into(),
        cents: 500,
        from: "A".into(),
    };
    let gave_up = transfer_losing_answers(&client, &url, &letters, &key, &transfer).await;
    assert!(gave_up.is_err());
    assert_eq!(effects.load(Ordering::SeqCst), 1, "the resend was absorbed");
    assert_eq!(pending(&letters).await, 1, "parked");

    let report = Redrive::new(&letters, "ops")
        .target(url.as_str())
        .run_letters(|letter| retry_core::dlq::http::post_letter(client.post(&url), letter))
        .await
        .unwrap();
    assert_eq!(report.letters, [(key.to_string(), Outcome::Redriven)]);
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "one side effect in total"
    );
    assert_eq!(pending(&letters).await, 0);
}

#[tokio::test]
async fn a_resend_carries_the_key_the_original_call_recorded() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = seen.clone();
    let handler = move |headers: axum::http::HeaderMap| {
        let record = record.clone();
        async move {
            let key = headers
                .get("idempotency-key")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            record.lock().unwrap().push(key);
            "ok"
        }
    };
    let app = axum::Router::new().route("/deposits", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/deposits", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = retry_core::reqwest::client_builder().build().unwrap();

    let letters = MemoryDeadLetters::new();
    park_all(
        &letters,
        [
            DeadLetter {
                idempotency_key: Some("key-of-the-first-call".into()),
                ..letter(1, FailureClass::System)
            },
            letter(2, FailureClass::System),
        ],
    )
    .await;
    let report = Redrive::new(&letters, "ops")
        .rate(1000)
        .run_letters(|letter| retry_core::dlq::http::post_letter(client.post(&url), letter))
        .await
        .unwrap();
    assert_eq!(report.record.succeeded, 2, "{:?}", report.letters);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|k| k.trim_matches('"')).collect::<Vec<_>>(),
        ["key-of-the-first-call", "2"],
        "the recorded key, else the msg_id"
    );
}

/// A library user's client follows redirects (reqwest's default): a `2xx` that came from
/// another URL than the letter was sent to does not acknowledge it.
#[tokio::test]
async fn a_2xx_after_a_redirect_the_client_followed_does_not_resolve_the_letter() {
    use axum::http::{StatusCode, header};

    let elsewhere = Arc::new(AtomicU32::new(0));
    let counted = elsewhere.clone();
    let app = axum::Router::new()
        .route(
            "/deposits",
            axum::routing::post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, "/elsewhere?sig=s3cret")],
                )
            }),
        )
        .route(
            "/elsewhere",
            axum::routing::post(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "taken elsewhere" }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = retry_core::reqwest::client_builder().build().unwrap();
    let url = format!("{base}/deposits");

    let letters = MemoryDeadLetters::new();
    park_all(&letters, [letter(1, FailureClass::System)]).await;
    let report = Redrive::new(&letters, "ops")
        .run_letters(|letter| retry_core::dlq::http::post_letter(client.post(&url), letter))
        .await
        .unwrap();
    assert_eq!(
        elsewhere.load(Ordering::SeqCst),
        1,
        "this client did follow it"
    );
    let [(_, Outcome::FailedAgain(why))] = &report.letters[..] else {
        panic!("{:?}", report.letters)
    };
    assert!(
        why.contains(&format!(
            "POST {base}/elsewhere answered 200 OK after a redirect from {url}"
        )),
        "{why}"
    );
    assert!(!why.contains("s3cret"), "{why}");
    assert_eq!(pending(&letters).await, 1, "not resolved");
}

/// A store that counts the letters each page asked for.
struct CountingPages {
    inner: MemoryDeadLetters,
    page_limits: Mutex<Vec<usize>>,
}

impl DeadLetterSink for CountingPages {
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        self.inner.park(letter).await
    }
}

impl DeadLetterStore for CountingPages {
    async fn page(&self, page: &Page) -> Result<Vec<DeadLetter>, DlqError> {
        self.page_limits.lock().unwrap().push(page.limit);
        self.inner.page(page).await
    }
    async fn stats(&self) -> Result<Stats, DlqError> {
        self.inner.stats().await
    }
    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        self.inner.get(msg_id).await
    }
    async fn lease(
        &self,
        msg_id: &str,
        run_id: &str,
        ttl: Duration,
    ) -> Result<Option<DeadLetter>, DlqError> {
        self.inner.lease(msg_id, run_id, ttl).await
    }
    async fn release(&self, msg_id: &str, run_id: &str) -> Result<bool, DlqError> {
        self.inner.release(msg_id, run_id).await
    }
    async fn resolve(&self, msg_id: &str, resolution: &Resolution) -> Result<bool, DlqError> {
        self.inner.resolve(msg_id, resolution).await
    }
    async fn put_back(
        &self,
        msg_id: &str,
        run_id: &str,
        failure: &Failure,
    ) -> Result<bool, DlqError> {
        self.inner.put_back(msg_id, run_id, failure).await
    }
    async fn purge_resolved(&self, before: SystemTime) -> Result<u64, DlqError> {
        self.inner.purge_resolved(before).await
    }
    async fn audit(&self, entry: &AuditEntry) -> Result<(), DlqError> {
        self.inner.audit(entry).await
    }
    async fn audit_rows(&self, run_id: Option<&str>) -> Result<Vec<AuditEntry>, DlqError> {
        self.inner.audit_rows(run_id).await
    }
    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        self.inner.record_redrive(record).await
    }
    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        self.inner.redrives().await
    }
}

/// Letters can be large: a run of 10 reads pages of 10, not the 200 a long run reads at a time.
#[tokio::test(start_paused = true)]
async fn a_run_reads_pages_no_larger_than_its_limit() {
    let store = CountingPages {
        inner: MemoryDeadLetters::new(),
        page_limits: Mutex::new(Vec::new()),
    };
    park_all(&store, (1..=150).map(|n| letter(n, FailureClass::System))).await;
    let (inbox, ledger) = (MemoryStore::new(), healthy());
    let report = Redrive::new(&store, "ops")
        .limit(10)
        .rate(1000)
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    assert_eq!(report.record.succeeded, 10);
    let limits = store.page_limits.lock().unwrap().clone();
    assert!(
        !limits.is_empty() && limits.iter().all(|&l| l <= 10),
        "{limits:?}"
    );
}

// ---- the safety check, one letter at a time ----

#[tokio::test(start_paused = true)]
async fn letters_whose_resend_could_repeat_an_effect_are_refused_and_audited_with_the_reason() {
    let letters = MemoryDeadLetters::new();
    let now = SystemTime::now();
    let days_ago = |days: u64| now - Duration::from_secs(days * 86_400);
    park_all(
        &letters,
        [
            DeadLetter {
                redacted: true,
                ..letter(1, FailureClass::System)
            },
            DeadLetter {
                first_failed_at: days_ago(10),
                ..letter(2, FailureClass::System)
            },
            DeadLetter {
                key_expires_at: Some(days_ago(0)),
                ..letter(3, FailureClass::System)
            },
            DeadLetter {
                key_scope: Some("tenant-a".into()),
                ..letter(4, FailureClass::System)
            },
            DeadLetter {
                key_scope: Some("tenant-b".into()),
                ..letter(5, FailureClass::System)
            },
            letter(6, FailureClass::System),
        ],
    )
    .await;
    let inbox = MemoryStore::new();
    let ledger = healthy();
    let report = Redrive::new(&letters, "alice")
        .retention(Duration::from_secs(7 * 86_400))
        .scope("tenant-b")
        .rate(1000)
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    let outcomes: HashMap<String, Outcome> = report.letters.iter().cloned().collect();
    let refused = |id: &str, words: &str| {
        let Outcome::Skipped(why) = &outcomes[id] else {
            panic!("{id}: {outcomes:?}")
        };
        assert!(why.contains(words), "{id}: {why}");
    };
    refused("1", "redacted");
    refused("2", "longer than the target keeps idempotency keys");
    refused("3", "forgot its idempotency key");
    refused("4", "scope \"tenant-a\"");
    assert_eq!(outcomes["5"], Outcome::Redriven, "the same scope");
    assert_eq!(
        outcomes["6"],
        Outcome::Redriven,
        "no scope recorded: not a mismatch"
    );
    assert_eq!(ledger.total_effects(), 2, "nothing refused was sent");
    assert_eq!((report.record.skipped, report.record.succeeded), (4, 2));

    let stats = letters.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.leased),
        (4, 0),
        "refused letters stay, released"
    );
    let rows = letters
        .audit_rows(Some(&report.record.run_id))
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        6,
        "a row for every letter the run held: {rows:?}"
    );
    let row = |id: &str| rows.iter().find(|r| r.msg_id == id).unwrap();
    assert!(
        row("1")
            .outcome
            .as_deref()
            .unwrap()
            .starts_with("skipped: the original was redacted")
    );
    assert_eq!(row("5").outcome.as_deref(), Some("redriven"));
    assert!(
        rows.iter()
            .all(|r| r.who == "alice" && r.finished_at.is_some())
    );
}

#[tokio::test(start_paused = true)]
async fn the_source_chooses_the_letters_of_one_function() {
    let letters = MemoryDeadLetters::new();
    park_all(
        &letters,
        (1..=6).map(|n| DeadLetter {
            source: Some(
                if n % 2 == 0 {
                    "bank::deposit"
                } else {
                    "bank::withdraw"
                }
                .into(),
            ),
            ..letter(n, FailureClass::System)
        }),
    )
    .await;
    let inbox = MemoryStore::new();
    let ledger = healthy();
    let report = Redrive::new(&letters, "alice")
        .filter(Filter::any().source("bank::deposit"))
        .rate(1000)
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    let sent: Vec<&str> = report.letters.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(sent, ["2", "4", "6"]);
    assert_eq!(report.record.filter, "source=bank::deposit");
    assert_eq!(pending(&letters).await, 3);
}

// ---- the audit, leases and runs at once ----

#[tokio::test(start_paused = true)]
async fn a_run_killed_during_a_send_leaves_the_intent_row_without_an_outcome() {
    let letters = MemoryDeadLetters::new();
    park_all(&letters, (1..=3).map(|n| letter(n, FailureClass::System))).await;
    let sent = AtomicU32::new(0);
    let run = Redrive::new(&letters, "alice")
        .target("slow")
        .run_letters(|_| {
            sent.fetch_add(1, Ordering::SeqCst);
            // A receiver that never answers.
            assume_idempotent(async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<(), std::io::Error>(())
            })
        });
    // Killed in the middle of the first send.
    assert!(
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .is_err()
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);

    let rows = letters.audit_rows(None).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].msg_id, "1");
    assert_eq!(
        (rows[0].who.as_str(), rows[0].target.as_str()),
        ("alice", "slow")
    );
    assert_eq!(
        rows[0].outcome, None,
        "the letter may or may not have reached the target"
    );
    assert_eq!(rows[0].finished_at, None);
    assert!(
        letters.redrives().await.unwrap().is_empty(),
        "the run never finished"
    );
    let stats = letters.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.leased),
        (3, 1),
        "still pending, held until the lease runs out"
    );
}

#[tokio::test(start_paused = true)]
async fn a_letter_another_run_holds_is_skipped_and_not_audited_by_this_one() {
    let letters = MemoryDeadLetters::new();
    park_all(&letters, (1..=3).map(|n| letter(n, FailureClass::System))).await;
    assert!(
        letters
            .lease("2", "other-run", Duration::from_secs(600))
            .await
            .unwrap()
            .is_some()
    );
    let inbox = MemoryStore::new();
    let ledger = healthy();
    let report = Redrive::new(&letters, "alice")
        .rate(1000)
        .run(|req: Deposit| deposit(&inbox, &ledger, req))
        .await
        .unwrap();
    let outcomes: HashMap<String, Outcome> = report.letters.into_iter().collect();
    assert!(
        matches!(&outcomes["2"], Outcome::Skipped(why) if why.contains("leased by another run"))
    );
    assert_eq!(ledger.total_effects(), 2);
    let rows = letters
        .audit_rows(Some(&report.record.run_id))
        .await
        .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.msg_id.as_str()).collect::<Vec<_>>(),
        ["1", "3"],
        "a row for the letters this run held"
    );
    assert!(letters.get("2").await.unwrap().unwrap().is_pending());
}

/// Two runs at once over the same 200 letters, each choosing all of them: every letter is sent
/// by exactly one run, and the audit has one row per letter with its outcome.
#[tokio::test(start_paused = true)]
async fn two_runs_at_once_send_each_letter_exactly_once() {
    let letters = Arc::new(MemoryDeadLetters::new());
    park_all(
        &*letters,
        (1..=200).map(|n| letter(n, FailureClass::System)),
    )
    .await;
    let sends = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
    let run = |who: &'static str| {
        let (letters, sends) = (letters.clone(), sends.clone());
        tokio::spawn(async move {
            Redrive::new(&*letters, who)
                .limit(1000)
                .rate(1000)
                .run_letters(|letter: &DeadLetter| {
                    let (sends, msg_id) = (sends.clone(), letter.msg_id.clone());
                    assume_idempotent(async move {
                        *sends.lock().unwrap().entry(msg_id).or_default() += 1;
                        // A receiver that takes a moment: the other run goes meanwhile.
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        Ok::<(), std::io::Error>(())
                    })
                })
                .await
                .unwrap()
        })
    };
    let (a, b) = (run("alice"), run("bob"));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());

    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 200, "every letter sent");
    assert!(sends.values().all(|&n| n == 1), "none twice: {sends:?}");
    assert_eq!(a.record.succeeded + b.record.succeeded, 200);
    assert!(
        a.record.succeeded > 0 && b.record.succeeded > 0,
        "both runs sent: they overlapped"
    );
    assert_eq!(
        a.record.skipped, b.record.succeeded,
        "each skipped what the other sent"
    );
    assert_eq!(pending(&*letters).await, 0);

    let rows = letters.audit_rows(None).await.unwrap();
    assert_eq!(rows.len(), 200, "one row per letter");
    let mut ids: Vec<&str> = rows.iter().map(|r| r.msg_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 200);
    assert!(
        rows.iter()
            .all(|r| r.outcome.as_deref() == Some("redriven")),
        "{rows:?}"
    );
    for (report, who) in [(&a, "alice"), (&b, "bob")] {
        let own = letters
            .audit_rows(Some(&report.record.run_id))
            .await
            .unwrap();
        assert_eq!(own.len() as u64, report.record.succeeded);
        assert!(own.iter().all(|r| r.who == who));
    }
}

/// On the real clock (leases run out by the wall clock): a send slower than the lease keeps it
/// renewed, so a second run started meanwhile does not send the letter as well.
#[tokio::test]
async fn a_send_slower_than_the_lease_keeps_the_letter_from_other_runs() {
    let letters = MemoryDeadLetters::new();
    park_all(&letters, [letter(1, FailureClass::System)]).await;
    let sends = AtomicU32::new(0);
    let slow = Redrive::new(&letters, "alice")
        .lease(Duration::from_secs(1))
        .run_letters(|_| {
            sends.fetch_add(1, Ordering::SeqCst);
            assume_idempotent(async {
                tokio::time::sleep(Duration::from_millis(1600)).await;
                Ok::<(), std::io::Error>(())
            })
        });
    let second = async {
        // After the first lease would have run out without renewal.
        tokio::time::sleep(Duration::from_millis(1300)).await;
        Redrive::new(&letters, "bob")
            .run_letters(|_| {
                sends.fetch_add(1, Ordering::SeqCst);
                assume_idempotent(async { Ok::<(), std::io::Error>(()) })
            })
            .await
            .unwrap()
    };
    let (slow, second) = tokio::join!(slow, second);
    assert_eq!(slow.unwrap().record.succeeded, 1);
    assert_eq!(second.record.succeeded, 0, "{:?}", second.letters);
    assert_eq!(sends.load(Ordering::SeqCst), 1);
}
