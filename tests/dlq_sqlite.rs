//! `SqliteDeadLetters` on real files: the round trip (park, page, stats, get, resolve, reopen,
//! lease and put back), ordering by the instant of the first failure across offsets, a message
//! that gives up again (merged, never overwritten), letters and rows that cannot be read,
//! concurrent parks, leases from two stores on one file, purging by the instant of resolution,
//! the schema and its upgrade from version 1, group commit when a group fails, and a store that
//! is down. (The conformance suite runs in tests/dlq_conformance.rs; a million letters in
//! tests/dlq_sqlite_million.rs.)

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, DlqFailed, Failure,
    FailureClass, Page, Resolution,
};
use retry_core::{Classify, Decision, retryable};
use retry_sqlite::SqliteDeadLetters;

use crate::tempdir;

use tempdir::TempDir;

impl TempDir {
    fn dlq_db(&self) -> PathBuf {
        self.file("dlq.sqlite3")
    }
}

const LONG: Duration = Duration::from_secs(60);

fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.to_owned(),
        original: serde_json::json!({"order": msg_id, "amount": 10, "lines": [1, 2]}),
        reason: "gave up after 5 attempts: 503 Service Unavailable".to_owned(),
        attempts: 5,
        first_failed_at: instant(first_failed_at),
        last_failed_at: instant(first_failed_at),
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

/// Every pending letter, a page of 3 at a time.
async fn pending(letters: &SqliteDeadLetters) -> Result<Vec<DeadLetter>, DlqError> {
    let mut all = Vec::new();
    let mut page = Page::first(3);
    loop {
        let got = letters.page(&page).await?;
        let Some(last) = got.last() else {
            return Ok(all);
        };
        page = page.next_after(last);
        all.extend(got);
    }
}

async fn ids(letters: &SqliteDeadLetters) -> Vec<String> {
    pending(letters)
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

fn raw(dir: &TempDir) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.dlq_db()).unwrap()
}

// ---- the round trip ----

#[tokio::test]
async fn park_page_resolve_reopen_lease_and_put_back() {
    let dir = TempDir::new("round-trip");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let stats = letters.stats().await.unwrap();
    assert_eq!((stats.pending, stats.resolved), (0, 0));
    assert_eq!(stats.oldest_first_failed_at, None);
    assert_eq!(letters.page(&Page::first(10)).await.unwrap(), []);

    // By instant: a (17:11Z) < b (18:00Z) < c (19:00Z); as text the other way round.
    let a = DeadLetter {
        last_failed_at: instant("2026-08-19T02:12:47+09:00"),
        idempotency_key: Some("s3:M-a".into()),
        source: Some("payments::deposit".into()),
        redacted: true,
        key_scope: Some("http".into()),
        key_expires_at: Some(instant("2026-08-26T02:11:03+09:00")),
        history: vec![Failure {
            at: instant("2026-08-19T01:00:00+09:00"),
            reason: "an earlier give-up, copied from another store".into(),
            trace_id: "0".into(),
        }],
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
    let stats = letters.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.system, stats.data, stats.resolved),
        (3, 2, 1, 0)
    );
    assert_eq!(
        stats.oldest_first_failed_at,
        Some(instant("2026-08-19T02:11:03+09:00")),
        "the instant, whatever its offset"
    );
    assert_eq!(
        pending(&letters).await.unwrap(),
        [a.clone(), b.clone(), c.clone()]
    );
    for parked in [&a, &b, &c] {
        assert_eq!(
            letters.get(&parked.msg_id).await.unwrap().as_ref(),
            Some(parked),
            "every field comes back as parked"
        );
    }
    assert_eq!(letters.get("M-none").await.unwrap(), None);

    let by_hand = Resolution::new("alice", instant("2026-08-20T09:00:00+02:00"));
    assert!(letters.resolve("M-a", &by_hand).await.unwrap());
    assert!(
        !letters.resolve("M-a", &by_hand).await.unwrap(),
        "resolved once only"
    );
    assert!(!letters.resolve("M-none", &by_hand).await.unwrap());
    let stats = letters.stats().await.unwrap();
    assert_eq!((stats.pending, stats.resolved), (2, 1));
    assert_eq!(
        stats.oldest_first_failed_at,
        Some(instant("2026-08-18T18:00:00Z"))
    );
    let audit = AuditEntry::intent(
        "run-1",
        "M-b",
        "bob",
        "deposit",
        instant("2026-08-20T10:00:00Z"),
    );
    letters.audit(&audit).await.unwrap();
    drop(letters);

    // Reopened: still resolved (and readable), the rest still pending, the audit row kept.
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    assert_eq!(letters.stats().await.unwrap().pending, 2);
    let resolved = letters.get("M-a").await.unwrap().unwrap();
    assert_eq!(
        resolved,
        DeadLetter {
            resolved: Some(by_hand),
            ..a.clone()
        }
    );
    assert_eq!(ids(&letters).await, ["M-b", "M-c"]);
    assert_eq!(letters.audit_rows(None).await.unwrap(), [audit]);

    // A redrive of b failed again: the failure in its history (its attempts stay the
    // service's), the lease ended; b keeps its first failure and so its place in the order.
    assert!(letters.lease("M-b", "run-1", LONG).await.unwrap().is_some());
    let failure = Failure {
        at: instant("2026-08-20T09:30:00+09:00"),
        reason: "redrive: 400 Bad Request".into(),
        trace_id: "run-1".into(),
    };
    assert!(letters.put_back("M-b", "run-1", &failure).await.unwrap());
    let now = letters.get("M-b").await.unwrap().unwrap();
    let mut expected = b.clone();
    expected.redrive_failed(failure);
    assert_eq!(now, expected);
    assert_eq!(now.attempts, b.attempts);
    assert_eq!(now.first_failed_at, instant("2026-08-18T18:00:00Z"));
    assert_eq!(ids(&letters).await, ["M-b", "M-c"]);
    assert_eq!(letters.stats().await.unwrap().leased, 0);

    // The message of the resolved letter gives up again: pending again, merged.
    letters.park(&a).await.unwrap();
    assert_eq!(ids(&letters).await, ["M-a", "M-b", "M-c"]);
    let reopened = letters.get("M-a").await.unwrap().unwrap();
    assert_eq!((reopened.attempts, reopened.resolved), (10, None));
}

#[tokio::test]
async fn ordering_is_by_instant_across_offsets_then_msg_id() {
    let dir = TempDir::new("order");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
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
    assert_eq!(
        letters.stats().await.unwrap().oldest_first_failed_at,
        Some(instant("2026-08-19T08:00:00+09:00"))
    );

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
    // A cursor written with another offset than the letter's still continues after it.
    let mut after_t2 = Page::first(2);
    after_t2.after = Some(retry_core::dlq::Cursor {
        first_failed_at: instant("2026-08-18T23:00:00Z"),
        msg_id: "t2".into(),
    });
    let next: Vec<String> = letters
        .page(&after_t2)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.msg_id)
        .collect();
    assert_eq!(next, ["t3", "t4"]);

    // The stored strings are RFC 3339 in UTC (to the millisecond, as the library writes
    // times); the sortable instant sits beside them.
    let (given, utc): (String, String) = raw(&dir)
        .query_row(
            "SELECT first_failed_at, first_failed_utc FROM dead_letters WHERE msg_id = 't4'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(given, "2026-08-19T00:00:00.000+00:00");
    assert_eq!(utc, "2026-08-19T00:00:00.000000Z");
}

#[tokio::test]
async fn a_message_that_gives_up_again_is_merged_never_overwritten() {
    let dir = TempDir::new("repark");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let first = DeadLetter {
        last_failed_at: instant("2026-08-19T10:05:00Z"),
        source: Some("payments::deposit".into()),
        ..letter("M-1", "2026-08-19T10:00:00Z")
    };
    letters.park(&first).await.unwrap();
    letters
        .park(&letter("M-2", "2026-08-19T11:00:00Z"))
        .await
        .unwrap();

    // Redelivered, failed again from scratch, gave up again: a later first failure, another
    // original, a key it did not have. Then once more, in the same group as a third letter.
    let again = DeadLetter {
        attempts: 3,
        original: serde_json::json!({"order": "M-1", "amount": 999}),
        first_failed_at: instant("2026-08-19T12:00:00Z"),
        last_failed_at: instant("2026-08-19T12:00:09Z"),
        reason: "gave up after 3 attempts: timed out".into(),
        trace_id: "e5f6".into(),
        class: FailureClass::Data,
        idempotency_key: Some("deposit:M-1".into()),
        source: Some("payments::other".into()),
        ..first.clone()
    };
    let third = DeadLetter {
        last_failed_at: instant("2026-08-19T13:00:00Z"),
        reason: "gave up after 5 attempts: 502".into(),
        ..letter("M-1", "2026-08-19T13:00:00Z")
    };
    letters.park(&again).await.unwrap();
    let m3 = letter("M-3", "2026-08-19T14:00:00Z");
    let (one, two) = tokio::join!(letters.park(&third), letters.park(&m3));
    one.unwrap();
    two.unwrap();

    let mut expected = first.clone();
    expected.absorb(&again);
    expected.absorb(&third);
    let stored = letters.get("M-1").await.unwrap().unwrap();
    assert_eq!(stored, expected, "merged as DeadLetter::absorb says");
    assert_eq!(stored.original, first.original, "the first original stays");
    assert_eq!(stored.first_failed_at, instant("2026-08-19T10:00:00Z"));
    assert_eq!(stored.attempts, 13);
    assert_eq!(stored.idempotency_key.as_deref(), Some("deposit:M-1"));
    assert_eq!(stored.source.as_deref(), Some("payments::deposit"));
    assert_eq!(
        stored
            .history
            .iter()
            .map(|f| f.reason.as_str())
            .collect::<Vec<_>>(),
        [first.reason.as_str(), again.reason.as_str()]
    );
    assert_eq!(
        letters.stats().await.unwrap().pending,
        3,
        "one letter per msg_id"
    );
    // Still ordered by its first failure, before M-2.
    assert_eq!(ids(&letters).await, ["M-1", "M-2", "M-3"]);
}

#[tokio::test]
async fn the_history_keeps_the_latest_failures_up_to_its_limit() {
    let dir = TempDir::new("history");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let mut expected = letter("M-1", "2026-08-19T00:00:00Z");
    letters.park(&expected).await.unwrap();
    for minute in 1..=(retry_core::dlq::HISTORY_LIMIT as u32 + 5) {
        let again = DeadLetter {
            reason: format!("give-up {minute}"),
            last_failed_at: instant(&format!("2026-08-19T00:{minute:02}:00Z")),
            ..letter("M-1", "2026-08-19T00:00:00Z")
        };
        letters.park(&again).await.unwrap();
        expected.absorb(&again);
    }
    let stored = letters.get("M-1").await.unwrap().unwrap();
    assert_eq!(stored.history.len(), retry_core::dlq::HISTORY_LIMIT);
    assert_eq!(stored, expected);
}

// ---- letters and rows that cannot be read ----

#[tokio::test]
async fn times_that_do_not_parse_never_reach_the_store_and_older_spellings_read_back() {
    // A letter's times are `SystemTime`s: one whose text is not RFC 3339 with an offset is
    // refused where its JSON is read, naming the text, before any store sees it.
    for (field, bad) in [
        ("first_failed_at", "2026-08-19T02:11:03"),
        ("last_failed_at", "yesterday"),
    ] {
        let mut json = serde_json::to_value(letter("M-1", "2026-08-19T02:11:03Z")).unwrap();
        json[field] = bad.into();
        let why = serde_json::from_value::<DeadLetter>(json).unwrap_err();
        assert!(why.to_string().contains(&format!("{bad:?}")), "{why}");
    }

    // Rows written before times were typed keep their offsets as given: they read back as the
    // same instants, and order, page and purge by them.
    let dir = TempDir::new("bad-times");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    letters
        .park(&letter("M-2", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    raw(&dir)
        .execute(
            "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
             last_failed_at, trace_id, class, error_type, idempotency_key, parked_at, \
             first_failed_utc, history, redacted, key_expires_at) \
             VALUES ('M-1', '{}', 'r', 1, '2026-08-19T08:00:00+09:00', \
             '2026-08-19T08:00:01+09:00', 't', 'data', 'E', NULL, \
             '2026-08-18T23:00:00.000000Z', '2026-08-18T23:00:00.000000Z', \
             '[{\"at\": \"2026-08-19T07:00:00+09:00\", \"reason\": \"r\", \"trace_id\": \"t\"}]', \
             0, '2026-08-26T08:00:00+09:00')",
            [],
        )
        .unwrap();
    let old = letters.get("M-1").await.unwrap().unwrap();
    assert_eq!(old.first_failed_at, instant("2026-08-18T23:00:00Z"));
    assert_eq!(old.last_failed_at, instant("2026-08-18T23:00:01Z"));
    assert_eq!(old.history[0].at, instant("2026-08-18T22:00:00Z"));
    assert_eq!(old.key_expires_at, Some(instant("2026-08-25T23:00:00Z")));
    assert_eq!(ids(&letters).await, ["M-1", "M-2"]);
    assert_eq!(
        letters.stats().await.unwrap().oldest_first_failed_at,
        Some(instant("2026-08-18T23:00:00Z"))
    );
}

#[tokio::test]
async fn unreadable_rows_are_corrupt_and_name_their_msg_id() {
    let dir = TempDir::new("corrupt");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    letters
        .park(&letter("good", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let insert = "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
         last_failed_at, trace_id, class, error_type, idempotency_key, parked_at, first_failed_utc, \
         history, redacted) \
         VALUES (?1, ?2, 'r', ?3, ?4, '2026-08-19T00:00:00Z', 't', 'data', 'E', NULL, \
         '2026-08-19T00:00:00.000000Z', ?5, ?6, 0)";
    let raw = raw(&dir);
    for (id, original, attempts, first, utc, history) in [
        (
            "bad-json",
            "{not json",
            1,
            "2026-08-19T00:00:00Z",
            "2026-08-19T00:00:01.000000Z",
            "[]",
        ),
        (
            "bad-attempts",
            "{}",
            -1,
            "2026-08-19T00:00:00Z",
            "2026-08-19T00:00:02.000000Z",
            "[]",
        ),
        (
            "bad-time",
            "{}",
            1,
            "last tuesday",
            "2026-08-19T00:00:03.000000Z",
            "[]",
        ),
        (
            "bad-history",
            "{}",
            1,
            "2026-08-19T00:00:00Z",
            "2026-08-19T00:00:04.000000Z",
            "{\"at\": 1}",
        ),
    ] {
        raw.execute(
            insert,
            rusqlite::params![id, original, attempts, first, utc, history],
        )
        .unwrap();
    }
    for (id, what) in [
        ("bad-json", "original is not JSON"),
        ("bad-attempts", "attempts -1 is out of range"),
        ("bad-time", "first_failed_at \"last tuesday\""),
        ("bad-history", "history is not a list of failures"),
    ] {
        let message = corrupt_message(letters.get(id).await);
        assert!(
            message.contains(&format!("`{id}`")) && message.contains(what),
            "{message}"
        );
    }
    // A page never skips a row silently; the first bad one in the order is named.
    let message = corrupt_message(letters.page(&Page::first(10)).await);
    assert!(message.contains("`bad-json`"), "{message}");
    // The good one is still readable, and counting does not read the rows.
    assert!(letters.get("good").await.unwrap().is_some());
    assert_eq!(letters.stats().await.unwrap().pending, 5);
    // A re-park into a bad row is refused and leaves it alone; the letters of its group park.
    let (bad, other) = (
        letter("bad-json", "2026-08-19T00:00:00Z"),
        letter("other", "2026-08-19T00:00:00Z"),
    );
    let (into_bad, beside) = tokio::join!(letters.park(&bad), letters.park(&other));
    assert!(corrupt_message(into_bad).contains("`bad-json`"));
    beside.unwrap();
    // So is a lease: it is not taken.
    assert!(corrupt_message(letters.lease("bad-time", "run-1", LONG).await).contains("`bad-time`"));
    assert_eq!(letters.stats().await.unwrap().leased, 0);
    // Resolving a bad row takes it out of the way (it does not read it).
    for id in ["bad-json", "bad-attempts", "bad-time", "bad-history"] {
        assert!(
            letters
                .resolve(
                    id,
                    &Resolution::new("alice", instant("2026-08-20T00:00:00Z"))
                )
                .await
                .unwrap()
        );
    }
    assert_eq!(ids(&letters).await, ["good", "other"]);
}

// ---- concurrency ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_parks_from_many_tasks_and_two_stores_all_land() {
    let dir = TempDir::new("concurrent");
    let one = Arc::new(SqliteDeadLetters::open(dir.dlq_db()).unwrap());
    let two = Arc::new(SqliteDeadLetters::open(dir.dlq_db()).unwrap());
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let store = if i % 2 == 0 {
                Arc::clone(&one)
            } else {
                Arc::clone(&two)
            };
            tokio::spawn(async move {
                let id = format!("M-{i:02}");
                // Every id twice: a re-park merges, never duplicates.
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
    assert_eq!(one.stats().await.unwrap().pending, 40);
    let expected: Vec<String> = (0..40).map(|i| format!("M-{i:02}")).collect();
    assert_eq!(ids(&two).await, expected);
    for l in pending(&one).await.unwrap() {
        assert_eq!((l.attempts, l.history.len()), (10, 1), "{}", l.msg_id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_never_both_hold_a_letter() {
    let dir = TempDir::new("two-leases");
    let stores = [
        Arc::new(SqliteDeadLetters::open(dir.dlq_db()).unwrap()),
        Arc::new(SqliteDeadLetters::open(dir.dlq_db()).unwrap()),
    ];
    let ids: Vec<String> = (0..20).map(|i| format!("M-{i:02}")).collect();
    for id in &ids {
        stores[0]
            .park(&letter(id, "2026-08-19T00:00:00Z"))
            .await
            .unwrap();
    }
    // 16 runs, 8 on each store (two `retry-dlq redrive` processes), each asking for every
    // letter at once.
    let tasks: Vec<_> = (0..16)
        .map(|run| {
            let store = Arc::clone(&stores[run % 2]);
            let ids = ids.clone();
            tokio::spawn(async move {
                let run_id = format!("run-{run}");
                let mut won = Vec::new();
                for id in ids {
                    if store.lease(&id, &run_id, LONG).await.unwrap().is_some() {
                        won.push(id);
                    }
                }
                (run_id, won)
            })
        })
        .collect();
    let mut holders: HashMap<String, Vec<String>> = HashMap::new();
    for task in tasks {
        let (run_id, won) = task.await.unwrap();
        for id in won {
            holders.entry(id).or_default().push(run_id.clone());
        }
    }
    for id in &ids {
        let runs = holders.get(id).cloned().unwrap_or_default();
        assert_eq!(runs.len(), 1, "{id} was taken by {runs:?}");
        // The file agrees on who holds it, and the other store cannot take it.
        let holder: String = raw(&dir)
            .query_row(
                "SELECT lease_run FROM dead_letters WHERE msg_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(holder, runs[0]);
        for store in &stores {
            assert!(store.lease(id, "run-late", LONG).await.unwrap().is_none());
        }
    }
    assert_eq!(stores[1].stats().await.unwrap().leased, 20);
}

#[tokio::test]
async fn a_lease_taken_on_one_store_runs_out_for_the_other() {
    let dir = TempDir::new("lease-runs-out");
    let a = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let b = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    a.park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let ttl = Duration::from_millis(300);
    let started = Instant::now();
    assert!(a.lease("M-1", "run-a", ttl).await.unwrap().is_some());
    let early = b.lease("M-1", "run-b", LONG).await.unwrap();
    if started.elapsed() < ttl {
        assert_eq!(early, None, "run-a's lease still runs");
    }
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(b.lease("M-1", "run-b", LONG).await.unwrap().is_some());
    // run-a comes back late: it can no longer resolve or put back what run-b now holds.
    let at = instant("2026-08-20T00:00:00Z");
    assert!(
        !a.resolve("M-1", &Resolution::new("a", at).in_run("run-a"))
            .await
            .unwrap()
    );
    let failure = Failure {
        at,
        reason: "r".into(),
        trace_id: "t".into(),
    };
    assert!(!a.put_back("M-1", "run-a", &failure).await.unwrap());
    assert!(
        b.resolve("M-1", &Resolution::new("b", at).in_run("run-b"))
            .await
            .unwrap()
    );
}

// ---- resolving and purging ----

#[tokio::test]
async fn purging_goes_by_the_instant_of_resolution_whatever_its_offset() {
    let dir = TempDir::new("purge");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    for id in ["tokyo", "utc", "pending"] {
        letters
            .park(&letter(id, "2026-08-19T00:00:00Z"))
            .await
            .unwrap();
    }
    // 08:00 in Tokyo is 23:00 UTC the day before: before the cut, although its text sorts
    // after it.
    let resolve = |id: &'static str, at: &'static str| {
        let letters = &letters;
        async move {
            assert!(
                letters
                    .resolve(id, &Resolution::new("alice", instant(at)))
                    .await
                    .unwrap()
            );
        }
    };
    resolve("tokyo", "2026-08-20T08:00:00+09:00").await;
    resolve("utc", "2026-08-20T00:30:00Z").await;
    let cut = retry_core::time::parse_rfc3339("2026-08-20T00:00:00Z").unwrap();
    assert_eq!(letters.purge_resolved(cut).await.unwrap(), 1);
    assert_eq!(letters.get("tokyo").await.unwrap(), None);
    assert!(letters.get("utc").await.unwrap().is_some());
    assert_eq!(
        letters.purge_resolved(SystemTime::now()).await.unwrap(),
        1,
        "utc, once the cut passes it"
    );
    assert!(
        letters.get("pending").await.unwrap().is_some(),
        "pending letters are never purged"
    );
    let stats = letters.stats().await.unwrap();
    assert_eq!((stats.pending, stats.resolved), (1, 0));
}

// ---- group commit ----

/// Parks `M-00`, `M-01`, .. from `n` tasks at once.
fn park_at_once(
    letters: &Arc<SqliteDeadLetters>,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<(), DlqError>>> {
    (0..n)
        .map(|i| {
            let letters = Arc::clone(letters);
            tokio::spawn(async move {
                letters
                    .park(&letter(&format!("M-{i:02}"), "2026-08-19T00:00:00Z"))
                    .await
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_group_fails_each_of_its_letters_and_the_writer_goes_on() {
    let dir = TempDir::new("group-fails");
    let busy = Duration::from_millis(300);
    let letters = Arc::new(
        SqliteDeadLetters::open(dir.dlq_db())
            .unwrap()
            .with_busy_timeout(busy),
    );
    letters
        .park(&letter("M-before", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let locker = raw(&dir);
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();

    // 20 letters at once while another connection holds the write lock: they go in one or two
    // groups (the first may start alone), so they fail after one or two busy timeouts, not 20.
    let started = Instant::now();
    let tasks = park_at_once(&letters, 20);
    let mut messages = Vec::new();
    for task in tasks {
        let error = task.await.unwrap().unwrap_err();
        assert!(matches!(error, DlqError::Io(_)), "{error:?}");
        assert!(
            std::error::Error::source(&error)
                .and_then(std::error::Error::source)
                .is_some_and(|e| e.is::<rusqlite::Error>()),
            "SQLite's error is kept as the source"
        );
        messages.push(retry_core::error_chain(&error).to_string());
    }
    let waited = started.elapsed();
    let expected = format!(
        "dead-letter store failed: database file {} is locked by another process (busy for 300ms)",
        dir.dlq_db().display()
    );
    for message in &messages {
        assert!(message.starts_with(&expected), "{message}");
    }
    assert!(
        waited >= busy && waited < busy * 10,
        "20 letters failed in {waited:?}: not grouped"
    );

    // The lock is gone: the writer serves the next groups, and nothing of the failed ones was
    // written.
    locker.execute_batch("COMMIT").unwrap();
    assert_eq!(ids(&letters).await, ["M-before"]);
    let tasks = park_at_once(&letters, 20);
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(letters.stats().await.unwrap().pending, 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_letter_is_committed_before_park_returns() {
    let dir = TempDir::new("committed");
    let letters = Arc::new(SqliteDeadLetters::open(dir.dlq_db()).unwrap());
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let letters = Arc::clone(&letters);
            let path = dir.dlq_db();
            tokio::spawn(async move {
                let reader = rusqlite::Connection::open(path).unwrap();
                for j in 0..5 {
                    let id = format!("M-{i:02}-{j}");
                    letters
                        .park(&letter(&id, "2026-08-19T00:00:00Z"))
                        .await
                        .unwrap();
                    // Another connection (another process, as far as SQLite knows) sees it.
                    let found: i64 = reader
                        .query_row(
                            "SELECT count(*) FROM dead_letters WHERE msg_id = ?1",
                            [&id],
                            |r| r.get(0),
                        )
                        .unwrap();
                    assert_eq!(found, 1, "{id} parked but not committed");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(letters.stats().await.unwrap().pending, 160);
}

// ---- the schema ----

const TABLES_V1: &str = "CREATE TABLE retry_core_schema (
    component TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
);
INSERT INTO retry_core_schema (component, version) VALUES ('dead_letters', 1);
CREATE TABLE dead_letters (
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
    first_failed_utc TEXT NOT NULL
);
CREATE INDEX dead_letters_first_failed ON dead_letters (first_failed_utc, msg_id);
CREATE TABLE dead_letter_redrives (
    run_id TEXT NOT NULL PRIMARY KEY,
    started_utc TEXT NOT NULL,
    record TEXT NOT NULL
);
";

fn redrive_record(run_id: &str, started_at: &str) -> retry_core::dlq::RedriveRecord {
    retry_core::dlq::RedriveRecord {
        run_id: run_id.into(),
        who: "alice".into(),
        filter: "all".into(),
        target: "deposit".into(),
        started_at: instant(started_at),
        finished_at: instant(started_at),
        limit: 10,
        rate_per_second: 5,
        selected: 1,
        succeeded: 1,
        failed: 0,
        skipped: 0,
        stopped: None,
    }
}

#[tokio::test]
async fn a_version_1_file_is_upgraded_and_keeps_its_pending_letters() {
    let dir = TempDir::new("upgrade");
    {
        // A file as retry-core wrote it before letters were resolved and merged.
        let raw = raw(&dir);
        raw.execute_batch("PRAGMA journal_mode = WAL").unwrap();
        raw.execute_batch(TABLES_V1).unwrap();
        let insert = "INSERT INTO dead_letters VALUES (?1, ?2, ?3, ?4, ?5, ?6, 't', ?7, 'E', ?8, \
             '2026-08-19T00:00:00.000000Z', ?9)";
        raw.execute(
            insert,
            rusqlite::params![
                "M-late",
                r#"{"amount":10}"#,
                "gave up after 5 attempts: 503",
                5,
                "2026-08-19T10:00:00Z",
                "2026-08-19T10:05:00Z",
                "system",
                "deposit:M-late",
                "2026-08-19T10:00:00.000000Z"
            ],
        )
        .unwrap();
        raw.execute(
            insert,
            rusqlite::params![
                "M-early",
                r#"{"amount":20}"#,
                "not retryable: 400",
                1,
                "2026-08-19T11:00:00+09:00",
                "2026-08-19T11:00:00+09:00",
                "data",
                None::<String>,
                "2026-08-19T02:00:00.000000Z"
            ],
        )
        .unwrap();
        // Recorded in this order, listed by start in version 1: b (09:00) before a (10:00).
        for record in [
            redrive_record("run-a", "2026-08-20T10:00:00+00:00"),
            redrive_record("run-b", "2026-08-20T09:00:00+00:00"),
        ] {
            let started = retry_core::time::format_utc(record.started_at);
            raw.execute(
                "INSERT INTO dead_letter_redrives VALUES (?1, ?2, ?3)",
                rusqlite::params![
                    record.run_id,
                    started,
                    serde_json::to_string(&record).unwrap()
                ],
            )
            .unwrap();
        }
    }

    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let early = DeadLetter {
        original: serde_json::json!({"amount": 20}),
        reason: "not retryable: 400".into(),
        attempts: 1,
        trace_id: "t".into(),
        class: FailureClass::Data,
        error_type: "E".into(),
        ..letter("M-early", "2026-08-19T11:00:00+09:00")
    };
    let late = DeadLetter {
        original: serde_json::json!({"amount": 10}),
        reason: "gave up after 5 attempts: 503".into(),
        last_failed_at: instant("2026-08-19T10:05:00Z"),
        trace_id: "t".into(),
        error_type: "E".into(),
        idempotency_key: Some("deposit:M-late".into()),
        ..letter("M-late", "2026-08-19T10:00:00Z")
    };
    assert_eq!(
        pending(&letters).await.unwrap(),
        [early.clone(), late.clone()]
    );
    assert_eq!(letters.get("M-late").await.unwrap(), Some(late.clone()));
    let stats = letters.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.system, stats.data, stats.resolved),
        (2, 1, 1, 0)
    );
    assert_eq!(
        letters
            .redrives()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect::<Vec<_>>(),
        ["run-b", "run-a"],
        "in the order version 1 listed them"
    );

    // Everything of version 2 works on the upgraded file.
    letters
        .record_redrive(&redrive_record("run-c", "2026-08-20T08:00:00+00:00"))
        .await
        .unwrap();
    assert_eq!(
        letters.redrives().await.unwrap().last().unwrap().run_id,
        "run-c"
    );
    letters
        .park(&letter("M-late", "2026-08-21T00:00:00Z"))
        .await
        .unwrap();
    let merged = letters.get("M-late").await.unwrap().unwrap();
    assert_eq!(
        (merged.attempts, merged.original),
        (10, late.original.clone())
    );
    assert!(
        letters
            .lease("M-early", "run-d", LONG)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        letters
            .resolve(
                "M-early",
                &Resolution::new("bob", instant("2026-08-21T00:00:00Z")).in_run("run-d")
            )
            .await
            .unwrap()
    );
    assert_eq!(ids(&letters).await, ["M-late"]);
    drop(letters);

    // The version is 2, the old index gave way to the new ones, and opening again (as a
    // second process would) changes nothing.
    let again = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    assert_eq!(again.stats().await.unwrap().resolved, 1);
    let raw = raw(&dir);
    let version: i64 = raw
        .query_row(
            "SELECT version FROM retry_core_schema WHERE component = 'dead_letters'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, 2);
    assert_eq!(indexes(&raw), indexes_of_a_new_file());
}

/// The names of the file's own indexes (not SQLite's automatic ones).
fn indexes(raw: &rusqlite::Connection) -> Vec<String> {
    raw.prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL ORDER BY name",
    )
    .unwrap()
    .query_map([], |r| r.get(0))
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn indexes_of_a_new_file() -> Vec<String> {
    let dir = TempDir::new("new-file");
    drop(SqliteDeadLetters::open(dir.dlq_db()).unwrap());
    indexes(&raw(&dir))
}

#[tokio::test]
async fn the_schema_is_created_once_checks_the_class_and_refuses_a_newer_version() {
    let dir = TempDir::new("schema");
    let first = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let second = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    first
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    assert_eq!(second.stats().await.unwrap().pending, 1);
    drop((first, second));

    let raw = raw(&dir);
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
    assert_eq!(versions, [("dead_letters".to_owned(), 2)]);
    assert_eq!(
        indexes(&raw),
        [
            "dead_letter_audit_seq",
            "dead_letter_redrives_seq",
            "dead_letters_leased",
            "dead_letters_pending",
            "dead_letters_pending_class",
            "dead_letters_pending_source",
            "dead_letters_resolved",
        ]
    );
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
        "UPDATE retry_core_schema SET version = 3 WHERE component = 'dead_letters'",
        [],
    )
    .unwrap();
    let error = SqliteDeadLetters::open(dir.dlq_db()).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("dead_letters schema version 3, newer than the 2"),
        "{error}"
    );
}

#[tokio::test]
async fn dead_letters_and_the_idempotency_log_share_a_file() {
    let dir = TempDir::new("shared");
    let store = retry_sqlite::SqliteStore::open(dir.dlq_db()).unwrap();
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    letters
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    drop((store, letters));
    // Both open again, in either order, each with its own version row.
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let _store = retry_sqlite::SqliteStore::open(dir.dlq_db()).unwrap();
    assert_eq!(letters.stats().await.unwrap().pending, 1);
    let versions: Vec<(String, i64)> = raw(&dir)
        .prepare("SELECT component, version FROM retry_core_schema ORDER BY component")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        versions,
        [("dead_letters".to_owned(), 2), ("inbox_log".to_owned(), 3)]
    );
}

// ---- a store that is down ----

#[test]
fn opening_in_a_missing_directory_is_an_io_error_naming_the_file() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("no-such-dir").join("dlq.sqlite3");
    let error = SqliteDeadLetters::open(&path).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    let message = retry_core::error_chain(&error).to_string();
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
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    // A new connection into a directory that has gone cannot open the file.
    let letters = letters.with_busy_timeout(Duration::from_millis(100));
    std::fs::remove_dir_all(&dir.0).unwrap();
    let error = letters
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains(&dir.dlq_db().display().to_string()),
        "{error}"
    );
    let error = letters.stats().await.unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains(&dir.dlq_db().display().to_string()),
        "{error}"
    );
}

#[tokio::test]
async fn a_locked_file_fails_after_the_busy_timeout_naming_the_file() {
    let dir = TempDir::new("locked");
    let letters = SqliteDeadLetters::open(dir.dlq_db())
        .unwrap()
        .with_busy_timeout(Duration::from_millis(100));
    let locker = raw(&dir);
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
        dir.dlq_db().display()
    );
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains(&expected),
        "{error}"
    );
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
    assert_eq!(letters.stats().await.unwrap().pending, 1);
}

#[test]
fn without_a_tokio_runtime_operations_still_complete() {
    let dir = TempDir::new("no-runtime");
    let letters = SqliteDeadLetters::open(dir.dlq_db()).unwrap();
    let parked = letter("M-1", "2026-08-19T00:00:00Z");
    // Any executor will do: this one parks the thread until woken.
    block_on(letters.park(&parked)).unwrap();
    assert_eq!(block_on(letters.stats()).unwrap().pending, 1);
    assert_eq!(block_on(letters.get("M-1")).unwrap(), Some(parked));
}

/// The smallest executor: polls `future` on this thread, sleeping until its waker is called.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

// ---- throughput (a figure, not a CI check: `cargo test --release --test suite -- --ignored dlq_sqlite::`) ----

#[derive(Debug)]
enum SendError {
    Upstream,
    NotParked(Box<DlqFailed>),
}

impl From<DlqFailed> for SendError {
    fn from(e: DlqFailed) -> Self {
        SendError::NotParked(Box::new(e))
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Upstream => f.write_str("upstream 503"),
            SendError::NotParked(e) => write!(f, "{}", retry_core::error_chain(e)),
        }
    }
}

impl Classify for SendError {
    fn classify(&self) -> Decision {
        match self {
            SendError::Upstream => Decision::Retry,
            SendError::NotParked(_) => Decision::Stop,
        }
    }
}

/// A call to an upstream that is down: it gives up after its first attempt and parks.
#[retryable(max = 1, dlq(sink = letters, id = id.clone(), original = &payload))]
async fn send(
    letters: &SqliteDeadLetters,
    id: String,
    payload: serde_json::Value,
) -> Result<(), SendError> {
    Err(SendError::Upstream)
}

#[test]
#[ignore = "a throughput figure: run with --release --ignored"]
fn a_burst_of_give_ups_parks_at_least_10000_letters_a_second() {
    const TASKS: usize = 64;
    const GIVE_UPS: usize = 50;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = TempDir::new("burst");
    let letters = Arc::new(SqliteDeadLetters::open(dir.dlq_db()).unwrap());
    let took = runtime.block_on(async {
        let started = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let letters = Arc::clone(&letters);
                tokio::spawn(async move {
                    for i in 0..GIVE_UPS {
                        let id = format!("M-{task:02}-{i:02}");
                        // About 200 bytes of JSON.
                        let payload = serde_json::json!({
                            "id": id, "amount": 1234, "currency": "EUR",
                            "to": "DE89370400440532013000", "from": "DE02120300000000202051",
                            "note": "invoice 2026-08-19 for order 1234567, second instalment",
                        });
                        match send(&letters, id, payload).await {
                            Err(SendError::Upstream) => {}
                            other => panic!("not parked: {other:?}"),
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        started.elapsed()
    });
    let parked = runtime.block_on(letters.stats()).unwrap().pending;
    assert_eq!(parked, (TASKS * GIVE_UPS) as u64);
    let rate = parked as f64 / took.as_secs_f64();
    eprintln!("{parked} letters parked by {TASKS} tasks on 2 workers in {took:.1?}: {rate:.0}/s");
    assert!(rate >= 10_000.0, "{rate:.0} letters/s");
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
