//! The shared retry budget bounds retries across calls (paused clock).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use retry_core::{Policy, RetryBudget, retryable};

#[tokio::test(start_paused = true)]
async fn a_ten_percent_budget_allows_at_most_ten_percent_plus_the_floor() {
    // 1 retry per second of floor over a 10 s window: 10, plus 10% of 1,000 calls.
    let budget = RetryBudget::new(Duration::from_secs(10), 1, 0.1);
    let mut allowed = 0;
    for _ in 0..1_000 {
        budget.deposit();
        if budget.withdraw() {
            allowed += 1;
        }
    }
    assert!(allowed <= 100 + 10, "{allowed} retries");
    assert!(
        allowed >= 100,
        "{allowed} retries: the budget must pay for 10%"
    );
    assert!(!budget.withdraw());
}

#[tokio::test(start_paused = true)]
async fn deposits_expire_after_the_window() {
    let budget = RetryBudget::new(Duration::from_secs(10), 0, 0.5);
    for _ in 0..100 {
        budget.deposit();
    }
    assert_eq!(budget.remaining(), 50);
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(
        budget.remaining(),
        50,
        "half a window later the deposits still count"
    );
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(budget.remaining(), 0, "after the window they have expired");
}

static CALLS: AtomicU32 = AtomicU32::new(0);

// No floor, one retry per two calls.
static BUDGET: LazyLock<RetryBudget> =
    LazyLock::new(|| RetryBudget::new(Duration::from_secs(60), 0, 0.5));

#[retryable(max = 5, base = "10ms", budget = &*BUDGET)]
async fn always_down() -> std::io::Result<()> {
    CALLS.fetch_add(1, Ordering::SeqCst);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_skips_the_retry_and_returns_the_last_error() {
    for _ in 0..10 {
        let err = always_down().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    }
    // 10 first attempts and 5 retries: the budget, not `max`, bounded the retries.
    assert_eq!(CALLS.load(Ordering::SeqCst), 15);
}

#[tokio::test(start_paused = true)]
async fn a_policy_carries_its_budget_to_closure_retries() {
    let budget = Arc::new(RetryBudget::new(Duration::from_secs(60), 0, 0.0));
    let policy = Policy::new().max_attempts(4).budget(budget);
    let calls = AtomicU32::new(0);
    let result: std::io::Result<()> = policy
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(std::io::ErrorKind::TimedOut.into())
        })
        .await;
    assert!(result.is_err());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a zero budget allows no retry"
    );
}

#[test]
fn eight_threads_hammering_a_budget_keep_its_invariants() {
    // No expiry during the test: every deposit counts, so the bound is exact.
    let budget = Arc::new(RetryBudget::new(Duration::from_secs(3600), 1, 0.25));
    let floor = 3600; // 1 per second over the window
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let budget = budget.clone();
            std::thread::spawn(move || {
                let (mut deposits, mut granted) = (0u64, 0u64);
                for i in 0..20_000u64 {
                    if (i + t) % 3 != 0 {
                        budget.deposit();
                        deposits += 1;
                    }
                    if budget.withdraw() {
                        granted += 1;
                    }
                }
                (deposits, granted)
            })
        })
        .collect();
    let (deposits, granted) = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |(d, g), (d2, g2)| (d + d2, g + g2));
    let allowed = floor + deposits / 4;
    assert!(
        granted <= allowed,
        "{granted} retries granted, {allowed} allowed"
    );
    // Every thread keeps asking, so the budget ends up spent: it paid what it held.
    assert_eq!(granted + budget.remaining(), allowed);
    assert!(!budget.withdraw() || budget.remaining() == 0);
}

#[test]
fn extreme_configuration_does_not_overflow() {
    let budget = RetryBudget::new(Duration::MAX, u32::MAX, 1000.0);
    for _ in 0..10 {
        budget.deposit();
        assert!(budget.withdraw());
    }
    // The floor saturated at u64::MAX; ten retries were taken from it.
    assert_eq!(budget.remaining(), u64::MAX - 10);
    let tiny = RetryBudget::new(Duration::ZERO, u32::MAX, f32::NAN);
    tiny.deposit();
    assert!(tiny.withdraw());
}

static NESTED_BUDGET: LazyLock<RetryBudget> =
    LazyLock::new(|| RetryBudget::new(Duration::from_secs(60), 0, 0.5));

#[retryable(max = 3, base = "1ms", budget = &*NESTED_BUDGET)]
async fn budgeted_inner() -> std::io::Result<()> {
    Ok(())
}

async fn through_a_plain_fn() -> std::io::Result<()> {
    budgeted_inner().await
}

#[retryable(max = 3, base = "1ms", budget = &*NESTED_BUDGET)]
async fn budgeted_outer() -> std::io::Result<()> {
    through_a_plain_fn().await
}

#[tokio::test(start_paused = true)]
async fn a_collapsed_nested_call_does_not_deposit() {
    budgeted_outer().await.unwrap();
    // One logical call, one deposit: half a retry, which rounds down to none. Two deposits
    // (the nested call counted as a call of its own) would have earned a whole retry.
    assert_eq!(NESTED_BUDGET.remaining(), 0);
}
