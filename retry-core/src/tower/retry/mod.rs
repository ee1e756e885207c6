//! [`RetryLayer`]: the retries of `#[retryable]` around any HTTP client that is a tower
//! `Service` (hyper-util's legacy `Client`, a service stack of your own), for the call sites
//! that cannot be annotated. (gRPC answers its failures in trailers, which an HTTP layer does
//! not see: for tonic, retry the call on `tonic::Status`, feature `tonic`.)
//!
//! Every decision is the one `#[retryable]` and [`Policy::retry`] take, in the same state
//! machine: the policy's attempts, backoff, jitter, deadline, `attempt_timeout` and
//! [`RetryBudget`](crate::RetryBudget); a response's `Retry-After` as the floor of the next
//! wait; one layer only. What the layer adds is what only it knows, the request:
//!
//! - **What is a failure.** A 4xx or 5xx response is classified by its status and
//!   `Retry-After` ([`classify_status`]; change it with [`RetryLayer::classify_responses`]);
//!   1xx, 2xx and 3xx are answers. The client's errors are read from their source chain
//!   ([`classify_error`]; change it with [`RetryLayer::classify_errors`]). On give-up the caller
//!   gets what the last attempt got: the `503` response as `Ok`, or the error.
//! - **What may be sent twice.** A POST or PATCH without `Idempotency-Key` that may have
//!   reached the server (a 5xx, a reset after sending, an attempt cut off by
//!   `attempt_timeout`) is not sent again; a connection that was refused never reached it and
//!   is retried.
//! - **The body.** To send a request again the layer keeps its body: it is read before the
//!   first attempt, up to [`DEFAULT_RETRY_BODY_BYTES`] (change it with
//!   [`RetryLayer::body_limit`]). **A body over the limit is sent once and never retried**
//!   (nor kept: what was read is streamed on, then the rest), and a body that fails while it
//!   is read fails the call without sending anything. The client gets a [`RetryBody`].
//! - **One layer only.** Each attempt carries `Caller-Retries: ?1;attempt=N;max=M`, so the
//!   services it calls do not retry on its behalf and can see which attempt it is (see
//!   [`crate::http`]). A request that already carries the header, or a call made inside
//!   another retry in the same task (a `#[retryable]` function calling this client), makes a
//!   single attempt: the layer above retries, and the header keeps that layer's numbers.
//!
//! The response future is boxed (the state machine borrows the policy, and the layer owns it),
//! so the client's service, future and response must be `Send`.

use std::error::Error;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::bytes::Bytes;
use ::http::{HeaderMap, Request, Response, StatusCode, request::Parts};
use ::http_body::Body;
use ::tower_layer::Layer;
use ::tower_service::Service;

use super::idempotency::{BoxError, Buffered, IdempotencyBody, buffer};
use crate::classify::Decision;
use crate::http::{Announcement, Failed, Sent, classify_status, in_scope_of, mark_request};
use crate::policy::Policy;

mod body;
mod transport;

pub use body::RetryBody;
pub use transport::classify_error;

/// How many bytes of a request body [`RetryLayer`] keeps to send it again, unless
/// [`RetryLayer::body_limit`] says otherwise: 1 MiB, what
/// [`IdempotencyLayer`](super::IdempotencyLayer) reads by default on the other side.
///
/// ```
/// assert_eq!(retry_core::tower::DEFAULT_RETRY_BODY_BYTES, 1 << 20);
/// ```
pub const DEFAULT_RETRY_BODY_BYTES: usize = 1 << 20;

/// What tracing and metrics call the retries of a layer not given a [`RetryLayer::name`].
const DEFAULT_NAME: &str = "RetryLayer";

/// Retries the requests of an HTTP client service with a [`Policy`]: see the
/// [module](self) for what it decides and why.
///
/// ```
/// use std::time::Duration;
/// use http_body_util::Empty;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use retry_core::Policy;
/// use retry_core::tower::{RetryBody, RetryLayer};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // The client takes the layer's body type.
/// let http = Client::builder(TokioExecutor::new()).build_http::<RetryBody>();
/// let policy = Policy::new().max_attempts(3).base(Duration::from_millis(10));
/// let client = RetryLayer::new(policy).name("quotes").layer(http);
///
/// // Port 9 on loopback: refused, three times (refused is always worth another try).
/// let request = http::Request::get("http://127.0.0.1:9/quote").body(Empty::<bytes::Bytes>::new());
/// let error = client.oneshot(request.unwrap()).await.unwrap_err();
/// assert!(error.to_string().contains("Connect"), "{error}");
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RetryLayer {
    settings: Arc<Settings>,
}

#[derive(Debug, Clone)]
struct Settings {
    policy: Policy,
    body_limit: usize,
    name: &'static str,
    responses: fn(StatusCode, &HeaderMap) -> Option<Decision>,
    errors: fn(&(dyn Error + 'static)) -> Decision,
}

impl RetryLayer {
    /// Retries with `policy`; responses are classified by [`classify_status`], errors by
    /// [`classify_error`].
    ///
    /// ```
    /// use retry_core::{Policy, tower::RetryLayer};
    /// let layer = RetryLayer::new(Policy::new().max_attempts(4));
    /// # drop(layer);
    /// ```
    pub fn new(policy: Policy) -> Self {
        RetryLayer {
            settings: Arc::new(Settings {
                policy,
                body_limit: DEFAULT_RETRY_BODY_BYTES,
                name: DEFAULT_NAME,
                responses: classify_status,
                errors: classify_error,
            }),
        }
    }

    fn settings(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// Keeps request bodies of at most `bytes` to send them again (default
    /// [`DEFAULT_RETRY_BODY_BYTES`]); a larger body is sent once and not retried.
    ///
    /// ```
    /// use retry_core::{Policy, tower::RetryLayer};
    /// let layer = RetryLayer::new(Policy::new()).body_limit(64 * 1024);
    /// # drop(layer);
    /// ```
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.settings().body_limit = bytes;
        self
    }

    /// Names the retries in tracing events and metrics (default `"RetryLayer"`), as a
    /// `#[retryable]` function's name does.
    ///
    /// ```
    /// use retry_core::{Policy, tower::RetryLayer};
    /// let layer = RetryLayer::new(Policy::new()).name("quotes-client");
    /// # drop(layer);
    /// ```
    pub fn name(mut self, name: &'static str) -> Self {
        self.settings().name = name;
        self
    }

    /// Classifies responses with `classify` instead of [`classify_status`]: `None` for an
    /// answer, `Some(decision)` for a failure. The layer still refuses to resend a POST or
    /// PATCH without `Idempotency-Key` after a response other than a 4xx.
    ///
    /// ```
    /// use http::{HeaderMap, StatusCode};
    /// use retry_core::{Decision, Policy, http::classify_status, tower::RetryLayer};
    ///
    /// // A 404 right after a write may be a replica that has not caught up.
    /// fn read_after_write(status: StatusCode, headers: &HeaderMap) -> Option<Decision> {
    ///     match status {
    ///         StatusCode::NOT_FOUND => Some(Decision::Retry),
    ///         _ => classify_status(status, headers),
    ///     }
    /// }
    /// let layer = RetryLayer::new(Policy::new()).classify_responses(read_after_write);
    /// # drop(layer);
    /// ```
    pub fn classify_responses(
        mut self,
        classify: fn(StatusCode, &HeaderMap) -> Option<Decision>,
    ) -> Self {
        self.settings().responses = classify;
        self
    }

    /// Classifies the client's errors with `classify` instead of [`classify_error`]. Whether
    /// the request may have reached the server is still read by the layer, so the POST rule
    /// holds.
    ///
    /// ```
    /// use retry_core::{Decision, Policy, tower::{RetryLayer, classify_error}};
    /// use std::error::Error;
    ///
    /// // Only connection failures; anything else is the caller's to handle.
    /// fn connections_only(error: &(dyn Error + 'static)) -> Decision {
    ///     match error.to_string().contains("Connect") {
    ///         true => classify_error(error),
    ///         false => Decision::Stop,
    ///     }
    /// }
    /// let layer = RetryLayer::new(Policy::new()).classify_errors(connections_only);
    /// # drop(layer);
    /// ```
    pub fn classify_errors(mut self, classify: fn(&(dyn Error + 'static)) -> Decision) -> Self {
        self.settings().errors = classify;
        self
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            inner,
            settings: Arc::clone(&self.settings),
        }
    }
}

/// The service made by [`RetryLayer`].
#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    settings: Arc<Settings>,
}

/// The response future of [`Retry`]: the response of the last attempt, or its error (boxed, as
/// tower's own middleware does; an attempt cut off by `attempt_timeout` is an
/// [`Elapsed`](crate::Elapsed)).
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct ResponseFuture<R> {
    inner: Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>,
}

impl<R> Future for ResponseFuture<R> {
    type Output = Result<R, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<R> std::fmt::Debug for ResponseFuture<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, B, ResB> Service<Request<B>> for Retry<S>
where
    S: Service<Request<RetryBody>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: Send + 'static,
{
    type Response = Response<ResB>;
    type Error = BoxError;
    type Future = ResponseFuture<Response<ResB>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service that said it was ready makes the first attempt; a clone takes its place
        // (tower's pattern: a clone is not ready until polled).
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let settings = Arc::clone(&self.settings);
        // Somebody above may retry this request already (a proxy forwarded its marker): then
        // one attempt, announced with that caller's numbers.
        let announced = Announcement::of(request.headers());
        let send = async move { settings.send(ready, request).await };
        ResponseFuture {
            inner: Box::pin(in_scope_of(announced, send)),
        }
    }
}

impl Settings {
    async fn send<S, B, ResB>(
        &self,
        ready: S,
        request: Request<B>,
    ) -> Result<Response<ResB>, BoxError>
    where
        S: Service<Request<RetryBody>, Response = Response<ResB>> + Clone,
        S::Error: Into<BoxError>,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = request.into_parts();
        match buffer(IdempotencyBody::new(body), self.body_limit).await {
            Buffered::Complete { data, trailers } => {
                self.retry(ready, &parts, &data, trailers.as_ref()).await
            }
            Buffered::TooLarge { prefix, rest } => {
                tracing::debug!(target: "retry_core::tower",
                    function = self.name,
                    limit = self.body_limit,
                    "request body over the limit: sent once, not retried"
                );
                let mut request = Request::from_parts(parts, RetryBody::once(prefix, rest));
                // Marked only inside an outer retry: this layer does not retry it.
                mark_request(&mut request);
                let mut ready = ready;
                ready.call(request).await.map_err(Into::into)
            }
            // Nothing was sent: the request could not be read.
            Buffered::Failed { error, .. } => Err(error),
        }
    }

    /// Sends the request with `data` for its body, through the retry state machine.
    async fn retry<S, ResB>(
        &self,
        ready: S,
        parts: &Parts,
        data: &Bytes,
        trailers: Option<&HeaderMap>,
    ) -> Result<Response<ResB>, BoxError>
    where
        S: Service<Request<RetryBody>, Response = Response<ResB>> + Clone,
        S::Error: Into<BoxError>,
    {
        let sent = &Sent::new(&parts.method, &parts.headers);
        let spare = ready.clone();
        let mut first = Some(ready);
        let outcome = self
            .policy
            .retry(move || {
                let fresh = first.is_none();
                let mut service = first.take().unwrap_or_else(|| spare.clone());
                let mut request =
                    Request::from_parts(copy(parts), RetryBody::replay(data, trailers));
                // Made inside the retry scope: the request says that its caller retries it.
                mark_request(&mut request);
                async move {
                    if fresh {
                        poll_fn(|cx| service.poll_ready(cx))
                            .await
                            .map_err(|e| self.failed(sent, e.into(), false))?;
                    }
                    sent.note_sending();
                    match service.call(request).await {
                        Ok(response) => self.answered(sent, response),
                        Err(error) => {
                            let error = error.into();
                            let reached = transport::may_have_reached(&*error);
                            Err(self.failed(sent, error, reached))
                        }
                    }
                }
            })
            .name(self.name)
            .timed()
            .await;
        Failed::settle(outcome, |elapsed| Box::new(elapsed))
    }

    // The `Err` holds the same response the `Ok` does: boxing it would not make the `Result`
    // smaller, only the failure path slower.
    #[allow(clippy::result_large_err)]
    fn answered<ResB>(
        &self,
        sent: &Sent,
        response: Response<ResB>,
    ) -> Result<Response<ResB>, Failed<Response<ResB>, BoxError>> {
        let status = response.status();
        match (self.responses)(status, response.headers()) {
            None => Ok(response),
            Some(decision) => Err(sent.failed_answer(response, status, decision)),
        }
    }

    fn failed<R>(&self, sent: &Sent, error: BoxError, reached: bool) -> Failed<R, BoxError> {
        let decision = (self.errors)(&*error);
        // "client error (Connect): tcp connect error: Connection refused (os error 111)"
        let what = crate::error_chain(&*error).to_string();
        sent.failed(error, decision, reached, what)
    }
}

/// The head of a request, for one more attempt (`Parts` is not `Clone`).
fn copy(parts: &Parts) -> Parts {
    let (mut copy, ()) = Request::new(()).into_parts();
    copy.method = parts.method.clone();
    copy.uri = parts.uri.clone();
    copy.version = parts.version;
    copy.headers = parts.headers.clone();
    copy.extensions = parts.extensions.clone();
    copy
}
