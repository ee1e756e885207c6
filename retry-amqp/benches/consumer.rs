//! Messages per second of the library's `Consumer` (transactional mode on `PgStore`: the claim,
//! the effect and `done` in one commit) against a hand-written lapin consumer doing the same
//! dedup in the same PostgreSQL through the same pool (`BEGIN; INSERT .. ON CONFLICT DO
//! NOTHING; the effect; COMMIT`, ack after the commit), at prefetch 1, 16 and 128 (as many
//! handlers at once as the prefetch). Each side opens its own AMQP connection inside the timed
//! run, and the sides take turns going first. Needs `AMQP_URL` and `DATABASE_URL`:
//!
//! ```sh
//! cargo bench -p retry-amqp --bench consumer
//! ```
//!
//! `BENCH_PREFETCH=16,128`, `BENCH_SIDE=hand|lib`, `BENCH_RUNS` (3), `BENCH_MESSAGES` (1,000 at
//! prefetch 1, else 4,000) and `BENCH_POOL` (the store's pool size, `PgStore`'s default 16)
//! select what runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_amqp::lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use retry_amqp::lapin::types::FieldTable;
use retry_amqp::lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use retry_amqp::{BoxFuture, Consumer, Message};
use retry_core::idempotency::StoreError;
use retry_core::{Classify, Decision};
use retry_postgres::{PgStore, PgTransaction};

#[derive(Debug)]
struct Failed(#[allow(dead_code, reason = "read through Debug")] String);

impl Classify for Failed {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Self {
        Failed(e.to_string())
    }
}

fn effect<'t>(
    message: &'t Message,
    tx: &'t mut PgTransaction,
) -> BoxFuture<'t, Result<(), Failed>> {
    Box::pin(async move {
        let id = message.message_id().unwrap_or_default();
        // Prepared once per connection, as the hand-written side does: the effect costs the
        // server the same on both sides.
        let write = tx
            .prepare_cached("INSERT INTO bench_effects (msg_id) VALUES ($1)")
            .await
            .map_err(|e| Failed(e.to_string()))?;
        tx.client()
            .execute(&write, &[&id])
            .await
            .map_err(|e| Failed(e.to_string()))?;
        Ok(())
    })
}

async fn publish(channel: &Channel, queue: &str, n: usize) {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..n {
        // Confirmed all at once below (`wait_for_confirms`).
        drop(
            channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    format!("{{\"n\":{i}}}").as_bytes(),
                    BasicProperties::default()
                        .with_message_id(format!("{queue}-{i}").into())
                        .with_delivery_mode(2),
                )
                .await
                .unwrap(),
        );
    }
    channel.wait_for_confirms().await.unwrap();
}

async fn effects(store: &PgStore, queue: &str) -> i64 {
    let client = store.pool().get().await.unwrap();
    client
        // A range on the index (`LIKE $1` would not use it: the plan is made without the value).
        .query_one(
            "SELECT count(*) FROM bench_effects WHERE msg_id COLLATE \"C\" >= $1 AND msg_id COLLATE \"C\" < $2",
            &[&format!("{queue}-"), &format!("{queue}.")],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until the `n` effects of `queue` are committed. The effects are counted only once the
/// broker has no message of the queue left to deliver (a cheap passive declare): a count every
/// 10 ms through the run would take a share of the server that both sides need.
async fn wait_for(channel: &Channel, store: &PgStore, queue: &str, n: usize) {
    loop {
        let drained = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count()
            == 0;
        if drained && effects(store, queue).await >= n as i64 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The hand-written floor: one task per delivery (at most `prefetch` at once), dedup by
/// `INSERT .. ON CONFLICT DO NOTHING` in the effect's transaction, ack after the commit.
/// Returns the connection and the permits of the deliveries in flight: all of them free means
/// every delivery taken has been acked, and the connection can close.
async fn hand_written(
    amqp: &str,
    store: &PgStore,
    queue: &str,
    prefetch: u16,
) -> (Connection, Arc<tokio::sync::Semaphore>) {
    // Its own connection, opened in the timed run as the library's `Consumer` opens its own.
    let connection = Connection::connect(amqp, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .unwrap();
    let mut deliveries = channel
        .basic_consume(
            queue.into(),
            "hand".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let pool = store.pool().clone();
    let permits = Arc::new(tokio::sync::Semaphore::new(usize::from(prefetch)));
    let in_flight = Arc::clone(&permits);
    let task = tokio::spawn(async move {
        while let Some(Ok(delivery)) = std::future::poll_fn(|cx| {
            futures_core::Stream::poll_next(std::pin::Pin::new(&mut deliveries), cx)
        })
        .await
        {
            let permit = Arc::clone(&permits).acquire_owned().await.unwrap();
            let pool = pool.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let id = delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                let client = pool.get().await.unwrap();
                let claim = client
                    .prepare_cached(
                        "INSERT INTO bench_dedup (msg_id) VALUES ($1) ON CONFLICT DO NOTHING",
                    )
                    .await
                    .unwrap();
                let write = client
                    .prepare_cached("INSERT INTO bench_effects (msg_id) VALUES ($1)")
                    .await
                    .unwrap();
                client.batch_execute("BEGIN").await.unwrap();
                if client.execute(&claim, &[&id]).await.unwrap() == 1 {
                    client.execute(&write, &[&id]).await.unwrap();
                }
                client.batch_execute("COMMIT").await.unwrap();
                delivery.ack(BasicAckOptions::default()).await.unwrap();
            });
        }
    });
    // The consumer runs until its connection is closed.
    drop(task);
    (connection, in_flight)
}

/// One timed run of one side over `queue`, its `n` messages already published.
struct Bench<'a> {
    amqp: &'a str,
    channel: &'a Channel,
    store: &'a Arc<PgStore>,
    queue: &'a str,
    prefetch: u16,
    n: usize,
}

impl Bench<'_> {
    /// Messages per second of the hand-written consumer.
    async fn hand_written(&self) -> f64 {
        let start = Instant::now();
        let (consumer, in_flight) =
            hand_written(self.amqp, self.store, self.queue, self.prefetch).await;
        wait_for(self.channel, self.store, self.queue, self.n).await;
        let rate = self.n as f64 / start.elapsed().as_secs_f64();
        // The last acks are sent before the connection closes, as the `Consumer`'s shutdown
        // finishes its deliveries.
        let _ = in_flight.acquire_many(u32::from(self.prefetch)).await;
        let _ = consumer.close(200, "done".into()).await;
        rate
    }

    /// Messages per second of the library's `Consumer`.
    async fn consumer(&self) -> f64 {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let consumer = Consumer::new(self.amqp, self.queue)
            .prefetch(self.prefetch)
            .concurrency(usize::from(self.prefetch))
            .store(Arc::clone(self.store))
            .shutdown(async {
                let _ = stopped.await;
            });
        let start = Instant::now();
        let running = tokio::spawn(consumer.run_transactional(effect));
        wait_for(self.channel, self.store, self.queue, self.n).await;
        let rate = self.n as f64 / start.elapsed().as_secs_f64();
        let _ = stop.send(());
        let _ = running.await;
        rate
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (Ok(amqp), Ok(database)) = (std::env::var("AMQP_URL"), std::env::var("DATABASE_URL"))
    else {
        eprintln!("the consumer bench needs AMQP_URL and DATABASE_URL (scripts/test starts both)");
        std::process::exit(2);
    };
    let store = PgStore::connect(&database).await.unwrap();
    // Both sides run on this pool.
    let store = Arc::new(
        match std::env::var("BENCH_POOL")
            .ok()
            .and_then(|p| p.parse().ok())
        {
            Some(n) => store.with_pool_size(n),
            None => store,
        },
    );
    // Emptied first, and `bench_effects` indexed for `wait_for`'s count by prefix: a count
    // that scanned every row of every earlier run would take more and more of the server's
    // time.
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_effects (msg_id TEXT NOT NULL); \
             CREATE INDEX IF NOT EXISTS bench_effects_msg_id_c ON bench_effects (msg_id COLLATE \"C\"); \
             CREATE TABLE IF NOT EXISTS bench_dedup (msg_id TEXT PRIMARY KEY); \
             TRUNCATE bench_effects, bench_dedup; \
             DELETE FROM inbox_log WHERE biz_key LIKE 'bench.%'",
        )
        .await
        .unwrap();
    // The earlier runs' keys, deleted above, leave dead entries in `inbox_log`'s indexes that
    // the library's side would otherwise pay for (the floor's table is truncated). A statement
    // of its own: VACUUM cannot run in the implicit transaction of a multi-statement batch.
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute("VACUUM inbox_log")
        .await
        .unwrap();
    let connection = Connection::connect(&amqp, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let runs = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    println!(
        "the store's pool: {} connections; {runs} runs a side, medians",
        store.pool().status().max_size
    );
    println!(
        "| prefetch | messages | hand-written lapin (msg/s) | retry-amqp Consumer (msg/s) | ratio |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: |");
    // `BENCH_PREFETCH=16,128` runs only those; `BENCH_SIDE=hand` or `lib` only that side (its
    // column then reads 0): for profiling one side at a time.
    let prefetches: Vec<u16> = std::env::var("BENCH_PREFETCH")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1, 16, 128]);
    let side = std::env::var("BENCH_SIDE").unwrap_or_default();
    for prefetch in prefetches {
        let n = match std::env::var("BENCH_MESSAGES")
            .ok()
            .and_then(|n| n.parse().ok())
        {
            Some(n) => n,
            None if prefetch == 1 => 1000,
            None => 4000,
        };
        let (mut hand, mut lib) = (Vec::new(), Vec::new());
        for run in 0..runs {
            // The sides take turns going first: whatever one run leaves the server to do
            // (autovacuum, a checkpoint) falls on each side as often.
            let order = if run % 2 == 0 {
                ["hand", "lib"]
            } else {
                ["lib", "hand"]
            };
            for this in order {
                if !side.is_empty() && side != this {
                    continue;
                }
                let queue = format!("bench.{this}.{prefetch}.{run}.{}", std::process::id());
                publish(&channel, &queue, n).await;
                let bench = Bench {
                    amqp: &amqp,
                    channel: &channel,
                    store: &store,
                    queue: &queue,
                    prefetch,
                    n,
                };
                if this == "hand" {
                    hand.push(bench.hand_written().await);
                } else {
                    lib.push(bench.consumer().await);
                }
            }
        }
        // A side not run reads 0.
        for v in [&mut hand, &mut lib] {
            if v.is_empty() {
                v.push(0.0);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (h, l) = (median(&mut hand), median(&mut lib));
        println!("| {prefetch} | {n} | {h:.0} | {l:.0} | {:.2}x |", l / h);
    }
}
