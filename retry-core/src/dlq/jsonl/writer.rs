//! The sink's own thread, which does all of its file work: callers queue an operation and await
//! the answer, so no runtime worker ever waits for the disk. What queues up while one group is
//! being written and synced becomes the next group: one lock, one catch-up, one `write(2)` and
//! one `fdatasync` for all of it (group commit), and only then does any caller of the group hear
//! back.

use std::collections::VecDeque;
use std::io::{self, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use super::file::{self, Access, FileId, Locked, io_error, same_error};
use super::index::{self, Index, Lease, Line, Position, Undo};
use super::set_aside::{QuarantinedLine, TornLine};
use crate::dlq::{
    AuditEntry, DeadLetter, DlqError, Failure, Page, RedriveRecord, Resolution, Stats,
};
use crate::time::later;

/// At most this many operations make one group: bounds the memory and the latency of one
/// commit when a very large burst is queued.
const MAX_GROUP: usize = 4096;

/// Where the thread sends an operation's answer.
pub(super) type Reply<T> = oneshot::Sender<Result<T, DlqError>>;

/// What a caller asks of the thread.
pub(super) enum Op {
    /// Writes lines: committed in groups.
    Write(Write),
    /// Purges resolved letters older than the time, by compacting the file.
    Purge(SystemTime, Reply<u64>),
    /// Reads the index, after catching up with the file.
    Read(Read),
}

/// The operations that append lines (or decide, under the lock, that there is nothing to
/// append).
pub(super) enum Write {
    Park(Box<DeadLetter>, Reply<()>),
    Lease {
        msg_id: String,
        run_id: String,
        ttl: Duration,
        reply: Reply<Option<DeadLetter>>,
    },
    Release {
        msg_id: String,
        run_id: String,
        reply: Reply<bool>,
    },
    Resolve {
        msg_id: String,
        resolution: Resolution,
        reply: Reply<bool>,
    },
    PutBack {
        msg_id: String,
        run_id: String,
        failure: Failure,
        reply: Reply<bool>,
    },
    Audit(AuditEntry, Reply<()>),
    Redrive(RedriveRecord, Reply<()>),
}

/// The questions the index answers.
pub(super) enum Read {
    Page(Page, Reply<Vec<DeadLetter>>),
    Stats(Reply<Stats>),
    Get(String, Reply<Option<DeadLetter>>),
    AuditRows(Option<String>, Reply<Vec<AuditEntry>>),
    Redrives(Reply<Vec<RedriveRecord>>),
}

/// The caller's side: a queue, and the thread that works through it.
pub(super) struct Writer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    commits: Arc<AtomicU64>,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    /// The sink was dropped, or the thread stopped: nothing more is accepted.
    closed: bool,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while the queue is locked.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next group: everything queued (up to [`MAX_GROUP`]), waiting for the first
    /// operation if there is none; `None` once closed and empty.
    fn next_batch(&self) -> Option<Vec<Op>> {
        let mut queue = self.queue();
        loop {
            if !queue.ops.is_empty() {
                let n = queue.ops.len().min(MAX_GROUP);
                return Some(queue.ops.drain(..n).collect());
            }
            if queue.closed {
                return None;
            }
            queue = self
                .wake
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Closes the queue when the thread ends, however it ends: a caller queuing after that gets
/// an error at once instead of waiting for an answer that will not come, and the operations
/// still queued are dropped, which answers their callers with an error too.
struct CloseOnExit(Arc<Shared>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        let stranded = {
            let mut queue = self.0.queue();
            queue.closed = true;
            std::mem::take(&mut queue.ops)
        };
        drop(stranded);
    }
}

fn stopped() -> DlqError {
    DlqError::Io(Box::new(io::Error::other(
        "the dead-letter file's writer thread has stopped",
    )))
}

impl Writer {
    /// Starts the thread that owns `core` from now on.
    pub(super) fn start(core: Core) -> Result<Self, DlqError> {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            wake: Condvar::new(),
        });
        let commits = Arc::clone(&core.commits);
        let path = core.path.clone();
        let thread = std::thread::Builder::new()
            .name("retry-dlq-jsonl".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(core, shared)
            })
            .map_err(|e| io_error("cannot start the writer thread of", &path, &e))?;
        Ok(Writer {
            shared,
            thread: Some(thread),
            commits,
        })
    }

    /// Queues the operation `op` makes with its reply channel, and awaits the answer. Only
    /// the queue's mutex is taken here, for as long as a push takes: never the disk.
    ///
    /// Once queued, the operation runs even if this future is dropped: a dropped `park` may
    /// still park its letter (the caller just does not hear it), never the reverse.
    pub(super) async fn call<T>(&self, op: impl FnOnce(Reply<T>) -> Op) -> Result<T, DlqError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = self.shared.queue();
            if queue.closed {
                return Err(stopped());
            }
            queue.ops.push_back(op(reply));
        }
        self.shared.wake.notify_one();
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// How many groups were committed (each one `write(2)` and one `fdatasync`).
    pub(super) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }
}

impl Drop for Writer {
    /// Lets the thread finish what is queued, then waits for it: when the sink is gone, its
    /// file is closed and every queued write was answered.
    fn drop(&mut self) {
        self.shared.queue().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(mut core: Core, shared: Arc<Shared>) {
    let _close = CloseOnExit(Arc::clone(&shared));
    while let Some(batch) = shared.next_batch() {
        core.serve(batch);
    }
}

/// The lines a catch-up could not read.
#[derive(Debug, Default)]
pub(super) struct Found {
    pub(super) torn: Option<TornLine>,
    pub(super) quarantined: Vec<QuarantinedLine>,
}

/// The open file and its index, owned by the thread.
pub(super) struct Core {
    pub(super) path: PathBuf,
    pub(super) access: Access,
    pub(super) file: std::fs::File,
    /// Which file `file` is, to notice a rename over the path (another process compacted).
    pub(super) id: FileId,
    /// How far the file has been read and written.
    pub(super) at: Position,
    /// A failed write could not be cut back: the length it left the file at, to cut back
    /// before the next write (if no other process has written since).
    pub(super) dirty: Option<u64>,
    pub(super) index: Index,
    commits: Arc<AtomicU64>,
}

impl Core {
    /// Opens the file, reads it whole under the lock (moving unreadable lines and a torn last
    /// line aside, for [`Access::Write`]), and compacts it if it holds far more dead history than live state.
    pub(super) fn load(path: PathBuf, access: Access) -> Result<(Core, Found), DlqError> {
        let (file, id, _) = file::open(&path, access)?;
        let mut core = Core {
            path,
            access,
            file,
            id,
            at: Position::default(),
            dirty: None,
            index: Index::default(),
            commits: Arc::default(),
        };
        let locked = core.lock(access == Access::Write)?;
        let found = core.catch_up()?;
        if access == Access::Write
            && let Err(e) = core.compact_if_worth_it()
        {
            // The file is whole, only larger than it needs to be.
            tracing::warn!(target: "retry_core::dlq", path = %core.path.display(), error = %crate::error_chain(&e), "could not compact the dead-letter file");
        }
        drop(locked);
        if access == Access::Read
            && let Some(torn) = &found.torn
        {
            tracing::warn!(target: "retry_core::dlq", path = %core.path.display(), line = torn.line, "the dead-letter file ends in a torn line (a crash mid-write?)");
        }
        Ok((core, found))
    }

    fn serve(&mut self, batch: Vec<Op>) {
        let mut writes = Vec::new();
        let mut purges = Vec::new();
        let mut reads = Vec::new();
        for op in batch {
            match op {
                Op::Write(write) => writes.push(write),
                Op::Purge(before, reply) => purges.push((before, reply)),
                Op::Read(read) => reads.push(read),
            }
        }
        if !writes.is_empty() {
            self.commit(writes);
        }
        for (before, reply) in purges {
            let _ = reply.send(self.purge(before));
        }
        if !reads.is_empty() {
            let fresh = self.refresh();
            let now = SystemTime::now();
            for read in reads {
                self.answer(read, &fresh, now);
            }
        }
    }

    /// One group commit: under the exclusive lock, catch up with what other processes
    /// appended, decide every operation against the index (each seeing the ones before it),
    /// append all their lines with one write and sync. If that fails, the file is cut back,
    /// the index is taken back, and every operation of the group fails with the error.
    fn commit(&mut self, writes: Vec<Write>) {
        let locked = match self.lock_for_write() {
            Ok(locked) => locked,
            Err(error) => {
                for write in writes {
                    fail(write, &error);
                }
                return;
            }
        };
        let now = SystemTime::now();
        let mut group = Group {
            bytes: Vec::new(),
            lines: 0,
            undo: Undo::new(&self.index),
            answers: Vec::with_capacity(writes.len()),
        };
        for write in writes {
            self.decide(write, &mut group, now);
        }
        let failed = if group.bytes.is_empty() {
            None
        } else {
            self.append(&group.bytes).err()
        };
        match &failed {
            None => {
                self.at.offset += group.bytes.len() as u64;
                self.at.lines += group.lines;
                if !group.bytes.is_empty() {
                    self.commits.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(_) => group.undo.restore(&mut self.index),
        }
        drop(locked);
        for answer in group.answers {
            answer.send(failed.as_ref());
        }
    }

    /// Decides `write` against the index as it stands (the file, and the group so far), adding
    /// its lines and answer to `group`.
    fn decide(&mut self, write: Write, group: &mut Group, now: SystemTime) {
        let index = &mut self.index;
        match write {
            Write::Park(letter, reply) => {
                let merged = match index.letter(&letter.msg_id) {
                    Some(first) => {
                        let mut merged = DeadLetter::clone(first);
                        merged.absorb(&letter);
                        merged
                    }
                    None => *letter,
                };
                group.push(
                    index,
                    vec![Line::Letter(Arc::new(merged))],
                    Answer::Unit(reply),
                );
            }
            Write::Lease {
                msg_id,
                run_id,
                ttl,
                reply,
            } => {
                let letter = index
                    .letter(&msg_id)
                    .filter(|l| l.is_pending())
                    .filter(|_| !index.held_by_other(&msg_id, Some(&run_id), now))
                    .map(|l| Box::new(DeadLetter::clone(l)));
                match letter {
                    None => group.answers.push(Answer::Letter(reply, None)),
                    Some(letter) => {
                        let lease = Lease::new(&run_id, later(now, ttl));
                        let line = Line::Lease { msg_id, lease };
                        group.push(index, vec![line], Answer::Letter(reply, Some(letter)));
                    }
                }
            }
            Write::Release {
                msg_id,
                run_id,
                reply,
            } => {
                if index.lease(&msg_id).is_some_and(|l| l.run_id == run_id) {
                    let line = Line::Release { msg_id, run_id };
                    group.push(index, vec![line], Answer::Flag(reply, true));
                } else {
                    group.answers.push(Answer::Flag(reply, false));
                }
            }
            Write::Resolve {
                msg_id,
                resolution,
                reply,
            } => {
                let resolvable = index.letter(&msg_id).is_some_and(|l| l.is_pending())
                    && !index.held_by_other(&msg_id, resolution.run_id.as_deref(), now);
                if resolvable {
                    let line = Line::Ack { msg_id, resolution };
                    group.push(index, vec![line], Answer::Flag(reply, true));
                } else {
                    group.answers.push(Answer::Flag(reply, false));
                }
            }
            Write::PutBack {
                msg_id,
                run_id,
                failure,
                reply,
            } => {
                let holds = index.lease(&msg_id).is_some_and(|l| l.run_id == run_id);
                match index.letter(&msg_id).filter(|_| holds) {
                    None => group.answers.push(Answer::Flag(reply, false)),
                    Some(letter) => {
                        let mut again = DeadLetter::clone(letter);
                        again.redrive_failed(failure);
                        let lines = vec![
                            Line::Letter(Arc::new(again)),
                            Line::Release { msg_id, run_id },
                        ];
                        group.push(index, lines, Answer::Flag(reply, true));
                    }
                }
            }
            Write::Audit(entry, reply) => {
                group.push(index, vec![Line::Audit(entry)], Answer::Unit(reply));
            }
            Write::Redrive(record, reply) => {
                group.push(index, vec![Line::Redrive(record)], Answer::Unit(reply));
            }
        }
    }

    /// Appends `bytes` with one write and syncs. On failure the file is cut back to its last
    /// complete line, so nothing of the group stays readable as a letter.
    fn append(&mut self, bytes: &[u8]) -> Result<(), DlqError> {
        // `write_all` is one `write(2)` for a regular file unless the kernel writes less (disk
        // full, file size limit); then the error path cuts the partial group off.
        match self
            .file
            .write_all(bytes)
            .and_then(|()| self.file.sync_data())
        {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Err(cut) = self.cut_back() {
                    self.dirty = Some(self.file.metadata().map_or(u64::MAX, |m| m.len()));
                    tracing::warn!(target: "retry_core::dlq",
                        path = %self.path.display(),
                        error = %cut,
                        "could not cut a failed write back off the dead-letter file; retrying before the next write"
                    );
                }
                Err(io_error("cannot append to", &self.path, &e))
            }
        }
    }

    /// Truncates the file to the end of its last complete line, if it is longer.
    fn cut_back(&mut self) -> io::Result<()> {
        if self.file.metadata()?.len() != self.at.offset {
            self.file.set_len(self.at.offset)?;
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// The lock, on the file now at the path: if another process renamed a compacted file
    /// over it, the sink lets go of the old one and reads the new one from the start.
    fn lock(&mut self, exclusive: bool) -> Result<Locked, DlqError> {
        loop {
            let locked = file::lock(&self.file, &self.path, exclusive)?;
            let now = file::at_path(&self.path)
                .map_err(|e| io_error("cannot inspect", &self.path, &e))?;
            if now.is_some_and(|(id, _)| id == self.id) {
                return Ok(locked);
            }
            drop(locked);
            self.reopen()?;
        }
    }

    /// Opens the file at the path again, with an empty index: the next catch-up reads it whole.
    fn reopen(&mut self) -> Result<(), DlqError> {
        let (file, id, created) = file::open(&self.path, self.access)?;
        if created {
            tracing::warn!(target: "retry_core::dlq",
                path = %self.path.display(),
                "the dead-letter file was removed while open; started a new one there"
            );
        }
        self.file = file;
        self.id = id;
        self.at = Position::default();
        self.dirty = None;
        self.index = Index::default();
        Ok(())
    }

    /// The exclusive lock, with the file as every other process left it: a failed write of
    /// ours cut back, their lines read.
    pub(super) fn lock_for_write(&mut self) -> Result<Locked, DlqError> {
        if self.access == Access::Read {
            return Err(io_error(
                "cannot write to",
                &self.path,
                &io::Error::new(io::ErrorKind::PermissionDenied, "opened read-only"),
            ));
        }
        let locked = self.lock(true)?;
        self.clean_up_failed_write()?;
        self.catch_up()?;
        Ok(locked)
    }

    /// Before the next write, cuts off what a failed write of ours left, unless another
    /// process has written since (then what is there is read as it is: a partial line is torn).
    fn clean_up_failed_write(&mut self) -> Result<(), DlqError> {
        let Some(left_at) = self.dirty else {
            return Ok(());
        };
        let len = self
            .file
            .metadata()
            .map_err(|e| io_error("cannot inspect", &self.path, &e))?
            .len();
        if len == left_at {
            self.cut_back()
                .map_err(|e| io_error("cannot remove a partial line from", &self.path, &e))?;
        }
        self.dirty = None;
        Ok(())
    }

    /// Reads what was appended since the index was last brought up to date. For
    /// [`Access::Write`], under the exclusive lock: unreadable complete lines are kept in
    /// `<path>.quarantine` and a torn last line (a process killed mid-write) in `<path>.torn`,
    /// then both are taken out of the file. A reader only reports them, and reads on.
    fn catch_up(&mut self) -> Result<Found, DlqError> {
        let replayed = index::replay(&self.file, &self.path, &mut self.at, &mut self.index)?;
        let quarantine = file::beside(&self.path, file::QUARANTINE);
        for bad in &replayed.unreadable {
            let QuarantinedLine { line, why, text } = &bad.line;
            if self.access == Access::Write {
                file::keep_aside(&self.path, file::QUARANTINE, *line, Some(why), text)?;
                tracing::warn!(target: "retry_core::dlq", path = %self.path.display(), line, why = %why, kept_in = %quarantine.display(), "an unreadable line of the dead-letter file was moved aside");
            } else {
                tracing::warn!(target: "retry_core::dlq", path = %self.path.display(), line, why = %why, "an unreadable line of the dead-letter file was skipped (a writer moves it to {})", quarantine.display());
            }
        }
        if self.access == Access::Write {
            if let Some(torn) = &replayed.torn {
                file::keep_aside(&self.path, file::TORN, torn.line, None, &torn.text)?;
            }
            if !replayed.unreadable.is_empty() {
                // Also leaves the torn line out: only what was read is copied.
                let lines: Vec<(u64, u64)> = replayed
                    .unreadable
                    .iter()
                    .map(|bad| (bad.offset, bad.bytes))
                    .collect();
                self.cut_out(&lines)?;
            } else if replayed.torn.is_some() {
                self.file
                    .set_len(self.at.offset)
                    .and_then(|()| self.file.sync_data())
                    .map_err(|e| io_error("cannot cut a torn line off", &self.path, &e))?;
            }
            if let Some(torn) = &replayed.torn {
                tracing::warn!(target: "retry_core::dlq",
                    path = %self.path.display(),
                    line = torn.line,
                    kept_in = %file::beside(&self.path, file::TORN).display(),
                    "the dead-letter file ended in a torn line (a crash mid-write?); moved it aside"
                );
            }
        }
        Ok(Found {
            torn: replayed.torn,
            quarantined: replayed
                .unreadable
                .into_iter()
                .map(|bad| bad.line)
                .collect(),
        })
    }

    /// Before answering a read: if the file at the path is not exactly what the index was read
    /// from (another process appended, or compacted), catch up under the lock (shared for a
    /// reader).
    fn refresh(&mut self) -> Result<(), DlqError> {
        let now =
            file::at_path(&self.path).map_err(|e| io_error("cannot inspect", &self.path, &e))?;
        if now == Some((self.id, self.at.offset)) {
            return Ok(());
        }
        let writer = self.access == Access::Write;
        let _locked = self.lock(writer)?;
        if writer {
            self.clean_up_failed_write()?;
        }
        self.catch_up()?;
        Ok(())
    }

    fn answer(&self, read: Read, fresh: &Result<(), DlqError>, now: SystemTime) {
        let index = &self.index;
        match read {
            Read::Page(page, reply) => send(reply, fresh, || index.page(&page)),
            Read::Stats(reply) => send(reply, fresh, || index.stats(now)),
            Read::Get(msg_id, reply) => send(reply, fresh, || {
                index.letter(&msg_id).map(|l| DeadLetter::clone(l))
            }),
            Read::AuditRows(run_id, reply) => {
                send(reply, fresh, || index.audit_rows(run_id.as_deref()));
            }
            Read::Redrives(reply) => send(reply, fresh, || index.redrives().to_vec()),
        }
    }
}

/// Answers a read: the value, or the error that kept the index from catching up.
fn send<T>(reply: Reply<T>, fresh: &Result<(), DlqError>, value: impl FnOnce() -> T) {
    let answer = match fresh {
        Ok(()) => Ok(value()),
        Err(e) => Err(same_error(e)),
    };
    // A caller that stopped waiting does not need the answer.
    let _ = reply.send(answer);
}

/// The lines of one group commit, what they changed, and the answers waiting for it.
struct Group {
    bytes: Vec<u8>,
    lines: usize,
    undo: Undo,
    answers: Vec<Answer>,
}

impl Group {
    /// Adds one operation's lines, all or none: a line that cannot be written (too long, not
    /// serialisable) fails that operation alone, at once.
    fn push(&mut self, index: &mut Index, lines: Vec<Line>, answer: Answer) {
        let mut bytes = Vec::new();
        for line in &lines {
            match line.to_bytes() {
                Ok(line) => bytes.extend_from_slice(&line),
                Err(error) => return answer.send(Some(&error)),
            }
        }
        self.lines += lines.len();
        for line in lines {
            self.undo.save(index, &line);
            index.apply(line);
        }
        self.bytes.extend_from_slice(&bytes);
        self.answers.push(answer);
    }
}

/// An answer decided in a group, sent once the group's fate is known.
enum Answer {
    Unit(Reply<()>),
    Flag(Reply<bool>, bool),
    Letter(Reply<Option<DeadLetter>>, Option<Box<DeadLetter>>),
}

impl Answer {
    fn send(self, failed: Option<&DlqError>) {
        fn reply<T>(reply: Reply<T>, value: T, failed: Option<&DlqError>) {
            let _ = reply.send(match failed {
                None => Ok(value),
                Some(e) => Err(same_error(e)),
            });
        }
        match self {
            Answer::Unit(r) => reply(r, (), failed),
            Answer::Flag(r, value) => reply(r, value, failed),
            Answer::Letter(r, value) => reply(r, value.map(|l| *l), failed),
        }
    }
}

/// Answers a write that could not be tried with `error`.
fn fail(write: Write, error: &DlqError) {
    let failed = Some(error);
    match write {
        Write::Park(_, reply) | Write::Audit(_, reply) | Write::Redrive(_, reply) => {
            Answer::Unit(reply).send(failed)
        }
        Write::Lease { reply, .. } => Answer::Letter(reply, None).send(failed),
        Write::Release { reply, .. }
        | Write::Resolve { reply, .. }
        | Write::PutBack { reply, .. } => Answer::Flag(reply, false).send(failed),
    }
}
