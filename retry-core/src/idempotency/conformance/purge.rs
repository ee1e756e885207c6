//! Purging: by age and retention only, never a live lease, and a takeover refreshing retention.

use std::time::{Duration, Instant};

use super::support::{DAY, LONG, MARGIN, SHORT, claimed, expect, ok, request, sleep_until};
use crate::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore};

/// `purge_older_than(age)` deletes exactly the rows created more than `age` ago whose own
/// retention has passed too, whatever their state (done, failed, released, a lapsed lease),
/// and returns how many: never a younger row, nor one still within its retention.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::purge_deletes_by_age_only(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn purge_deletes_by_age_only<S: IdempotencyStore + ?Sized>(store: &S) {
    let age = Duration::from_millis(300);
    let brief = Duration::from_millis(1);
    let short_lived = |key| ClaimRequest {
        retention: brief,
        ..request(key, brief)
    };
    let done = claimed(store, &short_lived("conformance/old-done"), "a new key").await;
    ok(store.complete(&done, "\"old\"").await, "complete");
    let failed = claimed(store, &short_lived("conformance/old-failed"), "a new key").await;
    ok(store.mark_failed(&failed, "old").await, "mark_failed");
    let released = claimed(store, &short_lived("conformance/old-released"), "a new key").await;
    ok(store.release(&released).await, "release");
    claimed(store, &short_lived("conformance/old-lapsed"), "a new key").await;
    let kept = claimed(
        store,
        &ClaimRequest {
            retention: DAY,
            ..request("conformance/old-retained", brief)
        },
        "a new key",
    )
    .await;
    ok(store.complete(&kept, "\"retained\"").await, "complete");
    sleep_until(Instant::now() + age + MARGIN).await;
    let young = claimed(store, &short_lived("conformance/young"), "a new key").await;
    ok(store.complete(&young, "\"young\"").await, "complete");

    let purged = ok(store.purge_older_than(age).await, "purge_older_than(300ms)");
    assert_eq!(
        purged, 4,
        "purge_older_than(300ms) must delete the 4 rows older than 300ms and past their 1ms \
         retention (done, failed, released, lapsed lease), not the one retained for a day nor the \
         one younger than 300ms"
    );
    let purged = ok(store.purge_older_than(age).await, "a second purge");
    assert_eq!(
        purged, 0,
        "a second purge_older_than(300ms) must find nothing left"
    );
    for key in [
        "conformance/old-done",
        "conformance/old-failed",
        "conformance/old-released",
        "conformance/old-lapsed",
    ] {
        let fresh = claimed(store, &request(key, LONG), "a purged key").await;
        assert_eq!(
            fresh.token, 1,
            "{key} was purged: its next claim is the first of a new key (token 1)"
        );
    }
    expect(
        store,
        &request("conformance/old-retained", LONG),
        ClaimOutcome::Done("\"retained\"".into()),
        "an old done key within its own retention, after a purge",
    )
    .await;
    expect(
        store,
        &request("conformance/young", LONG),
        ClaimOutcome::Done("\"young\"".into()),
        "a done key younger than the purge's age, after a purge",
    )
    .await;
}

/// A purge never deletes a row whose lease is live, past its retention or not: neither a claim
/// with a long lease, nor one whose lease was renewed; its holder completes afterwards.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::purge_never_deletes_a_live_lease(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn purge_never_deletes_a_live_lease<S: IdempotencyStore + ?Sized>(store: &S) {
    let brief = Duration::from_millis(1);
    let held = claimed(
        store,
        &ClaimRequest {
            retention: brief,
            ..request("conformance/live", LONG)
        },
        "a new key",
    )
    .await;
    let renewed = claimed(
        store,
        &ClaimRequest {
            retention: brief,
            ..request("conformance/renewed", SHORT)
        },
        "a new key",
    )
    .await;
    ok(store.renew(&renewed, LONG).await, "renew");
    sleep_until(Instant::now() + SHORT + MARGIN).await;
    let purged = ok(
        store.purge_older_than(Duration::ZERO).await,
        "purge_older_than(0)",
    );
    assert_eq!(
        purged, 0,
        "a purge must never delete a row whose lease is live (one claimed with a long lease, one \
         renewed), even past its retention"
    );
    for (claim, what) in [(&held, "a live claim"), (&renewed, "a renewed claim")] {
        expect(
            store,
            &request(&claim.key, LONG),
            ClaimOutcome::InProgress,
            &format!("{what} past its retention, after a purge"),
        )
        .await;
        ok(
            store.complete(claim, "\"ok\"").await,
            &format!("complete of {what} after a purge"),
        );
    }
}

/// A takeover gives the row a retention counted from the takeover (if it ends later), so the
/// new holder's row is not purged under it, even once its lease lapsed in turn.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::takeover_refreshes_retention(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn takeover_refreshes_retention<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/refreshed";
    let first = claimed(
        store,
        &ClaimRequest {
            retention: SHORT,
            ..request(key, SHORT)
        },
        "a new key",
    )
    .await;
    sleep_until(Instant::now() + SHORT + MARGIN).await;
    let second = claimed(
        store,
        &ClaimRequest {
            retention: DAY,
            ..request(key, SHORT)
        },
        "a key whose lease ran out",
    )
    .await;
    sleep_until(Instant::now() + SHORT + MARGIN).await;
    let purged = ok(
        store.purge_older_than(Duration::ZERO).await,
        "purge_older_than(0)",
    );
    assert_eq!(
        purged, 0,
        "a row taken over with a retention of a day must not be purged: the takeover must \
         extend the retention the first claim had set"
    );
    let third = claimed(
        store,
        &request(key, LONG),
        "a taken-over key whose lease lapsed again",
    )
    .await;
    assert!(
        third.token > second.token && second.token > first.token,
        "the row must have been kept through the purge, its token growing: {}, {}, then {}",
        first.token,
        second.token,
        third.token
    );
}
