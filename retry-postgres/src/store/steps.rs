//! The step journal of [`PgStore`](super::PgStore): the table `inbox_steps`, one row per step of
//! a key's body (its output `NULL` while the step has only started), deleted with its key's row
//! (`ON DELETE CASCADE`), and its fenced write.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use crate::sql::{Db, Fail, retrying_conflicts};
use retry_core::idempotency::{Claim, StepEntry, StepState, StepWrite, StoreError};

/// Version 4 of the layout: the journal, purged with its key by the foreign key's cascade.
pub(super) const STEPS_TABLE: &str = "CREATE TABLE IF NOT EXISTS inbox_steps (
    msg_id TEXT NOT NULL REFERENCES inbox_log (msg_id) ON DELETE CASCADE,
    label TEXT NOT NULL,
    output TEXT,
    PRIMARY KEY (msg_id, label)
)";

const SELECT_STEPS: &str = "SELECT label, output FROM inbox_steps WHERE msg_id = $1";

// The step's row, written only while the claim holds its key (`$1` key, `$2` token): the
// claim's row is locked `FOR SHARE` by the same statement, so a takeover waits for it (and
// then sees the step), or went first (and the lock finds another token: nothing is written).
// A finished step keeps its first output; a `started` (`$4` NULL) never overwrites anything.
// Answers how many rows the claim held: 0 is fenced.
pub(super) const WRITE_STEP: &str = "WITH held AS (SELECT msg_id FROM inbox_log \
     WHERE msg_id = $1 AND token = $2 AND status = 'in_progress' FOR SHARE), \
     w AS (INSERT INTO inbox_steps (msg_id, label, output) SELECT msg_id, $3::text, $4::text FROM held \
     ON CONFLICT (msg_id, label) DO UPDATE SET output = excluded.output \
     WHERE inbox_steps.output IS NULL AND excluded.output IS NOT NULL RETURNING 1) \
     SELECT count(*) FROM held";

/// Every step journaled for `claim`'s key.
pub(super) async fn read_steps(db: &Db, claim: &Claim) -> Result<Vec<StepEntry>, StoreError> {
    let client = db.get().await.map_err(StoreError::Unavailable)?;
    let read: Result<Vec<StepEntry>, Fail<StoreError>> = async {
        let statement = client.prepare_cached(SELECT_STEPS).await?;
        let rows = client.query(&statement, &[&claim.key]).await?;
        rows.iter()
            .map(|row| {
                Ok(StepEntry {
                    label: row.try_get(0)?,
                    state: match row.try_get::<_, Option<String>>(1)? {
                        None => StepState::Started,
                        Some(output) => StepState::Finished(output),
                    },
                })
            })
            .collect()
    }
    .await;
    read.map_err(|e| db.fail(e, StoreError::Unavailable))
}

/// The parameters of [`WRITE_STEP`] but the key: the token (`None` when no row can hold it)
/// and the output (`None`: started).
pub(super) fn step_params<'a>(
    claim: &Claim,
    write: StepWrite<'a>,
) -> (Option<i64>, Option<&'a str>) {
    let output = match write {
        StepWrite::Started => None,
        StepWrite::Finished(output) => Some(output),
    };
    (i64::try_from(claim.token).ok(), output)
}

/// Journals `write` for the step `label`, in autocommit, if the claim still holds its key.
pub(super) async fn write_step(
    db: &Db,
    claim: &Claim,
    label: &str,
    write: StepWrite<'_>,
) -> Result<(), StoreError> {
    let (Some(token), output) = step_params(claim, write) else {
        return Err(StoreError::Fenced);
    };
    let client = db.get().await.map_err(StoreError::Unavailable)?;
    let params: [&(dyn ToSql + Sync); 4] = [&claim.key, &token, &label, &output];
    let held: Result<i64, Fail<StoreError>> = retrying_conflicts!(db, "write_step", async {
        let statement = client.prepare_cached(WRITE_STEP).await?;
        Ok(client.query_one(&statement, &params).await?.try_get(0)?)
    });
    match held.map_err(|e| db.fail(e, StoreError::Unavailable))? {
        0 => Err(StoreError::Fenced),
        _ => Ok(()),
    }
}
