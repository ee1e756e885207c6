// `on_retry` names a function that takes neither `(u32, &E, Duration)` nor `&RetryContext<E>`.
use retry_core::{Classify, Decision, retryable};

#[derive(Debug)]
struct Busy;

impl Classify for Busy {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

fn log_retry(attempt: u32, error: &Busy) {
    eprintln!("attempt {attempt} failed: {error:?}");
}

#[retryable(max = 3, on_retry = log_retry)]
async fn pay() -> Result<(), Busy> {
    Err(Busy)
}

fn main() {
    let _ = pay();
}
