//! The claim inside the handler's transaction (`PgStore::claim_in_transaction`): a new key in
//! one plain statement, any other in the statement that reads what the key holds.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{Fail, InsertParams, Stored, lock_and_decide, settled};
use retry_core::idempotency::{Claim, ClaimOutcome, ClaimRequest};
use retry_core::time::Clock;

/// `claim_in_transaction`'s statement for a key [`TRY_INSERT`] did not claim, in the handler's
/// open transaction: the key's transaction-level advisory lock tried (never waited for), the
/// claim inserted if it was granted, and the key's committed row as the statement found it (the
/// `READ_ROW` columns, NULL when there is none), then whether the lock was granted, whether the
/// insert happened, and the transaction's id (which `commit_done` checks: read here, `BEGIN`
/// need not ask for it). `$1` key, `$2` biz_key, `$3` fingerprint, `$4` injected now, `$5`
/// lease, `$6` retention. The lock's CTE is read twice, so it runs once; the outer select does
/// not see the CTE's insert (one snapshot), so a row it returns was there before.
const LOCK_AND_INSERT: &str = concat!(
    "WITH l AS (SELECT pg_try_advisory_xact_lock(",
    key_lock!(),
    ") AS got), i AS (",
    claim_row!(concat!("l, ", now_table!("4"))),
    " WHERE l.got ON CONFLICT (msg_id) DO NOTHING RETURNING 1) \
     SELECT r.status, r.response, r.fingerprint, r.token, r.lease_until, r.expires_at, \
     r.in_transaction, ",
    now!("4"),
    ", l.got, EXISTS (SELECT 1 FROM i), txid_current() FROM l LEFT JOIN inbox_log r ON r.msg_id = $1"
);

/// `claim_in_transaction`'s common case, a key nobody holds or has held, in a plain statement
/// (half the server's time of [`LOCK_AND_INSERT`], whose CTEs, join and outer select a new key
/// does not need; BENCHMARKS.md): the key's lock tried, the claim inserted if it was granted,
/// and then the transaction's id. No row: the lock was not granted or the key has a row, and
/// [`LOCK_AND_INSERT`] decides, in one more round trip (the lock, when this statement got it,
/// is taken again: a transaction's advisory locks stack). Same parameters.
const TRY_INSERT: &str = concat!(
    claim_row!(now_table!("4")),
    " WHERE pg_try_advisory_xact_lock(",
    key_lock!(),
    ") ON CONFLICT (msg_id) DO NOTHING RETURNING txid_current()"
);

/// [`TRY_INSERT`] for a call that knows its response (`claim_answered_in_transaction`): the
/// new key's row is written `done` with the response `$7` at once, in the transaction, so the
/// commit need not write it again. Nobody sees the difference: the row is the transaction's
/// until it commits, and goes with its rollback.
const TRY_INSERT_DONE: &str = concat!(
    claim_row!(@as "'done', $7"; now_table!("4")),
    " WHERE pg_try_advisory_xact_lock(",
    key_lock!(),
    ") ON CONFLICT (msg_id) DO NOTHING RETURNING txid_current()"
);

/// The claim inside the handler's transaction, open on `client` (`BEGIN` already run): the
/// claim, or what the key holds (the caller then rolls back), the transaction's id, and
/// whether the key's row was written `done` with `answered` (a new key, when the call knows
/// its response). A new key takes one statement ([`TRY_INSERT`] or [`TRY_INSERT_DONE`]), any
/// other two, and is left in progress for the commit to finish.
///
/// - The lock not granted: a live transaction holds the key right now (another call's claim
///   in its transaction, or a transaction of the old `begin_for` path, whose connection holds
///   the same lock at session level): `InProgress` at once, unless the key is already over.
/// - Granted and inserted: the claim, token 1, visible to nobody until the commit.
/// - Granted, the key has a row: a row that is over answers at once; any other row is locked
///   (`FOR UPDATE`) and decided as `claim` decides, its takeover or reclaim written in this
///   transaction. A row marked by `begin_for` is taken over: this transaction holds its lock,
///   so its holder is gone.
pub(in crate::store) async fn claim_in_transaction(
    client: &impl GenericClient,
    clock: Option<&dyn Clock>,
    request: &ClaimRequest<'_>,
    answered: Option<&str>,
) -> Result<(ClaimOutcome, i64, bool), Fail> {
    let params = InsertParams::new(clock, request);
    let first = match answered {
        Some(response) => {
            let statement = client.prepare_cached(TRY_INSERT_DONE).await?;
            let [a, b, c, d, e, f] = params.list();
            client
                .query_opt(&statement, &[a, b, c, d, e, f, &response])
                .await?
        }
        None => {
            let statement = client.prepare_cached(TRY_INSERT).await?;
            client.query_opt(&statement, &params.list()).await?
        }
    };
    if let Some(row) = first {
        return Ok((
            ClaimOutcome::Claimed(Claim::first(request.key)),
            row.try_get(0)?,
            answered.is_some(),
        ));
    }
    let statement = client.prepare_cached(LOCK_AND_INSERT).await?;
    let row = client.query_one(&statement, &params.list()).await?;
    let txid: i64 = row.try_get(10)?;
    Ok((
        decide_in_transaction(client, clock, request, &row).await?,
        txid,
        false,
    ))
}

/// What [`LOCK_AND_INSERT`]'s `row` says for `request`, deciding about a row that was there
/// inside the transaction (see [`claim_in_transaction`]).
async fn decide_in_transaction(
    client: &impl GenericClient,
    clock: Option<&dyn Clock>,
    request: &ClaimRequest<'_>,
    row: &Row,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let got: bool = row.try_get(8)?;
    let inserted: bool = row.try_get(9)?;
    if inserted {
        return Ok(ClaimOutcome::Claimed(Claim::first(key)));
    }
    if row.try_get::<_, Option<String>>(0)?.is_some() {
        let (found, now) = Stored::decode(key, row)?;
        if found.retained(now)
            && let Some(outcome) = settled(&found, request)?
        {
            return Ok(outcome);
        }
    }
    if !got {
        return Ok(ClaimOutcome::InProgress);
    }
    lock_and_decide(client, clock, request).await
}
