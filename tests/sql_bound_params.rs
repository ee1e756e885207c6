//! SQL only through bound parameters: keys, payloads and letters full of SQL metacharacters
//! (`'; DROP TABLE inbox_log; --`, quotes, backslashes, `%`, `_`, comments, NUL, any
//! Unicode) go into `SqliteStore` and `SqliteDeadLetters` and come back byte for byte, read
//! through the stores and straight from the tables, and every table is still there afterwards.
//! (Every statement in the library is a constant with `?N` placeholders; the only SQL built at
//! run time joins constants: the schema table and a store's own tables, and a dead-letter
//! page's `AND class = ?` / `AND source = ?` pieces.)

use std::collections::BTreeSet;
use std::path::Path;

use proptest::prelude::*;
use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, FailureClass, Page, RedriveRecord,
    Resolution,
};
use retry_core::idempotency::{Begun, Settings, begin_call};
use retry_sqlite::SqliteDeadLetters;
use retry_sqlite::SqliteStore;
use serde_json::Value;

use crate::tempdir;

use tempdir::TempDir;

use crate::runtime;

use runtime::RUNTIME;

/// What an attacker would put in a key or a payload, whole or mixed into other text.
const PAYLOADS: [&str; 13] = [
    "'; DROP TABLE inbox_log; --",
    "'; DROP TABLE dead_letters; --",
    "\"; DELETE FROM retry_core_schema; --",
    "' OR '1'='1",
    "') ON CONFLICT DO NOTHING; --",
    "x'; UPDATE inbox_log SET status = 'done' WHERE '1'='1",
    "\\'; ATTACH DATABASE '/tmp/pwn' AS pwn; --",
    "/* comment */ SELECT 1",
    "?1 ?2 :name @p $1",
    "%_%' ESCAPE '\\",
    "Robert'); DROP TABLE dead_letter_redrives;--",
    "\u{2019}; \u{ff07} \u{1f4a3} \u{202e}",
    "nul\0'; --\0",
];

/// Hostile text: a known payload, SQL punctuation and any character (NUL included), or a mix.
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop::sample::select(&PAYLOADS[..]).prop_map(str::to_owned),
        "[-'\";\\\\%_/*()=?:@$ a-zA-Z0-9]{0,16}",
        "[\u{0}-\u{10ffff}]{0,8}",
    ];
    prop::collection::vec(piece, 1..4).prop_map(|pieces| pieces.concat())
}

/// The tables SQLite holds in the file at `path`.
fn tables(path: &Path) -> BTreeSet<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap();
    statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

#[test]
fn idempotency_keys_and_responses_are_bound_not_spliced() {
    let dir = TempDir::new("sql-bound-inbox");
    let path = dir.file("inbox.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    let expected_tables = set(&["inbox_log", "inbox_steps", "retry_core_schema"]);
    assert_eq!(tables(&path), expected_tables);
    let raw = rusqlite::Connection::open(&path).unwrap();
    let stored = std::cell::Cell::new(0i64);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(48));
    runner
        .run(
            &(hostile(), hostile(), hostile(), hostile()),
            |(key, biz_key, fingerprint, response)| {
                // Unique per case, so an earlier case's row is never found instead.
                stored.set(stored.get() + 1);
                let key = format!("{}:{key}", stored.get());
                let mut call = Settings::new(key.clone(), "sql_bound_params");
                call.biz_key = Some(biz_key.clone());
                call.fingerprint = Some(fingerprint.clone());
                RUNTIME.block_on(async {
                    match begin_call(&store, &call).await.unwrap() {
                        Begun::Claimed(held) => held.complete(&response).await.unwrap(),
                        Begun::Stored(found) => panic!("{key:?} was already stored: {found:?}"),
                    }
                    match begin_call(&store, &call).await.unwrap() {
                        Begun::Stored(found) => assert_eq!(found, response, "{key:?}"),
                        Begun::Claimed(_) => panic!("{key:?} was not stored"),
                    }
                });
                let row: (String, String, Option<String>, Option<String>, String) = raw
                    .query_row(
                        "SELECT msg_id, biz_key, fingerprint, response, status FROM inbox_log \
                         WHERE msg_id = ?1",
                        [&key],
                        |row| {
                            Ok((
                                row.get(0)?,
                                row.get(1)?,
                                row.get(2)?,
                                row.get(3)?,
                                row.get(4)?,
                            ))
                        },
                    )
                    .unwrap();
                prop_assert_eq!(
                    row,
                    (
                        key,
                        biz_key,
                        Some(fingerprint),
                        Some(response),
                        "done".to_owned()
                    )
                );
                let rows: i64 = raw
                    .query_row("SELECT count(*) FROM inbox_log", [], |row| row.get(0))
                    .unwrap();
                prop_assert_eq!(rows, stored.get(), "a row appeared or vanished");
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(tables(&path), expected_tables);
}

fn letter(msg_id: String, texts: &[String; 8], original: Value) -> DeadLetter {
    let [reason, trace_id, error_type, key, _, source, key_scope, _] = texts.clone();
    DeadLetter {
        msg_id,
        original,
        reason,
        attempts: 3,
        first_failed_at: instant("2026-08-19T02:11:03+09:00"),
        last_failed_at: instant("2026-08-19T02:12:47+09:00"),
        trace_id,
        class: FailureClass::Data,
        error_type,
        idempotency_key: Some(key),
        source: Some(source),
        redacted: false,
        key_scope: Some(key_scope),
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

#[test]
fn dead_letters_and_redrive_records_are_bound_not_spliced() {
    let dir = TempDir::new("sql-bound-dlq");
    let path = dir.file("dlq.sqlite3");
    let letters = SqliteDeadLetters::open(&path).unwrap();
    let expected_tables = set(&[
        "dead_letter_audit",
        "dead_letter_redrives",
        "dead_letters",
        "retry_core_schema",
    ]);
    assert_eq!(tables(&path), expected_tables);
    let raw = rusqlite::Connection::open(&path).unwrap();
    let cases = std::cell::Cell::new(0u32);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
    runner
        .run(
            &(hostile(), prop::array::uniform8(hostile())),
            |(msg_id, texts)| {
                cases.set(cases.get() + 1);
                let case = cases.get();
                let msg_id = format!("{case}:{msg_id}");
                let original =
                    serde_json::json!({ texts[4].clone(): [texts[0].clone(), msg_id.clone()] });
                let letter = letter(msg_id.clone(), &texts, original);
                let run_id = format!("{case}:{}", texts[0]);
                let record = RedriveRecord {
                    run_id: run_id.clone(),
                    who: texts[1].clone(),
                    filter: texts[2].clone(),
                    target: texts[3].clone(),
                    started_at: instant(&format!("2026-08-20T09:{:02}:00+00:00", case % 60)),
                    finished_at: instant("2026-08-20T10:00:00+00:00"),
                    limit: 10,
                    rate_per_second: 1,
                    selected: 1,
                    succeeded: 0,
                    failed: 1,
                    skipped: 0,
                    stopped: Some(texts[4].clone()),
                };
                let audit = AuditEntry::intent(
                    run_id.clone(),
                    msg_id.clone(),
                    texts[7].clone(),
                    texts[3].clone(),
                    instant("2026-08-20T09:00:00Z"),
                )
                .finished(texts[6].clone(), instant("2026-08-20T09:00:01Z"));
                let of_source = Page::first(10).source(letter.source.clone().unwrap());
                RUNTIME.block_on(async {
                    letters.park(&letter).await.unwrap();
                    assert_eq!(letters.get(&msg_id).await.unwrap().as_ref(), Some(&letter));
                    assert!(letters.page(&of_source).await.unwrap().contains(&letter));
                    letters.record_redrive(&record).await.unwrap();
                    assert!(letters.redrives().await.unwrap().contains(&record));
                    letters.audit(&audit).await.unwrap();
                    assert_eq!(
                        letters.audit_rows(Some(&run_id)).await.unwrap(),
                        std::slice::from_ref(&audit)
                    );
                });
                let row: (
                    String,
                    String,
                    String,
                    String,
                    Option<String>,
                    String,
                    String,
                ) = raw
                    .query_row(
                        "SELECT msg_id, reason, trace_id, error_type, idempotency_key, source, \
                         key_scope FROM dead_letters WHERE msg_id = ?1",
                        [&msg_id],
                        |row| {
                            Ok((
                                row.get(0)?,
                                row.get(1)?,
                                row.get(2)?,
                                row.get(3)?,
                                row.get(4)?,
                                row.get(5)?,
                                row.get(6)?,
                            ))
                        },
                    )
                    .unwrap();
                prop_assert_eq!(
                    row,
                    (
                        msg_id.clone(),
                        letter.reason.clone(),
                        letter.trace_id.clone(),
                        letter.error_type.clone(),
                        letter.idempotency_key.clone(),
                        texts[5].clone(),
                        texts[6].clone(),
                    )
                );
                // Every other case's letter is leased and resolved by a run of hostile name,
                // by a person of hostile name.
                if case.is_multiple_of(2) {
                    let resolution =
                        Resolution::new(texts[7].clone(), instant("2026-08-20T10:00:00Z"))
                            .in_run(&run_id);
                    RUNTIME.block_on(async {
                        let ttl = std::time::Duration::from_secs(60);
                        assert!(
                            letters
                                .lease(&msg_id, &run_id, ttl)
                                .await
                                .unwrap()
                                .is_some()
                        );
                        assert!(letters.resolve(&msg_id, &resolution).await.unwrap());
                        let resolved = letters.get(&msg_id).await.unwrap().unwrap();
                        assert_eq!(resolved.resolved, Some(resolution));
                        assert!(!letters.page(&of_source).await.unwrap().contains(&letter));
                    });
                }
                let rows: u32 = raw
                    .query_row("SELECT count(*) FROM dead_letters", [], |row| row.get(0))
                    .unwrap();
                prop_assert_eq!(rows, case, "a letter appeared or vanished");
                let pending = RUNTIME.block_on(letters.stats()).unwrap().pending;
                prop_assert_eq!(pending, u64::from(case - case / 2));
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(
        RUNTIME.block_on(letters.redrives()).unwrap().len(),
        cases.get() as usize
    );
    assert_eq!(
        RUNTIME.block_on(letters.audit_rows(None)).unwrap().len(),
        cases.get() as usize
    );
    assert_eq!(tables(&path), expected_tables);
}

// ---- PostgreSQL (feature `postgres`, the server of DATABASE_URL) ----

#[cfg(feature = "postgres")]
use crate::pg;

/// A redrive record of hostile texts (its JSON escapes NUL, so any text goes).
#[cfg(feature = "postgres")]
fn hostile_record(case: u32, texts: &[String]) -> RedriveRecord {
    RedriveRecord {
        run_id: format!("{case}:{}", texts[0]),
        who: texts[1].clone(),
        filter: texts[2].clone(),
        target: texts[3].clone(),
        started_at: instant(&format!("2026-08-20T09:{:02}:00+00:00", case % 60)),
        finished_at: instant("2026-08-20T10:00:00+00:00"),
        limit: 10,
        rate_per_second: 1,
        selected: 1,
        succeeded: 0,
        failed: 1,
        skipped: 0,
        stopped: Some(texts[4].clone()),
    }
}

/// The tables of the schema `schema` of the PostgreSQL server.
#[cfg(feature = "postgres")]
async fn pg_tables(client: &tokio_postgres::Client, schema: &str) -> BTreeSet<String> {
    client
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = $1",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// `PgDeadLetters` binds every text of a letter, a resolution, an audit row and a redrive
/// record: hostile texts come back byte for byte, through the store and straight from the
/// table, and every table is still there. A text holding NUL (which PostgreSQL's `text` cannot
/// store, nor a string of `jsonb`, which holds the original and the redrive records) is refused
/// before the server is asked, and nothing is written.
#[cfg(feature = "postgres")]
#[test]
fn postgres_dead_letters_resolutions_audit_rows_and_redrive_records_are_bound_not_spliced() {
    use retry_core::dlq::{AuditEntry, DeadLetterStore, DlqError, Page, Resolution};
    use retry_postgres::PgDeadLetters;

    let (schema, letters, raw) = RUNTIME.block_on(async {
        let schema = pg::Schema::new("sql_bound_dlq").await;
        let letters = PgDeadLetters::connect(&schema.url).await.unwrap();
        let raw = schema.client().await;
        (schema, letters, raw)
    });
    let expected_tables = set(&[
        "dead_letter_audit",
        "dead_letter_redrives",
        "dead_letters",
        "retry_core_schema",
    ]);
    assert_eq!(
        RUNTIME.block_on(pg_tables(&raw, &schema.name)),
        expected_tables
    );
    let cases = std::cell::Cell::new(0u32);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
    runner
        .run(
            &(hostile(), prop::array::uniform8(hostile())),
            |(msg_id, texts)| {
                cases.set(cases.get() + 1);
                let case = cases.get();
                let original =
                    serde_json::json!({ texts[4].clone(): [texts[0].clone(), msg_id.clone()] });
                let mut sent = letter(format!("{case}:{msg_id}"), &texts, original);
                sent.source = Some(texts[4].clone());
                sent.key_scope = Some(texts[1].clone());
                RUNTIME.block_on(async {
                    if sent.msg_id.contains('\0') || texts[..5].iter().any(|t| t.contains('\0')) {
                        // Refused whole, before the server is asked.
                        let answer = letters.park(&sent).await;
                        assert!(matches!(answer, Err(DlqError::Serialize(_))), "{answer:?}");
                        assert_eq!(
                            DeadLetterStore::get(&letters, &sent.msg_id).await.unwrap(),
                            None
                        );
                        let strip = |t: &str| t.replace('\0', "");
                        sent.msg_id = strip(&sent.msg_id);
                        sent.reason = strip(&sent.reason);
                        sent.trace_id = strip(&sent.trace_id);
                        sent.error_type = strip(&sent.error_type);
                        sent.idempotency_key = sent.idempotency_key.as_deref().map(strip);
                        sent.source = sent.source.as_deref().map(strip);
                        sent.key_scope = sent.key_scope.as_deref().map(strip);
                        sent.original = serde_json::json!({
                            strip(&texts[4]): [strip(&texts[0]), strip(&msg_id)]
                        });
                    }
                    letters.park(&sent).await.unwrap();
                    assert_eq!(
                        DeadLetterStore::get(&letters, &sent.msg_id)
                            .await
                            .unwrap()
                            .as_ref(),
                        Some(&sent)
                    );
                    let source = sent.source.clone().unwrap_or_default();
                    let of_source = letters
                        .page(&Page::first(100).source(source.clone()))
                        .await
                        .unwrap();
                    assert!(of_source.contains(&sent), "{source:?}");
                    let run = format!("{case}:{}", texts[2].replace('\0', ""));
                    let entry = AuditEntry::intent(
                        run.clone(),
                        sent.msg_id.clone(),
                        texts[3].replace('\0', ""),
                        texts[4].replace('\0', ""),
                        instant("2026-08-20T09:00:00Z"),
                    )
                    .finished(texts[0].replace('\0', ""), instant("2026-08-20T09:00:01Z"));
                    letters.audit(&entry).await.unwrap();
                    assert_eq!(letters.audit_rows(Some(&run)).await.unwrap(), [entry]);
                    let mut record = hostile_record(case, &texts);
                    if texts[..5].iter().any(|t| t.contains('\0')) {
                        let answer = DeadLetterStore::record_redrive(&letters, &record).await;
                        assert!(matches!(answer, Err(DlqError::Serialize(_))), "{answer:?}");
                        let stripped: Vec<String> =
                            texts.iter().map(|t| t.replace('\0', "")).collect();
                        record = hostile_record(case, &stripped);
                    }
                    DeadLetterStore::record_redrive(&letters, &record)
                        .await
                        .unwrap();
                    assert!(
                        DeadLetterStore::redrives(&letters)
                            .await
                            .unwrap()
                            .contains(&record)
                    );
                    // Every other case's letter is resolved, by a hostile who in a hostile run.
                    if case.is_multiple_of(2) {
                        let resolution = Resolution::new(
                            texts[1].replace('\0', ""),
                            instant("2026-08-20T09:00:02Z"),
                        )
                        .in_run(run.clone());
                        assert!(letters.resolve(&sent.msg_id, &resolution).await.unwrap());
                        let stored = DeadLetterStore::get(&letters, &sent.msg_id).await.unwrap();
                        assert_eq!(stored.unwrap().resolved, Some(resolution));
                    }
                });
                let row = RUNTIME
                    .block_on(raw.query_one(
                        "SELECT msg_id, reason, trace_id, error_type, idempotency_key, source \
                         FROM dead_letters WHERE msg_id = $1",
                        &[&sent.msg_id],
                    ))
                    .unwrap();
                let stored: (
                    String,
                    String,
                    String,
                    String,
                    Option<String>,
                    Option<String>,
                ) = (
                    row.get(0),
                    row.get(1),
                    row.get(2),
                    row.get(3),
                    row.get(4),
                    row.get(5),
                );
                prop_assert_eq!(
                    stored,
                    (
                        sent.msg_id.clone(),
                        sent.reason.clone(),
                        sent.trace_id.clone(),
                        sent.error_type.clone(),
                        sent.idempotency_key.clone(),
                        sent.source.clone()
                    )
                );
                let rows: i64 = RUNTIME
                    .block_on(raw.query_one("SELECT count(*) FROM dead_letters", &[]))
                    .unwrap()
                    .get(0);
                prop_assert_eq!(rows, i64::from(case), "a letter appeared or vanished");
                Ok(())
            },
        )
        .unwrap();
    let stats = RUNTIME.block_on(letters.stats()).unwrap();
    assert_eq!(stats.resolved, u64::from(cases.get() / 2));
    assert_eq!(
        RUNTIME
            .block_on(DeadLetterStore::redrives(&letters))
            .unwrap()
            .len(),
        cases.get() as usize
    );
    assert_eq!(
        RUNTIME.block_on(pg_tables(&raw, &schema.name)),
        expected_tables
    );
    drop(letters);
    RUNTIME.block_on(schema.drop_all());
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
