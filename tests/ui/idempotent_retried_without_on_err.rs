use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

impl From<retry_core::Elapsed> for DepositError {
    fn from(_: retry_core::Elapsed) -> Self {
        DepositError(IdempotencyError::InProgress)
    }
}

impl retry_core::Classify for DepositError {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

// Every attempt resends the same key: whether a failed attempt keeps its failure decides
// whether the retries can run at all, so the choice must be written.
#[retry_core::retryable(max = 3)]
#[idempotent(key = msg_no, store = inbox)]
async fn deposit(inbox: &MemoryStore, msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

fn main() {}
