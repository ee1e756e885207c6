//! Reading a dead-letter file back, a line at a time and never more than [`MAX_LINE`] bytes of
//! one: for `retry-dlq import`, which moves the letters into a store, and for anything else that
//! wants to look through the file beside the service writing it.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use super::damaged::{TornLine, UnreadableLine};
use super::file::{self, MAX_LINE, io_error};
use crate::dlq::{DeadLetter, DlqError, Resolution};

/// One line of a dead-letter file, as [`JsonlReader`] reads it.
// Lines are read one at a time, so the size of the letter variant costs nothing; boxing it would
// cost an allocation per letter and a `*` in every match.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum JsonlLine {
    /// A letter as it was parked. A `msg_id` parked again is on a later line too; a store that
    /// parks both merges them ([`DeadLetter::absorb`]).
    Letter(DeadLetter),
    /// `{"ack":"M-1","at":"...","by":"alice"}`: the letter was resolved. Only files written
    /// when the sink also resolved letters in place hold these.
    Resolved {
        /// The letter's id.
        msg_id: String,
        /// Who resolved it, and when.
        resolution: Resolution,
    },
    /// A complete line that is not a letter: reported, and reading goes on after it.
    Unreadable(UnreadableLine),
    /// The last line has no newline: a write in progress, or one a crash cut short. Always the
    /// last item.
    Torn(TornLine),
}

/// The lines of a dead-letter file, in order: an iterator of [`JsonlLine`]s.
///
/// Opens the file read-only, never through a symbolic link, and changes nothing: it can read
/// beside a service appending to it (it takes no lock, and a line that has no newline yet is
/// reported as [`JsonlLine::Torn`] and not read). Blank lines are skipped, and so are the
/// lease, release, audit and redrive lines that files written when the sink also ran redrives
/// hold. Reading blocks: in async code, call it from `spawn_blocking` or accept the wait of a
/// local file.
///
/// ```
/// use retry_core::dlq::{DeadLetter, DeadLetterSink, JsonlLine, JsonlReader, JsonlSink};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), retry_core::dlq::DlqError> {
/// # let letter: DeadLetter = serde_json::from_value(serde_json::json!({
/// #   "msg_id": "M-1", "original": {"amount": 10}, "reason": "r", "attempts": 1,
/// #   "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
/// #   "trace_id": "t", "class": "system", "error_type": "E" })).unwrap();
/// let path = std::env::temp_dir().join(format!("dlq-doc-reader-{}.jsonl", std::process::id()));
/// let sink = JsonlSink::open(&path)?;
/// sink.park(&letter).await?;
///
/// let mut lines = JsonlReader::open(&path)?;
/// assert_eq!(lines.next().transpose()?, Some(JsonlLine::Letter(letter)));
/// assert_eq!(lines.next().transpose()?, None);
/// # drop(sink);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct JsonlReader {
    path: PathBuf,
    reader: BufReader<File>,
    /// Lines read so far, blank ones included.
    lines: usize,
    done: bool,
}

impl JsonlReader {
    /// Opens `path` to read.
    ///
    /// # Errors
    ///
    /// [`DlqError::Io`] when the file cannot be opened (it is missing, is a symbolic link or is
    /// not a regular file).
    ///
    /// ```
    /// use retry_core::dlq::JsonlReader;
    ///
    /// let missing = std::env::temp_dir().join("dlq-doc-reader-missing.jsonl");
    /// let error = JsonlReader::open(&missing).unwrap_err();
    /// assert!(retry_core::error_chain(&error).to_string().contains("dlq-doc-reader-missing.jsonl"));
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DlqError> {
        let path = path.as_ref().to_path_buf();
        let (file, _, _) = file::open(&path, file::Access::Read)?;
        Ok(JsonlReader {
            path,
            reader: BufReader::with_capacity(64 << 10, file),
            lines: 0,
            done: false,
        })
    }

    /// The file's path, as given to [`open`](Self::open).
    ///
    /// ```
    /// # use retry_core::dlq::JsonlReader;
    /// let path = std::env::temp_dir().join(format!("dlq-doc-reader-path-{}.jsonl", std::process::id()));
    /// std::fs::write(&path, "").unwrap();
    /// assert_eq!(JsonlReader::open(&path).unwrap().path(), path);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn next_line(&mut self) -> Result<Option<JsonlLine>, DlqError> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = read_line(&mut self.reader, &mut line)
                .map_err(|e| io_error("cannot read", &self.path, &e))?;
            if read.bytes == 0 {
                return Ok(None);
            }
            self.lines += 1;
            let text = || String::from_utf8_lossy(&line).into_owned();
            if !read.complete {
                return Ok(Some(JsonlLine::Torn(TornLine {
                    offset: read.offset,
                    text: text(),
                })));
            }
            let unreadable = |why| {
                JsonlLine::Unreadable(UnreadableLine {
                    line: self.lines,
                    why,
                    text: text(),
                })
            };
            if read.oversized {
                let why =
                    format!("longer than {MAX_LINE} bytes, more than a dead-letter line may hold");
                return Ok(Some(unreadable(why)));
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            match parse(&line) {
                Ok(Some(parsed)) => return Ok(Some(parsed)),
                Ok(None) => continue,
                Err(error) => return Ok(Some(unreadable(unreadable_because(&error)))),
            }
        }
    }
}

impl Iterator for JsonlReader {
    type Item = Result<JsonlLine, DlqError>;

    /// The next line; after an error or a torn line, `None`.
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.next_line();
        self.done = matches!(next, Err(_) | Ok(None) | Ok(Some(JsonlLine::Torn(_))));
        next.transpose()
    }
}

/// `{"ack":"M-1","at":"...","by":"alice","run_id":"..."}`. The oldest acks have only `ack` and
/// `at`: resolved by "".
#[derive(Deserialize)]
struct AckLine {
    ack: String,
    #[serde(with = "crate::time::rfc3339")]
    at: SystemTime,
    #[serde(default)]
    by: String,
    #[serde(default)]
    run_id: Option<String>,
}

/// The keys of the lines that redrives on the file itself once wrote, which a store keeps
/// its own way: skipped.
const RUN_LINES: [&str; 4] = ["lease", "release", "audit", "redrive"];

/// An ack if the object has an `"ack"` key, nothing for a run's line, else a letter.
fn parse(body: &[u8]) -> Result<Option<JsonlLine>, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(body)?;
    if value.get("ack").is_some() {
        let ack: AckLine = serde_json::from_value(value)?;
        return Ok(Some(JsonlLine::Resolved {
            msg_id: ack.ack,
            resolution: Resolution {
                at: ack.at,
                by: ack.by,
                run_id: ack.run_id,
            },
        }));
    }
    if RUN_LINES.iter().any(|key| value.get(key).is_some()) && value.get("msg_id").is_none() {
        return Ok(None);
    }
    serde_json::from_value::<DeadLetter>(value).map(|letter| Some(JsonlLine::Letter(letter)))
}

/// One line as [`read_line`] read it.
struct Read {
    /// Where it starts in the file.
    offset: u64,
    /// Bytes consumed, newline included.
    bytes: u64,
    /// Whether it ended in a newline (the end of the file came first otherwise).
    complete: bool,
    /// Whether it was longer than [`MAX_LINE`]: then only its first `MAX_LINE` bytes are kept.
    oversized: bool,
}

/// Reads one line into `line` (without its newline), keeping at most [`MAX_LINE`] bytes of it
/// however long it is.
fn read_line(reader: &mut BufReader<File>, line: &mut Vec<u8>) -> io::Result<Read> {
    let mut read = Read {
        offset: io::Seek::stream_position(reader)?,
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

/// Why a line is not a letter: `serde_json`'s error, its "at line 1 column N" (of the line
/// alone) said as the column.
fn unreadable_because(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let what = match text.strip_suffix(&position) {
        Some(what) if error.line() != 0 => format!("column {}: {what}", error.column()),
        _ => text,
    };
    format!("{what} (expected a dead letter)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(content: &[u8]) -> Vec<JsonlLine> {
        let path = std::env::temp_dir().join(format!(
            "dlq-reader-{}-{}",
            std::process::id(),
            content.len()
        ));
        std::fs::write(&path, content).unwrap();
        let lines = JsonlReader::open(&path)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        lines
    }

    const LETTER: &str = r#"{"msg_id":"M-1","original":null,"reason":"r","attempts":1,"first_failed_at":"2026-08-19T02:00:00Z","last_failed_at":"2026-08-19T02:00:00Z","trace_id":"t","class":"system","error_type":"E"}"#;

    #[test]
    fn a_file_of_the_sink_that_once_resolved_in_place_reads_as_letters_and_acks() {
        let file = format!(
            "{LETTER}\n\
             {{\"lease\":\"M-1\",\"run_id\":\"r\",\"until\":\"2026-08-20T09:01:00.000000Z\"}}\n\
             {{\"audit\":{{\"run_id\":\"r\",\"msg_id\":\"M-1\",\"who\":\"alice\",\"target\":\"t\",\"at\":\"2026-08-20T09:00:00Z\"}}}}\n\
             \n\
             {{\"ack\":\"M-1\",\"at\":\"2026-08-20T09:00:01Z\",\"by\":\"alice\",\"run_id\":\"r\"}}\n\
             {{\"release\":\"M-1\",\"run_id\":\"r\"}}\n\
             {{\"redrive\":{{\"run_id\":\"r\"}}}}\n"
        );
        let lines = read_all(file.as_bytes());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(matches!(&lines[0], JsonlLine::Letter(l) if l.msg_id == "M-1"));
        let JsonlLine::Resolved { msg_id, resolution } = &lines[1] else {
            panic!("{lines:?}")
        };
        assert_eq!((msg_id.as_str(), resolution.by.as_str()), ("M-1", "alice"));
        assert_eq!(resolution.run_id.as_deref(), Some("r"));
    }

    #[test]
    fn a_bad_line_is_reported_with_its_number_and_the_rest_is_read() {
        let file = format!("{LETTER}\n{{\"msg_id\": 3}}\n\n{LETTER}\n{{\"msg_id\"");
        let lines = read_all(file.as_bytes());
        let [
            JsonlLine::Letter(_),
            JsonlLine::Unreadable(bad),
            JsonlLine::Letter(_),
            JsonlLine::Torn(torn),
        ] = &lines[..]
        else {
            panic!("{lines:?}")
        };
        assert_eq!(bad.line, 2);
        assert!(bad.why.contains("expected a dead letter"), "{}", bad.why);
        assert_eq!(torn.text, "{\"msg_id\"");
        assert_eq!(
            torn.offset,
            (2 * (LETTER.len() + 1) + "{\"msg_id\": 3}\n\n".len()) as u64
        );
    }

    #[test]
    fn lines_longer_than_the_limit_are_read_in_bounded_memory() {
        let mut file = vec![b'x'; MAX_LINE + 10];
        file.push(b'\n');
        file.extend_from_slice(LETTER.as_bytes());
        file.push(b'\n');
        let lines = read_all(&file);
        let JsonlLine::Unreadable(long) = &lines[0] else {
            panic!("{:?}", &lines[1..])
        };
        assert_eq!(long.text.len(), MAX_LINE);
        assert!(long.why.contains("longer than"), "{}", long.why);
        assert!(matches!(&lines[1], JsonlLine::Letter(_)));
    }
}
