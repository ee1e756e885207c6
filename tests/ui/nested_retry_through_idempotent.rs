use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

use retry_core::retryable;

impl retry_core::Classify for DepositError {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

impl From<retry_core::Elapsed> for DepositError {
    fn from(_: retry_core::Elapsed) -> Self {
        DepositError(IdempotencyError::InProgress)
    }
}

#[idempotent(key = msg_no, store = inbox, lease = "1m")]
#[retryable(max = 3, deadline = "20s", attempt_timeout = "5s")]
async fn deposit(inbox: &MemoryStore, msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

#[retryable(max = 3)]
async fn settle(inbox: &MemoryStore) -> Result<u64, DepositError> {
    deposit(inbox, 1).await
}

fn main() {}
