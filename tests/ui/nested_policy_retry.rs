use retry_core::{Policy, retryable};

#[retryable(max = 4)]
async fn fetch_quote(policy: &Policy, id: u64) -> std::io::Result<u64> {
    policy.retry(|| async move { Ok(id) }).await
}

fn main() {}
