//! `retry-dlq redrive`: each chosen letter's original is POSTed again to an HTTP receiver, with
//! `Idempotency-Key` set to the letter's key, through retry-core's `Redrive` (snapshot, leases,
//! safety check, rate, failure threshold, audit rows). `retry-dlq audit` lists the recorded runs,
//! or one run's rows per letter.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use retry_core::dlq::http::post_letter;
use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterStore, Filter, Outcome, Redrive, RedriveError, RedriveRecord,
    assume_idempotent,
};
use retry_core::reqwest::redacted_url;
use retry_core::time::format_rfc3339;

use crate::report::{one_line, truncate};
use crate::{ClassArg, EXIT_FLAGGED, EXIT_OK, Failure, Format};

/// Below this many letters a run is short enough to follow without a progress bar.
const PROGRESS_FROM: usize = 20;

/// The options of `redrive`, as parsed.
#[derive(Debug, clap::Args)]
pub(crate) struct RedriveArgs {
    /// The receiver: each letter's original is POSTed here as JSON. https://, or http:// to a
    /// loopback address (127.0.0.0/8, ::1, localhost) unless --insecure. Required, except on a
    /// broker's dead-letter queue (--queue), whose letters go back where they were published.
    #[arg(long, value_name = "URL")]
    to: Option<String>,
    /// Allow http:// to a host that is not loopback: the letters and credentials then cross
    /// the network in clear text.
    #[arg(long)]
    insecure: bool,
    /// Who runs this redrive, for the audit record (a person or a job).
    #[arg(long, value_name = "NAME")]
    who: String,
    /// Only letters of this class.
    #[arg(long, value_enum)]
    class: Option<ClassArg>,
    /// Only letters parked by this function (`module::function`, the letter's `source`).
    #[arg(long, value_name = "NAME")]
    source: Option<String>,
    /// Only letters whose reason contains this text.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Only letters that last failed at least this long ago (e.g. 30s, 15m, 1h30m, 2d).
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
    older_than: Option<Duration>,
    /// How long the receiver keeps idempotency keys: letters that first failed longer ago are
    /// refused, since the receiver may have forgotten their key [default: 30d]
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
    retention: Option<Duration>,
    /// The scope the receiver claims keys in: letters whose key was claimed in another scope
    /// are refused (letters that record no scope are not checked).
    #[arg(long, value_name = "NAME")]
    scope: Option<String>,
    /// At most N letters in this run (the oldest first failures first).
    #[arg(long, value_name = "N", default_value_t = retry_core::dlq::redrive::DEFAULT_LIMIT)]
    limit: usize,
    /// At most R sends per second: `5/s` or `5`.
    #[arg(long, value_name = "R/s", default_value = "5/s", value_parser = parse_rate)]
    rate: u32,
    /// Stop the run once N letters failed again (the receiver is not well yet) [default: 3]
    #[arg(long, value_name = "N")]
    stop_after: Option<u32>,
    /// A header for every request, `NAME: VALUE` (repeatable). Visible to other users in `ps`:
    /// for credentials use --header-env or --header-file.
    #[arg(long, value_name = "NAME: VALUE")]
    header: Vec<String>,
    /// A header whose value is read from an environment variable, `NAME=VARIABLE` (repeatable):
    /// `--header-env Authorization=DLQ_AUTH` with DLQ_AUTH='Bearer ...'. The credentials the
    /// original requests carried, since receivers keep idempotency keys per client.
    #[arg(long, value_name = "NAME=VARIABLE")]
    header_env: Vec<String>,
    /// Headers from a file, one `Name: value` per line (blank lines and lines starting with #
    /// are skipped); keep it readable by its owner only.
    #[arg(long, value_name = "PATH")]
    header_file: Vec<PathBuf>,
    /// How long one send may take before it counts as failed (e.g. 500ms, 10s) [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
    timeout: Option<Duration>,
    /// List what would be chosen, and send nothing (nothing is recorded either).
    #[arg(long)]
    dry_run: bool,
}

/// How long one send may take unless `--timeout` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a redrive of a broker's dead-letter queue takes from the command line.
#[cfg_attr(
    not(feature = "amqp"),
    allow(dead_code, reason = "read by the `amqp` module")
)]
pub(crate) struct BrokerRedrive<'a> {
    pub(crate) who: &'a str,
    pub(crate) limit: usize,
    pub(crate) rate: u32,
    pub(crate) dry_run: bool,
}

impl RedriveArgs {
    /// The options a redrive of a broker's dead-letter queue takes, or the usage error naming
    /// the first option given that only an HTTP redrive of a store has.
    #[cfg_attr(
        not(feature = "amqp"),
        allow(dead_code, reason = "read by the `amqp` module")
    )]
    pub(crate) fn broker(&self) -> Result<BrokerRedrive<'_>, String> {
        let http_only = [
            ("--to", self.to.is_some()),
            ("--insecure", self.insecure),
            ("--class", self.class.is_some()),
            ("--source", self.source.is_some()),
            ("--reason", self.reason.is_some()),
            ("--older-than", self.older_than.is_some()),
            ("--retention", self.retention.is_some()),
            ("--scope", self.scope.is_some()),
            ("--stop-after", self.stop_after.is_some()),
            ("--header", !self.header.is_empty()),
            ("--header-env", !self.header_env.is_empty()),
            ("--header-file", !self.header_file.is_empty()),
            ("--timeout", self.timeout.is_some()),
        ];
        if let Some((option, _)) = http_only.iter().find(|(_, given)| *given) {
            return Err(format!(
                "{option} is not an option of a broker's dead-letter queue: its letters are \
                 republished to the exchange and routing key they were first published to, \
                 oldest first, and the run stops at the first one the broker does not take; \
                 redrive there takes --who, --limit, --rate and --dry-run"
            ));
        }
        Ok(BrokerRedrive {
            who: &self.who,
            limit: self.limit,
            rate: self.rate,
            dry_run: self.dry_run,
        })
    }
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

/// A header's name and value, the value marked sensitive (never in debug output).
fn header(
    name: &str,
    value: &str,
    from: &dyn Fn() -> String,
) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|e| format!("{}: bad header name: {e}", from()))?;
    let mut value = HeaderValue::from_str(value.trim())
        .map_err(|e| format!("{}: bad value for {name}: {e}", from()))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// `Name: value` as a header; the value may be empty, the name may not.
fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue), String> {
    let from = || format!("--header {line:?}");
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| format!("{}: write it as `NAME: VALUE`", from()))?;
    header(name, value, &from)
}

/// `Name=VARIABLE`: the header `Name` with the value of the environment variable `VARIABLE`.
fn parse_header_env(
    spec: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(HeaderName, HeaderValue), String> {
    let from = || format!("--header-env {spec:?}");
    let (name, variable) = spec
        .split_once('=')
        .filter(|(name, variable)| !name.is_empty() && !variable.is_empty())
        .ok_or_else(|| format!("{}: write it as `NAME=VARIABLE`", from()))?;
    let value = env(variable)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| format!("{}: the environment variable {variable} is not set", from()))?;
    header(name, &value, &from)
}

/// The headers of a `--header-file`: `Name: value` lines; blank lines and `#` comments skipped.
fn parse_header_file(path: &Path, text: &str) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut headers = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        // The line itself may hold a secret: the message names its number only.
        let from = || format!("--header-file {}, line {}", path.display(), n + 1);
        let (name, value) = trimmed
            .split_once(':')
            .ok_or_else(|| format!("{}: write it as `Name: value`", from()))?;
        headers.push(header(name, value, &from)?);
    }
    Ok(headers)
}

fn read_header_file(path: &Path) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--header-file {}: {e}", path.display()))?;
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "retry-dlq: warning: --header-file {} can be read by other users; chmod 600 it",
                path.display()
            );
        }
    }
    parse_header_file(path, &text)
}

/// Every header of the command line, in the order: --header, --header-env, --header-file.
fn headers(args: &RedriveArgs) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    if !args.header.is_empty() {
        eprintln!(
            "retry-dlq: warning: --header values are visible to other users (ps, /proc); pass \
             credentials with --header-env NAME=VARIABLE or --header-file PATH"
        );
    }
    let mut all = args
        .header
        .iter()
        .map(|line| parse_header(line))
        .collect::<Result<Vec<_>, _>>()?;
    for spec in &args.header_env {
        all.push(parse_header_env(spec, |name| std::env::var(name).ok())?);
    }
    for path in &args.header_file {
        all.extend(read_header_file(path)?);
    }
    Ok(all)
}

/// The receiver's URL, if this command may send to it: https://, or http:// to loopback (or
/// anywhere with `insecure`). Hosts are not resolved: only `localhost` and loopback addresses
/// count as loopback.
fn receiver(to: &str, insecure: bool) -> Result<Url, String> {
    let url = Url::parse(to).map_err(|e| format!("--to {to}: not a URL: {e}"))?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if insecure || is_loopback(&url) => Ok(url),
        "http" => Err(format!(
            "--to {to}: http:// only to a loopback address (127.0.0.1, ::1, localhost): the \
             letters and any credentials would cross the network in clear text; use https://, \
             or pass --insecure if this network is trusted"
        )),
        other => Err(format!(
            "--to {to}: {other}:// is not supported; use https:// (or http:// to loopback)"
        )),
    }
}

fn is_loopback(url: &Url) -> bool {
    // An IPv6 host comes in brackets.
    url.host_str()
        .map(|host| host.trim_start_matches('[').trim_end_matches(']'))
        .is_some_and(|host| {
            host.eq_ignore_ascii_case("localhost")
                || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        })
}

/// The client that sends letters. It follows no redirect: only a 2xx of `--to` itself
/// acknowledges a letter, so a `302` to a login page is a failure (naming its `Location`), and
/// a `307` cannot carry a letter, its key and its credentials to another host, or from https://
/// to http://. Plain http:// (to loopback, or `--insecure`) goes to the receiver directly, never
/// through a proxy from the environment: that would be a hop in clear text the check never saw.
fn client(url: &Url, timeout: Duration) -> reqwest::Result<reqwest::Client> {
    let builder = retry_core::reqwest::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout);
    if url.scheme() == "http" {
        builder.no_proxy().build()
    } else {
        builder.build()
    }
}

/// Runs `redrive`: 0 when every chosen letter was redriven (or a dry run listed them), 1 when a
/// letter failed again, was skipped, or the run stopped early.
pub(crate) async fn redrive<S: DeadLetterStore + Sync>(
    store: &S,
    args: &RedriveArgs,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let Some(to) = &args.to else {
        return Err(Failure::Usage(
            "redrive needs --to URL: the receiver each letter's original is POSTed to".to_owned(),
        ));
    };
    let url = receiver(to, args.insecure).map_err(Failure::Usage)?;
    if url.password().is_some() || !url.username().is_empty() {
        eprintln!(
            "retry-dlq: warning: the --to URL's user and password are visible to other users (ps, \
             /proc); pass credentials with --header-env Authorization=VARIABLE or --header-file PATH \
             (they are never written to the audit record)"
        );
    }
    // What the audit record, the dry run and every message show of the receiver: no userinfo,
    // no query, where credentials travel.
    let target = redacted_url(&url);
    let headers = headers(args).map_err(Failure::Usage)?;
    let mut filter = Filter::any();
    if let Some(class) = args.class {
        filter = filter.class(class.into());
    }
    if let Some(source) = &args.source {
        filter = filter.source(source.clone());
    }
    if let Some(text) = &args.reason {
        filter = filter.reason_contains(text.clone());
    }
    if let Some(age) = args.older_than {
        filter = filter.older_than(age);
    }
    let mut redrive = Redrive::new(store, args.who.clone())
        .filter(filter)
        .limit(args.limit)
        .rate(args.rate)
        .stop_after_failures(
            args.stop_after
                .unwrap_or(retry_core::dlq::redrive::DEFAULT_STOP_AFTER_FAILURES),
        )
        .target(target.clone());
    if let Some(retention) = args.retention {
        redrive = redrive.retention(retention);
    }
    if let Some(scope) = &args.scope {
        redrive = redrive.scope(scope.clone());
    }
    let plan = redrive.plan().await.map_err(Failure::Store)?;
    if args.dry_run {
        for letter in &plan {
            writeln!(out, "would send\t{}", crate::report::list_line(letter))?;
        }
        writeln!(
            out,
            "dry run: {} letter(s) chosen for {}; each is checked (redaction, retention, scope, \
             key) when a run takes it; nothing sent, nothing recorded",
            plan.len(),
            target
        )?;
        return Ok(EXIT_OK);
    }
    let client = client(&url, args.timeout.unwrap_or(DEFAULT_TIMEOUT))
        .map_err(|e| Failure::Usage(format!("cannot make an HTTP client: {e}")))?;
    let bar = progress(plan.len());
    drop(plan);
    let result = redrive
        .run_letters(|letter: &DeadLetter| {
            let send = post_letter(
                headers
                    .iter()
                    .fold(client.post(url.clone()), |request, (name, value)| {
                        request.header(name, value)
                    }),
                letter,
            );
            let key = letter
                .idempotency_key
                .clone()
                .unwrap_or_else(|| letter.msg_id.clone());
            let bar = &bar;
            // `post_letter` is declared idempotent (the receiver deduplicates on the key); this
            // only counts it on the bar, and keeps its key for the redrive's key check.
            assume_idempotent(async move {
                let sent = send.await;
                bar.inc(1);
                sent
            })
            .with_key(key)
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
        Err(other) => return Err(Failure::Usage(retry_core::error_chain(&other).to_string())),
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

/// `audit`: one line per recorded run, oldest first; with `run`, that run's row per letter.
pub(crate) async fn audit<S: DeadLetterStore>(
    store: &S,
    run: Option<&str>,
    format: Format,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let Some(run) = run else {
        format.header(
            out,
            "STARTED_AT\tRUN_ID\tWHO\tTARGET\tFILTER\tSELECTED\tSUCCEEDED\tFAILED\tSKIPPED\tSTOPPED",
        )?;
        for record in store.redrives().await.map_err(Failure::Store)? {
            format.line(out, || audit_line(&record), &record)?;
        }
        return Ok(EXIT_OK);
    };
    let rows = store.audit_rows(Some(run)).await.map_err(Failure::Store)?;
    if rows.is_empty() {
        eprintln!(
            "retry-dlq: no audit rows for run {} (see `audit` for the runs)",
            one_line(run)
        );
        return Ok(EXIT_FLAGGED);
    }
    format.header(out, "AT\tMSG_ID\tOUTCOME\tFINISHED_AT")?;
    for row in &rows {
        format.line(out, || row_line(row), row)?;
    }
    Ok(EXIT_OK)
}

/// started_at, run_id, who, target, filter, selected, succeeded, failed, skipped, stopped.
fn audit_line(r: &RedriveRecord) -> String {
    [
        format_rfc3339(r.started_at),
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

/// What a row without an outcome means.
const NO_OUTCOME: &str =
    "NO OUTCOME: the run ended during the send; the letter may or may not have reached the target";

/// at, msg_id, outcome, finished_at (`-` while there is none).
fn row_line(row: &AuditEntry) -> String {
    [
        format_rfc3339(row.at),
        one_line(&row.msg_id),
        one_line(row.outcome.as_deref().unwrap_or(NO_OUTCOME)),
        row.finished_at
            .map_or_else(|| "-".to_owned(), format_rfc3339),
    ]
    .join("\t")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_name_colon_value_and_their_values_sensitive() {
        let (name, value) = parse_header("Authorization: Bearer abc").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Bearer abc")
        );
        assert!(value.is_sensitive());
        assert!(
            parse_header("no colon")
                .unwrap_err()
                .contains("NAME: VALUE")
        );
        assert!(parse_header("bad name: x").is_err());
    }

    #[test]
    fn header_env_takes_the_value_from_the_variable() {
        let env = |name: &str| (name == "DLQ_AUTH").then(|| "Bearer s3cret".to_owned());
        let (name, value) = parse_header_env("Authorization=DLQ_AUTH", env).unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Bearer s3cret")
        );
        let unset = parse_header_env("Authorization=NOT_SET", env).unwrap_err();
        assert!(unset.contains("NOT_SET is not set"), "{unset}");
        for bad in ["Authorization", "=DLQ_AUTH", "Authorization="] {
            assert!(
                parse_header_env(bad, env)
                    .unwrap_err()
                    .contains("NAME=VARIABLE"),
                "{bad}"
            );
        }
    }

    #[test]
    fn header_files_skip_comments_and_name_the_bad_line_without_its_text() {
        let path = Path::new("creds");
        let headers = parse_header_file(
            path,
            "# the shop's token\n\nAuthorization: Bearer s3cret\nX-Shop:  42 \n",
        )
        .unwrap();
        let pairs: Vec<_> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [("authorization", "Bearer s3cret"), ("x-shop", "42")]
        );
        let error = parse_header_file(path, "X-Ok: 1\nBearer s3cret\n").unwrap_err();
        assert!(error.contains("line 2"), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }

    #[test]
    fn http_goes_to_loopback_only_unless_insecure() {
        for ok in [
            "https://payments.example/deposits",
            "http://127.0.0.1:8080/x",
            "http://127.9.9.9/x",
            "http://[::1]:80/x",
            "http://localhost/x",
            "http://LOCALHOST:1/x",
        ] {
            assert!(receiver(ok, false).is_ok(), "{ok}");
        }
        for refused in [
            "http://payments.internal/deposits",
            "http://10.0.0.7/x",
            "http://[2001:db8::1]/x",
            "http://localhost.evil.example/x",
        ] {
            let error = receiver(refused, false).unwrap_err();
            assert!(error.contains("loopback"), "{refused}: {error}");
            assert!(receiver(refused, true).is_ok(), "{refused} with --insecure");
        }
        assert!(receiver("ftp://host/x", true).is_err());
        assert!(receiver("not a url", false).is_err());
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
