//! A broker's dead-letter queue (`--queue NAME`, retry-amqp's `BrokerDeadLetters`): `stats`
//! from the queue's count and its head, `list`, `show` and `export` from its letters read and
//! given back, `redrive` republishing each original where it was first published, with the run
//! and its audit rows in the SQLite file of `--audit-sqlite`, which `audit` reads. `ack` is
//! refused: the broker records no resolution.

use std::io::{self, Write};
use std::path::Path;
use std::time::SystemTime;

use retry_amqp::BrokerLetter;
use retry_amqp::dlq::{BrokerDeadLetters, BrokerDlqError, RedriveOptions};
use retry_core::dlq::{DeadLetterStore, DlqError, FailureClass};
use retry_sqlite::SqliteDeadLetters;

use crate::report::{self, Oldest, Reasons, Stats};
use crate::{Broker, Command, EXIT_FLAGGED, EXIT_OK, Failure, Format, existing_file, redrive};

const ACK: &str = "ack is not a command of a broker's dead-letter queue: the broker records no \
                   resolution. A letter leaves the queue once `redrive` republished it and the \
                   broker confirmed it; to drop letters for good, use the broker's own tools \
                   (rabbitmqctl purge_queue NAME, or the management UI)";

/// Runs `command` on the dead-letter queue of `broker`, writing results to `out`.
pub(crate) async fn run(
    broker: &Broker,
    command: &Command,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    match command {
        Command::Stats {
            check,
            max_age,
            top,
        } => {
            let dlq = connect(broker).await?;
            let queue = dlq.stats().await.map_err(failure)?;
            let mut counts = retry_core::dlq::Stats::default();
            counts.pending = queue.count;
            let now = SystemTime::now();
            let mut stats = Stats::new(&counts, None, now);
            if let (Some(msg_id), Some(at)) = (&queue.oldest_msg_id, queue.oldest_first_failed_at) {
                stats.oldest = Some(Oldest::at(msg_id, at, now));
            }
            let mut text = stats.render_pending();
            if let Some(top) = top {
                let letters = read_all(&dlq, queue.count).await?;
                let mut reasons = Reasons::default();
                let mut system = 0;
                for read in &letters {
                    system += u64::from(read.letter.class == FailureClass::System);
                    reasons.add(std::slice::from_ref(&read.letter));
                }
                let total = letters.len() as u64;
                stats.by_class = [
                    (FailureClass::System, system),
                    (FailureClass::Data, total - system),
                ];
                stats = stats.with_reasons(reasons);
                text.push_str(&stats.render_classes());
                text.push_str(&stats.render_reasons(*top));
            }
            crate::write_stats(text, &stats, *check, *max_age, out)
        }
        Command::List {
            class,
            source,
            limit,
            format,
        } => {
            let dlq = connect(broker).await?;
            let filtered = class.is_some() || source.is_some();
            let letters = match limit {
                Some(limit) if !filtered => dlq.show(*limit).await.map_err(failure)?,
                _ => read_all(&dlq, dlq.stats().await.map_err(failure)?.count).await?,
            };
            let class = class.map(FailureClass::from);
            let chosen = letters.iter().filter(|read| {
                class.is_none_or(|class| read.letter.class == class)
                    && source
                        .as_deref()
                        .is_none_or(|source| read.letter.source.as_deref() == Some(source))
            });
            format.header(out, "MSG_ID\tCLASS\tATTEMPTS\tFIRST_FAILED_AT\tREASON")?;
            for read in chosen.take(limit.unwrap_or(usize::MAX)) {
                format.line(out, || report::list_line(&read.letter), &read.letter)?;
            }
            Ok(EXIT_OK)
        }
        Command::Show { msg_id } => {
            let dlq = connect(broker).await?;
            let letters = read_all(&dlq, dlq.stats().await.map_err(failure)?.count).await?;
            let mut copies = letters.iter().filter(|read| &read.letter.msg_id == msg_id);
            let Some(read) = copies.next() else {
                eprintln!(
                    "retry-dlq: no letter with msg_id {} in {}",
                    report::one_line(msg_id),
                    report::one_line(&broker.queue)
                );
                return Ok(EXIT_FLAGGED);
            };
            writeln!(out, "{}", pretty(read)?)?;
            let more = copies.count();
            if more > 0 {
                out.flush()?;
                eprintln!(
                    "retry-dlq: {more} more letter(s) with this msg_id wait in the queue (parked \
                     again before the first was redriven); a redrive answers them from the key"
                );
            }
            Ok(EXIT_OK)
        }
        Command::Export => {
            let dlq = connect(broker).await?;
            let letters = read_all(&dlq, dlq.stats().await.map_err(failure)?.count).await?;
            for read in &letters {
                Format::Json.line(out, String::new, &read.letter)?;
            }
            Ok(EXIT_OK)
        }
        Command::Redrive(args) => {
            let options = args.broker().map_err(Failure::Usage)?;
            let options = RedriveOptions {
                limit: options.limit,
                rate: options.rate,
                who: options.who.to_owned(),
                dry_run: options.dry_run,
            };
            if options.dry_run {
                return dry_run(&connect(broker).await?, &options, out).await;
            }
            let audit = audit_store(broker, true)?;
            let dlq = connect(broker).await?;
            let run = dlq.redrive(&options, &audit).await.map_err(failure)?;
            let r = &run.record;
            for row in audit
                .audit_rows(Some(&r.run_id))
                .await
                .map_err(Failure::Store)?
            {
                let msg_id = report::one_line(&row.msg_id);
                match row.outcome.as_deref() {
                    Some("redriven") => writeln!(out, "sent\t{msg_id}")?,
                    other => writeln!(
                        out,
                        "failed\t{msg_id}\t{}",
                        report::one_line(other.unwrap_or("no outcome"))
                    )?,
                }
            }
            writeln!(
                out,
                "redrive {}: {} selected, {} succeeded, {} failed{}; recorded in {}",
                r.run_id,
                r.selected,
                r.succeeded,
                r.failed,
                r.stopped
                    .as_deref()
                    .map(|why| format!("; stopped: {why}"))
                    .unwrap_or_default(),
                audit_path(broker)?.display()
            )?;
            Ok(if r.failed > 0 || r.stopped.is_some() {
                EXIT_FLAGGED
            } else {
                EXIT_OK
            })
        }
        Command::Audit { run, format } => {
            let audit = audit_store(broker, false)?;
            redrive::audit(&audit, run.as_deref(), *format, out).await
        }
        Command::Ack { .. } => Err(Failure::Usage(ACK.to_owned())),
        // Run before a store is chosen (see `main_inner`).
        Command::Import { .. } => Err(Failure::Usage(
            "import takes its file and --into, not a store option".to_owned(),
        )),
    }
}

async fn connect(broker: &Broker) -> Result<BrokerDeadLetters, Failure> {
    BrokerDeadLetters::connect(&broker.url, &broker.queue)
        .await
        .map_err(|e| {
            let at = without_credentials(&broker.url);
            let why = match e {
                BrokerDlqError::Broker(e) => e.to_string(),
                other => other.to_string(),
            };
            Failure::Store(DlqError::Io(
                format!("cannot reach the broker at {at}: {why}").into(),
            ))
        })
}

/// The URL without its user and password, for messages.
fn without_credentials(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://{}", &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// The letters ready when the command started (`count` of them at most, so letters parked
/// meanwhile cannot keep it reading), read and given back.
async fn read_all(dlq: &BrokerDeadLetters, count: u64) -> Result<Vec<BrokerLetter>, Failure> {
    dlq.show(usize::try_from(count).unwrap_or(usize::MAX))
        .await
        .map_err(failure)
}

/// `--dry-run`: the letters a run would take, read and given back; nothing sent or recorded.
async fn dry_run(
    dlq: &BrokerDeadLetters,
    options: &RedriveOptions,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let letters = dlq.show(options.limit).await.map_err(failure)?;
    for read in &letters {
        writeln!(
            out,
            "would send\t{}\tto exchange {:?} with routing key {:?}",
            report::list_line(&read.letter),
            read.exchange,
            read.routing_key
        )?;
    }
    writeln!(
        out,
        "dry run: {} letter(s) would be republished to the exchange and routing key they were \
         first published to; nothing sent, nothing recorded",
        letters.len()
    )?;
    Ok(EXIT_OK)
}

/// A letter as pretty JSON, with the exchange and routing key a redrive sends it to.
fn pretty(read: &BrokerLetter) -> Result<String, Failure> {
    let json = |e: serde_json::Error| Failure::Output(io::Error::other(e));
    let mut value = serde_json::to_value(&read.letter).map_err(json)?;
    if let Some(fields) = value.as_object_mut() {
        fields.insert("exchange".to_owned(), read.exchange.clone().into());
        fields.insert("routing_key".to_owned(), read.routing_key.clone().into());
    }
    serde_json::to_string_pretty(&value).map_err(json)
}

fn audit_path(broker: &Broker) -> Result<&Path, Failure> {
    broker.audit.as_deref().ok_or_else(|| {
        Failure::Usage(
            "a redrive of a broker's dead-letter queue, and its audit, need --audit-sqlite PATH \
             (or RETRY_DLQ_AUDIT_SQLITE): the SQLite file that keeps each run and its row per \
             letter, since the broker keeps no record (redrive creates it if missing)"
                .to_owned(),
        )
    })
}

/// The SQLite file of the runs; `create`: made if missing (a redrive), else it must exist (a
/// mistyped path is an error, never an empty record).
fn audit_store(broker: &Broker, create: bool) -> Result<SqliteDeadLetters, Failure> {
    let path = audit_path(broker)?;
    if !create {
        existing_file(
            path,
            "redrive record",
            "--audit-sqlite wants the SQLite file a redrive wrote",
        )?;
    }
    SqliteDeadLetters::open(path).map_err(Failure::Store)
}

/// The error of an operation on the queue: an audit store's as it is; the broker's in one line
/// (lapin's errors repeat their text in their sources).
fn failure(error: BrokerDlqError) -> Failure {
    match error {
        BrokerDlqError::Audit(e) => Failure::Store(e),
        BrokerDlqError::Broker(e) => {
            Failure::Store(DlqError::Io(format!("the broker: {e}").into()))
        }
        other => Failure::Store(DlqError::Io(other.to_string().into())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn messages_name_the_broker_without_its_credentials() {
        assert_eq!(
            super::without_credentials("amqp://app:s3cret@mq.internal:5672/%2f"),
            "amqp://mq.internal:5672/%2f"
        );
        assert_eq!(
            super::without_credentials("amqp://127.0.0.1:5672"),
            "amqp://127.0.0.1:5672"
        );
    }
}
