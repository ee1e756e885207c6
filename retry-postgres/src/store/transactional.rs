//! Transactional mode of [`PgStore`]: the handler's transaction ([`PgTransaction`]), whose
//! writes commit together with the `done` row.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;

use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{PgStore, claim};
use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, ClaimedTransaction, StoreError, TransactionClaim,
    TransactionalStore,
};

// Transactional mode. `BEGIN` and the transaction's id in one round trip; the `done` update is
// guarded by that id as well, so it can only ever commit inside the transaction `begin` opened
// (not in autocommit, nor in another transaction, should the handler's SQL have ended it).
// READ COMMITTED whatever the server's default: while the handler runs, the claim's lease is
// renewed from another connection, and a REPEATABLE READ or SERIALIZABLE transaction refuses
// to update a row updated since its snapshot (`40001`), so its `done` update would fail.
const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT txid_current()::text";
// `claim_in_transaction`'s `BEGIN`: its claim statement reads the transaction's id itself, so
// the server runs one statement fewer per call.
const BEGIN_CLAIM: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";
// `commit_done`'s update, sent together with the `COMMIT` (one round trip), so it must never
// let that `COMMIT` through when it wrote nothing: it fails instead, which aborts the
// transaction, and PostgreSQL ends an aborted transaction's `COMMIT` as a `ROLLBACK`. Two
// failures, told apart by their SQLSTATE: the handler's SQL ended the transaction `BEGIN`
// opened (`txid_current()` is another: invalid_text_representation, raised by casting text
// that says so), or the claim's row was not in progress under its token (taken over, or
// finished: `count(*)` of the updated rows is 0, division_by_zero). Neither branch is a
// constant, so the planner cannot raise it while preparing. `$1` response, `$2` key, `$3`
// token, `$4` the transaction's id.
macro_rules! commit_done {
    ($status:literal) => {
        concat!(
            "WITH u AS (UPDATE inbox_log SET status = 'done', response = $1 \
             WHERE msg_id = $2 AND token = $3 AND status = ",
            $status,
            " AND txid_current() = $4 RETURNING 1) \
             SELECT CASE WHEN txid_current() = $4 THEN 1 / (SELECT count(*)::int FROM u) \
             ELSE ('not the transaction begun for the handler: ' || txid_current())::int END"
        )
    };
}
const COMMIT_DONE: &str = commit_done!("'in_progress'");
// `COMMIT_DONE` of a claim whose row this transaction wrote `done` with another response
// (`claim_answered_in_transaction`): the row is `done` already, under the claim's token.
const COMMIT_ANSWERED_OTHERWISE: &str = commit_done!("'done'");
// `begin_for`: the connection takes the key's advisory lock (session level: it outlives the
// `BEGIN`s and `COMMIT`s, and the server drops it with the connection), then marks the claim's
// row as held by a transaction, in autocommit (so the mark is there for everyone even if this
// process dies), then begins. The mark is only ever set under the lock, so a claim that finds
// the mark and gets the lock knows the transaction is over without its commit (see
// `claim::decide`). The lock is given back once the transaction ended, before the connection
// goes back to the pool. `$1` key, `$2` token.
const LOCK_KEY: &str = concat!("SELECT pg_advisory_lock(", key_lock!(), ")");
// `commit_done` of the claim whose row this transaction wrote `done` with the same response
// (`claim_answered_in_transaction`): nothing to write, but like `COMMIT_DONE` it goes out with
// the `COMMIT` and fails on purpose (invalid_text_representation) when the handler's SQL ended
// the transaction `BEGIN` opened, so that `COMMIT` commits nothing else. No table is read: the
// row is the one this transaction inserted (its key and token 1 are checked before). `$1` the
// transaction's id.
const COMMIT_ANSWERED: &str = "SELECT CASE WHEN txid_current() = $1 THEN 1 \
     ELSE ('not the transaction begun for the handler: ' || txid_current())::int END";
const UNLOCK_KEY: &str = concat!("SELECT pg_advisory_unlock(", key_lock!(), ")");
const HOLD: &str = "UPDATE inbox_log SET in_transaction = true \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";

/// The handler's transaction in transactional mode: one pooled connection of a [`PgStore`]
/// inside `BEGIN`. The handler's own SQL runs on [`client`](Self::client), and
/// [`commit_done`](TransactionalStore::commit_done) writes the response and `done` in the same
/// transaction and commits, so the handler's writes and the stored response commit together or
/// not at all.
///
/// - Begun with [`begin_for`](TransactionalStore::begin_for) (as `#[idempotent(transaction)]`
///   and the transactional `IdempotencyLayer` do), it holds the claim until it ends: its
///   connection holds an advisory lock on the key (`pg_advisory_lock`, given back before the
///   connection goes back to the pool) and the claim's row is marked. A duplicate meanwhile
///   gets `InProgress` at once, whatever the lease says; once the transaction ended without its
///   commit (rolled back, the connection or the process gone), the next claim takes the key
///   over at once.
/// - Begun with [`begin`](TransactionalStore::begin), the claim's row is not locked while the
///   handler runs (only by `commit_done`'s update, just before the `COMMIT`): a duplicate
///   arriving meanwhile gets `InProgress`, and one arriving after the lease ran out takes the
///   key over. `commit_done` then finds another token, rolls everything back (the handler's
///   writes included) and returns [`StoreError::Fenced`].
/// - The handler's SQL must not end the transaction (no `COMMIT`, `ROLLBACK` or `BEGIN` of its
///   own; savepoints are fine). If it does, `commit_done` notices (the `done` update is also
///   guarded by the transaction's id), writes nothing and fails with
///   [`StoreError::Unavailable`]; whatever the handler committed itself stays committed.
/// - After a failed statement PostgreSQL refuses everything until the transaction ends: roll
///   back (or use a savepoint); `commit_done` on such a transaction fails with
///   [`StoreError::Unavailable`] and rolls back.
/// - **Dropped without `commit_done` or `rollback`** (a crash of the handler, a dropped future,
///   a panic): the connection is detached from the pool
///   ([`Object::take`](deadpool_postgres::Object::take)) and closed, and the server rolls the
///   transaction back when it sees the connection go; a connection with an open transaction
///   never goes back to the pool. The same happens when `commit_done` or `rollback` fails half
///   way. A dropped transaction does not release a claim committed before it; that is the
///   claim's holder's business (the `#[idempotent]` flow releases it, otherwise its lease frees
///   it). A claim taken in the transaction itself
///   ([`claim_in_transaction`](TransactionalStore::claim_in_transaction)) goes with the
///   rollback: the key is free as soon as the server has rolled back.
/// - It is READ COMMITTED, whatever the server's default: the claim's lease is renewed from
///   another connection while the handler runs, and under REPEATABLE READ or SERIALIZABLE the
///   `done` update would then fail to serialize. A handler that needs more for its own rows
///   locks them (`SELECT .. FOR UPDATE`).
/// - It holds one of the store's [connections](PgStore::with_pool_size) until it ends.
///
/// The client is tokio-postgres 0.7's: depend on the same version to name its types.
///
/// ```no_run
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, TransactionalStore};
/// use retry_postgres::PgStore;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PgStore::connect("postgres://app@localhost/payments").await?;
/// let request = ClaimRequest {
///     key: "deposit:7",
///     biz_key: "7",
///     fingerprint: None,
///     lease: Duration::from_secs(30),
///     retention: Duration::from_secs(86_400),
/// };
/// let ClaimOutcome::Claimed(claim) = store.claim(&request).await? else { panic!() };
/// let tx = store.begin().await?;
/// tx.client()
///     .execute("UPDATE balances SET amount = amount + $1 WHERE account = $2", &[&10_i64, &"a"])
///     .await?;
/// store.commit_done(tx, &claim, "{\"receipt\":7}").await?;
/// // The deposit and its response committed together; a duplicate gets the response.
/// assert_eq!(store.claim(&request).await?, ClaimOutcome::Done("{\"receipt\":7}".into()));
/// # Ok(())
/// # }
/// ```
///
/// In an HTTP service, the transactional `IdempotencyLayer` of retry-core's `tower` feature lends
/// the handler this transaction through its `RequestTransaction`:
///
/// ```no_run
/// use retry_core::idempotency::StoreError;
/// use retry_postgres::PgStore;
/// use retry_core::tower::RequestTransaction;
///
/// /// With PostgreSQL the guard dereferences to a `PgTransaction`, whose `client()` runs SQL.
/// async fn book(tx: &RequestTransaction<PgStore>, cents: i64) -> Result<u64, Box<dyn std::error::Error>> {
///     let tx = tx.get().await?;
///     Ok(tx.client().execute("INSERT INTO bookings (cents) VALUES ($1)", &[&cents]).await?)
/// }
/// ```
pub struct PgTransaction {
    /// `Some` until the transaction is consumed; taken out only to go back to the pool after a
    /// successful `COMMIT` or `ROLLBACK`. Whatever is still here on drop is detached.
    conn: Option<Object>,
    /// The claim's key whose advisory lock the connection holds (`begin_for`).
    holds: Option<String>,
    /// The transaction's id (`txid_current()`): read with `BEGIN`, or by the claim statement of
    /// `claim_in_transaction`, the first one in the transaction.
    txid: i64,
    /// The key this transaction inserted `done`, and the response it was written with
    /// (`claim_answered_in_transaction`, a new key): `commit_done` of that claim with that
    /// response only commits.
    answered: Option<(String, String)>,
    server: Arc<str>,
}

impl fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTransaction")
            .field("server", &self.server)
            .field("txid", &self.txid)
            .finish()
    }
}

impl PgTransaction {
    /// The connection the transaction runs on, for the handler's own SQL. Everything run on it
    /// commits with the response in [`commit_done`](TransactionalStore::commit_done), or not at
    /// all. Do not end the transaction on it (see [`PgTransaction`]).
    ///
    /// ```no_run
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_postgres::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// let row = tx
    ///     .client()
    ///     .query_one("INSERT INTO orders (item) VALUES ($1) RETURNING id", &[&"book"])
    ///     .await?;
    /// let id: i64 = row.get(0);
    /// // Later statements see the earlier ones: it is one transaction.
    /// let row = tx.client().query_one("SELECT item FROM orders WHERE id = $1", &[&id]).await?;
    /// assert_eq!(row.get::<_, String>(0), "book");
    /// store.rollback(tx).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn client(&self) -> &tokio_postgres::Client {
        self.pooled()
    }

    /// Prepares `sql` on the transaction's connection, reusing the statement if this
    /// connection prepared the same text before (the pool's statement cache).
    ///
    /// # Errors
    /// The server's error, when `sql` does not prepare.
    ///
    /// ```no_run
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_postgres::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// let add = tx.prepare_cached("UPDATE balances SET amount = amount + $1 WHERE account = $2").await?;
    /// tx.client().execute(&add, &[&5_i64, &"a"]).await?;
    /// store.rollback(tx).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prepare_cached(
        &self,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
        self.pooled().prepare_cached(sql).await
    }

    fn pooled(&self) -> &Object {
        // Only `commit_done` and `rollback` take the connection out, and they consume `self`.
        self.conn
            .as_ref()
            .expect("a PgTransaction keeps its connection until it is consumed")
    }

    /// Ends the transaction's use of the connection, once the transaction is over on the
    /// server: back to the pool, after giving back the key's lock it holds. If that fails the
    /// connection is closed instead (the server then drops the lock), never pooled with it.
    async fn give_back(mut self) {
        if let Some(key) = self.holds.take() {
            let client = self.pooled();
            let unlocked = match client.prepare_cached(UNLOCK_KEY).await {
                Ok(unlock) => client.execute(&unlock, &[&key]).await,
                Err(e) => Err(e),
            };
            if let Err(e) = unlocked {
                tracing::debug!(target: "retry_core::idempotency", server = %self.server, error = %retry_core::error_chain(&e), "could not give back a key's lock; closing the connection");
                return;
            }
        }
        drop(self.conn.take());
    }
}

impl Drop for PgTransaction {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Never pooled again: closing it (the client's connection task is aborted when the
            // wrapper drops) makes the server roll the transaction back.
            drop(Object::take(conn));
            tracing::debug!(target: "retry_core::idempotency", server = %self.server, "a transaction ended without commit or rollback; its connection was closed");
        }
    }
}

impl PgStore {
    /// `conn`, from now on a transaction's: dropped, it is detached and closed. With `holds`,
    /// the connection holds (or is about to take) that key's lock.
    fn wrap(&self, conn: Object, holds: Option<String>) -> PgTransaction {
        PgTransaction {
            conn: Some(conn),
            holds,
            txid: 0,
            answered: None,
            server: Arc::clone(&self.db.server),
        }
    }

    /// Refuses a transaction of another store's pool, given to `method`: its commit would
    /// write this store's rows on another server (or another pool of the same one).
    fn own(&self, tx: &PgTransaction, method: &str) -> Result<(), StoreError> {
        let same_pool = tx
            .conn
            .as_ref()
            .and_then(Object::pool)
            .is_some_and(|pool| std::ptr::eq(pool.manager(), self.db.pool.manager()));
        if same_pool {
            return Ok(());
        }
        Err(StoreError::Unavailable(
            format!(
                "the transaction given to {method} was begun by another store (PostgreSQL at {}), not this one (PostgreSQL at {})",
                tx.server, self.db.server
            )
            .into(),
        ))
    }

    /// `BEGIN` on the transaction's connection.
    async fn begin_on(&self, mut tx: PgTransaction) -> Result<PgTransaction, StoreError> {
        tx.txid = self.begin_txid(tx.client()).await?;
        Ok(tx)
    }

    /// Runs `BEGIN` on `client`; the new transaction's id.
    async fn begin_txid(&self, client: &tokio_postgres::Client) -> Result<i64, StoreError> {
        let messages = client
            .simple_query(BEGIN)
            .await
            .map_err(|e| self.error(e))?;
        let txid = messages.iter().find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse::<i64>().ok(),
            _ => None,
        });
        txid.ok_or_else(|| {
            StoreError::Unavailable(
                format!(
                    "PostgreSQL at {}: BEGIN did not report a transaction id",
                    self.db.server
                )
                .into(),
            )
        })
    }
}

impl TransactionalStore for PgStore {
    type Transaction = PgTransaction;

    /// Takes a connection from the pool and runs `BEGIN ISOLATION LEVEL READ COMMITTED` on it
    /// (and reads the transaction's id, in the same round trip). See [`PgTransaction`] for what handlers may do with it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when no connection frees up within the pool's wait timeout,
    /// or the server fails.
    ///
    /// ```no_run
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_postgres::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// tx.client().execute("INSERT INTO audit (what) VALUES ($1)", &[&"begin"]).await?;
    /// drop(tx); // rolled back: the connection is closed, never pooled
    /// # Ok(())
    /// # }
    /// ```
    async fn begin(&self) -> Result<PgTransaction, StoreError> {
        let conn = self.db.get().await.map_err(StoreError::Unavailable)?;
        self.begin_on(self.wrap(conn, None)).await
    }

    /// Marks the claim's row as held by a transaction, begins one on the same connection and
    /// locks the row in it, under the claim's token; [`StoreError::Fenced`] when the claim was
    /// taken over before the mark or before the lock.
    async fn begin_for(&self, claim: &Claim) -> Result<PgTransaction, StoreError> {
        let Ok(token) = i64::try_from(claim.token) else {
            return Err(StoreError::Fenced);
        };
        let conn = self.db.get().await.map_err(StoreError::Unavailable)?;
        let tx = self.wrap(conn, Some(claim.key.clone()));
        // Waits only for a holder fenced a moment ago, which gives the lock back at once.
        let lock = tx
            .prepare_cached(LOCK_KEY)
            .await
            .map_err(|e| self.error(e))?;
        tx.client()
            .execute(&lock, &[&claim.key])
            .await
            .map_err(|e| self.error(e))?;
        let hold = tx.prepare_cached(HOLD).await.map_err(|e| self.error(e))?;
        let marked = tx
            .client()
            .execute(&hold, &[&claim.key, &token])
            .await
            .map_err(|e| self.error(e))?;
        if marked == 0 {
            tx.give_back().await;
            return Err(StoreError::Fenced);
        }
        self.begin_on(tx).await
    }

    /// `BEGIN ISOLATION LEVEL READ COMMITTED` on a pooled connection, then one statement that
    /// tries the key's advisory lock (`pg_try_advisory_xact_lock`, the lock `begin_for` takes
    /// at session level) and, if it was granted, inserts the claim in the transaction. The
    /// transaction is handed over with the claim: the claim, the handler's writes and the
    /// response commit together in [`commit_done`](TransactionalStore::commit_done), one
    /// `COMMIT`; the lock goes with the commit or the rollback.
    ///
    /// - Lock not granted: a live transaction holds the key right now, so
    ///   [`ClaimOutcome::InProgress`] at once, without waiting (unless the key is already done
    ///   or kept failed: that answer).
    /// - Lock granted and the key has a row: decided by the rules of
    ///   [`claim`](retry_core::idempotency::IdempotencyStore::claim) under `SELECT .. FOR UPDATE`: a committed `done`
    ///   row replays, an in-progress row of the non-transactional mode whose lease is live is
    ///   `InProgress`, a released row, an expired lease, or a `begin_for` mark whose holder is
    ///   gone is taken over (in this transaction).
    /// - Dropped, rolled back, its connection lost or its process killed: the server rolls the
    ///   transaction back, so nothing of the call happened and the key is free at once.
    ///
    /// A claim in an open transaction has no row anyone else can see, so nobody renews it and
    /// nobody can take it over: a duplicate gets `InProgress` for as long as it is open.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{ClaimRequest, TransactionClaim, TransactionalStore};
    /// use retry_postgres::PgStore;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/payments").await?;
    /// let request = ClaimRequest {
    ///     key: "deposit:7",
    ///     biz_key: "7",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(30),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let TransactionClaim::Claimed(call) = store.claim_in_transaction(&request).await? else {
    ///     return Ok(()); // a duplicate: replay what the key holds
    /// };
    /// call.transaction
    ///     .client()
    ///     .execute("UPDATE balances SET amount = amount + $1 WHERE account = $2", &[&10_i64, &"a"])
    ///     .await?;
    /// // One commit: the claim, the deposit and the response.
    /// store.commit_done(call.transaction, &call.claim, "{\"receipt\":7}").await?;
    /// # Ok(())
    /// # }
    /// ```
    async fn claim_in_transaction(
        &self,
        request: &ClaimRequest<'_>,
    ) -> Result<TransactionClaim<PgTransaction>, StoreError> {
        self.claim_in(request, None).await
    }

    /// [`claim_in_transaction`](TransactionalStore::claim_in_transaction), a new key's row
    /// written `done` with `response` in the same statement (token, lease and retention as a
    /// claim's): [`commit_done`](TransactionalStore::commit_done) with that response then only
    /// checks the transaction is the one begun and commits, in the same round trip; with
    /// another response it writes that one as usual. Any other key (a row there already) is
    /// claimed in progress, as `claim_in_transaction` claims it.
    async fn claim_answered_in_transaction(
        &self,
        request: &ClaimRequest<'_>,
        response: &str,
    ) -> Result<TransactionClaim<PgTransaction>, StoreError> {
        self.claim_in(request, Some(response)).await
    }

    /// In `transaction`: `UPDATE inbox_log SET status = 'done', response = $1` for the claim's
    /// key, only if its token and `in_progress` still hold (and the transaction is still the one
    /// `begin` opened), and `COMMIT`, sent together: one round trip. One row: the `COMMIT`
    /// commits the handler's writes and the response together. No row (the claim was taken
    /// over, or already finished): the update fails on purpose, which aborts the transaction,
    /// so the `COMMIT` behind it rolls everything back, the handler's writes included;
    /// [`StoreError::Fenced`].
    ///
    /// If this future is dropped before it finishes, the connection is closed and the server
    /// rolls back, unless the `COMMIT` had already reached it. An error from the `COMMIT`
    /// itself (the connection lost at that moment) leaves the outcome unknown: the next claim
    /// of the key tells (`Done`, or `InProgress` until the lease runs out).
    ///
    /// A claim whose row was written `done` with this same response
    /// ([`claim_answered_in_transaction`](TransactionalStore::claim_answered_in_transaction))
    /// has nothing left to write: only the check that the transaction is still the one begun
    /// for the handler goes out with the `COMMIT`.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] as above; [`StoreError::Unavailable`] if the transaction belongs to
    /// another store's pool, was ended by the handler's SQL, is aborted by a failed statement,
    /// or the server fails; the transaction is then rolled back.
    ///
    /// ```no_run
    /// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, StoreError, TransactionalStore};
    /// use retry_postgres::PgStore;
    /// use retry_core::time::ManualClock;
    /// use std::sync::Arc;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_750_000_000)));
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?.with_clock(clock.clone());
    /// let request = ClaimRequest {
    ///     key: "m-1",
    ///     biz_key: "m-1",
    ///     fingerprint: None,
    ///     lease: Duration::from_secs(10),
    ///     retention: Duration::from_secs(86_400),
    /// };
    /// let ClaimOutcome::Claimed(slow) = store.claim(&request).await? else { panic!() };
    /// let tx = store.begin().await?;
    /// tx.client().execute("INSERT INTO effects VALUES ('slow')", &[]).await?;
    /// // The slow holder's lease runs out and a duplicate takes the key over.
    /// clock.advance(Duration::from_secs(11));
    /// let ClaimOutcome::Claimed(fast) = store.claim(&request).await? else { panic!() };
    ///
    /// // The slow holder's write and response are refused together.
    /// assert!(matches!(store.commit_done(tx, &slow, "\"slow\"").await, Err(StoreError::Fenced)));
    /// let tx = store.begin().await?;
    /// tx.client().execute("INSERT INTO effects VALUES ('fast')", &[]).await?;
    /// store.commit_done(tx, &fast, "\"fast\"").await?;
    /// # Ok(())
    /// # }
    /// ```
    async fn commit_done(
        &self,
        transaction: PgTransaction,
        claim: &Claim,
        response: &str,
    ) -> Result<(), StoreError> {
        let tx = transaction;
        // Dropped on refusal: detached and rolled back.
        self.own(&tx, "commit_done")?;
        let token = i64::try_from(claim.token).unwrap_or(i64::MAX);
        let client = tx.pooled();
        // The row written `done` with this response when it was claimed: only the check that
        // this is still the transaction begun for the handler.
        let answered = tx.answered.as_ref().is_some_and(|(key, written)| {
            *key == claim.key && claim.token == 1 && written == response
        });
        // Prepared first, on its own: a `Parse` still on its way must not let the `COMMIT`
        // go out before the update.
        let sql = match &tx.answered {
            Some(_) if answered => COMMIT_ANSWERED,
            Some(_) => COMMIT_ANSWERED_OTHERWISE,
            None => COMMIT_DONE,
        };
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.error(e))?;
        // The first poll sends the update (tokio-postgres queues a request when it is first
        // polled, and sends requests in that order). Still waiting: it is on its way, and the
        // `COMMIT` follows it in the same round trip; the update fails rather than write
        // nothing, so the `COMMIT` can only commit a transaction holding the `done` row.
        // Answered at once: it never left (an error of the client, a closed connection), so
        // nothing follows it. `Ok`: the update wrote the row, and the `COMMIT`'s answer;
        // `Err`: the update's error, and the `COMMIT`'s answer if one was sent.
        let sent = {
            let params: [&(dyn ToSql + Sync); 4] = [&response, &claim.key, &token, &tx.txid];
            let params = if answered { &params[3..] } else { &params[..] };
            let mut update = pin!(client.execute(&statement, params));
            match poll_once(update.as_mut()).await {
                None => match both(update, client.batch_execute("COMMIT")).await {
                    (Ok(_), committed) => Ok(committed),
                    (Err(e), committed) => Err((e, Some(committed))),
                },
                Some(Ok(_)) => Ok(client.batch_execute("COMMIT").await),
                Some(Err(e)) => Err((e, None)),
            }
        };
        let (refused, committed) = match sent {
            Ok(committed) => {
                committed.map_err(|e| self.error(e))?;
                tx.give_back().await;
                return Ok(());
            }
            Err(refused) => refused,
        };
        let answer = match refused.code() {
            Some(&SqlState::DIVISION_BY_ZERO) => StoreError::Fenced,
            Some(&SqlState::INVALID_TEXT_REPRESENTATION) => StoreError::Unavailable(
                format!(
                    "PostgreSQL at {}: the handler's SQL ended the transaction begun for it (a COMMIT or ROLLBACK of its own), so the response was not stored with its writes",
                    self.db.server
                )
                .into(),
            ),
            _ => self.error(refused),
        };
        // Nothing of the transaction committed: the update failed, so the `COMMIT` behind it
        // ended the transaction as a `ROLLBACK`. Once that answered, the connection is out of
        // any transaction and can be pooled again; otherwise it is dropped, closed, and the
        // server rolls back. The answer stands either way.
        match committed {
            Some(Ok(())) => tx.give_back().await,
            Some(Err(e)) => {
                tracing::debug!(target: "retry_core::idempotency", server = %self.db.server, error = %retry_core::error_chain(&e), "the COMMIT after a refused commit_done failed; closing the connection");
                drop(tx);
            }
            None => drop(tx),
        }
        Err(answer)
    }

    /// The step's row written in the step's transaction (begun with
    /// [`begin`](TransactionalStore::begin)) by the journal's fenced statement, then `COMMIT`:
    /// the step's writes and its journal entry commit together. The claim's row is locked
    /// `FOR SHARE` until the commit, so no takeover comes between. [`StoreError::Fenced`], and
    /// a rollback, when the key was taken over.
    async fn commit_step(
        &self,
        transaction: PgTransaction,
        claim: &Claim,
        label: &str,
        output: &str,
    ) -> Result<(), StoreError> {
        let tx = transaction;
        self.own(&tx, "commit_step")?;
        let write = retry_core::idempotency::StepWrite::Finished(output);
        let (Some(token), output) = super::steps::step_params(claim, write) else {
            return Err(StoreError::Fenced);
        };
        let client = tx.pooled();
        let params: [&(dyn ToSql + Sync); 4] = [&claim.key, &token, &label, &output];
        let statement = client
            .prepare_cached(super::steps::WRITE_STEP)
            .await
            .map_err(|e| self.error(e))?;
        let held: i64 = client
            .query_one(&statement, &params)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| self.error(e))?;
        if held == 0 {
            self.rollback(tx).await?;
            return Err(StoreError::Fenced);
        }
        client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| self.error(e))?;
        tx.give_back().await;
        Ok(())
    }

    /// Rolls the handler's transaction back and returns its connection to the pool.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server fails; the connection is then closed (and
    /// the server rolls back anyway).
    ///
    /// ```no_run
    /// use retry_core::idempotency::TransactionalStore;
    /// use retry_postgres::PgStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PgStore::connect("postgres://app@localhost/shop").await?;
    /// let tx = store.begin().await?;
    /// tx.client().execute("DELETE FROM orders", &[]).await?;
    /// store.rollback(tx).await?; // the orders are all still there
    /// # Ok(())
    /// # }
    /// ```
    async fn rollback(&self, transaction: PgTransaction) -> Result<(), StoreError> {
        let tx = transaction;
        tx.client()
            .batch_execute("ROLLBACK")
            .await
            .map_err(|e| self.error(e))?;
        tx.give_back().await;
        Ok(())
    }
}

/// Polls `first` and `second` together until both are done, `first` first at every wake (what
/// `join!` does; the crate depends on neither tokio's macros nor `futures`). Two requests on one
/// tokio-postgres connection joined this way go out in one round trip, `first`'s first.
async fn both<A: Future, B: Future>(first: A, second: B) -> (A::Output, B::Output) {
    let (mut first, mut second) = (pin!(first), pin!(second));
    let (mut a, mut b) = (None, None);
    poll_fn(|cx| {
        if a.is_none()
            && let Poll::Ready(output) = first.as_mut().poll(cx)
        {
            a = Some(output);
        }
        if b.is_none()
            && let Poll::Ready(output) = second.as_mut().poll(cx)
        {
            b = Some(output);
        }
        match (a.take(), b.take()) {
            (Some(a), Some(b)) => Poll::Ready((a, b)),
            (waiting_a, waiting_b) => {
                (a, b) = (waiting_a, waiting_b);
                Poll::Pending
            }
        }
    })
    .await
}

/// Polls `future` once: its output if it finished at once, `None` if it is still waiting (and
/// will be polled again).
async fn poll_once<F: Future + Unpin>(mut future: F) -> Option<F::Output> {
    poll_fn(|cx| match Pin::new(&mut future).poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

impl PgStore {
    /// `claim_in_transaction`, and with `answered` a new key written `done` with it.
    async fn claim_in(
        &self,
        request: &ClaimRequest<'_>,
        answered: Option<&str>,
    ) -> Result<TransactionClaim<PgTransaction>, StoreError> {
        let conn = self.db.get().await.map_err(StoreError::Unavailable)?;
        let mut tx = self.wrap(conn, None);
        let clock = self.clock.as_deref();
        // `BEGIN` and the claim go out together, one round trip: tokio-postgres sends requests
        // in the order they are first polled (`both` polls `BEGIN` first), and the server runs
        // them in that order, so the claim runs inside the transaction. On an error `tx` is
        // dropped: its connection closes and the server rolls back. (Were `BEGIN` to fail and
        // the claim not, the claim would have committed on its own: in progress until its
        // lease ends, never run twice.)
        let (begun, claimed) = both(
            tx.client().batch_execute(BEGIN_CLAIM),
            claim::claim_in_transaction(tx.pooled(), clock, request, answered),
        )
        .await;
        begun.map_err(|e| self.error(e))?;
        let (outcome, txid, written) =
            claimed.map_err(|e| self.db.fail(e, StoreError::Unavailable))?;
        tx.txid = txid;
        tx.answered = answered
            .filter(|_| written)
            .map(|response| (request.key.to_owned(), response.to_owned()));
        match outcome {
            ClaimOutcome::Claimed(claim) => Ok(TransactionClaim::Claimed(ClaimedTransaction {
                claim,
                transaction: tx,
                in_transaction: true,
            })),
            refused => {
                self.rollback(tx).await?;
                Ok(TransactionClaim::Refused(refused))
            }
        }
    }
}
