//! The claim and the single-statement writes of [`PgStore`](super::PgStore): the statements,
//! the decision about a row that is there, the purge, and the bounded retry of serialization
//! failures and deadlocks.
//!
//! Time: every statement that needs "now" computes it itself, in the same round trip, from the
//! server's `clock_timestamp()`, unless the store has an injected clock: then its time is bound
//! as a parameter (microseconds since the Unix epoch) and used instead. Either way the
//! arithmetic (now + lease, now − age) happens in SQL on `timestamptz` values, so one code path
//! serves both; rows and the statement's now come back as `SystemTime`.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::{GenericClient, Object};
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, Row, Statement};

use crate::sql::{self as sql, Db, retrying_conflicts};
use retry_core::idempotency::{Claim, ClaimOutcome, ClaimRequest, StoreError};
use retry_core::time::Clock;

/// Rows deleted per purge statement: each batch commits on its own, so a purge of millions of
/// rows never becomes one long transaction. Every matching row is deleted; the batch size only
/// decides how many statements that takes.
const PURGE_BATCH: i64 = 5_000;

/// How often a claim inserts again when the row that refused its insert was purged before it
/// could be locked (a purge racing a resend of a long-expired key).
const CLAIM_ATTEMPTS: usize = 3;

/// The longest span bound as a parameter, in microseconds (9999-12-31T23:59:59.999999Z after
/// the epoch): any later end is clamped to the end of time in SQL anyway, and a span this long
/// added to any time of the years 1 to 9999 stays within PostgreSQL's `timestamptz`.
const MAX_SPAN_MICROS: i64 = 253_402_300_799_999_999;

/// The earliest and latest injected time bound, in microseconds since the epoch (0001-01-01 and
/// 9999-12-31T23:59:59.999999): PostgreSQL's `timestamp` has no year 0.
const MIN_TIME_MICROS: i64 = -62_135_596_800_000_000;
const MAX_TIME_MICROS: i64 = MAX_SPAN_MICROS;

// ---- SQL fragments ----
//
// `span!("n")`: the bigint parameter `$n` (microseconds) as an `interval`. Whole seconds and
// the remainder separately: `bigint * interval` goes through `float8` and loses microseconds
// beyond 2^53 (285 years), this does not.
macro_rules! span {
    ($p:literal) => {
        concat!(
            "(interval '1 second' * ($",
            $p,
            "::int8 / 1000000) + interval '1 microsecond' * ($",
            $p,
            "::int8 % 1000000))"
        )
    };
}

// `now!("n")`: the time the statement decides at: the injected clock's time bound as `$n`
// (microseconds since the epoch), or, when `$n` is NULL, the server's clock.
// `clock_timestamp()`, not `now()`: the time of this statement, not of its transaction's start.
// `timestamptz 'epoch'` is the same instant whatever the session's time zone, and adding a span
// of seconds (no days or months) to a `timestamptz` is exact arithmetic on the instant.
macro_rules! now {
    ($p:literal) => {
        concat!(
            "COALESCE(timestamptz 'epoch' + ",
            span!($p),
            ", clock_timestamp())"
        )
    };
}

// `later!(ts, "n")`: `ts` plus the span `$n`, ending at 9999-12-31T23:59:59Z at the latest (as
// `time::later` does).
macro_rules! later {
    ($ts:literal, $p:literal) => {
        concat!(
            "LEAST(",
            $ts,
            " + ",
            span!($p),
            ", timestamptz '9999-12-31 23:59:59+00')"
        )
    };
}

// The statements. `t.ts` is the statement's time (`now!`), computed once per statement in a
// one-row sub-select.

// `claim_row!("source")`: the claim's insert, token 1, its row made from `t.ts` (the time it
// decides at) of the rest of the `FROM` clause, `source`. `$1` key, `$2` biz_key, `$3`
// fingerprint, `$5` lease, `$6` retention. [`INSERT_CLAIM`] and the statements of
// `in_transaction` insert the same row; `claim_row!(@as "'done', $7"; "source")` the same row
// with another status and response.
macro_rules! claim_row {
    (@as $state:literal; $($from:tt)+) => {
        concat!(
            "INSERT INTO inbox_log \
             (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
             SELECT $1, $2, ",
            $state,
            ", t.ts, $3, 1, ",
            later!("t.ts", "5"),
            ", ",
            later!("t.ts", "6"),
            " FROM ",
            $($from)+
        )
    };
    ($($from:tt)+) => {
        claim_row!(@as "'in_progress', NULL"; $($from)+)
    };
}

// `now_table!("n")`: the one-row table `t` of the time a claim decides at (`now!("n")`).
macro_rules! now_table {
    ($p:literal) => {
        concat!("(SELECT ", now!($p), " AS ts) t")
    };
}

/// `$1` key, `$2` biz_key, `$3` fingerprint, `$4` injected now, `$5` lease, `$6` retention.
const INSERT_CLAIM: &str = concat!(
    claim_row!(now_table!("4")),
    " ON CONFLICT (msg_id) DO NOTHING"
);
// The same columns in both reads, so that one decoder (`Stored::decode`) serves both; the last
// is the time the read decides at. `$1` key, `$2` injected now.
const READ_ROW: &str = concat!(
    "SELECT status, response, fingerprint, token, lease_until, expires_at, in_transaction, ",
    now!("2"),
    " FROM inbox_log WHERE msg_id = $1"
);
// The clock is read in the outer query on purpose: the select list of a `FOR UPDATE` is
// computed before the lock is waited for, the outer one after it is granted, so a claim that
// waited for another transaction decides at the time it decides.
const LOCK_ROW: &str = concat!(
    "SELECT r.*, ",
    now!("2"),
    " FROM (SELECT status, response, fingerprint, token, lease_until, expires_at, in_transaction \
     FROM inbox_log WHERE msg_id = $1 FOR UPDATE) r"
);
// Whether the transaction that holds the claim at `$1` is over: its connection holds the key's
// lock for as long as it runs (see `PgStore::begin_for`). Taken for the rest of the claim's
// transaction when it is free, so the holder cannot come back meanwhile.
const HOLDER_GONE: &str = concat!("SELECT pg_try_advisory_xact_lock(", key_lock!(), ")");
/// `$1` key, `$2` token, `$3` injected now, `$4` lease, `$5` retention. The row's retention is
/// counted again from now (if that ends later), so the purge never deletes it under the new
/// holder.
const TAKE_OVER: &str = concat!(
    "UPDATE inbox_log SET token = token + 1, in_transaction = false, lease_until = ",
    later!("t.ts", "4"),
    ", expires_at = GREATEST(expires_at, ",
    later!("t.ts", "5"),
    ") FROM (SELECT ",
    now!("3"),
    " AS ts) t WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'"
);
/// `$1` key, `$2` token, `$3` biz_key, `$4` fingerprint, `$5` injected now, `$6` lease,
/// `$7` retention.
const RECLAIM: &str = concat!(
    "UPDATE inbox_log SET status = 'in_progress', token = token + 1, in_transaction = false, \
     biz_key = $3, fingerprint = $4, created_at = t.ts, lease_until = ",
    later!("t.ts", "6"),
    ", expires_at = ",
    later!("t.ts", "7"),
    " FROM (SELECT ",
    now!("5"),
    " AS ts) t WHERE msg_id = $1 AND token = $2 AND status = 'released'"
);
/// `$1` key, `$2` token, `$3` injected now, `$4` lease. A row a transaction holds is not
/// renewed (its lease no longer keeps it), and since the mark committed before the lock was
/// taken, the update skips that row without waiting for the lock.
pub(super) const RENEW: &str = concat!(
    "UPDATE inbox_log SET lease_until = ",
    later!("t.ts", "4"),
    " FROM (SELECT ",
    now!("3"),
    " AS ts) t WHERE msg_id = $1 AND token = $2 AND status = 'in_progress' AND NOT in_transaction"
);
/// Whether the claim (`$1` key, `$2` token) is still in progress and held by its transaction:
/// what a renewal that changed nothing asks before it answers `Fenced`.
const HELD_BY_TRANSACTION: &str = "SELECT in_transaction FROM inbox_log \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
/// `$1` key, `$2` token, `$3` response.
pub(super) const COMPLETE: &str = "UPDATE inbox_log SET status = 'done', response = $3 \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
// A released row stays (until purged) so its token keeps growing: a holder fenced before the
// release can never complete the next claim of the same key (no ABA). `$1` key, `$2` token.
pub(super) const RELEASE: &str = "UPDATE inbox_log SET status = 'released' \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
/// `$1` key, `$2` token, `$3` the failure's text.
pub(super) const MARK_FAILED: &str = "UPDATE inbox_log SET status = 'failed', response = $3 \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress'";
/// Whether a key has a step journal (`inbox_steps`): `$1` key.
const HAS_STEPS: &str = "SELECT EXISTS (SELECT 1 FROM inbox_steps WHERE msg_id = $1)";
/// What a settling update that changed nothing finds under the claim's own token.
const STATUS_UNDER_TOKEN: &str = "SELECT status FROM inbox_log WHERE msg_id = $1 AND token = $2";
// `$1` injected now, `$2` age, `$3` batch size. The cutoff is now − age, or the epoch for an
// age reaching back before it (no timestamp underflow). A row whose lease is live is never
// deleted: its holder is at work. The conditions are repeated outside the sub-select on
// purpose: under READ COMMITTED a row updated meanwhile (a released key claimed again, a lease
// renewed) is re-checked against the outer conditions only, and must then be kept.
const PURGE: &str = concat!(
    "WITH c AS (SELECT t.ts AS now, CASE WHEN ",
    span!("2"),
    " >= t.ts - timestamptz 'epoch' THEN timestamptz 'epoch' ELSE t.ts - ",
    span!("2"),
    " END AS cutoff FROM (SELECT ",
    now!("1"),
    " AS ts) t) \
     DELETE FROM inbox_log USING c WHERE msg_id IN \
     (SELECT msg_id FROM inbox_log, c WHERE created_at < c.cutoff AND expires_at <= c.now \
     AND NOT (status = 'in_progress' AND lease_until > c.now) LIMIT $3) \
     AND created_at < c.cutoff AND expires_at <= c.now \
     AND NOT (status = 'in_progress' AND lease_until > c.now)"
);

// ---- time parameters ----

/// The time a statement decides at, as bound to its `now!` parameter: the injected clock's
/// time in whole microseconds since the epoch, or `None` for the server's clock. Read per
/// statement, as the server's clock is.
pub(super) fn injected_now(clock: Option<&dyn Clock>) -> Option<i64> {
    clock.map(|clock| micros_since_epoch(clock.now()))
}

/// `time` in microseconds since the epoch (rounded down, as `format_utc` does), within the years
/// 1 to 9999.
fn micros_since_epoch(time: SystemTime) -> i64 {
    let micros = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_micros()).unwrap_or(i64::MAX);
            // Rounded down: a part of a microsecond before the epoch is a whole one before it.
            let partial = i64::from(before.subsec_nanos() % 1_000 != 0);
            whole.saturating_add(partial).saturating_neg()
        }
    };
    micros.clamp(MIN_TIME_MICROS, MAX_TIME_MICROS)
}

/// A lease, retention or age as bound to a `span!` parameter: whole microseconds, clamped to
/// [`MAX_SPAN_MICROS`].
pub(super) fn span_micros(span: Duration) -> i64 {
    i64::try_from(span.as_micros()).map_or(MAX_SPAN_MICROS, |m| m.min(MAX_SPAN_MICROS))
}

// ---- errors and retries ----

/// Why an operation failed before its errors get the server's name.
pub(super) type Fail = sql::Fail<StoreError>;

fn corrupt(key: &str, what: impl fmt::Display) -> Fail {
    Fail::Store(StoreError::Corrupt(format!(
        "inbox_log row `{key}`: {what}"
    )))
}

// ---- the writes of a claim's holder ----

/// Moves the claim's row from in progress to `status` with one guarded statement `sql` (`$1`
/// key, `$2` token, then `more`), in autocommit. No row changed: the claim was taken over or
/// finished, [`StoreError::Fenced`], unless the row is already in `status` under the claim's own
/// token: then this is a retry of a call whose first try committed but whose answer was lost,
/// and it answers `Ok` as that first try did.
pub(super) async fn settle(
    db: &Db,
    sql: &str,
    status: &str,
    claim: &Claim,
    more: &[&(dyn ToSql + Sync)],
) -> Result<(), StoreError> {
    let Ok(token) = i64::try_from(claim.token) else {
        // A token beyond what the table holds is simply not the row's.
        return Err(StoreError::Fenced);
    };
    let client = db.get().await.map_err(StoreError::Unavailable)?;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&claim.key, &token];
    params.extend_from_slice(more);
    let settled: Result<bool, Fail> = retrying_conflicts!(
        db,
        status,
        settle_once(&client, sql, status, &claim.key, token, &params)
    );
    let settled = settled.map_err(|e| db.fail(e, StoreError::Unavailable))?;
    if settled {
        Ok(())
    } else {
        Err(StoreError::Fenced)
    }
}

async fn settle_once(
    client: &Object,
    sql: &str,
    status: &str,
    key: &str,
    token: i64,
    params: &[&(dyn ToSql + Sync)],
) -> Result<bool, Fail> {
    let update = client.prepare_cached(sql).await?;
    if client.execute(&update, params).await? == 1 {
        return Ok(true);
    }
    // Only on this path, so the write itself stays one round trip.
    let check = client.prepare_cached(STATUS_UNDER_TOKEN).await?;
    let found = client.query_opt(&check, &[&key, &token]).await?;
    Ok(match found {
        Some(row) => row.try_get::<_, String>(0)? == status,
        None => false,
    })
}

/// Extends the claim's lease to `lease` from now (the server's clock, or `now` if injected), if
/// the claim still holds the key; otherwise [`StoreError::Fenced`].
pub(super) async fn renew(
    db: &Db,
    clock: Option<&dyn Clock>,
    claim: &Claim,
    lease: Duration,
) -> Result<(), StoreError> {
    let Ok(token) = i64::try_from(claim.token) else {
        return Err(StoreError::Fenced);
    };
    let client = db.get().await.map_err(StoreError::Unavailable)?;
    let lease = span_micros(lease);
    let renewed: Result<u64, Fail> = retrying_conflicts!(db, "renew", async {
        let renew = client.prepare_cached(RENEW).await?;
        let now = injected_now(clock);
        Ok(client
            .execute(&renew, &[&claim.key, &token, &now, &lease])
            .await?)
    });
    let renewed = renewed.map_err(|e| db.fail(e, StoreError::Unavailable))?;
    if renewed == 1 {
        return Ok(());
    }
    let held: Result<Option<Row>, Fail> = async {
        let held = client.prepare_cached(HELD_BY_TRANSACTION).await?;
        Ok(client.query_opt(&held, &[&claim.key, &token]).await?)
    }
    .await;
    match held.map_err(|e| db.fail(e, StoreError::Unavailable))? {
        // Held by its transaction, which needs no lease.
        Some(row) if row.try_get::<_, bool>(0).unwrap_or(false) => Ok(()),
        _ => Err(StoreError::Fenced),
    }
}

// ---- the claim ----

/// The claim: insert under the primary key, or lock and decide about the row that is there, in
/// one READ COMMITTED transaction. Mirrors `MemoryStore::claim_now` line by line.
///
/// Two shortcuts, each one round trip, before that transaction (four round trips):
/// - a key that is done (or kept failed) is final: a duplicate is answered from a plain read,
///   which neither opens a transaction nor waits for a row lock;
/// - a key that read no row is claimed by the `INSERT` alone, in autocommit: one statement
///   under the primary key is as atomic as the transaction around it was. If another instance
///   inserted the key meanwhile, the insert changes nothing and the transaction decides, so
///   two concurrent first calls still cannot both win.
///
/// Serialization failures and deadlocks run the whole claim again (see
/// [`retrying_conflicts`]): each attempt starts from the read.
pub(super) async fn claim(
    db: &Db,
    clock: Option<&dyn Clock>,
    request: &ClaimRequest<'_>,
) -> Result<ClaimOutcome, StoreError> {
    let mut client = db.get().await.map_err(StoreError::Unavailable)?;
    let claimed: Result<ClaimOutcome, Fail> =
        retrying_conflicts!(db, "claim", claim_in(&mut client, clock, request));
    claimed.map_err(|e| db.fail(e, StoreError::Unavailable))
}

async fn claim_in(
    client: &mut Object,
    clock: Option<&dyn Clock>,
    request: &ClaimRequest<'_>,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let read = client.prepare_cached(READ_ROW).await?;
    match client
        .query_opt(&read, &[&key, &injected_now(clock)])
        .await?
    {
        Some(row) => {
            let (row, now) = Stored::decode(key, &row)?;
            if row.retained(now)
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
    // READ COMMITTED whatever the server's default: a row lock waited for must show the row as
    // the other transaction committed it, where REPEATABLE READ or SERIALIZABLE would fail
    // the claim instead.
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await?;
    let insert = tx.prepare_cached(INSERT_CLAIM).await?;
    let outcome = if insert_claim(&tx, &insert, clock, request).await? == 1 {
        ClaimOutcome::Claimed(Claim::first(key))
    } else {
        lock_and_decide(&tx, clock, request).await?
    };
    tx.commit().await?;
    Ok(outcome)
}

/// In a transaction: the key's row locked (`FOR UPDATE`, until the transaction ends, so no
/// other instance decides about the key meanwhile) and decided about, or, when the row was
/// purged since a statement found it, the claim inserted again.
async fn lock_and_decide(
    tx: &impl GenericClient,
    clock: Option<&dyn Clock>,
    request: &ClaimRequest<'_>,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let select = tx.prepare_cached(LOCK_ROW).await?;
    let insert = tx.prepare_cached(INSERT_CLAIM).await?;
    for _ in 0..CLAIM_ATTEMPTS {
        if let Some(row) = tx.query_opt(&select, &[&key, &injected_now(clock)]).await? {
            let (row, now) = Stored::decode(key, &row)?;
            return decide(tx, clock, request, &row, now).await;
        }
        if insert_claim(tx, &insert, clock, request).await? == 1 {
            return Ok(ClaimOutcome::Claimed(Claim::first(key)));
        }
    }
    Err(Fail::Store(StoreError::Unavailable(
        format!(
            "inbox_log row `{key}` refused the claim's insert and vanished before it could be read, {CLAIM_ATTEMPTS} times in a row"
        )
        .into(),
    )))
}

/// Runs [`INSERT_CLAIM`] for `request`: `1` when it inserted the claim, `0` when the key was
/// there.
async fn insert_claim(
    client: &impl GenericClient,
    insert: &Statement,
    clock: Option<&dyn Clock>,
    request: &ClaimRequest<'_>,
) -> Result<u64, Fail> {
    let params = InsertParams::new(clock, request);
    Ok(client.execute(insert, &params.list()).await?)
}

/// `$1` to `$6` of the claim's insert, which [`INSERT_CLAIM`] and `in_transaction`'s share: the
/// key, the business key, the fingerprint, the injected now (`NULL`: the server's clock), the
/// lease and the retention in microseconds.
struct InsertParams<'r> {
    request: &'r ClaimRequest<'r>,
    now: Option<i64>,
    lease: i64,
    retention: i64,
}

impl<'r> InsertParams<'r> {
    fn new(clock: Option<&dyn Clock>, request: &'r ClaimRequest<'r>) -> Self {
        InsertParams {
            request,
            now: injected_now(clock),
            lease: span_micros(request.lease),
            retention: span_micros(request.retention),
        }
    }

    fn list(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.request.key,
            &self.request.biz_key,
            &self.request.fingerprint,
            &self.now,
            &self.lease,
            &self.retention,
        ]
    }
}

/// A row of `inbox_log` as [`READ_ROW`] and [`LOCK_ROW`] return it, its columns checked.
struct Stored {
    status: String,
    response: Option<String>,
    fingerprint: Option<String>,
    token: i64,
    /// Checked only where it counts: an `in_progress` row's lease.
    lease_until: Option<SystemTime>,
    expires_at: Option<SystemTime>,
    /// Held by a handler's transaction (`begin_for`) rather than by its lease.
    in_transaction: bool,
}

impl Stored {
    /// The row, and the time the statement read it at.
    fn decode(key: &str, row: &Row) -> Result<(Self, SystemTime), Fail> {
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
        let in_transaction: bool = row
            .try_get(6)
            .map_err(|e| corrupt(key, format_args!("bad in_transaction ({e})")))?;
        // Computed by the statement itself: a failure here is the server's, not the row's.
        let now: SystemTime = row.try_get(7)?;
        Ok((
            Stored {
                status,
                response,
                fingerprint,
                token,
                lease_until: row.try_get(4).ok(),
                expires_at: row.try_get(5).ok(),
                in_transaction,
            },
            now,
        ))
    }

    /// Whether the row's retention still runs at `now`. Only the read-first answer asks: it is
    /// a shortcut for rows in their retention, and a row past it (or with an unreadable
    /// `expires_at`) belongs to the purge, so whatever the locked decision makes of it stands
    /// (today the same answer, a round trip or three later).
    fn retained(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|expires| expires > now)
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

/// What the locked row found at `request.key` means at `now` (the time the lock was granted),
/// taking it over if its lease has ended.
async fn decide(
    tx: &impl GenericClient,
    clock: Option<&dyn Clock>,
    request: &ClaimRequest<'_>,
    row: &Stored,
    now: SystemTime,
) -> Result<ClaimOutcome, Fail> {
    let key = request.key;
    let token = row.token;
    let lease = span_micros(request.lease);
    let retention = span_micros(request.retention);
    if row.status == "released" {
        // A released key whose body journaled steps is resumed (`OnErr::Resume`): its
        // finished steps belong to the first payload.
        if request.fingerprint.is_some() && row.fingerprint.as_deref() != request.fingerprint {
            let has_steps = tx.prepare_cached(HAS_STEPS).await?;
            if tx
                .query_one(&has_steps, &[&key])
                .await?
                .try_get::<_, bool>(0)?
            {
                return Ok(ClaimOutcome::KeyReused);
            }
        }
        // Nothing else was kept for this key: claim it afresh, whatever its payload.
        let next = token
            .checked_add(1)
            .ok_or_else(|| corrupt(key, "token cannot grow any more"))?;
        let reclaim = tx.prepare_cached(RECLAIM).await?;
        let reclaimed = tx
            .execute(
                &reclaim,
                &[
                    &key,
                    &token,
                    &request.biz_key,
                    &request.fingerprint,
                    &injected_now(clock),
                    &lease,
                    &retention,
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
            let Some(lease_until) = row.lease_until else {
                return Err(corrupt(key, "bad lease_until (NULL)"));
            };
            // A row a handler's transaction holds is decided by that transaction, not the
            // lease: while it runs, `InProgress`; once it is over with the row still in
            // progress, it ended without its commit (rolled back, its connection or process
            // gone): nothing of it happened, the key is free now.
            if row.in_transaction {
                let gone = tx.prepare_cached(HOLDER_GONE).await?;
                let gone: bool = tx.query_one(&gone, &[&key]).await?.try_get(0)?;
                if !gone {
                    return Ok(ClaimOutcome::InProgress);
                }
                tracing::info!(target: "retry_core::idempotency",
                    key,
                    "the transaction that held this key ended without committing: the key is claimed again at once"
                );
            } else if lease_until > now {
                return Ok(ClaimOutcome::InProgress);
            }
            let Some(next) = token.checked_add(1) else {
                return Err(corrupt(key, "token cannot grow any more"));
            };
            let take_over = tx.prepare_cached(TAKE_OVER).await?;
            let taken = tx
                .execute(
                    &take_over,
                    &[&key, &token, &injected_now(clock), &lease, &retention],
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

// ---- the claim inside the handler's transaction ----

// Declared after the SQL fragments' macros, which it uses.
mod in_transaction;
pub(super) use in_transaction::claim_in_transaction;

// ---- the purge ----

/// Deletes by age only, in batches of [`PURGE_BATCH`] rows, each its own (autocommit)
/// statement, each deciding at its own now; never a row whose lease is live.
pub(super) async fn purge(
    db: &Db,
    clock: Option<&dyn Clock>,
    age: Duration,
) -> Result<u64, StoreError> {
    let client = db.get().await.map_err(StoreError::Unavailable)?;
    let age = span_micros(age);
    let mut purged = 0u64;
    loop {
        let deleted: Result<u64, Fail> = retrying_conflicts!(db, "purge", async {
            let purge = client.prepare_cached(PURGE).await?;
            Ok(client
                .execute(&purge, &[&injected_now(clock), &age, &PURGE_BATCH])
                .await?)
        });
        let deleted = deleted.map_err(|e| db.fail(e, StoreError::Unavailable))?;
        purged += deleted;
        if deleted < PURGE_BATCH.unsigned_abs() {
            return Ok(purged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_core::time::{format_utc, later};

    #[test]
    fn injected_times_are_whole_microseconds_rounded_down_within_the_years_1_to_9999() {
        let at = |micros: i64| {
            if micros >= 0 {
                UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
            } else {
                UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs())
            }
        };
        assert_eq!(
            micros_since_epoch(at(1_755_569_463_000_123)),
            1_755_569_463_000_123
        );
        assert_eq!(
            micros_since_epoch(UNIX_EPOCH + Duration::from_nanos(1_999)),
            1
        );
        assert_eq!(micros_since_epoch(UNIX_EPOCH - Duration::from_nanos(1)), -1);
        assert_eq!(micros_since_epoch(at(-5)), -5);
        assert_eq!(
            micros_since_epoch(UNIX_EPOCH + Duration::from_secs(400_000_000_000)),
            MAX_TIME_MICROS
        );
        assert_eq!(
            micros_since_epoch(UNIX_EPOCH - Duration::from_secs(100_000_000_000)),
            MIN_TIME_MICROS
        );
        // The bounds are the ones `format_utc` writes.
        assert_eq!(
            format_utc(at(MAX_TIME_MICROS)),
            "9999-12-31T23:59:59.999999Z"
        );
        assert_eq!(
            format_utc(at(MIN_TIME_MICROS)),
            "0001-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn spans_are_clamped_where_the_end_of_time_would_clamp_them_anyway() {
        assert_eq!(span_micros(Duration::from_secs(30)), 30_000_000);
        assert_eq!(span_micros(Duration::from_nanos(1_999)), 1);
        assert_eq!(span_micros(Duration::MAX), MAX_SPAN_MICROS);
        // From the earliest time there is, the longest span reaches the end of time.
        assert_eq!(
            format_utc(later(
                UNIX_EPOCH,
                Duration::from_micros(MAX_SPAN_MICROS.unsigned_abs())
            )),
            "9999-12-31T23:59:59.000000Z"
        );
    }

    #[test]
    fn the_statements_bind_time_as_parameters_and_keep_it_typed() {
        assert!(
            INSERT_CLAIM
                .contains("COALESCE(timestamptz 'epoch' + (interval '1 second' * ($4::int8")
        );
        assert!(RENEW.contains("timestamptz '9999-12-31 23:59:59+00'"));
        // No time passes through text, in either direction.
        for statement in [
            INSERT_CLAIM,
            READ_ROW,
            LOCK_ROW,
            TAKE_OVER,
            RECLAIM,
            RENEW,
            PURGE,
        ] {
            assert!(!statement.contains("to_char"), "{statement}");
            assert!(!statement.contains("timestamp '"), "{statement}");
        }
        assert!(LOCK_ROW.ends_with("FOR UPDATE) r"));
    }
}
