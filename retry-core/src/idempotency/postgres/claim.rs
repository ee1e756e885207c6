//! The claim and the single-statement writes of [`PgStore`](super::PgStore): the statements,
//! the decision about a row that is there, and the purge.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::{GenericClient, Object};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::super::{Claim, ClaimOutcome, ClaimRequest, StoreError};
use crate::sql::postgres::{self as sql, Db};
use crate::time::{Clock, format_utc, later, parse_utc};

/// Rows deleted per purge statement: each batch commits on its own, so a purge of millions of
/// rows never becomes one long transaction. Every matching row is deleted; the batch size only
/// decides how many statements that takes.
const PURGE_BATCH: i64 = 5_000;

/// How often a claim inserts again when the row that refused its insert was purged before it
/// could be locked (a purge racing a resend of a long-expired key).
const CLAIM_ATTEMPTS: usize = 3;

const INSERT_CLAIM: &str = "INSERT INTO inbox_log \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES ($1, $2, 'in_progress', NULL, $3, $4, 1, $5, $6) \
     ON CONFLICT (msg_id) DO NOTHING";
// The same columns in both reads, so that one decoder (`Stored::decode`) serves both.
const READ_ROW: &str = "SELECT status, response, fingerprint, token, lease_until, expires_at \
     FROM inbox_log WHERE msg_id = $1";
const LOCK_ROW: &str = "SELECT status, response, fingerprint, token, lease_until, expires_at \
     FROM inbox_log WHERE msg_id = $1 FOR UPDATE";
const TAKE_OVER: &str = "UPDATE inbox_log SET token = token + 1, lease_until = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress'";
pub(super) const COMPLETE: &str = "UPDATE inbox_log SET status = 'done', response = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress'";
// A released row stays (until purged) so its token keeps growing: a holder fenced before the
// release can never complete the next claim of the same key (no ABA).
pub(super) const RELEASE: &str = "UPDATE inbox_log SET status = 'released' \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
const RECLAIM: &str = "UPDATE inbox_log SET status = 'in_progress', token = token + 1, \
     biz_key = $1, created_at = $2, fingerprint = $3, lease_until = $4, expires_at = $5 \
     WHERE msg_id = $6 AND token = $7 AND status = 'released'";
pub(super) const RENEW: &str = "UPDATE inbox_log SET lease_until = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress'";
pub(super) const MARK_FAILED: &str = "UPDATE inbox_log SET status = 'failed', response = $3 \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
// The conditions are repeated outside the sub-select on purpose: under READ COMMITTED a row
// updated meanwhile (a released key claimed again) is re-checked against the outer conditions
// only, and must then be kept.
const PURGE: &str = "DELETE FROM inbox_log WHERE msg_id IN \
     (SELECT msg_id FROM inbox_log WHERE created_at < $1 AND expires_at <= $2 LIMIT $3) \
     AND created_at < $1 AND expires_at <= $2";

/// Why an operation failed before its errors get the server's name.
type Fail = sql::Fail<StoreError>;

fn corrupt(key: &str, what: impl fmt::Display) -> Fail {
    Fail::Store(StoreError::Corrupt(format!(
        "inbox_log row `{key}`: {what}"
    )))
}

/// One statement guarded by the claim's token, in autocommit: no row touched means the claim
/// was taken over (or finished): [`StoreError::Fenced`].
pub(super) async fn guarded(
    db: &Db,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<(), StoreError> {
    let client = db.get().await.map_err(StoreError::Unavailable)?;
    let statement = client
        .prepare_cached(sql)
        .await
        .map_err(|e| StoreError::Unavailable(db.error(e)))?;
    let changed = client
        .execute(&statement, params)
        .await
        .map_err(|e| StoreError::Unavailable(db.error(e)))?;
    if changed == 0 {
        Err(StoreError::Fenced)
    } else {
        Ok(())
    }
}

/// The claim: insert under the primary key, or lock and decide about the row that is there, in
/// one transaction. Mirrors `MemoryStore::claim_now` line by line.
///
/// Two shortcuts, each one round trip, before that transaction (four round trips):
/// - a key that is done (or kept failed) is final: a duplicate is answered from a plain read,
///   which neither opens a transaction nor waits for a row lock;
/// - a key that read no row is claimed by the `INSERT` alone, in autocommit: one statement
///   under the primary key is as atomic as the transaction around it was. If another instance
///   inserted the key meanwhile, the insert changes nothing and the transaction decides, so
///   two concurrent first calls still cannot both win.
pub(super) async fn claim_in(
    client: &mut Object,
    clock: &dyn Clock,
    request: &ClaimRequest<'_>,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let read = client.prepare_cached(READ_ROW).await?;
    match client.query_opt(&read, &[&key]).await? {
        Some(row) => {
            let row = Stored::decode(key, &row)?;
            if row.retained(&format_utc(clock.now()))
                && let Some(outcome) = settled(&row, request)?
            {
                return Ok(outcome);
            }
        }
        None => {
            // Prepared here, not before the read: a replay never needs it.
            let insert = client.prepare_cached(INSERT_CLAIM).await?;
            if insert_claim(&*client, &insert, clock, request).await? == 1 {
                return Ok(ClaimOutcome::Claimed(Claim::first(key)));
            }
        }
    }
    let tx = client.transaction().await?;
    let insert = tx.prepare_cached(INSERT_CLAIM).await?;
    let select = tx.prepare_cached(LOCK_ROW).await?;
    for _ in 0..CLAIM_ATTEMPTS {
        if insert_claim(&tx, &insert, clock, request).await? == 1 {
            tx.commit().await?;
            return Ok(ClaimOutcome::Claimed(Claim::first(key)));
        }
        // Locked until the commit: no other instance decides about this key meanwhile.
        if let Some(row) = tx.query_opt(&select, &[&key]).await? {
            let row = Stored::decode(key, &row)?;
            let outcome = decide(&tx, request, &row, clock.now()).await?;
            tx.commit().await?;
            return Ok(outcome);
        }
        // Purged between the insert and the lock: insert again.
    }
    Err(Fail::Store(StoreError::Unavailable(
        format!(
            "inbox_log row `{key}` refused the claim's insert and vanished before it could be read, {CLAIM_ATTEMPTS} times in a row"
        )
        .into(),
    )))
}

/// Runs [`INSERT_CLAIM`] for `request` at the clock's now: `1` when it inserted the claim, `0`
/// when the key was there.
async fn insert_claim(
    client: &impl GenericClient,
    insert: &Statement,
    clock: &dyn Clock,
    request: &ClaimRequest<'_>,
) -> Result<u64, Fail> {
    let now = clock.now();
    let inserted = client
        .execute(
            insert,
            &[
                &request.key,
                &request.biz_key,
                &format_utc(now),
                &request.fingerprint,
                &format_utc(later(now, request.lease)),
                &format_utc(later(now, request.retention)),
            ],
        )
        .await?;
    Ok(inserted)
}

/// A row of `inbox_log` as [`READ_ROW`] and [`LOCK_ROW`] return it, its columns checked.
struct Stored {
    status: String,
    response: Option<String>,
    fingerprint: Option<String>,
    token: i64,
    /// Checked only where it counts: an `in_progress` row's lease.
    lease_until: Option<String>,
    expires_at: Option<String>,
}

impl Stored {
    fn decode(key: &str, row: &Row) -> Result<Self, Fail> {
        let status: String = row
            .try_get(0)
            .map_err(|e| corrupt(key, format_args!("bad status ({e})")))?;
        let response: Option<String> = row
            .try_get(1)
            .map_err(|e| corrupt(key, format_args!("bad response ({e})")))?;
        let fingerprint: Option<String> = row
            .try_get(2)
            .map_err(|e| corrupt(key, format_args!("bad fingerprint ({e})")))?;
        let token: i64 = row
            .try_get(3)
            .map_err(|e| corrupt(key, format_args!("bad token ({e})")))?;
        if token < 1 {
            return Err(corrupt(key, format_args!("bad token {token}")));
        }
        Ok(Stored {
            status,
            response,
            fingerprint,
            token,
            lease_until: row.try_get(4).ok(),
            expires_at: row.try_get(5).ok(),
        })
    }

    /// Whether the row's retention still runs at `now_text` (a `format_utc` time). Only the
    /// read-first answer asks: it is a shortcut for rows in their retention, and a row past it
    /// (or with an unreadable `expires_at`) belongs to the purge, so whatever the locked
    /// decision makes of it stands (today the same answer, a round trip or three later).
    fn retained(&self, now_text: &str) -> bool {
        self.expires_at
            .as_deref()
            .is_some_and(|expires| expires > now_text && parse_utc(expires).is_some())
    }
}

/// The answer for a key whose call is over (done, or kept failed); `None` for any other row.
/// Final whoever asks, so the read-first path and the locked decision share it.
fn settled(row: &Stored, request: &ClaimRequest<'_>) -> Result<Option<ClaimOutcome>, Fail> {
    if row.status != "done" && row.status != "failed" {
        return Ok(None);
    }
    if request.fingerprint.is_some() && row.fingerprint.as_deref() != request.fingerprint {
        return Ok(Some(ClaimOutcome::KeyReused));
    }
    match (row.status.as_str(), &row.response) {
        ("done", Some(response)) => Ok(Some(ClaimOutcome::Done(response.clone()))),
        ("done", None) => Err(corrupt(request.key, "done without a text response (NULL)")),
        (_, failure) => Ok(Some(ClaimOutcome::Failed(
            failure.clone().unwrap_or_default(),
        ))),
    }
}

/// What the locked row found at `request.key` means, taking it over if its lease has ended.
async fn decide(
    tx: &deadpool_postgres::Transaction<'_>,
    request: &ClaimRequest<'_>,
    row: &Stored,
    now: SystemTime,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let token = row.token;
    let now_text = format_utc(now);
    if row.status == "released" {
        // Nothing was kept for this key: claim it afresh, whatever its payload.
        let next = token
            .checked_add(1)
            .ok_or_else(|| corrupt(key, "token cannot grow any more"))?;
        let reclaim = tx.prepare_cached(RECLAIM).await?;
        let reclaimed = tx
            .execute(
                &reclaim,
                &[
                    &request.biz_key,
                    &now_text,
                    &request.fingerprint,
                    &format_utc(later(now, request.lease)),
                    &format_utc(later(now, request.retention)),
                    &key,
                    &token,
                ],
            )
            .await?;
        if reclaimed != 1 {
            return Err(corrupt(key, "the released row could not be claimed again"));
        }
        let token = u64::try_from(next).map_err(|_| corrupt(key, "bad token"))?;
        return Ok(ClaimOutcome::Claimed(Claim {
            key: key.to_owned(),
            token,
        }));
    }
    if let Some(outcome) = settled(row, request)? {
        return Ok(outcome);
    }
    if request.fingerprint.is_some() && row.fingerprint.as_deref() != request.fingerprint {
        return Ok(ClaimOutcome::KeyReused);
    }
    match row.status.as_str() {
        "in_progress" => {
            let lease_until = match &row.lease_until {
                Some(text) if parse_utc(text).is_some() => text.as_str(),
                other => return Err(corrupt(key, format_args!("bad lease_until {other:?}"))),
            };
            // Both sides are `format_utc` text: comparing them is comparing the times.
            if lease_until > now_text.as_str() {
                return Ok(ClaimOutcome::InProgress);
            }
            let Some(next) = token.checked_add(1) else {
                return Err(corrupt(key, "token cannot grow any more"));
            };
            let take_over = tx.prepare_cached(TAKE_OVER).await?;
            let taken = tx
                .execute(
                    &take_over,
                    &[&format_utc(later(now, request.lease)), &key, &token],
                )
                .await?;
            if taken != 1 {
                return Err(corrupt(key, "the expired claim could not be taken over"));
            }
            // `next` is at least 2.
            let token = u64::try_from(next).map_err(|_| corrupt(key, "bad token"))?;
            Ok(ClaimOutcome::Claimed(Claim {
                key: key.to_owned(),
                token,
            }))
        }
        other => Err(corrupt(key, format_args!("unknown status {other:?}"))),
    }
}

/// Deletes by age only, in batches of [`PURGE_BATCH`] rows, each its own (autocommit)
/// statement.
pub(super) async fn purge_in(
    client: &Object,
    clock: &dyn Clock,
    age: Duration,
) -> Result<u64, Fail> {
    let now = clock.now();
    let cutoff = format_utc(now.checked_sub(age).unwrap_or(UNIX_EPOCH));
    let now = format_utc(now);
    let purge = client.prepare_cached(PURGE).await?;
    let mut purged = 0u64;
    loop {
        let deleted = client
            .execute(&purge, &[&cutoff, &now, &PURGE_BATCH])
            .await?;
        purged += deleted;
        if deleted < PURGE_BATCH.unsigned_abs() {
            return Ok(purged);
        }
    }
}
