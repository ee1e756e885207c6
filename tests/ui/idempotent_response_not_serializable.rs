use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

struct Receipt;

#[idempotent(key = msg_no, store = inbox)]
async fn deposit(inbox: &MemoryStore, msg_no: u64) -> Result<Receipt, DepositError> {
    Ok(Receipt)
}

fn main() {}
