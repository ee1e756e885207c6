//! The randomness of the kernel: seeds for jitter and trace ids, from one generator per thread,
//! and the small generator each retrying call draws its jitter from.
//!
//! Neither needs to be unpredictable to an attacker, only spread out, so the kernel builds no
//! random-number crate: [`SmallRng`] is xoshiro256++, the generator and the seeding of rand's
//! `SmallRng` on 64-bit targets, written out (the tests check it draws what rand's does), and
//! each thread's generator is seeded once from std's `RandomState`, whose keys std draws from
//! the OS. Keys a peer must not guess (`IdempotencyKey::new`, redrive run ids) come from rand's
//! `ThreadRng` in the features that make them.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher, RandomState};

/// xoshiro256++ (Blackman and Vigna), as rand's `SmallRng` is on 64-bit targets: 256 bits of
/// state, fast, not for secrets.
#[derive(Debug, Clone)]
pub(crate) struct SmallRng {
    s: [u64; 4],
}

impl SmallRng {
    /// The state that rand's `SmallRng::seed_from_u64(seed)` starts from: four outputs of
    /// SplitMix64, which never makes the all-zero state.
    #[inline]
    pub(crate) fn seed_from_u64(mut seed: u64) -> Self {
        let mut s = [0; 4];
        for word in &mut s {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            *word = z ^ (z >> 31);
        }
        SmallRng { s }
    }

    /// The next 64 random bits.
    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
}

thread_local! {
    static GENERATOR: RefCell<SmallRng> = RefCell::new(SmallRng::seed_from_u64(seed()));
}

/// A seed unlike every other thread's: `RandomState::new` gives each call new keys.
fn seed() -> u64 {
    RandomState::new().build_hasher().finish()
}

/// A random `u64` from this thread's generator.
pub(crate) fn next_u64() -> u64 {
    GENERATOR.with(|generator| generator.borrow_mut().next_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_what_rands_small_rng_draws() {
        use rand::{Rng, SeedableRng};
        for seed in [0, 1, 9, 0x9e37_79b9_7f4a_7c15, u64::MAX] {
            let (mut ours, mut rands) = (
                SmallRng::seed_from_u64(seed),
                rand::rngs::SmallRng::seed_from_u64(seed),
            );
            for _ in 0..1000 {
                assert_eq!(ours.next_u64(), rands.next_u64(), "seed {seed}");
            }
        }
    }

    #[test]
    fn draws_differ_within_a_thread_and_between_threads() {
        let here: Vec<u64> = (0..4).map(|_| next_u64()).collect();
        let there = std::thread::spawn(|| (0..4).map(|_| next_u64()).collect::<Vec<_>>())
            .join()
            .unwrap_or_default();
        let mut all = here.clone();
        all.extend(&there);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 8, "{here:?} {there:?}");
    }
}
