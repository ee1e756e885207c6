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
