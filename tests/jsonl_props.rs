//! `JsonlSink` under bad input, on real files: random histories of letters, acks, put-backs and
//! redrive records read back the same after reopening; random garbage as the last line (torn,
//! or a complete line that is not JSON) is moved to `<path>.torn` with every earlier letter
//! intact; random garbage in an earlier line fails `open` with `DlqError::Corrupt` naming that
//! line and leaves the file byte for byte as it was. Oversized letters survive whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DlqError, FailureClass, JsonlSink, LegacyStore, RedriveRecord,
    TornLine,
};
use serde_json::Value;

#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

#[path = "common/runtime.rs"]
mod runtime;

use runtime::RUNTIME;

fn torn_path(path: &Path) -> PathBuf {
    let mut torn = path.as_os_str().to_owned();
    torn.push(".torn");
    PathBuf::from(torn)
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

/// A few ids that repeat (so parks replace, acks hit and put-backs find a pending letter) and
/// any text, newlines, quotes and braces included.
fn msg_id() -> impl Strategy<Value = String> {
    prop_oneof![4 => "M-[0-4]", 1 => ".{0,8}"]
}

/// Times as RFC 3339 with any offset, or text that is not a time at all (such letters sort
/// last but must still be kept).
fn time() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (2000u32..2100, 1u32..=12, 1u32..=28, 0u32..24, 0u32..60, -12i32..=14).prop_map(
            |(y, mo, d, h, mi, off)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:00{off:+03}:00")
        ),
        1 => ".{0,10}",
    ]
}

fn letter() -> impl Strategy<Value = DeadLetter> {
    (
        msg_id(),
        json(),
        ".{0,20}",
        any::<u32>(),
        time(),
        time(),
        ".{0,8}",
        any::<bool>(),
        ".{0,8}",
        proptest::option::of(".{0,10}"),
    )
        .prop_map(
            |(msg_id, original, reason, attempts, first, last, trace_id, data, error_type, key)| {
                DeadLetter {
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
                    source: None,
                    redacted: false,
                    key_scope: None,
                    key_expires_at: None,
                    history: Vec::new(),
                    resolved: None,
                }
            },
        )
}

fn redrive() -> impl Strategy<Value = RedriveRecord> {
    (
        "[0-9a-f]{16}",
        ".{0,8}",
        ".{0,12}",
        ".{0,12}",
        time(),
        time(),
        any::<u64>(),
        any::<u32>(),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        proptest::option::of(".{0,12}"),
    )
        .prop_map(
            |(
                run_id,
                who,
                filter,
                target,
                started_at,
                finished_at,
                limit,
                rate,
                counts,
                stopped,
            )| {
                RedriveRecord {
                    run_id,
                    who,
                    filter,
                    target,
                    started_at,
                    finished_at,
                    limit,
                    rate_per_second: rate,
                    selected: counts.0,
                    succeeded: counts.1,
                    failed: counts.2,
                    skipped: counts.3,
                    stopped,
                }
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Park(DeadLetter),
    PutBack(DeadLetter),
    Ack(String),
    Redrive(RedriveRecord),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => letter().prop_map(Op::Park),
        2 => letter().prop_map(Op::PutBack),
        3 => msg_id().prop_map(Op::Ack),
        1 => redrive().prop_map(Op::Redrive),
    ]
}

// ---- the model and the sink ----

/// What the file must hold: the pending letter of each id, and the redrive runs in order.
#[derive(Debug, Default, PartialEq)]
struct Model {
    pending: BTreeMap<String, DeadLetter>,
    redrives: Vec<RedriveRecord>,
}

/// Applies `ops` to a new sink on `path` and to the model; returns the model.
fn write(path: &Path, ops: &[Op]) -> Result<Model, TestCaseError> {
    let sink = JsonlSink::open(path).unwrap();
    let mut model = Model::default();
    RUNTIME.block_on(async {
        for op in ops {
            match op {
                Op::Park(letter) => {
                    sink.park(letter).await.unwrap();
                    model.pending.insert(letter.msg_id.clone(), letter.clone());
                }
                Op::PutBack(letter) => {
                    sink.put_back(letter).await.unwrap();
                    let mut kept = letter.clone();
                    if let Some(pending) = model.pending.get(&letter.msg_id) {
                        kept.first_failed_at.clone_from(&pending.first_failed_at);
                    }
                    model.pending.insert(kept.msg_id.clone(), kept);
                }
                Op::Ack(msg_id) => {
                    let was_pending = model.pending.remove(msg_id).is_some();
                    prop_assert_eq!(sink.ack(msg_id).await.unwrap(), was_pending);
                }
                Op::Redrive(record) => {
                    sink.record_redrive(record).await.unwrap();
                    model.redrives.push(record.clone());
                }
            }
        }
        Ok::<(), TestCaseError>(())
    })?;
    let seen = read(&sink);
    prop_assert_eq!(
        &seen.model,
        &model,
        "the open sink disagrees with the model"
    );
    Ok(model)
}

/// What a sink shows: the model, and the letters in its own order.
struct Seen {
    model: Model,
    list: Vec<DeadLetter>,
}

fn read(sink: &JsonlSink) -> Seen {
    RUNTIME.block_on(async {
        let list = sink.list().await.unwrap();
        assert_eq!(sink.count().await.unwrap(), list.len() as u64);
        assert_eq!(sink.oldest().await.unwrap().as_ref(), list.first());
        for letter in &list {
            assert_eq!(
                sink.get(&letter.msg_id).await.unwrap().as_ref(),
                Some(letter)
            );
        }
        Seen {
            model: Model {
                pending: list
                    .iter()
                    .map(|letter| (letter.msg_id.clone(), letter.clone()))
                    .collect(),
                redrives: sink.redrives().await.unwrap(),
            },
            list,
        }
    })
}

/// The file's lines, newline included.
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

/// Garbage a crash or a bad disk might leave as the last line.
#[derive(Debug, Clone)]
enum Tail {
    /// Bytes without a newline: a write cut short (any bytes but `\n`, so possibly valid
    /// JSON, possibly not UTF-8).
    Unterminated(Vec<u8>),
    /// A complete line that is not JSON.
    NotJson(Vec<u8>),
    /// The first bytes of a real letter's line: a `SIGKILL` mid-write.
    Prefix(DeadLetter, prop::sample::Index),
}

fn not_newline() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 0x20u8..0x7f, 1 => any::<u8>().prop_filter("no newline", |&b| b != b'\n')]
}

fn tail() -> impl Strategy<Value = Tail> {
    prop_oneof![
        prop::collection::vec(not_newline(), 1..64).prop_map(Tail::Unterminated),
        prop::collection::vec(not_newline(), 1..64)
            .prop_filter("not JSON, not blank", |bytes| {
                !bytes.trim_ascii().is_empty() && serde_json::from_slice::<Value>(bytes).is_err()
            })
            .prop_map(Tail::NotJson),
        (letter(), any::<prop::sample::Index>()).prop_map(|(l, at)| Tail::Prefix(l, at)),
    ]
}

impl Tail {
    /// The bytes appended, and the torn line's text as it must be reported.
    fn bytes(&self) -> (Vec<u8>, Vec<u8>) {
        match self {
            Tail::Unterminated(bytes) => (bytes.clone(), bytes.clone()),
            Tail::NotJson(bytes) => {
                let mut line = bytes.clone();
                line.push(b'\n');
                (line, bytes.clone())
            }
            Tail::Prefix(letter, at) => {
                let line = serde_json::to_vec(letter).unwrap();
                let cut = line[..1 + at.index(line.len() - 1)].to_vec();
                (cut.clone(), cut)
            }
        }
    }
}

/// What replaces a line before the last: never blank (blank lines are allowed), never a valid
/// letter, ack or redrive line.
#[derive(Debug, Clone)]
enum Damage {
    /// The line cut short, its newline kept.
    Truncated(prop::sample::Index),
    /// Bytes that are not JSON.
    Garbage(Vec<u8>),
    /// JSON that is not a dead letter, an ack or a redrive record.
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
            "{\"redrive\":{}}",
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

    /// Whatever was written, a new sink on the file shows the same pending letters (in the same
    /// order) and redrive runs, finds nothing torn, and changes nothing.
    #[test]
    fn reopening_shows_what_was_written(ops in prop::collection::vec(op(), 0..16)) {
        let dir = TempDir::new("jsonl-props-reopen");
        let path = dir.file("dlq.jsonl");
        let model = write(&path, &ops)?;
        let before = std::fs::read(&path).unwrap();

        let sink = JsonlSink::open(&path).unwrap();
        prop_assert_eq!(sink.torn(), &[] as &[TornLine]);
        let seen = read(&sink);
        prop_assert_eq!(&seen.model, &model);
        drop(sink);
        prop_assert_eq!(std::fs::read(&path).unwrap(), before, "reading changed the file");

        let again = read(&JsonlSink::open_read_only(&path).unwrap());
        prop_assert_eq!(again.list, seen.list, "the order changed across opens");
    }

    /// Garbage as the last line, torn or complete: `open` succeeds, reports it, keeps it in
    /// `<path>.torn`, cuts the file back to its complete lines, and every earlier letter is
    /// intact. Appending goes on cleanly afterwards.
    #[test]
    fn a_garbage_last_line_is_moved_aside_and_nothing_else_is_lost(
        ops in prop::collection::vec(op(), 0..10),
        tail in tail(),
        next in letter(),
    ) {
        let dir = TempDir::new("jsonl-props-torn");
        let path = dir.file("dlq.jsonl");
        let model = write(&path, &ops)?;
        let complete = std::fs::read(&path).unwrap();
        let (appended, text) = tail.bytes();
        let mut damaged = complete.clone();
        damaged.extend_from_slice(&appended);
        std::fs::write(&path, &damaged).unwrap();

        let sink = JsonlSink::open(&path).unwrap();
        let line = lines(&complete).len() + 1;
        let text = String::from_utf8_lossy(&text).into_owned();
        prop_assert_eq!(sink.torn(), &[TornLine { line, text: text.clone() }]);
        prop_assert_eq!(&read(&sink).model, &model, "a letter before the torn line was lost");
        prop_assert_eq!(std::fs::read(&path).unwrap(), complete, "the file was not cut back to its complete lines");

        let kept = std::fs::read_to_string(torn_path(&path)).unwrap();
        let kept: Value = serde_json::from_str(kept.trim_end()).unwrap();
        prop_assert_eq!(&kept["line"], &Value::from(line));
        prop_assert_eq!(&kept["text"], &Value::from(text), "the torn text was not kept whole");

        RUNTIME.block_on(sink.park(&next)).unwrap();
        drop(sink);
        let reopened = JsonlSink::open(&path).unwrap();
        prop_assert!(reopened.torn().is_empty());
        prop_assert_eq!(RUNTIME.block_on(reopened.get(&next.msg_id)).unwrap(), Some(next));
    }

    /// Damage to any line but the last is not a crash artefact: `open` (and a read-only open)
    /// fails with `Corrupt` naming that line, and the file and its `.torn` neighbour are left
    /// exactly as they were.
    #[test]
    fn a_damaged_earlier_line_fails_open_naming_it_and_changes_nothing(
        ops in prop::collection::vec(op(), 2..12),
        at in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let dir = TempDir::new("jsonl-props-corrupt");
        let path = dir.file("dlq.jsonl");
        write(&path, &ops)?;
        let written = std::fs::read(&path).unwrap();
        let original = lines(&written);
        prop_assume!(original.len() >= 2);
        let victim = at.index(original.len() - 1);
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

        let number = victim + 1;
        for (how, result) in [
            ("open", JsonlSink::open(&path)),
            ("open_read_only", JsonlSink::open_read_only(&path)),
        ] {
            match result {
                Err(DlqError::Corrupt(what)) => {
                    prop_assert!(
                        what.contains(&format!(" line {number},")) || what.contains(&format!(" line {number}:")),
                        "{} should name line {}: {}", how, number, what
                    );
                    prop_assert!(what.contains(&path.display().to_string()), "{} should name the file: {}", how, what);
                }
                other => return Err(TestCaseError::fail(format!("{how} gave {other:?} for line {number}"))),
            }
        }
        prop_assert_eq!(std::fs::read(&path).unwrap(), damaged, "a failed open changed the file");
        prop_assert!(!torn_path(&path).exists(), "a failed open moved something aside");
    }
}

/// A letter far larger than any line buffer (1 MiB of original, escaped to 1.75 MB, and a
/// 64 KiB id) is kept whole; so is a torn line of 1 MiB, in `<path>.torn`.
#[test]
fn oversized_letters_and_torn_lines_survive_whole() {
    let dir = TempDir::new("jsonl-props-large");
    let path = dir.file("dlq.jsonl");
    let big = DeadLetter {
        msg_id: "M-".to_owned() + &"9".repeat(64 << 10),
        original: Value::from("x\n\"{".repeat(1 << 18)),
        reason: "r".repeat(100_000),
        attempts: u32::MAX,
        first_failed_at: "2026-08-19T02:11:03+09:00".into(),
        last_failed_at: "not a time".into(),
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
    };
    let sink = JsonlSink::open(&path).unwrap();
    RUNTIME.block_on(sink.park(&big)).unwrap();
    drop(sink);
    let complete = std::fs::read(&path).unwrap();

    let torn = serde_json::to_vec(&big).unwrap()[..1 << 20].to_vec();
    let mut damaged = complete.clone();
    damaged.extend_from_slice(&torn);
    std::fs::write(&path, &damaged).unwrap();

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(RUNTIME.block_on(sink.list()).unwrap(), [big]);
    assert_eq!(sink.torn().len(), 1);
    assert_eq!(sink.torn()[0].text.as_bytes(), torn);
    assert_eq!(std::fs::read(&path).unwrap(), complete);
    let kept: Value = serde_json::from_str(
        std::fs::read_to_string(torn_path(&path))
            .unwrap()
            .trim_end(),
    )
    .unwrap();
    assert_eq!(kept["text"].as_str().map(str::as_bytes), Some(&torn[..]));
}
