//! HTTP integration (feature `http`): [`Classify`](crate::Classify) for statuses and responses,
//! `Retry-After`, and the `Caller-Retries` header that keeps retries in one layer across
//! services.
//!
//! # `Caller-Retries: ?1;attempt=2;max=5`
//!
//! A request sent from inside a retry scope carries `Caller-Retries` (a structured-field
//! boolean, RFC 9651): "the caller retries this request; do not retry on its behalf". A server
//! that reads it (see `retry_core::tower::CallerRetriesLayer`, feature `tower`) runs the
//! handler's own retries as single attempts, so gateway → A → B → final system with 4 attempts
//! in each caller sends the final system 4 requests, not 4 × 4 × 4 = 64.
//!
//! The marker's parameters say which attempt of the one retrying layer the request is, and how
//! many that layer may make ([`Announcement`]): `?1;attempt=2;max=5`. A service that runs
//! inside its caller's retry sends the numbers it received on, so every hop of a chain sees
//! the same ones. The receiver does not need them to keep retries in one layer (the marker
//! alone does that, and older senders write the bare `?1`, which is still read); they let it
//! measure what other layers do: an operation that arrives more often than any announced `max`
//! allows was multiplied by retries upstream that are not ours
//! (`retry_core::tower::AmplificationLayer`).
//!
//! The name says what the receiver should conclude rather than counting attempts as gRPC's
//! `grpc-previous-rpc-attempts` does. It has no `X-` prefix (RFC 6648).

use std::future::Future;

use ::http::HeaderMap;

use crate::scope::{self, InScope};

/// Adds `Caller-Retries` to an outgoing request's headers when it is made inside a retry
/// scope, with the attempt and the retrying layer's `max` when they are known
/// (`?1;attempt=2;max=5`); returns whether it did.
///
/// ```
/// use http::HeaderMap;
/// use retry_core::http::{mark_caller_retries, CALLER_RETRIES};
/// use retry_core::Policy;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut headers = HeaderMap::new();
/// assert!(!mark_caller_retries(&mut headers), "no retry is running here");
/// assert!(headers.get(CALLER_RETRIES).is_none());
///
/// let policy = Policy::new().max_attempts(3);
/// let headers = policy
///     .retry(|| async {
///         let mut headers = HeaderMap::new();
///         mark_caller_retries(&mut headers);
///         Ok::<_, std::io::Error>(headers)
///     })
///     .await
///     .unwrap();
/// assert_eq!(headers[CALLER_RETRIES], "?1;attempt=1;max=3");
/// # }
/// ```
pub fn mark_caller_retries(headers: &mut HeaderMap) -> bool {
    match current_announcement() {
        Some(announced) => {
            headers.insert(CALLER_RETRIES, announced.header_value());
            true
        }
        None => false,
    }
}

/// What a request sent from here announces: `None` outside any retry.
pub(crate) fn current_announcement() -> Option<Announcement> {
    scope::current_attempt_of().map(|(attempt, max)| Announcement::new(attempt, max))
}

/// Whether an incoming request says its caller retries it (in the bare form `?1` or with the
/// attempt's numbers; see [`Announcement::parse`]).
///
/// ```
/// use http::HeaderMap;
/// use retry_core::http::{caller_retries, CALLER_RETRIES, CALLER_RETRIES_VALUE};
///
/// let mut headers = HeaderMap::new();
/// assert!(!caller_retries(&headers));
/// headers.insert(CALLER_RETRIES, CALLER_RETRIES_VALUE);
/// assert!(caller_retries(&headers));
/// headers.insert(CALLER_RETRIES, "?1;attempt=2;max=4".parse().unwrap());
/// assert!(caller_retries(&headers));
/// ```
pub fn caller_retries(headers: &HeaderMap) -> bool {
    Announcement::of(headers).is_some()
}

/// `future` as the request's caller asks in its `Caller-Retries` field (`announced`): when
/// the caller retries, every retry inside makes one attempt and the requests it sends carry
/// the caller's numbers on; without the field, as it is.
#[cfg_attr(
    not(any(feature = "tower", feature = "reqwest-middleware", feature = "tonic")),
    allow(dead_code)
)]
pub(crate) fn in_scope_of<F: Future>(announced: Option<Announcement>, future: F) -> InScope<F> {
    match announced {
        Some(a) => scope::caller_retries_at(
            future,
            a.attempt().unwrap_or_default(),
            a.max().unwrap_or_default(),
        ),
        None => scope::unscoped(future),
    }
}

/// Marks an [`http::Request`] built inside a retry scope; see
/// [`mark_caller_retries`].
///
/// ```
/// let mut request = http::Request::new(());
/// retry_core::http::mark_request(&mut request);
/// ```
pub fn mark_request<B>(request: &mut ::http::Request<B>) -> bool {
    mark_caller_retries(request.headers_mut())
}

mod announce;
mod classify;
mod connect;
mod key;
mod outcome;
mod retry_after;

pub use announce::{Announcement, CALLER_RETRIES, CALLER_RETRIES_VALUE};
pub use classify::{IDEMPOTENCY_KEY, classify_status};
// For the reqwest integration (and the dead-letter client on it).
#[cfg_attr(not(feature = "reqwest"), allow(unused_imports))]
pub(crate) use classify::{has_idempotency_key, retry_after, status_text};
pub use connect::ConnectFailure;
#[cfg(feature = "tower")]
pub(crate) use key::parse_key_header;
pub use key::{IDEMPOTENT_REPLAYED, IdempotencyKey, InvalidIdempotencyKey};
#[cfg_attr(
    not(any(feature = "tower", feature = "reqwest-middleware")),
    allow(unused_imports)
)]
pub(crate) use outcome::{Failed, Sent};
#[cfg_attr(not(feature = "reqwest"), allow(unused_imports))]
pub(crate) use outcome::{guarded, judge, method_name};
pub use retry_after::{RetryAfterError, parse_retry_after};
