//! Dead letters in memory, for tests: the reference for what every store does.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use super::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, Page,
    RedriveRecord, Resolution, Stats,
};

/// Keeps dead letters in memory: for tests, and for trying things out. Not durable.
///
/// ```
/// use retry_core::dlq::{DeadLetterStore, MemoryDeadLetters};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let letters = MemoryDeadLetters::new();
/// assert_eq!(letters.stats().await.unwrap().pending, 0);
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryDeadLetters {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    letters: Vec<DeadLetter>,
    /// `msg_id` → (run, lease end).
    leases: HashMap<String, (String, SystemTime)>,
    audit: Vec<AuditEntry>,
    redrives: Vec<RedriveRecord>,
}

impl State {
    fn letter(&mut self, msg_id: &str) -> Option<&mut DeadLetter> {
        self.letters.iter_mut().find(|l| l.msg_id == msg_id)
    }

    /// Whether a run other than `run_id` holds a live lease on `msg_id`.
    fn held_by_other(&self, msg_id: &str, run_id: Option<&str>, now: SystemTime) -> bool {
        self.leases
            .get(msg_id)
            .is_some_and(|(holder, until)| Some(holder.as_str()) != run_id && *until > now)
    }

    /// Ends `run_id`'s lease on `msg_id`; whether it held one (live or not).
    fn end_lease(&mut self, msg_id: &str, run_id: &str) -> bool {
        match self.leases.get(msg_id) {
            Some((holder, _)) if holder == run_id => {
                self.leases.remove(msg_id);
                true
            }
            _ => false,
        }
    }
}

impl MemoryDeadLetters {
    /// No letters.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The order stores list pending letters in: first failure, then `msg_id`.
fn order_key(first_failed_at: SystemTime, msg_id: &str) -> (SystemTime, &str) {
    (first_failed_at, msg_id)
}

impl DeadLetterSink for MemoryDeadLetters {
    /// Refuses a letter no durable store could read back ([`DeadLetter::check_readable`]),
    /// so that tests on memory see what production will.
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        letter.check_readable()?;
        let mut state = self.state();
        match state.letter(&letter.msg_id) {
            Some(first) => first.absorb(letter),
            None => state.letters.push(letter.clone()),
        }
        Ok(())
    }
}

impl DeadLetterStore for MemoryDeadLetters {
    async fn page(&self, page: &Page) -> Result<Vec<DeadLetter>, DlqError> {
        let after = page
            .after
            .as_ref()
            .map(|c| order_key(c.first_failed_at, &c.msg_id));
        let mut letters: Vec<DeadLetter> = self
            .state()
            .letters
            .iter()
            .filter(|l| l.is_pending())
            .filter(|l| page.class.is_none_or(|class| class == l.class))
            .filter(|l| {
                page.source
                    .as_deref()
                    .is_none_or(|source| l.source.as_deref() == Some(source))
            })
            .filter(|l| {
                after
                    .as_ref()
                    .is_none_or(|after| order_key(l.first_failed_at, &l.msg_id) > *after)
            })
            .cloned()
            .collect();
        letters.sort_by(|a, b| {
            order_key(a.first_failed_at, &a.msg_id).cmp(&order_key(b.first_failed_at, &b.msg_id))
        });
        letters.truncate(page.limit);
        Ok(letters)
    }

    async fn stats(&self) -> Result<Stats, DlqError> {
        let now = SystemTime::now();
        let state = self.state();
        let mut stats = Stats::default();
        let mut oldest: Option<&DeadLetter> = None;
        for letter in &state.letters {
            if !letter.is_pending() {
                stats.resolved += 1;
                continue;
            }
            stats.pending += 1;
            match letter.class {
                super::FailureClass::System => stats.system += 1,
                super::FailureClass::Data => stats.data += 1,
            }
            if state.held_by_other(&letter.msg_id, None, now) {
                stats.leased += 1;
            }
            if oldest.is_none_or(|o| {
                order_key(letter.first_failed_at, &letter.msg_id)
                    < order_key(o.first_failed_at, &o.msg_id)
            }) {
                oldest = Some(letter);
            }
        }
        stats.oldest_first_failed_at = oldest.map(|l| l.first_failed_at);
        Ok(stats)
    }

    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        Ok(self.state().letter(msg_id).map(|l| l.clone()))
    }

    async fn lease(
        &self,
        msg_id: &str,
        run_id: &str,
        ttl: Duration,
    ) -> Result<Option<DeadLetter>, DlqError> {
        let now = SystemTime::now();
        let mut state = self.state();
        if state.held_by_other(msg_id, Some(run_id), now) {
            return Ok(None);
        }
        let Some(letter) = state.letter(msg_id).filter(|l| l.is_pending()).cloned() else {
            return Ok(None);
        };
        state
            .leases
            .insert(msg_id.to_owned(), (run_id.to_owned(), now + ttl));
        Ok(Some(letter))
    }

    async fn release(&self, msg_id: &str, run_id: &str) -> Result<bool, DlqError> {
        Ok(self.state().end_lease(msg_id, run_id))
    }

    async fn resolve(&self, msg_id: &str, resolution: &Resolution) -> Result<bool, DlqError> {
        let now = SystemTime::now();
        let mut state = self.state();
        if state.held_by_other(msg_id, resolution.run_id.as_deref(), now) {
            return Ok(false);
        }
        let Some(letter) = state.letter(msg_id).filter(|l| l.is_pending()) else {
            return Ok(false);
        };
        letter.resolved = Some(resolution.clone());
        state.leases.remove(msg_id);
        Ok(true)
    }

    async fn put_back(
        &self,
        msg_id: &str,
        run_id: &str,
        failure: &Failure,
    ) -> Result<bool, DlqError> {
        let mut state = self.state();
        if !state.end_lease(msg_id, run_id) {
            return Ok(false);
        }
        match state.letter(msg_id) {
            Some(letter) => {
                letter.failed_again(1, failure.clone());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn purge_resolved(&self, before: SystemTime) -> Result<u64, DlqError> {
        let mut state = self.state();
        let had = state.letters.len();
        state
            .letters
            .retain(|l| l.resolved.as_ref().is_none_or(|r| r.at >= before));
        Ok((had - state.letters.len()) as u64)
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), DlqError> {
        let mut state = self.state();
        match state
            .audit
            .iter_mut()
            .find(|e| e.run_id == entry.run_id && e.msg_id == entry.msg_id)
        {
            Some(row) => *row = entry.clone(),
            None => state.audit.push(entry.clone()),
        }
        Ok(())
    }

    async fn audit_rows(&self, run_id: Option<&str>) -> Result<Vec<AuditEntry>, DlqError> {
        Ok(self
            .state()
            .audit
            .iter()
            .filter(|e| run_id.is_none_or(|run| e.run_id == run))
            .cloned()
            .collect())
    }

    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        self.state().redrives.push(record.clone());
        Ok(())
    }

    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        Ok(self.state().redrives.clone())
    }
}
