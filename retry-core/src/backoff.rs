//! The backoff maths: exponential growth, the cap, and jitter. Plain code with no runtime in it.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::policy::{Jitter, Policy};

/// `min(cap, base · 2^(failed_attempt - 1))`, saturating instead of overflowing.
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
    if base.is_zero() {
        return Duration::ZERO;
    }
    let doublings = failed_attempt.saturating_sub(1);
    1u32.checked_shl(doublings)
        .and_then(|factor| base.checked_mul(factor))
        .map_or(cap, |d| d.min(cap))
}

/// The sequence of waits a policy produces, one per failed attempt, jitter included.
///
/// Each `Backoff` owns a small RNG of its own (seeded from the thread's generator, or from
/// [`Policy::seed`]), so concurrent calls never share or contend for randomness.
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
    base: Duration,
    cap: Duration,
    jitter: Jitter,
    failed: u32,
    prev: Duration,
    rng: SmallRng,
}

impl Backoff {
    /// The waits of `policy`, starting after the first failed attempt.
    pub fn new(policy: &Policy) -> Self {
        let rng = match policy.get_seed() {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => rand::make_rng(),
        };
        Backoff {
            base: policy.get_base(),
            cap: policy.get_cap(),
            jitter: policy.get_jitter(),
            failed: 0,
            prev: policy.get_base(),
            rng,
        }
    }

    /// The wait after the next failed attempt. Never more than `cap`.
    pub fn next_delay(&mut self) -> Duration {
        self.failed = self.failed.saturating_add(1);
        let d = exponential(self.base, self.cap, self.failed);
        let wait = match self.jitter {
            Jitter::None => d,
            Jitter::Full => uniform(&mut self.rng, Duration::ZERO, d),
            Jitter::Equal => uniform(&mut self.rng, d / 2, d),
            Jitter::Decorrelated => {
                let hi = self.prev.saturating_mul(3).max(self.base);
                uniform(&mut self.rng, self.base, hi)
            }
        };
        // The cap applies after jitter: decorrelated jitter grows from the previous wait and
        // would otherwise pass it.
        let wait = wait.min(self.cap);
        self.prev = wait;
        wait
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

/// Uniform in `[lo, hi]`, in whole nanoseconds; waits past ~584 years saturate.
fn uniform(rng: &mut SmallRng, lo: Duration, hi: Duration) -> Duration {
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let (lo, hi) = (nanos(lo), nanos(hi));
    if lo >= hi {
        return Duration::from_nanos(lo);
    }
    Duration::from_nanos(rng.random_range(lo..=hi))
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
