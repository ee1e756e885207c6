//! The errors of an HTTP client service, read from their source chain: what they mean for a
//! retry, and whether the request may have reached the server.

use std::error::Error;
use std::io;

use crate::classify::{Classify, Decision, Elapsed};
use crate::http::ConnectFailure;

/// What hyper-util's legacy `Client` says when it could not connect (`"client error (Connect)"`,
/// its `ErrorKind` in `Debug`), and the start of what it says when the request itself is wrong
/// (`UserUnsupportedRequestMethod`, `UserUnsupportedVersion`, `UserAbsoluteUriRequired`).
const HYPER_UTIL_CONNECT: &str = "client error (Connect)";
const HYPER_UTIL_USER: &str = "client error (User";

/// The message hyper-util's connector gives a failed name resolution (see [`ConnectFailure`]).
const DNS_ERROR: &str = "dns error";

/// `error`, then its sources.
fn chain<'a>(error: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&e| e.source())
}

/// The default classification of a client's error by [`RetryLayer`](super::RetryLayer),
/// read from the error and its sources:
///
/// - a host name that does not exist or a TLS certificate that fails verification
///   ([`ConnectFailure`]): `Stop`;
/// - a `reqwest::Error` (feature `reqwest`) or an [`Elapsed`]: their own [`Classify`];
/// - a request the client refuses to send (hyper-util's `client error (User..)`: a method,
///   version or URI it cannot use): `Stop`;
/// - any other failure to connect (refused, a resolver that did not answer): `Retry`;
/// - otherwise the first [`io::Error`] underneath decides (reset, aborted, broken pipe, timed
///   out → `Retry`; see its `Classify`), and an error with none (a connection closed before
///   the answer, an HTTP/2 stream reset) is a transport failure: `Retry`.
///
/// A retry of a request that may have reached the server is then refused for a POST or PATCH
/// without `Idempotency-Key`, whatever this says (the layer decides that, not this function).
///
/// ```
/// use retry_core::Decision;
/// use retry_core::tower::classify_error;
/// use std::io;
///
/// let reset = io::Error::from(io::ErrorKind::ConnectionReset);
/// assert_eq!(classify_error(&reset), Decision::Retry);
/// let denied = io::Error::from(io::ErrorKind::PermissionDenied);
/// assert_eq!(classify_error(&denied), Decision::Stop);
/// ```
pub fn classify_error(error: &(dyn Error + 'static)) -> Decision {
    if ConnectFailure::of(error) != ConnectFailure::Other {
        return Decision::Stop;
    }
    for link in chain(error) {
        if let Some(elapsed) = link.downcast_ref::<Elapsed>() {
            return elapsed.classify();
        }
        #[cfg(feature = "reqwest")]
        if let Some(e) = link.downcast_ref::<::reqwest::Error>() {
            return e.classify();
        }
        let text = link.to_string();
        if text.starts_with(HYPER_UTIL_USER) {
            return Decision::Stop;
        }
        if text == HYPER_UTIL_CONNECT || text == DNS_ERROR {
            return Decision::Retry;
        }
        if let Some(io) = link.downcast_ref::<io::Error>() {
            return io.classify();
        }
    }
    Decision::Retry
}

/// Whether the request may have reached the server: not when the chain shows that no
/// connection was made (refused, or hyper-util's or reqwest's connect error).
pub(super) fn may_have_reached(error: &(dyn Error + 'static)) -> bool {
    for link in chain(error) {
        #[cfg(feature = "reqwest")]
        if let Some(e) = link.downcast_ref::<::reqwest::Error>() {
            return !e.is_connect();
        }
        if link.to_string() == HYPER_UTIL_CONNECT {
            return false;
        }
        if link
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::ConnectionRefused)
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    /// An error as hyper-util's client builds one: a message over a cause.
    #[derive(Debug)]
    struct Wrapped(&'static str, Option<Box<dyn Error + Send + Sync>>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn connect(cause: io::Error) -> Wrapped {
        Wrapped(
            HYPER_UTIL_CONNECT,
            Some(Box::new(Wrapped(
                "tcp connect error",
                Some(Box::new(cause)),
            ))),
        )
    }

    #[test]
    fn a_refused_connection_is_retried_and_never_reached_the_server() {
        let refused = connect(io::ErrorKind::ConnectionRefused.into());
        assert_eq!(classify_error(&refused), Decision::Retry);
        assert!(!may_have_reached(&refused));
        assert_eq!(
            crate::error_chain(&refused).to_string(),
            "client error (Connect): tcp connect error: connection refused"
        );
    }

    #[test]
    fn a_reset_after_sending_may_have_reached_it() {
        let reset = Wrapped(
            "client error (SendRequest)",
            Some(Box::new(io::Error::from(io::ErrorKind::ConnectionReset))),
        );
        assert_eq!(classify_error(&reset), Decision::Retry);
        assert!(may_have_reached(&reset));
        let closed = Wrapped(
            "client error (SendRequest)",
            Some(Box::new(Wrapped(
                "connection closed before message completed",
                None,
            ))),
        );
        assert_eq!(classify_error(&closed), Decision::Retry);
    }

    #[test]
    fn a_request_the_client_cannot_send_or_a_missing_host_stops() {
        let user = Wrapped("client error (UserAbsoluteUriRequired)", None);
        assert_eq!(classify_error(&user), Decision::Stop);
        let missing = Wrapped(
            HYPER_UTIL_CONNECT,
            Some(Box::new(Wrapped(
                DNS_ERROR,
                Some(Box::new(io::Error::other(
                    "failed to lookup address information: Name or service not known",
                ))),
            ))),
        );
        assert_eq!(classify_error(&missing), Decision::Stop);
        let later = Wrapped(
            HYPER_UTIL_CONNECT,
            Some(Box::new(Wrapped(
                DNS_ERROR,
                Some(Box::new(io::Error::other(
                    "failed to lookup address information: Temporary failure in name resolution",
                ))),
            ))),
        );
        assert_eq!(classify_error(&later), Decision::Retry);
    }
}
