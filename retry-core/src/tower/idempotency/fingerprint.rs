//! What makes two requests with one key the same operation.

use ::base64::Engine as _;
use ::base64::engine::general_purpose::STANDARD as BASE64;
use ::http::request::Parts;

use crate::idempotency::{digest, encode_key};

/// A fingerprint of what makes two requests the same operation: method, path, query and body.
///
/// A JSON body counts by its value, not its bytes: key order and whitespace do not make another
/// request. A redrive resends a dead letter's `original`, which went through
/// `serde_json::Value` (keys sorted) on its way into the letter, so byte equality would answer
/// the very resend idempotency exists for with `422`.
pub(super) fn fingerprint(parts: &Parts, body: &[u8]) -> String {
    // Self-delimiting parts, then the body as canonical JSON, text or base64, tagged: injective
    // before hashing.
    let mut text = encode_key(&(parts.method.as_str(), parts.uri.path(), parts.uri.query()));
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        text.push_str("|j");
        text.push_str(&value.to_string());
    } else if let Ok(body) = std::str::from_utf8(body) {
        text.push_str("|t");
        text.push_str(body);
    } else {
        text.push_str("|b");
        BASE64.encode_string(body, &mut text);
    }
    digest(&text)
}

#[cfg(test)]
mod tests {
    use ::http::Request;

    use super::*;

    #[test]
    fn fingerprints_tell_requests_apart() {
        let parts = |uri: &str| Request::post(uri).body(()).unwrap().into_parts().0;
        let base = fingerprint(&parts("/a?x=1"), b"{}");
        assert_eq!(base, fingerprint(&parts("/a?x=1"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/a?x=2"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/b?x=1"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/a?x=1"), b"[]"));
        assert_ne!(base, fingerprint(&parts("/a?x=1"), b"{ "));
        // The same JSON value, however it is written, is the same request.
        assert_eq!(
            fingerprint(&parts("/a"), br#"{"b": 2, "a": [1, "x"]}"#),
            fingerprint(&parts("/a"), br#"{"a":[1,"x"],"b":2}"#)
        );
        assert_ne!(
            fingerprint(&parts("/a"), br#"{"a":1}"#),
            fingerprint(&parts("/a"), br#"{"a":"1"}"#)
        );
        assert_ne!(
            fingerprint(&parts("/a"), &[0xff]),
            fingerprint(&parts("/a"), b"/w==")
        );
    }
}
