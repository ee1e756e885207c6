//! `#[retryable]` on the paused clock: attempts, waits, give-ups and the shapes of function it
//! accepts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_core::{Classify, Decision, retryable};
use tokio::time::Instant;

#[derive(Debug, Clone, PartialEq)]
enum Flaky {
    /// Transient, numbered by the attempt that failed.
    Busy(u32),
    Rejected,
    Later(Duration),
}

impl Classify for Flaky {
    fn classify(&self) -> Decision {
        match self {
            Flaky::Busy(_) => Decision::Retry,
            Flaky::Rejected => Decision::Stop,
            Flaky::Later(d) => Decision::RetryAfter(*d),
        }
    }
}

/// Counts calls; fails with `Busy(n)` on call n until `succeed_on`.
#[derive(Default)]
struct Upstream {
    calls: AtomicU32,
}

impl Upstream {
    fn call(&self, succeed_on: u32) -> Result<u32, Flaky> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= succeed_on {
            Ok(n)
        } else {
            Err(Flaky::Busy(n))
        }
    }
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[retryable(max = 5, base = "10ms", jitter = "none")]
async fn always_busy(upstream: &Upstream) -> Result<u32, Flaky> {
    upstream.call(u32::MAX)
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts_with_the_last_error() {
    let upstream = Upstream::default();
    let started = Instant::now();
    let result = always_busy(&upstream).await;
    assert_eq!(result, Err(Flaky::Busy(5)));
    assert_eq!(upstream.calls(), 5);
    // No jitter: 10 + 20 + 40 + 80 ms, and no wait after the last attempt.
    assert_eq!(started.elapsed(), Duration::from_millis(150));
}

#[retryable(max = 4, base = "10ms", jitter = "none")]
async fn third_time_lucky(upstream: &Upstream) -> Result<u32, Flaky> {
    upstream.call(3)
}

#[tokio::test(start_paused = true)]
async fn returns_the_first_success() {
    let upstream = Upstream::default();
    let started = Instant::now();
    assert_eq!(third_time_lucky(&upstream).await, Ok(3));
    assert_eq!(upstream.calls(), 3);
    assert_eq!(started.elapsed(), Duration::from_millis(30));
}

#[retryable(max = 5, base = "1s")]
async fn rejected(upstream: &Upstream) -> Result<u32, Flaky> {
    upstream.call(u32::MAX)?;
    Err(Flaky::Rejected)
}

#[retryable(max = 5, base = "1s")]
async fn rejected_at_once(upstream: &Upstream) -> Result<u32, Flaky> {
    upstream.calls.fetch_add(1, Ordering::SeqCst);
    Err(Flaky::Rejected)
}

#[tokio::test(start_paused = true)]
async fn a_stop_error_is_not_retried() {
    let upstream = Upstream::default();
    let started = Instant::now();
    assert_eq!(rejected_at_once(&upstream).await, Err(Flaky::Rejected));
    assert_eq!(upstream.calls(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
    // `?` inside the body returns from the attempt, not from the whole retry loop.
    let upstream = Upstream::default();
    assert_eq!(rejected(&upstream).await, Err(Flaky::Busy(5)));
    assert_eq!(upstream.calls(), 5);
}

#[retryable(max = 5, base = "1s")]
async fn panics(upstream: &Upstream) -> Result<u32, Flaky> {
    upstream.calls.fetch_add(1, Ordering::SeqCst);
    panic!("bug in the handler")
}

#[tokio::test(start_paused = true)]
async fn a_panic_propagates_after_one_attempt() {
    let upstream = Arc::new(Upstream::default());
    let task = {
        let upstream = upstream.clone();
        tokio::spawn(async move { panics(&upstream).await })
    };
    let joined = task.await;
    assert!(joined.expect_err("the panic must propagate").is_panic());
    assert_eq!(upstream.calls(), 1);
}

#[retryable(max = 3, base = "1s", cap = "30s", jitter = "none")]
async fn asks_for_two_minutes(upstream: &Upstream) -> Result<u32, Flaky> {
    let n = upstream.call(2)?;
    if n == 1 {
        Err(Flaky::Later(Duration::from_secs(120)))
    } else {
        Ok(n)
    }
}

#[retryable(max = 3, base = "1s", jitter = "none")]
async fn retry_after_two_minutes(upstream: &Upstream) -> Result<u32, Flaky> {
    match upstream.call(2) {
        Err(_) => Err(Flaky::Later(Duration::from_secs(120))),
        ok => ok,
    }
}

#[retryable(max = 3, base = "1s", max_retry_after = "60s")]
async fn retry_after_beyond_limit(upstream: &Upstream) -> Result<u32, Flaky> {
    match upstream.call(2) {
        Err(_) => Err(Flaky::Later(Duration::from_secs(120))),
        ok => ok,
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_a_floor_above_the_cap() {
    let upstream = Upstream::default();
    let started = Instant::now();
    assert_eq!(retry_after_two_minutes(&upstream).await, Ok(2));
    // The server's two minutes (above `cap`), plus our own backoff on top (1 s, no jitter).
    assert_eq!(started.elapsed(), Duration::from_secs(121));
    let _ = asks_for_two_minutes;
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_max_retry_after_gives_up_at_once() {
    let upstream = Upstream::default();
    let started = Instant::now();
    assert_eq!(
        retry_after_beyond_limit(&upstream).await,
        Err(Flaky::Later(Duration::from_secs(120)))
    );
    assert_eq!(upstream.calls(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[retryable(max = 10, base = "1s", jitter = "none", deadline = "10s")]
async fn slow_and_busy(upstream: &Upstream) -> Result<u32, Flaky> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    upstream.call(u32::MAX)
}

#[tokio::test(start_paused = true)]
async fn the_deadline_stops_before_a_wait_that_would_cross_it() {
    let upstream = Upstream::default();
    let started = Instant::now();
    assert_eq!(slow_and_busy(&upstream).await, Err(Flaky::Busy(4)));
    // Attempts take 0.5 s each, waits 1, 2, 4 s: attempt 4 ends at 9 s, and the next wait of
    // 8 s would cross 10 s (time inside attempts counts).
    assert_eq!(upstream.calls(), 4);
    assert_eq!(started.elapsed(), Duration::from_secs(9));
}

#[retryable(max = 3, base = "100ms", jitter = "none", attempt_timeout = "1s")]
async fn hangs_once(upstream: &Upstream) -> std::io::Result<u32> {
    if upstream.calls.fetch_add(1, Ordering::SeqCst) == 0 {
        std::future::pending::<()>().await;
    }
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn attempt_timeout_bounds_each_attempt_and_is_retried() {
    let upstream = Upstream::default();
    let started = Instant::now();
    assert_eq!(hangs_once(&upstream).await.unwrap(), 7);
    assert_eq!(upstream.calls(), 2);
    assert_eq!(started.elapsed(), Duration::from_millis(1100));
}

// ---- the shapes of function `#[retryable]` accepts ----

struct Account {
    upstream: Upstream,
    log: Vec<u32>,
}

impl Account {
    #[retryable(max = 3, base = "1ms")]
    async fn by_ref(&self) -> Result<u32, Flaky> {
        self.upstream.call(3)
    }

    #[retryable(max = 3, base = "1ms")]
    async fn by_mut(&mut self, amount: u32) -> Result<usize, Flaky> {
        self.log.push(amount);
        self.upstream.call(3).map(|_| self.log.len())
    }
}

trait Quotes {
    async fn quote(&self, id: u64) -> Result<u64, Flaky>;
}

impl Quotes for Account {
    #[retryable(max = 3, base = "1ms")]
    async fn quote(&self, id: u64) -> Result<u64, Flaky> {
        self.upstream.call(2).map(|n| id * 100 + u64::from(n))
    }
}

#[retryable(max = 3, base = "1ms")]
async fn generic<T: std::fmt::Display + Clone>(
    upstream: &Upstream,
    label: T,
) -> Result<String, Flaky> {
    upstream.call(2).map(|n| format!("{label}#{n}"))
}

#[retryable(max = 3, base = "1ms")]
async fn owned(
    upstream: &Upstream,
    mut message: String,
    (a, b): (u8, u8),
) -> Result<String, Flaky> {
    message.push('!');
    upstream.call(3)?;
    Ok(format!("{message}{a}{b}"))
}

#[retryable(max = 4, base = "1ms")]
async fn impl_arg(upstream: &Upstream, name: impl AsRef<str> + Clone) -> Result<usize, Flaky> {
    upstream.call(2).map(|_| name.as_ref().len())
}

#[retryable(max = 3, base = "1ms")]
async fn through_mut_ref(upstream: &Upstream, seen: &mut Vec<u32>) -> Result<usize, Flaky> {
    seen.push(upstream.calls());
    upstream.call(3).map(|_| seen.len())
}

#[tokio::test(start_paused = true)]
async fn methods_generics_trait_impls_and_owned_arguments_are_retried() {
    let mut account = Account {
        upstream: Upstream::default(),
        log: Vec::new(),
    };
    assert_eq!(account.by_ref().await, Ok(3));
    account.upstream = Upstream::default();
    assert_eq!(account.by_mut(5).await, Ok(3));
    assert_eq!(account.log, [5, 5, 5]);
    account.upstream = Upstream::default();
    assert_eq!(account.quote(4).await, Ok(402));

    let upstream = Upstream::default();
    assert_eq!(generic(&upstream, "q").await.as_deref(), Ok("q#2"));
    // Each attempt starts from a fresh copy of the owned argument.
    let upstream = Upstream::default();
    assert_eq!(
        owned(&upstream, "hi".to_owned(), (1, 2)).await.as_deref(),
        Ok("hi!12")
    );
    assert_eq!(upstream.calls(), 3);
    let upstream = Upstream::default();
    assert_eq!(impl_arg(&upstream, "four").await, Ok(4));
    let upstream = Upstream::default();
    let mut seen = Vec::new();
    assert_eq!(through_mut_ref(&upstream, &mut seen).await, Ok(3));
    assert_eq!(seen, [0, 1, 2]);
}

#[derive(Debug, Default)]
struct CountsClones {
    clones: Arc<AtomicU32>,
}

impl Clone for CountsClones {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        CountsClones {
            clones: self.clones.clone(),
        }
    }
}

#[retryable(max = 4, base = "1ms")]
async fn consumes(upstream: &Upstream, token: CountsClones) -> Result<(), Flaky> {
    drop(token);
    upstream.call(u32::MAX).map(drop)
}

#[tokio::test(start_paused = true)]
async fn owned_arguments_are_cloned_for_every_attempt_but_the_last() {
    let upstream = Upstream::default();
    let token = CountsClones::default();
    let clones = token.clones.clone();
    assert!(consumes(&upstream, token).await.is_err());
    assert_eq!(upstream.calls(), 4);
    assert_eq!(clones.load(Ordering::SeqCst), 3);
}

#[retryable(max = 3, base = "1ms")]
async fn sendable(upstream: Arc<Upstream>, note: String) -> Result<String, Flaky> {
    tokio::task::yield_now().await;
    upstream.call(2).map(|_| note)
}

#[test]
fn the_future_of_a_send_body_is_send() {
    fn assert_send<T: Send>(t: T) -> T {
        t
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let upstream = Arc::new(Upstream::default());
    let fut = assert_send(sendable(upstream.clone(), "sent".to_owned()));
    let out = runtime.block_on(async { tokio::spawn(fut).await.unwrap() });
    assert_eq!(out.as_deref(), Ok("sent"));
    assert_eq!(upstream.calls(), 2);
}

#[retryable(
    max = 5,
    base = "500ms",
    jitter = "none",
    deadline = "10s",
    attempt_timeout = "4s"
)]
async fn hangs(attempts: &std::sync::atomic::AtomicU32) -> std::io::Result<()> {
    attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn an_attempt_gets_only_the_time_left_before_the_deadline() {
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let started = tokio::time::Instant::now();
    let err = hangs(&attempts).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    // 0–4 s, wait 0.5 s, 4.5–8.5 s, wait 1 s, then 9.5 s: the third attempt gets the 0.5 s
    // left, not its 4 s, and the call ends at its deadline.
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(started.elapsed(), Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "`deadline` must be longer than zero")]
fn a_zero_deadline_is_refused() {
    let _ = retry_core::Policy::new().deadline(Duration::ZERO);
}

#[test]
#[should_panic(expected = "`attempt_timeout` must be longer than zero")]
fn a_zero_attempt_timeout_is_refused() {
    let _ = retry_core::Policy::new().attempt_timeout(Duration::ZERO);
}
