//! `JsonlSink`: the append-only dead-letter file, on real files in a temporary directory each:
//! what survives reopening (merged re-parks, resolutions with who and when, leases, audit rows),
//! compaction, torn and corrupt lines, group commit, a runtime that keeps running while the disk
//! is slow, a park that runs out of file size, and several sinks and processes on one file.
//! (A process killed mid-burst is in `dlq_kill.rs`; owner-only files, links and owners in
//! `file_permissions.rs`; bad input in `jsonl_props.rs`; full and read-only disks in
//! `fault_dlq_dir.rs`.)

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use retry_core::dlq::{
    AuditEntry, DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, Failure, FailureClass,
    JsonlSink, Page, RedriveRecord, Resolution, TornLine,
};
use tracing_subscriber::layer::SubscriberExt as _;

#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

const HOUR: Duration = Duration::from_secs(3600);

fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.to_owned(),
        original: serde_json::json!({ "amount": 10, "note": "line\nbreak" }),
        reason: "gave up after 5 attempts: 503 Service Unavailable".to_owned(),
        attempts: 5,
        first_failed_at: instant(first_failed_at),
        last_failed_at: instant(first_failed_at),
        trace_id: "a1b2c3d4".to_owned(),
        class: FailureClass::System,
        error_type: "FetchError".to_owned(),
        idempotency_key: Some(format!("key-{msg_id}")),
        source: Some("payments::deposit".to_owned()),
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

/// The pending letters, in the sink's order.
async fn pending(sink: &JsonlSink) -> Vec<DeadLetter> {
    sink.page(&Page::first(usize::MAX)).await.unwrap()
}

async fn pending_ids(sink: &JsonlSink) -> Vec<String> {
    pending(sink).await.into_iter().map(|l| l.msg_id).collect()
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Every WARN event of the process, as `field=value` text. One global subscriber, set before
/// any test logs: tracing caches per-callsite interest process-wide, so scoped subscribers in
/// parallel tests would miss events. Tests look for their own (unique) path in the text.
fn warnings() -> Arc<Mutex<Vec<String>>> {
    #[derive(Clone)]
    struct Warnings(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Fields(String);
            impl tracing::field::Visit for Fields {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    self.0.push_str(&format!("{}={:?} ", field.name(), value));
                }
            }
            if *event.metadata().level() == tracing::Level::WARN {
                let mut fields = Fields(String::new());
                event.record(&mut fields);
                self.0.lock().unwrap().push(fields.0);
            }
        }
    }

    static WARNINGS: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    WARNINGS
        .get_or_init(|| {
            let warnings = Warnings(Arc::default());
            let subscriber = tracing_subscriber::registry().with(warnings.clone());
            tracing::subscriber::set_global_default(subscriber).unwrap();
            warnings.0
        })
        .clone()
}

fn warnings_about(warnings: &Mutex<Vec<String>>, path: &Path) -> Vec<String> {
    let path = format!("path={} ", path.display());
    warnings
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.contains(&path))
        .cloned()
        .collect()
}

#[tokio::test]
async fn parked_letters_survive_reopening_in_order() {
    let dir = TempDir::new("round-trip");
    let path = dir.file("dlq.jsonl");
    // 02:00Z, 01:00Z (10:00 in Tokyo), 01:00Z again: ordered by time, then msg_id.
    let late = letter("M-3", "2026-08-19T02:00:00Z");
    let early_b = letter("M-2", "2026-08-19T10:00:00+09:00");
    let early_a = letter("M-1", "2026-08-19T01:00:00.000+00:00");

    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    for l in [&late, &early_b, &early_a] {
        sink.park(l).await.unwrap();
    }
    drop(sink);

    // Each parked line is the letter itself, field names as in DESIGN.md.
    let written = lines(&path);
    assert_eq!(written.len(), 3);
    for field in [
        "msg_id",
        "original",
        "reason",
        "attempts",
        "first_failed_at",
        "last_failed_at",
        "trace_id",
    ] {
        assert!(written[0].get(field).is_some(), "{field} in {}", written[0]);
    }
    assert_eq!(
        serde_json::from_value::<DeadLetter>(written[0].clone()).unwrap(),
        late
    );

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(pending_ids(&sink).await, ["M-1", "M-2", "M-3"]);
    let stats = sink.stats().await.unwrap();
    assert_eq!((stats.pending, stats.system, stats.resolved), (3, 3, 0));
    assert_eq!(stats.oldest_first_failed_at, Some(early_a.first_failed_at));
    assert_eq!(sink.get("M-2").await.unwrap(), Some(early_b));
    assert_eq!(sink.get("M-404").await.unwrap(), None);
}

#[tokio::test]
async fn a_repark_keeps_the_first_original_on_disk_across_reopening() {
    let dir = TempDir::new("repark");
    let path = dir.file("dlq.jsonl");
    let first = letter("M-1", "2026-08-19T01:00:00Z");
    let sink = JsonlSink::open(&path).unwrap();
    sink.park(&first).await.unwrap();
    drop(sink);

    let mut again = letter("M-1", "2026-08-19T05:00:00Z");
    again.original = serde_json::json!({ "amount": 999 });
    again.reason = "gave up after 3 attempts: timeout".into();
    again.attempts = 3;
    let sink = JsonlSink::open(&path).unwrap();
    sink.park(&again).await.unwrap();
    drop(sink);

    let mut expected = first.clone();
    expected.absorb(&again);
    let sink = JsonlSink::open(&path).unwrap();
    let stored = sink.get("M-1").await.unwrap().unwrap();
    assert_eq!(stored, expected);
    assert_eq!(stored.original, first.original, "the first original stays");
    assert_eq!(stored.first_failed_at, first.first_failed_at);
    assert_eq!(stored.attempts, 8);
    assert_eq!(stored.history[0].reason, first.reason);
    assert_eq!(sink.stats().await.unwrap().pending, 1);
    // On disk: the first line as parked, then the merged letter, never an overwrite.
    let written = lines(&path);
    assert_eq!(written.len(), 2);
    assert_eq!(written[1]["original"], first.original);
    assert_eq!(written[1]["attempts"], 8);
}

#[tokio::test]
async fn a_resolved_letter_survives_reopening_with_who_and_when() {
    let dir = TempDir::new("resolved");
    let path = dir.file("dlq.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    for id in ["M-1", "M-2"] {
        sink.park(&letter(id, "2026-08-19T01:00:00Z"))
            .await
            .unwrap();
    }
    let by_run = Resolution::new("alice", instant("2026-08-20T09:00:00.000+00:00")).in_run("run-7");
    assert!(sink.resolve("M-1", &by_run).await.unwrap());
    assert!(
        !sink.resolve("M-1", &by_run).await.unwrap(),
        "already resolved"
    );
    assert!(
        !sink.resolve("M-404", &by_run).await.unwrap(),
        "never parked"
    );
    drop(sink);

    let written = lines(&path);
    assert_eq!(written.len(), 3, "one ack line, nothing for the refusals");
    assert_eq!(
        written[2],
        serde_json::json!({"ack": "M-1", "at": "2026-08-20T09:00:00.000+00:00", "by": "alice", "run_id": "run-7"})
    );

    // An ack line of an older version (no `by`) reads as resolved by "".
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"ack\":\"M-2\",\"at\":\"2026-08-20T10:00:00.000+00:00\"}\n");
    std::fs::write(&path, text).unwrap();

    let sink = JsonlSink::open(&path).unwrap();
    let kept = sink
        .get("M-1")
        .await
        .unwrap()
        .expect("a resolved letter is kept");
    assert_eq!(kept.resolved, Some(by_run));
    assert_eq!(
        sink.get("M-2").await.unwrap().unwrap().resolved,
        Some(Resolution::new(
            "",
            instant("2026-08-20T10:00:00.000+00:00")
        ))
    );
    let stats = sink.stats().await.unwrap();
    assert_eq!((stats.pending, stats.resolved), (0, 2));
    assert_eq!(stats.oldest_first_failed_at, None);
    assert!(pending(&sink).await.is_empty());
}

#[tokio::test]
async fn leases_audit_rows_and_put_backs_survive_reopening() {
    let dir = TempDir::new("leases");
    let path = dir.file("dlq.jsonl");
    let parked = letter("M-1", "2026-08-19T01:00:00Z");
    let intent = AuditEntry::intent(
        "run-a",
        "M-1",
        "alice",
        "deposit",
        instant("2026-08-20T09:00:00Z"),
    );
    let sink = JsonlSink::open(&path).unwrap();
    sink.park(&parked).await.unwrap();
    assert_eq!(
        sink.lease("M-1", "run-a", HOUR).await.unwrap(),
        Some(parked.clone())
    );
    sink.audit(&intent).await.unwrap();
    drop(sink);

    // The lease is in the file: another run still cannot take the letter after a restart.
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.lease("M-1", "run-b", HOUR).await.unwrap(), None);
    assert_eq!(sink.stats().await.unwrap().leased, 1);
    assert_eq!(
        sink.audit_rows(None).await.unwrap(),
        std::slice::from_ref(&intent)
    );

    let failure = Failure {
        at: instant("2026-08-20T09:00:01Z"),
        reason: "redrive by alice failed: 503".into(),
        trace_id: "run-a".into(),
    };
    assert!(sink.put_back("M-1", "run-a", &failure).await.unwrap());
    let done = intent.finished("failed again: 503", instant("2026-08-20T09:00:01Z"));
    sink.audit(&done).await.unwrap();
    drop(sink);

    let mut expected = parked;
    expected.failed_again(1, failure);
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.get("M-1").await.unwrap(), Some(expected.clone()));
    assert_eq!(
        sink.audit_rows(Some("run-a")).await.unwrap(),
        [done],
        "the outcome replaced the intent"
    );
    assert_eq!(
        sink.stats().await.unwrap().leased,
        0,
        "put back: lease ended"
    );
    assert_eq!(
        sink.lease("M-1", "run-b", HOUR).await.unwrap(),
        Some(expected)
    );
    assert!(sink.release("M-1", "run-b").await.unwrap());
    drop(sink);
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.lease("M-1", "run-c", HOUR).await.unwrap().is_some());
}

/// Everything `purge_resolved` keeps, as the sink shows it.
#[derive(Debug, PartialEq)]
struct Shown {
    letters: Vec<Option<DeadLetter>>,
    pending: Vec<String>,
    stats: retry_core::dlq::Stats,
    audit: Vec<AuditEntry>,
    redrives: Vec<RedriveRecord>,
}

async fn shown(sink: &JsonlSink, ids: &[&str]) -> Shown {
    let mut letters = Vec::new();
    for id in ids {
        letters.push(sink.get(id).await.unwrap());
    }
    Shown {
        letters,
        pending: pending_ids(sink).await,
        stats: sink.stats().await.unwrap(),
        audit: sink.audit_rows(None).await.unwrap(),
        redrives: sink.redrives().await.unwrap(),
    }
}

fn record(run_id: &str) -> RedriveRecord {
    serde_json::from_value(serde_json::json!({
        "run_id": run_id, "who": "alice", "filter": "all", "target": "deposit",
        "started_at": "2026-08-20T09:00:00.000+00:00", "finished_at": "2026-08-20T09:00:02.000+00:00",
        "limit": 10, "rate_per_second": 5, "selected": 1, "succeeded": 1, "failed": 0, "skipped": 0,
    }))
    .unwrap()
}

#[tokio::test]
async fn compaction_keeps_every_live_letter_lease_and_audit_row() {
    let dir = TempDir::new("compaction");
    let path = dir.file("dlq.jsonl");
    let now = SystemTime::now();
    let long_ago = now - Duration::from_secs(30 * 86_400);
    let sink = JsonlSink::open(&path).unwrap();
    let ids = ["M-1", "M-2", "M-3", "M-4", "M-5"];
    for (i, id) in ids.iter().enumerate() {
        sink.park(&letter(id, &format!("2026-08-19T0{i}:00:00Z")))
            .await
            .unwrap();
    }
    // History to compact away: a re-park, resolutions, a lease that ended and one that did not.
    let mut again = letter("M-3", "2026-08-19T09:00:00Z");
    again.original = serde_json::json!("second");
    sink.park(&again).await.unwrap();
    sink.resolve("M-1", &Resolution::new("alice", long_ago))
        .await
        .unwrap();
    sink.resolve("M-2", &Resolution::new("bob", now))
        .await
        .unwrap();
    sink.lease("M-4", "run-a", HOUR).await.unwrap().unwrap();
    sink.lease("M-5", "run-b", HOUR).await.unwrap().unwrap();
    assert!(sink.release("M-5", "run-b").await.unwrap());
    let intent = AuditEntry::intent(
        "run-a",
        "M-4",
        "alice",
        "deposit",
        instant("2026-08-20T09:00:00Z"),
    );
    sink.audit(&intent).await.unwrap();
    sink.audit(
        &intent
            .clone()
            .finished("redriven", instant("2026-08-20T09:00:01Z")),
    )
    .await
    .unwrap();
    sink.audit(&AuditEntry::intent(
        "run-a",
        "M-1",
        "alice",
        "deposit",
        instant("2026-08-20T09:00:00Z"),
    ))
    .await
    .unwrap();
    sink.record_redrive(&record("run-a")).await.unwrap();
    let lines_before = lines(&path).len();
    let before = shown(&sink, &ids).await;

    let cut = now - Duration::from_secs(7 * 86_400);
    assert_eq!(sink.purge_resolved(cut).await.unwrap(), 1, "only M-1");
    let mut expected = before;
    expected.letters[0] = None;
    expected.stats.resolved = 1;
    assert_eq!(shown(&sink, &ids).await, expected, "the open sink");

    // The file holds the live state only: four letters, one lease, two audit rows, one record.
    let written = lines(&path);
    assert!(written.len() < lines_before, "{written:?}");
    assert_eq!(written.len(), 4 + 1 + 2 + 1, "{written:#?}");
    assert!(!beside(&path, ".compact").exists());
    drop(sink);

    // Reopened, it shows the same; M-4 is still leased to run-a.
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(shown(&sink, &ids).await, expected, "reopened");
    assert_eq!(sink.lease("M-4", "run-b", HOUR).await.unwrap(), None);
    assert_eq!(
        sink.get("M-3").await.unwrap().unwrap().original,
        letter("M-3", "2026-08-19T00:00:00Z").original,
        "the first original, after the merge"
    );

    // Nothing old enough: nothing purged, nothing rewritten.
    let text = std::fs::read(&path).unwrap();
    assert_eq!(sink.purge_resolved(cut).await.unwrap(), 0);
    assert_eq!(std::fs::read(&path).unwrap(), text);
}

#[tokio::test]
async fn open_compacts_a_file_of_mostly_dead_history() {
    let dir = TempDir::new("compaction-at-open");
    let path = dir.file("dlq.jsonl");
    let mut kept = letter("M-kept", "2026-08-19T02:00:00Z");
    kept.original = serde_json::json!({ "pad": "k".repeat(10_000) });
    // 200 superseded states of one letter, ~10 kB each: 2 MB of dead history, ~20 kB live.
    let mut text = String::new();
    for attempts in 1..=200 {
        let mut l = letter("M-busy", "2026-08-19T01:00:00Z");
        l.original = serde_json::json!({ "pad": "x".repeat(10_000) });
        l.attempts = attempts;
        text.push_str(&serde_json::to_string(&l).unwrap());
        text.push('\n');
    }
    text.push_str(&serde_json::to_string(&kept).unwrap());
    text.push('\n');
    std::fs::write(&path, &text).unwrap();

    let sink = JsonlSink::open(&path).unwrap();
    let written = lines(&path);
    assert_eq!(written.len(), 2, "one line per letter");
    assert!(std::fs::metadata(&path).unwrap().len() < 25_000);
    assert_eq!(sink.get("M-busy").await.unwrap().unwrap().attempts, 200);
    assert_eq!(sink.get("M-kept").await.unwrap(), Some(kept.clone()));
    drop(sink);

    // Below the threshold (1 MiB of dead history): left as it is.
    let mut text = String::new();
    for attempts in 1..=50 {
        let mut l = letter("M-busy", "2026-08-19T01:00:00Z");
        l.original = serde_json::json!({ "pad": "x".repeat(10_000) });
        l.attempts = attempts;
        text.push_str(&serde_json::to_string(&l).unwrap());
        text.push('\n');
    }
    std::fs::write(&path, &text).unwrap();
    drop(JsonlSink::open(&path).unwrap());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[cfg(unix)]
#[test]
fn a_wider_file_is_narrowed_to_owner_only_with_a_warning() {
    use std::os::unix::fs::PermissionsExt as _;

    let warnings = warnings();
    let dir = TempDir::new("mode");
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;

    let path = dir.file("dlq.jsonl");
    drop(JsonlSink::open(&path).unwrap());
    assert_eq!(mode(&path), 0o600);
    assert!(warnings_about(&warnings, &path).is_empty());

    let shared = dir.file("shared.jsonl");
    std::fs::write(&shared, "").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(JsonlSink::open(&shared).unwrap());
    assert_eq!(mode(&shared), 0o600, "narrowed");
    let warned = warnings_about(&warnings, &shared);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("mode=644"), "{warned:?}");

    // A reader changes nothing.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    drop(JsonlSink::open_read_only(&shared).unwrap());
    assert_eq!(mode(&shared), 0o640);
}

#[tokio::test]
async fn a_torn_last_line_is_reported_kept_aside_and_cut_off() {
    let warnings = warnings();
    let dir = TempDir::new("torn");
    let path = dir.file("dlq.jsonl");
    let one = serde_json::to_string(&letter("M-1", "2026-08-19T01:00:00Z")).unwrap();
    let two = serde_json::to_string(&letter("M-2", "2026-08-19T02:00:00Z")).unwrap();
    let three = serde_json::to_string(&letter("M-3", "2026-08-19T03:00:00Z")).unwrap();
    let half = &three[..three.len() / 2];
    std::fs::write(&path, format!("{one}\n{two}\n{half}")).unwrap();

    // A reader reports it and leaves it.
    let reader = JsonlSink::open_read_only(&path).unwrap();
    assert_eq!(
        reader.torn(),
        [TornLine {
            line: 3,
            text: half.to_owned()
        }]
    );
    assert_eq!(pending_ids(&reader).await, ["M-1", "M-2"]);
    assert!(!beside(&path, ".torn").exists());

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(
        sink.torn(),
        [TornLine {
            line: 3,
            text: half.to_owned()
        }]
    );
    let warned: Vec<_> = warnings_about(&warnings, &path)
        .into_iter()
        .filter(|w| w.contains("torn line"))
        .collect();
    assert_eq!(warned.len(), 2, "the reader's and the writer's: {warned:?}");
    assert!(warned.iter().all(|w| w.contains("line=3")), "{warned:?}");
    assert!(
        warned.iter().all(|w| !w.contains("M-3")),
        "no payload in the log"
    );

    // Kept aside, with its line number.
    let kept = std::fs::read_to_string(beside(&path, ".torn")).unwrap();
    assert_eq!(kept.lines().count(), 1, "{kept}");
    let kept: serde_json::Value = serde_json::from_str(kept.trim_end()).unwrap();
    assert_eq!(kept["line"], 3);
    assert_eq!(kept["text"], half);
    // Cut off the file: exactly the two complete lines remain.
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{one}\n{two}\n")
    );
    assert_eq!(pending_ids(&sink).await, ["M-1", "M-2"]);

    // Appends continue cleanly, and the reader catches up.
    sink.park(&letter("M-4", "2026-08-19T04:00:00Z"))
        .await
        .unwrap();
    assert_eq!(pending_ids(&reader).await, ["M-1", "M-2", "M-4"]);
    drop((sink, reader));
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    assert_eq!(pending_ids(&sink).await, ["M-1", "M-2", "M-4"]);
    drop(sink);

    // A last line that has its newline but is not JSON (a power loss can leave zeros) is not
    // torn but unreadable: quarantined, and the `.torn` file keeps what it had.
    let mut text = std::fs::read(&path).unwrap();
    text.extend_from_slice(b"\0\0\0\0\n");
    std::fs::write(&path, &text).unwrap();
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    assert_eq!(sink.quarantined().len(), 1);
    assert_eq!(
        (
            sink.quarantined()[0].line,
            sink.quarantined()[0].text.as_str()
        ),
        (4, "\0\0\0\0")
    );
    assert_eq!(sink.stats().await.unwrap().pending, 3);
    let kept = std::fs::read_to_string(beside(&path, ".torn")).unwrap();
    assert_eq!(kept.lines().count(), 1, "{kept}");
    let kept = std::fs::read_to_string(beside(&path, ".quarantine")).unwrap();
    assert!(kept.contains("\"line\":4"), "{kept}");
}

/// One unreadable line, wherever it is and whatever is wrong with it, never makes the file
/// unreadable: a reader skips and reports it, a writer moves it to `<path>.quarantine` (with
/// why) and takes it out of the file, leaving every other line byte for byte.
#[tokio::test]
async fn an_unreadable_line_anywhere_is_quarantined_and_the_rest_reads() {
    let warnings = warnings();
    let dir = TempDir::new("quarantine");
    let path = dir.file("dlq.jsonl");
    let one = serde_json::to_string(&letter("M-1", "2026-08-19T01:00:00Z")).unwrap();
    let two = serde_json::to_string(&letter("M-2", "2026-08-19T02:00:00Z")).unwrap();
    // A letter nested past serde_json's limit of 128, as an older version could park it.
    let deep = format!(
        "{{\"msg_id\":\"M-deep\",\"original\":{}1{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );

    let cases = [
        // (the file, the unreadable line's number and text, what its reason mentions)
        (
            format!("{one}\n{deep}\n{two}\n"),
            2,
            deep.as_str(),
            "recursion limit",
        ),
        (
            format!("{one}\n\n%%garbage%%\n{two}\n"),
            3,
            "%%garbage%%",
            "expected",
        ),
        (
            format!("{one}\n{{\"msg_id\": \"M-x\", oops\n{two}\n"),
            2,
            "{\"msg_id\": \"M-x\", oops",
            "column",
        ),
        (
            format!("{one}\n{{\"msg_id\":\"M-x\"}}\n{two}\n"),
            2,
            "{\"msg_id\":\"M-x\"}",
            "missing field",
        ),
        (
            format!("{one}\n{two}\n{{\"ack\":7}}\n"),
            3,
            "{\"ack\":7}",
            "invalid type",
        ),
        (
            format!("{one}\n{{\"lease\":\"M-1\",\"run_id\":\"r\",\"until\":\"soon\"}}\n{two}\n"),
            2,
            "{\"lease\":\"M-1\",\"run_id\":\"r\",\"until\":\"soon\"}",
            "RFC 3339",
        ),
        (
            format!("{{\"audit\":{{}}}}\n{one}\n{two}\n"),
            1,
            "{\"audit\":{}}",
            "missing field",
        ),
    ];
    for (text, line, bad, why) in cases {
        std::fs::write(&path, &text).unwrap();
        let _ = std::fs::remove_file(beside(&path, ".quarantine"));

        let reader = JsonlSink::open_read_only(&path).unwrap();
        assert_eq!(reader.quarantined().len(), 1, "{text}");
        assert_eq!(
            (
                reader.quarantined()[0].line,
                reader.quarantined()[0].text.as_str()
            ),
            (line, bad)
        );
        assert_eq!(pending_ids(&reader).await, ["M-1", "M-2"]);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "a reader changes nothing"
        );
        assert!(!beside(&path, ".quarantine").exists());

        let sink = JsonlSink::open(&path).unwrap();
        let found = &sink.quarantined()[0];
        assert_eq!((found.line, found.text.as_str()), (line, bad));
        assert!(found.why.contains(why), "{}", found.why);
        assert_eq!(
            pending_ids(&sink).await,
            ["M-1", "M-2"],
            "every other letter is kept"
        );
        let without = text.replacen(&format!("{bad}\n"), "", 1);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            without,
            "only that line is gone"
        );
        let kept = std::fs::read_to_string(beside(&path, ".quarantine")).unwrap();
        let kept: serde_json::Value = serde_json::from_str(kept.trim_end()).unwrap();
        assert_eq!(
            (kept["line"].as_u64(), kept["text"].as_str()),
            (Some(line as u64), Some(bad))
        );
        assert!(kept["why"].as_str().unwrap().contains(why), "{kept}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(beside(&path, ".quarantine"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        // The file works: appends land, the reader follows the rewritten file, a reopen finds
        // nothing more to move.
        sink.park(&letter("M-3", "2026-08-19T03:00:00Z"))
            .await
            .unwrap();
        assert_eq!(pending_ids(&reader).await, ["M-1", "M-2", "M-3"]);
        drop((sink, reader));
        let sink = JsonlSink::open(&path).unwrap();
        assert!(sink.quarantined().is_empty());
        assert_eq!(pending_ids(&sink).await, ["M-1", "M-2", "M-3"]);
    }
    let warned: Vec<_> = warnings_about(&warnings, &path)
        .into_iter()
        .filter(|w| w.contains("unreadable line"))
        .collect();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("line=2") && w.contains("kept_in=")),
        "{warned:?}"
    );

    // Blank lines are not unreadable.
    std::fs::write(&path, format!("{one}\n\n  \n{two}\n")).unwrap();
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.stats().await.unwrap().pending, 2);
}

#[test]
fn paths_that_cannot_be_written_fail_with_io_naming_the_path() {
    let dir = TempDir::new("unwritable");

    // A directory where the file should be: root cannot write that either.
    let in_place = dir.file("dlq.jsonl");
    std::fs::create_dir(&in_place).unwrap();
    let error = JsonlSink::open(&in_place).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains(&in_place.display().to_string()),
        "{error}"
    );

    // A regular file where its directory should be.
    let file = dir.file("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let below = file.join("dlq.jsonl");
    let error = JsonlSink::open(&below).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains(&below.display().to_string()),
        "{error}"
    );
    // The source is the io::Error, its kind kept.
    #[cfg(unix)]
    let DlqError::Io(source) = error else {
        unreachable!()
    };
    #[cfg(unix)]
    assert_eq!(
        source.downcast_ref::<std::io::Error>().unwrap().kind(),
        std::io::ErrorKind::NotADirectory
    );

    // A reader needs the file to be there.
    let error = JsonlSink::open_read_only(dir.file("missing.jsonl")).unwrap_err();
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains("missing.jsonl"),
        "{error}"
    );
}

#[tokio::test]
async fn sinks_on_one_file_see_each_other_and_follow_a_compaction() {
    let dir = TempDir::new("shared");
    let path = dir.file("dlq.jsonl");
    let service = JsonlSink::open(&path).unwrap();
    let operator = JsonlSink::open(&path).unwrap();
    let monitor = JsonlSink::open_read_only(&path).unwrap();

    service
        .park(&letter("M-1", "2026-08-19T01:00:00Z"))
        .await
        .unwrap();
    service
        .park(&letter("M-2", "2026-08-19T02:00:00Z"))
        .await
        .unwrap();
    assert_eq!(pending_ids(&operator).await, ["M-1", "M-2"]);
    assert_eq!(monitor.stats().await.unwrap().pending, 2);

    // A lease taken by one is seen by the other, decided under the lock.
    assert!(
        operator
            .lease("M-1", "run-a", HOUR)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(service.lease("M-1", "run-b", HOUR).await.unwrap(), None);
    // A re-park by one merges into what the other wrote.
    service
        .park(&letter("M-1", "2026-08-19T03:00:00Z"))
        .await
        .unwrap();
    assert_eq!(operator.get("M-1").await.unwrap().unwrap().attempts, 10);

    // The operator resolves and purges: the file is renamed over. The others notice.
    let at = SystemTime::now() - Duration::from_secs(60);
    assert!(
        operator
            .resolve("M-2", &Resolution::new("alice", at))
            .await
            .unwrap()
    );
    assert_eq!(operator.purge_resolved(SystemTime::now()).await.unwrap(), 1);
    assert_eq!(service.get("M-2").await.unwrap(), None);
    service
        .park(&letter("M-3", "2026-08-19T04:00:00Z"))
        .await
        .unwrap();
    assert_eq!(pending_ids(&operator).await, ["M-1", "M-3"]);
    assert_eq!(pending_ids(&monitor).await, ["M-1", "M-3"]);
    assert_eq!(monitor.stats().await.unwrap().leased, 1);
    drop((service, operator, monitor));

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(pending_ids(&sink).await, ["M-1", "M-3"]);
    assert_eq!(sink.get("M-1").await.unwrap().unwrap().attempts, 10);
    assert_eq!(sink.lease("M-1", "run-b", HOUR).await.unwrap(), None);
}

/// Set in a child process: `<path>`, the file it shares with the parent.
const SHARE_CHILD: &str = "RETRY_CORE_DLQ_JSONL_SHARE_CHILD";

/// Letters parked by each process, and letters both race to lease.
const OWN: usize = 200;
const CONTESTED: usize = 100;

fn contested(i: usize) -> String {
    format!("C-{i:03}")
}

/// Parks its own letters and tries to lease every contested one, interleaved; the ids of the
/// leases it won.
async fn share(sink: Arc<JsonlSink>, side: &str) -> Vec<String> {
    let parks = {
        let sink = Arc::clone(&sink);
        let side = side.to_owned();
        tokio::spawn(async move {
            let tasks: Vec<_> = (0..OWN)
                .map(|i| {
                    let sink = Arc::clone(&sink);
                    let id = format!("{side}-{i:03}");
                    tokio::spawn(async move {
                        sink.park(&letter(&id, "2026-08-19T01:00:00Z"))
                            .await
                            .unwrap()
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        })
    };
    let leases: Vec<_> = (0..CONTESTED)
        .map(|i| {
            let sink = Arc::clone(&sink);
            let run = format!("run-{side}");
            tokio::spawn(async move {
                let id = contested(i);
                sink.lease(&id, &run, HOUR).await.unwrap().map(|_| id)
            })
        })
        .collect();
    let mut won = Vec::new();
    for lease in leases {
        won.extend(lease.await.unwrap());
    }
    parks.await.unwrap();
    won
}

/// Two processes on one file at once, each with its own sink: every letter of both is kept as
/// a whole line, and each contested letter's lease went to exactly one of them.
#[test]
fn two_processes_share_one_file() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(path) = std::env::var(SHARE_CHILD) {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        println!("READY");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
        for id in runtime.block_on(share(sink, "child")) {
            println!("WON {id}");
        }
        println!("DONE");
        return;
    }

    let dir = TempDir::new("two-processes");
    let path = dir.file("dlq.jsonl");
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    runtime.block_on(async {
        for i in 0..CONTESTED {
            sink.park(&letter(&contested(i), "2026-08-19T00:00:00Z"))
                .await
                .unwrap();
        }
    });
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "two_processes_share_one_file", "--nocapture"])
        .env(SHARE_CHILD, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim_end() != "READY" {
        line.clear();
        assert_ne!(out.read_line(&mut line).unwrap(), 0, "the child stopped");
    }
    // Both start at once.
    writeln!(child.stdin.take().unwrap(), "GO").unwrap();
    let parent_won = runtime.block_on(share(Arc::clone(&sink), "parent"));
    let mut child_won = Vec::new();
    let mut done = false;
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(id) = line.strip_prefix("WON ") {
            child_won.push(id.to_owned());
        }
        done |= line == "DONE";
    }
    assert!(child.wait().unwrap().success() && done, "the child failed");

    let mut all: Vec<String> = parent_won.iter().chain(&child_won).cloned().collect();
    all.sort();
    assert_eq!(
        all,
        (0..CONTESTED).map(contested).collect::<Vec<_>>(),
        "each contested letter leased exactly once (parent {}, child {})",
        parent_won.len(),
        child_won.len()
    );
    runtime.block_on(async {
        let stats = sink.stats().await.unwrap();
        assert_eq!(stats.pending as usize, 2 * OWN + CONTESTED);
        assert_eq!(stats.leased as usize, CONTESTED);
    });
    drop(sink);
    let reopened = JsonlSink::open(&path).unwrap();
    assert!(reopened.torn().is_empty());
    let written = lines(&path);
    assert_eq!(
        written.len(),
        CONTESTED + 2 * OWN + CONTESTED,
        "whole lines"
    );
}

/// While the file's lock is held elsewhere (another process in the middle of a slow fsync),
/// a park waits, but the runtime does not: on a single-threaded runtime a timer still fires
/// and another task still runs. The park given up on still parks once the lock is free.
#[test]
fn a_park_waiting_for_the_disk_does_not_block_the_runtime() {
    let dir = TempDir::new("not-blocking");
    let path = dir.file("dlq.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    let held = std::fs::File::open(&path).unwrap();
    held.lock().unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let ticker = tokio::spawn({
            let ticks = Arc::clone(&ticks);
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        let l = letter("M-1", "2026-08-19T01:00:00Z");
        let waited = tokio::time::timeout(Duration::from_millis(300), sink.park(&l)).await;
        assert!(waited.is_err(), "parked through a held lock: {waited:?}");
        assert!(
            ticks.load(std::sync::atomic::Ordering::Relaxed) >= 5,
            "the runtime was blocked"
        );
        ticker.abort();
    });
    held.unlock().unwrap();
    // Queued before the future was dropped: it runs to its end.
    let parked = runtime.block_on(sink.get("M-1")).unwrap();
    assert_eq!(parked.map(|l| l.msg_id).as_deref(), Some("M-1"));
}

#[test]
fn a_park_dropped_before_its_first_poll_writes_nothing() {
    let dir = TempDir::new("cancel");
    let path = dir.file("dlq.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    drop(sink.park(&letter("M-1", "2026-08-19T01:00:00Z")));
    drop(sink);
    assert_eq!(std::fs::read(&path).unwrap(), b"");
}

#[test]
fn concurrent_parks_are_whole_lines_sharing_fsyncs() {
    let dir = TempDir::new("concurrent");
    let path = dir.file("dlq.jsonl");
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let sink = Arc::clone(&sink);
                tokio::spawn(async move {
                    for i in 0..20 {
                        let mut l = letter(&format!("M-{task}-{i:02}"), "2026-08-19T01:00:00Z");
                        l.original = serde_json::json!({ "pad": "x".repeat(5000 * (i % 3)) });
                        sink.park(&l).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    assert_eq!(runtime.block_on(sink.stats()).unwrap().pending, 160);
    let commits = sink.group_commits();
    assert!(
        commits < 160,
        "8 tasks parking at once share fsyncs: {commits} commits"
    );
    drop(sink);
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    let list = runtime.block_on(pending(&sink));
    assert_eq!(list.len(), 160);
    assert!(
        list.windows(2).all(|w| w[0].msg_id < w[1].msg_id),
        "same time: by msg_id"
    );
}

/// Set in a child process: the path of the file it parks into, under a small file size limit.
const FSIZE_CHILD: &str = "RETRY_CORE_DLQ_JSONL_FSIZE_CHILD";

/// A park that cannot write returns `DlqError::Io` and leaves no half line in the file; so does
/// every park of a group that cannot be written. Root ignores permission bits, so the failure
/// is a file size limit (`ulimit -f`, which binds root too, with SIGXFSZ ignored so the write
/// fails with EFBIG instead of killing the child): the first write over the limit is short, the
/// next one fails, and the sink cuts the partial group back off.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_park_that_cannot_write_fails_with_io_and_leaves_no_partial_line() {
    if let Ok(path) = std::env::var(FSIZE_CHILD) {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        let big = |i: u32| {
            let mut l = letter(&format!("M-{i:03}"), "2026-08-19T01:00:00Z");
            l.original = serde_json::json!({ "pad": "x".repeat(700) });
            l
        };
        for i in 0..100u32 {
            let l = big(i);
            match sink.park(&l).await {
                Ok(()) => println!("PARKED {}", l.msg_id),
                Err(e) => {
                    assert!(matches!(e, DlqError::Io(_)), "{e:?}");
                    println!("FAILED {}", retry_core::error_chain(&e));
                    // Still failing, still clean: a group of ten fails whole.
                    let group: Vec<_> = (1000..1010)
                        .map(|i| {
                            let (sink, l) = (Arc::clone(&sink), big(i));
                            tokio::spawn(async move { sink.park(&l).await })
                        })
                        .collect();
                    for park in group {
                        let result = park.await.unwrap();
                        assert!(matches!(result, Err(DlqError::Io(_))), "{result:?}");
                    }
                    assert!(sink.get(&l.msg_id).await.unwrap().is_none());
                    assert!(sink.get("M-1000").await.unwrap().is_none());
                    return;
                }
            }
        }
        panic!("the file size limit never stopped a park");
    }

    let dir = TempDir::new("fsize");
    let path = dir.file("dlq.jsonl");
    let output = Command::new("sh")
        .args([
            "-c",
            // 8 blocks: 4 KiB in dash's 512-byte blocks, 8 KiB in bash's 1 KiB ones.
            "trap '' XFSZ; ulimit -f 8 && exec \"$0\" \"$@\"",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_park_that_cannot_write_fails_with_io_and_leaves_no_partial_line",
            "--nocapture",
        ])
        .env(FSIZE_CHILD, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parked: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("PARKED "))
        .collect();
    let failed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("FAILED "))
        .collect();
    assert!(!parked.is_empty(), "{stdout}");
    assert_eq!(failed.len(), 1, "{stdout}");
    assert!(
        failed[0].contains(&format!(
            "cannot append to dead-letter file {}",
            path.display()
        )),
        "{}",
        failed[0]
    );
    assert!(failed[0].contains("File too large"), "{}", failed[0]);

    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'), "no partial line left: {text:?}");
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    assert_eq!(pending_ids(&sink).await, parked);
}

/// A lock held far longer than any group commit holds it (here by the test; in life by a stuck
/// process, or an older `JsonlSink` that held it while open) fails `open` and parks with an
/// error naming the lock, after a bounded wait, instead of hanging.
#[tokio::test]
async fn a_lock_held_for_seconds_fails_open_and_parks_instead_of_hanging() {
    let dir = TempDir::new("lock-held");
    let path = dir.file("dlq.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    let held = std::fs::File::open(&path).unwrap();
    held.lock().unwrap();
    let started = std::time::Instant::now();
    let l = letter("M-1", "2026-08-19T01:00:00Z");
    let opening = tokio::task::spawn_blocking({
        let path = path.clone();
        move || JsonlSink::open(path).map(drop)
    });
    let (opened, parked) = tokio::join!(opening, sink.park(&l));
    let waited = started.elapsed();
    for error in [opened.unwrap().unwrap_err(), parked.unwrap_err()] {
        assert!(matches!(error, DlqError::Io(_)), "{error:?}");
        let message = retry_core::error_chain(&error).to_string();
        assert!(
            message.contains("cannot lock dead-letter file") && message.contains("held"),
            "{message}"
        );
    }
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    // Free again: the sink goes on.
    held.unlock().unwrap();
    sink.park(&l).await.unwrap();
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
