//! The randomness of the kernel: seeds for jitter and trace ids, from one generator per thread.
//!
//! Neither needs to be unpredictable to an attacker, only spread out, so the kernel builds no
//! OS-entropy crate: each thread's generator is seeded once from std's `RandomState`, whose keys
//! std draws from the OS. Keys a peer must not guess (`IdempotencyKey::new`, redrive run ids)
//! come from rand's `ThreadRng` in the features that make them.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher, RandomState};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

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
