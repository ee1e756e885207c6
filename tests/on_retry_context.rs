//! `on_retry` with a `RetryContext`: with many payments retrying at once, every hook call says
//! which call it belongs to (function, module, trace id), and the old three-argument form still
//! works.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use retry_core::{Classify, Decision, Policy, RetryContext, retryable};

#[derive(Debug)]
struct Busy;

impl Classify for Busy {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

/// What one hook call saw: function, module, trace id, attempt, wait.
type Seen = (&'static str, &'static str, u64, u32, Duration);

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

fn record(context: &RetryContext<'_, Busy>) {
    SEEN.lock().unwrap().push((
        context.function(),
        context.module(),
        context.trace_id(),
        context.attempt(),
        context.wait(),
    ));
}

/// Fails twice, then pays.
#[retryable(max = 3, base = "10ms", cap = "10ms", jitter = "none", on_retry = record)]
async fn pay(failures: &Mutex<u32>) -> Result<(), Busy> {
    let mut failures = failures.lock().unwrap();
    if *failures < 2 {
        *failures += 1;
        Err(Busy)
    } else {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn each_retry_of_twenty_concurrent_calls_names_its_call() {
    let handles: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(async {
                let failures = Mutex::new(0);
                pay(&failures).await
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap().unwrap();
    }
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen.len(), 40, "20 calls, 2 retries each");
    let mut by_trace: HashMap<u64, Vec<u32>> = HashMap::new();
    for (function, module, trace_id, attempt, wait) in seen {
        assert_eq!(function, "pay");
        assert_eq!(module, module_path!());
        assert_eq!(wait, Duration::from_millis(10));
        by_trace.entry(trace_id).or_default().push(attempt);
    }
    assert_eq!(by_trace.len(), 20, "one trace id per logical call");
    for attempts in by_trace.values() {
        assert_eq!(attempts, &[1, 2], "each call's own attempts, in order");
    }
}

#[tokio::test(start_paused = true)]
async fn the_closure_api_gives_the_same_context_and_keeps_the_three_argument_form() {
    let policy = Policy::new()
        .max_attempts(3)
        .base(Duration::from_millis(10));
    let mut contexts = Vec::new();
    let _ = policy
        .retry(|| async { Err::<(), Busy>(Busy) })
        .name("refund")
        .on_retry_context(|ctx| contexts.push((ctx.function(), ctx.attempt(), ctx.trace_id())))
        .await;
    assert_eq!(contexts.len(), 2);
    assert_eq!(
        (contexts[0].0, contexts[0].1, contexts[1].1),
        ("refund", 1, 2)
    );
    assert_eq!(contexts[0].2, contexts[1].2, "one call, one trace id");

    let mut three = Vec::new();
    let _ = policy
        .retry(|| async { Err::<(), Busy>(Busy) })
        .on_retry(|attempt, _: &Busy, wait| three.push((attempt, wait)))
        .await;
    assert_eq!(three.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2]);
}
