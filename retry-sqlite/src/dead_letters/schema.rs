//! The layout of the dead-letter tables, and the upgrade of a file written by an older
//! retry-core.
//!
//! Version 1 kept pending letters only (acknowledging deleted the row) and overwrote a letter
//! parked again. Version 2 keeps every letter until it is resolved and purged: the columns of
//! the new letter fields, the merged history (a JSON array), the resolution and the redrive
//! lease; a table of audit rows (one per run and letter); and an insertion sequence for the
//! redrive records.
//!
//! Design notes:
//! - The shared plumbing (`sql.rs`) creates missing tables and records a new file's
//!   version, but does not upgrade: it leaves a version-1 file at version 1. So its batch
//!   ([`TABLES`]) holds only `CREATE TABLE IF NOT EXISTS` statements, which are no-ops on a
//!   version-1 file, and no index on a version-2 column (it would fail there). [`upgrade`] runs
//!   next, in a `BEGIN IMMEDIATE` transaction of its own that reads the version again: the
//!   `ALTER TABLE`s of version 1 → 2, then every index. Two processes opening a version-1 file
//!   at once take turns; the second finds version 2 and only sees that the indexes are there.
//! - Columns added by `ALTER TABLE` go at the end, so [`TABLES`] lists them in the same order:
//!   an upgraded file and a new one have the same layout.
//! - Pending rows are what pages, counts and redrives read: partial indexes `WHERE resolved_at
//!   IS NULL` keep resolved rows out of them, so a page is a range scan of the pending index in
//!   the page's order, and counting is a scan of an index rather than of the rows.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::sql::Schema;

/// The version of the layout this code writes, kept in `retry_core_schema`.
pub(super) const VERSION: i64 = 2;

/// The tables of a new file (version 2), created after the shared `retry_core_schema`.
const TABLES: &str = "CREATE TABLE IF NOT EXISTS dead_letters (
    msg_id TEXT NOT NULL PRIMARY KEY,
    original TEXT NOT NULL,
    reason TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    first_failed_at TEXT NOT NULL,
    last_failed_at TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('system', 'data')),
    error_type TEXT NOT NULL,
    idempotency_key TEXT,
    parked_at TEXT NOT NULL,
    first_failed_utc TEXT NOT NULL,
    source TEXT,
    redacted INTEGER NOT NULL DEFAULT 0 CHECK (redacted IN (0, 1)),
    key_scope TEXT,
    key_expires_at TEXT,
    history TEXT NOT NULL DEFAULT '[]',
    resolved_at TEXT,
    resolved_by TEXT,
    resolved_run TEXT,
    resolved_utc TEXT,
    lease_run TEXT,
    lease_until TEXT
);
CREATE TABLE IF NOT EXISTS dead_letter_redrives (
    run_id TEXT NOT NULL PRIMARY KEY,
    started_utc TEXT NOT NULL,
    record TEXT NOT NULL,
    seq INTEGER
);
CREATE TABLE IF NOT EXISTS dead_letter_audit (
    run_id TEXT NOT NULL,
    msg_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    who TEXT NOT NULL,
    target TEXT NOT NULL,
    at TEXT NOT NULL,
    outcome TEXT,
    finished_at TEXT,
    PRIMARY KEY (run_id, msg_id)
);
";

/// Version 1 → 2: the new columns (at the end, as in [`TABLES`]), the redrive records'
/// sequence in the order version 1 listed them, and the version. The version-1 index on every
/// row gives way to the partial indexes of [`INDEXES`].
const UPGRADE_FROM_1: &str = "ALTER TABLE dead_letters ADD COLUMN source TEXT;
ALTER TABLE dead_letters ADD COLUMN redacted INTEGER NOT NULL DEFAULT 0 CHECK (redacted IN (0, 1));
ALTER TABLE dead_letters ADD COLUMN key_scope TEXT;
ALTER TABLE dead_letters ADD COLUMN key_expires_at TEXT;
ALTER TABLE dead_letters ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
ALTER TABLE dead_letters ADD COLUMN resolved_at TEXT;
ALTER TABLE dead_letters ADD COLUMN resolved_by TEXT;
ALTER TABLE dead_letters ADD COLUMN resolved_run TEXT;
ALTER TABLE dead_letters ADD COLUMN resolved_utc TEXT;
ALTER TABLE dead_letters ADD COLUMN lease_run TEXT;
ALTER TABLE dead_letters ADD COLUMN lease_until TEXT;
DROP INDEX IF EXISTS dead_letters_first_failed;
ALTER TABLE dead_letter_redrives ADD COLUMN seq INTEGER;
UPDATE dead_letter_redrives SET seq = (
    SELECT count(*) FROM dead_letter_redrives AS earlier
    WHERE (earlier.started_utc, earlier.run_id)
        <= (dead_letter_redrives.started_utc, dead_letter_redrives.run_id)
);
UPDATE retry_core_schema SET version = 2 WHERE component = 'dead_letters';
";

/// Every index of version 2, on a new file and an upgraded one alike.
///
/// - `dead_letters_pending`: pages without a filter, the oldest pending letter.
/// - `dead_letters_pending_class`, `_source`: pages of one class or source (equality on the
///   first column, then the range of the order), and the counts by class.
/// - `dead_letters_resolved`: purging by resolution time, and the count of resolved letters.
/// - `dead_letters_leased`: the count of live leases.
/// - `dead_letter_redrives_seq`, `dead_letter_audit_seq`: listing in insertion order, and the
///   next sequence number (`max(seq)`) without a scan.
const INDEXES: &str = "CREATE INDEX IF NOT EXISTS dead_letters_pending
    ON dead_letters (first_failed_utc, msg_id) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_pending_class
    ON dead_letters (class, first_failed_utc, msg_id) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_pending_source
    ON dead_letters (source, first_failed_utc, msg_id) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_resolved
    ON dead_letters (resolved_utc) WHERE resolved_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS dead_letters_leased
    ON dead_letters (lease_until) WHERE resolved_at IS NULL AND lease_run IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS dead_letter_redrives_seq ON dead_letter_redrives (seq);
CREATE UNIQUE INDEX IF NOT EXISTS dead_letter_audit_seq ON dead_letter_audit (seq);
";

const SELECT_VERSION: &str =
    "SELECT version FROM retry_core_schema WHERE component = 'dead_letters'";
const RECORD_VERSION: &str = "INSERT INTO retry_core_schema (component, version) VALUES ('dead_letters', ?1) \
     ON CONFLICT(component) DO NOTHING";

/// What the shared plumbing creates and checks: the tables of a new file, and a version newer
/// than [`VERSION`] refused.
pub(super) const SCHEMA: Schema = Schema {
    store: "SqliteDeadLetters",
    component: "dead_letters",
    version: VERSION,
    tables: TABLES,
    // Upgraded by [`upgrade`] instead: its indexes need the upgraded columns.
    upgrades: &[],
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};

/// Brings a file the plumbing has prepared to [`VERSION`]: upgrades a version-1 layout and
/// creates the indexes that are missing, in one `BEGIN IMMEDIATE` transaction.
pub(super) fn upgrade(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: Option<i64> = tx
        .query_row(SELECT_VERSION, [], |row| row.get(0))
        .optional()?;
    if version == Some(1) {
        tx.execute_batch(UPGRADE_FROM_1)?;
    }
    tx.execute_batch(INDEXES)?;
    tx.commit()
}
