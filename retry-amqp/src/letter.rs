//! Dead letters on the broker: a letter is the original message, body byte for byte and its
//! headers kept (the broker's `x-death` included), with the letter's fields added as headers
//! and as one JSON envelope, published to the queue's dead-letter exchange with publisher
//! confirms.

use std::time::SystemTime;

use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel};
use retry_core::dlq::{DeadLetter, DeadLetterSink, DlqError, FailureClass};

use crate::message::{Message, as_text, as_u64};

/// The headers a letter carries, beside the original's own.
pub mod headers {
    /// The letter's `msg_id`: the message's idempotency key as the consumer read it.
    pub const MSG_ID: &str = "x-retry-msg-id";
    /// Why the consumer gave up, in words.
    pub const REASON: &str = "x-retry-reason";
    /// The attempts made (an integer).
    pub const ATTEMPTS: &str = "x-retry-attempts";
    /// When the first attempt failed (RFC 3339).
    pub const FIRST_FAILED_AT: &str = "x-retry-first-failed-at";
    /// When the last attempt failed (RFC 3339).
    pub const LAST_FAILED_AT: &str = "x-retry-last-failed-at";
    /// The trace id of the consumer's call.
    pub const TRACE_ID: &str = "x-retry-trace-id";
    /// `system` (transient failures until the attempts ran out) or `data` (not retryable).
    pub const CLASS: &str = "x-retry-class";
    /// The exchange the original was published to: where a redrive sends it.
    pub const EXCHANGE: &str = "x-retry-exchange";
    /// The routing key the original was published with.
    pub const ROUTING_KEY: &str = "x-retry-routing-key";
    /// The whole letter as JSON (`retry_core::dlq::DeadLetter`, its `original` left out:
    /// the body is the original).
    pub const LETTER: &str = "x-retry-letter";
    /// The prefix of every header above: a redrive removes them before it sends the message
    /// back.
    pub const PREFIX: &str = "x-retry-";
}

/// Where a consumer's letters go: the dead-letter exchange and the routing key.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) exchange: String,
    pub(crate) routing_key: String,
}

/// The sink of one delivery's letter: publishes it to `route` on `channel` (in confirm mode)
/// and returns once the broker confirmed it.
pub(crate) struct DeliverySink<'a> {
    pub(crate) channel: &'a Channel,
    pub(crate) route: &'a Route,
    pub(crate) message: &'a Message,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) source: &'a str,
}

impl DeadLetterSink for DeliverySink<'_> {
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        let mut letter = letter.clone();
        letter.source = Some(self.source.to_owned());
        letter.idempotency_key = self.idempotency_key.map(str::to_owned);
        let properties = letter_properties(self.message, &letter)?;
        let confirm = self
            .channel
            .basic_publish(
                self.route.exchange.as_str().into(),
                self.route.routing_key.as_str().into(),
                // Mandatory: a letter no queue takes comes back, and is not "parked".
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                self.message.body(),
                properties,
            )
            .await
            .map_err(io)?
            .await
            .map_err(io)?;
        if !confirm.is_ack() {
            return Err(io(format!(
                "the broker refused the letter (nack) on exchange `{}`",
                self.route.exchange
            )));
        }
        if let Some(returned) = confirm.take_message() {
            return Err(io(format!(
                "no queue is bound to exchange `{}` with routing key `{}`: the letter came back ({} {})",
                self.route.exchange,
                self.route.routing_key,
                returned.reply_code,
                returned.reply_text
            )));
        }
        Ok(())
    }
}

fn io(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> DlqError {
    DlqError::Io(e.into())
}

/// The original's properties with the letter's headers added (persistent, whatever the
/// original was).
fn letter_properties(message: &Message, letter: &DeadLetter) -> Result<BasicProperties, DlqError> {
    let mut table = message.headers().cloned().unwrap_or_default();
    let text = |s: &str| AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()));
    let mut put = |name: &str, value: AMQPValue| {
        table.insert(ShortString::from(name), value);
    };
    put(headers::MSG_ID, text(&letter.msg_id));
    put(headers::REASON, text(&letter.reason));
    put(
        headers::ATTEMPTS,
        AMQPValue::LongLongInt(i64::from(letter.attempts)),
    );
    put(
        headers::FIRST_FAILED_AT,
        text(&retry_core::time::format_rfc3339(letter.first_failed_at)),
    );
    put(
        headers::LAST_FAILED_AT,
        text(&retry_core::time::format_rfc3339(letter.last_failed_at)),
    );
    put(headers::TRACE_ID, text(&letter.trace_id));
    put(headers::CLASS, text(letter.class.as_str()));
    put(headers::EXCHANGE, text(message.exchange()));
    put(headers::ROUTING_KEY, text(message.routing_key()));
    let mut envelope = letter.clone();
    envelope.original = serde_json::Value::Null;
    let json = serde_json::to_string(&envelope).map_err(|e| DlqError::Serialize(e.to_string()))?;
    put(headers::LETTER, text(&json));
    Ok(message
        .properties()
        .clone()
        .with_headers(table)
        .with_delivery_mode(2))
}

/// A letter read back from the dead-letter queue: the letter, where its original was
/// published, and the original message.
#[derive(Debug, Clone)]
pub struct BrokerLetter {
    /// The letter: from the consumer's headers, or, for a message the broker dead-lettered
    /// itself (a delivery limit, a reject, an expiry), from its `x-death` header. `original` is
    /// the body as JSON when it is JSON, else as a string (lossy UTF-8).
    pub letter: DeadLetter,
    /// The exchange to redrive to.
    pub exchange: String,
    /// The routing key to redrive with.
    pub routing_key: String,
    /// The original message: its body byte for byte, and its properties without the
    /// letter's `x-retry-*` headers (the broker's `x-death` kept).
    pub original: Message,
}

impl BrokerLetter {
    /// Reads the letter `message` carries (a message taken from a dead-letter queue).
    ///
    /// ```
    /// use lapin::types::{AMQPValue, FieldTable};
    /// use retry_amqp::{BrokerLetter, Message};
    ///
    /// // A message the broker dead-lettered itself, after its delivery limit.
    /// let mut death = FieldTable::default();
    /// death.insert("reason".into(), AMQPValue::LongString("delivery_limit".into()));
    /// death.insert("exchange".into(), AMQPValue::LongString("orders".into()));
    /// death.insert("count".into(), AMQPValue::LongLongInt(1));
    /// let routing_keys = vec![AMQPValue::LongString("orders.created".into())];
    /// death.insert("routing-keys".into(), AMQPValue::FieldArray(routing_keys.into()));
    /// let mut headers = FieldTable::default();
    /// headers.insert("x-death".into(), AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()));
    /// let properties = lapin::BasicProperties::default().with_headers(headers).with_message_id("o-7".into());
    /// let message = Message::new(b"{\"order\":7}".to_vec()).with_properties(properties);
    ///
    /// let read = BrokerLetter::read(&message);
    /// assert_eq!(read.letter.msg_id, "o-7");
    /// assert_eq!(read.letter.reason, "dead-lettered by the broker: delivery_limit");
    /// assert_eq!((read.exchange.as_str(), read.routing_key.as_str()), ("orders", "orders.created"));
    /// assert_eq!(read.letter.original, serde_json::json!({"order": 7}));
    /// ```
    pub fn read(message: &Message) -> BrokerLetter {
        let header = |name: &str| message.header(name).and_then(as_text);
        let original = body_json(message.body());
        let envelope =
            header(headers::LETTER).and_then(|json| serde_json::from_str::<DeadLetter>(&json).ok());
        let death = first_death(message);
        let (letter, exchange, routing_key) = match envelope {
            Some(mut letter) => {
                letter.original = original;
                let exchange = header(headers::EXCHANGE).unwrap_or_default();
                let routing_key = header(headers::ROUTING_KEY).unwrap_or_default();
                (letter, exchange, routing_key)
            }
            None => {
                let death = death.unwrap_or_default();
                let at = death.time.unwrap_or_else(SystemTime::now);
                let letter = DeadLetter {
                    msg_id: message.message_id().unwrap_or_default().to_owned(),
                    original,
                    reason: format!(
                        "dead-lettered by the broker: {}",
                        death.reason.as_deref().unwrap_or("unknown reason")
                    ),
                    attempts: u32::try_from(message.delivery_count().max(death.count))
                        .unwrap_or(u32::MAX),
                    first_failed_at: at,
                    last_failed_at: at,
                    trace_id: String::new(),
                    class: FailureClass::System,
                    error_type: String::new(),
                    idempotency_key: None,
                    source: death.queue.map(|q| format!("amqp:{q}")),
                    redacted: false,
                    key_scope: None,
                    key_expires_at: None,
                    history: Vec::new(),
                    resolved: None,
                };
                (
                    letter,
                    death.exchange.unwrap_or_default(),
                    death.routing_key.unwrap_or_default(),
                )
            }
        };
        let table: FieldTable = message
            .headers()
            .map(|h| {
                h.inner()
                    .iter()
                    .filter(|(k, _)| {
                        !k.as_str().starts_with(headers::PREFIX) && k.as_str() != "x-delivery-count"
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into()
            })
            .unwrap_or_default();
        let properties = message.properties().clone().with_headers(table);
        BrokerLetter {
            letter,
            original: Message::new(message.body().to_vec())
                .with_properties(properties)
                .with_route(&exchange, &routing_key),
            exchange,
            routing_key,
        }
    }
}

/// The body as JSON when it is JSON, else as a string.
pub(crate) fn body_json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// What the broker's first (most recent) `x-death` entry says.
#[derive(Debug, Default)]
struct Death {
    reason: Option<String>,
    queue: Option<String>,
    exchange: Option<String>,
    routing_key: Option<String>,
    count: u64,
    time: Option<SystemTime>,
}

fn first_death(message: &Message) -> Option<Death> {
    let AMQPValue::FieldArray(deaths) = message.header("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(entry) = deaths.as_slice().first()? else {
        return None;
    };
    let get = |name: &str| entry.inner().get(name);
    Some(Death {
        reason: get("reason").and_then(as_text),
        queue: get("queue").and_then(as_text),
        exchange: get("exchange").and_then(as_text),
        routing_key: match get("routing-keys") {
            Some(AMQPValue::FieldArray(keys)) => keys.as_slice().first().and_then(as_text),
            _ => None,
        },
        count: get("count").and_then(as_u64).unwrap_or(0),
        time: get("time")
            .and_then(as_u64)
            .map(|secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter() -> DeadLetter {
        let at = retry_core::time::parse_rfc3339("2026-08-19T02:00:00Z").unwrap();
        DeadLetter {
            msg_id: "o-1".into(),
            original: serde_json::json!({"order": 1}),
            reason: "gave up after 3 attempts: upstream 503".into(),
            attempts: 3,
            first_failed_at: at,
            last_failed_at: at,
            trace_id: "abc".into(),
            class: FailureClass::System,
            error_type: "E".into(),
            idempotency_key: Some("k".into()),
            source: Some("amqp:orders".into()),
            redacted: false,
            key_scope: None,
            key_expires_at: None,
            history: Vec::new(),
            resolved: None,
        }
    }

    #[test]
    fn a_letter_reads_back_with_its_body_its_route_and_the_original_headers() {
        let mut death = FieldTable::default();
        death.insert("reason".into(), AMQPValue::LongString("rejected".into()));
        let mut original_headers = FieldTable::default();
        original_headers.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()),
        );
        original_headers.insert("tenant".into(), AMQPValue::LongString("acme".into()));
        let body = b"\x00not json\xff".to_vec();
        let message = Message::new(body.clone())
            .with_properties(
                BasicProperties::default()
                    .with_headers(original_headers.clone())
                    .with_message_id("o-1".into()),
            )
            .with_route("orders", "orders.created");
        let properties = letter_properties(&message, &letter()).unwrap();
        let parked = Message::new(body.clone()).with_properties(properties);
        let read = BrokerLetter::read(&parked);
        let mut expected = letter();
        expected.original = body_json(&body);
        assert_eq!(read.letter, expected);
        assert_eq!(
            (read.exchange.as_str(), read.routing_key.as_str()),
            ("orders", "orders.created")
        );
        assert_eq!(read.original.body(), body.as_slice());
        assert_eq!(
            read.original.headers(),
            Some(&original_headers),
            "x-death kept, x-retry-* gone"
        );
        assert_eq!(read.original.message_id(), Some("o-1"));
    }
}
