//! Purging off the request path: one background task per store.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::IdempotencyStore;

/// Purges `store` of rows older than `age` every `every` (at least a second), starting now,
/// on a task of its own: the background purger a store hands out as its own `spawn_purger`
/// method, so that purging stays off the request path. `name` names the store in the events
/// (the file, or the server), each round's purged rows at DEBUG and a failed round at WARN.
///
/// Holds the store weakly, so the task ends at its first round after the store is dropped; it
/// logs a failed round and tries again at the next one, and never panics. Needs a Tokio runtime
/// (it calls `tokio::spawn`). `retry-sqlite`'s `SqliteStore::spawn_purger` and
/// `retry-postgres`'s `PgStore::spawn_purger` are this function; a store of your own can offer
/// the same in one line:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use retry_core::idempotency::{MemoryStore, spawn_purger};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let store = Arc::new(MemoryStore::new());
/// let purger = spawn_purger(&store, Duration::from_secs(30 * 86_400), Duration::from_secs(3600), "memory".into());
/// drop(store); // the purger ends at its next round
/// tokio::time::sleep(Duration::from_secs(3601)).await;
/// assert!(purger.await.is_ok());
/// # }
/// ```
pub fn spawn_purger<S: IdempotencyStore + 'static>(
    store: &Arc<S>,
    age: Duration,
    every: Duration,
    name: String,
) -> tokio::task::JoinHandle<()> {
    let store: Weak<S> = Arc::downgrade(store);
    let every = every.max(Duration::from_secs(1));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // Upgraded for one round only, so the purger never keeps the store alive.
            let Some(store) = store.upgrade() else { break };
            match store.purge_older_than(age).await {
                Ok(0) => {}
                Ok(purged) => {
                    tracing::debug!(target: "retry_core::idempotency", store = %name, purged, "purged idempotency rows")
                }
                Err(e) => {
                    tracing::warn!(target: "retry_core::idempotency", store = %name, error = %crate::error_chain(&e), "purging idempotency rows failed; trying again next round")
                }
            }
        }
    })
}
