//! Tower layers (feature `tower`): honour `Caller-Retries` on incoming requests, and add it to
//! outgoing ones made inside a retry; answer duplicate requests with their first response
//! ([`IdempotencyLayer`], the `Idempotency-Key` header); retry the requests of an HTTP client
//! ([`RetryLayer`]); count how often each logical operation arrives, to see retries multiplied
//! upstream ([`AmplificationLayer`]).

use std::task::{Context, Poll};

use ::tower_layer::Layer;
use ::tower_service::Service;

use crate::http::{Announcement, in_scope_of, mark_request};
use crate::scope::InScope;

pub mod amplification;
pub mod idempotency;
pub mod retry;

pub use amplification::{
    Amplification, AmplificationLayer, AmplificationObserver, AmplificationObserverBuilder,
    AmplificationStats, DEFAULT_CAPACITY, DEFAULT_MAX_ROUTES, DEFAULT_UNANNOUNCED_LIMIT,
    DEFAULT_WINDOW, GroupedBy, Operation,
};
pub use idempotency::{
    BoxError, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_KEY_BYTES, DEFAULT_NAMESPACE, Idempotency,
    IdempotencyBody, IdempotencyLayer, InTransaction, Mode, NotApplied, Plain, RefusedHeader,
    RequestTransaction, TransactionGuard,
};
pub use retry::{
    DEFAULT_RETRY_BODY_BYTES, ResponseFuture, Retry, RetryBody, RetryLayer, classify_error,
};

/// Runs each handler whose request carries `Caller-Retries` (`?1`, with or without the
/// attempt's numbers) inside a single-attempt retry scope: the caller retries, so the handler's
/// own retries make one attempt each, and its outgoing requests carry the header on, with the
/// numbers it received (see [`Announcement`]).
///
/// ```
/// use retry_core::tower::CallerRetriesLayer;
/// use tower_layer::Layer;
///
/// # #[derive(Clone)] struct Handler;
/// let service = CallerRetriesLayer.layer(Handler);
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CallerRetriesLayer;

impl<S> Layer<S> for CallerRetriesLayer {
    type Service = CallerRetries<S>;

    fn layer(&self, inner: S) -> CallerRetries<S> {
        CallerRetries { inner }
    }
}

/// The service made by [`CallerRetriesLayer`].
#[derive(Debug, Clone)]
pub struct CallerRetries<S> {
    inner: S,
}

impl<S, B> Service<::http::Request<B>> for CallerRetries<S>
where
    S: Service<::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = InScope<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ::http::Request<B>) -> Self::Future {
        let announced = Announcement::of(request.headers());
        let response = self.inner.call(request);
        in_scope_of(announced, response)
    }
}

/// For clients built on tower (hyper-util, tonic, ...): adds `Caller-Retries` to every
/// request sent inside a retry scope (`?1;attempt=2;max=4`: see [`Announcement`]), so no call site has to remember it. reqwest has no
/// request-level layers: use `retry_core::reqwest::RequestBuilderExt::caller_retries` there.
///
/// ```
/// use retry_core::tower::MarkCallerRetriesLayer;
/// use tower_layer::Layer;
///
/// # #[derive(Clone)] struct HttpClient;
/// let client = MarkCallerRetriesLayer.layer(HttpClient);
/// # let _ = client;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MarkCallerRetriesLayer;

impl<S> Layer<S> for MarkCallerRetriesLayer {
    type Service = MarkCallerRetries<S>;

    fn layer(&self, inner: S) -> MarkCallerRetries<S> {
        MarkCallerRetries { inner }
    }
}

/// The service made by [`MarkCallerRetriesLayer`].
#[derive(Debug, Clone)]
pub struct MarkCallerRetries<S> {
    inner: S,
}

impl<S, B> Service<::http::Request<B>> for MarkCallerRetries<S>
where
    S: Service<::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ::http::Request<B>) -> S::Future {
        mark_request(&mut request);
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::Future;
    use std::pin::Pin;

    use super::*;
    use crate::http::{CALLER_RETRIES, mark_caller_retries};
    use crate::scope;

    /// Answers whether the request carried the header, and whether a retry scope was active
    /// while the handler ran.
    #[derive(Clone)]
    struct Probe;

    impl Service<::http::Request<()>> for Probe {
        type Response = (bool, bool);
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<(bool, bool), Infallible>>>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: ::http::Request<()>) -> Self::Future {
            let marked = request.headers().contains_key(CALLER_RETRIES);
            // Read when the response future is polled, as a handler's retries would.
            Box::pin(async move { Ok((marked, scope::is_active())) })
        }
    }

    #[tokio::test]
    async fn outgoing_requests_are_marked_only_inside_a_retry() {
        let mut client = MarkCallerRetriesLayer.layer(Probe);
        let outside = client.call(::http::Request::new(())).await;
        assert_eq!(outside, Ok((false, false)));
        let inside = scope::caller_retries(async { client.call(::http::Request::new(())).await });
        assert_eq!(inside.await.map(|(marked, _)| marked), Ok(true));
    }

    #[tokio::test]
    async fn incoming_requests_with_the_header_run_in_a_single_attempt_scope() {
        let mut server = CallerRetriesLayer.layer(Probe);
        let plain = server.call(::http::Request::new(())).await;
        assert_eq!(plain, Ok((false, false)));
        let mut marked = ::http::Request::new(());
        marked
            .headers_mut()
            .insert(CALLER_RETRIES, crate::http::CALLER_RETRIES_VALUE);
        assert_eq!(server.call(marked).await, Ok((true, true)));
    }

    /// Answers the `Caller-Retries` a request sent from inside the handler would carry.
    #[derive(Clone)]
    struct Forwarder;

    impl Service<::http::Request<()>> for Forwarder {
        type Response = Option<::http::HeaderValue>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>>>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: ::http::Request<()>) -> Self::Future {
            Box::pin(async {
                let mut outgoing = ::http::HeaderMap::new();
                mark_caller_retries(&mut outgoing);
                Ok(outgoing.remove(CALLER_RETRIES))
            })
        }
    }

    #[tokio::test]
    async fn a_handler_sends_its_callers_attempt_numbers_on() {
        let mut server = CallerRetriesLayer.layer(Forwarder);
        for (incoming, outgoing) in [
            (Some("?1;attempt=3;max=4"), Some("?1;attempt=3;max=4")),
            (
                Some("?1; max=4; attempt=2; hop=1"),
                Some("?1;attempt=2;max=4"),
            ),
            (Some("?1"), Some("?1")),
            (Some("?1;attempt=x"), Some("?1")),
            (None, None),
        ] {
            let mut request = ::http::Request::new(());
            if let Some(value) = incoming {
                request
                    .headers_mut()
                    .insert(CALLER_RETRIES, ::http::HeaderValue::from_static(value));
            }
            let sent = server.call(request).await.unwrap();
            assert_eq!(
                sent.as_ref().map(|v| v.to_str().unwrap()),
                outgoing,
                "{incoming:?}"
            );
        }
    }
}
