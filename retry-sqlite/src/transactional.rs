//! Transactional mode on SQLite: the handler's writes, the claim's `done` row and the stored
//! response commit in one SQLite transaction, or not at all (retry-core's
//! [`TransactionalStore`](retry_core::idempotency::TransactionalStore), and the transactional
//! `IdempotencyLayer` of its `tower` feature). This module holds only documentation: the
//! examples of retry-core's transactional API, run on a [`SqliteStore`](crate::SqliteStore)
//! whose [`SqliteTransaction`](crate::SqliteTransaction) lends the handler its connection.
//!
//! # `TransactionalStore::begin_for`: a transaction that holds the claim, so a crash frees the key at once
//!
//! ```
//! use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, TransactionalStore};
//! use retry_sqlite::SqliteStore;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("retry-core-doc-begin-for-{}.sqlite3", std::process::id()));
//! let store = SqliteStore::open(&path)?;
//! let request = ClaimRequest {
//!     key: "pay-7",
//!     biz_key: "7",
//!     fingerprint: None,
//!     lease: Duration::from_secs(300),
//!     retention: Duration::from_secs(86_400),
//! };
//! let ClaimOutcome::Claimed(first) = store.claim(&request).await? else { panic!() };
//! let tx = store.begin_for(&first).await?;
//! // The process dies here: the transaction rolls back, nothing was booked.
//! drop(tx);
//! // The resend does not wait five minutes for the lease: the key is free now.
//! assert!(matches!(store.claim(&request).await?, ClaimOutcome::Claimed(_)));
//! # drop(store);
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let mut file = path.clone().into_os_string();
//! #     file.push(suffix);
//! #     let _ = std::fs::remove_file(file);
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! # `TransactionalStore::claim_in_transaction`: the claim, the handler's writes and the response in one commit
//!
//! ```
//! use retry_core::idempotency::{ClaimOutcome, ClaimRequest, TransactionClaim, TransactionalStore};
//! use retry_sqlite::SqliteStore;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("retry-core-doc-claim-in-tx-{}.sqlite3", std::process::id()));
//! let store = SqliteStore::open(&path)?;
//! rusqlite::Connection::open(&path)?.execute_batch("CREATE TABLE deposits (cents INTEGER NOT NULL)")?;
//! let request = ClaimRequest {
//!     key: "deposit-7",
//!     biz_key: "7",
//!     fingerprint: None,
//!     lease: Duration::from_secs(30),
//!     retention: Duration::from_secs(86_400),
//! };
//!
//! // The process dies after the claim: nothing of it was committed, the key is free.
//! let TransactionClaim::Claimed(first) = store.claim_in_transaction(&request).await? else { panic!() };
//! assert!(first.in_transaction);
//! drop(first);
//!
//! // The resend claims, books and stores its response in one commit.
//! let TransactionClaim::Claimed(mut call) = store.claim_in_transaction(&request).await? else { panic!() };
//! call.transaction.run(|c| c.execute("INSERT INTO deposits VALUES (10)", [])).await?;
//! store.commit_done(call.transaction, &call.claim, "\"booked\"").await?;
//!
//! // A duplicate gets the stored response; the deposit is there once.
//! let again = store.claim_in_transaction(&request).await?;
//! assert!(matches!(again, TransactionClaim::Refused(ClaimOutcome::Done(r)) if r == "\"booked\""));
//! let deposits: i64 = rusqlite::Connection::open(&path)?
//!     .query_row("SELECT count(*) FROM deposits", [], |row| row.get(0))?;
//! assert_eq!(deposits, 1);
//! # drop(store);
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let mut file = path.clone().into_os_string();
//! #     file.push(suffix);
//! #     let _ = std::fs::remove_file(file);
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! # `IdempotencyLayer::transactional`: one handler that writes in the transaction, one that does not
//!
//! ```
//! use axum::{Extension, Router, http::StatusCode, routing::post};
//! use retry_core::idempotency::StoreError;
//! use retry_sqlite::SqliteStore;
//! use retry_core::tower::{IdempotencyLayer, RequestTransaction};
//!
//! type Tx = Extension<RequestTransaction<SqliteStore>>;
//!
//! /// Books the payment in the service's own table: committed with the stored response.
//! async fn pay(Extension(tx): Tx, order: String) -> Result<String, StatusCode> {
//!     let failed = |_: StoreError| StatusCode::SERVICE_UNAVAILABLE; // rolled back: key freed
//!     let mut tx = tx.get().await.map_err(failed)?;
//!     tx.run(move |c| c.execute("INSERT INTO payments (id) VALUES (?1)", [order]))
//!         .await
//!         .map_err(failed)?;
//!     Ok("booked".into())
//! }
//!
//! /// Sends a receipt by email: no transaction asked for, so the answer is stored as in the
//! /// non-transactional mode (and a `5xx` kept, since the email may have gone).
//! async fn email_receipt(order: String) -> String {
//!     format!("receipt for {order} sent")
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = std::env::temp_dir().join(format!("retry-core-doc-modes-{}.sqlite3", std::process::id()));
//! let store = SqliteStore::open(&path)?;
//! let app: Router = Router::new()
//!     .route("/payments", post(pay))
//!     .route("/receipts", post(email_receipt))
//!     .layer(IdempotencyLayer::unauthenticated(store).transactional());
//! # drop(app);
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let mut file = path.clone().into_os_string();
//! #     file.push(suffix);
//! #     let _ = std::fs::remove_file(file);
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! # `RequestTransaction`: the handler's writes committed with the stored response, once
//!
//! ```
//! use axum::{Extension, Router, body::Body, http::{Request, StatusCode}, routing::post};
//! use retry_core::idempotency::StoreError;
//! use retry_sqlite::SqliteStore;
//! use retry_core::tower::{IdempotencyLayer, RequestTransaction};
//! use tower_service::Service;
//!
//! async fn pay(
//!     Extension(tx): Extension<RequestTransaction<SqliteStore>>,
//!     body: String,
//! ) -> Result<(StatusCode, String), StatusCode> {
//!     let unavailable = |_: StoreError| StatusCode::SERVICE_UNAVAILABLE;
//!     let mut tx = tx.get().await.map_err(unavailable)?;
//!     let id = tx
//!         .run(move |c| {
//!             c.execute("INSERT INTO payments (body) VALUES (?1)", [body])?;
//!             Ok(c.last_insert_rowid())
//!         })
//!         .await
//!         .map_err(unavailable)?;
//!     Ok((StatusCode::CREATED, format!("payment {id}")))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = std::env::temp_dir().join(format!("retry-core-doc-request-tx-{}.sqlite3", std::process::id()));
//! let store = SqliteStore::open(&path)?;
//! rusqlite::Connection::open(&path)?
//!     .execute_batch("CREATE TABLE payments (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")?;
//! let mut app = Router::new()
//!     .route("/payments", post(pay))
//!     .layer(IdempotencyLayer::unauthenticated(store).transactional());
//! let send = || {
//!     let request = Request::post("/payments").header("idempotency-key", "\"p-1\"");
//!     request.body(Body::from("10 EUR")).unwrap()
//! };
//! let first = app.call(send()).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//! let again = app.call(send()).await?;
//! assert_eq!(again.headers()["idempotent-replayed"], "?1");
//!
//! let booked: i64 = rusqlite::Connection::open(&path)?
//!     .query_row("SELECT count(*) FROM payments", [], |row| row.get(0))?;
//! assert_eq!(booked, 1, "the payment and its stored response committed together, once");
//! # drop(app);
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let mut file = path.clone().into_os_string();
//! #     file.push(suffix);
//! #     let _ = std::fs::remove_file(file);
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! # `RequestTransaction::get`: the handler's own write, in the layer's transaction
//!
//! ```
//! use retry_sqlite::SqliteStore;
//! use retry_core::tower::RequestTransaction;
//!
//! /// The handler's own write, in the layer's transaction.
//! async fn book(tx: &RequestTransaction<SqliteStore>, cents: i64) -> Result<(), Box<dyn std::error::Error>> {
//!     let mut tx = tx.get().await?;
//!     tx.run(move |c| c.execute("INSERT INTO bookings (cents) VALUES (?1)", [cents])).await?;
//!     Ok(())
//! }
//! ```
//!
//! # `IdempotencyLayer::transactional`: the layer's type
//!
//! ```
//! use http::request::Parts;
//! use retry_sqlite::SqliteStore;
//! use retry_core::tower::{IdempotencyLayer, InTransaction};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = std::env::temp_dir().join(format!("retry-core-doc-layer-tx-{}.sqlite3", std::process::id()));
//! let store = SqliteStore::open(&path)?;
//! let layer: IdempotencyLayer<SqliteStore, InTransaction> =
//!     IdempotencyLayer::unauthenticated(store).transactional();
//! # drop(layer);
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let mut file = path.clone().into_os_string();
//! #     file.push(suffix);
//! #     let _ = std::fs::remove_file(file);
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! # `effects_in_transaction`: the claim committed with the handler's writes
//!
//! ```
//! use axum::{Extension, Router, body::Body, http::{Request, StatusCode}, routing::post};
//! use retry_core::idempotency::StoreError;
//! use retry_sqlite::SqliteStore;
//! use retry_core::tower::{IdempotencyLayer, RequestTransaction};
//! use tower_service::Service;
//!
//! async fn book(Extension(tx): Extension<RequestTransaction<SqliteStore>>, order: String) -> StatusCode {
//!     let Ok(mut tx) = tx.get().await else { return StatusCode::SERVICE_UNAVAILABLE };
//!     match tx.run(move |c| c.execute("INSERT INTO bookings (id) VALUES (?1)", [order])).await {
//!         Ok(_) => StatusCode::CREATED,
//!         Err(_) => StatusCode::SERVICE_UNAVAILABLE, // rolled back: the key is free again
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = std::env::temp_dir().join(format!("retry-core-doc-one-commit-{}.sqlite3", std::process::id()));
//! let store = SqliteStore::open(&path)?;
//! rusqlite::Connection::open(&path)?.execute_batch("CREATE TABLE bookings (id TEXT PRIMARY KEY)")?;
//! let layer = IdempotencyLayer::unauthenticated(store).transactional().effects_in_transaction();
//! let mut app = Router::new().route("/bookings", post(book)).layer(layer);
//! let send = || Request::post("/bookings").header("idempotency-key", "\"b-1\"").body(Body::from("o-1"));
//! assert_eq!(app.call(send()?).await?.status(), StatusCode::CREATED);
//! let again = app.call(send()?).await?;
//! assert_eq!(again.headers()["idempotent-replayed"], "?1");
//! # drop(app);
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let mut file = path.clone().into_os_string();
//! #     file.push(suffix);
//! #     let _ = std::fs::remove_file(file);
//! # }
//! # Ok(())
//! # }
//! ```
