//! The response headers a replay may carry: an allow-list of headers that describe the response
//! itself, never credentials.

use std::sync::Arc;

use ::http::header::{self, HeaderName};

/// The response headers stored and replayed.
#[derive(Debug, Clone)]
pub(super) struct ReplayHeaders(
    /// Checked by [`new`](Self::new); built directly only by tests, as a row written under
    /// another list might be.
    pub(super) Arc<[HeaderName]>,
);

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
