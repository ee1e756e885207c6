//! `on_err` as a path deciding per error, and a pinned `namespace`, under `#[retryable]`.
use retry_core::idempotency::{IdempotencyError, MemoryStore, OnErr};
use retry_core::{Classify, Decision, Elapsed, retryable};

#[derive(Debug)]
enum ChargeError {
    Declined,
    Timeout,
    Idempotency(IdempotencyError),
}

impl From<IdempotencyError> for ChargeError {
    fn from(e: IdempotencyError) -> Self {
        ChargeError::Idempotency(e)
    }
}

impl From<Elapsed> for ChargeError {
    fn from(_: Elapsed) -> Self {
        ChargeError::Timeout
    }
}

impl Classify for ChargeError {
    fn classify(&self) -> Decision {
        match self {
            ChargeError::Timeout => Decision::Retry,
            _ => Decision::Stop,
        }
    }
}

fn settle(e: &ChargeError) -> OnErr {
    match e {
        ChargeError::Declined => OnErr::Release,
        _ => OnErr::Keep,
    }
}

#[retryable(max = 3, base = "10ms")]
#[retry_core::idempotent(key = order, store = inbox, on_err = settle, namespace = "charge.v1")]
async fn charge(inbox: &MemoryStore, order: u64) -> Result<u64, ChargeError> {
    if order == 0 {
        return Err(ChargeError::Declined);
    }
    Ok(order)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let inbox = MemoryStore::new();
    assert_eq!(charge(&inbox, 7).await.unwrap(), 7);
    assert!(matches!(charge(&inbox, 0).await, Err(ChargeError::Declined)));
    if let Err(ChargeError::Idempotency(e)) = charge(&inbox, 7).await {
        panic!("{e}");
    }
}
