//! Declaring a consumer's queue with its dead-letter exchange and dead-letter queue.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, ExchangeKind};

/// Delivery limit of [`Topology::new`]: a message delivered this often without an ack (its
/// handler crashed the process each time) is dead-lettered by the broker.
pub const DEFAULT_DELIVERY_LIMIT: u32 = 20;

/// A work queue with a dead-letter exchange and a dead-letter queue, declared with sane
/// arguments:
///
/// - the queue is a durable quorum queue (`x-queue-type = quorum`) with `x-delivery-limit`:
///   a message whose handler kills the process is redelivered, and after the limit the broker
///   dead-letters it instead of feeding it to the next process (the backstop for what the
///   consumer cannot catch);
/// - `x-dead-letter-exchange` and `x-dead-letter-routing-key` send what the broker
///   dead-letters (the delivery limit, a reject) to the same dead-letter queue as the
///   consumer's own letters, with `x-dead-letter-strategy = at-least-once` (and
///   `x-overflow = reject-publish`, which that strategy needs) so the broker does not drop
///   them on the way;
/// - the dead-letter exchange is a durable direct exchange, `<queue>.dlx`, and the dead-letter
///   queue a durable quorum queue, `<queue>.dlq`, bound to it with the queue's name.
///
/// ```no_run
/// use retry_amqp::Topology;
///
/// # async fn declare(channel: &lapin::Channel) -> Result<(), lapin::Error> {
/// let orders = Topology::new("orders").delivery_limit(5);
/// orders.declare(channel).await?;
/// assert_eq!(orders.dead_letter_queue(), "orders.dlq");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    queue: String,
    exchange: String,
    dlq: String,
    delivery_limit: u32,
}

impl Topology {
    /// The queue `queue`, its dead-letter exchange `<queue>.dlx` and dead-letter queue
    /// `<queue>.dlq`, with a delivery limit of [`DEFAULT_DELIVERY_LIMIT`].
    ///
    /// ```
    /// let t = retry_amqp::Topology::new("orders");
    /// assert_eq!((t.queue(), t.dead_letter_exchange(), t.dead_letter_queue()), ("orders", "orders.dlx", "orders.dlq"));
    /// ```
    pub fn new(queue: impl Into<String>) -> Self {
        let queue = queue.into();
        Topology {
            exchange: format!("{queue}.dlx"),
            dlq: format!("{queue}.dlq"),
            queue,
            delivery_limit: DEFAULT_DELIVERY_LIMIT,
        }
    }

    /// Deliveries without an ack before the broker dead-letters a message (at least 1).
    #[must_use]
    pub fn delivery_limit(mut self, limit: u32) -> Self {
        self.delivery_limit = limit.max(1);
        self
    }

    /// Another name for the dead-letter exchange.
    #[must_use]
    pub fn dead_letter_exchange_named(mut self, name: impl Into<String>) -> Self {
        self.exchange = name.into();
        self
    }

    /// Another name for the dead-letter queue.
    #[must_use]
    pub fn dead_letter_queue_named(mut self, name: impl Into<String>) -> Self {
        self.dlq = name.into();
        self
    }

    /// The work queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The dead-letter exchange.
    pub fn dead_letter_exchange(&self) -> &str {
        &self.exchange
    }

    /// The routing key letters are published with: the queue's name.
    pub fn dead_letter_routing_key(&self) -> &str {
        &self.queue
    }

    /// The dead-letter queue.
    pub fn dead_letter_queue(&self) -> &str {
        &self.dlq
    }

    /// The queue's arguments, as [`declare`](Self::declare) passes them.
    ///
    /// ```
    /// let args = retry_amqp::Topology::new("orders").delivery_limit(5).queue_arguments();
    /// assert!(args.inner().contains_key("x-delivery-limit"));
    /// assert!(args.inner().contains_key("x-dead-letter-exchange"));
    /// ```
    pub fn queue_arguments(&self) -> FieldTable {
        let text = |s: &str| AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()));
        let mut args = FieldTable::default();
        args.insert("x-queue-type".into(), text("quorum"));
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(i64::from(self.delivery_limit)),
        );
        args.insert("x-dead-letter-exchange".into(), text(&self.exchange));
        args.insert("x-dead-letter-routing-key".into(), text(&self.queue));
        args.insert("x-dead-letter-strategy".into(), text("at-least-once"));
        args.insert("x-overflow".into(), text("reject-publish"));
        args
    }

    /// Declares the dead-letter exchange, the dead-letter queue, its binding and the queue, on
    /// `channel`. Idempotent: declaring the same topology again changes nothing (declaring a
    /// queue that exists with other arguments fails: the broker's `PRECONDITION_FAILED`).
    pub async fn declare(&self, channel: &Channel) -> Result<(), lapin::Error> {
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        let mut dlq_args = FieldTable::default();
        dlq_args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        channel
            .queue_declare(self.dlq.as_str().into(), durable, dlq_args)
            .await?;
        channel
            .queue_bind(
                self.dlq.as_str().into(),
                self.exchange.as_str().into(),
                self.queue.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        channel
            .queue_declare(self.queue.as_str().into(), durable, self.queue_arguments())
            .await?;
        Ok(())
    }
}
