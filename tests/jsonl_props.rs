//! `JsonlSink` under bad input, on real files: random histories of parks, resolutions, leases,
//! releases, put-backs, audit rows, redrive records and purges answer exactly as the reference
//! store (`MemoryDeadLetters`) does, and read back the same after reopening; random garbage as
//! an unterminated last line (torn) is moved to `<path>.torn` with everything before it intact;
//! random damage to any complete line is quarantined (skipped and reported by a reader, moved
//! to `<path>.quarantine` and taken out of the file by a writer) and every other line reads as
//! it would without it. Large letters survive whole; lines over `JsonlSink::MAX_LINE` are
//! refused when parked and quarantined, never read whole, when found in the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, FailureClass,
    JsonlSink, MemoryDeadLetters, Page, RedriveRecord, Resolution, Stats, TornLine,
};
use retry_core::time::parse_rfc3339;
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

/// A few ids that repeat (so parks merge, and resolutions, leases and put-backs find a letter)
/// and any text, newlines, quotes and braces included.
fn msg_id() -> impl Strategy<Value = String> {
    prop_oneof![6 => "M-[0-2]", 1 => ".{0,8}"]
}

/// Two runs, so leases are contested and put-backs often come from the holder.
fn run_id() -> impl Strategy<Value = String> {
    "run-[ab]"
}

/// Times as RFC 3339 with any offset, or text that is not a time at all (such letters sort
/// last but must still be kept).
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

/// Resolution and purge times: a few fixed instants (so purges cut between them), and text
/// that is not a time (never purged: its age is unknown).
fn resolved_at() -> impl Strategy<Value = SystemTime> {
    prop::sample::select(vec![
        "2026-08-20T09:00:00Z",
        "2026-09-01T00:00:00+09:00",
        "2027-03-01T12:00:00.500-05:00",
    ])
    .prop_map(instant)
}

fn purge_cut() -> impl Strategy<Value = SystemTime> {
    prop::sample::select(vec![
        "2026-08-25T00:00:00Z",
        "2026-12-31T00:00:00Z",
        "2030-01-01T00:00:00Z",
    ])
    .prop_map(|at| parse_rfc3339(at).unwrap())
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

fn audit() -> impl Strategy<Value = AuditEntry> {
    (
        run_id(),
        msg_id(),
        ".{0,6}",
        proptest::option::of(".{0,10}"),
    )
        .prop_map(|(run, msg, who, outcome)| {
            let intent =
                AuditEntry::intent(run, msg, who, "deposit", instant("2026-08-20T09:00:00Z"));
            match outcome {
                Some(outcome) => intent.finished(outcome, instant("2026-08-20T09:00:01Z")),
                None => intent,
            }
        })
}

#[derive(Debug, Clone)]
enum Op {
    Park(DeadLetter),
    Resolve(String, Resolution),
    Lease(String, String),
    Release(String, String),
    PutBack(String, String, Failure),
    Audit(AuditEntry),
    Redrive(RedriveRecord),
    Purge(SystemTime),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => letter().prop_map(Op::Park),
        2 => (msg_id(), ".{0,6}", resolved_at(), proptest::option::of(run_id())).prop_map(
            |(id, by, at, run)| {
                let resolution = Resolution::new(by, at);
                Op::Resolve(id, match run { Some(run) => resolution.in_run(run), None => resolution })
            }
        ),
        3 => (msg_id(), run_id()).prop_map(|(id, run)| Op::Lease(id, run)),
        1 => (msg_id(), run_id()).prop_map(|(id, run)| Op::Release(id, run)),
        2 => (msg_id(), run_id(), time(), ".{0,12}").prop_map(|(id, run, at, reason)| {
            let failure = Failure { at, reason, trace_id: run.clone() };
            Op::PutBack(id, run, failure)
        }),
        1 => audit().prop_map(Op::Audit),
        1 => redrive().prop_map(Op::Redrive),
        1 => purge_cut().prop_map(Op::Purge),
    ]
}

// ---- the reference and the sink ----

/// A lease no case outlives: the model and the sink decide on the same clock.
const LEASE: Duration = Duration::from_secs(3600);

/// Applies `op` to `store`; its answer, as text to compare.
async fn apply<S: DeadLetterStore>(store: &S, op: &Op) -> Result<String, DlqError> {
    Ok(match op {
        Op::Park(letter) => format!("{:?}", store.park(letter).await?),
        Op::Resolve(id, resolution) => format!("{:?}", store.resolve(id, resolution).await?),
        Op::Lease(id, run) => format!("{:?}", store.lease(id, run, LEASE).await?),
        Op::Release(id, run) => format!("{:?}", store.release(id, run).await?),
        Op::PutBack(id, run, failure) => format!("{:?}", store.put_back(id, run, failure).await?),
        Op::Audit(entry) => format!("{:?}", store.audit(entry).await?),
        Op::Redrive(record) => format!("{:?}", store.record_redrive(record).await?),
        Op::Purge(before) => format!("{:?}", store.purge_resolved(*before).await?),
    })
}

/// What a store shows: every letter ever named (pending, resolved or gone), the pending ones,
/// the counts, the audit rows and the redrive records.
#[derive(Debug, PartialEq)]
struct Snapshot {
    letters: BTreeMap<String, Option<DeadLetter>>,
    pending: BTreeSet<String>,
    /// Without `oldest_first_failed_at`: the reference orders letters whose first failure is
    /// not a time differently (JSONL puts them last; checked in `check_order`).
    stats: Stats,
    audit: Vec<AuditEntry>,
    redrives: Vec<RedriveRecord>,
}

async fn snapshot<S: DeadLetterStore>(store: &S, ids: &BTreeSet<String>) -> Snapshot {
    let mut letters = BTreeMap::new();
    for id in ids {
        letters.insert(id.clone(), store.get(id).await.unwrap());
    }
    let mut stats = store.stats().await.unwrap();
    stats.oldest_first_failed_at = None;
    Snapshot {
        letters,
        pending: store
            .page(&Page::first(usize::MAX))
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.msg_id)
            .collect(),
        stats,
        audit: store.audit_rows(None).await.unwrap(),
        redrives: store.redrives().await.unwrap(),
    }
}

/// The sink's pending letters come by first failure, then `msg_id`; pages of three with the
/// cursor give the same; the oldest is the first.
async fn check_order(sink: &JsonlSink) -> Result<(), TestCaseError> {
    let all = sink.page(&Page::first(usize::MAX)).await.unwrap();
    let key = |l: &DeadLetter| (l.first_failed_at, l.msg_id.clone());
    prop_assert!(all.windows(2).all(|w| key(&w[0]) < key(&w[1])), "order");
    let mut paged = Vec::new();
    let mut page = Page::first(3);
    loop {
        let more = sink.page(&page).await.unwrap();
        let Some(last) = more.last() else { break };
        page = page.next_after(last);
        paged.extend(more);
    }
    prop_assert_eq!(&paged, &all, "paging with the cursor");
    prop_assert_eq!(
        sink.stats().await.unwrap().oldest_first_failed_at,
        all.first().map(|l| l.first_failed_at)
    );
    Ok(())
}

fn ids(ops: &[Op]) -> BTreeSet<String> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Park(l) => Some(l.msg_id.clone()),
            Op::Resolve(id, _) | Op::Lease(id, _) | Op::Release(id, _) | Op::PutBack(id, _, _) => {
                Some(id.clone())
            }
            _ => None,
        })
        .collect()
}

/// Applies `ops` to a new sink on `path` and to the reference, answer by answer; returns what
/// the sink shows at the end.
fn write(path: &Path, ops: &[Op]) -> Result<Snapshot, TestCaseError> {
    let sink = JsonlSink::open(path).unwrap();
    let reference = MemoryDeadLetters::new();
    let ids = ids(ops);
    RUNTIME.block_on(async {
        for (i, op) in ops.iter().enumerate() {
            let expected = apply(&reference, op).await.unwrap();
            let answered = apply(&sink, op).await.unwrap();
            prop_assert_eq!(
                answered,
                expected,
                "op {} answered differently: {:?}",
                i,
                op
            );
        }
        check_order(&sink).await?;
        let shown = snapshot(&sink, &ids).await;
        prop_assert_eq!(
            &shown,
            &snapshot(&reference, &ids).await,
            "the sink and the reference differ"
        );
        Ok(shown)
    })
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

/// What replaces a line: never blank (blank lines are allowed), never a valid
/// line of the file.
#[derive(Debug, Clone)]
enum Damage {
    /// The line cut short, its newline kept.
    Truncated(prop::sample::Index),
    /// Bytes that are not JSON.
    Garbage(Vec<u8>),
    /// JSON that is not a line of the file.
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
            "{\"lease\":\"M-1\"}",
            "{\"lease\":\"M-1\",\"run_id\":\"r\",\"until\":\"soon\"}",
            "{\"release\":5}",
            "{\"audit\":{}}",
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

    /// Whatever was done, the sink answered as the reference did; a new sink on the file (and
    /// a read-only one) shows the same, finds nothing torn, and changes nothing.
    #[test]
    fn the_sink_answers_as_the_reference_and_reopening_shows_the_same(
        ops in prop::collection::vec(op(), 0..32),
    ) {
        let dir = TempDir::new("jsonl-props-reopen");
        let path = dir.file("dlq.jsonl");
        let shown = write(&path, &ops)?;
        let before = std::fs::read(&path).unwrap();
        let ids = ids(&ops);

        for reopened in [JsonlSink::open(&path).unwrap(), JsonlSink::open_read_only(&path).unwrap()] {
            prop_assert_eq!(reopened.torn(), &[] as &[TornLine]);
            RUNTIME.block_on(async {
                prop_assert_eq!(&snapshot(&reopened, &ids).await, &shown, "reopened");
                check_order(&reopened).await
            })?;
        }
        prop_assert_eq!(std::fs::read(&path).unwrap(), before, "reading changed the file");
    }

    /// Garbage as an unterminated last line: `open` succeeds, reports it, keeps it in
    /// `<path>.torn`, cuts the file back to its complete lines, and everything before it is
    /// intact. Appending goes on cleanly afterwards.
    #[test]
    fn a_garbage_last_line_is_moved_aside_and_nothing_else_is_lost(
        ops in prop::collection::vec(op(), 0..12),
        tail in tail(),
        next in letter(),
    ) {
        let dir = TempDir::new("jsonl-props-torn");
        let path = dir.file("dlq.jsonl");
        let shown = write(&path, &ops)?;
        let complete = std::fs::read(&path).unwrap();
        let (appended, text) = tail.bytes();
        let mut damaged = complete.clone();
        damaged.extend_from_slice(&appended);
        std::fs::write(&path, &damaged).unwrap();

        let sink = JsonlSink::open(&path).unwrap();
        let line = lines(&complete).len() + 1;
        let text = String::from_utf8_lossy(&text).into_owned();
        prop_assert_eq!(sink.torn(), &[TornLine { line, text: text.clone() }]);
        let seen = RUNTIME.block_on(snapshot(&sink, &ids(&ops)));
        prop_assert_eq!(&seen, &shown, "something before the torn line was lost");
        prop_assert_eq!(std::fs::read(&path).unwrap(), complete, "the file was not cut back to its complete lines");

        let kept = std::fs::read_to_string(torn_path(&path)).unwrap();
        let kept: Value = serde_json::from_str(kept.trim_end()).unwrap();
        prop_assert_eq!(&kept["line"], &Value::from(line));
        prop_assert_eq!(&kept["text"], &Value::from(text), "the torn text was not kept whole");

        RUNTIME.block_on(sink.park(&next)).unwrap();
        let parked = RUNTIME.block_on(sink.get(&next.msg_id)).unwrap();
        drop(sink);
        let reopened = JsonlSink::open(&path).unwrap();
        prop_assert!(reopened.torn().is_empty());
        prop_assert_eq!(RUNTIME.block_on(reopened.get(&next.msg_id)).unwrap(), parked);
    }

    /// Damage to any complete line is not a crash artefact, and never costs the rest of the
    /// file: a read-only open skips and reports that line and changes nothing; `open` moves it
    /// to `<path>.quarantine` and takes it out of the file, which then reads exactly as a file
    /// written without that line.
    #[test]
    fn a_damaged_line_anywhere_is_quarantined_and_nothing_else_is_lost(
        ops in prop::collection::vec(op(), 1..16),
        at in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let dir = TempDir::new("jsonl-props-quarantine");
        let path = dir.file("dlq.jsonl");
        write(&path, &ops)?;
        let written = std::fs::read(&path).unwrap();
        let original = lines(&written);
        prop_assume!(!original.is_empty());
        let victim = at.index(original.len());
        let mut damaged = Vec::new();
        let mut without = Vec::new();
        for (i, line) in original.iter().enumerate() {
            if i == victim {
                damaged.extend_from_slice(&damage.apply(&line[..line.len() - 1]));
                damaged.push(b'\n');
            } else {
                damaged.extend_from_slice(line);
                without.extend_from_slice(line);
            }
        }
        std::fs::write(&path, &damaged).unwrap();
        let expected_path = dir.file("expected.jsonl");
        std::fs::write(&expected_path, &without).unwrap();
        let expected = JsonlSink::open_read_only(&expected_path).unwrap();
        let expected = RUNTIME.block_on(snapshot(&expected, &ids(&ops)));

        let number = victim + 1;
        let reader = JsonlSink::open_read_only(&path).unwrap();
        let found: Vec<usize> = reader.quarantined().iter().map(|q| q.line).collect();
        prop_assert_eq!(found, vec![number]);
        prop_assert_eq!(&RUNTIME.block_on(snapshot(&reader, &ids(&ops))), &expected);
        prop_assert_eq!(std::fs::read(&path).unwrap(), damaged.clone(), "a reader changed the file");
        prop_assert!(!beside(&path, ".quarantine").exists(), "a reader moved something aside");

        let sink = JsonlSink::open(&path).unwrap();
        let found: Vec<usize> = sink.quarantined().iter().map(|q| q.line).collect();
        prop_assert_eq!(found, vec![number]);
        prop_assert_eq!(&RUNTIME.block_on(snapshot(&sink, &ids(&ops))), &expected);
        prop_assert_eq!(std::fs::read(&path).unwrap(), without, "not exactly the damaged line was taken out");
        let kept = std::fs::read_to_string(beside(&path, ".quarantine")).unwrap();
        let kept: Value = serde_json::from_str(kept.trim_end()).unwrap();
        prop_assert_eq!(&kept["line"], &Value::from(number));
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
    let sink = JsonlSink::open(&path).unwrap();
    RUNTIME.block_on(sink.park(&big)).unwrap();
    drop(sink);
    let complete = std::fs::read(&path).unwrap();
    assert!(complete.len() > 1 << 20);

    let torn = serde_json::to_vec(&big).unwrap()[..1 << 20].to_vec();
    let mut damaged = complete.clone();
    damaged.extend_from_slice(&torn);
    std::fs::write(&path, &damaged).unwrap();

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(
        RUNTIME.block_on(sink.page(&Page::first(10))).unwrap(),
        [big]
    );
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

/// A letter whose line would pass `MAX_LINE` is refused before anything is written (for its
/// caller alone: the sink goes on). A complete line over `MAX_LINE` in the file is quarantined,
/// wherever it is; an unterminated one at the end is torn, reported with its first `MAX_LINE`
/// bytes. No line is ever read into memory whole past the limit.
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
    for (text, line) in [
        ([&one[..], &oversized, b"\n", &one].concat(), 2),
        ([&one[..], &oversized, b"\n"].concat(), 2),
    ] {
        std::fs::write(&path, &text).unwrap();
        for sink in [JsonlSink::open_read_only(&path), JsonlSink::open(&path)] {
            let sink = sink.unwrap();
            let found = sink.quarantined();
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].line, line);
            assert!(found[0].why.starts_with("longer than"), "{}", found[0].why);
            assert_eq!(found[0].text.len(), JsonlSink::MAX_LINE);
            assert_eq!(
                RUNTIME.block_on(sink.get("M-1")).unwrap(),
                Some(small.clone())
            );
        }
        let rest = if text.ends_with(&one) {
            [&one[..], &one].concat()
        } else {
            one.clone()
        };
        assert_eq!(
            std::fs::read(&path).unwrap(),
            rest,
            "only the long line was taken out"
        );
        std::fs::remove_file(beside(&path, ".quarantine")).unwrap();
    }

    // Unterminated at the end: torn, kept aside with its first MAX_LINE bytes, cut off.
    std::fs::write(&path, [&one[..], &oversized].concat()).unwrap();
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.torn().len(), 1);
    assert_eq!(sink.torn()[0].line, 2);
    assert_eq!(sink.torn()[0].text.len(), JsonlSink::MAX_LINE);
    assert_eq!(std::fs::read(&path).unwrap(), one);
    assert_eq!(RUNTIME.block_on(sink.get("M-1")).unwrap(), Some(small));
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
