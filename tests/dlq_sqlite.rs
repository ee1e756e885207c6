//! `SqliteDeadLetters` on real files: the round trip (park, list, count, oldest, get, ack,
//! reopen, put back), ordering by the instant of the first failure across offsets, a message
//! that gives up again, letters and rows that cannot be read, concurrent parks, the schema, and
//! a store that is down.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DlqError, FailureClass, LegacyStore, SqliteDeadLetters,
};

#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

impl TempDir {
    fn db(&self) -> PathBuf {
        self.file("dlq.sqlite3")
    }
}

fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.to_owned(),
        original: serde_json::json!({"order": msg_id, "amount": 10, "lines": [1, 2]}),
        reason: "gave up after 5 attempts: 503 Service Unavailable".to_owned(),
        attempts: 5,
        first_failed_at: first_failed_at.to_owned(),
        last_failed_at: first_failed_at.to_owned(),
        trace_id: "a1b2c3d4".to_owned(),
        class: FailureClass::System,
        error_type: "FetchError".to_owned(),
        idempotency_key: None,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

async fn ids(letters: &SqliteDeadLetters) -> Vec<String> {
    letters
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.msg_id)
        .collect()
}

fn corrupt_message<T: std::fmt::Debug>(result: Result<T, DlqError>) -> String {
    match result {
        Err(DlqError::Corrupt(what)) => what,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

// ---- the round trip ----

#[tokio::test]
async fn park_list_ack_reopen_and_put_back() {
    let dir = TempDir::new("round-trip");
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    assert_eq!(letters.count().await.unwrap(), 0);
    assert_eq!(letters.oldest().await.unwrap(), None);
    assert_eq!(letters.list().await.unwrap(), []);

    // By instant: a (17:11Z) < b (18:00Z) < c (19:00Z); as text the other way round.
    let a = DeadLetter {
        last_failed_at: "2026-08-19T02:12:47+09:00".into(),
        idempotency_key: Some("s3:M-a".into()),
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
        ..letter("M-a", "2026-08-19T02:11:03+09:00")
    };
    let b = DeadLetter {
        class: FailureClass::Data,
        reason: "not retryable: 400 Bad Request".into(),
        attempts: 1,
        ..letter("M-b", "2026-08-18T18:00:00Z")
    };
    let c = letter("M-c", "2026-08-18T12:00:00.250-07:00");
    for parked in [&c, &a, &b] {
        letters.park(parked).await.unwrap();
    }
    assert_eq!(letters.count().await.unwrap(), 3);
    assert_eq!(
        letters.list().await.unwrap(),
        [a.clone(), b.clone(), c.clone()]
    );
    assert_eq!(letters.oldest().await.unwrap(), Some(a.clone()));
    for parked in [&a, &b, &c] {
        assert_eq!(
            letters.get(&parked.msg_id).await.unwrap().as_ref(),
            Some(parked),
            "every field comes back as parked"
        );
    }
    assert_eq!(letters.get("M-none").await.unwrap(), None);

    assert!(letters.ack("M-a").await.unwrap());
    assert!(!letters.ack("M-a").await.unwrap(), "acked once only");
    assert!(!letters.ack("M-none").await.unwrap());
    assert_eq!(letters.count().await.unwrap(), 2);
    assert_eq!(letters.oldest().await.unwrap(), Some(b.clone()));
    drop(letters);

    // Reopened: still acked, the rest still pending.
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    assert_eq!(letters.count().await.unwrap(), 2);
    assert_eq!(letters.get("M-a").await.unwrap(), None);
    assert_eq!(ids(&letters).await, ["M-b", "M-c"]);

    // A redrive of b failed again: attempts and last_failed_at move, first_failed_at stays
    // (even if the letter put back says otherwise), and so does b's place in the order.
    let failed_again = DeadLetter {
        attempts: b.attempts + 1,
        last_failed_at: "2026-08-20T09:30:00+09:00".into(),
        reason: "redrive: 400 Bad Request".into(),
        first_failed_at: "2026-08-20T09:29:59+09:00".into(),
        ..b.clone()
    };
    letters.put_back(&failed_again).await.unwrap();
    let now = letters.get("M-b").await.unwrap().unwrap();
    assert_eq!(now.attempts, 2);
    assert_eq!(now.last_failed_at, "2026-08-20T09:30:00+09:00");
    assert_eq!(now.reason, "redrive: 400 Bad Request");
    assert_eq!(now.first_failed_at, "2026-08-18T18:00:00Z");
    assert_eq!(now.original, b.original);
    assert_eq!(letters.count().await.unwrap(), 2);
    assert_eq!(ids(&letters).await, ["M-b", "M-c"]);

    // A letter put back after it was acked is pending again.
    letters.put_back(&a).await.unwrap();
    assert_eq!(ids(&letters).await, ["M-a", "M-b", "M-c"]);
}

#[tokio::test]
async fn ordering_is_by_instant_across_offsets_then_msg_id() {
    let dir = TempDir::new("order");
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    // Written so that text order (t4, t2, t3, t1) is nearly the reverse of time order.
    let cases = [
        ("t4", "2026-08-18T17:00:00-07:00"), // 00:00Z on the 19th
        ("t3", "2026-08-18T23:30:00Z"),
        ("t2", "2026-08-18T18:00:00-05:00"), // 23:00Z
        ("t1", "2026-08-19T08:00:00+09:00"), // 23:00Z as well
    ];
    for (id, at) in cases {
        letters.park(&letter(id, at)).await.unwrap();
    }
    // t1 and t2 fail at the same instant (23:00Z): msg_id decides.
    assert_eq!(ids(&letters).await, ["t1", "t2", "t3", "t4"]);
    assert_eq!(letters.oldest().await.unwrap().unwrap().msg_id, "t1");

    // Fractions order too, and "Z" is "+00:00".
    letters
        .park(&letter("t0", "2026-08-18T22:59:59.999999+00:00"))
        .await
        .unwrap();
    letters
        .park(&letter("t5", "2026-08-19T00:00:00.000001Z"))
        .await
        .unwrap();
    assert_eq!(ids(&letters).await, ["t0", "t1", "t2", "t3", "t4", "t5"]);

    // The stored strings are as given; the sortable instant sits beside them.
    let raw = rusqlite::Connection::open(dir.db()).unwrap();
    let (given, utc): (String, String) = raw
        .query_row(
            "SELECT first_failed_at, first_failed_utc FROM dead_letters WHERE msg_id = 't4'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(given, "2026-08-18T17:00:00-07:00");
    assert_eq!(utc, "2026-08-19T00:00:00.000000Z");
}

#[tokio::test]
async fn a_message_that_gives_up_again_keeps_its_first_failure() {
    let dir = TempDir::new("repark");
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    let first = DeadLetter {
        last_failed_at: "2026-08-19T10:05:00Z".into(),
        ..letter("M-1", "2026-08-19T10:00:00Z")
    };
    letters.park(&first).await.unwrap();
    letters
        .park(&letter("M-2", "2026-08-19T11:00:00Z"))
        .await
        .unwrap();

    // Redelivered, failed again from scratch, gave up again: a later first failure of its own.
    let again = DeadLetter {
        attempts: 3,
        first_failed_at: "2026-08-19T12:00:00Z".into(),
        last_failed_at: "2026-08-19T12:00:09Z".into(),
        reason: "gave up after 3 attempts: timed out".into(),
        trace_id: "e5f6".into(),
        ..first.clone()
    };
    letters.park(&again).await.unwrap();
    assert_eq!(letters.count().await.unwrap(), 2, "one letter per msg_id");
    let pending = letters.get("M-1").await.unwrap().unwrap();
    assert_eq!(
        pending,
        DeadLetter {
            first_failed_at: first.first_failed_at.clone(),
            ..again
        }
    );
    // Still ordered by its first failure, before M-2.
    assert_eq!(ids(&letters).await, ["M-1", "M-2"]);
}

// ---- letters and rows that cannot be read ----

#[tokio::test]
async fn letters_whose_times_do_not_parse_are_refused() {
    let dir = TempDir::new("bad-times");
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    let no_offset = letter("M-1", "2026-08-19T02:11:03");
    let message = corrupt_message(letters.park(&no_offset).await);
    assert!(
        message.contains("`M-1`") && message.contains("first_failed_at \"2026-08-19T02:11:03\""),
        "{message}"
    );
    let bad_last = DeadLetter {
        last_failed_at: "yesterday".into(),
        ..letter("M-2", "2026-08-19T02:11:03Z")
    };
    let message = corrupt_message(letters.put_back(&bad_last).await);
    assert!(
        message.contains("`M-2`") && message.contains("last_failed_at"),
        "{message}"
    );
    assert_eq!(letters.count().await.unwrap(), 0, "nothing was written");
}

#[tokio::test]
async fn unreadable_rows_are_corrupt_and_name_their_msg_id() {
    let dir = TempDir::new("corrupt");
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    letters
        .park(&letter("good", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let raw = rusqlite::Connection::open(dir.db()).unwrap();
    let insert = "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
         last_failed_at, trace_id, class, error_type, idempotency_key, parked_at, first_failed_utc) \
         VALUES (?1, ?2, 'r', ?3, ?4, '2026-08-19T00:00:00Z', 't', 'data', 'E', NULL, \
         '2026-08-19T00:00:00.000000Z', ?5)";
    for (id, original, attempts, first, utc) in [
        (
            "bad-json",
            "{not json",
            "1",
            "2026-08-19T00:00:00Z",
            "2026-08-19T00:00:01.000000Z",
        ),
        (
            "bad-attempts",
            "{}",
            "-1",
            "2026-08-19T00:00:00Z",
            "2026-08-19T00:00:02.000000Z",
        ),
        (
            "bad-time",
            "{}",
            "1",
            "last tuesday",
            "2026-08-19T00:00:03.000000Z",
        ),
    ] {
        let attempts: i64 = attempts.parse().unwrap();
        raw.execute(
            insert,
            rusqlite::params![id, original, attempts, first, utc],
        )
        .unwrap();
    }
    for (id, what) in [
        ("bad-json", "original is not JSON"),
        ("bad-attempts", "attempts -1 is out of range"),
        ("bad-time", "first_failed_at \"last tuesday\""),
    ] {
        let message = corrupt_message(letters.get(id).await);
        assert!(
            message.contains(&format!("`{id}`")) && message.contains(what),
            "{message}"
        );
    }
    // A list never skips a row silently; the first bad one in the order is named.
    let message = corrupt_message(letters.list().await);
    assert!(message.contains("`bad-json`"), "{message}");
    // The good one is still readable, and counting does not read the rows.
    assert!(letters.get("good").await.unwrap().is_some());
    assert_eq!(letters.count().await.unwrap(), 4);
    // Acking a bad row removes it.
    for id in ["bad-json", "bad-attempts", "bad-time"] {
        assert!(letters.ack(id).await.unwrap());
    }
    assert_eq!(ids(&letters).await, ["good"]);
}

// ---- concurrency ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_parks_from_many_tasks_and_two_stores_all_land() {
    let dir = TempDir::new("concurrent");
    let one = Arc::new(SqliteDeadLetters::open(dir.db()).unwrap());
    let two = Arc::new(SqliteDeadLetters::open(dir.db()).unwrap());
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let store = if i % 2 == 0 {
                Arc::clone(&one)
            } else {
                Arc::clone(&two)
            };
            tokio::spawn(async move {
                let id = format!("M-{i:02}");
                // Every id twice: a re-park never duplicates.
                store
                    .park(&letter(&id, "2026-08-19T00:00:00Z"))
                    .await
                    .unwrap();
                store
                    .park(&letter(&id, "2026-08-19T00:00:00Z"))
                    .await
                    .unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(one.count().await.unwrap(), 40);
    let expected: Vec<String> = (0..40).map(|i| format!("M-{i:02}")).collect();
    assert_eq!(ids(&two).await, expected);
}

// ---- the schema ----

#[tokio::test]
async fn the_schema_is_created_once_checks_the_class_and_refuses_a_newer_version() {
    let dir = TempDir::new("schema");
    let first = SqliteDeadLetters::open(dir.db()).unwrap();
    let second = SqliteDeadLetters::open(dir.db()).unwrap();
    first
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    assert_eq!(second.count().await.unwrap(), 1);
    drop((first, second));

    let raw = rusqlite::Connection::open(dir.db()).unwrap();
    let mode: String = raw
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let versions: Vec<(String, i64)> = raw
        .prepare("SELECT component, version FROM retry_core_schema")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, [("dead_letters".to_owned(), 1)]);
    let refused = raw.execute(
        "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
         last_failed_at, trace_id, class, error_type, parked_at, first_failed_utc) \
         VALUES ('x', '{}', 'r', 1, 'a', 'b', 't', 'transient', 'E', 'p', 'u')",
        [],
    );
    assert_eq!(
        refused.unwrap_err().sqlite_error_code(),
        Some(rusqlite::ErrorCode::ConstraintViolation)
    );

    raw.execute(
        "UPDATE retry_core_schema SET version = 2 WHERE component = 'dead_letters'",
        [],
    )
    .unwrap();
    let error = SqliteDeadLetters::open(dir.db()).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("dead_letters schema version 2, newer than the 1"),
        "{error}"
    );
}

#[tokio::test]
async fn dead_letters_and_the_idempotency_log_share_a_file() {
    let dir = TempDir::new("shared");
    let store = retry_core::idempotency::SqliteStore::open(dir.db()).unwrap();
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    letters
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    drop((store, letters));
    // Both open again, in either order, each with its own version row.
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    let _store = retry_core::idempotency::SqliteStore::open(dir.db()).unwrap();
    assert_eq!(letters.count().await.unwrap(), 1);
    let raw = rusqlite::Connection::open(dir.db()).unwrap();
    let versions: Vec<(String, i64)> = raw
        .prepare("SELECT component, version FROM retry_core_schema ORDER BY component")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        versions,
        [("dead_letters".to_owned(), 1), ("inbox_log".to_owned(), 1)]
    );
}

// ---- a store that is down ----

#[test]
fn opening_in_a_missing_directory_is_an_io_error_naming_the_file() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("no-such-dir").join("dlq.sqlite3");
    let error = SqliteDeadLetters::open(&path).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with("dead-letter store failed: cannot open database file "),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("does not exist"), "{message}");
    assert!(
        std::error::Error::source(&error)
            .and_then(std::error::Error::source)
            .is_some_and(|e| e.is::<rusqlite::Error>()),
        "SQLite's error is kept as the source"
    );
}

#[tokio::test]
async fn a_file_removed_from_under_the_store_fails_with_io_not_a_panic() {
    let dir = TempDir::new("removed");
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    // A new connection into a directory that has gone cannot open the file.
    let letters = letters.with_busy_timeout(Duration::from_millis(100));
    std::fs::remove_dir_all(&dir.0).unwrap();
    let error = letters
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        error.to_string().contains(&dir.db().display().to_string()),
        "{error}"
    );
}

#[tokio::test]
async fn a_locked_file_fails_after_the_busy_timeout_naming_the_file() {
    let dir = TempDir::new("locked");
    let letters = SqliteDeadLetters::open(dir.db())
        .unwrap()
        .with_busy_timeout(Duration::from_millis(100));
    let locker = rusqlite::Connection::open(dir.db()).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let started = Instant::now();
    let error = letters
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    let expected = format!(
        "database file {} is locked by another process (busy for 100ms)",
        dir.db().display()
    );
    assert!(error.to_string().contains(&expected), "{error}");
    assert!(
        waited >= Duration::from_millis(90) && waited < Duration::from_secs(3),
        "waited {waited:?}"
    );

    // Once the lock is gone the letter parks: nothing was half-written meanwhile.
    locker.execute_batch("COMMIT").unwrap();
    letters
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    assert_eq!(letters.count().await.unwrap(), 1);
}

#[test]
fn without_a_runtime_operations_run_in_place() {
    let dir = TempDir::new("no-runtime");
    let letters = SqliteDeadLetters::open(dir.db()).unwrap();
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let parked = letter("M-1", "2026-08-19T00:00:00Z");
    let park = std::pin::pin!(letters.park(&parked));
    assert!(matches!(
        std::future::Future::poll(park, &mut cx),
        std::task::Poll::Ready(Ok(()))
    ));
    let count = std::pin::pin!(letters.count());
    assert!(matches!(
        std::future::Future::poll(count, &mut cx),
        std::task::Poll::Ready(Ok(1))
    ));
}
