//! A request's body read whole, to fingerprint it: at most the layer's limit, or the problem
//! that stops the request.

use ::bytes::Bytes;
use ::http_body::Body;
use ::http_body_util::{BodyExt, LengthLimitError, Limited};

use super::body::BoxError;
use super::problem::Problem;

/// The whole request body, or the problem that stops the request: at most `max` bytes.
pub(super) async fn read_request<B>(body: B, max: usize, function: &str) -> Result<Bytes, Problem>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    // `Content-Length` says so already: refuse without reading.
    if body.size_hint().lower() > u64::try_from(max).unwrap_or(u64::MAX) {
        return Err(Problem::BodyTooLarge { max });
    }
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Problem::BodyTooLarge { max }),
        Err(e) => {
            tracing::debug!(target: "retry_core::tower", function, error = %crate::error_chain(&*e), "request body could not be read");
            Err(Problem::BodyUnreadable)
        }
    }
}
