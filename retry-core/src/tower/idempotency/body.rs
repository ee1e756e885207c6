//! The bodies the layer handles: the boxed body it hands on and answers with, and the response
//! body read as far as the store keeps it and then given back to the client.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::bytes::Bytes;
use ::http::header::HeaderMap;
use ::http_body::{Body, Frame, SizeHint};
use ::http_body_util::BodyExt;
use ::http_body_util::combinators::UnsyncBoxBody;

/// The error type of [`IdempotencyBody`]: any error, boxed.
///
/// ```
/// let error: retry_core::tower::BoxError = "connection reset".into();
/// assert_eq!(error.to_string(), "connection reset");
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body [`Idempotency`](super::Idempotency) hands to its inner service and answers with:
/// any body of [`Bytes`], boxed. axum, hyper and tonic take it as it is.
///
/// ```
/// use http_body::Body as _;
/// use retry_core::tower::IdempotencyBody;
///
/// let body = IdempotencyBody::new(String::from("paid"));
/// assert_eq!(body.size_hint().exact(), Some(4));
/// ```
pub struct IdempotencyBody {
    inner: UnsyncBoxBody<Bytes, BoxError>,
}

impl IdempotencyBody {
    /// Boxes `body`.
    ///
    /// ```
    /// use http_body_util::Full;
    /// use retry_core::tower::IdempotencyBody;
    ///
    /// let body = IdempotencyBody::new(Full::new(bytes::Bytes::from_static(b"{}")));
    /// # drop(body);
    /// ```
    pub fn new<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        IdempotencyBody {
            inner: body.map_err(Into::into).boxed_unsync(),
        }
    }
}

impl Body for IdempotencyBody {
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

impl fmt::Debug for IdempotencyBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyBody").finish_non_exhaustive()
    }
}

/// A body read as far as a limit allows: a response to store, a request to resend.
pub(in crate::tower) enum Buffered {
    /// All of it, with its trailers.
    Complete {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// More than the limit: what was read, and the rest still to stream.
    TooLarge {
        prefix: Bytes,
        rest: IdempotencyBody,
    },
    /// The body failed after `prefix`.
    Failed { prefix: Bytes, error: BoxError },
}

pub(in crate::tower) async fn buffer(mut body: IdempotencyBody, max: usize) -> Buffered {
    if body.size_hint().lower() > u64::try_from(max).unwrap_or(u64::MAX) {
        return Buffered::TooLarge {
            prefix: Bytes::new(),
            rest: body,
        };
    }
    let mut data = Vec::new();
    let mut trailers: Option<HeaderMap> = None;
    loop {
        match body.frame().await {
            None => {
                return Buffered::Complete {
                    data: data.into(),
                    trailers,
                };
            }
            Some(Err(error)) => {
                return Buffered::Failed {
                    prefix: data.into(),
                    error,
                };
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(chunk) => {
                    data.extend_from_slice(&chunk);
                    if data.len() > max {
                        return Buffered::TooLarge {
                            prefix: data.into(),
                            rest: body,
                        };
                    }
                }
                Err(frame) => {
                    if let Ok(more) = frame.into_trailers() {
                        trailers.get_or_insert_default().extend(more);
                    }
                }
            },
        }
    }
}

/// What a [`Resumed`] body ends with.
pub(in crate::tower) enum Tail {
    Trailers(HeaderMap),
    Error(BoxError),
}

/// A response body given back after buffering: the bytes read, then whatever was not read yet,
/// then its trailers or its error.
pub(in crate::tower) struct Resumed {
    head: Option<Bytes>,
    rest: Option<IdempotencyBody>,
    tail: Option<Tail>,
}

impl Resumed {
    pub(in crate::tower) fn new(
        head: Bytes,
        rest: Option<IdempotencyBody>,
        tail: Option<Tail>,
    ) -> Self {
        Resumed {
            head: Some(head).filter(|head| !head.is_empty()),
            rest,
            tail,
        }
    }
}

impl Body for Resumed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(rest) = &mut this.rest {
            match Pin::new(rest).poll_frame(cx) {
                Poll::Ready(None) => this.rest = None,
                other => return other,
            }
        }
        Poll::Ready(match this.tail.take() {
            Some(Tail::Trailers(trailers)) => Some(Ok(Frame::trailers(trailers))),
            Some(Tail::Error(error)) => Some(Err(error)),
            None => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none()
            && self.rest.as_ref().is_none_or(Body::is_end_stream)
            && self.tail.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let head = self
            .head
            .as_ref()
            .map_or(0, |head| u64::try_from(head.len()).unwrap_or(u64::MAX));
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        let mut hint = SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(head));
        }
        hint.set_lower(rest.lower().saturating_add(head));
        hint
    }
}
