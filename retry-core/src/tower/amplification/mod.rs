//! [`AmplificationLayer`]: retries multiplied upstream, seen where they land.
//!
//! Retries stacked in layers that are not this library's (a gateway's default, a mesh's, an
//! HTTP client's own loop) multiply: 4 × 4 × 4 = 64 requests for one button press, and the
//! team that receives them is the last to know ("we sent only once, but their log shows 40").
//! The library's own clients keep retries in one layer and say so (`Caller-Retries`); this
//! layer measures what the others do, at the receiving service, from the requests alone.
//!
//! # What it counts
//!
//! Each request is grouped into a logical operation by the best identity it carries:
//!
//! 1. its `Idempotency-Key` (under the client's scope, in an
//!    [`IdempotencyLayer`](crate::tower::IdempotencyLayer)), the key a client sends again on
//!    every resend of one operation;
//! 2. else the trace id of its W3C `traceparent`, which a proxy forwards unchanged;
//! 3. else nothing: the request is only counted by what it announces.
//!
//! with its method and path (one key sent to two resources is two operations). An operation is
//! counted for a window from its first arrival ([`DEFAULT_WINDOW`], 30 s); an arrival after
//! it opens a new window. For each operation the observer keeps its arrivals, the largest
//! attempt and `max` its requests announced (`Caller-Retries: ?1;attempt=2;max=4`, see
//! [`Announcement`](crate::http::Announcement)) and how many distinct sources sent it (by
//! `Via`, `X-Forwarded-For`, `Forwarded` and `User-Agent`).
//!
//! # When it warns
//!
//! Layers that are not ours announce nothing, so their arrivals carry no attempt number. The
//! observer does not guess one: it compares the operation's arrivals with what one retrying
//! layer may send. That is the largest `max` any of its requests announced, or, when none
//! announced one, [`DEFAULT_UNANNOUNCED_LIMIT`] (5, gRPC's ceiling on one client's attempts;
//! [`unannounced_limit`](AmplificationObserverBuilder::unannounced_limit) changes it). The
//! first arrival past it counts the operation as amplified (the
//! `retry_core_amplified_operations_total` counter) and writes a WARN, at most one per route
//! a minute (the others at DEBUG):
//!
//! ```text
//! WARN retry_core::amplification: operation key "8e03978e" arrived 16 times within 1.2 s;
//!   the largest attempt number announced was 4 (max 4): retries are layered upstream
//!   (from 1 source it can tell apart; this one: via: 1.1 gateway; user-agent: reqwest)
//! ```
//!
//! # Metrics
//!
//! | name | kind | labels | |
//! |---|---|---|---|
//! | `retry_core_arrivals_total` | counter | `route`, `attempt` (`first`, `retry`, `unannounced`) | requests seen; `attempt="retry"` announced an attempt after the first |
//! | `retry_core_operation_arrivals` | histogram | `route`, `grouped_by` (`idempotency_key`, `traceparent`) | arrivals of one operation, recorded when its window ends |
//! | `retry_core_amplified_operations_total` | counter | `route` | operations that arrived more often than allowed |
//!
//! The retry share of a route is `retry_core_arrivals_total{attempt="retry"}` over all of
//! `retry_core_arrivals_total`. The histogram gets an operation when its window has ended and
//! a later request (or [`AmplificationObserver::operations`]) notices, when the table needs
//! its room, or at [`AmplificationObserver::flush`].
//!
//! # Cost and bounds
//!
//! The table holds [`DEFAULT_CAPACITY`] operations (10,000, about 1.3 MB), allocated when the
//! observer is built and never grown: when it is full, the oldest operation is closed to make
//! room. It is cut into 16 shards, each behind a lock held for a few map operations and never
//! across an `.await`; the layer adds nothing to the response future, never fails a request
//! and never rejects one. A malformed `Caller-Retries` or `traceparent` is simply not counted
//! as an announcement or an identity. Route labels are capped at [`DEFAULT_MAX_ROUTES`]
//! (then `other`). BENCHMARKS.md has its cost per request.

use std::borrow::Cow;
use std::task::{Context, Poll};

use ::http::Request;
use ::tower_layer::Layer;
use ::tower_service::Service;

mod observer;
mod request;
mod table;

pub use observer::{
    AmplificationObserver, AmplificationObserverBuilder, AmplificationStats, DEFAULT_CAPACITY,
    DEFAULT_MAX_ROUTES, DEFAULT_UNANNOUNCED_LIMIT, DEFAULT_WINDOW, GroupedBy, Operation,
};
pub(crate) use request::Identity;

/// Counts every request's arrival with an [`AmplificationObserver`] before passing it on
/// untouched: see the [module docs](self).
///
/// Requests are labelled by their method and path (`POST /payments`) unless
/// [`route`](Self::route) names them; with ids in paths, put one layer on each route with its
/// own label.
///
/// ```
/// use axum::{Router, body::Body, routing::post};
/// use http::Request;
/// use retry_core::tower::{AmplificationLayer, AmplificationObserver};
/// use tower_service::Service;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let observer = AmplificationObserver::new();
/// let mut app = Router::new()
///     .route("/payments", post(|| async { "paid" }))
///     .layer(AmplificationLayer::new(observer.clone()).route("POST /payments"));
///
/// // A client whose own loop is not ours: six sends of one key, nothing announced.
/// for _ in 0..6 {
///     let request = Request::post("/payments")
///         .header("idempotency-key", "\"order-1234\"")
///         .body(Body::empty())
///         .unwrap();
///     app.call(request).await.unwrap();
/// }
/// let operation = &observer.operations()[0];
/// assert_eq!((operation.arrivals, operation.amplified), (6, true));
/// assert_eq!(observer.stats().warnings, 1);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct AmplificationLayer {
    observer: AmplificationObserver,
    route: Option<Cow<'static, str>>,
}

impl AmplificationLayer {
    /// Counts into `observer` (share one observer between the layers of a service).
    ///
    /// ```
    /// use retry_core::tower::{AmplificationLayer, AmplificationObserver};
    /// let layer = AmplificationLayer::new(AmplificationObserver::new());
    /// # drop(layer);
    /// ```
    pub fn new(observer: AmplificationObserver) -> Self {
        AmplificationLayer {
            observer,
            route: None,
        }
    }

    /// Labels every request through this layer `route` (default: its method and path).
    ///
    /// ```
    /// use retry_core::tower::{AmplificationLayer, AmplificationObserver};
    /// let layer = AmplificationLayer::new(AmplificationObserver::new()).route("POST /payments/{id}");
    /// # drop(layer);
    /// ```
    pub fn route(mut self, route: impl Into<Cow<'static, str>>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// Its observer.
    ///
    /// ```
    /// use retry_core::tower::{AmplificationLayer, AmplificationObserver};
    /// let layer = AmplificationLayer::new(AmplificationObserver::new());
    /// assert_eq!(layer.observer().stats().arrivals, 0);
    /// ```
    pub fn observer(&self) -> &AmplificationObserver {
        &self.observer
    }

    fn observe<B>(&self, request: &Request<B>) {
        let path = request.uri().path();
        let headers = request.headers();
        let identity = Identity::of(headers);
        match &self.route {
            Some(route) => {
                self.observer
                    .arrive(route, request.method(), path, headers, identity);
            }
            None => {
                let route = format!("{} {path}", request.method());
                self.observer
                    .arrive(&route, request.method(), path, headers, identity);
            }
        }
    }
}

impl<S> Layer<S> for AmplificationLayer {
    type Service = Amplification<S>;

    fn layer(&self, inner: S) -> Amplification<S> {
        Amplification {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`AmplificationLayer`]: the inner service's response future,
/// unchanged.
#[derive(Debug, Clone)]
pub struct Amplification<S> {
    inner: S,
    layer: AmplificationLayer,
}

impl<S, B> Service<Request<B>> for Amplification<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> S::Future {
        self.layer.observe(&request);
        self.inner.call(request)
    }
}
