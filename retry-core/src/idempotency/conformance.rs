//! The conformance suite every [`IdempotencyStore`] passes: the store contract, as checks any
//! store can run (feature `test-suite`).
//!
//! [`run`] gives each check a fresh, empty store from the factory it is handed and panics with
//! the names and messages of the checks that failed; [`check_all`] returns the [`Report`]
//! instead. Every check is also a public function of its own, named for the behaviour it
//! checks, so a store author can run the one that fails while fixing it; [`CHECKS`] lists them
//! in the order the suite runs them.
//!
//! ```
//! use retry_core::idempotency::{MemoryStore, conformance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! conformance::run(async || MemoryStore::new()).await;
//! # }
//! ```
//!
//! A store with state to clean up afterwards (a database schema, a temporary file) can keep it
//! in the factory's captures, since the factory is an `AsyncFnMut`:
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn sqlite() {
//! use retry_core::idempotency::{SqliteStore, conformance};
//!
//! let dir = std::env::temp_dir().join("my-store-conformance");
//! std::fs::create_dir_all(&dir).unwrap();
//! let mut made = 0;
//! conformance::run(async || {
//!     made += 1;
//!     SqliteStore::open(dir.join(format!("{made}.sqlite3"))).unwrap()
//! })
//! .await;
//! std::fs::remove_dir_all(&dir).unwrap();
//! # }
//! ```
//!
//! # Time
//!
//! The checks run on real time with short leases (a few hundred milliseconds) instead of an
//! injected clock, so a store that decides on its own clock (a database's `now()`) is checked as
//! it runs in production; the whole suite takes a few seconds. Waits are measured on
//! [`std::time::Instant`], so only the *rate* of the store's clock matters, not its offset from
//! this process's. Run the suite on Tokio's real clock (not `start_paused`), with
//! `panic = "unwind"` (the default for tests): a failing check is caught so that the others
//! still run. Where a lease is checked to still hold, a check that was itself slower than the
//! lease fails saying so, rather than judging the store on an answer it cannot judge.
//!
//! # What passing means
//!
//! The checks hold the store to the contract documented on [`IdempotencyStore`]: one winner per
//! key, however many claim it at once; a done key replays its response and a failed one its
//! failure, never a second run; a released key is claimed again with a larger fencing token; a
//! holder whose lease was taken over can neither complete, release, fail nor renew; a retried
//! `complete`, `release` or `mark_failed` under the same token answers `Ok`; another fingerprint
//! is [`ClaimOutcome::KeyReused`]; purging goes by age and retention only and never deletes a
//! row whose lease is live. They do not check durability across restarts, behaviour under
//! outages, or transactional mode ([`TransactionalStore`](super::TransactionalStore)): those
//! depend on how the store keeps its rows, and belong to its own tests.

use std::any::Any;
use std::fmt;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::{Duration, Instant};

use super::{Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, StoreError};

/// A lease the checks wait out: short, so the suite stays fast.
const SHORT: Duration = Duration::from_millis(200);
/// How far past the end of a lease a check waits before it expects the lease to have run out:
/// room for the store's own timestamps (microseconds, or the database's transaction start).
const MARGIN: Duration = Duration::from_millis(100);
/// A lease that no check waits out.
const LONG: Duration = Duration::from_secs(60);
/// The retention of rows that no purge is meant to reach.
const DAY: Duration = Duration::from_secs(86_400);
/// How many calls claim one key at once in the concurrency checks.
const CONCURRENT: usize = 64;
/// How long one check may take before the suite stops waiting for it (a hung store).
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// The checks, by name, in the order [`run`] and [`check_all`] run them. Each is a public
/// function of this module.
///
/// ```
/// use retry_core::idempotency::conformance::CHECKS;
///
/// assert_eq!(CHECKS[0], "first_claim_gets_token_one");
/// assert!(CHECKS.contains(&"purge_never_deletes_a_live_lease"));
/// ```
pub const CHECKS: &[&str] = &[
    "first_claim_gets_token_one",
    "concurrent_claims_have_one_winner",
    "done_key_replays_its_response",
    "kept_failure_answers_failed_with_its_text",
    "released_key_is_claimed_again_with_a_larger_token",
    "retried_complete_answers_ok",
    "retried_mark_failed_answers_ok",
    "retried_release_answers_ok",
    "settled_claim_keeps_its_outcome",
    "fenced_holder_can_do_nothing",
    "claims_the_store_never_gave_are_fenced",
    "takeover_only_after_the_lease_ran_out",
    "concurrent_takeovers_have_one_winner",
    "renew_keeps_a_claim_past_its_original_lease",
    "another_fingerprint_is_key_reused",
    "released_key_accepts_a_new_fingerprint",
    "keys_are_independent",
    "purge_deletes_by_age_only",
    "purge_never_deletes_a_live_lease",
    "takeover_refreshes_retention",
    "abandon_that_starts_a_release_frees_the_key",
    "limits_are_sane",
];

/// Runs every check in [`CHECKS`], each on a fresh, empty store from `new_store`, and panics if
/// any failed, naming each failed check with what the store did wrong.
///
/// ```
/// use retry_core::idempotency::{MemoryStore, conformance};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// conformance::run(async || MemoryStore::new()).await;
/// # }
/// ```
pub async fn run<S, F>(new_store: F)
where
    S: IdempotencyStore,
    F: AsyncFnMut() -> S,
{
    let report = check_all(new_store).await;
    if !report.passed() {
        panic!("{report}");
    }
}

/// Runs every check in [`CHECKS`], each on a fresh, empty store from `new_store`, and reports
/// each one's outcome instead of panicking.
///
/// ```
/// use retry_core::idempotency::{MemoryStore, conformance};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let report = conformance::check_all(async || MemoryStore::new()).await;
/// assert!(report.passed(), "{report}");
/// assert_eq!(report.results().len(), conformance::CHECKS.len());
/// # }
/// ```
pub async fn check_all<S, F>(mut new_store: F) -> Report
where
    S: IdempotencyStore,
    F: AsyncFnMut() -> S,
{
    let mut results = Vec::with_capacity(CHECKS.len());
    // One arm per check: the checks are generic functions, so they are named here rather than
    // kept in a table of function pointers.
    macro_rules! checks {
        ($($check:ident),* $(,)?) => {$(
            let store = new_store().await;
            let started = Instant::now();
            let failure = caught(stringify!($check), $check(&store)).await.err();
            results.push(CheckResult {
                name: stringify!($check),
                failure,
                took: started.elapsed(),
            });
            drop(store);
        )*};
    }
    checks!(
        first_claim_gets_token_one,
        concurrent_claims_have_one_winner,
        done_key_replays_its_response,
        kept_failure_answers_failed_with_its_text,
        released_key_is_claimed_again_with_a_larger_token,
        retried_complete_answers_ok,
        retried_mark_failed_answers_ok,
        retried_release_answers_ok,
        settled_claim_keeps_its_outcome,
        fenced_holder_can_do_nothing,
        claims_the_store_never_gave_are_fenced,
        takeover_only_after_the_lease_ran_out,
        concurrent_takeovers_have_one_winner,
        renew_keeps_a_claim_past_its_original_lease,
        another_fingerprint_is_key_reused,
        released_key_accepts_a_new_fingerprint,
        keys_are_independent,
        purge_deletes_by_age_only,
        purge_never_deletes_a_live_lease,
        takeover_refreshes_retention,
        abandon_that_starts_a_release_frees_the_key,
        limits_are_sane,
    );
    debug_assert_eq!(
        results.iter().map(|r| r.name).collect::<Vec<_>>(),
        CHECKS,
        "CHECKS lists the checks as check_all runs them"
    );
    Report { results }
}

/// What [`check_all`] found: one [`CheckResult`] per check, in the order of [`CHECKS`].
/// Displays as one line per check, failures with their messages.
///
/// ```
/// use retry_core::idempotency::{MemoryStore, conformance};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let report = conformance::check_all(async || MemoryStore::new()).await;
/// assert_eq!(report.failures().count(), 0);
/// assert!(report.to_string().contains("ok   first_claim_gets_token_one"));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Report {
    results: Vec<CheckResult>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(CheckResult::passed)
    }

    /// Every check's result, in the order of [`CHECKS`].
    pub fn results(&self) -> &[CheckResult] {
        &self.results
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.results.iter().filter(|r| !r.passed())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.failures().count();
        writeln!(
            f,
            "idempotency store conformance: {} of {} checks passed",
            self.results.len() - failed,
            self.results.len()
        )?;
        for result in &self.results {
            match &result.failure {
                None => writeln!(f, "  ok   {} ({:?})", result.name, result.took)?,
                // A message of several lines (an `assert_eq!`'s) stays under its check.
                Some(message) => writeln!(
                    f,
                    "  FAIL {}: {}",
                    result.name,
                    message.replace('\n', "\n       ")
                )?,
            }
        }
        Ok(())
    }
}

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct CheckResult {
    name: &'static str,
    failure: Option<String>,
    took: Duration,
}

impl CheckResult {
    /// The check's name: its function in this module.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// What the store did wrong, if it failed (the check's panic message).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// How long it ran.
    pub fn took(&self) -> Duration {
        self.took
    }
}

// ---- the checks ----

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
    let done = claimed(store, &request(key, LONG), "a new key").await;
    ok(store.complete(&done, "\"once\"").await, "complete");
    ok(
        store.complete(&done, "\"once\"").await,
        "complete retried under the same token after it landed",
    );
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
    let failed = claimed(store, &request(key, LONG), "a new key").await;
    ok(store.mark_failed(&failed, "declined").await, "mark_failed");
    ok(
        store.mark_failed(&failed, "declined").await,
        "mark_failed retried under the same token after it landed",
    );
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
    let released = claimed(store, &request(key, LONG), "a new key").await;
    ok(store.release(&released).await, "release");
    ok(
        store.release(&released).await,
        "release retried under the same token after it landed",
    );
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

// ---- helpers ----

/// A claim request for `key` with `lease` and a day's retention.
fn request(key: &str, lease: Duration) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease,
        retention: DAY,
    }
}

/// Claims, expecting to get the key; `what` says what the key is at that point.
async fn claimed<S: IdempotencyStore + ?Sized>(
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
async fn expect<S: IdempotencyStore + ?Sized>(
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
async fn expect_within<S: IdempotencyStore + ?Sized>(
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
fn ok<T>(result: Result<T, StoreError>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{what}: expected Ok, the store failed with {e:?} ({e})"),
    }
}

/// Expects [`StoreError::Fenced`].
#[track_caller]
fn fenced(result: Result<(), StoreError>, what: &str) {
    match result {
        Err(StoreError::Fenced) => {}
        Ok(()) => panic!("{what}: expected StoreError::Fenced, the store answered Ok"),
        Err(e) => panic!("{what}: expected StoreError::Fenced, the store failed with {e:?} ({e})"),
    }
}

/// Sleeps until `deadline` on the real clock, even where Tokio's clock is paused (then each
/// sleep ends at once and the loop goes round until real time has caught up).
async fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        tokio::time::sleep(deadline - now).await;
    }
}

/// [`CONCURRENT`] claims of one key, polled together.
async fn claim_at_once<S: IdempotencyStore + ?Sized>(
    store: &S,
    request: &ClaimRequest<'_>,
) -> Vec<Result<ClaimOutcome, StoreError>> {
    join_all((0..CONCURRENT).map(|_| store.claim(request)).collect()).await
}

fn winners(outcomes: &[Result<ClaimOutcome, StoreError>]) -> Vec<Claim> {
    outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Ok(ClaimOutcome::Claimed(claim)) => Some(claim.clone()),
            _ => None,
        })
        .collect()
}

fn assert_only_in_progress_besides_the_winner(
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

/// Polls every future until all are ready (in one task, so no `'static` or spawning needed).
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Runs one check, turning its panic (a failed assertion) into its message, and a check that
/// does not finish within [`CHECK_TIMEOUT`] (a hung store) into a failure.
async fn caught(name: &str, check: impl Future<Output = ()>) -> Result<(), String> {
    let mut check = pin!(check);
    let guarded = poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| check.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => Poll::Ready(Ok(())),
            Err(payload) => Poll::Ready(Err(panic_message(&*payload))),
        },
    );
    match tokio::time::timeout(CHECK_TIMEOUT, guarded).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "{name} did not finish within {CHECK_TIMEOUT:?}: an operation of the store hangs"
        )),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "the check panicked with a non-text payload".to_owned()
    }
}

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
