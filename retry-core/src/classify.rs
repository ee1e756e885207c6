//! Which errors may be retried, and when.

use std::io;
use std::time::Duration;

/// What to do after an attempt failed with a given error.
///
/// ```
/// use retry_core::{Classify, Decision};
///
/// enum PayError { Busy, CardDeclined }
///
/// impl Classify for PayError {
///     fn classify(&self) -> Decision {
///         match self {
///             PayError::Busy => Decision::Retry,
///             PayError::CardDeclined => Decision::Stop,
///         }
///     }
/// }
/// assert_eq!(PayError::CardDeclined.classify(), Decision::Stop);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Transient: try again after the policy's backoff.
    Retry,
    /// The other side asked us to come back no sooner than this (`Retry-After`). The wait is
    /// `max(this, backoff)`; it is never shortened by jitter nor bounded by `cap`.
    RetryAfter(Duration),
    /// Can never succeed as sent: give up now.
    Stop,
}

/// Classifies an error as retryable or not.
///
/// Every error a `#[retryable]` function returns must say whether it may be retried, so nothing
/// is ever retried by accident. Implement it by hand, derive it, or pass `retry_if = path` to the
/// attribute instead.
///
/// ```
/// use retry_core::{Classify, Decision};
/// use std::io;
///
/// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert_eq!(refused.classify(), Decision::Retry);
/// let missing = io::Error::from(io::ErrorKind::NotFound);
/// assert_eq!(missing.classify(), Decision::Stop);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say whether it may be retried",
    label = "`{Self}` does not implement `retry_core::Classify`",
    note = "implement `retry_core::Classify` for `{Self}`, or pass `retry_if = path` to `#[retryable]` with a `fn(&{Self}) -> retry_core::Decision`"
)]
pub trait Classify {
    /// Decides whether the failed call may be tried again.
    fn classify(&self) -> Decision;

    /// Why, in a few words a person reads in a give-up event or a dead letter: "404 Not Found",
    /// "POST without Idempotency-Key after timeout". `None` by default: `#[retryable]` then
    /// writes the error's `Display` (else its `Debug`) in its events and letters; the closure
    /// API ([`Policy::retry`](crate::Policy::retry)) writes only what this returns.
    fn reason(&self) -> Option<String> {
        None
    }
}

impl<C: Classify + ?Sized> Classify for &C {
    fn classify(&self) -> Decision {
        (**self).classify()
    }
    fn reason(&self) -> Option<String> {
        (**self).reason()
    }
}

impl<C: Classify + ?Sized> Classify for Box<C> {
    fn classify(&self) -> Decision {
        (**self).classify()
    }
    fn reason(&self) -> Option<String> {
        (**self).reason()
    }
}

/// Decides about the errors of one retrying call: [`ByClassify`] (the error's own
/// [`Classify`]), or any `FnMut(&E) -> Decision` (what `retry_if` takes).
pub trait Classifier<E> {
    /// See [`Classify::classify`].
    fn decide(&mut self, error: &E) -> Decision;

    /// See [`Classify::reason`]; `None` unless the classifier knows better.
    fn reason(&mut self, _error: &E) -> Option<String> {
        None
    }
}

/// Classifies errors with their [`Classify`] impl: the default classifier.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByClassify;

impl<E: Classify> Classifier<E> for ByClassify {
    fn decide(&mut self, error: &E) -> Decision {
        error.classify()
    }
    fn reason(&mut self, error: &E) -> Option<String> {
        error.reason()
    }
}

impl<E, F: FnMut(&E) -> Decision> Classifier<E> for F {
    fn decide(&mut self, error: &E) -> Decision {
        self(error)
    }
}

/// Failures of the connection or of the network under it are transient (refused, reset,
/// aborted, timed out, broken pipe, interrupted, host or network unreachable, network down:
/// a route or a link comes back); everything else (not found, permission denied, invalid data,
/// ...) will fail the same way next time. An `io::Error` made from an [`Elapsed`] is classified
/// as that `Elapsed` (which knows whether an unsafe request was cut off).
///
/// ```
/// use retry_core::{Classify, Decision};
/// use std::io;
///
/// let unreachable = io::Error::from(io::ErrorKind::HostUnreachable);
/// assert_eq!(unreachable.classify(), Decision::Retry);
/// ```
impl Classify for io::Error {
    fn classify(&self) -> Decision {
        use io::ErrorKind::*;
        if let Some(elapsed) = self.get_ref().and_then(|e| e.downcast_ref::<Elapsed>()) {
            return elapsed.classify();
        }
        match self.kind() {
            ConnectionRefused | ConnectionReset | ConnectionAborted | TimedOut | BrokenPipe
            | Interrupted | HostUnreachable | NetworkUnreachable | NetworkDown => Decision::Retry,
            _ => Decision::Stop,
        }
    }

    fn reason(&self) -> Option<String> {
        if let Some(elapsed) = self.get_ref().and_then(|e| e.downcast_ref::<Elapsed>()) {
            return elapsed.reason();
        }
        Some(self.to_string())
    }
}

/// An attempt ran longer than its `attempt_timeout`.
///
/// Functions with `attempt_timeout` need `E: From<Elapsed>`. A timed-out attempt is retryable,
/// unless the timeout cut off a request that may take effect twice: a POST or PATCH sent with
/// [`send_checked`] without `Idempotency-Key`
/// may have reached the server, so the attempt is not sent again ([`Elapsed::unsafe_request`]
/// names its method and the classification is [`Decision::Stop`]), as `send_checked` decides
/// for reqwest's own timeouts. Classify the error through its `Elapsed` (a
/// `#[classify(delegate)]` variant, `io::Error`, or [`HttpError`])
/// to keep that rule.
///
/// ```
/// use retry_core::{Classify, Decision, Elapsed};
/// use std::time::Duration;
///
/// let e = Elapsed::new(Duration::from_secs(2));
/// assert_eq!(e.to_string(), "attempt timed out after 2s");
/// assert_eq!(e.classify(), Decision::Retry);
/// assert_eq!(e.unsafe_request(), None);
/// ```
#[cfg_attr(
    not(feature = "reqwest"),
    doc = "[`send_checked`]: https://docs.rs/retry-core/latest/retry_core/reqwest/trait.RequestBuilderExt.html#tymethod.send_checked"
)]
#[cfg_attr(
    not(feature = "reqwest"),
    doc = "[`HttpError`]: https://docs.rs/retry-core/latest/retry_core/reqwest/struct.HttpError.html"
)]
#[cfg_attr(
    feature = "reqwest",
    doc = "[`send_checked`]: crate::reqwest::RequestBuilderExt::send_checked"
)]
#[cfg_attr(feature = "reqwest", doc = "[`HttpError`]: crate::reqwest::HttpError")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed {
    limit: Duration,
    unsafe_request: Option<&'static str>,
}

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "attempt timed out after {:?}", self.limit)
    }
}

impl std::error::Error for Elapsed {}

impl Elapsed {
    /// An elapsed attempt that was allowed `limit`, with nothing unsafe to resend in flight.
    pub const fn new(limit: Duration) -> Self {
        Elapsed {
            limit,
            unsafe_request: None,
        }
    }

    /// An elapsed attempt that had sent a `method` request without `Idempotency-Key`.
    pub(crate) const fn cut_off(limit: Duration, method: &'static str) -> Self {
        Elapsed {
            limit,
            unsafe_request: Some(method),
        }
    }

    /// The bound the attempt exceeded.
    pub const fn limit(&self) -> Duration {
        self.limit
    }

    /// The method of a non-idempotent request without `Idempotency-Key` that the attempt had
    /// sent when it was cut off ("POST"): it may have taken effect, so the attempt must not be
    /// sent again. `None` when nothing of the kind was in flight.
    pub const fn unsafe_request(&self) -> Option<&'static str> {
        self.unsafe_request
    }
}

impl Classify for Elapsed {
    fn classify(&self) -> Decision {
        match self.unsafe_request {
            Some(_) => Decision::Stop,
            None => Decision::Retry,
        }
    }

    fn reason(&self) -> Option<String> {
        Some(match self.unsafe_request {
            Some(method) => format!(
                "{method} without Idempotency-Key cut off by attempt_timeout ({:?})",
                self.limit
            ),
            None => self.to_string(),
        })
    }
}

impl From<Elapsed> for io::Error {
    fn from(e: Elapsed) -> Self {
        io::Error::new(io::ErrorKind::TimedOut, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_of_the_connection_are_retried_and_others_are_not() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::TimedOut,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::Interrupted,
            io::ErrorKind::HostUnreachable,
            io::ErrorKind::NetworkUnreachable,
            io::ErrorKind::NetworkDown,
        ] {
            assert_eq!(
                io::Error::from(kind).classify(),
                Decision::Retry,
                "{kind:?}"
            );
        }
        for kind in [
            io::ErrorKind::NotFound,
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::InvalidData,
            io::ErrorKind::InvalidInput,
            io::ErrorKind::AddrInUse,
        ] {
            assert_eq!(io::Error::from(kind).classify(), Decision::Stop, "{kind:?}");
        }
    }

    #[test]
    fn an_elapsed_attempt_becomes_a_timed_out_io_error() {
        let e: io::Error = Elapsed::new(Duration::from_millis(5)).into();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(e.classify(), Decision::Retry);
    }

    #[test]
    fn an_io_error_made_from_an_unsafe_cut_off_is_not_retried() {
        let cut = Elapsed::cut_off(Duration::from_secs(1), "POST");
        assert_eq!(cut.classify(), Decision::Stop);
        let e: io::Error = cut.into();
        assert_eq!(e.classify(), Decision::Stop);
        assert_eq!(
            e.reason().as_deref(),
            Some("POST without Idempotency-Key cut off by attempt_timeout (1s)")
        );
    }
}
