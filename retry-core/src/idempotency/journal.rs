//! What a claim's step journal holds: for each step of the body, by its label, whether it
//! started and, once it finished, its output. The store keeps it with the key
//! ([`IdempotencyStore::read_steps`](super::IdempotencyStore::read_steps),
//! [`write_step`](super::IdempotencyStore::write_step)).

/// Where a step of the body stands in its claim's journal.
///
/// ```
/// use retry_core::idempotency::StepState;
///
/// let finished = StepState::Finished("{\"ride\":7}".into());
/// assert_eq!(finished.output(), Some("{\"ride\":7}"));
/// assert_eq!(StepState::Started.output(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepState {
    /// The step began and may have had its effect: a later run runs it again in doubt, with the
    /// same derived key, so its receiver deduplicates it.
    Started,
    /// The step finished: its output (JSON), returned to every later run instead of running it.
    Finished(String),
}

impl StepState {
    /// The journaled output of a finished step.
    ///
    /// ```
    /// use retry_core::idempotency::StepState;
    ///
    /// assert_eq!(StepState::Finished("1".into()).output(), Some("1"));
    /// ```
    pub fn output(&self) -> Option<&str> {
        match self {
            StepState::Started => None,
            StepState::Finished(output) => Some(output),
        }
    }
}

/// One step of a claim's journal, as [`read_steps`](super::IdempotencyStore::read_steps)
/// answers it.
///
/// ```
/// use retry_core::idempotency::{StepEntry, StepState};
///
/// let entry = StepEntry { label: "charge".into(), state: StepState::Started };
/// assert_eq!(entry.label, "charge");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEntry {
    /// The step's label, unique within the key.
    pub label: String,
    /// Whether it started or finished, and its output.
    pub state: StepState,
}

/// What [`write_step`](super::IdempotencyStore::write_step) writes for a step.
///
/// ```
/// use retry_core::idempotency::StepWrite;
///
/// assert_ne!(StepWrite::Started, StepWrite::Finished("1"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepWrite<'a> {
    /// The step is about to run: journaled before its effect, so a crash during it leaves it
    /// in doubt rather than forgotten. Writing it over a step that started already is a no-op;
    /// over a finished one, it changes nothing.
    Started,
    /// The step finished with this output (JSON): written over its `Started`, or over the same
    /// output (a retried write whose first try landed).
    Finished(&'a str),
}
