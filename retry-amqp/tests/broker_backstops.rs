//! Against a real broker (feature `broker-tests`, `AMQP_URL`): what happens to a message whose
//! handler the consumer cannot see fail.
//!
//! - A handler that panics: the delivery is rejected without requeue, so the broker
//!   dead-letters it (`x-death` reason `rejected`) into the same dead-letter queue; it runs
//!   once, the consumer goes on with the other messages, and in transactional mode its key is
//!   free (the panic rolled the transaction back), so a redrive after the fix runs it once.
//! - A handler that kills the process each time: the broker redelivers it to the next process
//!   until the quorum queue's `x-delivery-limit`, then dead-letters it (reason
//!   `delivery_limit`) instead of feeding it to processes forever; the messages behind it are
//!   handled.
//!
//! The processes of the second test are this test binary run again (`--exact <test>`) with
//! `RETRY_AMQP_CRASH_CHILD=<queue> <sqlite file> <log file>`.
#![cfg(feature = "broker-tests")]

mod common;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use retry_amqp::dlq::{BrokerDeadLetters, RedriveOptions};
use retry_amqp::{BoxFuture, Consumer, Message, Topology};
use retry_core::dlq::MemoryDeadLetters;
use retry_sqlite::{SqliteStore, SqliteTransaction};

/// Runs of the panicking handler for `order-00007`.
static PANICS: AtomicU32 = AtomicU32::new(0);

/// `order-00007` panics until fixed; the others have their effect.
fn panicking<'t>(
    message: &'t Message,
    tx: &'t mut SqliteTransaction,
) -> BoxFuture<'t, Result<(), OrderError>> {
    if message.message_id() == Some("order-00007") && !FIXED.load(Ordering::SeqCst) {
        PANICS.fetch_add(1, Ordering::SeqCst);
        panic!("the handler's bug");
    }
    sqlite_effect(message, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_rejected_into_the_dead_letter_queue_once() {
    let queue = queue_name("panic");
    let topology = Topology::new(&queue);
    let (_connection, channel) = channel().await;
    // No poison among them: the one that fails is the panic.
    let orders: Vec<(String, bool)> = (0..20).map(|i| (format!("order-{i:05}"), false)).collect();
    publish_orders(&channel, &topology, &orders).await;
    let path = sqlite_file("panic");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = Consumer::new(amqp_url(), &queue)
        .declare(topology.clone())
        .store(SqliteStore::open(&path).unwrap())
        .shutdown(async {
            let _ = stopped.await;
        });
    let running = tokio::spawn(consumer.run_transactional(panicking));
    wait_until(
        Duration::from_secs(60),
        "19 effects and the panic's message in the dead-letter queue",
        || async {
            sqlite_effects(&path).len() == 19
                && ready(&channel, topology.dead_letter_queue()).await == 1
        },
    )
    .await;
    // Not requeued: a while later it has still run once, and the queue is empty.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        1,
        "the panicking message ran once"
    );
    assert_eq!(ready(&channel, &queue).await, 0);
    assert!(!running.is_finished(), "the consumer goes on after a panic");

    let dlq = BrokerDeadLetters::connect(&amqp_url(), topology.dead_letter_queue())
        .await
        .unwrap();
    let shown = dlq.show(1).await.unwrap();
    let letter = &shown[0];
    assert_eq!(letter.letter.msg_id, "order-00007");
    assert_eq!(
        letter.letter.reason,
        "dead-lettered by the broker: rejected"
    );
    assert_eq!(
        (letter.exchange.as_str(), letter.routing_key.as_str()),
        ("", queue.as_str())
    );
    assert_eq!(
        letter.original.body(),
        body("order-00007", false).as_slice()
    );

    // The panic rolled the transaction back: its key is free, and the redrive after the fix
    // runs it, once.
    FIXED.store(true, Ordering::SeqCst);
    let audit = MemoryDeadLetters::new();
    wait_until(
        Duration::from_secs(10),
        "the letter shown given back",
        || async { ready(&channel, topology.dead_letter_queue()).await == 1 },
    )
    .await;
    let run = dlq
        .redrive(
            &RedriveOptions {
                limit: 10,
                rate: 100,
                who: "test".into(),
                dry_run: false,
            },
            &audit,
        )
        .await
        .unwrap();
    assert_eq!(run.record.succeeded, 1);
    wait_until(
        Duration::from_secs(30),
        "the redriven order handled",
        || async { sqlite_effects(&path).len() == 20 },
    )
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    let effects = sqlite_effects(&path);
    assert!(effects.values().all(|n| *n == 1), "{effects:?}");
    assert_eq!(ready(&channel, topology.dead_letter_queue()).await, 0);
}

const CHILD: &str = "RETRY_AMQP_CRASH_CHILD";
/// The queue's delivery limit in the second test.
const LIMIT: u32 = 2;

/// The child's log of the crashing message's deliveries.
static CRASH_LOG: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// `crash` ends the process (as a segfault or an out-of-memory kill would) after writing a
/// line to the log; the others have their effect.
fn crashing<'t>(
    message: &'t Message,
    tx: &'t mut SqliteTransaction,
) -> BoxFuture<'t, Result<(), OrderError>> {
    if message.message_id() == Some("crash") {
        let log = CRASH_LOG.get().expect("the log's path");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log");
        writeln!(file, "delivery {}", message.delivery_count()).expect("log line");
        file.sync_all().expect("fsync");
        std::process::exit(137);
    }
    sqlite_effect(message, tx)
}

/// In the child: consume `queue` one message at a time.
async fn child(spec: &str) {
    let mut parts = spec.splitn(3, ' ');
    let (Some(queue), Some(path), Some(log)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("{CHILD}: <queue> <sqlite file> <log file>");
    };
    CRASH_LOG.set(log.into()).expect("set once");
    Consumer::new(amqp_url(), queue)
        .declare(Topology::new(queue).delivery_limit(LIMIT))
        .prefetch(1)
        .concurrency(1)
        .store(SqliteStore::open(path).expect("open"))
        .run_transactional(crashing)
        .await
        .expect("consumer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_kills_the_process_is_dead_lettered_at_the_delivery_limit() {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec).await;
    }
    let test = "a_handler_that_kills_the_process_is_dead_lettered_at_the_delivery_limit";
    let queue = queue_name("crash");
    let topology = Topology::new(&queue).delivery_limit(LIMIT);
    let (_connection, channel) = channel().await;
    // Five orders, the crashing message, five more.
    let before: Vec<(String, bool)> = (0..5).map(|i| (format!("order-{i:05}"), false)).collect();
    let after: Vec<(String, bool)> = (5..10).map(|i| (format!("order-{i:05}"), false)).collect();
    publish_orders(&channel, &topology, &before).await;
    publish_orders(&channel, &topology, &[("crash".to_owned(), false)]).await;
    publish_orders(&channel, &topology, &after).await;
    let path = sqlite_file("crash");
    let log = path.with_file_name("crashes.log");
    let spawn = || {
        tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(
                CHILD,
                format!("{queue} {} {}", path.display(), log.display()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the consumer")
    };
    // A process is started whenever the one before has died, until the other orders are
    // handled and the crashing one is in the dead-letter queue.
    let done = async || {
        sqlite_effects(&path).len() == 10
            && ready(&channel, topology.dead_letter_queue()).await == 1
    };
    let started = std::time::Instant::now();
    let mut deaths = 0;
    let mut living = spawn();
    while !done().await {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "timed out: {deaths} processes died, the others not done"
        );
        let exited = tokio::time::timeout(Duration::from_millis(100), living.wait()).await;
        if let Ok(status) = exited {
            assert_eq!(status.unwrap().code(), Some(137), "died in the handler");
            deaths += 1;
            assert!(
                deaths <= LIMIT + 1,
                "the crashing message was delivered {deaths} times: the delivery limit \
                 ({LIMIT}) did not stop it"
            );
            living = spawn();
        }
    }
    // The last delivery may have killed the process that handled the orders behind it.
    match tokio::time::timeout(Duration::from_millis(500), living.wait()).await {
        Ok(status) => {
            assert_eq!(status.unwrap().code(), Some(137), "died in the handler");
            deaths += 1;
        }
        Err(_) => {
            living.start_kill().unwrap();
            let _ = living.wait().await;
        }
    }
    // Delivered once, then once more for each return the limit allows: each delivery killed a
    // process, and the broker gave it to no process after that.
    assert_eq!(deaths, LIMIT + 1, "deliveries of the crashing message");
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines.lines().count() as u32, LIMIT + 1, "{lines}");
    let letters = take_letters(&channel, topology.dead_letter_queue()).await;
    assert_eq!(letters.len(), 1);
    let (read, _) = &letters[0];
    assert_eq!(read.letter.msg_id, "crash");
    assert_eq!(
        read.letter.reason,
        "dead-lettered by the broker: delivery_limit"
    );
    assert_eq!(
        (read.exchange.as_str(), read.routing_key.as_str()),
        ("", queue.as_str())
    );
    let handled: BTreeSet<String> = sqlite_effects(&path).into_keys().collect();
    let expected: BTreeSet<String> = before
        .iter()
        .chain(&after)
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(handled, expected, "every other order, once each");
    assert!(sqlite_effects(&path).values().all(|n| *n == 1));
}
