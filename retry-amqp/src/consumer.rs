//! The consumer: its settings, the connection kept up, deliveries run concurrently and settled
//! with the broker, and a graceful shutdown.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use retry_core::backoff::Backoff;
use retry_core::idempotency::{
    DEFAULT_LEASE, DEFAULT_RETENTION, IdempotencyStore, OnErr, TransactionalStore,
};
use retry_core::{Classify, Policy};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::handle::{
    BoxFuture, CatchUnwind, Ctx, Flow, KeyFn, Keys, Outcome, Plain, Transactional,
};
use crate::letter::Route;
use crate::message::Message;
use crate::metrics::Counters;
use crate::topology::Topology;

/// Waits between connection attempts: from 100 ms up to 10 s, jittered.
const RECONNECT: Policy = Policy::new()
    .base(Duration::from_millis(100))
    .cap(Duration::from_secs(10));

/// The consumer's retry policy unless [`Consumer::policy`] says otherwise: 5 attempts, 200 ms
/// to 10 s apart (full jitter), within a minute.
pub const DEFAULT_POLICY: Policy = Policy::new()
    .max_attempts(5)
    .base(Duration::from_millis(200))
    .cap(Duration::from_secs(10))
    .deadline(Duration::from_secs(60));

/// A RabbitMQ consumer that runs an idempotent handler per delivery. See the
/// [crate docs](crate) for what it does with each delivery.
///
/// ```no_run
/// use retry_amqp::{Consumer, Message, Topology};
/// use retry_core::{Classify, Decision};
/// use retry_sqlite::SqliteStore;
///
/// #[derive(Debug)]
/// enum OrderError { Unavailable, Invalid }
/// impl Classify for OrderError {
///     fn classify(&self) -> Decision {
///         match self { OrderError::Unavailable => Decision::Retry, OrderError::Invalid => Decision::Stop }
///     }
/// }
///
/// async fn place(message: Message) -> Result<(), OrderError> {
///     serde_json::from_slice::<serde_json::Value>(message.body()).map_err(|_| OrderError::Invalid)?;
///     Ok(())
/// }
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// Consumer::new("amqp://guest:guest@127.0.0.1:5672/%2f", "orders")
///     .declare(Topology::new("orders"))
///     .prefetch(16)
///     .concurrency(8)
///     .store(SqliteStore::open("inbox.sqlite3")?)
///     .shutdown(async { let _ = tokio::signal::ctrl_c().await; })
///     .run(place)
///     .await?;
/// # Ok(())
/// # }
/// ```
pub struct Consumer<S = ()> {
    uri: String,
    queue: String,
    prefetch: u16,
    concurrency: usize,
    policy: Policy,
    key: KeyFn,
    store: S,
    route: Route,
    namespace: Option<String>,
    lease: Duration,
    retention: Duration,
    topology: Option<Topology>,
    shutdown: Option<BoxFuture<'static, ()>>,
    requeue_pause: Duration,
}

impl<S> fmt::Debug for Consumer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.queue)
            .field("prefetch", &self.prefetch)
            .field("concurrency", &self.concurrency)
            .field("policy", &self.policy)
            .field("dead_letter_exchange", &self.route.exchange)
            .finish_non_exhaustive()
    }
}

/// Why [`Consumer::run`] returned without being shut down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The settings cannot work (a concurrency or prefetch of 0).
    #[error("invalid consumer settings: {0}")]
    Settings(String),
}

impl Consumer<()> {
    /// A consumer of `queue` on the broker at `uri` (`amqp://user:pass@host:port/vhost`), with
    /// prefetch 16, concurrency 8, [`DEFAULT_POLICY`], the `message_id` as the key, and letters
    /// published to `<queue>.dlx` with the queue's name as routing key (what [`Topology`]
    /// declares). Give it a [`store`](Self::store), then [`run`](Self::run) it.
    pub fn new(uri: impl Into<String>, queue: impl Into<String>) -> Self {
        let queue = queue.into();
        Consumer {
            uri: uri.into(),
            route: Route {
                exchange: format!("{queue}.dlx"),
                routing_key: queue.clone(),
            },
            queue,
            prefetch: 16,
            concurrency: 8,
            policy: DEFAULT_POLICY,
            key: Arc::new(|m: &Message| m.message_id().map(str::to_owned)),
            store: (),
            namespace: None,
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            topology: None,
            shutdown: None,
            requeue_pause: Duration::from_secs(1),
        }
    }
}

impl<S> Consumer<S> {
    /// Where the idempotency keys are kept: any [`IdempotencyStore`] (`retry_sqlite::SqliteStore`,
    /// `retry_postgres::PgStore` for many consumers on one broker, `MemoryStore` in tests), or
    /// an `Arc` of one.
    pub fn store<S2>(self, store: S2) -> Consumer<S2> {
        Consumer {
            uri: self.uri,
            queue: self.queue,
            prefetch: self.prefetch,
            concurrency: self.concurrency,
            policy: self.policy,
            key: self.key,
            store,
            route: self.route,
            namespace: self.namespace,
            lease: self.lease,
            retention: self.retention,
            topology: self.topology,
            shutdown: self.shutdown,
            requeue_pause: self.requeue_pause,
        }
    }

    /// Deliveries the broker sends ahead without an ack (`basic.qos`), at least 1.
    #[must_use]
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Handlers running at once, at least 1. More than the prefetch is never used.
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How a failing handler is retried in-process: bounded attempts, capped jittered backoff,
    /// a deadline, classified by the handler's error's [`Classify`] as every retry of
    /// retry-core is. A give-up (attempts spent, the deadline, or a `Stop`) is dead-lettered.
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The delivery's idempotency key, instead of its `message_id`. `None` means the message
    /// cannot be deduplicated: it is dead-lettered without running the handler.
    ///
    /// ```
    /// use retry_amqp::{Consumer, Message};
    ///
    /// let consumer = Consumer::new("amqp://127.0.0.1", "orders").key(|m: &Message| {
    ///     let order: serde_json::Value = serde_json::from_slice(m.body()).ok()?;
    ///     Some(order.get("order_id")?.to_string())
    /// });
    /// # drop(consumer);
    /// ```
    #[must_use]
    pub fn key(mut self, key: impl Fn(&Message) -> Option<String> + Send + Sync + 'static) -> Self {
        self.key = Arc::new(key);
        self
    }

    /// The namespace of the keys in the store (default: the queue's name): two consumers
    /// never answer for each other's keys unless they share it.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// How long a claim holds before another consumer may take over the key of a crashed one
    /// (renewed while the handler runs). Default 30 s.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long keys are kept: longer than any redelivery or redrive can come. Default 30 days.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Where letters are published: `exchange` with `routing_key`. [`declare`](Self::declare)
    /// sets both from its topology.
    #[must_use]
    pub fn dead_letters(
        mut self,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> Self {
        self.route = Route {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
        };
        self
    }

    /// Declares `topology` on every connection before consuming, and publishes letters to its
    /// dead-letter exchange. Its queue must be the consumer's.
    #[must_use]
    pub fn declare(mut self, topology: Topology) -> Self {
        self.route = Route {
            exchange: topology.dead_letter_exchange().to_owned(),
            routing_key: topology.dead_letter_routing_key().to_owned(),
        };
        self.topology = Some(topology);
        self
    }

    /// Stops the consumer when `signal` completes: no new delivery is taken, the ones in flight
    /// finish (and are acked), the connection is closed, and [`run`](Self::run) returns
    /// `Ok(())`. Deliveries the broker had sent ahead go back to the queue.
    #[must_use]
    pub fn shutdown(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// How long a delivery that cannot be finished now (its key held by another delivery, its
    /// letter not confirmed) waits before it is given back to the queue. Default 1 s.
    #[must_use]
    pub fn requeue_pause(mut self, pause: Duration) -> Self {
        self.requeue_pause = pause;
        self
    }

    fn keys(&self) -> Keys {
        Keys {
            queue: self.queue.clone(),
            namespace: self.namespace.clone().unwrap_or_else(|| self.queue.clone()),
            key: Arc::clone(&self.key),
            lease: self.lease,
            retention: self.retention,
            source: format!("amqp:{}", self.queue),
        }
    }
}

impl<S: IdempotencyStore + 'static> Consumer<S> {
    /// Runs `handler` once per message until shut down: a redelivery of a message whose
    /// handler succeeded is acked without running it again. The key is claimed once per
    /// delivery and the handler retried inside the claim; a handler that gives up leaves its
    /// key failed (`OnErr::Keep`: its effect is not known), so a redelivery or redrive of it
    /// is dead-lettered again rather than run twice. See [`run_with_on_err`](Self::run_with_on_err)
    /// to free the keys of failures that had no effect, and
    /// [`run_transactional`](Self::run_transactional) for handlers whose effect is in the
    /// store's database.
    pub async fn run<H, Fut, E>(self, handler: H) -> Result<(), ConsumerError>
    where
        H: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Classify + fmt::Debug + Send + Sync + 'static,
    {
        self.run_with_on_err(handler, |_| OnErr::Keep).await
    }

    /// [`run`](Self::run), with `on_err` deciding per error what a give-up leaves: `OnErr::Keep`
    /// (the effect may have happened: a redelivery is dead-lettered again, never run) or
    /// `OnErr::Release` (the error came before any effect: a redelivery or a redrive runs the
    /// handler again).
    pub async fn run_with_on_err<H, Fut, E>(
        self,
        handler: H,
        on_err: fn(&E) -> OnErr,
    ) -> Result<(), ConsumerError>
    where
        H: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Classify + fmt::Debug + Send + Sync + 'static,
    {
        let keys = self.keys();
        let (consumer, store) = swap_store(self);
        let flow = Plain {
            store: Arc::new(store),
            handler,
            keys,
            on_err,
        };
        consumer.run_flow(Arc::new(flow)).await
    }
}

fn swap_store<S>(consumer: Consumer<S>) -> (Consumer<()>, S) {
    let Consumer {
        uri,
        queue,
        prefetch,
        concurrency,
        policy,
        key,
        store,
        route,
        namespace,
        lease,
        retention,
        topology,
        shutdown,
        requeue_pause,
    } = consumer;
    (
        Consumer {
            uri,
            queue,
            prefetch,
            concurrency,
            policy,
            key,
            store: (),
            route,
            namespace,
            lease,
            retention,
            topology,
            shutdown,
            requeue_pause,
        },
        store,
    )
}

impl<S: TransactionalStore + 'static> Consumer<S> {
    /// Runs `handler` once per message in the store's transaction: the key's claim, the
    /// handler's writes through the transaction, and `done` commit together (one commit per
    /// message), or roll back together. A failed attempt rolls back, so its key is free: the
    /// next attempt, a redelivery after a crash, or a redrive of its letter runs it again,
    /// and never twice to completion.
    ///
    /// The handler borrows the message and the transaction, so it returns a boxed future:
    ///
    /// ```no_run
    /// use retry_amqp::{BoxFuture, Consumer, Message};
    /// use retry_core::idempotency::StoreError;
    /// use retry_core::{Classify, Decision};
    /// use retry_sqlite::{SqliteStore, SqliteTransaction};
    ///
    /// #[derive(Debug)]
    /// struct BookError(StoreError);
    /// impl Classify for BookError {
    ///     fn classify(&self) -> Decision { Decision::Retry } // a busy or unreachable database
    /// }
    ///
    /// fn book<'t>(message: &'t Message, tx: &'t mut SqliteTransaction) -> BoxFuture<'t, Result<(), BookError>> {
    ///     let body = message.body().to_vec();
    ///     Box::pin(async move {
    ///         tx.run(move |c| c.execute("INSERT INTO bookings (body) VALUES (?1)", [body]))
    ///             .await
    ///             .map_err(BookError)?;
    ///         Ok(())
    ///     })
    /// }
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// Consumer::new("amqp://guest:guest@127.0.0.1:5672/%2f", "bookings")
    ///     .store(SqliteStore::open("inbox.sqlite3")?)
    ///     .run_transactional(book)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_transactional<H, E>(self, handler: H) -> Result<(), ConsumerError>
    where
        H: for<'t> Fn(&'t Message, &'t mut S::Transaction) -> BoxFuture<'t, Result<(), E>>
            + Send
            + Sync
            + 'static,
        E: Classify + fmt::Debug + Send + Sync + 'static,
    {
        let keys = self.keys();
        let (consumer, store) = swap_store(self);
        let flow = Transactional {
            store: Arc::new(store),
            handler,
            keys,
        };
        consumer.run_flow(Arc::new(flow)).await
    }
}

/// One connection: a channel to consume on, one in confirm mode for letters.
struct Session {
    connection: Connection,
    consume: Channel,
    publish: Channel,
}

impl Consumer<()> {
    async fn run_flow(self, flow: Arc<dyn Flow>) -> Result<(), ConsumerError> {
        if self.prefetch == 0 || self.concurrency == 0 {
            return Err(ConsumerError::Settings(format!(
                "prefetch ({}) and concurrency ({}) must be at least 1",
                self.prefetch, self.concurrency
            )));
        }
        let counters = Counters::new(&self.queue);
        let mut shutdown = self
            .shutdown
            .unwrap_or_else(|| Box::pin(std::future::pending()));
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let mut tasks = JoinSet::new();
        let mut backoff = Backoff::new(&RECONNECT);
        let mut connected_before = false;
        let shared = Arc::new(Shared {
            route: self.route.clone(),
            policy: self.policy.clone(),
            counters: counters.clone(),
            requeue_pause: self.requeue_pause,
            queue: self.queue.clone(),
        });
        let settings = Connect {
            uri: &self.uri,
            queue: &self.queue,
            prefetch: self.prefetch,
            topology: self.topology.as_ref(),
        };
        loop {
            let opened = tokio::select! {
                () = &mut shutdown => break,
                opened = settings.open() => opened,
            };
            let (session, mut deliveries) = match opened {
                Ok(opened) => opened,
                Err(e) => {
                    let wait = backoff.next_delay();
                    tracing::warn!(target: "retry_amqp", queue = %self.queue, error = %e, ?wait, "cannot reach the broker; trying again");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(wait) => continue,
                    }
                }
            };
            backoff = Backoff::new(&RECONNECT);
            if connected_before {
                counters.reconnects.increment(1);
                tracing::info!(target: "retry_amqp", queue = %self.queue, "connected to the broker again");
            } else {
                tracing::info!(target: "retry_amqp", queue = %self.queue, prefetch = self.prefetch, concurrency = self.concurrency, "consuming");
            }
            connected_before = true;
            let session = Arc::new(session);
            let stopped = loop {
                while tasks.try_join_next().is_some() {}
                let permit = tokio::select! {
                    biased;
                    () = &mut shutdown => break true,
                    permit = Arc::clone(&permits).acquire_owned() => permit,
                };
                let Ok(permit) = permit else { break true };
                let next = tokio::select! {
                    biased;
                    () = &mut shutdown => break true,
                    next = futures_next(&mut deliveries) => next,
                };
                let delivery = match next {
                    Some(Ok(delivery)) => delivery,
                    Some(Err(e)) => {
                        tracing::warn!(target: "retry_amqp", queue = %self.queue, error = %e, "lost the broker; reconnecting (deliveries in flight finish; the broker redelivers what was not acked)");
                        break false;
                    }
                    None => {
                        tracing::warn!(target: "retry_amqp", queue = %self.queue, "the broker cancelled the consumer; reconnecting");
                        break false;
                    }
                };
                let acker = delivery.acker.clone();
                let message = Message::from_delivery(delivery);
                let (flow, shared, session) =
                    (Arc::clone(&flow), Arc::clone(&shared), Arc::clone(&session));
                tasks.spawn(async move {
                    let _permit = permit;
                    deliver(&*flow, &shared, &session.publish, &message, acker).await;
                });
            };
            if stopped {
                tracing::info!(target: "retry_amqp", queue = %self.queue, in_flight = tasks.len(), "shutting down: finishing the deliveries in flight");
                if let Err(e) = session
                    .consume
                    .basic_cancel(deliveries.tag(), BasicCancelOptions::default())
                    .await
                {
                    tracing::debug!(target: "retry_amqp", error = %e, "cancelling the consumer failed");
                }
                while tasks.join_next().await.is_some() {}
                let _ = session.connection.close(200, "shutting down".into()).await;
                return Ok(());
            }
            drop(deliveries);
            let wait = backoff.next_delay();
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        tracing::info!(target: "retry_amqp", queue = %self.queue, in_flight = tasks.len(), "shutting down: finishing the deliveries in flight");
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// What every delivery of a consumer shares.
struct Shared {
    route: Route,
    policy: Policy,
    counters: Counters,
    requeue_pause: Duration,
    queue: String,
}

struct Connect<'a> {
    uri: &'a str,
    queue: &'a str,
    prefetch: u16,
    topology: Option<&'a Topology>,
}

impl Connect<'_> {
    async fn open(&self) -> Result<(Session, lapin::Consumer), lapin::Error> {
        let connection = Connection::connect(self.uri, ConnectionProperties::default()).await?;
        let consume = connection.create_channel().await?;
        if let Some(topology) = self.topology {
            topology.declare(&consume).await?;
        }
        consume
            .basic_qos(self.prefetch, BasicQosOptions::default())
            .await?;
        let publish = connection.create_channel().await?;
        publish
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let deliveries = consume
            .basic_consume(
                self.queue.into(),
                format!("retry-amqp.{}.{}", self.queue, std::process::id()).into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok((
            Session {
                connection,
                consume,
                publish,
            },
            deliveries,
        ))
    }
}

/// The next delivery (lapin's consumer is a `Stream`).
async fn futures_next(
    deliveries: &mut lapin::Consumer,
) -> Option<Result<lapin::message::Delivery, lapin::Error>> {
    std::future::poll_fn(|cx| {
        futures_core::Stream::poll_next(std::pin::Pin::new(&mut *deliveries), cx)
    })
    .await
}

/// Runs one delivery and settles it with the broker.
async fn deliver(
    flow: &dyn Flow,
    shared: &Shared,
    publisher: &Channel,
    message: &Message,
    acker: lapin::Acker,
) {
    let ctx = Ctx {
        publisher,
        route: &shared.route,
        policy: &shared.policy,
        counters: &shared.counters,
    };
    let span = tracing::debug_span!(target: "retry_amqp", "delivery", queue = %shared.queue, message_id = message.message_id().unwrap_or_default(), redelivered = message.redelivered());
    let outcome =
        tracing::Instrument::instrument(CatchUnwind(flow.process(ctx, message)), span).await;
    let counters = &shared.counters;
    let settled = match outcome {
        Ok(Outcome::Handled) => {
            counters.handled.increment(1);
            acker.ack(BasicAckOptions::default()).await
        }
        Ok(Outcome::Replayed) => {
            counters.replayed.increment(1);
            tracing::debug!(target: "retry_amqp", queue = %shared.queue, message_id = message.message_id().unwrap_or_default(), "redelivery of a message already handled: acked, not run again");
            acker.ack(BasicAckOptions::default()).await
        }
        Ok(Outcome::DeadLettered(class)) => {
            counters.dead_lettered.increment(1);
            counters.letter(class);
            tracing::warn!(target: "retry_amqp", queue = %shared.queue, message_id = message.message_id().unwrap_or_default(), %class, exchange = %shared.route.exchange, "gave up: dead letter confirmed by the broker, delivery acked");
            acker.ack(BasicAckOptions::default()).await
        }
        Ok(Outcome::Requeue(why)) => {
            counters.requeued.increment(1);
            tracing::warn!(target: "retry_amqp", queue = %shared.queue, why, pause = ?shared.requeue_pause, "delivery given back to the queue");
            tokio::time::sleep(shared.requeue_pause).await;
            acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await
        }
        Err(panic) => {
            counters.rejected.increment(1);
            tracing::error!(target: "retry_amqp", queue = %shared.queue, message_id = message.message_id().unwrap_or_default(), panic, "the handler panicked: delivery rejected to the queue's dead-letter exchange (x-death reason `rejected`)");
            acker.reject(BasicRejectOptions { requeue: false }).await
        }
    };
    if let Err(e) = settled {
        tracing::debug!(target: "retry_amqp", queue = %shared.queue, error = %e, "could not settle the delivery with the broker (connection lost): it is redelivered, and its key answers the redelivery");
    }
}
