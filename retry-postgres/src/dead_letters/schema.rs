//! The tables of `PgDeadLetters`, and the steps that bring a database of an earlier version up
//! to date.
//!
//! A new database gets version 1's tables and then every step, so a new database and an
//! upgraded one end with the same layout, and the upgrade runs wherever the tables are made.
//! The plumbing runs the steps a database needs in the transaction that reads its version,
//! under the migration lock: an upgrade that fails anywhere leaves the database as it was.

use crate::sql::Schema;

/// The version of the layout this code writes, kept in `retry_core_schema`.
pub(super) const SCHEMA_VERSION: i32 = 3;

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

// `micros!("column")`: a version 2 time column (RFC 3339 text, up to nine digits of fraction)
// as `timestamptz`, its fraction cut (not rounded) to the microsecond; `nanos!("column")`: the
// nanoseconds cut, 0 to 999 (the digits after the sixth, padded). `::text` first, so that both
// read a column that is `timestamptz` already (no seventh digit) as well.
macro_rules! micros {
    ($column:literal) => {
        concat!(
            "regexp_replace(",
            $column,
            "::text, '([.][0-9]{6})[0-9]+', '\\1')::timestamptz"
        )
    };
}
macro_rules! nanos {
    ($column:literal) => {
        concat!(
            "COALESCE(rpad(substring(",
            $column,
            "::text FROM '[.][0-9]{6}([0-9]{1,3})'), 3, '0')::smallint, 0)"
        )
    };
}
// `typed!("column")`: `ALTER COLUMN` of a version 2 time column to `timestamptz` ([`micros`]).
macro_rules! typed {
    ($column:literal) => {
        concat!(
            "ALTER COLUMN ",
            $column,
            " TYPE timestamptz USING ",
            micros!($column)
        )
    };
}
// `seventh!("column")`: whether a version 2 time column holds a time finer than the microsecond.
macro_rules! seventh {
    ($column:literal) => {
        concat!($column, "::text ~ '[.][0-9]{7}'")
    };
}

/// Version 2 to 3: times are `timestamptz` and JSON is `jsonb`, so the server orders, compares
/// and checks them as what they are, and SQL reads them without parsing text. The `_utc` text
/// columns that ordering and purging compared (`first_failed_utc`, `resolved_utc`) go: the
/// typed columns order and compare themselves, and the indexes are made again on them.
///
/// `timestamptz` holds microseconds, and a letter reads back exactly as it was parked (the
/// conformance suite parks a time to the nanosecond; letters imported from JSON Lines can carry
/// one): the nanoseconds below the microsecond of each time a letter or an audit row carries
/// are a `_ns` column of their own (`first_failed_ns`, ...), 0 for every time the library takes
/// from its clock (it cuts them to the millisecond). They are a remainder, never a copy of the
/// time, and order only letters that failed first within one microsecond.
///
/// `original`, `record` and `history` (which version 2 made `jsonb` already) are `jsonb`: they
/// are JSON by type, and `jsonb` keeps values, not text (key order and spacing are its own),
/// which is what a letter's `original` compares as. `inbox_log.response` stays `text`: see
/// `PgStore`'s schema.
///
/// A row whose text does not read as its type (a time or JSON that version 2 could not have
/// written, such as a NUL in JSON, which `jsonb` cannot hold) fails the cast, and with it the
/// whole upgrade: the database stays at version 2, every row as it was.
const UPGRADE_TO_3: &str = concat!(
    "DROP INDEX IF EXISTS dead_letters_pending;
DROP INDEX IF EXISTS dead_letters_pending_source;
DROP INDEX IF EXISTS dead_letters_resolved;
ALTER TABLE dead_letters
    ADD COLUMN IF NOT EXISTS first_failed_ns SMALLINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_failed_ns SMALLINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS key_expires_ns SMALLINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS resolved_ns SMALLINT NOT NULL DEFAULT 0;
UPDATE dead_letters SET first_failed_ns = ",
    nanos!("first_failed_at"),
    ", last_failed_ns = ",
    nanos!("last_failed_at"),
    ", key_expires_ns = ",
    nanos!("key_expires_at"),
    ", resolved_ns = ",
    nanos!("resolved_at"),
    " WHERE ",
    seventh!("first_failed_at"),
    " OR ",
    seventh!("last_failed_at"),
    " OR ",
    seventh!("key_expires_at"),
    " OR ",
    seventh!("resolved_at"),
    ";
ALTER TABLE dead_letters
    DROP COLUMN IF EXISTS first_failed_utc,
    DROP COLUMN IF EXISTS resolved_utc,
    ALTER COLUMN original TYPE jsonb USING original::text::jsonb,
    ",
    typed!("first_failed_at"),
    ",
    ",
    typed!("last_failed_at"),
    ",
    ",
    typed!("key_expires_at"),
    ",
    ",
    typed!("resolved_at"),
    ",
    ALTER COLUMN parked_at TYPE timestamptz USING parked_at::text::timestamptz;
CREATE INDEX IF NOT EXISTS dead_letters_pending
    ON dead_letters (first_failed_at, first_failed_ns, msg_id) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_pending_source
    ON dead_letters (source, first_failed_at, first_failed_ns, msg_id) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_resolved ON dead_letters (resolved_at)
    WHERE resolved_at IS NOT NULL;
ALTER TABLE dead_letter_audit
    ADD COLUMN IF NOT EXISTS at_ns SMALLINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS finished_ns SMALLINT NOT NULL DEFAULT 0;
UPDATE dead_letter_audit SET at_ns = ",
    nanos!("at"),
    ", finished_ns = ",
    nanos!("finished_at"),
    " WHERE ",
    seventh!("at"),
    " OR ",
    seventh!("finished_at"),
    ";
ALTER TABLE dead_letter_audit
    ",
    typed!("at"),
    ",
    ",
    typed!("finished_at"),
    ";
ALTER TABLE dead_letter_redrives RENAME COLUMN started_utc TO started_at;
ALTER TABLE dead_letter_redrives
    ALTER COLUMN started_at TYPE timestamptz USING started_at::text::timestamptz,
    ALTER COLUMN record TYPE jsonb USING record::text::jsonb;
"
);

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
    upgrades: &[UPGRADE_TO_2, UPGRADE_TO_3],
    tables_exist: TABLES_EXIST,
    select_version: SELECT_VERSION,
    record_version: RECORD_VERSION,
};
