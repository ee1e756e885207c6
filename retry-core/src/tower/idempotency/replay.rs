//! What a replay carries: the stored status, body and allow-listed headers, never credentials.

use std::sync::Arc;

use ::http::Response;
use ::http::header::{self, HeaderName, HeaderValue};
use ::http_body_util::Full;

use super::body::IdempotencyBody;
use super::problem::Problem;
use super::stored::decode_stored;
use crate::http::IDEMPOTENT_REPLAYED;

/// The response headers stored and replayed.
#[derive(Debug, Clone)]
pub(super) struct ReplayHeaders(Arc<[HeaderName]>);

impl Default for ReplayHeaders {
    fn default() -> Self {
        ReplayHeaders(Arc::from(DEFAULT_REPLAY_HEADERS.as_slice()))
    }
}

impl ReplayHeaders {
    /// `names`, unless one of them may never be replayed.
    pub(super) fn new(names: impl IntoIterator<Item = HeaderName>) -> Result<Self, RefusedHeader> {
        let names: Vec<HeaderName> = names.into_iter().collect();
        if let Some((name, reason)) = names
            .iter()
            .find_map(|name| refusal(name).map(|reason| (name, reason)))
        {
            return Err(RefusedHeader {
                name: name.clone(),
                reason,
            });
        }
        Ok(ReplayHeaders(names.into()))
    }

    /// Whether `name` is stored and replayed. The allow-list is checked again here: a row may
    /// have been written under another list.
    pub(super) fn replays(&self, name: &HeaderName) -> bool {
        self.0.contains(name) && refusal(name).is_none()
    }
}

/// The stored response, replayed: its status and body, its headers still on the allow-list, and
/// `Idempotent-Replayed: ?1`.
pub(super) fn replay(
    stored: &str,
    headers: &ReplayHeaders,
    function: &'static str,
) -> Response<IdempotencyBody> {
    let (mut parts, body) = match decode_stored(stored) {
        Ok(decoded) => decoded.into_parts(),
        Err(e) => {
            tracing::error!(function, error = %e, "stored response cannot be read");
            return Problem::StoredUnreadable.response();
        }
    };
    // Checked again: the row may predate today's allow-list.
    let stored_headers = std::mem::take(&mut parts.headers);
    for (name, value) in &stored_headers {
        if headers.replays(name) {
            parts.headers.append(name, value.clone());
        }
    }
    let mut response = Response::from_parts(parts, IdempotencyBody::new(Full::new(body)));
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("?1"));
    response
}

/// Why a header may never be stored and replayed: anything off [`REPLAYABLE`]. A deny-list
/// would let through whatever it forgot to name (an `X-Api-Token`, a tenant's session id in a
/// header of its own); an allow-list of headers that describe the response itself cannot.
fn refusal(name: &HeaderName) -> Option<&'static str> {
    const CREDENTIALS: [&str; 9] = [
        "set-cookie",
        "set-cookie2",
        "cookie",
        "authorization",
        "proxy-authorization",
        "www-authenticate",
        "proxy-authenticate",
        "authentication-info",
        "proxy-authentication-info",
    ];
    if REPLAYABLE.contains(name) {
        None
    } else if CREDENTIALS.contains(&name.as_str()) {
        // Named apart so the refusal says why this one is never coming back.
        Some("it carries credentials, which must never be handed to whoever resends a key")
    } else {
        Some(
            "only headers that describe the response itself are replayed (Content-Type, \
             Content-Language, Content-Encoding, Content-Location, Content-Disposition, Location, \
             ETag, Last-Modified, Cache-Control, Expires, Vary): another may carry one client's \
             credentials or state",
        )
    }
}

/// Every header that may be stored and replayed: what the body is (its type, language,
/// encoding, name), where it lives, and how it may be cached. None of them can carry a
/// credential, and none is framing, which is computed for each response.
const REPLAYABLE: [HeaderName; 11] = [
    header::CONTENT_TYPE,
    header::CONTENT_LANGUAGE,
    header::CONTENT_ENCODING,
    header::CONTENT_LOCATION,
    header::CONTENT_DISPOSITION,
    header::LOCATION,
    header::ETAG,
    header::LAST_MODIFIED,
    header::CACHE_CONTROL,
    header::EXPIRES,
    header::VARY,
];

const DEFAULT_REPLAY_HEADERS: [HeaderName; 6] = [
    header::CONTENT_TYPE,
    header::CONTENT_LANGUAGE,
    header::CONTENT_LOCATION,
    header::LOCATION,
    header::ETAG,
    header::LAST_MODIFIED,
];

/// A header that
/// [`IdempotencyLayer::replay_headers`](super::IdempotencyLayer::replay_headers) will not store
/// and replay.
///
/// ```
/// use http::header::AUTHORIZATION;
/// use retry_core::idempotency::MemoryStore;
/// use retry_core::tower::IdempotencyLayer;
///
/// let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
///     .replay_headers([AUTHORIZATION])
///     .unwrap_err();
/// assert_eq!(
///     refused.to_string(),
///     "`authorization` cannot be replayed: it carries credentials, which must never be handed \
///      to whoever resends a key"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` cannot be replayed: {reason}")]
pub struct RefusedHeader {
    name: HeaderName,
    reason: &'static str,
}

impl RefusedHeader {
    /// The refused header.
    ///
    /// ```
    /// use http::header::SET_COOKIE;
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .replay_headers([SET_COOKIE])
    ///     .unwrap_err();
    /// assert_eq!(refused.name(), "set-cookie");
    /// ```
    pub fn name(&self) -> &HeaderName {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_drops_credentials_even_from_a_list_that_names_them() {
        // What `ReplayHeaders::new` refuses to build, as a row written under another list might be.
        let headers = ReplayHeaders(Arc::from(
            [header::SET_COOKIE, header::CONTENT_TYPE].as_slice(),
        ));
        let stored = r#"{"status":200,"headers":[["set-cookie","s=1"],["content-type","text/plain"]],"body":"ok"}"#;
        let replay = replay(stored, &headers, "test");
        assert!(replay.headers().get(header::SET_COOKIE).is_none());
        assert_eq!(replay.headers()[header::CONTENT_TYPE], "text/plain");
        assert_eq!(replay.headers()[IDEMPOTENT_REPLAYED], "?1");
    }

    /// A header off the allow-list is neither stored nor replayed, even when a list names it
    /// (as a row written under an older version's list might).
    #[test]
    fn a_header_off_the_allow_list_is_never_stored_or_replayed() {
        let echo = HeaderName::from_static("x-echo-auth");
        let headers = ReplayHeaders(Arc::from([echo.clone(), header::CONTENT_TYPE].as_slice()));
        let mut response = Response::new(());
        response
            .headers_mut()
            .insert(&echo, HeaderValue::from_static("secret-of-alice"));
        let (parts, ()) = response.into_parts();
        let kept = super::super::stored::stored_form(&parts, b"ok", &headers, "test").unwrap();
        assert!(!kept.contains("secret-of-alice"), "{kept}");

        let stored = r#"{"status":200,"headers":[["x-echo-auth","secret-of-alice"]],"body":"ok"}"#;
        let replay = replay(stored, &headers, "test");
        assert!(replay.headers().get(&echo).is_none());
        assert!(ReplayHeaders::new([echo]).is_err());
    }

    #[test]
    fn credentials_and_framing_are_never_replayed() {
        for name in [
            "set-cookie",
            "authorization",
            "www-authenticate",
            "proxy-authenticate",
        ] {
            assert!(refusal(&HeaderName::from_static(name)).is_some(), "{name}");
        }
        assert!(refusal(&header::TRANSFER_ENCODING).is_some());
        assert!(refusal(&header::LOCATION).is_none());
    }
}
