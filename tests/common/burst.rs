//! The burst of give-ups that `examples/dlq_burst.rs` measures and `tests/dlq_kill.rs` kills
//! mid-way: a real `#[retryable(max = 1, dlq(...))]` function whose upstream is down, parking
//! ~200-byte originals into a JSONL file or a SQLite table.
#![allow(dead_code)]

use std::path::Path;

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, DlqFailed, JsonlLine, JsonlReader,
    JsonlSink, Page,
};
use retry_core::{Classify, Decision, retryable};
use retry_sqlite::SqliteDeadLetters;
use serde::Serialize;

/// The two file stores, as one sink.
pub enum Sink {
    Jsonl(JsonlSink),
    Sqlite(SqliteDeadLetters),
}

impl Sink {
    /// Opens (creating) the store at `path`: a JSONL file, or a SQLite one.
    pub fn open(path: &Path, jsonl: bool) -> Result<Self, DlqError> {
        Ok(if jsonl {
            Sink::Jsonl(JsonlSink::open(path)?)
        } else {
            Sink::Sqlite(SqliteDeadLetters::open(path)?)
        })
    }
}

/// Every letter the store at `path` holds: each line of a JSONL file (a letter parked twice is
/// on two lines), or each pending letter of a SQLite one, a page at a time, checked against
/// its own count.
pub async fn stored(path: &Path, jsonl: bool) -> Result<Vec<DeadLetter>, String> {
    if jsonl {
        let lines = JsonlReader::open(path).map_err(|e| e.to_string())?;
        return lines
            .map(|line| match line.map_err(|e| e.to_string())? {
                JsonlLine::Letter(letter) => Ok(letter),
                other => Err(format!("a line that is not a whole letter: {other:?}")),
            })
            .collect();
    }
    let store = SqliteDeadLetters::open(path).map_err(|e| e.to_string())?;
    let mut letters = Vec::new();
    let mut page = Page::first(500);
    loop {
        let more = store.page(&page).await.map_err(|e| e.to_string())?;
        let Some(last) = more.last() else { break };
        page = page.next_after(last);
        letters.extend(more);
    }
    let stats = store.stats().await.map_err(|e| e.to_string())?;
    if stats.pending as usize != letters.len() {
        return Err(format!(
            "stats count {} pending, the pages {}",
            stats.pending,
            letters.len()
        ));
    }
    Ok(letters)
}

impl DeadLetterSink for Sink {
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        match self {
            Sink::Jsonl(sink) => sink.park(letter).await,
            Sink::Sqlite(sink) => sink.park(letter).await,
        }
    }
}

#[derive(Debug)]
pub enum SendError {
    /// The upstream is down: what every call of the burst gets.
    Unavailable,
    /// Given up, and the letter was not parked.
    NotParked(Box<DlqFailed>),
}

impl Classify for SendError {
    fn classify(&self) -> Decision {
        match self {
            SendError::Unavailable => Decision::Retry,
            SendError::NotParked(failed) => failed.decision(),
        }
    }
}

impl From<DlqFailed> for SendError {
    fn from(failed: DlqFailed) -> Self {
        SendError::NotParked(Box::new(failed))
    }
}

/// What the calls send: about 200 bytes as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    pub id: String,
    from: String,
    to: String,
    cents: u64,
    currency: &'static str,
    memo: String,
}

/// Task `task`'s call number `call`: its id is `T-<task>-<call>`.
pub fn transfer(task: usize, call: usize) -> Transfer {
    Transfer {
        id: format!("T-{task:02}-{call:03}"),
        from: format!("DE89 3704 0044 0532 0130 {task:02}"),
        to: format!("FR14 2004 1010 0505 0001 3M02 {call:03}"),
        cents: (task * 1000 + call) as u64,
        currency: "EUR",
        memo: "invoice 2026-08 / monthly settlement, second notice".into(),
    }
}

/// Always fails, and gives up at once: `Err(Unavailable)` once the letter is parked,
/// `Err(NotParked)` if it was not.
#[retryable(max = 1, dlq(sink = letters, id = transfer.id.clone(), original = transfer))]
pub async fn send(letters: &Sink, transfer: Transfer) -> Result<(), SendError> {
    Err(SendError::Unavailable)
}
