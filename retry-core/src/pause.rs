//! The wait between two attempts.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Waits between attempts; a zero wait arms no timer.
#[inline]
pub fn pause(wait: Duration) -> Pause {
    Pause((!wait.is_zero()).then(|| Box::pin(tokio::time::sleep(wait))))
}

/// See [`pause`]: the timer is boxed so it takes 8 bytes of the retrying future, not a
/// `Sleep`'s hundred-odd, and is made only for a wait that is not zero.
pub struct Pause(Option<Pin<Box<tokio::time::Sleep>>>);

impl Future for Pause {
    type Output = ();

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            None => Poll::Ready(()),
            Some(sleep) => sleep.as_mut().poll(cx),
        }
    }
}
