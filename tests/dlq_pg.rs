#![cfg(feature = "postgres")]
//! `PgDeadLetters` on a real PostgreSQL server (`DATABASE_URL`, as `scripts/test` sets it): the
//! round trip (park, list, count, oldest, get, ack, reconnect, put back), ordering by the
//! instant of the first failure across offsets, a message that gives up again, letters and rows
//! that cannot be read, concurrent parks and migrations, sharing a database (and a pool) with
//! `PgStore`, and a server that cannot be reached.
//!
//! Without `DATABASE_URL`, or with a server that cannot be reached, every test fails (never
//! passes silently). Each test works in a schema of its own (`search_path` in the URL).

use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DlqError, FailureClass, LegacyStore, PgDeadLetters,
};
use retry_core::idempotency::PgStore;

#[path = "common/pg.rs"]
mod pg;

use pg::{Schema, database_url, raw_client};

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

async fn letters(schema: &Schema) -> PgDeadLetters {
    PgDeadLetters::connect(&schema.url).await.unwrap()
}

async fn ids(letters: &PgDeadLetters) -> Vec<String> {
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
async fn park_list_ack_reconnect_and_put_back() {
    let schema = Schema::new("dlq_round_trip").await;
    let store = letters(&schema).await;
    assert_eq!(store.count().await.unwrap(), 0);
    assert_eq!(store.oldest().await.unwrap(), None);
    assert_eq!(store.list().await.unwrap(), []);

    // By instant: a (17:11Z) < b (18:00Z) < c (19:00:00.250Z); as text the other way round.
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
    let c = DeadLetter {
        attempts: u32::MAX,
        ..letter("M-c", "2026-08-18T12:00:00.250-07:00")
    };
    for parked in [&c, &a, &b] {
        store.park(parked).await.unwrap();
    }
    assert_eq!(store.count().await.unwrap(), 3);
    assert_eq!(
        store.list().await.unwrap(),
        [a.clone(), b.clone(), c.clone()]
    );
    assert_eq!(store.oldest().await.unwrap(), Some(a.clone()));
    for parked in [&a, &b, &c] {
        assert_eq!(
            store.get(&parked.msg_id).await.unwrap().as_ref(),
            Some(parked),
            "every field comes back as parked"
        );
    }
    assert_eq!(store.get("M-none").await.unwrap(), None);

    assert!(store.ack("M-a").await.unwrap());
    assert!(!store.ack("M-a").await.unwrap(), "acked once only");
    assert!(!store.ack("M-none").await.unwrap());
    assert_eq!(store.count().await.unwrap(), 2);
    assert_eq!(store.oldest().await.unwrap(), Some(b.clone()));
    drop(store);

    // Reconnected: still acked, the rest still pending.
    let store = letters(&schema).await;
    assert_eq!(store.count().await.unwrap(), 2);
    assert_eq!(store.get("M-a").await.unwrap(), None);
    assert_eq!(ids(&store).await, ["M-b", "M-c"]);

    // A redrive of b failed again: attempts and last_failed_at move, first_failed_at stays
    // (even if the letter put back says otherwise), and so does b's place in the order.
    let failed_again = DeadLetter {
        attempts: b.attempts + 1,
        last_failed_at: "2026-08-20T09:30:00+09:00".into(),
        reason: "redrive: 400 Bad Request".into(),
        first_failed_at: "2026-08-20T09:29:59+09:00".into(),
        ..b.clone()
    };
    store.put_back(&failed_again).await.unwrap();
    let now = store.get("M-b").await.unwrap().unwrap();
    assert_eq!(now.attempts, 2);
    assert_eq!(now.last_failed_at, "2026-08-20T09:30:00+09:00");
    assert_eq!(now.reason, "redrive: 400 Bad Request");
    assert_eq!(now.first_failed_at, "2026-08-18T18:00:00Z");
    assert_eq!(now.original, b.original);
    assert_eq!(store.count().await.unwrap(), 2);
    assert_eq!(ids(&store).await, ["M-b", "M-c"]);

    // A letter put back after it was acked is pending again.
    store.put_back(&a).await.unwrap();
    assert_eq!(ids(&store).await, ["M-a", "M-b", "M-c"]);
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
    assert_eq!(store.oldest().await.unwrap().unwrap().msg_id, "t1");

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

    // The stored strings are as given; the sortable instant sits beside them.
    let row = schema
        .client()
        .await
        .query_one(
            "SELECT first_failed_at, first_failed_utc, length(parked_at) FROM dead_letters \
             WHERE msg_id = 't4'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "2026-08-18T17:00:00-07:00");
    assert_eq!(row.get::<_, String>(1), "2026-08-19T00:00:00.000000Z");
    assert_eq!(row.get::<_, i32>(2), 27, "parked_at is fixed-width UTC");
    drop(store);
    schema.drop_all().await;
}

#[tokio::test]
async fn a_message_that_gives_up_again_keeps_its_first_failure() {
    let schema = Schema::new("dlq_repark").await;
    let store = letters(&schema).await;
    let first = DeadLetter {
        last_failed_at: "2026-08-19T10:05:00Z".into(),
        ..letter("M-1", "2026-08-19T10:00:00Z")
    };
    store.park(&first).await.unwrap();
    store
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
    store.park(&again).await.unwrap();
    assert_eq!(store.count().await.unwrap(), 2, "one letter per msg_id");
    assert_eq!(
        store.get("M-1").await.unwrap().unwrap(),
        DeadLetter {
            first_failed_at: first.first_failed_at.clone(),
            ..again
        }
    );
    // Still ordered by its first failure, before M-2.
    assert_eq!(ids(&store).await, ["M-1", "M-2"]);
    drop(store);
    schema.drop_all().await;
}

// ---- letters and rows that cannot be read ----

#[tokio::test]
async fn letters_whose_times_do_not_parse_are_refused() {
    let schema = Schema::new("dlq_bad_times").await;
    let store = letters(&schema).await;
    let message = corrupt_message(store.park(&letter("M-1", "2026-08-19T02:11:03")).await);
    assert!(
        message.contains("`M-1`") && message.contains("first_failed_at \"2026-08-19T02:11:03\""),
        "{message}"
    );
    let bad_last = DeadLetter {
        last_failed_at: "yesterday".into(),
        ..letter("M-2", "2026-08-19T02:11:03Z")
    };
    let message = corrupt_message(store.put_back(&bad_last).await);
    assert!(
        message.contains("`M-2`") && message.contains("last_failed_at"),
        "{message}"
    );
    assert_eq!(store.count().await.unwrap(), 0, "nothing was written");
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
    let insert = "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
         last_failed_at, trace_id, class, error_type, idempotency_key, parked_at, first_failed_utc) \
         VALUES ($1, $2, 'r', $3, $4, '2026-08-19T00:00:00Z', 't', 'data', 'E', NULL, \
         '2026-08-19T00:00:00.000000Z', $5)";
    for (id, original, attempts, first, utc) in [
        (
            "bad-json",
            "{not json",
            1_i64,
            "2026-08-19T00:00:00Z",
            "2026-08-19T00:00:01.000000Z",
        ),
        (
            "bad-attempts",
            "{}",
            -1,
            "2026-08-19T00:00:00Z",
            "2026-08-19T00:00:02.000000Z",
        ),
        (
            "bad-time",
            "{}",
            1,
            "last tuesday",
            "2026-08-19T00:00:03.000000Z",
        ),
    ] {
        raw.execute(insert, &[&id, &original, &attempts, &first, &utc])
            .await
            .unwrap();
    }
    for (id, what) in [
        ("bad-json", "original is not JSON"),
        ("bad-attempts", "attempts -1 is out of range"),
        ("bad-time", "first_failed_at \"last tuesday\""),
    ] {
        let message = corrupt_message(store.get(id).await);
        assert!(
            message.contains(&format!("`{id}`")) && message.contains(what),
            "{message}"
        );
    }
    // A list never skips a row silently; the first bad one in the order is named.
    let message = corrupt_message(store.list().await);
    assert!(message.contains("`bad-json`"), "{message}");
    assert!(store.get("good").await.unwrap().is_some());
    assert_eq!(store.count().await.unwrap(), 4);
    for id in ["bad-json", "bad-attempts", "bad-time"] {
        assert!(store.ack(id).await.unwrap());
    }
    assert_eq!(ids(&store).await, ["good"]);
    drop(store);
    schema.drop_all().await;
}

// ---- concurrency, the schema, sharing ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_connects_migrate_once_and_concurrent_parks_all_land() {
    let schema = Schema::new("dlq_concurrent").await;
    // Instances starting together: the advisory lock serialises the migration.
    let connects: Vec<_> = (0..8)
        .map(|_| {
            let url = schema.url.clone();
            tokio::spawn(async move { PgDeadLetters::connect(&url).await })
        })
        .collect();
    let mut stores = Vec::new();
    for connect in connects {
        stores.push(Arc::new(connect.await.unwrap().unwrap()));
    }
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let store = Arc::clone(&stores[i % stores.len()]);
            tokio::spawn(async move {
                // Every id from two tasks at once: the upsert never duplicates nor fails.
                let id = format!("M-{:02}", i / 2);
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
    assert_eq!(stores[0].count().await.unwrap(), 20);
    let expected: Vec<String> = (0..20).map(|i| format!("M-{i:02}")).collect();
    assert_eq!(ids(&stores[1]).await, expected);
    drop(stores);
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
    assert_eq!(versions, [("dead_letters".to_owned(), 1)]);
    // The order columns compare bytes whatever the database's default collation.
    let collations: Vec<(String, Option<String>)> = raw
        .query(
            "SELECT column_name::text, collation_name::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = 'dead_letters' \
             AND column_name IN ('msg_id', 'first_failed_utc') ORDER BY column_name",
            &[&schema.name],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        collations,
        [
            ("first_failed_utc".to_owned(), Some("C".to_owned())),
            ("msg_id".to_owned(), Some("C".to_owned()))
        ]
    );
    let refused = raw
        .execute(
            "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
             last_failed_at, trace_id, class, error_type, parked_at, first_failed_utc) \
             VALUES ('x', '{}', 'r', 1, 'a', 'b', 't', 'transient', 'E', 'p', 'u')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );

    raw.execute(
        "UPDATE retry_core_schema SET version = 2 WHERE component = 'dead_letters'",
        &[],
    )
    .await
    .unwrap();
    let error = PgDeadLetters::connect(&schema.url).await.unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("dead_letters schema version 2, newer than the 1"),
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
        [("dead_letters".to_owned(), 1), ("inbox_log".to_owned(), 1)]
    );

    // One pool for both; the server is named as it reports its address.
    let shared = PgDeadLetters::from_pool(store.pool().clone())
        .await
        .unwrap();
    assert_eq!(shared.count().await.unwrap(), 1);
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
    let message = error.to_string();
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
async fn a_store_whose_server_went_away_fails_each_call_with_io() {
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
        match store.count().await {
            Ok(n) => {
                assert_eq!(n, 1);
                recovered = true;
                break;
            }
            Err(error) => {
                assert!(matches!(error, DlqError::Io(_)), "{error:?}");
                assert!(error.to_string().contains("PostgreSQL at"), "{error}");
            }
        }
    }
    assert!(
        recovered,
        "the store reconnects after the server dropped it"
    );
    drop(store);
    schema.drop_all().await;
}
