use retry_core::{retryable, Classify, Decision};

#[derive(Debug)]
enum QuoteError {
    Busy,
}

impl Classify for QuoteError {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

#[retryable(max = 3, attempt_timeout = "2s")]
async fn fetch() -> Result<u8, QuoteError> {
    Err(QuoteError::Busy)
}

fn main() {}
