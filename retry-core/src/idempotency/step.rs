//! Steps: a body with several effects resumes after a crash or a failure and repeats none of
//! them. Each step's output is journaled under the claim (Brandur Leach's recovery points,
//! Restate's journaled `ctx.run`, DBOS's steps), without an engine.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::held::current_steps;
use super::operation_timeout::bounded;
use super::recorder::{Opened, Recorder};
use super::{Claim, IdempotencyError, StepError, TransactionalStore, encode_key};

/// What a running step knows of itself: its derived key, for the downstream call, and whether
/// an earlier run of the key may have made its effect already.
///
/// ```
/// use retry_core::idempotency::{step, IdempotencyError, MemoryStore};
/// use retry_core::idempotent;
///
/// #[derive(Debug)]
/// struct Failed;
/// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
///
/// #[idempotent(key = order, store = inbox)]
/// async fn charge(inbox: &MemoryStore, order: u64) -> Result<(String, bool), Failed> {
///     step("charge", async |s| Ok((s.key().to_owned(), s.in_doubt()))).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (key, in_doubt) = charge(&MemoryStore::new(), 7).await.unwrap();
/// assert_eq!(key.len(), 32);
/// assert!(!in_doubt);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    label: String,
    key: String,
    in_doubt: bool,
}

impl Step {
    fn new(claim: &Claim, label: &str, in_doubt: bool) -> Self {
        Step {
            label: label.to_owned(),
            key: derived_key(claim, label),
            in_doubt,
        }
    }

    /// The step's idempotency key for its downstream call: what the claim's `derive(label)`
    /// gives (with feature `http`), the same on every run of the key, whatever the
    /// fencing token, so the service the step calls deduplicates a step run again in doubt.
    /// 32 lowercase hex digits.
    ///
    /// ```
    /// use retry_core::idempotency::{current, step, IdempotencyError, MemoryStore};
    /// use retry_core::idempotent;
    ///
    /// #[derive(Debug)]
    /// struct Failed;
    /// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
    ///
    /// #[idempotent(key = order, store = inbox)]
    /// async fn charge(inbox: &MemoryStore, order: u64) -> Result<bool, Failed> {
    ///     let claim = current().expect("inside the body");
    ///     step("charge", async |s| Ok(s.key() == claim.derive("charge").as_str())).await
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() { assert!(charge(&MemoryStore::new(), 7).await.unwrap()); }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// `true` when an earlier run of this key started the step and never journaled its end
    /// (it crashed, or failed, in the step or before its journal write): the step's effect may
    /// have happened. Send the same [`key`](Self::key), so the receiver answers the first
    /// effect instead of making a second; or look before acting.
    ///
    /// ```
    /// use retry_core::idempotency::{step, IdempotencyError, MemoryStore};
    /// use retry_core::idempotent;
    ///
    /// #[derive(Debug)]
    /// struct Failed;
    /// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
    ///
    /// #[idempotent(key = order, store = inbox)]
    /// async fn charge(inbox: &MemoryStore, order: u64) -> Result<bool, Failed> {
    ///     step("charge", async |s| Ok(s.in_doubt())).await
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() { assert!(!charge(&MemoryStore::new(), 7).await.unwrap()); }
    /// ```
    pub fn in_doubt(&self) -> bool {
        self.in_doubt
    }

    /// The step's label.
    ///
    /// ```
    /// use retry_core::idempotency::{step, IdempotencyError, MemoryStore};
    /// use retry_core::idempotent;
    ///
    /// #[derive(Debug)]
    /// struct Failed;
    /// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
    ///
    /// #[idempotent(key = order, store = inbox)]
    /// async fn charge(inbox: &MemoryStore, order: u64) -> Result<String, Failed> {
    ///     step("charge", async |s| Ok(s.label().to_owned())).await
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() { assert_eq!(charge(&MemoryStore::new(), 7).await.unwrap(), "charge"); }
    /// ```
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// `Claim::derive(label)`'s text, without the `http` feature's key type.
fn derived_key(claim: &Claim, label: &str) -> String {
    let mut key = super::digest(&encode_key(&(claim.key.as_str(), label)));
    key.truncate(32);
    key
}

/// Runs one step of an idempotent body, at most once per key: the effect `f` makes, journaled
/// under the call's claim.
///
/// - If the claim's journal holds `label`'s output (an earlier run of the key finished the
///   step), that output is returned, deserialised, and `f` does not run.
/// - Otherwise `started` is journaled (fenced by the claim's token: a holder whose key was
///   taken over runs nothing), `f` runs, and its `Ok` output is journaled (fenced again)
///   before `step` returns: one write before the effect and one after.
/// - A step that an earlier run started and never finished (it crashed, or failed, during it)
///   runs again with [`Step::in_doubt`] `true`; its [`Step::key`] is the same on every run,
///   so the service it calls deduplicates the second request.
/// - `f`'s `Err` is returned as it is, and the step stays started: a later run (a takeover
///   after a crash, a resend with `on_err = "resume"`) runs it in doubt.
///
/// Called from the body of an `#[idempotent]` function or an `IdempotencyLayer` handler, in
/// the task that runs it (work spawned onto another task has no claim). Fails with
/// [`StepError`] (through `E: From<IdempotencyError>`), never by running the step twice:
/// outside a claim, with a label this run used already, or when the journaled output no longer
/// deserialises into `T`; with [`IdempotencyError::Store`] when the journal cannot be read or
/// written (the step then did not run, or its output was not journaled and a later run does
/// it again in doubt). A body whose claim is held by its transaction (`transaction = tx`) has
/// no steps: it commits or rolls back as a whole.
///
/// `f` is an async closure given the [`Step`]: `async |s| gateway.charge(order, s.key()).await`,
/// or `async |_| book_ride(order).await` when the step needs neither. (One closure form: a
/// second, without the argument, would leave Rust unable to infer `s`'s type.)
///
/// ```
/// use retry_core::idempotency::{step, IdempotencyError, MemoryStore};
/// use retry_core::idempotent;
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// #[derive(Debug)]
/// struct Failed;
/// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
///
/// static BOOKED: AtomicU32 = AtomicU32::new(0);
///
/// #[idempotent(key = order, store = inbox)]
/// async fn fulfil(inbox: &MemoryStore, order: u64) -> Result<(u32, String), Failed> {
///     let ride = step("ride", async |_| Ok::<_, Failed>(BOOKED.fetch_add(1, Ordering::SeqCst))).await?;
///     let charge = step("charge", async |s| Ok::<_, Failed>(format!("charged with key {}", s.key()))).await?;
///     Ok((ride, charge))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let inbox = MemoryStore::new();
/// let (ride, _) = fulfil(&inbox, 7).await.unwrap();
/// assert_eq!(ride, 0);
/// // Outside a claim, a step refuses to run.
/// let outside = step("ride", async |_| Ok::<u32, IdempotencyError>(1)).await;
/// assert!(matches!(outside, Err(IdempotencyError::Step(_))));
/// # }
/// ```
pub async fn step<T, E, F>(label: &str, f: F) -> Result<T, E>
where
    F: AsyncFnOnce(Step) -> Result<T, E>,
    T: Serialize + DeserializeOwned,
    E: From<IdempotencyError>,
{
    let (claim, recorder) = journal_of_current()?;
    let in_doubt = match recorder.open(label, true).await? {
        Opened::Finished(output) => return decode(label, &output),
        Opened::Run { in_doubt } => in_doubt,
    };
    let value = f(Step::new(&claim, label, in_doubt)).await?;
    let output = encode(label, &value)?;
    recorder.finish(label, output).await?;
    Ok(value)
}

/// A step whose writes live in the store's database: an atomic phase. `f` gets a transaction
/// of `store` ([`TransactionalStore::begin`]) and the [`Step`]; its writes in that
/// transaction and the step's journal entry commit together
/// ([`TransactionalStore::commit_step`], fenced by the claim's token), or, when `f` fails or
/// the claim was taken over, roll back together. So the step is never in doubt: nothing of it
/// happened, or all of it and its journal entry did.
///
/// Otherwise as [`step`]: a finished step's journaled output is returned without running `f`.
/// `store` must be the store that holds the call's claim (the same file or database).
///
/// ```
/// use retry_core::idempotency::{step_in_transaction, IdempotencyError, TransactionalStore};
///
/// /// Books the ride in the service's own table, committed with the step's journal entry.
/// async fn book<S: TransactionalStore>(store: &S, order: u64) -> Result<u64, IdempotencyError> {
///     step_in_transaction("ride", store, async |tx, _| {
///         // ... INSERT INTO rides ... through `tx` ...
///         let _ = tx;
///         Ok(order)
///     })
///     .await
/// }
/// ```
pub async fn step_in_transaction<S, T, E, F>(label: &str, store: &S, f: F) -> Result<T, E>
where
    S: TransactionalStore + ?Sized,
    F: AsyncFnOnce(&mut S::Transaction, Step) -> Result<T, E>,
    T: Serialize + DeserializeOwned,
    E: From<IdempotencyError>,
{
    let (claim, recorder) = journal_of_current()?;
    let in_doubt = match recorder.open(label, false).await? {
        Opened::Finished(output) => return decode(label, &output),
        Opened::Run { in_doubt } => in_doubt,
    };
    let mut transaction = bounded(store, "begin", store.begin())
        .await
        .map_err(IdempotencyError::Store)?;
    let value = match f(&mut transaction, Step::new(&claim, label, in_doubt)).await {
        Ok(value) => value,
        Err(e) => {
            roll_back(store, transaction, &claim, label).await;
            return Err(e);
        }
    };
    let output = match encode(label, &value) {
        Ok(output) => output,
        Err(e) => {
            roll_back(store, transaction, &claim, label).await;
            return Err(e.into());
        }
    };
    let commit = store.commit_step(transaction, &claim, label, &output);
    bounded(store, "commit_step", commit)
        .await
        .map_err(IdempotencyError::Store)?;
    recorder.committed(label, output);
    Ok(value)
}

/// Rolls back a transactional step that failed: nothing of it happened.
async fn roll_back<S: TransactionalStore + ?Sized>(
    store: &S,
    transaction: S::Transaction,
    claim: &Claim,
    label: &str,
) {
    if let Err(e) = bounded(store, "rollback", store.rollback(transaction)).await {
        tracing::warn!(target: "retry_core::idempotency", key = %claim.key, step = label, error = %crate::error_chain(&e), "rollback of a failed step failed; the store rolls back when the connection closes");
    }
}

/// The claim of the body running in this task and its journal, or why a step cannot run.
fn journal_of_current() -> Result<(Claim, Recorder), IdempotencyError> {
    match current_steps() {
        None => Err(StepError::OutsideClaim.into()),
        Some((_, None)) => Err(StepError::Transactional.into()),
        Some((claim, Some(recorder))) => Ok((claim, recorder)),
    }
}

/// A finished step's journaled output, decoded.
fn decode<T: DeserializeOwned, E: From<IdempotencyError>>(
    label: &str,
    output: &str,
) -> Result<T, E> {
    serde_json::from_str(output).map_err(|e| {
        IdempotencyError::Step(StepError::Undecodable {
            label: label.to_owned(),
            error: e.to_string(),
        })
        .into()
    })
}

/// A step's output, as its journal keeps it.
fn encode<T: Serialize>(label: &str, value: &T) -> Result<String, IdempotencyError> {
    serde_json::to_string(value).map_err(|e| {
        IdempotencyError::Step(StepError::Unserializable {
            label: label.to_owned(),
            error: e.to_string(),
        })
    })
}
