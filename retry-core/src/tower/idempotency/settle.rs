//! What becomes of a claim once its handler answered: the response stored, the key kept failed,
//! or the claim given up.

use ::bytes::Bytes;
use ::http::{Response, StatusCode};
use ::http_body::Body;

use super::body::{BoxError, Buffered, IdempotencyBody, Resumed, Tail, buffer};
use super::replay::ReplayHeaders;
use super::stored::stored_form;
use crate::idempotency::{HeldClaim, IdempotencyStore, OnErr, StoreError};
use crate::metrics;
use crate::{Classify, Decision};

/// Stores the handler's response (or gives the claim up), then returns it. `max`: the store's
/// largest stored response.
pub(super) async fn keep<St, RB>(
    held: HeldClaim<'_, St>,
    response: Response<RB>,
    max: usize,
    replayed: &ReplayHeaders,
    function: &'static str,
) -> Response<IdempotencyBody>
where
    St: IdempotencyStore + ?Sized,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let body = IdempotencyBody::new(body);
    if !is_final(parts.status) {
        release(held, "the response asks for a retry", function).await;
        return Response::from_parts(parts, body);
    }
    let body = match buffer(body, max).await {
        Buffered::Complete { data, trailers } => {
            match stored_form(&parts, &data, replayed, function) {
                Ok(json) if json.len() <= max => complete(held, &json, function).await,
                Ok(json) => spend(held, json.len(), max, function).await,
                Err(e) => {
                    tracing::error!(function, error = %e, "response cannot be serialised");
                    spend(held, data.len(), max, function).await;
                }
            }
            Resumed::new(data, None, trailers.map(Tail::Trailers))
        }
        Buffered::TooLarge { prefix, rest } => {
            spend(held, prefix.len(), max, function).await;
            Resumed::new(prefix, Some(rest), None)
        }
        Buffered::Failed { prefix, error } => {
            release(held, "the response body failed", function).await;
            Resumed::new(prefix, None, Some(Tail::Error(error)))
        }
    };
    Response::from_parts(parts, IdempotencyBody::new(body))
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
            tracing::warn!(function, error = %e, "response not stored: resends get 409 until the lease ends, then run again");
            metrics::response_not_stored(function);
        }
    }
}

/// The response cannot be kept, but its effect happened: mark the key failed so a resend
/// is refused instead of repeating the effect.
async fn spend<St: IdempotencyStore + ?Sized>(
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
    if let Err(e) = held.fail(OnErr::Keep, "response too large to store").await {
        tracing::warn!(function, error = %e, "could not mark the key failed; the lease frees it");
    }
}

/// Gives the claim up so a resend runs the handler again.
pub(super) async fn release<St: IdempotencyStore + ?Sized>(
    held: HeldClaim<'_, St>,
    why: &'static str,
    function: &'static str,
) {
    tracing::debug!(function, why, "idempotency claim released");
    if let Err(e) = held.fail(OnErr::Release, "").await {
        tracing::warn!(function, error = %e, "could not release the claim; resends get 409 until the lease ends");
    }
}

/// Whether a response is the operation's final answer: everything a client would not retry.
/// `5xx`, `408` and `429` say "not processed, or not known to be": storing them would make a
/// transient refusal permanent.
fn is_final(status: StatusCode) -> bool {
    !status.is_server_error() && status.classify() == Decision::Stop
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_final_answers_are_stored() {
        for code in [200, 201, 204, 303, 400, 404, 409, 422] {
            assert!(is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [408, 429, 500, 501, 502, 503, 504] {
            assert!(!is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }
}
