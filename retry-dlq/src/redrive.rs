//! `retry-dlq redrive`: each chosen letter's original is POSTed again to an HTTP receiver, with
//! `Idempotency-Key` set to the letter's `msg_id`, through retry-core's `Redrive` (snapshot,
//! rate, failure threshold, audit record). `retry-dlq audit` lists the recorded runs.

use std::io::Write;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use reqwest::header::{HeaderName, HeaderValue};
use retry_core::dlq::http::post_letter;
use retry_core::dlq::{
    DeadLetter, DeadLetterStore, Filter, LegacyStore, Outcome, Redrive, RedriveError,
    RedriveRecord, assume_idempotent,
};

use crate::report::{one_line, truncate};
use crate::{ClassArg, EXIT_FLAGGED, EXIT_OK, Failure};

/// Below this many letters a run is short enough to follow without a progress bar.
const PROGRESS_FROM: usize = 20;

/// The options of `redrive`, as parsed.
#[derive(Debug, clap::Args)]
pub(crate) struct RedriveArgs {
    /// The receiver: each letter's original is POSTed here as JSON (http:// only).
    #[arg(long, value_name = "URL")]
    to: String,
    /// Who runs this redrive, for the audit record (a person or a job).
    #[arg(long, value_name = "NAME")]
    who: String,
    /// Only letters of this class.
    #[arg(long, value_enum)]
    class: Option<ClassArg>,
    /// Only letters whose reason contains this text.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Only letters that last failed at least this long ago (30s, 15m, 1h, 2d).
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
    older_than: Option<Duration>,
    /// At most N letters in this run (the oldest first failures first).
    #[arg(long, value_name = "N", default_value_t = retry_core::dlq::redrive::DEFAULT_LIMIT)]
    limit: usize,
    /// At most R sends per second: `5/s` or `5`.
    #[arg(long, value_name = "R/s", default_value = "5/s", value_parser = parse_rate)]
    rate: u32,
    /// Stop the run once N letters failed again (the receiver is not well yet).
    #[arg(long, value_name = "N", default_value_t = retry_core::dlq::redrive::DEFAULT_STOP_AFTER_FAILURES)]
    stop_after: u32,
    /// A header for every request, `NAME: VALUE` (repeatable): the credentials the original
    /// requests carried, since receivers keep idempotency keys per client. Prefer
    /// `--header "Authorization: Bearer $TOKEN"` from the environment to a literal token.
    #[arg(long, value_name = "NAME: VALUE")]
    header: Vec<String>,
    /// How long one send may take before it counts as failed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::duration::parse_duration)]
    timeout: Duration,
    /// List what would be sent, and send nothing (nothing is recorded either).
    #[arg(long)]
    dry_run: bool,
}

/// `5/s` or `5`: sends per second, at least 1.
fn parse_rate(text: &str) -> Result<u32, String> {
    let number = text.strip_suffix("/s").unwrap_or(text);
    match number.parse::<u32>() {
        Ok(0) | Err(_) => Err(format!(
            "{text:?} is not a rate: write sends per second as a whole number of at least 1, e.g. 5/s"
        )),
        Ok(rate) => Ok(rate),
    }
}

/// `Name: value` as a header; the value may be empty, the name may not.
fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| format!("--header {line:?}: write it as `NAME: VALUE`"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|e| format!("--header {line:?}: bad name: {e}"))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|e| format!("--header {name}: bad value: {e}"))?;
    Ok((name, value))
}

/// Runs `redrive`: 0 when every chosen letter was redriven (or a dry run listed them), 1 when a
/// letter failed again, was skipped, or the run stopped early.
#[cfg_attr(not(dlq_stores_migrated), allow(dead_code))]
pub(crate) async fn redrive<S: DeadLetterStore + Sync>(
    store: &S,
    args: &RedriveArgs,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    if !args.to.starts_with("http://") {
        return Err(Failure::Usage(format!(
            "--to {}: only http:// receivers are supported (this build has no TLS); \
             reach an https receiver through a local proxy",
            args.to
        )));
    }
    let mut filter = Filter::any();
    if let Some(class) = args.class {
        filter = filter.class(class.into());
    }
    if let Some(text) = &args.reason {
        filter = filter.reason_contains(text.clone());
    }
    if let Some(age) = args.older_than {
        filter = filter.older_than(age);
    }
    let redrive = Redrive::new(store, args.who.clone())
        .filter(filter)
        .limit(args.limit)
        .rate(args.rate)
        .stop_after_failures(args.stop_after)
        .target(args.to.clone());
    let plan = redrive.plan().await.map_err(Failure::Store)?;
    if args.dry_run {
        for letter in &plan {
            writeln!(out, "would send\t{}", crate::report::list_line(letter))?;
        }
        writeln!(
            out,
            "dry run: {} letter(s) would be sent to {}; nothing sent, nothing recorded",
            plan.len(),
            args.to
        )?;
        return Ok(EXIT_OK);
    }
    let client = retry_core::reqwest::client_builder()
        .timeout(args.timeout)
        .build()
        .map_err(|e| Failure::Usage(format!("cannot make an HTTP client: {e}")))?;
    let headers = args
        .header
        .iter()
        .map(|line| parse_header(line))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::Usage)?;
    let bar = progress(plan.len());
    let result = redrive
        .run_letters(|letter: &DeadLetter| {
            let send = post_letter(
                headers
                    .iter()
                    .fold(client.post(&args.to), |request, (name, value)| {
                        request.header(name, value)
                    }),
                letter,
            );
            let bar = &bar;
            // `post_letter` is declared idempotent (the receiver deduplicates on the key); this
            // only counts it on the bar.
            assume_idempotent(async move {
                let sent = send.await;
                bar.inc(1);
                sent
            })
        })
        .await;
    bar.finish_and_clear();
    let report = match result {
        Ok(report) => report,
        Err(RedriveError::Select(e)) => return Err(Failure::Store(e)),
        Err(RedriveError::Audit { report, error }) => {
            print_outcomes(out, &report.letters)?;
            out.flush()?;
            return Err(Failure::Store(error));
        }
        Err(other) => return Err(Failure::Usage(other.to_string())),
    };
    print_outcomes(out, &report.letters)?;
    let r = &report.record;
    writeln!(
        out,
        "redrive {}: {} selected, {} succeeded, {} failed, {} skipped{}",
        r.run_id,
        r.selected,
        r.succeeded,
        r.failed,
        r.skipped,
        r.stopped
            .as_deref()
            .map(|why| format!("; stopped: {why}"))
            .unwrap_or_default()
    )?;
    Ok(if r.failed + r.skipped > 0 {
        EXIT_FLAGGED
    } else {
        EXIT_OK
    })
}

/// A bar on stderr for long runs, when stderr is a terminal; hidden otherwise.
#[cfg_attr(not(dlq_stores_migrated), allow(dead_code))]
fn progress(len: usize) -> ProgressBar {
    if len < PROGRESS_FROM {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} letters, {eta} left") {
        bar.set_style(style);
    }
    bar
}

#[cfg_attr(not(dlq_stores_migrated), allow(dead_code))]
fn print_outcomes(out: &mut impl Write, letters: &[(String, Outcome)]) -> std::io::Result<()> {
    for (msg_id, outcome) in letters {
        let msg_id = one_line(msg_id);
        match outcome {
            Outcome::Redriven => writeln!(out, "sent\t{msg_id}")?,
            Outcome::FailedAgain(why) => {
                writeln!(out, "failed\t{msg_id}\t{}", truncate(&one_line(why), 200))?;
            }
            Outcome::Skipped(why) => {
                writeln!(out, "skipped\t{msg_id}\t{}", truncate(&one_line(why), 200))?;
            }
        }
    }
    Ok(())
}

/// `audit`: one line per recorded run, oldest first.
pub(crate) async fn audit<S: LegacyStore>(store: &S, out: &mut impl Write) -> Result<u8, Failure> {
    for record in store.redrives().await.map_err(Failure::Store)? {
        writeln!(out, "{}", audit_line(&record))?;
    }
    Ok(EXIT_OK)
}

/// started_at, run_id, who, target, filter, selected, succeeded, failed, skipped, stopped.
fn audit_line(r: &RedriveRecord) -> String {
    [
        one_line(&r.started_at),
        one_line(&r.run_id),
        one_line(&r.who),
        one_line(&r.target),
        one_line(&r.filter),
        r.selected.to_string(),
        r.succeeded.to_string(),
        r.failed.to_string(),
        r.skipped.to_string(),
        one_line(r.stopped.as_deref().unwrap_or("-")),
    ]
    .join("\t")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_name_colon_value() {
        let (name, value) = parse_header("Authorization: Bearer abc").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Bearer abc")
        );
        assert!(
            parse_header("no colon")
                .unwrap_err()
                .contains("NAME: VALUE")
        );
        assert!(parse_header("bad name: x").is_err());
    }

    #[test]
    fn rates_are_whole_sends_per_second() {
        assert_eq!(parse_rate("5/s"), Ok(5));
        assert_eq!(parse_rate("12"), Ok(12));
        for bad in ["0/s", "0", "fast", "1.5/s", "-1", "5/m"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
