use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    /// Seconds as a number: the field must be a `Duration` or `Option<Duration>`.
    #[classify(retry_after = seconds)]
    TooManyRequests { seconds: u64 },
}

fn main() {}
