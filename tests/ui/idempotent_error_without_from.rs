use retry_core::idempotency::MemoryStore;
use retry_core::idempotent;

#[derive(Debug)]
struct DepositError;

#[idempotent(key = msg_no, store = inbox)]
async fn deposit(inbox: &MemoryStore, msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

fn main() {}
