//! Fault: an idempotency store that stops answering. Every store operation of the
//! `#[idempotent]` flow waits at most the store's `operation_timeout` (10 s by default), so a hung
//! `claim`, `complete`, `release` or `commit_done` ends the call with an error naming the
//! operation and the wait instead of hanging it, and a `#[retryable]` loop above it gives up after
//! its attempts. A hung claim runs no body (fail closed); a hung commit rolls the handler's writes
//! back. All on tokio's paused clock: the 10 s waits take no real time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, DEFAULT_OPERATION_TIMEOUT, IdempotencyError,
    IdempotencyStore, MemoryStore, StoreError, TransactionalStore, encode_namespaced_key,
};
use retry_core::time::ManualClock;
use retry_core::{Classify, Decision, idempotent, retryable};
use tokio::time::Instant;

#[derive(Debug)]
enum Failed {
    Idempotency(IdempotencyError),
    Declined,
}

impl From<IdempotencyError> for Failed {
    fn from(e: IdempotencyError) -> Self {
        Failed::Idempotency(e)
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Idempotency(e) => write!(f, "{}", retry_core::error_chain(e)),
            Failed::Declined => f.write_str("declined"),
        }
    }
}

impl Classify for Failed {
    fn classify(&self) -> Decision {
        match self {
            Failed::Idempotency(e) => e.classify(),
            Failed::Declined => Decision::Stop,
        }
    }
}

/// A memory store whose chosen operations never answer, counting how often each was asked. Its
/// transactions buffer the handler's effects and apply them only when `commit_done` commits, as
/// a database transaction would.
struct HangingStore {
    inner: MemoryStore,
    clock: Arc<ManualClock>,
    hang: Mutex<HashSet<&'static str>>,
    asked: Mutex<HashMap<&'static str, u32>>,
    /// The effects of committed transactions: deposit numbers.
    committed: Mutex<Vec<u64>>,
}

impl HangingStore {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::new(
            UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        ));
        HangingStore {
            inner: MemoryStore::with_clock(clock.clone()),
            clock,
            hang: Mutex::default(),
            asked: Mutex::default(),
            committed: Mutex::default(),
        }
    }

    fn hang(&self, operation: &'static str, hang: bool) {
        let mut hung = self.hang.lock().unwrap_or_else(PoisonError::into_inner);
        if hang {
            hung.insert(operation);
        } else {
            hung.remove(operation);
        }
    }

    fn asked(&self, operation: &str) -> u32 {
        let asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        asked.get(operation).copied().unwrap_or(0)
    }

    /// Counts the call, then never answers if `operation` hangs.
    async fn enter(&self, operation: &'static str) {
        *self
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(operation)
            .or_default() += 1;
        let hangs = self
            .hang
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(operation);
        if hangs {
            std::future::pending::<()>().await;
        }
    }

    fn committed(&self) -> Vec<u64> {
        self.committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What a resend of `deposit_no` finds in the store now (a probe: it changes nothing unless
    /// the key is free, which no check below expects).
    /// The row `function` keeps for `deposit_no`.
    async fn row(&self, function: &str, deposit_no: u64) -> ClaimOutcome {
        let key = encode_namespaced_key(function, None::<&str>, &deposit_no);
        let request = ClaimRequest {
            key: &key,
            biz_key: &key,
            fingerprint: None,
            lease: Duration::from_secs(30),
            retention: Duration::from_secs(86_400),
        };
        self.inner.claim(&request).await.unwrap()
    }
}

impl IdempotencyStore for HangingStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.enter("claim").await;
        self.inner.claim(request).await
    }
    async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
        self.enter("complete").await;
        self.inner.complete(claim, response).await
    }
    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.enter("release").await;
        self.inner.release(claim).await
    }
    async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
        self.enter("mark_failed").await;
        self.inner.mark_failed(claim, failure).await
    }
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        self.enter("renew").await;
        self.inner.renew(claim, lease).await
    }
    async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
        self.inner.purge_older_than(age).await
    }
}

impl TransactionalStore for HangingStore {
    /// The handler's writes, applied at commit.
    type Transaction = Vec<u64>;

    async fn begin(&self) -> Result<Vec<u64>, StoreError> {
        self.enter("begin").await;
        Ok(Vec::new())
    }
    async fn commit_done(
        &self,
        transaction: Vec<u64>,
        claim: &Claim,
        response: &str,
    ) -> Result<(), StoreError> {
        self.enter("commit_done").await;
        self.inner.complete(claim, response).await?;
        self.committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(transaction);
        Ok(())
    }
    async fn rollback(&self, _transaction: Vec<u64>) -> Result<(), StoreError> {
        self.enter("rollback").await;
        Ok(())
    }
}

/// The side effects of the non-transactional handlers: deposit numbers, one per body run.
#[derive(Default)]
struct Ledger(Mutex<Vec<u64>>);

impl Ledger {
    fn record(&self, deposit_no: u64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(deposit_no);
    }
    fn effects(&self) -> Vec<u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Each deposit number at most once, and all of `expected`.
fn assert_once_each(effects: &[u64], expected: &[u64]) {
    let mut sorted = effects.to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted, expected, "side effects == unique keys, each once");
}

/// The error of a call that hit the bound: unavailable, naming the operation and the wait, with
/// an `io::Error` of kind `TimedOut` as its source.
fn assert_no_answer(error: &Failed, operation: &str) {
    let Failed::Idempotency(IdempotencyError::Store(StoreError::Unavailable(source))) = error
    else {
        panic!("expected the store to be unavailable, got {error:?}");
    };
    assert_eq!(
        error.to_string(),
        format!("idempotency store unavailable: `{operation}` did not answer within 10s"),
    );
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("an io::Error source");
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut, "{io:?}");
}

/// Nothing here may wait longer than this; past it the test fails instead of hanging.
const HUNG: Duration = Duration::from_secs(3_600);

#[retryable(max = 3, base = "1s", cap = "1s", jitter = "none")]
#[idempotent(key = deposit_no, store = inbox, on_err = "release")]
async fn deposit(inbox: &HangingStore, ledger: &Ledger, deposit_no: u64) -> Result<u64, Failed> {
    ledger.record(deposit_no);
    Ok(deposit_no)
}

#[tokio::test(start_paused = true)]
async fn a_claim_that_never_answers_fails_closed_and_the_retry_loop_gives_up() {
    assert_eq!(DEFAULT_OPERATION_TIMEOUT, Duration::from_secs(10));
    let (inbox, ledger) = (HangingStore::new(), Ledger::default());
    inbox.hang("claim", true);

    let started = Instant::now();
    let error = tokio::time::timeout(HUNG, deposit(&inbox, &ledger, 1))
        .await
        .expect("a hung claim hung the retry loop")
        .unwrap_err();
    assert_no_answer(&error, "claim");
    // Three attempts of 10 s each, 1 s apart; none ran the body.
    assert_eq!(inbox.asked("claim"), 3);
    assert_eq!(started.elapsed(), Duration::from_secs(32));
    assert!(
        ledger.effects().is_empty(),
        "fail closed: no claim, no body"
    );

    // The store answers again: every key goes through, each body once.
    inbox.hang("claim", false);
    for deposit_no in [1, 2, 3, 1, 2] {
        assert_eq!(
            deposit(&inbox, &ledger, deposit_no).await.unwrap(),
            deposit_no
        );
    }
    assert_once_each(&ledger.effects(), &[1, 2, 3]);
    for deposit_no in [1, 2, 3] {
        assert_eq!(
            inbox.row("deposit", deposit_no).await,
            ClaimOutcome::Done(deposit_no.to_string()),
            "no inbox row lost"
        );
    }
}

#[idempotent(key = deposit_no, store = inbox, lease = "30s", on_err = "release")]
async fn deposit_once(
    inbox: &HangingStore,
    ledger: &Ledger,
    deposit_no: u64,
    decline: bool,
) -> Result<u64, Failed> {
    if decline {
        return Err(Failed::Declined);
    }
    ledger.record(deposit_no);
    Ok(deposit_no)
}

/// Non-transactional mode: the effect happened, so the call answers `Ok` after one bounded wait
/// (not one per retry of the store); the response is not stored, and a duplicate gets
/// `InProgress` until the lease ends. After it, the body runs again: the gap transactional mode
/// closes (next test).
#[tokio::test(start_paused = true)]
async fn a_complete_that_never_answers_returns_after_one_wait_and_duplicates_wait_for_the_lease() {
    let (inbox, ledger) = (HangingStore::new(), Ledger::default());
    inbox.hang("complete", true);

    let started = Instant::now();
    let answer = tokio::time::timeout(HUNG, deposit_once(&inbox, &ledger, 7, false))
        .await
        .expect("a hung complete hung the call");
    assert_eq!(answer.unwrap(), 7, "the effect is real: the call says so");
    assert_eq!(started.elapsed(), DEFAULT_OPERATION_TIMEOUT);
    assert_eq!(
        inbox.asked("complete"),
        1,
        "no second wait on a store that timed out"
    );
    assert_eq!(ledger.effects(), [7]);

    inbox.hang("complete", false);
    let error = deposit_once(&inbox, &ledger, 7, false).await.unwrap_err();
    assert!(
        matches!(error, Failed::Idempotency(IdempotencyError::InProgress)),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "a call with the same idempotency key is in progress"
    );
    assert_eq!(ledger.effects(), [7], "no second effect within the lease");

    inbox.clock.advance(Duration::from_secs(31));
    assert_eq!(deposit_once(&inbox, &ledger, 7, false).await.unwrap(), 7);
    assert_eq!(
        ledger.effects(),
        [7, 7],
        "non-transactional: a lost response means the body runs again after the lease"
    );
}

#[idempotent(key = deposit_no, store = inbox, transaction = tx, lease = "30s")]
async fn deposit_tx(
    inbox: &HangingStore,
    tx: &mut Vec<u64>,
    deposit_no: u64,
) -> Result<u64, Failed> {
    tx.push(deposit_no);
    Ok(deposit_no)
}

/// Transactional mode: a commit that never answers fails the call naming it, and the handler's
/// writes are not committed; once the lease ends the resend commits them exactly once.
#[tokio::test(start_paused = true)]
async fn a_commit_that_never_answers_fails_the_call_and_its_writes_roll_back() {
    let inbox = HangingStore::new();
    inbox.hang("commit_done", true);

    let started = Instant::now();
    let error = tokio::time::timeout(HUNG, deposit_tx(&inbox, 5))
        .await
        .expect("a hung commit hung the call")
        .unwrap_err();
    assert_no_answer(&error, "commit_done");
    assert_eq!(started.elapsed(), DEFAULT_OPERATION_TIMEOUT);
    assert!(inbox.committed().is_empty(), "the writes rolled back");

    inbox.hang("commit_done", false);
    let error = deposit_tx(&inbox, 5).await.unwrap_err();
    assert!(
        matches!(error, Failed::Idempotency(IdempotencyError::InProgress)),
        "within the lease: {error:?}"
    );
    inbox.clock.advance(Duration::from_secs(31));
    for deposit_no in [5, 6, 5, 6] {
        assert_eq!(deposit_tx(&inbox, deposit_no).await.unwrap(), deposit_no);
    }
    assert_once_each(&inbox.committed(), &[5, 6]);
    for deposit_no in [5, 6] {
        assert_eq!(
            inbox.row("deposit_tx", deposit_no).await,
            ClaimOutcome::Done(deposit_no.to_string()),
            "no inbox row lost"
        );
    }
}

/// A failed body whose release never answers: the caller still gets the body's own error after
/// one bounded wait; the claim is freed by its lease.
#[tokio::test(start_paused = true)]
async fn a_release_that_never_answers_still_returns_the_handlers_error() {
    let (inbox, ledger) = (HangingStore::new(), Ledger::default());
    inbox.hang("release", true);

    let started = Instant::now();
    let error = tokio::time::timeout(HUNG, deposit_once(&inbox, &ledger, 9, true))
        .await
        .expect("a hung release hung the call")
        .unwrap_err();
    assert!(matches!(error, Failed::Declined), "{error:?}");
    assert_eq!(started.elapsed(), DEFAULT_OPERATION_TIMEOUT);

    inbox.hang("release", false);
    assert!(matches!(
        deposit_once(&inbox, &ledger, 9, false).await.unwrap_err(),
        Failed::Idempotency(IdempotencyError::InProgress)
    ));
    inbox.clock.advance(Duration::from_secs(31));
    assert_eq!(deposit_once(&inbox, &ledger, 9, false).await.unwrap(), 9);
    assert_eq!(deposit_once(&inbox, &ledger, 9, false).await.unwrap(), 9);
    assert_once_each(&ledger.effects(), &[9]);
    assert_eq!(
        inbox.row("deposit_once", 9).await,
        ClaimOutcome::Done("9".into())
    );
}
