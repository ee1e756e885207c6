// A mistake in `#[derive(Classify)]` is reported once, at the mistake: the derive still emits an
// impl, so the `#[retryable]` function below adds no "does not implement `Classify`" error.
use retry_core::{Classify, retryable};

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(retry)]
    Unavailable,
    Rejected { status: u16 },
}

#[retryable(max = 3)]
async fn fetch(id: u64) -> Result<u64, FetchError> {
    Ok(id)
}

fn main() {
    let _ = fetch(1);
}
