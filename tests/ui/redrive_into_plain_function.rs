use retry_core::dlq::{MemoryDeadLetters, Redrive};

#[derive(Debug, serde::Deserialize)]
struct Deposit {
    amount: u64,
}

// Not `#[idempotent]`: a resend could deposit twice.
async fn deposit(req: Deposit) -> Result<u64, std::io::Error> {
    Ok(req.amount)
}

async fn redrive(letters: &MemoryDeadLetters) {
    let _ = Redrive::new(letters, "alice")
        .run(|req: Deposit| deposit(req))
        .await;
}

fn main() {}
