//! A delivery as the handler sees it: the body, the properties and where it came from.

use std::sync::Arc;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

/// One delivery from the queue, cheap to clone (the body and properties are shared).
///
/// ```
/// use retry_amqp::Message;
///
/// let message = Message::new(b"{\"order\":7}".to_vec())
///     .with_message_id("order-7")
///     .with_route("orders", "orders.created");
/// assert_eq!(message.message_id(), Some("order-7"));
/// assert_eq!(message.body(), b"{\"order\":7}");
/// assert_eq!((message.exchange(), message.routing_key()), ("orders", "orders.created"));
/// assert!(!message.redelivered());
/// ```
#[derive(Clone, Debug)]
pub struct Message {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    body: Vec<u8>,
    properties: BasicProperties,
    exchange: String,
    routing_key: String,
    redelivered: bool,
}

impl Message {
    /// A message with `body` and no properties: for tests of handlers, and for publishing.
    pub fn new(body: Vec<u8>) -> Self {
        Message {
            inner: Arc::new(Inner {
                body,
                properties: BasicProperties::default(),
                exchange: String::new(),
                routing_key: String::new(),
                redelivered: false,
            }),
        }
    }

    /// The same message with the `message_id` property `id`.
    #[must_use]
    pub fn with_message_id(self, id: &str) -> Self {
        self.map(|inner| inner.properties = inner.properties.clone().with_message_id(id.into()))
    }

    /// The same message as published to `exchange` with `routing_key`.
    #[must_use]
    pub fn with_route(self, exchange: &str, routing_key: &str) -> Self {
        self.map(|inner| {
            inner.exchange = exchange.to_owned();
            inner.routing_key = routing_key.to_owned();
        })
    }

    /// The same message with `properties`.
    #[must_use]
    pub fn with_properties(self, properties: BasicProperties) -> Self {
        self.map(|inner| inner.properties = properties)
    }

    fn map(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            body: shared.body.clone(),
            properties: shared.properties.clone(),
            exchange: shared.exchange.clone(),
            routing_key: shared.routing_key.clone(),
            redelivered: shared.redelivered,
        });
        f(&mut inner);
        Message {
            inner: Arc::new(inner),
        }
    }

    pub(crate) fn from_delivery(delivery: lapin::message::Delivery) -> Self {
        Message {
            inner: Arc::new(Inner {
                body: delivery.data,
                properties: delivery.properties,
                exchange: delivery.exchange.to_string(),
                routing_key: delivery.routing_key.to_string(),
                redelivered: delivery.redelivered,
            }),
        }
    }

    /// The body, byte for byte as published.
    pub fn body(&self) -> &[u8] {
        &self.inner.body
    }

    /// The `message_id` property: the default idempotency key.
    pub fn message_id(&self) -> Option<&str> {
        self.inner
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str())
    }

    /// All the AMQP properties (content type, headers, timestamp, ...).
    pub fn properties(&self) -> &BasicProperties {
        &self.inner.properties
    }

    /// The headers, if any.
    pub fn headers(&self) -> Option<&FieldTable> {
        self.inner.properties.headers().as_ref()
    }

    /// The header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&AMQPValue> {
        self.headers().and_then(|h| h.inner().get(name))
    }

    /// The exchange the message was published to (empty: the default exchange).
    pub fn exchange(&self) -> &str {
        &self.inner.exchange
    }

    /// The routing key it was published with.
    pub fn routing_key(&self) -> &str {
        &self.inner.routing_key
    }

    /// Whether the broker delivered it before (to this or another consumer) without an ack.
    pub fn redelivered(&self) -> bool {
        self.inner.redelivered
    }

    /// How often a quorum queue delivered it before (its `x-delivery-count` header; 0 on the
    /// first delivery and on classic queues).
    pub fn delivery_count(&self) -> u64 {
        self.header("x-delivery-count")
            .and_then(as_u64)
            .unwrap_or(0)
    }
}

/// An integer header value of any width, as `u64` (negative: `None`).
pub(crate) fn as_u64(value: &AMQPValue) -> Option<u64> {
    match value {
        AMQPValue::ShortShortUInt(v) => Some(u64::from(*v)),
        AMQPValue::ShortUInt(v) => Some(u64::from(*v)),
        AMQPValue::LongUInt(v) => Some(u64::from(*v)),
        AMQPValue::Timestamp(v) => Some(*v),
        AMQPValue::ShortShortInt(v) => u64::try_from(*v).ok(),
        AMQPValue::ShortInt(v) => u64::try_from(*v).ok(),
        AMQPValue::LongInt(v) => u64::try_from(*v).ok(),
        AMQPValue::LongLongInt(v) => u64::try_from(*v).ok(),
        _ => None,
    }
}

/// A string header value (long or short), as text.
pub(crate) fn as_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}
