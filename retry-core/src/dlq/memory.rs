//! Dead letters in memory, for tests.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, RedriveRecord};
use crate::time::parse_rfc3339;

/// Keeps dead letters in memory: for tests, and for trying things out. Not durable.
///
/// ```
/// use retry_core::dlq::{DeadLetterStore, MemoryDeadLetters};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let letters = MemoryDeadLetters::new();
/// assert_eq!(letters.count().await.unwrap(), 0);
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryDeadLetters {
    letters: Mutex<Vec<DeadLetter>>,
    redrives: Mutex<Vec<RedriveRecord>>,
}

impl MemoryDeadLetters {
    /// No letters.
    pub fn new() -> Self {
        Self::default()
    }

    fn letters(&self) -> MutexGuard<'_, Vec<DeadLetter>> {
        self.letters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl DeadLetterSink for MemoryDeadLetters {
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        self.put_back(letter).await
    }
}

impl DeadLetterStore for MemoryDeadLetters {
    async fn list(&self) -> Result<Vec<DeadLetter>, DlqError> {
        let mut letters = self.letters().clone();
        letters.sort_by_key(|l| (parse_rfc3339(&l.first_failed_at), l.msg_id.clone()));
        Ok(letters)
    }

    async fn count(&self) -> Result<u64, DlqError> {
        Ok(self.letters().len() as u64)
    }

    async fn oldest(&self) -> Result<Option<DeadLetter>, DlqError> {
        Ok(self.list().await?.into_iter().next())
    }

    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        Ok(self.letters().iter().find(|l| l.msg_id == msg_id).cloned())
    }

    async fn ack(&self, msg_id: &str) -> Result<bool, DlqError> {
        let mut letters = self.letters();
        let before = letters.len();
        letters.retain(|l| l.msg_id != msg_id);
        Ok(letters.len() < before)
    }

    async fn put_back(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        let mut letters = self.letters();
        match letters.iter_mut().find(|l| l.msg_id == letter.msg_id) {
            // The same message gave up again: its first failure stays the first.
            Some(pending) => {
                let first = std::mem::take(&mut pending.first_failed_at);
                *pending = DeadLetter {
                    first_failed_at: first,
                    ..letter.clone()
                };
            }
            None => letters.push(letter.clone()),
        }
        Ok(())
    }

    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        self.redrives
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record.clone());
        Ok(())
    }

    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        Ok(self
            .redrives
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }
}
