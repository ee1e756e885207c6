//! [`JsonlSink`]: dead letters in one append-only JSON Lines file.
//!
//! See [`JsonlSink`] for the file format, group commit, crashes, several processes on one
//! file, and cancellation. The module is cut by concern: `writer` (the sink's thread and its
//! group commits), `index` (the lines, and the index they build in memory), `file` (opening,
//! ownership, permissions, locks), `compact` (rewriting the file as its live state),
//! `set_aside` (the torn and unreadable lines taken out of it).

mod compact;
mod file;
mod index;
mod set_aside;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, Page,
    RedriveRecord, Resolution, Stats,
};

use file::Access;
pub use set_aside::{QuarantinedLine, TornLine};
use writer::{Core, Op, Read, Write, Writer};

/// A [`DeadLetterStore`] on one append-only, owner-only JSON Lines file.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, FailureClass, JsonlSink, Page, Resolution};
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
/// drop(sink);
///
/// // The line is the letter itself, its times in UTC.
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert_eq!(serde_json::from_str::<DeadLetter>(text.trim_end()).unwrap(), letter);
/// assert!(text.contains(r#""first_failed_at":"2026-08-18T17:11:03.000+00:00""#), "{text}");
///
/// let sink = JsonlSink::open(&path)?;
/// assert_eq!(sink.stats().await?.pending, 1);
/// assert_eq!(sink.page(&Page::first(10)).await?, [letter.clone()]);
/// let by_hand = Resolution::new("alice", at("2026-08-20T09:00:00Z"));
/// assert!(sink.resolve(&letter.msg_id, &by_hand).await?);
/// assert_eq!(sink.page(&Page::first(10)).await?, []);
/// // Kept, with who and when, until purged.
/// assert_eq!(sink.get(&letter.msg_id).await?.unwrap().resolved, Some(by_hand));
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
/// {"lease":"M-1","run_id":"5f0c8a1e2b3d4c6f","until":"2026-08-20T09:01:00.000000Z"}
/// {"audit":{"run_id":"5f0c8a1e2b3d4c6f","msg_id":"M-1","who":"alice","target":"deposit","at":"2026-08-20T09:00:00.000+00:00"}}
/// {"ack":"M-1","at":"2026-08-20T09:00:01.000+00:00","by":"alice","run_id":"5f0c8a1e2b3d4c6f"}
/// {"audit":{"run_id":"5f0c8a1e2b3d4c6f","msg_id":"M-1",...,"outcome":"redriven","finished_at":"..."}}
/// {"redrive":{"run_id":"5f0c8a1e2b3d4c6f","who":"alice","filter":"class=system",...}}
/// ```
///
/// - A **letter line** is the [`DeadLetter`] itself, with exactly its JSON field names: the
///   letter's whole state after the operation that wrote it. A re-park writes the merged
///   letter ([`DeadLetter::absorb`]: the first `original` stays), a put-back the letter with
///   the failure merged in. The latest letter line of a `msg_id` is its letter, so
///   `grep M-1 dlq.jsonl` shows a letter's whole history.
/// - An **ack line** resolves the letter ([`Resolution`]: `at`, `by`, `run_id`) and ends any
///   lease on it. (Lines from before resolutions kept who have only `ack` and `at`: resolved by
///   `""`.)
/// - A **lease line** gives the letter to a redrive run until `until`; a **release line**
///   (`{"release":"M-1","run_id":"..."}`) ends that run's lease. Leases live in the file, so a
///   lease survives a restart, and another process sees it.
/// - An **audit line** is an [`AuditEntry`]: the intent, and later the same `(run_id, msg_id)`
///   with its outcome, which replaces it. A **redrive line** is a [`RedriveRecord`].
/// - An object with an `"ack"`, `"lease"`, `"release"`, `"audit"` or `"redrive"` key is that
///   line; every other line must be a letter. Blank lines are ignored; a line that is none of
///   these is moved aside (below, "Crashes and unreadable lines").
///
/// Nothing is deleted from the file but by compaction, below.
///
/// # Group commit and durability
///
/// Every sink has a thread of its own that does all of its file work; `park` and every other
/// method only queue their operation and await the answer, so parking never blocks a runtime
/// worker, however slow the disk. The operations that queue up while one group is being
/// written and synced form the next group: the thread takes the file's lock, decides each
/// operation in order against the index (a lease or a resolve sees the ones before it), and
/// appends all their lines with one `write(2)` on a file opened with `O_APPEND`, followed by one
/// `fdatasync`. Only then does any caller of the group hear back, so a letter whose `park`
/// returned `Ok` survives a crash of the process, and of the machine on a disk that honours
/// flushes. (A new file's directory is synced too.) In a burst, hundreds of letters share one
/// fsync; [`group_commits`](JsonlSink::group_commits) counts them.
///
/// A group that cannot be written (disk full, file size limit, I/O error) fails as a whole:
/// every caller in it gets the [`DlqError::Io`] (naming the file and the cause), the index
/// forgets the group, and the file is cut back to the end of its last complete line, so nothing
/// of the group stays readable as a letter. The next group tries again: a disk that recovers
/// gets letters again. A line longer than [`MAX_LINE`](JsonlSink::MAX_LINE) is refused before
/// anything is written, for that caller alone.
///
/// # Crashes and unreadable lines
///
/// A crash *during* a write can leave at most the last line torn: a prefix of it with no
/// newline (a `SIGKILL` that lands while the kernel copies a group stops the copy), or garbage
/// after a power loss. The next time the file is read under its lock (by [`open`](JsonlSink::open),
/// or by any sink's next group), the torn line is logged with a warning and its line number,
/// appended to `<path>.torn` (never deleted) and cut off, so appends continue cleanly. A torn
/// line belongs to a group whose callers never heard `Ok`: a torn letter's message was not
/// acknowledged and will come again; a torn ack leaves its letter pending (redrive targets are
/// idempotent, so redriving it again is safe).
///
/// A complete line (newline-terminated, wherever it is) that is none of the lines above is not
/// a crash artefact: a hand edit, another program, a disk that changed bytes, or a letter an
/// older version parked that cannot be read back (see
/// [`MAX_ORIGINAL_DEPTH`](crate::dlq::MAX_ORIGINAL_DEPTH)). One such line must not make every
/// other letter unreadable, so it is quarantined: logged with a warning naming the file and the
/// line, appended to `<path>.quarantine` (owner-only, never deleted) with why it could not be
/// read, and taken out of the file, which is rewritten without it as `<path>.compact` and
/// renamed over the path (every other line byte for byte); see
/// [`quarantined`](JsonlSink::quarantined). Reading is bounded: a line longer than `MAX_LINE`
/// is unreadable (torn, if it
/// is an unterminated last line), and no more than `MAX_LINE` bytes of it are ever held.
///
/// # Several processes on one file
///
/// The service parks, `retry-dlq` lists and redrives, a monitor counts: each process opens its
/// own sink on the file. A group commit takes an exclusive advisory lock (`flock`) only for
/// its catch-up, append and fsync: first it reads the lines other processes appended since its
/// index last caught up, so what it decides (a lease, above all) is decided against the whole
/// file, atomically across processes. A read (`page`, `stats`, `get`, ...) first checks
/// whether the file at the path is still the one it read and as long as it read it (one
/// `stat`); if not, it catches up under a shared lock before answering. Reads answer from the
/// index in memory: the file is never read whole per call. A compaction renames a new file over
/// the path; the others notice (its inode changed) the next time they take the lock, and read
/// the new file from the start. Locks are advisory and need a file system that supports
/// `flock` (local ones do; on one without, one process per file is up to you). A sink waits at
/// most 5 s for the lock, then fails with [`DlqError::Io`] saying so: a holder keeps it that
/// long only when stuck, or when it is an older `JsonlSink`, which held it while open.
///
/// # Compaction
///
/// Resolved letters, superseded letter lines, ended leases and acks are dead history.
/// [`purge_resolved`](DeadLetterStore::purge_resolved) drops the letters resolved before its
/// cut by rewriting the file as its live state: every remaining letter's current state, live
/// leases, every audit row and redrive record, written to `<path>.compact`, synced, renamed over
/// the file, and the directory synced. [`open`](JsonlSink::open) does the same when the file
/// holds more than 1 MiB of dead history and more than four times as much as live state. So
/// opening, and the index in memory, follow what the file holds now.
///
/// # Who may read it
///
/// [`open`](JsonlSink::open) never follows a symbolic link at the path (`O_NOFOLLOW`: it is
/// refused with an error saying so), refuses a file owned by another user, and creates the file
/// (and `<path>.torn`, `<path>.quarantine`, `<path>.compact`) with mode 0600. An existing file that others may read
/// or write is narrowed to 0600 (`fchmod`) with a warning naming the mode it had, rather than
/// refused: the letters hold the originals, which is what a wider mode leaks; the file is this
/// user's own (checked just before); and refusing it would stop the service from starting over
/// a permission slip, leaving every give-up "not parked". [`open_read_only`](JsonlSink::open_read_only)
/// changes nothing and checks neither owner nor mode, but does not follow links either.
///
/// # Cancellation
///
/// A future of this sink queues its operation on its first poll. Dropped before that, it did
/// nothing; dropped later, the operation still runs to its end in the thread: a dropped `park`
/// may still park its letter (its caller just does not hear so), never half of it. Dropping the
/// sink lets the thread finish what is queued, then joins it.
pub struct JsonlSink {
    path: PathBuf,
    torn: Vec<TornLine>,
    quarantined: Vec<QuarantinedLine>,
    writer: Writer,
}

impl JsonlSink {
    /// The longest line the file may hold, newline excluded: 4 MiB. Parking a letter whose
    /// line would be longer (its original, reason and history together) fails with
    /// [`DlqError::Serialize`]; a line longer than this in the file is quarantined, or
    /// torn when it is an unterminated last line, and never read into memory whole. Generous
    /// for any message a queue would carry (SQS and Kafka stop at 1 MiB by default).
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
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub const MAX_LINE: usize = index::MAX_LINE;

    /// Opens the dead-letter file at `path`, creating it (mode 0600) if needed, and reads it
    /// under its lock: every line should be a letter, an ack, a lease, a release, an audit row or
    /// a redrive record. Blocks while it reads (call it at start-up, or in `spawn_blocking`).
    ///
    /// - A symbolic link at `path` is refused; so is a file owned by another user. A file that
    ///   others may read or write is narrowed to 0600, with a warning.
    /// - A torn last line (no trailing newline: a crash mid-write) is logged with a warning,
    ///   appended to `<path>.torn` and cut off the file; see [`torn`](Self::torn).
    /// - A complete line that is none of those above, wherever it is, is logged with a warning,
    ///   appended to `<path>.quarantine` and taken out of the file, and the rest is read; see
    ///   [`quarantined`](Self::quarantined).
    /// - A file with more than 1 MiB of dead history, more than four times its live state, is
    ///   compacted.
    ///
    /// Other sinks, in this process or others, may have the same file open: see "Several
    /// processes on one file" above.
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] if the file cannot be created, opened, locked (within 5 s), read or
    /// repaired, is a symbolic link, is not a regular file, or is owned by another user.
    /// Never [`DlqError::Corrupt`]: an unreadable line is quarantined, not an error.
    ///
    /// ```
    /// use retry_core::dlq::{DlqError, JsonlSink};
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
    ///
    /// // An unreadable line is moved aside, never a reason to refuse the file.
    /// let ack = "{\"ack\":\"M-1\",\"at\":\"2026-08-20T09:00:00Z\"}\n";
    /// std::fs::write(&path, format!("{{\"msg_id\": \n{ack}")).unwrap();
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert_eq!(sink.quarantined()[0].line, 1);
    /// assert_eq!(std::fs::read_to_string(&path).unwrap(), ack);
    /// # drop(sink);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        Self::start(path.as_ref(), Access::Write)
    }

    /// Opens `path` to read only, beside the processes that write it: for monitoring and the
    /// `retry-dlq` command. Creates nothing, repairs nothing, needs no write permission and
    /// takes only a shared lock while it catches up: a torn last line is reported in
    /// [`torn`](Self::torn) and unreadable lines in [`quarantined`](Self::quarantined) (and
    /// skipped), but left where they are (a writer moves them aside), and every write
    /// fails with [`DlqError::Io`]. Each read first catches up with what the writers appended.
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetterSink, DeadLetterStore, JsonlSink};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let letter: retry_core::dlq::DeadLetter = serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": null, "reason": "r", "attempts": 1,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
    /// let path = std::env::temp_dir().join(format!("dlq-doc-ro-{}.jsonl", std::process::id()));
    /// let writer = JsonlSink::open(&path).unwrap();
    /// let reader = JsonlSink::open_read_only(&path).unwrap();
    /// assert_eq!(reader.stats().await.unwrap().pending, 0);
    /// writer.park(&letter).await.unwrap();
    /// assert_eq!(reader.stats().await.unwrap().pending, 1, "caught up");
    /// assert!(reader.park(&letter).await.is_err(), "read-only");
    /// # drop((writer, reader));
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        Self::start(path.as_ref(), Access::Read)
    }

    fn start(path: &Path, access: Access) -> Result<Self, DlqError> {
        let (core, found) = Core::load(path.to_path_buf(), access)?;
        Ok(JsonlSink {
            path: path.to_path_buf(),
            torn: found.torn.into_iter().collect(),
            quarantined: found.quarantined,
            writer: Writer::start(core)?,
        })
    }

    /// The torn last line [`open`](Self::open) found and moved to `<path>.torn` (or that
    /// [`open_read_only`](Self::open_read_only) found and left), if any: at most one, since only
    /// the last line can be torn. Torn lines found later (another process killed mid-write)
    /// are moved aside and logged, not listed here.
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

    /// The unreadable lines [`open`](Self::open) found and moved to `<path>.quarantine` (or
    /// that [`open_read_only`](Self::open_read_only) found, skipped and left), in file order.
    /// Lines found later (written by something else while the sink was open) are moved aside
    /// and logged, not listed here.
    ///
    /// ```
    /// use retry_core::dlq::JsonlSink;
    ///
    /// let path = std::env::temp_dir().join(format!("dlq-doc-quarantined-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// assert!(sink.quarantined().is_empty(), "a new file has no unreadable line");
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn quarantined(&self) -> &[QuarantinedLine] {
        &self.quarantined
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
    /// one `fdatasync`, for every letter (and lease, ack, audit row...) queued while the one
    /// before it was syncing. Parked letters divided by this is the group size a burst got.
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

    async fn write<T>(&self, op: impl FnOnce(writer::Reply<T>) -> Write) -> Result<T, DlqError> {
        self.writer.call(|reply| Op::Write(op(reply))).await
    }

    async fn read<T>(&self, op: impl FnOnce(writer::Reply<T>) -> Read) -> Result<T, DlqError> {
        self.writer.call(|reply| Op::Read(op(reply))).await
    }
}

impl fmt::Debug for JsonlSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonlSink")
            .field("path", &self.path)
            .field("torn", &self.torn)
            .field("quarantined", &self.quarantined)
            .field("group_commits", &self.group_commits())
            .finish_non_exhaustive()
    }
}

impl DeadLetterSink for JsonlSink {
    /// Parks `letter` in the next group commit, and returns once that group is synced. A
    /// letter with the `msg_id` of one the file holds is merged into it
    /// ([`DeadLetter::absorb`]), and the merged letter is written.
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] if the group cannot be written or synced (nothing of it stays in the
    /// file); [`DlqError::Serialize`] if the letter cannot be serialised, its line would be
    /// longer than [`JsonlSink::MAX_LINE`], or its original nests deeper than
    /// [`MAX_ORIGINAL_DEPTH`](crate::dlq::MAX_ORIGINAL_DEPTH) (nothing is written).
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, JsonlSink};
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
    /// let parked = sink.get("M-1").await.unwrap().unwrap();
    /// assert_eq!((parked.original, parked.attempts), (serde_json::json!(1), 8));
    /// assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn park(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        letter.check_readable()?;
        let letter = Box::new(letter.clone());
        self.write(|reply| Write::Park(letter, reply)).await
    }
}

impl DeadLetterStore for JsonlSink {
    /// From the index in memory, after catching up with the file.
    ///
    /// ```
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, JsonlSink, Page};
    /// # fn letter(id: &str, first: &str) -> DeadLetter { serde_json::from_value(serde_json::json!({
    /// #   "msg_id": id, "original": null, "reason": "gave up", "attempts": 3,
    /// #   "first_failed_at": first, "last_failed_at": first,
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap() }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-page-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// sink.park(&letter("M-late", "2026-08-19T03:00:00Z")).await.unwrap();
    /// sink.park(&letter("M-early", "2026-08-19T10:00:00+09:00")).await.unwrap(); // 01:00Z
    /// let first = sink.page(&Page::first(1)).await.unwrap();
    /// assert_eq!(first[0].msg_id, "M-early");
    /// let next = sink.page(&Page::first(1).next_after(&first[0])).await.unwrap();
    /// assert_eq!(next[0].msg_id, "M-late");
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn page(&self, page: &Page) -> Result<Vec<DeadLetter>, DlqError> {
        let page = page.clone();
        self.read(|reply| Read::Page(page, reply)).await
    }

    /// From counts kept in memory, after catching up with the file.
    async fn stats(&self) -> Result<Stats, DlqError> {
        self.read(Read::Stats).await
    }

    async fn get(&self, msg_id: &str) -> Result<Option<DeadLetter>, DlqError> {
        let msg_id = msg_id.to_owned();
        self.read(|reply| Read::Get(msg_id, reply)).await
    }

    /// Decided under the file's exclusive lock, after catching up: atomic across every sink
    /// and process on the file. Writes a lease line.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, JsonlSink};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let letter: DeadLetter = serde_json::from_value(serde_json::json!({
    /// #   "msg_id": "M-1", "original": null, "reason": "r", "attempts": 1,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
    /// let path = std::env::temp_dir().join(format!("dlq-doc-lease-{}.jsonl", std::process::id()));
    /// let service = JsonlSink::open(&path).unwrap();
    /// service.park(&letter).await.unwrap();
    /// // Two processes' sinks (here, two sinks in one) ask for the same letter.
    /// let redrive = JsonlSink::open(&path).unwrap();
    /// let hour = Duration::from_secs(3600);
    /// assert!(redrive.lease("M-1", "run-a", hour).await.unwrap().is_some());
    /// assert!(service.lease("M-1", "run-b", hour).await.unwrap().is_none());
    /// drop(redrive);
    /// // The lease is in the file: it outlives the sink that took it.
    /// let reopened = JsonlSink::open(&path).unwrap();
    /// assert_eq!(reopened.stats().await.unwrap().leased, 1);
    /// # drop((service, reopened));
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn lease(
        &self,
        msg_id: &str,
        run_id: &str,
        ttl: Duration,
    ) -> Result<Option<DeadLetter>, DlqError> {
        let (msg_id, run_id) = (msg_id.to_owned(), run_id.to_owned());
        self.write(|reply| Write::Lease {
            msg_id,
            run_id,
            ttl,
            reply,
        })
        .await
    }

    async fn release(&self, msg_id: &str, run_id: &str) -> Result<bool, DlqError> {
        let (msg_id, run_id) = (msg_id.to_owned(), run_id.to_owned());
        self.write(|reply| Write::Release {
            msg_id,
            run_id,
            reply,
        })
        .await
    }

    /// Writes an ack line; the letter stays in the file, resolved, until purged.
    async fn resolve(&self, msg_id: &str, resolution: &Resolution) -> Result<bool, DlqError> {
        let (msg_id, resolution) = (msg_id.to_owned(), resolution.clone());
        self.write(|reply| Write::Resolve {
            msg_id,
            resolution,
            reply,
        })
        .await
    }

    /// Writes the merged letter and a release line, in one group.
    async fn put_back(
        &self,
        msg_id: &str,
        run_id: &str,
        failure: &Failure,
    ) -> Result<bool, DlqError> {
        let (msg_id, run_id, failure) = (msg_id.to_owned(), run_id.to_owned(), failure.clone());
        self.write(|reply| Write::PutBack {
            msg_id,
            run_id,
            failure,
            reply,
        })
        .await
    }

    /// Compacts the file without the purged letters (see "Compaction" above); nothing is
    /// rewritten when no letter is old enough.
    ///
    /// ```
    /// # use std::time::{Duration, SystemTime};
    /// # use retry_core::dlq::{DeadLetter, DeadLetterSink, DeadLetterStore, JsonlSink, Resolution};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let letter = |id: &str| -> DeadLetter { serde_json::from_value(serde_json::json!({
    /// #   "msg_id": id, "original": null, "reason": "r", "attempts": 1,
    /// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
    /// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap() };
    /// let path = std::env::temp_dir().join(format!("dlq-doc-purge-{}.jsonl", std::process::id()));
    /// let sink = JsonlSink::open(&path).unwrap();
    /// sink.park(&letter("M-1")).await.unwrap();
    /// sink.park(&letter("M-2")).await.unwrap();
    /// let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    /// sink.resolve("M-1", &Resolution::new("alice", an_hour_ago)).await.unwrap();
    /// assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    ///
    /// assert_eq!(sink.purge_resolved(SystemTime::now()).await.unwrap(), 1);
    /// assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1, "only M-2's line");
    /// assert!(sink.get("M-1").await.unwrap().is_none());
    /// # drop(sink);
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    async fn purge_resolved(&self, before: SystemTime) -> Result<u64, DlqError> {
        self.writer.call(|reply| Op::Purge(before, reply)).await
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), DlqError> {
        let entry = entry.clone();
        self.write(|reply| Write::Audit(entry, reply)).await
    }

    async fn audit_rows(&self, run_id: Option<&str>) -> Result<Vec<AuditEntry>, DlqError> {
        let run_id = run_id.map(str::to_owned);
        self.read(|reply| Read::AuditRows(run_id, reply)).await
    }

    async fn record_redrive(&self, record: &RedriveRecord) -> Result<(), DlqError> {
        let record = record.clone();
        self.write(|reply| Write::Redrive(record, reply)).await
    }

    async fn redrives(&self) -> Result<Vec<RedriveRecord>, DlqError> {
        self.read(Read::Redrives).await
    }
}
