//! What the macros' generated code calls. Not public API: no semver guarantee, may change in any
//! release. Everything here is a thin door onto the runtime; decisions live in [`State`].

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

pub use crate::state::{Next, NoHook, State};
pub use crate::{Classify, Decision, Elapsed, Jitter, Policy, RetryBudget, Retrying};
pub use core;

pub use crate::metrics::Site;
pub use ::metrics;

/// Wraps a generated retry loop in the named future type.
#[inline]
pub fn retrying<F: Future>(
    site: &'static Site,
    caller: &'static Location<'static>,
    inner: F,
) -> Retrying<F> {
    Retrying::new(site, caller, inner)
}

/// The argument for an attempt: the original on the last attempt, a clone before it.
#[inline]
pub fn take_or_clone<T: Clone>(slot: &mut Option<T>, last: bool) -> T {
    match slot.take() {
        Some(value) if last => value,
        Some(value) => {
            let copy = value.clone();
            *slot = Some(value);
            copy
        }
        // The state machine never starts an attempt after the last one.
        None => unreachable!("retry_core: attempt started after the last one"),
    }
}

/// The output of a `#[retryable]` function: a `Result`, seen through this trait so a function
/// returning anything else gets one clear error instead of several type mismatches.
#[diagnostic::on_unimplemented(
    message = "`#[retryable]` functions must return a `Result`, not `{Self}`",
    label = "expected `Result<T, E>` here",
    note = "return `Result<T, E>` where `E: retry_core::Classify` (type aliases such as `std::io::Result<T>` work)"
)]
pub trait RetryOutput: Sized {
    /// The success type.
    type Ok;
    /// The error type.
    type Err;
    /// As a plain `Result`.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
    /// Back from a plain `Result`.
    fn from_result(result: Result<Self::Ok, Self::Err>) -> Self;
}

impl<T, E> RetryOutput for Result<T, E> {
    type Ok = T;
    type Err = E;
    #[inline]
    fn into_result(self) -> Self {
        self
    }
    #[inline]
    fn from_result(result: Self) -> Self {
        result
    }
}

/// See [`RetryOutput::into_result`].
#[inline]
pub fn into_result<R: RetryOutput>(output: R) -> Result<R::Ok, R::Err> {
    output.into_result()
}

/// See [`RetryOutput::from_result`].
#[inline]
pub fn from_result<R: RetryOutput>(result: Result<R::Ok, R::Err>) -> R {
    R::from_result(result)
}

/// Fixes the output type of one attempt's `async` block to the function's return type, so `?`
/// inside the body converts errors as it does in the original function.
#[inline]
pub fn attempt<R: RetryOutput, F: Future<Output = R>>(attempt: F) -> F {
    attempt
}

/// The default classifier of `#[retryable]`: the error's own [`Classify`]. Built by
/// [`by_classify`], whose `E: Classify` bound gives the one error a user sees when it is missing.
pub struct ClassifyFns<E> {
    decide: fn(&E) -> Decision,
    reason: fn(&E) -> Option<String>,
}

/// See [`ClassifyFns`].
#[inline]
pub fn by_classify<E: Classify>() -> ClassifyFns<E> {
    ClassifyFns {
        decide: E::classify,
        reason: E::reason,
    }
}

impl<E> crate::Classifier<E> for ClassifyFns<E> {
    #[inline]
    fn decide(&mut self, error: &E) -> Decision {
        (self.decide)(error)
    }
    fn reason(&mut self, error: &E) -> Option<String> {
        (self.reason)(error)
    }
}

/// Waits between attempts; a zero wait arms no timer.
#[inline]
pub fn pause(wait: Duration) -> Pause {
    Pause((!wait.is_zero()).then(|| Box::pin(tokio::time::sleep(wait))))
}

/// See [`pause`]: the timer is boxed so it takes 8 bytes of the retrying future, not a
/// `Sleep`'s hundred-odd, and is made only for a wait that is not zero.
pub struct Pause(Option<std::pin::Pin<Box<tokio::time::Sleep>>>);

impl Future for Pause {
    type Output = ();

    #[inline]
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        match &mut self.0 {
            None => std::task::Poll::Ready(()),
            Some(sleep) => sleep.as_mut().poll(cx),
        }
    }
}

/// Bounds one attempt by `limit`; a timed-out attempt fails with `E::from(Elapsed)`, and the
/// `Elapsed` knows whether it cut off a request that must not be resent (see `attempt.rs`).
#[inline]
pub async fn with_timeout<T, E, F>(limit: Duration, attempt: F) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<Elapsed>,
{
    crate::attempt::with_timeout(limit, attempt).await
}

/// The operand of an `.await` inside a `#[retryable]` body, on its way to the compile-time
/// nesting check: `Probe(operand).check()` picks an inherent method below for a retrying
/// operand (inherent methods win over trait methods) and [`ProbePlain::check`] for anything
/// else. The macro then passes the result through a per-site function whose two bounds only
/// [`Plain`] meets (one fails for [`Nested`], the other for [`NestedClosure`], each with its own
/// message), so awaiting a retrying call fails to compile with the site's own message.
pub struct Probe<T>(pub T);

/// An awaited operand that does not retry.
pub struct Plain<T>(T);

/// An awaited operand that is a retrying function's future: a retry nested in another.
pub struct Nested<T>(T);

/// An awaited operand that is a [`Policy::retry`] call: a retry nested in another.
pub struct NestedClosure<T>(T);

impl<F> Probe<Retrying<F>> {
    /// Marks a retrying operand.
    #[inline]
    pub fn check(self) -> Nested<Retrying<F>> {
        Nested(self.0)
    }
}

impl<'p, Op, C, H, T, E> Probe<crate::RetryCall<'p, Op, C, H, T, E>> {
    /// Marks a closure retry, awaited through its `IntoFuture`.
    #[inline]
    pub fn check(self) -> NestedClosure<crate::RetryCall<'p, Op, C, H, T, E>> {
        NestedClosure(self.0)
    }
}

/// The fallback of [`Probe`]'s check, for operands that do not retry.
pub trait ProbePlain {
    /// The marked operand.
    type Marked;
    /// Marks a plain operand.
    fn check(self) -> Self::Marked;
}

impl<T> ProbePlain for Probe<T> {
    type Marked = Plain<T>;
    #[inline]
    fn check(self) -> Plain<T> {
        Plain(self.0)
    }
}

/// Unwraps a marked operand.
pub trait Operand {
    /// The operand itself.
    type Inner;
    /// The operand, ready to be awaited.
    fn into_inner(self) -> Self::Inner;
}

impl<T> Operand for Plain<T> {
    type Inner = T;
    #[inline]
    fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Operand for Nested<T> {
    type Inner = T;
    #[inline]
    fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Operand for NestedClosure<T> {
    type Inner = T;
    #[inline]
    fn into_inner(self) -> T {
        self.0
    }
}

// ---- #[idempotent] ----

pub use crate::idempotency::flow::Settings as IdempotentCall;
use crate::idempotency::{IdempotencyError, IdempotencyStore, Idempotent, KeyPart};
pub use crate::idempotency::{OnErr, Once, Retries, encode_key, encode_namespaced_key};

/// The flow of an `#[idempotent]` function, in its named future type.
#[inline]
pub fn idempotent<F: Future, K>(key: String, flow: F) -> Idempotent<F, K> {
    crate::idempotency::flow::wrap(key, flow)
}

/// `store = expr`, checked to be a store where the user wrote it.
#[inline]
pub fn store<S: IdempotencyStore + ?Sized>(store: &S) -> &S {
    store
}

/// The digest of `fingerprint = expr`.
pub fn fingerprint<F: KeyPart + ?Sized>(fingerprint: &F) -> String {
    crate::idempotency::digest(&encode_key(fingerprint))
}

pub use crate::idempotency::finish_transactional;
pub(crate) use crate::idempotency::flow::claim_transactional as claim_transactional_impl;

/// The first half of `#[idempotent(transaction = ...)]`: the claim and the store's transaction,
/// or the answer to return at once.
pub async fn claim_transactional<'s, S, T, E>(
    store: &'s S,
    call: &IdempotentCall,
) -> Result<(crate::idempotency::HeldClaim<'s, S>, S::Transaction), Result<T, E>>
where
    S: crate::idempotency::TransactionalStore + ?Sized,
    T: serde::de::DeserializeOwned,
    E: From<IdempotencyError>,
{
    claim_transactional_impl(store, call).await
}

/// `on_err = "keep"` (the default): every failure is kept.
#[inline]
pub fn keep_failures<E>(_: &E) -> OnErr {
    OnErr::Keep
}

/// `on_err = "release"`: every failure frees the key.
#[inline]
pub fn release_failures<E>(_: &E) -> OnErr {
    OnErr::Release
}

/// `on_err = path`, checked to be a `fn(&E) -> OnErr` where the user wrote it.
#[inline]
pub fn on_err<E>(decide: fn(&E) -> OnErr) -> fn(&E) -> OnErr {
    decide
}

/// Claims, runs `body` and stores its response; see `retry_core::idempotency`.
pub async fn run_idempotent<S, B, T, E>(
    store: &S,
    call: IdempotentCall,
    on_err: fn(&E) -> OnErr,
    body: B,
) -> Result<T, E>
where
    S: IdempotencyStore + ?Sized,
    B: Future<Output = Result<T, E>>,
    T: serde::Serialize + serde::de::DeserializeOwned,
    E: From<IdempotencyError> + core::fmt::Debug,
{
    crate::idempotency::flow::run(store, call, on_err, body).await
}

impl<F> Probe<Idempotent<F, Retries>> {
    /// Marks an idempotent call that retries inside its claim: still a retrying call.
    #[inline]
    pub fn check(self) -> Nested<Idempotent<F, Retries>> {
        Nested(self.0)
    }
}

// ---- dlq(...) ----

use crate::dlq::{DeadLetter, DeadLetterSink, DlqFailed, FailureClass};

/// `dlq(sink = expr)`, checked to be a sink where the user wrote it.
#[inline]
pub fn sink<S: DeadLetterSink + ?Sized>(sink: &S) -> &S {
    sink
}

/// What `dlq(id = ..., original = ...)` evaluated before the first attempt.
#[derive(Debug)]
pub struct LetterInput {
    msg_id: String,
    original: serde_json::Value,
    idempotency_key: Option<String>,
}

/// Evaluates `id` and `original` (through `redact`, when given) before the first attempt. An
/// original that cannot be serialised is parked as a note saying so, rather than not at all.
pub fn letter_input<I: std::fmt::Display + ?Sized, O: serde::Serialize + ?Sized>(
    id: &I,
    original: &O,
    redact: Option<fn(serde_json::Value) -> serde_json::Value>,
    idempotency_key: Option<String>,
) -> LetterInput {
    let original = serde_json::to_value(original)
        .unwrap_or_else(|e| serde_json::Value::String(format!("<original not serialisable: {e}>")));
    LetterInput {
        msg_id: id.to_string(),
        original: redact.map_or(original.clone(), |redact| redact(original)),
        idempotency_key,
    }
}

/// On give-up, parks the call's dead letter before its error returns. Parked: the error as is.
/// Not parked (the sink failed): `E::from(DlqFailed)`, so the caller does not acknowledge the
/// message. A call collapsed to one attempt by nesting parks nothing: its outer layer decides.
pub async fn park_on_give_up<S, T, E>(
    site: &'static Site,
    state: &State<'_>,
    result: Result<T, E>,
    sink: &S,
    input: &LetterInput,
) -> Result<T, E>
where
    S: DeadLetterSink + ?Sized,
    E: From<DlqFailed>,
{
    let (Err(_), Some(give_up), Some(failures)) = (&result, state.gave_up(), state.failures())
    else {
        return result;
    };
    let class = match give_up {
        crate::GiveUp::SingleAttempt => return result,
        crate::GiveUp::NotRetryable => FailureClass::Data,
        _ => FailureClass::System,
    };
    let letter = DeadLetter {
        msg_id: input.msg_id.clone(),
        original: input.original.clone(),
        reason: failures.reason.clone(),
        attempts: state.attempts(),
        first_failed_at: crate::time::format_rfc3339(failures.first),
        last_failed_at: crate::time::format_rfc3339(failures.last),
        trace_id: format!("{:016x}", crate::scope::current_trace_id()),
        class,
        error_type: std::any::type_name::<E>().to_owned(),
        idempotency_key: input.idempotency_key.clone(),
    };
    match sink.park(&letter).await {
        Ok(()) => {
            tracing::info!(function = site.function(), msg_id = %letter.msg_id, class = %letter.class, "parked a dead letter");
            result
        }
        Err(error) => {
            tracing::error!(function = site.function(), msg_id = %letter.msg_id, %error, "dead letter NOT parked");
            Err(E::from(DlqFailed { letter, error }))
        }
    }
}
