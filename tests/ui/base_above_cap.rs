use retry_core::retryable;

#[retryable(base = "1m", cap = "30s")]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
