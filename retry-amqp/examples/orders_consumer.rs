//! An orders consumer on RabbitMQ: each order's effect once, give-ups in the broker's
//! dead-letter queue.
//!
//! It declares `orders` with its dead-letter exchange and queue, publishes 20 orders (two of
//! them poison, one of them twice as a redelivery would), and consumes them with the keys in a
//! SQLite file, then prints what happened. Needs a broker:
//!
//! ```sh
//! # a throwaway node (Debian: apt-get install rabbitmq-server), as scripts/test starts one:
//! bash -c 'source scripts/lib.sh; free_port() { python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])"; }; start_rabbitmq /tmp/rmq; echo $AMQP_URL'
//! AMQP_URL=amqp://guest:guest@127.0.0.1:PORT/%2f cargo run -p retry-amqp --example orders_consumer
//! /tmp/rmq/broker stop
//! ```
//! (or any RabbitMQ 3.10+ at `AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_amqp::dlq::BrokerDeadLetters;
use retry_amqp::lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueuePurgeOptions};
use retry_amqp::lapin::{BasicProperties, Connection, ConnectionProperties};
use retry_amqp::{Consumer, Message, Topology};
use retry_core::{Classify, Decision, Policy};
use retry_sqlite::SqliteStore;

static SHIPPED: AtomicU32 = AtomicU32::new(0);

#[derive(Debug)]
enum ShipError {
    /// The warehouse is down: may work next time.
    WarehouseDown,
    /// Not an order we can ship: fails the same way every time.
    UnknownItem,
}

impl Classify for ShipError {
    fn classify(&self) -> Decision {
        match self {
            ShipError::WarehouseDown => Decision::Retry,
            ShipError::UnknownItem => Decision::Stop,
        }
    }
    fn reason(&self) -> Option<String> {
        Some(format!("{self:?}"))
    }
}

/// The handler: ships an order (the effect), once per message id.
async fn ship(order: Message) -> Result<(), ShipError> {
    let body: serde_json::Value = serde_json::from_slice(order.body()).unwrap_or_default();
    match body["item"].as_str() {
        Some("unobtainium") => Err(ShipError::UnknownItem),
        Some("flaky-widget") => Err(ShipError::WarehouseDown),
        _ => {
            SHIPPED.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("retry_amqp=info")
        .init();
    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let topology = Topology::new("orders").delivery_limit(5);

    // Publish 20 orders; order 3 twice (a redelivery), two poison ones.
    let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    topology.declare(&channel).await?;
    for queue in [topology.queue(), topology.dead_letter_queue()] {
        channel
            .queue_purge(queue.into(), QueuePurgeOptions::default())
            .await?;
    }
    let mut ids: Vec<u32> = (1..=20).collect();
    ids.push(3);
    for id in ids {
        let item = match id {
            7 => "unobtainium",
            13 => "flaky-widget",
            _ => "book",
        };
        let body = format!("{{\"order\":{id},\"item\":\"{item}\"}}");
        channel
            .basic_publish(
                "".into(),
                "orders".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default()
                    .with_message_id(format!("order-{id}").into())
                    .with_delivery_mode(2),
            )
            .await?
            .await?;
    }

    let dir = std::env::temp_dir().join(format!("orders-consumer-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = SqliteStore::open(dir.join("inbox.sqlite3"))?;
    let consumer = Consumer::new(&url, "orders")
        .declare(topology.clone())
        .prefetch(16)
        .concurrency(4)
        .policy(
            Policy::new()
                .max_attempts(3)
                .base(Duration::from_millis(50)),
        )
        .store(store)
        // Stops once the queue is drained here; a service would wait for ctrl-c instead.
        .shutdown(async { tokio::time::sleep(Duration::from_secs(3)).await });
    consumer.run(ship).await?;

    let dlq = BrokerDeadLetters::connect(&url, topology.dead_letter_queue()).await?;
    println!(
        "shipped: {} orders (21 messages, order 3 twice)",
        SHIPPED.load(Ordering::SeqCst)
    );
    for letter in dlq.show(10).await? {
        let l = &letter.letter;
        println!(
            "dead letter {}: {} attempt(s), {} ({})",
            l.msg_id, l.attempts, l.reason, l.class
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
