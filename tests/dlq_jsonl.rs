//! `JsonlSink`: the append-only dead-letter file, on real files in a temporary directory each,
//! including a child process killed mid-stream and one that runs out of file size.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DlqError, FailureClass, JsonlSink, LegacyStore, TornLine,
};
use tracing_subscriber::layer::SubscriberExt as _;

#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

fn torn_path(path: &Path) -> PathBuf {
    let mut torn = path.as_os_str().to_owned();
    torn.push(".torn");
    PathBuf::from(torn)
}

fn letter(msg_id: &str, first_failed_at: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.to_owned(),
        original: serde_json::json!({ "amount": 10, "note": "line\nbreak" }),
        reason: "gave up after 5 attempts: 503 Service Unavailable".to_owned(),
        attempts: 5,
        first_failed_at: first_failed_at.to_owned(),
        last_failed_at: first_failed_at.to_owned(),
        trace_id: "a1b2c3d4".to_owned(),
        class: FailureClass::System,
        error_type: "FetchError".to_owned(),
        idempotency_key: Some(format!("key-{msg_id}")),
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

fn ids(letters: &[DeadLetter]) -> Vec<&str> {
    letters.iter().map(|l| l.msg_id.as_str()).collect()
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
async fn round_trip_ack_and_put_back_survive_reopening() {
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
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    for field in [
        "msg_id",
        "original",
        "reason",
        "attempts",
        "first_failed_at",
        "last_failed_at",
        "trace_id",
    ] {
        assert!(first.get(field).is_some(), "{field} in {first}");
    }
    assert_eq!(serde_json::from_value::<DeadLetter>(first).unwrap(), late);

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(ids(&sink.list().await.unwrap()), ["M-1", "M-2", "M-3"]);
    assert_eq!(sink.count().await.unwrap(), 3);
    assert_eq!(sink.oldest().await.unwrap(), Some(early_a.clone()));
    assert_eq!(sink.get("M-2").await.unwrap(), Some(early_b.clone()));
    assert_eq!(sink.get("M-404").await.unwrap(), None);

    assert!(sink.ack("M-1").await.unwrap());
    assert!(!sink.ack("M-1").await.unwrap(), "already acked");
    assert!(!sink.ack("M-404").await.unwrap(), "never parked");
    drop(sink);

    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.lines().count(),
        4,
        "one ack line, nothing for the refused acks"
    );
    let ack: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(ack["ack"], "M-1");
    let at = ack["at"].as_str().unwrap();
    assert!(retry_core::time::parse_rfc3339(at).is_some(), "{at}");
    assert_eq!(ack.as_object().unwrap().len(), 2, "{ack}");

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(
        ids(&sink.list().await.unwrap()),
        ["M-2", "M-3"],
        "M-1 stays acked"
    );
    assert_eq!(sink.count().await.unwrap(), 2);
    assert_eq!(sink.get("M-1").await.unwrap(), None);
    assert_eq!(sink.oldest().await.unwrap(), Some(early_b.clone()));

    // A redrive of M-2 failed again. Even a letter claiming a later first failure keeps the
    // pending one's.
    let mut again = early_b.clone();
    again.attempts += 1;
    again.last_failed_at = "2026-08-20T08:00:00.000+00:00".to_owned();
    again.reason = "redrive: 503 Service Unavailable".to_owned();
    again.first_failed_at = "2026-08-20T08:00:00.000+00:00".to_owned();
    sink.put_back(&again).await.unwrap();
    let expected = DeadLetter {
        first_failed_at: early_b.first_failed_at.clone(),
        ..again.clone()
    };
    assert_eq!(sink.get("M-2").await.unwrap(), Some(expected.clone()));
    assert_eq!(sink.count().await.unwrap(), 2, "replaced, not added");

    // Putting back a letter that is not pending parks it: a failure is never dropped.
    let revived = letter("M-1", "2026-08-19T01:00:00.000+00:00");
    sink.put_back(&revived).await.unwrap();
    drop(sink);

    let sink = JsonlSink::open(&path).unwrap();
    let list = sink.list().await.unwrap();
    assert_eq!(ids(&list), ["M-1", "M-2", "M-3"]);
    assert_eq!(list[1], expected);
    assert_eq!(list[1].attempts, 6);
    assert_eq!(list[1].last_failed_at, "2026-08-20T08:00:00.000+00:00");
    assert_eq!(list[1].first_failed_at, "2026-08-19T10:00:00+09:00");
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 6);
}

#[cfg(unix)]
#[test]
fn created_files_are_owner_only_and_wider_ones_are_left_with_a_warning() {
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
    assert_eq!(mode(&shared), 0o644, "left as it was");
    let warned = warnings_about(&warnings, &shared);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("mode=644"), "{warned:?}");

    // The `.torn` file is owner-only too.
    let torn = dir.file("torn.jsonl");
    std::fs::write(&torn, "{\"msg_").unwrap();
    drop(JsonlSink::open(&torn).unwrap());
    assert_eq!(mode(&torn_path(&torn)), 0o600);
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

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(
        sink.torn(),
        [TornLine {
            line: 3,
            text: half.to_owned()
        }]
    );
    // (Written by hand with mode 644, the file also gets a warning about that.)
    let warned: Vec<_> = warnings_about(&warnings, &path)
        .into_iter()
        .filter(|w| w.contains("torn line"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("line=3"), "{warned:?}");

    // Kept aside, with its line number.
    let kept = std::fs::read_to_string(torn_path(&path)).unwrap();
    assert_eq!(kept.lines().count(), 1, "{kept}");
    let kept: serde_json::Value = serde_json::from_str(kept.trim_end()).unwrap();
    assert_eq!(kept["line"], 3);
    assert_eq!(kept["text"], half);
    // Cut off the file: exactly the two complete lines remain.
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{one}\n{two}\n")
    );
    assert_eq!(ids(&sink.list().await.unwrap()), ["M-1", "M-2"]);

    // Appends continue cleanly.
    sink.park(&letter("M-4", "2026-08-19T04:00:00Z"))
        .await
        .unwrap();
    drop(sink);
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    assert_eq!(ids(&sink.list().await.unwrap()), ["M-1", "M-2", "M-4"]);
    drop(sink);

    // A last line that has its newline but is not JSON (a power loss can leave zeros) is torn
    // too; the `.torn` file only grows.
    let mut text = std::fs::read(&path).unwrap();
    text.extend_from_slice(b"\0\0\0\0\n");
    std::fs::write(&path, &text).unwrap();
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(
        sink.torn(),
        [TornLine {
            line: 4,
            text: "\0\0\0\0".to_owned()
        }]
    );
    assert_eq!(sink.count().await.unwrap(), 3);
    let kept = std::fs::read_to_string(torn_path(&path)).unwrap();
    assert_eq!(kept.lines().count(), 2, "{kept}");
    assert!(
        kept.lines().nth(1).unwrap().contains("\"line\":4"),
        "{kept}"
    );
}

#[tokio::test]
async fn a_corrupt_line_before_the_last_fails_open_and_names_the_line() {
    let dir = TempDir::new("corrupt");
    let path = dir.file("dlq.jsonl");
    let one = serde_json::to_string(&letter("M-1", "2026-08-19T01:00:00Z")).unwrap();
    let two = serde_json::to_string(&letter("M-2", "2026-08-19T02:00:00Z")).unwrap();

    let cases = [
        // Not JSON, in the middle.
        (
            format!("{one}\n{{\"msg_id\": \"M-x\", oops\n{two}\n"),
            "line 2",
        ),
        // JSON but not a letter, in the middle.
        (
            format!("{one}\n\n{{\"msg_id\":\"M-x\"}}\n{two}\n"),
            "line 3",
        ),
        // JSON but not a letter on the last line: corrupt, not torn (no crash writes that).
        (format!("{one}\n{two}\n{{\"ack\":7}}\n"), "line 3"),
    ];
    for (text, line) in cases {
        std::fs::write(&path, &text).unwrap();
        let error = JsonlSink::open(&path).unwrap_err();
        assert!(matches!(error, DlqError::Corrupt(_)), "{error:?}");
        let message = error.to_string();
        assert!(message.contains(line), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "left untouched"
        );
        assert!(!torn_path(&path).exists());
    }
    let error = JsonlSink::open(&path).unwrap_err().to_string();
    assert!(error.contains("line 3") && error.contains("ack"), "{error}");

    // Blank lines are not corrupt.
    std::fs::write(&path, format!("{one}\n\n  \n{two}\n")).unwrap();
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.count().await.unwrap(), 2);
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
        error.to_string().contains(&in_place.display().to_string()),
        "{error}"
    );

    // A regular file where its directory should be.
    let file = dir.file("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let below = file.join("dlq.jsonl");
    let error = JsonlSink::open(&below).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        error.to_string().contains(&below.display().to_string()),
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
}

#[test]
fn one_sink_per_file() {
    let dir = TempDir::new("lock");
    let path = dir.file("dlq.jsonl");
    let first = JsonlSink::open(&path).unwrap();
    let error = JsonlSink::open(&path).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(error.to_string().contains("one writer per file"), "{error}");
    drop(first);
    JsonlSink::open(&path).unwrap();
}

#[test]
fn a_park_future_does_everything_in_its_first_poll() {
    let dir = TempDir::new("cancel");
    let path = dir.file("dlq.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    let l = letter("M-1", "2026-08-19T01:00:00Z");

    // Dropped before it is polled: nothing written.
    drop(sink.park(&l));
    assert_eq!(std::fs::read(&path).unwrap(), b"");

    // Polled once: finished, never Pending, so it cannot be dropped halfway.
    let mut park = std::pin::pin!(sink.park(&l));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(matches!(
        park.as_mut().poll(&mut cx),
        std::task::Poll::Ready(Ok(()))
    ));
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
}

#[test]
fn concurrent_parks_from_many_threads_are_whole_lines() {
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
    assert_eq!(runtime.block_on(sink.count()).unwrap(), 160);
    drop(sink);
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    let list = runtime.block_on(sink.list()).unwrap();
    assert_eq!(list.len(), 160);
    assert!(
        list.windows(2).all(|w| w[0].msg_id < w[1].msg_id),
        "same time: by msg_id"
    );
}

/// Set in a child process: the path of the file it parks into.
const CRASH_CHILD: &str = "RETRY_CORE_DLQ_JSONL_CRASH_CHILD";

/// The child's letter number `i`: every 40th one is 8 MiB, so its write takes long enough
/// for a kill to land inside it.
fn crash_letter(i: u32) -> DeadLetter {
    let mut l = letter(&format!("M-{i:07}"), "2026-08-19T01:00:00Z");
    let pad = if i % 40 == 39 {
        8 << 20
    } else {
        1000 * (i % 5) as usize
    };
    l.original = serde_json::json!({ "i": i, "pad": "x".repeat(pad) });
    l
}

/// The child parks letters and reports each one on stdout after `park` returned Ok; the parent
/// kills it with SIGKILL mid-stream: while the file grows during the write of the first big
/// letter, so usually inside that `write(2)`. Every reported letter must be in the file, and a
/// torn tail must be reported and kept, not skipped.
#[tokio::test]
async fn a_killed_writer_loses_no_parked_letter() {
    if let Ok(path) = std::env::var(CRASH_CHILD) {
        let sink = JsonlSink::open(&path).unwrap();
        let mut out = std::io::stdout();
        for i in 0..1_000u32 {
            let l = crash_letter(i);
            // A closed pipe (the parent is gone) ends the child.
            let mut report = |what: &str| {
                writeln!(out, "{what} {}", l.msg_id)
                    .and_then(|()| out.flush())
                    .is_ok()
            };
            if l.original["pad"].as_str().unwrap().len() > 1 << 20 && !report("BIG") {
                return;
            }
            sink.park(&l).await.unwrap();
            if !report("PARKED") {
                return;
            }
        }
        return;
    }

    let dir = TempDir::new("crash");
    let path = dir.file("dlq.jsonl");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_writer_loses_no_parked_letter",
            "--nocapture",
        ])
        .env(CRASH_CHILD, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut reported = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        assert_ne!(
            stdout.read_line(&mut line).unwrap(),
            0,
            "the child stopped early"
        );
        if let Some(id) = line.trim_end().strip_prefix("PARKED ") {
            reported.push(id.to_owned());
        } else if line.starts_with("BIG ") {
            break;
        }
    }
    // The file holds the reported letters; kill as soon as it grows (the big write started),
    // or after 5 s.
    let before = std::fs::metadata(&path).unwrap().len();
    let started = std::time::Instant::now();
    while std::fs::metadata(&path).unwrap().len() == before
        && started.elapsed() < std::time::Duration::from_secs(5)
    {
        std::hint::spin_loop();
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed: {status:?}");
    // What it reported before it died.
    for line in stdout.lines() {
        if let Some(id) = line.unwrap().strip_prefix("PARKED ") {
            reported.push(id.to_owned());
        }
    }
    assert!(reported.len() >= 39, "{reported:?}");

    let sink = JsonlSink::open(&path).unwrap();
    let parked = sink.list().await.unwrap();
    let parked_ids: std::collections::HashSet<&str> = ids(&parked).into_iter().collect();
    let lost: Vec<_> = reported
        .iter()
        .filter(|id| !parked_ids.contains(id.as_str()))
        .collect();
    assert!(lost.is_empty(), "reported parked, then lost: {lost:?}");
    // At most the one park that finished between the last report and the kill.
    assert!(
        parked.len() <= reported.len() + 1,
        "{} {}",
        parked.len(),
        reported.len()
    );
    assert_eq!(
        parked,
        (0..parked.len() as u32)
            .map(crash_letter)
            .collect::<Vec<_>>(),
        "whole letters, in order"
    );

    // A torn tail (the kill landed inside a write) is reported and kept, not skipped.
    let torn = sink.torn().to_vec();
    assert!(torn.len() <= 1, "{torn:?}");
    if let Some(torn) = torn.first() {
        assert_eq!(
            torn.line,
            parked.len() + 1,
            "the line after the last letter"
        );
        let next = serde_json::to_string(&crash_letter(parked.len() as u32)).unwrap();
        assert!(
            next.starts_with(&torn.text) && torn.text.len() < next.len(),
            "a prefix of the next letter"
        );
        assert!(!reported.contains(&format!("M-{:07}", parked.len())));
        let kept = std::fs::read_to_string(torn_path(&path)).unwrap();
        assert!(kept.contains(&format!("\"line\":{}", torn.line)));
        assert_eq!(kept.lines().count(), 1);
    }
    eprintln!(
        "crash: {} reported, {} in the file, torn tail: {}",
        reported.len(),
        parked.len(),
        torn.first()
            .map_or("none".to_owned(), |t| format!("{} bytes", t.text.len()))
    );
    drop(sink);

    // Opening again finds a clean file.
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_empty());
    assert_eq!(sink.count().await.unwrap(), parked.len() as u64);
}

/// Set in a child process: the path of the file it parks into, under a small file size limit.
const FSIZE_CHILD: &str = "RETRY_CORE_DLQ_JSONL_FSIZE_CHILD";

/// A park that cannot write returns `DlqError::Io` and leaves no half line in the file. Root
/// ignores permission bits, so the failure is a file size limit (`ulimit -f`, which binds root
/// too, with SIGXFSZ ignored so the write fails with EFBIG instead of killing the child): the
/// first write over the limit is short, the next one fails, and the sink cuts the partial line
/// back off.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_park_that_cannot_write_fails_with_io_and_leaves_no_partial_line() {
    if let Ok(path) = std::env::var(FSIZE_CHILD) {
        let sink = JsonlSink::open(&path).unwrap();
        for i in 0..100u32 {
            let mut l = letter(&format!("M-{i:03}"), "2026-08-19T01:00:00Z");
            l.original = serde_json::json!({ "pad": "x".repeat(700) });
            match sink.park(&l).await {
                Ok(()) => println!("PARKED {}", l.msg_id),
                Err(e) => {
                    assert!(matches!(e, DlqError::Io(_)), "{e:?}");
                    println!("FAILED {e}");
                    // Still failing, still clean.
                    assert!(sink.park(&l).await.is_err());
                    assert!(sink.get(&l.msg_id).await.unwrap().is_none());
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
    assert_eq!(ids(&sink.list().await.unwrap()), parked);
}
