//! SQLite for [retry-core](retry_core): the embedded engine, one file that any number of threads
//! and processes of one machine share.
//!
//! - [`SqliteStore`]: the idempotency log (`inbox_log`) behind `#[idempotent(store = ..)]` and
//!   `IdempotencyLayer`, an [`IdempotencyStore`](retry_core::idempotency::IdempotencyStore) and a
//!   [`TransactionalStore`](retry_core::idempotency::TransactionalStore) whose
//!   [`SqliteTransaction`] commits the handler's own writes with the stored response.
//! - [`SqliteDeadLetters`]: the dead-letter table (`dead_letters`, with its redrive audit), a
//!   [`DeadLetterSink`](retry_core::dlq::DeadLetterSink) and a
//!   [`DeadLetterStore`](retry_core::dlq::DeadLetterStore) that `retry-dlq` and
//!   [`Redrive`](retry_core::dlq::Redrive) read.
//!
//! Both may live in one file (they keep their layout versions in the same `retry_core_schema`
//! table), next to the application's own tables. The crate implements retry-core's public traits
//! from outside, as any third-party store would, and passes retry-core's conformance suites
//! (`retry_core::idempotency::conformance`, `retry_core::dlq::conformance`).
//!
//! ```
//! use retry_core::dlq::DlqFailed;
//! use retry_core::idempotency::IdempotencyError;
//! use retry_core::{Classify, Decision, idempotent, retryable};
//! use retry_sqlite::{SqliteDeadLetters, SqliteStore};
//!
//! #[derive(Debug)]
//! enum PayError {
//!     Declined,
//!     NotParked(DlqFailed),
//!     Store(IdempotencyError),
//! }
//! impl Classify for PayError {
//!     fn classify(&self) -> Decision {
//!         Decision::Stop
//!     }
//! }
//! impl From<DlqFailed> for PayError {
//!     fn from(e: DlqFailed) -> Self {
//!         PayError::NotParked(e)
//!     }
//! }
//! impl From<IdempotencyError> for PayError {
//!     fn from(e: IdempotencyError) -> Self {
//!         PayError::Store(e)
//!     }
//! }
//!
//! #[idempotent(key = order, store = inbox)]
//! async fn charge(inbox: &SqliteStore, order: u64) -> Result<u64, PayError> {
//!     Ok(order * 100)
//! }
//!
//! #[retryable(max = 2, base = "1ms", dlq(sink = letters, id = order.to_string(), original = order))]
//! async fn refund(letters: &SqliteDeadLetters, order: u64) -> Result<(), PayError> {
//!     Err(PayError::Declined)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("retry-sqlite-doc-{}.sqlite3", std::process::id()));
//! let inbox = SqliteStore::open(&path)?;
//! let letters = SqliteDeadLetters::open(&path)?; // the same file
//!
//! assert_eq!(charge(&inbox, 7).await.unwrap(), 700);
//! assert_eq!(charge(&inbox, 7).await.unwrap(), 700); // the stored answer: the body ran once
//!
//! assert!(matches!(refund(&letters, 7).await, Err(PayError::Declined)));
//! use retry_core::dlq::DeadLetterStore;
//! assert_eq!(letters.stats().await?.pending, 1); // parked before the error returned
//! # drop((inbox, letters));
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let mut file = path.clone().into_os_string();
//! #     file.push(suffix);
//! #     let _ = std::fs::remove_file(file);
//! # }
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

mod dead_letters;
mod queue;
mod sql;
mod store;
pub mod transactional;

pub use dead_letters::SqliteDeadLetters;
pub use store::{SqliteStore, SqliteTransaction};
