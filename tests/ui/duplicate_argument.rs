use retry_core::retryable;

#[retryable(max = 3, base = "1s", max = 5)]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
