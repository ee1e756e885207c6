use retry_core::retryable;

#[retryable(max = 3)]
#[retryable(max = 4)]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
