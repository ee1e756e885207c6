//! What a running attempt has sent that matters when `attempt_timeout` cuts it off.
//!
//! A timeout drops the attempt's future mid-flight, so the error it becomes ([`Elapsed`]) knows
//! nothing of what the attempt was doing. If a POST without `Idempotency-Key` was on the wire,
//! sending the attempt again may apply it twice: the double charge `send_checked` refuses for
//! its own timeouts. So a timed [`Bounded`] attempt polls it inside a [`Watched`] that keeps a
//! [`Mark`], and `send_checked` (the only place that knows the method and the headers) notes
//! each such request on the marks of every attempt being polled on this thread. The mark lives
//! in the watched future, not in the thread: a task that moves between threads carries it.
//!
//! What is not seen: a request sent from a task spawned inside the attempt (it is polled by the
//! runtime, not inside the attempt), or one sent by other means than `send_checked`.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::classify::Elapsed;

thread_local! {
    /// The marks of the attempts being polled on this thread, innermost last. More than one
    /// only when retries nest (a collapsed or isolated retry inside another's attempt).
    static POLLING: RefCell<Vec<Mark>> = const { RefCell::new(Vec::new()) };
}

/// Requests of the attempt that may take effect twice if the attempt is sent again.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mark {
    /// Sent and not known to have failed before reaching the server.
    unsafe_sends: u32,
    /// The method of the latest one, for the reason a person reads.
    method: Option<&'static str>,
}

pin_project! {
    /// An attempt whose unsafe requests are noted while it is polled.
    pub(crate) struct Watched<F> {
        #[pin]
        attempt: F,
        mark: Mark,
    }
}

impl<F> Watched<F> {
    pub(crate) fn new(attempt: F) -> Self {
        Watched {
            attempt,
            mark: Mark::default(),
        }
    }

    /// The error for this attempt cut off after `limit`.
    pub(crate) fn elapsed(&self, limit: Duration) -> Elapsed {
        match self.mark {
            Mark {
                unsafe_sends: 1..,
                method,
            } => Elapsed::cut_off(limit, method.unwrap_or("request")),
            _ => Elapsed::new(limit),
        }
    }
}

/// Puts the attempt's mark back from the stack, also when the attempt panics.
struct Restore<'a>(&'a mut Mark);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        // `try_with`: during thread teardown the stack may be gone; the mark then stays as it was.
        let _ = POLLING.try_with(|stack| {
            if let Some(mark) = stack.borrow_mut().pop() {
                *self.0 = mark;
            }
        });
    }
}

impl<F: Future> Future for Watched<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let pushed = POLLING
            .try_with(|stack| stack.borrow_mut().push(*this.mark))
            .is_ok();
        let _restore = pushed.then(|| Restore(this.mark));
        this.attempt.poll(cx)
    }
}

/// A non-idempotent request without `Idempotency-Key` is being sent by the attempts polled now.
#[cfg_attr(
    not(any(feature = "reqwest", feature = "tower", feature = "reqwest-middleware")),
    allow(dead_code)
)]
pub(crate) fn note_unsafe_send(method: &'static str) {
    let _ = POLLING.try_with(|stack| {
        for mark in stack.borrow_mut().iter_mut() {
            mark.unsafe_sends = mark.unsafe_sends.saturating_add(1);
            mark.method = Some(method);
        }
    });
}

/// The request noted by [`note_unsafe_send`] failed before it reached the server (it never
/// connected), so sending the attempt again cannot apply it twice.
#[cfg_attr(
    not(any(feature = "reqwest", feature = "tower", feature = "reqwest-middleware")),
    allow(dead_code)
)]
pub(crate) fn note_not_sent() {
    let _ = POLLING.try_with(|stack| {
        for mark in stack.borrow_mut().iter_mut() {
            mark.unsafe_sends = mark.unsafe_sends.saturating_sub(1);
        }
    });
}

/// How a retrying call reports an attempt that its policy's `attempt_timeout` would cut off.
pub enum OnTimeout<E> {
    /// As the error `E::from(Elapsed)`: the attempt is cut off.
    Fail(fn(Elapsed) -> E),
    /// It cannot (`E` has no `From<Elapsed>`), so the attempt runs to its end; `fix`, what to
    /// write instead, is said once per call site.
    RunOn {
        /// What to write so that the call applies the timeout.
        fix: &'static str,
    },
}

// Not derived: that would ask `E: Clone`.
impl<E> Clone for OnTimeout<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for OnTimeout<E> {}

impl<E> std::fmt::Debug for OnTimeout<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnTimeout::Fail(_) => f.write_str("Fail"),
            OnTimeout::RunOn { fix } => f.debug_struct("RunOn").field("fix", fix).finish(),
        }
    }
}

pin_project! {
    /// One attempt, cut off after its limit when it has one: it then fails with the error made
    /// of an [`Elapsed`] that says whether it cut off a request that must not be sent twice.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Bounded<F, E> {
        #[pin]
        run: Run<F, E>,
    }
}

pin_project! {
    #[project = RunProj]
    enum Run<F, E> {
        Unbounded { #[pin] attempt: F },
        Timed {
            #[pin]
            attempt: Watched<F>,
            // Boxed, as the wait between attempts is: an unbounded attempt carries no timer.
            sleep: Pin<Box<tokio::time::Sleep>>,
            limit: Duration,
            elapsed: fn(Elapsed) -> E,
        },
    }
}

impl<F, E> Bounded<F, E> {
    /// `attempt` as it is.
    pub(crate) fn unbounded(attempt: F) -> Self {
        Bounded {
            run: Run::Unbounded { attempt },
        }
    }

    /// `attempt`, failing with `elapsed(Elapsed)` once it has run for `limit`.
    pub(crate) fn timed(limit: Duration, attempt: F, elapsed: fn(Elapsed) -> E) -> Self {
        Bounded {
            run: Run::Timed {
                attempt: Watched::new(attempt),
                sleep: Box::pin(tokio::time::sleep(limit)),
                limit,
                elapsed,
            },
        }
    }
}

impl<F, T, E> Future for Bounded<F, E>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    // Inlined into the loop that polls it: an unbounded attempt is then polled directly.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        match self.project().run.project() {
            RunProj::Unbounded { attempt } => attempt.poll(cx),
            RunProj::Timed {
                attempt,
                sleep,
                limit,
                elapsed,
            } => poll_timed(attempt, sleep, *limit, *elapsed, cx),
        }
    }
}

/// A timed attempt's poll: out of line, so that the unbounded one stays small enough to inline.
#[inline(never)]
fn poll_timed<F, T, E>(
    mut attempt: Pin<&mut Watched<F>>,
    sleep: &mut Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
    elapsed: fn(Elapsed) -> E,
    cx: &mut Context<'_>,
) -> Poll<Result<T, E>>
where
    F: Future<Output = Result<T, E>>,
{
    // The attempt first: one that is ready when its time is up still counts.
    if let Poll::Ready(outcome) = attempt.as_mut().poll(cx) {
        return Poll::Ready(outcome);
    }
    std::task::ready!(sleep.as_mut().poll(cx));
    Poll::Ready(Err(elapsed(attempt.elapsed(limit))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Classify, Decision};

    fn with_timeout<F>(limit: Duration, attempt: F) -> Bounded<F, Elapsed>
    where
        F: Future<Output = Result<(), Elapsed>>,
    {
        Bounded::timed(limit, attempt, std::convert::identity)
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_cut_off_after_an_unsafe_send_must_not_be_resent() {
        let limit = Duration::from_secs(1);
        let cut: Result<(), Elapsed> = with_timeout(limit, async {
            note_unsafe_send("POST");
            std::future::pending().await
        })
        .await;
        let elapsed = cut.unwrap_err();
        assert_eq!(elapsed.unsafe_request(), Some("POST"));
        assert_eq!(elapsed.classify(), Decision::Stop);

        let plain: Result<(), Elapsed> = with_timeout(limit, std::future::pending()).await;
        assert_eq!(plain.unwrap_err().classify(), Decision::Retry);

        let never_sent: Result<(), Elapsed> = with_timeout(limit, async {
            note_unsafe_send("POST");
            note_not_sent();
            std::future::pending().await
        })
        .await;
        assert_eq!(never_sent.unwrap_err().classify(), Decision::Retry);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outer_attempt_sees_the_sends_of_an_inner_one() {
        let limit = Duration::from_secs(2);
        let outer: Result<(), Elapsed> = with_timeout(limit, async {
            let inner: Result<(), Elapsed> = with_timeout(Duration::from_secs(1), async {
                note_unsafe_send("PATCH");
                std::future::pending().await
            })
            .await;
            assert_eq!(inner.unwrap_err().unsafe_request(), Some("PATCH"));
            std::future::pending().await
        })
        .await;
        assert_eq!(outer.unwrap_err().unsafe_request(), Some("PATCH"));
        // Nothing is left behind on the thread.
        POLLING.with_borrow(|stack| assert!(stack.is_empty()));
    }
}
