use retry_core::{Classify, Decision, Policy};

// Like `reqwest::Error`: no way to make it from an `Elapsed`.
#[derive(Debug)]
struct Transport;

impl Classify for Transport {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

async fn send() -> Result<u8, Transport> {
    Err(Transport)
}

async fn fetch(policy: &Policy) -> Result<u8, Transport> {
    // Without `.timed()` this compiles, and the policy's `attempt_timeout` is not applied.
    policy.retry(send).timed().await
}

fn main() {}
