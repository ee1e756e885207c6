//! What the broker tests share: the broker's address, a queue of each test's own, publishing,
//! reading the dead-letter queue, and the handler whose effect is a row in the store's database.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use retry_amqp::lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use retry_amqp::lapin::types::FieldTable;
use retry_amqp::lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use retry_amqp::{BoxFuture, BrokerLetter, Message, Topology};
use retry_core::idempotency::StoreError;
use retry_core::{Classify, Decision};

/// The broker's URL, or a loud failure: these tests are compiled only with `broker-tests`.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| {
        panic!(
            "AMQP_URL is not set: the broker tests (feature `broker-tests`) need a RabbitMQ \
             node, amqp://USER:PASS@HOST:PORT/VHOST; scripts/test starts a throwaway one"
        )
    })
}

/// A queue name of this test's own, unique in this run.
pub fn queue_name(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "t.{test}.{}.{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub async fn channel() -> (Connection, Channel) {
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("connect to AMQP_URL");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    (connection, channel)
}

/// The message ids of `n` orders, one in twenty of them poison: `(id, poison)`.
pub fn orders(n: usize) -> Vec<(String, bool)> {
    (0..n)
        .map(|i| (format!("order-{i:05}"), i % 20 == 7))
        .collect()
}

/// The body of an order: JSON, with a byte sequence a re-encoding would change.
pub fn body(id: &str, poison: bool) -> Vec<u8> {
    format!("{{\"id\":\"{id}\",\"poison\":{poison},\"note\":\"caf\u{e9} \u{1f600}\"}}").into_bytes()
}

/// Declares `queue`'s topology and publishes the orders to it (persistent, confirmed).
pub async fn publish_orders(channel: &Channel, topology: &Topology, orders: &[(String, bool)]) {
    topology.declare(channel).await.expect("declare");
    for (id, poison) in orders {
        channel
            .basic_publish(
                "".into(),
                topology.queue().into(),
                BasicPublishOptions::default(),
                &body(id, *poison),
                BasicProperties::default()
                    .with_message_id(id.as_str().into())
                    .with_delivery_mode(2)
                    .with_content_type("application/json".into()),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
    }
}

/// Messages ready in `queue`.
pub async fn ready(channel: &Channel, queue: &str) -> u32 {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("passive declare")
        .message_count()
}

/// Takes every letter out of `dlq` (acked: they are gone afterwards).
pub async fn take_letters(channel: &Channel, dlq: &str) -> Vec<(BrokerLetter, Message)> {
    let mut letters = Vec::new();
    while let Some(got) = channel
        .basic_get(dlq.into(), BasicGetOptions::default())
        .await
        .expect("basic.get")
    {
        let delivery = got.delivery;
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
        let message = Message::new(delivery.data.clone())
            .with_properties(delivery.properties.clone())
            .with_route(delivery.exchange.as_str(), delivery.routing_key.as_str());
        letters.push((BrokerLetter::read(&message), message));
    }
    letters
}

/// Waits until `done()` says so, or fails after `limit` saying `what`.
pub async fn wait_until<F, Fut>(limit: Duration, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether each effect takes a little while (0 to 20 ms, before its write, inside the
/// transaction): the kill test's consumer is slowed down so that its kills land mid-run.
pub static SLOW: AtomicBool = AtomicBool::new(false);

async fn maybe_slow() {
    if SLOW.load(Ordering::Relaxed) {
        let ms = rand::RngExt::random_range(&mut rand::rng(), 0..20);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Whether poison orders are fixed (the redrive test fixes them).
pub static FIXED: AtomicBool = AtomicBool::new(false);

/// The handler's error: transient (retried), poison (not), or the store's.
#[derive(Debug)]
pub enum OrderError {
    /// Poison with an odd number: a dependency that stays down (retried until attempts run out).
    Unavailable,
    /// Poison with an even number: a message that can never work (not retried).
    Invalid,
    Store(StoreError),
}

impl Classify for OrderError {
    fn classify(&self) -> Decision {
        match self {
            OrderError::Unavailable => Decision::Retry,
            OrderError::Invalid => Decision::Stop,
            OrderError::Store(StoreError::Unavailable(_)) => Decision::Retry,
            OrderError::Store(_) => Decision::Stop,
        }
    }
    fn reason(&self) -> Option<String> {
        Some(format!("{self:?}"))
    }
}

impl From<StoreError> for OrderError {
    fn from(e: StoreError) -> Self {
        OrderError::Store(e)
    }
}

/// Whether `id` is a poison order that stays down (retried) rather than invalid.
pub fn transient(id: &str) -> bool {
    id.trim_start_matches("order-").parse::<u64>().unwrap_or(0) % 40 == 27
}

/// What the handler decides before its effect: the poison's error, unless fixed.
pub fn judge(message: &Message) -> Result<String, OrderError> {
    let id = message.message_id().unwrap_or_default().to_owned();
    let order: serde_json::Value =
        serde_json::from_slice(message.body()).map_err(|_| OrderError::Invalid)?;
    if order["poison"] == serde_json::Value::Bool(true) && !FIXED.load(Ordering::SeqCst) {
        return Err(if transient(&id) {
            OrderError::Unavailable
        } else {
            OrderError::Invalid
        });
    }
    Ok(id)
}

/// The effect on SQLite: a row in `effects` (no unique constraint, so a second run shows).
pub fn sqlite_effect<'t>(
    message: &'t Message,
    tx: &'t mut retry_sqlite::SqliteTransaction,
) -> BoxFuture<'t, Result<(), OrderError>> {
    let judged = judge(message);
    Box::pin(async move {
        let id = judged?;
        maybe_slow().await;
        tx.run(move |c| c.execute("INSERT INTO effects (msg_id) VALUES (?1)", [id]))
            .await?;
        Ok(())
    })
}

/// The effect on PostgreSQL: the same row, in the schema of the test.
pub fn pg_effect<'t>(
    message: &'t Message,
    tx: &'t mut retry_postgres::PgTransaction,
) -> BoxFuture<'t, Result<(), OrderError>> {
    let judged = judge(message);
    Box::pin(async move {
        let id = judged?;
        maybe_slow().await;
        tx.client()
            .execute("INSERT INTO effects (msg_id) VALUES ($1)", &[&id])
            .await
            .map_err(|e| OrderError::Store(StoreError::Unavailable(Box::new(e))))?;
        Ok(())
    })
}

/// A SQLite file with the `effects` table, under a fresh directory.
pub fn sqlite_file(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("retry-amqp-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("inbox.sqlite3");
    rusqlite::Connection::open(&path)
        .and_then(|c| c.execute_batch("CREATE TABLE effects (msg_id TEXT NOT NULL)"))
        .expect("effects table");
    path
}

/// How often each message's effect happened, on SQLite.
pub fn sqlite_effects(path: &std::path::Path) -> BTreeMap<String, u64> {
    let c = rusqlite::Connection::open(path).expect("open");
    let mut s = c
        .prepare("SELECT msg_id, count(*) FROM effects GROUP BY msg_id")
        .expect("prepare");
    s.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
    })
    .expect("query")
    .map(|r| r.expect("row"))
    .collect()
}

/// The PostgreSQL server of the tests, or a loud failure.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!("DATABASE_URL is not set: the PostgreSQL broker tests need a server (scripts/test starts one)")
    })
}

/// `DATABASE_URL` with `search_path` set to `schema`.
pub fn with_search_path(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}")
}

pub async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(connection);
    client
}

/// A fresh schema with the `effects` table; its URL.
pub async fn pg_schema(test: &str) -> String {
    let schema = format!("amqp_{test}_{}", std::process::id());
    let client = pg_client(&database_url()).await;
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.effects (msg_id TEXT NOT NULL)"
        ))
        .await
        .expect("schema");
    with_search_path(&database_url(), &schema)
}

/// How often each message's effect happened, on PostgreSQL.
pub async fn pg_effects(url: &str) -> BTreeMap<String, u64> {
    let client = pg_client(url).await;
    client
        .query("SELECT msg_id, count(*) FROM effects GROUP BY msg_id", &[])
        .await
        .expect("query")
        .into_iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
            )
        })
        .collect()
}

/// The checks every run ends with: each good order's effect exactly once, no poison's effect
/// (unless `fixed`), and every poison order among the letters.
pub fn assert_exactly_once(
    orders: &[(String, bool)],
    effects: &BTreeMap<String, u64>,
    lettered: &std::collections::BTreeSet<String>,
) {
    let twice: Vec<_> = effects.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "effects that happened more than once: {twice:?}"
    );
    for (id, poison) in orders {
        if *poison {
            assert!(!effects.contains_key(id), "poison {id} had an effect");
            assert!(
                lettered.contains(id),
                "poison {id} is not in the dead-letter queue"
            );
        } else {
            assert_eq!(
                effects.get(id),
                Some(&1),
                "order {id}: effect not exactly once"
            );
            assert!(!lettered.contains(id), "good order {id} was dead-lettered");
        }
    }
}
