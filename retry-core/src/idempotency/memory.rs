//! An in-process store, for tests and single-process tools.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use super::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyStore, StepEntry, StepState, StepWrite,
    StoreError,
};
use crate::loom_sync::{Mutex, MutexGuard};
use crate::time::{Clock, SystemClock, later};

/// Keeps claims in memory, with the same contract as the SQL stores: the `HashMap` entry plays
/// the primary key, and the whole decision about a key is taken under one lock.
///
/// ```
/// use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, MemoryStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let request = ClaimRequest {
///     key: "s3:m-1",
///     biz_key: "m-1",
///     fingerprint: None,
///     lease: Duration::from_secs(30),
///     retention: Duration::from_secs(86_400),
/// };
/// let ClaimOutcome::Claimed(claim) = store.claim(&request).await.unwrap() else { panic!() };
/// assert_eq!(store.claim(&request).await.unwrap(), ClaimOutcome::InProgress);
/// store.complete(&claim, "\"ok\"").await.unwrap();
/// assert_eq!(store.claim(&request).await.unwrap(), ClaimOutcome::Done("\"ok\"".into()));
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    rows: Mutex<HashMap<String, Row>>,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Clone)]
struct Row {
    status: Status,
    fingerprint: Option<String>,
    token: u64,
    created_at: SystemTime,
    expires_at: SystemTime,
    /// The step journal, in the order the steps first started: kept through releases and
    /// takeovers, gone with the row.
    steps: Vec<StepEntry>,
}

#[derive(Debug, Clone)]
enum Status {
    InProgress {
        lease_until: SystemTime,
    },
    Done(String),
    /// Failed with its effect unknown: the failure's text, answered to every duplicate.
    Failed(String),
    /// Released after a failed call: kept so its token keeps growing (no ABA for fenced holders).
    Released,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        MemoryStore::with_clock(Arc::new(SystemClock))
    }

    /// An empty store reading time from `clock` (for tests of leases and retention).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            rows: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// Rows kept, in any state (released ones included, until purged).
    pub fn len(&self) -> usize {
        self.rows().len()
    }

    /// Whether no row is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn rows(&self) -> MutexGuard<'_, HashMap<String, Row>> {
        // Every update below is a single assignment: a panic elsewhere cannot leave a row torn.
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn claim_now(&self, request: &ClaimRequest<'_>) -> ClaimOutcome {
        let now = self.clock.now();
        let mut rows = self.rows();
        let row = match rows.get_mut(request.key) {
            None => {
                rows.insert(
                    request.key.to_owned(),
                    Row {
                        status: Status::InProgress {
                            lease_until: later(now, request.lease),
                        },
                        fingerprint: request.fingerprint.map(str::to_owned),
                        token: 1,
                        created_at: now,
                        expires_at: later(now, request.retention),
                        steps: Vec::new(),
                    },
                );
                return ClaimOutcome::Claimed(Claim::first(request.key));
            }
            Some(row) => row,
        };
        if let Status::Released = row.status {
            // A released key whose body journaled steps is resumed (`OnErr::Resume`): its
            // finished steps belong to the first payload.
            if !row.steps.is_empty()
                && request.fingerprint.is_some()
                && row.fingerprint.as_deref() != request.fingerprint
            {
                return ClaimOutcome::KeyReused;
            }
            // Nothing else was kept for this key: claim it afresh, whatever its payload.
            *row = Row {
                status: Status::InProgress {
                    lease_until: later(now, request.lease),
                },
                fingerprint: request.fingerprint.map(str::to_owned),
                token: row.token + 1,
                created_at: now,
                expires_at: later(now, request.retention),
                steps: std::mem::take(&mut row.steps),
            };
            return ClaimOutcome::Claimed(Claim {
                key: request.key.to_owned(),
                token: row.token,
            });
        }
        if request.fingerprint.is_some() && row.fingerprint.as_deref() != request.fingerprint {
            return ClaimOutcome::KeyReused;
        }
        match &row.status {
            Status::Done(response) => ClaimOutcome::Done(response.clone()),
            Status::Failed(failure) => ClaimOutcome::Failed(failure.clone()),
            Status::InProgress { lease_until } if *lease_until > now => ClaimOutcome::InProgress,
            Status::Released => ClaimOutcome::InProgress, // handled above
            Status::InProgress { .. } => {
                // The holder died: the taker-over gets a new token, a new lease and the row a
                // retention counted from now, so it cannot be purged under the new holder.
                row.token += 1;
                row.status = Status::InProgress {
                    lease_until: later(now, request.lease),
                };
                row.expires_at = row.expires_at.max(later(now, request.retention));
                ClaimOutcome::Claimed(Claim {
                    key: request.key.to_owned(),
                    token: row.token,
                })
            }
        }
    }

    fn release_now(&self, claim: &Claim) -> Result<(), StoreError> {
        self.settle(claim, Status::Released)
    }

    /// Moves the claim's row from in progress to `to`, if the claim still holds it. A row already
    /// in `to`'s state under the claim's token is a retried call whose first try landed: `Ok`.
    fn settle(&self, claim: &Claim, to: Status) -> Result<(), StoreError> {
        let mut rows = self.rows();
        match rows.get_mut(&claim.key) {
            Some(row) if row.token == claim.token => match row.status {
                Status::InProgress { .. } => {
                    row.status = to;
                    Ok(())
                }
                _ if std::mem::discriminant(&row.status) == std::mem::discriminant(&to) => Ok(()),
                _ => Err(StoreError::Fenced),
            },
            _ => Err(StoreError::Fenced),
        }
    }
}

/// For unit tests of code over a store that needs a second trait (`TransactionalStore`): the
/// store part is a [`MemoryStore`]'s, and the test's own state `S` (counters, failure switches)
/// is reached through `Deref`.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct OverMemory<S> {
    pub(crate) inner: MemoryStore,
    state: S,
}

#[cfg(test)]
impl<S> std::ops::Deref for OverMemory<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.state
    }
}

#[cfg(test)]
impl<S: Send + Sync> IdempotencyStore for OverMemory<S> {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.inner.claim(request).await
    }
    async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
        self.inner.complete(claim, response).await
    }
    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.inner.release(claim).await
    }
    async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
        self.inner.mark_failed(claim, failure).await
    }
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        self.inner.renew(claim, lease).await
    }
    async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
        self.inner.purge_older_than(age).await
    }
}

impl IdempotencyStore for MemoryStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        Ok(self.claim_now(request))
    }

    async fn complete(&self, claim: &Claim, response: &str) -> Result<(), StoreError> {
        self.settle(claim, Status::Done(response.to_owned()))
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.release_now(claim)
    }

    async fn mark_failed(&self, claim: &Claim, failure: &str) -> Result<(), StoreError> {
        self.settle(claim, Status::Failed(failure.to_owned()))
    }

    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut rows = self.rows();
        match rows.get_mut(&claim.key) {
            Some(Row {
                status: Status::InProgress { lease_until },
                token,
                ..
            }) if *token == claim.token => {
                *lease_until = later(now, lease);
                Ok(())
            }
            _ => Err(StoreError::Fenced),
        }
    }

    fn abandon(&self, claim: Claim) -> bool {
        self.release_now(&claim).is_ok()
    }

    async fn read_steps(&self, claim: &Claim) -> Result<Vec<StepEntry>, StoreError> {
        Ok(self
            .rows()
            .get(&claim.key)
            .map(|row| row.steps.clone())
            .unwrap_or_default())
    }

    async fn write_step(
        &self,
        claim: &Claim,
        label: &str,
        write: StepWrite<'_>,
    ) -> Result<(), StoreError> {
        let mut rows = self.rows();
        let row = match rows.get_mut(&claim.key) {
            Some(row)
                if row.token == claim.token && matches!(row.status, Status::InProgress { .. }) =>
            {
                row
            }
            _ => return Err(StoreError::Fenced),
        };
        let state = match write {
            StepWrite::Started => StepState::Started,
            StepWrite::Finished(output) => StepState::Finished(output.to_owned()),
        };
        match row.steps.iter_mut().find(|entry| entry.label == label) {
            None => row.steps.push(StepEntry {
                label: label.to_owned(),
                state,
            }),
            // A finished step stays finished.
            Some(entry) if matches!(entry.state, StepState::Finished(_)) => {}
            Some(entry) => entry.state = state,
        }
        Ok(())
    }

    async fn purge_older_than(&self, age: Duration) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let cutoff = now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut rows = self.rows();
        let before = rows.len();
        // A row whose lease is live has a holder at work: never purged under it.
        rows.retain(|_, row| {
            let live =
                matches!(row.status, Status::InProgress { lease_until } if lease_until > now);
            live || !(row.created_at < cutoff && row.expires_at <= now)
        });
        Ok((before - rows.len()) as u64)
    }
}
