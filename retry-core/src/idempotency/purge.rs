//! Purging off the request path: one background task per store.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::IdempotencyStore;

/// Purges `store` of rows older than `age` every `every` (at least a second), starting now;
/// `store` names the store in events. Holds the store weakly, so it ends at its first round
/// after the store is dropped; logs errors and tries again next round, never panics.
pub(crate) fn spawn_purger<S: IdempotencyStore + 'static>(
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
