//! The shared harness of the benches (BENCHMARKS.md, "The work"): one no-op operation that
//! counts its calls and fails a set number of times, wrapped six ways, each allowing 4 attempts
//! and classifying with the same function; the jittered delay iterators of case (c); and the
//! driver that polls a call once with a no-op waker and hands it to the runtime only when it is
//! `Pending`. `store` holds what the idempotency-store benches share.
#![allow(
    dead_code,
    reason = "each bench binary uses its own part of the shared harness"
)]

pub mod store;

use std::cell::Cell;
use std::future::{Future, IntoFuture};
use std::io;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use rand::RngExt;
use rand::rngs::SmallRng;
use retry_core::backoff::Backoff;
use retry_core::{Classify, Decision, Jitter, Policy, retryable};
use tokio::runtime::Runtime;
use tokio_retry2::strategy::{ExponentialFactorBackoff, jitter};
use tokio_retry2::{MapErr, RetryIf};

/// Attempts every wrapper allows (the first call and 3 retries).
pub const ATTEMPTS: u32 = 4;
/// The longest wait of every wrapper.
pub const CAP: Duration = Duration::from_secs(30);
/// Case (a)'s first wait: never reached, as the first attempt succeeds.
pub const BASE_SUCCESS: Duration = Duration::from_millis(100);
/// Case (b)'s first wait: zero, so only the per-attempt bookkeeping is measured.
pub const BASE_ZERO: Duration = Duration::ZERO;
/// Case (c)'s first wait.
pub const BASE_DELAYS: Duration = Duration::from_millis(10);
/// Delays computed per call of case (c).
pub const DELAYS: usize = 1_000;

/// The remote call's stand-in: counts its calls and fails the first `failures` of them with a
/// retryable error (`TimedOut`). Not `Sync` on purpose: a `Cell` costs nothing, so the floor is
/// as low as it gets.
#[derive(Debug)]
pub struct Flaky {
    calls: Cell<u32>,
    failures: u32,
}

impl Flaky {
    pub fn new(failures: u32) -> Self {
        Flaky {
            calls: Cell::new(0),
            failures,
        }
    }

    /// Forgets the calls made so far: every measured call starts from the first attempt.
    pub fn reset(&self) {
        self.calls.set(0);
    }

    pub fn calls(&self) -> u32 {
        self.calls.get()
    }
}

/// The operation every implementation wraps: its value is the number of the call that succeeded.
pub async fn op(flaky: &Flaky) -> io::Result<u32> {
    // Opaque to the optimiser, as a remote call's outcome is: no implementation may be
    // specialised on the number of failures, or have the check hoisted out of its loop.
    let flaky = std::hint::black_box(flaky);
    let call = flaky.calls.get() + 1;
    flaky.calls.set(call);
    if call <= flaky.failures {
        // A bare kind: no allocation, as cheap as an error gets.
        Err(io::ErrorKind::TimedOut.into())
    } else {
        Ok(call)
    }
}

/// The one classification every wrapper uses: retry-core's `Classify` for `io::Error` (the peers
/// get it as their `when` / condition predicate).
pub fn is_retryable(error: &io::Error) -> bool {
    error.classify() == Decision::Retry
}

// ---- the implementations ----

/// What a careful person writes: 4 attempts, the same classification, capped exponential backoff
/// with full jitter from a generator `R` seeded at the first wait that needs one, no timer for a
/// zero wait. Measured with a `SmallRng` (`hand_loop`) and with fastrand's (`hand_fastrand`).
pub async fn hand_loop<R: HandRng>(flaky: &Flaky, base: Duration) -> io::Result<u32> {
    let mut rng: Option<R> = None;
    let mut attempt = 1;
    loop {
        match op(flaky).await {
            Ok(value) => return Ok(value),
            Err(e) if attempt < ATTEMPTS && is_retryable(&e) => {
                let ceiling = exponential_nanos(base, attempt);
                if ceiling > 0 {
                    let wait = rng.get_or_insert_with(R::seeded).upto(ceiling);
                    if wait > 0 {
                        tokio::time::sleep(Duration::from_nanos(wait)).await;
                    }
                }
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The generators of the hand-written floors: rand's `SmallRng`, as retry-core uses, and
/// fastrand's (wyrand), as backon uses.
pub trait HandRng {
    /// A generator seeded from the thread's.
    fn seeded() -> Self;
    /// Uniform in `[0, max]`.
    fn upto(&mut self, max: u64) -> u64;
}

impl HandRng for SmallRng {
    #[inline]
    fn seeded() -> Self {
        rand::make_rng()
    }
    #[inline]
    fn upto(&mut self, max: u64) -> u64 {
        self.random_range(0..=max)
    }
}

impl HandRng for fastrand::Rng {
    #[inline]
    fn seeded() -> Self {
        fastrand::Rng::new()
    }
    #[inline]
    fn upto(&mut self, max: u64) -> u64 {
        self.u64(0..=max)
    }
}

/// `base` doubled for each failed attempt before `failed`, at most [`CAP`], in nanoseconds.
fn exponential_nanos(base: Duration, failed: u32) -> u64 {
    let cap = CAP.as_nanos() as u64;
    let base = base.as_nanos() as u64;
    1u64.checked_shl(failed - 1)
        .and_then(|factor| base.checked_mul(factor))
        .map_or(cap, |wait| wait.min(cap))
}

#[retryable(max = 4, base = "100ms", cap = "30s", jitter = "full")]
pub async fn retryable_success(flaky: &Flaky) -> io::Result<u32> {
    op(flaky).await
}

#[retryable(max = 4, base = "0ms", cap = "30s", jitter = "full")]
pub async fn retryable_zero(flaky: &Flaky) -> io::Result<u32> {
    op(flaky).await
}

pub static POLICY_SUCCESS: Policy = Policy::new()
    .max_attempts(ATTEMPTS)
    .base(BASE_SUCCESS)
    .cap(CAP)
    .jitter(Jitter::Full);

pub static POLICY_ZERO: Policy = Policy::new()
    .max_attempts(ATTEMPTS)
    .base(BASE_ZERO)
    .cap(CAP)
    .jitter(Jitter::Full);

pub static POLICY_DELAYS: Policy = Policy::new()
    .max_attempts(ATTEMPTS)
    .base(BASE_DELAYS)
    .cap(CAP)
    .jitter(Jitter::Full);

/// backon's exponential backoff with the same knobs: 3 retries after the first attempt.
fn backon_builder(base: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(base)
        .with_max_delay(CAP)
        .with_max_times(ATTEMPTS as usize - 1)
        .with_jitter()
}

/// tokio-retry2's exponential backoff with the same knobs: 3 retries after the first attempt.
fn tokio_retry2_strategy(base: Duration) -> impl Iterator<Item = Duration> {
    ExponentialFactorBackoff::from_millis(base.as_millis() as u64, 2.0)
        .max_delay(CAP)
        .map(jitter)
        .take(ATTEMPTS as usize - 1)
}

/// One of the implementations of cases (a) and (b), or (case c) of the delay iterators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    Plain,
    /// The hand loop on a `SmallRng`.
    HandLoop,
    /// The hand loop on `fastrand` (cases a, b), or its delays (case c).
    HandFastrand,
    Retryable,
    PolicyRetry,
    Backon,
    /// backon with a sleeper that returns at once: what backon costs without its timer (its
    /// default sleeper arms one even for a zero wait).
    BackonNoSleep,
    TokioRetry2,
    /// Case (c) only: a `SmallRng` and the exponential formula, by hand.
    HandSmallRng,
    /// Case (c) only: `retry_core::backoff::Backoff`, which `#[retryable]` and `Policy::retry` use.
    RetryCore,
}

impl Impl {
    /// The implementations of cases (a) and (b), in table order.
    pub const CALLS: [Impl; 8] = [
        Impl::Plain,
        Impl::HandLoop,
        Impl::HandFastrand,
        Impl::Retryable,
        Impl::PolicyRetry,
        Impl::Backon,
        Impl::BackonNoSleep,
        Impl::TokioRetry2,
    ];
    /// The implementations of case (c), in table order.
    pub const DELAYS: [Impl; 5] = [
        Impl::HandSmallRng,
        Impl::HandFastrand,
        Impl::RetryCore,
        Impl::Backon,
        Impl::TokioRetry2,
    ];
    const ALL: [Impl; 10] = [
        Impl::Plain,
        Impl::HandLoop,
        Impl::HandFastrand,
        Impl::Retryable,
        Impl::PolicyRetry,
        Impl::Backon,
        Impl::BackonNoSleep,
        Impl::TokioRetry2,
        Impl::HandSmallRng,
        Impl::RetryCore,
    ];

    /// The name scripts/bench-instructions passes and the tables show.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Plain => "plain",
            Impl::HandLoop => "hand_loop",
            Impl::HandFastrand => "hand_fastrand",
            Impl::Retryable => "retryable",
            Impl::PolicyRetry => "policy_retry",
            Impl::Backon => "backon",
            Impl::BackonNoSleep => "backon_nosleep",
            Impl::TokioRetry2 => "tokio_retry2",
            Impl::HandSmallRng => "hand_smallrng",
            Impl::RetryCore => "retry_core",
        }
    }

    pub fn parse(name: &str) -> Option<Impl> {
        Impl::ALL.into_iter().find(|i| i.name() == name)
    }
}

/// The two call cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// (a) success on the first attempt.
    Success,
    /// (b) three failures, then success, with zero delays.
    ThreeFailures,
}

impl Case {
    pub const ALL: [Case; 2] = [Case::Success, Case::ThreeFailures];

    pub fn name(self) -> &'static str {
        match self {
            Case::Success => "a_success",
            Case::ThreeFailures => "b_three_failures",
        }
    }

    pub fn failures(self) -> u32 {
        match self {
            Case::Success => 0,
            Case::ThreeFailures => 3,
        }
    }

    pub fn base(self) -> Duration {
        match self {
            Case::Success => BASE_SUCCESS,
            Case::ThreeFailures => BASE_ZERO,
        }
    }
}

/// What to do with one implementation's call maker: measure it, check it. A trait rather than a
/// closure because each implementation's future is a different type.
pub trait Visit {
    type Out;
    fn visit<M, F>(self, make: M) -> Self::Out
    where
        M: FnMut() -> F,
        F: Future<Output = io::Result<u32>>;
}

/// Gives `visitor` the call maker of implementation `imp` for `case` on `flaky`. Panics for the
/// implementations of case (c) only.
pub fn with_call<V: Visit>(imp: Impl, case: Case, flaky: &Flaky, visitor: V) -> V::Out {
    let base = case.base();
    match (imp, case) {
        (Impl::Plain, _) => visitor.visit(move || op(flaky)),
        (Impl::HandLoop, _) => visitor.visit(move || hand_loop::<SmallRng>(flaky, base)),
        (Impl::HandFastrand, _) => visitor.visit(move || hand_loop::<fastrand::Rng>(flaky, base)),
        (Impl::Retryable, Case::Success) => visitor.visit(move || retryable_success(flaky)),
        (Impl::Retryable, Case::ThreeFailures) => visitor.visit(move || retryable_zero(flaky)),
        (Impl::PolicyRetry, Case::Success) => {
            visitor.visit(move || POLICY_SUCCESS.retry(move || op(flaky)).into_future())
        }
        (Impl::PolicyRetry, Case::ThreeFailures) => {
            visitor.visit(move || POLICY_ZERO.retry(move || op(flaky)).into_future())
        }
        (Impl::Backon, _) => visitor.visit(move || {
            (move || op(flaky))
                .retry(backon_builder(base))
                .when(is_retryable)
        }),
        (Impl::BackonNoSleep, _) => visitor.visit(move || {
            (move || op(flaky))
                .retry(backon_builder(base))
                .sleep(|_| std::future::ready(()))
                .when(is_retryable)
        }),
        (Impl::TokioRetry2, _) => visitor.visit(move || {
            RetryIf::spawn(
                tokio_retry2_strategy(base),
                move || async move { op(flaky).await.map_transient_err() },
                is_retryable,
                |_: &io::Error, _: Duration| {},
            )
        }),
        (Impl::HandSmallRng | Impl::RetryCore, _) => {
            panic!("{} is an implementation of case (c) only", imp.name())
        }
    }
}

/// A current-thread runtime with a timer (the peers arm one for every wait).
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread Tokio runtime")
}

/// Polls `fut` once with a no-op waker; only a `Pending` call (one that armed a timer) goes to
/// `rt.block_on`. The caller must be inside `rt`'s context (`rt.enter()`), so that a timer can be
/// armed in the first poll.
#[inline(always)]
pub fn drive<F: Future>(rt: &Runtime, fut: F) -> F::Output {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => rt.block_on(fut),
    }
}

/// Panics unless one call of `imp` on `case` makes `failures + 1` calls and returns the last
/// one's value (`plain`, which cannot retry: one call and its result): every implementation must
/// do the same work before it is measured. On the zero-delay case it also checks that a retrying
/// implementation gives up after [`ATTEMPTS`] calls with the last error.
pub fn check(rt: &Runtime, imp: Impl, case: Case) {
    struct Check<'a>(&'a Runtime, &'a Flaky);
    impl Visit for Check<'_> {
        type Out = io::Result<u32>;
        fn visit<M, F>(self, mut make: M) -> io::Result<u32>
        where
            M: FnMut() -> F,
            F: Future<Output = io::Result<u32>>,
        {
            let _context = self.0.enter();
            self.1.reset();
            drive(self.0, make())
        }
    }
    let flaky = Flaky::new(case.failures());
    let got = with_call(imp, case, &flaky, Check(rt, &flaky));
    let (calls, ok) = match (imp, case) {
        (Impl::Plain, Case::ThreeFailures) => (1, None),
        (Impl::Plain, Case::Success) => (1, Some(1)),
        _ => (case.failures() + 1, Some(case.failures() + 1)),
    };
    let right = match (&got, ok) {
        (Ok(value), Some(want)) => *value == want,
        (Err(e), None) => e.kind() == io::ErrorKind::TimedOut,
        _ => false,
    };
    assert!(
        right && flaky.calls() == calls,
        "{} on {}: expected {calls} calls returning {ok:?}, got {} calls returning {got:?}",
        imp.name(),
        case.name(),
        flaky.calls()
    );
    if case == Case::ThreeFailures && imp != Impl::Plain {
        let always = Flaky::new(u32::MAX);
        let got = with_call(imp, case, &always, Check(rt, &always));
        assert!(
            matches!(&got, Err(e) if e.kind() == io::ErrorKind::TimedOut)
                && always.calls() == ATTEMPTS,
            "{} must give up after {ATTEMPTS} attempts; made {} calls returning {got:?}",
            imp.name(),
            always.calls()
        );
    }
}

// ---- case (c): 1,000 jittered delays ----

/// Computes [`DELAYS`] jittered delays (base 10 ms, cap 30 s) with `imp`'s own iterator; returns
/// how many it gave and their sum.
#[inline(always)]
pub fn delays(imp: Impl) -> (usize, Duration) {
    match imp {
        Impl::HandSmallRng => sum(hand_delays::<SmallRng>()),
        Impl::HandFastrand => sum(hand_delays::<fastrand::Rng>()),
        Impl::RetryCore => sum(retry_core_delays()),
        Impl::Backon => sum(backon_delays()),
        Impl::TokioRetry2 => sum(tokio_retry2_delays()),
        _ => panic!("{} is not an implementation of case (c)", imp.name()),
    }
}

/// Computes `calls` times [`DELAYS`] delays with `imp`'s iterator, each implementation's loop in a
/// function of its own (as each call implementation's is): in one function with every other
/// implementation's loop, what the compiler makes of one would depend on the others.
pub fn repeat_delays(imp: Impl, calls: u64) {
    match imp {
        Impl::HandSmallRng => repeat(calls, hand_delays::<SmallRng>),
        Impl::HandFastrand => repeat(calls, hand_delays::<fastrand::Rng>),
        Impl::RetryCore => repeat(calls, retry_core_delays),
        Impl::Backon => repeat(calls, backon_delays),
        Impl::TokioRetry2 => repeat(calls, tokio_retry2_delays),
        _ => panic!("{} is not an implementation of case (c)", imp.name()),
    }
}

#[inline(never)]
fn repeat<I: Iterator<Item = Duration>>(calls: u64, make: fn() -> I) {
    for _ in 0..calls {
        std::hint::black_box(sum(make()));
    }
}

/// retry-core's waits: `backoff::Backoff`, the sequence a call's state computes after each
/// failed attempt (with the same functions).
fn retry_core_delays() -> impl Iterator<Item = Duration> {
    Backoff::new(&POLICY_DELAYS).take(DELAYS)
}

fn backon_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(BASE_DELAYS)
        .with_max_delay(CAP)
        .with_max_times(DELAYS)
        .with_jitter()
        .build()
}

fn tokio_retry2_delays() -> impl Iterator<Item = Duration> {
    ExponentialFactorBackoff::from_millis(BASE_DELAYS.as_millis() as u64, 2.0)
        .max_delay(CAP)
        .map(jitter)
        .take(DELAYS)
}

/// The floor of case (c): the capped exponential and full jitter from one generator `R`.
fn hand_delays<R: HandRng>() -> impl Iterator<Item = Duration> {
    let mut rng = R::seeded();
    (1..=DELAYS as u32)
        .map(move |failed| Duration::from_nanos(rng.upto(exponential_nanos(BASE_DELAYS, failed))))
}

fn sum(delays: impl Iterator<Item = Duration>) -> (usize, Duration) {
    delays.fold((0, Duration::ZERO), |(n, total), d| (n + 1, total + d))
}

/// Panics unless `imp` gives exactly [`DELAYS`] delays, not all zero.
pub fn check_delays(imp: Impl) {
    let (n, total) = delays(imp);
    assert!(
        n == DELAYS && total > Duration::ZERO,
        "{} gave {n} delays summing to {total:?}, expected {DELAYS} non-zero ones",
        imp.name()
    );
}

// ---- the size of the returned future ----

pub async fn one_op(flaky: &Flaky) -> io::Result<u32> {
    op(flaky).await
}

pub async fn one_op_with_buf(flaky: &Flaky, buf: [u8; 256]) -> io::Result<u32> {
    let value = op(flaky).await?;
    Ok(value + u32::from(buf[0]))
}

#[retryable(max = 4, base = "100ms", cap = "30s", jitter = "full")]
pub async fn one_op_with_buf_retryable(flaky: &Flaky, buf: [u8; 256]) -> io::Result<u32> {
    let value = op(flaky).await?;
    Ok(value + u32::from(buf[0]))
}

/// `(function, un-annotated bytes, #[retryable] bytes)` for the futures of BENCHMARKS.md.
pub fn future_sizes() -> [(&'static str, usize, usize); 2] {
    let flaky = Flaky::new(0);
    [
        (
            "async fn(&Flaky) awaiting one op()",
            size_of_val(&one_op(&flaky)),
            size_of_val(&retryable_success(&flaky)),
        ),
        (
            "async fn(&Flaky, [u8; 256]) awaiting one op()",
            size_of_val(&one_op_with_buf(&flaky, [0; 256])),
            size_of_val(&one_op_with_buf_retryable(&flaky, [0; 256])),
        ),
    ]
}
