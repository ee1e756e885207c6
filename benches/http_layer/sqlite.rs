//! The five sides on SQLite: one file per side. Without the layer (alone, floor) the handler's
//! own connection is one writer behind a mutex (as SQLite allows); with it, the store is a
//! `SqliteStore` on the same file, and the handler books through the file's write queue: in the
//! layer's transaction, or with `SqliteStore::write` (as docs/ tell a service to).

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Extension, Router};
use retry_core::tower::{IdempotencyLayer, RequestTransaction};
use retry_sqlite::SqliteStore;
use rusqlite::{Connection, TransactionBehavior};

use super::{Side, key, listen, no_key, payment};

const TABLE: &str =
    "CREATE TABLE IF NOT EXISTS payments (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, response TEXT)";
const INSERT: &str = "INSERT INTO payments (body) VALUES (?1)";
// The floor's statements: the key first (a duplicate finds it and stops there), the response
// once the booking gave it its id.
const CLAIM_SEEN: &str = "INSERT INTO seen (key) VALUES (?1) ON CONFLICT DO NOTHING";
const READ_SEEN: &str = "SELECT response FROM seen WHERE key = ?1";
const STORE_SEEN: &str = "UPDATE seen SET response = ?1 WHERE key = ?2";

/// The handler's own connection (every side but the transactional one): one writer, as SQLite
/// allows.
type Own = Arc<Mutex<Connection>>;

async fn book_on_own_connection(State(db): State<Own>, body: String) -> (StatusCode, String) {
    let id = tokio::task::spawn_blocking(move || {
        let db = db.lock().expect("the connection's lock");
        let mut insert = db.prepare_cached(INSERT).expect("prepare");
        insert.execute([body]).expect("the booking");
        db.last_insert_rowid()
    })
    .await
    .expect("the blocking task");
    (StatusCode::CREATED, payment(id))
}

/// The floor on SQLite: key, booking and response in one `BEGIN IMMEDIATE` transaction.
async fn dedup_by_hand(
    State(db): State<Own>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let Some(key) = key(&headers) else {
        return no_key();
    };
    tokio::task::spawn_blocking(move || {
        let mut db = db.lock().expect("the connection's lock");
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("BEGIN");
        let new = tx
            .prepare_cached(CLAIM_SEEN)
            .and_then(|mut s| s.execute([&key]))
            .expect("the key")
            == 1;
        if !new {
            let stored: String = tx
                .prepare_cached(READ_SEEN)
                .and_then(|mut s| s.query_row([&key], |row| row.get(0)))
                .expect("the stored response");
            tx.rollback().expect("ROLLBACK");
            return (StatusCode::CREATED, stored);
        }
        tx.prepare_cached(INSERT)
            .and_then(|mut s| s.execute([body]))
            .expect("the booking");
        let response = payment(tx.last_insert_rowid());
        tx.prepare_cached(STORE_SEEN)
            .and_then(|mut s| s.execute([&response, &key]))
            .expect("the response");
        tx.commit().expect("COMMIT");
        (StatusCode::CREATED, response)
    })
    .await
    .expect("the blocking task")
}

/// The non-transactional layer's handler: its booking is a write of the file's queue, shared
/// with the store's claims and completions (a `SqliteStore` opened on the same file).
async fn book_through_the_queue(
    State(db): State<Arc<SqliteStore>>,
    body: String,
) -> (StatusCode, String) {
    let id = db
        .write(move |c| {
            c.prepare_cached(INSERT)?.execute([body])?;
            Ok(c.last_insert_rowid())
        })
        .await
        .expect("the booking");
    (StatusCode::CREATED, payment(id))
}

async fn book_in_transaction(
    Extension(tx): Extension<RequestTransaction<SqliteStore>>,
    body: String,
) -> (StatusCode, String) {
    let mut tx = tx.get().await.expect("the transaction");
    let id = tx
        .run(move |c| {
            c.prepare_cached(INSERT)?.execute([body])?;
            Ok(c.last_insert_rowid())
        })
        .await
        .expect("the booking");
    drop(tx);
    (StatusCode::CREATED, payment(id))
}

fn pragmas(full: bool) -> String {
    let sync = if full { "FULL" } else { "NORMAL" };
    format!("PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA busy_timeout=5000;")
}

/// Serves `side` on its own SQLite file in `dir`; returns the `/payments` URL.
pub(super) async fn serve_sqlite(side: Side, dir: &Path, full: bool) -> String {
    let path = dir.join(format!("{}.sqlite3", side.slug()));
    let own = || -> Own {
        let db = Connection::open(&path).expect("open the service's file");
        db.execute_batch(&format!("{}{TABLE}", pragmas(full)))
            .expect("the tables");
        Arc::new(Mutex::new(db))
    };
    let store = || {
        SqliteStore::open(&path)
            .expect("open the store")
            .with_synchronous_full(full)
    };
    let router = match side {
        Side::Alone => Router::new()
            .route("/payments", post(book_on_own_connection))
            .with_state(own()),
        Side::Floor => Router::new()
            .route("/payments", post(dedup_by_hand))
            .with_state(own()),
        Side::Plain => {
            drop(own()); // the table, created beside the store's
            let layer = IdempotencyLayer::unauthenticated(store());
            Router::new()
                .route("/payments", post(book_through_the_queue))
                .layer(layer)
                .with_state(Arc::new(store()))
        }
        Side::Transactional | Side::OneCommit => {
            let layer = IdempotencyLayer::unauthenticated(store()).transactional();
            let layer = if side == Side::OneCommit {
                layer.effects_in_transaction()
            } else {
                layer
            };
            drop(own()); // the table, created beside the store's
            Router::new()
                .route("/payments", post(book_in_transaction))
                .layer(layer)
        }
    };
    listen(router).await
}
