//! The lines [`JsonlSink::open`](super::JsonlSink::open) takes out of the file and keeps beside
//! it: a torn last line ([`TornLine`], in `<path>.torn`) and complete lines that are not lines
//! of the file ([`QuarantinedLine`], in `<path>.quarantine`).

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
///
/// [`JsonlSink::open`]: super::JsonlSink::open
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// Its line number in the file, from 1.
    pub line: usize,
    /// Its text, without the newline if it had one (bytes that were not UTF-8 are shown as
    /// U+FFFD; of a line longer than [`JsonlSink::MAX_LINE`], its first `MAX_LINE` bytes).
    ///
    /// [`JsonlSink::MAX_LINE`]: super::JsonlSink::MAX_LINE
    pub text: String,
}

/// A complete line of the file that is not one of its lines (not JSON, JSON that is not a
/// letter or another line the file holds, or longer than [`JsonlSink::MAX_LINE`]), found by
/// [`JsonlSink::open`]: it was appended to `<path>.quarantine` and taken out of the file, so
/// the rest of the file reads as before. No write of a sink makes one: a hand edit, another
/// program, a disk that changed bytes, or a letter an older version parked that cannot be read
/// back.
///
/// ```
/// use retry_core::dlq::{DeadLetterStore, JsonlSink, QuarantinedLine};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let path = std::env::temp_dir().join(format!("dlq-doc-quarantine-{}.jsonl", std::process::id()));
/// let letter = r#"{"msg_id":"M-1","original":null,"reason":"r","attempts":1,"first_failed_at":"2026-08-19T02:00:00Z","last_failed_at":"2026-08-19T02:00:00Z","trace_id":"t","class":"system","error_type":"E"}"#;
/// std::fs::write(&path, format!("garbage\n{letter}\n")).unwrap();
///
/// let sink = JsonlSink::open(&path).unwrap();
/// let [QuarantinedLine { line: 1, text, .. }] = sink.quarantined() else { panic!() };
/// assert_eq!(text, "garbage");
/// assert_eq!(sink.stats().await.unwrap().pending, 1, "the rest of the file reads");
/// assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{letter}\n"));
/// # drop(sink);
/// # let mut kept = path.clone().into_os_string();
/// # kept.push(".quarantine");
/// assert!(std::fs::read_to_string(&kept).unwrap().contains(r#""text":"garbage""#));
/// # std::fs::remove_file(&kept).unwrap();
/// # std::fs::remove_file(&path).unwrap();
/// # }
/// ```
///
/// [`JsonlSink::open`]: super::JsonlSink::open
/// [`JsonlSink::MAX_LINE`]: super::JsonlSink::MAX_LINE
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedLine {
    /// Its line number in the file as it was read, from 1.
    pub line: usize,
    /// Why it could not be read.
    pub why: String,
    /// Its text, without the newline (bytes that were not UTF-8 are shown as U+FFFD; of a line
    /// longer than [`JsonlSink::MAX_LINE`], its first `MAX_LINE` bytes).
    ///
    /// [`JsonlSink::MAX_LINE`]: super::JsonlSink::MAX_LINE
    pub text: String,
}
