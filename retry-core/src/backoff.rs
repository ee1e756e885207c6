//! The backoff maths: exponential growth, the cap, and jitter. Plain code with no runtime in it.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::policy::{Jitter, Policy};

/// `min(cap, base · 2^(failed_attempt - 1))`, saturating instead of overflowing (waits past
/// ~584 years saturate there).
///
/// ```
/// use retry_core::backoff::exponential;
/// use std::time::Duration;
///
/// let ms = Duration::from_millis;
/// assert_eq!(exponential(ms(10), ms(1000), 1), ms(10));
/// assert_eq!(exponential(ms(10), ms(1000), 4), ms(80));
/// assert_eq!(exponential(ms(10), ms(1000), 60), ms(1000));
/// ```
pub fn exponential(base: Duration, cap: Duration, failed_attempt: u32) -> Duration {
    Duration::from_nanos(exponential_nanos(nanos(base), nanos(cap), failed_attempt))
}

/// [`exponential`] in whole nanoseconds: the backoff computes in `u64` and makes one `Duration`
/// per wait.
fn exponential_nanos(base: u64, cap: u64, failed_attempt: u32) -> u64 {
    if base == 0 {
        return 0;
    }
    let doublings = failed_attempt.saturating_sub(1);
    1u64.checked_shl(doublings)
        .and_then(|factor| base.checked_mul(factor))
        .map_or(cap, |d| d.min(cap))
}

/// `d` in whole nanoseconds, saturating at ~584 years.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The sequence of waits a policy produces, one per failed attempt, jitter included.
///
/// Each `Backoff` owns a small RNG of its own (seeded from the thread's generator, or from
/// [`Policy::seed`], the first time a wait needs randomness: zero waits never do), so concurrent
/// calls never share or contend for randomness.
///
/// ```
/// use retry_core::{backoff::Backoff, Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::new().base(Duration::from_millis(10)).jitter(Jitter::None);
/// let waits: Vec<_> = Backoff::new(&policy).take(3).collect();
/// assert_eq!(waits, [10, 20, 40].map(Duration::from_millis));
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    /// In nanoseconds, as are `cap` and `prev`.
    base: u64,
    cap: u64,
    jitter: Jitter,
    failed: u32,
    prev: u64,
    seed: Option<u64>,
    rng: Option<SmallRng>,
}

impl Backoff {
    /// The waits of `policy`, starting after the first failed attempt.
    pub fn new(policy: &Policy) -> Self {
        Backoff {
            base: nanos(policy.get_base()),
            cap: nanos(policy.get_cap()),
            jitter: policy.get_jitter(),
            failed: 0,
            prev: nanos(policy.get_base()),
            seed: policy.get_seed(),
            rng: None,
        }
    }

    /// The wait after the next failed attempt. Never more than `cap`.
    pub fn next_delay(&mut self) -> Duration {
        self.failed = self.failed.saturating_add(1);
        let d = exponential_nanos(self.base, self.cap, self.failed);
        let wait = match self.jitter {
            Jitter::None => d,
            Jitter::Full => self.uniform(0, d),
            Jitter::Equal => self.uniform(d / 2, d),
            Jitter::Decorrelated => {
                let hi = self.prev.saturating_mul(3).max(self.base);
                self.uniform(self.base, hi)
            }
        };
        // The cap applies after jitter: decorrelated jitter grows from the previous wait and
        // would otherwise pass it.
        let wait = wait.min(self.cap);
        self.prev = wait;
        Duration::from_nanos(wait)
    }

    /// Uniform in `[lo, hi]`.
    #[inline]
    fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        if lo >= hi {
            return lo;
        }
        let seed = self.seed;
        let rng = self.rng.get_or_insert_with(|| match seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => rand::make_rng(),
        });
        rng.random_range(lo..=hi)
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exponential_doubles_from_base_and_stops_at_cap() {
        let waits: Vec<_> = (1..=8).map(|k| exponential(ms(100), ms(3000), k)).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3000, 3000, 3000].map(ms));
    }

    #[test]
    fn exponential_never_overflows() {
        assert_eq!(exponential(Duration::MAX, ms(5), 1), ms(5));
        assert_eq!(exponential(ms(1), ms(5), u32::MAX), ms(5));
        assert_eq!(exponential(Duration::ZERO, ms(5), 40), Duration::ZERO);
    }

    #[test]
    fn base_above_cap_waits_cap() {
        let policy = Policy::new()
            .base(ms(500))
            .cap(ms(100))
            .jitter(Jitter::None);
        assert!(Backoff::new(&policy).take(5).all(|d| d == ms(100)));
    }
}
