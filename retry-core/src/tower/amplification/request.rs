//! What the observer reads from a request: the logical operation it belongs to, and where it
//! came from. Only borrowed bytes: nothing is copied unless a warning is written.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use ::http::{HeaderMap, Method};

use crate::http::IDEMPOTENCY_KEY;

/// The W3C Trace Context header: `00-<trace id>-<parent id>-<flags>`.
const TRACEPARENT: &str = "traceparent";

/// Headers a proxy or a client sets that tell one sender from another. A peer address is not
/// among them: tower does not carry it (axum puts it in an extension of its own type).
const SOURCE_HEADERS: [&str; 4] = ["via", "x-forwarded-for", "forwarded", "user-agent"];

/// The best identity of the logical operation a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity<'a> {
    /// The client's `Idempotency-Key` (unquoted when it was quoted without escapes), under
    /// the client's scope when the layer knows it.
    Key {
        scope: Option<&'a str>,
        key: &'a [u8],
    },
    /// The W3C trace id of `traceparent` (32 lowercase hex digits).
    Trace(&'a [u8]),
}

impl<'a> Identity<'a> {
    /// The request's `Idempotency-Key`, else its trace id, else nothing.
    pub(super) fn of(headers: &'a HeaderMap) -> Option<Identity<'a>> {
        match headers.get(IDEMPOTENCY_KEY) {
            Some(key) => Some(Identity::Key {
                scope: None,
                key: unquoted(key.as_bytes()),
            }),
            None => Identity::trace(headers),
        }
    }

    /// The request's trace id from `traceparent`, if it has a valid one.
    pub(crate) fn trace(headers: &'a HeaderMap) -> Option<Identity<'a>> {
        let value = headers.get(TRACEPARENT)?.as_bytes().trim_ascii();
        let mut fields = value.split(|b| *b == b'-');
        let version = fields.next()?;
        let trace = fields.next()?;
        let parent = fields.next()?;
        let flags = fields.next()?;
        let hex = |field: &[u8], len: usize| {
            field.len() == len && field.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let valid = hex(version, 2)
            && version != b"ff"
            && hex(trace, 32)
            && trace.iter().any(|b| *b != b'0')
            && hex(parent, 16)
            && hex(flags, 2);
        valid.then_some(Identity::Trace(trace))
    }

    /// Whether it is a key (rather than a trace id).
    pub(super) fn keyed(&self) -> bool {
        matches!(self, Identity::Key { .. })
    }

    /// Its hash, with the request's method and path: one key or trace sent to two resources is
    /// two operations.
    pub(super) fn hash(&self, hasher: &RandomState, method: &Method, path: &str) -> u64 {
        let mut state = hasher.build_hasher();
        match self {
            Identity::Key { scope, key } => (0u8, scope, key).hash(&mut state),
            Identity::Trace(trace) => (1u8, trace).hash(&mut state),
        }
        (method.as_str(), path).hash(&mut state);
        state.finish()
    }
}

/// How a warning names the operation: `key "K"` or `trace T`, at most 64 characters of it.
impl fmt::Display for Identity<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned();
            text.escape_debug().to_string()
        };
        match self {
            Identity::Key {
                scope: Some(scope),
                key,
            } => write!(
                f,
                "key \"{}\" of \"{}\"",
                shown(key),
                shown(scope.as_bytes())
            ),
            Identity::Key { scope: None, key } => write!(f, "key \"{}\"", shown(key)),
            Identity::Trace(trace) => write!(f, "trace {}", shown(trace)),
        }
    }
}

/// A key sent quoted without escapes (`"8e03978e"`) is the same key as sent bare; one with
/// escapes is hashed as sent (it is still the same on every resend of the same client).
fn unquoted(value: &[u8]) -> &[u8] {
    let value = value.trim_ascii();
    match value
        .strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
    {
        Some(inner) if !inner.contains(&b'\\') => inner,
        _ => value,
    }
}

/// A 32-bit hash of the headers that tell senders apart (`0` and `1` are the same source
/// as far as the table is concerned).
pub(super) fn source_hash(hasher: &RandomState, headers: &HeaderMap) -> u32 {
    let mut state = hasher.build_hasher();
    for name in SOURCE_HEADERS {
        headers.get(name).map(|v| v.as_bytes()).hash(&mut state);
    }
    // The low half of a 64-bit SipHash: a collision merges two sources, nothing worse.
    state.finish() as u32
}

/// The source of a request in words, for a warning: its `Via`, `X-Forwarded-For`,
/// `Forwarded` and `User-Agent` where it has them.
pub(super) fn describe_source(headers: &HeaderMap) -> String {
    let described: Vec<String> = SOURCE_HEADERS
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?;
            let text = String::from_utf8_lossy(value.as_bytes());
            let text: String = text.chars().take(80).collect();
            Some(format!("{name}: {text}"))
        })
        .collect();
    if described.is_empty() {
        "no via, forwarded or user-agent header".to_owned()
    } else {
        described.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use ::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_key_comes_first_then_the_trace_id() {
        let both = headers(&[("idempotency-key", "\"k-1\""), ("traceparent", TRACE)]);
        assert_eq!(
            Identity::of(&both),
            Some(Identity::Key {
                scope: None,
                key: b"k-1"
            })
        );
        let trace = headers(&[("traceparent", TRACE)]);
        assert_eq!(
            Identity::of(&trace),
            Some(Identity::Trace(b"4bf92f3577b34da6a3ce929d0e0e4736"))
        );
        assert_eq!(Identity::of(&HeaderMap::new()), None);
    }

    #[test]
    fn quoted_and_bare_keys_are_one_operation() {
        let hasher = RandomState::new();
        let quoted = headers(&[("idempotency-key", "\"k-1\"")]);
        let bare = headers(&[("idempotency-key", "k-1")]);
        let hash = |h: &HeaderMap| {
            Identity::of(h)
                .unwrap()
                .hash(&hasher, &Method::POST, "/pay")
        };
        assert_eq!(hash(&quoted), hash(&bare));
        let other_path = Identity::of(&bare)
            .unwrap()
            .hash(&hasher, &Method::POST, "/refund");
        assert_ne!(hash(&bare), other_path);
    }

    #[test]
    fn an_invalid_traceparent_is_no_identity() {
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736",
            "garbage",
        ] {
            let map = headers(&[("traceparent", bad)]);
            assert_eq!(Identity::trace(&map), None, "{bad}");
        }
    }

    #[test]
    fn sources_differ_by_their_forwarding_headers() {
        let hasher = RandomState::new();
        let a = headers(&[("via", "1.1 gateway"), ("user-agent", "curl/8")]);
        let b = headers(&[("via", "1.1 other"), ("user-agent", "curl/8")]);
        assert_ne!(source_hash(&hasher, &a), source_hash(&hasher, &b));
        assert_eq!(source_hash(&hasher, &a), source_hash(&hasher, &a.clone()));
        assert_eq!(describe_source(&a), "via: 1.1 gateway; user-agent: curl/8");
        assert_eq!(
            describe_source(&HeaderMap::new()),
            "no via, forwarded or user-agent header"
        );
    }

    #[test]
    fn a_warning_names_the_operation_without_letting_it_forge_lines() {
        let key = Identity::Key {
            scope: Some("alice"),
            key: b"k\n1",
        };
        assert_eq!(key.to_string(), "key \"k\\n1\" of \"alice\"");
    }
}
