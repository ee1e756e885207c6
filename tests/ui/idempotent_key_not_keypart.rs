use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

struct MessageId(u64);

#[idempotent(key = id, store = inbox)]
async fn deposit(inbox: &MemoryStore, id: MessageId) -> Result<u64, DepositError> {
    Ok(id.0)
}

fn main() {}
