//! The future a retrying call returns.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

pin_project! {
    /// The future returned by a `#[retryable]` function and by [`Policy::retry`](crate::Policy::retry).
    ///
    /// It resolves to the function's own `Result<T, E>`: the first success, or the last error on
    /// give-up. Awaiting it works as for any future; being a named type lets the compiler see
    /// where one retrying call is awaited inside another.
    ///
    /// ```
    /// use retry_core::{retryable, Retrying};
    ///
    /// #[retryable(max = 2, base = "1ms")]
    /// async fn ping() -> std::io::Result<u8> {
    ///     Ok(1)
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let fut = ping();
    /// let _: &Retrying<_> = &fut;
    /// assert_eq!(fut.await.unwrap(), 1);
    /// # }
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Retrying<F> {
        #[pin]
        inner: F,
        span: tracing::Span,
    }
}

impl<F> Retrying<F> {
    /// Wraps the retry loop of the function `name`.
    pub(crate) fn new(name: &'static str, inner: F) -> Self {
        Retrying {
            inner,
            span: tracing::debug_span!("retry", function = name),
        }
    }
}

impl<F: Future> Future for Retrying<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        this.inner.poll(cx)
    }
}

impl<F> std::fmt::Debug for Retrying<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrying").finish_non_exhaustive()
    }
}
