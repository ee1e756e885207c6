//! [`JsonlSink`]: dead letters appended to one JSON Lines file; [`JsonlReader`]: reading
//! them back.
//!
//! See [`JsonlSink`] for the file format, group commit, crashes, several processes on one
//! file, and cancellation. The module is cut by concern: `writer` (the sink's thread and its
//! group commits), `file` (opening, ownership, permissions, locks), `read` (the lines read
//! back), `damaged` (torn and unreadable lines).

mod damaged;
mod file;
mod read;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};

use super::{DeadLetter, DeadLetterSink, DlqError};

pub use damaged::{TornLine, UnreadableLine};
use file::MAX_LINE;
pub use read::{JsonlLine, JsonlReader};
use writer::{Core, Writer};

/// A [`DeadLetterSink`] that appends each letter to one owner-only JSON Lines file: for a
/// service that wants no database. It only parks: to list, acknowledge or redrive the letters,
/// move them into a store with `retry-dlq import FILE --into dlq.sqlite` (or read them with
/// [`JsonlReader`]); a service with a SQLite file for its idempotency keys is better served by
/// `SqliteDeadLetters` (crate `retry-sqlite`) from the start.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, FailureClass, JsonlLine, JsonlReader, JsonlSink};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), retry_core::dlq::DlqError> {
/// let path = std::env::temp_dir().join(format!("dlq-doc-sink-{}.jsonl", std::process::id()));
/// let at = |text| retry_core::time::parse_rfc3339(text).unwrap();
/// let letter = DeadLetter {
///     msg_id: "M-20260819-000123".into(),
///     original: serde_json::json!({ "amount": 10 }),
///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(),
///     attempts: 5,
///     first_failed_at: at("2026-08-19T02:11:03+09:00"),
///     last_failed_at: at("2026-08-19T02:12:47+09:00"),
///     trace_id: "a1b2c3d4".into(),
///     class: FailureClass::System,
///     error_type: "FetchError".into(),
///     idempotency_key: None,
///     source: Some("payments::deposit".into()),
///     redacted: false,
///     key_scope: None,
///     key_expires_at: None,
///     history: Vec::new(),
///     resolved: None,
/// };
///
/// let sink = JsonlSink::open(&path)?;
/// sink.park(&letter).await?; // durable once this returns Ok
///
/// // The line is the letter itself, its times in UTC.
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert_eq!(serde_json::from_str::<DeadLetter>(text.trim_end()).unwrap(), letter);
/// assert!(text.contains(r#""first_failed_at":"2026-08-18T17:11:03.000+00:00""#), "{text}");
///
/// // Read back, beside the sink.
/// let lines: Vec<JsonlLine> = JsonlReader::open(&path)?.collect::<Result<_, _>>()?;
/// assert_eq!(lines, [JsonlLine::Letter(letter)]);
/// # drop(sink);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok(())
/// # }
/// ```
///
/// # The file
///
/// One JSON object per line, each a [`DeadLetter`] with exactly its JSON field names, written
/// whole and never changed afterwards:
///
/// ```text
/// {"msg_id":"M-1","original":{"amount":10},"reason":"gave up after 5 attempts: 503 Service Unavailable","attempts":5,"first_failed_at":"2026-08-19T02:11:03.000+00:00","last_failed_at":"2026-08-19T02:12:47.000+00:00","trace_id":"a1b2c3d4","class":"system","error_type":"FetchError"}
/// ```
///
/// Each park is its own line: a `msg_id` that gives up again is on a later line too, and the
/// store it is imported into merges them as its own `park` does ([`DeadLetter::absorb`]: the
/// first `original` stays, attempts add up). `grep M-1 dlq.jsonl` shows every give-up of a
/// message. Nothing is ever removed from the file but a torn tail (below).
///
/// # Group commit and durability
///
/// Every sink has a thread of its own that does all of its file work; `park` serialises the
/// letter, queues its line and awaits the answer, so parking never blocks a runtime worker,
/// however slow the disk. The lines that queue up while one group is being written and synced
/// form the next group: the thread takes the file's lock and appends them all with one
/// `write(2)` on a file opened with `O_APPEND`, followed by one `fdatasync`. Only then does any caller of the group hear back, so a letter whose `park`
/// returned `Ok` survives a crash of the process, and of the machine on a disk that honours
/// flushes. (A new file's directory is synced too.) In a burst, hundreds of letters share one
/// fsync; [`group_commits`](JsonlSink::group_commits) counts them.
///
/// A group that cannot be written (disk full, file size limit, I/O error) fails as a whole:
/// every caller in it gets the [`DlqError::Io`] (naming the file and the cause), and the file
/// is cut back to where it ended, so nothing of the group stays readable as a letter. The next group tries again: a disk that recovers
/// gets letters again. A line longer than [`MAX_LINE`](JsonlSink::MAX_LINE) is refused before
/// anything is written, for that caller alone.
///
/// # Crashes and damaged lines
///
/// A crash *during* a write can leave at most the last line torn: a prefix of it with no
/// newline (a `SIGKILL` that lands while the kernel copies a group stops the copy), or garbage
/// after a power loss. Before every group, under the file's lock, and in [`open`](JsonlSink::open),
/// a sink checks that the file ends in a newline (it reads the tail, never the whole file); a
/// torn line is logged with a warning, appended to `<path>.torn` (never deleted) and cut off, so
/// the next letter starts on a line of its own. A torn line belongs to a group whose callers
/// never heard `Ok`: its message was not acknowledged and will come again.
///
/// A complete line that is not a letter (a hand edit, another program, a disk that changed
/// bytes) is left where it is: the sink never reads the lines it wrote, and [`JsonlReader`]
/// reports it ([`JsonlLine::Unreadable`]) and reads on, so one bad line never hides the letters
/// after it. A letter that could not be read back is never written: its original may nest at
/// most [`MAX_ORIGINAL_DEPTH`](crate::dlq::MAX_ORIGINAL_DEPTH) levels, and its line may be at
/// most [`MAX_LINE`](JsonlSink::MAX_LINE) bytes long.
///
/// # Several processes on one file
///
/// Several processes may park into one file, each with its own sink: a group commit takes an
/// exclusive advisory lock (`flock`) for its tail check, append and fsync, so groups never
/// interleave. Locks are advisory and need a file system that supports `flock` (local ones do;
/// on one without, one process per file is up to you). A sink waits at most 5 s for the lock,
/// then fails with [`DlqError::Io`] saying so: a holder keeps it that long only when stuck.
///
/// A file moved away while sinks have it open (archived after `retry-dlq import`, rotated) or
/// removed gets no more letters: the next group notices that the path names another file (or
/// none) and appends to the file now at the path, creating it. (On Unix; elsewhere, stop the
/// service before moving the file.)
///
/// # Who may read it
///
/// [`open`](JsonlSink::open) never follows a symbolic link at the path (`O_NOFOLLOW`: it is
/// refused with an error saying so), refuses a file owned by another user, and creates the file
/// (and `<path>.torn`) with mode 0600. An existing file that others may read or write is
/// narrowed to 0600 (`fchmod`) with a warning naming the mode it had, rather than refused: the
/// letters hold the originals, which is what a wider mode leaks; the file is this user's own
/// (checked just before); and refusing it would stop the service from starting over a
/// permission slip, leaving every give-up "not parked". [`JsonlReader`] changes nothing and
/// checks neither owner nor mode, but does not follow links either.
///
/// # Cancellation
///
/// A `park` future queues its line on its first poll. Dropped before that, it did nothing;
/// dropped later, the line is still written: a dropped `park` may still park its letter (its
/// caller just does not hear so), never half of it. Dropping the sink lets the thread finish
/// what is queued, then joins it.
pub struct JsonlSink {
    path: PathBuf,
    torn: Option<TornLine>,
    writer: Writer,
}

impl JsonlSink {
    /// The longest line the file may hold, newline excluded: 4 MiB. Parking a letter whose
    /// line would be longer (its original, reason and history together) fails with
    /// [`DlqError::Serialize`], and nothing is written. Generous for any message a queue would
    /// carry (SQS and Kafka stop at 1 MiB by default).
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, DlqError, JsonlSink};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let mut letter: DeadLetter = serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": null, "reason": "r", "attempts": 1,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
    /// let path = std::env::temp_dir().join(format!("dlq-doc-max-line-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// letter.original = serde_json::json!("x".repeat(JsonlSink::MAX_LINE));
    /// assert!(matches!(sink.park(&letter).await, Err(DlqError::Serialize(_))));
    /// assert_eq!(std::fs::read(&path).unwrap(), b"");
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub const MAX_LINE: usize = MAX_LINE;

    /// Opens the dead-letter file at `path` to append to, creating it (mode 0600) if needed,
    /// and moves a torn last line aside (see [`torn`](Self::torn)). Blocks while it opens and
    /// checks the tail (call it at start-up, or in `spawn_blocking`).
    ///
    /// A symbolic link at `path` is refused; so is a file owned by another user. A file that
    /// others may read or write is narrowed to 0600, with a warning. Other sinks, in this
    /// process or others, may have the same file open.
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] if the file cannot be created, opened, locked (within 5 s) or
    /// repaired, is a symbolic link, is not a regular file, or is owned by another user.
    ///
    /// ```
    /// use retry_core::dlq::JsonlSink;
    ///
    /// let dir = std::env::temp_dir().join(format!("dlq-doc-open-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("dlq.jsonl");
    /// let sink = JsonlSink::open(&path).unwrap();
    /// # #[cfg(unix)] {
    /// use std::os::unix::fs::PermissionsExt;
    /// assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    ///
    /// // A link is not followed.
    /// let link = dir.join("link.jsonl");
    /// std::os::unix::fs::symlink(&path, &link).unwrap();
    /// let error = JsonlSink::open(&link).unwrap_err();
    /// // The error says "dead-letter store failed"; its source, why.
    /// let why = retry_core::error_chain(&error).to_string();
    /// assert!(why.contains("symbolic link"), "{why}");
    /// # }
    ///
    /// // Several sinks may have one file open.
    /// let second = JsonlSink::open(&path).unwrap();
    /// drop((sink, second));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        let path = path.as_ref().to_path_buf();
        let (core, torn) = Core::open(path.clone())?;
        Ok(JsonlSink {
            path,
            torn,
            writer: Writer::start(core)?,
        })
    }

    /// The torn last line [`open`](Self::open) found and moved to `<path>.torn`, if any. Torn
    /// lines found later (another process killed mid-write) are moved aside and logged, not
    /// kept here.
    ///
    /// ```
    /// use retry_core::dlq::JsonlSink;
    ///
    /// let path = std::env::temp_dir().join(format!("dlq-doc-torn-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert!(sink.torn().is_none(), "a new file has nothing torn");
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn torn(&self) -> Option<&TornLine> {
        self.torn.as_ref()
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

    /// How many group commits this sink has made since it was opened: each one `write(2)` and
    /// one `fdatasync`, for every letter queued while the one before it was syncing. Parked
    /// letters divided by this is the group size a burst got.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, JsonlSink};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let letter = |id: &str| -> retry_core::dlq::DeadLetter { serde_json::from_value(serde_json::json!({
    /// #   "msg_id": id, "original": null, "reason": "r", "attempts": 1,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap() };
    /// let path = std::env::temp_dir().join(format!("dlq-doc-commits-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// // One at a time, nothing else queued: a group of one each. (Letters parked concurrently
    /// // share a group when they queue while the one before is syncing, which depends on timing;
    /// // tests/dlq_jsonl.rs measures the group size of a burst.)
    /// sink.park(&letter("M-1")).await.unwrap();
    /// assert_eq!(sink.group_commits(), 1);
    /// sink.park(&letter("M-2")).await.unwrap();
    /// assert_eq!(sink.group_commits(), 2);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub fn group_commits(&self) -> u64 {
        self.writer.commits()
    }
}

impl fmt::Debug for JsonlSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonlSink")
            .field("path", &self.path)
            .field("torn", &self.torn)
            .field("group_commits", &self.group_commits())
            .finish_non_exhaustive()
    }
}

impl DeadLetterSink for JsonlSink {
    /// Appends `letter` as one line in the next group commit, and returns once that group is
    /// synced. A `msg_id` parked before gets a line of its own again.
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] if the group cannot be written or synced (nothing of it stays in the
    /// file); [`DlqError::Serialize`] if the letter cannot be serialised, its line would be
    /// longer than [`JsonlSink::MAX_LINE`], or its original nests deeper than
    /// [`MAX_ORIGINAL_DEPTH`](crate::dlq::MAX_ORIGINAL_DEPTH) (nothing is written).
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, JsonlSink};
    /// # fn letter(original: u32, attempts: u32) -> DeadLetter { serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": original, "reason": "gave up", "attempts": attempts,
    /// #   "first_failed_at": "2026-08-19T02:11:03+09:00", "last_failed_at": "2026-08-19T02:12:47+09:00",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap() }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-park-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// sink.park(&letter(1, 5)).await.unwrap();
    /// sink.park(&letter(2, 3)).await.unwrap(); // the same message gave up again
    /// assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        letter.check_readable()?;
        let line = file::to_line(letter)?;
        if line.len() - 1 > MAX_LINE {
            return Err(DlqError::Serialize(format!(
                "dead letter `{}`: its line would be {} bytes, more than the {MAX_LINE} a \
                 dead-letter file line may hold",
                letter.msg_id,
                line.len() - 1
            )));
        }
        self.writer.append(line).await
    }
}
