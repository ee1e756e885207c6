use retry_core::retryable;

#[retryable(max = 3)]
async fn fetch() {}

fn main() {}
