#![cfg(feature = "postgres")]
//! `PgDeadLetters` on a real PostgreSQL server (`DATABASE_URL`, as `scripts/test` sets it): the
//! round trip (park, page, stats, get, resolve, reconnect, lease and put back), ordering by the
//! instant of the first failure across offsets, a message that gives up again (merged, never
//! overwritten), letters and rows that cannot be read, group commit (letters parked together
//! share a commit; one bad letter fails alone; a database that goes away fails the group
//! loudly and loses nothing acknowledged), merges and leases from two stores at once (under
//! SERIALIZABLE too), the upgrade from schema version 1, sharing a database (and a pool) with
//! `PgStore`, and a server that cannot be reached. The contract itself is checked by the
//! conformance suite (tests/dlq_conformance.rs).
//!
//! Without `DATABASE_URL`, or with a server that cannot be reached, every test fails (never
//! passes silently). Each test works in a schema of its own (`search_path` in the URL).

use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, FailureClass,
    HISTORY_LIMIT, Page, Resolution,
};
use retry_postgres::PgDeadLetters;
use retry_postgres::PgStore;

use crate::pg;

use pg::{Schema, database_url, raw_client};

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

async fn letters(schema: &Schema) -> PgDeadLetters {
    PgDeadLetters::connect(&schema.url).await.unwrap()
}

/// The `msg_id`s of every pending letter, in the store's order.
async fn ids(letters: &PgDeadLetters) -> Vec<String> {
    letters
        .page(&Page::first(usize::MAX))
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.msg_id)
        .collect()
}

async fn pending(letters: &PgDeadLetters) -> u64 {
    letters.stats().await.unwrap().pending
}

fn corrupt_message<T: std::fmt::Debug>(result: Result<T, DlqError>) -> String {
    match result {
        Err(DlqError::Corrupt(what)) => what,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// `url` pointing at the database `name` instead (URL or `key=value` form).
fn with_database(url: &str, name: &str) -> String {
    if !url.contains("://") {
        return format!("{url} dbname={name}");
    }
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

// ---- the round trip ----

#[tokio::test]
async fn park_page_resolve_reconnect_lease_and_put_back() {
    let schema = Schema::new("dlq_round_trip").await;
    let store = letters(&schema).await;
    assert_eq!(store.stats().await.unwrap(), Default::default());
    assert_eq!(store.page(&Page::first(10)).await.unwrap(), []);

    // By instant: a (17:11Z) < b (18:00Z) < c (19:00:00.250Z); as text the other way round.
    let a = DeadLetter {
        last_failed_at: instant("2026-08-19T02:12:47+09:00"),
        idempotency_key: Some("s3:M-a".into()),
        source: Some("payments::deposit".into()),
        redacted: true,
        key_scope: Some("http".into()),
        key_expires_at: Some(instant("2026-08-26T02:11:03+09:00")),
        ..letter("M-a", "2026-08-19T02:11:03+09:00")
    };
    let b = DeadLetter {
        class: FailureClass::Data,
        reason: "not retryable: 400 Bad Request".into(),
        attempts: 1,
        ..letter("M-b", "2026-08-18T18:00:00Z")
    };
    let c = DeadLetter {
        attempts: u32::MAX,
        ..letter("M-c", "2026-08-18T12:00:00.250-07:00")
    };
    for parked in [&c, &a, &b] {
        store.park(parked).await.unwrap();
    }
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.system, stats.data), (3, 2, 1));
    assert_eq!(
        stats.oldest_first_failed_at,
        Some(instant("2026-08-19T02:11:03+09:00")),
        "the instant, whatever its offset"
    );
    assert_eq!(
        store.page(&Page::first(10)).await.unwrap(),
        [a.clone(), b.clone(), c.clone()]
    );
    for parked in [&a, &b, &c] {
        assert_eq!(
            store.get(&parked.msg_id).await.unwrap().as_ref(),
            Some(parked),
            "every field comes back as parked"
        );
    }
    assert_eq!(store.get("M-none").await.unwrap(), None);

    let by_alice = Resolution::new("alice", instant("2026-08-20T09:00:00+02:00"));
    assert!(store.resolve("M-a", &by_alice).await.unwrap());
    assert!(
        !store.resolve("M-a", &by_alice).await.unwrap(),
        "resolved once only"
    );
    assert!(!store.resolve("M-none", &by_alice).await.unwrap());
    assert_eq!(pending(&store).await, 2);
    drop(store);

    // Reconnected: still resolved (and readable), the rest still pending.
    let store = letters(&schema).await;
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.resolved), (2, 1));
    assert_eq!(
        store.get("M-a").await.unwrap().unwrap().resolved,
        Some(by_alice)
    );
    assert_eq!(ids(&store).await, ["M-b", "M-c"]);

    // A redrive of b failed again: the failure goes to its history; its attempts, reason and
    // times (and so its place in the order) stay the service's.
    assert!(
        store
            .lease("M-b", "run-1", Duration::from_secs(60))
            .await
            .unwrap()
            .is_some()
    );
    let failure = Failure {
        at: instant("2026-08-20T09:30:00+09:00"),
        reason: "redrive: 400 Bad Request".into(),
        trace_id: "run-1".into(),
    };
    assert!(store.put_back("M-b", "run-1", &failure).await.unwrap());
    let now = store.get("M-b").await.unwrap().unwrap();
    assert_eq!(now.attempts, b.attempts);
    assert_eq!(now.last_failed_at, b.last_failed_at);
    assert_eq!(now.reason, b.reason);
    assert_eq!(now.first_failed_at, instant("2026-08-18T18:00:00Z"));
    assert_eq!(now.original, b.original);
    assert_eq!(now.history, [failure]);
    assert_eq!(store.stats().await.unwrap().leased, 0, "the lease ended");
    assert_eq!(ids(&store).await, ["M-b", "M-c"]);

    // A resolved letter that gives up again is pending again, with its first original.
    store
        .park(&DeadLetter {
            original: serde_json::json!("second"),
            ..a.clone()
        })
        .await
        .unwrap();
    assert_eq!(ids(&store).await, ["M-a", "M-b", "M-c"]);
    let again = store.get("M-a").await.unwrap().unwrap();
    assert_eq!((again.original, again.attempts), (a.original.clone(), 10));
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn ordering_is_by_instant_across_offsets_then_msg_id() {
    let schema = Schema::new("dlq_order").await;
    let store = letters(&schema).await;
    // Written so that text order (t4, t2, t3, t1) is nearly the reverse of time order.
    for (id, at) in [
        ("t4", "2026-08-18T17:00:00-07:00"), // 00:00Z on the 19th
        ("t3", "2026-08-18T23:30:00Z"),
        ("t2", "2026-08-18T18:00:00-05:00"), // 23:00Z
        ("t1", "2026-08-19T08:00:00+09:00"), // 23:00Z as well
    ] {
        store.park(&letter(id, at)).await.unwrap();
    }
    // t1 and t2 fail at the same instant: msg_id decides.
    assert_eq!(ids(&store).await, ["t1", "t2", "t3", "t4"]);
    let first = store.page(&Page::first(1)).await.unwrap();
    assert_eq!(first[0].msg_id, "t1");
    // The cursor is the letter's instant: the next page starts after it.
    let next = store
        .page(&Page::first(2).next_after(&first[0]))
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|l| l.msg_id.as_str()).collect::<Vec<_>>(),
        ["t2", "t3"]
    );

    // Fractions order too, and "Z" is "+00:00".
    store
        .park(&letter("t0", "2026-08-18T22:59:59.999999+00:00"))
        .await
        .unwrap();
    store
        .park(&letter("t5", "2026-08-19T00:00:00.000001Z"))
        .await
        .unwrap();
    assert_eq!(ids(&store).await, ["t0", "t1", "t2", "t3", "t4", "t5"]);

    // Ties are broken by msg_id in byte order ("B" before "a"), as SQLite does, whatever the
    // database's collation.
    for id in ["x-a", "x-B"] {
        store
            .park(&letter(id, "2026-08-20T00:00:00Z"))
            .await
            .unwrap();
    }
    let all = ids(&store).await;
    assert_eq!(&all[6..], ["x-B", "x-a"]);

    // The stored times are `timestamptz`, which the order compares as instants; the
    // nanoseconds below the microsecond sit beside them.
    let row = schema
        .client()
        .await
        .query_one(
            "SELECT first_failed_at, first_failed_ns, pg_typeof(parked_at)::text \
             FROM dead_letters WHERE msg_id = 't4'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, std::time::SystemTime>(0),
        instant("2026-08-19T00:00:00Z")
    );
    assert_eq!(row.get::<_, i16>(1), 0);
    assert_eq!(row.get::<_, String>(2), "timestamp with time zone");

    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_message_that_gives_up_again_is_merged_never_overwritten() {
    let schema = Schema::new("dlq_repark").await;
    let store = letters(&schema).await;
    let first = DeadLetter {
        last_failed_at: instant("2026-08-19T10:05:00Z"),
        source: Some("payments::deposit".into()),
        ..letter("M-1", "2026-08-19T10:00:00Z")
    };
    store.park(&first).await.unwrap();
    store
        .park(&letter("M-2", "2026-08-19T11:00:00Z"))
        .await
        .unwrap();

    // Redelivered, failed again from scratch, gave up again: a later first failure of its own,
    // another original.
    let again = DeadLetter {
        attempts: 3,
        original: serde_json::json!({"order": "M-1", "amount": 99}),
        first_failed_at: instant("2026-08-19T12:00:00Z"),
        last_failed_at: instant("2026-08-19T12:00:09Z"),
        reason: "gave up after 3 attempts: timed out".into(),
        trace_id: "e5f6".into(),
        class: FailureClass::Data,
        idempotency_key: Some("k-1".into()),
        ..first.clone()
    };
    store.park(&again).await.unwrap();
    assert_eq!(pending(&store).await, 2, "one letter per msg_id");
    let mut expected = first.clone();
    expected.absorb(&again);
    assert_eq!(store.get("M-1").await.unwrap().unwrap(), expected);
    assert_eq!(expected.original, first.original);
    // Still ordered by its first failure, before M-2.
    assert_eq!(ids(&store).await, ["M-1", "M-2"]);

    // Many more give-ups: attempts add up, the history keeps the latest HISTORY_LIMIT.
    for i in 0..(HISTORY_LIMIT + 4) {
        let more = DeadLetter {
            attempts: 1,
            last_failed_at: instant(&format!("2026-08-20T00:00:{i:02}Z")),
            reason: format!("give-up {i}"),
            ..first.clone()
        };
        expected.absorb(&more);
        store.park(&more).await.unwrap();
    }
    let stored = store.get("M-1").await.unwrap().unwrap();
    assert_eq!(stored, expected);
    assert_eq!(stored.history.len(), HISTORY_LIMIT);
    assert_eq!(stored.attempts, 5 + 3 + HISTORY_LIMIT as u32 + 4);
    drop(store);
    schema.drop_all().await;
}

// ---- letters and rows that cannot be read ----

#[tokio::test]
async fn letters_that_cannot_be_stored_are_refused_before_the_server_is_asked() {
    // (A time that is not RFC 3339 cannot be in a letter at all: `SystemTime`, and the letter
    // is refused where its JSON is read.)
    let schema = Schema::new("dlq_bad_times").await;
    let store = letters(&schema).await;
    store
        .park(&letter("M-2", "2026-08-19T02:11:03Z"))
        .await
        .unwrap();
    store
        .lease("M-2", "run-1", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let bad_failure = Failure {
        at: instant("2026-08-19T03:00:00Z"),
        reason: "r\0".into(),
        trace_id: "t".into(),
    };
    match store.put_back("M-2", "run-1", &bad_failure).await {
        Err(DlqError::Serialize(message)) => {
            assert!(
                message.contains("`M-2`") && message.contains("NUL"),
                "{message}"
            );
        }
        other => panic!("expected Serialize, got {other:?}"),
    }
    match store
        .resolve(
            "M-2",
            &Resolution::new("al\0ce", instant("2026-08-20T00:00:00Z")),
        )
        .await
    {
        Err(DlqError::Serialize(message)) => assert!(message.contains("NUL"), "{message}"),
        other => panic!("expected Serialize, got {other:?}"),
    }
    // PostgreSQL's text cannot hold NUL, nor a string of `jsonb` (the original): refused up
    // front.
    let nul = DeadLetter {
        reason: "503\0".into(),
        ..letter("M-3", "2026-08-19T02:11:03Z")
    };
    match store.park(&nul).await {
        Err(DlqError::Serialize(message)) => assert!(message.contains("NUL"), "{message}"),
        other => panic!("expected Serialize, got {other:?}"),
    }
    // Nor can a letter, run or source with a NUL exist: asking for one answers "none".
    assert_eq!(store.get("M-3\0").await.unwrap(), None);
    let ttl = Duration::from_secs(60);
    assert_eq!(store.lease("M-2", "run\0", ttl).await.unwrap(), None);
    assert!(!store.release("M-2\0", "run-1").await.unwrap());
    assert_eq!(
        store.page(&Page::first(10).source("a\0")).await.unwrap(),
        []
    );
    assert_eq!(store.audit_rows(Some("run\0")).await.unwrap(), []);
    let in_json = DeadLetter {
        original: serde_json::json!({"note": "a\0b"}),
        ..letter("M-4", "2026-08-19T02:11:03Z")
    };
    match store.park(&in_json).await {
        Err(DlqError::Serialize(message)) => assert!(message.contains("NUL"), "{message}"),
        other => panic!("expected Serialize, got {other:?}"),
    }
    assert_eq!(store.get("M-4").await.unwrap(), None);
    let stored = store.get("M-2").await.unwrap().unwrap();
    assert_eq!(
        (stored.attempts, stored.resolved),
        (5, None),
        "nothing was written"
    );
    assert_eq!(ids(&store).await, ["M-2"]);
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn unreadable_rows_are_corrupt_and_name_their_msg_id() {
    let schema = Schema::new("dlq_corrupt").await;
    let store = letters(&schema).await;
    store
        .park(&letter("good", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let raw = schema.client().await;
    // The columns are typed, so a time that is no time or an original that is no JSON cannot
    // be stored; what they hold can still be out of the store's range.
    let insert = "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
         first_failed_ns, last_failed_at, trace_id, class, error_type, idempotency_key, parked_at, \
         history) \
         VALUES ($1, '{}', 'r', $2, $3::text::timestamptz, $4, '2026-08-19T00:00:00Z', 't', \
         'data', 'E', NULL, '2026-08-19T00:00:00Z', $5::text::jsonb)";
    for (id, attempts, first, ns, history) in [
        ("bad-ns", 1_i64, "2026-08-19T00:00:01Z", 1_000_i16, "[]"),
        ("bad-attempts", -1, "2026-08-19T00:00:02Z", 0, "[]"),
        ("bad-history", 1, "2026-08-19T00:00:04Z", 0, "{\"at\": 1}"),
    ] {
        raw.execute(insert, &[&id, &attempts, &first, &ns, &history])
            .await
            .unwrap();
    }
    for (id, what) in [
        ("bad-ns", "first_failed_at has 1000 nanoseconds"),
        ("bad-attempts", "attempts -1 is out of range"),
        ("bad-history", "history is not a list of failures"),
    ] {
        let message = corrupt_message(store.get(id).await);
        assert!(
            message.contains(&format!("`{id}`")) && message.contains(what),
            "{message}"
        );
    }
    // A page never skips a row silently; the first bad one in the order is named.
    let message = corrupt_message(store.page(&Page::first(10)).await);
    assert!(message.contains("`bad-ns`"), "{message}");
    // Parking into an unreadable row fails that letter, naming it; the row is left as it was.
    let message = corrupt_message(store.park(&letter("bad-ns", "2026-08-19T00:00:00Z")).await);
    assert!(message.contains("`bad-ns`"), "{message}");
    assert!(store.get("good").await.unwrap().is_some());
    assert_eq!(pending(&store).await, 4);
    let judged = Resolution::new("alice", instant("2026-08-20T00:00:00Z"));
    for id in ["bad-ns", "bad-attempts", "bad-history"] {
        assert!(store.resolve(id, &judged).await.unwrap());
    }
    assert_eq!(ids(&store).await, ["good"]);
    drop(store);
    schema.drop_all().await;
}

// ---- group commit ----

/// The transaction that wrote each row (`xmin`): rows written by one commit share it.
async fn commits(schema: &Schema) -> i64 {
    schema
        .client()
        .await
        .query_one("SELECT count(DISTINCT xmin::text) FROM dead_letters", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn letters_parked_together_share_one_commit_and_each_is_answered_after_it() {
    let schema = Schema::new("dlq_group").await;
    let store = Arc::new(letters(&schema).await);
    // On this single-threaded runtime all 64 are queued before the writer runs again.
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let parked = letter(&format!("M-{i:02}"), "2026-08-19T00:00:00Z");
                store.park(&parked).await.map(|()| parked)
            })
        })
        .collect();
    let raw = schema.client().await;
    for task in tasks {
        let parked = task.await.unwrap().unwrap();
        // Answered "parked": another session sees it committed.
        let seen: i64 = raw
            .query_one(
                "SELECT count(*) FROM dead_letters WHERE msg_id = $1",
                &[&parked.msg_id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(seen, 1, "{} was answered before its commit", parked.msg_id);
    }
    assert_eq!(pending(&store).await, 64);
    let commits = commits(&schema).await;
    assert!(
        commits <= 2,
        "64 letters parked together took {commits} commits"
    );

    // Parked together again, some twice in the same group: merged in order, in one more commit
    // for the new letters and one for the merges.
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let id = format!("N-{:02}", i % 10);
                let mut parked = letter(&id, "2026-08-19T00:00:00Z");
                parked.attempts = 1;
                parked.reason = format!("give-up {i}");
                store.park(&parked).await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for i in 0..10 {
        let merged = store.get(&format!("N-{i:02}")).await.unwrap().unwrap();
        assert_eq!(merged.attempts, 4, "{merged:?}");
        assert_eq!(
            merged.reason,
            format!("give-up {}", 30 + i),
            "the last one parked"
        );
        assert_eq!(
            merged
                .history
                .iter()
                .map(|f| f.reason.as_str())
                .collect::<Vec<_>>(),
            [
                format!("give-up {i}"),
                format!("give-up {}", 10 + i),
                format!("give-up {}", 20 + i)
            ],
            "in the order they were parked"
        );
    }
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_letter_the_server_refuses_fails_alone() {
    let schema = Schema::new("dlq_poison").await;
    let store = Arc::new(letters(&schema).await);
    // A msg_id far beyond what a B-tree index entry holds (about 2.7 kB), random so that it
    // does not compress: the server refuses that row, and only that row.
    let huge: String = (0..1_000)
        .map(|_| format!("{:016x}", rand::random::<u64>()))
        .collect();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = Arc::clone(&store);
            let id = if i == 7 {
                huge.clone()
            } else {
                format!("M-{i:02}")
            };
            tokio::spawn(async move { store.park(&letter(&id, "2026-08-19T00:00:00Z")).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    for (i, answer) in answers.iter().enumerate() {
        if i == 7 {
            let Err(DlqError::Io(error)) = answer else {
                panic!("the huge msg_id was parked: {answer:?}");
            };
            let message = error.to_string();
            assert!(
                message.contains("PostgreSQL at") && message.contains("(not parked)"),
                "{message}"
            );
        } else {
            assert!(answer.is_ok(), "M-{i:02}: {answer:?}");
        }
    }
    assert_eq!(pending(&store).await, 19);
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_database_that_goes_away_fails_the_group_loudly_and_loses_nothing_acknowledged() {
    // A database of this test's own, so that refusing connections touches no other test.
    let name = format!("dlq_down_{}", std::process::id());
    let admin = raw_client(&database_url()).await;
    // One statement each: neither may run inside the implicit transaction of a batch.
    for statement in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
    let url = with_database(&database_url(), &name);
    let store = Arc::new(PgDeadLetters::connect(&url).await.unwrap());
    for i in 0..5 {
        store
            .park(&letter(&format!("before-{i}"), "2026-08-19T00:00:00Z"))
            .await
            .unwrap();
    }

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} ALLOW_CONNECTIONS false; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ))
        .await
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .park(&letter(&format!("during-{i}"), "2026-08-19T00:00:00Z"))
                    .await
            })
        })
        .collect();
    for task in tasks {
        match task.await.unwrap() {
            Err(DlqError::Io(error)) => {
                let message = error.to_string();
                assert!(message.contains("PostgreSQL at"), "{message}");
                assert!(message.contains("not parked"), "{message}");
            }
            other => panic!("parked while the database refused connections: {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "failed within the timeouts, took {:?}",
        started.elapsed()
    );

    admin
        .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .await
        .unwrap();
    // The writer connects again for the next letters.
    store
        .park(&letter("after", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let mut expected: Vec<String> = (0..5).map(|i| format!("before-{i}")).collect();
    expected.insert(0, "after".into());
    assert_eq!(
        ids(&store).await,
        expected,
        "every letter acknowledged, no other"
    );
    drop(store);
    admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
}

// ---- two stores at once ----

/// `schema`'s URL with SERIALIZABLE as the sessions' default isolation.
fn serializable(schema: &Schema) -> String {
    let url = database_url();
    let separator = if url.contains('?') { '&' } else { '?' };
    format!(
        "{url}{separator}options=-c%20search_path%3D{}%20-c%20default_transaction_isolation%3Dserializable",
        schema.name
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_merging_the_same_letters_lose_no_give_up_even_under_serializable() {
    let schema = Schema::new("dlq_two_merge").await;
    let url = serializable(&schema);
    let stores = [
        Arc::new(PgDeadLetters::connect(&url).await.unwrap()),
        Arc::new(PgDeadLetters::connect(&url).await.unwrap()),
    ];
    // Each store's writer merges group after group while the other does the same to the
    // same two rows: a merge that read a row the other then changed would lose a give-up.
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let store = Arc::clone(&stores[t % 2]);
            tokio::spawn(async move {
                for p in 0..25 {
                    let mut parked = letter(&format!("M-{}", (t + p) % 2), "2026-08-19T00:00:00Z");
                    parked.attempts = 1;
                    store.park(&parked).await?;
                }
                Ok::<_, DlqError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for i in 0..2 {
        let merged = stores[0].get(&format!("M-{i}")).await.unwrap().unwrap();
        assert_eq!(
            merged.attempts, 200,
            "every give-up counted once: {merged:?}"
        );
        assert_eq!(merged.history.len(), HISTORY_LIMIT);
    }
    drop(stores);
    schema.drop_all().await;
}

/// The whole contract on sessions whose default isolation is SERIALIZABLE: leases, merges and
/// resolutions wait for a busy row instead of failing (the store's writes run READ COMMITTED).
#[tokio::test]
async fn the_contract_holds_when_the_default_isolation_is_serializable() {
    let mut schemas = Vec::new();
    retry_core::dlq::conformance::run(async || {
        let schema = Schema::new("dlq_conf_serial").await;
        let store = PgDeadLetters::connect(&serializable(&schema))
            .await
            .unwrap();
        schemas.push(schema);
        store
    })
    .await;
    for schema in schemas {
        schema.drop_all().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_leasing_at_once_have_one_winner_on_the_database_clock() {
    let schema = Schema::new("dlq_two_lease").await;
    let (a, b) = (
        Arc::new(letters(&schema).await),
        Arc::new(letters(&schema).await),
    );
    a.park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);
    // 64 runs, half through each store's own pool, released at the same moment.
    let start = Arc::new(tokio::sync::Barrier::new(64));
    let asks: Vec<_> = (0..64)
        .map(|i| {
            let store = Arc::clone(if i % 2 == 0 { &a } else { &b });
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                let run = format!("run-{i}");
                start.wait().await;
                let taken = store.lease("M-1", &run, ttl).await.unwrap();
                taken.map(|_| run)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for ask in asks {
        winners.extend(ask.await.unwrap());
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(a.stats().await.unwrap().leased, 1);
    assert_eq!(b.stats().await.unwrap().leased, 1);
    let holder = &winners[0];
    let other = if holder == "run-0" { "run-1" } else { "run-0" };
    assert_eq!(b.lease("M-1", other, ttl).await.unwrap(), None);
    // The lease ends ttl after the server's now(), whatever this machine's clock says.
    let left: f64 = schema
        .client()
        .await
        .query_one(
            "SELECT extract(epoch FROM lease_until - now())::float8 FROM dead_letters",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!((0.0..=60.0).contains(&left) && left > 50.0, "{left}");
    assert!(a.release("M-1", holder).await.unwrap());
    assert!(b.lease("M-1", other, ttl).await.unwrap().is_some());
    drop((a, b));
    schema.drop_all().await;
}

// ---- the schema ----

/// Version 1's tables, exactly as the first release created them.
const V1_TABLES: &str = "
CREATE TABLE retry_core_schema (component TEXT NOT NULL PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE dead_letters (
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
CREATE INDEX dead_letters_first_failed ON dead_letters (first_failed_utc, msg_id);
CREATE TABLE dead_letter_redrives (
    run_id TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    started_utc TEXT COLLATE \"C\" NOT NULL,
    record TEXT NOT NULL
);
INSERT INTO retry_core_schema VALUES ('dead_letters', 1);
INSERT INTO dead_letters VALUES ('M-2', '{\"amount\": 20}', 'gave up after 5 attempts: 503', 5,
    '2026-08-19T09:00:00+09:00', '2026-08-19T09:01:00+09:00', 'trace-2', 'data', 'FetchError',
    'deposit:M-2', '2026-08-19T00:01:00.000000Z', '2026-08-19T00:00:00.000000Z');
INSERT INTO dead_letters VALUES ('M-1', '[1, 2]', 'timed out', 3,
    '2026-08-18T23:00:00Z', '2026-08-18T23:00:05Z', 'trace-1', 'system', 'Elapsed',
    NULL, '2026-08-18T23:00:06.000000Z', '2026-08-18T23:00:00.000000Z');
INSERT INTO dead_letter_redrives VALUES ('run-0', '2026-08-18T20:00:00.000000Z',
    '{\"run_id\": \"run-0\", \"who\": \"alice\", \"filter\": \"all\", \"target\": \"deposit\",
      \"started_at\": \"2026-08-18T20:00:00Z\", \"finished_at\": \"2026-08-18T20:00:01Z\",
      \"limit\": 10, \"rate_per_second\": 5, \"selected\": 1, \"succeeded\": 1, \"failed\": 0,
      \"skipped\": 0}');
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_is_upgraded_and_its_pending_letters_survive() {
    let schema = Schema::new("dlq_upgrade").await;
    let raw = schema.client().await;
    raw.batch_execute(V1_TABLES).await.unwrap();

    // Instances starting together: one upgrades, under the migration lock.
    let connects: Vec<_> = (0..4)
        .map(|_| {
            let url = schema.url.clone();
            tokio::spawn(async move { PgDeadLetters::connect(&url).await })
        })
        .collect();
    let mut stores = Vec::new();
    for connect in connects {
        stores.push(connect.await.unwrap().unwrap());
    }
    let store = &stores[0];
    let version: i32 = raw
        .query_one(
            "SELECT version FROM retry_core_schema WHERE component = 'dead_letters'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 3);

    let m1 = DeadLetter {
        original: serde_json::json!([1, 2]),
        reason: "timed out".into(),
        attempts: 3,
        last_failed_at: instant("2026-08-18T23:00:05Z"),
        trace_id: "trace-1".into(),
        error_type: "Elapsed".into(),
        ..letter("M-1", "2026-08-18T23:00:00Z")
    };
    let m2 = DeadLetter {
        original: serde_json::json!({"amount": 20}),
        reason: "gave up after 5 attempts: 503".into(),
        last_failed_at: instant("2026-08-19T09:01:00+09:00"),
        trace_id: "trace-2".into(),
        class: FailureClass::Data,
        idempotency_key: Some("deposit:M-2".into()),
        ..letter("M-2", "2026-08-19T09:00:00+09:00")
    };
    assert_eq!(
        store.page(&Page::first(10)).await.unwrap(),
        [m1.clone(), m2.clone()],
        "both pending, whole, in order"
    );
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.system, stats.data), (2, 1, 1));
    assert_eq!(store.redrives().await.unwrap()[0].run_id, "run-0");

    // Everything the store does works on the upgraded tables.
    let mut again = m1.clone();
    again.attempts = 1;
    again.source = Some("jobs::sync".into());
    store.park(&again).await.unwrap();
    let mut expected = m1.clone();
    expected.absorb(&again);
    assert_eq!(store.get("M-1").await.unwrap(), Some(expected));
    assert_eq!(
        store
            .page(&Page::first(10).source("jobs::sync"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        stores[1]
            .lease("M-2", "run-1", Duration::from_secs(60))
            .await
            .unwrap()
            .is_some()
    );
    let done = Resolution::new("bob", instant("2026-08-20T00:00:00Z")).in_run("run-1");
    assert!(stores[2].resolve("M-2", &done).await.unwrap());
    store
        .audit(&AuditEntry::intent(
            "run-1",
            "M-2",
            "bob",
            "deposit",
            instant("2026-08-20T00:00:00Z"),
        ))
        .await
        .unwrap();
    assert_eq!(store.audit_rows(Some("run-1")).await.unwrap().len(), 1);
    let indexes: Vec<String> = raw
        .query(
            "SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 \
             AND tablename = 'dead_letters' ORDER BY indexname",
            &[&schema.name],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        indexes,
        [
            "dead_letters_pending",
            "dead_letters_pending_source",
            "dead_letters_pkey",
            "dead_letters_resolved"
        ]
    );
    drop(stores);
    // Connecting again changes nothing.
    let again = letters(&schema).await;
    assert_eq!(pending(&again).await, 1);
    drop(again);
    schema.drop_all().await;
}

#[tokio::test]
async fn the_schema_checks_the_class_and_a_newer_version_is_refused() {
    let schema = Schema::new("dlq_schema").await;
    drop(letters(&schema).await);
    let raw = schema.client().await;
    let versions: Vec<(String, i32)> = raw
        .query("SELECT component, version FROM retry_core_schema", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(versions, [("dead_letters".to_owned(), 3)]);
    // The order columns: `msg_id` compares bytes whatever the database's default collation,
    // the times are instants.
    let columns: Vec<(String, String, Option<String>)> = raw
        .query(
            "SELECT column_name::text, data_type::text, collation_name::text \
             FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = 'dead_letters' \
             AND column_name IN ('msg_id', 'first_failed_at', 'resolved_at') ORDER BY column_name",
            &[&schema.name],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let timestamptz = "timestamp with time zone".to_owned();
    assert_eq!(
        columns,
        [
            ("first_failed_at".to_owned(), timestamptz.clone(), None),
            ("msg_id".to_owned(), "text".to_owned(), Some("C".to_owned())),
            ("resolved_at".to_owned(), timestamptz, None)
        ]
    );
    let refused = raw
        .execute(
            "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
             last_failed_at, trace_id, class, error_type, parked_at) \
             VALUES ('x', '{}', 'r', 1, now(), now(), 't', 'transient', 'E', now())",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );

    raw.execute(
        "UPDATE retry_core_schema SET version = 4 WHERE component = 'dead_letters'",
        &[],
    )
    .await
    .unwrap();
    let error = PgDeadLetters::connect(&schema.url).await.unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("dead_letters schema version 4, newer than the 3"),
        "{error}"
    );
    schema.drop_all().await;
}

#[tokio::test]
async fn dead_letters_share_a_database_and_a_pool_with_the_idempotency_store() {
    let schema = Schema::new("dlq_shared").await;
    // Started together: one migration lock for both components.
    let (store, letters) = tokio::join!(
        PgStore::connect(&schema.url),
        PgDeadLetters::connect(&schema.url)
    );
    let (store, letters) = (store.unwrap(), letters.unwrap());
    letters
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let versions: Vec<(String, i32)> = schema
        .client()
        .await
        .query(
            "SELECT component, version FROM retry_core_schema ORDER BY component",
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

    // One pool for both; the server is named as it reports its address.
    let shared = PgDeadLetters::from_pool(store.pool().clone())
        .await
        .unwrap();
    assert_eq!(pending(&shared).await, 1);
    shared
        .park(&letter("M-2", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    assert_eq!(pending(&letters).await, 2);
    let port = std::env::var("RETRY_CORE_PG_PORT").ok();
    assert!(
        shared.server().ends_with(")") && shared.server().contains("(database "),
        "{}",
        shared.server()
    );
    if let Some(port) = port {
        assert!(
            shared.server().contains(&format!(":{port}")),
            "{}",
            shared.server()
        );
    }
    assert!(format!("{shared:?}").contains("PgDeadLetters"));
    drop((store, letters, shared));
    schema.drop_all().await;
}

// ---- a server that is down ----

#[tokio::test]
async fn a_server_that_cannot_be_reached_is_io_named_and_without_the_password() {
    // Make sure the real server is there, so this test too fails without one.
    drop(raw_client(&database_url()).await);
    // Nothing listens on port 1 of the loopback address.
    let started = Instant::now();
    let error = PgDeadLetters::connect("postgres://app:s3cret-pw@127.0.0.1:1/dlq")
        .await
        .unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    let message = retry_core::error_chain(&error).to_string();
    assert!(
        message.contains("cannot connect to PostgreSQL at 127.0.0.1:1 (database dlq)"),
        "{message}"
    );
    assert!(!message.contains("s3cret-pw"), "{message}");
    assert!(!format!("{error:?}").contains("s3cret-pw"), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once"
    );
}

#[tokio::test]
async fn a_store_whose_server_went_away_fails_each_call_with_io_then_reconnects() {
    let schema = Schema::new("dlq_gone").await;
    // An application name of this test's own, so only this store's connections are ended.
    let name = schema.name.clone();
    let url = if schema.url.contains("://") {
        format!("{}&application_name={name}", schema.url)
    } else {
        format!("{} application_name={name}", schema.url)
    };
    let store = PgDeadLetters::connect(&url).await.unwrap();
    store
        .park(&letter("M-1", "2026-08-19T00:00:00Z"))
        .await
        .unwrap();
    let ended: i64 = raw_client(&database_url())
        .await
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ended >= 1, "the store's connections were found");
    // Killed connections are noticed (recycled or failed); the next calls reconnect.
    let mut recovered = false;
    for _ in 0..3 {
        match store.stats().await {
            Ok(stats) => {
                assert_eq!(stats.pending, 1);
                recovered = true;
                break;
            }
            Err(error) => {
                assert!(matches!(error, DlqError::Io(_)), "{error:?}");
                assert!(
                    retry_core::error_chain(&error)
                        .to_string()
                        .contains("PostgreSQL at"),
                    "{error}"
                );
            }
        }
    }
    assert!(
        recovered,
        "the store reconnects after the server dropped it"
    );
    let mut parked = false;
    for i in 0..3 {
        match store
            .park(&letter(&format!("M-2-{i}"), "2026-08-19T00:00:00Z"))
            .await
        {
            Ok(()) => {
                parked = true;
                break;
            }
            Err(error) => assert!(
                retry_core::error_chain(&error)
                    .to_string()
                    .contains("PostgreSQL at"),
                "{error}"
            ),
        }
    }
    assert!(parked, "the writer reconnects after the server dropped it");
    drop(store);
    schema.drop_all().await;
}

// ---- throughput ----

/// Letters per second when 64 tasks park 50 letters each (~200-byte originals) on a 2-worker
/// runtime. A measurement, not a check: `cargo test --release --features postgres --test suite
/// -- --ignored --nocapture dlq_pg::parks_per_second`.
#[test]
#[ignore = "a measurement; run by hand"]
fn parks_per_second() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let schema = Schema::new("dlq_throughput").await;
        let store = Arc::new(letters(&schema).await);
        const TASKS: usize = 64;
        const PARKS: usize = 50;
        let started = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for p in 0..PARKS {
                        let mut parked = letter(&format!("M-{t:02}-{p:02}"), "2026-08-19T00:00:00Z");
                        parked.original = serde_json::json!({
                            "order": format!("M-{t:02}-{p:02}"),
                            "customer": "c-0000000000000000000000000000000000000042",
                            "amount": 1000, "currency": "EUR",
                            "lines": [{"sku": "SKU-000000000001", "qty": 1}, {"sku": "SKU-000000000002", "qty": 3}],
                            "note": "about two hundred bytes of original request body",
                        });
                        store.park(&parked).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let elapsed = started.elapsed();
        let parked: i64 = schema
            .client()
            .await
            .query_one("SELECT count(*) FROM dead_letters", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(parked, (TASKS * PARKS) as i64);
        let per_second = (TASKS * PARKS) as f64 / elapsed.as_secs_f64();
        eprintln!(
            "{} letters in {elapsed:?}: {per_second:.0} letters/s, {} commits",
            TASKS * PARKS,
            commits(&schema).await
        );
        drop(store);
        schema.drop_all().await;
    });
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
