//! `#[idempotent]` when the first run's outcome is unknown: a key is freed for a second run only
//! when the library knows the first run's effect did not happen. Every test counts the body's
//! effects, and every one of them must end at exactly one. (The HTTP layer's side is in
//! `tests/http_unknown_outcome.rs`, the stores' contract in `tests/conformance.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_core::idempotency::{IdempotencyError, IdempotencyStore, MemoryStore};
use retry_core::{Classify, Decision, Elapsed, idempotent, retryable};
use retry_sqlite::SqliteStore;

use crate::tempdir;
use tempdir::TempDir;

#[derive(Debug)]
enum PayError {
    Idempotency(IdempotencyError),
    TimedOut,
}

impl From<IdempotencyError> for PayError {
    fn from(e: IdempotencyError) -> Self {
        PayError::Idempotency(e)
    }
}

impl From<Elapsed> for PayError {
    fn from(_: Elapsed) -> Self {
        PayError::TimedOut
    }
}

impl Classify for PayError {
    fn classify(&self) -> Decision {
        match self {
            PayError::Idempotency(e) => e.classify(),
            PayError::TimedOut => Decision::Retry,
        }
    }
}

impl PayError {
    fn in_progress(&self) -> bool {
        matches!(self, PayError::Idempotency(IdempotencyError::InProgress))
    }
}

/// Does its effect, then takes 300 ms more: every attempt is cut off by the 50 ms timeout after
/// the effect happened.
#[retryable(max = 5, base = "10ms", cap = "40ms", attempt_timeout = "50ms")]
#[idempotent(key = payment, store = inbox, on_err = "keep")]
async fn pay_then_stall(
    inbox: &MemoryStore,
    payment: u64,
    effects: &AtomicU32,
) -> Result<u64, PayError> {
    effects.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(payment)
}

#[tokio::test(start_paused = true)]
async fn an_attempt_cut_off_after_its_effect_is_never_run_again() {
    let inbox = Arc::new(MemoryStore::new());
    let effects = Arc::new(AtomicU32::new(0));

    // The retry loop gives up: every attempt after the first finds the key in progress (the
    // timed-out attempt may have paid), none runs the body.
    let error = pay_then_stall(&inbox, 1, &effects).await.unwrap_err();
    assert!(error.in_progress(), "{error:?}");
    assert_eq!(effects.load(Ordering::SeqCst), 1);

    // The caller's own timeout drops the whole call mid-body.
    let cut = tokio::time::timeout(
        Duration::from_millis(20),
        pay_then_stall(&inbox, 2, &effects),
    )
    .await;
    assert!(cut.is_err(), "the caller gave up");
    assert_eq!(effects.load(Ordering::SeqCst), 2);

    // A task cancelled mid-body.
    let task = tokio::spawn({
        let (inbox, effects) = (inbox.clone(), effects.clone());
        async move {
            let _ = pay_then_stall(&inbox, 3, &effects).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(effects.load(Ordering::SeqCst), 3);

    // Resends long after, within the lease: none runs the body again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for payment in [1, 2, 3] {
        let error = pay_then_stall(&inbox, payment, &effects).await.unwrap_err();
        assert!(error.in_progress(), "payment {payment}: {error:?}");
    }
    assert_eq!(
        effects.load(Ordering::SeqCst),
        3,
        "each payment's effect exactly once"
    );
}

/// A body that takes 2.5 s on a 1 s lease: its lease is renewed while it runs.
#[idempotent(key = payment, store = inbox, lease = "1s")]
async fn slow_payment<S: IdempotencyStore>(
    inbox: &S,
    payment: u64,
    effects: &AtomicU32,
) -> Result<u64, PayError> {
    effects.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    Ok(payment * 10)
}

/// The real clock: the stores read the system clock for leases, as in production.
async fn a_duplicate_never_takes_over_a_slow_body<S: IdempotencyStore>(inbox: &S) {
    let effects = AtomicU32::new(0);
    let first = slow_payment(inbox, 7, &effects);
    let duplicate = async {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        slow_payment(inbox, 7, &effects).await
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    assert_eq!(first.unwrap(), 70);
    let error = duplicate.unwrap_err();
    assert!(
        error.in_progress(),
        "at 1.5 s the 1 s lease was renewed: the duplicate must wait, got {error:?}"
    );
    assert_eq!(slow_payment(inbox, 7, &effects).await.unwrap(), 70);
    assert_eq!(effects.load(Ordering::SeqCst), 1, "effects exactly once");
}

#[tokio::test]
async fn a_body_slower_than_its_lease_is_not_taken_over_in_memory() {
    a_duplicate_never_takes_over_a_slow_body(&MemoryStore::new()).await;
}

#[tokio::test]
async fn a_body_slower_than_its_lease_is_not_taken_over_in_sqlite() {
    let dir = TempDir::new("slow-body");
    let inbox = SqliteStore::open(dir.file("inbox.sqlite3")).unwrap();
    a_duplicate_never_takes_over_a_slow_body(&inbox).await;
}

#[idempotent(key = order, store = inbox)]
async fn charge(inbox: &MemoryStore, order: u64, runs: &AtomicU32) -> Result<u64, PayError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(order * 100)
}

#[idempotent(key = order, store = inbox)]
async fn ship(inbox: &MemoryStore, order: u64, runs: &AtomicU32) -> Result<String, PayError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(format!("parcel for order {order}"))
}

/// A namespace pinned across a rename: the old and the new function share their keys.
#[idempotent(key = order, store = inbox, namespace = "charge")]
async fn charge_renamed(
    inbox: &MemoryStore,
    order: u64,
    runs: &AtomicU32,
) -> Result<u64, PayError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(order * 100)
}

#[tokio::test]
async fn two_functions_on_one_store_never_answer_for_each_other() {
    let inbox = MemoryStore::new();
    let (charges, shipments) = (AtomicU32::new(0), AtomicU32::new(0));
    for _ in 0..3 {
        assert_eq!(charge(&inbox, 42, &charges).await.unwrap(), 4_200);
        assert_eq!(
            ship(&inbox, 42, &shipments).await.unwrap(),
            "parcel for order 42"
        );
    }
    assert_eq!(charges.load(Ordering::SeqCst), 1, "charge ran once");
    assert_eq!(shipments.load(Ordering::SeqCst), 1, "ship ran once");

    assert_eq!(
        charge_renamed(&inbox, 42, &charges).await.unwrap(),
        4_200,
        "the pinned namespace finds charge's answer"
    );
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}

/// Releases its failure (it comes before any effect), and reports the downstream key its
/// claim derives for the ledger call.
#[idempotent(key = order, store = inbox, on_err = "release")]
async fn book(inbox: &MemoryStore, order: u64, fail: bool) -> Result<String, PayError> {
    let claim = retry_core::idempotency::current().expect("inside the body");
    let downstream = claim.derive("ledger").as_str().to_owned();
    if fail {
        return Err(PayError::TimedOut);
    }
    Ok(downstream)
}

#[tokio::test]
async fn a_body_derives_the_same_downstream_key_on_every_run_of_its_key() {
    let inbox = MemoryStore::new();
    assert!(retry_core::idempotency::current().is_none());
    assert!(book(&inbox, 1, true).await.is_err());
    let derived = book(&inbox, 1, false).await.unwrap();
    assert_eq!(derived.len(), 32);
    assert_eq!(
        book(&inbox, 1, false).await.unwrap(),
        derived,
        "stored answer"
    );
    let other = MemoryStore::new();
    assert_eq!(
        book(&other, 1, false).await.unwrap(),
        derived,
        "the same key derives the same downstream key, on every run"
    );
    assert_ne!(book(&inbox, 2, false).await.unwrap(), derived);
}

/// Answers with more than the store keeps (1 MiB by default).
#[idempotent(key = order, store = inbox)]
async fn export(inbox: &MemoryStore, order: u64, runs: &AtomicU32) -> Result<String, PayError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok("x".repeat(2 << 20))
}

/// The effect happened but its response cannot be kept: the key is kept failed, so no resend
/// runs the body again (neither now nor once the lease would have run out).
#[tokio::test]
async fn a_response_too_large_to_store_keeps_the_key_failed() {
    let (inbox, runs) = (MemoryStore::new(), AtomicU32::new(0));
    assert_eq!(export(&inbox, 1, &runs).await.unwrap().len(), 2 << 20);
    let error = export(&inbox, 1, &runs).await.unwrap_err();
    let PayError::Idempotency(IdempotencyError::PreviouslyFailed(first)) = &error else {
        panic!("a resend must be refused, got {error:?}");
    };
    assert!(
        first.starts_with("the response was not stored: response is"),
        "{first}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "effects exactly once");
}
