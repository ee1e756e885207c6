use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

impl retry_core::Classify for DepositError {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

#[idempotent(key = msg_no, store = inbox)]
#[retryable(max = 5)]
async fn deposit(inbox: &MemoryStore, msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

use retry_core::retryable;

fn main() {}
