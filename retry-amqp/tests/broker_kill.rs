//! Against a real broker (feature `broker-tests`, `AMQP_URL`; `DATABASE_URL` for PostgreSQL):
//! the consumer process is killed (SIGKILL) at random points 50 times while it works through
//! 1,000 orders, with its keys on SQLite and on PostgreSQL. No order is lost, no effect
//! happens twice: the key's claim, the handler's write and `done` commit together, and what a
//! killed process had not acked is redelivered.
//!
//! The consumer is this test binary run again (`--exact <test> --nocapture`) with
//! `RETRY_AMQP_KILL_CHILD=<queue> <store>`: it consumes until it is killed.
#![cfg(feature = "broker-tests")]

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use rand::RngExt as _;
use retry_amqp::{Consumer, Topology};
use retry_core::Policy;

const CHILD: &str = "RETRY_AMQP_KILL_CHILD";
const KILLS: usize = 50;

fn consumer(queue: &str, concurrency: usize) -> Consumer {
    Consumer::new(amqp_url(), queue)
        .declare(Topology::new(queue))
        .prefetch(16)
        .concurrency(concurrency)
        .requeue_pause(Duration::from_millis(100))
        .lease(Duration::from_secs(5))
        .policy(
            Policy::new()
                .max_attempts(3)
                .base(Duration::from_millis(2))
                .cap(Duration::from_millis(10)),
        )
}

/// In the child: consume `queue` with keys in `store` until killed.
async fn child(spec: &str) {
    SLOW.store(true, std::sync::atomic::Ordering::Relaxed);
    let (queue, store) = spec.split_once(' ').expect("<queue> <store>");
    let run = if let Some(path) = store.strip_prefix("sqlite:") {
        let store = retry_sqlite::SqliteStore::open(path).expect("open");
        consumer(queue, 4)
            .store(store)
            .run_transactional(sqlite_effect)
            .await
    } else {
        let store = retry_postgres::PgStore::connect(store)
            .await
            .expect("connect");
        // Concurrent writers on PostgreSQL: fewer of them, so the kills land mid-run too.
        consumer(queue, 2)
            .store(store)
            .run_transactional(pg_effect)
            .await
    };
    run.expect("consumer");
}

/// Publishes the orders, runs a child consumer and kills it 50 times at random points, then
/// lets one finish; returns the orders and the letters' message ids.
async fn kill_50_times(
    test: &str,
    store: &str,
    effects: impl AsyncFn() -> usize,
) -> (Vec<(String, bool)>, BTreeSet<String>) {
    let queue = queue_name(test);
    let topology = Topology::new(&queue);
    let (_connection, channel) = channel().await;
    let orders = orders(1000);
    publish_orders(&channel, &topology, &orders).await;
    let poison = orders.iter().filter(|(_, p)| *p).count();
    let spawn = || {
        tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD, format!("{queue} {store}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the consumer")
    };
    let mut kills = 0;
    while kills < KILLS {
        let mut child = spawn();
        let pause = rand::rng().random_range(30..300);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let done = effects().await == orders.len() - poison;
        child.start_kill().expect("SIGKILL");
        let status = child.wait().await.unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(9), "killed: {status:?}");
        kills += 1;
        if done {
            // Everything was handled before the 50th kill: the assertion below says whether
            // enough of them landed mid-run.
            break;
        }
    }
    eprintln!(
        "{test}: {kills} kills, {} of {} effects before the last run",
        effects().await,
        orders.len() - poison
    );
    let mut last = spawn();
    wait_until(
        Duration::from_secs(180),
        "every order handled or dead-lettered after the kills",
        || async {
            effects().await == orders.len() - poison
                && ready(&channel, topology.dead_letter_queue()).await as usize >= poison
                && ready(&channel, &queue).await == 0
        },
    )
    .await;
    // Anything it still holds would be redelivered: a short grace, then stop it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    last.start_kill().unwrap();
    let _ = last.wait().await;
    let letters = take_letters(&channel, topology.dead_letter_queue()).await;
    assert!(
        kills >= 20,
        "only {kills} kills happened before the run was over: slow the run down"
    );
    (
        orders,
        letters.into_iter().map(|(l, _)| l.letter.msg_id).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_50_times_keys_on_sqlite() {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec).await;
    }
    let path = sqlite_file("kill");
    let store = format!("sqlite:{}", path.display());
    let (orders, lettered) = kill_50_times("killed_50_times_keys_on_sqlite", &store, async || {
        sqlite_effects(&path).len()
    })
    .await;
    assert_exactly_once(&orders, &sqlite_effects(&path), &lettered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_50_times_keys_on_postgres() {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec).await;
    }
    let url = pg_schema("kill").await;
    let (orders, lettered) = kill_50_times("killed_50_times_keys_on_postgres", &url, async || {
        pg_effects(&url).await.len()
    })
    .await;
    assert_exactly_once(&orders, &pg_effects(&url).await, &lettered);
}
