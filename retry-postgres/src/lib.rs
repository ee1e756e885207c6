//! PostgreSQL for [retry-core](retry_core): the shared engine, one database that many service
//! instances use at once.
//!
//! - [`PgStore`]: the idempotency log (`inbox_log`) behind `#[idempotent(store = ..)]` and
//!   `IdempotencyLayer`, an [`IdempotencyStore`](retry_core::idempotency::IdempotencyStore) and a
//!   [`TransactionalStore`](retry_core::idempotency::TransactionalStore) whose [`PgTransaction`]
//!   commits the handler's own statements with the stored response.
//! - [`PgDeadLetters`]: the dead-letter tables (`dead_letters`, with the redrive audit), a
//!   [`DeadLetterSink`](retry_core::dlq::DeadLetterSink) and a
//!   [`DeadLetterStore`](retry_core::dlq::DeadLetterStore) that `retry-dlq` and
//!   [`Redrive`](retry_core::dlq::Redrive) read.
//!
//! Both connect with a `postgres://` URL or a `key=value` string, pooled with deadpool-postgres,
//! and create their tables if they are missing. Over TLS when the connection string asks for it
//! (`sslmode=require`, `verify-ca`, `verify-full`, `sslrootcert`, read as libpq reads them) with
//! feature `tls`; without it, such a string fails to connect rather than going in the clear.
//! The crate implements retry-core's public traits from outside, as any third-party store would,
//! and passes retry-core's conformance suites.
//!
//! ```no_run
//! use retry_core::idempotency::IdempotencyError;
//! use retry_core::idempotent;
//! use retry_postgres::{PgDeadLetters, PgStore};
//!
//! #[idempotent(key = order, store = inbox)]
//! async fn charge(inbox: &PgStore, order: u64) -> Result<u64, IdempotencyError> {
//!     Ok(order * 100)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let url = std::env::var("DATABASE_URL")?; // postgres://user@host/db?sslmode=verify-full
//! let inbox = PgStore::connect(&url).await?;
//! let letters = PgDeadLetters::connect(&url).await?; // the same database
//!
//! assert_eq!(charge(&inbox, 7).await?, 700);
//! assert_eq!(charge(&inbox, 7).await?, 700); // the stored answer: the body ran once
//! # drop(letters);
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

mod dead_letters;
mod sql;
mod store;
mod tls;

/// A failure of the PostgreSQL plumbing (`sql`, `tls`), for the store to wrap into its own error
/// type.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub use dead_letters::PgDeadLetters;
pub use store::{PgStore, PgTransaction};
