use retry_core::dlq::MemoryDeadLetters;
use retry_core::retryable;

#[retryable(max = 3, dlq(sink = letters, id = id, original = id))]
async fn submit(letters: &MemoryDeadLetters, id: &str) -> std::io::Result<()> {
    Err(std::io::ErrorKind::ConnectionReset.into())
}

fn main() {}
