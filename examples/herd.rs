//! `cargo run --example herd`: the thundering herd, simulated once per jitter mode.
//!
//! 10,000 clients send a request at t = 0 to a server that is down. Every failed request is
//! retried after the wait [`Backoff`] gives for the client's [`Policy`], so the waits are exactly
//! the library's. The server comes back after the outage with a fixed capacity; requests beyond
//! that capacity fail too and are retried like any other failure. The simulation runs once for
//! each jitter mode (`none`, `full`, `equal`, `decorrelated`), prints what the recovering server
//! went through, and draws the arrivals over time to `docs/herd.png`.
//!
//! Conventions (also printed by `--help` and at the top of the output):
//!
//! - Time moves in ticks (`--tick`, 1 ms). Every client sends its first request at t = 0.
//!   Responses take no time: a request is answered in the tick it is sent.
//! - `--max-attempts` counts every request of a client, the first send included (as
//!   [`Policy::max_attempts`] does): 10 means one send and up to nine retries.
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
//! t = 0. Each client is a real [`Policy::retry`] on a paused tokio clock, so the wait is the
//! library's own decision (`Decision::RetryAfter` through the state machine: the server's time
//! plus the jittered backoff), not a re-implementation. The program prints, per jitter mode,
//! how far before the date the earliest client came back (never), how widely the clients spread,
//! and the busiest `--window` after the date, beside the old rule `max(retry_after, backoff)`
//! computed from the same clients' [`Backoff`] (which sent them all into one window). In this
//! mode `--base` defaults to 1s, the attribute's default.
//!
//! Each client gets a seed of its own, mixed from its index and `--seed`, so the same flags give
//! the same output, and no two clients share a jitter sequence (clients sharing a seed would
//! retry in lockstep, which is the herd jitter exists to break).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use plotters::prelude::*;
use retry_core::backoff::Backoff;
use retry_core::http::parse_retry_after;
use retry_core::{Decision, Jitter, Policy};

const MODES: [Jitter; 4] = [
    Jitter::None,
    Jitter::Full,
    Jitter::Equal,
    Jitter::Decorrelated,
];

/// One colour per mode, in the order of `MODES`: the PNG has no text (no font dependency), so
/// the colours are named in the output and the README.
const COLOURS: [(RGBColor, &str); 4] = [
    (RGBColor(214, 39, 40), "red"),
    (RGBColor(31, 119, 180), "blue"),
    (RGBColor(44, 160, 44), "green"),
    (RGBColor(148, 103, 189), "purple"),
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
(none, full, equal, decorrelated). Prints the figures and draws arrivals over time as a PNG.

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
  --out PATH         where to write the PNG                            [{out}]
  --retry-after-date instead: every first request is answered 503 with one Retry-After
                     HTTP-date, --outage after t = 0; prints the busiest --window after it
                     (--base defaults to 1s in this mode)
  -h, --help         print this help

{CONVENTIONS}

picture: one panel per mode, top to bottom none (red), full (blue), equal (green), decorrelated
(purple); x = time, y = requests per window on a log scale (grey lines at 1, 10, 100, ...);
black line = capacity per window; grey background = the outage.",
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
            out: PathBuf::from("docs/herd.png"),
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

// ---- the simulation ----

/// What one jitter mode did.
struct Outcome {
    jitter: Jitter,
    /// Requests sent in each window, from t = 0.
    per_window: Vec<u64>,
    peak: u64,
    peak_at: Duration,
    in_outage: u64,
    after_outage: u64,
    succeeded: u32,
    gave_up: u32,
    /// Still waiting to retry when `--duration` ran out.
    waiting: u32,
    last_request: Duration,
}

/// Ticks, as a simulation counts time.
struct Clock {
    tick_ns: u128,
}

impl Clock {
    /// The first tick at or after `d`.
    fn ticks_ceil(&self, d: Duration) -> u64 {
        u64::try_from(d.as_nanos().div_ceil(self.tick_ns)).unwrap_or(u64::MAX)
    }

    fn time(&self, tick: u64) -> Duration {
        let nanos = u128::from(tick) * self.tick_ns;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Requests the server may serve in `tick`: the whole requests of `capacity` per second
    /// that fall in it, so fractional capacities per tick add up exactly over time.
    fn served_in(&self, tick: u64, capacity: u64) -> u64 {
        let by = |t: u64| u128::from(t) * self.tick_ns * u128::from(capacity) / 1_000_000_000;
        u64::try_from(by(tick + 1) - by(tick)).unwrap_or(u64::MAX)
    }
}

/// A seed per client. `SmallRng::seed_from_u64` scrambles its input, so distinct values are
/// enough; the odd multiplier keeps client i + 1 of `--seed s` apart from client i of s + 1.
fn client_seed(seed: u64, client: u32) -> u64 {
    seed.wrapping_add(u64::from(client).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn simulate(c: &Config, jitter: Jitter) -> Outcome {
    let clock = Clock {
        tick_ns: c.tick.as_nanos(),
    };
    let recovery = clock.ticks_ceil(c.outage);
    let end = clock.ticks_ceil(c.duration);
    let window_ticks = u64::try_from(c.window.as_nanos() / clock.tick_ns).unwrap_or(u64::MAX);
    let windows = usize::try_from(end.div_ceil(window_ticks)).unwrap_or(usize::MAX);

    let policy = Policy::new()
        .base(c.base)
        .cap(c.cap)
        .jitter(jitter)
        .max_attempts(c.max_attempts);
    let mut backoffs: Vec<Backoff> = (0..c.clients)
        .map(|i| Backoff::new(&policy.clone().seed(client_seed(c.seed, i))))
        .collect();
    let mut attempts = vec![0u32; backoffs.len()];

    // Next send per client, earliest first; ties in client order.
    let mut queue: BinaryHeap<Reverse<(u64, u32)>> =
        (0..c.clients).map(|i| Reverse((0, i))).collect();
    let mut per_window = vec![0u64; windows];
    let mut after_per_window = vec![0u64; windows];
    let (mut in_outage, mut after_outage, mut succeeded, mut gave_up) = (0, 0, 0, 0);
    let mut last_tick = 0;
    while let Some(&Reverse((tick, _))) = queue.peek() {
        if tick >= end {
            break;
        }
        last_tick = tick;
        let mut free = if tick >= recovery {
            clock.served_in(tick, c.capacity)
        } else {
            0
        };
        let window = usize::try_from(tick / window_ticks).unwrap_or(usize::MAX);
        while let Some(&Reverse((t, client))) = queue.peek() {
            if t != tick {
                break;
            }
            queue.pop();
            let i = client as usize;
            attempts[i] += 1;
            per_window[window] += 1;
            if tick >= recovery {
                after_outage += 1;
                after_per_window[window] += 1;
            } else {
                in_outage += 1;
            }
            if free > 0 {
                free -= 1;
                succeeded += 1;
            } else if attempts[i] >= policy.knobs().max_attempts {
                gave_up += 1;
            } else {
                let wait = clock.ticks_ceil(backoffs[i].next_delay()).max(1);
                queue.push(Reverse((tick.saturating_add(wait), client)));
            }
        }
    }
    // The earliest of equally busy windows.
    let (peak_window, peak) = after_per_window
        .iter()
        .copied()
        .enumerate()
        .max_by_key(|&(w, n)| (n, Reverse(w)))
        .unwrap_or_default();
    // Trim the empty tail so the plot ends where the traffic does.
    let used = per_window.iter().rposition(|&n| n > 0).map_or(0, |w| w + 1);
    per_window.truncate(used);
    Outcome {
        jitter,
        per_window,
        peak,
        peak_at: clock.time(peak_window as u64 * window_ticks),
        in_outage,
        after_outage,
        succeeded,
        gave_up,
        waiting: u32::try_from(queue.len()).unwrap_or(u32::MAX),
        last_request: clock.time(last_tick),
    }
}

// ---- the report ----

fn report(c: &Config, outcomes: &[Outcome]) -> String {
    let per_window = c.capacity as f64 * c.window.as_secs_f64();
    let per_tick = c.capacity as f64 * c.tick.as_secs_f64();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "thundering herd: {} clients, first request at t = 0, every request fails in [0, {})",
        c.clients,
        show(c.outage),
    );
    let _ = writeln!(
        s,
        "server after that: {} requests/s = {per_tick} per {} tick = {per_window} per {} window",
        c.capacity,
        show(c.tick),
        show(c.window),
    );
    let _ = writeln!(
        s,
        "policy: base {}, cap {}, max attempts {} (first send included), seed {}; duration limit {}",
        show(c.base),
        show(c.cap),
        c.max_attempts,
        c.seed,
        show(c.duration)
    );
    let _ = writeln!(s, "{CONVENTIONS}");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<13} {:>8} {:>6} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "jitter",
        "peak/win",
        "x cap",
        "peak at s",
        "req outage",
        "req after",
        "req total",
        "succeeded",
        "gave up",
        "drain s",
    );
    for o in outcomes {
        let drain = if o.waiting > 0 {
            format!(">{}", secs(c.duration.saturating_sub(c.outage)))
        } else if o.last_request < c.outage {
            "0.0".to_owned()
        } else {
            secs(o.last_request - c.outage)
        };
        let _ = writeln!(
            s,
            "{:<13} {:>8} {:>6.1} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7} {:>7}",
            o.jitter.name(),
            o.peak,
            o.peak as f64 / per_window,
            if o.peak == 0 {
                "-".to_owned()
            } else {
                secs(o.peak_at)
            },
            o.in_outage,
            o.after_outage,
            o.in_outage + o.after_outage,
            o.succeeded,
            o.gave_up,
            drain,
        );
        if o.waiting > 0 {
            let _ = writeln!(
                s,
                "{:<13} {} clients still waiting to retry at the duration limit",
                "", o.waiting
            );
        }
    }
    s
}

// ---- the picture ----

const WIDTH: u32 = 1200;
const MARGIN: u32 = 10;
/// Pixel columns of a panel's plot.
const COLUMNS: usize = (WIDTH - 2 * MARGIN) as usize;

/// The busiest window in each of `columns` equal slices of `[0, x_end)` seconds, as (middle of
/// the slice, requests), empty slices left out. Plotting one point per pixel column keeps every
/// spike visible when windows are narrower than a pixel, and avoids the zero-width segments
/// that plotters draws wrongly with wide strokes.
fn busiest_per_column(
    per_window: &[u64],
    window: f64,
    x_end: f64,
    columns: usize,
) -> Vec<(f64, u64)> {
    let width = x_end / columns as f64;
    let mut busiest: Vec<Option<u64>> = vec![None; columns];
    for (w, &n) in per_window.iter().enumerate() {
        let column = (((w as f64 + 0.5) * window / width) as usize).min(columns - 1);
        let slot = &mut busiest[column];
        *slot = Some(slot.map_or(n, |m| m.max(n)));
    }
    busiest
        .into_iter()
        .enumerate()
        .filter_map(|(column, n)| Some(((column as f64 + 0.5) * width, n?)))
        .collect()
}

/// Draws the picture; returns the seconds between its thin vertical lines.
fn draw(c: &Config, outcomes: &[Outcome], path: &Path) -> Result<u32, Box<dyn Error>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let window = c.window.as_secs_f64();
    let traffic_end = outcomes
        .iter()
        .map(|o| o.per_window.len() as f64 * window)
        .fold(c.outage.as_secs_f64(), f64::max);
    // A thin vertical line every `step` seconds and a dark one every ten, at most ~60 of them;
    // the plot ends on a dark one.
    let step: u32 = match traffic_end {
        t if t <= 60.0 => 1,
        t if t <= 600.0 => 10,
        _ => 100,
    };
    let major = f64::from(step * 10);
    let x_end = ((traffic_end / major).ceil() * major).max(major);
    let busiest = outcomes
        .iter()
        .flat_map(|o| o.per_window.iter().copied())
        .max()
        .unwrap_or(1);
    let y_top = (busiest as f64).max(1.0) * 2.0;
    // Empty windows sit on the bottom edge of a log axis.
    let y_floor = 0.7;
    let capacity = c.capacity as f64 * window;

    let root = BitMapBackend::new(path, (WIDTH, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let light = RGBColor(225, 225, 225);
    let dark = RGBColor(170, 170, 170);
    for (panel, (o, (colour, _))) in root
        .split_evenly((4, 1))
        .iter()
        .zip(outcomes.iter().zip(COLOURS))
    {
        let mut chart = ChartBuilder::on(panel)
            .margin(MARGIN)
            .build_cartesian_2d(0.0..x_end, (y_floor..y_top).log_scale())?;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y_floor), (c.outage.as_secs_f64(), y_top)],
            RGBColor(238, 238, 238).filled(),
        )))?;
        let mut decade = 1.0;
        while decade < y_top {
            chart.draw_series(LineSeries::new([(0.0, decade), (x_end, decade)], dark))?;
            decade *= 10.0;
        }
        for line in 1..(x_end as u32 / step) {
            let style = if line % 10 == 0 { dark } else { light };
            let x = f64::from(line * step);
            chart.draw_series(LineSeries::new([(x, y_floor), (x, y_top)], style))?;
        }
        chart.draw_series(LineSeries::new(
            [(0.0, capacity), (x_end, capacity)],
            BLACK.stroke_width(2),
        ))?;
        chart.draw_series(LineSeries::new(
            busiest_per_column(&o.per_window, window, x_end, COLUMNS)
                .into_iter()
                .map(|(x, n)| (x, (n as f64).max(y_floor))),
            colour.stroke_width(2),
        ))?;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y_floor), (x_end, y_top)],
            BLACK.stroke_width(1),
        )))?;
    }
    root.present()?;
    Ok(step)
}

// ---- the herd behind Retry-After ----

/// The server's answer to every first request: busy, come back at one date.
#[derive(Debug)]
struct Busy;

/// What one jitter mode did behind the `Retry-After` date.
struct AfterDate {
    jitter: Jitter,
    /// When each client came back, from t = 0 (the library's decision).
    returns: Vec<Duration>,
    /// The same clients under the old rule `max(retry_after, backoff)`.
    old_returns: Vec<Duration>,
}

/// The most arrivals in one window `[date + k*w, date + (k+1)*w)`, with its start after the date.
fn busiest_after(returns: &[Duration], date: Duration, window: Duration) -> (usize, Duration) {
    let mut counts: std::collections::BTreeMap<u128, usize> = std::collections::BTreeMap::new();
    for r in returns.iter().filter(|&&r| r >= date) {
        *counts
            .entry((*r - date).as_nanos() / window.as_nanos())
            .or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(k, n)| (n, Reverse(k)))
        .map_or((0, Duration::ZERO), |(k, n)| {
            let at = window.as_nanos() * k;
            (
                n,
                Duration::from_nanos(u64::try_from(at).unwrap_or(u64::MAX)),
            )
        })
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 IMF-fixdate) for whole seconds since 1970.
fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (no dates before it here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Runs every client of one jitter mode as a real closure retry on a paused clock.
fn simulate_after_date(c: &Config, jitter: Jitter, retry_after: Duration) -> AfterDate {
    let policy = Policy::new()
        .base(c.base)
        .cap(c.cap)
        .jitter(jitter)
        .max_attempts(2)
        // The server's wait is accepted whatever `--outage` says.
        .max_retry_after(retry_after);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("cannot start a tokio runtime: {error}"),
    };
    let returns = runtime.block_on(async {
        let start = tokio::time::Instant::now();
        let mut clients = tokio::task::JoinSet::new();
        for i in 0..c.clients {
            let policy = policy.clone().seed(client_seed(c.seed, i));
            clients.spawn(async move {
                let mut sent = 0u32;
                let back = policy
                    .retry(|| {
                        sent += 1;
                        let first = sent == 1;
                        async move {
                            if first {
                                Err(Busy)
                            } else {
                                Ok(start.elapsed())
                            }
                        }
                    })
                    .retry_if(|_: &Busy| Decision::RetryAfter(retry_after))
                    .await;
                back.unwrap_or(Duration::MAX)
            });
        }
        let mut returns = Vec::with_capacity(c.clients as usize);
        while let Some(back) = clients.join_next().await {
            returns.push(back.unwrap_or(Duration::MAX));
        }
        returns.sort_unstable();
        returns
    });
    let old_returns = (0..c.clients)
        .map(|i| {
            let mut backoff = Backoff::new(&policy.clone().seed(client_seed(c.seed, i)));
            retry_after.max(backoff.next_delay())
        })
        .collect();
    AfterDate {
        jitter,
        returns,
        old_returns,
    }
}

fn run_after_date(c: &Config) -> String {
    // A fixed "now" on a whole second, so the date and the figures are the same on every run.
    let now_secs = 1_787_105_463;
    let now = std::time::UNIX_EPOCH + Duration::from_secs(now_secs);
    let date = http_date(now_secs + c.outage.as_secs());
    let retry_after = match parse_retry_after(&date, now) {
        Ok(wait) => wait,
        Err(error) => panic!("{date:?} is not a Retry-After the library reads: {error}"),
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "herd behind Retry-After: {} clients answered 503 at t = 0 with Retry-After: {date} (t = {} s)",
        c.clients,
        secs(retry_after)
    );
    let _ = writeln!(
        s,
        "policy: base {}, cap {}; wait = the library's decision for Decision::RetryAfter (Policy::retry, paused tokio clock)",
        show(c.base),
        show(c.cap)
    );
    let _ = writeln!(
        s,
        "old rule for comparison: max(retry_after, backoff) from the same clients' Backoff; windows [date + k*w, date + (k+1)*w), w = {}",
        show(c.window)
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<13} {:>11} {:>10} {:>9} {:>12} {:>8} {:>12}",
        "jitter", "before date", "earliest s", "spread s", "busiest/win", "at +s", "old busiest"
    );
    for &jitter in &MODES {
        let o = simulate_after_date(c, jitter, retry_after);
        let early = o.returns.iter().filter(|&&r| r < retry_after).count();
        let first = o.returns.first().copied().unwrap_or_default();
        let last = o.returns.last().copied().unwrap_or_default();
        let (busiest, at) = busiest_after(&o.returns, retry_after, c.window);
        let (old, _) = busiest_after(&o.old_returns, retry_after, c.window);
        let _ = writeln!(
            s,
            "{:<13} {:>11} {:>10.3} {:>9.3} {:>12} {:>8.1} {:>12}",
            o.jitter.name(),
            early,
            first.as_secs_f64(),
            last.saturating_sub(first).as_secs_f64(),
            busiest,
            at.as_secs_f64(),
            old,
        );
    }
    s
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
    let step = match draw(&config, &outcomes, &config.out) {
        Ok(step) => step,
        Err(error) => {
            eprintln!("error: cannot draw {}: {error}", config.out.display());
            return ExitCode::FAILURE;
        }
    };
    let key: Vec<String> = MODES
        .iter()
        .zip(COLOURS)
        .map(|(j, (_, name))| format!("{j} {name}"))
        .collect();
    println!(
        "\npicture: {}, one panel per mode, top to bottom {}",
        config.out.display(),
        key.join(", ")
    );
    println!(
        "  x = time, a thin line every {step} s and a dark one every {} s; grey background = outage",
        step * 10
    );
    println!(
        "  y = requests per {} window, log scale, grey lines at 1, 10, 100, ...; black = capacity",
        show(config.window)
    );
    ExitCode::SUCCESS
}
