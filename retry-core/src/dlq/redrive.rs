//! Redrive: put dead letters back, safely, in small steps, on the record.
//!
//! Sending a letter again to a receiver that is not idempotent can be worse than leaving it:
//! a second deposit, a second order. A [`Redrive`] follows five steps:
//!
//! 1. **Classify**: a [`Filter`] by class, reason and age chooses the letters.
//! 2. **Judge**: [`Redrive::plan`] is the dry run: the letters a run would send, nothing sent.
//! 3. **Safety check**: the target must return the future of an `#[idempotent]` function
//!    ([`RedriveFuture`]); anything else is a compile error. A target that is idempotent by other
//!    means (an HTTP receiver honouring `Idempotency-Key`) says so with [`assume_idempotent`].
//!    When the letter records the original call's idempotency key, the target's key must be the
//!    same, or the letter is skipped: the receiver then answers from its store instead of
//!    repeating an effect that already happened.
//! 4. **Execute small**: at most [`limit`](Redrive::limit) letters (10 by default), at most
//!    [`rate`](Redrive::rate) sends per second (5), one at a time, from a snapshot taken before the
//!    first send (a letter that fails again is not picked up again by the same run), stopping
//!    once [`stop_after_failures`](Redrive::stop_after_failures) letters failed again (3).
//! 5. **Record**: a [`RedriveRecord`] (when, who, which filter, how many selected, succeeded,
//!    failed and skipped) goes to the store's audit log.
//!
//! A letter that succeeds is acknowledged; one that fails again is put back with `attempts`
//! increased, `last_failed_at` now and the new reason, `first_failed_at` kept.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use pin_project_lite::pin_project;
use serde::de::DeserializeOwned;

use super::{DeadLetter, DlqError, FailureClass, LegacyStore, RedriveRecord};
use crate::idempotency::Idempotent;
use crate::time::{Clock, SystemClock, format_rfc3339, parse_rfc3339};

/// Letters per run unless [`Redrive::limit`] says otherwise.
pub const DEFAULT_LIMIT: usize = 10;
/// Sends per second unless [`Redrive::rate`] says otherwise.
pub const DEFAULT_RATE: u32 = 5;
/// Failures that stop a run unless [`Redrive::stop_after_failures`] says otherwise.
pub const DEFAULT_STOP_AFTER_FAILURES: u32 = 3;

/// Why a letter of the snapshot was not sent after the run stopped.
const STOPPED_BEFORE: &str = "the run stopped before this letter";

/// Which letters a redrive chooses: all conditions must hold. Ages count from the letter's
/// `last_failed_at`.
///
/// ```
/// use retry_core::dlq::{FailureClass, Filter};
/// use std::time::Duration;
///
/// let filter = Filter::any()
///     .class(FailureClass::System)
///     .reason_contains("503")
///     .older_than(Duration::from_secs(300));
/// assert_eq!(filter.to_string(), r#"class=system reason~"503" age>=300s"#);
/// assert_eq!(Filter::any().to_string(), "all");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    class: Option<FailureClass>,
    reason_contains: Option<String>,
    older_than: Option<Duration>,
    newer_than: Option<Duration>,
}

impl Filter {
    /// Every pending letter.
    pub fn any() -> Self {
        Filter::default()
    }

    /// Only letters of `class` (`system`: the dependency failed; `data`: the message did).
    pub fn class(mut self, class: FailureClass) -> Self {
        self.class = Some(class);
        self
    }

    /// Only letters whose reason contains `text`.
    pub fn reason_contains(mut self, text: impl Into<String>) -> Self {
        self.reason_contains = Some(text.into());
        self
    }

    /// Only letters that last failed at least `age` ago (let the outage end first).
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Only letters that last failed at most `age` ago.
    pub fn newer_than(mut self, age: Duration) -> Self {
        self.newer_than = Some(age);
        self
    }

    /// Whether `letter` is chosen at `now`. A letter whose `last_failed_at` cannot be read has
    /// no age, so an age condition never chooses it.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetter, FailureClass, Filter};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let letter = DeadLetter {
    ///     msg_id: "M-1".into(), original: serde_json::json!({}),
    ///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(), attempts: 5,
    ///     first_failed_at: "1970-01-01T00:00:00Z".into(), last_failed_at: "1970-01-01T00:01:00Z".into(),
    ///     trace_id: "t".into(), class: FailureClass::System, error_type: "E".into(), idempotency_key: None,
    ///     source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
    /// };
    /// let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
    /// let filter = Filter::any().reason_contains("503").older_than(Duration::from_secs(60));
    /// assert!(!filter.matches(&letter, at(90)));
    /// assert!(filter.matches(&letter, at(120)));
    /// assert!(!Filter::any().class(FailureClass::Data).matches(&letter, at(120)));
    /// ```
    pub fn matches(&self, letter: &DeadLetter, now: SystemTime) -> bool {
        if self.class.is_some_and(|class| class != letter.class) {
            return false;
        }
        if let Some(text) = &self.reason_contains
            && !letter.reason.contains(text.as_str())
        {
            return false;
        }
        if self.older_than.is_none() && self.newer_than.is_none() {
            return true;
        }
        let Some(age) = parse_rfc3339(&letter.last_failed_at)
            .map(|at| now.duration_since(at).unwrap_or(Duration::ZERO))
        else {
            return false;
        };
        self.older_than.is_none_or(|min| age >= min) && self.newer_than.is_none_or(|max| age <= max)
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(class) = self.class {
            parts.push(format!("class={class}"));
        }
        if let Some(text) = &self.reason_contains {
            parts.push(format!("reason~{text:?}"));
        }
        if let Some(age) = self.older_than {
            parts.push(format!("age>={age:?}"));
        }
        if let Some(age) = self.newer_than {
            parts.push(format!("age<={age:?}"));
        }
        if parts.is_empty() {
            f.write_str("all")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// The future a redrive target returns: the future of an `#[idempotent]` function
/// ([`Idempotent`]), or one declared idempotent with [`assume_idempotent`].
///
/// ```compile_fail
/// use retry_core::dlq::{MemoryDeadLetters, Redrive};
///
/// async fn deposit(amount: u64) -> Result<u64, std::io::Error> { Ok(amount) }
///
/// # async fn run() {
/// let letters = MemoryDeadLetters::new();
/// // error: redrive target returns `impl Future<...>`, not the future of an `#[idempotent]` function
/// Redrive::new(&letters, "alice").run(|amount: u64| deposit(amount)).await;
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "redrive target returns `{Self}`, not the future of an `#[idempotent]` function",
    label = "resending dead letters here could repeat effects that already happened",
    note = "redrive into a function marked `#[idempotent(key = ..., store = ...)]`: a letter whose effect already happened is then answered from the store",
    note = "if the target is idempotent by other means (a receiver that honours `Idempotency-Key`), say so: `|req| retry_core::dlq::assume_idempotent(send(req))`"
)]
pub trait RedriveFuture: Future {
    /// The idempotency key the call will claim, when it is known before the call runs.
    fn idempotency_key(&self) -> Option<&str>;
}

impl<F: Future, K> RedriveFuture for Idempotent<F, K> {
    fn idempotency_key(&self) -> Option<&str> {
        Some(Idempotent::idempotency_key(self))
    }
}

pin_project! {
    /// A future its author declares idempotent for a redrive; see [`assume_idempotent`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    #[derive(Debug)]
    pub struct AssumeIdempotent<F> {
        #[pin]
        inner: F,
        key: Option<String>,
    }
}

/// The escape hatch of the redrive safety check: declares that resending to `future`'s
/// receiver cannot repeat an effect, although it is not an `#[idempotent]` function (say, an HTTP
/// receiver that deduplicates on `Idempotency-Key`). Greppable on purpose.
///
/// ```
/// use retry_core::dlq::{assume_idempotent, RedriveFuture};
///
/// let send = assume_idempotent(async { Ok::<_, std::io::Error>(()) }).with_key("M-1");
/// assert_eq!(send.idempotency_key(), Some("M-1"));
/// ```
pub fn assume_idempotent<F: Future>(future: F) -> AssumeIdempotent<F> {
    AssumeIdempotent {
        inner: future,
        key: None,
    }
}

impl<F> AssumeIdempotent<F> {
    /// The idempotency key the receiver will see, checked against the letter's like an
    /// `#[idempotent]` function's.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<F: Future> Future for AssumeIdempotent<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<F: Future> RedriveFuture for AssumeIdempotent<F> {
    fn idempotency_key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

/// What a run did with one letter of its snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Sent, answered `Ok`, acknowledged.
    Redriven,
    /// Sent and failed again: put back with `attempts` increased and this reason.
    FailedAgain(String),
    /// Not sent, for this reason.
    Skipped(String),
}

/// What a run did: its audit record, and each letter's outcome in the order they were taken.
#[derive(Debug, Clone)]
pub struct RedriveReport {
    /// The record written to the store's audit log.
    pub record: RedriveRecord,
    /// `(msg_id, outcome)` for every letter of the snapshot.
    pub letters: Vec<(String, Outcome)>,
}

/// A redrive could not be done, or could not be recorded.
#[derive(Debug)]
#[non_exhaustive]
pub enum RedriveError {
    /// The letters could not be listed: nothing was sent.
    Select(DlqError),
    /// The run happened (see `report`), but its audit record could not be written.
    Audit {
        /// What the run did.
        report: Box<RedriveReport>,
        /// Why the record was not written.
        error: DlqError,
    },
}

impl fmt::Display for RedriveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedriveError::Select(e) => write!(f, "redrive sent nothing: {e}"),
            RedriveError::Audit { report, error } => {
                let r = &report.record;
                write!(
                    f,
                    "redrive {} ran ({} succeeded, {} failed, {} skipped) but its audit record was not written: {error}",
                    r.run_id, r.succeeded, r.failed, r.skipped
                )
            }
        }
    }
}

impl std::error::Error for RedriveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedriveError::Select(e) | RedriveError::Audit { error: e, .. } => Some(e),
        }
    }
}

/// The future of a redrive run ([`Redrive::run`], [`Redrive::run_letters`]): its report, or why
/// it stopped.
pub type RedriveRun<'r> =
    std::pin::Pin<Box<dyn Future<Output = Result<RedriveReport, RedriveError>> + Send + 'r>>;

/// A redrive run over a [`LegacyStore`]; see the [module docs](self) for its five steps.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, Filter, MemoryDeadLetters, Redrive};
/// use retry_core::idempotency::{IdempotencyError, MemoryStore};
/// use retry_core::idempotent;
///
/// #[derive(Debug, serde::Deserialize)]
/// struct Deposit { msg_no: u64, amount: u64 }
///
/// #[derive(Debug)]
/// struct Rejected(IdempotencyError);
/// impl From<IdempotencyError> for Rejected { fn from(e: IdempotencyError) -> Self { Rejected(e) } }
/// impl std::fmt::Display for Rejected {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}", self.0) }
/// }
///
/// #[idempotent(key = req.msg_no, store = inbox)]
/// async fn deposit(inbox: &MemoryStore, req: Deposit) -> Result<u64, Rejected> { Ok(req.amount) }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let letters = MemoryDeadLetters::new();
/// letters.park(&DeadLetter {
///     msg_id: "1".into(), original: serde_json::json!({"msg_no": 1, "amount": 10}),
///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(), attempts: 5,
///     first_failed_at: "2026-08-19T02:11:03+09:00".into(), last_failed_at: "2026-08-19T02:12:47+09:00".into(),
///     trace_id: "a1b2c3d4".into(), class: FailureClass::System, error_type: "Rejected".into(),
///     idempotency_key: None,
///     source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
/// }).await?;
/// let inbox = MemoryStore::new();
///
/// let redrive = Redrive::new(&letters, "alice").filter(Filter::any().class(FailureClass::System));
/// assert_eq!(redrive.plan().await?.len(), 1, "the dry run");
/// let report = redrive.target("deposit").run(|req: Deposit| deposit(&inbox, req)).await?;
/// assert_eq!((report.record.succeeded, report.record.failed), (1, 0));
/// assert_eq!(letters.count().await?, 0);
/// assert_eq!(letters.redrives().await?.len(), 1, "on the record");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Redrive<'s, S: ?Sized> {
    store: &'s S,
    who: String,
    target: String,
    filter: Filter,
    limit: usize,
    rate: u32,
    stop_after_failures: u32,
    clock: Arc<dyn Clock>,
}

impl<'s, S: LegacyStore + ?Sized> Redrive<'s, S> {
    /// A run over `store`, started by `who` (recorded in the audit log), with the small
    /// defaults: every letter, at most 10 of them, 5 per second, stop after 3 failures.
    pub fn new(store: &'s S, who: impl Into<String>) -> Self {
        Redrive {
            store,
            who: who.into(),
            target: String::from("(unnamed)"),
            filter: Filter::any(),
            limit: DEFAULT_LIMIT,
            rate: DEFAULT_RATE,
            stop_after_failures: DEFAULT_STOP_AFTER_FAILURES,
            clock: Arc::new(SystemClock),
        }
    }

    /// Which letters to choose.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    /// At most `n` letters in this run.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = n;
        self
    }

    /// At most `per_second` sends per second (at least 1).
    pub fn rate(mut self, per_second: u32) -> Self {
        self.rate = per_second.max(1);
        self
    }

    /// Stop once `n` letters failed again in this run (at least 1): the target is not well yet.
    pub fn stop_after_failures(mut self, n: u32) -> Self {
        self.stop_after_failures = n.max(1);
        self
    }

    /// The target's name for the audit record: a function's name, a URL.
    pub fn target(mut self, name: impl Into<String>) -> Self {
        self.target = name.into();
        self
    }

    /// Where ages and the record's times are read (tests move a
    /// [`ManualClock`](crate::time::ManualClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The dry run: the letters a run would send now, in order, nothing sent or recorded.
    ///
    /// # Errors
    /// When the store cannot list its letters.
    pub async fn plan(&self) -> Result<Vec<DeadLetter>, DlqError> {
        let now = self.clock.now();
        let mut letters = self.store.list().await?;
        letters.retain(|letter| self.filter.matches(letter, now));
        letters.truncate(self.limit);
        Ok(letters)
    }

    /// Runs the redrive: each chosen letter's `original` is decoded as `Req` and handed to
    /// `target`, which must return the future of an `#[idempotent]` function. A letter whose
    /// original does not decode is skipped (and stays pending).
    ///
    /// # Errors
    /// [`RedriveError::Select`] when the letters cannot be listed (nothing sent);
    /// [`RedriveError::Audit`] when the run's record cannot be written.
    ///
    /// The run is a boxed `Send` future: the target's bound is then checked once, where `run` is
    /// called (a bound on an `async fn` is checked again at its future and at its `.await`, so
    /// a target that is not idempotent was reported three times). A redrive is a batch of
    /// network calls; one allocation per run does not show.
    pub fn run<'r, Req, Fut, T, E>(
        self,
        mut target: impl FnMut(Req) -> Fut + Send + 'r,
    ) -> RedriveRun<'r>
    where
        's: 'r,
        S: Sync,
        Req: DeserializeOwned,
        Fut: RedriveFuture<Output = Result<T, E>> + Send + 'r,
        T: Send + 'r,
        E: fmt::Display + Send + 'r,
    {
        Box::pin(self.execute(move |letter| {
            serde_json::from_value(letter.original.clone())
                .map(&mut target)
                .map_err(|e| format!("original does not decode as the target's input: {e}"))
        }))
    }

    /// Like [`run`](Self::run), but `target` gets the whole letter (its `msg_id`, its key): what
    /// a redrive over HTTP needs.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn run_letters<'r, Fut, T, E>(
        self,
        mut target: impl FnMut(&DeadLetter) -> Fut + Send + 'r,
    ) -> RedriveRun<'r>
    where
        's: 'r,
        S: Sync,
        Fut: RedriveFuture<Output = Result<T, E>> + Send + 'r,
        T: Send + 'r,
        E: fmt::Display + Send + 'r,
    {
        Box::pin(self.execute(move |letter| Ok(target(letter))))
    }

    async fn execute<Fut, T, E>(
        self,
        mut make: impl FnMut(&DeadLetter) -> Result<Fut, String>,
    ) -> Result<RedriveReport, RedriveError>
    where
        Fut: RedriveFuture<Output = Result<T, E>>,
        E: fmt::Display,
    {
        let started_at = format_rfc3339(self.clock.now());
        // The snapshot: a letter put back during this run is not in it, so it is not sent twice.
        let snapshot = self.plan().await.map_err(RedriveError::Select)?;
        let mut run = Run::new(&self, started_at, snapshot.len());
        let interval = Duration::from_secs(1) / self.rate;
        let mut next_send = tokio::time::Instant::now();
        for chosen in &snapshot {
            if run.record.stopped.is_some() {
                run.skip(&chosen.msg_id, STOPPED_BEFORE);
                continue;
            }
            // The letter as it is now: someone may have acknowledged or put it back meanwhile.
            let letter = match self.store.get(&chosen.msg_id).await {
                Ok(Some(letter)) => letter,
                Ok(None) => {
                    run.skip(&chosen.msg_id, "no longer pending");
                    continue;
                }
                Err(e) => {
                    run.stop(format!("dead-letter store failed: {e}"));
                    run.skip(&chosen.msg_id, STOPPED_BEFORE);
                    continue;
                }
            };
            let call = match make(&letter) {
                Ok(call) => call,
                Err(why) => {
                    run.skip(&letter.msg_id, why);
                    continue;
                }
            };
            if let (Some(recorded), Some(now)) =
                (letter.idempotency_key.as_deref(), call.idempotency_key())
                && recorded != now
            {
                run.skip(
                    &letter.msg_id,
                    format!("the target would claim idempotency key {now:?}, not the original call's {recorded:?}: not sent"),
                );
                continue;
            }
            tokio::time::sleep_until(next_send).await;
            next_send = tokio::time::Instant::now() + interval;
            match call.await {
                Ok(_) => self.acknowledge(&mut run, &letter.msg_id).await,
                Err(e) => self.put_back(&mut run, letter, e.to_string()).await,
            }
            if run.record.failed >= u64::from(self.stop_after_failures)
                && run.record.stopped.is_none()
            {
                run.stop(format!(
                    "{} letters failed again, the threshold of this run",
                    run.record.failed
                ));
            }
        }
        run.record.finished_at = format_rfc3339(self.clock.now());
        let report = RedriveReport {
            record: run.record,
            letters: run.letters,
        };
        tracing::info!(
            run_id = %report.record.run_id,
            who = %report.record.who,
            filter = %report.record.filter,
            target = %report.record.target,
            selected = report.record.selected,
            succeeded = report.record.succeeded,
            failed = report.record.failed,
            skipped = report.record.skipped,
            stopped = report.record.stopped.as_deref(),
            "dead letters redriven"
        );
        match self.store.record_redrive(&report.record).await {
            Ok(()) => Ok(report),
            Err(error) => Err(RedriveError::Audit {
                report: Box::new(report),
                error,
            }),
        }
    }

    async fn acknowledge(&self, run: &mut Run, msg_id: &str) {
        run.record.succeeded += 1;
        run.letters.push((msg_id.to_owned(), Outcome::Redriven));
        if let Err(e) = self.store.ack(msg_id).await {
            // The effect happened and the letter is still pending: a later redrive is answered
            // from the receiver's store, so nothing repeats; but this store is in trouble.
            run.stop(format!(
                "dead-letter store failed to acknowledge {msg_id} (still pending): {e}"
            ));
        }
    }

    async fn put_back(&self, run: &mut Run, letter: DeadLetter, error: String) {
        let reason = format!("redrive by {} failed: {error}", self.who);
        let again = DeadLetter {
            attempts: letter.attempts.saturating_add(1),
            last_failed_at: format_rfc3339(self.clock.now()),
            reason: reason.clone(),
            ..letter
        };
        run.record.failed += 1;
        run.letters
            .push((again.msg_id.clone(), Outcome::FailedAgain(reason)));
        if let Err(e) = self.store.put_back(&again).await {
            // The letter as it was stays pending: nothing is lost, only this attempt's count.
            run.stop(format!(
                "dead-letter store failed to put back {} (still pending as it was): {e}",
                again.msg_id
            ));
        }
    }
}

/// A run's tally while it goes.
struct Run {
    record: RedriveRecord,
    letters: Vec<(String, Outcome)>,
}

impl Run {
    fn new<S: ?Sized>(redrive: &Redrive<'_, S>, started_at: String, selected: usize) -> Self {
        Run {
            record: RedriveRecord {
                run_id: format!("{:016x}", rand::random::<u64>()),
                who: redrive.who.clone(),
                filter: redrive.filter.to_string(),
                target: redrive.target.clone(),
                finished_at: started_at.clone(),
                started_at,
                limit: redrive.limit as u64,
                rate_per_second: redrive.rate,
                selected: selected as u64,
                succeeded: 0,
                failed: 0,
                skipped: 0,
                stopped: None,
            },
            letters: Vec::with_capacity(selected),
        }
    }

    fn skip(&mut self, msg_id: &str, why: impl Into<String>) {
        self.record.skipped += 1;
        self.letters
            .push((msg_id.to_owned(), Outcome::Skipped(why.into())));
    }

    fn stop(&mut self, why: String) {
        tracing::warn!(run_id = %self.record.run_id, "redrive stopped: {why}");
        self.record.stopped = Some(why);
    }
}
