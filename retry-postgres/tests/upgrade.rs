//! Opening the stores on a database of schema version 2 (times as RFC 3339 / `format_utc` text,
//! JSON as text) upgrades it to version 3 (`timestamptz`, `jsonb`) in one transaction: every
//! letter, audit row, redrive record and idempotency key written by the version 2 code reads
//! back as it was written; an upgrade that fails changes nothing; opening again changes
//! nothing; instances opening at once upgrade once.
//!
//! The version 2 layout and rows are written as that code wrote them: its `CREATE TABLE` and
//! upgrade statements and its `INSERT`s, copied below, and the text encodings of
//! `retry_core::dlq::row` (`LetterRow`, `record_row`) and `retry_core::time` that it bound.
//!
//! They need a server: built with feature `server-tests` only; without `DATABASE_URL` each test
//! fails, saying so.
#![cfg(feature = "server-tests")]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use retry_core::dlq::row::{LetterRow, record_row};
use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterStore, Failure, FailureClass, Page, RedriveRecord, Resolution,
};
use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, StepEntry, StepState, StepWrite,
};
use retry_core::time::{ManualClock, format_rfc3339, format_utc, parse_rfc3339, parse_utc};
use retry_postgres::{PgDeadLetters, PgStore};
use serde_json::json;
use tokio_postgres::Client;

use common::Schema;

// ---- version 2, as its code wrote it ----

/// `retry_core_schema`, then `PgStore`'s version 1 table and its step to version 2, verbatim.
const INBOX_V2: &str = "
CREATE TABLE IF NOT EXISTS retry_core_schema (
    component TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS inbox_log (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL,
    response TEXT,
    created_at TEXT COLLATE \"C\" NOT NULL,
    fingerprint TEXT,
    token BIGINT NOT NULL,
    lease_until TEXT COLLATE \"C\" NOT NULL,
    expires_at TEXT COLLATE \"C\" NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_log_created_at ON inbox_log (created_at);
ALTER TABLE inbox_log ADD COLUMN IF NOT EXISTS in_transaction BOOLEAN NOT NULL DEFAULT false;
INSERT INTO retry_core_schema (component, version) VALUES ('inbox_log', 2);
";

/// `retry_core_schema`, then `PgDeadLetters`' version 1 tables and its step to version 2,
/// verbatim.
const DEAD_LETTERS_V2: &str = "
CREATE TABLE IF NOT EXISTS retry_core_schema (
    component TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS dead_letters (
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
ALTER TABLE dead_letters
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
INSERT INTO retry_core_schema (component, version) VALUES ('dead_letters', 2);
";

/// Version 2's `INSERT` of new letters, verbatim: one array per column.
const INSERT_LETTERS_V2: &str = "INSERT INTO dead_letters (msg_id, original, reason, attempts, \
     first_failed_at, last_failed_at, trace_id, class, error_type, idempotency_key, source, \
     redacted, key_scope, key_expires_at, history, resolved_at, resolved_by, resolved_run, \
     resolved_utc, first_failed_utc, parked_at) \
     SELECT u.msg_id, u.original, u.reason, u.attempts, u.first_failed_at, u.last_failed_at, \
     u.trace_id, u.class, u.error_type, u.idempotency_key, u.source, u.redacted, u.key_scope, \
     u.key_expires_at, u.history::jsonb, u.resolved_at, u.resolved_by, u.resolved_run, \
     u.resolved_utc, u.first_failed_utc, $21 FROM \
     unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], \
     $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::bool[], $13::text[], \
     $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[]) \
     AS u(msg_id, original, reason, attempts, first_failed_at, last_failed_at, trace_id, \
     class, error_type, idempotency_key, source, redacted, key_scope, key_expires_at, history, \
     resolved_at, resolved_by, resolved_run, resolved_utc, first_failed_utc) \
     ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id";

/// Version 2's lease, verbatim but for what it returned.
const LEASE_V2: &str = "UPDATE dead_letters SET lease_run = $2, \
     lease_until = now() + $3::bigint * interval '1 microsecond' \
     WHERE msg_id = $1 AND resolved_at IS NULL \
     AND (lease_run IS NULL OR lease_run = $2 OR lease_until <= now()) RETURNING msg_id";

/// Version 2's audit row, verbatim.
const AUDIT_V2: &str = "INSERT INTO dead_letter_audit (run_id, msg_id, who, target, at, outcome, \
     finished_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (run_id, msg_id) DO UPDATE \
     SET who = excluded.who, target = excluded.target, at = excluded.at, \
     outcome = excluded.outcome, finished_at = excluded.finished_at";

/// Version 2's redrive record, verbatim.
const REDRIVE_V2: &str =
    "INSERT INTO dead_letter_redrives (run_id, started_utc, record) VALUES ($1, $2, $3)";

/// An `inbox_log` row as version 2 kept it: its times `format_utc` text, as its statements
/// computed them (`to_char(.., 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`).
const INBOX_ROW_V2: &str = "INSERT INTO inbox_log (msg_id, biz_key, status, response, created_at, \
     fingerprint, token, lease_until, expires_at, in_transaction) \
     VALUES ($1, $1, $2, $3, $4, $5, $6, $7, $8, $9)";

fn at(text: &str) -> SystemTime {
    parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not an RFC 3339 time"))
}

/// A client of `schema`'s own (its `search_path`).
async fn connect(schema: &Schema) -> Client {
    let (client, connection) = tokio_postgres::connect(&schema.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.into(),
        original: json!({"msg_id": msg_id, "amount": 10}),
        reason: "upstream 503 after 5 attempts".into(),
        attempts: 5,
        first_failed_at: at(first_failed_at),
        last_failed_at: at(first_failed_at),
        trace_id: "a1b2c3d4".into(),
        class: FailureClass::System,
        error_type: "FetchError".into(),
        idempotency_key: None,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

/// The letters version 2 holds: plain, with every optional field (history, the key's scope
/// and expiry, times finer than the microsecond), resolved by a run and by a person, leased,
/// and from before 2000 and before 1970. Pending ones in page order.
fn letters() -> (Vec<DeadLetter>, Vec<DeadLetter>) {
    let mut full = letter("M-full", "2026-08-18T18:00:00+00:00");
    full.original = json!({
        "z": 1,
        "a": {"nested": [1, 2.5, -3, 1e300, 18_446_744_073_709_551_615_u64, null, true]},
        "note": "naïve ✓ \"quoted\" \\ back\nslash 東京",
        "empty": {}
    });
    full.attempts = 7;
    full.last_failed_at = at("2026-08-19T02:12:47.123456789+09:00");
    full.class = FailureClass::Data;
    full.idempotency_key = Some("deposit:M-full".into());
    full.source = Some("payments::deposit".into());
    full.redacted = true;
    full.key_scope = Some("tenant-7".into());
    full.key_expires_at = Some(at("2026-08-26T02:11:03.5+09:00"));
    full.history = vec![
        Failure {
            at: at("2026-08-18T18:00:00Z"),
            reason: "first give-up".into(),
            trace_id: "t-1".into(),
        },
        Failure {
            at: at("2026-08-18T19:00:00.000000042Z"),
            reason: "redrive failed again: 503".into(),
            trace_id: "t-2".into(),
        },
    ];
    let mut by_run = letter("M-resolved-run", "2026-08-17T00:00:00Z");
    by_run.resolved =
        Some(Resolution::new("redrive", at("2026-08-20T09:00:00.25Z")).in_run("run-1"));
    let mut by_person = letter("M-resolved-person", "2026-08-16T00:00:00Z");
    by_person.resolved = Some(Resolution::new(
        "alice",
        at("2026-08-20T10:00:00.000000001Z"),
    ));
    let pending = vec![
        letter("M-epoch", "1969-07-20T20:17:40.000000001Z"),
        letter("M-early", "1999-12-31T23:59:59.999999999Z"),
        letter("M-plain", "2026-08-18T17:11:03+00:00"),
        full,
        letter("M-leased", "2026-08-19T00:00:00Z"),
    ];
    (pending, vec![by_run, by_person])
}

fn audit() -> Vec<AuditEntry> {
    let sent = at("2026-08-20T09:00:00Z");
    vec![
        AuditEntry::intent("run-1", "M-resolved-run", "alice", "deposit", sent)
            .finished("redriven", at("2026-08-20T09:00:01.000000007Z")),
        AuditEntry::intent("run-2", "M-leased", "bob", "deposit", sent),
    ]
}

fn record(run_id: &str, started_at: &str) -> RedriveRecord {
    RedriveRecord {
        run_id: run_id.into(),
        who: "alice".into(),
        filter: "class=system".into(),
        target: "deposit".into(),
        started_at: at(started_at),
        finished_at: at(started_at) + Duration::from_secs(2),
        limit: 10,
        rate_per_second: 5,
        selected: 1,
        succeeded: 1,
        failed: 0,
        skipped: 0,
        stopped: None,
    }
}

/// Redrive records in the order they were written; they read back in the order they started.
fn records() -> Vec<RedriveRecord> {
    vec![
        record("run-2", "2026-08-20T11:00:00Z"),
        record("run-1", "2026-08-20T09:00:00.000000003Z"),
    ]
}

/// Writes `letters` as version 2's `park` did: checked and encoded by `LetterRow`, then its
/// `INSERT`.
async fn park_v2(client: &Client, letters: &[DeadLetter]) {
    for letter in letters {
        let row = LetterRow::new(letter).unwrap();
        let resolved = row.resolved.as_ref();
        let parked_at = format_utc(SystemTime::now());
        let inserted = client
            .query(
                INSERT_LETTERS_V2,
                &[
                    &vec![row.msg_id.as_str()],
                    &vec![row.original.as_str()],
                    &vec![row.reason.as_str()],
                    &vec![row.attempts],
                    &vec![row.first_failed_at.as_str()],
                    &vec![row.last_failed_at.as_str()],
                    &vec![row.trace_id.as_str()],
                    &vec![row.class],
                    &vec![row.error_type.as_str()],
                    &vec![row.idempotency_key.as_deref()],
                    &vec![row.source.as_deref()],
                    &vec![row.redacted],
                    &vec![row.key_scope.as_deref()],
                    &vec![row.key_expires_at.as_deref()],
                    &vec![row.history.as_str()],
                    &vec![resolved.map(|r| r.at.as_str())],
                    &vec![resolved.map(|r| r.by.as_str())],
                    &vec![resolved.and_then(|r| r.run_id.as_deref())],
                    &vec![resolved.map(|r| r.at_utc.as_str())],
                    &vec![row.first_failed_utc.as_str()],
                    &parked_at,
                ],
            )
            .await
            .unwrap();
        assert_eq!(inserted.len(), 1, "{} parked", letter.msg_id);
    }
}

/// Version 2's dead-letter tables, with every kind of row.
async fn write_dead_letters_v2(client: &Client) {
    client.batch_execute(DEAD_LETTERS_V2).await.unwrap();
    let (pending, resolved) = letters();
    park_v2(client, &pending).await;
    park_v2(client, &resolved).await;
    let hour = i64::try_from(Duration::from_secs(3_600).as_micros()).unwrap();
    let leased = client
        .query(LEASE_V2, &[&"M-leased", &"run-2", &hour])
        .await
        .unwrap();
    assert_eq!(leased.len(), 1, "run-2 leases M-leased");
    for entry in audit() {
        let (at, finished_at) = (
            format_rfc3339(entry.at),
            entry.finished_at.map(format_rfc3339),
        );
        client
            .execute(
                AUDIT_V2,
                &[
                    &entry.run_id,
                    &entry.msg_id,
                    &entry.who,
                    &entry.target,
                    &at,
                    &entry.outcome,
                    &finished_at,
                ],
            )
            .await
            .unwrap();
    }
    for record in records() {
        let (run_id, started_utc, json) = record_row(&record).unwrap();
        client
            .execute(REDRIVE_V2, &[&run_id, &started_utc, &json])
            .await
            .unwrap();
    }
}

/// The time the idempotency checks decide at.
const NOW: &str = "2026-08-20T09:00:00Z";

/// A stored response as the handler's serializer wrote it: its spacing, key order and
/// trailing text are kept byte for byte (`jsonb` would keep none of them).
const RESPONSE: &str = "{\"receipt\": 7,  \"note\":\"Zürich \\\"Süd\\\"\", \"a\": 1}\n";

/// One `inbox_log` row of version 2: `(key, status, response, fingerprint, token, created_at,
/// lease_until, expires_at, in_transaction)`, its times `format_utc` text.
type InboxRow = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    i64,
    String,
    String,
    String,
    bool,
);

/// A key in each state: done with a stored response, kept failed, in flight with a live lease,
/// in flight with a lease run out, released, and held by a transaction that is gone.
fn inbox_rows() -> Vec<InboxRow> {
    let now = at(NOW);
    let utc = |offset: i64| {
        let d = Duration::from_secs(offset.unsigned_abs());
        format_utc(if offset < 0 { now - d } else { now + d })
    };
    let day = 86_400;
    vec![
        (
            "k-done",
            "done",
            Some(RESPONSE),
            Some("fp-1"),
            1,
            utc(-3_600),
            utc(-3_570),
            utc(29 * day),
            false,
        ),
        (
            "k-failed",
            "failed",
            Some("card declined: \"insufficient funds\"\n"),
            None,
            1,
            utc(-60),
            utc(-30),
            utc(day),
            false,
        ),
        (
            "k-live",
            "in_progress",
            None,
            None,
            1,
            utc(-10),
            utc(20),
            utc(day),
            false,
        ),
        (
            "k-expired",
            "in_progress",
            None,
            None,
            3,
            utc(-60),
            utc(-1),
            utc(day),
            false,
        ),
        (
            "k-released",
            "released",
            None,
            None,
            2,
            utc(-60),
            utc(-30),
            utc(day),
            false,
        ),
        (
            "k-tx",
            "in_progress",
            None,
            None,
            1,
            utc(-5),
            utc(3_600),
            utc(day),
            true,
        ),
    ]
}

async fn write_inbox_v2(client: &Client) {
    client.batch_execute(INBOX_V2).await.unwrap();
    for (key, status, response, fingerprint, token, created, lease, expires, in_tx) in inbox_rows()
    {
        client
            .execute(
                INBOX_ROW_V2,
                &[
                    &key,
                    &status,
                    &response,
                    &created,
                    &fingerprint,
                    &token,
                    &lease,
                    &expires,
                    &in_tx,
                ],
            )
            .await
            .unwrap();
    }
}

fn request<'a>(key: &'a str, fingerprint: Option<&'a str>) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(86_400),
    }
}

/// The versions, the columns and their types, and every row with the transaction that last
/// wrote it (`xmin`): what an upgrade, or an open that changes nothing, is checked against.
async fn snapshot(client: &Client) -> Vec<String> {
    let mut all = Vec::new();
    let queries = [
        "SELECT component || ' ' || version FROM retry_core_schema ORDER BY 1",
        "SELECT table_name || '.' || column_name || ' ' || data_type FROM information_schema.columns \
         WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
        "SELECT indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = current_schema() \
         ORDER BY 1",
    ];
    for query in queries {
        for row in client.query(query, &[]).await.unwrap() {
            all.push(row.get::<_, String>(0));
        }
    }
    for table in [
        "inbox_log",
        "inbox_steps",
        "dead_letters",
        "dead_letter_audit",
        "dead_letter_redrives",
    ] {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .unwrap()
            .get(0);
        if exists {
            let rows = client
                .query(
                    &format!(
                        "SELECT t.xmin::text || ' ' || t::text FROM {table} t ORDER BY t::text"
                    ),
                    &[],
                )
                .await
                .unwrap();
            all.extend(
                rows.iter()
                    .map(|row| format!("{table}: {}", row.get::<_, String>(0))),
            );
        }
    }
    all
}

/// `table.column`'s type, as `information_schema` names it; `None` when there is no such
/// column.
async fn column_type(client: &Client, table: &str, column: &str) -> Option<String> {
    client
        .query_opt(
            "SELECT data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2",
            &[&table, &column],
        )
        .await
        .unwrap()
        .map(|row| row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_2_upgrades_to_typed_columns_and_every_letter_and_key_reads_back() {
    let schema = Schema::new("upgrade", 0).await;
    let client = connect(&schema).await;
    write_dead_letters_v2(&client).await;
    write_inbox_v2(&client).await;

    let store = PgDeadLetters::connect(&schema.url).await.unwrap();
    let clock = Arc::new(ManualClock::new(at(NOW)));
    let inbox = PgStore::connect(&schema.url)
        .await
        .unwrap()
        .with_clock(clock.clone());

    // The layout: version 3, times `timestamptz`, JSON `jsonb`, no text twins.
    let versions: Vec<(String, i32)> = client
        .query(
            "SELECT component, version FROM retry_core_schema ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        versions,
        [("dead_letters".to_owned(), 3), ("inbox_log".to_owned(), 4)]
    );
    let timestamptz = Some("timestamp with time zone".to_owned());
    let jsonb = Some("jsonb".to_owned());
    let text = Some("text".to_owned());
    for (table, column, expected) in [
        ("dead_letters", "first_failed_at", &timestamptz),
        ("dead_letters", "last_failed_at", &timestamptz),
        ("dead_letters", "key_expires_at", &timestamptz),
        ("dead_letters", "resolved_at", &timestamptz),
        ("dead_letters", "parked_at", &timestamptz),
        ("dead_letters", "lease_until", &timestamptz),
        ("dead_letters", "original", &jsonb),
        ("dead_letters", "history", &jsonb),
        ("dead_letter_audit", "at", &timestamptz),
        ("dead_letter_audit", "finished_at", &timestamptz),
        ("dead_letter_redrives", "started_at", &timestamptz),
        ("dead_letter_redrives", "record", &jsonb),
        ("inbox_steps", "output", &text),
        ("inbox_log", "created_at", &timestamptz),
        ("inbox_log", "lease_until", &timestamptz),
        ("inbox_log", "expires_at", &timestamptz),
        ("inbox_log", "response", &text),
        ("dead_letters", "first_failed_utc", &None),
        ("dead_letters", "resolved_utc", &None),
        ("dead_letter_redrives", "started_utc", &None),
    ] {
        assert_eq!(
            &column_type(&client, table, column).await,
            expected,
            "{table}.{column}"
        );
    }

    // Every letter reads back as it was parked, times to the nanosecond.
    let (pending, resolved) = letters();
    for letter in pending.iter().chain(&resolved) {
        assert_eq!(
            store.get(&letter.msg_id).await.unwrap().as_ref(),
            Some(letter),
            "{}",
            letter.msg_id
        );
    }
    assert_eq!(store.page(&Page::first(10)).await.unwrap(), pending);
    let after_two = Page::first(2).next_after(&pending[1]);
    assert_eq!(store.page(&after_two).await.unwrap(), pending[2..4]);
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (
            stats.pending,
            stats.system,
            stats.data,
            stats.resolved,
            stats.leased
        ),
        (5, 4, 1, 2, 1),
        "{stats:?}"
    );
    assert_eq!(
        stats.oldest_first_failed_at,
        Some(pending[0].first_failed_at)
    );
    assert_eq!(store.audit_rows(None).await.unwrap(), audit());
    let mut in_start_order = records();
    in_start_order.reverse();
    assert_eq!(store.redrives().await.unwrap(), in_start_order);
    // The lease run-2 took under version 2 still holds, on the database's clock.
    assert_eq!(
        store
            .lease("M-leased", "run-3", Duration::from_secs(60))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .lease("M-leased", "run-2", Duration::from_secs(60))
            .await
            .unwrap()
            .as_ref(),
        pending.iter().find(|l| l.msg_id == "M-leased")
    );
    // Purging by age compares the typed column: the letter resolved at 09:00:00.25 goes, the
    // one resolved at 10:00 stays.
    assert_eq!(
        store
            .purge_resolved(at("2026-08-20T09:30:00Z"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.get("M-resolved-run").await.unwrap(), None);
    assert_eq!(
        store.get("M-resolved-person").await.unwrap().as_ref(),
        Some(&resolved[1])
    );

    // Every key's times read back as written, now as `timestamptz`.
    for (key, _, _, _, _, created, lease, expires, _) in inbox_rows() {
        let row = client
            .query_one(
                "SELECT created_at, lease_until, expires_at FROM inbox_log WHERE msg_id = $1",
                &[&key],
            )
            .await
            .unwrap();
        let read: (SystemTime, SystemTime, SystemTime) = (row.get(0), row.get(1), row.get(2));
        let written = [created, lease, expires].map(|t| parse_utc(&t).unwrap());
        assert_eq!(<[SystemTime; 3]>::from(read), written, "{key}");
    }
    // And every key answers as version 2 would have.
    assert_eq!(
        inbox.claim(&request("k-done", Some("fp-1"))).await.unwrap(),
        ClaimOutcome::Done(RESPONSE.to_owned())
    );
    assert_eq!(
        inbox.claim(&request("k-done", Some("fp-2"))).await.unwrap(),
        ClaimOutcome::KeyReused
    );
    assert_eq!(
        inbox.claim(&request("k-failed", None)).await.unwrap(),
        ClaimOutcome::Failed("card declined: \"insufficient funds\"\n".to_owned())
    );
    assert_eq!(
        inbox.claim(&request("k-live", None)).await.unwrap(),
        ClaimOutcome::InProgress
    );
    let claimed = |key: &str, token| {
        ClaimOutcome::Claimed(Claim {
            key: key.to_owned(),
            token,
        })
    };
    assert_eq!(
        inbox.claim(&request("k-expired", None)).await.unwrap(),
        claimed("k-expired", 4),
        "a lease that ran out is taken over"
    );
    // The journal of version 4, on a key version 2 wrote.
    let taken = Claim {
        key: "k-expired".to_owned(),
        token: 4,
    };
    inbox
        .write_step(&taken, "charge", StepWrite::Finished("\"ch_1\""))
        .await
        .unwrap();
    assert_eq!(
        inbox.read_steps(&taken).await.unwrap(),
        [StepEntry {
            label: "charge".to_owned(),
            state: StepState::Finished("\"ch_1\"".to_owned())
        }]
    );
    assert_eq!(
        inbox.claim(&request("k-released", None)).await.unwrap(),
        claimed("k-released", 3)
    );
    assert_eq!(
        inbox.claim(&request("k-tx", None)).await.unwrap(),
        claimed("k-tx", 2),
        "the transaction that held it is gone"
    );
    // The live lease runs out 20 s from now, on the (injected) clock.
    clock.advance(Duration::from_secs(21));
    assert_eq!(
        inbox.claim(&request("k-live", None)).await.unwrap(),
        claimed("k-live", 2)
    );
    drop((store, inbox));
    schema.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_version_3_again_changes_nothing() {
    let schema = Schema::new("upgrade_again", 0).await;
    let client = connect(&schema).await;
    write_dead_letters_v2(&client).await;
    write_inbox_v2(&client).await;
    drop(PgDeadLetters::connect(&schema.url).await.unwrap());
    drop(PgStore::connect(&schema.url).await.unwrap());
    let upgraded = snapshot(&client).await;
    assert!(
        upgraded.contains(&"dead_letters 3".to_owned()),
        "{upgraded:#?}"
    );
    drop(PgDeadLetters::connect(&schema.url).await.unwrap());
    drop(PgStore::connect(&schema.url).await.unwrap());
    // Not a row written again (`xmin` included), not a column or an index changed.
    assert_eq!(snapshot(&client).await, upgraded);
    schema.drop_all().await;
}

/// Version 3's step, verbatim, and its version.
const INBOX_V3: &str = "
ALTER TABLE inbox_log
    ALTER COLUMN created_at TYPE timestamptz USING created_at::text::timestamptz,
    ALTER COLUMN lease_until TYPE timestamptz USING lease_until::text::timestamptz,
    ALTER COLUMN expires_at TYPE timestamptz USING expires_at::text::timestamptz;
UPDATE retry_core_schema SET version = 3 WHERE component = 'inbox_log';
";

/// A database at version 3 gets the step journal (version 4) when opened, in one transaction:
/// every key reads back as before, steps are journaled on its keys, and a purged key takes its
/// journal with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_3_upgrades_to_the_step_journal() {
    let schema = Schema::new("upgrade_steps", 0).await;
    let client = connect(&schema).await;
    write_inbox_v2(&client).await;
    client.batch_execute(INBOX_V3).await.unwrap();
    let before = client
        .query("SELECT t::text FROM inbox_log t ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>();

    let clock = Arc::new(ManualClock::new(at(NOW)));
    let inbox = PgStore::connect(&schema.url)
        .await
        .unwrap()
        .with_clock(clock.clone());
    let version: i32 = client
        .query_one(
            "SELECT version FROM retry_core_schema WHERE component = 'inbox_log'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 4);
    let after = client
        .query("SELECT t::text FROM inbox_log t ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>();
    assert_eq!(after, before, "the keys are untouched");
    assert_eq!(
        inbox.claim(&request("k-done", Some("fp-1"))).await.unwrap(),
        ClaimOutcome::Done(RESPONSE.to_owned())
    );

    let ClaimOutcome::Claimed(claim) = inbox.claim(&request("k-released", None)).await.unwrap()
    else {
        panic!("a released key is claimed again")
    };
    inbox
        .write_step(&claim, "ride", StepWrite::Started)
        .await
        .unwrap();
    assert_eq!(inbox.read_steps(&claim).await.unwrap().len(), 1);
    inbox.complete(&claim, "\"ok\"").await.unwrap();
    // Past every row's retention: the purge deletes the keys, and the journal with them.
    clock.advance(Duration::from_secs(400 * 86_400));
    inbox
        .purge_older_than(Duration::from_secs(1))
        .await
        .unwrap();
    let steps: i64 = client
        .query_one("SELECT count(*) FROM inbox_steps", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(steps, 0, "purged with its key");
    drop(inbox);
    schema.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_upgrade_leaves_version_2_as_it_was() {
    let schema = Schema::new("upgrade_fails", 0).await;
    let client = connect(&schema).await;
    write_dead_letters_v2(&client).await;
    write_inbox_v2(&client).await;
    // Rows version 2 could hold that version 3's types cannot: `\u0000` in JSON text (`jsonb`
    // refuses it) in the last letter, and a time that is no time in the last key, so that each
    // upgrade fails after its first statements ran.
    client
        .batch_execute(
            "UPDATE dead_letters SET original = '{\"note\": \"nul \\u0000\"}' WHERE msg_id = 'M-resolved-person';
             UPDATE inbox_log SET expires_at = 'whenever' WHERE msg_id = 'k-tx'",
        )
        .await
        .unwrap();
    let before = snapshot(&client).await;

    let error = PgDeadLetters::connect(&schema.url).await.unwrap_err();
    let why = retry_core::error_chain(&error).to_string();
    assert!(why.contains("\\u0000"), "{why}");
    let error = PgStore::connect(&schema.url).await.unwrap_err();
    let why = retry_core::error_chain(&error).to_string();
    assert!(why.contains("whenever"), "{why}");

    // Version 2 still, every column of its type, every row untouched.
    assert_eq!(snapshot(&client).await, before);
    assert_eq!(
        column_type(&client, "dead_letters", "first_failed_utc")
            .await
            .as_deref(),
        Some("text")
    );
    schema.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_opening_at_once_upgrade_once() {
    let schema = Schema::new("upgrade_together", 0).await;
    let client = connect(&schema).await;
    write_dead_letters_v2(&client).await;
    write_inbox_v2(&client).await;
    let url = Arc::new(schema.url.clone());
    let mut opening = Vec::new();
    for _ in 0..4 {
        let letters_url = url.clone();
        opening.push(tokio::spawn(async move {
            PgDeadLetters::connect(&letters_url)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }));
        let inbox_url = url.clone();
        opening.push(tokio::spawn(async move {
            PgStore::connect(&inbox_url)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }));
    }
    for opened in opening {
        assert_eq!(opened.await.unwrap(), Ok(()));
    }
    let store = PgDeadLetters::connect(&schema.url).await.unwrap();
    let (pending, resolved) = letters();
    for letter in pending.iter().chain(&resolved) {
        assert_eq!(
            store.get(&letter.msg_id).await.unwrap().as_ref(),
            Some(letter)
        );
    }
    let inbox = PgStore::connect(&schema.url).await.unwrap();
    assert_eq!(
        inbox.claim(&request("k-done", Some("fp-1"))).await.unwrap(),
        ClaimOutcome::Done(RESPONSE.to_owned())
    );
    drop((store, inbox));
    schema.drop_all().await;
}
