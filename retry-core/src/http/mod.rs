//! HTTP integration (feature `http`): [`Classify`](crate::Classify) for statuses and responses,
//! `Retry-After`, and the `Caller-Retries` header that keeps retries in one layer across
//! services.
//!
//! # `Caller-Retries: ?1`
//!
//! A request sent from inside a retry scope carries `Caller-Retries: ?1` (a structured-field
//! boolean, RFC 8941): "the caller retries this request; do not retry on its behalf". A server
//! that reads it (see `retry_core::tower::CallerRetriesLayer`, feature `tower`) runs the
//! handler's own retries as single attempts, so gateway → A → B → final system with 4 attempts
//! in each caller sends the final system 4 requests, not 4 × 4 × 4 = 64.
//!
//! The name says what the receiver should conclude rather than counting attempts as gRPC's
//! `grpc-previous-rpc-attempts` does: the receiver does not need the count, only to know that
//! somebody above it already retries. It has no `X-` prefix (RFC 6648).

use ::http::{HeaderMap, HeaderName, HeaderValue};

use crate::scope;

/// The header marking a request whose caller retries it.
pub const CALLER_RETRIES: HeaderName = HeaderName::from_static("caller-retries");

/// Its value: the structured-field boolean "true".
pub const CALLER_RETRIES_VALUE: HeaderValue = HeaderValue::from_static("?1");

/// Adds `Caller-Retries: ?1` to an outgoing request's headers when it is made inside a retry
/// scope; returns whether it did.
///
/// ```
/// use http::HeaderMap;
/// use retry_core::http::{mark_caller_retries, CALLER_RETRIES};
///
/// let mut headers = HeaderMap::new();
/// assert!(!mark_caller_retries(&mut headers), "no retry is running here");
/// assert!(headers.get(CALLER_RETRIES).is_none());
/// ```
pub fn mark_caller_retries(headers: &mut HeaderMap) -> bool {
    let inside = scope::is_active();
    if inside {
        headers.insert(CALLER_RETRIES, CALLER_RETRIES_VALUE);
    }
    inside
}

/// Whether an incoming request says its caller retries it.
///
/// ```
/// use http::HeaderMap;
/// use retry_core::http::{caller_retries, CALLER_RETRIES, CALLER_RETRIES_VALUE};
///
/// let mut headers = HeaderMap::new();
/// assert!(!caller_retries(&headers));
/// headers.insert(CALLER_RETRIES, CALLER_RETRIES_VALUE);
/// assert!(caller_retries(&headers));
/// ```
pub fn caller_retries(headers: &HeaderMap) -> bool {
    headers
        .get(CALLER_RETRIES)
        .is_some_and(|value| says_caller_retries(value.as_bytes()))
}

/// Whether a `Caller-Retries` value (an HTTP header or gRPC metadata) is the structured-field
/// "true".
pub(crate) fn says_caller_retries(value: &[u8]) -> bool {
    value.trim_ascii() == CALLER_RETRIES_VALUE.as_bytes()
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

mod classify;
mod connect;
mod key;
mod outcome;
mod retry_after;

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
