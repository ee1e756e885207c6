use retry_core::{retryable, Policy};

static POLICY: Policy = Policy::new().max_attempts(4);

#[retryable(policy = &POLICY, max = 3, cap = "10s")]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {}
