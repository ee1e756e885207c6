//! The rows of `inbox_log`: its statements, and the decisions about a key's row that every
//! claim (on its own or in a transaction) and every guarded write share, with the request they
//! decide on ([`OwnedRequest`]) and their failure ([`Fail`]).

use super::*;

/// A [`ClaimRequest`] that can move to the blocking pool and the write queue.
pub(super) struct OwnedRequest {
    pub(super) key: String,
    biz_key: String,
    fingerprint: Option<String>,
    lease: Duration,
    retention: Duration,
}

impl From<&ClaimRequest<'_>> for OwnedRequest {
    fn from(request: &ClaimRequest<'_>) -> Self {
        OwnedRequest {
            key: request.key.to_owned(),
            biz_key: request.biz_key.to_owned(),
            fingerprint: request.fingerprint.map(str::to_owned),
            lease: request.lease,
            retention: request.retention,
        }
    }
}

/// Why an operation failed before its errors get the file's name.
pub(super) type Fail = sql::Fail<StoreError>;

pub(super) const INSERT_CLAIM: &str = "INSERT INTO inbox_log \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES (?1, ?2, 'in_progress', NULL, ?3, ?4, 1, ?5, ?6) \
     ON CONFLICT(msg_id) DO NOTHING";
pub(super) const SELECT_ROW: &str = "SELECT status, response, fingerprint, token, lease_until, in_transaction \
     FROM inbox_log WHERE msg_id = ?1";
// The taker-over's row keeps its retention counted from now at least (`max` of two
// `format_utc` texts is the later time), so it cannot be purged under its new holder.
pub(super) const TAKE_OVER: &str = "UPDATE inbox_log SET token = token + 1, in_transaction = 0, lease_until = ?1, \
     expires_at = max(expires_at, ?4) \
     WHERE msg_id = ?2 AND token = ?3 AND status = 'in_progress'";
pub(super) const COMPLETE: &str = "UPDATE inbox_log SET status = 'done', response = ?1 \
     WHERE msg_id = ?2 AND token = ?3 AND status = 'in_progress'";
// A released row stays (until purged) so its token keeps growing: a holder fenced before the
// release can never complete the next claim of the same key (no ABA).
pub(super) const RELEASE: &str = "UPDATE inbox_log SET status = 'released' \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
pub(super) const RECLAIM: &str = "UPDATE inbox_log SET status = 'in_progress', token = token + 1, in_transaction = 0, \
     biz_key = ?1, created_at = ?2, fingerprint = ?3, lease_until = ?4, expires_at = ?5 \
     WHERE msg_id = ?6 AND token = ?7 AND status = 'released'";
// Only the holder (its token) of a row still in progress extends the lease; whether the old
// lease already ran out does not matter: until another call took the key, it is still the
// holder's (as in `MemoryStore::renew`).
pub(super) const RENEW: &str = "UPDATE inbox_log SET lease_until = ?1 \
     WHERE msg_id = ?2 AND token = ?3 AND status = 'in_progress' AND in_transaction = 0";
// `begin_for`: the claim's row is marked as held by a transaction, in autocommit before the
// `BEGIN IMMEDIATE` (so the mark outlives this process), then checked under the write lock. A
// claim that finds the mark holds the write lock itself, so that transaction is over.
pub(super) const HOLD: &str = "UPDATE inbox_log SET in_transaction = 1 \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
pub(super) const HELD: &str = "SELECT in_transaction FROM inbox_log \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
pub(super) const MARK_FAILED: &str = "UPDATE inbox_log SET status = 'failed', response = ?3 \
     WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
// What a guarded write that changed no row finds: a retried call whose first try committed
// finds the row in the state it writes under its own token.
pub(super) const SELECT_SETTLED: &str = "SELECT status, token FROM inbox_log WHERE msg_id = ?1";

pub(super) fn corrupt(key: &str, what: impl fmt::Display) -> Fail {
    Fail::Store(StoreError::Corrupt(format!(
        "inbox_log row `{key}`: {what}"
    )))
}

/// The claim's first step, a plain read on a reader connection: a key that is done (or kept
/// failed) is final, so a duplicate is answered from it, which in WAL mode neither takes nor
/// waits for the write lock (a write for every duplicate made replay half as fast as a
/// primary-key `SELECT`; see BENCHMARKS.md). `None`: the claim goes on to [`claim_in`].
pub(super) fn claim_settled(
    conn: &Connection,
    request: &OwnedRequest,
) -> Result<Option<ClaimOutcome>, Fail> {
    match read_row(conn, &request.key)? {
        Some(row) => settled(&row, request),
        None => Ok(None),
    }
}

/// The claim as a write of the file's queue: insert under the primary key, or decide about the
/// row that is there (which may have appeared since [`claim_settled`] read), in the group's
/// transaction, so two concurrent first calls cannot both win. Mirrors
/// `MemoryStore::claim_now`; the clock is read under the write lock, so a call that waited
/// decides at the time it decides.
pub(super) fn claim_in(
    conn: &Connection,
    clock: &dyn Clock,
    request: &OwnedRequest,
) -> Result<ClaimOutcome, Fail> {
    let now = clock.now();
    if insert_claim(conn, request, now)? == 1 {
        return Ok(ClaimOutcome::Claimed(Claim::first(&request.key)));
    }
    decide(conn, request, &now, &format_utc(now))
}

/// Runs [`INSERT_CLAIM`] for `request` at `now`: `1` when it inserted the claim, `0` when the
/// key was there. On a transaction, through its `Deref` to the connection.
pub(super) fn insert_claim(
    conn: &Connection,
    request: &OwnedRequest,
    now: SystemTime,
) -> Result<usize, Fail> {
    Ok(conn.prepare_cached(INSERT_CLAIM)?.execute(params![
        request.key,
        request.biz_key,
        format_utc(now),
        request.fingerprint,
        format_utc(later(now, request.lease)),
        format_utc(later(now, request.retention)),
    ])?)
}

/// A row of `inbox_log`, its columns checked.
pub(super) struct Row {
    status: String,
    response: Value,
    fingerprint: Option<String>,
    token: i64,
    lease_until: Value,
    /// Held by a handler's transaction (`begin_for`) rather than by its lease.
    in_transaction: bool,
}

/// The row at `key`, if there is one.
pub(super) fn read_row(conn: &Connection, key: &str) -> Result<Option<Row>, Fail> {
    let row = conn
        .prepare_cached(SELECT_ROW)?
        .query_row([key], |row| {
            Ok([
                row.get::<_, Value>(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ])
        })
        .optional()?;
    let Some(
        [
            status,
            response,
            fingerprint,
            token,
            lease_until,
            in_transaction,
        ],
    ) = row
    else {
        return Ok(None);
    };
    let in_transaction = match in_transaction {
        Value::Integer(0) => false,
        Value::Integer(1) => true,
        other => return Err(corrupt(key, format_args!("bad in_transaction {other:?}"))),
    };
    let token = match token {
        Value::Integer(token) if token >= 1 => token,
        other => return Err(corrupt(key, format_args!("bad token {other:?}"))),
    };
    let fingerprint = match fingerprint {
        Value::Null => None,
        Value::Text(text) => Some(text),
        other => return Err(corrupt(key, format_args!("bad fingerprint {other:?}"))),
    };
    let status = match status {
        Value::Text(status) => status,
        other => return Err(corrupt(key, format_args!("bad status {other:?}"))),
    };
    Ok(Some(Row {
        status,
        response,
        fingerprint,
        token,
        lease_until,
        in_transaction,
    }))
}

/// Whether the claim (`key`, `token`) is in progress and held by its transaction.
pub(super) fn held_by_transaction(conn: &Connection, key: &str, token: i64) -> Result<bool, Fail> {
    let held: Option<i64> = conn
        .prepare_cached(HELD)?
        .query_row(params![key, token], |row| row.get(0))
        .optional()?;
    Ok(held == Some(1))
}

/// The answer for a key whose call is over (done, or kept failed); `None` for any other row.
pub(super) fn settled(row: &Row, request: &OwnedRequest) -> Result<Option<ClaimOutcome>, Fail> {
    if row.status != "done" && row.status != "failed" {
        return Ok(None);
    }
    if request.fingerprint.is_some() && row.fingerprint != request.fingerprint {
        return Ok(Some(ClaimOutcome::KeyReused));
    }
    match (row.status.as_str(), &row.response) {
        ("done", Value::Text(response)) => Ok(Some(ClaimOutcome::Done(response.clone()))),
        ("done", other) => Err(corrupt(
            &request.key,
            format_args!("done without a text response ({other:?})"),
        )),
        (_, Value::Text(failure)) => Ok(Some(ClaimOutcome::Failed(failure.clone()))),
        _ => Ok(Some(ClaimOutcome::Failed(String::new()))),
    }
}

/// What the row found at `request.key` means, taking it over if its lease has ended.
pub(super) fn decide(
    tx: &Connection,
    request: &OwnedRequest,
    now: &SystemTime,
    now_text: &str,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key.as_str();
    // The insert met this row under the write lock, which is still held.
    let Some(row) = read_row(tx, key)? else {
        return Err(corrupt(
            key,
            "the row that refused the insert cannot be read back",
        ));
    };
    let token = row.token;
    if row.status == "released" {
        // A released key whose body journaled steps is resumed (`OnErr::Resume`): its
        // finished steps belong to the first payload.
        if request.fingerprint.is_some()
            && row.fingerprint != request.fingerprint
            && super::steps::has_steps(tx, key)?
        {
            return Ok(ClaimOutcome::KeyReused);
        }
        // Nothing else was kept for this key: claim it afresh, whatever its payload.
        let next = token
            .checked_add(1)
            .ok_or_else(|| corrupt(key, "token cannot grow any more"))?;
        let reclaimed = tx.prepare_cached(RECLAIM)?.execute(params![
            request.biz_key,
            now_text,
            request.fingerprint,
            format_utc(later(*now, request.lease)),
            format_utc(later(*now, request.retention)),
            key,
            token
        ])?;
        if reclaimed != 1 {
            return Err(corrupt(key, "the released row could not be claimed again"));
        }
        let token = u64::try_from(next).map_err(|_| corrupt(key, "bad token"))?;
        return Ok(ClaimOutcome::Claimed(Claim {
            key: key.to_owned(),
            token,
        }));
    }
    if let Some(outcome) = settled(&row, request)? {
        return Ok(outcome);
    }
    if request.fingerprint.is_some() && row.fingerprint != request.fingerprint {
        return Ok(ClaimOutcome::KeyReused);
    }
    let lease_until = row.lease_until;
    match row.status.as_str() {
        "in_progress" => {
            let lease_until = match lease_until {
                Value::Text(text) if parse_utc(&text).is_some() => text,
                other => return Err(corrupt(key, format_args!("bad lease_until {other:?}"))),
            };
            // A row a handler's transaction holds is decided by that transaction, not the
            // lease: this claim holds the write lock, so no transaction is open, and as the row
            // is still in progress its transaction ended without committing (rolled back, its
            // process gone): nothing of it happened, the key is free now.
            if row.in_transaction {
                tracing::info!(target: "retry_core::idempotency",
                    key,
                    "the transaction that held this key ended without committing: the key is claimed again at once"
                );
            } else if lease_until.as_str() > now_text {
                // Both sides are `format_utc` text: comparing them is comparing the times.
                return Ok(ClaimOutcome::InProgress);
            }
            let Some(next) = token.checked_add(1) else {
                return Err(corrupt(key, "token cannot grow any more"));
            };
            let lease_until = format_utc(later(*now, request.lease));
            let expires_at = format_utc(later(*now, request.retention));
            let taken = tx.prepare_cached(TAKE_OVER)?.execute(params![
                lease_until,
                key,
                token,
                expires_at
            ])?;
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

/// One statement guarded by the claim's token: no row touched means the claim
/// was taken over (or finished): [`StoreError::Fenced`].
pub(super) fn guarded(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<(), Fail> {
    let changed = conn.prepare_cached(sql)?.execute(params)?;
    if changed == 0 {
        Err(Fail::Store(StoreError::Fenced))
    } else {
        Ok(())
    }
}

/// [`guarded`] for a write that settles the claim (`complete`, `release`, `mark_failed`) into
/// `status`: when it changes no row but the row is already in `status` under the claim's own
/// token, it is a retry of a call whose first try committed and whose answer was lost (a
/// timeout, a dropped connection): `Ok`, as [`MemoryStore`](retry_core::idempotency::MemoryStore) answers.
///
/// The extra read is on the zero-rows path only: the hot path stays one statement. It need not
/// be in the update's transaction: a row in a settled state under a token leaves it only by
/// being purged or, once released, claimed again with a larger token, and either is a
/// [`StoreError::Fenced`] for this claim at the moment of the read.
pub(super) fn settle(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    key: &str,
    token: i64,
    status: &str,
) -> Result<(), Fail> {
    match guarded(conn, sql, params) {
        Err(Fail::Store(StoreError::Fenced)) => {
            let row = conn
                .prepare_cached(SELECT_SETTLED)?
                .query_row([key], |row| {
                    Ok((row.get::<_, Value>(0)?, row.get::<_, Value>(1)?))
                })
                .optional()?;
            match row {
                Some((Value::Text(found), Value::Integer(found_token)))
                    if found == status && found_token == token =>
                {
                    Ok(())
                }
                _ => Err(Fail::Store(StoreError::Fenced)),
            }
        }
        other => other,
    }
}
