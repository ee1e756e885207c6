use retry_core::retryable;

#[retryable(max = 4)]
async fn fetch_quote(id: u64) -> std::io::Result<u64> {
    Ok(id)
}

#[retryable(max = 4)]
async fn fetch_portfolio(ids: Vec<u64>) -> std::io::Result<u64> {
    let mut total = 0;
    for id in ids {
        total += fetch_quote(id).await?;
    }
    Ok(total)
}

fn main() {}
