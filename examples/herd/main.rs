//! `cargo run --example herd`: the thundering herd, simulated once per jitter mode.
//!
//! 10,000 clients send a request at t = 0 to a server that is down. Every failed request is
//! retried after the wait `Backoff` gives for the client's `Policy`, so the waits are exactly
//! the library's. The server comes back after the outage with a fixed capacity; requests beyond
//! that capacity fail too and are retried like any other failure. The simulation runs once for
//! each jitter mode (`none`, `full`, `equal`, `decorrelated`), prints what the recovering server
//! went through, and draws the arrivals over time as an SVG chart (to a file in the system's
//! temporary directory, whose path it prints; `--out docs/herd.svg` redraws the guide's).
//!
//! Conventions (also printed by `--help` and at the top of the output):
//!
//! - Time moves in ticks (`--tick`, 1 ms). Every client sends its first request at t = 0.
//!   Responses take no time: a request is answered in the tick it is sent.
//! - `--max-attempts` counts every request of a client, the first send included (as
//!   `Policy::max_attempts` does): 10 means one send and up to nine retries.
//! - After its k-th failed attempt a client waits `Backoff`'s k-th delay, from
//!   `min(cap, base · 2^(k-1))` before jitter: the first wait is `base`. A wait is rounded up to
//!   whole ticks, and is at least one tick.
//! - During the outage `[0, --outage)` every request fails. From then on the server answers at
//!   most `--capacity` requests per second, spread evenly over the ticks (tick k may serve
//!   `floor((k+1)·c) - floor(k·c)` requests, `c` = capacity per tick; unused capacity is not
//!   kept for later). The rest of a tick's requests fail at once (overload); within a tick the
//!   lower client index is served first.
//! - Windows are fixed and aligned: `[k·w, (k+1)·w)` for `--window` w (100 ms). The peak is the
//!   most requests in one window counting only requests sent at t >= the end of the outage, as a
//!   multiple of the capacity per window (`capacity · w`).
//! - Drain time: from the end of the outage to the last request any client sends; after it every
//!   client has succeeded or given up.
//!
//! With `--retry-after-date` it simulates instead the herd behind `Retry-After`: every client's
//! first request is answered `503` with the same `Retry-After` HTTP-date, `--outage` after
//! t = 0. Each client is a real `Policy::retry` on a paused tokio clock, so the wait is the
//! library's own decision (`Decision::RetryAfter` through the state machine: the server's time
//! plus the jittered backoff), not a re-implementation. The program prints, per jitter mode,
//! how far before the date the earliest client came back (never), how widely the clients spread,
//! and the busiest `--window` after the date, beside the old rule `max(retry_after, backoff)`
//! computed from the same clients' `Backoff` (which sent them all into one window). In this
//! mode `--base` defaults to 1s, the attribute's default.
//!
//! Each client gets a seed of its own, mixed from its index and `--seed`, so the same flags give
//! the same output, and no two clients share a jitter sequence (clients sharing a seed would
//! retry in lockstep, which is the herd jitter exists to break).

mod after_date;
mod chart;
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use retry_core::Jitter;

use after_date::run_after_date;
use simulate::{Outcome, report, simulate};

const MODES: [Jitter; 4] = [
    Jitter::None,
    Jitter::Full,
    Jitter::Equal,
    Jitter::Decorrelated,
];

/// More windows than this would make a plot nobody can read and a vector nobody needs.
const MAX_WINDOWS: u64 = 1_000_000;

/// Each client costs a few dozen bytes; past this the run would be slow for nothing.
const MAX_CLIENTS: u32 = 10_000_000;

const CONVENTIONS: &str = "\
conventions:
  - time moves in ticks; every client sends its first request at t = 0; a request is answered
    in the tick it is sent
  - max attempts counts every request of a client, the first send included
  - after its k-th failed attempt a client waits Backoff's k-th delay, from
    min(cap, base * 2^(k-1)) before jitter (the first wait is base), rounded up to whole ticks
    and at least one tick
  - during the outage [0, outage) every request fails; afterwards the server serves at most
    capacity per second, spread evenly over the ticks (unused capacity is not kept), and fails
    the rest of a tick's requests at once (overload); lower client index is served first
  - windows are fixed and aligned, [k*w, (k+1)*w); peak = most requests in one window counting
    requests sent at t >= end of outage, also as a multiple of capacity per window
  - drain = time from the end of the outage to the last request any client sends";

fn usage() -> String {
    let d = Config::default();
    format!(
        "\
Simulates a thundering herd: many clients whose first request fails at t = 0 retry with
retry-core's Backoff against a server that recovers with a fixed capacity, once per jitter mode
(none, full, equal, decorrelated). Prints the figures and draws arrivals over time as an SVG.

usage: cargo run --example herd -- [flags]

flags (durations are written 250ms, 1s, 2m, 1m30s or 500us):
  --clients N        clients, each sending one request at t = 0        [{clients}]
  --capacity N       requests per second served after the outage       [{capacity}]
  --outage D         how long every request fails, from t = 0          [{outage}]
  --base D           first wait (after the first failed attempt)       [{base}]
  --cap D            longest single wait                               [{cap}]
  --max-attempts N   attempts per client, the first send included      [{max}]
  --tick D           simulation step                                   [{tick}]
  --window D         width of the windows arrivals are counted in      [{window}]
  --seed N           mixed with each client's index to seed its jitter [{seed}]
  --duration D       stop simulating at this time, drained or not      [{duration}]
  --out PATH         where to write the SVG chart                      [{out}]
  --retry-after-date instead: every first request is answered 503 with one Retry-After
                     HTTP-date, --outage after t = 0; prints the busiest --window after it
                     (--base defaults to 1s in this mode)
  -h, --help         print this help

{CONVENTIONS}",
        clients = d.clients,
        capacity = d.capacity,
        outage = show(d.outage),
        base = show(d.base),
        cap = show(d.cap),
        max = d.max_attempts,
        tick = show(d.tick),
        window = show(d.window),
        seed = d.seed,
        duration = show(d.duration),
        out = d.out.display(),
    )
}

#[derive(Debug, Clone)]
struct Config {
    clients: u32,
    /// Requests per second after the outage.
    capacity: u64,
    outage: Duration,
    base: Duration,
    cap: Duration,
    max_attempts: u32,
    tick: Duration,
    window: Duration,
    seed: u64,
    duration: Duration,
    out: PathBuf,
    /// `--retry-after-date`: the herd behind one `Retry-After` date instead.
    retry_after_date: bool,
    /// Whether `--base` was given (the Retry-After mode has its own default).
    base_given: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            clients: 10_000,
            capacity: 1_000,
            outage: Duration::from_secs(10),
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            max_attempts: 10,
            tick: Duration::from_millis(1),
            window: Duration::from_millis(100),
            seed: 1,
            duration: Duration::from_secs(300),
            // Not the guide's picture: a run with other flags must not redraw it by accident.
            out: std::env::temp_dir().join("retry-core-herd.svg"),
            retry_after_date: false,
            base_given: false,
        }
    }
}

enum Parsed {
    Run(Config),
    Help,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut config = Config::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Parsed::Help);
        }
        if arg == "--retry-after-date" {
            config.retry_after_date = true;
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        if !flag.starts_with("--") {
            return Err(format!("unexpected argument `{flag}`; flags start with --"));
        }
        let value = match inline {
            Some(value) => value,
            None => args.next().ok_or_else(|| format!("{flag} needs a value"))?,
        };
        let bad = |what: String| format!("{flag} {value}: {what}");
        match flag.as_str() {
            "--clients" => config.clients = parse_count(&value).map_err(bad)?,
            "--capacity" => config.capacity = parse_count(&value).map_err(bad)?,
            "--outage" => config.outage = parse_duration(&value).map_err(bad)?,
            "--base" => {
                config.base = parse_duration(&value).map_err(bad)?;
                config.base_given = true;
            }
            "--cap" => config.cap = parse_duration(&value).map_err(bad)?,
            "--max-attempts" => config.max_attempts = parse_count(&value).map_err(bad)?,
            "--tick" => config.tick = parse_duration(&value).map_err(bad)?,
            "--window" => config.window = parse_duration(&value).map_err(bad)?,
            "--seed" => {
                config.seed = value
                    .parse()
                    .map_err(|_| bad("expected a whole number".into()))?;
            }
            "--duration" => config.duration = parse_duration(&value).map_err(bad)?,
            "--out" => config.out = PathBuf::from(&value),
            _ => return Err(format!("unknown flag `{flag}`")),
        }
    }
    if config.retry_after_date && !config.base_given {
        config.base = Duration::from_secs(1);
    }
    check(&config)?;
    Ok(Parsed::Run(config))
}

/// A whole number of at least 1.
fn parse_count<T: TryFrom<u64>>(text: &str) -> Result<T, String> {
    let n: u64 = text
        .replace('_', "")
        .parse()
        .map_err(|_| "expected a whole number".to_owned())?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    T::try_from(n).map_err(|_| "too large".into())
}

/// `<whole number><unit>` parts added up, units `m`, `s`, `ms`, `us`: `250ms`, `1m30s`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let expected = "expected a duration such as 250ms, 1s, 2m, 1m30s or 500us (whole numbers: 1500ms, not 1.5s)";
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return Err(expected.into());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let letters = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let (number, unit) = (&rest[..digits], &rest[digits..digits + letters]);
        let number: u64 = number.parse().map_err(|_| expected.to_owned())?;
        let part = match unit {
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "s" => Some(Duration::from_secs(number)),
            "ms" => Some(Duration::from_millis(number)),
            "us" => Some(Duration::from_micros(number)),
            _ => return Err(expected.into()),
        };
        total = part
            .and_then(|part| total.checked_add(part))
            .ok_or("too long")?;
        rest = &rest[digits + letters..];
    }
    Ok(total)
}

/// Rejects combinations the simulation cannot run, saying which flag to change.
fn check(c: &Config) -> Result<(), String> {
    if c.clients > MAX_CLIENTS {
        return Err(format!(
            "--clients {} is more than {MAX_CLIENTS}",
            c.clients
        ));
    }
    if c.tick.is_zero() {
        return Err("--tick must be above zero".into());
    }
    if c.window.is_zero() || !c.window.as_nanos().is_multiple_of(c.tick.as_nanos()) {
        return Err(format!(
            "--window {} must be a whole number of ticks (--tick {})",
            show(c.window),
            show(c.tick)
        ));
    }
    if c.duration < c.tick {
        return Err(format!(
            "--duration {} must be at least one tick",
            show(c.duration)
        ));
    }
    if c.duration.as_nanos() / c.window.as_nanos() > u128::from(MAX_WINDOWS) {
        return Err(format!(
            "--duration {} holds more than {MAX_WINDOWS} windows of {}; raise --window",
            show(c.duration),
            show(c.window)
        ));
    }
    Ok(())
}

/// A duration the way the flags take it.
fn show(d: Duration) -> String {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    match (secs, nanos) {
        (0, n) if n % 1_000_000 != 0 => format!("{}us", n / 1000),
        (0, n) => format!("{}ms", n / 1_000_000),
        (s, 0) if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{}ms", d.as_millis()),
    }
}

/// Seconds with one decimal, for the table.
fn secs(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64())
}

fn main() -> ExitCode {
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(Parsed::Run(config)) => config,
        Ok(Parsed::Help) => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("error: {error}\nrun with --help to see the flags");
            return ExitCode::from(2);
        }
    };
    if config.retry_after_date {
        print!("{}", run_after_date(&config));
        return ExitCode::SUCCESS;
    }
    let outcomes: Vec<Outcome> = MODES.iter().map(|&j| simulate(&config, j)).collect();
    print!("{}", report(&config, &outcomes));
    if let Err(error) = chart::write(&config, &outcomes, &config.out) {
        eprintln!("error: cannot write {}: {error}", config.out.display());
        return ExitCode::FAILURE;
    }
    println!(
        "\npicture: {} (SVG: requests per {} window over time, one panel per jitter mode)",
        config.out.display(),
        show(config.window)
    );
    ExitCode::SUCCESS
}
