use retry_core::retryable;

#[retryable(max = 5000)]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
