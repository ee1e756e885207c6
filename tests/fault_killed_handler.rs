//! Fault: the process is killed (SIGKILL) inside an `#[idempotent(transaction = tx)]` handler,
//! after its business write and before the commit. The claim was written in the same
//! transaction (`claim_in_transaction`), so the write and the claim roll back together: nothing
//! of the call is left, and the resend runs the handler exactly once, without waiting for the
//! lease (on PostgreSQL as soon as the server has noticed the dead session, `InProgress` until
//! then). Side effects == unique keys, no inbox row lost.
//!
//! The process is this test binary run again (`--exact <test> --nocapture`, with
//! `RETRY_CORE_FAULT_KILLED_CHILD=<file or schema>`): it handles deposits 1 to 3, then deposit 4
//! up to its write, says `INSIDE 4` and waits there for the kill.
//!
//! The same kill, for `IdempotencyLayer` without `.transactional()` on SQLite (its claim, the
//! handler's booking through `SqliteStore::write` and the response are writes of the file's
//! queue, committed one after the other): killed between the claim and the booking, or between
//! the booking and the response, the process leaves the claim in progress and the booking only
//! if it was written; the resend is told the call is in progress, and nothing runs twice.
//!
//! Related, not repeated here: `tests/transactional.rs` drops the handler's future between the
//! write and the commit inside one process, and `tests/sqlite_store.rs` / `tests/pg_store.rs`
//! kill a process holding a bare claim.
#![cfg(any(feature = "sqlite", feature = "postgres"))]

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use retry_core::idempotency::{IdempotencyError, StoreError};

#[cfg(feature = "sqlite")]
#[path = "common/child.rs"]
mod child;
#[path = "common/tempdir.rs"]
mod tempdir;

#[cfg(feature = "postgres")]
#[path = "common/pg.rs"]
mod pg;

/// Set in the child process: where its store is (a SQLite file, or a PostgreSQL schema).
const CHILD_ENV: &str = "RETRY_CORE_FAULT_KILLED_CHILD";

/// The deposits the child finishes before it is killed inside the next one.
const FINISHED: [u64; 3] = [1, 2, 3];
const KILLED: u64 = 4;

#[derive(Debug)]
enum Rejected {
    Idempotency(IdempotencyError),
    #[allow(
        dead_code,
        reason = "read through Debug when a test fails; made by the PostgreSQL test only"
    )]
    Db(String),
}

impl From<IdempotencyError> for Rejected {
    fn from(e: IdempotencyError) -> Self {
        Rejected::Idempotency(e)
    }
}

impl From<StoreError> for Rejected {
    fn from(e: StoreError) -> Self {
        Rejected::Idempotency(IdempotencyError::Store(e))
    }
}

/// Said by the child once the handler of `deposit_no` wrote; it then waits to be killed.
fn inside(deposit_no: u64) {
    println!("INSIDE {deposit_no}");
    std::io::stdout().flush().unwrap();
}

/// Runs `test` again as a child with `CHILD_ENV=store` and kills it (SIGKILL) as soon as it says
/// it is inside the handler of [`KILLED`].
fn kill_inside_handler(test: &str, store: &str) {
    let (mut child, lines) = child::rerun(test, CHILD_ENV, store, Stdio::null());
    let reached = child::wait_for_line(&lines, &format!("INSIDE {KILLED}"));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    if let Err(e) = reached {
        panic!("the child never got inside the handler ({e}); it ended with {status:?}");
    }
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9), "killed with SIGKILL: {status:?}");
}

/// Resends the killed deposit until it runs: `InProgress` meanwhile (the only error allowed),
/// then the handler's answer; also how many resends found it in progress.
async fn resend_until_it_runs<F, Fut>(mut send: F) -> (i64, u32)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<i64, Rejected>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut in_progress = 0;
    loop {
        match send().await {
            Ok(amount) => return (amount, in_progress),
            Err(Rejected::Idempotency(e @ IdempotencyError::InProgress))
                if Instant::now() < deadline =>
            {
                assert_eq!(
                    e.to_string(),
                    "a call with the same idempotency key is in progress"
                );
                in_progress += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("resend of the killed deposit: {other:?}"),
        }
    }
}

fn amount(deposit_no: u64) -> i64 {
    deposit_no as i64 * 10
}

// ---- SQLite ----

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;

    use retry_core::idempotency::encode_namespaced_key;
    use retry_core::idempotent;
    use retry_sqlite::{SqliteStore, SqliteTransaction};

    use super::tempdir::TempDir;

    #[idempotent(key = deposit_no, store = inbox, transaction = tx, lease = "60s")]
    async fn deposit(
        inbox: &SqliteStore,
        tx: &mut SqliteTransaction,
        deposit_no: u64,
        die_inside: bool,
    ) -> Result<i64, Rejected> {
        let amount = amount(deposit_no);
        tx.run(move |c| {
            c.execute(
                "UPDATE balance SET amount = amount + ?1",
                rusqlite::params![amount],
            )?;
            c.execute(
                "INSERT INTO effects (deposit_no) VALUES (?1)",
                rusqlite::params![deposit_no as i64],
            )
        })
        .await?;
        if die_inside {
            inside(deposit_no);
            std::future::pending::<()>().await;
        }
        Ok(amount)
    }

    fn effects(db: &std::path::Path) -> Vec<i64> {
        let conn = rusqlite::Connection::open(db).unwrap();
        let mut statement = conn
            .prepare("SELECT deposit_no FROM effects ORDER BY 1")
            .unwrap();
        statement
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn balance(db: &std::path::Path) -> i64 {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.query_row("SELECT amount FROM balance", [], |row| row.get(0))
            .unwrap()
    }

    fn status(db: &std::path::Path, deposit_no: u64) -> Option<String> {
        let conn = rusqlite::Connection::open(db).unwrap();
        // `#[idempotent]` stores the key in the function's namespace.
        conn.query_row(
            "SELECT status FROM inbox_log WHERE msg_id = ?1",
            [encode_namespaced_key("deposit", None::<&str>, &deposit_no)],
            |row| row.get(0),
        )
        .ok()
    }

    #[tokio::test]
    async fn a_process_killed_inside_a_sqlite_handler_loses_and_repeats_nothing() {
        const TEST: &str =
            "sqlite::a_process_killed_inside_a_sqlite_handler_loses_and_repeats_nothing";
        if let Ok(db) = std::env::var(CHILD_ENV) {
            let inbox = SqliteStore::open(&db).unwrap();
            for deposit_no in FINISHED {
                deposit(&inbox, deposit_no, false).await.unwrap();
            }
            deposit(&inbox, KILLED, true).await.unwrap();
            unreachable!("the parent kills this process inside the handler");
        }

        let dir = TempDir::new("fault-killed-handler");
        let db = dir.file("bank.sqlite3");
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch(
                "CREATE TABLE balance (amount INTEGER NOT NULL);
                 INSERT INTO balance VALUES (0);
                 CREATE TABLE effects (deposit_no INTEGER NOT NULL);",
            )
            .unwrap();
        let inbox = SqliteStore::open(&db).unwrap();
        kill_inside_handler(TEST, db.to_str().unwrap());

        // The killed handler's write rolled back, and its claim with it.
        assert_eq!(effects(&db), [1, 2, 3], "the killed write rolled back");
        assert_eq!(status(&db, KILLED), None, "nothing of the call committed");

        let (answer, waited) = resend_until_it_runs(|| deposit(&inbox, KILLED, false)).await;
        assert_eq!(answer, amount(KILLED));
        assert_eq!(waited, 0, "the key was free at once");

        // Every deposit again, and a new one: each effect exactly once.
        for deposit_no in 1..=5 {
            assert_eq!(
                deposit(&inbox, deposit_no, false).await.unwrap(),
                amount(deposit_no)
            );
        }
        assert_eq!(effects(&db), [1, 2, 3, 4, 5], "side effects == unique keys");
        assert_eq!(balance(&db), (1..=5).map(amount).sum::<i64>());
        for deposit_no in 1..=5 {
            assert_eq!(
                status(&db, deposit_no).as_deref(),
                Some("done"),
                "no inbox row lost"
            );
        }
    }
}

// ---- SQLite, IdempotencyLayer without `.transactional()` ----

/// The layer's plain mode on the file's write queue: the claim, the handler's own booking
/// (`SqliteStore::write`) and the stored response are three writes of the queue, each committed
/// before the next step. Killed between the claim and the handler's write, or between that write
/// and the response, the process leaves exactly what committed: the claim in progress (so the
/// resend is told so and runs nothing), and the booking only if it was written.
#[cfg(all(feature = "sqlite", feature = "tower"))]
mod sqlite_layer {
    use super::*;

    use std::sync::Arc;

    use axum::Router;
    use axum::body::Body;
    use axum::extract::State;
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use retry_core::tower::IdempotencyLayer;
    use retry_sqlite::SqliteStore;
    use tower_service::Service as _;

    use super::tempdir::TempDir;

    /// Where the child's handler of [`KILLED`] waits for the kill.
    const BEFORE_THE_WRITE: &str = "before-write";
    const AFTER_THE_WRITE: &str = "after-write";

    /// The service: books the request's number through the store's queue; for [`KILLED`] it
    /// says `INSIDE` at `die` and waits there.
    fn app(store: Arc<SqliteStore>, die: Option<&'static str>) -> Router {
        async fn book(
            State((db, die)): State<(Arc<SqliteStore>, Option<&'static str>)>,
            body: String,
        ) -> (StatusCode, String) {
            let number: u64 = body.parse().unwrap();
            let killed = number == KILLED;
            if killed && die == Some(BEFORE_THE_WRITE) {
                inside(number);
                std::future::pending::<()>().await;
            }
            db.write(move |c| {
                c.execute("INSERT INTO bookings (number) VALUES (?1)", [number as i64])
            })
            .await
            .unwrap();
            if killed && die == Some(AFTER_THE_WRITE) {
                inside(number);
                std::future::pending::<()>().await;
            }
            (StatusCode::CREATED, format!("booked {number}"))
        }
        Router::new()
            .route("/bookings", post(book))
            .layer(
                IdempotencyLayer::unauthenticated(Arc::clone(&store))
                    .lease(Duration::from_secs(60)),
            )
            .with_state((store, die))
    }

    async fn send(app: &mut Router, number: u64) -> (StatusCode, String) {
        let request = Request::post("/bookings")
            .header("idempotency-key", format!("\"b-{number}\""))
            .body(Body::from(number.to_string()))
            .unwrap();
        let response = app.call(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn bookings(db: &std::path::Path) -> Vec<i64> {
        let conn = rusqlite::Connection::open(db).unwrap();
        let mut statement = conn
            .prepare("SELECT number FROM bookings ORDER BY 1")
            .unwrap();
        statement
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn statuses(db: &std::path::Path) -> Vec<String> {
        let conn = rusqlite::Connection::open(db).unwrap();
        let mut statement = conn
            .prepare("SELECT status FROM inbox_log ORDER BY created_at")
            .unwrap();
        statement
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// The child: books 1 to 3, then dies inside the handler of [`KILLED`] at `die`.
    async fn child(db: &str, die: &'static str) -> ! {
        let mut app = app(Arc::new(SqliteStore::open(db).unwrap()), Some(die));
        for number in FINISHED {
            assert_eq!(send(&mut app, number).await.0, StatusCode::CREATED);
        }
        send(&mut app, KILLED).await;
        unreachable!("the parent kills this process inside the handler");
    }

    /// Kills the child at `die`; checks what it left, then that nothing runs twice.
    async fn killed_at(test: &str, die: &'static str, booked: &[i64]) {
        let dir = TempDir::new("fault-killed-layer");
        let db = dir.file("bookings.sqlite3");
        let store = Arc::new(SqliteStore::open(&db).unwrap());
        store
            .write(|c| c.execute_batch("CREATE TABLE bookings (number INTEGER NOT NULL)"))
            .await
            .unwrap();
        kill_inside_handler(test, db.to_str().unwrap());

        // Durable before the kill: the claim before the handler ran, the booking once written.
        assert_eq!(bookings(&db), booked, "killed {die}");
        assert_eq!(
            statuses(&db),
            ["done", "done", "done", "in_progress"],
            "killed {die}"
        );

        // The resend is told the call is in progress (its lease holds): nothing runs again.
        let mut app = app(store, None);
        let (status, _) = send(&mut app, KILLED).await;
        assert_eq!(status, StatusCode::CONFLICT, "killed {die}");
        for number in FINISHED {
            let (status, body) = send(&mut app, number).await;
            assert_eq!(
                (status, body),
                (StatusCode::CREATED, format!("booked {number}"))
            );
        }
        assert_eq!(
            bookings(&db),
            booked,
            "replays and the resend booked nothing"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_layer_killed_between_the_claim_and_the_handlers_write_keeps_the_claim() {
        const TEST: &str =
            "sqlite_layer::a_layer_killed_between_the_claim_and_the_handlers_write_keeps_the_claim";
        if let Ok(db) = std::env::var(CHILD_ENV) {
            child(&db, BEFORE_THE_WRITE).await;
        }
        killed_at(TEST, BEFORE_THE_WRITE, &[1, 2, 3]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_layer_killed_between_the_handlers_write_and_the_response_keeps_both() {
        const TEST: &str =
            "sqlite_layer::a_layer_killed_between_the_handlers_write_and_the_response_keeps_both";
        if let Ok(db) = std::env::var(CHILD_ENV) {
            child(&db, AFTER_THE_WRITE).await;
        }
        killed_at(TEST, AFTER_THE_WRITE, &[1, 2, 3, 4]).await;
    }
}

// ---- PostgreSQL ----

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;

    use retry_core::idempotency::encode_namespaced_key;
    use retry_core::idempotent;
    use retry_postgres::{PgStore, PgTransaction};

    use super::pg::Schema;

    impl From<tokio_postgres::Error> for Rejected {
        fn from(e: tokio_postgres::Error) -> Self {
            Rejected::Db(e.to_string())
        }
    }

    #[idempotent(key = deposit_no, store = inbox, transaction = tx, lease = "60s")]
    async fn deposit(
        inbox: &PgStore,
        tx: &mut PgTransaction,
        deposit_no: u64,
        die_inside: bool,
    ) -> Result<i64, Rejected> {
        let amount = amount(deposit_no);
        tx.client()
            .execute("UPDATE balance SET amount = amount + $1", &[&amount])
            .await?;
        tx.client()
            .execute(
                "INSERT INTO effects (deposit_no) VALUES ($1)",
                &[&(deposit_no as i64)],
            )
            .await?;
        if die_inside {
            inside(deposit_no);
            std::future::pending::<()>().await;
        }
        Ok(amount)
    }

    async fn effects(client: &tokio_postgres::Client) -> Vec<i64> {
        client
            .query("SELECT deposit_no FROM effects ORDER BY 1", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    }

    async fn status(client: &tokio_postgres::Client, deposit_no: u64) -> Option<String> {
        client
            .query_opt(
                "SELECT status FROM inbox_log WHERE msg_id = $1",
                // `#[idempotent]` stores the key in the function's namespace.
                &[&encode_namespaced_key("deposit", None::<&str>, &deposit_no)],
            )
            .await
            .unwrap()
            .map(|row| row.get(0))
    }

    #[tokio::test]
    async fn a_process_killed_inside_a_postgres_handler_loses_and_repeats_nothing() {
        const TEST: &str =
            "postgres::a_process_killed_inside_a_postgres_handler_loses_and_repeats_nothing";
        if let Ok(name) = std::env::var(CHILD_ENV) {
            let inbox = Schema::existing(&name).store().await;
            for deposit_no in FINISHED {
                deposit(&inbox, deposit_no, false).await.unwrap();
            }
            deposit(&inbox, KILLED, true).await.unwrap();
            unreachable!("the parent kills this process inside the handler");
        }

        let schema = Schema::new("killed_handler").await;
        let client = schema.client().await;
        client
            .batch_execute(
                "CREATE TABLE balance (amount BIGINT NOT NULL);
                 INSERT INTO balance VALUES (0);
                 CREATE TABLE effects (deposit_no BIGINT NOT NULL);",
            )
            .await
            .unwrap();
        let inbox = schema.store().await;
        let name = schema.name.clone();
        tokio::task::spawn_blocking(move || kill_inside_handler(TEST, &name))
            .await
            .unwrap();

        // The server rolled the dead session's transaction back, its claim with it. (The server
        // may take a moment to notice the dead session: until then its locks hold, and the
        // resend is told `InProgress`.)
        assert_eq!(
            effects(&client).await,
            [1, 2, 3],
            "the killed write rolled back"
        );
        assert_eq!(
            status(&client, KILLED).await,
            None,
            "nothing of the call committed"
        );

        let (answer, waited) = resend_until_it_runs(|| deposit(&inbox, KILLED, false)).await;
        assert_eq!(answer, amount(KILLED));
        eprintln!("the killed deposit was in progress for {waited} resends");

        for deposit_no in 1..=5 {
            assert_eq!(
                deposit(&inbox, deposit_no, false).await.unwrap(),
                amount(deposit_no)
            );
        }
        assert_eq!(
            effects(&client).await,
            [1, 2, 3, 4, 5],
            "side effects == unique keys"
        );
        let balance: i64 = client
            .query_one("SELECT amount FROM balance", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(balance, (1..=5).map(amount).sum::<i64>());
        for deposit_no in 1..=5 {
            assert_eq!(
                status(&client, deposit_no).await.as_deref(),
                Some("done"),
                "no inbox row lost"
            );
        }
        drop(inbox);
        schema.drop_all().await;
    }
}
