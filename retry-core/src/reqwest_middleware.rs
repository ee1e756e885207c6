//! reqwest-middleware integration (feature `reqwest-middleware`): [`RetryMiddleware`], the
//! retries of [`RetryLayer`](crate::tower::RetryLayer) for a `reqwest_middleware` client stack
//! (reqwest-middleware 0.5, on reqwest 0.13).
//!
//! The same state machine as `#[retryable]` and [`Policy::retry`] decides (attempts, backoff,
//! jitter, deadline, `attempt_timeout`, budget, `Retry-After`), with the same rules about the
//! request:
//!
//! - a 4xx or 5xx response is a failure classified by its status and `Retry-After`
//!   ([`classify_status`]); a transport error by [`reqwest::Error`]'s [`Classify`]; an error
//!   of another middleware further down is not retried. On give-up the caller gets what the
//!   last attempt got: the `503` as `Ok(response)`, or the error;
//! - a POST or PATCH without `Idempotency-Key` that may have reached the server is not sent
//!   again; a refused connection is;
//! - a request whose body cannot be cloned (a stream, `Body::wrap_stream`) is sent once and
//!   not retried: the bytes are gone;
//! - each attempt carries `Caller-Retries: ?1`, and a request that already carries it (or a
//!   call made inside another retry in the same task) makes a single attempt;
//! - with the feature `opentelemetry`, a resend sets `http.request.resend_count` (1, 2, ...) on
//!   the current OpenTelemetry span, as [`send_checked`](crate::reqwest::RequestBuilderExt::send_checked)
//!   does.
//!
//! Put it first in the stack, so that the middleware after it runs on every attempt, and turn
//! reqwest's own retries off ([`client_builder`](crate::reqwest::client_builder)): they are a
//! second layer under this one. It replaces `reqwest-retry`'s `RetryTransientMiddleware`; use
//! one of the two.

use std::sync::{Mutex, PoisonError};

use ::http::Extensions;
use ::reqwest::{Request, Response};
use ::reqwest_middleware::{Error, Middleware, Next};

use crate::classify::{Classify, Decision};
use crate::http::{Announcement, Failed, Sent, classify_status, in_scope_of, mark_caller_retries};
use crate::policy::Policy;
use crate::reqwest::transport_text;

/// What tracing and metrics call the retries of a middleware not given a
/// [`RetryMiddleware::name`].
const DEFAULT_NAME: &str = "RetryMiddleware";

/// Retries a `reqwest_middleware` client's requests with a [`Policy`]; see the
/// [module](self) for what it decides.
///
/// ```
/// use retry_core::Policy;
/// use retry_core::reqwest_middleware::RetryMiddleware;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let policy = Policy::new().max_attempts(3).base(Duration::from_millis(10));
/// let client = reqwest_middleware::ClientBuilder::new(
///     retry_core::reqwest::client_builder().build().unwrap(),
/// )
/// .with(RetryMiddleware::new(policy).name("quotes"))
/// .build();
///
/// // Port 9 on loopback: refused, three times (refused is always worth another try).
/// let error = client.get("http://127.0.0.1:9/quote").send().await.unwrap_err();
/// assert!(error.is_connect());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RetryMiddleware {
    policy: Policy,
    name: &'static str,
}

impl RetryMiddleware {
    /// Retries with `policy`.
    ///
    /// ```
    /// use retry_core::{Policy, reqwest_middleware::RetryMiddleware};
    /// let retries = RetryMiddleware::new(Policy::new().max_attempts(4));
    /// # drop(retries);
    /// ```
    pub fn new(policy: Policy) -> Self {
        RetryMiddleware {
            policy,
            name: DEFAULT_NAME,
        }
    }

    /// Names the retries in tracing events and metrics (default `"RetryMiddleware"`).
    ///
    /// ```
    /// use retry_core::{Policy, reqwest_middleware::RetryMiddleware};
    /// let retries = RetryMiddleware::new(Policy::new()).name("payments-client");
    /// # drop(retries);
    /// ```
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    async fn send(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response, Error> {
        // A body that cannot be cloned is read as it is sent: there is nothing to send again.
        let Some(template) = request.try_clone() else {
            tracing::debug!(target: "retry_core::reqwest_middleware",
                function = self.name,
                "request body is a stream: sent once, not retried"
            );
            let mut request = request;
            // Marked only inside an outer retry: this middleware does not retry it.
            mark_caller_retries(request.headers_mut());
            return next.run(request, extensions).await;
        };
        let sent = &Sent::new(request.method(), request.headers());
        let (template, next) = (&template, &next);
        // Each attempt lends the extensions on to the rest of the stack, one after another: an
        // attempt takes them from here and puts them back when it ends, also when
        // `attempt_timeout` drops it (the lock is never held across an `.await`).
        let lent = &Mutex::new(Some(extensions));
        let mut first = Some(request);
        let outcome = self
            .policy
            .retry(move || {
                let request = first.take().or_else(|| template.try_clone());
                async move {
                    let mut borrowed = Borrowed::take(lent);
                    let (Some(mut request), Some(extensions)) = (request, borrowed.get()) else {
                        // Neither happens: `template` was cloned once, so it clones again,
                        // and attempts never overlap.
                        let error = Error::middleware(Unrepeatable);
                        let what = Unrepeatable.to_string();
                        return Err(sent.failed(error, Decision::Stop, false, what));
                    };
                    // Made inside the retry scope: the request says that its caller retries it.
                    mark_caller_retries(request.headers_mut());
                    sent.note_sending();
                    #[cfg(feature = "opentelemetry")]
                    crate::otel::record_resend();
                    match next.clone().run(request, extensions).await {
                        Ok(response) => {
                            let status = response.status();
                            match classify_status(status, response.headers()) {
                                None => Ok(response),
                                Some(decision) => {
                                    Err(sent.failed_answer(response, status, decision))
                                }
                            }
                        }
                        Err(error) => Err(failed(sent, error)),
                    }
                }
            })
            .name(self.name)
            .timed()
            .await;
        Failed::settle(outcome, Error::middleware)
    }
}

/// A failed attempt: reqwest's error classified as [`reqwest::Error`] is (a connection that was
/// never made reached nothing), another middleware's error not retried.
fn failed(sent: &Sent, error: Error) -> Failed<Response, Error> {
    match &error {
        Error::Reqwest(e) => {
            let (decision, connected, what) = (e.classify(), !e.is_connect(), transport_text(e));
            sent.failed(error, decision, connected, what)
        }
        Error::Middleware(e) => {
            let what = crate::error_chain(&**e).to_string();
            sent.failed(error, Decision::Stop, true, what)
        }
    }
}

/// The extensions, borrowed by one attempt and given back when it ends.
struct Borrowed<'l, 'e> {
    lent: &'l Mutex<Option<&'e mut Extensions>>,
    extensions: Option<&'e mut Extensions>,
}

impl<'l, 'e> Borrowed<'l, 'e> {
    fn take(lent: &'l Mutex<Option<&'e mut Extensions>>) -> Self {
        let extensions = lent.lock().unwrap_or_else(PoisonError::into_inner).take();
        Borrowed { lent, extensions }
    }

    fn get(&mut self) -> Option<&mut Extensions> {
        self.extensions.as_deref_mut()
    }
}

impl Drop for Borrowed<'_, '_> {
    fn drop(&mut self) {
        if let Some(extensions) = self.extensions.take() {
            *self.lent.lock().unwrap_or_else(PoisonError::into_inner) = Some(extensions);
        }
    }
}

/// An attempt that could not be made again: the request did not clone, or the extensions were
/// not there. Neither happens (see `RetryMiddleware::send`); said rather than panicking.
#[derive(Debug)]
struct Unrepeatable;

impl std::fmt::Display for Unrepeatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request could not be made again for another attempt")
    }
}

impl std::error::Error for Unrepeatable {}

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response, Error> {
        // Somebody above may retry this request already: then one attempt, announced with
        // that caller's numbers.
        let announced = Announcement::of(request.headers());
        in_scope_of(announced, self.send(request, extensions, next)).await
    }
}
