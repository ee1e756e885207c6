//! The seed table for HTTP statuses, and `Retry-After` on responses.

use std::time::{Duration, SystemTime};

use ::http::{HeaderMap, Method, StatusCode, header::RETRY_AFTER};

use super::retry_after::parse_retry_after;
use crate::classify::{Classify, Decision};

/// 408, 429, 500, 502, 503, 504 and other 5xx (but 501 and 505) may work next time; every
/// other status, 4xx above all, will fail the same way. A bare status cannot carry
/// `Retry-After`: classify the response to honour it.
///
/// 1xx, 2xx and 3xx (a `304 Not Modified`, a redirect) are not failures: there is nothing to
/// try again, so they classify `Stop`, and [`send_checked`](crate::reqwest::RequestBuilderExt::send_checked)
/// and [`check`](crate::reqwest::ResponseExt::check) return them as `Ok` rather than as errors.
///
/// ```
/// use http::StatusCode;
/// use retry_core::{Classify, Decision};
///
/// assert_eq!(StatusCode::SERVICE_UNAVAILABLE.classify(), Decision::Retry);
/// assert_eq!(StatusCode::NOT_FOUND.classify(), Decision::Stop);
/// assert_eq!(StatusCode::NOT_FOUND.reason().as_deref(), Some("404 Not Found"));
/// assert_eq!(StatusCode::NOT_MODIFIED.classify(), Decision::Stop, "an answer: nothing to retry");
/// ```
impl Classify for StatusCode {
    fn classify(&self) -> Decision {
        match *self {
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => Decision::Retry,
            // The server does not implement the method or the HTTP version: permanent.
            StatusCode::NOT_IMPLEMENTED | StatusCode::HTTP_VERSION_NOT_SUPPORTED => Decision::Stop,
            status if status.is_server_error() => Decision::Retry,
            _ => Decision::Stop,
        }
    }

    fn reason(&self) -> Option<String> {
        Some(status_text(*self))
    }
}

/// "404 Not Found", or just "599" for a status with no registered reason.
pub(crate) fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// The classification of a response: its status, and for 429 and 503 the `Retry-After` header
/// as a floor for the next wait (a malformed header is ignored: plain backoff).
///
/// ```
/// use retry_core::{Classify, Decision};
/// use std::time::Duration;
///
/// let response = http::Response::builder()
///     .status(429)
///     .header("retry-after", "7")
///     .body(())
///     .unwrap();
/// assert_eq!(response.classify(), Decision::RetryAfter(Duration::from_secs(7)));
/// ```
impl<B> Classify for ::http::Response<B> {
    fn classify(&self) -> Decision {
        classify_response(self.status(), self.headers(), SystemTime::now())
    }

    fn reason(&self) -> Option<String> {
        self.status().reason()
    }
}

/// How a retrying HTTP client sees a response: `None` for an answer (1xx, 2xx, 3xx: a `304 Not
/// Modified` or a redirect not followed is for the caller to read), else the classification of
/// the failure by its status and, on a 429 or 503, its `Retry-After`.
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use retry_core::Decision;
/// use retry_core::http::classify_status;
///
/// let headers = HeaderMap::new();
/// assert_eq!(classify_status(StatusCode::OK, &headers), None);
/// assert_eq!(classify_status(StatusCode::BAD_GATEWAY, &headers), Some(Decision::Retry));
/// assert_eq!(classify_status(StatusCode::NOT_FOUND, &headers), Some(Decision::Stop));
/// ```
pub fn classify_status(status: StatusCode, headers: &HeaderMap) -> Option<Decision> {
    (status.is_client_error() || status.is_server_error())
        .then(|| classify_response(status, headers, SystemTime::now()))
}

/// [`Classify`] for a status with its headers, at `now`.
pub(crate) fn classify_response(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> Decision {
    match (status.classify(), retry_after(status, headers, now)) {
        (Decision::Retry, Some(wait)) => Decision::RetryAfter(wait),
        (decision, _) => decision,
    }
}

/// The `Retry-After` of a 429 or 503, when present and well formed.
pub(crate) fn retry_after(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let value = headers.get(RETRY_AFTER)?;
    let parsed = value
        .to_str()
        .map_err(|_| "not visible ASCII".to_owned())
        .and_then(|text| parse_retry_after(text, now).map_err(|e| e.to_string()));
    match parsed {
        Ok(wait) => Some(wait),
        Err(error) => {
            tracing::debug!(target: "retry_core::http", %status, %error, "ignoring a malformed Retry-After");
            None
        }
    }
}

/// Whether a request carries an `Idempotency-Key`, which makes sending it twice safe.
#[cfg_attr(
    not(any(feature = "reqwest", feature = "tower", feature = "reqwest-middleware")),
    allow(dead_code)
)]
pub(crate) fn has_idempotency_key(headers: &HeaderMap) -> bool {
    headers.contains_key(IDEMPOTENCY_KEY)
}

/// The IETF httpapi `Idempotency-Key` header.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The classification of a request that failed after it may have reached the server (a timeout,
/// a reset after sending, a 5xx): a POST or PATCH without `Idempotency-Key` must not be sent
/// again, since the first one may have taken effect.
/// Idempotent methods (RFC 9110 §9.2.2) and keyed requests are safe to send again.
#[cfg_attr(
    not(any(feature = "reqwest", feature = "tower", feature = "reqwest-middleware")),
    allow(dead_code)
)]
pub(crate) fn guard_resend(decision: Decision, method: &Method, keyed: bool) -> Decision {
    match decision {
        Decision::Stop => Decision::Stop,
        _ if method.is_idempotent() || keyed => decision,
        _ => Decision::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_table() {
        for code in [408, 429, 500, 502, 503, 504, 507] {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(status.classify(), Decision::Retry, "{code}");
        }
        for code in [
            200, 301, 400, 401, 403, 404, 409, 410, 418, 422, 451, 501, 505,
        ] {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(status.classify(), Decision::Stop, "{code}");
        }
    }

    fn headers(retry_after: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, retry_after.parse().unwrap());
        headers
    }

    #[test]
    fn retry_after_is_read_on_429_and_503_only() {
        let now = SystemTime::now();
        let two = Decision::RetryAfter(Duration::from_secs(2));
        assert_eq!(
            classify_response(StatusCode::TOO_MANY_REQUESTS, &headers("2"), now),
            two
        );
        assert_eq!(
            classify_response(StatusCode::SERVICE_UNAVAILABLE, &headers("2"), now),
            two
        );
        assert_eq!(
            classify_response(StatusCode::BAD_GATEWAY, &headers("2"), now),
            Decision::Retry
        );
        assert_eq!(
            classify_response(StatusCode::NOT_FOUND, &headers("2"), now),
            Decision::Stop
        );
        let none = HeaderMap::new();
        assert_eq!(
            classify_response(StatusCode::TOO_MANY_REQUESTS, &none, now),
            Decision::Retry
        );
    }

    #[test]
    fn a_malformed_retry_after_falls_back_to_backoff() {
        let now = SystemTime::now();
        // The last three fit the grammar but httpdate refuses them: a Monday that was a Sunday,
        // a leap second, a year before 1970.
        for bad in [
            "soon",
            "-1",
            "1.5",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sat, 31 Dec 2016 23:59:60 GMT",
            "Sat, 01 Jan 0000 00:00:00 GMT",
        ] {
            let decision = classify_response(StatusCode::TOO_MANY_REQUESTS, &headers(bad), now);
            assert_eq!(decision, Decision::Retry, "{bad}");
        }
    }

    #[test]
    fn non_idempotent_methods_need_a_key_to_be_resent() {
        let mut headers = HeaderMap::new();
        assert!(!has_idempotency_key(&headers));
        headers.insert(IDEMPOTENCY_KEY, "k-1".parse().unwrap());
        assert!(has_idempotency_key(&headers));
        assert_eq!(
            guard_resend(Decision::Retry, &Method::POST, false),
            Decision::Stop
        );
        assert_eq!(
            guard_resend(Decision::Retry, &Method::PATCH, false),
            Decision::Stop
        );
        assert_eq!(
            guard_resend(Decision::Retry, &Method::POST, true),
            Decision::Retry
        );
        assert_eq!(
            guard_resend(Decision::Retry, &Method::PUT, false),
            Decision::Retry
        );
        assert_eq!(
            guard_resend(Decision::Retry, &Method::GET, false),
            Decision::Retry
        );
        assert_eq!(
            guard_resend(Decision::Stop, &Method::GET, true),
            Decision::Stop
        );
    }
}
