//! `retry-dlq`: look into a dead-letter store of retry-core (a SQLite file, PostgreSQL, or a
//! RabbitMQ dead-letter queue of retry-amqp) and redrive it. Counts and ages for alerting (`stats --check`), a line per letter (`list`), one
//! letter (`show`), everything as JSON Lines (`export`), acknowledging by hand (`ack`), a redrive
//! to an idempotent HTTP receiver (`redrive`), the record of past redrives (`audit`), and moving
//! the letters of a `JsonlSink` file into a store (`import`). Only `ack`, `redrive` and `import`
//! write to a store. Every command reads the store a page at a time, or asks it to count, and
//! `import` reads its file a line at a time: none holds every letter at once.

#[cfg(feature = "amqp")]
mod amqp;
mod duration;
mod import;
mod redrive;
mod report;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand, ValueEnum};
use retry_core::dlq::{DeadLetter, DeadLetterStore, DlqError, FailureClass, Page, Resolution};
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
  One of --sqlite PATH, --pg URL, --queue NAME (a broker's dead-letter queue); without any, the
  environment: RETRY_DLQ_SQLITE, else DATABASE_URL as --pg. An option always wins over the
  environment. --pg needs the `postgres` build feature; prefer DATABASE_URL to --pg when the
  URL holds a password (command lines are visible to other users). TLS as in libpq:
  sslmode=require encrypts (the certificate checked only against sslrootcert=FILE when given),
  sslmode=verify-full also checks the server's certificate and name against sslrootcert=FILE,
  or the system's trust store without one; verify-ca checks the chain to sslrootcert=FILE.
  The file of --sqlite must exist: a mistyped path is an error, never an empty store.
  A JSONL file (JsonlSink's) is a sink, not a store: move its letters into one with
  `retry-dlq import FILE --into dlq.sqlite`, then use --sqlite dlq.sqlite.

A broker's dead-letter queue (retry-amqp; cargo feature `amqp`):
  --queue NAME names the dead-letter queue (Topology's `<queue>.dlq`) on the broker at --amqp
  URL, else AMQP_URL (prefer AMQP_URL when the URL holds a password). Every command reads the
  letters with basic.get and gives them back unacknowledged: nothing leaves the queue but what
  `redrive` republished and the broker confirmed. stats counts the ready letters and reads the
  oldest from the head of the queue; list, show, export and stats --top read the queue's letters
  (up to --limit, else all those ready when the command started) and give them back. redrive
  republishes each letter's original (body and properties, its message id) to the exchange and
  routing key it was first published to, oldest first, at most --limit at --rate per second,
  with --who and --dry-run; the consumer's idempotency keys answer a letter already handled.
  The broker keeps no record of a run: redrive writes the run and one audit row per letter
  (before the send, completed after) to the SQLite file --audit-sqlite PATH (created if missing;
  env RETRY_DLQ_AUDIT_SQLITE), which `audit` reads. ack is refused: a letter leaves the queue
  by a redrive (or by the broker's own tools), and nothing records a resolution there.
  RabbitMQ 4.0 to 4.2 count each letter given back as a delivery, and drop a quorum queue's
  message past its delivery limit (20 by default): lift the dead-letter queue's limit there
  (a policy with delivery-limit -1) before monitoring it.";

const EXIT_HELP: &str = "\
Exit status:
  0  success (stats --check: nothing to alert on)
  1  stats --check: something to alert on; show: no letter with that msg_id; ack: a letter
     was not pending; redrive: a letter failed again or was skipped; audit --run: no such run;
     import: a line of the file could not be read (the rest was imported)
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
    about = "Inspect and redrive a dead-letter store of retry-core (SQLite, PostgreSQL, or a RabbitMQ dead-letter queue): stats for alerting, list, show, export, ack, redrive, audit; import a JSONL file into one",
    long_about = "Inspect and redrive a dead-letter store of retry-core, a SQLite file, \
                  PostgreSQL, or a broker's dead-letter queue of retry-amqp: stats for alerting, list, show, export, ack, redrive, audit; and \
                  import, which moves the letters of a JsonlSink file into a store.\n\nOnly \
                  `ack`, `redrive` and `import` write to a store: `ack` resolves letters by hand; \
                  `redrive` resolves the letters it sent, puts back the ones that failed again, \
                  and records the run and each letter; `import` parks a JSONL file's letters in \
                  a store. `export` writes a store's pending letters as JSON Lines, for people \
                  and scripts to read.",
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
    /// Not a store: kept only to say what to write instead (see `import`).
    #[arg(long, global = true, value_name = "PATH", hide = true)]
    jsonl: Option<PathBuf>,
    /// A SQLite dead-letter database [env: RETRY_DLQ_SQLITE]
    #[arg(long, global = true, value_name = "PATH")]
    sqlite: Option<PathBuf>,
    /// A PostgreSQL URL; needs the `postgres` feature [env: DATABASE_URL]
    #[arg(long, global = true, value_name = "URL")]
    pg: Option<String>,
    /// A broker's dead-letter queue, e.g. orders.dlq; needs the `amqp` feature
    #[arg(long, global = true, value_name = "NAME")]
    queue: Option<String>,
    /// The broker of --queue, amqp://USER:PASS@HOST:PORT/VHOST [env: AMQP_URL]
    #[arg(long, global = true, value_name = "URL")]
    amqp: Option<String>,
    /// With --queue: the SQLite file of redrive runs and audit rows [env: RETRY_DLQ_AUDIT_SQLITE]
    #[arg(long, global = true, value_name = "PATH")]
    audit_sqlite: Option<PathBuf>,
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

For cron or a monitoring check, e.g.:  retry-dlq --sqlite /var/lib/app/dlq.sqlite stats --check --max-age 1h
On a broker (AMQP_URL in the environment):  retry-dlq --queue orders.dlq stats --check --max-age 1h

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
    /// Moves the letters of a JSONL file (JsonlSink's) into a store, where they can be listed,
    /// acknowledged, redriven and audited.
    #[command(after_help = "\
FILE is read a line at a time as JsonlSink writes it, beside a service that may still be
appending to it, and is never changed. --into is a SQLite file (created if missing) or a
postgres:// URL (cargo feature `postgres`); the store options (--sqlite, --pg) play no part.

Each letter line is parked in the store as the service would have parked it, its history and
times included: a msg_id on several lines (a message that gave up again) becomes one letter,
its attempts added up and its first original kept. An ack line of a file written by an older
version resolves its letter, with who and when; lease and audit lines are skipped. A msg_id
the store has already is left as the store has it, every line of it skipped (\"already
there\"), so an import can be run again: it adds only what the service parked since.

A line that cannot be read is reported on stderr with its number and skipped, and the rest is
imported. A last line without a newline is a letter still being written (or one a crash cut
short, never parked): reported, not imported; a later import takes it once it is whole.

Once the letters are in the store, the service can park into the store itself
(SqliteDeadLetters, PgDeadLetters) and the file be archived.

Exit status: 0 imported (also when nothing was new); 1 a line could not be read (the other
lines were imported); 2 usage error, FILE could not be read, or store error.")]
    Import {
        /// The JSONL file of dead letters (JsonlSink's).
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

The service may go on parking into the store during a run. A progress bar shows on stderr for
runs of 20 letters or more.

On a broker's dead-letter queue (--queue NAME) there is no --to: each letter's original (body
byte for byte, properties, message id; the x-retry-* headers removed) is published with
publisher confirms to the exchange and routing key it was first published to, oldest first, at
most --limit at --rate per second, and leaves the dead-letter queue only once the broker
confirmed it; the run stops at the first letter the broker does not take. It takes --who,
--limit, --rate and --dry-run, and needs --audit-sqlite PATH for its record. Since the queue's
consumer is idempotent (retry-amqp), a letter whose effect happened after all is answered from
its key, and one that fails again is parked again.

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

A broker's dead-letter queue (--queue) keeps its runs in the file of --audit-sqlite PATH.

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
    Sqlite(PathBuf),
    Pg(String),
    Amqp(Broker),
}

/// A broker's dead-letter queue, and where its redrives are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broker {
    pub(crate) url: String,
    pub(crate) queue: String,
    pub(crate) audit: Option<PathBuf>,
}

impl StoreArgs {
    /// The command line first, then RETRY_DLQ_SQLITE, then DATABASE_URL. `--jsonl` and
    /// RETRY_DLQ_JSONL (when no option is given) name a sink's file, which is no store: an error
    /// that says how to move its letters into one.
    fn select(&self, env: impl Fn(&str) -> Option<String>) -> Result<Selection, String> {
        if let Some(path) = &self.jsonl {
            return Err(not_a_store("--jsonl", path));
        }
        let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
        let given: Vec<&str> = [
            ("--sqlite", self.sqlite.is_some()),
            ("--pg", self.pg.is_some()),
            ("--queue", self.queue.is_some()),
        ]
        .into_iter()
        .filter_map(|(option, given)| given.then_some(option))
        .collect();
        if let [a, b, ..] = given[..] {
            return Err(format!(
                "{a} and {b} exclude each other: give exactly one store"
            ));
        }
        if let Some(queue) = &self.queue {
            let url = self.amqp.clone().or_else(|| nonempty("AMQP_URL")).ok_or(
                "--queue needs the broker: pass --amqp URL or set AMQP_URL \
                 (amqp://USER:PASS@HOST:PORT/VHOST)",
            )?;
            let audit = self
                .audit_sqlite
                .clone()
                .or_else(|| nonempty("RETRY_DLQ_AUDIT_SQLITE").map(PathBuf::from));
            return Ok(Selection::Amqp(Broker {
                url,
                queue: queue.clone(),
                audit,
            }));
        }
        if self.amqp.is_some() || self.audit_sqlite.is_some() {
            let option = if self.amqp.is_some() {
                "--amqp"
            } else {
                "--audit-sqlite"
            };
            return Err(format!(
                "{option} is for a broker's dead-letter queue: name it with --queue NAME \
                 (e.g. --queue orders.dlq)"
            ));
        }
        if let Some(path) = &self.sqlite {
            return Ok(Selection::Sqlite(path.clone()));
        }
        if let Some(url) = &self.pg {
            return Ok(Selection::Pg(url.clone()));
        }
        if let Some(path) = nonempty("RETRY_DLQ_JSONL") {
            return Err(not_a_store("RETRY_DLQ_JSONL", Path::new(&path)));
        }
        if let Some(path) = nonempty("RETRY_DLQ_SQLITE") {
            return Ok(Selection::Sqlite(path.into()));
        }
        match nonempty("DATABASE_URL") {
            Some(url) => Ok(Selection::Pg(url)),
            None => Err(
                "no store given: pass --sqlite PATH, --pg URL or --queue NAME \
                         (or set RETRY_DLQ_SQLITE or DATABASE_URL)"
                    .to_owned(),
            ),
        }
    }
}

/// The usage error of a JSONL file given as the store (by `given`): what to run instead.
fn not_a_store(given: &str, path: &Path) -> String {
    let mut store = path.with_extension("sqlite");
    if store == path {
        store = path.with_file_name("imported.sqlite");
    }
    format!(
        "{given} {}: a JSONL file is a sink, not a store: move its letters into one with \
         `retry-dlq import {} --into {}`, then use --sqlite {}",
        path.display(),
        path.display(),
        store.display(),
        store.display()
    )
}

/// An open store of any kind.
enum Store {
    Sqlite(SqliteDeadLetters),
    #[cfg(feature = "postgres")]
    Pg(retry_postgres::PgDeadLetters),
}

/// The file behind `--sqlite` (or `import`'s FILE) must be there: opening would create an empty
/// store, and a mistyped path would then look like "nothing pending" to a monitoring check.
/// `what` names the file in the messages; `wants`, what should be there instead.
fn existing_file(path: &Path, what: &str, wants: &str) -> Result<(), Failure> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(Failure::Usage(format!(
            "{} is not a file; {wants}",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Failure::Usage(format!(
            "no {what} at {}: the file does not exist",
            path.display()
        ))),
        Err(e) => Err(Failure::Usage(format!(
            "cannot read the {what} {}: {e}",
            path.display()
        ))),
    }
}

/// Opens the store.
async fn open(selection: &Selection) -> Result<Store, Failure> {
    match selection {
        Selection::Sqlite(path) => {
            existing_file(path, "dead-letter store", "--sqlite wants the store's file")?;
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
        // Run before a store is opened (see `main_inner`).
        Selection::Amqp(_) => Err(Failure::Usage(
            "a broker's dead-letter queue is not opened as a store".to_owned(),
        )),
        #[cfg(not(feature = "postgres"))]
        Selection::Pg(_) => Err(Failure::Usage(
            "this retry-dlq was built without PostgreSQL support (cargo feature `postgres`); \
             pass --sqlite, or build with --features postgres \
             (DATABASE_URL counts as --pg when --sqlite is not given)"
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

/// Writes the `stats` report `text` of `stats`, with the verdict of `--check` (and its
/// `--max-age`) when asked; the exit status.
pub(crate) fn write_stats(
    mut text: String,
    stats: &Stats,
    check: bool,
    max_age: Option<Duration>,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    let status = if check {
        let (status, line) = match report::check(stats, max_age) {
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
            let text = stats.render(top.unwrap_or(0));
            write_stats(text, &stats, *check, *max_age, out)
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

/// Runs `command` on a broker's dead-letter queue (`amqp.rs`).
#[cfg(feature = "amqp")]
async fn run_broker(
    broker: &Broker,
    command: &Command,
    out: &mut impl Write,
) -> Result<u8, Failure> {
    amqp::run(broker, command, out).await
}

#[cfg(not(feature = "amqp"))]
async fn run_broker(_: &Broker, _: &Command, _: &mut impl Write) -> Result<u8, Failure> {
    Err(Failure::Usage(
        "this retry-dlq was built without RabbitMQ support (cargo feature `amqp`); \
         build it with --features amqp to read a broker's dead-letter queue"
            .to_owned(),
    ))
}

async fn main_inner(cli: &Cli) -> Result<u8, Failure> {
    if let Command::Import { file, into } = &cli.command {
        let stdout = io::stdout();
        let mut out = io::BufWriter::new(stdout.lock());
        let status = import::import(file, into, &mut out).await?;
        out.flush()?;
        return Ok(status);
    }
    let selection = cli
        .store
        .select(|name| std::env::var(name).ok())
        .map_err(Failure::Usage)?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let status = if let Selection::Amqp(broker) = &selection {
        run_broker(broker, &cli.command, &mut out).await?
    } else {
        match &open(&selection).await? {
            Store::Sqlite(s) => run(s, &cli.command, &mut out).await?,
            #[cfg(feature = "postgres")]
            Store::Pg(s) => run(s, &cli.command, &mut out).await?,
        }
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
            &["--sqlite", "a", "--pg", "postgres://x", "stats"][..],
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
    fn a_queue_names_a_brokers_dead_letter_queue_and_amqp_url_only_its_broker() {
        let env = |name: &str| match name {
            "AMQP_URL" => Some("amqp://env".to_owned()),
            "DATABASE_URL" => Some("postgres://db".to_owned()),
            _ => None,
        };
        let broker = |url: &str, audit: Option<&str>| {
            Selection::Amqp(Broker {
                url: url.to_owned(),
                queue: "orders.dlq".to_owned(),
                audit: audit.map(PathBuf::from),
            })
        };
        let cli = args(&["--queue", "orders.dlq", "stats"]).unwrap();
        assert_eq!(cli.store.select(env), Ok(broker("amqp://env", None)));
        let cli = args(&["stats", "--queue", "orders.dlq", "--amqp", "amqp://opt"]).unwrap();
        assert_eq!(cli.store.select(env), Ok(broker("amqp://opt", None)));
        let cli = args(&[
            "--queue",
            "orders.dlq",
            "--audit-sqlite",
            "r.sqlite",
            "audit",
        ])
        .unwrap();
        assert_eq!(
            cli.store.select(env),
            Ok(broker("amqp://env", Some("r.sqlite")))
        );
        // AMQP_URL alone names no queue: the other stores' rules hold.
        let cli = args(&["stats"]).unwrap();
        assert_eq!(
            cli.store.select(env),
            Ok(Selection::Pg("postgres://db".into()))
        );
        for (line, error) in [
            (
                &["--queue", "q", "--sqlite", "a", "stats"][..],
                "--sqlite and --queue exclude",
            ),
            (
                &["--amqp", "amqp://x", "stats"],
                "--amqp is for a broker's dead-letter queue",
            ),
            (
                &["--audit-sqlite", "r", "stats"],
                "--audit-sqlite is for a broker's",
            ),
        ] {
            let got = args(line).unwrap().store.select(env).unwrap_err();
            assert!(got.contains(error), "{line:?}: {got}");
        }
        let got = args(&["--queue", "q", "stats"])
            .unwrap()
            .store
            .select(|_| None)
            .unwrap_err();
        assert!(got.contains("pass --amqp URL or set AMQP_URL"), "{got}");
    }

    #[test]
    fn a_jsonl_file_is_refused_as_a_store_saying_how_to_import_it() {
        for line in [
            &["--jsonl", "/var/lib/app/dlq.jsonl", "stats"][..],
            &["stats", "--jsonl", "/var/lib/app/dlq.jsonl"],
            // Before "exclude each other": the more useful of the two.
            &["--jsonl", "/var/lib/app/dlq.jsonl", "--sqlite", "b", "list"],
        ] {
            let error = args(line).unwrap().store.select(|_| None).unwrap_err();
            assert_eq!(
                error,
                "--jsonl /var/lib/app/dlq.jsonl: a JSONL file is a sink, not a store: move its \
                 letters into one with `retry-dlq import /var/lib/app/dlq.jsonl --into \
                 /var/lib/app/dlq.sqlite`, then use --sqlite /var/lib/app/dlq.sqlite",
                "{line:?}"
            );
        }
        let error = args(&["--jsonl", "dlq.sqlite", "stats"])
            .unwrap()
            .store
            .select(|_| None)
            .unwrap_err();
        assert!(
            error.contains("`retry-dlq import dlq.sqlite --into imported.sqlite`"),
            "never into the file itself: {error}"
        );
        let jsonl_env = |name: &str| (name == "RETRY_DLQ_JSONL").then(|| "x.jsonl".to_owned());
        let error = args(&["stats"])
            .unwrap()
            .store
            .select(jsonl_env)
            .unwrap_err();
        assert!(
            error.starts_with("RETRY_DLQ_JSONL x.jsonl: a JSONL file is a sink, not a store")
                && error.contains("`retry-dlq import x.jsonl --into x.sqlite`"),
            "{error}"
        );
        // An option still wins over the environment.
        let cli = args(&["--sqlite", "y.sqlite", "stats"]).unwrap();
        assert_eq!(
            cli.store.select(jsonl_env),
            Ok(Selection::Sqlite("y.sqlite".into()))
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
            ("RETRY_DLQ_SQLITE", "env.sqlite"),
            ("DATABASE_URL", "postgres://db"),
        ]);
        let cli = args(&["--sqlite", "x.db", "stats"]).unwrap();
        assert_eq!(cli.store.select(all), Ok(Selection::Sqlite("x.db".into())));
        let cli = args(&["--pg", "postgres://other", "stats"]).unwrap();
        assert_eq!(
            cli.store.select(all),
            Ok(Selection::Pg("postgres://other".into()))
        );
        let cli = args(&["stats"]).unwrap();
        assert_eq!(
            cli.store.select(all),
            Ok(Selection::Sqlite("env.sqlite".into()))
        );
        assert_eq!(
            cli.store.select(env(&[("DATABASE_URL", "postgres://db")])),
            Ok(Selection::Pg("postgres://db".into()))
        );
        assert!(
            cli.store
                .select(env(&[("RETRY_DLQ_SQLITE", ""), ("RETRY_DLQ_JSONL", "")]))
                .unwrap_err()
                .contains("no store given")
        );
    }
}
