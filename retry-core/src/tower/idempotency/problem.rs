//! The layer's own answers: RFC 9457 `application/problem+json` bodies, each naming what went
//! wrong and what to do.

use ::bytes::Bytes;
use ::http::header::RETRY_AFTER;
use ::http::header::{self, HeaderValue};
use ::http::{Response, StatusCode};
use ::http_body_util::Full;

use super::body::IdempotencyBody;

/// The failure kept for a key whose response was too large to store (the first client got it
/// in full). Any other kept failure means the first run's outcome is unknown.
pub(super) const NOT_KEPT: &str = "response too large to store";

/// `Retry-After` on the `409` for a request still in progress, in seconds. The layer cannot know
/// how long the first request still runs (its lease only bounds a dead holder); a second is
/// short enough for a quick handler and cheap to answer again (one claim attempt).
pub(super) const IN_PROGRESS_RETRY_AFTER: HeaderValue = HeaderValue::from_static("1");

/// The `type` of the problems the draft defines: its page.
const DRAFT: &str = "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/";

/// Why a request was not run, as an RFC 9457 problem.
pub(super) enum Problem {
    Unauthenticated,
    MissingKey,
    MalformedKey(&'static str),
    KeyTooLong {
        len: usize,
        max: usize,
    },
    /// The client scope (the principal id, `len` bytes) leaves no room for a key within the
    /// store's `max`.
    ScopeTooLong {
        len: usize,
        max: usize,
    },
    BodyTooLarge {
        max: usize,
    },
    BodyUnreadable,
    InProgress,
    KeyReused,
    NotKept,
    /// The first request with the key failed (`Err`, a failed body, a panic) after it may have
    /// had its effect.
    OutcomeUnknown,
    /// The task running the request was cancelled (the runtime shut down) or failed outside the
    /// handler: the claim stays in progress until its lease.
    Interrupted,
    StoreUnavailable,
    StoredUnreadable,
    /// Transactional mode: the request failed (a panic, a response that cannot be kept, a
    /// transaction still lent when the handler answered) and nothing of it was committed; its
    /// key is free again.
    RolledBack,
    /// Transactional mode: the handler answered, but its transaction could not be committed
    /// (fenced, or the store failed at the commit): a resend finds out.
    NotCommitted,
    /// The handler asked for the request's transaction behind a layer built without
    /// `.transactional()`: a mistake of the service's, answered as a refusal with the key free.
    NotTransactional,
}

impl Problem {
    /// The answer to a resend of a key whose first run was kept failed with `failure`: empty for
    /// rows kept before failures were stored, which this layer only kept for responses too
    /// large to store.
    pub(super) fn kept_failure(failure: &str) -> Problem {
        if failure.is_empty() || failure == NOT_KEPT {
            Problem::NotKept
        } else {
            Problem::OutcomeUnknown
        }
    }

    /// Status, title (for the draft's problems; otherwise the status phrase) and detail.
    fn describe(&self) -> (StatusCode, Option<&'static str>, String) {
        match self {
            Problem::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                None,
                "responses to Idempotency-Key are kept per client: authenticate the request".into(),
            ),
            Problem::MissingKey => (
                StatusCode::BAD_REQUEST,
                Some("Idempotency-Key is missing"),
                "this operation requires an Idempotency-Key header, one key per operation sent \
                 with every attempt of it, e.g. Idempotency-Key: \"8e03978e40d545e8bc936894a57f9324\""
                    .into(),
            ),
            Problem::MalformedKey(reason) => (
                StatusCode::BAD_REQUEST,
                Some("Idempotency-Key is malformed"),
                format!("{reason}; send the key as a structured-field string, e.g. Idempotency-Key: \"order-1234\""),
            ),
            Problem::KeyTooLong { len, max } => (
                StatusCode::BAD_REQUEST,
                Some("Idempotency-Key is too long"),
                format!("the key is {len} bytes; at most {max} are allowed"),
            ),
            Problem::ScopeTooLong { len, max } => (
                StatusCode::BAD_REQUEST,
                None,
                format!("the client id this request is authenticated as is {len} bytes, too long for a stored Idempotency-Key (at most {max} bytes with the key); the request was not processed, whatever its key"),
            ),
            Problem::BodyTooLarge { max } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                format!("the request body is larger than the {max} bytes allowed for a request with Idempotency-Key"),
            ),
            Problem::BodyUnreadable => (
                StatusCode::BAD_REQUEST,
                None,
                "the request body could not be read".into(),
            ),
            Problem::InProgress => (
                StatusCode::CONFLICT,
                Some("A request is outstanding for this Idempotency-Key"),
                "a request with this key is still being processed; send it again after the seconds in Retry-After to get its response".into(),
            ),
            Problem::KeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("Idempotency-Key is already used"),
                "this key was used with a different request (method, path, query or body); use a new key for a new operation".into(),
            ),
            Problem::NotKept => (
                StatusCode::CONFLICT,
                Some("Response for this Idempotency-Key was not kept"),
                "a request with this key was processed, but its response was too large to keep; it will not be processed again".into(),
            ),
            Problem::OutcomeUnknown => (
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "the first request with this Idempotency-Key failed after it may have had its effect, so it will not be processed again; find out whether the operation happened before you send it again with a new key".into(),
            ),
            Problem::Interrupted => (
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "processing of this request was interrupted (the server may be shutting down) and its outcome is unknown".into(),
            ),
            Problem::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "the idempotency store cannot be reached, so the request was not processed; send it again later".into(),
            ),
            Problem::StoredUnreadable => (
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "the response stored for this key cannot be read; the request was not processed again".into(),
            ),
            Problem::RolledBack => (
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "the request failed and nothing of it was committed; it may be sent again with the same Idempotency-Key".into(),
            ),
            Problem::NotTransactional => (
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "this route is not transactional: its handler asked for the request's transaction, which its idempotency layer does not offer; nothing was committed, and the request may be sent again with the same Idempotency-Key".into(),
            ),
            Problem::NotCommitted => (
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "the request was processed but its transaction could not be committed; send it again with the same Idempotency-Key: you get its response if the commit went through after all, otherwise it is processed once".into(),
            ),
        }
    }

    pub(super) fn response(&self) -> Response<IdempotencyBody> {
        let (status, title, detail) = self.describe();
        let (kind, title) = match title {
            Some(title) => (DRAFT, title),
            None => ("about:blank", status.canonical_reason().unwrap_or_default()),
        };
        let json = serde_json::json!({
            "type": kind,
            "title": title,
            "status": status.as_u16(),
            "detail": detail,
        });
        let mut response = Response::new(IdempotencyBody::new(Full::new(Bytes::from(
            json.to_string(),
        ))));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Problem::InProgress = self {
            response
                .headers_mut()
                .insert(RETRY_AFTER, IN_PROGRESS_RETRY_AFTER);
        }
        response
    }
}
