// Work handed to another task is an independent layer: a retrying call awaited inside
// `tokio::spawn(..)` (or `spawn_blocking`, `JoinSet::spawn`, `std::thread::spawn`...) compiles
// inside a retry body, and makes its own attempts at run time.
use retry_core::retryable;

#[retryable(max = 4, base = "1ms")]
async fn audit(id: u64) -> std::io::Result<u64> {
    Ok(id)
}

#[retryable(max = 4, base = "1ms")]
async fn charge(id: u64) -> std::io::Result<u64> {
    tokio::spawn(async move {
        let _ = audit(id).await;
    });
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(async move { audit(id).await });
    let _ = tokio::task::spawn(async move { audit(id).await }).await?;
    Ok(id)
}

fn main() {
    let _ = charge(1);
}
