use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::idempotent;

// A kept failure is stored as the error's `Debug` text, for the resends and for a person.
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

#[idempotent(key = msg_no, store = inbox)]
async fn deposit(inbox: &MemoryStore, msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

fn main() {}
