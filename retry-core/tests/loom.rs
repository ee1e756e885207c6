//! Every interleaving of concurrent callers, explored by loom: the shared state behind
//! `MemoryStore` and `RetryBudget` keeps its promises whatever the scheduling.
//!
//! Run (scripts/test does):
//! `RUSTFLAGS="--cfg retry_core_loom" cargo test -p retry-core --release --test loom`
//! (a target directory of its own is best: the cfg rebuilds retry-core's dependencies).
//!
//! Why loom rather than shuttle: the state under test is synchronous (a mutex over a map, a
//! mutex over counters, thread-local scope frames), which is what loom models exhaustively, with
//! its own `Mutex` swapped in through `retry_core`'s `sync` module; shuttle's strength, async
//! tasks under a randomised scheduler, would only sample what loom enumerates here.
#![cfg(retry_core_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use retry_core::RetryBudget;
use retry_core::idempotency::{Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, MemoryStore};

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(3600),
    }
}

fn claim(store: &MemoryStore, key: &str) -> ClaimOutcome {
    loom::future::block_on(store.claim(&request(key))).expect("MemoryStore never fails")
}

#[test]
fn one_of_two_concurrent_claims_wins_and_the_loser_sees_it_in_progress() {
    loom::model(|| {
        let store = Arc::new(MemoryStore::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let store = store.clone();
                thread::spawn(move || claim(&store, "k"))
            })
            .collect();
        let outcomes: Vec<ClaimOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let won = outcomes
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::Claimed(_)))
            .count();
        assert_eq!(won, 1, "{outcomes:?}");
        assert!(
            outcomes
                .iter()
                .any(|o| matches!(o, ClaimOutcome::InProgress)),
            "{outcomes:?}"
        );
    });
}

#[test]
fn a_completion_races_a_duplicate_which_sees_either_in_progress_or_the_response() {
    loom::model(|| {
        let store = Arc::new(MemoryStore::new());
        let ClaimOutcome::Claimed(held) = claim(&store, "k") else {
            panic!("the first claim wins")
        };
        let completer = {
            let store = store.clone();
            thread::spawn(move || loom::future::block_on(store.complete(&held, "\"ok\"")))
        };
        let duplicate = {
            let store = store.clone();
            thread::spawn(move || claim(&store, "k"))
        };
        completer.join().unwrap().unwrap();
        match duplicate.join().unwrap() {
            ClaimOutcome::InProgress => {}
            ClaimOutcome::Done(response) => assert_eq!(response, "\"ok\""),
            other => panic!("a duplicate ran or lost the response: {other:?}"),
        }
        // Whatever the order, the key is done with the one response afterwards.
        assert!(matches!(claim(&store, "k"), ClaimOutcome::Done(r) if r == "\"ok\""));
    });
}

#[test]
fn a_release_races_a_duplicate_which_never_gets_a_token_already_used() {
    loom::model(|| {
        let store = Arc::new(MemoryStore::new());
        let ClaimOutcome::Claimed(first) = claim(&store, "k") else {
            panic!("the first claim wins")
        };
        let first_token = first.token;
        let releaser = {
            let store = store.clone();
            thread::spawn(move || loom::future::block_on(store.release(&first)))
        };
        let duplicate = {
            let store = store.clone();
            thread::spawn(move || claim(&store, "k"))
        };
        releaser.join().unwrap().unwrap();
        if let ClaimOutcome::Claimed(Claim { token, .. }) = duplicate.join().unwrap() {
            assert!(token > first_token, "fencing tokens only grow");
            // The released holder cannot complete over the new claim.
            let stale = Claim {
                key: "k".into(),
                token: first_token,
            };
            assert!(loom::future::block_on(store.complete(&stale, "\"late\"")).is_err());
        }
    });
}

#[test]
fn a_budget_grants_exactly_what_it_holds_to_concurrent_withdrawals() {
    loom::model(|| {
        // No floor; one deposit at ratio 1.0 buys exactly one retry.
        let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 0, 1.0));
        budget.deposit();
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                thread::spawn(move || budget.withdraw())
            })
            .collect();
        let granted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&g| g)
            .count();
        assert_eq!(granted, 1);
        assert_eq!(budget.remaining(), 0);
    });
}

#[test]
fn deposits_and_withdrawals_interleaved_never_overdraw() {
    loom::model(|| {
        let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 0, 1.0));
        let depositor = {
            let budget = budget.clone();
            thread::spawn(move || budget.deposit())
        };
        let withdrawer = {
            let budget = budget.clone();
            thread::spawn(move || budget.withdraw())
        };
        depositor.join().unwrap();
        let granted = withdrawer.join().unwrap();
        // Granted only if the deposit came first; either way the books balance.
        assert_eq!(budget.remaining(), u64::from(!granted));
    });
}

// ---- the retry scope ----

#[derive(Debug)]
struct Reset;

impl retry_core::Classify for Reset {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

/// Succeeds at once, reporting whether it ran inside a retry scope.
#[retry_core::retryable(max = 3, base = "0ms")]
async fn scoped() -> Result<bool, Reset> {
    Ok(retry_core::scope::is_active())
}

/// The scope is a retry's own, on whichever thread polls it: a thread polling another retry at
/// the same time neither sees it nor disturbs it, and each thread is outside any scope after.
#[test]
fn each_thread_sees_only_the_scope_it_polls() {
    loom::model(|| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                thread::spawn(|| {
                    let outside_before = retry_core::scope::is_active();
                    let inside = loom::future::block_on(scoped()).unwrap();
                    (outside_before, inside, retry_core::scope::is_active())
                })
            })
            .collect();
        let plain = thread::spawn(retry_core::scope::is_active);
        for handle in handles {
            assert_eq!(handle.join().unwrap(), (false, true, false));
        }
        assert!(
            !plain.join().unwrap(),
            "a thread polling no retry is outside any scope"
        );
    });
}
