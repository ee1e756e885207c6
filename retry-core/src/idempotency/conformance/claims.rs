//! Claims: the first claim of a key, concurrent claims, done, failed and released keys,
//! fingerprints, independent keys, the store's limits and endless leases.

use std::time::{Duration, Instant};

use super::support::{
    CONCURRENT, LONG, MARGIN, SHORT, assert_only_in_progress_besides_the_winner, claim_at_once,
    claimed, expect, fenced, ok, request, sleep_until, winners,
};
use crate::idempotency::{Claim, ClaimOutcome, ClaimRequest, IdempotencyStore};

/// The first claim of a key the store has never seen is [`ClaimOutcome::Claimed`] with fencing
/// token 1 and the request's key; a duplicate while it is held is
/// [`ClaimOutcome::InProgress`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::first_claim_gets_token_one(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn first_claim_gets_token_one<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/first";
    let claim = claimed(store, &request(key, LONG), "the first claim of a new key").await;
    assert_eq!(
        claim,
        Claim {
            key: key.to_owned(),
            token: 1
        },
        "the first claim of a new key must carry the request's key and fencing token 1"
    );
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::InProgress,
        "a duplicate of a claimed key",
    )
    .await;
}

/// 64 calls claiming one key at once: exactly one gets it (token 1), the 63 others get
/// [`ClaimOutcome::InProgress`], none an error. Once the winner completes, 64 calls at once all
/// get its response. The claims are polled together in one task; a store with a pool of
/// connections or a blocking pool runs them in parallel.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::concurrent_claims_have_one_winner(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn concurrent_claims_have_one_winner<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/hot";
    let outcomes = claim_at_once(store, &request(key, LONG)).await;
    let winners = winners(&outcomes);
    assert_eq!(
        winners.len(),
        1,
        "{CONCURRENT} concurrent claims of one new key: exactly one must be Claimed, got {outcomes:?}"
    );
    assert_eq!(
        winners[0].token, 1,
        "the winner of a new key must get token 1"
    );
    assert_only_in_progress_besides_the_winner(&outcomes, "concurrent claims of one new key");

    ok(
        store.complete(&winners[0], "\"first\"").await,
        "complete by the winner",
    );
    let after = claim_at_once(store, &request(key, LONG)).await;
    assert!(
        after
            .iter()
            .all(|o| matches!(o, Ok(ClaimOutcome::Done(r)) if r == "\"first\"")),
        "{CONCURRENT} concurrent claims of a done key must all get Done(\"\\\"first\\\"\"), got {after:?}"
    );
}

/// A completed key answers every later claim with [`ClaimOutcome::Done`] and the response
/// exactly as stored (quotes, backslashes, line breaks and non-ASCII text included), also after
/// the lease of the claim that completed it ran out: a done key is never run again.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::done_key_replays_its_response(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn done_key_replays_its_response<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/done";
    let response = "{\"receipt\":7,\"note\":\"Zürich \\\"Süd\\\" \\\\ 東京\\n\"}\n\t'end'";
    let claim = claimed(store, &request(key, SHORT), "a new key").await;
    let claimed_at = Instant::now();
    ok(store.complete(&claim, response).await, "complete");
    let done = ClaimOutcome::Done(response.to_owned());
    expect(store, &request(key, SHORT), done.clone(), "a completed key").await;
    expect(
        store,
        &request(key, LONG),
        done.clone(),
        "a completed key, again",
    )
    .await;
    sleep_until(claimed_at + SHORT + MARGIN).await;
    expect(
        store,
        &request(key, SHORT),
        done,
        "a completed key after the lease of its claim ran out (a done key is never taken over)",
    )
    .await;
}

/// A key marked failed answers [`ClaimOutcome::Failed`] with the failure's text as kept (an
/// empty text too), also after its claim's lease ran out: a kept failure is never run again.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::kept_failure_answers_failed_with_its_text(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn kept_failure_answers_failed_with_its_text<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/failed";
    let failure = "card declined: \"insufficient funds\" (Müller) \\ 残高不足\nretry later";
    let claim = claimed(store, &request(key, SHORT), "a new key").await;
    let claimed_at = Instant::now();
    ok(store.mark_failed(&claim, failure).await, "mark_failed");
    let failed = ClaimOutcome::Failed(failure.to_owned());
    expect(
        store,
        &request(key, LONG),
        failed.clone(),
        "a key marked failed",
    )
    .await;
    sleep_until(claimed_at + SHORT + MARGIN).await;
    expect(
        store,
        &request(key, SHORT),
        failed,
        "a key marked failed, after the lease of its claim ran out (a kept failure is never taken over)",
    )
    .await;

    let quiet = "conformance/failed-quietly";
    let claim = claimed(store, &request(quiet, LONG), "a new key").await;
    ok(store.mark_failed(&claim, "").await, "mark_failed with \"\"");
    expect(
        store,
        &request(quiet, LONG),
        ClaimOutcome::Failed(String::new()),
        "a key marked failed with an empty text",
    )
    .await;
}

/// A released key is claimed again, each time with a larger fencing token than any before it,
/// and an earlier holder cannot finish the new claim (no ABA: the row is kept on release so its
/// token keeps growing).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::released_key_is_claimed_again_with_a_larger_token(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn released_key_is_claimed_again_with_a_larger_token<S: IdempotencyStore + ?Sized>(
    store: &S,
) {
    let key = "conformance/released";
    let first = claimed(store, &request(key, LONG), "a new key").await;
    ok(store.release(&first).await, "release");
    let second = claimed(store, &request(key, LONG), "a released key").await;
    assert!(
        second.token > first.token,
        "a released key must be claimed again with a larger token: {} after {}",
        second.token,
        first.token
    );
    ok(store.release(&second).await, "release of the second claim");
    let third = claimed(store, &request(key, LONG), "a key released twice").await;
    assert!(
        third.token > second.token,
        "a key released twice must be claimed with a larger token again: {} after {}",
        third.token,
        second.token
    );
    fenced(
        store.complete(&first, "\"stale\"").await,
        "complete by the first holder of a key released and claimed twice since",
    );
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::InProgress,
        "the third claim, after a stale complete",
    )
    .await;
    ok(
        store.complete(&third, "\"third\"").await,
        "complete by the third holder",
    );
    expect(
        store,
        &request(key, LONG),
        ClaimOutcome::Done("\"third\"".into()),
        "a key completed by its third holder",
    )
    .await;
}

/// The same key with another fingerprint is [`ClaimOutcome::KeyReused`] whatever the key's
/// state, and never takes the row over, even after its lease ran out; a claim without a
/// fingerprint is not compared.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::another_fingerprint_is_key_reused(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn another_fingerprint_is_key_reused<S: IdempotencyStore + ?Sized>(store: &S) {
    let with = |key, fingerprint, lease| ClaimRequest {
        fingerprint,
        ..request(key, lease)
    };
    let key = "conformance/fingerprint";
    let claim = claimed(store, &with(key, Some("f-a"), SHORT), "a new key").await;
    let expires = Instant::now() + SHORT + MARGIN;
    expect(
        store,
        &with(key, Some("f-b"), LONG),
        ClaimOutcome::KeyReused,
        "a key in progress, claimed with another fingerprint",
    )
    .await;
    sleep_until(expires).await;
    expect(
        store,
        &with(key, Some("f-b"), LONG),
        ClaimOutcome::KeyReused,
        "a key whose lease ran out, claimed with another fingerprint (a mismatch never takes over)",
    )
    .await;
    ok(
        store.complete(&claim, "\"ok\"").await,
        "complete by the holder, after claims with another fingerprint (they must not have taken the key over)",
    );
    let done = ClaimOutcome::Done("\"ok\"".into());
    expect(
        store,
        &with(key, Some("f-b"), LONG),
        ClaimOutcome::KeyReused,
        "a done key, claimed with another fingerprint",
    )
    .await;
    expect(
        store,
        &with(key, Some("f-a"), LONG),
        done.clone(),
        "a done key, claimed with its own fingerprint",
    )
    .await;
    expect(
        store,
        &with(key, None, LONG),
        done,
        "a done key, claimed without a fingerprint (not compared)",
    )
    .await;

    let key = "conformance/fingerprint-failed";
    let claim = claimed(store, &with(key, Some("f-a"), LONG), "a new key").await;
    expect(
        store,
        &with(key, None, LONG),
        ClaimOutcome::InProgress,
        "a key in progress, claimed without a fingerprint (not compared)",
    )
    .await;
    ok(store.mark_failed(&claim, "declined").await, "mark_failed");
    expect(
        store,
        &with(key, Some("f-b"), LONG),
        ClaimOutcome::KeyReused,
        "a failed key, claimed with another fingerprint",
    )
    .await;
    expect(
        store,
        &with(key, Some("f-a"), LONG),
        ClaimOutcome::Failed("declined".into()),
        "a failed key, claimed with its own fingerprint",
    )
    .await;
}

/// A released key kept nothing, so it is claimed afresh whatever the new call's fingerprint,
/// and from then on answers to the new fingerprint.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::released_key_accepts_a_new_fingerprint(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn released_key_accepts_a_new_fingerprint<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/refingerprinted";
    let with = |fingerprint| ClaimRequest {
        fingerprint,
        ..request(key, LONG)
    };
    let first = claimed(store, &with(Some("f-a")), "a new key").await;
    ok(store.release(&first).await, "release");
    let second = claimed(
        store,
        &with(Some("f-b")),
        "a released key, with another fingerprint",
    )
    .await;
    assert!(
        second.token > first.token,
        "a released key must be claimed again with a larger token: {} after {}",
        second.token,
        first.token
    );
    expect(
        store,
        &with(Some("f-a")),
        ClaimOutcome::KeyReused,
        "a key claimed again with a new fingerprint, claimed with the old one",
    )
    .await;
    ok(store.complete(&second, "\"b\"").await, "complete");
    expect(
        store,
        &with(Some("f-b")),
        ClaimOutcome::Done("\"b\"".into()),
        "a key completed under its new fingerprint",
    )
    .await;
}

/// Keys are compared whole and exactly: a key that is a prefix of another, another case, a
/// trailing slash or space, SQL `LIKE` wildcards and non-ASCII text are all different keys, and
/// what happens to one (completed, released) leaves the others alone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::keys_are_independent(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn keys_are_independent<S: IdempotencyStore + ?Sized>(store: &S) {
    let keys = [
        "order/1",
        "order/10",
        "order",
        "order/1/",
        "order/1 ",
        "ORDER/1",
        "order/%",
        "order/_",
        "order/\\1",
        "ördér/1",
    ];
    let mut claims = Vec::new();
    for key in keys {
        let claim = claimed(
            store,
            &request(key, LONG),
            &format!("{key:?}, a new key beside {keys:?}"),
        )
        .await;
        assert_eq!(
            claim.token, 1,
            "{key:?} was never claimed and must get token 1, whatever happened to {keys:?}"
        );
        claims.push(claim);
    }
    ok(store.complete(&claims[0], "\"one\"").await, "complete");
    ok(store.release(&claims[1]).await, "release");
    ok(store.mark_failed(&claims[2], "no").await, "mark_failed");
    expect(
        store,
        &request(keys[0], LONG),
        ClaimOutcome::Done("\"one\"".into()),
        "a completed key beside others",
    )
    .await;
    let again = claimed(
        store,
        &request(keys[1], LONG),
        "a released key beside others",
    )
    .await;
    assert_eq!(again.token, 2, "a key released once must get token 2 again");
    expect(
        store,
        &request(keys[2], LONG),
        ClaimOutcome::Failed("no".into()),
        "a failed key beside others",
    )
    .await;
    for key in &keys[3..] {
        expect(
            store,
            &request(key, LONG),
            ClaimOutcome::InProgress,
            &format!(
                "{key:?}, held, after {:?} was completed, {:?} released and {:?} failed",
                keys[0], keys[1], keys[2]
            ),
        )
        .await;
    }
}

/// [`IdempotencyStore::limits`] are sane (keys of at least 64 bytes, responses of at least
/// 1 KiB, a non-zero operation timeout), and the store keeps what they promise: a key as long as
/// `max_key_bytes` and a response as large as `max_response_bytes` (both capped at 1 MiB for the
/// check) are claimed, stored and replayed intact.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::limits_are_sane(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn limits_are_sane<S: IdempotencyStore + ?Sized>(store: &S) {
    let limits = store.limits();
    assert!(
        limits.max_key_bytes >= 64,
        "limits().max_key_bytes is {}: keys with a namespace and a scope need at least 64 bytes",
        limits.max_key_bytes
    );
    assert!(
        limits.max_response_bytes >= 1024,
        "limits().max_response_bytes is {}: at least 1 KiB",
        limits.max_response_bytes
    );
    assert!(
        store.operation_timeout() > Duration::ZERO,
        "operation_timeout() is zero: every operation would time out"
    );
    let key = text_of_bytes("conformance/long-key/", limits.max_key_bytes.min(1 << 20));
    let response = format!(
        "\"{}\"",
        text_of_bytes("", limits.max_response_bytes.min(1 << 20) - 2)
    );
    let claim = claimed(
        store,
        &request(&key, LONG),
        &format!("a key of max_key_bytes ({} bytes)", key.len()),
    )
    .await;
    ok(
        store.complete(&claim, &response).await,
        &format!(
            "complete with a response of max_response_bytes ({} bytes)",
            response.len()
        ),
    );
    match store.claim(&request(&key, LONG)).await {
        Ok(ClaimOutcome::Done(stored)) if stored == response => {}
        Ok(ClaimOutcome::Done(stored)) => panic!(
            "a response of {} bytes (max_response_bytes) came back changed: {} bytes",
            response.len(),
            stored.len()
        ),
        other => panic!(
            "a key of {} bytes (max_key_bytes), completed: expected Done, the store answered \
             {other:?}",
            key.len()
        ),
    }
}

/// A lease and a retention as long as [`Duration::MAX`] hold to the end of time: the store
/// clamps them (to the year 9999 where it writes times as text) without overflowing, and reads
/// its own far-future rows back: a second claim finds the key in progress, and once it is done
/// the claim replays it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::endless_lease_and_retention_hold(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn endless_lease_and_retention_hold<S: IdempotencyStore + ?Sized>(store: &S) {
    let endless = ClaimRequest {
        retention: Duration::MAX,
        ..request("conformance/endless", Duration::MAX)
    };
    let claim = claimed(
        store,
        &endless,
        "a new key, with an endless lease and retention",
    )
    .await;
    match store.claim(&endless).await {
        Ok(ClaimOutcome::InProgress) => {}
        other => panic!(
            "a key held under an endless lease, claimed again: expected InProgress, the store \
             answered {other:?}"
        ),
    }
    ok(
        store.complete(&claim, "\"endless\"").await,
        "complete under an endless lease",
    );
    match store.claim(&endless).await {
        Ok(ClaimOutcome::Done(stored)) if stored == "\"endless\"" => {}
        other => panic!(
            "a key done under an endless retention, claimed again: expected Done(\"endless\"), \
             the store answered {other:?}"
        ),
    }
}

// ---- helpers ----

/// `prefix` followed by text up to exactly `len` bytes, mostly ASCII with two-byte characters
/// mixed in (so a store that counts characters instead of bytes is caught).
fn text_of_bytes(prefix: &str, len: usize) -> String {
    let mut text = String::with_capacity(len);
    text.push_str(prefix);
    let mut i = 0usize;
    while text.len() < len {
        let c = if i % 7 == 3 && text.len() + 2 <= len {
            'é'
        } else {
            char::from(b'a' + (i % 26) as u8)
        };
        text.push(c);
        i += 1;
    }
    text.truncate(len);
    text
}
