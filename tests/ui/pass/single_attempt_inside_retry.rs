// Deliberate exceptions compile: `.single_attempt()` inside a retry body, a retrying call
// awaited outside any retry body, ordinary futures awaited inside one.
use retry_core::retryable;

#[retryable(max = 4, base = "1ms")]
async fn fetch_quote(id: u64) -> std::io::Result<u64> {
    Ok(id)
}

#[retryable(max = 4, base = "1ms")]
async fn fetch_portfolio(ids: Vec<u64>) -> std::io::Result<u64> {
    let mut total = 0;
    for id in ids {
        total += fetch_quote(id).single_attempt().await?;
        tokio::task::yield_now().await;
    }
    let borrowed = String::from("temporaries live until the end of the statement");
    total += std::future::ready(borrowed.as_str().len() as u64).await;
    Ok(total)
}

async fn caller() -> std::io::Result<u64> {
    fetch_quote(1).await
}

fn main() {
    let _ = (fetch_portfolio(vec![1, 2]), caller());
}
