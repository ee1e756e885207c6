//! Compaction: the file rewritten as its live state, so that reading it at open (and the memory
//! its index takes) follows what the file holds, not everything that ever happened to it.
//!
//! Under the exclusive lock, after catching up: every letter's current state (pending or
//! resolved, minus the ones purged) as one letter line, every live lease, every audit row and
//! redrive record, written to `<path>.compact`, synced, renamed over the file, and the
//! directory synced. A crash before the rename leaves the old file as it was (and a leftover
//! `.compact` that the next compaction replaces); a rename lost to a power cut brings back the
//! old file, which holds everything the new one does. Other processes with the file open notice
//! the rename when they next take the lock (the path's inode changed) and read the new file.

use std::collections::HashSet;
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::time::SystemTime;

use super::file::{self, FileId, io_error};
use super::index::{Line, Position};
use super::writer::Core;
use crate::dlq::DlqError;

/// Compact at open only when the dead history is more than this many bytes...
const MIN_DEAD: u64 = 1 << 20;
/// ...and more than this many times the live state.
const DEAD_PER_LIVE: u64 = 4;

/// The live state as lines.
struct Rendered {
    bytes: Vec<u8>,
    lines: usize,
}

impl Core {
    /// Purges the letters resolved before `before` by compacting them away; how many.
    pub(super) fn purge(&mut self, before: SystemTime) -> Result<u64, DlqError> {
        let _locked = self.lock_for_write()?;
        let purged = self.index.resolved_before(before);
        if purged.is_empty() {
            return Ok(0);
        }
        let now = SystemTime::now();
        let purged: HashSet<&str> = purged.iter().map(String::as_str).collect();
        let rendered = self.render(&purged, now)?;
        self.replace_with(&rendered)?;
        for msg_id in &purged {
            self.index.remove(msg_id);
        }
        self.index.drop_leases_run_out(now);
        Ok(purged.len() as u64)
    }

    /// Compacts when the file holds more than [`MIN_DEAD`] bytes of dead history and more
    /// than [`DEAD_PER_LIVE`] times its live state. Called at open, under the lock.
    pub(super) fn compact_if_worth_it(&mut self) -> Result<(), DlqError> {
        if self.at.offset <= MIN_DEAD {
            return Ok(());
        }
        let now = SystemTime::now();
        let rendered = self.render(&HashSet::new(), now)?;
        let live = rendered.bytes.len() as u64;
        let dead = self.at.offset.saturating_sub(live);
        if dead <= MIN_DEAD || dead <= DEAD_PER_LIVE.saturating_mul(live) {
            return Ok(());
        }
        self.replace_with(&rendered)?;
        self.index.drop_leases_run_out(now);
        tracing::info!(target: "retry_core::dlq",
            path = %self.path.display(),
            before = dead + live,
            after = live,
            "compacted the dead-letter file"
        );
        Ok(())
    }

    /// The index as lines, leaving out the `purged` letters and the leases that ran out.
    fn render(&self, purged: &HashSet<&str>, now: SystemTime) -> Result<Rendered, DlqError> {
        let mut rendered = Rendered {
            bytes: Vec::new(),
            lines: 0,
        };
        let mut add = |line: Line| -> Result<(), DlqError> {
            rendered.bytes.extend_from_slice(&line.to_bytes()?);
            rendered.lines += 1;
            Ok(())
        };
        for letter in self.index.letters_in_order() {
            if !purged.contains(letter.msg_id.as_str()) {
                add(Line::Letter(letter.clone()))?;
            }
        }
        for (msg_id, lease) in self.index.live_leases(now) {
            if self.index.letter(msg_id).is_some() && !purged.contains(msg_id.as_str()) {
                add(Line::Lease {
                    msg_id: msg_id.clone(),
                    lease: lease.clone(),
                })?;
            }
        }
        for entry in self.index.all_audit_rows() {
            add(Line::Audit(entry.clone()))?;
        }
        for record in self.index.redrives() {
            add(Line::Redrive(record.clone()))?;
        }
        Ok(rendered)
    }

    /// Writes `rendered` to `<path>.compact`, syncs it, renames it over the file and syncs
    /// the directory; from then on the sink appends to the new file.
    fn replace_with(&mut self, rendered: &Rendered) -> Result<(), DlqError> {
        let (new, id) = self.write_new(|new| new.write_all(&rendered.bytes))?;
        let position = Position {
            offset: rendered.bytes.len() as u64,
            lines: rendered.lines,
        };
        self.adopt(new, id, position);
        Ok(())
    }

    /// Rewrites the file as it was read, without the `lines` (each `(offset, bytes)`, whole
    /// lines in file order): unreadable lines that were kept aside. Everything else stays byte
    /// for byte; what comes after the read part (a torn line) is left out too.
    pub(super) fn cut_out(&mut self, lines: &[(u64, u64)]) -> Result<(), DlqError> {
        let removed: u64 = lines.iter().map(|&(_, bytes)| bytes).sum();
        let position = Position {
            offset: self.at.offset - removed,
            lines: self.at.lines - lines.len(),
        };
        let (old, end) = (&self.file, self.at.offset);
        let copied = |new: &mut std::fs::File| -> io::Result<()> {
            let mut from = 0;
            for &(offset, bytes) in lines.iter().chain([(end, 0)].iter()) {
                let mut old = old;
                old.seek(SeekFrom::Start(from))?;
                io::copy(&mut old.take(offset - from), new)?;
                from = offset + bytes;
            }
            Ok(())
        };
        let (new, id) = self.write_new(copied)?;
        self.adopt(new, id, position);
        Ok(())
    }

    /// Writes `<path>.compact` with `write`, syncs it, renames it over the file and syncs the
    /// directory.
    fn write_new(
        &self,
        write: impl FnOnce(&mut std::fs::File) -> io::Result<()>,
    ) -> Result<(std::fs::File, FileId), DlqError> {
        let temporary = file::beside(&self.path, ".compact");
        // A leftover of a compaction that died before its rename: nobody else writes it
        // (they would hold the lock we hold).
        match std::fs::remove_file(&temporary) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("cannot remove", &temporary, &e)),
        }
        let written = (|| {
            let mut new = file::create_owner_only(&temporary)?;
            write(&mut new)?;
            new.sync_all()?;
            let id = FileId::of(&new.metadata()?);
            std::fs::rename(&temporary, &self.path)?;
            Ok((new, id))
        })();
        match written {
            Ok(written) => {
                file::sync_parent(&self.path);
                Ok(written)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&temporary);
                Err(io_error("cannot compact", &self.path, &e))
            }
        }
    }

    fn adopt(&mut self, new: std::fs::File, id: FileId, position: Position) {
        self.file = new;
        self.id = id;
        self.at = position;
        self.dirty = None;
    }
}
