use retry_core::retryable;

#[retryable(jitter = "fulll")]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
