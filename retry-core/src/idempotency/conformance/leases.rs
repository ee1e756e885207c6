//! Leases: takeover once a lease ran out, concurrent takeovers, renewal and abandon.

use std::time::{Duration, Instant};

use super::support::{
    CONCURRENT, LONG, MARGIN, SHORT, assert_only_in_progress_besides_the_winner, claim_at_once,
    claimed, expect, expect_within, fenced, ok, request, sleep_until, winners,
};
use crate::idempotency::{ClaimOutcome, IdempotencyStore};

// Only the docs name it (`StoreError::Fenced`).
#[cfg(doc)]
use crate::idempotency::StoreError;

/// A held key is not taken over before its lease ran out (checked half-way through it), and is
/// after; the takeover holds a fresh lease of its own.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::takeover_only_after_the_lease_ran_out(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn takeover_only_after_the_lease_ran_out<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/lease";
    let lease = Duration::from_millis(800);
    let asked = Instant::now();
    let first = claimed(store, &request(key, lease), "a new key").await;
    let answered = Instant::now();
    sleep_until(asked + lease / 2).await;
    expect_within(
        store,
        &request(key, lease),
        ClaimOutcome::InProgress,
        "a key half-way through its lease",
        asked + lease,
    )
    .await;
    sleep_until(answered + lease + MARGIN).await;
    let asked = Instant::now();
    let second = claimed(store, &request(key, lease), "a key whose lease ran out").await;
    assert!(
        second.token > first.token,
        "a takeover must get a larger token: {} after {}",
        second.token,
        first.token
    );
    expect_within(
        store,
        &request(key, lease),
        ClaimOutcome::InProgress,
        "a key just taken over (the takeover holds a lease of its own)",
        asked + lease,
    )
    .await;
}

/// 64 calls at once claiming a key whose lease ran out, then 64 claiming a released key: each
/// key is taken by exactly one of them, with a larger token; the others get
/// [`ClaimOutcome::InProgress`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::concurrent_takeovers_have_one_winner(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn concurrent_takeovers_have_one_winner<S: IdempotencyStore + ?Sized>(store: &S) {
    let expired = claimed(store, &request("conformance/expired", SHORT), "a new key").await;
    let expires = Instant::now() + SHORT + MARGIN;
    let released = claimed(store, &request("conformance/released", LONG), "a new key").await;
    ok(store.release(&released).await, "release");
    sleep_until(expires).await;
    for (previous, what) in [
        (expired, "a key whose lease ran out"),
        (released, "a released key"),
    ] {
        let outcomes = claim_at_once(store, &request(&previous.key, LONG)).await;
        let winners = winners(&outcomes);
        assert_eq!(
            winners.len(),
            1,
            "{CONCURRENT} concurrent claims of {what}: exactly one must be Claimed, got {outcomes:?}"
        );
        assert!(
            winners[0].token > previous.token,
            "{what} must be taken with a larger token: {} after {}",
            winners[0].token,
            previous.token
        );
        assert_only_in_progress_besides_the_winner(
            &outcomes,
            &format!("concurrent claims of {what}"),
        );
    }
}

/// `renew` extends a claim's lease from the moment it is called (on the store's clock): a claim
/// renewed before its lease ran out is not taken over past its original lease, only once the
/// renewed one ran out too; a renewed claim completes as before, and after the takeover its
/// `renew` is [`StoreError::Fenced`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::renew_keeps_a_claim_past_its_original_lease(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn renew_keeps_a_claim_past_its_original_lease<S: IdempotencyStore + ?Sized>(store: &S) {
    let renewed = claimed(
        store,
        &request("conformance/renewed-done", LONG),
        "a new key",
    )
    .await;
    ok(store.renew(&renewed, LONG).await, "renew of a live claim");
    ok(
        store.complete(&renewed, "\"ok\"").await,
        "complete of a renewed claim",
    );

    let key = "conformance/renewed";
    let lease = Duration::from_millis(400);
    let longer = Duration::from_millis(1_200);
    let asked = Instant::now();
    let claim = claimed(store, &request(key, lease), "a new key").await;
    let answered = Instant::now();
    sleep_until(asked + lease / 2).await;
    let renewing = Instant::now();
    ok(
        store.renew(&claim, longer).await,
        "renew half-way through the lease",
    );
    let renewed_at = Instant::now();
    sleep_until(answered + lease + MARGIN).await;
    expect_within(
        store,
        &request(key, lease),
        ClaimOutcome::InProgress,
        "a key past its original lease, renewed before it ran out",
        renewing + longer,
    )
    .await;
    sleep_until(renewed_at + longer + MARGIN).await;
    let taken = claimed(
        store,
        &request(key, LONG),
        "a key whose renewed lease ran out too (renew extends, it does not hold for ever)",
    )
    .await;
    assert!(
        taken.token > claim.token,
        "a takeover must get a larger token: {} after {}",
        taken.token,
        claim.token
    );
    fenced(
        store.renew(&claim, longer).await,
        "renew by a holder whose claim was taken over",
    );
}

/// [`IdempotencyStore::abandon`]: a store that says it started a release frees the key soon
/// (within 5 s) for a claim with a larger token; one that says it did not leaves the claim as it
/// was, in progress and completable by its holder.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::abandon_that_starts_a_release_frees_the_key(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn abandon_that_starts_a_release_frees_the_key<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/abandoned";
    let claim = claimed(store, &request(key, LONG), "a new key").await;
    if !store.abandon(claim.clone()) {
        expect(
            store,
            &request(key, LONG),
            ClaimOutcome::InProgress,
            "a claim whose abandon started nothing",
        )
        .await;
        ok(
            store.complete(&claim, "\"ok\"").await,
            "complete of a claim whose abandon started nothing",
        );
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.claim(&request(key, LONG)).await {
            Ok(ClaimOutcome::Claimed(again)) => {
                assert!(
                    again.token > claim.token,
                    "an abandoned key must be claimed again with a larger token: {} after {}",
                    again.token,
                    claim.token
                );
                return;
            }
            Ok(ClaimOutcome::InProgress) if Instant::now() < deadline => {
                sleep_until(Instant::now() + Duration::from_millis(5)).await;
            }
            other => panic!(
                "abandon answered true (a release was started) but 5s later the key answers \
                 {other:?} instead of Claimed"
            ),
        }
    }
}
