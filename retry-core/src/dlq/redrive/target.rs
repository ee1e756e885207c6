//! Step 3, the compiler's half of the safety check: a redrive target must be idempotent.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::idempotency::Idempotent;

/// The future a redrive target returns: the future of an `#[idempotent]` function
/// ([`Idempotent`]), or one declared idempotent with [`assume_idempotent`].
///
/// ```compile_fail
/// use retry_core::dlq::{MemoryDeadLetters, Redrive};
///
/// async fn deposit(amount: u64) -> Result<u64, std::io::Error> { Ok(amount) }
///
/// # async fn run() {
/// let letters = MemoryDeadLetters::new();
/// // error: redrive target returns `impl Future<...>`, not the future of an `#[idempotent]` function
/// Redrive::new(&letters, "alice").run(|amount: u64| deposit(amount)).await;
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "redrive target returns `{Self}`, not the future of an `#[idempotent]` function",
    label = "resending dead letters here could repeat effects that already happened",
    note = "redrive into a function marked `#[idempotent(key = ..., store = ...)]`: a letter whose effect already happened is then answered from the store",
    note = "if the target is idempotent by other means (a receiver that honours `Idempotency-Key`), say so: `|req| retry_core::dlq::assume_idempotent(send(req))`"
)]
pub trait RedriveFuture: Future {
    /// The idempotency key the call will claim, when it is known before the call runs.
    fn idempotency_key(&self) -> Option<&str>;
}

impl<F: Future, K> RedriveFuture for Idempotent<F, K> {
    fn idempotency_key(&self) -> Option<&str> {
        Some(Idempotent::idempotency_key(self))
    }
}

pin_project! {
    /// A future its author declares idempotent for a redrive; see [`assume_idempotent`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    #[derive(Debug)]
    pub struct AssumeIdempotent<F> {
        #[pin]
        inner: F,
        key: Option<String>,
    }
}

/// The escape hatch of the redrive safety check: declares that resending to `future`'s
/// receiver cannot repeat an effect, although it is not an `#[idempotent]` function (say, an HTTP
/// receiver that deduplicates on `Idempotency-Key`). Greppable on purpose.
///
/// ```
/// use retry_core::dlq::{assume_idempotent, RedriveFuture};
///
/// let send = assume_idempotent(async { Ok::<_, std::io::Error>(()) }).with_key("M-1");
/// assert_eq!(send.idempotency_key(), Some("M-1"));
/// ```
pub fn assume_idempotent<F: Future>(future: F) -> AssumeIdempotent<F> {
    AssumeIdempotent {
        inner: future,
        key: None,
    }
}

impl<F> AssumeIdempotent<F> {
    /// The idempotency key the receiver will see, checked against the letter's like an
    /// `#[idempotent]` function's.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<F: Future> Future for AssumeIdempotent<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<F: Future> RedriveFuture for AssumeIdempotent<F> {
    fn idempotency_key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}
