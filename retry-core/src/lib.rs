#![doc = include_str!("../../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

pub mod backoff;
mod budget;
mod call;
mod classify;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod metrics;
mod policy;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest;
mod retrying;
pub mod scope;
mod state;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

pub use budget::RetryBudget;
pub use call::{RetryCall, RetryFuture};
pub use classify::{ByClassify, Classifier, Classify, Decision, Elapsed};
pub use policy::{Jitter, Policy, UnknownJitter};
pub use retrying::{Retrying, SingleAttempt};
pub use state::{GiveUp, NoHook, RetryHook};

/// Retries an `async fn` that returns `Result<T, E>`, with exponential backoff and jitter.
///
/// ```
/// use retry_core::{retryable, Classify, Decision};
///
/// #[derive(Debug)]
/// enum FetchError { Unavailable, NotFound }
///
/// impl Classify for FetchError {
///     fn classify(&self) -> Decision {
///         match self {
///             FetchError::Unavailable => Decision::Retry,
///             FetchError::NotFound => Decision::Stop,
///         }
///     }
/// }
///
/// #[retryable(max = 5, base = "100ms", cap = "2s", jitter = "full", deadline = "10s")]
/// async fn fetch_quote(id: u64) -> Result<u64, FetchError> {
///     if id == 0 { Err(FetchError::NotFound) } else { Ok(id * 100) }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// assert_eq!(fetch_quote(7).await.unwrap(), 700);
/// # }
/// ```
///
/// Arguments, all optional and checked at compile time: `max` (total attempts, 1..=1000,
/// default 3), `base` ("1s"), `cap` ("30s"), `jitter` ("full", "equal", "decorrelated" or
/// "none"), `deadline`, `max_retry_after` ("5m"), `attempt_timeout` (needs `E: From<Elapsed>`),
/// `retry_if = path` (a `fn(&E) -> Decision` used instead of [`Classify`]), `on_retry = path` (a
/// `fn(u32, &E, Duration)` called before each wait), `policy = expr` (a [`Policy`] built at run
/// time, instead of the literal knobs) and `crate = path`. Durations are written "250ms", "1s",
/// "2m", "1h30m", "30d".
///
/// The function becomes a plain `fn` returning [`Retrying`]; `fetch_quote` above is equivalent
/// to this hand-written loop (the generated code drives the same state machine as
/// [`Policy::retry`], so every decision is taken in one place):
///
/// ```
/// # use retry_core::{Classify, Decision, Policy, Retrying};
/// # #[derive(Debug)] enum FetchError { Unavailable, NotFound }
/// # impl Classify for FetchError {
/// #     fn classify(&self) -> Decision { match self { FetchError::Unavailable => Decision::Retry, FetchError::NotFound => Decision::Stop } }
/// # }
/// use std::time::Duration;
///
/// async fn fetch_quote(id: u64) -> Result<u64, FetchError> {
///     static POLICY: Policy = Policy::new()
///         .max_attempts(5)
///         .base(Duration::from_millis(100))
///         .cap(Duration::from_secs(2))
///         .deadline(Duration::from_secs(10));
///     POLICY
///         .retry(|| async move {
///             // the original body, once per attempt
///             if id == 0 { Err(FetchError::NotFound) } else { Ok(id * 100) }
///         })
///         .name("fetch_quote")
///         .await
/// }
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() { assert_eq!(fetch_quote(7).await.unwrap(), 700); }
/// ```
///
/// The attribute emits the loop inline instead of a closure, so `&mut self` methods and `Send`
/// futures work: by-value arguments are cloned for every attempt but the last (they must be
/// `Clone`), `&mut` arguments are re-borrowed, and methods must take `&self` or `&mut self`.
/// Each compile error it gives is shown, with its message, in `tests/ui/`.
pub use retry_macros::retryable;


#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
