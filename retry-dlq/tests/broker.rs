//! `retry-dlq --queue` against a real broker (feature `broker-tests`, `AMQP_URL`): a consumer of
//! retry-amqp parks the orders it cannot handle in the queue's dead-letter queue; the commands
//! look into it as an operator would; after the fix, `redrive` puts the letters back: each
//! order then has its effect once, the dead-letter queue is empty, the audit has one row per
//! letter, and a second redrive changes nothing.
#![cfg(feature = "broker-tests")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use retry_amqp::lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use retry_amqp::lapin::types::FieldTable;
use retry_amqp::lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use retry_amqp::{BoxFuture, Consumer, Message, Topology};
use retry_core::dlq::{AuditEntry, DeadLetter};
use retry_core::idempotency::StoreError;
use retry_core::{Classify, Decision, Policy};
use retry_sqlite::{SqliteStore, SqliteTransaction};

use common::{assert_status, stderr, stdout};

/// The broker's URL, or a loud failure: this test is compiled only with `broker-tests`.
fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| {
        panic!(
            "AMQP_URL is not set: the broker tests of retry-dlq (feature `broker-tests`) need a \
             RabbitMQ node, amqp://USER:PASS@HOST:PORT/VHOST; scripts/test starts a throwaway one"
        )
    })
}

/// Whether the poison orders are fixed.
static FIXED: AtomicBool = AtomicBool::new(false);

/// Orders `order-00` to `order-39`; one in eight is poison (`order-01`, `order-09`, ...).
fn orders() -> Vec<(String, bool)> {
    (0..40)
        .map(|i| (format!("order-{i:02}"), i % 8 == 1))
        .collect()
}

#[derive(Debug)]
enum OrderError {
    /// A poison order whose number ends in 1 or 7: a dependency that stays down (retried).
    Unavailable,
    /// The other poison orders: invalid (not retried).
    Invalid,
    Store(StoreError),
}

impl Classify for OrderError {
    fn classify(&self) -> Decision {
        match self {
            OrderError::Unavailable | OrderError::Store(StoreError::Unavailable(_)) => {
                Decision::Retry
            }
            OrderError::Invalid | OrderError::Store(_) => Decision::Stop,
        }
    }
}

impl From<StoreError> for OrderError {
    fn from(e: StoreError) -> Self {
        OrderError::Store(e)
    }
}

/// The order's effect, a row in `effects` written in the key's transaction; poison orders fail
/// until fixed.
fn handle<'t>(
    message: &'t Message,
    tx: &'t mut SqliteTransaction,
) -> BoxFuture<'t, Result<(), OrderError>> {
    let id = message.message_id().unwrap_or_default().to_owned();
    let poison = message.body() == b"poison";
    Box::pin(async move {
        if poison && !FIXED.load(Ordering::SeqCst) {
            return Err(if id.ends_with('1') || id.ends_with('7') {
                OrderError::Unavailable
            } else {
                OrderError::Invalid
            });
        }
        tx.run(move |c| c.execute("INSERT INTO effects (msg_id) VALUES (?1)", [id]))
            .await?;
        Ok(())
    })
}

/// How often each order's effect happened.
fn effects(path: &Path) -> BTreeMap<String, u64> {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut s = c
        .prepare("SELECT msg_id, count(*) FROM effects GROUP BY msg_id")
        .unwrap();
    s.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

async fn channel() -> (Connection, Channel) {
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    (connection, channel)
}

async fn ready(channel: &Channel, queue: &str) -> u32 {
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
        .unwrap()
        .message_count()
}

async fn wait_until<Fut: std::future::Future<Output = bool>>(
    what: &str,
    mut done: impl FnMut() -> Fut,
) {
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `retry-dlq ARGS...` with the broker from AMQP_URL (as the environment of a cron job gives
/// it) and no other store variable.
fn retry_dlq(args: &[&str]) -> Output {
    assert_cmd::Command::new(env!("CARGO_BIN_EXE_retry-dlq"))
        .env("AMQP_URL", amqp_url())
        .env_remove("RETRY_DLQ_SQLITE")
        .env_remove("RETRY_DLQ_AUDIT_SQLITE")
        .env_remove("DATABASE_URL")
        .args(args)
        .output()
        .unwrap()
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("retry-dlq-broker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn after_the_fix_redrive_puts_the_letters_back_once() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let queue = format!("t.dlq-cli.{}", std::process::id());
    let topology = Topology::new(&queue);
    let dlq = topology.dead_letter_queue().to_owned();
    let orders = orders();
    let poison: BTreeSet<String> = orders
        .iter()
        .filter(|(_, p)| *p)
        .map(|(id, _)| id.clone())
        .collect();
    let dir = temp_dir();
    let inbox = dir.join("inbox.sqlite3");
    rusqlite::Connection::open(&inbox)
        .and_then(|c| c.execute_batch("CREATE TABLE effects (msg_id TEXT NOT NULL)"))
        .unwrap();
    let audit = dir.join("redrives.sqlite3");
    let audit_arg = audit.to_str().unwrap();

    // The consumer runs throughout; the orders are published, and the poison parked.
    let (_connection, channel) = runtime.block_on(channel());
    runtime.block_on(async {
        topology.declare(&channel).await.unwrap();
        for (id, poison) in &orders {
            let body: &[u8] = if *poison { b"poison" } else { b"{}" };
            channel
                .basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    body,
                    BasicProperties::default()
                        .with_message_id(id.as_str().into())
                        .with_delivery_mode(2),
                )
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = Consumer::new(amqp_url(), &queue)
        .declare(topology.clone())
        .policy(
            Policy::new()
                .max_attempts(3)
                .base(Duration::from_millis(2))
                .cap(Duration::from_millis(10)),
        )
        .store(SqliteStore::open(&inbox).unwrap())
        .shutdown(async {
            let _ = stopped.await;
        });
    let running = runtime.spawn(consumer.run_transactional(handle));
    runtime.block_on(wait_until(
        "the good orders handled, the poison parked",
        || async {
            effects(&inbox).len() == orders.len() - poison.len()
                && ready(&channel, &dlq).await as usize == poison.len()
        },
    ));

    // Each command gives back the letters it read; the broker makes them ready again a moment
    // later, and the next command should see them all.
    let settled = || {
        runtime.block_on(wait_until("the letters read given back", || async {
            ready(&channel, &dlq).await as usize == poison.len()
        }));
    };

    // stats: the count and the oldest, and the exit status of a monitoring check.
    let stats = retry_dlq(&["--queue", &dlq, "stats"]);
    assert_status(&stats, 0);
    let text = stdout(&stats);
    assert!(
        text.starts_with("pending: 5\noldest first failure: "),
        "{text}"
    );
    let head = text
        .split("; msg_id ")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    assert!(
        poison.contains(head),
        "the head of the queue is a letter: {text}"
    );
    settled();
    let check = retry_dlq(&["--queue", &dlq, "stats", "--check"]);
    assert_status(&check, 1);
    assert!(stdout(&check).contains("check: ALERT: 5 letter(s) pending"));
    settled();
    let young = retry_dlq(&["--queue", &dlq, "stats", "--check", "--max-age", "1h"]);
    assert_status(&young, 0);
    assert!(stdout(&young).contains("check: OK: 5 letter(s) pending, the oldest failed"));
    settled();
    let top = retry_dlq(&["--queue", &dlq, "stats", "--top", "2"]);
    assert_status(&top, 0);
    let text = stdout(&top);
    assert!(
        text.contains("by class:\n        2  system\n        3  data\n"),
        "order-01 and order-17 stay down, the others are invalid: {text}"
    );
    assert!(text.contains("top reasons (2 of "), "{text}");
    // A monitor that cannot read the queue says so: never a stale 0.
    let missing = retry_dlq(&["--queue", "no.such.dlq", "stats", "--check"]);
    assert_status(&missing, 2);
    assert!(
        stderr(&missing).contains("no.such.dlq"),
        "{}",
        stderr(&missing)
    );

    // show, list and export read the letters and give them back.
    settled();
    let show = retry_dlq(&["--queue", &dlq, "show", "order-09"]);
    assert_status(&show, 0);
    let shown: serde_json::Value = serde_json::from_str(&stdout(&show)).unwrap();
    assert_eq!(shown["msg_id"], "order-09");
    assert_eq!(shown["class"], "data");
    assert_eq!(shown["attempts"], 1);
    assert_eq!(shown["original"], "poison");
    assert_eq!(
        (&shown["exchange"], &shown["routing_key"]),
        (&"".into(), &queue.as_str().into())
    );
    assert_eq!(shown["source"], format!("amqp:{queue}"));
    let letter: DeadLetter = serde_json::from_value(shown).unwrap();
    assert!(letter.first_failed_at <= letter.last_failed_at);
    settled();
    assert_status(&retry_dlq(&["--queue", &dlq, "show", "order-00"]), 1);
    settled();
    let list = retry_dlq(&["--queue", &dlq, "list", "--class", "system"]);
    assert_status(&list, 0);
    let listed: BTreeSet<String> = stdout(&list)
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        listed,
        BTreeSet::from(["order-01".to_owned(), "order-17".to_owned()]),
        "{}",
        stdout(&list)
    );
    settled();
    let export = retry_dlq(&["--queue", &dlq, "export"]);
    assert_status(&export, 0);
    let exported: BTreeSet<String> = stdout(&export)
        .lines()
        .map(|l| serde_json::from_str::<DeadLetter>(l).unwrap().msg_id)
        .collect();
    assert_eq!(exported, poison);
    let ack = retry_dlq(&["--queue", &dlq, "ack", "order-09", "--who", "alice"]);
    assert_status(&ack, 2);
    assert!(stderr(&ack).contains("ack is not a command of a broker's dead-letter queue"));

    // The redrive's usage: no HTTP receiver, and a file for the record.
    let to = retry_dlq(&[
        "--queue",
        &dlq,
        "redrive",
        "--who",
        "alice",
        "--to",
        "https://x.example/",
    ]);
    assert_status(&to, 2);
    assert!(stderr(&to).contains("--to is not an option of a broker's dead-letter queue"));
    let unrecorded = retry_dlq(&["--queue", &dlq, "redrive", "--who", "alice"]);
    assert_status(&unrecorded, 2);
    assert!(stderr(&unrecorded).contains("--audit-sqlite PATH"));

    // A dry run sends and records nothing.
    settled();
    let dry = retry_dlq(&[
        "--queue",
        &dlq,
        "redrive",
        "--who",
        "alice",
        "--limit",
        "100",
        "--dry-run",
    ]);
    assert_status(&dry, 0);
    assert_eq!(
        stdout(&dry).matches("would send\t").count(),
        5,
        "{}",
        stdout(&dry)
    );
    assert!(!audit.exists());
    settled();
    assert_eq!(effects(&inbox).len(), orders.len() - poison.len());

    // The fix, then the redrive.
    FIXED.store(true, Ordering::SeqCst);
    let redrive = retry_dlq(&[
        "--queue",
        &dlq,
        "--audit-sqlite",
        audit_arg,
        "redrive",
        "--who",
        "alice",
        "--limit",
        "100",
        "--rate",
        "20/s",
    ]);
    assert_status(&redrive, 0);
    let text = stdout(&redrive);
    let sent: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("sent\t"))
        .map(str::to_owned)
        .collect();
    assert_eq!(sent, poison, "{text}");
    assert!(
        text.contains(": 5 selected, 5 succeeded, 0 failed; recorded in "),
        "{text}"
    );
    runtime.block_on(wait_until("every redriven order handled", || async {
        effects(&inbox).len() == orders.len() && ready(&channel, &queue).await == 0
    }));
    let once = effects(&inbox);
    assert!(once.values().all(|n| *n == 1), "each effect once: {once:?}");
    let empty = retry_dlq(&["--queue", &dlq, "stats", "--check"]);
    assert_status(&empty, 0);
    assert!(
        stdout(&empty)
            .starts_with("pending: 0\noldest first failure: -\ncheck: OK: nothing pending")
    );

    // The audit: the run, and one row per letter.
    let runs = retry_dlq(&["--queue", &dlq, "--audit-sqlite", audit_arg, "audit"]);
    assert_status(&runs, 0);
    let runs = stdout(&runs);
    let run_id = runs
        .lines()
        .next()
        .unwrap()
        .split('\t')
        .nth(1)
        .unwrap()
        .to_owned();
    assert_eq!(runs.lines().count(), 1, "{runs}");
    let rows = retry_dlq(&[
        "--queue",
        &dlq,
        "--audit-sqlite",
        audit_arg,
        "audit",
        "--run",
        &run_id,
        "--format",
        "json",
    ]);
    assert_status(&rows, 0);
    let rows: Vec<AuditEntry> = stdout(&rows)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), poison.len(), "{rows:?}");
    assert_eq!(
        rows.iter()
            .map(|r| r.msg_id.clone())
            .collect::<BTreeSet<_>>(),
        poison
    );
    assert!(
        rows.iter()
            .all(|r| r.outcome.as_deref() == Some("redriven") && r.who == "alice")
    );

    // A second redrive of the same queue changes nothing.
    let again = retry_dlq(&[
        "--queue",
        &dlq,
        "--audit-sqlite",
        audit_arg,
        "redrive",
        "--who",
        "alice",
        "--limit",
        "100",
    ]);
    assert_status(&again, 0);
    assert!(
        stdout(&again).contains(": 0 selected, 0 succeeded, 0 failed"),
        "{}",
        stdout(&again)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(effects(&inbox), once, "nothing changed");
    let all_rows = retry_dlq(&["--queue", &dlq, "--audit-sqlite", audit_arg, "audit"]);
    assert_eq!(stdout(&all_rows).lines().count(), 2, "two runs recorded");
    runtime.block_on(async {
        assert_eq!(ready(&channel, &dlq).await, 0);
        stop.send(()).unwrap();
        running.await.unwrap().unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
}
