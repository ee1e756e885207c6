//! Rocket rides (Brandur Leach's "Implementing Stripe-like Idempotency Keys in Postgres"): one
//! request books a ride in our database, charges the card at a payment gateway and mails the
//! receipt. No single transaction covers the three, so each is a step of an `#[idempotent]`
//! body on SQLite, journaled under the request's claim:
//!
//! 1. the first run books the ride (an atomic phase: the ride row and its journal entry commit
//!    together) and charges the card, then the mailer fails after taking the message;
//! 2. the resend (`on_err = "resume"`) skips the ride and the charge (their outputs come from the
//!    journal) and sends the receipt again, in doubt, with the same key: the mailer answers it
//!    without a second mail;
//! 3. a third send gets the stored response.
//!
//! The gateway and the mailer deduplicate by `Idempotency-Key`, as Stripe does; each counts the
//! effects it made. `cargo run --example rides`
//!
//! When every effect is a write to the store's own database, one transaction is enough
//! (`#[idempotent(transaction = tx)]`); steps are for the calls that leave it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use retry_core::idempotency::{IdempotencyError, StoreError, step, step_in_transaction};
use retry_core::idempotent;
use retry_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};

#[derive(Debug)]
#[allow(dead_code, reason = "printed through Debug")]
enum RideError {
    MailerDown,
    Idempotency(IdempotencyError),
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

/// A service that deduplicates by key: the first request of a key makes the effect, every
/// later one gets the same answer.
#[derive(Default)]
struct Upstream {
    name: &'static str,
    answers: Mutex<HashMap<String, String>>,
    requests: Mutex<u32>,
}

impl Upstream {
    fn new(name: &'static str) -> Self {
        Upstream {
            name,
            ..Upstream::default()
        }
    }

    fn call(&self, key: &str, what: &str) -> String {
        *self.requests.lock().unwrap() += 1;
        let mut answers = self.answers.lock().unwrap();
        let next = answers.len() + 1;
        answers
            .entry(key.to_owned())
            .or_insert_with(|| {
                println!("  {}: {what} (effect #{next}, key {key})", self.name);
                format!("{}_{next}", self.name)
            })
            .clone()
    }

    fn effects(&self) -> usize {
        self.answers.lock().unwrap().len()
    }
}

struct Services {
    gateway: Upstream,
    mailer: Upstream,
    mailer_up: AtomicBool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ride {
    id: i64,
    charge: String,
    receipt: String,
}

#[idempotent(key = order, store = store, on_err = "resume")]
async fn book_ride(
    store: &SqliteStore,
    services: &Services,
    order: u64,
) -> Result<Ride, RideError> {
    // Atomic phase: the ride row and the step's journal entry commit together.
    let id = step_in_transaction("ride", store, async |tx, _| {
        let order = i64::try_from(order).unwrap_or(i64::MAX);
        let id = tx
            .run(move |c| {
                c.execute("INSERT INTO rides (order_id) VALUES (?1)", [order])?;
                Ok(c.last_insert_rowid())
            })
            .await?;
        println!("  database: ride {id} booked");
        Ok::<_, RideError>(id)
    })
    .await?;
    let charge = step("charge", async |s| {
        Ok::<_, RideError>(services.gateway.call(s.key(), "charged $20"))
    })
    .await?;
    let receipt = step("receipt", async |s| {
        if s.in_doubt() {
            println!("  receipt: in doubt, sent again with the same key");
        }
        let receipt = services.mailer.call(s.key(), "receipt mailed");
        if services.mailer_up.load(Ordering::SeqCst) {
            Ok(receipt)
        } else {
            println!("  mailer: took the message, then the connection dropped");
            Err(RideError::MailerDown)
        }
    })
    .await?;
    Ok(Ride {
        id,
        charge,
        receipt,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("rides-{}.sqlite3", std::process::id()));
    let store = SqliteStore::open(&path)?;
    store
        .write(|c| {
            c.execute_batch(
                "CREATE TABLE IF NOT EXISTS rides (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL)",
            )
        })
        .await?;
    let services = Services {
        gateway: Upstream::new("gateway"),
        mailer: Upstream::new("mailer"),
        mailer_up: AtomicBool::new(false),
    };

    println!("first run:");
    let first = book_ride(&store, &services, 42).await;
    println!("  -> {first:?}");
    services.mailer_up.store(true, Ordering::SeqCst);

    println!("resend (on_err = \"resume\"):");
    let ride = book_ride(&store, &services, 42)
        .await
        .map_err(|e| format!("{e:?}"))?;
    println!("  -> {ride:?}");

    println!("third send:");
    let again = book_ride(&store, &services, 42)
        .await
        .map_err(|e| format!("{e:?}"))?;
    println!("  -> the stored response: {again:?}");

    let rides: i64 = store
        .write(|c| {
            c.query_row("SELECT count(*) FROM rides WHERE order_id = 42", [], |r| {
                r.get(0)
            })
        })
        .await?;
    println!(
        "effects: {rides} ride row, {} charge, {} receipt ({} requests to the mailer)",
        services.gateway.effects(),
        services.mailer.effects(),
        services.mailer.requests.lock().unwrap()
    );
    assert_eq!(
        (rides, services.gateway.effects(), services.mailer.effects()),
        (1, 1, 1)
    );
    assert_eq!(ride, again);

    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    Ok(())
}
