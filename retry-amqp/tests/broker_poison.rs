//! Against a real broker (feature `broker-tests`, `AMQP_URL`): 1,000 orders, one in twenty of
//! them poison. Every good order has its effect exactly once; every poison order is in the
//! dead-letter queue with the seed's fields, its body byte for byte, its headers kept, and its
//! attempts counted (3 for a dependency that stays down, 1 for an invalid order).
#![cfg(feature = "broker-tests")]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use retry_amqp::{Consumer, Topology};
use retry_core::Policy;
use retry_core::dlq::FailureClass;
use retry_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_orders_five_percent_poison() {
    let queue = queue_name("poison");
    let topology = Topology::new(&queue);
    let (_connection, channel) = channel().await;
    let orders = orders(1000);
    publish_orders(&channel, &topology, &orders).await;

    let path = sqlite_file("poison");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = Consumer::new(amqp_url(), &queue)
        .declare(topology.clone())
        .prefetch(32)
        .concurrency(8)
        .policy(
            Policy::new()
                .max_attempts(3)
                .base(Duration::from_millis(2))
                .cap(Duration::from_millis(10)),
        )
        .store(SqliteStore::open(&path).unwrap())
        .shutdown(async {
            let _ = stopped.await;
        });
    let running = tokio::spawn(consumer.run_transactional(sqlite_effect));

    let poison = orders.iter().filter(|(_, p)| *p).count();
    wait_until(
        Duration::from_secs(120),
        "every order handled or dead-lettered",
        || async {
            sqlite_effects(&path).len() == orders.len() - poison
                && ready(&channel, topology.dead_letter_queue()).await as usize >= poison
        },
    )
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();

    let letters = take_letters(&channel, topology.dead_letter_queue()).await;
    assert_eq!(letters.len(), poison, "one letter per poison order");
    let lettered: BTreeSet<String> = letters
        .iter()
        .map(|(l, _)| l.letter.msg_id.clone())
        .collect();
    assert_exactly_once(&orders, &sqlite_effects(&path), &lettered);
    for (read, parked) in &letters {
        let letter = &read.letter;
        let id = letter.msg_id.as_str();
        assert_eq!(
            parked.body(),
            body(id, true).as_slice(),
            "{id}: the body byte for byte"
        );
        assert_eq!(read.original.message_id(), Some(id));
        assert_eq!(
            read.original
                .properties()
                .content_type()
                .as_ref()
                .map(|c| c.as_str()),
            Some("application/json")
        );
        assert_eq!(
            (read.exchange.as_str(), read.routing_key.as_str()),
            ("", queue.as_str())
        );
        let (attempts, class) = if transient(id) {
            (3, FailureClass::System)
        } else {
            (1, FailureClass::Data)
        };
        assert_eq!(
            (letter.attempts, letter.class),
            (attempts, class),
            "{id}: {letter:?}"
        );
        assert!(
            letter.reason.contains(if transient(id) {
                "Unavailable"
            } else {
                "Invalid"
            }),
            "{}",
            letter.reason
        );
        assert!(letter.first_failed_at <= letter.last_failed_at);
        assert!(!letter.trace_id.is_empty());
        assert_eq!(
            letter.source.as_deref(),
            Some(format!("amqp:{queue}").as_str())
        );
        assert!(letter.idempotency_key.is_some());
        assert_eq!(letter.original["id"], id, "the original, as JSON");
        // The seed's fields are headers too.
        for name in [
            "x-retry-msg-id",
            "x-retry-reason",
            "x-retry-attempts",
            "x-retry-first-failed-at",
            "x-retry-last-failed-at",
            "x-retry-trace-id",
        ] {
            assert!(parked.header(name).is_some(), "{id}: header {name}");
        }
    }
}
