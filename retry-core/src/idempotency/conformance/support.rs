//! What the checks share: the leases and retention they claim with, claims that expect an
//! answer, and waits on the real clock.

use std::time::{Duration, Instant};

use crate::conformance::join_all;
use crate::idempotency::{Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, StoreError};

/// A lease the checks wait out: short, so the suite stays fast.
pub(super) const SHORT: Duration = Duration::from_millis(200);
/// How far past the end of a lease a check waits before it expects the lease to have run out:
/// room for the store's own timestamps (microseconds, or the database's transaction start).
pub(super) const MARGIN: Duration = Duration::from_millis(100);
/// A lease that no check waits out.
pub(super) const LONG: Duration = Duration::from_secs(60);
/// The retention of rows that no purge is meant to reach.
pub(super) const DAY: Duration = Duration::from_secs(86_400);
/// How many calls claim one key at once in the concurrency checks.
pub(super) const CONCURRENT: usize = 64;

/// A claim request for `key` with `lease` and a day's retention.
pub(super) fn request(key: &str, lease: Duration) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease,
        retention: DAY,
    }
}

/// Claims, expecting to get the key; `what` says what the key is at that point.
pub(super) async fn claimed<S: IdempotencyStore + ?Sized>(
    store: &S,
    request: &ClaimRequest<'_>,
    what: &str,
) -> Claim {
    match store.claim(request).await {
        Ok(ClaimOutcome::Claimed(claim)) => {
            assert_eq!(
                claim.key, request.key,
                "claim of {what}: the claim must carry the request's key"
            );
            claim
        }
        other => panic!(
            "claim of {what} ({:?}): expected Claimed, the store answered {other:?}",
            request.key
        ),
    }
}

/// Claims, expecting `expected`.
pub(super) async fn expect<S: IdempotencyStore + ?Sized>(
    store: &S,
    request: &ClaimRequest<'_>,
    expected: ClaimOutcome,
    what: &str,
) {
    match store.claim(request).await {
        Ok(outcome) if outcome == expected => {}
        other => panic!(
            "claim of {what} ({:?}): expected {expected:?}, the store answered {other:?}",
            request.key
        ),
    }
}

/// [`expect`], for an answer that only holds while a lease runs: one that came after
/// `lease_end` cannot be judged, and fails saying so instead of judging the store on it.
pub(super) async fn expect_within<S: IdempotencyStore + ?Sized>(
    store: &S,
    request: &ClaimRequest<'_>,
    expected: ClaimOutcome,
    what: &str,
    lease_end: Instant,
) {
    let outcome = store.claim(request).await;
    if Instant::now() >= lease_end && outcome.as_ref().ok() != Some(&expected) {
        panic!(
            "claim of {what} ({:?}) answered {outcome:?} only after the lease it checks had run \
             out: the store (or the machine) was too slow to judge; expected {expected:?} within \
             the lease",
            request.key
        );
    }
    match outcome {
        Ok(outcome) if outcome == expected => {}
        other => panic!(
            "claim of {what} ({:?}), answered within the lease: expected {expected:?}, the store \
             answered {other:?}",
            request.key
        ),
    }
}

/// Unwraps an operation the contract says succeeds.
#[track_caller]
pub(super) fn ok<T>(result: Result<T, StoreError>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{what}: expected Ok, the store failed with {e:?} ({e})"),
    }
}

/// Expects [`StoreError::Fenced`].
#[track_caller]
pub(super) fn fenced(result: Result<(), StoreError>, what: &str) {
    match result {
        Err(StoreError::Fenced) => {}
        Ok(()) => panic!("{what}: expected StoreError::Fenced, the store answered Ok"),
        Err(e) => panic!("{what}: expected StoreError::Fenced, the store failed with {e:?} ({e})"),
    }
}

/// Sleeps until `deadline` on the real clock, even where Tokio's clock is paused (then each
/// sleep ends at once and the loop goes round until real time has caught up).
pub(super) async fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        tokio::time::sleep(deadline - now).await;
    }
}

/// [`CONCURRENT`] claims of one key, polled together.
pub(super) async fn claim_at_once<S: IdempotencyStore + ?Sized>(
    store: &S,
    request: &ClaimRequest<'_>,
) -> Vec<Result<ClaimOutcome, StoreError>> {
    join_all((0..CONCURRENT).map(|_| store.claim(request)).collect()).await
}

pub(super) fn winners(outcomes: &[Result<ClaimOutcome, StoreError>]) -> Vec<Claim> {
    outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Ok(ClaimOutcome::Claimed(claim)) => Some(claim.clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn assert_only_in_progress_besides_the_winner(
    outcomes: &[Result<ClaimOutcome, StoreError>],
    what: &str,
) {
    let others: Vec<_> = outcomes
        .iter()
        .filter(|o| {
            !matches!(
                o,
                Ok(ClaimOutcome::Claimed(_)) | Ok(ClaimOutcome::InProgress)
            )
        })
        .collect();
    assert!(
        others.is_empty(),
        "{what}: every claim but the winner must get InProgress, {} got {others:?}",
        others.len()
    );
}
