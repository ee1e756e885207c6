//! What one attempt of an HTTP request came to, classified once for the retry state machine,
//! with the rule that keeps a non-idempotent request from being sent twice: shared by
//! `reqwest`'s `HttpError` and the retrying wrappers around clients (`tower::RetryLayer`,
//! `reqwest_middleware::RetryMiddleware`).

// Without a client integration there is nothing to classify; `reqwest` alone uses only the
// method rule (`judge`), the retrying wrappers the rest.
#![cfg_attr(
    not(any(feature = "tower", feature = "reqwest-middleware")),
    allow(dead_code)
)]

use ::http::{HeaderMap, Method, StatusCode};

use super::classify::{guard_resend, has_idempotency_key, status_text};
use crate::attempt_timeout;
use crate::classify::{Classify, Decision, Elapsed};
use crate::site::{Warning, first_time_for};

/// A `'static` name for a non-idempotent method, for [`Elapsed::unsafe_request`].
pub(crate) fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        // An extension method: not idempotent by RFC 9110, and its name is not `'static`.
        _ => "request",
    }
}

/// The decision about a failure of a `method` request (`keyed`: it carried `Idempotency-Key`),
/// and its reason in words: `what` happened, or "POST without Idempotency-Key after `what`" when
/// the request may have `reached` the server and must not be sent again.
pub(crate) fn guarded(
    method: &Method,
    keyed: bool,
    decision: Decision,
    reached: bool,
    what: String,
) -> (Decision, String) {
    let guarded = if reached {
        guard_resend(decision, method, keyed)
    } else {
        decision
    };
    if guarded == decision {
        (decision, what)
    } else {
        (
            guarded,
            format!("{method} without Idempotency-Key after {what}"),
        )
    }
}

/// [`guarded`], where the failure is decided (once per failed attempt): a request not sent
/// again is said so.
pub(crate) fn judge(
    method: &Method,
    keyed: bool,
    decision: Decision,
    reached: bool,
    what: String,
) -> (Decision, String) {
    let judged = guarded(method, keyed, decision, reached, what);
    if judged.0 != decision {
        refused_resend(method, &judged.1);
    }
    judged
}

/// Says why a request was not sent again: at WARN once per retrying function (news the first
/// time, a flood at every call during an outage), else at DEBUG.
fn refused_resend(method: &Method, reason: &str) {
    let site = crate::scope::with_current(|frame| frame.map(|frame| frame.outer));
    let Some(site) = site else {
        // Not inside a retry: nothing would have sent it again anyway.
        return;
    };
    if first_time_for(Warning::UnsafeResend, site) {
        tracing::warn!(
            target: "retry_core::http",
            function = site.function(),
            %method,
            reason,
            "not sent again: a {method} without Idempotency-Key may have reached the server and taken effect; send an Idempotency-Key (which the receiver deduplicates) to have it retried"
        );
    } else {
        tracing::debug!(target: "retry_core::http", function = site.function(), %method, reason, "not sent again: no Idempotency-Key");
    }
}

/// The request an attempt sends, as far as resending it is concerned.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    method: Method,
    keyed: bool,
}

impl Sent {
    /// The request with this method and these headers.
    pub(crate) fn new(method: &Method, headers: &HeaderMap) -> Self {
        Sent {
            method: method.clone(),
            keyed: has_idempotency_key(headers),
        }
    }

    /// Sending it twice may apply it twice: a non-idempotent method without `Idempotency-Key`.
    fn is_unsafe(&self) -> bool {
        !self.method.is_idempotent() && !self.keyed
    }

    /// Says, to the attempt being polled, that the request is going out, so an
    /// `attempt_timeout` that cuts it off does not send it again (see `attempt_timeout.rs`). Call it
    /// inside the attempt's future, just before sending.
    pub(crate) fn note_sending(&self) {
        if self.is_unsafe() {
            attempt_timeout::note_unsafe_send(method_name(&self.method));
        }
    }

    /// Says that the request noted by [`note_sending`](Self::note_sending) never left: the
    /// connection was not made.
    pub(crate) fn note_not_sent(&self) {
        if self.is_unsafe() {
            attempt_timeout::note_not_sent();
        }
    }

    /// A response the caller's classification calls a failure (`decision`). The server refused a
    /// 4xx before doing anything; any other status may have been answered after the effect.
    pub(crate) fn failed_answer<R, E>(
        &self,
        response: R,
        status: StatusCode,
        decision: Decision,
    ) -> Failed<R, E> {
        let reached = !status.is_client_error();
        let (decision, reason) = judge(
            &self.method,
            self.keyed,
            decision,
            reached,
            status_text(status),
        );
        Failed {
            failure: Failure::Answer(response),
            decision,
            reason,
        }
    }

    /// The client's error, classified `decision` and described as `what`. `connected`: the
    /// request may have reached the server (false only when no connection was made).
    pub(crate) fn failed<R, E>(
        &self,
        error: E,
        decision: Decision,
        connected: bool,
        what: String,
    ) -> Failed<R, E> {
        if !connected {
            self.note_not_sent();
        }
        let (decision, reason) = judge(&self.method, self.keyed, decision, connected, what);
        Failed {
            failure: Failure::Error(error),
            decision,
            reason,
        }
    }
}

/// What a failed attempt left: the response the server gave, the client's error, or the
/// attempt's own timeout.
enum Failure<R, E> {
    /// A response classified as a failure (a 503, a 429): on give-up, the caller gets it as
    /// the answer, as it would without retries.
    Answer(R),
    /// The client's own error.
    Error(E),
    /// Cut off by `attempt_timeout`.
    Elapsed(Elapsed),
}

/// A failed attempt, classified when it failed (the state machine asks for the decision and
/// the reason; both are known only with the request).
pub(crate) struct Failed<R, E> {
    failure: Failure<R, E>,
    decision: Decision,
    reason: String,
}

impl<R, E> Failed<R, E> {
    /// What the caller of a retried request gets: the answer, or, on give-up, what the last
    /// attempt got (the failed response as an answer, the client's error, or the timeout made
    /// into the client's error type by `elapsed`).
    pub(crate) fn settle(
        outcome: Result<R, Failed<R, E>>,
        elapsed: impl FnOnce(Elapsed) -> E,
    ) -> Result<R, E> {
        match outcome {
            Ok(answer) => Ok(answer),
            Err(failed) => match failed.failure {
                Failure::Answer(answer) => Ok(answer),
                Failure::Error(error) => Err(error),
                Failure::Elapsed(timeout) => Err(elapsed(timeout)),
            },
        }
    }
}

impl<R, E> From<Elapsed> for Failed<R, E> {
    fn from(elapsed: Elapsed) -> Self {
        // The method rule is in the `Elapsed` already (`Sent::note_sending`).
        Failed {
            decision: elapsed.classify(),
            reason: elapsed.reason().unwrap_or_default(),
            failure: Failure::Elapsed(elapsed),
        }
    }
}

impl<R, E> Classify for Failed<R, E> {
    fn classify(&self) -> Decision {
        self.decision
    }

    fn reason(&self) -> Option<String> {
        Some(self.reason.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sent(method: Method, keyed: bool) -> Sent {
        let mut headers = HeaderMap::new();
        if keyed {
            headers.insert(super::super::IDEMPOTENCY_KEY, "k-1".parse().unwrap());
        }
        Sent::new(&method, &headers)
    }

    #[test]
    fn a_5xx_to_an_unkeyed_post_stops_and_says_why() {
        let post = sent(Method::POST, false);
        let failed: Failed<(), ()> =
            post.failed_answer((), StatusCode::SERVICE_UNAVAILABLE, Decision::Retry);
        assert_eq!(failed.classify(), Decision::Stop);
        assert_eq!(
            failed.reason().as_deref(),
            Some("POST without Idempotency-Key after 503 Service Unavailable")
        );
        let keyed = sent(Method::POST, true);
        let failed: Failed<(), ()> =
            keyed.failed_answer((), StatusCode::SERVICE_UNAVAILABLE, Decision::Retry);
        assert_eq!(failed.classify(), Decision::Retry);
    }

    #[test]
    fn a_refused_429_or_a_connection_never_made_may_be_resent() {
        let post = sent(Method::POST, false);
        let wait = Decision::RetryAfter(Duration::from_secs(1));
        let failed: Failed<(), ()> = post.failed_answer((), StatusCode::TOO_MANY_REQUESTS, wait);
        assert_eq!(failed.classify(), wait);
        let refused: Failed<(), ()> =
            post.failed((), Decision::Retry, false, "connection refused".into());
        assert_eq!(refused.classify(), Decision::Retry);
        let reset: Failed<(), ()> =
            post.failed((), Decision::Retry, true, "connection reset".into());
        assert_eq!(reset.classify(), Decision::Stop);
    }
}
