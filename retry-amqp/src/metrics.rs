//! Metrics through the `metrics` facade, by queue. Names are stable: dashboards and alerts
//! depend on them.
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `retry_amqp_deliveries_total` | counter | `queue`, `outcome` | deliveries finished: `handled` (the handler's effect happened now), `replayed` (a redelivery of a message already handled, acked with no second effect), `dead_lettered` (a letter confirmed by the broker, then acked), `requeued` (given back to the broker: the key busy elsewhere, or the letter not confirmed), `rejected` (the handler panicked: rejected to the queue's own dead-letter exchange) |
//! | `retry_amqp_retries_total` | counter | `queue` | waits before another attempt of a handler |
//! | `retry_amqp_letters_total` | counter | `queue`, `class` | dead letters published and confirmed (`system`, `data`) |
//! | `retry_amqp_reconnects_total` | counter | `queue` | connections made again after the broker went away |
//!
//! The retries are also counted by retry-core (`retry_core_retries_total`, `function` =
//! `retry_amqp::consume`), and the idempotent flow's own counters
//! (`retry_core_idempotency_*`) carry the queue as their `function` label.

/// Metric names, for dashboards and tests.
pub mod names {
    /// Deliveries finished, by `outcome`.
    pub const DELIVERIES: &str = "retry_amqp_deliveries_total";
    /// Waits before another attempt of a handler.
    pub const RETRIES: &str = "retry_amqp_retries_total";
    /// Dead letters published and confirmed, by `class`.
    pub const LETTERS: &str = "retry_amqp_letters_total";
    /// Connections made again after the broker went away.
    pub const RECONNECTS: &str = "retry_amqp_reconnects_total";
}

/// The counters of one consumer, registered once.
#[derive(Clone)]
pub(crate) struct Counters {
    pub(crate) handled: metrics::Counter,
    pub(crate) replayed: metrics::Counter,
    pub(crate) dead_lettered: metrics::Counter,
    pub(crate) requeued: metrics::Counter,
    pub(crate) rejected: metrics::Counter,
    pub(crate) retries: metrics::Counter,
    pub(crate) reconnects: metrics::Counter,
    queue: String,
}

impl Counters {
    pub(crate) fn new(queue: &str) -> Self {
        let outcome = |outcome: &'static str| metrics::counter!(names::DELIVERIES, "queue" => queue.to_owned(), "outcome" => outcome);
        Counters {
            handled: outcome("handled"),
            replayed: outcome("replayed"),
            dead_lettered: outcome("dead_lettered"),
            requeued: outcome("requeued"),
            rejected: outcome("rejected"),
            retries: metrics::counter!(names::RETRIES, "queue" => queue.to_owned()),
            reconnects: metrics::counter!(names::RECONNECTS, "queue" => queue.to_owned()),
            queue: queue.to_owned(),
        }
    }

    pub(crate) fn letter(&self, class: retry_core::dlq::FailureClass) {
        metrics::counter!(names::LETTERS, "queue" => self.queue.clone(), "class" => class.as_str())
            .increment(1);
    }
}
