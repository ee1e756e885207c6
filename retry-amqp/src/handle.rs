//! One delivery: its key claimed, the handler run under the policy, the outcome stored, or a
//! letter parked on give-up. Every decision is retry-core's: the retry state machine
//! (`Policy::retry`), the letter (`run_with_dlq`), the claim and its settling
//! (`idempotency::begin_call` / `begin_transactional_answered`).

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use lapin::Channel;
use retry_core::dlq::{DlqFailed, FailureClass};
use retry_core::idempotency::{
    Begun, BegunTransaction, HeldClaim, IdempotencyError, IdempotencyStore, OnErr, Settings,
    TransactionalStore, begin_call, begin_transactional_answered, encode_namespaced_key,
    finish_transactional,
};
use retry_core::{Classify, Decision, Policy};

use crate::letter::{DeliverySink, Route, body_json};
use crate::message::Message;
use crate::metrics::Counters;

/// A boxed, sendable future: what a transactional handler returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a handled delivery's key stores: the handler's `Ok(())`, as JSON.
const UNIT_RESPONSE: &str = "null";

/// The name of the consumer's retries in retry-core's events and metrics (`function`).
pub const RETRY_NAME: &str = "retry_amqp::consume";

/// Why an attempt at a delivery failed: the handler's own error, or the consumer's. This is
/// the error a give-up's letter records (`error_type`), classified as its parts are.
#[derive(Debug)]
#[non_exhaustive]
pub enum DeliveryError<E> {
    /// The handler failed; classified by its own [`Classify`].
    Handler(E),
    /// The idempotency store refused or could not be reached (see
    /// [`IdempotencyError`]'s classification: an unreachable store is retried), or an earlier
    /// delivery of this key failed and its failure was kept.
    Idempotency(IdempotencyError),
    /// The message has no key (no `message_id`, or the key function found none): it cannot be
    /// deduplicated, so it is not run. Not retryable.
    NoKey,
    /// The letter of a give-up was not confirmed by the broker: the delivery is not acked.
    NotParked(Box<DlqFailed>),
}

const NO_KEY: &str = "the message has no idempotency key (no message_id)";

impl<E: Classify> Classify for DeliveryError<E> {
    fn classify(&self) -> Decision {
        match self {
            DeliveryError::Handler(e) => e.classify(),
            DeliveryError::Idempotency(e) => e.classify(),
            DeliveryError::NoKey => Decision::Stop,
            DeliveryError::NotParked(e) => e.decision(),
        }
    }

    fn reason(&self) -> Option<String> {
        match self {
            DeliveryError::Handler(e) => e.reason(),
            DeliveryError::Idempotency(e) => e.reason(),
            DeliveryError::NoKey => Some(NO_KEY.to_owned()),
            DeliveryError::NotParked(e) => Some(e.to_string()),
        }
    }
}

impl<E: fmt::Debug> fmt::Display for DeliveryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeliveryError::Handler(e) => write!(f, "handler failed: {e:?}"),
            DeliveryError::Idempotency(e) => write!(f, "{}", retry_core::error_chain(e)),
            DeliveryError::NoKey => f.write_str(NO_KEY),
            DeliveryError::NotParked(e) => write!(f, "{e}"),
        }
    }
}

impl<E> From<IdempotencyError> for DeliveryError<E> {
    fn from(e: IdempotencyError) -> Self {
        DeliveryError::Idempotency(e)
    }
}

impl<E> From<DlqFailed> for DeliveryError<E> {
    fn from(e: DlqFailed) -> Self {
        DeliveryError::NotParked(Box::new(e))
    }
}

/// What became of a delivery, and so what the consumer tells the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The handler's effect happened now: ack.
    Handled,
    /// A delivery of a key already handled: ack, no second effect.
    Replayed,
    /// Given up, and the broker confirmed the letter: ack.
    DeadLettered(FailureClass),
    /// Not done and not parked (the key is held by another delivery, or the letter was not
    /// confirmed): give it back to the queue, after a pause.
    Requeue(String),
}

/// What an attempt finished with.
enum Done {
    Handled,
    Replayed,
    Busy,
}

/// The consumer's side of a delivery: where letters go, the policy, the counters.
pub(crate) struct Ctx<'a> {
    pub(crate) publisher: &'a Channel,
    pub(crate) route: &'a Route,
    pub(crate) policy: &'a Policy,
    pub(crate) counters: &'a Counters,
}

/// The key function: the delivery's idempotency key.
pub(crate) type KeyFn = Arc<dyn Fn(&Message) -> Option<String> + Send + Sync>;

/// What every flow shares: how a delivery's key is found and claimed.
pub(crate) struct Keys {
    pub(crate) queue: String,
    pub(crate) namespace: String,
    pub(crate) key: KeyFn,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    /// The letters' `source`: `amqp:<queue>`.
    pub(crate) source: String,
}

impl Keys {
    /// The delivery's key as read from the message, and the claim's settings.
    fn keyed(&self, message: &Message) -> Keyed {
        let Some(raw) = (self.key)(message) else {
            return Keyed {
                call: None,
                msg_id: message.message_id().unwrap_or_default().to_owned(),
            };
        };
        let mut call = Settings::new(
            encode_namespaced_key(&self.namespace, None::<&str>, raw.as_str()),
            Cow::Owned(self.queue.clone()),
        );
        call.biz_key = Some(raw.clone());
        call.lease = self.lease;
        call.retention = self.retention;
        Keyed {
            call: Some(call),
            msg_id: raw,
        }
    }
}

/// One delivery's key: the claim's settings (none when the message has no key) and the
/// letter's `msg_id` (the key as read from the message, else its `message_id`).
struct Keyed {
    call: Option<Settings>,
    msg_id: String,
}

impl Keyed {
    /// Runs `attempt` under the consumer's policy; a give-up parks the message's letter with
    /// the broker, from `source`.
    async fn retry<F, Fut, E>(
        &self,
        ctx: &Ctx<'_>,
        source: &str,
        message: &Message,
        attempt: F,
    ) -> Result<Done, DeliveryError<E>>
    where
        // `Policy::retry` takes an async closure; `run_with_dlq` names its future.
        F: FnMut() -> Fut + AsyncFnMut() -> Result<Done, DeliveryError<E>>,
        Fut: Future<Output = Result<Done, DeliveryError<E>>>,
        E: Classify + fmt::Debug + Send + Sync + 'static,
    {
        let sink = DeliverySink {
            channel: ctx.publisher,
            route: ctx.route,
            message,
            idempotency_key: self.call.as_ref().map(|call| call.key.as_str()),
            source,
        };
        ctx.policy
            .retry(attempt)
            .name(RETRY_NAME)
            .on_retry(|_, _, _| ctx.counters.retries.increment(1))
            .run_with_dlq(&sink, &self.msg_id, || body_json(message.body()))
            .await
    }
}

/// How a consumer runs one delivery; one impl per mode.
pub(crate) trait Flow: Send + Sync + 'static {
    fn process<'a>(&'a self, ctx: Ctx<'a>, message: &'a Message) -> BoxFuture<'a, Outcome>;
}

/// Non-transactional mode: the key is claimed once, the handler retried inside the claim, the
/// claim completed on success and settled by `on_err` after a give-up.
pub(crate) struct Plain<S, H, E> {
    pub(crate) store: Arc<S>,
    pub(crate) handler: H,
    pub(crate) keys: Keys,
    pub(crate) on_err: fn(&E) -> OnErr,
}

impl<S, H, Fut, E> Flow for Plain<S, H, E>
where
    S: IdempotencyStore + 'static,
    H: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Classify + fmt::Debug + Send + Sync + 'static,
{
    fn process<'a>(&'a self, ctx: Ctx<'a>, message: &'a Message) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let keyed = self.keys.keyed(message);
            let msg_id = keyed.msg_id.as_str();
            let store = &*self.store;
            // The claim outlives the attempts (they run inside it); a lock, not a `&mut`, so
            // each attempt's future is an ordinary `Send` future.
            let held: tokio::sync::Mutex<Option<HeldClaim<'_, S>>> = tokio::sync::Mutex::new(None);
            let (call, held_ref) = (keyed.call.as_ref(), &held);
            let result = keyed
                .retry(&ctx, &self.keys.source, message, || async move {
                    let Some(call) = call else {
                        return Err(DeliveryError::NoKey);
                    };
                    let mut claim = held_ref.lock().await;
                    if claim.is_none() {
                        match begin_call(store, call).await {
                            Ok(Begun::Stored(_)) => return Ok(Done::Replayed),
                            Ok(Begun::Claimed(held)) => *claim = Some(held),
                            Err(IdempotencyError::InProgress) => return Ok(Done::Busy),
                            Err(e) => return Err(DeliveryError::Idempotency(e)),
                        }
                    }
                    let Some(claim) = claim.as_ref() else {
                        return Err(DeliveryError::NoKey);
                    };
                    match claim.hold((self.handler)(message.clone())).await {
                        Ok(()) => Ok(Done::Handled),
                        Err(e) => Err(DeliveryError::Handler(e)),
                    }
                })
                .await;
            let outcome = decide(&result, msg_id);
            if let Some(claim) = held.into_inner() {
                match &result {
                    Ok(_) => {
                        if let Err(e) = claim.complete(UNIT_RESPONSE).await {
                            tracing::error!(target: "retry_amqp", queue = %self.keys.queue, msg_id, error = %retry_core::error_chain(&e), "handled, but the key could not be marked done: a redelivery after the lease would run the handler again");
                        }
                    }
                    Err(error) => {
                        let on_err = match error {
                            DeliveryError::Handler(e) => (self.on_err)(e),
                            DeliveryError::NotParked(_) => OnErr::Keep,
                            _ => OnErr::Keep,
                        };
                        if let Err(e) = claim.fail(on_err, &error.to_string()).await {
                            tracing::warn!(target: "retry_amqp", queue = %self.keys.queue, msg_id, error = %retry_core::error_chain(&e), "could not settle the key of a failed delivery; its lease frees it");
                        }
                    }
                }
            }
            outcome
        })
    }
}

/// Transactional mode: every attempt claims the key inside the store's transaction, runs the
/// handler in it, and commits the handler's writes with `done` (one commit); a failed attempt
/// rolls back, so its key is free for the next attempt, a redelivery, or a redrive.
pub(crate) struct Transactional<S, H> {
    pub(crate) store: Arc<S>,
    pub(crate) handler: H,
    pub(crate) keys: Keys,
}

impl<S, H, E> Flow for Transactional<S, H>
where
    S: TransactionalStore + 'static,
    H: for<'t> Fn(&'t Message, &'t mut S::Transaction) -> BoxFuture<'t, Result<(), E>>
        + Send
        + Sync
        + 'static,
    E: Classify + fmt::Debug + Send + Sync + 'static,
{
    fn process<'a>(&'a self, ctx: Ctx<'a>, message: &'a Message) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let keyed = self.keys.keyed(message);
            let store = &*self.store;
            let call = keyed.call.as_ref();
            let result = keyed
                .retry(&ctx, &self.keys.source, message, || async move {
                    let Some(call) = call else {
                        return Err(DeliveryError::<E>::NoKey);
                    };
                    // The handler answers nothing, so the key's row can be written `done`
                    // with the claim, in the transaction (one write of it, not two).
                    match begin_transactional_answered(store, call, UNIT_RESPONSE).await {
                        Ok(BegunTransaction::Stored(_)) => Ok(Done::Replayed),
                        Ok(BegunTransaction::Claimed(held, mut transaction)) => {
                            let outcome = held
                                .hold((self.handler)(message, &mut transaction))
                                .await
                                .map_err(DeliveryError::Handler);
                            finish_transactional(held, transaction, call, outcome)
                                .await
                                .map(|()| Done::Handled)
                        }
                        Err(IdempotencyError::InProgress) => Ok(Done::Busy),
                        Err(e) => Err(DeliveryError::Idempotency(e)),
                    }
                })
                .await;
            decide(&result, &keyed.msg_id)
        })
    }
}

fn decide<E: Classify>(result: &Result<Done, DeliveryError<E>>, msg_id: &str) -> Outcome {
    match result {
        Ok(Done::Handled) => Outcome::Handled,
        Ok(Done::Replayed) => Outcome::Replayed,
        Ok(Done::Busy) => Outcome::Requeue(format!(
            "message `{msg_id}`: its key is held by another delivery"
        )),
        Err(DeliveryError::NotParked(failed)) => Outcome::Requeue(format!(
            "message `{msg_id}`: {}",
            retry_core::error_chain(&**failed)
        )),
        Err(e) => Outcome::DeadLettered(match e.classify() {
            Decision::Stop => FailureClass::Data,
            _ => FailureClass::System,
        }),
    }
}

/// A future whose panic is caught and returned as `Err` (the payload's text), so the delivery
/// can be settled instead of left unacknowledged.
pub(crate) struct CatchUnwind<'a, T>(pub(crate) BoxFuture<'a, T>);

impl<T> Future for CatchUnwind<'_, T> {
    type Output = Result<T, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(payload) => Poll::Ready(Err(payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned()))),
        }
    }
}
