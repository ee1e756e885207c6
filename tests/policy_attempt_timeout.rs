//! A `Policy`'s `attempt_timeout` at run time: `policy.retry(..).timed()` and
//! `#[retryable(policy = ..)]` cut each attempt off at `min(attempt_timeout, time left)`; a call
//! whose error cannot be made from `Elapsed` still compiles and runs, uncut, and says so once
//! per call site.
//!
//! Only the last test reaches the untimed warning's callsite, with its subscriber installed:
//! tracing caches per-callsite interest process-wide (see tests/tracing_events.rs).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_core::{Classify, Decision, Elapsed, Jitter, Policy, retryable};
use tokio::time::Instant;
use tracing_subscriber::layer::SubscriberExt;

/// `call`, failing the test instead of hanging it if an attempt that should be cut off is not.
async fn within_a_minute<F: std::future::IntoFuture>(call: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("an attempt was never cut off")
}

fn timed_policy(max: u32, timeout: Duration) -> Policy {
    Policy::new()
        .max_attempts(max)
        .base(Duration::from_millis(100))
        .jitter(Jitter::None)
        .attempt_timeout(timeout)
}

#[tokio::test(start_paused = true)]
async fn a_timed_closure_retry_cuts_hanging_attempts_off_and_retries_them() {
    let calls = AtomicU32::new(0);
    let started = Instant::now();
    let result: io::Result<()> = within_a_minute(
        timed_policy(3, Duration::from_secs(1))
            .retry(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                std::future::pending().await
            })
            .timed(),
    )
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    assert!(
        error.get_ref().is_some_and(|e| e.is::<Elapsed>()),
        "{error:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // 1 s, wait 100 ms, 1 s, wait 200 ms, 1 s.
    assert_eq!(started.elapsed(), Duration::from_millis(3300));
}

#[tokio::test(start_paused = true)]
async fn a_timed_async_closure_retry_gets_only_the_time_left_before_the_deadline() {
    let mut calls = 0;
    let started = Instant::now();
    let policy = timed_policy(5, Duration::from_secs(5)).deadline(Duration::from_secs(3));
    let call = policy
        .retry(async || {
            calls += 1;
            std::future::pending::<io::Result<()>>().await
        })
        .timed()
        .run();
    let result = within_a_minute(call).await;
    assert_eq!(result.unwrap_err().kind(), io::ErrorKind::TimedOut);
    // The attempt is cut at the deadline (3 s), not at its 5 s, and no other one starts.
    assert_eq!(calls, 1);
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn every_attempt_is_cut_to_the_time_left_before_the_deadline() {
    let calls = AtomicU32::new(0);
    let started = Instant::now();
    let policy = timed_policy(5, Duration::from_secs(4))
        .base(Duration::from_millis(500))
        .deadline(Duration::from_secs(10));
    let call = policy
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<io::Result<()>>().await
        })
        .timed();
    let result = within_a_minute(call).await;
    assert_eq!(result.unwrap_err().kind(), io::ErrorKind::TimedOut);
    // 0–4 s, wait 0.5 s, 4.5–8.5 s, wait 1 s, then 9.5–10 s: the call ends at its deadline.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(started.elapsed(), Duration::from_secs(10));
}

#[derive(Debug, PartialEq)]
enum Quote {
    TimedOut,
}

impl Classify for Quote {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

impl From<Elapsed> for Quote {
    fn from(_: Elapsed) -> Self {
        Quote::TimedOut
    }
}

struct Quotes {
    policy: Policy,
    calls: AtomicU32,
}

impl Quotes {
    fn new(policy: Policy) -> Self {
        Quotes {
            policy,
            calls: AtomicU32::new(0),
        }
    }

    /// The first attempt hangs; the second answers.
    async fn hang_once(&self) -> Result<u32, Quote> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            std::future::pending::<()>().await;
        }
        Ok(7)
    }

    #[retryable(policy = &self.policy)]
    async fn fetch(&self) -> Result<u32, Quote> {
        self.hang_once().await
    }

    #[retryable(policy = &self.policy)]
    async fn always_hangs(&self) -> Result<u32, Quote> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }

    // Written on the attribute, `attempt_timeout` wins over the policy's own.
    #[retryable(policy = &self.policy, attempt_timeout = "1s")]
    async fn fetch_within_a_second(&self) -> Result<u32, Quote> {
        self.hang_once().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_policy_attribute_applies_the_policy_attempt_timeout_when_the_error_has_from_elapsed() {
    let quotes = Quotes::new(timed_policy(3, Duration::from_secs(2)));
    let started = Instant::now();
    assert_eq!(within_a_minute(quotes.fetch()).await, Ok(7));
    assert_eq!(quotes.calls.load(Ordering::SeqCst), 2);
    assert_eq!(started.elapsed(), Duration::from_millis(2100));

    let quotes = Quotes::new(timed_policy(2, Duration::from_secs(2)));
    let started = Instant::now();
    assert_eq!(
        within_a_minute(quotes.always_hangs()).await,
        Err(Quote::TimedOut)
    );
    assert_eq!(quotes.calls.load(Ordering::SeqCst), 2);
    assert_eq!(started.elapsed(), Duration::from_millis(4100));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_written_on_the_attribute_wins_over_the_policy_one() {
    let quotes = Quotes::new(timed_policy(3, Duration::from_secs(30)));
    let started = Instant::now();
    assert_eq!(within_a_minute(quotes.fetch_within_a_second()).await, Ok(7));
    assert_eq!(started.elapsed(), Duration::from_millis(1100));
}

/// Like `reqwest::Error`: no `From<Elapsed>`, so no way to report a timeout.
#[derive(Debug, PartialEq)]
struct Transport;

impl Classify for Transport {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

/// Takes 3 s: longer than the policies' 1 s `attempt_timeout`.
async fn slow_answer() -> Result<&'static str, Transport> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok("answer")
}

static UNTIMED: Policy = Policy::new()
    .max_attempts(3)
    .attempt_timeout(Duration::from_secs(1));

#[retryable(policy = &UNTIMED)]
async fn untimed_function() -> Result<&'static str, Transport> {
    slow_answer().await
}

/// Every WARN event's fields.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={:?} ", field.name(), value));
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

#[test]
fn an_untimed_call_runs_its_attempts_to_the_end_and_says_so_once_per_call_site() {
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            for _ in 0..2 {
                let started = Instant::now();
                // Compiles without `.timed()`, which `Transport` could not take.
                let answer = UNTIMED.retry(slow_answer).await;
                assert_eq!(answer, Ok("answer"));
                assert_eq!(started.elapsed(), Duration::from_secs(3), "not cut off");
            }
            for _ in 0..2 {
                let started = Instant::now();
                assert_eq!(untimed_function().await, Ok("answer"));
                assert_eq!(started.elapsed(), Duration::from_secs(3), "not cut off");
            }
        })
    });
    let warnings = warnings.0.lock().unwrap().clone();
    assert_eq!(warnings.len(), 2, "one per call site: {warnings:?}");
    let (closure, function) = (&warnings[0], &warnings[1]);
    assert!(
        closure.contains(
            "policy has attempt_timeout but this call cannot return a timeout error; \
             call `.timed()` (needs `E: From<Elapsed>`)"
        ),
        "{closure}"
    );
    assert!(closure.contains("function=\"closure\""), "{closure}");
    assert!(closure.contains("timeout=1s"), "{closure}");
    let at = format!(
        "at=tests/policy_attempt_timeout.rs:{}:",
        line_of("UNTIMED.retry(")
    );
    assert!(closure.contains(&at), "the call site, {at}: {closure}");
    assert!(
        function.contains("function=\"untimed_function\""),
        "{function}"
    );
    assert!(
        function.contains("implement `From<retry_core::Elapsed>`"),
        "{function}"
    );
    let at = format!(
        "at=tests/policy_attempt_timeout.rs:{}:",
        line_of("#[retryable(policy = &UNTIMED)]")
    );
    assert!(function.contains(&at), "the attribute, {at}: {function}");
}

/// The line of this file where `text` first occurs.
fn line_of(text: &str) -> usize {
    let source = include_str!("policy_attempt_timeout.rs");
    source.lines().position(|line| line.contains(text)).unwrap() + 1
}
