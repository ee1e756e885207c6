//! A tower layer for servers (feature `tower`): honour `Caller-Retries` on incoming requests.

use std::task::{Context, Poll};

use ::tower_layer::Layer;
use ::tower_service::Service;

use crate::http::caller_retries;
use crate::scope::{self, InScope};

/// Runs each handler whose request carries `Caller-Retries: ?1` inside a single-attempt retry
/// scope: the caller retries, so the handler's own retries make one attempt each, and its
/// outgoing requests carry the header on.
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
        let honour = caller_retries(request.headers());
        let response = self.inner.call(request);
        if honour {
            scope::caller_retries(response)
        } else {
            scope::unscoped(response)
        }
    }
}
