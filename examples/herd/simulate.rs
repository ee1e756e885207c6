//! The herd itself: every client's retries on a ticking clock against a server that recovers
//! with a fixed capacity, and the table printed from it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::time::Duration;

use retry_core::backoff::Backoff;
use retry_core::{Jitter, Policy};

use crate::{CONVENTIONS, Config, secs, show};

/// What one jitter mode did.
pub(crate) struct Outcome {
    pub(crate) jitter: Jitter,
    /// Requests sent in each window, from t = 0.
    pub(crate) per_window: Vec<u64>,
    /// The most requests in one window sent once the outage was over.
    pub(crate) peak: u64,
    peak_at: Duration,
    in_outage: u64,
    after_outage: u64,
    pub(crate) succeeded: u32,
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
pub(crate) fn client_seed(seed: u64, client: u32) -> u64 {
    seed.wrapping_add(u64::from(client).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

pub(crate) fn simulate(c: &Config, jitter: Jitter) -> Outcome {
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

pub(crate) fn report(c: &Config, outcomes: &[Outcome]) -> String {
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
