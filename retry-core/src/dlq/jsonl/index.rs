//! The file's lines, and the index they build in memory: every letter by `msg_id`, the pending
//! ones in redrive order, the leases, the audit rows and the redrive records. Reading replays
//! lines into it, a line at a time and never more than [`MAX_LINE`] bytes of one; writing
//! applies the lines it appends, and takes them back ([`Undo`]) when the append failed.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek as _, SeekFrom};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::file::{io_error, to_line};
use super::set_aside::{QuarantinedLine, TornLine};
use crate::dlq::{
    AuditEntry, DeadLetter, DlqError, FailureClass, Page, RedriveRecord, Resolution, Stats,
};
use crate::time::{format_utc, parse_rfc3339};

/// The longest line the sink writes or reads, newline excluded: 4 MiB. See
/// [`JsonlSink::MAX_LINE`](super::JsonlSink::MAX_LINE).
pub(super) const MAX_LINE: usize = 4 << 20;

/// One line of the file.
#[derive(Debug, Clone)]
pub(super) enum Line {
    /// A letter's whole state: it replaces whatever the letter was.
    Letter(Arc<DeadLetter>),
    /// The letter was acknowledged (resolved), and any lease on it ends.
    Ack {
        msg_id: String,
        resolution: Resolution,
    },
    /// A redrive run took the letter until `lease.until`.
    Lease { msg_id: String, lease: Lease },
    /// The run let go of the letter.
    Release { msg_id: String, run_id: String },
    /// An audit row: a new one, or the outcome replacing the intent of the same run and letter.
    Audit(AuditEntry),
    /// A redrive run's summary.
    Redrive(RedriveRecord),
}

/// Which run holds a letter, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lease {
    pub(super) run_id: String,
    pub(super) until: SystemTime,
}

impl Lease {
    /// `run_id`'s lease until `until`, to the microsecond the file keeps, so a lease read back
    /// ends exactly when the one written did.
    pub(super) fn new(run_id: &str, until: SystemTime) -> Self {
        let until = parse_rfc3339(&format_utc(until)).unwrap_or(until);
        Lease {
            run_id: run_id.to_owned(),
            until,
        }
    }

    fn live(&self, now: SystemTime) -> bool {
        self.until > now
    }
}

// ---- the lines as written ----
// Generic over the string and record types: borrowed to write, owned to read.

/// `{"ack":"M-1","at":"...","by":"alice","run_id":"..."}`. Lines written before resolutions
/// kept who and which run have only `ack` and `at`: they read as resolved by "". A line whose
/// `at` is missing or not RFC 3339 is unreadable (no version wrote one): it is set aside.
#[derive(Serialize, Deserialize)]
struct AckLine<S> {
    ack: S,
    #[serde(with = "crate::time::rfc3339")]
    at: SystemTime,
    #[serde(default)]
    by: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_id: Option<S>,
}

/// `{"lease":"M-1","run_id":"...","until":"<UTC, microseconds>"}`.
#[derive(Serialize, Deserialize)]
struct LeaseLine<S> {
    lease: S,
    run_id: S,
    until: S,
}

/// `{"release":"M-1","run_id":"..."}`.
#[derive(Serialize, Deserialize)]
struct ReleaseLine<S> {
    release: S,
    run_id: S,
}

/// `{"audit":{...}}`.
#[derive(Serialize, Deserialize)]
struct AuditLine<T> {
    audit: T,
}

/// `{"redrive":{...}}`.
#[derive(Serialize, Deserialize)]
struct RedriveLine<T> {
    redrive: T,
}

impl Line {
    /// The letter (or run) the line is about, for messages.
    fn subject(&self) -> &str {
        match self {
            Line::Letter(letter) => &letter.msg_id,
            Line::Ack { msg_id, .. }
            | Line::Lease { msg_id, .. }
            | Line::Release { msg_id, .. } => msg_id,
            Line::Audit(entry) => &entry.msg_id,
            Line::Redrive(record) => &record.run_id,
        }
    }

    /// The line as written, newline included; refused when longer than [`MAX_LINE`], since it
    /// could not be read back.
    pub(super) fn to_bytes(&self) -> Result<Vec<u8>, DlqError> {
        let bytes = match self {
            Line::Letter(letter) => to_line(&**letter),
            Line::Ack { msg_id, resolution } => to_line(&AckLine {
                ack: msg_id.as_str(),
                at: resolution.at,
                by: &resolution.by,
                run_id: resolution.run_id.as_deref(),
            }),
            Line::Lease { msg_id, lease } => to_line(&LeaseLine {
                lease: msg_id.as_str(),
                run_id: &lease.run_id,
                until: &format_utc(lease.until),
            }),
            Line::Release { msg_id, run_id } => to_line(&ReleaseLine {
                release: msg_id.as_str(),
                run_id: run_id.as_str(),
            }),
            Line::Audit(entry) => to_line(&AuditLine { audit: entry }),
            Line::Redrive(record) => to_line(&RedriveLine { redrive: record }),
        }?;
        if bytes.len() - 1 > MAX_LINE {
            return Err(DlqError::Serialize(format!(
                "`{}`: its line would be {} bytes, more than the {MAX_LINE} a dead-letter file \
                 line may hold",
                self.subject(),
                bytes.len() - 1
            )));
        }
        Ok(bytes)
    }
}

/// An ack if the object has an `"ack"` key, a lease if `"lease"`, and so on; a letter if none.
fn parse(body: &[u8]) -> Result<Line, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(body)?;
    let has = |key: &str| value.get(key).is_some();
    if has("ack") {
        serde_json::from_value::<AckLine<String>>(value).map(|line| Line::Ack {
            msg_id: line.ack,
            resolution: Resolution {
                at: line.at,
                by: line.by,
                run_id: line.run_id,
            },
        })
    } else if has("lease") {
        serde_json::from_value::<LeaseLine<String>>(value).and_then(|line| {
            let until = parse_rfc3339(&line.until).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "lease `until` {:?} is not an RFC 3339 time",
                    line.until
                ))
            })?;
            Ok(Line::Lease {
                msg_id: line.lease,
                lease: Lease {
                    run_id: line.run_id,
                    until,
                },
            })
        })
    } else if has("release") {
        serde_json::from_value::<ReleaseLine<String>>(value).map(|line| Line::Release {
            msg_id: line.release,
            run_id: line.run_id,
        })
    } else if has("audit") {
        serde_json::from_value::<AuditLine<AuditEntry>>(value).map(|line| Line::Audit(line.audit))
    } else if has("redrive") {
        serde_json::from_value::<RedriveLine<RedriveRecord>>(value)
            .map(|line| Line::Redrive(line.redrive))
    } else {
        serde_json::from_value::<DeadLetter>(value).map(|letter| Line::Letter(Arc::new(letter)))
    }
}

// ---- the index ----

/// Sorts by `first_failed_at`, then `msg_id`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct OrderKey {
    first_failed_at: SystemTime,
    msg_id: String,
}

impl OrderKey {
    fn new(first_failed_at: SystemTime, msg_id: &str) -> Self {
        OrderKey {
            first_failed_at,
            msg_id: msg_id.to_owned(),
        }
    }

    fn of(letter: &DeadLetter) -> Self {
        Self::new(letter.first_failed_at, &letter.msg_id)
    }
}

/// Everything the file says, as of the last line read or written.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// Every letter, pending or resolved, by `msg_id`.
    letters: HashMap<String, Arc<DeadLetter>>,
    /// The pending letters, in redrive order.
    pending: BTreeSet<OrderKey>,
    /// Pending letters of class `system` and `data`.
    system: u64,
    data: u64,
    /// The latest lease on each letter (live or run out) by `msg_id`.
    leases: HashMap<String, Lease>,
    /// Audit rows in the order first written, and where each `(run_id, msg_id)` is.
    audit: Vec<AuditEntry>,
    audit_at: HashMap<(String, String), usize>,
    redrives: Vec<RedriveRecord>,
}

impl Index {
    pub(super) fn letter(&self, msg_id: &str) -> Option<&Arc<DeadLetter>> {
        self.letters.get(msg_id)
    }

    pub(super) fn lease(&self, msg_id: &str) -> Option<&Lease> {
        self.leases.get(msg_id)
    }

    /// Whether a run other than `run_id` (any run, for `None`) holds a live lease on `msg_id`.
    pub(super) fn held_by_other(
        &self,
        msg_id: &str,
        run_id: Option<&str>,
        now: SystemTime,
    ) -> bool {
        self.leases
            .get(msg_id)
            .is_some_and(|lease| Some(lease.run_id.as_str()) != run_id && lease.live(now))
    }

    /// Applies one line, read or just written.
    pub(super) fn apply(&mut self, line: Line) {
        match line {
            Line::Letter(letter) => self.put_letter(letter),
            Line::Ack { msg_id, resolution } => {
                // An ack of a letter this file does not hold (one purged since) changes nothing.
                if let Some(letter) = self.letters.get(&msg_id) {
                    let mut resolved = DeadLetter::clone(letter);
                    resolved.resolved = Some(resolution);
                    self.put_letter(Arc::new(resolved));
                }
                self.leases.remove(&msg_id);
            }
            Line::Lease { msg_id, lease } => {
                self.leases.insert(msg_id, lease);
            }
            Line::Release { msg_id, run_id } => {
                if self.leases.get(&msg_id).is_some_and(|l| l.run_id == run_id) {
                    self.leases.remove(&msg_id);
                }
            }
            Line::Audit(entry) => {
                let key = (entry.run_id.clone(), entry.msg_id.clone());
                match self.audit_at.get(&key) {
                    Some(&at) => self.audit[at] = entry,
                    None => {
                        self.audit_at.insert(key, self.audit.len());
                        self.audit.push(entry);
                    }
                }
            }
            Line::Redrive(record) => self.redrives.push(record),
        }
    }

    /// Makes `letter` the state of its `msg_id`, keeping the order and counts.
    fn put_letter(&mut self, letter: Arc<DeadLetter>) {
        self.unindex(&letter.msg_id);
        if letter.is_pending() {
            self.pending.insert(OrderKey::of(&letter));
            *self.class_count(letter.class) += 1;
        }
        self.letters.insert(letter.msg_id.clone(), letter);
    }

    /// Forgets `msg_id`'s letter.
    fn remove_letter(&mut self, msg_id: &str) {
        self.unindex(msg_id);
        self.letters.remove(msg_id);
    }

    /// Takes `msg_id`'s current letter out of the order and counts.
    fn unindex(&mut self, msg_id: &str) {
        if let Some(old) = self.letters.get(msg_id).filter(|l| l.is_pending()) {
            let (key, class) = (OrderKey::of(old), old.class);
            self.pending.remove(&key);
            *self.class_count(class) -= 1;
        }
    }

    fn class_count(&mut self, class: FailureClass) -> &mut u64 {
        match class {
            FailureClass::System => &mut self.system,
            FailureClass::Data => &mut self.data,
        }
    }

    /// Forgets `msg_id`'s letter and lease: purged.
    pub(super) fn remove(&mut self, msg_id: &str) {
        self.remove_letter(msg_id);
        self.leases.remove(msg_id);
    }

    /// Forgets the leases that ran out before `now`.
    pub(super) fn drop_leases_run_out(&mut self, now: SystemTime) {
        self.leases.retain(|_, lease| lease.live(now));
    }

    /// Every letter, pending in order first, then the resolved ones by `msg_id`.
    pub(super) fn letters_in_order(&self) -> Vec<&Arc<DeadLetter>> {
        let mut resolved: Vec<&Arc<DeadLetter>> =
            self.letters.values().filter(|l| !l.is_pending()).collect();
        resolved.sort_by(|a, b| a.msg_id.cmp(&b.msg_id));
        self.pending
            .iter()
            .filter_map(|key| self.letters.get(&key.msg_id))
            .chain(resolved)
            .collect()
    }

    /// The live leases, by `msg_id`.
    pub(super) fn live_leases(&self, now: SystemTime) -> Vec<(&String, &Lease)> {
        let mut leases: Vec<_> = self.leases.iter().filter(|(_, l)| l.live(now)).collect();
        leases.sort_by(|a, b| a.0.cmp(b.0));
        leases
    }

    /// The resolved letters resolved before `before`.
    pub(super) fn resolved_before(&self, before: SystemTime) -> Vec<String> {
        self.letters
            .values()
            .filter(|l| l.resolved.as_ref().is_some_and(|r| r.at < before))
            .map(|l| l.msg_id.clone())
            .collect()
    }

    pub(super) fn page(&self, page: &Page) -> Vec<DeadLetter> {
        let start = match &page.after {
            Some(after) => Bound::Excluded(OrderKey::new(after.first_failed_at, &after.msg_id)),
            None => Bound::Unbounded,
        };
        self.pending
            .range((start, Bound::Unbounded))
            .filter_map(|key| self.letters.get(&key.msg_id))
            .filter(|l| page.class.is_none_or(|class| class == l.class))
            .filter(|l| {
                page.source
                    .as_deref()
                    .is_none_or(|source| l.source.as_deref() == Some(source))
            })
            .take(page.limit)
            .map(|l| DeadLetter::clone(l))
            .collect()
    }

    pub(super) fn stats(&self, now: SystemTime) -> Stats {
        let pending = self.pending.len() as u64;
        let leased = self
            .leases
            .iter()
            .filter(|(msg_id, lease)| {
                lease.live(now) && self.letters.get(*msg_id).is_some_and(|l| l.is_pending())
            })
            .count() as u64;
        Stats {
            pending,
            system: self.system,
            data: self.data,
            leased,
            resolved: self.letters.len() as u64 - pending,
            oldest_first_failed_at: self
                .pending
                .first()
                .and_then(|key| self.letters.get(&key.msg_id))
                .map(|l| l.first_failed_at),
        }
    }

    pub(super) fn audit_rows(&self, run_id: Option<&str>) -> Vec<AuditEntry> {
        self.audit
            .iter()
            .filter(|e| run_id.is_none_or(|run| e.run_id == run))
            .cloned()
            .collect()
    }

    pub(super) fn all_audit_rows(&self) -> &[AuditEntry] {
        &self.audit
    }

    pub(super) fn redrives(&self) -> &[RedriveRecord] {
        &self.redrives
    }
}

/// What a group's lines changed in the index, so a group whose append failed can be taken back:
/// the state each touched letter and lease had before the group, and how many audit rows and
/// redrive records there were.
pub(super) struct Undo {
    letters: HashMap<String, Option<Arc<DeadLetter>>>,
    leases: HashMap<String, Option<Lease>>,
    audit_len: usize,
    audit_rows: HashMap<usize, AuditEntry>,
    redrives_len: usize,
}

impl Undo {
    pub(super) fn new(index: &Index) -> Self {
        Undo {
            letters: HashMap::new(),
            leases: HashMap::new(),
            audit_len: index.audit.len(),
            audit_rows: HashMap::new(),
            redrives_len: index.redrives.len(),
        }
    }

    /// Remembers what `line` is about to change (the first time it changes it).
    pub(super) fn save(&mut self, index: &Index, line: &Line) {
        let mut save_letter = |msg_id: &str| {
            self.letters
                .entry(msg_id.to_owned())
                .or_insert_with(|| index.letters.get(msg_id).cloned());
        };
        match line {
            Line::Letter(letter) => save_letter(&letter.msg_id),
            Line::Ack { msg_id, .. } => {
                save_letter(msg_id);
                self.save_lease(index, msg_id);
            }
            Line::Lease { msg_id, .. } | Line::Release { msg_id, .. } => {
                self.save_lease(index, msg_id);
            }
            Line::Audit(entry) => {
                let key = (entry.run_id.clone(), entry.msg_id.clone());
                if let Some(&at) = index.audit_at.get(&key)
                    && at < self.audit_len
                {
                    self.audit_rows
                        .entry(at)
                        .or_insert_with(|| index.audit[at].clone());
                }
            }
            Line::Redrive(_) => {}
        }
    }

    fn save_lease(&mut self, index: &Index, msg_id: &str) {
        self.leases
            .entry(msg_id.to_owned())
            .or_insert_with(|| index.leases.get(msg_id).cloned());
    }

    /// Puts the index back as it was before the group.
    pub(super) fn restore(self, index: &mut Index) {
        for (msg_id, letter) in self.letters {
            match letter {
                Some(letter) => index.put_letter(letter),
                None => index.remove_letter(&msg_id),
            }
        }
        for (msg_id, lease) in self.leases {
            match lease {
                Some(lease) => index.leases.insert(msg_id, lease),
                None => index.leases.remove(&msg_id),
            };
        }
        for entry in index.audit.drain(self.audit_len..) {
            index.audit_at.remove(&(entry.run_id, entry.msg_id));
        }
        for (at, entry) in self.audit_rows {
            index.audit[at] = entry;
        }
        index.redrives.truncate(self.redrives_len);
    }
}

// ---- reading ----

/// How far the file has been read: the end of the last complete line applied, and how many
/// lines (blank ones included) come before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Position {
    pub(super) offset: u64,
    pub(super) lines: usize,
}

/// What [`replay`] found besides the lines it applied.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    /// The unterminated last line (a crash mid-write), not moved past.
    pub(super) torn: Option<TornLine>,
    /// The complete lines that are not lines of this file, moved past, in file order.
    pub(super) unreadable: Vec<Unreadable>,
}

/// A complete line [`replay`] could not read, and where it is in the file.
#[derive(Debug)]
pub(super) struct Unreadable {
    pub(super) line: QuarantinedLine,
    /// Its first byte's offset.
    pub(super) offset: u64,
    /// Its length, newline included.
    pub(super) bytes: u64,
}

/// Reads the lines after `at` and applies them to `index`, moving `at` past each complete line.
/// A complete line that cannot be read (not JSON, JSON that is not a line of this file, longer
/// than [`MAX_LINE`]) is skipped and returned, so that one bad line never keeps the rest of
/// the file from being read. Stops at the end of the file, or at an unterminated last line
/// (torn), which it returns without moving past it.
pub(super) fn replay(
    file: &File,
    path: &Path,
    at: &mut Position,
    index: &mut Index,
) -> Result<Replayed, DlqError> {
    let mut reader = BufReader::with_capacity(64 << 10, file);
    reader
        .seek(SeekFrom::Start(at.offset))
        .map_err(|e| io_error("cannot read", path, &e))?;
    let mut line = Vec::new();
    let mut found = Replayed::default();
    loop {
        line.clear();
        let read =
            read_line(&mut reader, &mut line).map_err(|e| io_error("cannot read", path, &e))?;
        if read.bytes == 0 {
            break;
        }
        let number = at.lines + 1;
        if !read.complete {
            // Only the last line can lack its newline.
            found.torn = Some(TornLine {
                line: number,
                text: String::from_utf8_lossy(&line).into_owned(),
            });
            break;
        }
        let why = if read.oversized {
            Some(format!(
                "longer than {MAX_LINE} bytes, more than a dead-letter file line may hold"
            ))
        } else if line.trim_ascii().is_empty() {
            None
        } else {
            match parse(&line) {
                Ok(entry) => {
                    index.apply(entry);
                    None
                }
                Err(error) => Some(unreadable_because(&error)),
            }
        };
        if let Some(why) = why {
            found.unreadable.push(Unreadable {
                line: QuarantinedLine {
                    line: number,
                    why,
                    text: String::from_utf8_lossy(&line).into_owned(),
                },
                offset: at.offset,
                bytes: read.bytes,
            });
        }
        at.offset += read.bytes;
        at.lines += 1;
    }
    Ok(found)
}

/// One line as [`read_line`] read it.
struct Read {
    /// Bytes consumed, newline included.
    bytes: u64,
    /// Whether it ended in a newline (the end of the file came first otherwise).
    complete: bool,
    /// Whether it was longer than [`MAX_LINE`]: then only its first `MAX_LINE` bytes are kept.
    oversized: bool,
}

/// Reads one line into `line` (without its newline), keeping at most [`MAX_LINE`] bytes of it
/// however long it is.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Read> {
    let mut read = Read {
        bytes: 0,
        complete: false,
        oversized: false,
    };
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffer.is_empty() {
            return Ok(read);
        }
        let newline = buffer.iter().position(|&b| b == b'\n');
        let text = &buffer[..newline.unwrap_or(buffer.len())];
        let room = MAX_LINE - line.len();
        if text.len() > room {
            read.oversized = true;
        }
        line.extend_from_slice(&text[..text.len().min(room)]);
        let used = text.len() + usize::from(newline.is_some());
        reader.consume(used);
        read.bytes += used as u64;
        if newline.is_some() {
            read.complete = true;
            return Ok(read);
        }
    }
}

/// Why a line is not one of this file's: `serde_json`'s error, its "at line 1 column N" (of the
/// line alone) said as the column.
fn unreadable_because(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let what = match text.strip_suffix(&position) {
        Some(what) if error.line() != 0 => format!("column {}: {what}", error.column()),
        _ => text,
    };
    format!(
        "{what} (expected a dead letter, an ack, a lease, a release, an audit row or a redrive \
         record)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SystemTime {
        parse_rfc3339(text).unwrap()
    }

    fn letter(msg_id: &str, at: &str) -> Arc<DeadLetter> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "msg_id": msg_id, "original": null, "reason": "r", "attempts": 1,
                "first_failed_at": at, "last_failed_at": at,
                "trace_id": "t", "class": "system", "error_type": "E",
            }))
            .unwrap(),
        )
    }

    fn ids(index: &Index) -> Vec<String> {
        index
            .page(&Page::first(usize::MAX))
            .into_iter()
            .map(|l| l.msg_id)
            .collect()
    }

    #[test]
    fn undo_takes_a_failed_group_back_whole() {
        let mut index = Index::default();
        index.apply(Line::Letter(letter("M-1", "2026-08-19T02:00:00Z")));
        index.apply(Line::Audit(AuditEntry::intent(
            "run",
            "M-1",
            "a",
            "t",
            SystemTime::UNIX_EPOCH,
        )));
        let before = format!("{:?}", index.stats(SystemTime::UNIX_EPOCH));

        let mut undo = Undo::new(&index);
        let lines = [
            Line::Letter(letter("M-1", "2026-08-19T01:00:00Z")),
            Line::Letter(letter("M-2", "2026-08-19T03:00:00Z")),
            Line::Ack {
                msg_id: "M-2".into(),
                resolution: Resolution::new("alice", at("2026-08-20T00:00:00Z")),
            },
            Line::Lease {
                msg_id: "M-1".into(),
                lease: Lease::new(
                    "run",
                    SystemTime::now() + std::time::Duration::from_secs(60),
                ),
            },
            Line::Audit(
                AuditEntry::intent("run", "M-1", "a", "t", SystemTime::UNIX_EPOCH)
                    .finished("ok", SystemTime::UNIX_EPOCH),
            ),
            Line::Audit(AuditEntry::intent(
                "run",
                "M-2",
                "a",
                "t",
                SystemTime::UNIX_EPOCH,
            )),
        ];
        for line in lines {
            undo.save(&index, &line);
            index.apply(line);
        }
        assert_eq!(index.stats(SystemTime::UNIX_EPOCH).resolved, 1);
        undo.restore(&mut index);

        assert_eq!(format!("{:?}", index.stats(SystemTime::UNIX_EPOCH)), before);
        assert_eq!(ids(&index), ["M-1"]);
        assert_eq!(
            index.letter("M-1").unwrap().first_failed_at,
            at("2026-08-19T02:00:00Z")
        );
        assert!(index.letter("M-2").is_none());
        assert!(index.lease("M-1").is_none());
        assert_eq!(
            index.audit_rows(None),
            [AuditEntry::intent(
                "run",
                "M-1",
                "a",
                "t",
                SystemTime::UNIX_EPOCH
            )]
        );
        // The audit position map was restored too: a new row lands after the kept one.
        index.apply(Line::Audit(AuditEntry::intent(
            "run",
            "M-2",
            "a",
            "t",
            SystemTime::UNIX_EPOCH,
        )));
        assert_eq!(index.audit_rows(None).len(), 2);
    }

    #[test]
    fn a_letter_moving_in_the_order_is_counted_once() {
        let mut index = Index::default();
        index.apply(Line::Letter(letter("M-1", "2026-08-19T02:00:00Z")));
        index.apply(Line::Letter(letter("M-1", "2026-08-19T02:00:00Z")));
        index.apply(Line::Letter(letter("M-1", "2026-08-19T01:00:00Z")));
        let stats = index.stats(SystemTime::UNIX_EPOCH);
        assert_eq!((stats.pending, stats.system), (1, 1));
        assert_eq!(
            stats.oldest_first_failed_at,
            Some(at("2026-08-19T01:00:00Z"))
        );
    }

    #[test]
    fn lines_longer_than_the_limit_are_read_in_bounded_memory() {
        let mut text = vec![b'x'; MAX_LINE + 10];
        text.push(b'\n');
        text.extend_from_slice(b"{}\n");
        let mut reader = BufReader::with_capacity(4096, &text[..]);
        let mut line = Vec::new();
        let read = read_line(&mut reader, &mut line).unwrap();
        assert!(read.complete && read.oversized);
        assert_eq!(read.bytes, MAX_LINE as u64 + 11);
        assert_eq!(
            line.len(),
            MAX_LINE,
            "only the first MAX_LINE bytes are kept"
        );
        line.clear();
        let read = read_line(&mut reader, &mut line).unwrap();
        assert!(read.complete && !read.oversized);
        assert_eq!(line, b"{}");
    }
}
