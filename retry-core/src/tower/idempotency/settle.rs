//! What becomes of a claim once its handler started: every answer stored, a run whose outcome is
//! unknown kept failed, and the key freed only when the handler says its effect did not happen.

use ::http::Response;

use super::body::{Buffered, IdempotencyBody, Resumed, Tail};
use super::problem::{NOT_KEPT, Problem};
use super::replay_headers::ReplayHeaders;
use super::run::Ran;
use super::stored::stored_form;
use crate::idempotency::{HeldClaim, IdempotencyStore, OnErr, StoreError};
use crate::metrics;

/// Settles the claim as the handler's run ended, and gives the first client its answer.
/// `max`: the store's largest stored response.
pub(super) async fn settle<St, E>(
    held: HeldClaim<'_, St>,
    ran: Ran<E>,
    max: usize,
    replayed: &ReplayHeaders,
    function: &str,
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
                            tracing::error!(target: "retry_core::tower", function, error = %crate::error_chain(&e), "response cannot be serialised");
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
            tracing::error!(target: "retry_core::tower", function, panic = %message, "the handler panicked");
            keep_failed(held, &format!("the handler panicked: {message}"), function).await;
            Ok(Problem::OutcomeUnknown.response())
        }
    }
}

async fn complete<St: IdempotencyStore + ?Sized>(
    held: HeldClaim<'_, St>,
    json: &str,
    function: &str,
) {
    match held.complete(json).await {
        Ok(()) => {}
        Err(StoreError::Fenced) => {
            tracing::error!(target: "retry_core::tower",
                function,
                "late completion refused: the lease ran out while the handler ran and a resend took the key over; set a longer lease"
            );
            metrics::fenced(function);
        }
        Err(e) => {
            tracing::warn!(target: "retry_core::tower", function, error = %crate::error_chain(&e), "response not stored: resends get 409 until the lease ends, then run again");
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
    function: &str,
) {
    tracing::warn!(target: "retry_core::tower",
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
    function: &str,
) {
    tracing::warn!(target: "retry_core::tower",
        function,
        failure,
        "idempotency key kept failed: resends are refused, never run again"
    );
    if let Err(e) = held.fail(OnErr::Keep, failure).await {
        tracing::warn!(target: "retry_core::tower", function, error = %crate::error_chain(&e), "could not mark the key failed; resends get 409 until the lease ends, then run again");
    }
}

/// The handler's effect did not happen (`why`): the claim is given up so a resend runs again.
pub(super) async fn release<St: IdempotencyStore + ?Sized>(
    held: HeldClaim<'_, St>,
    function: &str,
    why: &'static str,
) {
    tracing::debug!(target: "retry_core::tower", function, why, "idempotency claim released");
    if let Err(e) = held.fail(OnErr::Release, "").await {
        tracing::warn!(target: "retry_core::tower", function, error = %crate::error_chain(&e), "could not release the claim; resends get 409 until the lease ends");
    }
}
