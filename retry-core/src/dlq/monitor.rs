//! The dead-letter queue as a monitoring target: how many are pending, and how old the oldest.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{DlqError, LegacyStore};
use crate::metrics::names;
use crate::time::parse_rfc3339;

/// What is pending in a dead-letter store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Letters waiting for a person or a redrive.
    pub count: u64,
    /// How long ago the oldest one first failed.
    pub oldest_age: Option<Duration>,
}

/// Reads what is pending in `store` and sets the gauges `retry_core_dlq_pending` and
/// `retry_core_dlq_oldest_age_seconds` (labelled `queue = name`): alert on either.
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
pub async fn pending<S: LegacyStore + ?Sized>(
    store: &S,
    name: &'static str,
) -> Result<Pending, DlqError> {
    let count = store.count().await?;
    let oldest_age = match store.oldest().await? {
        None => None,
        Some(letter) => {
            let first = parse_rfc3339(&letter.first_failed_at).ok_or_else(|| {
                DlqError::Corrupt(format!(
                    "letter `{}` has an unreadable first_failed_at",
                    letter.msg_id
                ))
            })?;
            Some(SystemTime::now().duration_since(first).unwrap_or_default())
        }
    };
    ::metrics::gauge!(names::DLQ_PENDING, "queue" => name).set(count as f64);
    ::metrics::gauge!(names::DLQ_OLDEST_AGE, "queue" => name)
        .set(oldest_age.map_or(0.0, |age| age.as_secs_f64()));
    Ok(Pending { count, oldest_age })
}

/// Updates the gauges of [`pending`] every `every` (at least a second) in the background; logs
/// errors and tries again, never panics. Abort the handle to stop it.
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
pub fn spawn_monitor<S: LegacyStore + 'static>(
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
                tracing::warn!(queue = name, error = %e, "reading the dead-letter queue failed");
            }
        }
    })
}
