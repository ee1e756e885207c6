use retry_core::retryable;

struct Payload(Vec<u8>);

#[retryable(max = 3)]
async fn send(payload: Payload) -> std::io::Result<usize> {
    Ok(payload.0.len())
}

fn main() {}
