//! What `#[idempotent]` expands to: the claim, the run and the stored response, and the checks of
//! `store = ..` and of the function's response and error types.

use std::future::Future;

use super::{Holds, Nested, Never, NeverHolds, Probe};

pub use crate::idempotency::flow::Settings as IdempotentCall;
use crate::idempotency::{IdempotencyError, IdempotencyStore, Idempotent, KeyPart};
pub use crate::idempotency::{OnErr, Once, Retries, encode_key, encode_namespaced_key};

/// The flow of an `#[idempotent]` function, in its named future type.
#[inline]
pub fn idempotent<F: Future, K>(key: String, flow: F) -> Idempotent<F, K> {
    crate::idempotency::flow::wrap(key, flow)
}

/// `store = expr`, checked to be a store where the user wrote it; see [`IsStore`].
#[inline]
pub fn store<M, S: IsStore<M> + ?Sized>(store: &S) -> &S::Store {
    store.store()
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

/// `on_err = "resume"`: every failure frees the key for a resend that skips finished steps.
#[inline]
pub fn resume_failures<E>(_: &E) -> OnErr {
    OnErr::Resume
}

/// `on_err = path`, checked to be a `fn(&E) -> OnErr` where the user wrote it.
#[inline]
pub fn on_err<E>(decide: fn(&E) -> OnErr) -> fn(&E) -> OnErr {
    decide
}

/// Claims, runs `body` and stores its response; see `retry_core::idempotency`.
pub async fn run_idempotent<S, B, T, E, M>(
    store: &S,
    call: IdempotentCall,
    on_err: fn(&E) -> OnErr,
    body: B,
) -> Result<T, E>
where
    S: IdempotencyStore + ?Sized,
    B: Future<Output = Result<T, E>>,
    T: StoredResponse<M>,
    E: StoredError,
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

/// `S: IdempotencyStore`, checked once by [`store`]; the flow then uses the `Store` it gives.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idempotency store",
    label = "`store = ...` must name an `IdempotencyStore`",
    note = "use a `MemoryStore`, a `retry_sqlite::SqliteStore`, or implement `retry_core::idempotency::IdempotencyStore`"
)]
pub trait IsStore<M> {
    /// The store: `Self`, when it is one.
    type Store: ?Sized;
    /// The store itself.
    fn store(&self) -> &Self::Store;
}

impl<S: IdempotencyStore + ?Sized> IsStore<Holds> for S {
    type Store = S;
    #[inline]
    fn store(&self) -> &S {
        self
    }
}

impl<S: Never + ?Sized> IsStore<NeverHolds> for S {
    type Store = S;
    #[inline]
    fn store(&self) -> &S {
        self
    }
}

/// `T: Serialize + DeserializeOwned` for the response `T` of an `#[idempotent]` function, under a
/// name whose error says what to write; required by [`run_idempotent`].
#[diagnostic::on_unimplemented(
    message = "`#[idempotent]` stores the response, so `{Self}` must implement `Serialize` and `DeserializeOwned`",
    label = "the response type must be serializable",
    note = "derive `serde::Serialize` and `serde::Deserialize` on `{Self}`: a resend gets the stored response back"
)]
pub trait StoredResponse<M>: serde::Serialize + serde::de::DeserializeOwned {}

impl<T: serde::Serialize + serde::de::DeserializeOwned> StoredResponse<Holds> for T {}

/// Implemented by no type: the second impl of [`StoredResponse`], so a response missing both
/// `Serialize` and `Deserialize` is reported once, not once for each (see [`NeverHolds`]).
pub trait NeverStored: serde::Serialize + serde::de::DeserializeOwned {}

impl<T: NeverStored> StoredResponse<NeverHolds> for T {}

/// `E: From<IdempotencyError> + Debug` for the error `E` of an `#[idempotent]` function, under a
/// name whose error says what to write; required by [`run_idempotent`].
#[diagnostic::on_unimplemented(
    message = "`#[idempotent]` needs the error type `{Self}` to implement `From<IdempotencyError>` and `Debug`",
    label = "the error type must convert from `IdempotencyError` and implement `Debug`",
    note = "a call that cannot claim its key (a duplicate in progress, a store that fails) returns `{Self}::from(IdempotencyError)`; a kept failure is stored as its `Debug` text"
)]
pub trait StoredError: From<IdempotencyError> + core::fmt::Debug {}

impl<E: From<IdempotencyError> + core::fmt::Debug> StoredError for E {}
