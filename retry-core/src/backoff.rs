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
    /// In nanoseconds, as are `cap`, `ceiling` and `prev`.
    base: u64,
    cap: u64,
    jitter: Jitter,
    /// The exponential wait of the next failure, `min(cap, base · 2^(failed))`: doubled per step
    /// rather than recomputed from the attempt number.
    ceiling: u64,
    prev: u64,
    /// `jitter == Full`, the default: tested first, so the common step skips the `match`.
    full: bool,
    seed: Option<u64>,
    /// A placeholder until `seeded`: an `Option` would keep the generator out of registers.
    rng: SmallRng,
    seeded: bool,
}

impl Backoff {
    /// The waits of `policy`, starting after the first failed attempt.
    pub fn new(policy: &Policy) -> Self {
        let (base, cap) = (nanos(policy.knobs().base), nanos(policy.knobs().cap));
        Backoff {
            base,
            cap,
            jitter: policy.knobs().jitter,
            ceiling: base.min(cap),
            prev: base,
            full: matches!(policy.knobs().jitter, Jitter::Full),
            seed: policy.knobs().seed,
            // A constant once optimised; replaced before its first draw.
            rng: SmallRng::seed_from_u64(0),
            seeded: false,
        }
    }

    /// The wait after the next failed attempt. Never more than `cap`.
    #[inline]
    pub fn next_delay(&mut self) -> Duration {
        // Equal to `exponential_nanos(base, cap, failed)`: once the doubling reaches the cap it
        // stays there, and `saturating_mul` cannot wrap past it.
        let d = self.ceiling;
        // Nothing left to do once at the cap: a compare, not a multiply and a `min`, per wait.
        if d < self.cap {
            self.ceiling = d.saturating_mul(2).min(self.cap);
        }
        // Full first: the default, tested before the others' jump table.
        let wait = if self.full {
            self.uniform(0, d)
        } else {
            match self.jitter {
                Jitter::None | Jitter::Full => d,
                Jitter::Equal => self.uniform(d / 2, d),
                Jitter::Decorrelated => {
                    // Sampled below the cap, `U[base, min(cap, 3·prev)]`, never clamped after:
                    // `min(cap, U[base, 3·prev])` puts about two thirds of the draws exactly at
                    // the cap once `prev` nears it, which synchronises the clients again.
                    let lo = self.base.min(self.cap);
                    let hi = self.prev.saturating_mul(3).clamp(lo, self.cap);
                    let wait = self.uniform(lo, hi);
                    self.prev = wait;
                    wait
                }
            }
        };
        Duration::from_nanos(wait)
    }

    /// Uniform in `[lo, hi]`; `lo <= hi`. The generator is seeded the first time a range needs
    /// randomness, so zero waits never seed it.
    #[inline]
    fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        if !self.seeded {
            if lo >= hi {
                return lo;
            }
            // By value, not through `&mut self`: the generator stays in registers.
            self.rng = fresh_rng(self.seed);
            self.seeded = true;
        }
        self.rng.random_range(lo..=hi)
    }
}

/// The generator of a [`Backoff`]: from [`Policy::seed`], or from the thread's generator.
/// Inlined: returned through a pointer into the `Backoff`, it would keep the generator in memory.
#[inline]
fn fresh_rng(seed: Option<u64>) -> SmallRng {
    match seed {
        Some(seed) => SmallRng::seed_from_u64(seed),
        None => rand::make_rng(),
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    #[inline]
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
    fn doubled_ceiling_matches_the_formula() {
        let huge = Duration::from_secs(u64::MAX / 4_000_000_000);
        for (base, cap) in [
            (ms(10), ms(30_000)),
            (ms(0), ms(5)),
            (ms(3), huge),
            (huge, huge),
        ] {
            let policy = Policy::new().base(base).cap(cap).jitter(Jitter::None);
            let waits: Vec<_> = Backoff::new(&policy).take(80).collect();
            let formula: Vec<_> = (1..=80).map(|k| exponential(base, cap, k)).collect();
            assert_eq!(waits, formula, "base {base:?}, cap {cap:?}");
        }
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
