//! `cargo run --features postgres --example postgres_setup`: retry-core's PostgreSQL tables,
//! set up and used once.
//!
//! ```sh
//! DATABASE_URL=postgres://app:secret@localhost:5432/payments \
//!     cargo run --features postgres --example postgres_setup
//! ```
//!
//! Connects a `PgStore` (idempotency) to `DATABASE_URL` and a `PgDeadLetters` (dead letters) to
//! the same connection pool, which creates the tables that are missing in the first schema of
//! the role's `search_path`, then lists them with what each holds. Then one `#[idempotent]`
//! call runs twice with the same key (the second gets the stored first response, and the row
//! in `inbox_log` is shown), and one `#[retryable]` call that cannot succeed is parked in
//! `dead_letters`. The letter is left pending, to be seen and acknowledged with `retry-dlq`.
//! Without `DATABASE_URL` it says what to set and exits with status 2.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use retry_core::dlq::{DeadLetterStore, DlqFailed};
use retry_core::idempotency::IdempotencyError;
use retry_core::{Classify, Decision, idempotent, retryable};
use retry_postgres::PgDeadLetters;
use retry_postgres::PgStore;
use serde::{Deserialize, Serialize};

/// The tables `PgStore` and `PgDeadLetters` create, and what each one holds.
const TABLES: [(&str, &str); 5] = [
    (
        "retry_core_schema",
        "the layout version of each table below (upgrades run once, under an advisory lock)",
    ),
    (
        "inbox_log",
        "idempotency: one row per key (PRIMARY KEY msg_id), its status, the stored first response, lease and expiry",
    ),
    (
        "dead_letters",
        "parked calls: msg_id, the original, reason, attempts, first/last failure, trace id, resolution",
    ),
    (
        "dead_letter_redrives",
        "one record per redrive run: who, when, which target, how many sent",
    ),
    (
        "dead_letter_audit",
        "one row per letter a redrive sends, written before it is sent and completed after",
    ),
];

// ---- one idempotent call ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reservation {
    order: String,
    seats: u32,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Reserved {
    order: String,
    confirmation: u32,
}

#[derive(Debug)]
struct ReserveError(IdempotencyError);

impl From<IdempotencyError> for ReserveError {
    fn from(e: IdempotencyError) -> Self {
        ReserveError(e)
    }
}

impl std::fmt::Display for ReserveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reservation refused: {:?}", self.0)
    }
}

impl std::error::Error for ReserveError {}

/// How many times the body (the side effect) ran.
static RESERVED: AtomicU32 = AtomicU32::new(0);

#[idempotent(key = req.order.as_str(), biz_key = req.order.as_str(), store = store, retention = "30d")]
async fn reserve(store: &PgStore, req: &Reservation) -> Result<Reserved, ReserveError> {
    let confirmation = RESERVED.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(Reserved {
        order: req.order.clone(),
        confirmation,
    })
}

// ---- one parked letter ----

#[derive(Debug)]
enum NotifyError {
    /// The downstream service is down: worth retrying.
    Unavailable,
    /// Gave up, and the letter could not be parked.
    NotParked(Box<DlqFailed>),
}

impl Classify for NotifyError {
    fn classify(&self) -> Decision {
        match self {
            NotifyError::Unavailable => Decision::Retry,
            NotifyError::NotParked(_) => Decision::Stop,
        }
    }

    fn reason(&self) -> Option<String> {
        Some(match self {
            NotifyError::Unavailable => "the notification service answered 503".to_owned(),
            NotifyError::NotParked(e) => e.to_string(),
        })
    }
}

impl From<DlqFailed> for NotifyError {
    fn from(e: DlqFailed) -> Self {
        NotifyError::NotParked(Box::new(e))
    }
}

#[retryable(max = 3, base = "20ms", dlq(sink = letters, id = msg_id.to_owned(), original = msg_id))]
async fn notify(letters: &PgDeadLetters, msg_id: &str) -> Result<(), NotifyError> {
    Err(NotifyError::Unavailable)
}

// ---- the run ----

const NO_URL: &str = "\
error: DATABASE_URL is not set
This example needs a PostgreSQL database it may create tables in, for example:
  DATABASE_URL=postgres://USER:PASSWORD@localhost:5432/DATABASE cargo run --features postgres --example postgres_setup
(scripts/test starts a throwaway server for the tests and sets DATABASE_URL itself.)";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            eprintln!("{NO_URL}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&url).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The library's errors name the server, never the password.
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    // Creates `retry_core_schema` and `inbox_log` when they are missing (safe from many
    // instances at once); a role that cannot create tables can use tables made beforehand.
    let store = PgStore::connect(url).await?;
    // The dead letters share the store's pool: one set of connections for both.
    let letters = PgDeadLetters::from_pool(store.pool().clone()).await?;
    let db = store.pool().get().await?;
    let schema: String = db.query_one("SELECT current_schema()", &[]).await?.get(0);
    println!("connected to {}, schema {schema}", store.server());

    println!();
    println!(
        "tables (created when missing; the role needs CREATE on the schema only the first time):"
    );
    for (table, holds) in TABLES {
        let present: bool = db
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await?
            .get(0);
        if !present {
            return Err(format!("{table} is missing after the set-up").into());
        }
        println!("  {table:<21} {holds}");
    }

    // A run of its own: a second run makes a new key and a new letter.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());

    println!();
    let request = Reservation {
        order: format!("order-{run}"),
        seats: 2,
    };
    println!(
        "idempotent call: reserve({}, {} seats) twice with the same key",
        request.order, request.seats
    );
    let first = reserve(&store, &request).await?;
    let second = reserve(&store, &request).await?;
    println!("  first answer   {first:?}");
    println!("  second answer  {second:?} (the stored first response)");
    println!(
        "  body ran       {} time(s)",
        RESERVED.load(Ordering::SeqCst)
    );
    let row = db
        .query_one(
            "SELECT status, response, created_at FROM inbox_log WHERE biz_key = $1",
            &[&request.order],
        )
        .await?;
    println!(
        "  inbox_log row  status {}, response {}, created_at {}",
        row.get::<_, String>(0),
        row.get::<_, Option<String>>(1).unwrap_or_default(),
        retry_core::time::format_rfc3339(row.get::<_, std::time::SystemTime>(2))
    );

    println!();
    let msg_id = format!("notify-{run}");
    println!("retryable call that cannot succeed: notify({msg_id}), 3 attempts");
    match notify(&letters, &msg_id).await {
        Err(NotifyError::Unavailable) => {}
        Err(NotifyError::NotParked(e)) => return Err(format!("not parked: {e}").into()),
        Ok(()) => return Err("the call was meant to fail".into()),
    }
    let letter = letters
        .get(&msg_id)
        .await?
        .ok_or("the letter is not in dead_letters")?;
    println!(
        "  parked         msg_id {}, class {}, attempts {}, reason {:?}",
        letter.msg_id,
        letter.class.as_str(),
        letter.attempts,
        letter.reason
    );
    println!(
        "  pending        {} letter(s) in dead_letters",
        letters.stats().await?.pending
    );
    println!(
        "  see it         DATABASE_URL=... cargo run -p retry-dlq --features postgres -- list"
    );
    println!(
        "  acknowledge    DATABASE_URL=... cargo run -p retry-dlq --features postgres -- ack {msg_id} --who YOUR_NAME"
    );
    Ok(())
}
