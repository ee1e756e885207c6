use retry_core::retryable;

#[retryable(max = 3)]
struct Client;

fn main() {}
