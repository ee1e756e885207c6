//! tonic integration (feature `tonic`): [`Classify`] for [`tonic::Status`], the server's
//! `grpc-retry-pushback-ms` as `Retry-After`, and the `Caller-Retries` marker as gRPC metadata.
//!
//! A `#[retryable]` function (or [`Policy::retry`](crate::Policy::retry)) returning
//! `Result<T, tonic::Status>` then retries a gRPC call with no more code:
//!
//! ```
//! use retry_core::{Classify, Decision, retryable};
//! use tonic::{Code, Status};
//!
//! #[retryable(max = 4, base = "100ms")]
//! async fn quote(id: u64) -> Result<String, Status> {
//!     // `client.get_quote(request).await.map(|r| r.into_inner())`
//! # let _ = id;
//!     Err(Status::invalid_argument("id must be positive"))
//! }
//!
//! assert_eq!(Status::unavailable("connection refused").classify(), Decision::Retry);
//! assert_eq!(Status::new(Code::NotFound, "no such quote").classify(), Decision::Stop);
//! ```
//!
//! # Which codes are retried
//!
//! gRPC's retry design (gRFC A6) leaves the retryable codes to each service's configuration
//! and names `UNAVAILABLE` as the usual one; Google's AIP-194 retries only `UNAVAILABLE` by
//! default. Every gRPC call is a POST, so the rule of the HTTP integration applies: what may
//! have taken effect is not sent again unless the method is idempotent. This crate's table:
//!
//! | code | decision | why |
//! | --- | --- | --- |
//! | `UNAVAILABLE` | retry | down for now, usually before the call ran |
//! | `RESOURCE_EXHAUSTED` | retry | a quota or a rate limit: come back later (size limits stop) |
//! | `DEADLINE_EXCEEDED` | stop; retry with [`retry_idempotent`] | the call may have run |
//! | `ABORTED` | stop | a conflict: retry the whole read-modify-write, above this call |
//! | `CANCELLED` | stop | cancelled, usually by the caller itself |
//! | `UNKNOWN` | stop | failed to an unknown extent: it may have taken effect |
//! | `INTERNAL`, `DATA_LOSS` | stop | a broken invariant or lost data: a person looks |
//! | `FAILED_PRECONDITION` | stop | the system's state must change first |
//! | `INVALID_ARGUMENT`, `OUT_OF_RANGE` | stop | the same request fails the same way |
//! | `NOT_FOUND`, `ALREADY_EXISTS` | stop | the same request fails the same way |
//! | `PERMISSION_DENIED`, `UNAUTHENTICATED` | stop | fix the credentials, not the timing |
//! | `UNIMPLEMENTED` | stop | the server has no such method |
//! | `OK` | stop | not a failure |
//!
//! - **Pushback.** A server may answer with `grpc-retry-pushback-ms` in its trailing metadata
//!   (gRFC A6). On a retryable code a non-negative value is the floor of the next wait, as
//!   HTTP's `Retry-After` is ([`Decision::RetryAfter`]: the policy's `max_retry_after` and
//!   deadline still apply, and the jittered backoff is added above it); a negative or
//!   malformed value means "do not retry": [`Decision::Stop`].
//! - **Size limits.** gRPC implementations also use `RESOURCE_EXHAUSTED` for a message over a
//!   size limit ("received message larger than max", "exceeds maximum size", tonic's "size
//!   limit ... exceeded while decompressing"). That fails the same way every time: it stops.
//!
//! # One layer only, across services
//!
//! gRPC metadata are HTTP/2 headers, so the marker is the HTTP one, `caller-retries: ?1`
//! with the attempt's numbers (`?1;attempt=2;max=4`, [`crate::http::Announcement`]). On the client, [`mark_caller_retries`] is a tonic interceptor that adds
//! it to every call made inside a retry (`InterceptedService::new(channel,
//! mark_caller_retries)`, or `Client::with_interceptor(channel, mark_caller_retries)` with
//! generated clients). On the server, [`honour_caller_retries`] runs one handler's work as a
//! single attempt when the call carries it; for every service of a server at once, put
//! `retry_core::tower::CallerRetriesLayer` (feature `tower`) on it:
//! `Server::builder().layer(CallerRetriesLayer)`.

use std::future::Future;
use std::time::Duration;

use ::tonic::metadata::{MetadataMap, MetadataValue};
use ::tonic::{Code, Request, Status};

use crate::classify::{Classify, Decision};
use crate::http::{Announcement, current_announcement, in_scope_of};
use crate::scope::InScope;

/// The trailing metadata a server sets to say when to come back, in milliseconds (gRFC A6).
pub const PUSHBACK: &str = "grpc-retry-pushback-ms";

/// The `Caller-Retries` marker as a gRPC metadata key: the HTTP header's name.
pub const CALLER_RETRIES: &str = "caller-retries";

/// See the [module](self)'s table. The reason is the code and the message:
/// `"UNAVAILABLE: connection refused"`.
///
/// ```
/// use retry_core::{Classify, Decision};
/// use std::time::Duration;
/// use tonic::Status;
///
/// let mut busy = Status::resource_exhausted("quota: 10 calls per second");
/// busy.metadata_mut().insert("grpc-retry-pushback-ms", "250".parse().unwrap());
/// assert_eq!(busy.classify(), Decision::RetryAfter(Duration::from_millis(250)));
/// assert_eq!(busy.reason().as_deref(), Some("RESOURCE_EXHAUSTED: quota: 10 calls per second"));
///
/// let mut refused = Status::unavailable("draining");
/// refused.metadata_mut().insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
/// assert_eq!(refused.classify(), Decision::Stop, "the server says: do not retry");
/// ```
impl Classify for Status {
    fn classify(&self) -> Decision {
        decide(self, false)
    }

    fn reason(&self) -> Option<String> {
        Some(match self.message() {
            "" => code_name(self.code()).to_owned(),
            message => format!("{}: {message}", code_name(self.code())),
        })
    }
}

/// The classification of [`Status`] for a method that is safe to run twice (a read, or a write
/// that carries its own idempotency key): the same table, and `DEADLINE_EXCEEDED` is retried
/// too. For `retry_if = retry_core::tonic::retry_idempotent` or
/// [`RetryCall::retry_if`](crate::RetryCall::retry_if).
///
/// ```
/// use retry_core::{Classify, Decision, retryable};
/// use retry_core::tonic::retry_idempotent;
/// use tonic::Status;
///
/// #[retryable(max = 3, base = "50ms", retry_if = retry_idempotent)]
/// async fn read_balance(account: u64) -> Result<u64, Status> {
///     Ok(account * 0)
/// }
///
/// let late = Status::deadline_exceeded("took longer than 2s");
/// assert_eq!(late.classify(), Decision::Stop);
/// assert_eq!(retry_idempotent(&late), Decision::Retry);
/// ```
pub fn retry_idempotent(status: &Status) -> Decision {
    decide(status, true)
}

fn decide(status: &Status, idempotent: bool) -> Decision {
    let retryable = match status.code() {
        Code::Unavailable => true,
        Code::ResourceExhausted => !over_size_limit(status.message()),
        Code::DeadlineExceeded => idempotent,
        _ => false,
    };
    if !retryable {
        return Decision::Stop;
    }
    match pushback(status.metadata()) {
        None => Decision::Retry,
        Some(Some(wait)) => Decision::RetryAfter(wait),
        Some(None) => Decision::Stop,
    }
}

/// The server's pushback: `None` when it sent none, `Some(None)` when it asked not to retry (a
/// negative or malformed value), else the wait.
fn pushback(metadata: &MetadataMap) -> Option<Option<Duration>> {
    let value = metadata.get(PUSHBACK)?;
    let millis = value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse::<i64>().ok())
        .and_then(|millis| u64::try_from(millis).ok());
    if millis.is_none() {
        tracing::debug!(target: "retry_core::tonic", value = ?value, "grpc-retry-pushback-ms asks not to retry");
    }
    Some(millis.map(Duration::from_millis))
}

/// What gRPC implementations say when a message is over a size limit: `RESOURCE_EXHAUSTED`,
/// but no later attempt fits either (grpc-go, grpc-java, tonic).
const SIZE_LIMIT: &[&str] = &[
    "larger than max",
    "exceeds maximum size",
    "size limit",
    "more than 4gb",
];

fn over_size_limit(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    SIZE_LIMIT.iter().any(|known| message.contains(known))
}

/// The code's name as the gRPC specification writes it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A tonic interceptor: adds `caller-retries` to a call made inside a retry, so the server
/// does not retry on its behalf, with the attempt's numbers (`?1;attempt=1;max=3`: see
/// [`Announcement`]); outside any retry the call goes out as it was.
///
/// ```
/// use retry_core::tonic::mark_caller_retries;
///
/// let request = mark_caller_retries(tonic::Request::new(())).unwrap();
/// assert!(request.metadata().get("caller-retries").is_none(), "not inside a retry");
///
/// let marked = retry_core::scope::caller_retries(async {
///     mark_caller_retries(tonic::Request::new(())).unwrap()
/// });
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert_eq!(marked.await.metadata().get("caller-retries").unwrap(), "?1");
///
/// let policy = retry_core::Policy::new().max_attempts(3);
/// let attempt = policy.retry(|| async { mark_caller_retries(tonic::Request::new(())) });
/// let announced = attempt.await.unwrap();
/// assert_eq!(announced.metadata().get("caller-retries").unwrap(), "?1;attempt=1;max=3");
/// # });
/// ```
///
/// Around a channel (or any gRPC service), with tonic's own `InterceptedService`:
///
/// ```
/// use retry_core::tonic::mark_caller_retries;
/// use tonic::service::interceptor::InterceptedService;
///
/// # fn wrap<S>(channel: S) {
/// let client = tonic::client::Grpc::new(InterceptedService::new(channel, mark_caller_retries));
/// # drop(client);
/// # }
/// ```
// `Result` with `Status` is the signature tonic's `Interceptor` asks for; this one never fails.
#[allow(clippy::result_large_err, clippy::unnecessary_wraps)]
pub fn mark_caller_retries(mut request: Request<()>) -> Result<Request<()>, Status> {
    if let Some(announced) = current_announcement() {
        let value = MetadataValue::try_from(announced.to_string())
            .unwrap_or_else(|_| MetadataValue::from_static("?1"));
        request.metadata_mut().insert(CALLER_RETRIES, value);
    }
    Ok(request)
}

/// Whether an incoming call says its caller retries it (`caller-retries: ?1`, with or without
/// the attempt's numbers).
///
/// ```
/// use retry_core::tonic::caller_retries;
///
/// let mut request = tonic::Request::new(());
/// assert!(!caller_retries(&request));
/// request.metadata_mut().insert("caller-retries", "?1".parse().unwrap());
/// assert!(caller_retries(&request));
/// ```
pub fn caller_retries<T>(request: &Request<T>) -> bool {
    announcement(request).is_some()
}

/// What an incoming call's `caller-retries` says, if it marks the call (see
/// [`Announcement::parse`]).
///
/// ```
/// use retry_core::http::Announcement;
/// use retry_core::tonic::announcement;
///
/// let mut request = tonic::Request::new(());
/// request.metadata_mut().insert("caller-retries", "?1;attempt=2;max=3".parse().unwrap());
/// assert_eq!(announcement(&request), Some(Announcement::new(2, 3)));
/// ```
pub fn announcement<T>(request: &Request<T>) -> Option<Announcement> {
    request
        .metadata()
        .get(CALLER_RETRIES)
        .and_then(|value| Announcement::parse(value.as_bytes()))
}

/// Runs a handler's `work` as a single attempt when the call it serves carries
/// `caller-retries: ?1`: every retry inside it makes one attempt, and the calls it makes carry
/// the marker on. Without the marker `work` runs as it is.
///
/// ```
/// use retry_core::retryable;
/// use retry_core::tonic::honour_caller_retries;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use tonic::{Request, Response, Status};
///
/// static LOOKUPS: AtomicU32 = AtomicU32::new(0);
///
/// #[retryable(max = 3, base = "1ms")]
/// async fn look_up(id: u64) -> Result<u64, Status> {
///     LOOKUPS.fetch_add(1, Ordering::SeqCst);
///     Err(Status::unavailable("database restarting"))
/// }
///
/// async fn get_quote(request: Request<u64>) -> Result<Response<u64>, Status> {
///     let id = *request.get_ref();
///     let price = honour_caller_retries(&request, look_up(id)).await?;
///     Ok(Response::new(price))
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut marked = Request::new(7);
/// marked.metadata_mut().insert("caller-retries", "?1".parse().unwrap());
/// assert!(get_quote(marked).await.is_err());
/// assert_eq!(LOOKUPS.load(Ordering::SeqCst), 1, "the caller retries: one attempt here");
/// # }
/// ```
pub fn honour_caller_retries<T, F: Future>(request: &Request<T>, work: F) -> InScope<F> {
    in_scope_of(announcement(request), work)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_pushback(mut status: Status, value: &'static str) -> Status {
        status
            .metadata_mut()
            .insert(PUSHBACK, MetadataValue::from_static(value));
        status
    }

    #[test]
    fn the_table() {
        let retried = [Code::Unavailable, Code::ResourceExhausted];
        let stopped = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        for code in retried {
            assert_eq!(
                Status::new(code, "").classify(),
                Decision::Retry,
                "{code:?}"
            );
        }
        for code in stopped {
            assert_eq!(Status::new(code, "").classify(), Decision::Stop, "{code:?}");
            let idempotent = if code == Code::DeadlineExceeded {
                Decision::Retry
            } else {
                Decision::Stop
            };
            assert_eq!(
                retry_idempotent(&Status::new(code, "")),
                idempotent,
                "{code:?}"
            );
        }
    }

    #[test]
    fn pushback_is_a_floor_or_a_refusal() {
        let wait = with_pushback(Status::unavailable("busy"), "1500");
        assert_eq!(
            wait.classify(),
            Decision::RetryAfter(Duration::from_millis(1500))
        );
        for refusal in ["-1", "soon", "1.5", ""] {
            let status = with_pushback(Status::resource_exhausted("quota"), refusal);
            assert_eq!(status.classify(), Decision::Stop, "{refusal:?}");
        }
        // Pushback never makes a code that stops retryable.
        let bad = with_pushback(Status::invalid_argument("no"), "10");
        assert_eq!(bad.classify(), Decision::Stop);
    }

    #[test]
    fn a_message_over_a_size_limit_is_not_retried() {
        for message in [
            "grpc: received message larger than max (5000000 vs. 4194304)",
            "gRPC message exceeds maximum size 4194304: 5000000",
            "Error decompressing: size limit, of 4194304 bytes, exceeded while decompressing",
            "Cannot return body with more than 4GB of data but got 5000000000 bytes",
        ] {
            assert_eq!(
                Status::resource_exhausted(message).classify(),
                Decision::Stop,
                "{message}"
            );
        }
    }

    #[test]
    fn the_metadata_key_is_the_http_header() {
        assert_eq!(CALLER_RETRIES, crate::http::CALLER_RETRIES.as_str());
        assert_eq!(
            Status::unavailable("").reason().as_deref(),
            Some("UNAVAILABLE")
        );
    }
}
