//! The statements: the writes the writer runs inside its group transactions, and the reads,
//! each one `SELECT` on a pooled connection (a consistent snapshot in WAL).
//!
//! Every statement is a constant with `?N` placeholders; the only SQL built at run time is a
//! page's, from constant pieces chosen by which filters the page has.

use std::time::SystemTime;

use rusqlite::types::Value;
use rusqlite::{Connection, Row, params};

use super::error::Fail;
use retry_core::dlq::row::{self, LetterRow, ResolutionRow, corrupt};
use retry_core::dlq::{
    AuditEntry, DeadLetter, DlqError, Failure, Page, RedriveRecord, Resolution, Stats,
};
use retry_core::time::{format_rfc3339, format_utc};

/// The letter's columns, in the order [`decode`] reads them (a macro, so that `concat!` can
/// put them into the constant statements).
macro_rules! letter_columns {
    () => {
        "msg_id, original, reason, attempts, first_failed_at, last_failed_at, trace_id, class, \
         error_type, idempotency_key, source, redacted, key_scope, key_expires_at, history, \
         resolved_at, resolved_by, resolved_run"
    };
}

// ---- writes (inside the writer's transaction) ----

/// The whole letter into its row (`?11`: when it was parked), before the `ON CONFLICT` that
/// says what happens to a `msg_id` already there.
macro_rules! insert_letter {
    () => {
        "INSERT INTO dead_letters \
         (msg_id, original, reason, attempts, first_failed_at, last_failed_at, trace_id, class, \
          error_type, idempotency_key, parked_at, first_failed_utc, source, redacted, key_scope, \
          key_expires_at, history, resolved_at, resolved_by, resolved_run, resolved_utc) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
          ?19, ?20, ?21) "
    };
}

/// A new `msg_id`: the whole letter. An existing one is left alone, for [`park`] to merge.
const INSERT: &str = concat!(insert_letter!(), "ON CONFLICT(msg_id) DO NOTHING");

/// A letter after a merge: everything but the `msg_id`, the first `original` and the first
/// failure (and so its place in the order), and the lease.
const UPDATE_MERGED: &str = "UPDATE dead_letters SET reason = ?2, attempts = ?3, \
     last_failed_at = ?4, trace_id = ?5, class = ?6, error_type = ?7, idempotency_key = ?8, \
     source = ?9, redacted = ?10, key_scope = ?11, key_expires_at = ?12, history = ?13, \
     resolved_at = ?14, resolved_by = ?15, resolved_run = ?16, resolved_utc = ?17, \
     parked_at = ?18 WHERE msg_id = ?1";

/// Takes the lease, atomically: pending, and nobody else's live lease on it.
const LEASE: &str = concat!(
    "UPDATE dead_letters SET lease_run = ?2, lease_until = ?3 \
     WHERE msg_id = ?1 AND resolved_at IS NULL \
     AND (lease_run IS NULL OR lease_run = ?2 OR lease_until <= ?4) RETURNING ",
    letter_columns!()
);

const END_LEASE: &str = "UPDATE dead_letters SET lease_run = NULL, lease_until = NULL WHERE msg_id = ?1 AND lease_run = ?2";

/// Resolves a pending letter unless another run holds a live lease on it (`?4`: the resolving
/// run, NULL for a person, which equals nothing).
const RESOLVE: &str = "UPDATE dead_letters SET resolved_at = ?2, resolved_by = ?3, \
     resolved_run = ?4, resolved_utc = ?5, lease_run = NULL, lease_until = NULL \
     WHERE msg_id = ?1 AND resolved_at IS NULL \
     AND (lease_run IS NULL OR lease_until <= ?6 OR lease_run = ?4)";

const PURGE: &str = "DELETE FROM dead_letters WHERE resolved_at IS NOT NULL AND resolved_utc < ?1";

/// An audit row: the intent, or its outcome replacing it (keeping its place in the order).
const AUDIT: &str = "INSERT INTO dead_letter_audit \
     (run_id, msg_id, seq, who, target, at, outcome, finished_at) \
     VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM dead_letter_audit), ?3, ?4, ?5, ?6, ?7) \
     ON CONFLICT(run_id, msg_id) DO UPDATE SET who = excluded.who, target = excluded.target, \
      at = excluded.at, outcome = excluded.outcome, finished_at = excluded.finished_at";

const INSERT_REDRIVE: &str = "INSERT INTO dead_letter_redrives (run_id, started_utc, record, seq) \
     VALUES (?1, ?2, ?3, (SELECT coalesce(max(seq), 0) + 1 FROM dead_letter_redrives))";

// ---- reads ----

const SELECT_ONE: &str = concat!(
    "SELECT ",
    letter_columns!(),
    " FROM dead_letters WHERE msg_id = ?1"
);

/// Stats in one statement, each count over a partial index: pending by class, live leases,
/// resolved, and the oldest pending first failure (the first entry of the pending index).
const STATS: &str = "SELECT \
     (SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL AND class = 'system'), \
     (SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL AND class = 'data'), \
     (SELECT count(*) FROM dead_letters \
       WHERE resolved_at IS NULL AND lease_run IS NOT NULL AND lease_until > ?1), \
     (SELECT count(*) FROM dead_letters WHERE resolved_at IS NOT NULL), \
     (SELECT first_failed_at FROM dead_letters WHERE resolved_at IS NULL \
       ORDER BY first_failed_utc, msg_id LIMIT 1), \
     (SELECT msg_id FROM dead_letters WHERE resolved_at IS NULL \
       ORDER BY first_failed_utc, msg_id LIMIT 1)";

const AUDIT_ROWS: &str = "SELECT run_id, msg_id, who, target, at, outcome, finished_at \
     FROM dead_letter_audit ORDER BY seq";
const AUDIT_ROWS_OF_RUN: &str = "SELECT run_id, msg_id, who, target, at, outcome, finished_at \
     FROM dead_letter_audit WHERE run_id = ?1 ORDER BY seq";

const SELECT_REDRIVES: &str = "SELECT run_id, record FROM dead_letter_redrives ORDER BY seq";

// ---- the writes ----

/// Parks `letter` (checked into `row`): a new `msg_id` is inserted whole; an existing letter is
/// read and merged as [`DeadLetter::absorb`] says, and written back.
pub(super) fn park(conn: &Connection, row: &LetterRow, letter: &DeadLetter) -> Result<(), Fail> {
    let parked_at = format_utc(SystemTime::now());
    let inserted = insert(conn, INSERT, row, &parked_at)?;
    if inserted > 0 {
        return Ok(());
    }
    let Some(mut stored) = get(conn, &row.msg_id)? else {
        // The insert found the row a moment ago, in this transaction: it cannot be gone.
        return Err(Fail::Store(corrupt(
            &row.msg_id,
            "the row vanished inside its own transaction",
        )));
    };
    stored.absorb(letter);
    update_merged(conn, &stored, &parked_at)
}

/// Writes a merged letter back.
fn update_merged(conn: &Connection, letter: &DeadLetter, parked_at: &str) -> Result<(), Fail> {
    let history = row::history_json(&letter.msg_id, &letter.history).map_err(Fail::Store)?;
    let resolved = letter.resolved.as_ref().map(ResolutionRow::new);
    let resolved = resolved.as_ref();
    conn.prepare_cached(UPDATE_MERGED)?.execute(params![
        letter.msg_id,
        letter.reason,
        i64::from(letter.attempts),
        format_rfc3339(letter.last_failed_at),
        letter.trace_id,
        letter.class.as_str(),
        letter.error_type,
        letter.idempotency_key,
        letter.source,
        letter.redacted,
        letter.key_scope,
        letter.key_expires_at.map(format_rfc3339),
        history,
        resolved.map(|r| &r.at),
        resolved.map(|r| &r.by),
        resolved.and_then(|r| r.run_id.as_ref()),
        resolved.map(|r| &r.at_utc),
        parked_at,
    ])?;
    Ok(())
}

/// Takes `msg_id` for `run_id` until `until`, if it is pending and no other run holds a lease
/// that runs past `now`; the letter as it is.
pub(super) fn lease(
    conn: &Connection,
    msg_id: &str,
    run_id: &str,
    until: &str,
    now: &str,
) -> Result<Option<DeadLetter>, Fail> {
    let mut statement = conn.prepare_cached(LEASE)?;
    let mut rows = statement.query(params![msg_id, run_id, until, now])?;
    match rows.next()? {
        Some(row) => decode(row).map(Some),
        None => Ok(None),
    }
}

/// Ends `run_id`'s lease on `msg_id`; whether it held one.
pub(super) fn release(conn: &Connection, msg_id: &str, run_id: &str) -> Result<bool, Fail> {
    Ok(conn.prepare_cached(END_LEASE)?.execute([msg_id, run_id])? > 0)
}

/// Resolves `msg_id` (see [`RESOLVE`]); whether it did.
pub(super) fn resolve(
    conn: &Connection,
    msg_id: &str,
    resolution: &ResolutionRow,
    now: &str,
) -> Result<bool, Fail> {
    let changed = conn.prepare_cached(RESOLVE)?.execute(params![
        msg_id,
        resolution.at,
        resolution.by,
        resolution.run_id,
        resolution.at_utc,
        now,
    ])?;
    Ok(changed > 0)
}

/// The run `run_id` sent `msg_id` and it failed again: merged as
/// [`DeadLetter::redrive_failed`] (into the history), lease ended. `false` if the run does not hold
/// the lease.
pub(super) fn put_back(
    conn: &Connection,
    msg_id: &str,
    run_id: &str,
    failure: &Failure,
) -> Result<bool, Fail> {
    if !release(conn, msg_id, run_id)? {
        return Ok(false);
    }
    let Some(mut letter) = get(conn, msg_id)? else {
        return Ok(false);
    };
    letter.redrive_failed(failure.clone());
    update_merged(conn, &letter, &format_utc(SystemTime::now()))?;
    Ok(true)
}

/// Deletes the letters resolved before `before` (fixed-width UTC); how many.
pub(super) fn purge(conn: &Connection, before: &str) -> Result<u64, Fail> {
    let deleted = conn.prepare_cached(PURGE)?.execute([before])?;
    Ok(deleted as u64)
}

/// Writes `entry`: a new audit row, or the outcome of its intent.
pub(super) fn audit(conn: &Connection, entry: &AuditEntry) -> Result<(), Fail> {
    conn.prepare_cached(AUDIT)?.execute(params![
        entry.run_id,
        entry.msg_id,
        entry.who,
        entry.target,
        format_rfc3339(entry.at),
        entry.outcome,
        entry.finished_at.map(format_rfc3339),
    ])?;
    Ok(())
}

/// Appends a redrive record: `(run_id, started_utc, JSON)` from [`row::record_row`].
pub(super) fn record_redrive(
    conn: &Connection,
    (run_id, started_utc, json): &(String, String, String),
) -> Result<(), Fail> {
    conn.prepare_cached(INSERT_REDRIVE)?
        .execute(params![run_id, started_utc, json])?;
    Ok(())
}

/// Runs `sql` (an `insert_letter!` statement) for `row`; how many rows it wrote.
fn insert(
    conn: &Connection,
    sql: &str,
    row: &LetterRow,
    parked_at: &str,
) -> rusqlite::Result<usize> {
    let resolved = row.resolved.as_ref();
    conn.prepare_cached(sql)?.execute(params![
        row.msg_id,
        row.original,
        row.reason,
        row.attempts,
        row.first_failed_at,
        row.last_failed_at,
        row.trace_id,
        row.class,
        row.error_type,
        row.idempotency_key,
        parked_at,
        row.first_failed_utc,
        row.source,
        row.redacted,
        row.key_scope,
        row.key_expires_at,
        row.history,
        resolved.map(|r| &r.at),
        resolved.map(|r| &r.by),
        resolved.and_then(|r| r.run_id.as_ref()),
        resolved.map(|r| &r.at_utc),
    ])
}

// ---- the reads ----

/// The letter `msg_id`, pending or resolved.
pub(super) fn get(conn: &Connection, msg_id: &str) -> Result<Option<DeadLetter>, Fail> {
    let mut statement = conn.prepare_cached(SELECT_ONE)?;
    let mut rows = statement.query([msg_id])?;
    match rows.next()? {
        Some(row) => decode(row).map(Some),
        None => Ok(None),
    }
}

/// A page of pending letters: a range scan of the pending index that fits its filters, in the
/// order (`first_failed_utc`, `msg_id`), from after the cursor (`after`: its first failure as
/// fixed-width UTC, and its `msg_id`).
pub(super) fn page(
    conn: &Connection,
    page: &Page,
    after: Option<(&str, &str)>,
) -> Result<Vec<DeadLetter>, Fail> {
    let mut sql = concat!(
        "SELECT ",
        letter_columns!(),
        " FROM dead_letters WHERE resolved_at IS NULL"
    )
    .to_owned();
    let mut values: Vec<Value> = Vec::with_capacity(5);
    if let Some((first_failed_utc, msg_id)) = after {
        sql.push_str(" AND (first_failed_utc, msg_id) > (?, ?)");
        values.push(Value::Text(first_failed_utc.to_owned()));
        values.push(Value::Text(msg_id.to_owned()));
    }
    if let Some(class) = page.class {
        sql.push_str(" AND class = ?");
        values.push(Value::Text(class.as_str().to_owned()));
    }
    if let Some(source) = &page.source {
        sql.push_str(" AND source = ?");
        values.push(Value::Text(source.clone()));
    }
    sql.push_str(" ORDER BY first_failed_utc, msg_id LIMIT ?");
    values.push(Value::Integer(
        i64::try_from(page.limit).unwrap_or(i64::MAX),
    ));
    let mut statement = conn.prepare_cached(&sql)?;
    let mut rows = statement.query(rusqlite::params_from_iter(values))?;
    let mut letters = Vec::new();
    while let Some(row) = rows.next()? {
        letters.push(decode(row)?);
    }
    Ok(letters)
}

/// The counts, in one statement; `now` (fixed-width UTC) tells live leases.
pub(super) fn stats(conn: &Connection, now: &str) -> Result<Stats, Fail> {
    type Counts = (i64, i64, i64, i64, Option<String>, Option<String>);
    let (system, data, leased, resolved, oldest, oldest_id): Counts =
        conn.prepare_cached(STATS)?.query_row([now], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
    let oldest = match (oldest, oldest_id) {
        (Some(at), id) => {
            let id = id.unwrap_or_default();
            Some(row::time(&id, "first_failed_at", &at).map_err(Fail::Store)?)
        }
        (None, _) => None,
    };
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    // `Stats` is `#[non_exhaustive]`: filled in field by field.
    let mut stats = Stats::default();
    stats.pending = count(system) + count(data);
    stats.system = count(system);
    stats.data = count(data);
    stats.leased = count(leased);
    stats.resolved = count(resolved);
    stats.oldest_first_failed_at = oldest;
    Ok(stats)
}

/// The audit rows of `run_id` (every run's, when `None`), in the order first written.
pub(super) fn audit_rows(conn: &Connection, run_id: Option<&str>) -> Result<Vec<AuditEntry>, Fail> {
    let (mut statement, values) = match run_id {
        Some(run_id) => (conn.prepare_cached(AUDIT_ROWS_OF_RUN)?, vec![run_id]),
        None => (conn.prepare_cached(AUDIT_ROWS)?, Vec::new()),
    };
    let mut rows = statement.query(rusqlite::params_from_iter(values))?;
    let mut entries = Vec::new();
    while let Some(r) = rows.next()? {
        let (run_id, msg_id): (String, String) = (r.get(0)?, r.get(1)?);
        let at: String = r.get(4)?;
        let finished_at: Option<String> = r.get(6)?;
        let time = |column: &str, text: &str| {
            row::audit_time(&run_id, &msg_id, column, text).map_err(Fail::Store)
        };
        let at = time("at", &at)?;
        let finished_at = finished_at
            .map(|text| time("finished_at", &text))
            .transpose()?;
        entries.push(AuditEntry {
            who: r.get(2)?,
            target: r.get(3)?,
            outcome: r.get(5)?,
            run_id,
            msg_id,
            at,
            finished_at,
        });
    }
    Ok(entries)
}

/// Every redrive record, in the order recorded.
pub(super) fn redrives(conn: &Connection) -> Result<Vec<RedriveRecord>, Fail> {
    let mut statement = conn.prepare_cached(SELECT_REDRIVES)?;
    let mut rows = statement.query([])?;
    let mut records = Vec::new();
    while let Some(r) = rows.next()? {
        let run_id: String = r.get(0)?;
        let json: String = r.get(1)?;
        records.push(row::record(&run_id, &json).map_err(Fail::Store)?);
    }
    Ok(records)
}

// ---- decoding ----

/// A row read back, every column checked: the first column that cannot be read fails it as
/// [`DlqError::Corrupt`] naming its `msg_id`.
fn decode(r: &Row<'_>) -> Result<DeadLetter, Fail> {
    let msg_id = match r.get::<_, Value>(0)? {
        Value::Text(text) => text,
        other => {
            return Err(Fail::Store(DlqError::Corrupt(format!(
                "dead_letters row with msg_id {other:?}: msg_id is not text"
            ))));
        }
    };
    let id = msg_id.as_str();
    let text = |i: usize, column: &str| -> Result<String, Fail> {
        match r.get::<_, Value>(i)? {
            Value::Text(text) => Ok(text),
            other => Err(Fail::Store(corrupt(
                id,
                format_args!("bad {column} {other:?}"),
            ))),
        }
    };
    let optional = |i: usize, column: &str| -> Result<Option<String>, Fail> {
        match r.get::<_, Value>(i)? {
            Value::Null => Ok(None),
            Value::Text(text) => Ok(Some(text)),
            other => Err(Fail::Store(corrupt(
                id,
                format_args!("bad {column} {other:?}"),
            ))),
        }
    };
    let store = Fail::Store;
    let original = row::original(id, &text(1, "original")?).map_err(store)?;
    let attempts = match r.get::<_, Value>(3)? {
        Value::Integer(n) => row::attempts(id, n).map_err(store)?,
        other => {
            return Err(Fail::Store(corrupt(
                id,
                format_args!("bad attempts {other:?}"),
            )));
        }
    };
    let first_failed_at =
        row::time(id, "first_failed_at", &text(4, "first_failed_at")?).map_err(store)?;
    let last_failed_at =
        row::time(id, "last_failed_at", &text(5, "last_failed_at")?).map_err(store)?;
    let key_expires_at = optional(13, "key_expires_at")?
        .map(|at| row::time(id, "key_expires_at", &at))
        .transpose()
        .map_err(store)?;
    let class = row::class(id, &text(7, "class")?).map_err(store)?;
    let redacted = match r.get::<_, Value>(11)? {
        Value::Integer(0) => false,
        Value::Integer(1) => true,
        other => {
            return Err(Fail::Store(corrupt(
                id,
                format_args!("bad redacted {other:?}"),
            )));
        }
    };
    let history = row::history(id, &text(14, "history")?).map_err(store)?;
    let resolved = match optional(15, "resolved_at")? {
        None => None,
        Some(at) => Some(Resolution {
            at: row::time(id, "resolved_at", &at).map_err(store)?,
            by: text(16, "resolved_by")?,
            run_id: optional(17, "resolved_run")?,
        }),
    };
    Ok(DeadLetter {
        reason: text(2, "reason")?,
        trace_id: text(6, "trace_id")?,
        error_type: text(8, "error_type")?,
        idempotency_key: optional(9, "idempotency_key")?,
        source: optional(10, "source")?,
        key_scope: optional(12, "key_scope")?,
        key_expires_at,
        msg_id,
        original,
        attempts,
        first_failed_at,
        last_failed_at,
        class,
        redacted,
        history,
        resolved,
    })
}
