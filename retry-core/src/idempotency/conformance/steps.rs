//! The step journal: written only by the claim that holds the key, read back whole by the
//! next holder, kept through a release, and purged with the key.

use std::time::{Duration, Instant};

use super::support::{LONG, MARGIN, SHORT, claimed, fenced, ok, request, sleep_until};
use crate::idempotency::{Claim, ClaimRequest, IdempotencyStore, StepEntry, StepState, StepWrite};

/// The journal of `claim`'s key, by label.
async fn journal<S: IdempotencyStore + ?Sized>(
    store: &S,
    claim: &Claim,
    what: &str,
) -> Vec<(String, StepState)> {
    let mut steps: Vec<(String, StepState)> = ok(store.read_steps(claim).await, what)
        .into_iter()
        .map(|StepEntry { label, state }| (label, state))
        .collect();
    steps.sort_by(|a, b| a.0.cmp(&b.0));
    steps
}

fn finished(label: &str, output: &str) -> (String, StepState) {
    (label.to_owned(), StepState::Finished(output.to_owned()))
}

fn started(label: &str) -> (String, StepState) {
    (label.to_owned(), StepState::Started)
}

/// A holder journals its steps: `started`, then the output; reading the journal gives each
/// step's last state. A finished step keeps its first output (a retried write answers `Ok`
/// and changes nothing), and a `started` written over it leaves it finished. Keys have
/// journals of their own.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::steps_are_journaled_and_read_back(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn steps_are_journaled_and_read_back<S: IdempotencyStore + ?Sized>(store: &S) {
    let claim = claimed(store, &request("conformance/steps", LONG), "a new key").await;
    assert!(
        journal(store, &claim, "read_steps of a new key")
            .await
            .is_empty(),
        "a new key's journal must be empty"
    );
    ok(
        store.write_step(&claim, "ride", StepWrite::Started).await,
        "write_step(ride, started)",
    );
    ok(
        store
            .write_step(&claim, "ride", StepWrite::Finished("{\"ride\":1}"))
            .await,
        "write_step(ride, finished)",
    );
    ok(
        store.write_step(&claim, "charge", StepWrite::Started).await,
        "write_step(charge, started)",
    );
    ok(
        store.write_step(&claim, "charge", StepWrite::Started).await,
        "write_step(charge, started) again",
    );
    assert_eq!(
        journal(store, &claim, "read_steps").await,
        [started("charge"), finished("ride", "{\"ride\":1}")],
        "the journal must hold the finished step's output and the started one"
    );
    ok(
        store
            .write_step(&claim, "ride", StepWrite::Finished("{\"ride\":1}"))
            .await,
        "a retried write_step(ride, finished)",
    );
    ok(
        store
            .write_step(&claim, "ride", StepWrite::Finished("{\"ride\":2}"))
            .await,
        "write_step(ride, finished) with another output",
    );
    ok(
        store.write_step(&claim, "ride", StepWrite::Started).await,
        "write_step(ride, started) over a finished step",
    );
    assert_eq!(
        journal(store, &claim, "read_steps").await,
        [started("charge"), finished("ride", "{\"ride\":1}")],
        "a finished step must keep its first output"
    );
    let other = claimed(
        store,
        &request("conformance/steps-other", LONG),
        "a new key",
    )
    .await;
    assert!(
        journal(store, &other, "read_steps of another key")
            .await
            .is_empty(),
        "another key's journal must be its own"
    );
}

/// A holder whose key was taken over (or that finished, or that the store never gave) cannot
/// write a step: [`StoreError::Fenced`](crate::idempotency::StoreError::Fenced), and nothing
/// of it is in the journal.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::stale_holder_cannot_write_a_step(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn stale_holder_cannot_write_a_step<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/steps-stale";
    let stale = claimed(store, &request(key, SHORT), "a new key").await;
    sleep_until(Instant::now() + SHORT + MARGIN).await;
    let taker = claimed(store, &request(key, LONG), "a key whose lease ran out").await;
    fenced(
        store.write_step(&stale, "charge", StepWrite::Started).await,
        "write_step(started) by a holder whose key was taken over",
    );
    fenced(
        store
            .write_step(&stale, "charge", StepWrite::Finished("1"))
            .await,
        "write_step(finished) by a holder whose key was taken over",
    );
    assert!(
        journal(store, &taker, "read_steps").await.is_empty(),
        "a fenced write_step must write nothing"
    );
    ok(store.complete(&taker, "\"done\"").await, "complete");
    fenced(
        store.write_step(&taker, "charge", StepWrite::Started).await,
        "write_step by a holder whose call is done",
    );
    let never = Claim {
        key: "conformance/steps-never-claimed".to_owned(),
        token: 1,
    };
    fenced(
        store.write_step(&never, "charge", StepWrite::Started).await,
        "write_step under a claim the store never gave",
    );
}

/// The next holder of a key (a takeover after the lease ran out, or a claim after a release)
/// sees every step the earlier holders finished or started: the journal lives with the key,
/// whatever its token.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::takeover_sees_every_finished_step(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn takeover_sees_every_finished_step<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/steps-takeover";
    let first = claimed(store, &request(key, SHORT), "a new key").await;
    ok(
        store
            .write_step(&first, "ride", StepWrite::Finished("\"r\""))
            .await,
        "write_step",
    );
    ok(
        store.write_step(&first, "charge", StepWrite::Started).await,
        "write_step",
    );
    sleep_until(Instant::now() + SHORT + MARGIN).await;
    let second = claimed(store, &request(key, LONG), "a key whose lease ran out").await;
    assert_eq!(
        journal(store, &second, "read_steps after a takeover").await,
        [started("charge"), finished("ride", "\"r\"")],
        "the taker-over must see the first holder's steps"
    );
    ok(
        store
            .write_step(&second, "charge", StepWrite::Finished("\"c\""))
            .await,
        "write_step",
    );
    ok(store.release(&second).await, "release");
    let third = claimed(store, &request(key, LONG), "a released key").await;
    assert_eq!(
        journal(store, &third, "read_steps after a release").await,
        [finished("charge", "\"c\""), finished("ride", "\"r\"")],
        "the next claim of a released key must see every finished step"
    );
}

/// Purging a key's row deletes its journal: a key claimed again after its purge starts with
/// an empty journal.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::purge_removes_the_journal(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn purge_removes_the_journal<S: IdempotencyStore + ?Sized>(store: &S) {
    let brief = Duration::from_millis(1);
    let key = "conformance/steps-purged";
    let short_lived = ClaimRequest {
        retention: brief,
        ..request(key, brief)
    };
    let claim = claimed(store, &short_lived, "a new key").await;
    ok(
        store
            .write_step(&claim, "ride", StepWrite::Finished("1"))
            .await,
        "write_step",
    );
    ok(store.complete(&claim, "\"done\"").await, "complete");
    let age = Duration::from_millis(100);
    sleep_until(Instant::now() + age + MARGIN).await;
    let purged = ok(store.purge_older_than(age).await, "purge_older_than(100ms)");
    assert_eq!(purged, 1, "the key's row must be purged");
    let again = claimed(store, &request(key, LONG), "a purged key").await;
    assert!(
        journal(store, &again, "read_steps of a purged key")
            .await
            .is_empty(),
        "purging a key must delete its journal"
    );
}

/// A released key with a journal (a body that failed with `on_err = "resume"`) is resumed with
/// its finished steps, so it keeps its fingerprint: another payload under the key is
/// [`ClaimOutcome::KeyReused`](crate::idempotency::ClaimOutcome::KeyReused), the same one
/// claims it again. (A released key without a journal accepts a new fingerprint:
/// `released_key_accepts_a_new_fingerprint`.)
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use retry_core::idempotency::{MemoryStore, conformance};
/// conformance::resumed_key_keeps_its_fingerprint(&MemoryStore::new()).await;
/// # }
/// ```
pub async fn resumed_key_keeps_its_fingerprint<S: IdempotencyStore + ?Sized>(store: &S) {
    let key = "conformance/steps-resumed";
    let with = |fingerprint| ClaimRequest {
        fingerprint,
        ..request(key, LONG)
    };
    let first = claimed(store, &with(Some("f-a")), "a new key").await;
    ok(
        store
            .write_step(&first, "ride", StepWrite::Finished("1"))
            .await,
        "write_step",
    );
    ok(store.release(&first).await, "release");
    match store.claim(&with(Some("f-b"))).await {
        Ok(crate::idempotency::ClaimOutcome::KeyReused) => {}
        other => panic!(
            "claim of a released key with a journal, with another fingerprint: expected \
             KeyReused, the store answered {other:?}"
        ),
    }
    let again = claimed(store, &with(Some("f-a")), "a released key with a journal").await;
    assert_eq!(
        journal(store, &again, "read_steps").await,
        [finished("ride", "1")],
        "the resumed key must keep its journal"
    );
}
