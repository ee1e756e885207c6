//! Retries for async Rust, decided in one compile-checked place: retry policy, error
//! classification, dead-lettering and idempotency.
//!
//! - [`#[retryable]`](retryable) turns an `async fn` returning `Result<T, E>` into one that
//!   retries with capped, jittered exponential backoff. Every error says whether it may be
//!   retried ([`Classify`], or `#[derive(Classify)]`), a server's `Retry-After` is honoured, and
//!   the attribute's arguments are checked when you compile. [`Policy`] does the same at run time,
//!   without the macro.
//! - Retries happen in one layer only: a retry inside a retry is a compile error where the
//!   compiler sees it, and is collapsed to one attempt at run time where it cannot ([`scope`]).
//! - A call that gives up is parked in a dead-letter queue ([`dlq`]: SQLite, PostgreSQL, or an
//!   append-only JSONL file) with what a person needs later, and can be redriven safely
//!   ([`dlq::Redrive`]).
//! - [`#[idempotent]`][attr-idempotent] receivers (and [`tower::IdempotencyLayer`] for HTTP servers)
//!   answer a duplicate with the first stored response instead of a second side effect. A key
//!   is freed for a second run only when the library knows the first run's effect did not
//!   happen.
//!
//! # Install
//!
//! ```toml
//! [dependencies]
//! retry-core = "0.1"                  # add features as needed: see the table below
//! retry-sqlite = "0.1"                # the stores in one SQLite file (or retry-postgres)
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! Or `cargo add retry-core retry-sqlite` (`cargo add retry-core retry-postgres` for PostgreSQL).
//! Minimum Rust: 1.95. The attributes work in crates of every edition (2018, 2021, 2024).
//!
//! # A tour
//!
//! ```
//! use retry_core::{retryable, Classify, Decision};
//!
//! #[derive(Debug, Classify)]
//! enum FetchError {
//!     #[classify(retry)]
//!     Unavailable, // 502, 503, a reset connection: may work next time
//!     #[classify(stop)]
//!     Rejected(u16), // 400, 404: fails the same way next time
//! }
//!
//! #[retryable(max = 5, base = "100ms", cap = "30s", jitter = "full")]
//! async fn fetch_quote(id: u64, flaky: &std::sync::atomic::AtomicU32) -> Result<u64, FetchError> {
//!     match flaky.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
//!         0 | 1 => Err(FetchError::Unavailable),
//!         _ => Ok(id * 100),
//!     }
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     let flaky = std::sync::atomic::AtomicU32::new(0);
//!     assert_eq!(fetch_quote(7, &flaky).await.unwrap(), 700); // the third attempt
//!     assert_eq!(FetchError::Rejected(404).classify(), Decision::Stop);
//! }
//! ```
//!
//! Next: [`#[idempotent]`][attr-idempotent] on the receiving side, `dlq(..)` on `#[retryable]` for
//! what gives up, [`http`], [`reqwest`] and [`tower`] for HTTP clients and servers
//! ([`tower::RetryLayer`] and [`reqwest_middleware`] wrap a client you already have), [`tonic`]
//! for gRPC. The README and the guide under `docs/` in the source repository walk through each
//! with complete examples, and `RELIABILITY.md` lists the failures the tests inject and what each
//! one costs.
//!
//! # Features
//!
//! `dlq` and `idempotency` are on by default. Without default features the crate is the retry
//! kernel alone (`#[retryable]`, [`Policy`], classification, budgets), which builds none of
//! serde, serde_json, jiff, sha2 or libc.
//!
//! | feature | gives | for |
//! | --- | --- | --- |
//! | `idempotency` (default) | `#[idempotent]`, the [`idempotency`] module, `MemoryStore` | `serde` 1, `sha2` 0.11 |
//! | `dlq` (default) | `dlq(..)` on `#[retryable]`, the [`dlq`] module (`MemoryDeadLetters`, `JsonlSink`, `JsonlReader`, redrive; implies `idempotency`) | `serde_json` 1, `jiff` 1 |
//! | `http` | `Caller-Retries` and `Idempotency-Key` header helpers, HTTP status and `Retry-After` classification | `http` 1.x |
//! | `reqwest` | `HttpError`, `send_checked`, `.idempotency_key(..)` on `RequestBuilder`, DNS/TLS connect classification (implies `http`) | `reqwest` 0.13 |
//! | `tower` | `IdempotencyLayer`, the server-side `Caller-Retries` layer, `RetryLayer` for clients (implies `http`) | `tower-service` 0.3, `http-body` 1 (axum 0.8, hyper-util 0.1) |
//! | `reqwest-middleware` | [`reqwest_middleware::RetryMiddleware`] (implies `reqwest`) | `reqwest-middleware` 0.5 |
//! | `tonic` | [`Classify`] for `tonic::Status`, the `caller-retries` metadata (implies `http`) | `tonic` 0.14 |
//! | `opentelemetry` | dead letters parked under a current span carry its trace id; `send_checked` and `RetryMiddleware` set `http.request.resend_count` on resends | `opentelemetry` 0.33 (the API) |
//! | `serde` | `Serialize`/`Deserialize` for the values an application keeps or configures: a [`Policy`] read from configuration, durations as strings (see [`duration`]) | `serde` 1 |
//! | `test-suite` | the conformance checks every store passes, for authors of their own stores | |
//!
//! The SQL engines are crates of their own, on this crate's public traits: `retry-sqlite`
//! (`SqliteStore`, `SqliteDeadLetters`, on rusqlite with SQLite bundled) and `retry-postgres`
//! (`PgStore`, `PgDeadLetters`, on tokio-postgres; TLS with its feature `tls`).
// Links to items behind features: without the feature, to the published documentation. (A
// definition must not continue the paragraph or table before it: hence the empty line.)
#![doc = ""]
#![cfg_attr(
    feature = "idempotency",
    doc = "[attr-idempotent]: macro@crate::idempotent"
)]
#![cfg_attr(
    not(feature = "idempotency"),
    doc = "[attr-idempotent]: https://docs.rs/retry-core/latest/retry_core/attr.idempotent.html"
)]
#![cfg_attr(
    not(feature = "dlq"),
    doc = "[`dlq`]: https://docs.rs/retry-core/latest/retry_core/dlq/index.html"
)]
#![cfg_attr(
    not(feature = "dlq"),
    doc = "[`dlq::Redrive`]: https://docs.rs/retry-core/latest/retry_core/dlq/struct.Redrive.html"
)]
#![cfg_attr(
    not(feature = "dlq"),
    doc = "[`dlq::DeadLetter`]: https://docs.rs/retry-core/latest/retry_core/dlq/struct.DeadLetter.html"
)]
#![cfg_attr(
    not(feature = "idempotency"),
    doc = "[`idempotency`]: https://docs.rs/retry-core/latest/retry_core/idempotency/index.html"
)]
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`tower::IdempotencyLayer`]: https://docs.rs/retry-core/latest/retry_core/tower/struct.IdempotencyLayer.html"
)]
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`tower`]: https://docs.rs/retry-core/latest/retry_core/tower/index.html"
)]
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`tower::RetryLayer`]: https://docs.rs/retry-core/latest/retry_core/tower/struct.RetryLayer.html"
)]
#![cfg_attr(
    not(feature = "http"),
    doc = "[`http`]: https://docs.rs/retry-core/latest/retry_core/http/index.html"
)]
#![cfg_attr(
    not(feature = "reqwest"),
    doc = "[`reqwest`]: https://docs.rs/retry-core/latest/retry_core/reqwest/index.html"
)]
#![cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`reqwest_middleware`]: https://docs.rs/retry-core/latest/retry_core/reqwest_middleware/index.html"
)]
#![cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`reqwest_middleware::RetryMiddleware`]: https://docs.rs/retry-core/latest/retry_core/reqwest_middleware/struct.RetryMiddleware.html"
)]
#![cfg_attr(
    not(feature = "tonic"),
    doc = "[`tonic`]: https://docs.rs/retry-core/latest/retry_core/tonic/index.html"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

mod attempt_timeout;
pub mod backoff;
mod budget;
mod classify;
mod closure;
#[cfg(feature = "serde")]
mod config;
#[cfg(feature = "test-suite")]
mod conformance;
mod decide;
#[cfg(feature = "dlq")]
#[cfg_attr(docsrs, doc(cfg(feature = "dlq")))]
pub mod dlq;
pub mod duration;
mod error_chain;
mod give_up;
mod hook;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub mod idempotency;
mod loom_sync;
pub mod metrics;
mod otel;
mod pause;
mod policy;
mod random;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
pub mod reqwest_middleware;
mod retrying;
pub mod scope;
mod site;
#[cfg(any(feature = "dlq", feature = "idempotency"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "dlq", feature = "idempotency"))))]
pub mod time;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod tonic;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

pub use budget::{BudgetSettings, RetryBudget};
pub use classify::{ByClassify, Classifier, Classify, Decision, Elapsed};
pub use closure::{RetryCall, RetryFuture};
pub use error_chain::error_chain;
pub use give_up::GiveUp;
pub use hook::{Hook, NoHook, RetryContext, RetryHook, ThreeArguments, WithContext};
#[cfg(feature = "idempotency")]
pub use idempotency::{IdempotencyError, Idempotent};
pub use policy::{Jitter, Knobs, Policy, UnknownJitter};
pub use retrying::{Retrying, SingleAttempt};

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
/// `retry_if = path` (a `fn(&E) -> Decision` used instead of [`Classify`]), `on_retry = path` (called
/// before each wait: a `fn(u32, &E, Duration)`, or a `fn(&RetryContext<'_, E>)` that also gets
/// the function's name and trace id), `policy = expr` (a [`Policy`] built at run time, instead
/// of the literal knobs; its [`attempt_timeout`](Policy::attempt_timeout) is applied when
/// `E: From<Elapsed>`), `budget = expr` (a [`RetryBudget`] shared by many calls),
/// `dlq(sink = expr, id = expr, original = expr, redact = path, classes = "system")` (on
/// give-up, park a [`dlq::DeadLetter`] before the error returns; needs `E: From<dlq::DlqFailed>`;
/// `classes` parks only give-ups after transient failures (`"system"`) or only `Stop`s
/// (`"data"`), the others return as they are; default `"all"`) and
/// `crate = path`. Durations are written "250ms", "1s",
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
///
/// It works in crates of every edition (2018, 2021, 2024: the returned future captures the
/// arguments' lifetimes as an `async fn`'s does), and next to the attributes a function already
/// has: `#[tracing::instrument]`, above or below it, gives one span around all the attempts (the
/// waits between them included), and on a method of an `#[async_trait]` impl the boxed future is
/// the retry loop. `tests/editions/shapes.rs` builds every such shape in each edition.
#[cfg_attr(not(feature = "dlq"), doc = "")]
#[cfg_attr(
    not(feature = "dlq"),
    doc = "[`dlq::DeadLetter`]: https://docs.rs/retry-core/latest/retry_core/dlq/struct.DeadLetter.html"
)]
pub use retry_macros::retryable;

/// Makes an `async fn` answer duplicates with its first stored response instead of running
/// again: see [`idempotency`] for the flow and the stores.
///
/// ```
/// use retry_core::idempotency::{IdempotencyError, MemoryStore};
/// use retry_core::idempotent;
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// #[derive(Debug)]
/// enum DepositError { Idempotency(IdempotencyError) }
/// impl From<IdempotencyError> for DepositError {
///     fn from(e: IdempotencyError) -> Self { DepositError::Idempotency(e) }
/// }
///
/// struct Deposit { sender: String, msg_no: u64, amount: u64 }
/// static EFFECTS: AtomicU32 = AtomicU32::new(0);
///
/// #[idempotent(key = (req.sender.as_str(), req.msg_no), store = inbox, retention = "30d")]
/// async fn deposit(inbox: &MemoryStore, req: Deposit) -> Result<u64, DepositError> {
///     EFFECTS.fetch_add(1, Ordering::SeqCst);
///     Ok(req.amount)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let inbox = MemoryStore::new();
/// let send = || Deposit { sender: "bank-a".into(), msg_no: 7, amount: 100 };
/// assert_eq!(deposit(&inbox, send()).await.unwrap(), 100);
/// assert_eq!(deposit(&inbox, send()).await.unwrap(), 100);
/// assert_eq!(EFFECTS.load(Ordering::SeqCst), 1, "the duplicate got the stored response");
/// # }
/// ```
///
/// Arguments: `key = expr` (required; see [`idempotency::KeyPart`]), `store = expr` (required;
/// anything implementing [`idempotency::IdempotencyStore`], taken by reference),
/// `biz_key = expr` (shown to people, any `Display`), `fingerprint = expr` (same key, other
/// fingerprint → `KeyReused`), `scope = expr` (the tenant: a response is only returned within
/// its scope), `lease = "30s"` (renewed every third of it while the body runs),
/// `retention = "30d"`, `on_err = "keep" | "release" | "resume" | path` (what a failed body
/// leaves: by default its failure is kept for resends; `"resume"` runs the body again on a
/// resend, skipping its finished [`idempotency::step`]s; see [`idempotency::OnErr`]),
/// `namespace = "charge.v1"` (default: the function's name; two functions never share keys),
/// `transaction = tx` (transactional mode) and `crate = path`. The function needs
/// `T: Serialize + DeserializeOwned` and `E: From<IdempotencyError> + Debug`.
///
/// Above `#[retryable]` it claims once and retries inside the claim (then `#[retryable]` needs
/// `deadline` and `attempt_timeout`, and `lease` must be longer than both together); below it,
/// every attempt claims anew, and `on_err` must be written (a kept failure makes the retries
/// replay it; see the table of what frees a key in docs/idempotency.md).
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub use retry_macros::idempotent;

/// Derives [`Classify`](trait@Classify) for an error enum, one decision per variant.
///
/// Every variant says what its failure means, so no error is ever retried by accident: a
/// variant without `#[classify(...)]` is a compile error.
///
/// - `#[classify(retry)]`: transient, try again after the backoff ([`Decision::Retry`]).
/// - `#[classify(stop)]`: fails the same way next time, give up ([`Decision::Stop`]).
/// - `#[classify(delegate)]`: the variant's single field classifies itself (an `io::Error`,
///   another derived error, ...) and gives its [`reason`](Classify::reason). When its type uses
///   a generic parameter, the impl requires that type to be `Classify`.
/// - `#[classify(retry_after = field)]`: the named field holds a `Duration` or
///   `Option<Duration>`; `Some(d)` or `d` is [`Decision::RetryAfter`]`(d)`, `None` is
///   [`Decision::Retry`]. In a tuple variant the field is its index: `retry_after = 0`.
///
/// Other attributes (`thiserror`'s `#[error(...)]`, `#[from]`, `#[source]`) are left alone.
/// On a struct, one `#[classify(...)]` on the struct itself classifies every value.
/// `#[classify(crate = path)]` on the type names where `retry_core` is, when it is renamed.
/// `#[classify(reason = display)]` on the type makes its `Display` its
/// [`reason`](Classify::reason) (a delegated field's own reason first), so the closure API's
/// events and dead letters say what happened too.
///
/// ```
/// use std::{io, time::Duration};
/// use retry_core::{Classify, Decision};
///
/// #[derive(Debug, Classify)]
/// enum FetchError {
///     #[classify(retry)]
///     Unavailable,
///     #[classify(stop)]
///     NotFound { id: u64 },
///     #[classify(delegate)]
///     Io(io::Error),
///     #[classify(retry_after = wait)]
///     TooManyRequests { wait: Option<Duration> },
/// }
///
/// assert_eq!(FetchError::NotFound { id: 7 }.classify(), Decision::Stop);
/// let refused = FetchError::Io(io::ErrorKind::ConnectionRefused.into());
/// assert_eq!(refused.classify(), Decision::Retry);
/// let later = FetchError::TooManyRequests { wait: Some(Duration::from_secs(2)) };
/// assert_eq!(later.classify(), Decision::RetryAfter(Duration::from_secs(2)));
/// ```
///
/// The derive writes the `match` you would write by hand:
///
/// ```
/// # use std::{io, time::Duration};
/// # use retry_core::{Classify, Decision};
/// # enum FetchError { Unavailable, NotFound { id: u64 }, Io(io::Error), TooManyRequests { wait: Option<Duration> } }
/// impl Classify for FetchError {
///     fn classify(&self) -> Decision {
///         match self {
///             Self::Unavailable { .. } => Decision::Retry,
///             Self::NotFound { .. } => Decision::Stop,
///             Self::Io(error) => Classify::classify(error),
///             // A `Duration` field gives `Decision::RetryAfter(*wait)`.
///             Self::TooManyRequests { wait, .. } => {
///                 wait.map_or(Decision::Retry, Decision::RetryAfter)
///             }
///         }
///     }
///
///     // Written only when a variant delegates; otherwise the default `None` stays.
///     fn reason(&self) -> Option<String> {
///         match self {
///             Self::Io(error) => Classify::reason(error),
///             _ => None,
///         }
///     }
/// }
/// ```
///
/// The trait and the derive share the name `Classify` (they live in different namespaces), so
/// one `use retry_core::Classify;` brings both. Each compile error the derive gives is shown,
/// with its message, in `tests/ui/derive_*.rs`.
pub use retry_macros::Classify;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
