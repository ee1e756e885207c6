use retry_core::retryable;

#[retryable(base = "1.5s", cap = "30 seconds", deadline = "5")]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
