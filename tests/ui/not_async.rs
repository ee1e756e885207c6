use retry_core::retryable;

#[retryable(max = 3)]
fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
