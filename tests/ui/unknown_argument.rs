use retry_core::retryable;

#[retryable(max = 3, attempt_timout = "1s")]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
