// `scope::isolated(..)` marks a future as an independent layer: a retrying call inside it
// compiles inside a retry body, and makes all its attempts at run time.
use retry_core::{retryable, scope};

#[retryable(max = 4, base = "1ms")]
async fn refresh_cache(key: u64) -> std::io::Result<u64> {
    Ok(key)
}

#[retryable(max = 4, base = "1ms")]
async fn supervise(keys: Vec<u64>) -> std::io::Result<u64> {
    let mut refreshed = 0;
    for key in keys {
        refreshed += scope::isolated(refresh_cache(key)).await?;
        refreshed += scope::isolated(async { refresh_cache(key).await }).await?;
    }
    Ok(refreshed)
}

fn main() {
    let _ = supervise(vec![1, 2]);
}
