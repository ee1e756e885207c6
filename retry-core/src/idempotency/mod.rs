//! Idempotent receivers: a unique key per request, claimed under a database constraint, the
//! first response stored and returned to every duplicate.
//!
//! A call to an `#[idempotent]` function:
//! 1. encodes its key (see [`KeyPart`]) and claims it with an `INSERT` under the primary key —
//!    never check-then-insert, so two concurrent duplicates cannot both win;
//! 2. if the key is done, returns the stored first response without running the body; if another
//!    call holds it, fails with [`IdempotencyError::InProgress`]; if the same key came with another
//!    fingerprint, fails with [`IdempotencyError::KeyReused`];
//! 3. runs the body, renewing its lease every `lease / 3` while it runs; on `Ok` stores the
//!    response; on `Err` keeps the failure for duplicates (the default `on_err = "keep"`) or, for
//!    errors known to come before any effect, releases the key (`on_err = "release"`, or per
//!    error with `on_err = path`, see [`OnErr`]).
//!
//! # The rule under uncertainty
//!
//! **A key is freed for a second run only when the library knows the first run's effect did not
//! happen.** When it cannot know, a person decides (a dead letter, support), never a silent
//! second run.
//!
//! | what happened to the first call                      | non-transactional            | transactional (`transaction = tx`) |
//! |------------------------------------------------------|------------------------------|------------------------------------|
//! | `Ok`                                                 | done: duplicates get the response | done, committed with the body's writes |
//! | `Err`, `on_err = "keep"` (the default)               | failed: duplicates get the failure | rolled back: **key freed** |
//! | `Err`, `on_err = "release"` / `OnErr::Release`       | **key freed**                | rolled back: **key freed** |
//! | `Err`, `on_err = "resume"` / `OnErr::Resume`         | **key freed**; the resend skips finished [steps](step) | rolled back: **key freed** |
//! | refused before the body ran (store down, `InProgress`, key too long) | nothing claimed | nothing claimed |
//! | dropped mid-body (timeout, cancelled task, shut-down) | in progress until the lease runs out | rolled back: **key freed** |
//! | process died mid-body                                | in progress until the lease runs out | rolled back by the database; the lease frees it |
//! | body slower than its lease                           | lease renewed every `lease / 3`: never taken over while the process lives | the same |
//!
//! A body with several effects that no single transaction covers (the ride row, the charge,
//! the receipt) makes each one a [`step`]: its output is journaled under the claim, so the next
//! holder of the key (a takeover after a crash, a resend with `on_err = "resume"`, see
//! [`OnErr::Resume`]) skips the finished steps and runs an unfinished one again in doubt, with the
//! same derived key for its receiver to deduplicate.
//!
//! Keys are namespaced: the stored key is (namespace, scope, key), the namespace being the
//! function's name unless `namespace = "charge.v1"` pins it, so two functions on one store never
//! answer for each other (see [`encode_namespaced_key`]).
//!
//! If the store cannot be reached, or does not answer within its
//! [`operation_timeout`](IdempotencyStore::operation_timeout), the body does not run (fail
//! closed). A claim carries a fencing token and a lease: a claim older than its lease was
//! abandoned (a crash) and is taken over with a new token, after which the old holder can
//! neither complete nor release it.

#[cfg(feature = "test-suite")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-suite")))]
pub mod conformance;
mod error;
pub(crate) mod flow;
mod forward;
mod held;
mod journal;
mod key;
mod memory;
mod operation_timeout;
mod purge;
mod recorder;
mod settle;
mod step;

use std::future::Future;
use std::time::Duration;

pub use error::{IdempotencyError, StepError, StoreError};
pub use flow::{
    Begun, BegunTransaction, Idempotent, Once, Retries, Settings, begin_call, begin_transactional,
    begin_transactional_answered, finish_transactional,
};
pub(crate) use held::attempt_retried;
pub use held::{HeldClaim, current, current_key};
pub use journal::{StepEntry, StepState, StepWrite};
pub(crate) use key::digest;
pub use key::{KeyPart, encode_key, encode_namespaced_key, encode_scoped_key};
pub use memory::MemoryStore;
#[cfg(test)]
pub(crate) use memory::OverMemory;
pub use purge::spawn_purger;
pub use settle::OnErr;
pub use step::{Step, step, step_in_transaction};

/// What a call asks of the store when it claims its key.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The encoded key (scope included): the primary key.
    pub key: &'a str,
    /// The key as people know it (an order number), for support and dead letters.
    pub biz_key: &'a str,
    /// A digest of the payload: the same key with another fingerprint is
    /// [`IdempotencyError::KeyReused`].
    pub fingerprint: Option<&'a str>,
    /// How long the claim holds before a duplicate may take it over.
    pub lease: Duration,
    /// How long the row is kept after it was created.
    pub retention: Duration,
}

/// A claim on a key: proof that this call may run the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The encoded key.
    pub key: String,
    /// The fencing token: grows with every takeover and every new claim of a released key; only
    /// its holder may complete or release.
    pub token: u64,
}

impl Claim {
    /// A stable idempotency key for the downstream call `label` made by this claim's body: the
    /// same on every run of this key (whatever the fencing token), different for every label and
    /// every key. Send it as the `Idempotency-Key` of the request, so the service you call
    /// dedups your resends as you dedup yours.
    ///
    /// The key is the first 128 bits of the SHA-256 of the claim's key and the label (encoded as
    /// [`encode_key`] encodes a pair), as 32 lowercase hex digits: the same on every instance
    /// and after restarts, and not something a client choosing its own keys can steer onto
    /// another tenant's (CHANGELOG.md: keys derived by earlier builds differ).
    ///
    /// ```
    /// use retry_core::idempotency::Claim;
    ///
    /// let claim = Claim { key: "s7:deposit/n42".into(), token: 1 };
    /// // SHA-256("s14:s7:deposit/n42,s6:ledger"), its first 16 bytes.
    /// assert_eq!(claim.derive("ledger").as_str(), "31ae13bc65323a87a623ad34512bf770");
    /// let taken_over = Claim { token: 2, ..claim.clone() };
    /// assert_eq!(claim.derive("ledger"), taken_over.derive("ledger"));
    /// assert_ne!(claim.derive("ledger"), claim.derive("email"));
    /// assert_eq!(claim.derive("ledger").as_str().len(), 32);
    /// ```
    ///
    /// With the reqwest integration (feature `reqwest`), inside an `#[idempotent]` body:
    ///
    /// ```no_run
    /// # #[cfg(feature = "reqwest")]
    /// # async fn post(client: reqwest::Client) -> Result<reqwest::Response, reqwest::Error> {
    /// use retry_core::idempotency::current;
    /// use retry_core::reqwest::RequestBuilderExt as _;
    ///
    /// let claim = current().expect("called from an #[idempotent] body");
    /// client
    ///     .post("http://ledger.internal/entries")
    ///     .idempotency_key(&claim.derive("ledger-entry"))
    ///     .send()
    ///     .await
    /// # }
    /// ```
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn derive(&self, label: &str) -> crate::http::IdempotencyKey {
        crate::http::IdempotencyKey::derived(&encode_key(&(self.key.as_str(), label)))
    }

    /// [`derive`](Self::derive), keyed with the service's `secret`: HMAC-SHA-256 instead of
    /// SHA-256, so nobody without the secret can compute the key a claim derives (a downstream
    /// service's logs, or a client that knows another tenant's key, tell nothing). Give every
    /// instance the same secret, from configuration: the same claim and label then derive the
    /// same key on every instance and after restarts.
    ///
    /// ```
    /// use retry_core::idempotency::Claim;
    ///
    /// let claim = Claim { key: "s7:deposit/n42".into(), token: 1 };
    /// let secret = b"service secret";
    /// // HMAC-SHA-256("service secret", "s14:s7:deposit/n42,s6:ledger"), its first 16 bytes.
    /// assert_eq!(
    ///     claim.derive_keyed(secret, "ledger").as_str(),
    ///     "6c17fb757347c248124de47d6fe52899"
    /// );
    /// assert_ne!(claim.derive_keyed(secret, "ledger"), claim.derive("ledger"));
    /// assert_ne!(claim.derive_keyed(b"another", "ledger"), claim.derive_keyed(secret, "ledger"));
    /// ```
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn derive_keyed(&self, secret: &[u8], label: &str) -> crate::http::IdempotencyKey {
        crate::http::IdempotencyKey::derived_keyed(secret, &encode_key(&(self.key.as_str(), label)))
    }

    /// The first claim of `key`, which had no row: fencing token 1, as every store numbers it
    /// (a takeover or a claim after a release then takes a larger token). For the authors of
    /// stores, whose `claim` answers it for a key it inserted.
    ///
    /// ```
    /// use retry_core::idempotency::Claim;
    ///
    /// assert_eq!(Claim::first("s7:deposit/n42"), Claim { key: "s7:deposit/n42".into(), token: 1 });
    /// ```
    #[must_use]
    pub fn first(key: &str) -> Claim {
        Claim {
            key: key.to_owned(),
            token: 1,
        }
    }
}

/// What claiming a key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The key is ours: run the body.
    Claimed(Claim),
    /// A call with this key already succeeded: its stored response (JSON).
    Done(String),
    /// Another call holds the key and its lease has not expired.
    InProgress,
    /// A call with this key failed and its failure was kept (`on_err = "keep"`, the default in
    /// non-transactional mode): the failure as the first call stored it (empty for rows written
    /// before failures were stored).
    Failed(String),
    /// The key is known with another fingerprint.
    KeyReused,
}

/// What [`TransactionalStore::claim_in_transaction`] found: the key with the handler's open
/// transaction, or what the key already holds.
#[derive(Debug)]
pub enum TransactionClaim<T> {
    /// The key is ours: run the handler in the transaction, then
    /// [`commit_done`](TransactionalStore::commit_done) or
    /// [`rollback`](TransactionalStore::rollback).
    Claimed(ClaimedTransaction<T>),
    /// The key is not ours, for the reason [`IdempotencyStore::claim`] would give:
    /// [`ClaimOutcome::Done`], [`InProgress`](ClaimOutcome::InProgress),
    /// [`Failed`](ClaimOutcome::Failed) or [`KeyReused`](ClaimOutcome::KeyReused) (never
    /// `Claimed`). No transaction is left open.
    Refused(ClaimOutcome),
}

/// A claim and the handler's transaction that holds it (see
/// [`TransactionalStore::claim_in_transaction`]).
#[derive(Debug)]
pub struct ClaimedTransaction<T> {
    /// The claim, with its fencing token, for [`commit_done`](TransactionalStore::commit_done).
    pub claim: Claim,
    /// The handler's transaction.
    pub transaction: T,
    /// `true` when the claim was written in `transaction` and exists nowhere else: it commits
    /// with the handler's writes and `done` (one commit), or, rolled back, leaves the key as it
    /// was before the claim, free for the next call at once. Nothing is left to release, and
    /// no lease to renew (no other connection sees the row). `false` when the claim committed
    /// on its own before the transaction began (the default implementation): a rollback must
    /// then be followed by a [`release`](IdempotencyStore::release).
    pub in_transaction: bool,
}

/// Size limits on keys and stored responses, checked before the store is touched.
///
/// ```
/// let limits = retry_core::idempotency::Limits::default();
/// assert_eq!((limits.max_key_bytes, limits.max_response_bytes), (512, 1 << 20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest encoded key (scope included), in bytes. Default 512.
    pub max_key_bytes: usize,
    /// Largest stored response (JSON), in bytes. Default 1 MiB.
    pub max_response_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_bytes: 512,
            max_response_bytes: 1 << 20,
        }
    }
}

/// Default lease: a claim older than this was abandoned and may be taken over.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Default bound on one store operation in the `#[idempotent]` flow: see
/// [`IdempotencyStore::operation_timeout`]. Longer than the built-in stores' own waits (the
/// SQLite busy timeout and the PostgreSQL pool timeouts, 5 s each), so their errors, which say
/// more, come first.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Default retention: 30 days, safely longer than a 7-day resend policy plus a slow operator.
/// The rule: keep rows longer than the longest window in which the sender can resend.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// Where claims and responses are kept. Implemented by [`MemoryStore`], `SqliteStore` (crate
/// `retry-sqlite`) and `PgStore` (crate `retry-postgres`); `&S` and `Arc<S>` work wherever `S` does. The
/// contract is shaped for SQL stores with transactions.
///
/// Every method is atomic on its own. Implementations claim by inserting under the primary key
/// and decide about an existing row in the same transaction; `complete`, `release`,
/// `mark_failed` and `renew` only touch the row if its token is the claim's and it is in
/// progress (otherwise [`StoreError::Fenced`]). A `complete`, `release` or `mark_failed` that
/// finds the row already in the state it writes, under the claim's own token, answers `Ok`: it
/// is a retry of a call whose first try committed but whose answer was lost, not a takeover.
/// Purging never deletes a row whose lease is live.
///
/// The module `conformance` (feature `test-suite`) checks all of this against any store.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idempotency store",
    label = "`store = ...` must name an `IdempotencyStore`",
    note = "use a `MemoryStore`, a `retry_sqlite::SqliteStore`, or implement `retry_core::idempotency::IdempotencyStore`"
)]
pub trait IdempotencyStore: Send + Sync {
    /// Claims `request.key`, or reports what holds it.
    fn claim(
        &self,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Stores the response and marks the key done.
    fn complete(
        &self,
        claim: &Claim,
        response: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives the claim up so a resend may run again. The row is kept (as released, until purged)
    /// so the key's next claim gets a larger token than any before it.
    fn release(&self, claim: &Claim) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Marks the key failed and keeps `failure` (the error's text) in the row's `response`:
    /// duplicates get [`ClaimOutcome::Failed`] with it, never a second run.
    fn mark_failed(
        &self,
        claim: &Claim,
        failure: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Extends the claim's lease to `lease` from now (the store's clock), if the claim still
    /// holds the key; otherwise [`StoreError::Fenced`]. The flow calls it every `lease / 3` while
    /// the body runs, so a slow body is never taken over while its process lives: the lease only
    /// frees the keys of dead holders.
    fn renew(
        &self,
        claim: &Claim,
        lease: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Called when a *transactional* call is dropped before its commit (a cancelled task, a
    /// client that went away): its transaction rolled back, so nothing of the body's writes
    /// happened and the claim may be released, in the background if the store can (otherwise its
    /// lease frees it). Returns whether a release was started. Never called for a
    /// non-transactional call: whether its effect happened is unknown, so its key stays in
    /// progress until the lease runs out.
    fn abandon(&self, claim: Claim) -> bool {
        let _ = claim;
        false
    }

    /// Deletes rows created more than `age` ago whose own retention has passed as well; returns
    /// how many. By age only: never "the oldest N".
    fn purge_older_than(
        &self,
        age: Duration,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The step journal of `claim`'s key ([`step`]): every step a run of this key started or
    /// finished, in any order, whichever run wrote it. Read once per run, at its first step.
    ///
    /// The journal lives with the key: it is kept when the key is released or taken over (a
    /// later run must see every step that finished, whatever its token) and deleted with the
    /// key's row by [`purge_older_than`](Self::purge_older_than).
    ///
    /// The default answers [`StoreError::Unsupported`]: a store without a journal runs bodies
    /// without steps as before, and a body that calls [`step`] fails at its first step, before
    /// the step runs. The built-in stores keep it (`MemoryStore` with the row, `SqliteStore` and
    /// `PgStore` in a table `inbox_steps`); the conformance suite checks it.
    ///
    /// ```
    /// use retry_core::idempotency::{
    ///     ClaimOutcome, ClaimRequest, IdempotencyStore, MemoryStore, StepState, StepWrite,
    /// };
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// let request = ClaimRequest {
    ///     key: "order-7",
    ///     biz_key: "order-7",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(30),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let ClaimOutcome::Claimed(claim) = store.claim(&request).await.unwrap() else { panic!() };
    /// store.write_step(&claim, "charge", StepWrite::Started).await.unwrap();
    /// store.write_step(&claim, "charge", StepWrite::Finished("\"ch_1\"")).await.unwrap();
    /// let journal = store.read_steps(&claim).await.unwrap();
    /// assert_eq!(journal[0].label, "charge");
    /// assert_eq!(journal[0].state, StepState::Finished("\"ch_1\"".into()));
    /// # }
    /// ```
    fn read_steps(
        &self,
        claim: &Claim,
    ) -> impl Future<Output = Result<Vec<StepEntry>, StoreError>> + Send {
        let _ = claim;
        async { Err(StoreError::Unsupported("a step journal".to_owned())) }
    }

    /// Journals `write` for the step `label` of `claim`'s key, if the claim still holds the key
    /// (its token, and the key in progress); otherwise [`StoreError::Fenced`] and nothing is
    /// written, so a holder whose key was taken over can never record a step. Atomic on its
    /// own; a retry of a write whose first try landed answers `Ok`. A `Started` over a
    /// finished step leaves it finished.
    ///
    /// The default answers [`StoreError::Unsupported`] (see [`read_steps`](Self::read_steps)).
    ///
    /// ```
    /// use retry_core::idempotency::{
    ///     Claim, IdempotencyStore, MemoryStore, StepWrite, StoreError,
    /// };
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// // A claim the store never gave: fenced.
    /// let stranger = Claim { key: "order-7".into(), token: 1 };
    /// let written = store.write_step(&stranger, "charge", StepWrite::Started).await;
    /// assert!(matches!(written, Err(StoreError::Fenced)));
    /// # }
    /// ```
    fn write_step(
        &self,
        claim: &Claim,
        label: &str,
        write: StepWrite<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (claim, label, write);
        async { Err(StoreError::Unsupported("a step journal".to_owned())) }
    }

    /// Size limits for keys and responses.
    fn limits(&self) -> Limits {
        Limits::default()
    }

    /// How long the `#[idempotent]` flow waits for one operation of this store (`claim`,
    /// `complete`, `release`, `mark_failed`, and in transactional mode `begin`, `commit_done`
    /// and `rollback`) before it stops waiting: the operation then fails with
    /// [`StoreError::Unavailable`] ("`claim` did not answer within 10s", an
    /// [`io::ErrorKind::TimedOut`](std::io::ErrorKind::TimedOut) error as its source), so a hung
    /// store can never hang the call, nor the retry loop around it. A claim that timed out runs
    /// no body (fail closed); one that still lands in the store later is freed by its lease.
    /// Default [`DEFAULT_OPERATION_TIMEOUT`] (10 s); `Duration::MAX` waits for ever.
    ///
    /// The wait runs on Tokio's clock. On a paused clock (tests) it ends at once when the
    /// store waits on I/O or another thread (anything but Tokio's blocking pool) while nothing
    /// else runs: test such stores on the real clock.
    ///
    /// ```
    /// use retry_core::idempotency::{
    ///     Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, MemoryStore, StoreError,
    /// };
    /// use std::time::Duration;
    ///
    /// /// The memory store, with a tighter bound.
    /// struct Impatient(MemoryStore);
    ///
    /// impl IdempotencyStore for Impatient {
    ///     async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
    ///         self.0.claim(request).await
    ///     }
    ///     async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
    ///         self.0.complete(claim, response).await
    ///     }
    ///     async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
    ///         self.0.release(claim).await
    ///     }
    ///     async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
    ///         self.0.mark_failed(claim, failure).await
    ///     }
    ///     async fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
    ///         self.0.renew(claim, lease).await
    ///     }
    ///     async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
    ///         self.0.purge_older_than(age).await
    ///     }
    ///     fn operation_timeout(&self) -> Duration {
    ///         Duration::from_secs(2)
    ///     }
    /// }
    ///
    /// assert_eq!(MemoryStore::new().operation_timeout(), Duration::from_secs(10));
    /// assert_eq!(Impatient(MemoryStore::new()).operation_timeout(), Duration::from_secs(2));
    /// ```
    fn operation_timeout(&self) -> Duration {
        DEFAULT_OPERATION_TIMEOUT
    }
}

/// A store that can write the `done` row inside the handler's own database transaction, so the
/// handler's writes and the stored response commit together or not at all (transactional mode).
///
/// The `#[idempotent(transaction = ..)]` flow and the transactional `IdempotencyLayer` claim
/// with [`claim_in_transaction`](Self::claim_in_transaction): the built-in stores write the
/// claim inside the handler's transaction, so a call commits once, its claim, its writes and
/// its response together, and a call that never commits leaves the key free at once. A store
/// without that override claims first, in its own short transaction, and then begins the
/// handler's transaction with [`begin_for`](Self::begin_for).
///
/// Either way the handler gets the transaction for its writes;
/// [`commit_done`](Self::commit_done) writes the response and `done` in that same
/// transaction, guarded by the claim's token (`UPDATE ... WHERE msg_id = ? AND token = ?`):
/// zero rows means the claim was taken over, so the whole transaction rolls back and the call
/// fails with [`StoreError::Fenced`]. A transaction dropped before it commits (a crash, a
/// dropped future) rolls back.
///
/// A claim's transaction begun with [`begin_for`](Self::begin_for) also frees the key as soon
/// as it ends without committing: what it wrote is gone, so the library knows the call's effect
/// did not happen (the built-in stores; see there).
pub trait TransactionalStore: IdempotencyStore {
    /// The handler's transaction.
    type Transaction: Send;

    /// Begins a transaction that holds no claim (the claim is kept by its lease alone).
    fn begin(&self) -> impl Future<Output = Result<Self::Transaction, StoreError>> + Send;

    /// Begins the handler's transaction for `claim`, and hands the claim from its lease to the
    /// transaction: while the transaction is open a duplicate is told the call is in progress
    /// (whatever the lease says), and once it ended without [`commit_done`](Self::commit_done)
    /// (rolled back, its connection lost, its process killed) nothing of it happened, so the
    /// next claim of the key takes it over at once instead of after the lease.
    ///
    /// The built-in stores mark the claim's row as held by a transaction (a write of its own,
    /// committed, guarded by the token) and hold something only a live transaction holds
    /// (PostgreSQL: an advisory lock on the key taken before the mark; SQLite: the file's write
    /// lock): [`StoreError::Fenced`] when the claim was taken over first. Effects the handler
    /// has outside the transaction are not covered: a handler that uses it promises that its
    /// writes in it are its effect.
    ///
    /// The default is [`begin`](Self::begin): the lease keeps the claim, as for a transaction
    /// begun without one.
    ///
    /// An example on a SQLite file: [`retry_sqlite::transactional`](https://docs.rs/retry-sqlite/latest/retry_sqlite/transactional/index.html).
    fn begin_for(
        &self,
        claim: &Claim,
    ) -> impl Future<Output = Result<Self::Transaction, StoreError>> + Send {
        let _ = claim;
        self.begin()
    }

    #[cfg_attr(
        feature = "tower",
        doc = "[`IdempotencyLayer`]: crate::tower::IdempotencyLayer"
    )]
    #[cfg_attr(
        not(feature = "tower"),
        doc = "[`IdempotencyLayer`]: https://docs.rs/retry-core/latest/retry_core/tower/struct.IdempotencyLayer.html"
    )]
    /// Claims `request.key` inside a new transaction for the handler, so the claim, the
    /// handler's writes and the stored response commit together: **one commit per call**, as a
    /// handler that dedups by hand with `INSERT .. ON CONFLICT` in its own transaction. The
    /// `#[idempotent(transaction = ..)]` flow and the transactional
    /// [`IdempotencyLayer`] claim through it.
    ///
    /// Answers [`TransactionClaim::Claimed`] with the open transaction, or
    /// [`TransactionClaim::Refused`] with what the key holds (a stored response, a fingerprint
    /// that does not match, a call in progress, a kept failure), exactly as
    /// [`claim`](IdempotencyStore::claim) would. A claim taken in the transaction
    /// ([`ClaimedTransaction::in_transaction`]) exists only there: rolled back, dropped, its
    /// connection lost or its process killed, nothing of the call happened and the key is free
    /// at once (the library knows the effect did not happen, so a second run is allowed).
    ///
    /// The built-in stores override it:
    /// - `SqliteStore`: `BEGIN IMMEDIATE`, then the claim's `INSERT` (or the decision about the
    ///   key's row, with the rules of `claim`) in that transaction. A duplicate arriving
    ///   meanwhile waits for the file's write lock (at most the busy timeout, then
    ///   [`StoreError::Unavailable`], never a second run) and then replays the committed
    ///   response. A key that is done is answered from a read, without the lock.
    /// - `PgStore`: `BEGIN`, then `pg_try_advisory_xact_lock` on the key: not granted means a
    ///   live transaction holds the key right now, so [`ClaimOutcome::InProgress`] at once,
    ///   without waiting (unless the key is already done: its response). Granted, the claim is
    ///   inserted (or the row decided with the rules of `claim`) in the transaction; the lock
    ///   goes with its commit or rollback.
    ///
    /// The default is what a store without an override can do: [`claim`](IdempotencyStore::claim)
    /// (which commits on its own), then [`begin_for`](Self::begin_for) on a claimed key, with
    /// `in_transaction: false`; a `begin_for` that fails releases the claim again.
    ///
    /// An example on a SQLite file: [`retry_sqlite::transactional`](https://docs.rs/retry-sqlite/latest/retry_sqlite/transactional/index.html).
    fn claim_in_transaction(
        &self,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<TransactionClaim<Self::Transaction>, StoreError>> + Send {
        async move {
            let claim = match self.claim(request).await? {
                ClaimOutcome::Claimed(claim) => claim,
                refused => return Ok(TransactionClaim::Refused(refused)),
            };
            match self.begin_for(&claim).await {
                Ok(transaction) => Ok(TransactionClaim::Claimed(ClaimedTransaction {
                    claim,
                    transaction,
                    in_transaction: false,
                })),
                Err(e) => {
                    // Nothing ran: the key is free for the resend (its lease frees it if
                    // this release fails too).
                    if let Err(release) = self.release(&claim).await {
                        tracing::warn!(target: "retry_core::idempotency", key = %claim.key, error = %crate::error_chain(&release), "could not release a claim after failing to begin its transaction");
                    }
                    Err(e)
                }
            }
        }
    }

    /// [`claim_in_transaction`](Self::claim_in_transaction) for a call that knows its response
    /// before it runs (a queue consumer's handler, whose success answers nothing): the store
    /// may write the key `done` with `response` at once, with the claim, inside the
    /// transaction, so that [`commit_done`](Self::commit_done) with that same response only
    /// commits: one write of the key's row instead of two. Nobody else can tell: a claim taken
    /// in the transaction exists only there until it commits (a duplicate is told the call is
    /// in progress), and a rollback, a dropped transaction or a killed process removes the row,
    /// done or not. `commit_done` with another response still stores that one.
    ///
    /// `PgStore` writes a new key this way; the default (and any other key) is
    /// `claim_in_transaction`.
    fn claim_answered_in_transaction(
        &self,
        request: &ClaimRequest<'_>,
        response: &str,
    ) -> impl Future<Output = Result<TransactionClaim<Self::Transaction>, StoreError>> + Send {
        let _ = response;
        self.claim_in_transaction(request)
    }

    /// Writes `response` and `done` for `claim` in `transaction` and commits it, if the claim's
    /// token still holds; otherwise rolls back and returns [`StoreError::Fenced`].
    fn commit_done(
        &self,
        transaction: Self::Transaction,
        claim: &Claim,
        response: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Journals the step `label` of `claim` as finished with `output` in `transaction` and
    /// commits it, if the claim still holds the key; otherwise rolls back and returns
    /// [`StoreError::Fenced`]. The transaction is one [`begin`](Self::begin) gave to a
    /// transactional step ([`step_in_transaction`]): the step's writes and its journal entry
    /// commit together or not at all, so the step is never in doubt.
    ///
    /// The default rolls the transaction back and answers [`StoreError::Unsupported`].
    ///
    /// ```
    /// use retry_core::idempotency::{Claim, StoreError, TransactionalStore};
    ///
    /// /// What `step_in_transaction` does around the step's writes.
    /// async fn ride<S: TransactionalStore>(store: &S, claim: &Claim) -> Result<(), StoreError> {
    ///     let transaction = store.begin().await?;
    ///     // ... the step's writes through `transaction` ...
    ///     store.commit_step(transaction, claim, "ride", "{\"ride\":7}").await
    /// }
    /// ```
    fn commit_step(
        &self,
        transaction: Self::Transaction,
        claim: &Claim,
        label: &str,
        output: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (claim, label, output);
        async move {
            self.rollback(transaction).await?;
            Err(StoreError::Unsupported(
                "a step journal in its transactions".to_owned(),
            ))
        }
    }

    /// Rolls the handler's transaction back (its body failed).
    fn rollback(
        &self,
        transaction: Self::Transaction,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether an open transaction by itself keeps the claim from being taken over, so the flow
    /// need not [`renew`](IdempotencyStore::renew) the lease while the body runs. `true` for
    /// SQLite, where a takeover is a write and the transaction holds the file's write lock (a
    /// renewal would only wait for that lock); `false` by default.
    fn transaction_holds_claim(&self) -> bool {
        false
    }
}
