//! The request body [`RetryLayer`](super::RetryLayer) hands to the client: the bytes it kept,
//! sent again on every attempt, or a body too large to keep, streamed once.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::bytes::Bytes;
use ::http::HeaderMap;
use ::http_body::{Body, Frame, SizeHint};

use super::super::idempotency::{BoxError, IdempotencyBody, Resumed, Tail};

/// The body of each request [`Retry`](super::Retry) sends: build the client for it
/// (hyper-util's `Client::builder(..).build_http::<RetryBody>()`). Its data is [`Bytes`] and its
/// error a [`BoxError`].
///
/// ```
/// use http_body::Body as _;
/// use retry_core::tower::RetryBody;
///
/// let body = RetryBody::from(bytes::Bytes::from_static(b"{}"));
/// assert_eq!(body.size_hint().exact(), Some(2));
/// ```
pub struct RetryBody {
    inner: Resumed,
}

impl RetryBody {
    /// The kept bytes and trailers of a body, for one more attempt.
    pub(super) fn replay(data: &Bytes, trailers: Option<&HeaderMap>) -> Self {
        RetryBody {
            inner: Resumed::new(data.clone(), None, trailers.cloned().map(Tail::Trailers)),
        }
    }

    /// A body larger than the limit: what was read of it, then the rest, once.
    pub(super) fn once(prefix: Bytes, rest: IdempotencyBody) -> Self {
        RetryBody {
            inner: Resumed::new(prefix, Some(rest), None),
        }
    }
}

/// A body of these bytes, for calling the client without the layer (in tests, say).
impl From<Bytes> for RetryBody {
    fn from(data: Bytes) -> Self {
        RetryBody::replay(&data, None)
    }
}

impl Body for RetryBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl fmt::Debug for RetryBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBody").finish_non_exhaustive()
    }
}
