// `#[idempotent]` in both orders with `#[retryable]`, a renamed crate, and user items named
// like generated ones.
#![deny(warnings)]
#![allow(dead_code)]

extern crate retry_core as renamed;

use renamed::idempotency::{IdempotencyError, MemoryStore};
use renamed::{idempotent, retryable};

mod retry_core {}
struct Option;
struct Some;

#[derive(Debug)]
struct DepositError;

impl From<IdempotencyError> for DepositError {
    fn from(_: IdempotencyError) -> Self {
        DepositError
    }
}

impl From<renamed::Elapsed> for DepositError {
    fn from(_: renamed::Elapsed) -> Self {
        DepositError
    }
}

impl renamed::Classify for DepositError {
    fn classify(&self) -> renamed::Decision {
        renamed::Decision::Retry
    }
}

#[idempotent(crate = renamed, key = (sender, msg_no), store = inbox, biz_key = msg_no, fingerprint = amount, scope = sender)]
async fn alone(inbox: &MemoryStore, sender: &str, msg_no: u64, amount: u64) -> Result<u64, DepositError> {
    let __retry_call = amount;
    Ok(__retry_call)
}

#[idempotent(crate = renamed, key = msg_no, store = inbox, lease = "1m")]
#[retryable(crate = renamed, max = 3, base = "1ms", deadline = "20s", attempt_timeout = "5s")]
async fn above(inbox: &MemoryStore, msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

#[retryable(crate = renamed, max = 3, base = "1ms")]
#[idempotent(crate = renamed, key = msg_no, store = inbox, on_err = "release")]
async fn below(inbox: &MemoryStore, msg_no: u64) -> Result<u64, DepositError> {
    Ok(msg_no)
}

fn main() {
    let inbox = MemoryStore::new();
    let _ = (alone(&inbox, "a", 1, 2), above(&inbox, 1), below(&inbox, 1));
}
