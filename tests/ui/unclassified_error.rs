use retry_core::retryable;

#[derive(Debug)]
struct QuoteError;

#[retryable(max = 3)]
async fn fetch() -> Result<u8, QuoteError> {
    Err(QuoteError)
}

fn main() {}
