use retry_core::idempotency::IdempotencyError;
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError(IdempotencyError);

impl From<IdempotencyError> for DepositError {
    fn from(e: IdempotencyError) -> Self {
        DepositError(e)
    }
}

// A transactional `Err` rolls back: the key is always released, so `on_err` decides nothing.
#[idempotent(key = msg_no, store = inbox, transaction = tx, on_err = "keep")]
async fn deposit(
    inbox: &retry_sqlite::SqliteStore,
    tx: &mut retry_sqlite::SqliteTransaction,
    msg_no: u64,
) -> Result<u64, DepositError> {
    Ok(msg_no)
}

fn main() {}
