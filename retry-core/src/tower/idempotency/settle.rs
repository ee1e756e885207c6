//! What becomes of a claim once its handler started: every answer stored, a run whose outcome is
//! unknown kept failed, and the key freed only when the handler says its effect did not happen.

use std::sync::Arc;

use ::http::{Response, StatusCode};

use super::body::{Buffered, IdempotencyBody, Resumed, Tail};
use super::problem::{NOT_KEPT, Problem};
use super::replay_headers::ReplayHeaders;
use super::run::Ran;
use super::stored::stored_form;
use crate::idempotency::{HeldClaim, IdempotencyStore, OnErr, StoreError};
use crate::metrics;

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

/// Settles the claim as the handler's run ended, and gives the first client its answer.
/// `max`: the store's largest stored response.
pub(super) async fn settle<St, E>(
    held: HeldClaim<'_, St>,
    ran: Ran<E>,
    max: usize,
    replayed: &ReplayHeaders,
    function: &'static str,
) -> Result<Response<IdempotencyBody>, E>
where
    St: IdempotencyStore + ?Sized,
{
    match ran {
        Ran::NotApplied(response, why) => {
            release(held, function, why).await;
            Ok(response)
        }
        Ran::Answered { parts, body } => {
            let body = match body {
                Buffered::Complete { data, trailers } => {
                    match stored_form(&parts, &data, replayed, function) {
                        Ok(json) if json.len() <= max => complete(held, &json, function).await,
                        Ok(json) => not_kept(held, json.len(), max, function).await,
                        Err(e) => {
                            tracing::error!(function, error = %crate::error_chain(&e), "response cannot be serialised");
                            not_kept(held, data.len(), max, function).await;
                        }
                    }
                    Resumed::new(data, None, trailers.map(Tail::Trailers))
                }
                Buffered::TooLarge { prefix, rest } => {
                    not_kept(held, prefix.len(), max, function).await;
                    Resumed::new(prefix, Some(rest), None)
                }
                Buffered::Failed { prefix, error } => {
                    let failure = format!(
                        "the response body failed while it was read: {}",
                        crate::error_chain(&*error)
                    );
                    keep_failed(held, &failure, function).await;
                    Resumed::new(prefix, None, Some(Tail::Error(error)))
                }
            };
            Ok(Response::from_parts(parts, IdempotencyBody::new(body)))
        }
        Ran::Failed(e) => {
            keep_failed(held, "the inner service returned an error", function).await;
            Err(e)
        }
        Ran::Panicked(message) => {
            tracing::error!(function, panic = %message, "the handler panicked");
            keep_failed(held, &format!("the handler panicked: {message}"), function).await;
            Ok(Problem::OutcomeUnknown.response())
        }
    }
}

async fn complete<St: IdempotencyStore + ?Sized>(
    held: HeldClaim<'_, St>,
    json: &str,
    function: &'static str,
) {
    match held.complete(json).await {
        Ok(()) => {}
        Err(StoreError::Fenced) => {
            tracing::error!(
                function,
                "late completion refused: the lease ran out while the handler ran and a resend took the key over; set a longer lease"
            );
            metrics::fenced(function);
        }
        Err(e) => {
            tracing::warn!(function, error = %crate::error_chain(&e), "response not stored: resends get 409 until the lease ends, then run again");
            metrics::response_not_stored(function);
        }
    }
}

/// The response cannot be kept, but its effect happened: mark the key failed so a resend
/// is refused instead of repeating the effect.
async fn not_kept<St: IdempotencyStore + ?Sized>(
    held: HeldClaim<'_, St>,
    len: usize,
    max: usize,
    function: &'static str,
) {
    tracing::warn!(
        function,
        len,
        max,
        "response too large to store: it is sent once, and resends of its key are refused with 409"
    );
    metrics::response_not_stored(function);
    keep_failed(held, NOT_KEPT, function).await;
}

/// The run may have had its effect but has no response to keep (an `Err`, a failed body, a
/// panic): the key is marked failed with `failure` (for operators; clients get a fixed problem),
/// so a resend is refused instead of running a second time.
async fn keep_failed<St: IdempotencyStore + ?Sized>(
    held: HeldClaim<'_, St>,
    failure: &str,
    function: &'static str,
) {
    tracing::warn!(
        function,
        failure,
        "idempotency key kept failed: resends are refused, never run again"
    );
    if let Err(e) = held.fail(OnErr::Keep, failure).await {
        tracing::warn!(function, error = %crate::error_chain(&e), "could not mark the key failed; resends get 409 until the lease ends, then run again");
    }
}

/// The handler's effect did not happen (`why`): the claim is given up so a resend runs again.
pub(super) async fn release<St: IdempotencyStore + ?Sized>(
    held: HeldClaim<'_, St>,
    function: &'static str,
    why: &'static str,
) {
    tracing::debug!(function, why, "idempotency claim released");
    if let Err(e) = held.fail(OnErr::Release, "").await {
        tracing::warn!(function, error = %crate::error_chain(&e), "could not release the claim; resends get 409 until the lease ends");
    }
}
