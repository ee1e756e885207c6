//! The sink's own thread, which does all of its file work: callers queue a line and await the
//! answer, so no runtime worker ever waits for the disk. What queues up while one group is
//! being written and synced becomes the next group: one lock, one `write(2)` and one
//! `fdatasync` for all of it (group commit), and only then does any caller of the group hear
//! back.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use super::damaged::TornLine;
use super::file::{self, FileId, Locked, MAX_LINE, io_error, same_error};
use crate::dlq::DlqError;

/// At most this many lines make one group: bounds the memory and the latency of one commit
/// when a very large burst is queued.
const MAX_GROUP: usize = 4096;

/// Where the thread sends a park's answer.
type Reply = oneshot::Sender<Result<(), DlqError>>;

/// The caller's side: a queue of lines, and the thread that appends them.
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
    /// Each a letter's line, newline included, and its caller.
    lines: VecDeque<(Vec<u8>, Reply)>,
    /// The sink was dropped, or the thread stopped: nothing more is accepted.
    closed: bool,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while the queue is locked.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next group: everything queued (up to [`MAX_GROUP`]), waiting for the first line if
    /// there is none; `None` once closed and empty.
    fn next_group(&self) -> Option<Vec<(Vec<u8>, Reply)>> {
        let mut queue = self.queue();
        loop {
            if !queue.lines.is_empty() {
                let n = queue.lines.len().min(MAX_GROUP);
                return Some(queue.lines.drain(..n).collect());
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
/// an error at once instead of waiting for an answer that will not come, and the lines still
/// queued are dropped, which answers their callers with an error too.
struct CloseOnExit(Arc<Shared>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        let stranded = {
            let mut queue = self.0.queue();
            queue.closed = true;
            std::mem::take(&mut queue.lines)
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

    /// Queues `line` and awaits its group's commit. Only the queue's mutex is taken here, for
    /// as long as a push takes: never the disk.
    ///
    /// Once queued, the line is written even if this future is dropped: a dropped `park` may
    /// still park its letter (the caller just does not hear it), never the reverse.
    pub(super) async fn append(&self, line: Vec<u8>) -> Result<(), DlqError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = self.shared.queue();
            if queue.closed {
                return Err(stopped());
            }
            queue.lines.push_back((line, reply));
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
    /// file is closed and every queued letter was answered.
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
    while let Some(group) = shared.next_group() {
        core.commit(group);
    }
}

/// A write of ours that failed and could not be cut back: the length the file had before it,
/// and the length it left, to cut back before the next write (if no other process has written
/// since).
#[derive(Debug, Clone, Copy)]
struct Dirty {
    before: u64,
    left_at: u64,
}

/// The open file, owned by the thread.
pub(super) struct Core {
    path: PathBuf,
    file: File,
    /// Which file `file` is, to notice that the path now names another (the file was moved
    /// away, e.g. archived after an import).
    id: FileId,
    dirty: Option<Dirty>,
    commits: Arc<AtomicU64>,
}

impl Core {
    /// Opens the file, creating it owner-only, and under its lock moves a torn last line aside.
    pub(super) fn open(path: PathBuf) -> Result<(Core, Option<TornLine>), DlqError> {
        let (file, id, _) = file::open(&path, file::Access::Write)?;
        let mut core = Core {
            path,
            file,
            id,
            dirty: None,
            commits: Arc::default(),
        };
        let locked = core.lock()?;
        let torn = core.cut_torn_tail()?;
        drop(locked);
        Ok((core, torn))
    }

    /// One group commit: under the exclusive lock, with the file as every other process left
    /// it, append every line with one write and sync. If that fails, the file is cut back and
    /// every caller of the group gets the error.
    fn commit(&mut self, group: Vec<(Vec<u8>, Reply)>) {
        let result = self.lock().and_then(|locked| {
            self.clean_up_failed_write()?;
            self.cut_torn_tail()?;
            let bytes: Vec<u8> = group.iter().flat_map(|(line, _)| line).copied().collect();
            let appended = self.append(&bytes);
            drop(locked);
            appended
        });
        if result.is_ok() {
            self.commits.fetch_add(1, Ordering::Relaxed);
        }
        for (_, reply) in group {
            // A caller that stopped waiting does not need the answer.
            let _ = reply.send(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(same_error(e)),
            });
        }
    }

    /// Appends `bytes` with one write and syncs. On failure the file is cut back to where it
    /// ended, so nothing of the group stays readable as a letter.
    fn append(&mut self, bytes: &[u8]) -> Result<(), DlqError> {
        let before = self.len()?;
        // `write_all` is one `write(2)` for a regular file unless the kernel writes less (disk
        // full, file size limit); then the error path cuts the partial group off.
        match self
            .file
            .write_all(bytes)
            .and_then(|()| self.file.sync_data())
        {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Err(cut) = self.cut_to(before) {
                    let left_at = self.file.metadata().map_or(u64::MAX, |m| m.len());
                    self.dirty = Some(Dirty { before, left_at });
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

    fn len(&self) -> Result<u64, DlqError> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| io_error("cannot inspect", &self.path, &e))
    }

    /// Truncates the file to `len`, if it is longer.
    fn cut_to(&mut self, len: u64) -> io::Result<()> {
        if self.file.metadata()?.len() > len {
            self.file.set_len(len)?;
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// The exclusive lock, on the file now at the path: if the file was moved away or
    /// removed, the sink lets go of it and appends to a new one at the path.
    fn lock(&mut self) -> Result<Locked, DlqError> {
        loop {
            let locked = file::lock(&self.file, &self.path, true)?;
            let now = file::at_path(&self.path)
                .map_err(|e| io_error("cannot inspect", &self.path, &e))?;
            if now.is_some_and(|(id, _)| id == self.id) {
                return Ok(locked);
            }
            drop(locked);
            let (file, id, created) = file::open(&self.path, file::Access::Write)?;
            if created {
                tracing::info!(target: "retry_core::dlq",
                    path = %self.path.display(),
                    "the dead-letter file was moved or removed while open; started a new one there"
                );
            }
            self.file = file;
            self.id = id;
            self.dirty = None;
        }
    }

    /// Before the next write, cuts off what a failed write of ours left, unless another
    /// process has written since (then a partial line is a torn tail, cut by the next step).
    fn clean_up_failed_write(&mut self) -> Result<(), DlqError> {
        let Some(dirty) = self.dirty else {
            return Ok(());
        };
        if self.len()? == dirty.left_at {
            self.cut_to(dirty.before)
                .map_err(|e| io_error("cannot remove a partial line from", &self.path, &e))?;
        }
        self.dirty = None;
        Ok(())
    }

    /// A file that does not end in a newline ends in a torn line: a write cut short by a crash
    /// (of this process or another one). Its letter's caller never heard `Ok`. The line is kept
    /// in `<path>.torn` and cut off, so the next line starts on a line of its own instead of
    /// gluing itself to the torn one.
    fn cut_torn_tail(&mut self) -> Result<Option<TornLine>, DlqError> {
        let len = self.len()?;
        let reading = |e: io::Error| io_error("cannot read", &self.path, &e);
        let Some(start) = torn_line_start(&mut self.file, len).map_err(reading)? else {
            return Ok(None);
        };
        let mut text = Vec::new();
        self.file
            .seek(SeekFrom::Start(start))
            .and_then(|_| (&self.file).take(MAX_LINE as u64).read_to_end(&mut text))
            .map_err(reading)?;
        let torn = TornLine {
            offset: start,
            text: String::from_utf8_lossy(&text).into_owned(),
        };
        file::keep_torn(&self.path, &torn)?;
        self.cut_to(start)
            .map_err(|e| io_error("cannot cut a torn line off", &self.path, &e))?;
        tracing::warn!(target: "retry_core::dlq",
            path = %self.path.display(),
            offset = start,
            kept_in = %file::beside(&self.path, file::TORN).display(),
            "the dead-letter file ended in a torn line (a crash mid-write?); moved it aside"
        );
        Ok(Some(torn))
    }
}

/// Where the file's last line starts if it has no newline (a torn tail); `None` when the file
/// is empty or ends in one. Reads backwards a block at a time, so a whole file is never read.
fn torn_line_start(file: &mut File, len: u64) -> io::Result<Option<u64>> {
    const BLOCK: u64 = 64 << 10;
    let mut block = Vec::with_capacity(BLOCK as usize);
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        block.clear();
        file.seek(SeekFrom::Start(start))?;
        (&*file).take(end - start).read_to_end(&mut block)?;
        if end == len && block.last() == Some(&b'\n') {
            return Ok(None);
        }
        if let Some(newline) = block.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + newline as u64 + 1));
        }
        end = start;
    }
    Ok((len > 0).then_some(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start_of_torn(content: &[u8]) -> Option<u64> {
        let path = std::env::temp_dir().join(format!(
            "dlq-torn-start-{}-{}",
            std::process::id(),
            content.len()
        ));
        std::fs::write(&path, content).unwrap();
        let mut file = File::open(&path).unwrap();
        let found = torn_line_start(&mut file, content.len() as u64).unwrap();
        std::fs::remove_file(&path).unwrap();
        found
    }

    #[test]
    fn the_torn_tail_is_found_however_long_it_is() {
        assert_eq!(start_of_torn(b""), None);
        assert_eq!(start_of_torn(b"{}\n"), None);
        assert_eq!(start_of_torn(b"{\"a\""), Some(0));
        assert_eq!(start_of_torn(b"{}\n{\"a\""), Some(3));
        // Longer than one block read backwards.
        let mut long = b"{}\n".to_vec();
        long.extend(std::iter::repeat_n(b'x', 200 << 10));
        assert_eq!(start_of_torn(&long), Some(3));
        let only = vec![b'x'; 150 << 10];
        assert_eq!(start_of_torn(&only), Some(0));
    }
}
