//! A call that gave up, as a dead letter: what `#[retryable(dlq(..))]` evaluates when it gives
//! up, the letter assembled from it and the call's failures, and parking it before the error
//! returns.

use std::future::Future;
use std::time::Duration;

use super::{DeadLetter, DeadLetterSink, DlqError, DlqFailed, FailureClass, NotParked};
use crate::decide::State;
use crate::site::Site;

/// What `dlq(id = ..., original = ...)` evaluated on give-up.
#[derive(Debug)]
pub struct LetterInput {
    msg_id: String,
    original: serde_json::Value,
    /// The original is not the payload: redacted, or not serialisable.
    redacted: bool,
    key: Option<LetterKey>,
}

/// The idempotency key of a call that claims it on every attempt (`#[idempotent]` below
/// `#[retryable]`), for its dead letter: a redrive must claim the same key in the same
/// namespace before the store forgets it.
#[derive(Debug)]
pub struct LetterKey {
    /// The encoded key.
    pub key: String,
    /// The namespace it was claimed in.
    pub scope: &'static str,
    /// How long the store keeps it.
    pub retention: Duration,
}

/// Evaluates `id` and `original` (through `redact`, when given). An original that cannot be
/// serialised is parked as a note saying so, rather than not at all.
pub fn letter_input<I: std::fmt::Display + ?Sized, O: serde::Serialize + ?Sized>(
    id: &I,
    original: &O,
    redact: Option<fn(serde_json::Value) -> serde_json::Value>,
    key: Option<LetterKey>,
) -> LetterInput {
    let (original, redacted) = match (serde_json::to_value(original), redact) {
        (Ok(original), None) => (original, false),
        (Ok(original), Some(redact)) => (redact(original), true),
        (Err(e), _) => (
            serde_json::Value::String(format!("<original not serialisable: {e}>")),
            true,
        ),
    };
    LetterInput {
        msg_id: id.to_string(),
        original,
        redacted,
        key,
    }
}

/// The letter's input, made by `input` only when the call has given up: a successful call
/// neither serialises its original nor formats its id. Called before [`park_on_give_up`], not
/// inside it, so the closure (which borrows the arguments) is not held across an `.await`.
#[inline]
pub fn letter_on_give_up<T, E>(
    state: &State<'_>,
    result: &Result<T, E>,
    input: impl FnOnce() -> LetterInput,
) -> Option<LetterInput> {
    match (result, state.gave_up(), state.failures()) {
        (Err(_), Some(_), Some(_)) => Some(input()),
        _ => None,
    }
}

/// Which failure classes `dlq(classes = "..")` parks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkClasses {
    /// Every give-up (the default).
    All,
    /// Give-ups after transient failures ([`FailureClass::System`]): a `Stop` is an answer
    /// (a declined card), returned as it is and parked nowhere.
    System,
    /// Give-ups on `Stop` only ([`FailureClass::Data`]).
    Data,
}

impl ParkClasses {
    fn parks(self, class: FailureClass) -> bool {
        match self {
            ParkClasses::All => true,
            ParkClasses::System => class == FailureClass::System,
            ParkClasses::Data => class == FailureClass::Data,
        }
    }
}

/// On give-up, parks the call's dead letter before its error returns. Parked: the error as is.
/// A give-up of a class `classes` leaves out: the error as is, parked nowhere (the caller tells
/// it by its class, e.g. [`Classify::classify`](crate::Classify::classify) saying `Stop`).
/// Not parked, `E::from(DlqFailed)`, so the caller does not acknowledge the message: the sink
/// failed ([`NotParked::Sink`](crate::dlq::NotParked::Sink)), or the call was collapsed to one
/// attempt (nesting, `.single_attempt()`) and parks nothing, whatever its error: the outer
/// layer owns the give-up ([`NotParked::OuterLayer`](crate::dlq::NotParked::OuterLayer)).
pub async fn park_on_give_up<T, E>(
    site: &'static Site,
    state: &State<'_>,
    result: Result<T, E>,
    sink: &dyn ParkSink,
    input: Option<LetterInput>,
    classes: ParkClasses,
    not_parked: fn(DlqFailed) -> E,
) -> Result<T, E> {
    let (Err(_), Some(give_up), Some(failures), Some(input)) =
        (&result, state.gave_up(), state.failures(), input)
    else {
        return result;
    };
    let class = match give_up {
        crate::GiveUp::NotRetryable => FailureClass::Data,
        _ if state.last_decision() == Some(crate::Decision::Stop) => FailureClass::Data,
        _ => FailureClass::System,
    };
    if !classes.parks(class) {
        tracing::debug!(target: "retry_core::dlq", function = site.function(), %class, "give-up of a class this dlq(..) does not park: returned as it is");
        return result;
    }
    let letter = DeadLetter {
        msg_id: input.msg_id,
        original: input.original,
        reason: failures.reason.clone(),
        attempts: state.attempts(),
        // To the millisecond, as letters are written: the letter handed back equals the one
        // read back from any store.
        first_failed_at: crate::time::to_millis(failures.first),
        last_failed_at: crate::time::to_millis(failures.last),
        trace_id: crate::otel::letter_trace_id(),
        class,
        error_type: std::any::type_name::<E>().to_owned(),
        source: Some(format!("{}::{}", site.module(), site.function())),
        redacted: input.redacted,
        // The first attempt claimed the key just before it failed (a later claim only moves the
        // expiry later): the store keeps it `retention` from then, give or take that attempt.
        key_expires_at: input
            .key
            .as_ref()
            .map(|k| crate::time::to_millis(crate::time::later(failures.first, k.retention))),
        key_scope: input.key.as_ref().map(|k| k.scope.to_owned()),
        idempotency_key: input.key.map(|k| k.key),
        history: Vec::new(),
        resolved: None,
    };
    if state.collapsed() {
        tracing::debug!(target: "retry_core::dlq", function = site.function(), msg_id = %letter.msg_id, "single attempt: dead letter left to the outer layer");
        let decision = state.last_decision().unwrap_or(crate::Decision::Stop);
        return Err(not_parked(DlqFailed::new(
            letter,
            NotParked::OuterLayer { decision },
        )));
    }
    match sink.park_boxed(&letter).await {
        Ok(()) => {
            tracing::info!(target: "retry_core::dlq", function = site.function(), msg_id = %letter.msg_id, class = %letter.class, "parked a dead letter");
            result
        }
        Err(error) => {
            crate::site::park_failed(site);
            tracing::error!(target: "retry_core::dlq", function = site.function(), msg_id = %letter.msg_id, error = %crate::error_chain(&error), "dead letter NOT parked");
            Err(not_parked(DlqFailed::new(letter, NotParked::Sink(error))))
        }
    }
}

/// A dead-letter sink as `__private::sink` returns it: parking through it asks nothing more of the sink's
/// type, so a `sink = ...` that is not a sink is reported once, where it is written. The parking
/// future is boxed: it is made only when a call gives up.
pub trait ParkSink: Sync {
    /// [`DeadLetterSink::park`], boxed.
    fn park_boxed<'a>(
        &'a self,
        letter: &'a DeadLetter,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), DlqError>> + Send + 'a>>;
}

impl<S: DeadLetterSink + ?Sized> ParkSink for S {
    fn park_boxed<'a>(
        &'a self,
        letter: &'a DeadLetter,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), DlqError>> + Send + 'a>> {
        Box::pin(self.park(letter))
    }
}
