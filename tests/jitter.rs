//! The distribution of waits, over 10,000 draws per jitter.

use std::time::Duration;

use retry_core::backoff::{Backoff, exponential};
use retry_core::{Classify, Decision, Jitter, Policy, retryable};

const DRAWS: usize = 10_000;

fn policy(jitter: Jitter) -> Policy {
    Policy::new()
        .base(Duration::from_millis(100))
        .cap(Duration::from_secs(10))
        .jitter(jitter)
}

/// The wait after failed attempt `k`, drawn `DRAWS` times from fresh generators.
fn draws(jitter: Jitter, k: usize) -> Vec<Duration> {
    (0..DRAWS)
        .map(|_| Backoff::new(&policy(jitter)).nth(k - 1).unwrap())
        .collect()
}

#[test]
fn full_jitter_is_uniform_between_zero_and_the_backoff() {
    for k in [1, 3, 6] {
        let d = exponential(
            Duration::from_millis(100),
            Duration::from_secs(10),
            k as u32,
        );
        let waits = draws(Jitter::Full, k);
        assert!(
            waits.iter().all(|w| *w <= d),
            "attempt {k}: a wait above {d:?}"
        );
        let mean = waits.iter().sum::<Duration>() / DRAWS as u32;
        let half = d / 2;
        let error = mean.abs_diff(half).as_secs_f64() / half.as_secs_f64();
        assert!(
            error < 0.05,
            "attempt {k}: mean {mean:?} is not within 5% of {half:?}"
        );
        // Both ends are reached: not a constant, not squeezed into the middle.
        assert!(waits.iter().any(|w| *w < d / 10) && waits.iter().any(|w| *w > d * 9 / 10));
    }
}

#[test]
fn equal_jitter_stays_between_half_and_the_whole_backoff() {
    for k in [1, 4] {
        let d = exponential(
            Duration::from_millis(100),
            Duration::from_secs(10),
            k as u32,
        );
        let waits = draws(Jitter::Equal, k);
        assert!(waits.iter().all(|w| *w >= d / 2 && *w <= d), "attempt {k}");
        assert!(waits.iter().any(|w| *w < d * 11 / 20) && waits.iter().any(|w| *w > d * 19 / 20));
    }
}

#[test]
fn decorrelated_jitter_grows_from_the_previous_wait_within_the_cap() {
    let base = Duration::from_millis(100);
    let cap = Duration::from_secs(10);
    for _ in 0..DRAWS / 10 {
        let mut prev = base;
        for wait in Backoff::new(&policy(Jitter::Decorrelated)).take(10) {
            assert!(wait >= base, "{wait:?} below base");
            assert!(
                wait <= cap.min(prev * 3),
                "{wait:?} above min(cap, 3 x {prev:?})"
            );
            prev = wait;
        }
    }
}

/// Once `prev` is at the cap, `U[base, min(cap, 3·prev)]` is uniform over `[base, cap]`: no
/// point mass at the cap (clamping `U[base, 3·prev]` to the cap put ~2/3 of the draws there).
#[test]
fn decorrelated_jitter_at_the_cap_has_no_point_mass_there() {
    const N: usize = 100_000;
    let (base, cap) = (Duration::from_millis(100), Duration::from_secs(10));
    // Many failures in: `prev` has long been at or near the cap.
    let mut backoff = Backoff::new(&policy(Jitter::Decorrelated).seed(7));
    for _ in 0..1_000 {
        backoff.next_delay();
    }
    let waits: Vec<Duration> = (0..N).map(|_| backoff.next_delay()).collect();
    let at_cap = waits.iter().filter(|w| **w == cap).count();
    assert!(
        at_cap * 1_000 < N,
        "{at_cap} of {N} draws exactly at the cap: a point mass"
    );
    // The top tenth of [base, cap] holds no more than its share (plus slack).
    let top = cap - (cap - base) / 10;
    let in_top = waits.iter().filter(|w| **w >= top).count();
    assert!(
        in_top * 100 < N * 25,
        "{in_top} of {N} draws in the top tenth below the cap"
    );
    assert!(waits.iter().all(|w| *w >= base && *w <= cap));
}

#[test]
fn no_jitter_doubles_exactly() {
    let waits: Vec<_> = Backoff::new(&policy(Jitter::None)).take(9).collect();
    let ms = [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000];
    assert_eq!(waits, ms.map(Duration::from_millis));
}

#[test]
fn no_wait_ever_exceeds_the_cap() {
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        let policy = Policy::new()
            .base(Duration::from_millis(300))
            .cap(Duration::from_secs(2))
            .jitter(jitter);
        for _ in 0..200 {
            assert!(
                Backoff::new(&policy)
                    .take(50)
                    .all(|w| w <= Duration::from_secs(2)),
                "{jitter}"
            );
        }
    }
}

#[test]
fn a_seed_reproduces_the_waits_and_distinct_calls_differ() {
    let seeded = policy(Jitter::Full).seed(42);
    let a: Vec<_> = Backoff::new(&seeded).take(20).collect();
    let b: Vec<_> = Backoff::new(&seeded).take(20).collect();
    assert_eq!(a, b);
    let c: Vec<_> = Backoff::new(&policy(Jitter::Full)).take(20).collect();
    let d: Vec<_> = Backoff::new(&policy(Jitter::Full)).take(20).collect();
    assert_ne!(c, d, "unseeded calls must not wait in lockstep");
}

#[derive(Debug)]
struct Down;

impl Classify for Down {
    fn classify(&self) -> Decision {
        Decision::Retry
    }
}

static SEEDED: Policy = Policy::new()
    .max_attempts(8)
    .base(Duration::from_millis(1))
    .cap(Duration::from_millis(20))
    .seed(7);

/// Yields before failing, so consecutive attempts may run on different worker threads (a
/// multi-thread runtime cannot use the paused clock; the waits here are a few milliseconds).
#[retryable(policy = &SEEDED, on_retry = record_anywhere)]
async fn hops_threads() -> Result<(), Down> {
    tokio::task::yield_now().await;
    Err(Down)
}

static ALL_WAITS: std::sync::Mutex<Vec<Duration>> = std::sync::Mutex::new(Vec::new());

fn record_anywhere(_attempt: u32, _error: &Down, wait: Duration) {
    ALL_WAITS.lock().unwrap().push(wait);
}

#[test]
fn the_same_seed_gives_the_same_waits_when_the_task_moves_threads() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let mut runs = Vec::new();
    for _ in 0..3 {
        ALL_WAITS.lock().unwrap().clear();
        runtime.block_on(async { tokio::spawn(hops_threads()).await.unwrap().unwrap_err() });
        runs.push(std::mem::take(&mut *ALL_WAITS.lock().unwrap()));
    }
    let expected: Vec<_> = Backoff::new(&SEEDED).take(7).collect();
    for run in runs {
        assert_eq!(run, expected);
    }
}
