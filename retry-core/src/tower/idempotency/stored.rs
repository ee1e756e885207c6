//! A response as the store keeps it: status, allow-listed headers and body, as JSON.

use ::base64::Engine as _;
use ::base64::engine::general_purpose::STANDARD as BASE64;
use ::bytes::Bytes;
use ::http::header::{HeaderName, HeaderValue};
use ::http::{Response, StatusCode};
use serde::{Deserialize, Serialize};

use super::replay_headers::ReplayHeaders;

/// A response as the store keeps it (JSON). Part of the stored data: fields may be added, never
/// changed.
#[derive(Serialize, Deserialize)]
pub(super) struct StoredResponse {
    status: u16,
    /// Allow-listed headers, in order, one pair per value.
    headers: Vec<(String, String)>,
    /// The body, when it is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    /// The body in standard base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
}

/// The stored response with every stored header.
pub(super) fn decode_stored(stored: &str) -> Result<Response<Bytes>, String> {
    let stored: StoredResponse = serde_json::from_str(stored).map_err(|e| e.to_string())?;
    let body = match (stored.body, stored.body_base64) {
        (Some(text), None) => Bytes::from(text),
        (None, Some(encoded)) => Bytes::from(BASE64.decode(encoded).map_err(|e| e.to_string())?),
        _ => return Err("a stored response needs exactly one of `body` and `body_base64`".into()),
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(stored.status).map_err(|e| e.to_string())?;
    for (name, value) in stored.headers {
        response.headers_mut().append(
            HeaderName::try_from(name).map_err(|e| e.to_string())?,
            HeaderValue::try_from(value).map_err(|e| e.to_string())?,
        );
    }
    Ok(response)
}

/// The response as it is stored: status, allow-listed headers, body, as JSON.
pub(super) fn stored_form(
    parts: &::http::response::Parts,
    body: &[u8],
    replayed: &ReplayHeaders,
    function: &str,
) -> Result<String, serde_json::Error> {
    serde_json::to_string(&stored(parts, body, replayed, function))
}

/// The response as it is stored, before it is written as JSON.
pub(super) fn stored(
    parts: &::http::response::Parts,
    body: &[u8],
    replayed: &ReplayHeaders,
    function: &str,
) -> StoredResponse {
    let mut headers = Vec::new();
    for (name, value) in &parts.headers {
        if !replayed.replays(name) {
            continue;
        }
        match std::str::from_utf8(value.as_bytes()) {
            Ok(text) => headers.push((name.as_str().to_owned(), text.to_owned())),
            Err(_) => {
                tracing::warn!(target: "retry_core::tower", function, header = %name, "a header value that is not UTF-8 is not stored");
            }
        }
    }
    let (text, base64) = match std::str::from_utf8(body) {
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => (None, Some(BASE64.encode(body))),
    };
    StoredResponse {
        status: parts.status.as_u16(),
        headers,
        body: text,
        body_base64: base64,
    }
}

#[cfg(test)]
mod tests {
    use ::http::header;

    use super::*;

    #[test]
    fn stored_responses_round_trip_text_and_binary_bodies() {
        for body in [&b"{\"id\":1}"[..], &[0xff, 0x00, 0xfe][..], &b""[..]] {
            let mut response = Response::new(());
            *response.status_mut() = StatusCode::CREATED;
            response
                .headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/payments/1"));
            response
                .headers_mut()
                .insert(header::SET_COOKIE, HeaderValue::from_static("s=1"));
            let (parts, ()) = response.into_parts();
            let json = stored_form(&parts, body, &ReplayHeaders::default(), "test").unwrap();
            let decoded = decode_stored(&json).unwrap();
            assert_eq!(decoded.status(), StatusCode::CREATED);
            assert_eq!(decoded.headers()[header::LOCATION], "/payments/1");
            assert!(decoded.headers().get(header::SET_COOKIE).is_none());
            assert_eq!(decoded.body(), body);
        }
        assert!(decode_stored("{\"status\":200,\"headers\":[]}").is_err());
    }
}
