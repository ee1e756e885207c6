//! Against a real broker (feature `broker-tests`, `AMQP_URL`): after the fix, a redrive puts
//! the letters back. Each poison order then has its effect once, the dead-letter queue is
//! empty, the audit has one row per letter; a second redrive changes nothing, and neither
//! does sending the same letters again by hand (their keys answer).
#![cfg(feature = "broker-tests")]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use retry_amqp::dlq::{BrokerDeadLetters, RedriveOptions};
use retry_amqp::lapin::options::BasicPublishOptions;
use retry_amqp::{Consumer, Topology};
use retry_core::Policy;
use retry_core::dlq::{DeadLetterStore, MemoryDeadLetters};
use retry_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_fix_a_redrive_puts_the_letters_back() {
    let queue = queue_name("redrive");
    let topology = Topology::new(&queue);
    let (_connection, channel) = channel().await;
    let orders = orders(1000);
    let poison = orders.iter().filter(|(_, p)| *p).count();
    publish_orders(&channel, &topology, &orders).await;

    let path = sqlite_file("redrive");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = Consumer::new(amqp_url(), &queue)
        .declare(topology.clone())
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
        Duration::from_secs(120),
        "every order handled or dead-lettered",
        || async {
            sqlite_effects(&path).len() == orders.len() - poison
                && ready(&channel, topology.dead_letter_queue()).await as usize >= poison
        },
    )
    .await;

    let dlq = BrokerDeadLetters::connect(&amqp_url(), topology.dead_letter_queue())
        .await
        .unwrap();
    let stats = dlq.stats().await.unwrap();
    assert_eq!(stats.count as usize, poison);
    assert!(stats.oldest_first_failed_at.is_some());
    let shown = dlq.show(5).await.unwrap();
    assert_eq!(shown.len(), 5);
    wait_until(
        Duration::from_secs(10),
        "show to give the letters back",
        || async { dlq.stats().await.unwrap().count as usize == poison },
    )
    .await;

    // A dry run sends nothing.
    let audit = MemoryDeadLetters::new();
    let options = RedriveOptions {
        limit: 1000,
        rate: 500,
        who: "test".into(),
        dry_run: true,
    };
    let plan = dlq.redrive(&options, &audit).await.unwrap();
    assert_eq!(plan.letters.len(), poison);
    assert!(audit.audit_rows(None).await.unwrap().is_empty());
    wait_until(
        Duration::from_secs(10),
        "the dry run to give the letters back",
        || async { dlq.stats().await.unwrap().count as usize == poison },
    )
    .await;

    // The fix, then the redrive.
    FIXED.store(true, Ordering::SeqCst);
    let run = dlq
        .redrive(
            &RedriveOptions {
                dry_run: false,
                ..options.clone()
            },
            &audit,
        )
        .await
        .unwrap();
    assert_eq!(
        (run.record.selected, run.record.succeeded, run.record.failed),
        (poison as u64, poison as u64, 0)
    );
    wait_until(
        Duration::from_secs(60),
        "every redriven order handled",
        || async { sqlite_effects(&path).len() == orders.len() },
    )
    .await;
    assert_eq!(
        dlq.stats().await.unwrap().count,
        0,
        "the dead-letter queue is empty"
    );
    let rows = audit.audit_rows(None).await.unwrap();
    let audited: BTreeSet<&str> = rows.iter().map(|r| r.msg_id.as_str()).collect();
    assert_eq!(
        (rows.len(), audited.len()),
        (poison, poison),
        "one audit row per letter"
    );
    assert!(
        rows.iter()
            .all(|r| r.outcome.as_deref() == Some("redriven"))
    );
    let effects = sqlite_effects(&path);
    assert!(
        effects.values().all(|n| *n == 1),
        "every effect once: {effects:?}"
    );

    // A second redrive of the same letters changes nothing.
    let again = dlq
        .redrive(
            &RedriveOptions {
                dry_run: false,
                ..options.clone()
            },
            &audit,
        )
        .await
        .unwrap();
    assert_eq!(again.record.selected, 0);
    // Nor do the same letters sent again by hand: their keys are done.
    for letter in &run.letters {
        channel
            .basic_publish(
                letter.exchange.as_str().into(),
                letter.routing_key.as_str().into(),
                BasicPublishOptions::default(),
                letter.original.body(),
                letter.original.properties().clone(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    wait_until(
        Duration::from_secs(30),
        "the resent letters answered",
        || async { ready(&channel, &queue).await == 0 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert_eq!(sqlite_effects(&path), effects, "nothing changed");
    assert_eq!(audit.audit_rows(None).await.unwrap().len(), poison);
    assert_eq!(dlq.stats().await.unwrap().count, 0);
}
