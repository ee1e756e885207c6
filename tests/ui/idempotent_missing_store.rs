use retry_core::idempotency::IdempotencyError;
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

#[idempotent(key = msg_no)]
async fn deposit(msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

fn main() {}
