use retry_core::retryable;

#[retryable(max = 4)]
async fn fetch_quote(id: u64) -> std::io::Result<u64> {
    Ok(id)
}

#[retryable(max = 4)]
async fn fetch_pair() -> std::io::Result<u64> {
    let (a, b) = tokio::join!(async { fetch_quote(1).await }, async { Ok::<_, std::io::Error>(2) });
    Ok(a? + b?)
}

fn main() {}
