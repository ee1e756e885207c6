//! `retry-dlq`: look into a dead-letter store of retry-core and redrive it. Counts and ages for
//! alerting (`stats --check`), a line per letter (`list`), one letter (`show`), everything as JSON
//! Lines (`export`), acknowledging by hand (`ack`), a redrive to an idempotent HTTP receiver
//! (`redrive`), the record of past redrives (`audit`), and moving a JSONL file's letters into a
//! store (`import`). Only `ack`, `redrive` and `import` write to a store. Every command reads the store a page at a time, or asks it to count: none loads every
//! letter at once.

mod duration;
mod redrive;
mod report;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand, ValueEnum};
use retry_core::dlq::{
    DeadLetter, DeadLetterStore, DlqError, FailureClass, JsonlSink, Page, Resolution,
};
use retry_sqlite::SqliteDeadLetters;

use crate::report::{Reasons, Stats, Verdict};

/// Letters asked of the store at a time by `list`, `export` and `stats --top`.
const PAGE: usize = 500;

/// Exit status: done, nothing to flag.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: `stats --check` found something to alert on, or `show` found no such letter.
pub(crate) const EXIT_FLAGGED: u8 = 1;
/// Exit status: bad usage, or the store could not be opened or read (clap uses 2 as well).
const EXIT_ERROR: u8 = 2;

const STORE_HELP: &str = "\
The store:
  One of --jsonl PATH, --sqlite PATH, --pg URL; without any, the environment: RETRY_DLQ_JSONL
  or RETRY_DLQ_SQLITE (not both), else DATABASE_URL as --pg. An option always wins over the
  environment. --pg needs the `postgres` build feature; prefer DATABASE_URL to --pg when the
  URL holds a password (command lines are visible to other users). TLS as in libpq:
  sslmode=require encrypts (the certificate checked only against sslrootcert=FILE when given),
  sslmode=verify-full also checks the server's certificate and name against sslrootcert=FILE,
  or the system's trust store without one; verify-ca checks the chain to sslrootcert=FILE.
  The file of --jsonl/--sqlite must exist: a mistyped path is an error, never an empty store.
  A JSONL file is read as it is, beside the service writing it, and never changed: a torn
  last line (a write cut short by a crash; that letter was never parked) is reported on stderr
  and left for the writer, which moves it to PATH.torn when it opens the file. A complete line
  that cannot be read is reported and skipped (ack and redrive, which write, move it to
  PATH.quarantine); the rest of the file is used as usual.";

const EXIT_HELP: &str = "\
Exit status:
  0  success (stats --check: nothing to alert on)
  1  stats --check: something to alert on; show: no letter with that msg_id; ack: a letter
     was not pending; redrive: a letter failed again or was skipped; audit --run: no such run
  2  usage error, or the store could not be opened or read (message on stderr)";

const DURATION_HELP: &str = "\
Durations (--max-age, --older-than, --retention, --timeout):
  Whole numbers with units d, h, m, s, ms (also us, ns), largest first, each at most once, no
  spaces: 500ms, 30s, 15m, 1h30m, 2d. The grammar of #[retryable(base = \"...\")] and of a
  Policy read from configuration; above zero here.";

#[derive(Debug, Parser)]
#[command(
    name = "retry-dlq",
    version,
    about = "Inspect and redrive a dead-letter store of retry-core: stats for alerting, list, show, export, ack, redrive, audit, import",
    long_about = "Inspect and redrive a dead-letter store of retry-core: stats for alerting, list, \
                  show, export, ack, redrive, audit, import.\n\nOnly `ack`, `redrive` and \
                  `import` write to a store: `ack` resolves letters by hand; `redrive` resolves \
                  the letters it sent, puts back the ones that failed again, and records the run \
                  and each letter; `import` copies a JSONL file's pending letters into a store.",
    after_help = format!("{STORE_HELP}\n\n{DURATION_HELP}\n\n{EXIT_HELP}"),
    arg_required_else_help = true
)]
struct Cli {
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: Command,
}

// Not a clap group: clap checks a group of global options only where they are given before the
// subcommand, so `select` checks "at most one" wherever they stand.
#[derive(Debug, Args)]
#[command(next_help_heading = "Store (exactly one)")]
struct StoreArgs {
    /// A JsonlSink file [env: RETRY_DLQ_JSONL]
    #[arg(long, global = true, value_name = "PATH")]
    jsonl: Option<PathBuf>,
    /// A SQLite dead-letter database [env: RETRY_DLQ_SQLITE]
    #[arg(long, global = true, value_name = "PATH")]
    sqlite: Option<PathBuf>,
    /// A PostgreSQL URL; needs the `postgres` feature [env: DATABASE_URL]
    #[arg(long, global = true, value_name = "URL")]
    pg: Option<String>,
}

// `redrive`'s options are most of the size; the command line is parsed once.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Pending letters by class and by reason, and the oldest first failure with its age.
    #[command(after_help = format!("\
Exit status:
  without --check: 0 once printed
  with --check:    0 nothing to alert on; 1 letters are pending (with --max-age: the oldest
                   first failure is older than that)
  2                usage error, or the store could not be opened or read (a stored time that is
                   not RFC 3339 included)

For cron or a monitoring check, e.g.:  retry-dlq --jsonl /var/lib/app/dlq.jsonl stats --check --max-age 1h

{DURATION_HELP}"))]
    Stats {
        /// Set the exit status for alerting: 1 when letters are pending (see --max-age), else 0.
        #[arg(long)]
        check: bool,
        /// With --check: alert only when the oldest first failure is older than this
        /// (e.g. 30s, 15m, 1h30m, 2d; see Durations below).
        #[arg(long, value_name = "DURATION", requires = "check", value_parser = duration::parse_duration)]
        max_age: Option<Duration>,
        /// Also count the pending letters by reason and show the N most frequent. This reads
        /// every pending letter (a page at a time); without it the store only counts.
        #[arg(long, value_name = "N")]
        top: Option<usize>,
    },
    /// One line per pending letter, oldest first failure first.
    #[command(after_help = "\
Columns, tab-separated: msg_id, class, attempts, first_failed_at, reason; with a header line
when stdout is a terminal (never in a pipe, so `list | wc -l` counts letters). `--format json`
prints each letter as one line of JSON, every field included, for scripts.
Control characters (tabs, newlines) inside a field are escaped as \\t, \\n, so every letter
is exactly one line. Letters are read a page at a time.

Exit status: 0 listed (also when empty); 2 usage error or store error.")]
    List {
        /// Only letters of this class.
        #[arg(long, value_enum)]
        class: Option<ClassArg>,
        /// Only letters parked by this function (`module::function`, the letter's `source`).
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
        /// At most N letters (the oldest); whether there are more is said on stderr.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// `text` (tab-separated columns) or `json` (one letter per line).
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// One letter as pretty JSON, pending or resolved (then with who resolved it, when, and in
    /// which run).
    #[command(after_help = "\
Exit status: 0 printed; 1 no letter with that msg_id; 2 usage error or store error.")]
    Show {
        /// The letter's msg_id (the first column of `list`).
        msg_id: String,
    },
    /// Every pending letter as JSON Lines on stdout: each line is a DeadLetter as stored.
    #[command(after_help = "\
Oldest first failure first. Each line parses as retry_core::dlq::DeadLetter.

Exit status: 0 exported (also when empty); 2 usage error or store error.")]
    Export,
    /// Moves the pending letters of a JSONL file (JsonlSink's) into a store, where they can be
    /// redriven, leased and audited.
    #[command(after_help = "\
FILE is read as JsonlSink writes it, beside a service that may still be appending to it. --into
is a SQLite file (created if missing) or a postgres:// URL (cargo feature `postgres`). Each
pending letter is copied as it is, its history and times included; a letter whose msg_id the
store has already is left as the store has it, so an import can be run again. The file is not
changed: once the letters are in the store, the service can be pointed at the store, and the
file archived.

Exit status: 0 imported (also when nothing was new); 2 usage error or store error.")]
    Import {
        /// The JSONL file of dead letters.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Where the letters go: a SQLite file, or a postgres:// URL.
        #[arg(long, value_name = "STORE")]
        into: String,
    },
    /// Acknowledge letters by hand: each is resolved (who, when) and no longer pending; it is
    /// kept, with its resolution, until resolved letters are purged.
    #[command(after_help = "\
One line per msg_id: `resolved\tID`, or `not pending\tID` when there is no pending letter of
that id, or a redrive run holds it right now.

Exit status: 0 every letter resolved; 1 one was not pending; 2 usage error or store error.")]
    Ack {
        /// The letters' msg_ids (the first column of `list`).
        #[arg(required = true, value_name = "MSG_ID")]
        msg_ids: Vec<String>,
        /// Who judged them, for the record (a person or a job).
        #[arg(long, value_name = "NAME")]
        who: String,
    },
    /// Send letters again to an idempotent HTTP receiver, in a small batch, on the record.
    #[command(after_help = format!("\
Each chosen letter's original is POSTed as JSON to --to, with `Idempotency-Key` set to the
letter's msg_id (which `dlq(id = ...)` should make the key the original requests carried), so
a receiver that already did the work answers from its idempotency store instead of doing it
again. Letters are taken oldest first failure first from a snapshot made before the first send,
at most --limit of them, at most --rate per second, one at a time; the run stops once
--stop-after letters failed again. A 2xx answer of --to itself acknowledges the letter; anything
else puts it back with attempts + 1 and last_failed_at now. Redirects are not followed: a 3xx is a
failure that names its Location. The run is recorded (see `audit`): when, --who, the filter, how
many were selected, succeeded, failed and skipped. What is recorded holds no credentials: the URL
without its user, password and query, and of a failed answer only its status and problem title.

A JSONL store is opened for writing beside the service writing it: each takes the file's lock
only to append. A progress bar shows on stderr for runs of 20 letters or more.

Exit status: 0 every chosen letter redriven (or --dry-run listed them); 1 a letter failed again
or was skipped, or the run stopped early; 2 usage error or store error.

{DURATION_HELP}"))]
    Redrive(redrive::RedriveArgs),
    /// The recorded redrive runs, oldest first; with --run, that run's row per letter.
    #[command(after_help = "\
Columns, tab-separated: started_at, run_id, who, target, filter, selected, succeeded, failed,
skipped, why the run stopped early (- if it ran to the end); with a header line when stdout is
a terminal. `--format json` prints each run (or row) as one line of JSON.

With --run ID: at, msg_id, outcome, finished_at, one line per letter the run held, in the order
it took them. Each row is written before the letter is sent and completed after: a row with
NO OUTCOME is a letter whose run ended during the send (killed, crashed): it may or may not
have reached the receiver, and stays pending for a later run (its receiver deduplicates).

Exit status: 0 listed (also when empty); 1 --run names no recorded rows; 2 usage error or
store error.")]
    Audit {
        /// Show this run's row per letter (run ids are the second column of `audit`).
        #[arg(long, value_name = "ID")]
        run: Option<String>,
        /// `text` (tab-separated columns) or `json` (one run, or row, per line).
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
}

/// How `list` and `audit` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Tab-separated columns, one line each; a header line when stdout is a terminal.
    Text,
    /// One JSON object per line, every field included.
    Json,
}

impl Format {
    /// Writes `header` when the text goes to a person (stdout is a terminal), not to a pipe.
    pub(crate) fn header(self, out: &mut impl Write, header: &str) -> io::Result<()> {
        if self == Format::Text && io::stdout().is_terminal() {
            writeln!(out, "{header}")?;
        }
        Ok(())
    }

    /// `value` as one line: `text` as given, or `value` as JSON.
    pub(crate) fn line<T: serde::Serialize>(
        self,
        out: &mut impl Write,
        text: impl FnOnce() -> String,
        value: &T,
    ) -> io::Result<()> {
        match self {
            Format::Text => writeln!(out, "{}", text()),
            Format::Json => {
                serde_json::to_writer(&mut *out, value).map_err(io::Error::other)?;
                writeln!(out)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ClassArg {
    /// Transient errors that ran out of attempts, deadline or budget.
    System,
    /// Errors that must not be retried: the message needs a look.
    Data,
}

impl From<ClassArg> for FailureClass {
    fn from(class: ClassArg) -> Self {
        match class {
            ClassArg::System => FailureClass::System,
            ClassArg::Data => FailureClass::Data,
        }
    }
}

/// Why a command ended early.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Said on stderr; exit 2.
    Usage(String),
    /// The store failed (its errors name the file or server); exit 2.
    Store(DlqError),
    /// Writing to stdout failed.
    Output(io::Error),
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Self {
        Failure::Output(error)
    }
}

/// Which store, after the command line and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selection {
    Jsonl(PathBuf),
    Sqlite(PathBuf),
    Pg(String),
}

impl StoreArgs {
    /// The command line first, then RETRY_DLQ_JSONL / RETRY_DLQ_SQLITE, then DATABASE_URL.
    fn select(&self, env: impl Fn(&str) -> Option<String>) -> Result<Selection, String> {
        let given = [
            self.jsonl.is_some(),
            self.sqlite.is_some(),
            self.pg.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() > 1 {
            return Err(
                "--jsonl, --sqlite and --pg exclude each other: give exactly one store".to_owned(),
            );
        }
        if let Some(path) = &self.jsonl {
            return Ok(Selection::Jsonl(path.clone()));
        }
        if let Some(path) = &self.sqlite {
            return Ok(Selection::Sqlite(path.clone()));
        }
        if let Some(url) = &self.pg {
            return Ok(Selection::Pg(url.clone()));
        }
        let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
        match (nonempty("RETRY_DLQ_JSONL"), nonempty("RETRY_DLQ_SQLITE")) {
            (Some(_), Some(_)) => Err(
                "both RETRY_DLQ_JSONL and RETRY_DLQ_SQLITE are set: unset one, or pass --jsonl or --sqlite"
                    .to_owned(),
            ),
            (Some(path), None) => Ok(Selection::Jsonl(path.into())),
            (None, Some(path)) => Ok(Selection::Sqlite(path.into())),
            (None, None) => match nonempty("DATABASE_URL") {
                Some(url) => Ok(Selection::Pg(url)),
                None => Err("no store given: pass --jsonl PATH, --sqlite PATH or --pg URL \
                             (or set RETRY_DLQ_JSONL, RETRY_DLQ_SQLITE or DATABASE_URL)"
                    .to_owned()),
            },
        }
    }
}

/// An open store of any kind.
enum Store {
    Jsonl(JsonlSink),
    Sqlite(SqliteDeadLetters),
    #[cfg(feature = "postgres")]
    Pg(retry_postgres::PgDeadLetters),
}

/// The file behind `--jsonl` / `--sqlite` must be there: opening would create an empty store,
/// and a mistyped path would then look like "nothing pending" to a monitoring check.
fn existing_file(path: &Path, what: &str) -> Result<(), Failure> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(Failure::Usage(format!(
            "{} is not a file; --{what} wants the store's file",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Failure::Usage(format!(
            "no dead-letter store at {}: the file does not exist",
            path.display()
        ))),
        Err(e) => Err(Failure::Usage(format!(
            "cannot read the dead-letter store {}: {e}",
            path.display()
        ))),
    }
}

/// Says on stderr which lines of a JSONL file could not be read, and where they are kept
/// (`what` says what became of them): the command goes on with the rest of the file.
fn warn_quarantined(sink: &JsonlSink, what: &str) {
    let found = sink.quarantined();
    if found.is_empty() {
        return;
    }
    let numbers: Vec<String> = found.iter().map(|q| q.line.to_string()).collect();
    let quarantine = format!("{}.quarantine", sink.path().display());
    eprintln!(
        "retry-dlq: warning: {}: {} unreadable line{} (line {}) {what} {quarantine}",
        sink.path().display(),
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        numbers.join(", "),
    );
    for line in found {
        eprintln!(
            "retry-dlq: warning: line {}: {}",
            line.line,
            report::truncate(&report::one_line(&line.why), 200)
        );
    }
}

/// Opens the store; a JSONL file read-only unless `write`.
async fn open(selection: &Selection, write: bool) -> Result<Store, Failure> {
    match selection {
        Selection::Jsonl(path) if write => {
            existing_file(path, "jsonl")?;
            // Beside the service: each sink locks the file only for its appends.
            let sink = JsonlSink::open(path).map_err(Failure::Store)?;
            warn_quarantined(&sink, "were moved to");
            Ok(Store::Jsonl(sink))
        }
        Selection::Jsonl(path) => {
            existing_file(path, "jsonl")?;
            // Read-only: no write access, no repair, so it works beside the service writing it.
            let sink = JsonlSink::open_read_only(path).map_err(Failure::Store)?;
            for torn in sink.torn() {
                eprintln!(
                    "retry-dlq: warning: {}: line {} was torn (a write cut short by a crash; its \
                     letter was never parked); its writer moves it to {}.torn when it opens: {}",
                    path.display(),
                    torn.line,
                    path.display(),
                    report::truncate(&report::one_line(&torn.text), 200)
                );
            }
            warn_quarantined(&sink, "were skipped; its writer moves them to");
            Ok(Store::Jsonl(sink))
        }
        Selection::Sqlite(path) => {
            existing_file(path, "sqlite")?;
            let store = SqliteDeadLetters::open(path).map_err(Failure::Store)?;
            Ok(Store::Sqlite(store))
        }
        #[cfg(feature = "postgres")]
        // Over TLS as the URL says (sslmode, sslrootcert): retry-postgres's `tls`.
        Selection::Pg(url) => Ok(Store::Pg(
            retry_postgres::PgDeadLetters::connect(url)
                .await
                .map_err(Failure::Store)?,
        )),
        #[cfg(not(feature = "postgres"))]
        Selection::Pg(_) => Err(Failure::Usage(
            "this retry-dlq was built without PostgreSQL support (cargo feature `postgres`); \
             pass --jsonl or --sqlite, or build with --features postgres \
             (DATABASE_URL counts as --pg when neither --jsonl nor --sqlite is given)"
                .to_owned(),
        )),
    }
}

/// Every pending letter of `page`'s class and source, a page at a time, each through `each`
/// until it says stop; whether letters were left when it did.
async fn pages<S: DeadLetterStore>(
    store: &S,
    mut page: Page,
    mut each: impl FnMut(&DeadLetter) -> Result<bool, Failure>,
) -> Result<bool, Failure> {
    loop {
        let letters = store.page(&page).await.map_err(Failure::Store)?;
        let Some(last) = letters.last() else {
            return Ok(false);
        };
        page = page.next_after(last);
        for (n, letter) in letters.iter().enumerate() {
            if !each(letter)? {
                let left_on_page = n + 1 < letters.len();
                if left_on_page {
                    return Ok(true);
                }
                let mut peek = page;
                peek.limit = 1;
                let next = store.page(&peek).await.map_err(Failure::Store)?;
                return Ok(!next.is_empty());
            }
        }
    }
}

/// Runs `command` on `store`, writing results to `out`; the exit status when it got that far.
async fn run<S: DeadLetterStore + Sync>(
    store: &S,
    command: &Command,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    match command {
        Command::Stats {
            check,
            max_age,
            top,
        } => {
            let counts = store.stats().await.map_err(Failure::Store)?;
            let oldest = store
                .page(&Page::first(1))
                .await
                .map_err(Failure::Store)?
                .pop();
            let mut stats = Stats::new(&counts, oldest.as_ref(), SystemTime::now());
            if top.is_some() {
                let mut reasons = Reasons::default();
                pages(store, Page::first(PAGE), |letter| {
                    reasons.add(std::slice::from_ref(letter));
                    Ok(true)
                })
                .await?;
                stats = stats.with_reasons(reasons);
            }
            let mut text = stats.render(top.unwrap_or(0));
            let status = if *check {
                let (status, line) = match report::check(&stats, *max_age) {
                    Verdict::Ok(why) => (EXIT_OK, format!("check: OK: {why}\n")),
                    Verdict::Alert(why) => (EXIT_FLAGGED, format!("check: ALERT: {why}\n")),
                };
                text.push_str(&line);
                status
            } else {
                EXIT_OK
            };
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                // `stats --check | head -1` must still alert.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(status),
                Err(e) => Err(Failure::Output(e)),
                Ok(()) => Ok(status),
            }
        }
        Command::List {
            class,
            source,
            limit,
            format,
        } => {
            format.header(out, "MSG_ID\tCLASS\tATTEMPTS\tFIRST_FAILED_AT\tREASON")?;
            let mut page = Page::first(PAGE.min(limit.unwrap_or(PAGE).max(1)));
            page.class = class.map(FailureClass::from);
            page.source.clone_from(source);
            let limit = limit.unwrap_or(usize::MAX);
            let mut listed = 0;
            let more = pages(store, page, |letter| {
                if listed == limit {
                    return Ok(false);
                }
                format.line(out, || report::list_line(letter), letter)?;
                listed += 1;
                Ok(listed < limit)
            })
            .await?;
            if more {
                out.flush()?;
                eprintln!(
                    "retry-dlq: more letters not listed (--limit {limit}); `stats` counts them"
                );
            }
            Ok(EXIT_OK)
        }
        Command::Show { msg_id } => {
            let letter = store.get(msg_id).await.map_err(Failure::Store)?;
            match letter {
                Some(letter) => {
                    let json = serde_json::to_string_pretty(&letter)
                        .map_err(|e| Failure::Output(io::Error::other(e)))?;
                    writeln!(out, "{json}")?;
                    Ok(EXIT_OK)
                }
                None => {
                    eprintln!(
                        "retry-dlq: no letter with msg_id {}",
                        report::one_line(msg_id)
                    );
                    Ok(EXIT_FLAGGED)
                }
            }
        }
        Command::Ack { msg_ids, who } => {
            let mut status = EXIT_OK;
            for msg_id in msg_ids {
                let resolution = Resolution::new(who.as_str(), now_to_the_millisecond());
                let resolved = store
                    .resolve(msg_id, &resolution)
                    .await
                    .map_err(Failure::Store)?;
                let word = if resolved { "resolved" } else { "not pending" };
                if !resolved {
                    status = EXIT_FLAGGED;
                }
                writeln!(out, "{word}\t{}", report::one_line(msg_id))?;
            }
            Ok(status)
        }
        Command::Redrive(args) => redrive::redrive(store, args, out).await,
        Command::Audit { run, format } => redrive::audit(store, run.as_deref(), *format, out).await,
        // Run before a store is chosen (see `main_inner`): it names its own two.
        Command::Import { .. } => Err(Failure::Usage(
            "import takes its file and --into, not a store option".to_owned(),
        )),
        Command::Export => {
            pages(store, Page::first(PAGE), |letter| {
                let json = serde_json::to_string(letter)
                    .map_err(|e| Failure::Output(io::Error::other(e)))?;
                writeln!(out, "{json}")?;
                Ok(true)
            })
            .await?;
            Ok(EXIT_OK)
        }
    }
}

/// The clock, cut to the millisecond, as the library cuts its own readings (a redrive run's
/// resolutions): an ack's time is then written as `2026-08-20T09:00:00.123+00:00`, like theirs.
fn now_to_the_millisecond() -> SystemTime {
    let now = SystemTime::now();
    match now.duration_since(std::time::UNIX_EPOCH) {
        Ok(since) => now - Duration::from_nanos(u64::from(since.subsec_nanos() % 1_000_000)),
        // Before 1970: a clock that wrong is written as it is.
        Err(_) => now,
    }
}

/// `import FILE --into STORE`: every pending letter of the JSONL file that the store does not
/// have yet, copied as it is.
async fn import(file: &Path, into: &str, out: &mut impl Write) -> Result<u8, Failure> {
    existing_file(file, "jsonl")?;
    let source = JsonlSink::open_read_only(file).map_err(Failure::Store)?;
    warn_quarantined(&source, "were skipped; its writer moves them to");
    let postgres = into.starts_with("postgres://") || into.starts_with("postgresql://");
    let (imported, there) = if postgres {
        import_into_pg(&source, into).await?
    } else {
        let target = SqliteDeadLetters::open(into).map_err(Failure::Store)?;
        copy_pending(&source, &target).await?
    };
    writeln!(
        out,
        "imported {imported} letter{} from {} into {into}; {there} already there",
        if imported == 1 { "" } else { "s" },
        file.display()
    )?;
    Ok(EXIT_OK)
}

#[cfg(feature = "postgres")]
async fn import_into_pg(source: &JsonlSink, url: &str) -> Result<(usize, usize), Failure> {
    let target = retry_postgres::PgDeadLetters::connect(url)
        .await
        .map_err(Failure::Store)?;
    copy_pending(source, &target).await
}

#[cfg(not(feature = "postgres"))]
async fn import_into_pg(_: &JsonlSink, _: &str) -> Result<(usize, usize), Failure> {
    Err(Failure::Usage(
        "this retry-dlq was built without PostgreSQL support (cargo feature `postgres`); \
         import into a SQLite file, or build with --features postgres"
            .to_owned(),
    ))
}

/// Parks in `target` each pending letter of `source` whose msg_id it does not have, a page at a
/// time (letters can be megabytes each): how many were copied, and how many it had.
async fn copy_pending<T: DeadLetterStore>(
    source: &JsonlSink,
    target: &T,
) -> Result<(usize, usize), Failure> {
    let (mut imported, mut there) = (0, 0);
    let mut page = Page::first(PAGE);
    loop {
        let letters = source.page(&page).await.map_err(Failure::Store)?;
        let Some(last) = letters.last() else {
            return Ok((imported, there));
        };
        page = page.next_after(last);
        for letter in &letters {
            let known = target.get(&letter.msg_id).await.map_err(Failure::Store)?;
            if known.is_some() {
                there += 1;
            } else {
                target.park(letter).await.map_err(Failure::Store)?;
                imported += 1;
            }
        }
    }
}

async fn main_inner(cli: &Cli) -> Result<u8, Failure> {
    if let Command::Import { file, into } = &cli.command {
        let stdout = io::stdout();
        let mut out = io::BufWriter::new(stdout.lock());
        let status = import(file, into, &mut out).await?;
        out.flush()?;
        return Ok(status);
    }
    let selection = cli
        .store
        .select(|name| std::env::var(name).ok())
        .map_err(Failure::Usage)?;
    let writes = matches!(cli.command, Command::Redrive(_) | Command::Ack { .. });
    let store = open(&selection, writes).await?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let status = match &store {
        Store::Jsonl(s) => run(s, &cli.command, &mut out).await?,
        Store::Sqlite(s) => run(s, &cli.command, &mut out).await?,
        #[cfg(feature = "postgres")]
        Store::Pg(s) => run(s, &cli.command, &mut out).await?,
    };
    match out.flush() {
        // The reader went away after the command decided its status: keep the status.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(status),
        Err(e) => Err(Failure::Output(e)),
        Ok(()) => Ok(status),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // rustls's crypto for `redrive --to https://`: ring, chosen here since reqwest is built
    // without a provider of its own. (`--pg` over TLS passes ring to rustls itself.) Err: one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    match main_inner(&cli).await {
        Ok(status) => ExitCode::from(status),
        Err(Failure::Usage(message)) => {
            eprintln!("retry-dlq: error: {message}");
            ExitCode::from(EXIT_ERROR)
        }
        // The whole chain: the store's error says only "dead-letter store failed", its
        // sources name the file or server and what went wrong.
        Err(Failure::Store(error)) => {
            eprintln!("retry-dlq: error: {}", retry_core::error_chain(&error));
            ExitCode::from(EXIT_ERROR)
        }
        // A reader that went away in the middle of `list` or `export` (`| head`) is not an
        // error of ours.
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(EXIT_OK),
        Err(Failure::Output(e)) => {
            eprintln!("retry-dlq: error: cannot write the output: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn args(line: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("retry-dlq").chain(line.iter().copied()))
    }

    #[test]
    fn exactly_one_store_option() {
        for line in [
            &["--jsonl", "a", "--sqlite", "b", "stats"][..],
            &["stats", "--jsonl", "a", "--pg", "postgres://x"],
            &["--sqlite", "a", "list", "--pg", "postgres://x"],
        ] {
            let error = args(line).unwrap().store.select(|_| None).unwrap_err();
            assert!(error.contains("exclude each other"), "{line:?}: {error}");
        }
        // Global: before or after the subcommand.
        assert!(args(&["list", "--sqlite", "b"]).is_ok());
        assert_eq!(
            args(&["stats", "--max-age", "1h"]).unwrap_err().exit_code(),
            2
        );
        assert_eq!(
            args(&["stats", "--check", "--max-age", "soon"])
                .unwrap_err()
                .exit_code(),
            2
        );
    }

    #[test]
    fn options_win_over_the_environment_and_specific_variables_over_database_url() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let all = env(&[
            ("RETRY_DLQ_JSONL", "env.jsonl"),
            ("DATABASE_URL", "postgres://db"),
        ]);
        let cli = args(&["--sqlite", "x.db", "stats"]).unwrap();
        assert_eq!(cli.store.select(all), Ok(Selection::Sqlite("x.db".into())));
        let cli = args(&["stats"]).unwrap();
        assert_eq!(
            cli.store.select(all),
            Ok(Selection::Jsonl("env.jsonl".into()))
        );
        assert_eq!(
            cli.store.select(env(&[("DATABASE_URL", "postgres://db")])),
            Ok(Selection::Pg("postgres://db".into()))
        );
        assert!(
            cli.store
                .select(env(&[("RETRY_DLQ_JSONL", "a"), ("RETRY_DLQ_SQLITE", "b")]))
                .unwrap_err()
                .contains("both")
        );
        assert!(
            cli.store
                .select(env(&[("RETRY_DLQ_JSONL", "")]))
                .unwrap_err()
                .contains("no store given")
        );
    }
}
