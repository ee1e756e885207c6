//! Against a real broker (feature `broker-tests`, `AMQP_URL`, `RETRY_AMQP_BROKER`): the broker
//! is restarted while the consumer runs. Nothing is lost, nothing happens twice, and the
//! consumer reconnects by itself.
#![cfg(feature = "broker-tests")]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use retry_amqp::{Consumer, Topology};
use retry_core::Policy;
use retry_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_restarts_mid_run() {
    let broker = std::env::var("RETRY_AMQP_BROKER").unwrap_or_else(|_| {
        panic!("RETRY_AMQP_BROKER is not set: a script that restarts the broker (scripts/test makes one)")
    });
    let queue = queue_name("restart");
    let topology = Topology::new(&queue);
    let orders = orders(1000);
    {
        let (_connection, channel) = channel().await;
        publish_orders(&channel, &topology, &orders).await;
    }
    // Each effect takes a little while, so that most of the run is left when the broker goes.
    SLOW.store(true, std::sync::atomic::Ordering::Relaxed);
    let path = sqlite_file("restart");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = Consumer::new(amqp_url(), &queue)
        .declare(topology.clone())
        .prefetch(16)
        .concurrency(4)
        .requeue_pause(Duration::from_millis(100))
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

    wait_until(
        Duration::from_secs(60),
        "a tenth of the orders handled",
        || async { sqlite_effects(&path).len() >= 300 },
    )
    .await;
    let before = sqlite_effects(&path).len();
    let status = tokio::process::Command::new(&broker)
        .arg("restart")
        .status()
        .await
        .unwrap();
    assert!(status.success(), "{broker} restart: {status}");
    let after = sqlite_effects(&path).len();
    assert!(
        after < 900,
        "the run was nearly over when the broker came back ({before} done before, {after} after): nothing tested the reconnection"
    );

    let poison = orders.iter().filter(|(_, p)| *p).count();
    let (_connection, channel) = channel().await;
    wait_until(
        Duration::from_secs(120),
        "every order handled or dead-lettered after the restart",
        || async {
            sqlite_effects(&path).len() == orders.len() - poison
                && ready(&channel, topology.dead_letter_queue()).await as usize >= poison
                && ready(&channel, &queue).await == 0
        },
    )
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();

    let letters = take_letters(&channel, topology.dead_letter_queue()).await;
    let lettered: BTreeSet<String> = letters
        .iter()
        .map(|(l, _)| l.letter.msg_id.clone())
        .collect();
    assert_exactly_once(&orders, &sqlite_effects(&path), &lettered);
}
