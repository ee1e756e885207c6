//! What the conformance suites share (feature `test-suite`): running a check so that its
//! failure is reported instead of ending the suite, and the report.

use std::any::Any;
use std::fmt;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

/// How long one check may take before the store is judged to hang.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// What a conformance suite's `check_all` found: one [`CheckResult`] per check, in the order of
/// its `CHECKS`.
/// Displays as one line per check, failures with their messages.
///
/// ```
/// use retry_core::idempotency::{MemoryStore, conformance};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let report = conformance::check_all(async || MemoryStore::new()).await;
/// assert_eq!(report.failures().count(), 0);
/// assert!(report.to_string().contains("ok   first_claim_gets_token_one"));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Report {
    title: &'static str,
    results: Vec<CheckResult>,
}

impl Report {
    pub(crate) fn new(title: &'static str, results: Vec<CheckResult>) -> Self {
        Report { title, results }
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(CheckResult::passed)
    }

    /// Every check's result, in the order of the suite's `CHECKS`.
    pub fn results(&self) -> &[CheckResult] {
        &self.results
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.results.iter().filter(|r| !r.passed())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.failures().count();
        writeln!(
            f,
            "{} conformance: {} of {} checks passed",
            self.title,
            self.results.len() - failed,
            self.results.len()
        )?;
        for result in &self.results {
            match &result.failure {
                None => writeln!(f, "  ok   {} ({:?})", result.name, result.took)?,
                // A message of several lines (an `assert_eq!`'s) stays under its check.
                Some(message) => writeln!(
                    f,
                    "  FAIL {}: {}",
                    result.name,
                    message.replace('\n', "\n       ")
                )?,
            }
        }
        Ok(())
    }
}

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct CheckResult {
    name: &'static str,
    failure: Option<String>,
    took: Duration,
}

impl CheckResult {
    /// The check's name: its function in this module.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// What the store did wrong, if it failed (the check's panic message).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// How long it ran.
    pub fn took(&self) -> Duration {
        self.took
    }
}

/// Runs one check, turning its panic (a failed assertion) into its message, and a check that
/// does not finish within a minute (a hung store) into a failure.
pub(crate) async fn caught(name: &str, check: impl Future<Output = ()>) -> Result<(), String> {
    let mut check = pin!(check);
    let guarded = poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| check.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => Poll::Ready(Ok(())),
            Err(payload) => Poll::Ready(Err(panic_message(&*payload))),
        },
    );
    match tokio::time::timeout(CHECK_TIMEOUT, guarded).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "{name} did not finish within {CHECK_TIMEOUT:?}: an operation of the store hangs"
        )),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "the check panicked with a non-text payload".to_owned()
    }
}

/// Runs the check `name`, timed, as its [`CheckResult`].
pub(crate) async fn check(name: &'static str, check: impl Future<Output = ()>) -> CheckResult {
    let started = std::time::Instant::now();
    let failure = caught(name, check).await.err();
    CheckResult {
        name,
        failure,
        took: started.elapsed(),
    }
}

/// Polls every future until all are ready (in one task, so no `'static` or spawning needed).
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
