use std::time::Duration;

use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(retry_after = wiat)]
    TooManyRequests { wait: Duration },
    #[classify(retry_after = 1)]
    Unavailable(Option<Duration>),
    #[classify(retry_after = wait)]
    Busy(Duration),
}

fn main() {}
