// `on_retry` takes either form: the three arguments, or the whole context.
use std::time::Duration;

use retry_core::{Classify, Decision, RetryContext, retryable};

#[derive(Debug)]
struct Busy;

impl Classify for Busy {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

fn three(attempt: u32, error: &Busy, wait: Duration) {
    eprintln!("attempt {attempt} failed: {error:?}; next in {wait:?}");
}

fn with_context(context: &RetryContext<'_, Busy>) {
    eprintln!("{} attempt {} [{:016x}]", context.function(), context.attempt(), context.trace_id());
}

#[retryable(max = 3, on_retry = three)]
async fn pay() -> Result<(), Busy> {
    Err(Busy)
}

#[retryable(max = 3, on_retry = with_context)]
async fn refund() -> Result<(), Busy> {
    Err(Busy)
}

fn main() {
    let _ = pay();
    let _ = refund();
}
