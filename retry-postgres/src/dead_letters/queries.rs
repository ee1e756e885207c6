//! Everything `PgDeadLetters` asks of the server besides parking: pages and counts computed by
//! the server, leases decided on its clock, resolving, putting back, purging, and the audit.

use std::time::{Duration, SystemTime};

use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, Row};

use serde_json::Value;
use tokio_postgres::types::Json;

use super::rows::{
    self, Encoded, Fail, In, Stamp, json_has_nul, letter_columns, read_committed, resolution_time,
};
use crate::sql::{Db, retrying_conflicts};
use retry_core::dlq::{
    AuditEntry, DeadLetter, DlqError, Failure, Page, RedriveRecord, Resolution, Stats,
};

/// The longest lease asked of the server (100 years, in microseconds): longer ones are cut to
/// it, so `now() + ttl` always fits a `timestamptz` and the interval is exact.
const MAX_LEASE_MICROS: i64 = 100 * 366 * 86_400 * 1_000_000;

/// Rows deleted per purge statement: a purge of millions of rows is many short statements,
/// never one long transaction.
const PURGE_BATCH: i64 = 5_000;

/// Pending letters after the cursor `($1, $2, $3)` (`first_failed_at` and its nanoseconds,
/// `msg_id`), in that order (the time's, to the nanosecond), at most `$4`; a NULL time is
/// before every letter (`-infinity`). One statement per filter, so each is planned for what it
/// filters (the pending index, or the pending index by source).
macro_rules! page {
    ($filter:literal) => {
        concat!(
            "SELECT ",
            letter_columns!(),
            " FROM dead_letters WHERE resolved_at IS NULL \
             AND (first_failed_at, first_failed_ns, msg_id) \
             > (COALESCE($1, '-infinity'::timestamptz), $2, $3)",
            $filter,
            " ORDER BY first_failed_at, first_failed_ns, msg_id LIMIT $4"
        )
    };
}
const PAGE: &str = page!("");
const PAGE_CLASS: &str = page!(" AND class = $5");
const PAGE_SOURCE: &str = page!(" AND source = $5");
const PAGE_CLASS_SOURCE: &str = page!(" AND class = $5 AND source = $6");

/// The counts, and the oldest pending letter's first failure (its two columns) and `msg_id`.
const STATS: &str = "WITH oldest AS (SELECT first_failed_at, first_failed_ns, msg_id \
     FROM dead_letters WHERE resolved_at IS NULL \
     ORDER BY first_failed_at, first_failed_ns, msg_id LIMIT 1) \
     SELECT count(*) FILTER (WHERE resolved_at IS NULL), \
     count(*) FILTER (WHERE resolved_at IS NULL AND class = 'system'), \
     count(*) FILTER (WHERE resolved_at IS NULL AND class = 'data'), \
     count(*) FILTER (WHERE resolved_at IS NULL AND lease_until > now()), \
     count(*) FILTER (WHERE resolved_at IS NOT NULL), \
     (SELECT first_failed_at FROM oldest), (SELECT first_failed_ns FROM oldest), \
     (SELECT msg_id FROM oldest) \
     FROM dead_letters";

const GET: &str = concat!(
    "SELECT ",
    letter_columns!(),
    " FROM dead_letters WHERE msg_id = $1"
);

/// A pending letter that no other run holds a live lease on, taken by `$2` until the
/// database's `now()` plus `$3` microseconds. Under READ COMMITTED a second run waiting for the
/// row lock re-checks the condition on the row as the first one left it, so one run wins.
const LEASE: &str = concat!(
    "UPDATE dead_letters SET lease_run = $2, \
     lease_until = now() + $3::bigint * interval '1 microsecond' \
     WHERE msg_id = $1 AND resolved_at IS NULL \
     AND (lease_run IS NULL OR lease_run = $2 OR lease_until <= now()) RETURNING ",
    letter_columns!()
);

const RELEASE: &str = "UPDATE dead_letters SET lease_run = NULL, lease_until = NULL \
     WHERE msg_id = $1 AND lease_run = $2";

/// Resolves a pending letter that no other run holds a live lease on (`$4`, the resolving
/// run, may; a person, `$4` NULL, may not), ending any lease.
const RESOLVE: &str = "UPDATE dead_letters SET resolved_at = $2, resolved_by = $3, \
     resolved_run = $4, resolved_ns = $5, lease_run = NULL, lease_until = NULL \
     WHERE msg_id = $1 AND resolved_at IS NULL \
     AND (lease_run IS NULL OR lease_until <= now() OR lease_run = $4)";

/// Ends run `$2`'s lease on `$1` (live or run out) and returns the letter, locked until the
/// transaction ends.
const TAKE_BACK: &str = concat!(
    "UPDATE dead_letters SET lease_run = NULL, lease_until = NULL \
     WHERE msg_id = $1 AND lease_run = $2 RETURNING ",
    letter_columns!()
);

/// Resolved before `$1` (to the microsecond), a batch at a time. The condition is on the
/// deleted row itself, so a letter parked again (pending again) while the batch waited for its
/// lock is not deleted.
const PURGE: &str = "DELETE FROM dead_letters WHERE resolved_at < $1 AND msg_id IN \
     (SELECT msg_id FROM dead_letters WHERE resolved_at IS NOT NULL AND resolved_at < $1 \
      LIMIT $2)";

const AUDIT: &str = "INSERT INTO dead_letter_audit (run_id, msg_id, who, target, at, at_ns, \
     outcome, finished_at, finished_ns) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (run_id, msg_id) DO UPDATE \
     SET who = excluded.who, target = excluded.target, at = excluded.at, at_ns = excluded.at_ns, \
     outcome = excluded.outcome, finished_at = excluded.finished_at, \
     finished_ns = excluded.finished_ns";
const AUDIT_ROWS: &str = "SELECT run_id, msg_id, who, target, at, at_ns, outcome, finished_at, \
     finished_ns FROM dead_letter_audit WHERE $1::text IS NULL OR run_id = $1 ORDER BY seq";

const INSERT_REDRIVE: &str =
    "INSERT INTO dead_letter_redrives (run_id, started_at, record) VALUES ($1, $2, $3)";
const SELECT_REDRIVES: &str =
    "SELECT run_id, record FROM dead_letter_redrives ORDER BY started_at, seq";

// ---- plumbing ----

async fn client(db: &Db) -> Result<Object, DlqError> {
    db.get().await.map_err(DlqError::Io)
}

fn failed(db: &Db, e: Fail) -> DlqError {
    db.fail(e, DlqError::Io)
}

/// One write in a READ COMMITTED transaction of its own ([`rows::read_committed`]: whatever
/// the session's default isolation, a busy row is waited for, not a serialization failure),
/// tried again after a deadlock; how many rows it changed.
async fn execute(
    db: &Db,
    what: &str,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, DlqError> {
    let client = client(db).await?;
    let done: Result<u64, Fail> = retrying_conflicts!(db, what, async {
        let statement = client.prepare_cached(sql).await?;
        Ok(read_committed(&client, client.execute(&statement, params)).await?)
    });
    done.map_err(|e| failed(db, e))
}

/// One statement that returns rows: a read in autocommit, or a write as [`execute`] runs it.
async fn query(
    db: &Db,
    what: &str,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    within: In,
) -> Result<Vec<Row>, DlqError> {
    let client = client(db).await?;
    let rows: Result<Vec<Row>, Fail> = retrying_conflicts!(db, what, async {
        let statement = client.prepare_cached(sql).await?;
        let query = client.query(&statement, params);
        Ok(match within {
            In::Caller => query.await?,
            In::Own => read_committed(&client, query).await?,
        })
    });
    rows.map_err(|e| failed(db, e))
}

/// Whether a letter, run or source named `text` can be stored at all: PostgreSQL's `text`
/// holds no NUL, so asking for one would be an error of the server, where the answer is that
/// there is no such thing.
fn storable(text: &str) -> bool {
    !text.contains('\0')
}

/// A count the server made, which cannot be negative.
fn count(row: &Row, i: usize) -> Result<u64, tokio_postgres::Error> {
    Ok(u64::try_from(row.try_get::<_, i64>(i)?).unwrap_or(0))
}

// ---- reading ----

pub(super) async fn page(db: &Db, page: &Page) -> Result<Vec<DeadLetter>, DlqError> {
    let (after_at, after_ns, after_id): (Option<SystemTime>, i16, &str) = match &page.after {
        None => (None, 0, ""),
        Some(cursor) => {
            let after = Stamp::of(cursor.first_failed_at);
            (Some(after.at), after.ns, cursor.msg_id.as_str())
        }
    };
    if !page.source.as_deref().is_none_or(storable) {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(page.limit).unwrap_or(i64::MAX);
    let class = page.class.map(|c| c.as_str());
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after_at, &after_ns, &after_id, &limit];
    let sql = match (&class, &page.source) {
        (None, None) => PAGE,
        (Some(class), None) => {
            params.push(class);
            PAGE_CLASS
        }
        (None, Some(source)) => {
            params.push(source);
            PAGE_SOURCE
        }
        (Some(class), Some(source)) => {
            params.extend([class as &(dyn ToSql + Sync), source]);
            PAGE_CLASS_SOURCE
        }
    };
    query(db, "page", sql, &params, In::Caller)
        .await?
        .iter()
        .map(rows::decode)
        .collect()
}

pub(super) async fn stats(db: &Db) -> Result<Stats, DlqError> {
    let row = query(db, "stats", STATS, &[], In::Caller).await?;
    type Oldest = (String, SystemTime, i16);
    let read = |row: &Row| -> Result<(Stats, Option<Oldest>), tokio_postgres::Error> {
        // `Stats` is `#[non_exhaustive]`: filled in field by field.
        let mut stats = Stats::default();
        stats.pending = count(row, 0)?;
        stats.system = count(row, 1)?;
        stats.data = count(row, 2)?;
        stats.leased = count(row, 3)?;
        stats.resolved = count(row, 4)?;
        let oldest: Option<SystemTime> = row.try_get(5)?;
        let oldest_ns: Option<i16> = row.try_get(6)?;
        let oldest_id: Option<String> = row.try_get(7)?;
        Ok((
            stats,
            oldest.map(|at| (oldest_id.unwrap_or_default(), at, oldest_ns.unwrap_or(0))),
        ))
    };
    let Some(row) = row.first() else {
        return Ok(Stats::default());
    };
    let (mut stats, oldest) = read(row).map_err(|e| DlqError::Io(db.error(e)))?;
    // Checked as the letter's own read checks it.
    stats.oldest_first_failed_at = oldest
        .map(|(id, at, ns)| rows::stamped(&id, "first_failed_at", at, ns))
        .transpose()?;
    Ok(stats)
}

pub(super) async fn get(db: &Db, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
    if !storable(msg_id) {
        return Ok(None);
    }
    query(db, "get", GET, &[&msg_id], In::Caller)
        .await?
        .first()
        .map(rows::decode)
        .transpose()
}

// ---- leases and resolving ----

pub(super) async fn lease(
    db: &Db,
    msg_id: &str,
    run_id: &str,
    ttl: Duration,
) -> Result<Option<DeadLetter>, DlqError> {
    if !storable(msg_id) || !storable(run_id) {
        return Ok(None);
    }
    let micros =
        i64::try_from(ttl.as_micros()).map_or(MAX_LEASE_MICROS, |m| m.min(MAX_LEASE_MICROS));
    query(db, "lease", LEASE, &[&msg_id, &run_id, &micros], In::Own)
        .await?
        .first()
        .map(rows::decode)
        .transpose()
}

pub(super) async fn release(db: &Db, msg_id: &str, run_id: &str) -> Result<bool, DlqError> {
    if !storable(msg_id) || !storable(run_id) {
        return Ok(false);
    }
    Ok(execute(db, "release", RELEASE, &[&msg_id, &run_id]).await? > 0)
}

pub(super) async fn resolve(
    db: &Db,
    msg_id: &str,
    resolution: &Resolution,
) -> Result<bool, DlqError> {
    let at = resolution_time(msg_id, resolution)?;
    if !storable(msg_id) {
        return Ok(false);
    }
    let params: [&(dyn ToSql + Sync); 5] =
        [&msg_id, &at.at, &resolution.by, &resolution.run_id, &at.ns];
    Ok(execute(db, "resolve", RESOLVE, &params).await? > 0)
}

/// Changes the letter `msg_id` by `change` (a failure merged in), in one READ COMMITTED
/// transaction that locks its row, if the run `run_id` holds it (its lease live or run out);
/// the lease ends. `false` when there is no such letter or the run does not hold it.
pub(super) async fn merge_failure(
    db: &Db,
    msg_id: &str,
    run_id: &str,
    change: &(dyn Fn(&mut DeadLetter) + Sync),
) -> Result<bool, DlqError> {
    let mut client = client(db).await?;
    let done: Result<bool, Fail> = retrying_conflicts!(
        db,
        "put_back",
        merge_failure_in(&mut client, msg_id, run_id, change)
    );
    done.map_err(|e| failed(db, e))
}

async fn merge_failure_in(
    client: &mut Object,
    msg_id: &str,
    run_id: &str,
    change: &(dyn Fn(&mut DeadLetter) + Sync),
) -> Result<bool, Fail> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await?;
    let statement = tx.prepare_cached(TAKE_BACK).await?;
    let stored = tx
        .query_opt(&statement, &[&msg_id, &run_id])
        .await?
        .map(|row| rows::decode(&row));
    // Nothing to change: the transaction rolls back as it is dropped.
    let Some(stored) = stored else {
        return Ok(false);
    };
    let mut letter = stored.map_err(Fail::Store)?;
    change(&mut letter);
    let encoded = Encoded::new(letter).map_err(Fail::Store)?;
    rows::update_merged(&tx, &[&encoded], &SystemTime::now()).await?;
    tx.commit().await?;
    Ok(true)
}

/// Put back by the redrive run `run_id`: one attempt and `failure` merged in, the lease ended.
pub(super) async fn put_back(
    db: &Db,
    msg_id: &str,
    run_id: &str,
    failure: &Failure,
) -> Result<bool, DlqError> {
    rows::check_failure(msg_id, failure)?;
    if !storable(msg_id) || !storable(run_id) {
        return Ok(false);
    }
    merge_failure(db, msg_id, run_id, &|letter| {
        letter.redrive_failed(failure.clone());
    })
    .await
}

pub(super) async fn purge_resolved(db: &Db, before: SystemTime) -> Result<u64, DlqError> {
    let cut = Stamp::of(before).at;
    let mut purged = 0;
    loop {
        let deleted = execute(db, "purge", PURGE, &[&cut, &PURGE_BATCH]).await?;
        purged += deleted;
        if deleted < PURGE_BATCH.unsigned_abs() {
            return Ok(purged);
        }
    }
}

// ---- the audit ----

pub(super) async fn audit(db: &Db, entry: &AuditEntry) -> Result<(), DlqError> {
    rows::check_audit(entry)?;
    let at = Stamp::of(entry.at);
    let finished = entry.finished_at.map(Stamp::of);
    let (finished_at, finished_ns) = (finished.map(|f| f.at), finished.map_or(0, |f| f.ns));
    let params: [&(dyn ToSql + Sync); 9] = [
        &entry.run_id,
        &entry.msg_id,
        &entry.who,
        &entry.target,
        &at.at,
        &at.ns,
        &entry.outcome,
        &finished_at,
        &finished_ns,
    ];
    execute(db, "audit", AUDIT, &params).await?;
    Ok(())
}

pub(super) async fn audit_rows(db: &Db, run_id: Option<&str>) -> Result<Vec<AuditEntry>, DlqError> {
    if !run_id.is_none_or(storable) {
        return Ok(Vec::new());
    }
    let rows = query(db, "audit_rows", AUDIT_ROWS, &[&run_id], In::Caller).await?;
    rows.iter()
        .map(|row| {
            type Columns = (
                String,
                String,
                String,
                String,
                SystemTime,
                i16,
                Option<String>,
                Option<SystemTime>,
                i16,
            );
            let read = || -> Result<Columns, tokio_postgres::Error> {
                Ok((
                    row.try_get(0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                    row.try_get(4)?,
                    row.try_get(5)?,
                    row.try_get(6)?,
                    row.try_get(7)?,
                    row.try_get(8)?,
                ))
            };
            let (run_id, msg_id, who, target, at, at_ns, outcome, finished_at, finished_ns) =
                read().map_err(|e| {
                    DlqError::Corrupt(format!("dead_letter_audit row is unreadable: {e}"))
                })?;
            let time = |column: &str, at: SystemTime, ns: i16| {
                rows::Stamp::time(at, ns).ok_or_else(|| {
                    DlqError::Corrupt(format!(
                        "dead_letter_audit row `{run_id}`, letter `{msg_id}`: {column} has {ns} nanoseconds past its microsecond"
                    ))
                })
            };
            let at = time("at", at, at_ns)?;
            let finished_at = finished_at
                .map(|finished| time("finished_at", finished, finished_ns))
                .transpose()?;
            Ok(AuditEntry {
                run_id,
                msg_id,
                who,
                target,
                at,
                outcome,
                finished_at,
            })
        })
        .collect()
}

pub(super) async fn record_redrive(db: &Db, record: &RedriveRecord) -> Result<(), DlqError> {
    let unwritable = |what: &str| {
        DlqError::Serialize(format!(
            "redrive record `{}`: {what}",
            record.run_id.escape_debug()
        ))
    };
    let json = serde_json::to_value(record).map_err(|e| unwritable(&e.to_string()))?;
    // `run_id` is a `text` column of its own, the rest `jsonb`: neither holds a NUL.
    if !storable(&record.run_id) || json_has_nul(&json) {
        return Err(unwritable(
            "holds a NUL character, which PostgreSQL text and jsonb cannot store",
        ));
    }
    let started_at = Stamp::of(record.started_at).at;
    execute(
        db,
        "record_redrive",
        INSERT_REDRIVE,
        &[&record.run_id, &started_at, &Json(&json)],
    )
    .await?;
    Ok(())
}

pub(super) async fn redrives(db: &Db) -> Result<Vec<RedriveRecord>, DlqError> {
    let rows = query(db, "redrives", SELECT_REDRIVES, &[], In::Caller).await?;
    rows.iter()
        .map(|r| {
            let run_id: String = r.try_get(0).map_err(|e| DlqError::Io(db.error(e)))?;
            let json: Value = r.try_get(1).map_err(|e| DlqError::Io(db.error(e)))?;
            serde_json::from_value(json).map_err(|e| {
                DlqError::Corrupt(format!(
                    "dead_letter_redrives row `{run_id}`: record is unreadable ({e})"
                ))
            })
        })
        .collect()
}
