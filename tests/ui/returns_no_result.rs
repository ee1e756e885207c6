use retry_core::retryable;

#[retryable(max = 3)]
async fn fetch() -> u8 {
    1
}

fn main() {}
