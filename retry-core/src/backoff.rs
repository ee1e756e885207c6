//! The backoff maths: exponential growth, the cap, and jitter. Plain code with no runtime in it.

use std::time::Duration;

use crate::policy::{Jitter, Policy};
use crate::random::SmallRng;

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
#[inline]
pub(crate) fn exponential_nanos(base: u64, cap: u64, failed_attempt: u32) -> u64 {
    if base == 0 {
        return 0;
    }
    let doublings = failed_attempt.saturating_sub(1);
    1u64.checked_shl(doublings)
        .and_then(|factor| base.checked_mul(factor))
        .map_or(cap, |d| d.min(cap))
}

/// `d` in whole nanoseconds, saturating at ~584 years.
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    // In `u64`, not through `as_nanos`'s `u128`: a multiply and an add, each checked.
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
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
    /// The last wait, for decorrelated jitter (`base` before the first).
    prev: u64,
    /// `jitter == Full`, the default: tested first, so the common step skips the `match`.
    full: bool,
    seed: Option<u64>,
    /// Made at the first wait that needs randomness.
    rng: Option<SmallRng>,
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
            rng: None,
        }
    }

    /// The wait after the next failed attempt. Never more than `cap`.
    #[inline(always)]
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
            let (jitter, base, cap, prev, seed) =
                (self.jitter, self.base, self.cap, self.prev, self.seed);
            let rng = &mut self.rng;
            let wait = jittered(jitter, base, cap, d, prev, |lo, hi| {
                draw(rng.get_or_insert_with(|| fresh_rng(seed)), lo, hi)
            });
            if let Jitter::Decorrelated = jitter {
                self.prev = wait;
            }
            wait
        };
        Duration::from_nanos(wait)
    }

    /// Uniform in `[lo, hi]`; `lo <= hi`. An empty range draws nothing, so zero waits never
    /// seed the generator.
    #[inline(always)]
    fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        if lo >= hi {
            return lo;
        }
        let seed = self.seed;
        draw(self.rng.get_or_insert_with(|| fresh_rng(seed)), lo, hi)
    }
}

/// The wait of `jitter` for the exponential wait `d` (before jitter; `prev`: the last
/// decorrelated wait, `base` before the first): what [`Backoff`] and a retrying call's state
/// both compute. `draw(lo, hi)` is asked only for a range with more than one value, so a zero
/// wait never needs a generator.
#[inline(always)]
pub(crate) fn jittered(
    jitter: Jitter,
    base: u64,
    cap: u64,
    d: u64,
    prev: u64,
    draw: impl FnOnce(u64, u64) -> u64,
) -> u64 {
    let (lo, hi) = match jitter {
        Jitter::None => return d,
        Jitter::Full => (0, d),
        Jitter::Equal => (d / 2, d),
        // Sampled below the cap, `U[base, min(cap, 3·prev)]`, never clamped after:
        // `min(cap, U[base, 3·prev])` puts about two thirds of the draws exactly at the cap once
        // `prev` nears it, which synchronises the clients again.
        Jitter::Decorrelated => {
            let lo = base.min(cap);
            (lo, prev.saturating_mul(3).clamp(lo, cap))
        }
    };
    if lo >= hi { lo } else { draw(lo, hi) }
}

/// The generator of a [`Backoff`] (and of a retrying call): from [`Policy::seed`], or seeded
/// from the thread's generator. Both ways from one `u64` in a register, expanded inline: a
/// generator returned through memory would keep the `Backoff`'s in memory in
/// every step.
#[inline]
pub(crate) fn fresh_rng(seed: Option<u64>) -> SmallRng {
    SmallRng::seed_from_u64(seed.unwrap_or_else(thread_seed))
}

/// A seed from the thread's generator.
#[cold]
#[inline(never)]
fn thread_seed() -> u64 {
    crate::random::next_u64()
}

/// Uniform in `[lo, hi]`, `lo < hi`: exactly what rand's `random_range(lo..=hi)` draws for a
/// `u64` (Canon's method: one widening multiply, and a second sample only when the first
/// lands in the biased zone), written out so that it is inlined into the backoff step: rand's
/// generic function is left out of line by fat LTO, a call per wait.
#[inline(always)]
pub(crate) fn draw(rng: &mut SmallRng, lo: u64, hi: u64) -> u64 {
    let range = hi.wrapping_sub(lo).wrapping_add(1);
    if range == 0 {
        // The whole of `u64`.
        return rng.next_u64();
    }
    let wide = u128::from(rng.next_u64()) * u128::from(range);
    let (mut result, low) = ((wide >> 64) as u64, wide as u64);
    if low > range.wrapping_neg() {
        let carry = (u128::from(rng.next_u64()) * u128::from(range)) >> 64;
        result += u64::from(low.checked_add(carry as u64).is_none());
    }
    lo.wrapping_add(result)
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
    fn the_written_out_draw_is_rands_random_range() {
        use rand::{RngExt, SeedableRng};
        for (lo, hi) in [
            (0, 1),
            (0, 10),
            (5, 7),
            (0, 30_000_000_000),
            (1, u64::MAX),
            (0, u64::MAX),
        ] {
            let (mut ours, mut rands) = (
                SmallRng::seed_from_u64(9),
                rand::rngs::SmallRng::seed_from_u64(9),
            );
            for _ in 0..1000 {
                assert_eq!(draw(&mut ours, lo, hi), rands.random_range(lo..=hi));
            }
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
