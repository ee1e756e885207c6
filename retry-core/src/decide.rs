//! The retry state machine: every decision between two attempts is taken here, once, for both
//! the code `#[retryable]` emits and [`Policy::retry`](crate::Policy::retry), and reported (its
//! tracing events and counters).

use std::panic::Location;
use std::time::Duration;

use tokio::time::Instant;

use crate::attempt_timeout::{Bounded, OnTimeout};
use crate::backoff;
use crate::budget::RetryBudget;
use crate::classify::{Classifier, Decision};
use crate::give_up::GiveUp;
use crate::hook::{RetryContext, RetryHook};
use crate::policy::{Jitter, Policy};
use crate::scope;
use crate::site::{self, Site};
use crate::site::{Warning, first_time_at};

/// What the caller of [`State::after_attempt`] does next.
#[derive(Debug)]
pub enum Next<T, E> {
    /// Return this to the caller: a success, or the last error on give-up.
    Return(Result<T, E>),
    /// Wait this long (zero: not at all), then start another attempt.
    Retry(Duration),
}

/// Bookkeeping of one retrying call. The function it retries (its [`Site`]) is passed to the
/// methods that count or log, not kept: the caller has it anyway, in a `static`.
///
/// Cheap on the success path, and on a failure that is simply retried: the waits are computed
/// from the attempt number and the policy. What only some failures need — the jitter's
/// generator (a wait with a random part), the last decorrelated wait, failure times for a dead
/// letter, the give-up reason — sits behind one `Box` made when first needed. The clock is read
/// before a failure only for a policy with a deadline, whose start it keeps here.
#[derive(Debug)]
pub struct State<'p> {
    policy: &'p Policy,
    budget: Option<&'p RetryBudget>,
    /// When the first attempt started, if the policy has a deadline.
    started: Option<Instant>,
    failing: Option<Box<Failing>>,
    attempt: u32,
    /// Collapsed to a single attempt (inside another retry, or `.single_attempt()`): its
    /// give-up belongs to an outer layer. Only a failure or a budget needs to know, so it is
    /// read from the scope then (see [`State::collapse_if_single`]).
    collapsed: bool,
    /// Whether failure times are kept (for a dead letter).
    record_failures: bool,
}

/// What some failures need; see [`State`].
#[derive(Debug)]
struct Failing {
    /// The jitter's generator, made at the first wait with a random part.
    rng: Option<crate::random::SmallRng>,
    /// The last wait, for decorrelated jitter (the policy's `base` before the first).
    prev: u64,
    gave_up: Option<GiveUp>,
    /// How the error the call gave up on was classified: a collapsed call hands it to its
    /// outer layer.
    decision: Option<Decision>,
    failures: Option<Failures>,
}

/// When and why a call's attempts failed: the raw material of a dead letter.
#[derive(Debug, Clone)]
pub struct Failures {
    /// When the first attempt failed.
    pub first: std::time::SystemTime,
    /// When the last attempt failed.
    pub last: std::time::SystemTime,
    /// The give-up reason in words, once the call gave up.
    pub reason: String,
}

impl<'p> State<'p> {
    /// A call that has made no attempt yet.
    #[inline]
    pub fn new(policy: &'p Policy) -> Self {
        State {
            policy,
            budget: policy.knobs().budget,
            started: None,
            failing: None,
            attempt: 0,
            collapsed: false,
            record_failures: false,
        }
    }

    /// Uses `budget` instead of the policy's own.
    pub fn with_budget(mut self, budget: &'p RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Keeps when attempts failed and why the call gave up, for a dead letter
    /// ([`failures`](Self::failures)).
    pub fn recording_failures(mut self) -> Self {
        self.record_failures = true;
        self
    }

    /// The failure state, made now if the call has none yet.
    fn failing(&mut self) -> &mut Failing {
        let base = backoff::nanos(self.policy.knobs().base);
        self.failing.get_or_insert_with(|| {
            Box::new(Failing {
                rng: None,
                prev: base,
                gave_up: None,
                decision: None,
                failures: None,
            })
        })
    }

    /// The backoff after the attempt that just failed, in nanoseconds: the waits of a
    /// [`Backoff`](crate::backoff::Backoff) of the policy (the same functions compute both).
    #[inline(always)]
    fn backoff(&mut self) -> u64 {
        let knobs = self.policy.knobs();
        let base = backoff::nanos(knobs.base);
        if base == 0 {
            // Every jitter of a zero base waits zero (decorrelated's `prev` stays zero too).
            return 0;
        }
        let cap = backoff::nanos(knobs.cap);
        let d = backoff::exponential_nanos(base, cap, self.attempt);
        let decorrelated = matches!(knobs.jitter, Jitter::Decorrelated);
        let prev = if decorrelated {
            self.failing().prev
        } else {
            base
        };
        let wait = backoff::jittered(knobs.jitter, base, cap, d, prev, |lo, hi| {
            let failing = self.failing();
            let rng = failing
                .rng
                .get_or_insert_with(|| backoff::fresh_rng(knobs.seed));
            backoff::draw(rng, lo, hi)
        });
        if decorrelated {
            self.failing().prev = wait;
        }
        wait
    }

    /// Counts the attempt about to start; `true` when no other may follow it (the policy's
    /// last, or the only one of a call collapsed to a single attempt), so by-value arguments
    /// can be moved into it instead of cloned. (`site` is the retrying function's; the call
    /// itself is counted in metrics by its [`Retrying`](crate::Retrying), at its first poll.)
    #[inline(always)]
    pub fn start_attempt(&mut self, site: &'static Site) -> bool {
        let _ = site;
        let first = self.attempt == 0;
        // Never past `u32::MAX`: no attempt starts after the policy's last.
        self.attempt = self.attempt.wrapping_add(1);
        if first {
            self.first_attempt();
        }
        scope::note_attempt(self.attempt, self.policy.knobs().max_attempts);
        // An idempotent body retried inside its claim runs its steps again (not on the first
        // attempt: the success path pays a comparison).
        #[cfg(feature = "idempotency")]
        if self.attempt > 1 {
            crate::idempotency::attempt_retried();
        }
        // The scope is read only by a caller that uses the answer (generated code with a
        // by-value argument); otherwise the compiler drops the read.
        self.attempt >= self.limit() || (self.attempt == 1 && scope::single_attempt_here())
    }

    /// Attempts allowed: the policy's, or one for a collapsed call.
    #[inline(always)]
    fn limit(&self) -> u32 {
        if self.collapsed {
            1
        } else {
            self.policy.knobs().max_attempts
        }
    }

    /// Whether this call was collapsed to a single attempt (nested in another retry, or
    /// `.single_attempt()`): it parks no dead letter and spends no budget, as the layer that
    /// owns the give-up does both. Known once an attempt has failed (or, with a budget, once
    /// the first has started): nothing else depends on it.
    pub fn collapsed(&self) -> bool {
        self.collapsed
    }

    /// Reads the retry scope, where the call's [`Retrying`](crate::Retrying) says whether this
    /// is the one layer that retries. The scope is the same at every poll of the call, so it
    /// is read when first needed: at the first failure, or at the first attempt with a budget.
    #[inline]
    fn collapse_if_single(&mut self) {
        if scope::single_attempt_here() {
            self.collapsed = true;
        }
    }

    /// How long the attempt about to start may run with `attempt_timeout` = `timeout`: the
    /// timeout, or the time left before the deadline when that is shorter, so the call never
    /// outlives its deadline.
    pub fn attempt_limit(&self, timeout: Duration) -> Duration {
        match (self.policy.knobs().deadline, self.started) {
            (Some(deadline), Some(started)) => {
                timeout.min(deadline.saturating_sub(started.elapsed()))
            }
            _ => timeout,
        }
    }

    /// The attempt about to start, bounded by the policy's `attempt_timeout` cut to the time
    /// left before the deadline ([`attempt_limit`](Self::attempt_limit)), and failing with
    /// the error `on_timeout` makes when that runs out. A call whose error cannot be made from
    /// [`Elapsed`](crate::Elapsed) cannot cut the attempt off: it runs unbounded, and the first attempt of such
    /// a call says what to write, at WARN once per `caller`.
    ///
    /// Always inlined: under fat LTO the compiler left it out of line in `Policy::retry`'s poll
    /// once that poll became smaller, a call per attempt (23 instructions of case (a)).
    #[inline(always)]
    pub fn bound<F, E>(
        &self,
        site: &'static Site,
        caller: &'static Location<'static>,
        on_timeout: OnTimeout<E>,
        attempt: F,
    ) -> Bounded<F, E> {
        match (self.policy.knobs().attempt_timeout, on_timeout) {
            (None, _) => Bounded::unbounded(attempt),
            (Some(timeout), OnTimeout::Fail(elapsed)) => {
                Bounded::timed(self.attempt_limit(timeout), attempt, elapsed)
            }
            (Some(timeout), OnTimeout::RunOn { fix }) => {
                if self.attempt <= 1 {
                    untimed(site, caller, timeout, fix);
                }
                Bounded::unbounded(attempt)
            }
        }
    }

    #[inline(always)]
    fn first_attempt(&mut self) {
        if self.policy.knobs().deadline.is_some() {
            self.start_clock();
        }
        if let Some(budget) = self.budget {
            self.deposit(budget);
        }
    }

    /// Keeps when the first attempt started, for the deadline: the one thing a failure needs
    /// that must be taken before it.
    #[cold]
    #[inline(never)]
    fn start_clock(&mut self) {
        self.started = Some(Instant::now());
    }

    #[cold]
    #[inline(never)]
    fn deposit(&mut self, budget: &RetryBudget) {
        // A collapsed call is part of its outer call, which deposited already: depositing
        // again would let nested calls earn the outer layer extra retries.
        self.collapse_if_single();
        if !self.collapsed {
            budget.deposit();
        }
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Why the call gave up, once it has.
    pub fn gave_up(&self) -> Option<GiveUp> {
        self.failing.as_ref().and_then(|f| f.gave_up)
    }

    /// How the error the call gave up on was classified, once it has.
    pub fn last_decision(&self) -> Option<Decision> {
        self.failing.as_ref().and_then(|f| f.decision)
    }

    /// When and why attempts failed, once one has (kept only when
    /// [`recording_failures`](Self::recording_failures) asked for it).
    pub fn failures(&self) -> Option<&Failures> {
        self.failing.as_ref().and_then(|f| f.failures.as_ref())
    }

    /// Decides what follows an attempt's outcome. `on_retry` sees the attempt number, the error
    /// and the chosen wait before the error is dropped; on give-up the error is returned.
    #[inline(always)]
    pub fn after_attempt<T, E>(
        &mut self,
        site: &'static Site,
        outcome: Result<T, E>,
        classifier: &mut impl Classifier<E>,
        on_retry: &mut impl RetryHook<E>,
    ) -> Next<T, E> {
        match outcome {
            Ok(value) => Next::Return(Ok(value)),
            Err(error) => {
                // Classified here, where the caller's classifier is known (a function the
                // compiler can call directly, or inline), not behind the reference `failed` gets.
                let decision = classifier.decide(&error);
                match self.failed(site, decision, classifier, on_retry, &error) {
                    Some(wait) => Next::Retry(wait),
                    None => Next::Return(Err(error)),
                }
            }
        }
    }

    /// The wait before the next attempt, or `None` on give-up. The error stays with the
    /// caller, who drops it or returns it, and the answer comes back in registers.
    #[cold]
    #[inline(never)]
    fn failed<E>(
        &mut self,
        site: &'static Site,
        decision: Decision,
        classifier: &mut impl Classifier<E>,
        on_retry: &mut impl RetryHook<E>,
        error: &E,
    ) -> Option<Duration> {
        if self.attempt == 1 {
            self.collapse_if_single();
        }
        if self.record_failures {
            self.record_failure();
        }
        match self.judge(site, decision) {
            Ok(wait) => {
                // At INFO, with the error: a retry is what an operator looks for first when a
                // dependency is struggling. Only failures pay for the words.
                if tracing::enabled!(target: "retry_core", tracing::Level::INFO) {
                    retrying_event(site, self.attempt, decision, classifier.reason(error), wait);
                }
                site::retried(site);
                on_retry.before_wait(&RetryContext::new(site, self.attempt, error, wait));
                Some(wait)
            }
            Err(give_up) => {
                // "not retryable: 404 Not Found", "gave up after 5 attempts: 503 Service Unavailable"
                self.give_up(site, decision, give_up, classifier.reason(error));
                None
            }
        }
    }

    /// Keeps when this failure happened (for a dead letter).
    fn record_failure(&mut self) {
        let now = std::time::SystemTime::now();
        let failures = self.failing().failures.get_or_insert_with(|| Failures {
            first: now,
            last: now,
            reason: String::new(),
        });
        failures.last = now;
    }

    /// Records and reports the give-up. Not generic, so every error type shares it.
    #[cold]
    #[inline(never)]
    fn give_up(
        &mut self,
        site: &'static Site,
        decision: Decision,
        give_up: GiveUp,
        cause: Option<String>,
    ) {
        let reason = match &cause {
            Some(cause) => format!("{give_up}: {cause}"),
            None => give_up.to_string(),
        };
        let (function, cause) = (site.function(), cause.unwrap_or_default());
        // One event at the level given: a `tracing` level is part of its call site, so the two
        // levels are two call sites.
        macro_rules! giving_up {
            ($level:ident) => {
                tracing::$level!(target: "retry_core",
                    function,
                    module = site.module(),
                    attempt = self.attempt,
                    ?decision,
                    error = cause,
                    reason,
                    "giving up"
                )
            };
        }
        // Giving up after retrying is news; a first attempt that was never going to be
        // retried (a 404, a nested single attempt) is the caller's business.
        if self.attempt > 1 {
            giving_up!(warn);
        } else {
            giving_up!(debug);
        }
        site::gave_up(site, give_up.label());
        let failing = self.failing();
        failing.gave_up = Some(give_up);
        failing.decision = Some(decision);
        if let Some(failures) = &mut failing.failures {
            failures.reason = reason;
        }
    }

    /// The wait before the next attempt, or why there is none.
    #[inline(always)]
    fn judge(&mut self, site: &'static Site, decision: Decision) -> Result<Duration, GiveUp> {
        let knobs = self.policy.knobs();
        let floor = match decision {
            // First, whatever the error: a collapsed call's give-up belongs to the outer layer,
            // which classifies the error itself (a `Stop` here must not park a letter of its own).
            _ if self.collapsed => return Err(GiveUp::SingleAttempt),
            Decision::Stop => return Err(GiveUp::NotRetryable),
            _ if self.attempt >= knobs.max_attempts => {
                return Err(GiveUp::Exhausted {
                    attempts: self.attempt,
                });
            }
            Decision::RetryAfter(asked) if asked > knobs.max_retry_after => {
                return Err(GiveUp::RetryAfterTooLong {
                    asked,
                    limit: knobs.max_retry_after,
                });
            }
            Decision::RetryAfter(asked) => Some(asked),
            Decision::Retry => None,
        };
        // `Retry-After` is a floor, and the clients are still spread above it: the server's
        // wait plus our jittered backoff. `max(floor, backoff)` would make the wait the same
        // fixed point for every client the server answered alike (an HTTP-date sends them all
        // to one instant), exactly the herd the jitter is there to break up.
        let backoff = Duration::from_nanos(self.backoff());
        let wait = floor.map_or(backoff, |floor| floor.saturating_add(backoff));
        if let (Some(deadline), Some(started)) = (knobs.deadline, self.started) {
            let spent = started.elapsed();
            // `>=`: no attempt starts at or after the deadline, where it would have no time.
            if spent.saturating_add(wait) >= deadline {
                return Err(GiveUp::Deadline {
                    deadline,
                    spent,
                    wait,
                });
            }
        }
        // Last, so a retry that would not happen anyway does not spend the budget.
        if self.budget.is_some_and(|budget| !budget.withdraw()) {
            site::budget_refused(site);
            return Err(GiveUp::BudgetExhausted);
        }
        Ok(wait)
    }
}

/// The INFO event of a failed attempt that will be retried.
#[cold]
#[inline(never)]
fn retrying_event(
    site: &'static Site,
    attempt: u32,
    decision: Decision,
    error: Option<String>,
    wait: Duration,
) {
    tracing::info!(target: "retry_core",
        function = site.function(),
        module = site.module(),
        attempt,
        ?decision,
        error = error.unwrap_or_default(),
        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        "attempt failed; retrying"
    );
}

/// Says once per call site that its policy's `attempt_timeout` is not applied, and what to write.
#[cold]
#[inline(never)]
fn untimed(
    site: &'static Site,
    caller: &'static Location<'static>,
    timeout: Duration,
    fix: &'static str,
) {
    if first_time_at(Warning::Untimed, caller) {
        tracing::warn!(target: "retry_core",
            function = site.function(),
            at = %caller,
            ?timeout,
            "policy has attempt_timeout but this call cannot return a timeout error; {fix}",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ByClassify;
    use crate::hook::NoHook;
    use std::io;

    static LABELS: [::metrics::Label; 2] = Site::labels("state_test", "");
    static SITE: Site = Site::new("state_test", "", &LABELS);

    /// Runs one call whose every attempt fails with `kind`, to its give-up.
    fn failing_call(policy: &Policy, kind: io::ErrorKind) -> State<'_> {
        let mut state = State::new(policy).recording_failures();
        loop {
            state.start_attempt(&SITE);
            let outcome: io::Result<()> = Err(kind.into());
            if let Next::Return(_) =
                state.after_attempt(&SITE, outcome, &mut ByClassify, &mut NoHook)
            {
                return state;
            }
        }
    }

    #[test]
    fn a_failing_call_waits_what_a_backoff_of_its_policy_gives() {
        for jitter in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            for base in [Duration::ZERO, Duration::from_millis(7)] {
                let policy = Policy::new()
                    .max_attempts(40)
                    .base(base)
                    .cap(Duration::from_secs(2))
                    .jitter(jitter)
                    .seed(11);
                let mut state = State::new(&policy);
                let mut waits = Vec::new();
                loop {
                    state.start_attempt(&SITE);
                    let failed: io::Result<()> = Err(io::ErrorKind::TimedOut.into());
                    match state.after_attempt(&SITE, failed, &mut ByClassify, &mut NoHook) {
                        Next::Retry(wait) => waits.push(wait),
                        Next::Return(_) => break,
                    }
                }
                let expected: Vec<_> = crate::backoff::Backoff::new(&policy).take(39).collect();
                assert_eq!(waits, expected, "{jitter:?}, base {base:?}");
            }
        }
    }

    #[test]
    fn a_call_that_succeeds_first_makes_no_failure_box_and_one_that_fails_keeps_its_story() {
        let policy = Policy::new().max_attempts(3).base(Duration::ZERO);
        let mut ok = State::new(&policy).recording_failures();
        ok.start_attempt(&SITE);
        let one: io::Result<u8> = Ok(1);
        assert!(matches!(
            ok.after_attempt(&SITE, one, &mut ByClassify, &mut NoHook),
            Next::Return(Ok(1))
        ));
        assert!(ok.failing.is_none(), "no failure state before a failure");
        assert_eq!((ok.gave_up(), ok.failures().is_none()), (None, true));

        let exhausted = failing_call(&policy, io::ErrorKind::TimedOut);
        assert_eq!(exhausted.gave_up(), Some(GiveUp::Exhausted { attempts: 3 }));
        assert_eq!(exhausted.last_decision(), Some(Decision::Retry));
        assert!(exhausted.failures().is_some_and(|f| !f.reason.is_empty()));

        let stopped = failing_call(&policy, io::ErrorKind::NotFound);
        assert_eq!(stopped.gave_up(), Some(GiveUp::NotRetryable));
        assert_eq!(stopped.attempts(), 1);
    }
}
