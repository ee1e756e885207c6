//! A broker's dead-letter queue as an operator sees it: how many letters and how old
//! ([`BrokerDeadLetters::stats`]), what they say ([`BrokerDeadLetters::show`]), and putting
//! them back ([`BrokerDeadLetters::redrive`]) to the exchange and routing key they were first
//! published to, with the same message id, in small batches at a bounded rate, one audit row
//! per letter.
//!
//! A redrive is safe because the consumer behind the queue is idempotent: a letter whose
//! effect happened after all (a crash between parking and acking) is answered from its key,
//! and one that fails again is parked again.

use std::time::{Duration, SystemTime};

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use retry_core::dlq::{AuditEntry, DeadLetterStore, DlqError, RedriveRecord};

use crate::letter::BrokerLetter;
use crate::message::Message;

/// What a dead-letter queue holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Letters waiting (ready in the queue).
    pub count: u64,
    /// The oldest letter's `first_failed_at` (the queue's head), if any.
    pub oldest_first_failed_at: Option<SystemTime>,
    /// The oldest letter's `msg_id` (the queue's head), if any.
    pub oldest_msg_id: Option<String>,
}

/// How a redrive runs: how many letters, how fast, by whom, and whether it only says what it
/// would do.
#[derive(Debug, Clone)]
pub struct RedriveOptions {
    /// At most this many letters (default 10).
    pub limit: usize,
    /// At most this many sends per second (default 5).
    pub rate: u32,
    /// Who runs it, for the audit rows.
    pub who: String,
    /// Say which letters would be sent, send nothing.
    pub dry_run: bool,
}

impl Default for RedriveOptions {
    fn default() -> Self {
        RedriveOptions {
            limit: 10,
            rate: 5,
            who: "retry-dlq".to_owned(),
            dry_run: false,
        }
    }
}

/// What a redrive did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedriveSummary {
    /// The run's record (also written to the audit store, unless a dry run).
    pub record: RedriveRecord,
    /// The letters sent (or, in a dry run, that would be), in order.
    pub letters: Vec<BrokerLetter>,
}

/// Errors of the dead-letter queue's operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerDlqError {
    /// The broker failed or could not be reached.
    #[error("broker: {0}")]
    Broker(#[from] lapin::Error),
    /// The audit store failed: the run stopped before the next letter.
    #[error("audit store: {0}")]
    Audit(#[from] DlqError),
}

/// A dead-letter queue on a broker.
///
/// ```no_run
/// use retry_amqp::dlq::{BrokerDeadLetters, RedriveOptions};
/// use retry_core::dlq::MemoryDeadLetters;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let dlq = BrokerDeadLetters::connect("amqp://guest:guest@127.0.0.1:5672/%2f", "orders.dlq").await?;
/// let stats = dlq.stats().await?;
/// println!("{} letters, oldest {:?}", stats.count, stats.oldest_first_failed_at);
/// let audit = MemoryDeadLetters::new(); // any DeadLetterStore keeps the audit rows
/// let run = dlq.redrive(&RedriveOptions { limit: 50, ..RedriveOptions::default() }, &audit).await?;
/// println!("redriven: {}", run.record.succeeded);
/// # Ok(())
/// # }
/// ```
pub struct BrokerDeadLetters {
    connection: Connection,
    queue: String,
}

impl std::fmt::Debug for BrokerDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerDeadLetters")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl BrokerDeadLetters {
    /// The dead-letter queue `queue` on the broker at `uri`.
    pub async fn connect(uri: &str, queue: &str) -> Result<Self, BrokerDlqError> {
        let connection = Connection::connect(uri, ConnectionProperties::default()).await?;
        Ok(BrokerDeadLetters {
            connection,
            queue: queue.to_owned(),
        })
    }

    /// How many letters wait, and the oldest one's first failure (the head of the queue, read
    /// and given back).
    pub async fn stats(&self) -> Result<QueueStats, BrokerDlqError> {
        let channel = self.connection.create_channel().await?;
        let count = u64::from(
            channel
                .queue_declare(
                    self.queue.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?
                .message_count(),
        );
        let head = self.peek_on(&channel, 1).await?;
        let _ = channel.close(200, "done".into()).await;
        let head = head.into_iter().next();
        Ok(QueueStats {
            count,
            oldest_first_failed_at: head.as_ref().map(|l| l.letter.first_failed_at),
            oldest_msg_id: head.map(|l| l.letter.msg_id),
        })
    }

    /// The first `limit` letters, read and given back to the queue (nothing is removed).
    pub async fn show(&self, limit: usize) -> Result<Vec<BrokerLetter>, BrokerDlqError> {
        let channel = self.connection.create_channel().await?;
        let letters = self.peek_on(&channel, limit).await?;
        // Closing the channel gives back every letter it took, unacked.
        let _ = channel.close(200, "done".into()).await;
        Ok(letters)
    }

    async fn peek_on(
        &self,
        channel: &Channel,
        limit: usize,
    ) -> Result<Vec<BrokerLetter>, BrokerDlqError> {
        let mut letters = Vec::new();
        let mut last = None;
        while letters.len() < limit {
            let Some(got) = channel
                .basic_get(self.queue.as_str().into(), BasicGetOptions::default())
                .await?
            else {
                break;
            };
            last = Some(got.delivery.acker.clone());
            letters.push(BrokerLetter::read(&to_message(got.delivery)));
        }
        // Every letter taken goes back, in one nack (the channel's close would do it too).
        if let Some(last) = last {
            last.nack(BasicNackOptions {
                multiple: true,
                requeue: true,
            })
            .await?;
        }
        Ok(letters)
    }

    /// Puts up to `options.limit` letters back, oldest first, at most `options.rate` per second:
    /// each one's original (body byte for byte, properties and message id kept, the
    /// `x-retry-*` headers removed) is published to the exchange and routing key it was first
    /// published to, with publisher confirms; only once the broker confirmed it is the letter
    /// removed from the dead-letter queue. Every letter gets an audit row in `audit` before it
    /// is sent and again with its outcome after; the run's record is written at the end. A
    /// dry run reads the letters it would send and gives them back.
    pub async fn redrive<A: DeadLetterStore>(
        &self,
        options: &RedriveOptions,
        audit: &A,
    ) -> Result<RedriveSummary, BrokerDlqError> {
        let started_at = SystemTime::now();
        let mut record = RedriveRecord {
            run_id: format!("{:016x}", rand_id()),
            who: options.who.clone(),
            filter: format!("amqp:{}", self.queue),
            target: "the original exchange and routing key".to_owned(),
            started_at,
            finished_at: started_at,
            limit: options.limit as u64,
            rate_per_second: options.rate,
            selected: 0,
            succeeded: 0,
            failed: 0,
            skipped: 0,
            stopped: None,
        };
        if options.dry_run {
            let letters = self.show(options.limit).await?;
            record.selected = letters.len() as u64;
            record.finished_at = SystemTime::now();
            return Ok(RedriveSummary { record, letters });
        }
        let channel = self.connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let pause = Duration::from_secs(1) / options.rate.max(1);
        let mut letters = Vec::new();
        while letters.len() < options.limit {
            let Some(got) = channel
                .basic_get(self.queue.as_str().into(), BasicGetOptions::default())
                .await?
            else {
                break;
            };
            let acker = got.delivery.acker.clone();
            let read = BrokerLetter::read(&to_message(got.delivery));
            record.selected += 1;
            let target = format!("amqp:{}/{}", read.exchange, read.routing_key);
            let intent = AuditEntry::intent(
                &record.run_id,
                &read.letter.msg_id,
                &options.who,
                &target,
                SystemTime::now(),
            );
            if let Err(e) = audit.audit(&intent).await {
                // Not sent: the letter goes back, and the run stops.
                let _ = acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..BasicNackOptions::default()
                    })
                    .await;
                return Err(e.into());
            }
            let sent = publish(&channel, &read).await;
            let outcome = match &sent {
                Ok(()) => {
                    acker.ack(BasicAckOptions::default()).await?;
                    record.succeeded += 1;
                    "redriven".to_owned()
                }
                Err(why) => {
                    let _ = acker
                        .nack(BasicNackOptions {
                            requeue: true,
                            ..BasicNackOptions::default()
                        })
                        .await;
                    record.failed += 1;
                    format!("failed: {why}")
                }
            };
            tracing::info!(target: "retry_amqp::dlq", run_id = %record.run_id, msg_id = %read.letter.msg_id, %target, outcome, "redrive");
            audit
                .audit(&intent.finished(outcome, SystemTime::now()))
                .await?;
            letters.push(read);
            if sent.is_err() {
                record.stopped = Some("a letter could not be sent".to_owned());
                break;
            }
            tokio::time::sleep(pause).await;
        }
        let _ = channel.close(200, "done".into()).await;
        record.finished_at = SystemTime::now();
        audit.record_redrive(&record).await?;
        Ok(RedriveSummary { record, letters })
    }
}

/// Publishes a letter's original where it was first published, and waits for the broker.
async fn publish(channel: &Channel, letter: &BrokerLetter) -> Result<(), String> {
    let confirm = channel
        .basic_publish(
            letter.exchange.as_str().into(),
            letter.routing_key.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            letter.original.body(),
            letter.original.properties().clone(),
        )
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    if !confirm.is_ack() {
        return Err("the broker refused it (nack)".to_owned());
    }
    if let Some(returned) = confirm.take_message() {
        return Err(format!(
            "no queue takes it: {} {}",
            returned.reply_code, returned.reply_text
        ));
    }
    Ok(())
}

fn to_message(delivery: lapin::message::Delivery) -> Message {
    Message::from_delivery(delivery)
}

/// A run id nobody else picks: the time and the process, mixed.
fn rand_id() -> u64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let mut x = now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32);
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
