//! Fault: a body of three steps (Brandur Leach's rocket rides: the ride row in the store's
//! database, the charge at a gateway, the receipt by a mailer) killed at every step boundary,
//! then taken over by another process: for each order exactly one ride row, one charge and
//! one receipt took effect, and a step killed between its effect and its journal write was
//! sent again with the same key (the gateway and the mailer deduplicate by key, and count).
//!
//! Each round is one order handled by a child process (this test binary again, `--exact
//! <test>`, with `RETRY_CORE_STEPS_KILL_CHILD` set) that aborts itself at a chosen point
//! (`std::process::abort`: no destructor, no flush, as abrupt as a kill) or, in every fifth
//! round, is sent SIGKILL by this process after a random delay. Once every round's child is
//! dead and the lease ran out, this process takes every order over and finishes it. The kill
//! points: before each step, inside it before its effect (after `started` is journaled),
//! between its effect and its journal write (for the ride, between its insert and its commit),
//! after it, and after the last step before the response is stored.
//!
//! 200 rounds per store: on SQLite by default, on PostgreSQL with the `postgres` feature (which
//! needs `DATABASE_URL`).
#![cfg(feature = "sqlite")]

#[path = "common/tempdir.rs"]
mod tempdir;

#[cfg(feature = "postgres")]
#[path = "common/pg.rs"]
mod pg;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt as _;
use retry_core::idempotency::{
    IdempotencyError, StoreError, TransactionalStore, step, step_in_transaction,
};
use retry_core::idempotent;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Set in the child: `store|gateway|mailer|order|point`.
const CHILD_ENV: &str = "RETRY_CORE_STEPS_KILL_CHILD";
const ROUNDS: u64 = 200;
/// Every this many rounds, a real SIGKILL at a random time instead of an abort at a point.
const SIGKILL_EVERY: u64 = 5;

/// Where a child aborts.
const POINTS: &[&str] = &[
    "ride:before",
    "ride:in",
    "ride:effect",
    "ride:after",
    "charge:before",
    "charge:in",
    "charge:effect",
    "charge:after",
    "receipt:before",
    "receipt:in",
    "receipt:effect",
    "receipt:after",
    "end",
];

#[derive(Debug)]
#[allow(dead_code, reason = "read through Debug when a test fails")]
enum RideError {
    Idempotency(IdempotencyError),
    Upstream(String),
}

impl From<IdempotencyError> for RideError {
    fn from(e: IdempotencyError) -> Self {
        RideError::Idempotency(e)
    }
}

impl From<StoreError> for RideError {
    fn from(e: StoreError) -> Self {
        RideError::Idempotency(IdempotencyError::Store(e))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    ride: i64,
    charge: String,
    mail: String,
}

/// What a run of the body knows: where the loopback services are, where to die, and which
/// steps it ran in doubt.
struct Ctx {
    gateway: String,
    mailer: String,
    abort_at: Option<String>,
    in_doubt: Mutex<Vec<(u64, String)>>,
}

impl Ctx {
    fn point(&self, at: &str) {
        if self.abort_at.as_deref() == Some(at) {
            std::process::abort();
        }
    }

    fn doubted(&self, order: u64, step: &retry_core::idempotency::Step) {
        if step.in_doubt() {
            self.in_doubt
                .lock()
                .unwrap()
                .push((order, step.label().to_owned()));
        }
    }
}

/// One request to a loopback service: `ORDER KEY` in, its answer out.
async fn call(addr: &str, order: u64, key: &str) -> Result<String, RideError> {
    let fail = |e: std::io::Error| RideError::Upstream(e.to_string());
    let mut stream = TcpStream::connect(addr).await.map_err(fail)?;
    stream
        .write_all(format!("{order} {key}\n").as_bytes())
        .await
        .map_err(fail)?;
    let mut answer = String::new();
    tokio::io::BufReader::new(stream)
        .read_line(&mut answer)
        .await
        .map_err(fail)?;
    Ok(answer.trim().to_owned())
}

/// The rides table's writes in a store's own transaction.
trait Rides: TransactionalStore {
    fn book(
        tx: &mut Self::Transaction,
        order: u64,
    ) -> impl Future<Output = Result<i64, RideError>> + Send;
    fn rides(&self, order: u64) -> impl Future<Output = i64> + Send;
}

impl Rides for retry_sqlite::SqliteStore {
    async fn book(tx: &mut retry_sqlite::SqliteTransaction, order: u64) -> Result<i64, RideError> {
        let order = i64::try_from(order).unwrap();
        Ok(tx
            .run(move |c| {
                c.execute("INSERT INTO rides (order_id) VALUES (?1)", [order])?;
                Ok(c.last_insert_rowid())
            })
            .await?)
    }

    async fn rides(&self, order: u64) -> i64 {
        let order = i64::try_from(order).unwrap();
        let mut tx = self.begin().await.unwrap();
        let n = tx
            .run(move |c| {
                c.query_row(
                    "SELECT count(*) FROM rides WHERE order_id = ?1",
                    [order],
                    |row| row.get(0),
                )
            })
            .await
            .unwrap();
        self.rollback(tx).await.unwrap();
        n
    }
}

#[cfg(feature = "postgres")]
impl Rides for retry_postgres::PgStore {
    async fn book(tx: &mut retry_postgres::PgTransaction, order: u64) -> Result<i64, RideError> {
        let order = i64::try_from(order).unwrap();
        tx.client()
            .query_one(
                "INSERT INTO rides (order_id) VALUES ($1) RETURNING id",
                &[&order],
            )
            .await
            .map(|row| row.get(0))
            .map_err(|e| RideError::Upstream(e.to_string()))
    }

    async fn rides(&self, order: u64) -> i64 {
        let order = i64::try_from(order).unwrap();
        let client = self.pool().get().await.unwrap();
        client
            .query_one("SELECT count(*) FROM rides WHERE order_id = $1", &[&order])
            .await
            .unwrap()
            .get(0)
    }
}

/// The rocket ride: book (in the store's database, with its journal entry), charge, mail.
#[idempotent(key = order, store = store, lease = "400ms", retention = "1d", on_err = "resume")]
async fn fulfil<S: Rides>(store: &S, ctx: &Ctx, order: u64) -> Result<Receipt, RideError> {
    ctx.point("ride:before");
    let ride = step_in_transaction("ride", store, async |tx, s| {
        ctx.doubted(order, &s);
        ctx.point("ride:in");
        let ride = S::book(tx, order).await?;
        ctx.point("ride:effect");
        Ok::<_, RideError>(ride)
    })
    .await?;
    ctx.point("ride:after");
    ctx.point("charge:before");
    let charge = step("charge", async |s| {
        ctx.doubted(order, &s);
        ctx.point("charge:in");
        let charge = call(&ctx.gateway, order, s.key()).await?;
        ctx.point("charge:effect");
        Ok::<_, RideError>(charge)
    })
    .await?;
    ctx.point("charge:after");
    ctx.point("receipt:before");
    let mail = step("receipt", async |s| {
        ctx.doubted(order, &s);
        ctx.point("receipt:in");
        let mail = call(&ctx.mailer, order, s.key()).await?;
        ctx.point("receipt:effect");
        Ok::<_, RideError>(mail)
    })
    .await?;
    ctx.point("receipt:after");
    ctx.point("end");
    Ok(Receipt { ride, charge, mail })
}

/// A loopback service that deduplicates by key: the first request of a key makes an effect
/// (counted by order), every request of it is counted, and the answer is the effect's.
#[derive(Default)]
struct Service {
    /// Key → (order, effect id, requests).
    keys: Mutex<HashMap<String, (u64, u64, u32)>>,
}

impl Service {
    async fn start(name: &'static str) -> (Arc<Service>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let service = Arc::new(Service::default());
        let serving = Arc::clone(&service);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let service = Arc::clone(&serving);
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut line = String::new();
                    if tokio::io::BufReader::new(read)
                        .read_line(&mut line)
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let (Some(order), Some(key)) = (parts.next(), parts.next()) else {
                        return;
                    };
                    let order: u64 = order.parse().unwrap();
                    let answer = {
                        let mut keys = service.keys.lock().unwrap();
                        let next = keys.len() as u64 + 1;
                        let entry = keys.entry(key.to_owned()).or_insert((order, next, 0));
                        assert_eq!(entry.0, order, "{name}: one key, two orders");
                        entry.2 += 1;
                        format!("{name}-{}", entry.1)
                    };
                    // A little latency, so real kills land inside the call too.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
                });
            }
        });
        (service, addr)
    }

    /// Effects made for `order`, and requests sent for it.
    fn of(&self, order: u64) -> (usize, u32) {
        let keys = self.keys.lock().unwrap();
        let of_order = keys.values().filter(|(o, _, _)| *o == order);
        (
            of_order.clone().count(),
            of_order.map(|(_, _, requests)| requests).sum(),
        )
    }
}

/// What a store needs to be killed around: open it in a child, and the rides table.
trait Harness: Rides + Sized + Send + Sync + 'static {
    fn open(at: &str) -> impl Future<Output = Self> + Send;
}

impl Harness for retry_sqlite::SqliteStore {
    async fn open(at: &str) -> Self {
        let store = retry_sqlite::SqliteStore::open(at).unwrap();
        store
            .write(|c| {
                c.execute_batch(
                    "CREATE TABLE IF NOT EXISTS rides (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL)",
                )
            })
            .await
            .unwrap();
        store
    }
}

#[cfg(feature = "postgres")]
impl Harness for retry_postgres::PgStore {
    async fn open(at: &str) -> Self {
        let store = retry_postgres::PgStore::connect(at).await.unwrap();
        store
            .pool()
            .get()
            .await
            .unwrap()
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS rides (id BIGSERIAL PRIMARY KEY, order_id BIGINT NOT NULL)",
            )
            .await
            .unwrap();
        store
    }
}

/// In the child: `store|gateway|mailer|order|point` (point empty: no abort; the parent kills).
fn run_child<S: Harness>(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let [at, gateway, mailer, order, point] = parts[..] else {
        panic!("bad child spec {spec:?}")
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = S::open(at).await;
        let ctx = Ctx {
            gateway: gateway.to_owned(),
            mailer: mailer.to_owned(),
            abort_at: (!point.is_empty()).then(|| point.to_owned()),
            in_doubt: Mutex::new(Vec::new()),
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "READY").unwrap();
        out.flush().unwrap();
        drop(out);
        let _ = fulfil(&store, &ctx, order.parse().unwrap()).await;
        // Nothing should get here but a SIGKILL round that was slow to land.
        println!("FINISHED");
    });
}

/// Spawns the child for one round.
fn spawn(test: &str, spec: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, spec)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs the rounds against a store at `at` (a file, or a URL with its schema), then takes every
/// order over in this process and checks the effects.
async fn kill_at_every_boundary<S: Harness>(test: &str, at: &str, first_order: u64) {
    let (gateway, gateway_addr) = Service::start("charge").await;
    let (mailer, mailer_addr) = Service::start("mail").await;
    let store = S::open(at).await;
    let mut rng = rand::rng();
    let mut points: HashMap<u64, &str> = HashMap::new();
    let mut finished_first = 0;
    let started = Instant::now();
    for round in 0..ROUNDS {
        let order = first_order + round;
        let sigkill = round % SIGKILL_EVERY == SIGKILL_EVERY - 1;
        let point = if sigkill {
            ""
        } else {
            POINTS[rng.random_range(0..POINTS.len())]
        };
        points.insert(order, if sigkill { "SIGKILL" } else { point });
        let spec = format!("{at}|{gateway_addr}|{mailer_addr}|{order}|{point}");
        let test = test.to_owned();
        let delay = Duration::from_micros(rng.random_range(0..15_000));
        tokio::task::spawn_blocking(move || {
            let mut child = spawn(&test, &spec);
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            // The test harness speaks first, on the same line ("test .. ... READY").
            let ready = lines.find(|line| !matches!(line, Ok(line) if !line.ends_with("READY")));
            assert!(
                matches!(&ready, Some(Ok(line)) if line.ends_with("READY")),
                "the child did not start: {ready:?}"
            );
            if sigkill {
                std::thread::sleep(delay);
                let _ = child.kill();
            }
            let status = child.wait().unwrap();
            // A SIGKILL may come after the child finished its order.
            assert!(
                sigkill || !status.success(),
                "the child of {spec} was not killed"
            );
            status.success()
        })
        .await
        .unwrap()
        .then(|| finished_first += 1);
    }
    let killing = started.elapsed();
    // Every child is dead; their leases run out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ctx = Ctx {
        gateway: gateway_addr,
        mailer: mailer_addr,
        abort_at: None,
        in_doubt: Mutex::new(Vec::new()),
    };
    for order in first_order..first_order + ROUNDS {
        let point = points[&order];
        let receipt = fulfil(&store, &ctx, order)
            .await
            .unwrap_or_else(|e| panic!("order {order} (killed at {point}): {e:?}"));
        assert_eq!(
            store.rides(order).await,
            1,
            "order {order} (killed at {point}): one ride row"
        );
        let (charges, charge_requests) = gateway.of(order);
        let (mails, mail_requests) = mailer.of(order);
        assert_eq!(
            (charges, mails),
            (1, 1),
            "order {order} (killed at {point}): one charge and one receipt took effect"
        );
        assert_eq!(receipt.charge.split('-').count(), 2, "{receipt:?}");
        // A step killed between its effect and its journal write was re-sent with its key.
        let doubted = ctx.in_doubt.lock().unwrap().clone();
        let doubted: Vec<&str> = doubted
            .iter()
            .filter(|(o, _)| *o == order)
            .map(|(_, label)| label.as_str())
            .collect();
        match point {
            "charge:effect" => {
                assert_eq!(charge_requests, 2, "order {order}: the charge was re-sent");
                assert_eq!(doubted, ["charge"], "order {order}");
            }
            "receipt:effect" => {
                assert_eq!(mail_requests, 2, "order {order}: the receipt was re-sent");
                assert_eq!(doubted, ["receipt"], "order {order}");
            }
            "charge:in" => assert_eq!(doubted, ["charge"], "order {order}"),
            "receipt:in" => assert_eq!(doubted, ["receipt"], "order {order}"),
            "SIGKILL" => {}
            _ => {
                assert!(
                    doubted.is_empty(),
                    "order {order} (killed at {point}): {doubted:?}"
                );
                assert_eq!((charge_requests, mail_requests), (1, 1), "order {order}");
            }
        }
    }
    eprintln!(
        "{ROUNDS} rounds killed in {killing:?} ({finished_first} of the SIGKILLs came after the \
         order was done), taken over in {:?}",
        started.elapsed() - killing
    );
}

#[test]
fn sqlite_steps_survive_a_kill_at_every_boundary() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return run_child::<retry_sqlite::SqliteStore>(&spec);
    }
    let dir = tempdir::TempDir::new("steps-kill");
    let path = dir.file("rides.sqlite3");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(kill_at_every_boundary::<retry_sqlite::SqliteStore>(
        "sqlite_steps_survive_a_kill_at_every_boundary",
        path.to_str().unwrap(),
        1,
    ));
}

#[cfg(feature = "postgres")]
#[test]
fn pg_steps_survive_a_kill_at_every_boundary() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return run_child::<retry_postgres::PgStore>(&spec);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let schema = pg::Schema::new("steps_kill").await;
        kill_at_every_boundary::<retry_postgres::PgStore>(
            "pg_steps_survive_a_kill_at_every_boundary",
            &schema.url,
            1,
        )
        .await;
        schema.drop_all().await;
    });
}
