//! [`RequestTransaction`]: the store's transaction, offered to the handler in its request's
//! extensions by a transactional [`IdempotencyLayer`](super::IdempotencyLayer), and taken back
//! by the layer to commit once the handler answered.
//!
//! The transaction is begun on the handler's first [`get`](RequestTransaction::get), not before:
//! a handler that never asks for it holds no connection and (on SQLite) no write lock, and runs
//! under the non-transactional rules. Between the handler and the layer it lives in a slot
//! shared by both; a [`TransactionGuard`] lends it to the handler and puts it back when dropped.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::idempotency::flow::bounded;
use crate::idempotency::{Claim, StoreError, TransactionalStore};

/// The store's transaction for this request, in the request's extensions under a transactional
/// [`IdempotencyLayer`](super::IdempotencyLayer). `St` is the layer's store type exactly as it
/// was given to the layer (`SqliteStore`, `Arc<PgStore>`, ...).
///
/// Axum handlers take it with `Extension<RequestTransaction<St>>`; any other tower service finds
/// it in `request.extensions()`. [`get`](Self::get) begins the transaction on first use and
/// returns a [`TransactionGuard`] that dereferences to the store's transaction
/// ([`SqliteTransaction`](https://docs.rs/retry-sqlite/latest/retry_sqlite/struct.SqliteTransaction.html),
/// [`PgTransaction`](https://docs.rs/retry-postgres/latest/retry_postgres/struct.PgTransaction.html)): run the handler's own SQL on it, drop
/// the guard (or let it go out of scope), and answer. The layer then commits the handler's
/// writes together with the stored response, or rolls them back: see the
/// [module docs](crate::tower::idempotency#transactional-mode) for which answers commit.
///
/// An example on a SQLite file: [`retry_sqlite::transactional`](https://docs.rs/retry-sqlite/latest/retry_sqlite/transactional/index.html).
///
/// A layer built without [`transactional`](super::IdempotencyLayer::transactional) offers it
/// too, so a handler written for a transactional route and mounted behind a plain layer is
/// found out at its first request: `get` fails and the layer logs an ERROR. When the handler
/// then fails (a `5xx`, an error, a panic), the layer answers `500` ("the route is not
/// transactional") and frees the key, instead of storing and replaying that failure; an answer
/// below `500` is kept, as in transactional mode when the transaction could not begin (the
/// handler may have acted elsewhere).
pub struct RequestTransaction<St: ?Sized> {
    slot: Offered,
    store: PhantomData<fn() -> Box<St>>,
}

/// What the layer offered: a transaction's slot (`Shared<St>`, behind `Any` so that a layer whose
/// store has no transactions can still offer the type), or a refusal that remembers being asked.
#[derive(Clone)]
enum Offered {
    Transaction(Arc<dyn Any + Send + Sync>),
    NotTransactional(Arc<AtomicBool>),
}

/// Whether the handler behind a non-transactional layer asked for the request's transaction.
#[derive(Clone, Default)]
pub(super) struct Asked(Arc<AtomicBool>);

impl Asked {
    /// A refusing [`RequestTransaction`] for the handler, which marks this when asked.
    pub(super) fn offer<St: ?Sized + 'static>(&self) -> RequestTransaction<St> {
        RequestTransaction {
            slot: Offered::NotTransactional(Arc::clone(&self.0)),
            store: PhantomData,
        }
    }

    /// Whether the handler asked.
    pub(super) fn asked(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the handler and the layer share.
struct Shared<St: TransactionalStore> {
    store: Arc<St>,
    /// The request's claim, which its transaction takes over from the lease
    /// ([`TransactionalStore::begin_for`]).
    claim: Option<Claim>,
    slot: Mutex<Slot<St::Transaction>>,
}

/// Where the transaction is.
enum Slot<T> {
    /// Never asked for: nothing begun.
    Unasked,
    /// Asked for, but `begin` failed (the handler got the error) or was dropped half way.
    NotBegun,
    /// Begun, and here.
    Open(T),
    /// Lent to a [`TransactionGuard`], or being begun for one.
    Lent,
    /// Taken back by the layer: the handler answered.
    Closed,
}

/// What the layer found in the slot once the handler answered.
pub(super) enum Taken<T> {
    /// The handler never asked: the non-transactional rules apply.
    Unasked,
    /// The handler asked but got no transaction: nothing of one can commit.
    NotBegun,
    /// The transaction, to commit or roll back.
    Open(T),
    /// A guard still holds it (kept past the answer, e.g. moved into a spawned task): it can
    /// no longer be committed, and rolls back when that guard is dropped.
    Lent,
}

impl<St: TransactionalStore + 'static> RequestTransaction<St> {
    /// A slot for one request holding `claim`, on `store`: the transaction begins when the
    /// handler asks for it.
    pub(super) fn new(store: Arc<St>, claim: Option<Claim>) -> Self {
        Self::with(store, claim, Slot::Unasked)
    }

    /// A slot holding `transaction`, begun (with the claim in it) before the handler runs: the
    /// layer commits or rolls it back whether or not the handler asks for it.
    pub(super) fn open(store: Arc<St>, transaction: St::Transaction) -> Self {
        Self::with(store, None, Slot::Open(transaction))
    }

    fn with(store: Arc<St>, claim: Option<Claim>, slot: Slot<St::Transaction>) -> Self
    where
        St: 'static,
    {
        let shared: Arc<Shared<St>> = Arc::new(Shared {
            store,
            claim,
            slot: Mutex::new(slot),
        });
        RequestTransaction {
            slot: Offered::Transaction(shared),
            store: PhantomData,
        }
    }

    /// The slot a transactional layer offered, or the refusal of a plain one (marked asked).
    fn shared(&self) -> Result<Arc<Shared<St>>, StoreError>
    where
        St: 'static,
    {
        match &self.slot {
            Offered::Transaction(shared) => Arc::clone(shared)
                .downcast::<Shared<St>>()
                .map_err(|_| unavailable("the request's transaction is of another store type")),
            Offered::NotTransactional(asked) => {
                asked.store(true, Ordering::Release);
                Err(unavailable(
                    "this route's IdempotencyLayer is not transactional: build it with .transactional() to use the request's transaction",
                ))
            }
        }
    }

    /// The request's transaction, begun now if this is the first call (waiting at most the
    /// store's [`operation_timeout`](crate::idempotency::IdempotencyStore::operation_timeout);
    /// on SQLite `begin` also waits for the file's write lock, at most the busy timeout). Each
    /// later call returns the same transaction. Everything run on it commits with the stored
    /// response after the handler answered, or not at all. Under
    /// [`effects_in_transaction`](super::IdempotencyLayer::effects_in_transaction) the
    /// transaction is open before the handler runs, holding the request's claim, and `get`
    /// only lends it.
    ///
    /// Asking for the transaction puts the request under the transactional rules, even if
    /// `begin` fails: the handler promises that its effects are its writes in this transaction,
    /// so a failed answer (`5xx`, an error, a panic) rolls them back and frees the key.
    ///
    /// # Errors
    /// - the store's error when `begin` fails ([`StoreError::Unavailable`]: no connection, a
    ///   locked file, a server that does not answer); asking again tries again;
    /// - [`StoreError::Unavailable`] when another [`TransactionGuard`] of this request is still
    ///   alive (one at a time: drop the first), or the handler already answered.
    ///
    /// An example on a SQLite file: [`retry_sqlite::transactional`](https://docs.rs/retry-sqlite/latest/retry_sqlite/transactional/index.html).
    pub async fn get(&self) -> Result<TransactionGuard<St>, StoreError> {
        let shared = self.shared()?;
        {
            let mut slot = shared.lock();
            match std::mem::replace(&mut *slot, Slot::Lent) {
                Slot::Open(transaction) => return Ok(lend(&shared, transaction)),
                Slot::Unasked | Slot::NotBegun => {}
                taken @ (Slot::Lent | Slot::Closed) => {
                    let over = matches!(taken, Slot::Closed);
                    *slot = taken;
                    return Err(unavailable(if over {
                        "the request's transaction is over: the handler already answered"
                    } else {
                        "the request's transaction is in use by another TransactionGuard; drop it first"
                    }));
                }
            }
        }
        // Marked lent while it is begun (outside the lock: `begin` waits); if this future is
        // dropped half way, the mark says "asked, nothing begun".
        let mut beginning = Beginning {
            shared: &shared,
            done: false,
        };
        let store = &*shared.store;
        let begun = match &shared.claim {
            Some(claim) => bounded(store, "begin", store.begin_for(claim)).await,
            None => bounded(store, "begin", store.begin()).await,
        };
        beginning.done = true;
        let mut slot = shared.lock();
        match begun {
            Ok(transaction) => {
                if matches!(*slot, Slot::Closed) {
                    // The handler answered meanwhile (it left this call running elsewhere).
                    drop(slot);
                    drop(transaction);
                    return Err(unavailable(
                        "the request's transaction is over: the handler already answered",
                    ));
                }
                drop(slot);
                Ok(lend(&shared, transaction))
            }
            Err(e) => {
                if !matches!(*slot, Slot::Closed) {
                    *slot = Slot::NotBegun;
                }
                Err(e)
            }
        }
    }

    /// Takes the transaction back once the handler answered; from now on the slot is closed
    /// (a guard still alive rolls its transaction back when dropped).
    pub(super) fn close(&self) -> Taken<St::Transaction> {
        let Ok(shared) = self.shared() else {
            return Taken::NotBegun;
        };
        match std::mem::replace(&mut *shared.lock(), Slot::Closed) {
            Slot::Unasked => Taken::Unasked,
            Slot::NotBegun | Slot::Closed => Taken::NotBegun,
            Slot::Open(transaction) => Taken::Open(transaction),
            Slot::Lent => Taken::Lent,
        }
    }
}

/// `transaction`, lent to the handler from `shared`.
fn lend<St: TransactionalStore>(
    shared: &Arc<Shared<St>>,
    transaction: St::Transaction,
) -> TransactionGuard<St> {
    TransactionGuard {
        transaction: Some(transaction),
        shared: Arc::clone(shared),
    }
}

impl<St: TransactionalStore> Shared<St> {
    fn lock(&self) -> MutexGuard<'_, Slot<St::Transaction>> {
        // Nothing panics while holding it; a poisoned slot is still consistent.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<St: ?Sized> Clone for RequestTransaction<St> {
    fn clone(&self) -> Self {
        RequestTransaction {
            slot: self.slot.clone(),
            store: PhantomData,
        }
    }
}

impl<St: TransactionalStore + 'static> fmt::Debug for RequestTransaction<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = match &self.slot {
            Offered::Transaction(shared) => shared.downcast_ref::<Shared<St>>(),
            Offered::NotTransactional(_) => None,
        };
        let state = match shared.map(|shared| shared.lock()).as_deref() {
            None => "not transactional",
            Some(Slot::Unasked) => "not begun",
            Some(Slot::NotBegun) => "begin failed",
            Some(Slot::Open(_)) => "open",
            Some(Slot::Lent) => "in use",
            Some(Slot::Closed) => "over",
        };
        f.debug_struct("RequestTransaction")
            .field("state", &state)
            .finish()
    }
}

/// Resets a slot left lent by a `begin` that never finished (its future was dropped).
struct Beginning<'a, St: TransactionalStore> {
    shared: &'a Shared<St>,
    done: bool,
}

impl<St: TransactionalStore> Drop for Beginning<'_, St> {
    fn drop(&mut self) {
        if !self.done {
            let mut slot = self.shared.lock();
            if matches!(*slot, Slot::Lent) {
                *slot = Slot::NotBegun;
            }
        }
    }
}

/// The request's transaction, lent to the handler by [`RequestTransaction::get`]: it
/// dereferences to the store's transaction, and gives it back to the layer when dropped. Drop
/// it before the handler answers (a guard kept past the answer, e.g. moved into a spawned task,
/// cannot be committed: the layer then rolls back and answers `500`).
///
/// An example on PostgreSQL: [`retry_postgres::PgTransaction`](https://docs.rs/retry-postgres/latest/retry_postgres/struct.PgTransaction.html).
#[must_use = "the transaction is given back to the layer when the guard is dropped"]
pub struct TransactionGuard<St: TransactionalStore> {
    /// `Some` until dropped.
    transaction: Option<St::Transaction>,
    shared: Arc<Shared<St>>,
}

impl<St: TransactionalStore> Deref for TransactionGuard<St> {
    type Target = St::Transaction;

    fn deref(&self) -> &St::Transaction {
        self.transaction
            .as_ref()
            .expect("a TransactionGuard holds its transaction until it is dropped")
    }
}

impl<St: TransactionalStore> DerefMut for TransactionGuard<St> {
    fn deref_mut(&mut self) -> &mut St::Transaction {
        self.transaction
            .as_mut()
            .expect("a TransactionGuard holds its transaction until it is dropped")
    }
}

impl<St: TransactionalStore> Drop for TransactionGuard<St> {
    fn drop(&mut self) {
        let Some(transaction) = self.transaction.take() else {
            return;
        };
        let mut slot = self.shared.lock();
        if matches!(*slot, Slot::Lent) {
            *slot = Slot::Open(transaction);
        } else {
            // The layer closed the slot: nothing can commit it any more. Dropping it rolls it
            // back (outside the lock).
            drop(slot);
            drop(transaction);
        }
    }
}

impl<St: TransactionalStore> fmt::Debug for TransactionGuard<St>
where
    St::Transaction: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TransactionGuard")
            .field(&self.transaction)
            .finish()
    }
}

fn unavailable(why: &'static str) -> StoreError {
    StoreError::Unavailable(why.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::{Claim, OverMemory, TransactionalStore};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A memory store whose transactions are counters: begun, and dropped.
    type Counting = OverMemory<Counts>;

    #[derive(Default)]
    struct Counts {
        begun: AtomicU32,
        fail_begin: std::sync::atomic::AtomicBool,
        dropped: Arc<AtomicU32>,
    }

    struct Tx(Arc<AtomicU32>);
    impl Drop for Tx {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl TransactionalStore for Counting {
        type Transaction = Tx;
        async fn begin(&self) -> Result<Tx, StoreError> {
            if self.fail_begin.load(Ordering::SeqCst) {
                return Err(unavailable("down"));
            }
            self.begun.fetch_add(1, Ordering::SeqCst);
            Ok(Tx(Arc::clone(&self.dropped)))
        }
        async fn commit_done(&self, _: Tx, _: &Claim, _: &str) -> Result<(), StoreError> {
            Ok(())
        }
        async fn rollback(&self, _: Tx) -> Result<(), StoreError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn begun_once_lent_one_at_a_time_and_taken_back() {
        let store = Arc::new(Counting::default());
        let slot = RequestTransaction::new(Arc::clone(&store), None);
        assert!(matches!(slot.clone().close(), Taken::Unasked));

        let slot = RequestTransaction::new(Arc::clone(&store), None);
        let first = slot.get().await.unwrap();
        assert!(slot.get().await.is_err(), "one guard at a time");
        drop(first);
        let again = slot.get().await.unwrap();
        drop(again);
        assert_eq!(
            store.begun.load(Ordering::SeqCst),
            1,
            "begun on first use only"
        );
        assert!(matches!(slot.close(), Taken::Open(_)));
        assert!(
            slot.get().await.is_err(),
            "over once the layer took it back"
        );
    }

    #[tokio::test]
    async fn a_guard_kept_past_the_answer_rolls_back_when_dropped() {
        let store = Arc::new(Counting::default());
        let slot = RequestTransaction::new(Arc::clone(&store), None);
        let kept = slot.get().await.unwrap();
        assert!(matches!(slot.close(), Taken::Lent));
        assert_eq!(store.dropped.load(Ordering::SeqCst), 0);
        drop(kept);
        assert_eq!(
            store.dropped.load(Ordering::SeqCst),
            1,
            "dropped, not put back"
        );
    }

    #[tokio::test]
    async fn a_failed_begin_is_asked_but_not_begun_and_may_be_asked_again() {
        let store = Arc::new(Counting::default());
        store.fail_begin.store(true, Ordering::SeqCst);
        let slot = RequestTransaction::new(Arc::clone(&store), None);
        assert!(slot.get().await.is_err());
        store.fail_begin.store(false, Ordering::SeqCst);
        drop(slot.get().await.unwrap());
        assert!(matches!(slot.close(), Taken::Open(_)));

        store.fail_begin.store(true, Ordering::SeqCst);
        let slot = RequestTransaction::new(Arc::clone(&store), None);
        assert!(slot.get().await.is_err());
        assert!(matches!(slot.close(), Taken::NotBegun));
    }
}
