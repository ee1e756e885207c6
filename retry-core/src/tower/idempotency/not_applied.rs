//! What says a handler's effect did not happen: the [`NotApplied`] marker it puts into its
//! response, and the statuses that mean a request was refused before it was processed.

use std::sync::Arc;

use ::http::StatusCode;

/// Put into a response's extensions by a handler whose effect did not happen (it refused
/// before acting, or its transaction rolled back): [`IdempotencyLayer`](super::IdempotencyLayer)
/// then frees the key instead of storing the response, so a resend runs the handler again.
///
/// Every other response of a handler that started is stored and replayed, `5xx` included: the
/// layer cannot tell "failed before any effect" from "failed after it", only the handler can.
/// Insert the marker only when you know nothing happened; a wrong marker lets a resend repeat
/// an effect. The marker never leaves the layer: it is taken out of the response before it is
/// sent, and never stored.
///
/// With axum, return it as a response part (after the status, which comes first in axum's
/// tuples: `(StatusCode::SERVICE_UNAVAILABLE, Extension(NotApplied))`):
///
/// ```
/// use axum::{Extension, Router, body::Body, http::{Request, StatusCode}, routing::post};
/// use retry_core::idempotency::MemoryStore;
/// use retry_core::tower::{IdempotencyLayer, NotApplied};
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use tower_service::Service;
///
/// static RUNS: AtomicU32 = AtomicU32::new(0);
///
/// /// The ledger is down on the first run: nothing was booked, so the key may run again.
/// async fn book() -> axum::response::Response {
///     use axum::response::IntoResponse;
///     if RUNS.fetch_add(1, Ordering::SeqCst) == 0 {
///         let nothing_done =
///             (StatusCode::SERVICE_UNAVAILABLE, Extension(NotApplied), "ledger down");
///         return nothing_done.into_response();
///     }
///     (StatusCode::CREATED, "booked").into_response()
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut app = Router::new()
///     .route("/bookings", post(book))
///     .layer(IdempotencyLayer::unauthenticated(MemoryStore::new()));
/// let send = || {
///     let request = Request::post("/bookings").header("idempotency-key", "\"b-1\"");
///     request.body(Body::empty()).unwrap()
/// };
///
/// let refused = app.call(send()).await.unwrap();
/// assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
/// assert!(refused.extensions().get::<NotApplied>().is_none(), "the marker is not sent on");
/// assert_eq!(app.call(send()).await.unwrap().status(), StatusCode::CREATED, "ran again");
/// assert_eq!(app.call(send()).await.unwrap().status(), StatusCode::CREATED, "then replayed");
/// assert_eq!(RUNS.load(Ordering::SeqCst), 2);
/// # }
/// ```
///
/// On any `http` response:
///
/// ```
/// use http::{Response, StatusCode};
/// use retry_core::tower::NotApplied;
///
/// let mut response = Response::new("rate limited before anything was done");
/// *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
/// response.extensions_mut().insert(NotApplied);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NotApplied;

/// The statuses that say a request was refused before anything was done: a response with one of
/// them frees the key as [`NotApplied`] does
/// ([`IdempotencyLayer::not_processed_statuses`](super::IdempotencyLayer::not_processed_statuses)).
#[derive(Debug, Clone)]
pub(super) struct NotProcessed(Arc<[StatusCode]>);

impl NotProcessed {
    pub(super) fn new(statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        NotProcessed(statuses.into_iter().collect())
    }

    pub(super) fn contains(&self, status: StatusCode) -> bool {
        self.0.contains(&status)
    }
}

impl Default for NotProcessed {
    fn default() -> Self {
        NotProcessed::new(DEFAULT_NOT_PROCESSED)
    }
}

/// What frameworks answer when they refuse a request before its handler's body runs: axum's
/// `Json` and `Form` extractors (`415` for the wrong `Content-Type`, `422` for a body that does
/// not fit the type), its router (`405`), content negotiation (`406`), and the limits on a
/// request (`411`, `413`, `414`).
pub(super) const DEFAULT_NOT_PROCESSED: [StatusCode; 7] = [
    StatusCode::METHOD_NOT_ALLOWED,
    StatusCode::NOT_ACCEPTABLE,
    StatusCode::LENGTH_REQUIRED,
    StatusCode::PAYLOAD_TOO_LARGE,
    StatusCode::URI_TOO_LONG,
    StatusCode::UNSUPPORTED_MEDIA_TYPE,
    StatusCode::UNPROCESSABLE_ENTITY,
];
