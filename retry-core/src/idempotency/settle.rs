//! Settling a claim once its body has run: the response stored (tried again after a failure
//! that may pass), or the claim given up as [`OnErr`] says.

use std::time::Duration;

use super::operation_timeout::{bounded, timed_out};
use super::{Claim, IdempotencyStore, StoreError};

/// The pauses before storing a response is tried again (so three tries in all): a response
/// not stored means a duplicate runs the body again later.
const COMPLETE_RETRY_PAUSES: [Duration; 2] =
    [Duration::from_millis(20), Duration::from_millis(100)];

/// Stores `response` for `claim`, trying again after a failure that may pass; not after a
/// timeout (the store hangs: another wait would only add to it) nor after fencing (the claim is
/// someone else's now).
pub(super) async fn store_response<S: IdempotencyStore + ?Sized>(
    store: &S,
    claim: &Claim,
    response: &str,
    function: &str,
) -> Result<(), StoreError> {
    let mut pauses = COMPLETE_RETRY_PAUSES.iter();
    loop {
        match bounded(store, "complete", store.complete(claim, response)).await {
            Ok(()) => return Ok(()),
            Err(e) if !timed_out(&e) && !matches!(e, StoreError::Fenced) => match pauses.next() {
                Some(pause) => {
                    tracing::warn!(target: "retry_core::idempotency", function, key = %claim.key, error = %crate::error_chain(&e), "storing the response failed; trying again");
                    tokio::time::sleep(*pause).await;
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

/// What a failed body's claim becomes.
///
/// A non-transactional body that returns `Err` may have had its effect first (charged the card,
/// then failed to write its row), so by default its failure is kept: duplicates get
/// [`IdempotencyError::PreviouslyFailed`] with the first failure, never a second run, and a
/// person decides. Release only errors that are known to come before any effect.
///
/// ```
/// use retry_core::idempotency::{IdempotencyError, MemoryStore, OnErr};
/// use retry_core::idempotent;
///
/// #[derive(Debug)]
/// enum ChargeError { CardDeclined, GatewayTimeout, Idempotency(IdempotencyError) }
/// impl From<IdempotencyError> for ChargeError {
///     fn from(e: IdempotencyError) -> Self { ChargeError::Idempotency(e) }
/// }
///
/// /// A declined card charged nothing: a resend may try again. A gateway timeout may have
/// /// charged: keep it, a person looks.
/// fn settle(e: &ChargeError) -> OnErr {
///     match e {
///         ChargeError::CardDeclined => OnErr::Release,
///         _ => OnErr::Keep,
///     }
/// }
///
/// #[idempotent(key = order, store = inbox, on_err = settle)]
/// async fn charge(inbox: &MemoryStore, order: u64, declined: bool) -> Result<u64, ChargeError> {
///     if declined { Err(ChargeError::CardDeclined) } else { Err(ChargeError::GatewayTimeout) }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let inbox = MemoryStore::new();
/// assert!(matches!(charge(&inbox, 1, true).await, Err(ChargeError::CardDeclined)));
/// // Released: the resend runs again.
/// assert!(matches!(charge(&inbox, 1, false).await, Err(ChargeError::GatewayTimeout)));
/// // Kept: the resend gets the first failure, the body does not run.
/// let Err(ChargeError::Idempotency(IdempotencyError::PreviouslyFailed(first))) =
///     charge(&inbox, 1, true).await else { panic!() };
/// assert_eq!(first, "GatewayTimeout");
/// # }
/// ```
///
/// [`IdempotencyError::PreviouslyFailed`]: super::IdempotencyError::PreviouslyFailed
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnErr {
    /// Keep the failure: duplicates get it, the body never runs again for this key.
    Keep,
    /// Free the key: the failure came before any effect, so a resend may run the body again.
    Release,
    /// Free the key for a resend that drives the body to completion: the body's effects are
    /// all in [steps](super::step), so the resend runs it again, returning every finished step's
    /// journaled output instead of running it, and running a step that started but never
    /// finished again in doubt, with the same derived key (Stripe's newer API: a retry finishes
    /// half-done work). `on_err = "resume"`. The journal is kept with the key whatever happens;
    /// only an effect made outside a step would run twice.
    ///
    /// ```
    /// use retry_core::idempotency::{step, IdempotencyError, MemoryStore};
    /// use retry_core::idempotent;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// #[derive(Debug)]
    /// enum OrderError { MailDown, Idempotency(IdempotencyError) }
    /// impl From<IdempotencyError> for OrderError {
    ///     fn from(e: IdempotencyError) -> Self { OrderError::Idempotency(e) }
    /// }
    ///
    /// static CHARGES: AtomicU32 = AtomicU32::new(0);
    ///
    /// #[idempotent(key = order, store = inbox, on_err = "resume")]
    /// async fn fulfil(inbox: &MemoryStore, order: u64, mail_up: bool) -> Result<u32, OrderError> {
    ///     let charge = step("charge", async |_| {
    ///         Ok::<_, OrderError>(CHARGES.fetch_add(1, Ordering::SeqCst) + 1)
    ///     })
    ///     .await?;
    ///     step("receipt", async |_| if mail_up { Ok(()) } else { Err(OrderError::MailDown) }).await?;
    ///     Ok(charge)
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let inbox = MemoryStore::new();
    /// assert!(matches!(fulfil(&inbox, 7, false).await, Err(OrderError::MailDown)));
    /// // The resend skips the charge (journaled) and sends the receipt.
    /// assert_eq!(fulfil(&inbox, 7, true).await.unwrap(), 1);
    /// assert_eq!(CHARGES.load(Ordering::SeqCst), 1);
    /// # }
    /// ```
    Resume,
}

/// Releases `claim` after a failed body, or marks it failed keeping `failure`, waiting at most
/// the store's [`operation_timeout`](IdempotencyStore::operation_timeout).
pub(super) async fn undo<S: IdempotencyStore + ?Sized>(
    store: &S,
    claim: &Claim,
    on_err: OnErr,
    failure: &str,
) -> Result<(), StoreError> {
    match on_err {
        OnErr::Keep => bounded(store, "mark_failed", store.mark_failed(claim, failure)).await,
        OnErr::Release | OnErr::Resume => bounded(store, "release", store.release(claim)).await,
    }
}
