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
//! use std::sync::Arc;
//!
//! use retry_core::idempotency::{MemoryStore, conformance};
//!
//! # async fn run() {
//! let mut made = Vec::new(); // a schema or a file per check, in a store of your own
//! conformance::run(async || {
//!     let store = Arc::new(MemoryStore::new());
//!     made.push(Arc::clone(&store));
//!     store
//! })
//! .await;
//! drop(made); // cleaned up once every check ran
//! # }
//! ```
//!
//! retry-sqlite and retry-postgres run it on a fresh file and a fresh schema per check.
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
//! row whose lease is live; the step journal is written only under the claim that holds the
//! key, read back whole by the next holder, and purged with the key. They do not check durability across restarts, behaviour under
//! outages, or transactional mode ([`TransactionalStore`](super::TransactionalStore)): those
//! depend on how the store keeps its rows, and belong to its own tests.

use super::IdempotencyStore;
// Only the docs name it (`ClaimOutcome::KeyReused`).
#[cfg(doc)]
use super::ClaimOutcome;

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
    "endless_lease_and_retention_hold",
    "steps_are_journaled_and_read_back",
    "stale_holder_cannot_write_a_step",
    "takeover_sees_every_finished_step",
    "purge_removes_the_journal",
    "resumed_key_keeps_its_fingerprint",
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
            results.push(check(stringify!($check), $check(&store)).await);
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
        endless_lease_and_retention_hold,
        steps_are_journaled_and_read_back,
        stale_holder_cannot_write_a_step,
        takeover_sees_every_finished_step,
        purge_removes_the_journal,
        resumed_key_keeps_its_fingerprint,
    );
    debug_assert_eq!(
        results.iter().map(|r| r.name()).collect::<Vec<_>>(),
        CHECKS,
        "CHECKS lists the checks as check_all runs them"
    );
    Report::new("idempotency store", results)
}

use crate::conformance::check;
pub use crate::conformance::{CheckResult, Report};

// ---- the checks, by concern ----

mod claims;
mod leases;
mod purge;
mod settling;
mod steps;
mod support;

pub use claims::{
    another_fingerprint_is_key_reused, concurrent_claims_have_one_winner,
    done_key_replays_its_response, endless_lease_and_retention_hold, first_claim_gets_token_one,
    kept_failure_answers_failed_with_its_text, keys_are_independent, limits_are_sane,
    released_key_accepts_a_new_fingerprint, released_key_is_claimed_again_with_a_larger_token,
};
pub use leases::{
    abandon_that_starts_a_release_frees_the_key, concurrent_takeovers_have_one_winner,
    renew_keeps_a_claim_past_its_original_lease, takeover_only_after_the_lease_ran_out,
};
pub use purge::{
    purge_deletes_by_age_only, purge_never_deletes_a_live_lease, takeover_refreshes_retention,
};
pub use settling::{
    claims_the_store_never_gave_are_fenced, fenced_holder_can_do_nothing,
    retried_complete_answers_ok, retried_mark_failed_answers_ok, retried_release_answers_ok,
    settled_claim_keeps_its_outcome,
};
pub use steps::{
    purge_removes_the_journal, resumed_key_keeps_its_fingerprint, stale_holder_cannot_write_a_step,
    steps_are_journaled_and_read_back, takeover_sees_every_finished_step,
};
