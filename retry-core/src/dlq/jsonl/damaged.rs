//! The lines of a dead-letter file that hold no letter: a torn tail ([`TornLine`]), which the
//! sink cuts off into `<path>.torn`, and complete lines that cannot be read
//! ([`UnreadableLine`]), which a reader reports and skips.

/// A last line without its newline: what a crash in the middle of a write left. Its letter's
/// caller never heard `Ok`, so the letter was not parked (a queue consumer got no ack and gets
/// the message again).
///
/// [`JsonlSink::open`](super::JsonlSink::open) (and every group commit, for a tail another
/// process left) appends it to `<path>.torn` and cuts it off the file;
/// [`JsonlReader`](super::JsonlReader) reports one and reads no further (a writer may be in the
/// middle of that line).
///
/// ```
/// use retry_core::dlq::{JsonlSink, TornLine};
///
/// let path = std::env::temp_dir().join(format!("dlq-doc-torn-line-{}.jsonl", std::process::id()));
/// std::fs::write(&path, "{}\n{\"msg_id\":\"M-1\",\"orig").unwrap();
///
/// let sink = JsonlSink::open(&path).unwrap();
/// assert_eq!(sink.torn(), Some(&TornLine { offset: 3, text: "{\"msg_id\":\"M-1\",\"orig".to_owned() }));
/// assert_eq!(std::fs::read(&path).unwrap(), b"{}\n", "cut off the file");
/// # drop(sink);
/// # let mut torn = path.clone().into_os_string();
/// # torn.push(".torn");
/// # std::fs::remove_file(&torn).unwrap();
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// Where it starts in the file, in bytes.
    pub offset: u64,
    /// Its text (bytes that were not UTF-8 are shown as U+FFFD; of a line longer than
    /// [`JsonlSink::MAX_LINE`], its first `MAX_LINE` bytes).
    ///
    /// [`JsonlSink::MAX_LINE`]: super::JsonlSink::MAX_LINE
    pub text: String,
}

/// A complete line that is not a letter (nor an ack of an older file): not JSON, JSON that is
/// not a letter, or longer than [`JsonlSink::MAX_LINE`]. No sink writes one: a hand edit,
/// another program, a disk that changed bytes. [`JsonlReader`](super::JsonlReader) reports it
/// and reads on, so one bad line never hides the letters after it; the file keeps it.
///
/// ```
/// use retry_core::dlq::{JsonlLine, JsonlReader, UnreadableLine};
///
/// let path = std::env::temp_dir().join(format!("dlq-doc-unreadable-{}.jsonl", std::process::id()));
/// let letter = r#"{"msg_id":"M-1","original":null,"reason":"r","attempts":1,"first_failed_at":"2026-08-19T02:00:00Z","last_failed_at":"2026-08-19T02:00:00Z","trace_id":"t","class":"system","error_type":"E"}"#;
/// std::fs::write(&path, format!("garbage\n{letter}\n")).unwrap();
///
/// let lines: Vec<JsonlLine> = JsonlReader::open(&path).unwrap().collect::<Result<_, _>>().unwrap();
/// let JsonlLine::Unreadable(UnreadableLine { line: 1, text, .. }) = &lines[0] else { panic!() };
/// assert_eq!(text, "garbage");
/// assert!(matches!(&lines[1], JsonlLine::Letter(l) if l.msg_id == "M-1"), "the rest reads");
/// # std::fs::remove_file(&path).unwrap();
/// ```
///
/// [`JsonlSink::MAX_LINE`]: super::JsonlSink::MAX_LINE
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableLine {
    /// Its line number in the file, from 1.
    pub line: usize,
    /// Why it could not be read.
    pub why: String,
    /// Its text, without the newline (bytes that were not UTF-8 are shown as U+FFFD; of a line
    /// longer than [`JsonlSink::MAX_LINE`], its first `MAX_LINE` bytes).
    ///
    /// [`JsonlSink::MAX_LINE`]: super::JsonlSink::MAX_LINE
    pub text: String,
}
