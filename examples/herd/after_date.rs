//! `--retry-after-date`: the herd behind one `Retry-After` HTTP-date, each client a real
//! `Policy::retry` on a paused tokio clock.

use std::cmp::Reverse;
use std::fmt::Write as _;
use std::time::Duration;

use retry_core::backoff::Backoff;
use retry_core::http::parse_retry_after;
use retry_core::{Decision, Jitter, Policy};

use crate::simulate::client_seed;
use crate::{Config, MODES, secs, show};

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

pub(crate) fn run_after_date(c: &Config) -> String {
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
