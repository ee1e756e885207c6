//! [`JsonlSink`]: dead letters in one append-only JSON Lines file.
//!
//! See [`JsonlSink`] for the file format, crash behaviour and cancellation.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{DeadLetter, DeadLetterSink, DlqError, LegacyStore, RedriveRecord};
use crate::time::{format_rfc3339, parse_rfc3339, unix_nanos};

/// A torn last line found by [`JsonlSink::open`]: what a crash in the middle of a write left.
/// It was appended to `<path>.torn` and cut off the end of the file.
///
/// ```
/// use retry_core::dlq::{JsonlSink, TornLine};
///
/// let path = std::env::temp_dir().join(format!("dlq-doc-torn-line-{}.jsonl", std::process::id()));
/// std::fs::write(&path, "{\"msg_id\":\"M-1\",\"orig").unwrap();
///
/// let sink = JsonlSink::open(&path).unwrap();
/// assert_eq!(sink.torn(), [TornLine { line: 1, text: "{\"msg_id\":\"M-1\",\"orig".to_owned() }]);
/// assert_eq!(std::fs::read(&path).unwrap(), b"", "cut off the file");
/// # drop(sink);
/// # let mut torn = path.clone().into_os_string();
/// # torn.push(".torn");
/// # std::fs::remove_file(&torn).unwrap();
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// Its line number in the file, from 1.
    pub line: usize,
    /// Its text, without the newline if it had one (bytes that were not UTF-8 are shown as
    /// U+FFFD).
    pub text: String,
}

/// A [`DeadLetterSink`] and [`LegacyStore`] on one append-only, owner-only JSON Lines file.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, JsonlSink};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), retry_core::dlq::DlqError> {
/// let path = std::env::temp_dir().join(format!("dlq-doc-sink-{}.jsonl", std::process::id()));
/// let letter = DeadLetter {
///     msg_id: "M-20260819-000123".into(),
///     original: serde_json::json!({ "amount": 10 }),
///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(),
///     attempts: 5,
///     first_failed_at: "2026-08-19T02:11:03+09:00".into(),
///     last_failed_at: "2026-08-19T02:12:47+09:00".into(),
///     trace_id: "a1b2c3d4".into(),
///     class: FailureClass::System,
///     error_type: "FetchError".into(),
///     idempotency_key: None,
///     source: None, redacted: false, key_scope: None, key_expires_at: None, history: Vec::new(), resolved: None,
/// };
///
/// let sink = JsonlSink::open(&path)?;
/// sink.park(&letter).await?; // durable once this returns Ok
/// drop(sink);
///
/// // The line is the letter itself.
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert_eq!(serde_json::from_str::<DeadLetter>(text.trim_end()).unwrap(), letter);
///
/// let sink = JsonlSink::open(&path)?;
/// assert_eq!(sink.count().await?, 1);
/// assert_eq!(sink.oldest().await?.as_ref(), Some(&letter));
/// assert!(sink.ack(&letter.msg_id).await?);
/// assert_eq!(sink.list().await?, []);
/// # drop(sink);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok(())
/// # }
/// ```
///
/// # The file
///
/// One JSON object per line, each line written whole and never changed afterwards:
///
/// ```text
/// {"msg_id":"M-1","original":{"amount":10},"reason":"gave up after 5 attempts: 503 Service Unavailable","attempts":5,"first_failed_at":"2026-08-19T02:11:03.000+00:00","last_failed_at":"2026-08-19T02:12:47.000+00:00","trace_id":"a1b2c3d4","class":"system","error_type":"FetchError"}
/// {"msg_id":"M-2","original":{"amount":99},"reason":"not retryable: 400 Bad Request","attempts":1,"first_failed_at":"2026-08-19T02:13:00.000+00:00","last_failed_at":"2026-08-19T02:13:00.000+00:00","trace_id":"e5f6a7b8","class":"data","error_type":"FetchError"}
/// {"ack":"M-2","at":"2026-08-20T09:30:00.000+00:00"}
/// {"redrive":{"run_id":"5f0c8a1e2b3d4c6f","who":"alice","filter":"class=system",...}}
/// ```
///
/// - A **letter line** is the [`DeadLetter`] itself, with exactly its JSON field names: what
///   `park` wrote, or what `put_back` wrote after a redrive failed again. `grep M-1 dlq.jsonl`
///   shows a letter's whole history.
/// - An **ack line** is `{"ack":"<msg_id>","at":"<RFC 3339>"}`: the letter was redriven or
///   judged, and is no longer pending. (An object with an `"ack"` key is an ack; every other line
///   must be a letter or a redrive record. A letter never has an `"ack"` field.)
/// - A **redrive line** is `{"redrive":{...}}`, a [`RedriveRecord`]: the audit log of
///   [`Redrive`](super::Redrive) runs over this file.
/// - A letter is **pending** when its latest letter line comes after its latest ack line; the
///   latest letter line is the pending letter (so a `put_back` replaces what `park` wrote).
///   Blank lines are ignored.
///
/// Nothing is ever removed from the file: acknowledged letters stay as an audit trail.
///
/// # Durability and crashes
///
/// Every write is one `write(2)` of the whole line, newline included, on a file opened with
/// `O_APPEND`, followed by `fdatasync`; `park`, `ack` and `put_back` return `Ok` only after
/// both (and a new file's directory is synced too). So a letter whose `park` returned `Ok`
/// survives a crash of the process, and of the machine on a disk that honours flushes.
///
/// A crash *during* a write can leave at most the last line torn: a prefix of it with no
/// newline (a `SIGKILL` that lands while the kernel copies a long line stops the copy), or
/// garbage after a power loss. [`JsonlSink::open`] finds it, logs a warning with its line
/// number, appends it to `<path>.torn` (never deleted) and truncates the file back to its last
/// complete line, so appends continue cleanly. A torn line belongs to a call that never
/// returned `Ok`: a torn letter's message was not acknowledged and will come again; a torn ack
/// leaves its letter pending (redrive targets are idempotent, so redriving it again is safe).
/// A corrupt line anywhere *before* the last one is not a crash artefact: `open` fails with
/// [`DlqError::Corrupt`] naming the line, and changes nothing.
///
/// A write that fails in this process (disk full, file size limit, I/O error) is cut back off
/// the file before the error returns, so a failed `park` leaves no half line behind.
///
/// # Cancellation
///
/// The futures of `park`, `ack` and `put_back` do all their work in their first poll, which never
/// returns `Pending`: the write and the fsync are blocking calls inside it, with no `.await`
/// point anywhere. A future dropped before it is polled wrote nothing; once polled, it has
/// finished. There is no state in which a dropped future wrote half a line. (Appending one line
/// and an fsync blocks the calling thread, an async runtime's worker included, for about as
/// long as the disk takes to flush, typically milliseconds: acceptable for a dead-letter queue,
/// which is written rarely, and it keeps the sink free of any runtime dependency. Reads take
/// the same mutex only to copy from memory.)
///
/// # One writer process per file
///
/// The pending letters are indexed in memory when the file is opened and kept up to date by
/// this sink's own writes; reads never rescan the file. Within a process a mutex serialises
/// writers (share one sink through an `Arc`). Several processes writing one file are not
/// supported: `open` takes an exclusive advisory lock (`flock`) on the file, held until the sink
/// is dropped, so a second `open` of the same file, in this process or another, fails (after
/// waiting half a second for the lock) instead of interleaving with it or truncating a line it
/// is writing.
pub struct JsonlSink {
    path: PathBuf,
    torn: Vec<TornLine>,
    state: Mutex<State>,
}

/// The open file and the index of pending letters, behind the writers' mutex.
struct State {
    /// Opened by [`JsonlSink::open_read_only`]: every write is refused.
    read_only: bool,
    file: File,
    /// The length of the file's complete lines: where the next line starts, and where a failed
    /// write is cut back to.
    len: u64,
    /// A failed write could not be cut back: the file may end in a partial line, so the next
    /// write must try again first.
    dirty: bool,
    index: Index,
}

/// The pending letters.
#[derive(Default)]
struct Index {
    /// Pending letters by `msg_id`.
    pending: HashMap<String, DeadLetter>,
    /// The redrive runs recorded in the file, in order.
    redrives: Vec<RedriveRecord>,
    /// The pending letters' order: first failure, then `msg_id`.
    order: BTreeSet<OrderKey>,
}

/// Sorts by `first_failed_at` as a time (offsets taken into account), then `msg_id`; letters
/// whose `first_failed_at` is not RFC 3339 come after all others.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct OrderKey {
    unreadable_time: bool,
    first_failed_nanos: i128,
    msg_id: String,
}

impl OrderKey {
    fn of(letter: &DeadLetter) -> Self {
        let first = parse_rfc3339(&letter.first_failed_at);
        OrderKey {
            unreadable_time: first.is_none(),
            first_failed_nanos: first.map_or(0, unix_nanos),
            msg_id: letter.msg_id.clone(),
        }
    }
}

/// One line of the file.
enum Entry {
    Letter(DeadLetter),
    Ack(String),
    Redrive(RedriveRecord),
}

/// An ack line as written. `at` is informational: a line without it is still an ack.
#[derive(Serialize, Deserialize)]
struct AckLine {
    ack: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<String>,
}

/// A redrive line as written.
#[derive(Serialize, Deserialize)]
struct RedriveLine {
    redrive: RedriveRecord,
}

impl Index {
    fn apply(&mut self, entry: Entry) {
        match entry {
            Entry::Letter(letter) => {
                let key = OrderKey::of(&letter);
                if let Some(old) = self.pending.insert(letter.msg_id.clone(), letter) {
                    self.order.remove(&OrderKey::of(&old));
                }
                self.order.insert(key);
            }
            Entry::Ack(msg_id) => {
                if let Some(old) = self.pending.remove(&msg_id) {
                    self.order.remove(&OrderKey::of(&old));
                }
            }
            Entry::Redrive(record) => self.redrives.push(record),
        }
    }
}

impl State {
    /// Appends `line` (ending in `\n`) with one write, then fsyncs. On failure the file is cut
    /// back to its last complete line, so no partial line stays behind.
    fn append(&mut self, path: &Path, line: &[u8]) -> Result<(), DlqError> {
        if self.read_only {
            return Err(io_error(
                "cannot write to",
                path,
                &io::Error::new(io::ErrorKind::PermissionDenied, "opened read-only"),
            ));
        }
        if self.dirty {
            self.cut_back()
                .map_err(|e| io_error("cannot remove a partial line from", path, &e))?;
        }
        // `write_all` is one `write(2)` for a regular file unless the kernel writes less
        // (disk full, file size limit); then the error path below cuts the partial line off.
        match self
            .file
            .write_all(line)
            .and_then(|()| self.file.sync_data())
        {
            Ok(()) => {
                self.len += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                if let Err(cut) = self.cut_back() {
                    self.dirty = true;
                    tracing::warn!(
                        path = %path.display(),
                        error = %cut,
                        "could not cut a failed write back off the dead-letter file; retrying before the next write"
                    );
                }
                Err(io_error("cannot append to", path, &e))
            }
        }
    }

    fn cut_back(&mut self) -> io::Result<()> {
        self.file.set_len(self.len)?;
        self.file.sync_data()?;
        self.dirty = false;
        Ok(())
    }
}

impl JsonlSink {
    /// Opens the dead-letter file at `path`, creating it (mode 0600 on Unix) if needed, and
    /// reads it: every line must be a letter or an ack.
    ///
    /// - A file that exists with permissions wider than owner-only is left as it is, with a
    ///   warning.
    /// - A torn last line (no trailing newline, or not JSON: a crash mid-write) is logged with a
    ///   warning, appended to `<path>.torn` and cut off the file; see [`torn`](Self::torn).
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] if the file cannot be created, opened, read or repaired, is not a
    /// regular file, or is open in another `JsonlSink` (in this process or another one: one
    /// writer per file). [`DlqError::Corrupt`], naming the line, if a line other than the last
    /// is not a letter or an ack; the file is then left untouched.
    ///
    /// ```
    /// use retry_core::dlq::{DlqError, JsonlSink};
    ///
    /// let path = std::env::temp_dir().join(format!("dlq-doc-open-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// # #[cfg(unix)] {
    /// use std::os::unix::fs::PermissionsExt;
    /// assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    /// # }
    ///
    /// // One writer per file: a second sink on it is refused while the first is open.
    /// assert!(matches!(JsonlSink::open(&path), Err(DlqError::Io(_))));
    /// drop(sink);
    ///
    /// // A corrupt line that is not the last one is an error, never skipped.
    /// std::fs::write(&path, "{\"msg_id\": \n{\"ack\":\"M-1\"}\n").unwrap();
    /// let error = JsonlSink::open(&path).unwrap_err();
    /// assert!(matches!(error, DlqError::Corrupt(_)));
    /// assert!(error.to_string().contains("line 1"), "{error}");
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        let path = path.as_ref().to_path_buf();
        let (file, created) =
            open_owner_only(&path).map_err(|e| io_error("cannot open", &path, &e))?;
        let metadata = file
            .metadata()
            .map_err(|e| io_error("cannot inspect", &path, &e))?;
        if !metadata.is_file() {
            return Err(io_error(
                "cannot use",
                &path,
                &io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        lock(&file, &path)?;
        if created {
            sync_parent(&path);
        } else {
            warn_if_shared(&path, &metadata);
        }

        let (index, complete_len, torn) = read(&path, &file)?;

        let mut torn_lines = Vec::new();
        if let Some(torn) = torn {
            keep_torn(&path, &torn)?;
            file.set_len(complete_len)
                .and_then(|()| file.sync_data())
                .map_err(|e| io_error("cannot cut a torn line off", &path, &e))?;
            tracing::warn!(
                path = %path.display(),
                line = torn.line,
                kept_in = %torn_path(&path).display(),
                "the dead-letter file ended in a torn line (a crash mid-write?); moved it aside"
            );
            torn_lines.push(torn);
        }

        Ok(JsonlSink {
            path,
            torn: torn_lines,
            state: Mutex::new(State {
                read_only: false,
                file,
                len: complete_len,
                dirty: false,
                index,
            }),
        })
    }

    /// Opens `path` to read only, beside the process that writes it: for monitoring and the
    /// `retry-dlq` command. Takes no lock and changes nothing: a torn last line is reported in
    /// [`torn`](Self::torn) but left where it is (the writer moves it aside when it opens), and
    /// every write fails. What it shows is the file as it was when opened.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, LegacyStore, JsonlSink};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-ro-{}.jsonl", std::process::id()));
    /// let writer = JsonlSink::open(&path).unwrap();
    /// let reader = JsonlSink::open_read_only(&path).unwrap();
    /// assert_eq!(reader.count().await.unwrap(), 0);
    /// # drop((writer, reader));
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| io_error("cannot open", &path, &e))?;
        let (index, complete_len, torn) = read(&path, &file)?;
        if let Some(torn) = &torn {
            tracing::warn!(path = %path.display(), line = torn.line, "the dead-letter file ends in a torn line (a crash mid-write?)");
        }
        Ok(JsonlSink {
            path,
            torn: torn.into_iter().collect(),
            state: Mutex::new(State {
                read_only: true,
                file,
                len: complete_len,
                dirty: false,
                index,
            }),
        })
    }

    /// The torn last line [`open`](Self::open) found and moved to `<path>.torn`, if any (at
    /// most one: only the last line can be torn).
    ///
    /// ```
    /// use retry_core::dlq::JsonlSink;
    ///
    /// let path = std::env::temp_dir().join(format!("dlq-doc-torn-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert!(sink.torn().is_empty(), "a new file has nothing torn");
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn torn(&self) -> &[TornLine] {
        &self.torn
    }

    /// The file's path, as given to [`open`](Self::open).
    ///
    /// ```
    /// use retry_core::dlq::JsonlSink;
    ///
    /// let path = std::env::temp_dir().join(format!("dlq-doc-path-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert_eq!(sink.path(), path);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while the lock is held; a poisoned lock still guards a consistent
        // state (the index is updated only after a write succeeded).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `letter` as one line and indexes it as the pending letter of its `msg_id`.
    fn write_letter(&self, letter: DeadLetter) -> Result<(), DlqError> {
        let line = to_line(&letter)?;
        let mut state = self.state();
        state.append(&self.path, &line)?;
        state.index.apply(Entry::Letter(letter));
        Ok(())
    }
}

impl fmt::Debug for JsonlSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonlSink")
            .field("path", &self.path)
            .field("pending", &self.state().index.pending.len())
            .field("torn", &self.torn)
            .finish_non_exhaustive()
    }
}

impl DeadLetterSink for JsonlSink {
    /// Appends `letter` as one line (the letter's own JSON) and fsyncs before returning `Ok`.
    /// A letter with the `msg_id` of a pending one replaces it.
    ///
    /// All the work happens in the future's first poll, with no `.await` inside: a dropped
    /// future wrote the whole line or nothing.
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] if the line cannot be written or synced (nothing of it stays in the
    /// file); [`DlqError::Serialize`] if the letter cannot be serialised.
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, JsonlSink};
    /// # fn letter(id: &str) -> DeadLetter { DeadLetter { msg_id: id.into(), original: serde_json::json!({}),
    /// #     reason: "gave up".into(), attempts: 3, first_failed_at: "2026-08-19T02:11:03+09:00".into(),
    /// #     last_failed_at: "2026-08-19T02:12:47+09:00".into(), trace_id: "t".into(),
    /// #     class: FailureClass::System, error_type: "E".into(), idempotency_key: None } }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-park-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// sink.park(&letter("M-1")).await.unwrap();
    /// assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    /// assert_eq!(sink.get("M-1").await.unwrap(), Some(letter("M-1")));
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        // Blocking I/O on purpose, and no `.await`: see the module docs on cancellation.
        self.write_letter(letter.clone())
    }
}

impl LegacyStore for JsonlSink {
    /// The pending letters, by first failure (as a time, whatever the offsets), then `msg_id`;
    /// letters whose `first_failed_at` is not RFC 3339 come last. Reads the in-memory index.
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, JsonlSink};
    /// # fn letter(id: &str, first: &str) -> DeadLetter { DeadLetter { msg_id: id.into(), original: serde_json::json!({}),
    /// #     reason: "gave up".into(), attempts: 3, first_failed_at: first.into(),
    /// #     last_failed_at: first.into(), trace_id: "t".into(),
    /// #     class: FailureClass::System, error_type: "E".into(), idempotency_key: None } }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-list-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// sink.park(&letter("M-late", "2026-08-19T03:00:00Z")).await.unwrap();
    /// sink.park(&letter("M-early", "2026-08-19T10:00:00+09:00")).await.unwrap(); // 01:00Z
    /// let ids: Vec<_> = sink.list().await.unwrap().into_iter().map(|l| l.msg_id).collect();
    /// assert_eq!(ids, ["M-early", "M-late"]);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn list(&self) -> Result<Vec<DeadLetter>, DlqError> {
        let state = self.state();
        Ok(state
            .index
            .order
            .iter()
            .map(|key| state.index.pending[&key.msg_id].clone())
            .collect())
    }

    /// How many letters are pending. Reads the in-memory index.
    ///
    /// ```
    /// # use retry_core::dlq::{LegacyStore, JsonlSink};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-count-{}.jsonl", std::process::id()));
    /// std::fs::write(&path, "{\"ack\":\"M-0\"}\n").unwrap();
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert_eq!(sink.count().await.unwrap(), 0);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn count(&self) -> Result<u64, DlqError> {
        Ok(self.state().index.pending.len() as u64)
    }

    /// The pending letter with the earliest first failure (ties: the smallest `msg_id`).
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, JsonlSink};
    /// # fn letter(id: &str, first: &str) -> DeadLetter { DeadLetter { msg_id: id.into(), original: serde_json::json!({}),
    /// #     reason: "gave up".into(), attempts: 3, first_failed_at: first.into(),
    /// #     last_failed_at: first.into(), trace_id: "t".into(),
    /// #     class: FailureClass::System, error_type: "E".into(), idempotency_key: None } }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-oldest-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert_eq!(sink.oldest().await.unwrap(), None);
    /// sink.park(&letter("M-2", "2026-08-19T02:00:00Z")).await.unwrap();
    /// sink.park(&letter("M-1", "2026-08-19T02:00:00Z")).await.unwrap();
    /// assert_eq!(sink.oldest().await.unwrap().unwrap().msg_id, "M-1");
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn oldest(&self) -> Result<Option<DeadLetter>, DlqError> {
        let state = self.state();
        Ok(state
            .index
            .order
            .first()
            .map(|key| state.index.pending[&key.msg_id].clone()))
    }

    /// The pending letter `msg_id`, if any. Reads the in-memory index.
    ///
    /// ```
    /// # use retry_core::dlq::{LegacyStore, JsonlSink};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-get-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert_eq!(sink.get("M-404").await.unwrap(), None);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        Ok(self.state().index.pending.get(msg_id).cloned())
    }

    /// Appends `{"ack":"<msg_id>","at":"<now, RFC 3339>"}` and fsyncs, if `msg_id` is pending;
    /// `Ok(false)`, writing nothing, if it is not. Like `park`, all in the first poll.
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] if the line cannot be written or synced; the letter stays pending.
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, JsonlSink};
    /// # fn letter(id: &str) -> DeadLetter { DeadLetter { msg_id: id.into(), original: serde_json::json!({}),
    /// #     reason: "gave up".into(), attempts: 3, first_failed_at: "2026-08-19T02:11:03+09:00".into(),
    /// #     last_failed_at: "2026-08-19T02:12:47+09:00".into(), trace_id: "t".into(),
    /// #     class: FailureClass::System, error_type: "E".into(), idempotency_key: None } }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-ack-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// sink.park(&letter("M-1")).await.unwrap();
    /// assert!(sink.ack("M-1").await.unwrap());
    /// assert!(!sink.ack("M-1").await.unwrap(), "no longer pending");
    /// let text = std::fs::read_to_string(&path).unwrap();
    /// assert!(text.lines().last().unwrap().starts_with(r#"{"ack":"M-1","at":""#), "{text}");
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn ack(&self, msg_id: &str) -> Result<bool, DlqError> {
        let line = to_line(&AckLine {
            ack: msg_id.to_owned(),
            at: Some(format_rfc3339(SystemTime::now())),
        })?;
        let mut state = self.state();
        if !state.index.pending.contains_key(msg_id) {
            return Ok(false);
        }
        state.append(&self.path, &line)?;
        state.index.apply(Entry::Ack(msg_id.to_owned()));
        Ok(true)
    }

    /// Appends `letter` as the new pending letter of its `msg_id`, keeping the pending letter's
    /// `first_failed_at` (the first failure does not move, whatever `letter` says). A letter that
    /// is not pending (acknowledged meanwhile, or never parked) is parked as it is: a failure is
    /// never dropped. Like `park`, all in the first poll.
    ///
    /// # Errors
    ///
    /// As [`park`](DeadLetterSink::park).
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, LegacyStore, FailureClass, JsonlSink};
    /// # fn letter(id: &str) -> DeadLetter { DeadLetter { msg_id: id.into(), original: serde_json::json!({}),
    /// #     reason: "gave up".into(), attempts: 3, first_failed_at: "2026-08-19T02:11:03+09:00".into(),
    /// #     last_failed_at: "2026-08-19T02:12:47+09:00".into(), trace_id: "t".into(),
    /// #     class: FailureClass::System, error_type: "E".into(), idempotency_key: None } }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-put-back-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// sink.park(&letter("M-1")).await.unwrap();
    ///
    /// let mut again = sink.get("M-1").await.unwrap().unwrap();
    /// again.attempts += 1;
    /// again.last_failed_at = "2026-08-20T08:00:00+00:00".into();
    /// sink.put_back(&again).await.unwrap();
    /// assert_eq!(sink.get("M-1").await.unwrap(), Some(again));
    /// assert_eq!(sink.count().await.unwrap(), 1);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn put_back(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        let mut letter = letter.clone();
        let mut state = self.state();
        if let Some(pending) = state.index.pending.get(&letter.msg_id) {
            letter.first_failed_at.clone_from(&pending.first_failed_at);
        }
        let line = to_line(&letter)?;
        state.append(&self.path, &line)?;
        state.index.apply(Entry::Letter(letter));
        Ok(())
    }

    /// Appends `{"redrive":{...}}` and fsyncs, like every other line.
    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        let entry = RedriveLine {
            redrive: record.clone(),
        };
        let line = to_line(&entry)?;
        let mut state = self.state();
        state.append(&self.path, &line)?;
        state.index.apply(Entry::Redrive(entry.redrive));
        Ok(())
    }

    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        Ok(self.state().index.redrives.clone())
    }
}

/// `value` as one JSON line, newline included. `serde_json`'s compact form escapes newlines in
/// strings, so the line holds exactly one `\n`, at its end.
fn to_line(value: &impl Serialize) -> Result<Vec<u8>, DlqError> {
    let mut line = serde_json::to_vec(value).map_err(|e| DlqError::Serialize(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

/// An I/O error saying what was being done to which file; the kind is kept, and
/// `DlqError::Io`'s source downcasts to `io::Error`.
fn io_error(doing: &str, path: &Path, error: &io::Error) -> DlqError {
    DlqError::Io(Box::new(io::Error::new(
        error.kind(),
        format!("{doing} dead-letter file {}: {error}", path.display()),
    )))
}

/// Opens `path` for reading and appending, creating it owner-only; `true` if it was created.
fn open_owner_only(path: &Path) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.read(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.clone().create_new(true).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok((options.open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// Takes the exclusive advisory lock that keeps one writer per file.
///
/// A lock held by another sink is waited for up to [`LOCK_WAIT`] before giving up: `flock`
/// locks belong to the open file, and a child process being spawned holds a copy of every
/// descriptor until it `exec`s, so a sink dropped a moment ago can still look locked.
fn lock(file: &File, path: &Path) -> Result<(), DlqError> {
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io_error(
                    "cannot lock",
                    path,
                    &io::Error::new(
                        io::ErrorKind::WouldBlock,
                        "another JsonlSink has it open (one writer per file)",
                    ),
                ));
            }
            // Platforms and filesystems without locks: the one-writer rule is documented only.
            Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
                return Ok(());
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_error("cannot lock", path, &e)),
        }
    }
}

/// How long [`JsonlSink::open`] waits for a lock held elsewhere.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Makes a new file's directory entry durable, so the file itself survives a power loss.
fn sync_parent(path: &Path) {
    #[cfg(unix)]
    {
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        if let Err(e) = File::open(parent).and_then(|dir| dir.sync_all()) {
            tracing::warn!(path = %path.display(), error = %e, "could not sync the new dead-letter file's directory");
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Warns when an existing file can be read or written by others than its owner.
fn warn_if_shared(path: &Path, metadata: &std::fs::Metadata) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = %format_args!("{mode:03o}"),
                "the dead-letter file is accessible to others than its owner (expected 600); leaving its permissions as they are"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = (path, metadata);
}

fn torn_path(path: &Path) -> PathBuf {
    let mut torn = OsString::from(path.as_os_str());
    torn.push(".torn");
    PathBuf::from(torn)
}

/// Appends `torn` to `<path>.torn` (owner-only), as `{"line":N,"found_at":"...","text":"..."}`,
/// and fsyncs it, before the main file is cut: a crash in between leaves the line in both.
fn keep_torn(path: &Path, torn: &TornLine) -> Result<(), DlqError> {
    #[derive(Serialize)]
    struct Kept<'a> {
        line: usize,
        found_at: String,
        text: &'a str,
    }
    let torn_path = torn_path(path);
    let line = to_line(&Kept {
        line: torn.line,
        found_at: format_rfc3339(SystemTime::now()),
        text: &torn.text,
    })?;
    let (mut file, created) =
        open_owner_only(&torn_path).map_err(|e| io_error("cannot open", &torn_path, &e))?;
    file.write_all(&line)
        .and_then(|()| file.sync_data())
        .map_err(|e| io_error("cannot append to", &torn_path, &e))?;
    if created {
        sync_parent(&torn_path);
    }
    Ok(())
}

/// Reads the file line by line into the index of pending letters. Returns the index, the
/// length of the complete lines, and the torn last line if there is one.
fn read(path: &Path, file: &File) -> Result<(Index, u64, Option<TornLine>), DlqError> {
    let mut reader = BufReader::new(file);
    let mut index = Index::default();
    let mut complete_len = 0u64;
    let mut line = Vec::new();
    let mut number = 0;
    // A newline-terminated line that is not JSON: torn if it is the last one, corrupt if not.
    let mut not_json: Option<(usize, serde_json::Error, Vec<u8>)> = None;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io_error("cannot read", path, &e))?;
        if read == 0 {
            break;
        }
        number += 1;
        if let Some((number, error, _)) = not_json {
            return Err(corrupt(path, number, &error));
        }
        // Only the last line can lack its newline.
        let Some(body) = line.strip_suffix(b"\n") else {
            let torn = TornLine {
                line: number,
                text: String::from_utf8_lossy(&line).into_owned(),
            };
            return Ok((index, complete_len, Some(torn)));
        };
        if !body.trim_ascii().is_empty() {
            match serde_json::from_slice::<serde_json::Value>(body) {
                Ok(value) => index.apply(entry(value).map_err(|e| corrupt(path, number, &e))?),
                Err(error) => {
                    not_json = Some((number, error, body.to_vec()));
                    continue;
                }
            }
        }
        complete_len += read as u64;
    }
    let torn = not_json.map(|(line, _, text)| TornLine {
        line,
        text: String::from_utf8_lossy(&text).into_owned(),
    });
    Ok((index, complete_len, torn))
}

/// An ack if the object has an `"ack"` key, a redrive record if it has a `"redrive"` key, a
/// letter otherwise.
fn entry(value: serde_json::Value) -> Result<Entry, serde_json::Error> {
    if value.get("ack").is_some() {
        Ok(Entry::Ack(serde_json::from_value::<AckLine>(value)?.ack))
    } else if value.get("redrive").is_some() {
        Ok(Entry::Redrive(
            serde_json::from_value::<RedriveLine>(value)?.redrive,
        ))
    } else {
        Ok(Entry::Letter(serde_json::from_value(value)?))
    }
}

/// `DlqError::Corrupt` naming the file and line; `serde_json`'s own "at line 1 column N" (of the
/// line alone) becomes the column.
fn corrupt(path: &Path, line: usize, error: &serde_json::Error) -> DlqError {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let what = match text.strip_suffix(&position) {
        Some(what) if error.line() != 0 => {
            format!("line {line}, column {}: {what}", error.column())
        }
        _ => format!("line {line}: {text}"),
    };
    DlqError::Corrupt(format!(
        "{} {what} (expected a dead letter, an ack or a redrive record)",
        path.display()
    ))
}
