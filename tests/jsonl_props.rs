//! `JsonlSink` and `JsonlReader` under bad input, on real files: any letters parked read back
//! exactly as parked, in order, and reopening changes nothing; random garbage as an
//! unterminated last line (torn) is moved to `<path>.torn` with everything before it intact;
//! random damage to any complete line is reported by the reader with its number while every
//! other line reads as it would without it, and nothing changes the file. Large letters survive
//! whole; lines over `JsonlSink::MAX_LINE` are refused when parked and reported, never read
//! whole, when found in the file.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DlqError, FailureClass, JsonlLine, JsonlReader, JsonlSink, TornLine,
};
use serde_json::Value;

use crate::tempdir;

use tempdir::TempDir;

use crate::runtime;

use runtime::RUNTIME;

fn torn_path(path: &Path) -> PathBuf {
    beside(path, ".torn")
}

fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

// ---- strategies ----

/// Any JSON a caller may park as `original`, except floats (an exact float round trip is
/// serde_json's business, not the file's).
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(".{0,6}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A few ids that repeat (a message parked again) and any text, newlines, quotes and braces
/// included.
fn msg_id() -> impl Strategy<Value = String> {
    prop_oneof![6 => "M-[0-2]", 1 => ".{0,8}"]
}

/// A time read from RFC 3339 with any offset, with a fraction of a second or none (a time
/// finer than the millisecond must come back as the same instant too).
fn time() -> impl Strategy<Value = SystemTime> {
    (
        (
            2000u32..2100,
            1u32..=12,
            1u32..=28,
            0u32..24,
            0u32..60,
            -12i32..=14,
        ),
        prop::sample::select(vec![0u64, 500_000_000, 123_000, 7]),
    )
        .prop_map(|((y, mo, d, h, mi, off), nanos)| {
            instant(&format!(
                "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:00{off:+03}:00"
            )) + Duration::from_nanos(nanos)
        })
}

fn letter() -> impl Strategy<Value = DeadLetter> {
    (
        (msg_id(), json(), ".{0,20}", any::<u32>(), time(), time()),
        (
            ".{0,8}",
            any::<bool>(),
            ".{0,8}",
            proptest::option::of(".{0,10}"),
        ),
        (
            proptest::option::of("[a-z:]{0,12}"),
            any::<bool>(),
            proptest::option::of(".{0,6}"),
        ),
    )
        .prop_map(
            |(
                (msg_id, original, reason, attempts, first, last),
                (trace_id, data, error_type, key),
                (source, redacted, key_scope),
            )| DeadLetter {
                msg_id,
                original,
                reason,
                attempts,
                first_failed_at: first,
                last_failed_at: last,
                trace_id,
                class: if data {
                    FailureClass::Data
                } else {
                    FailureClass::System
                },
                error_type,
                idempotency_key: key,
                source,
                redacted,
                key_scope,
                key_expires_at: None,
                history: Vec::new(),
                resolved: None,
            },
        )
}

// ---- the sink and the reader ----

/// Parks `letters` into a new sink on `path`, one after the other.
fn write(path: &Path, letters: &[DeadLetter]) {
    let sink = JsonlSink::open(path).unwrap();
    RUNTIME.block_on(async {
        for letter in letters {
            sink.park(letter).await.unwrap();
        }
    });
}

/// Every line of the file as the reader reads it.
fn read(path: &Path) -> Vec<JsonlLine> {
    JsonlReader::open(path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn as_lines(letters: &[DeadLetter]) -> Vec<JsonlLine> {
    letters.iter().cloned().map(JsonlLine::Letter).collect()
}

/// The file's lines, newline included.
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

/// What a crash leaves as the last line: no newline. (A complete line of garbage is not torn but
/// unreadable: `Damage`.)
#[derive(Debug, Clone)]
enum Tail {
    /// Bytes without a newline: a write cut short (any bytes but `\n`, so possibly valid
    /// JSON, possibly not UTF-8).
    Unterminated(Vec<u8>),
    /// The first bytes of a real letter's line: a `SIGKILL` mid-write.
    Prefix(Box<DeadLetter>, prop::sample::Index),
}

fn not_newline() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 0x20u8..0x7f, 1 => any::<u8>().prop_filter("no newline", |&b| b != b'\n')]
}

fn tail() -> impl Strategy<Value = Tail> {
    prop_oneof![
        prop::collection::vec(not_newline(), 1..64).prop_map(Tail::Unterminated),
        (letter(), any::<prop::sample::Index>()).prop_map(|(l, at)| Tail::Prefix(Box::new(l), at)),
    ]
}

impl Tail {
    /// The bytes appended, and the torn line's text as it must be reported.
    fn bytes(&self) -> (Vec<u8>, Vec<u8>) {
        match self {
            Tail::Unterminated(bytes) => (bytes.clone(), bytes.clone()),
            Tail::Prefix(letter, at) => {
                let line = serde_json::to_vec(letter).unwrap();
                let cut = line[..1 + at.index(line.len() - 1)].to_vec();
                (cut.clone(), cut)
            }
        }
    }
}

/// What replaces a line: never blank (blank lines are allowed), never a letter or an ack.
#[derive(Debug, Clone)]
enum Damage {
    /// The line cut short, its newline kept.
    Truncated(prop::sample::Index),
    /// Bytes that are not JSON.
    Garbage(Vec<u8>),
    /// JSON that is not a letter or an ack.
    WrongJson(&'static str),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Damage::Truncated),
        prop::collection::vec(not_newline(), 1..48)
            .prop_filter("not JSON, not blank", |bytes| {
                !bytes.trim_ascii().is_empty() && serde_json::from_slice::<Value>(bytes).is_err()
            })
            .prop_map(Damage::Garbage),
        prop::sample::select(vec![
            "{}",
            "null",
            "42",
            "[]",
            "\"M-1\"",
            "{\"msg_id\":\"M-1\"}",
            "{\"ack\":5}",
            "{\"ack\":null}",
            "{\"ack\":\"M-1\",\"by\":5}",
            "{\"lease\":\"M-1\",\"msg_id\":5}",
            "{\"msg_id\":\"M-1\",\"class\":\"cosmic\"}",
        ])
        .prop_map(Damage::WrongJson),
    ]
}

impl Damage {
    /// `line` (without its newline) damaged.
    fn apply(&self, line: &[u8]) -> Vec<u8> {
        match self {
            // A strict, non-empty prefix of a JSON object is never JSON.
            Damage::Truncated(at) => line[..1 + at.index(line.len() - 1)].to_vec(),
            Damage::Garbage(bytes) => bytes.clone(),
            Damage::WrongJson(text) => text.as_bytes().to_vec(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever was parked reads back exactly, in the order parked (a message parked again is
    /// a line of its own); a new sink on the file finds nothing torn and changes nothing.
    #[test]
    fn every_letter_reads_back_as_parked_and_reopening_changes_nothing(
        letters in prop::collection::vec(letter(), 0..24),
    ) {
        let dir = TempDir::new("jsonl-props-reopen");
        let path = dir.file("dlq.jsonl");
        write(&path, &letters);
        prop_assert_eq!(read(&path), as_lines(&letters));
        let before = std::fs::read(&path).unwrap();
        let reopened = JsonlSink::open(&path).unwrap();
        prop_assert_eq!(reopened.torn(), None);
        drop(reopened);
        prop_assert_eq!(std::fs::read(&path).unwrap(), before, "reopening changed the file");
    }

    /// Garbage as an unterminated last line: the reader reports it last; `open` succeeds,
    /// reports it, keeps it in `<path>.torn`, cuts the file back to its complete lines, and
    /// everything before it is intact. Appending goes on cleanly afterwards.
    #[test]
    fn a_garbage_last_line_is_moved_aside_and_nothing_else_is_lost(
        letters in prop::collection::vec(letter(), 0..8),
        tail in tail(),
        next in letter(),
    ) {
        let dir = TempDir::new("jsonl-props-torn");
        let path = dir.file("dlq.jsonl");
        write(&path, &letters);
        let complete = std::fs::read(&path).unwrap();
        let (appended, text) = tail.bytes();
        let mut damaged = complete.clone();
        damaged.extend_from_slice(&appended);
        std::fs::write(&path, &damaged).unwrap();
        let torn = TornLine {
            offset: complete.len() as u64,
            text: String::from_utf8_lossy(&text).into_owned(),
        };
        let mut expected = as_lines(&letters);
        expected.push(JsonlLine::Torn(torn.clone()));
        prop_assert_eq!(read(&path), expected);

        let sink = JsonlSink::open(&path).unwrap();
        prop_assert_eq!(sink.torn(), Some(&torn));
        prop_assert_eq!(std::fs::read(&path).unwrap(), complete, "the file was not cut back to its complete lines");
        let kept = std::fs::read_to_string(torn_path(&path)).unwrap();
        let kept: Value = serde_json::from_str(kept.trim_end()).unwrap();
        prop_assert_eq!(&kept["offset"], &Value::from(torn.offset));
        prop_assert_eq!(&kept["text"], &Value::from(torn.text), "the torn text was not kept whole");

        RUNTIME.block_on(sink.park(&next)).unwrap();
        drop(sink);
        let mut all = letters.clone();
        all.push(next);
        prop_assert_eq!(read(&path), as_lines(&all));
    }

    /// Damage to any complete line is not a crash artefact, and never costs the rest of the
    /// file: the reader reports that line, with its number, where it is, and reads every other
    /// line as it would without it; nothing changes the file.
    #[test]
    fn a_damaged_line_anywhere_is_reported_and_nothing_else_is_lost(
        letters in prop::collection::vec(letter(), 1..12),
        at in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let dir = TempDir::new("jsonl-props-damaged");
        let path = dir.file("dlq.jsonl");
        write(&path, &letters);
        let written = std::fs::read(&path).unwrap();
        let original = lines(&written);
        let victim = at.index(original.len());
        let mut damaged = Vec::new();
        for (i, line) in original.iter().enumerate() {
            if i == victim {
                damaged.extend_from_slice(&damage.apply(&line[..line.len() - 1]));
                damaged.push(b'\n');
            } else {
                damaged.extend_from_slice(line);
            }
        }
        std::fs::write(&path, &damaged).unwrap();

        let found = read(&path);
        prop_assert_eq!(found.len(), letters.len());
        for (i, (line, letter)) in found.iter().zip(&letters).enumerate() {
            if i == victim {
                let JsonlLine::Unreadable(bad) = line else {
                    return Err(TestCaseError::fail(format!("line {} read as {line:?}", i + 1)));
                };
                prop_assert_eq!(bad.line, i + 1);
            } else {
                prop_assert_eq!(line, &JsonlLine::Letter(letter.clone()));
            }
        }
        drop(JsonlSink::open(&path).unwrap());
        prop_assert_eq!(std::fs::read(&path).unwrap(), damaged, "the file was changed");
        prop_assert!(!torn_path(&path).exists(), "a damaged line is not torn");
    }
}

fn big_letter() -> DeadLetter {
    DeadLetter {
        msg_id: "M-".to_owned() + &"9".repeat(64 << 10),
        original: Value::from("x\n\"{".repeat(1 << 18)),
        reason: "r".repeat(100_000),
        attempts: u32::MAX,
        first_failed_at: instant("2026-08-19T02:11:03+09:00"),
        last_failed_at: instant("2026-08-19T02:12:47.000000001-05:00"),
        trace_id: "t".into(),
        class: FailureClass::Data,
        error_type: "E".into(),
        idempotency_key: Some("k".repeat(10_000)),
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

/// A letter far larger than any read buffer (1 MiB of original, escaped to 1.75 MB, and a
/// 64 KiB id) is kept whole; so is a torn line of 1 MiB, in `<path>.torn`.
#[test]
fn large_letters_and_torn_lines_survive_whole() {
    let dir = TempDir::new("jsonl-props-large");
    let path = dir.file("dlq.jsonl");
    let big = big_letter();
    write(&path, std::slice::from_ref(&big));
    let complete = std::fs::read(&path).unwrap();
    assert!(complete.len() > 1 << 20);

    let torn = serde_json::to_vec(&big).unwrap()[..1 << 20].to_vec();
    let mut damaged = complete.clone();
    damaged.extend_from_slice(&torn);
    std::fs::write(&path, &damaged).unwrap();

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.torn().map(|t| t.text.as_bytes()), Some(&torn[..]));
    assert_eq!(std::fs::read(&path).unwrap(), complete);
    assert_eq!(read(&path), [JsonlLine::Letter(big)]);
    let kept: Value = serde_json::from_str(
        std::fs::read_to_string(torn_path(&path))
            .unwrap()
            .trim_end(),
    )
    .unwrap();
    assert_eq!(kept["text"].as_str().map(str::as_bytes), Some(&torn[..]));
}

/// A letter whose line would pass `MAX_LINE` is refused before anything is written (for its
/// caller alone: the sink goes on). A complete line over `MAX_LINE` in the file is reported by
/// the reader, wherever it is; an unterminated one at the end is torn, kept with its first
/// `MAX_LINE` bytes. No line is ever read into memory whole past the limit.
#[test]
fn lines_over_the_limit_are_refused_and_reported() {
    let dir = TempDir::new("jsonl-props-oversized");
    let path = dir.file("dlq.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    let mut huge = big_letter();
    huge.msg_id = "M-huge".into();
    huge.original = Value::from("x".repeat(JsonlSink::MAX_LINE));
    let refused = RUNTIME.block_on(sink.park(&huge)).unwrap_err();
    assert!(matches!(refused, DlqError::Serialize(_)), "{refused:?}");
    assert!(refused.to_string().contains("M-huge"), "{refused}");
    assert!(
        refused
            .to_string()
            .contains(&JsonlSink::MAX_LINE.to_string()),
        "{refused}"
    );
    let small: DeadLetter = serde_json::from_value(serde_json::json!({
        "msg_id": "M-1", "original": null, "reason": "r", "attempts": 1,
        "first_failed_at": "2026-08-19T02:00:00Z", "last_failed_at": "2026-08-19T02:00:00Z",
        "trace_id": "t", "class": "system", "error_type": "E" }))
    .unwrap();
    RUNTIME.block_on(sink.park(&small)).unwrap();
    drop(sink);
    let one = std::fs::read(&path).unwrap();
    assert_eq!(lines(&one).len(), 1, "only the small letter was written");

    let oversized = vec![b'x'; JsonlSink::MAX_LINE + 1];
    for text in [
        [&one[..], &oversized, b"\n", &one].concat(),
        [&one[..], &oversized, b"\n"].concat(),
    ] {
        std::fs::write(&path, &text).unwrap();
        let found = read(&path);
        let JsonlLine::Unreadable(long) = &found[1] else {
            panic!("{:?}", found.len())
        };
        assert_eq!(long.line, 2);
        assert!(long.why.starts_with("longer than"), "{}", long.why);
        assert_eq!(long.text.len(), JsonlSink::MAX_LINE);
        assert_eq!(found[0], JsonlLine::Letter(small.clone()));
        assert_eq!(found.len(), if text.ends_with(&one) { 3 } else { 2 });
    }

    // Unterminated at the end: torn, kept aside with its first MAX_LINE bytes, cut off.
    std::fs::write(&path, [&one[..], &oversized].concat()).unwrap();
    let sink = JsonlSink::open(&path).unwrap();
    let torn = sink.torn().unwrap();
    assert_eq!(torn.offset, one.len() as u64);
    assert_eq!(torn.text.len(), JsonlSink::MAX_LINE);
    assert_eq!(std::fs::read(&path).unwrap(), one);
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
