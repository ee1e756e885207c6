//! The tables of `PgDeadLetters`, and the step that brings a database of version 1 up to date.
//!
//! A new database gets version 1's tables and then every step, so a new database and an
//! upgraded one end with the same layout, and the upgrade runs wherever the tables are made.
//! Every step is idempotent (`IF NOT EXISTS`): a database whose version row says 1 but whose
//! tables were made again by hand goes through it safely.

use crate::sql::Schema;

/// The version of the layout this code writes, kept in `retry_core_schema`.
pub(super) const SCHEMA_VERSION: i32 = 2;

/// Version 1: pending letters only (acknowledging deleted them), and the redrive records.
const TABLES_V1: &str = "CREATE TABLE IF NOT EXISTS dead_letters (
    msg_id TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    original TEXT NOT NULL,
    reason TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    first_failed_at TEXT NOT NULL,
    last_failed_at TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('system', 'data')),
    error_type TEXT NOT NULL,
    idempotency_key TEXT,
    parked_at TEXT COLLATE \"C\" NOT NULL,
    first_failed_utc TEXT COLLATE \"C\" NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_first_failed ON dead_letters (first_failed_utc, msg_id);
CREATE TABLE IF NOT EXISTS dead_letter_redrives (
    run_id TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    started_utc TEXT COLLATE \"C\" NOT NULL,
    record TEXT NOT NULL
);
";

/// Version 1 to 2: what a letter records beyond its failure (source, redaction, the key's
/// scope and expiry, its history), resolving instead of deleting (`resolved_*`; `resolved_utc`
/// is `resolved_at` as `format_utc` text, what purging by age compares), leases decided on the
/// database's clock (`lease_until` is a `timestamptz`, compared with `now()`), the audit rows of
/// redrives (`seq`: the order they were first written), and the order redrive records were
/// written in.
///
/// Every pending letter of version 1 stays pending: the new columns start empty (`history`
/// `[]`, not redacted). The order index covers pending letters only (the pages and the oldest
/// pending letter read it); pages of one source have one of their own; purging reads resolved
/// rows by `resolved_utc`.
const UPGRADE_TO_2: &str = "ALTER TABLE dead_letters
    ADD COLUMN IF NOT EXISTS source TEXT COLLATE \"C\",
    ADD COLUMN IF NOT EXISTS redacted BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS key_scope TEXT,
    ADD COLUMN IF NOT EXISTS key_expires_at TEXT,
    ADD COLUMN IF NOT EXISTS history JSONB NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN IF NOT EXISTS resolved_at TEXT,
    ADD COLUMN IF NOT EXISTS resolved_by TEXT,
    ADD COLUMN IF NOT EXISTS resolved_run TEXT,
    ADD COLUMN IF NOT EXISTS resolved_utc TEXT COLLATE \"C\",
    ADD COLUMN IF NOT EXISTS lease_run TEXT COLLATE \"C\",
    ADD COLUMN IF NOT EXISTS lease_until TIMESTAMPTZ;
DROP INDEX IF EXISTS dead_letters_first_failed;
CREATE INDEX IF NOT EXISTS dead_letters_pending ON dead_letters (first_failed_utc, msg_id)
    WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_pending_source
    ON dead_letters (source, first_failed_utc, msg_id) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_resolved ON dead_letters (resolved_utc)
    WHERE resolved_at IS NOT NULL;
ALTER TABLE dead_letter_redrives ADD COLUMN IF NOT EXISTS seq BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE TABLE IF NOT EXISTS dead_letter_audit (
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    run_id TEXT COLLATE \"C\" NOT NULL,
    msg_id TEXT COLLATE \"C\" NOT NULL,
    who TEXT NOT NULL,
    target TEXT NOT NULL,
    at TEXT NOT NULL,
    outcome TEXT,
    finished_at TEXT,
    PRIMARY KEY (run_id, msg_id)
);
CREATE INDEX IF NOT EXISTS dead_letter_audit_seq ON dead_letter_audit (seq);
";

/// Whether `retry_core_schema` exists, and version 1's tables (what an upgrade starts from).
const TABLES_EXIST: &str = "SELECT to_regclass('retry_core_schema') IS NOT NULL, \
     to_regclass('dead_letters') IS NOT NULL AND to_regclass('dead_letter_redrives') IS NOT NULL";
const SELECT_VERSION: &str =
    "SELECT version FROM retry_core_schema WHERE component = 'dead_letters'";
const RECORD_VERSION: &str = "INSERT INTO retry_core_schema (component, version) VALUES ('dead_letters', $1) \
     ON CONFLICT (component) DO NOTHING";

pub(super) const SCHEMA: Schema = Schema {
    component: "dead_letters",
    version: SCHEMA_VERSION,
    tables: TABLES_V1,
    upgrades: &[UPGRADE_TO_2],
    tables_exist: TABLES_EXIST,
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};
