//! `#[idempotent]` on `MemoryStore`: duplicates get the first response, concurrent duplicates get
//! `InProgress`, leases are taken over with fencing, and the attribute composes with
//! `#[retryable]`. The same flow runs on `SqliteStore` in `tests/sqlite_idempotent.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, Limits, MemoryStore,
    StoreError,
};
use retry_core::time::ManualClock;
use retry_core::{Classify, Decision, idempotent, retryable};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    msg_no: u64,
    amount: u64,
    /// Which call produced the response: duplicates must see the first one's.
    produced_by: String,
}

#[derive(Debug)]
enum DepositError {
    Idempotency(IdempotencyError),
    Declined,
    Unavailable,
}

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError::Idempotency(e)
    }
}

impl From<retry_core::Elapsed> for DepositError {
    fn from(_: retry_core::Elapsed) -> Self {
        DepositError::Unavailable
    }
}

impl Classify for DepositError {
    fn classify(&self) -> Decision {
        match self {
            DepositError::Idempotency(e) => e.classify(),
            DepositError::Declined => Decision::Stop,
            DepositError::Unavailable => Decision::Retry,
        }
    }
}

impl DepositError {
    fn idempotency(&self) -> Option<&IdempotencyError> {
        match self {
            DepositError::Idempotency(e) => Some(e),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct Deposit {
    sender: String,
    msg_no: u64,
    amount: u64,
}

fn deposit_of(msg_no: u64, amount: u64) -> Deposit {
    Deposit {
        sender: "bank-a".into(),
        msg_no,
        amount,
    }
}

/// The side effect: counts how often a body ran.
#[derive(Default)]
struct Ledger {
    effects: AtomicU32,
}

#[idempotent(key = (req.sender.as_str(), req.msg_no), store = inbox, fingerprint = req.amount)]
async fn deposit(
    inbox: &MemoryStore,
    ledger: &Ledger,
    req: Deposit,
    who: &str,
) -> Result<Receipt, DepositError> {
    ledger.effects.fetch_add(1, Ordering::SeqCst);
    // Long enough for concurrent duplicates to arrive while the first call runs.
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(Receipt {
        msg_no: req.msg_no,
        amount: req.amount,
        produced_by: who.to_owned(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_duplicates_run_the_body_once() {
    let inbox = Arc::new(MemoryStore::new());
    let ledger = Arc::new(Ledger::default());
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (inbox, ledger) = (inbox.clone(), ledger.clone());
            tokio::spawn(async move {
                deposit(&inbox, &ledger, deposit_of(1, 100), &format!("caller-{i}")).await
            })
        })
        .collect();
    let mut stored = None;
    let mut in_progress = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(receipt) => assert_eq!(stored.get_or_insert(receipt.clone()), &receipt),
            Err(e) => {
                assert!(
                    matches!(e.idempotency(), Some(IdempotencyError::InProgress)),
                    "{e:?}"
                );
                in_progress += 1;
            }
        }
    }
    assert_eq!(ledger.effects.load(Ordering::SeqCst), 1);
    let first = stored.expect("the winner got its response");
    assert!(in_progress < 64);
    // Afterwards every duplicate gets the stored response.
    for _ in 0..10 {
        let again = deposit(&inbox, &ledger, deposit_of(1, 100), "late")
            .await
            .unwrap();
        assert_eq!(again, first);
    }
    assert_eq!(ledger.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_same_key_with_another_payload_is_key_reused() {
    let (inbox, ledger) = (MemoryStore::new(), Ledger::default());
    deposit(&inbox, &ledger, deposit_of(2, 100), "first")
        .await
        .unwrap();
    let err = deposit(&inbox, &ledger, deposit_of(2, 999), "second")
        .await
        .unwrap_err();
    assert!(
        matches!(err.idempotency(), Some(IdempotencyError::KeyReused)),
        "{err:?}"
    );
    assert_eq!(ledger.effects.load(Ordering::SeqCst), 1);
}

#[idempotent(key = msg_no, store = inbox, scope = tenant)]
async fn scoped(
    inbox: &MemoryStore,
    tenant: &str,
    msg_no: u64,
    ledger: &Ledger,
) -> Result<String, DepositError> {
    ledger.effects.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{tenant}'s answer"))
}

#[tokio::test]
async fn a_key_in_another_scope_runs_for_that_scope_only() {
    let (inbox, ledger) = (MemoryStore::new(), Ledger::default());
    assert_eq!(
        scoped(&inbox, "tenant-a", 5, &ledger).await.unwrap(),
        "tenant-a's answer"
    );
    assert_eq!(
        scoped(&inbox, "tenant-b", 5, &ledger).await.unwrap(),
        "tenant-b's answer"
    );
    assert_eq!(
        scoped(&inbox, "tenant-a", 5, &ledger).await.unwrap(),
        "tenant-a's answer"
    );
    assert_eq!(ledger.effects.load(Ordering::SeqCst), 2);
}

#[idempotent(key = msg_no, store = inbox, on_err = "release")]
async fn fails_then_succeeds(
    inbox: &MemoryStore,
    msg_no: u64,
    ledger: &Ledger,
) -> Result<u32, DepositError> {
    match ledger.effects.fetch_add(1, Ordering::SeqCst) {
        0 => Err(DepositError::Declined),
        n => Ok(n),
    }
}

/// The default `on_err`: the effect happened, then the call failed.
#[idempotent(key = msg_no, store = inbox)]
async fn fails_after_its_effect(
    inbox: &MemoryStore,
    msg_no: u64,
    ledger: &Ledger,
) -> Result<u32, DepositError> {
    ledger.effects.fetch_add(1, Ordering::SeqCst);
    Err(DepositError::Declined)
}

#[tokio::test]
async fn a_failed_call_keeps_its_failure_for_resends_by_default() {
    let (inbox, ledger) = (MemoryStore::new(), Ledger::default());
    assert!(matches!(
        fails_after_its_effect(&inbox, 1, &ledger).await,
        Err(DepositError::Declined)
    ));
    for _ in 0..3 {
        let err = fails_after_its_effect(&inbox, 1, &ledger)
            .await
            .unwrap_err();
        let Some(IdempotencyError::PreviouslyFailed(first)) = err.idempotency() else {
            panic!("a resend must get the stored failure, got {err:?}");
        };
        assert_eq!(
            first, "Declined",
            "the first call's failure, as it was kept"
        );
        assert_eq!(
            err.idempotency().unwrap().to_string(),
            "a call with the same idempotency key failed before: Declined"
        );
    }
    assert_eq!(
        ledger.effects.load(Ordering::SeqCst),
        1,
        "effects exactly once"
    );
}

#[tokio::test]
async fn on_err_release_frees_the_key_of_a_failure_that_came_before_any_effect() {
    let (inbox, ledger) = (MemoryStore::new(), Ledger::default());
    assert!(matches!(
        fails_then_succeeds(&inbox, 1, &ledger).await,
        Err(DepositError::Declined)
    ));
    assert_eq!(
        fails_then_succeeds(&inbox, 1, &ledger).await.unwrap(),
        1,
        "the resend ran again"
    );
    assert_eq!(
        fails_then_succeeds(&inbox, 1, &ledger).await.unwrap(),
        1,
        "then it is done"
    );
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

#[idempotent(key = msg_no, store = inbox)]
async fn against_down_store(
    inbox: &Down,
    msg_no: u64,
    ledger: &Ledger,
) -> Result<(), DepositError> {
    ledger.effects.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn a_store_that_is_down_fails_closed() {
    let ledger = Ledger::default();
    let err = against_down_store(&Down, 1, &ledger).await.unwrap_err();
    let message = err
        .idempotency()
        .map(|e| retry_core::error_chain(e).to_string())
        .unwrap_or_default();
    assert_eq!(message, "idempotency store unavailable: connection refused");
    assert_eq!(
        ledger.effects.load(Ordering::SeqCst),
        0,
        "the body must not run without a claim"
    );
}

#[idempotent(key = msg_no, store = inbox, lease = "10s")]
async fn slow_holder(
    inbox: &MemoryStore,
    msg_no: u64,
    gate: &tokio::sync::Notify,
    who: &str,
) -> Result<String, DepositError> {
    gate.notified().await;
    Ok(who.to_owned())
}

#[tokio::test]
async fn a_late_completion_after_a_takeover_is_refused() {
    let clock = Arc::new(ManualClock::new(SystemTime::now()));
    let inbox = MemoryStore::with_clock(clock.clone());
    let (old_gate, new_gate) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
    let old = slow_holder(&inbox, 9, &old_gate, "old holder");
    tokio::pin!(old);
    // Let the old holder claim, then stall inside its body.
    assert!(futures_poll_once(old.as_mut()).await.is_none());
    let early = slow_holder(&inbox, 9, &new_gate, "too early")
        .await
        .unwrap_err();
    assert!(
        matches!(early.idempotency(), Some(IdempotencyError::InProgress)),
        "not before the lease ends"
    );
    clock.advance(Duration::from_secs(11));
    new_gate.notify_one();
    assert_eq!(
        slow_holder(&inbox, 9, &new_gate, "new holder")
            .await
            .unwrap(),
        "new holder"
    );
    old_gate.notify_one();
    // The old holder's effect happened, so it gets its `Ok`; its completion is refused.
    assert_eq!(old.await.unwrap(), "old holder");
    let third = slow_holder(&inbox, 9, &new_gate, "third").await.unwrap();
    assert_eq!(
        third, "new holder",
        "the stored response is the new holder's"
    );
}

/// Polls a future once; `Some` if it finished.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// A dropped call (a timeout, a cancelled task) may have had its effect: its key is not freed
/// at once, only by the lease, as after a crash.
#[tokio::test]
async fn a_dropped_call_leaves_its_key_in_progress_until_the_lease_runs_out() {
    let clock = Arc::new(ManualClock::new(SystemTime::now()));
    let inbox = MemoryStore::with_clock(clock.clone());
    let gate = tokio::sync::Notify::new();
    {
        let call = slow_holder(&inbox, 3, &gate, "dropped");
        tokio::pin!(call);
        assert!(futures_poll_once(call.as_mut()).await.is_none());
    }
    gate.notify_one();
    let err = slow_holder(&inbox, 3, &gate, "too soon").await.unwrap_err();
    assert!(
        matches!(err.idempotency(), Some(IdempotencyError::InProgress)),
        "a resend right after the drop must not run: {err:?}"
    );
    clock.advance(Duration::from_secs(11));
    gate.notify_one();
    assert_eq!(
        slow_holder(&inbox, 3, &gate, "after the lease")
            .await
            .unwrap(),
        "after the lease"
    );
}

#[idempotent(key = key, store = inbox)]
async fn with_key(inbox: &MemoryStore, key: String, ledger: &Ledger) -> Result<(), DepositError> {
    ledger.effects.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn an_oversized_key_is_rejected_before_the_store_is_touched() {
    let (inbox, ledger) = (MemoryStore::new(), Ledger::default());
    let err = with_key(&inbox, "k".repeat(600), &ledger)
        .await
        .unwrap_err();
    let message = err
        .idempotency()
        .map(ToString::to_string)
        .unwrap_or_default();
    let stored =
        retry_core::idempotency::encode_namespaced_key("with_key", None::<&str>, &"k".repeat(600));
    assert_eq!(
        message,
        format!(
            "idempotency key is {} bytes, more than the {} allowed",
            stored.len(),
            Limits::default().max_key_bytes
        )
    );
    assert_eq!((ledger.effects.load(Ordering::SeqCst), inbox.len()), (0, 0));
}

#[tokio::test]
async fn a_holder_fenced_before_a_release_cannot_complete_the_next_claim() {
    let clock = Arc::new(ManualClock::new(SystemTime::now()));
    let inbox = MemoryStore::with_clock(clock.clone());
    let request = ClaimRequest {
        key: "k",
        biz_key: "k",
        fingerprint: None,
        lease: Duration::from_secs(1),
        retention: Duration::from_secs(60),
    };
    let ClaimOutcome::Claimed(stale) = inbox.claim(&request).await.unwrap() else {
        panic!()
    };
    clock.advance(Duration::from_secs(2));
    let ClaimOutcome::Claimed(second) = inbox.claim(&request).await.unwrap() else {
        panic!()
    };
    inbox.release(&second).await.unwrap();
    let ClaimOutcome::Claimed(third) = inbox.claim(&request).await.unwrap() else {
        panic!()
    };
    assert!(third.token > second.token && second.token > stale.token);
    assert!(matches!(
        inbox.complete(&stale, "\"stale\"").await,
        Err(StoreError::Fenced)
    ));
    inbox.complete(&third, "\"third\"").await.unwrap();
}

// ---- with #[retryable] ----

static ONE_CLAIM_CALLS: AtomicU32 = AtomicU32::new(0);

#[idempotent(key = msg_no, store = inbox, lease = "1m")]
#[retryable(max = 3, base = "10ms", deadline = "20s", attempt_timeout = "5s")]
async fn one_claim_retries_inside(inbox: &MemoryStore, msg_no: u64) -> Result<u32, DepositError> {
    match ONE_CLAIM_CALLS.fetch_add(1, Ordering::SeqCst) {
        0 | 1 => Err(DepositError::Unavailable),
        n => Ok(n),
    }
}

#[tokio::test(start_paused = true)]
async fn idempotent_above_retryable_claims_once_and_retries_inside() {
    let inbox = MemoryStore::new();
    assert_eq!(one_claim_retries_inside(&inbox, 1).await.unwrap(), 2);
    assert_eq!(
        ONE_CLAIM_CALLS.load(Ordering::SeqCst),
        3,
        "two failures retried inside the claim"
    );
    assert_eq!(
        one_claim_retries_inside(&inbox, 1).await.unwrap(),
        2,
        "a duplicate gets the stored response"
    );
    assert_eq!(ONE_CLAIM_CALLS.load(Ordering::SeqCst), 3);
}

#[retryable(max = 4, base = "10ms")]
#[idempotent(key = msg_no, store = inbox, on_err = "release")]
async fn claim_per_attempt(
    inbox: &MemoryStore,
    msg_no: u64,
    ledger: &Ledger,
) -> Result<u32, DepositError> {
    match ledger.effects.fetch_add(1, Ordering::SeqCst) {
        0 => Err(DepositError::Unavailable),
        n => Ok(n),
    }
}

#[tokio::test(start_paused = true)]
async fn retryable_above_idempotent_claims_per_attempt() {
    let (inbox, ledger) = (MemoryStore::new(), Ledger::default());
    // The first attempt fails and releases its claim, the second claims again and succeeds.
    assert_eq!(claim_per_attempt(&inbox, 4, &ledger).await.unwrap(), 1);
    assert_eq!(claim_per_attempt(&inbox, 4, &ledger).await.unwrap(), 1);
    assert_eq!(ledger.effects.load(Ordering::SeqCst), 2);
}

#[test]
fn idempotent_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (inbox, ledger) = (MemoryStore::new(), Ledger::default());
    assert_send(&deposit(&inbox, &ledger, deposit_of(1, 1), "x"));
    assert_send(&one_claim_retries_inside(&inbox, 1));
    assert_send(&claim_per_attempt(&inbox, 1, &ledger));
}
