use retry_core::retryable;

#[retryable(deadline = "0s", attempt_timeout = "0ms")]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
