//! The step journal (`inbox_steps`): one row per step of a key's body, its output `NULL` while
//! the step has only started. Written through the file's write queue like every other write,
//! each write fenced by the claim's token in the same transaction; deleted with its key by the
//! purge.

use std::time::{Duration, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use retry_core::idempotency::{Claim, StepEntry, StepState, StepWrite, StoreError};
use retry_core::time::{Clock, format_utc};

/// Why a journal statement failed: SQLite's error, or the store's verdict (a fenced claim).
type Fail = crate::sql::Fail<StoreError>;

/// Version 3 of the layout: the journal. `WITHOUT ROWID`: rows are found by their key only.
pub(super) const STEPS_TABLE: &str = "CREATE TABLE IF NOT EXISTS inbox_steps (
    msg_id TEXT NOT NULL,
    label TEXT NOT NULL,
    output TEXT,
    PRIMARY KEY (msg_id, label)
) WITHOUT ROWID";

const HAS_STEPS: &str = "SELECT EXISTS (SELECT 1 FROM inbox_steps WHERE msg_id = ?1)";
const SELECT_STEPS: &str = "SELECT label, output FROM inbox_steps WHERE msg_id = ?1";
/// Whether the claim still holds its key: its token, and the key in progress.
const HOLDS: &str =
    "SELECT 1 FROM inbox_log WHERE msg_id = ?1 AND token = ?2 AND status = 'in_progress'";
const START: &str = "INSERT INTO inbox_steps (msg_id, label, output) VALUES (?1, ?2, NULL) \
     ON CONFLICT (msg_id, label) DO NOTHING";
// A finished step keeps its first output: a retried write whose first try landed changes
// nothing.
const FINISH: &str = "INSERT INTO inbox_steps (msg_id, label, output) VALUES (?1, ?2, ?3) \
     ON CONFLICT (msg_id, label) DO UPDATE SET output = excluded.output \
     WHERE inbox_steps.output IS NULL";
// The purge's batch, naming the keys whose journals go with them.
const PURGE_RETURNING: &str = "DELETE FROM inbox_log WHERE rowid IN \
     (SELECT rowid FROM inbox_log WHERE created_at < ?1 AND expires_at <= ?2 \
      AND NOT (status = 'in_progress' AND lease_until > ?2) LIMIT ?3) RETURNING msg_id";
const PURGE_STEPS: &str = "DELETE FROM inbox_steps WHERE msg_id = ?1";

/// Whether `key` has a journal.
pub(super) fn has_steps(conn: &Connection, key: &str) -> Result<bool, Fail> {
    Ok(conn
        .prepare_cached(HAS_STEPS)?
        .query_row([key], |row| row.get(0))?)
}

/// Every step journaled for `key`.
pub(super) fn read_steps(conn: &Connection, key: &str) -> Result<Vec<StepEntry>, Fail> {
    let mut statement = conn.prepare_cached(SELECT_STEPS)?;
    let rows = statement.query_map([key], |row| {
        Ok(StepEntry {
            label: row.get(0)?,
            state: match row.get::<_, Option<String>>(1)? {
                None => StepState::Started,
                Some(output) => StepState::Finished(output),
            },
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Journals `output` (`None`: started) for the step `label` of `key`, if `token` still holds
/// the key; otherwise [`StoreError::Fenced`]. In one write of the queue, so nothing can take
/// the key over between the check and the write.
pub(super) fn write_step(
    conn: &Connection,
    key: &str,
    token: i64,
    label: &str,
    output: Option<&str>,
) -> Result<(), Fail> {
    let holds = conn
        .prepare_cached(HOLDS)?
        .query_row(params![key, token], |_| Ok(()))
        .optional()?;
    if holds.is_none() {
        return Err(Fail::Store(StoreError::Fenced));
    }
    match output {
        None => conn.prepare_cached(START)?.execute(params![key, label])?,
        Some(output) => conn
            .prepare_cached(FINISH)?
            .execute(params![key, label, output])?,
    };
    Ok(())
}

/// [`write_step`]'s arguments, owned for the queue's thread.
pub(super) fn owned_write(
    claim: &Claim,
    label: &str,
    write: StepWrite<'_>,
) -> Result<(String, i64, String, Option<String>), StoreError> {
    let token = i64::try_from(claim.token).map_err(|_| StoreError::Fenced)?;
    let output = match write {
        StepWrite::Started => None,
        StepWrite::Finished(output) => Some(output.to_owned()),
    };
    Ok((claim.key.clone(), token, label.to_owned(), output))
}

/// One batch of at most `batch` rows older than `age` (and past their own retention), and
/// their journals.
pub(super) fn purge_batch(
    conn: &Connection,
    clock: &dyn Clock,
    age: Duration,
    batch: usize,
) -> Result<usize, Fail> {
    let now = clock.now();
    let cutoff = format_utc(now.checked_sub(age).unwrap_or(UNIX_EPOCH));
    let now = format_utc(now);
    let batch = i64::try_from(batch).unwrap_or(i64::MAX);
    let keys: Vec<String> = conn
        .prepare_cached(PURGE_RETURNING)?
        .query_map(params![cutoff, now, batch], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut steps = conn.prepare_cached(PURGE_STEPS)?;
    for key in &keys {
        steps.execute([key])?;
    }
    Ok(keys.len())
}
