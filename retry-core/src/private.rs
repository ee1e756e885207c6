//! What the macros' generated code calls. Not public API: no semver guarantee, may change in any
//! release. Everything here is a thin door onto the runtime; decisions live in [`State`].

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

pub use crate::attempt_timeout::{Bounded, OnTimeout};
pub use crate::decide::{Next, State};
pub use crate::hook::{Hook, NoHook};
pub use crate::{Classify, Decision, Elapsed, Jitter, Policy, RetryBudget, Retrying};
pub use core;

pub use crate::pause::{Pause, pause};
pub use crate::site::Site;
pub use ::metrics;

#[cfg(feature = "dlq")]
#[path = "private/dead_letters.rs"]
mod dead_letters;
#[path = "private/describe.rs"]
mod describe;
#[cfg(feature = "idempotency")]
#[path = "private/idempotent.rs"]
mod idempotent;
#[cfg(feature = "dlq")]
pub use dead_letters::*;
pub use describe::*;
#[cfg(feature = "idempotency")]
pub use idempotent::*;

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
pub fn take_or_clone<T: AttemptArgument>(slot: &mut Option<T>, last: bool) -> T {
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

/// The argument for an attempt of a `dlq(..)` function: always a clone, so the original is
/// still there for the dead letter when the call gives up.
#[inline]
pub fn clone_arg<T: Clone>(value: &T) -> T {
    value.clone()
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

/// Bounds one attempt by `limit` (`attempt_timeout = ".."`, written on the attribute); a
/// timed-out attempt fails with `E::from(Elapsed)`, and the `Elapsed` knows whether it cut off a
/// request that must not be resent (see `attempt_timeout.rs`).
#[inline]
pub fn with_timeout<T, E, F>(limit: Duration, attempt: F) -> Bounded<F, E>
where
    F: Future<Output = Result<T, E>>,
    E: FromElapsed,
{
    Bounded::timed(limit, attempt, E::from)
}

/// Bounds one attempt of a `policy = expr` function by the policy's `attempt_timeout`, if any
/// (see [`State::bound`]); `on_timeout` comes from a [`TimeoutProbe`]. The call site said to
/// once is this call in the expansion: the attribute.
#[inline]
#[track_caller]
pub fn bound<F, E>(
    state: &State<'_>,
    site: &'static Site,
    on_timeout: OnTimeout<E>,
    attempt: F,
) -> Bounded<F, E> {
    state.bound(site, Location::caller(), on_timeout, attempt)
}

/// What a `policy = expr` function whose error has no `From<Elapsed>` is told to write.
const FUNCTION_FIX: &str = "implement `From<retry_core::Elapsed>` for the function's error type, or write `attempt_timeout = \"..\"` on the attribute";

/// The error type `E` of a `policy = expr` function, probed for `From<Elapsed>` by autoref:
/// `(&&TimeoutProbe::of(&attempt)).on_timeout()` picks [`TimeoutVia`] (`E::from`) when the bound
/// holds, else [`TimeoutNone`] one auto-deref further, so the policy's `attempt_timeout` is
/// applied whenever it can be and the function compiles either way.
pub struct TimeoutProbe<E>(std::marker::PhantomData<fn() -> E>);

impl<E> TimeoutProbe<E> {
    /// The probe for the error type of `attempt`, a function's attempt.
    #[inline]
    pub fn of<F, R>(_: &F) -> Self
    where
        F: Future<Output = R>,
        R: RetryOutput<Err = E>,
    {
        TimeoutProbe(std::marker::PhantomData)
    }
}

/// See [`TimeoutProbe`]: `E: From<Elapsed>`.
pub trait TimeoutVia<E> {
    /// `E::from`.
    fn on_timeout(&self) -> OnTimeout<E>;
}

impl<E: From<Elapsed>> TimeoutVia<E> for &TimeoutProbe<E> {
    #[inline]
    fn on_timeout(&self) -> OnTimeout<E> {
        OnTimeout::Fail(E::from)
    }
}

/// See [`TimeoutProbe`]: any other `E`.
pub trait TimeoutNone<E> {
    /// Runs attempts unbounded, saying what to write.
    fn on_timeout(&self) -> OnTimeout<E>;
}

impl<E> TimeoutNone<E> for TimeoutProbe<E> {
    #[inline]
    fn on_timeout(&self) -> OnTimeout<E> {
        OnTimeout::RunOn { fix: FUNCTION_FIX }
    }
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

// ---- Bound checks: one check per bound, then paths that do not ask again ----
//
// A bound the user can miss is checked by one helper, spanned where the user wrote the token at
// fault; the generated code then reaches the runtime through what that helper returned, whose
// uses carry no bound. A missed bound is then reported once, not at every use.

/// The conversions of a `#[retryable]` function's output type to and from a plain `Result`,
/// from [`output`]. Plain function pointers: using them asks nothing more of `R`.
pub struct Output<R, T, E> {
    /// See [`RetryOutput::into_result`].
    pub into: fn(R) -> Result<T, E>,
    /// See [`RetryOutput::from_result`].
    pub from: fn(Result<T, E>) -> R,
}

/// Checks that `R` is a `Result` (the one error a user sees when it is not) and returns its
/// conversions. When it is not, `T` and `E` are left unknown, and rustc reports nothing more
/// about them.
#[inline]
pub fn output<R: RetryOutput>() -> Output<R, R::Ok, R::Err> {
    Output {
        into: R::into_result,
        from: R::from_result,
    }
}

/// Marks the impl of a check whose bounds hold.
pub struct Holds;

/// Marks the second impl of a check, which never applies (no type is [`Never`]). With two impls
/// to choose from, rustc weighs the check's bounds when it resolves it; when they fail, the
/// check's result is left unknown, and nothing that uses it is reported again.
pub struct NeverHolds;

/// Implemented by no type; see [`NeverHolds`].
pub trait Never {}

/// `T: Clone` for a by-value argument of a `#[retryable]` function, under a name whose error
/// says what to write; required by [`take_or_clone`].
#[diagnostic::on_unimplemented(
    message = "`#[retryable]` gives every attempt its own `{Self}`, so this by-value argument must implement `Clone`",
    label = "`{Self}` is not `Clone`",
    note = "derive or implement `Clone` for `{Self}`, or take the argument by reference (`&{Self}`) so every attempt borrows it"
)]
pub trait AttemptArgument: Clone {}

impl<T: Clone> AttemptArgument for T {}

/// `E: From<Elapsed>` for the error type of a function with `attempt_timeout`, under a name whose
/// error says what to write; required by [`with_timeout`].
#[diagnostic::on_unimplemented(
    message = "`attempt_timeout` needs the error type `{Self}` to implement `From<Elapsed>`",
    label = "an attempt that times out fails with `{Self}::from(Elapsed)`",
    note = "add `impl From<retry_core::Elapsed> for {Self}`, usually a variant marked `#[classify(retry)]`"
)]
pub trait FromElapsed: From<Elapsed> {}

impl<E: From<Elapsed>> FromElapsed for E {}
