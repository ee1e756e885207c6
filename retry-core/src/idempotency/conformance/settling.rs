//! Settling a claim: retried `complete`, `mark_failed` and `release`, settled claims keeping
//! their outcome, and fencing of holders whose claim is no longer theirs.

use std::time::Instant;

use super::support::{LONG, MARGIN, SHORT, claimed, expect, fenced, ok, request, sleep_until};
use crate::idempotency::{Claim, ClaimOutcome, IdempotencyStore, StoreError};

/// A `complete` retried after its first try landed (its answer lost on the way back) answers
/// `Ok` under the same token, and the key keeps the first response it stored, even if the retry
/// carries another.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::retried_complete_answers_ok(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn retried_complete_answers_ok<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/retried-complete";
    let done = settle_twice(store, key, "complete", async |done| {
        store.complete(done, "\"once\"").await
    })
    .await;
    ok(
        store.complete(&done, "\"twice\"").await,
        "complete retried under the same token with another response",
    );
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::Done("\"once\"".into()),
        "a key completed three times under one token (the first response is the one kept)",
    )
    .await;
}

/// A `mark_failed` retried after its first try landed answers `Ok` under the same token, and
/// the key keeps the failure it stored first.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::retried_mark_failed_answers_ok(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn retried_mark_failed_answers_ok<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/retried-failed";
    settle_twice(store, key, "mark_failed", async |failed| {
        store.mark_failed(failed, "declined").await
    })
    .await;
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::Failed("declined".into()),
        "a key marked failed twice under one token",
    )
    .await;
}

/// A `release` retried after its first try landed answers `Ok` under the same token while
/// nobody claimed the key since; once the key was claimed again, the earlier holder's `release`
/// is [`StoreError::Fenced`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::retried_release_answers_ok(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn retried_release_answers_ok<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/retried-release";
    let released = settle_twice(store, key, "release", async |released| {
        store.release(released).await
    })
    .await;
    let again = claimed(
        store,
        &request(key, LONG),
        "a key released twice under one token",
    )
    .await;
    assert!(
        again.token > released.token,
        "a released key must be claimed again with a larger token: {} after {}",
        again.token,
        released.token
    );
    fenced(
        store.release(&released).await,
        "release by the earlier holder after the key was claimed again",
    );
}

/// A claim that completed, failed or released can move its key to no other state: a `complete`,
/// `release`, `mark_failed` or `renew` that would write another state is [`StoreError::Fenced`]
/// and the key keeps its outcome. (A late `release` that freed a done key would run it twice.)
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::settled_claim_keeps_its_outcome(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn settled_claim_keeps_its_outcome<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/settled-done";
    let done = claimed(store, &request(key, LONG), "a new key").await;
    ok(store.complete(&done, "\"kept\"").await, "complete");
    fenced(store.release(&done).await, "release after complete");
    fenced(
        store.mark_failed(&done, "late").await,
        "mark_failed after complete",
    );
    fenced(store.renew(&done, LONG).await, "renew after complete");
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::Done("\"kept\"".into()),
        "a done key after its holder tried to release, fail and renew it",
    )
    .await;

    let key = "conformance/settled-failed";
    let failed = claimed(store, &request(key, LONG), "a new key").await;
    ok(store.mark_failed(&failed, "declined").await, "mark_failed");
    fenced(
        store.complete(&failed, "\"late\"").await,
        "complete after mark_failed",
    );
    fenced(store.release(&failed).await, "release after mark_failed");
    fenced(store.renew(&failed, LONG).await, "renew after mark_failed");
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::Failed("declined".into()),
        "a failed key after its holder tried to complete, release and renew it",
    )
    .await;

    let key = "conformance/settled-released";
    let released = claimed(store, &request(key, LONG), "a new key").await;
    ok(store.release(&released).await, "release");
    fenced(
        store.complete(&released, "\"late\"").await,
        "complete after release",
    );
    fenced(
        store.mark_failed(&released, "late").await,
        "mark_failed after release",
    );
    fenced(store.renew(&released, LONG).await, "renew after release");
    let again = claimed(
        store,
        &request(key, LONG),
        "a released key after its holder tried to complete, fail and renew it",
    )
    .await;
    assert!(
        again.token > released.token,
        "a released key must be claimed again with a larger token: {} after {}",
        again.token,
        released.token
    );
}

/// After its lease ran out and another call took the key over (with a larger token), the first
/// holder can neither complete, release, mark failed nor renew ([`StoreError::Fenced`] each
/// time), and none of its attempts disturbs the new holder, who completes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::fenced_holder_can_do_nothing(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn fenced_holder_can_do_nothing<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/fenced";
    let first = claimed(store, &request(key, SHORT), "a new key").await;
    sleep_until(Instant::now() + SHORT + MARGIN).await;
    let second = claimed(
        store,
        &request(key, LONG),
        "a key whose lease ran out (a takeover)",
    )
    .await;
    assert!(
        second.token > first.token,
        "a takeover must get a larger token: {} after {}",
        second.token,
        first.token
    );
    fenced(
        store.complete(&first, "\"first\"").await,
        "complete by a holder whose claim was taken over",
    );
    fenced(
        store.release(&first).await,
        "release by a holder whose claim was taken over",
    );
    fenced(
        store.mark_failed(&first, "declined").await,
        "mark_failed by a holder whose claim was taken over",
    );
    fenced(
        store.renew(&first, LONG).await,
        "renew by a holder whose claim was taken over",
    );
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::InProgress,
        "a key taken over, after its fenced holder tried everything",
    )
    .await;
    ok(
        store.complete(&second, "\"second\"").await,
        "complete by the holder that took the key over",
    );
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::Done("\"second\"".into()),
        "a key completed by the holder that took it over",
    )
    .await;
}

/// A claim the store never handed out, of a key it never saw or with a token beyond any it
/// gave, is [`StoreError::Fenced`] for `complete`, `release`, `mark_failed` and `renew`, and
/// changes nothing.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::claims_the_store_never_gave_are_fenced(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn claims_the_store_never_gave_are_fenced<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/held";
    let held = claimed(store, &request(key, LONG), "a new key").await;
    let strangers = [
        Claim {
            key: "conformance/never-claimed".into(),
            token: 1,
        },
        Claim {
            key: key.into(),
            token: held.token + 1,
        },
        // Beyond what a signed 64-bit column holds: must not wrap onto a real token.
        Claim {
            key: key.into(),
            token: u64::MAX,
        },
    ];
    for stranger in &strangers {
        let what = |op| format!("{op} of {stranger:?}, which the store never handed out");
        fenced(store.complete(stranger, "\"x\"").await, &what("complete"));
        fenced(store.mark_failed(stranger, "x").await, &what("mark_failed"));
        fenced(store.renew(stranger, LONG).await, &what("renew"));
        fenced(store.release(stranger).await, &what("release"));
    }
    expect(
        store,
        &request("conformance/never-claimed", LONG),
        ClaimOutcome::Claimed(Claim {
            key: "conformance/never-claimed".into(),
            token: 1,
        }),
        "a key only ever touched by claims the store never gave",
    )
    .await;
    ok(
        store.complete(&held, "\"mine\"").await,
        "complete by the real holder after strangers tried its key",
    );
}

/// Claims the new key `key` and settles the claim with `settle` (`what` names the operation),
/// then again under the same token, as a retry whose first try landed: both must answer `Ok`.
/// Returns the claim.
async fn settle_twice<S: IdempotencyStore + ?Sized>(
    store: &S,
    key: &str,
    what: &str,
    settle: impl AsyncFn(&Claim) -> Result<(), StoreError>,
) -> Claim {
    let claim = claimed(store, &request(key, LONG), "a new key").await;
    ok(settle(&claim).await, what);
    ok(
        settle(&claim).await,
        &format!("{what} retried under the same token after it landed"),
    );
    claim
}
