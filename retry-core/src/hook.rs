//! What `on_retry` is made into: a hook that sees each failed attempt, with its context, before
//! the wait that follows it.

use std::time::Duration;

use crate::site::Site;

/// Sees each failed attempt before the wait that follows it, with its [`RetryContext`]:
/// what `on_retry` and [`RetryCall::on_retry_context`](crate::RetryCall::on_retry_context)
/// are made into, or [`NoHook`].
#[diagnostic::on_unimplemented(
    message = "`on_retry` takes a function of the wrong signature for the error `{E}`",
    label = "expected `fn(u32, &{E}, Duration)` or `fn(&RetryContext<'_, {E}>)`",
    note = "write `fn log_retry(attempt: u32, error: &{E}, wait: Duration)`, or `fn log_retry(context: &retry_core::RetryContext<'_, {E}>)` to also get the function name and trace id"
)]
pub trait RetryHook<E> {
    /// Called once per failed attempt that will be retried, before the wait.
    fn before_wait(&mut self, context: &RetryContext<'_, E>);
}

/// What a retry hook learns about the attempt that failed: which call (function, module, trace
/// id, the same as on the call's tracing events, so a log line written here can be matched to
/// them among many concurrent calls), which attempt, its error and the chosen wait.
///
/// ```
/// use retry_core::{retryable, Classify, Decision, RetryContext};
///
/// #[derive(Debug)]
/// struct Busy;
/// impl Classify for Busy {
///     fn classify(&self) -> Decision { Decision::Retry }
/// }
///
/// fn log_retry(context: &RetryContext<'_, Busy>) {
///     assert_eq!(context.function(), "pay");
///     assert_eq!(context.module(), module_path!(), "where `pay` is defined");
///     eprintln!(
///         "{}::{} [trace {:016x}] attempt {} failed ({:?}); next in {:?}",
///         context.module(), context.function(), context.trace_id(),
///         context.attempt(), context.error(), context.wait(),
///     );
/// }
///
/// #[retryable(max = 3, base = "10ms", on_retry = log_retry)]
/// async fn pay() -> Result<(), Busy> { Err(Busy) }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// assert!(pay().await.is_err());
/// # }
/// ```
#[derive(Debug)]
pub struct RetryContext<'a, E> {
    site: &'a Site,
    attempt: u32,
    error: &'a E,
    wait: Duration,
}

impl<'a, E> RetryContext<'a, E> {
    /// The context of `site`'s failed `attempt`, about to wait `wait`.
    pub(crate) fn new(site: &'a Site, attempt: u32, error: &'a E, wait: Duration) -> Self {
        RetryContext {
            site,
            attempt,
            error,
            wait,
        }
    }

    /// The function's name (`.name(..)` of a closure retry, `"closure"` without one).
    pub fn function(&self) -> &'static str {
        self.site.function()
    }

    /// The function's module path; empty for a closure retry.
    pub fn module(&self) -> &'static str {
        self.site.module()
    }

    /// The logical call's trace id: the one on its tracing events and its dead letter. Drawn
    /// when first asked for (a hook that never asks costs the call nothing): the hook runs
    /// inside the call's poll, where its retry scope holds the id.
    pub fn trace_id(&self) -> u64 {
        crate::scope::current_trace_id()
    }

    /// The attempt that failed, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Its error.
    pub fn error(&self) -> &'a E {
        self.error
    }

    /// The wait chosen before the next attempt.
    pub fn wait(&self) -> Duration {
        self.wait
    }
}

/// A hook that does nothing: the default of `on_retry`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl<E> RetryHook<E> for NoHook {
    fn before_wait(&mut self, _: &RetryContext<'_, E>) {}
}

/// A hook of either form `on_retry` accepts, told apart by `M` (a marker the compiler infers
/// from the function's signature): `fn(u32, &E, Duration)` ([`ThreeArguments`]) or
/// `fn(&RetryContext<'_, E>)` ([`WithContext`]).
#[derive(Debug, Clone, Copy)]
pub struct Hook<F, M> {
    hook: F,
    form: std::marker::PhantomData<M>,
}

impl<F, M> Hook<F, M> {
    /// Wraps `hook`; its form is inferred where it is used.
    pub fn new(hook: F) -> Self {
        Hook {
            hook,
            form: std::marker::PhantomData,
        }
    }
}

/// The first form of `on_retry`: `(attempt, &error, wait)`.
#[derive(Debug, Clone, Copy)]
pub enum ThreeArguments {}

/// The form of `on_retry` that takes the whole [`RetryContext`].
#[derive(Debug, Clone, Copy)]
pub enum WithContext {}

impl<E, F: FnMut(u32, &E, Duration)> RetryHook<E> for Hook<F, ThreeArguments> {
    fn before_wait(&mut self, context: &RetryContext<'_, E>) {
        (self.hook)(context.attempt, context.error, context.wait);
    }
}

impl<E, F: FnMut(&RetryContext<'_, E>)> RetryHook<E> for Hook<F, WithContext> {
    fn before_wait(&mut self, context: &RetryContext<'_, E>) {
        (self.hook)(context);
    }
}
