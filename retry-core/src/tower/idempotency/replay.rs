//! What a replay carries: the stored status, body and allow-listed headers, never credentials.

use ::http::Response;
use ::http::header::HeaderValue;
use ::http_body_util::Full;

use super::body::IdempotencyBody;
use super::problem::Problem;
use super::replay_headers::ReplayHeaders;
use super::stored::decode_stored;
use crate::http::IDEMPOTENT_REPLAYED;

/// The stored response, replayed: its status and body, its headers still on the allow-list, and
/// `Idempotent-Replayed: ?1`.
pub(super) fn replay(
    stored: &str,
    headers: &ReplayHeaders,
    function: &str,
) -> Response<IdempotencyBody> {
    let (mut parts, body) = match decode_stored(stored) {
        Ok(decoded) => decoded.into_parts(),
        Err(e) => {
            tracing::error!(target: "retry_core::tower", function, error = %e, "stored response cannot be read");
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ::http::header::{self, HeaderName};

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
}
