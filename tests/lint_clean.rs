//! The expansion is lint-clean: this file is checked by `cargo clippy --all-targets` in CI under
//! the strictest lints a user is likely to enable.
#![deny(warnings, clippy::pedantic)]

use std::io;

use retry_core::retryable;

/// A documented client.
pub struct Client {
    hits: u32,
}

impl Client {
    /// Fetches once more.
    ///
    /// # Errors
    /// When the upstream is down.
    #[retryable(max = 3, base = "1ms", cap = "10ms", jitter = "equal", deadline = "1s")]
    pub async fn fetch(&mut self, label: String, (a, b): (u8, u8)) -> io::Result<String> {
        self.hits += 1;
        Ok(format!("{label}{a}{b}{}", self.hits))
    }
}

#[retryable(max = 2, base = "1ms", attempt_timeout = "1s")]
async fn generic<T: AsRef<str> + Clone + Send>(value: T) -> io::Result<usize> {
    Ok(value.as_ref().len())
}

static TIMED: retry_core::Policy = retry_core::Policy::new()
    .max_attempts(2)
    .attempt_timeout(std::time::Duration::from_secs(1));

// `policy = expr`: the policy's `attempt_timeout` is applied where `E: From<Elapsed>`, and the
// expansion compiles as cleanly where it is not.
#[retryable(policy = &TIMED)]
async fn timed_by_policy(n: u8) -> io::Result<u8> {
    Ok(n)
}

#[retryable(policy = &TIMED)]
async fn untimed_by_policy<E: retry_core::Classify>(n: u8) -> Result<u8, E> {
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn expansions_compile_without_warnings() {
    let mut client = Client { hits: 0 };
    assert_eq!(client.fetch("x".to_owned(), (1, 2)).await.unwrap(), "x121");
    assert_eq!(generic("abc").await.unwrap(), 3);
    assert_eq!(timed_by_policy(4).await.unwrap(), 4);
    assert_eq!(untimed_by_policy::<io::Error>(5).await.unwrap(), 5);
}

/// An error for the idempotent functions below.
#[derive(Debug)]
pub struct Rejected;

impl From<retry_core::IdempotencyError> for Rejected {
    fn from(_: retry_core::IdempotencyError) -> Self {
        Rejected
    }
}

impl From<retry_core::Elapsed> for Rejected {
    fn from(_: retry_core::Elapsed) -> Self {
        Rejected
    }
}

impl retry_core::Classify for Rejected {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

#[retry_core::idempotent(key = (sender, msg_no), store = inbox, fingerprint = amount)]
async fn deposit(
    inbox: &retry_core::idempotency::MemoryStore,
    sender: &str,
    msg_no: u64,
    amount: u64,
) -> Result<u64, Rejected> {
    Ok(amount)
}

#[retry_core::idempotent(key = msg_no, store = inbox, lease = "1m")]
#[retryable(max = 2, base = "1ms", deadline = "10s", attempt_timeout = "5s")]
async fn deposit_retrying(
    inbox: &retry_core::idempotency::MemoryStore,
    msg_no: u64,
) -> Result<u64, Rejected> {
    Ok(msg_no)
}

#[tokio::test]
async fn idempotent_expansions_compile_without_warnings() {
    let inbox = retry_core::idempotency::MemoryStore::new();
    assert_eq!(deposit(&inbox, "a", 1, 5).await.unwrap(), 5);
    assert_eq!(deposit_retrying(&inbox, 2).await.unwrap(), 2);
}
