//! The runtime without the attribute: `Policy::retry` on closures, and `#[retryable(policy = ..)]`
//! with a policy built at run time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_core::{Classify, Decision, Jitter, Policy, retryable};
use tokio::time::Instant;

#[derive(Debug, PartialEq)]
enum Upstream {
    Unavailable,
    BadRequest,
    SlowDown(Duration),
}

impl Classify for Upstream {
    fn classify(&self) -> Decision {
        match self {
            Upstream::Unavailable => Decision::Retry,
            Upstream::BadRequest => Decision::Stop,
            Upstream::SlowDown(d) => Decision::RetryAfter(*d),
        }
    }
}

fn quick(max: u32) -> Policy {
    Policy::new()
        .max_attempts(max)
        .base(Duration::from_millis(10))
        .jitter(Jitter::None)
}

#[tokio::test(start_paused = true)]
async fn closures_are_retried_with_the_same_semantics_as_the_attribute() {
    let calls = AtomicU32::new(0);
    let started = Instant::now();
    let result: Result<(), Upstream> = quick(4)
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Upstream::Unavailable)
        })
        .await;
    assert_eq!(result, Err(Upstream::Unavailable));
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(started.elapsed(), Duration::from_millis(10 + 20 + 40));
}

#[tokio::test(start_paused = true)]
async fn closures_honour_stop_and_retry_after() {
    let calls = AtomicU32::new(0);
    let result: Result<(), Upstream> = quick(4)
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Upstream::BadRequest)
        })
        .await;
    assert_eq!(
        (result, calls.load(Ordering::SeqCst)),
        (Err(Upstream::BadRequest), 1)
    );

    let started = Instant::now();
    let calls = AtomicU32::new(0);
    let result = quick(2)
        .retry(|| async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(Upstream::SlowDown(Duration::from_secs(3))),
                _ => Ok("done"),
            }
        })
        .await;
    assert_eq!(result, Ok("done"));
    // The server's 3 s, then our own backoff on top (10 ms, no jitter here): the floor holds,
    // and with jitter clients answered alike spread out above it.
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3) + Duration::from_millis(10)
    );
}

#[tokio::test(start_paused = true)]
async fn retry_if_and_on_retry_replace_classification_and_observe_waits() {
    let mut seen = Vec::new();
    let calls = AtomicU32::new(0);
    let result: Result<(), u16> = quick(3)
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(503)
        })
        .retry_if(|status: &u16| {
            if *status >= 500 {
                Decision::Retry
            } else {
                Decision::Stop
            }
        })
        .on_retry(|attempt, status: &u16, wait| seen.push((attempt, *status, wait)))
        .await;
    assert_eq!(result, Err(503));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        seen,
        [
            (1, 503, Duration::from_millis(10)),
            (2, 503, Duration::from_millis(20))
        ]
    );
}

struct Client {
    policy: Policy,
    calls: AtomicU32,
}

impl Client {
    #[retryable(policy = &self.policy)]
    async fn fetch(&self) -> Result<u32, Upstream> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(Upstream::Unavailable)
    }
}

#[tokio::test(start_paused = true)]
async fn a_policy_expression_is_read_when_the_call_starts() {
    let client = Client {
        policy: quick(6),
        calls: AtomicU32::new(0),
    };
    let started = Instant::now();
    assert_eq!(client.fetch().await, Err(Upstream::Unavailable));
    assert_eq!(client.calls.load(Ordering::SeqCst), 6);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(10 + 20 + 40 + 80 + 160)
    );
}

fn only_unavailable(error: &Upstream) -> Decision {
    match error {
        Upstream::Unavailable => Decision::Retry,
        _ => Decision::Stop,
    }
}

static SEEN: AtomicU32 = AtomicU32::new(0);

fn count_retries(_attempt: u32, _error: &Upstream, _wait: Duration) {
    SEEN.fetch_add(1, Ordering::SeqCst);
}

#[retryable(max = 5, base = "1ms", retry_if = only_unavailable, on_retry = count_retries)]
async fn slow_down(calls: &AtomicU32) -> Result<(), Upstream> {
    // Would be retried by `Classify`; `retry_if` says stop.
    calls.fetch_add(1, Ordering::SeqCst);
    Err(Upstream::SlowDown(Duration::from_millis(1)))
}

#[tokio::test(start_paused = true)]
async fn retry_if_replaces_classify_in_the_attribute() {
    let calls = AtomicU32::new(0);
    assert!(slow_down(&calls).await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(SEEN.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn retry_if_and_on_retry_closures_need_no_annotations() {
    let mut seen = Vec::new();
    let result = quick(3)
        .retry(|| async { Err::<(), _>(Upstream::Unavailable) })
        // `e: &Upstream` is known from the retried closure.
        .retry_if(|e| match e {
            Upstream::Unavailable => Decision::Retry,
            other => other.classify(),
        })
        .on_retry(|attempt, e, wait| seen.push((attempt, e == &Upstream::Unavailable, wait)))
        .await;
    assert_eq!(result, Err(Upstream::Unavailable));
    assert_eq!(
        seen,
        [
            (1, true, Duration::from_millis(10)),
            (2, true, Duration::from_millis(20))
        ]
    );
}

/// An attempt that borrows what the closure owns (the lending `AsyncFnMut`).
async fn lookup(name: &str) -> Result<usize, Upstream> {
    if name.len() < 3 {
        Err(Upstream::Unavailable)
    } else {
        Ok(name.len())
    }
}

#[tokio::test(start_paused = true)]
async fn attempts_of_an_async_closure_may_borrow_its_state() {
    let mut name = String::new();
    let started = Instant::now();
    let result = quick(5)
        .retry(async move || {
            name.push('x');
            lookup(&name).await
        })
        .run()
        .await;
    assert_eq!(result, Ok(3));
    assert_eq!(started.elapsed(), Duration::from_millis(10 + 20));

    // `run` is the same loop: Stop ends it at once.
    let calls = AtomicU32::new(0);
    let stopped = quick(5)
        .retry(async || {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Upstream::BadRequest)
        })
        .run()
        .await;
    assert_eq!(stopped, Err(Upstream::BadRequest));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_closure_retry_can_be_spawned() {
    // `.await` and `.run()` both give `Send` futures when the attempts are `Send`.
    let policy = quick(2);
    let awaited = tokio::spawn(async move {
        policy
            .retry(|| async { Err::<(), _>(Upstream::Unavailable) })
            .await
    });
    let policy = quick(2);
    let ran = tokio::spawn(async move {
        policy
            .retry(async || Err::<(), _>(Upstream::Unavailable))
            .run()
            .await
    });
    assert_eq!(awaited.await.unwrap(), Err(Upstream::Unavailable));
    assert_eq!(ran.await.unwrap(), Err(Upstream::Unavailable));
}
