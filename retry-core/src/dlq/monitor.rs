//! The dead-letter queue as a monitoring target: how many are pending, and how old the oldest;
//! and, when the store cannot be read, that it cannot (never a stale, healthy-looking value).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{DeadLetterStore, DlqError};
use crate::metrics::names;

/// What is pending in a dead-letter store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Letters waiting for a person or a redrive.
    pub count: u64,
    /// How long ago the oldest one first failed.
    pub oldest_age: Option<Duration>,
}

/// Reads what is pending in `store` (one [`stats`](DeadLetterStore::stats) call: the store
/// counts, no letter is loaded) and sets the gauges `retry_core_dlq_pending` and
/// `retry_core_dlq_oldest_age_seconds` (labelled `queue = name`): alert on either.
///
/// A read that fails is counted in `retry_core_dlq_monitor_errors_total`, sets
/// `retry_core_dlq_monitor_up` to 0 and both gauges to 0, so the last good value does not stay
/// on a dashboard looking current: alert on `retry_core_dlq_monitor_up == 0` too. A read that
/// works sets it to 1.
///
/// # Errors
/// The store's error: [`DlqError::Corrupt`] when the oldest `first_failed_at` it keeps does not
/// parse (its age is unknown, which is not "nothing is old").
///
/// ```
/// use retry_core::dlq::{pending, MemoryDeadLetters};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let letters = MemoryDeadLetters::new();
/// let now = pending(&letters, "payments").await.unwrap();
/// assert_eq!((now.count, now.oldest_age), (0, None));
/// # }
/// ```
pub async fn pending<S: DeadLetterStore + ?Sized>(
    store: &S,
    name: &'static str,
) -> Result<Pending, DlqError> {
    match read(store).await {
        Ok(pending) => {
            ::metrics::gauge!(names::DLQ_PENDING, "queue" => name).set(pending.count as f64);
            ::metrics::gauge!(names::DLQ_OLDEST_AGE, "queue" => name)
                .set(pending.oldest_age.map_or(0.0, |age| age.as_secs_f64()));
            ::metrics::gauge!(names::DLQ_MONITOR_UP, "queue" => name).set(1.0);
            Ok(pending)
        }
        Err(error) => {
            ::metrics::counter!(names::DLQ_MONITOR_ERRORS, "queue" => name).increment(1);
            ::metrics::gauge!(names::DLQ_MONITOR_UP, "queue" => name).set(0.0);
            ::metrics::gauge!(names::DLQ_PENDING, "queue" => name).set(0.0);
            ::metrics::gauge!(names::DLQ_OLDEST_AGE, "queue" => name).set(0.0);
            Err(error)
        }
    }
}

async fn read<S: DeadLetterStore + ?Sized>(store: &S) -> Result<Pending, DlqError> {
    let stats = store.stats().await?;
    let oldest_age = stats
        .oldest_first_failed_at
        .map(|first| SystemTime::now().duration_since(first).unwrap_or_default());
    Ok(Pending {
        count: stats.pending,
        oldest_age,
    })
}

/// Updates the gauges of [`pending`] every `every` (at least a second) in the background; a
/// failed read is logged and counted (see [`pending`]) and tried again at the next tick, never
/// a panic. Abort the handle to stop it.
///
/// # Panics
/// Outside a Tokio runtime (like `tokio::spawn`).
///
/// ```
/// use retry_core::dlq::{spawn_monitor, MemoryDeadLetters};
/// use std::{sync::Arc, time::Duration};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let monitor = spawn_monitor(Arc::new(MemoryDeadLetters::new()), "payments", Duration::from_secs(60));
/// monitor.abort();
/// # }
/// ```
pub fn spawn_monitor<S: DeadLetterStore + 'static>(
    store: Arc<S>,
    name: &'static str,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    let every = every.max(Duration::from_secs(1));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            ticks.tick().await;
            if let Err(e) = pending(&*store, name).await {
                tracing::warn!(target: "retry_core::dlq", queue = name, error = %crate::error_chain(&e), "reading the dead-letter queue failed");
            }
        }
    })
}
