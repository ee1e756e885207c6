//! Redrive: put dead letters back, safely, in small steps, on the record.
//!
//! Sending a letter again to a receiver that is not idempotent can be worse than leaving it:
//! a second deposit, a second order. A [`Redrive`] follows five steps:
//!
//! 1. **Classify**: a [`Filter`] by class, source function, reason and age chooses the
//!    letters; the store is asked a page at a time ([`DeadLetterStore::page`]), never for
//!    every letter at once.
//! 2. **Judge**: [`Redrive::plan`] is the dry run: the letters a run would send, nothing sent.
//! 3. **Safety check**: the target must return the future of an `#[idempotent]` function
//!    ([`RedriveFuture`]); anything else is a compile error. A target that is idempotent by other
//!    means (an HTTP receiver honouring `Idempotency-Key`) says so with [`assume_idempotent`].
//!    Then each letter is checked, and refused (skipped, and said why) when a resend could
//!    repeat its effect all the same: its original was redacted; it first failed longer ago
//!    than the target keeps idempotency keys ([`Redrive::retention`], 30 days by default), or
//!    its recorded key expiry has passed; its key was claimed in another scope than the
//!    target's ([`Redrive::scope`]); or the target would claim another key than the one the
//!    letter records.
//! 4. **Execute small**: at most [`limit`](Redrive::limit) letters (10 by default), at most
//!    [`rate`](Redrive::rate) sends per second (5), one at a time, from a snapshot taken before the
//!    first send (a letter that fails again is not picked up again by the same run), stopping
//!    once [`stop_after_failures`](Redrive::stop_after_failures) letters failed again (3). Each
//!    letter is [leased](DeadLetterStore::lease) to the run before it is looked at, and the
//!    lease renewed while it is sent, so two runs at once never send the same letter: the
//!    other run skips it.
//! 5. **Record**: one audit row per letter ([`AuditEntry`]), written before the letter is sent
//!    and completed with its outcome after (a run killed in between leaves the row without
//!    an outcome: the letter may or may not have reached the target), and a summary
//!    [`RedriveRecord`] (when, who, which filter, how many selected, succeeded, failed and
//!    skipped) at the end.
//!
//! A letter that succeeds is [resolved](DeadLetterStore::resolve) by the run (who, when, which
//! run); one that fails again is [put back](DeadLetterStore::put_back): `attempts` + 1, the new
//! reason and `last_failed_at`, the earlier give-up in its history, `first_failed_at` kept.
//!
//! [`AuditEntry`]: super::AuditEntry
//! [`RedriveRecord`]: super::RedriveRecord

mod filter;
mod report;
mod run;
mod safety;
mod target;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use filter::Filter;
pub use report::{Outcome, RedriveError, RedriveReport, RedriveRun};
pub use target::{AssumeIdempotent, RedriveFuture, assume_idempotent};

use serde::de::DeserializeOwned;

use super::{DeadLetter, DeadLetterStore, DlqError};
use crate::time::{Clock, SystemClock};
use safety::Safety;

/// Letters per run unless [`Redrive::limit`] says otherwise.
pub const DEFAULT_LIMIT: usize = 10;
/// Sends per second unless [`Redrive::rate`] says otherwise.
pub const DEFAULT_RATE: u32 = 5;
/// Failures that stop a run unless [`Redrive::stop_after_failures`] says otherwise.
pub const DEFAULT_STOP_AFTER_FAILURES: u32 = 3;
/// How long a run holds a letter unless [`Redrive::lease`] says otherwise; renewed every third
/// of it while the letter is sent.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// How long the target keeps idempotency keys unless [`Redrive::retention`] says otherwise:
/// what `#[idempotent]` keeps them for by default.
pub const DEFAULT_RETENTION: Duration = crate::idempotency::DEFAULT_RETENTION;

/// Letters asked of the store at a time while choosing (fewer for a smaller run).
const SELECT_PAGE: usize = 200;

/// A redrive run over a [`DeadLetterStore`]; see the [module docs](self) for its five steps.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, FailureClass, Filter, MemoryDeadLetters, Redrive};
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
/// let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
/// let letters = MemoryDeadLetters::new();
/// letters.park(&DeadLetter {
///     msg_id: "1".into(), original: serde_json::json!({"msg_no": 1, "amount": 10}),
///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(), attempts: 5,
///     first_failed_at: an_hour_ago, last_failed_at: an_hour_ago,
///     trace_id: "a1b2c3d4".into(), class: FailureClass::System, error_type: "Rejected".into(),
///     idempotency_key: None, source: Some("app::deposit".into()), redacted: false,
///     key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
/// }).await?;
/// let inbox = MemoryStore::new();
///
/// let redrive = Redrive::new(&letters, "alice").filter(Filter::any().class(FailureClass::System));
/// assert_eq!(redrive.plan().await?.len(), 1, "the dry run");
/// let report = redrive.target("deposit").run(|req: Deposit| deposit(&inbox, req)).await?;
/// assert_eq!((report.record.succeeded, report.record.failed), (1, 0));
/// assert_eq!(letters.stats().await?.pending, 0);
/// assert_eq!(letters.get("1").await?.unwrap().resolved.unwrap().by, "alice");
/// let rows = letters.audit_rows(Some(&report.record.run_id)).await?;
/// assert_eq!(rows[0].outcome.as_deref(), Some("redriven"), "one row per letter");
/// assert_eq!(letters.redrives().await?.len(), 1, "and the run on the record");
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
    lease: Duration,
    safety: Safety,
    clock: Arc<dyn Clock>,
}

impl<'s, S: DeadLetterStore + ?Sized> Redrive<'s, S> {
    /// A run over `store`, started by `who` (recorded in the audit log), with the small
    /// defaults: every letter, at most 10 of them, 5 per second, stop after 3 failures, a target
    /// that keeps keys 30 days, in no particular scope.
    pub fn new(store: &'s S, who: impl Into<String>) -> Self {
        Redrive {
            store,
            who: who.into(),
            target: String::from("(unnamed)"),
            filter: Filter::any(),
            limit: DEFAULT_LIMIT,
            rate: DEFAULT_RATE,
            stop_after_failures: DEFAULT_STOP_AFTER_FAILURES,
            lease: DEFAULT_LEASE,
            safety: Safety {
                retention: DEFAULT_RETENTION,
                scope: None,
            },
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

    /// How long the target keeps idempotency keys (`retention = ..` of its `#[idempotent]`,
    /// 30 days by default): a letter that first failed longer ago than that is refused, since
    /// the receiver may have purged its key and would run the effect again.
    ///
    /// ```
    /// # use retry_core::dlq::{MemoryDeadLetters, Redrive};
    /// # let letters = MemoryDeadLetters::new();
    /// let redrive = Redrive::new(&letters, "alice").retention(std::time::Duration::from_secs(7 * 86_400));
    /// ```
    pub fn retention(mut self, retention: Duration) -> Self {
        self.safety.retention = retention;
        self
    }

    /// The scope the target claims idempotency keys in: a letter whose key was claimed in
    /// another scope ([`DeadLetter::key_scope`]) is refused, since the target would not find
    /// the first call's record. Letters that do not record a scope are not checked.
    ///
    /// ```
    /// # use retry_core::dlq::{MemoryDeadLetters, Redrive};
    /// # let letters = MemoryDeadLetters::new();
    /// let redrive = Redrive::new(&letters, "alice").scope("tenant-42");
    /// ```
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.safety.scope = Some(scope.into());
        self
    }

    /// How long the run holds each letter (at least a second; 60 s by default), renewed every
    /// third of it while the letter is being sent: another run skips the letter meanwhile,
    /// and takes it over once a killed run's lease has run out.
    pub fn lease(mut self, ttl: Duration) -> Self {
        self.lease = ttl.max(Duration::from_secs(1));
        self
    }

    /// Where ages and the record's times are read (tests move a
    /// [`ManualClock`](crate::time::ManualClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The dry run: the letters a run would choose now, in order, nothing sent or recorded.
    /// (The safety check is made on each letter as the run takes it.)
    ///
    /// # Errors
    /// When the store cannot list its letters.
    pub async fn plan(&self) -> Result<Vec<DeadLetter>, DlqError> {
        self.select(|letter| letter).await
    }

    /// The chosen letters, each through `keep`: pages of the filter's class and source, reason
    /// and age checked here, until `limit` are chosen or the pages run out.
    async fn select<T>(&self, mut keep: impl FnMut(DeadLetter) -> T) -> Result<Vec<T>, DlqError> {
        let now = self.clock.now();
        let mut chosen = Vec::new();
        // Pages no larger than the run: letters can be large, and `--limit 10` should not
        // read 200 of them.
        let mut page = self.filter.page(self.limit.clamp(1, SELECT_PAGE));
        while chosen.len() < self.limit {
            let letters = self.store.page(&page).await?;
            let Some(last) = letters.last() else {
                break;
            };
            page = page.next_after(last);
            for letter in letters {
                if chosen.len() == self.limit {
                    break;
                }
                if self.filter.matches(&letter, now) {
                    chosen.push(keep(letter));
                }
            }
        }
        Ok(chosen)
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
}
