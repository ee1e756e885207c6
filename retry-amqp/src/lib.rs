//! RabbitMQ consumers (on [lapin]) that run each message's effect once and park what gives
//! up in the broker's dead-letter queue, as retry-core does everywhere else.
//!
//! For every delivery a [`Consumer`]:
//!
//! 1. reads its idempotency key (the `message_id`, or [`Consumer::key`]) and claims it in an
//!    [`IdempotencyStore`](retry_core::idempotency::IdempotencyStore) (SQLite, PostgreSQL for
//!    many consumers on one broker, or your own). A key already done means a redelivery of a
//!    message already handled: it is acked, and the handler does not run again.
//! 2. runs the handler, retrying transient failures in-process under a
//!    [`Policy`](retry_core::Policy) (bounded attempts, capped jittered backoff, a deadline),
//!    classified by the error's [`Classify`](retry_core::Classify) as every retry of
//!    retry-core is. A handler that uses `#[retryable]` or `Policy::retry` inside runs those as
//!    single attempts: the consumer is the one retry layer.
//! 3. on success stores `done` (in transactional mode together with the handler's writes: one
//!    commit) and acks.
//! 4. on give-up (attempts spent, the deadline, or a `Stop`) publishes a letter to the queue's
//!    dead-letter exchange: the original body byte for byte, its headers kept (the broker's
//!    `x-death` among them), and the seed's fields (`msg_id`, `reason`, `attempts`,
//!    `first_failed_at`, `last_failed_at`, `trace_id`, class) as `x-retry-*` headers and as a
//!    JSON envelope ([`headers`]). The delivery is acked only once the broker confirmed the
//!    letter (publisher confirms, `mandatory`); a crash in between redelivers it, and its key
//!    makes that harmless.
//!
//! A handler that kills the process is redelivered to the next one; a quorum queue's
//! `x-delivery-limit` ([`Topology`] declares it) makes the broker dead-letter it after a few
//! such deliveries, into the same dead-letter queue. The consumer reconnects by itself when
//! the broker goes away, and a [`shutdown`](Consumer::shutdown) signal lets the deliveries in
//! flight finish before it returns. [`BrokerLetter::read`] reads a letter back (the `retry-dlq`
//! command uses it for `stats`, `show` and `redrive` on a broker's dead-letter queue).
//!
//! ```no_run
//! use retry_amqp::{Consumer, Message, Topology};
//! use retry_core::{Classify, Decision, Policy};
//! use retry_postgres::PgStore;
//! use std::time::Duration;
//!
//! #[derive(Debug)]
//! enum ShipError { WarehouseDown, UnknownItem }
//!
//! impl Classify for ShipError {
//!     fn classify(&self) -> Decision {
//!         match self {
//!             ShipError::WarehouseDown => Decision::Retry,
//!             ShipError::UnknownItem => Decision::Stop,
//!         }
//!     }
//! }
//!
//! async fn ship(order: Message) -> Result<(), ShipError> {
//!     // ... call the warehouse with `order.body()` ...
//!     Ok(())
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let keys = PgStore::connect("postgres://app@db/shop").await?;
//! Consumer::new("amqp://guest:guest@127.0.0.1:5672/%2f", "orders")
//!     .declare(Topology::new("orders").delivery_limit(5))
//!     .prefetch(32)
//!     .concurrency(16)
//!     .policy(Policy::new().max_attempts(4).base(Duration::from_millis(500)))
//!     .store(keys)
//!     .shutdown(async { let _ = tokio::signal::ctrl_c().await; })
//!     .run(ship)
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! Metrics (by queue) are listed in [`metrics`]; events are under the `retry_amqp` target, each
//! delivery in a `delivery` span.
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]
#![forbid(unsafe_code)]

mod consumer;
pub mod dlq;
mod handle;
mod letter;
mod message;
pub mod metrics;
mod topology;

pub use consumer::{Consumer, ConsumerError, DEFAULT_POLICY};
pub use handle::{BoxFuture, DeliveryError, RETRY_NAME};
pub use letter::{BrokerLetter, headers};
pub use message::Message;
pub use topology::{DEFAULT_DELIVERY_LIMIT, Topology};

/// The AMQP client this crate speaks through, for its types (`Channel`, `BasicProperties`,
/// `types::FieldTable`).
pub use lapin;
