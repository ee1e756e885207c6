//! The `retry-dlq` binary against real stores: letters parked through the library API, then
//! the commands run as a user or a cron job would.

#[cfg(feature = "postgres")]
#[path = "../../tests/common/no_tls_server.rs"]
mod no_tls_server;

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DlqError, FailureClass, JsonlSink, MAX_ORIGINAL_DEPTH,
};
use retry_core::time::format_rfc3339;
use retry_sqlite::SqliteDeadLetters;

use common::{assert_status, stderr, stdout};

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "retry-dlq-cli-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Held while this process has a JsonlSink open and while it starts a child process. A child
/// inherits every descriptor between fork and exec, so a sink's `flock` would otherwise
/// outlive the sink for a moment, and the binary of another test would find its file locked.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

trait SerialOutput {
    /// Runs the command to its end, under [`SERIAL`].
    fn serial_output(&mut self) -> Output;
}

impl SerialOutput for assert_cmd::Command {
    fn serial_output(&mut self) -> Output {
        let _serial = serial();
        self.output().unwrap()
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The store's file name in a test's directory.
const STORE: &str = "dlq.sqlite";

/// Creates the SQLite store at `path` (if needed) and parks `letters` through the library.
fn park(path: &Path, letters: &[DeadLetter]) {
    let _serial = serial();
    block_on(async {
        let store = SqliteDeadLetters::open(path).unwrap();
        for letter in letters {
            store.park(letter).await.unwrap();
        }
    });
    assert!(path.is_file(), "no store at {}", path.display());
}

/// Appends `letters` to the JSONL file at `path` (created if needed), as a service parks them
/// through a `JsonlSink`.
fn park_jsonl(path: &Path, letters: &[DeadLetter]) {
    let _serial = serial();
    block_on(async {
        let sink = JsonlSink::open(path).unwrap();
        for letter in letters {
            sink.park(letter).await.unwrap();
        }
    });
}

fn letter(id: &str, class: FailureClass, reason: &str, failed_ago: Duration) -> DeadLetter {
    // To the millisecond, as the library takes times from its clock: printed and stored as
    // `2026-08-19T02:11:03.123+00:00`.
    let now = SystemTime::now();
    let since = now.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let first =
        SystemTime::UNIX_EPOCH + Duration::from_millis(since.as_millis() as u64) - failed_ago;
    DeadLetter {
        msg_id: id.to_owned(),
        original: serde_json::json!({ "order": id, "amount": 10, "lines": ["a", "b"] }),
        reason: reason.to_owned(),
        attempts: 5,
        first_failed_at: first,
        last_failed_at: first + Duration::from_secs(30),
        trace_id: format!("trace-{id}"),
        class,
        error_type: "FetchError".to_owned(),
        idempotency_key: (class == FailureClass::System).then(|| format!("key-{id}")),
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// Three letters: two `system` with the same reason (the oldest 3h ago), one `data`.
fn three_letters() -> Vec<DeadLetter> {
    vec![
        letter(
            "M-2",
            FailureClass::System,
            "upstream 503 after 5 attempts",
            2 * MINUTE,
        ),
        letter(
            "M-1",
            FailureClass::System,
            "upstream 503 after 5 attempts",
            3 * HOUR,
        ),
        letter(
            "M-3",
            FailureClass::Data,
            "not retryable: 400 Bad Request",
            MINUTE,
        ),
    ]
}

/// The binary, with none of the store variables of the environment it runs in (scripts/test
/// exports DATABASE_URL).
fn retry_dlq() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_retry-dlq"));
    cmd.env_remove("RETRY_DLQ_JSONL")
        .env_remove("RETRY_DLQ_SQLITE")
        .env_remove("DATABASE_URL");
    cmd
}

/// `retry-dlq --sqlite PATH ARGS...`.
fn run(path: &Path, args: &[&str]) -> Output {
    retry_dlq()
        .arg("--sqlite")
        .arg(path)
        .args(args)
        .serial_output()
}

/// `retry-dlq import FILE --into STORE`.
fn import(file: &Path, store: &Path) -> Output {
    retry_dlq()
        .arg("import")
        .arg(file)
        .arg("--into")
        .arg(store)
        .serial_output()
}

/// The store's pending letters, as `export` writes them.
fn exported(store: &Path) -> Vec<DeadLetter> {
    let output = run(store, &["export"]);
    assert_status(&output, 0);
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The letter `msg_id` of the store, as `show` prints it.
fn show(store: &Path, msg_id: &str) -> DeadLetter {
    let output = run(store, &["show", msg_id]);
    assert_status(&output, 0);
    serde_json::from_str(&stdout(&output)).unwrap()
}

#[test]
fn stats_check_is_0_on_an_empty_store_and_1_with_letters() {
    let dir = TempDir::new("check");
    let path = dir.path(STORE);
    park(&path, &[]);

    let empty = run(&path, &["stats", "--check"]);
    assert_status(&empty, 0);
    assert!(
        stdout(&empty).starts_with("pending: 0\n"),
        "{}",
        stdout(&empty)
    );
    assert!(stdout(&empty).contains("check: OK"), "{}", stdout(&empty));
    assert_eq!(stderr(&empty), "");
    // With an age limit too.
    assert_status(&run(&path, &["stats", "--check", "--max-age", "1h"]), 0);

    park(&path, &three_letters());
    let full = run(&path, &["stats", "--check"]);
    assert_status(&full, 1);
    let text = stdout(&full);
    assert!(text.starts_with("pending: 3\n"), "{text}");
    assert!(text.contains("check: ALERT: 3 letter(s) pending"), "{text}");
    // Without --check, the same report and exit 0.
    let plain = run(&path, &["stats"]);
    assert_status(&plain, 0);
    assert!(!stdout(&plain).contains("check:"), "{}", stdout(&plain));
}

#[test]
fn stats_reports_classes_reasons_and_the_oldest_with_its_age() {
    let dir = TempDir::new("stats");
    let path = dir.path(STORE);
    let letters = three_letters();
    park(&path, &letters);

    let output = run(&path, &["stats", "--top", "10"]);
    assert_status(&output, 0);
    let text = stdout(&output);
    let oldest = &letters[1];
    assert!(
        text.contains(&format!(
            "oldest first failure: {} (3h ago; msg_id M-1)",
            format_rfc3339(oldest.first_failed_at)
        )),
        "{text}"
    );
    assert!(
        text.contains("by class:\n        2  system\n        1  data\n"),
        "{text}"
    );
    assert!(text.contains("leased by a redrive run: 0\n"), "{text}");
    assert!(text.contains("resolved, kept until purged: 0\n"), "{text}");
    assert!(
        text.contains(
            "top reasons (2 of 2 distinct):\n        2  upstream 503 after 5 attempts\n        1  not retryable: 400 Bad Request\n"
        ),
        "{text}"
    );
    let top1 = stdout(&run(&path, &["stats", "--top", "1"]));
    assert!(
        top1.contains("        1  (other reasons: 1 more)"),
        "{top1}"
    );
    // Without --top the store only counts: no reasons.
    let counted = stdout(&run(&path, &["stats"]));
    assert!(!counted.contains("reasons"), "{counted}");
    assert!(counted.contains("by class:"), "{counted}");
}

#[test]
fn max_age_alerts_only_on_letters_older_than_it() {
    let dir = TempDir::new("max-age");
    let path = dir.path(STORE);
    park(
        &path,
        &[
            letter("recent-1", FailureClass::System, "503", MINUTE),
            letter("recent-2", FailureClass::Data, "400", 5 * MINUTE),
        ],
    );
    let young = run(&path, &["stats", "--check", "--max-age", "1h"]);
    assert_status(&young, 0);
    assert!(stdout(&young).contains("within 1h"), "{}", stdout(&young));
    assert_status(&run(&path, &["stats", "--check", "--max-age", "2m"]), 1);

    park(
        &path,
        &[letter("old", FailureClass::System, "503", 3 * HOUR)],
    );
    let old = run(&path, &["stats", "--check", "--max-age", "1h"]);
    assert_status(&old, 1);
    assert!(
        stdout(&old).contains("the oldest (old) failed 3h ago, longer than 1h"),
        "{}",
        stdout(&old)
    );
    for within in ["4h", "1d", "3h30m", "300m"] {
        assert_status(&run(&path, &["stats", "--check", "--max-age", within]), 0);
    }
}

#[test]
fn bad_durations_and_max_age_without_check_are_usage_errors() {
    let dir = TempDir::new("durations");
    let path = dir.path(STORE);
    park(&path, &[]);
    for bad in ["1", "1x", "soon", "0s", "-1h"] {
        let output = run(&path, &["stats", "--check", &format!("--max-age={bad}")]);
        assert_status(&output, 2);
        assert!(
            stderr(&output).contains("--max-age")
                && (stderr(&output).contains(&format!("invalid duration \"{bad}\""))
                    || bad == "0s" && stderr(&output).contains("is zero")),
            "{bad}: {}",
            stderr(&output)
        );
    }
    let output = run(&path, &["stats", "--max-age", "1h"]);
    assert_status(&output, 2);
    assert!(stderr(&output).contains("--check"), "{}", stderr(&output));
}

#[test]
fn list_prints_a_line_per_letter_oldest_first() {
    let dir = TempDir::new("list");
    let path = dir.path(STORE);
    let letters = three_letters();
    park(&path, &letters);
    let line = |l: &DeadLetter| {
        format!(
            "{}\t{}\t{}\t{}\t{}\n",
            l.msg_id,
            l.class,
            l.attempts,
            format_rfc3339(l.first_failed_at),
            l.reason
        )
    };

    let all = run(&path, &["list"]);
    assert_status(&all, 0);
    assert_eq!(
        stdout(&all),
        format!(
            "{}{}{}",
            line(&letters[1]),
            line(&letters[0]),
            line(&letters[2])
        )
    );

    let data = run(&path, &["list", "--class", "data"]);
    assert_eq!(stdout(&data), line(&letters[2]));

    let limited = run(&path, &["list", "--class", "system", "--limit", "1"]);
    assert_status(&limited, 0);
    assert_eq!(stdout(&limited), line(&letters[1]));
    assert!(
        stderr(&limited).contains("more letters not listed (--limit 1)"),
        "{}",
        stderr(&limited)
    );
    let everything = run(&path, &["list", "--class", "system", "--limit", "2"]);
    assert_eq!(stderr(&everything), "", "nothing more to list");

    assert_status(&run(&path, &["list", "--class", "network"]), 2);
}

/// `--format json`: one letter per line, every field, readable back as the letter; in a pipe
/// the text format has no header line (a terminal gets one).
#[test]
fn list_as_json_lines_reads_back_as_the_letters() {
    let dir = TempDir::new("list-json");
    let path = dir.path(STORE);
    let letters = three_letters();
    park(&path, &letters);
    let output = run(&path, &["list", "--format", "json"]);
    assert_status(&output, 0);
    let listed: Vec<DeadLetter> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        listed,
        [letters[1].clone(), letters[0].clone(), letters[2].clone()]
    );
    let text = stdout(&run(&path, &["list"]));
    assert!(!text.contains("MSG_ID"), "no header in a pipe: {text}");
    assert_status(&run(&path, &["list", "--format", "yaml"]), 2);
}

#[test]
fn show_prints_the_letter_as_json_or_exits_1() {
    let dir = TempDir::new("show");
    let path = dir.path(STORE);
    let letters = three_letters();
    park(&path, &letters);

    let output = run(&path, &["show", "M-1"]);
    assert_status(&output, 0);
    let text = stdout(&output);
    assert!(
        text.contains("\n  \"msg_id\": \"M-1\",\n"),
        "pretty: {text}"
    );
    let shown: DeadLetter = serde_json::from_str(&text).unwrap();
    assert_eq!(shown, letters[1]);

    let missing = run(&path, &["show", "M-404"]);
    assert_status(&missing, 1);
    assert_eq!(stdout(&missing), "");
    assert!(
        stderr(&missing).contains("no letter with msg_id M-404"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn export_round_trips_every_letter() {
    let dir = TempDir::new("export");
    let path = dir.path(STORE);
    let mut letters = three_letters();
    park(&path, &letters);

    let output = run(&path, &["export"]);
    assert_status(&output, 0);
    let mut exported: Vec<DeadLetter> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let by_id = |l: &DeadLetter| l.msg_id.clone();
    exported.sort_by_key(by_id);
    letters.sort_by_key(by_id);
    assert_eq!(exported, letters);

    // Each line is a stored letter as is: the JSON of the library's own serialisation.
    let first = stdout(&output).lines().next().unwrap().to_owned();
    let again = serde_json::to_string(&serde_json::from_str::<DeadLetter>(&first).unwrap());
    assert_eq!(first, again.unwrap());

    // An empty store exports nothing.
    let empty = dir.path(&format!("empty-{}", STORE));
    park(&empty, &[]);
    let output = run(&empty, &["export"]);
    assert_status(&output, 0);
    assert_eq!(stdout(&output), "");
}

/// `import FILE --into STORE` moves a JSONL file's letters into a SQLite store, where they can be
/// listed, acknowledged and redriven: the same letters, history and times included; a msg_id
/// on two lines becomes one letter, merged as the store merges a re-park; an ack line of an
/// old file resolves its letter and lease and audit lines are skipped; a second import adds
/// only what is new, skipping every line of a msg_id the store has.
#[test]
fn import_moves_a_jsonl_files_letters_into_a_store_once() {
    let dir = TempDir::new("import");
    let file = dir.path("dlq.jsonl");
    let store = dir.path(STORE);
    let mut letters = three_letters();
    let at = letters[0].first_failed_at;
    letters[0].history.push(retry_core::dlq::Failure {
        at,
        reason: "an earlier give-up".into(),
        trace_id: "t-0".into(),
    });
    // M-1 gave up again later: a second line of its own, with another original.
    let again = DeadLetter {
        original: serde_json::json!({ "order": "M-1", "amount": 10, "retyped": true }),
        attempts: 3,
        last_failed_at: letters[1].last_failed_at + MINUTE,
        trace_id: "trace-M-1-again".into(),
        ..letter(
            "M-1",
            FailureClass::System,
            "timeout after 3 attempts",
            HOUR,
        )
    };
    park_jsonl(&file, &letters);
    park_jsonl(&file, std::slice::from_ref(&again));
    let written = std::fs::read(&file).unwrap();

    let first = import(&file, &store);
    assert_status(&first, 0);
    assert_eq!(
        stdout(&first),
        format!(
            "imported 3 letters from {} into {}; 0 already there\n",
            file.display(),
            store.display()
        )
    );
    assert_eq!(stderr(&first), "");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        written,
        "the file is not changed"
    );

    let mut merged = letters[1].clone();
    merged.absorb(&again);
    assert_eq!(
        (merged.attempts, &merged.original),
        (8, &letters[1].original),
        "attempts add up, the first original stays"
    );
    assert_eq!(show(&store, "M-1"), merged, "M-1's two lines, one letter");
    let mut moved = exported(&store);
    let by_id = |l: &DeadLetter| l.msg_id.clone();
    moved.sort_by_key(by_id);
    assert_eq!(moved.len(), 3, "{moved:?}");
    assert_eq!(moved[1], letters[0], "M-2 as it was, its history included");
    assert_eq!(moved[2], letters[2], "M-3 as it was");

    // Again, after the service parked M-1 once more and a new M-4: only M-4 is new; M-1 is
    // left as the store has it, its new line skipped.
    park_jsonl(
        &file,
        &[
            letter("M-1", FailureClass::System, "503 again", MINUTE),
            letter("M-4", FailureClass::Data, "400 again", MINUTE),
        ],
    );
    let second = import(&file, &store);
    assert_status(&second, 0);
    assert!(
        stdout(&second).starts_with("imported 1 letter from ")
            && stdout(&second).ends_with("; 3 already there\n"),
        "{}",
        stdout(&second)
    );
    assert_eq!(
        show(&store, "M-1"),
        merged,
        "already there: not merged again"
    );
    assert_eq!(show(&store, "M-4").reason, "400 again");
    let third = import(&file, &store);
    assert_status(&third, 0);
    assert!(
        stdout(&third).starts_with("imported 0 letters from ")
            && stdout(&third).ends_with("; 4 already there\n"),
        "{}",
        stdout(&third)
    );

    // A file an older version wrote, when redrives ran on the file itself: its acks resolve
    // their letters (who, when, which run); its lease, release, audit and redrive lines are
    // skipped.
    let old = dir.path("old.jsonl");
    let o1 = letter("O-1", FailureClass::System, "503", 2 * HOUR);
    let o2 = letter("O-2", FailureClass::System, "503", HOUR);
    let line = |l: &DeadLetter| serde_json::to_string(l).unwrap();
    std::fs::write(
        &old,
        format!(
            "{}\n{}\n\
             {{\"lease\":\"O-1\",\"run_id\":\"r-1\",\"until\":\"2099-01-01T00:00:00.000000Z\"}}\n\
             {{\"lease\":\"O-2\",\"run_id\":\"r-1\",\"until\":\"2099-01-01T00:00:00.000000Z\"}}\n\
             {{\"audit\":{{\"run_id\":\"r-1\",\"msg_id\":\"O-1\",\"who\":\"alice\",\"target\":\"t\",\"at\":\"2026-08-20T09:00:00Z\"}}}}\n\
             {{\"ack\":\"O-1\",\"at\":\"2026-08-20T09:00:01Z\",\"by\":\"alice\",\"run_id\":\"r-1\"}}\n\
             {{\"redrive\":{{\"run_id\":\"r-1\"}}}}\n",
            line(&o1),
            line(&o2)
        ),
    )
    .unwrap();
    let output = import(&old, &store);
    assert_status(&output, 0);
    assert_eq!(
        stdout(&output),
        format!(
            "imported 2 letters from {} into {}, 1 of them resolved; 0 already there\n",
            old.display(),
            store.display()
        )
    );
    assert_eq!(stderr(&output), "");
    let resolved = show(&store, "O-1")
        .resolved
        .expect("resolved by the ack line");
    assert_eq!(
        (resolved.by.as_str(), resolved.run_id.as_deref()),
        ("alice", Some("r-1"))
    );
    assert_eq!(format_rfc3339(resolved.at), "2026-08-20T09:00:01.000+00:00");
    assert_eq!(show(&store, "O-2"), o2, "pending, as parked");
    let stats = stdout(&run(&store, &["stats"]));
    assert!(
        stats.starts_with("pending: 5\n")
            && stats.contains("leased by a redrive run: 0\n")
            && stats.contains("resolved, kept until purged: 1\n"),
        "no lease came along: {stats}"
    );
    let audit = run(&store, &["audit"]);
    assert_status(&audit, 0);
    assert_eq!(stdout(&audit), "", "no audit row or run came along");
    assert!(
        !stdout(&run(&store, &["list"])).contains("O-1"),
        "resolved: not listed"
    );

    // A file that is not there is an error, and no store is made for it.
    let missing = import(&dir.path("no-such.jsonl"), &dir.path("other.sqlite"));
    assert_status(&missing, 2);
    assert!(
        stderr(&missing).contains("no dead-letter file at ")
            && stderr(&missing).contains("no-such.jsonl: the file does not exist"),
        "{}",
        stderr(&missing)
    );
    assert!(!dir.path("other.sqlite").exists());
}

/// Lines of a JSONL file that cannot be read (a letter nested past serde_json's limit, as an
/// older version parked it, and a line of garbage) are reported by `import`, each with its
/// number, why and (cut short, on one line) its text, and not imported; every other letter is,
/// and the exit status is 1. The file is not changed.
#[test]
fn import_reports_unreadable_lines_imports_the_rest_and_exits_1() {
    let dir = TempDir::new("import-unreadable");
    let path = dir.path("dlq.jsonl");
    let store = dir.path(STORE);
    park_jsonl(&path, &three_letters());
    let good = std::fs::read_to_string(&path).unwrap();
    let good: Vec<&str> = good.lines().collect();
    let deep = format!(
        "{{\"msg_id\":\"M-deep\",\"original\":{}1{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let text = format!(
        "{}\n{deep}\n{}\n%% not\ta letter\n{}\n",
        good[0], good[1], good[2]
    );
    std::fs::write(&path, &text).unwrap();

    let output = import(&path, &store);
    assert_status(&output, 1);
    assert_eq!(
        stdout(&output),
        format!(
            "imported 3 letters from {} into {}; 0 already there\n",
            path.display(),
            store.display()
        )
    );
    let warnings = stderr(&output);
    let warnings: Vec<&str> = warnings.lines().collect();
    let prefix = format!("retry-dlq: warning: {}: ", path.display());
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(
        warnings[0].starts_with(&format!(
            "{prefix}line 2 could not be read and was not imported: "
        )) && warnings[0].contains("recursion limit exceeded"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[0].ends_with(&format!(
            ": {}…",
            &deep.chars().take(200).collect::<String>()
        )),
        "its text, cut short: {}",
        warnings[0]
    );
    assert!(
        warnings[1].starts_with(&format!(
            "{prefix}line 4 could not be read and was not imported: "
        )) && warnings[1].ends_with(": %% not\\ta letter"),
        "on one line: {}",
        warnings[1]
    );
    assert_eq!(
        warnings[2],
        format!(
            "{prefix}2 lines could not be read and were not imported (see above); the file \
             keeps them"
        )
    );
    let mut ids: Vec<String> = exported(&store).into_iter().map(|l| l.msg_id).collect();
    ids.sort();
    assert_eq!(ids, ["M-1", "M-2", "M-3"]);
    assert_status(&run(&store, &["show", "M-deep"]), 1);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "importing changed nothing"
    );

    // Again: the same lines are still unreadable, the rest is there already.
    let again = import(&path, &store);
    assert_status(&again, 1);
    assert!(
        stdout(&again).starts_with("imported 0 letters from ")
            && stdout(&again).ends_with("; 3 already there\n"),
        "{}",
        stdout(&again)
    );
}

/// A last line without a newline is a letter still being written (or cut short by a crash):
/// `import` says so, does not import it, and exits 0; once the line is whole, the next import
/// takes it.
#[test]
fn import_leaves_a_torn_last_line_for_a_later_import_with_a_warning() {
    let dir = TempDir::new("import-torn");
    let path = dir.path("dlq.jsonl");
    let store = dir.path(STORE);
    park_jsonl(&path, &three_letters());
    let whole = std::fs::read(&path).unwrap();
    let m9 = letter("M-9", FailureClass::System, "503", MINUTE);
    let line = serde_json::to_string(&m9).unwrap();
    let (written, rest) = line.split_at(30);
    let mut text = whole.clone();
    text.extend_from_slice(written.as_bytes());
    std::fs::write(&path, &text).unwrap();

    let output = import(&path, &store);
    assert_status(&output, 0);
    let warning = stderr(&output);
    assert_eq!(
        warning,
        format!(
            "retry-dlq: warning: {}: the last line (at byte {}) has no newline yet and was not \
             imported: a letter still being written, which a later import takes, or one a crash \
             cut short, never parked, which its writer moves to {}.torn: {written}\n",
            path.display(),
            whole.len(),
            path.display()
        )
    );
    assert!(
        stdout(&output).starts_with("imported 3 letters from "),
        "{}",
        stdout(&output)
    );
    assert_status(&run(&store, &["show", "M-9"]), 1);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        text,
        "the file is not changed"
    );

    // The writer finishes the line: the next import takes it, and only it.
    text.extend_from_slice(format!("{rest}\n").as_bytes());
    std::fs::write(&path, &text).unwrap();
    let output = import(&path, &store);
    assert_status(&output, 0);
    assert_eq!(stderr(&output), "");
    assert!(
        stdout(&output).starts_with("imported 1 letter from ")
            && stdout(&output).ends_with("; 3 already there\n"),
        "{}",
        stdout(&output)
    );
    assert_eq!(show(&store, "M-9"), m9);
}

#[test]
fn a_missing_store_is_an_error_and_is_not_created() {
    let dir = TempDir::new("missing");
    let path = dir.path(STORE);
    for command in [
        &["stats", "--check"][..],
        &["list"],
        &["show", "M-1"],
        &["export"],
    ] {
        let output = run(&path, command);
        assert_status(&output, 2);
        assert!(
            stderr(&output).contains(&format!(
                "no dead-letter store at {}: the file does not exist",
                path.display()
            )),
            "{command:?}: {}",
            stderr(&output)
        );
        assert_eq!(stdout(&output), "");
    }
    assert!(!path.exists(), "created {}", path.display());

    // A directory is not a store either.
    let output = run(&dir.0, &["stats"]);
    assert_status(&output, 2);
    assert!(
        stderr(&output).contains("is not a file"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_unreadable_store_is_an_error() {
    let dir = TempDir::new("unreadable");

    // Not a SQLite database.
    let sqlite = dir.path("garbage.sqlite");
    std::fs::write(&sqlite, "this is not a database, just text\n".repeat(200)).unwrap();
    let output = run(&sqlite, &["stats", "--check"]);
    assert_status(&output, 2);
    assert!(
        stderr(&output).starts_with("retry-dlq: error: "),
        "{}",
        stderr(&output)
    );

    // (A JSONL file with unreadable lines is imported without them: see
    // `import_reports_unreadable_lines_imports_the_rest_and_exits_1`.)

    // No read permission (meaningless for root, who reads anyway): neither a store nor a file
    // to import.
    use std::os::unix::fs::PermissionsExt as _;
    let locked = dir.path("locked.sqlite");
    park(&locked, &three_letters());
    let locked_file = dir.path("locked.jsonl");
    park_jsonl(&locked_file, &three_letters());
    for path in [&locked, &locked_file] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    if std::fs::File::open(&locked).is_err() {
        let output = run(&locked, &["list"]);
        assert_status(&output, 2);
        assert!(
            stderr(&output).starts_with("retry-dlq: error: "),
            "{}",
            stderr(&output)
        );
        let into = dir.path("into.sqlite");
        let output = import(&locked_file, &into);
        assert_status(&output, 2);
        assert!(
            stderr(&output).starts_with("retry-dlq: error: ")
                && stderr(&output).contains("locked.jsonl"),
            "{}",
            stderr(&output)
        );
        assert!(!into.exists(), "no store made for a file it cannot read");
    }
}

/// A letter nested `depth` levels deep in its original, objects and arrays in turn.
fn nested_letter(id: &str, depth: usize) -> DeadLetter {
    let mut original = serde_json::json!("innermost");
    for level in 0..depth {
        original = if level % 2 == 0 {
            serde_json::json!([original])
        } else {
            serde_json::json!({ "level": original })
        };
    }
    DeadLetter {
        original,
        ..letter(id, FailureClass::System, "gave up", MINUTE)
    }
}

/// The deepest original a service can park reads back in another process (this binary), parked
/// in SQLite or in a JSONL file and imported; one level more is refused when parked, by either
/// sink, saying why, and the store stays readable.
#[test]
fn the_deepest_letter_parked_reads_back_and_one_level_more_is_refused() {
    let dir = TempDir::new("deepest");
    let deepest = nested_letter("M-deepest", MAX_ORIGINAL_DEPTH);
    let too_deep = nested_letter("M-too-deep", MAX_ORIGINAL_DEPTH + 1);
    let refused_because = |refused: Result<(), DlqError>| {
        let Err(DlqError::Serialize(why)) = refused else {
            panic!("parked: {refused:?}");
        };
        assert!(
            why.contains("`M-too-deep`")
                && why.contains("nested 127 deep")
                && why.contains("at most 126 levels so that their letters can be read back"),
            "{why}"
        );
    };

    // Parked in SQLite.
    let parked = dir.path(STORE);
    park(&parked, std::slice::from_ref(&deepest));
    refused_because({
        let _serial = serial();
        let store = SqliteDeadLetters::open(&parked).unwrap();
        block_on(store.park(&too_deep))
    });

    // Parked in a JSONL file, then imported.
    let file = dir.path("dlq.jsonl");
    park_jsonl(&file, std::slice::from_ref(&deepest));
    refused_because({
        let _serial = serial();
        let sink = JsonlSink::open(&file).unwrap();
        block_on(sink.park(&too_deep))
    });
    let imported = dir.path("imported.sqlite");
    let output = import(&file, &imported);
    assert_status(&output, 0);
    assert_eq!(stderr(&output), "");

    for path in [&parked, &imported] {
        let stats = run(path, &["stats"]);
        assert_status(&stats, 0);
        assert!(
            stdout(&stats).starts_with("pending: 1\n"),
            "{}",
            stdout(&stats)
        );
        assert_eq!(stderr(&stats), "");
        assert_eq!(show(path, "M-deepest"), deepest, "{}", path.display());
        let exported = run(path, &["export"]);
        assert_status(&exported, 0);
        let exported: DeadLetter = serde_json::from_str(stdout(&exported).trim_end()).unwrap();
        assert_eq!(exported, deepest, "the exported line reads back");
        assert_status(&run(path, &["show", "M-too-deep"]), 1);
    }
}

#[test]
fn exactly_one_store_on_the_command_line_or_from_the_environment() {
    let dir = TempDir::new("select");
    let full = dir.path("full.sqlite");
    let empty = dir.path("empty.sqlite");
    park(&full, &three_letters());
    park(&empty, &[]);

    let both = retry_dlq()
        .arg("--sqlite")
        .arg(&full)
        .args(["--pg", "postgres://nobody@127.0.0.1:1/none", "stats"])
        .serial_output();
    assert_status(&both, 2);
    assert!(
        stderr(&both).contains("exclude each other"),
        "{}",
        stderr(&both)
    );

    let none = retry_dlq().arg("stats").serial_output();
    assert_status(&none, 2);
    assert!(
        stderr(&none).contains("no store given"),
        "{}",
        stderr(&none)
    );

    // From the environment.
    let from_env = retry_dlq()
        .env("RETRY_DLQ_SQLITE", &full)
        .args(["stats", "--check"])
        .serial_output();
    assert_status(&from_env, 1);
    let from_env = retry_dlq()
        .env("RETRY_DLQ_SQLITE", &empty)
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .args(["stats", "--check"])
        .serial_output();
    assert_status(&from_env, 0);

    // An option wins over the environment (DATABASE_URL is often set for other reasons),
    // RETRY_DLQ_JSONL included.
    let option = retry_dlq()
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env("RETRY_DLQ_SQLITE", &full)
        .env("RETRY_DLQ_JSONL", dir.path("dlq.jsonl"))
        .args(["stats", "--check", "--sqlite"])
        .arg(&empty)
        .serial_output();
    assert_status(&option, 0);
}

/// `--jsonl` and RETRY_DLQ_JSONL name a JsonlSink file, which is a sink, not a store: a usage
/// error (exit 2, not the status of reading any letter) that says to import the file and
/// use the store, naming both; nothing is created. Doing what it says works.
#[test]
fn a_jsonl_file_is_not_a_store_and_the_error_says_to_import_it() {
    let dir = TempDir::new("jsonl-not-a-store");
    let file = dir.path("dlq.jsonl");
    let store = dir.path("dlq.sqlite");
    park_jsonl(&file, &three_letters());
    let says = |given: &str| {
        format!(
            "retry-dlq: error: {given} {}: a JSONL file is a sink, not a store: move its letters \
             into one with `retry-dlq import {} --into {}`, then use --sqlite {}\n",
            file.display(),
            file.display(),
            store.display(),
            store.display()
        )
    };

    for output in [
        retry_dlq()
            .arg("--jsonl")
            .arg(&file)
            .args(["stats", "--check"])
            .serial_output(),
        retry_dlq()
            .args(["list", "--jsonl"])
            .arg(&file)
            .serial_output(),
    ] {
        assert_status(&output, 2);
        assert_eq!(stderr(&output), says("--jsonl"));
        assert_eq!(stdout(&output), "");
    }
    for env in [
        &[][..],
        // Not DATABASE_URL in its place: RETRY_DLQ_JSONL came before it.
        &[("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")],
    ] {
        let output = retry_dlq()
            .env("RETRY_DLQ_JSONL", &file)
            .envs(env.iter().copied())
            .args(["stats", "--check"])
            .serial_output();
        assert_status(&output, 2);
        assert_eq!(stderr(&output), says("RETRY_DLQ_JSONL"));
    }
    assert!(!store.exists(), "no store was made");

    assert_status(&import(&file, &store), 0);
    let output = run(&store, &["stats", "--check"]);
    assert_status(&output, 1);
    assert!(
        stdout(&output).starts_with("pending: 3\n"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn help_says_what_the_exit_codes_mean() {
    let top = retry_dlq().arg("--help").serial_output();
    assert_status(&top, 0);
    let text = stdout(&top);
    for needle in [
        "--sqlite <PATH>",
        "RETRY_DLQ_SQLITE",
        "DATABASE_URL",
        "Exit status:",
        "import: a line of the file could not be read",
        "A JSONL file (JsonlSink's) is a sink, not a store: move its letters into one with\n  \
         `retry-dlq import FILE --into dlq.sqlite`, then use --sqlite dlq.sqlite.",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    assert!(!text.contains("--jsonl"), "hidden: {text}");
    assert!(!text.contains("RETRY_DLQ_JSONL"), "{text}");
    for command in ["stats", "list", "show", "export", "import"] {
        let help = retry_dlq().args([command, "--help"]).serial_output();
        assert_status(&help, 0);
        let text = stdout(&help);
        assert!(text.contains("Exit status"), "{command}: {text}");
        assert!(text.contains("--sqlite <PATH>"), "{command}: {text}");
        assert!(!text.contains("--jsonl"), "{command}: {text}");
    }
    let stats = stdout(&retry_dlq().args(["stats", "--help"]).serial_output());
    assert!(
        stats.contains("--max-age <DURATION>")
            && stats
                .contains("retry-dlq --sqlite /var/lib/app/dlq.sqlite stats --check --max-age 1h"),
        "{stats}"
    );
    let import = stdout(&retry_dlq().args(["import", "--help"]).serial_output());
    assert!(
        import.contains(
            "Exit status: 0 imported (also when nothing was new); 1 a line could not be read"
        ),
        "{import}"
    );
    // No command at all: the help, as a usage error.
    assert_status(&retry_dlq().serial_output(), 2);
}

/// The service keeps its `JsonlSink` open and keeps parking new letters from a thread of its
/// own while `retry-dlq import` reads the file: every letter parked before the import started
/// is in the store afterwards, and a second import adds the rest, none of them twice.
#[test]
fn import_runs_beside_a_service_that_keeps_parking_into_the_file() {
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let dir = TempDir::new("import-beside-service");
    let file = dir.path("dlq.jsonl");
    let store = dir.path(STORE);
    let old = hundred_system_letters();
    let serial = serial();
    let service = Arc::new(JsonlSink::open(&file).unwrap());
    block_on(async {
        for letter in &old {
            service.park(letter).await.unwrap();
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let parked = Arc::new(AtomicU32::new(0));
    let parker = std::thread::spawn({
        let (service, stop, parked) = (service.clone(), stop.clone(), parked.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            while !stop.load(Ordering::SeqCst) {
                let n = parked.load(Ordering::SeqCst);
                let letter = letter(
                    &format!("S-{n:05}"),
                    FailureClass::System,
                    "upstream 503 after 5 attempts",
                    Duration::from_secs(1),
                );
                runtime.block_on(service.park(&letter)).unwrap();
                parked.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    // Parked (durable) before the import starts.
    let before = parked.load(Ordering::SeqCst);
    let first = retry_dlq()
        .arg("import")
        .arg(&file)
        .arg("--into")
        .arg(&store)
        .output()
        .unwrap();
    let during = parked.load(Ordering::SeqCst) - before;
    stop.store(true, Ordering::SeqCst);
    parker.join().unwrap();
    drop(service);
    drop(serial);
    assert_status(&first, 0);
    assert!(during > 0, "the service went on parking during the import");
    let parked = parked.load(Ordering::SeqCst);
    let all: HashSet<String> = old
        .iter()
        .map(|l| l.msg_id.clone())
        .chain((0..parked).map(|n| format!("S-{n:05}")))
        .collect();

    let imported: HashSet<String> = exported(&store).into_iter().map(|l| l.msg_id).collect();
    for id in old
        .iter()
        .map(|l| l.msg_id.clone())
        .chain((0..before).map(|n| format!("S-{n:05}")))
    {
        assert!(imported.contains(&id), "{id}, parked before, imported");
    }
    assert!(imported.is_subset(&all), "nothing else");
    let first_count = imported.len();
    assert!(
        stdout(&first).starts_with(&format!("imported {first_count} letters from ")),
        "{}",
        stdout(&first)
    );

    let second = import(&file, &store);
    assert_status(&second, 0);
    assert!(
        stdout(&second).starts_with(&format!("imported {} letter", all.len() - first_count))
            && stdout(&second).ends_with(&format!("; {first_count} already there\n")),
        "{}",
        stdout(&second)
    );
    let letters = exported(&store);
    assert_eq!(letters.len(), all.len(), "every letter the service parked");
    let ids: HashSet<&str> = letters.iter().map(|l| l.msg_id.as_str()).collect();
    assert_eq!(ids.len(), letters.len(), "each once");
    assert!(
        letters
            .iter()
            .all(|l| l.attempts == 5 && l.history.is_empty()),
        "none parked into the store twice"
    );
}

/// `--pg` with `sslmode=require` against a server without TLS, and a URL that is not one: exit
/// 2, saying why, never repeating the password. No server needed.
#[cfg(feature = "postgres")]
#[test]
fn pg_urls_that_cannot_work_are_errors_without_the_password() {
    let port = no_tls_server::no_tls_server();
    for (url, says) in [
        (
            format!("postgres://app:s3cret@127.0.0.1:{port}/none?sslmode=require"),
            "server does not support TLS",
        ),
        (
            "postgres://app:s3cret@db/none?sslmode=sometimes".to_owned(),
            "invalid PostgreSQL connection string",
        ),
    ] {
        let output = retry_dlq().args(["--pg", &url, "stats"]).serial_output();
        assert_status(&output, 2);
        let stderr = stderr(&output);
        assert!(
            stderr.contains(says) && !stderr.contains("s3cret"),
            "{stderr}"
        );
    }
}

/// `--pg` and `DATABASE_URL`, against the server of `DATABASE_URL` (scripts/test starts one),
/// in a schema of this test's own.
#[cfg(feature = "postgres")]
#[test]
fn postgres_through_the_option_and_the_environment() {
    use retry_core::dlq::{DeadLetterSink as _, DeadLetterStore as _};
    use retry_postgres::PgDeadLetters;

    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!("the `postgres` feature's test needs DATABASE_URL (scripts/test sets it)"),
    };
    let schema = format!("retry_dlq_cli_{}", std::process::id());
    let separator = if url.contains('?') { '&' } else { '?' };
    let in_schema = format!("{url}{separator}options=-c%20search_path%3D{schema}");
    let letters = three_letters();

    block_on(async {
        let admin = PgDeadLetters::connect(&url).await.unwrap();
        let client = admin.pool().get().await.unwrap();
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
            ))
            .await
            .unwrap();
        let store = PgDeadLetters::connect(&in_schema).await.unwrap();
        for letter in &letters {
            store.park(letter).await.unwrap();
        }
        assert_eq!(store.stats().await.unwrap().pending, 3);
    });

    let pg = |args: &[&str]| {
        retry_dlq()
            .args(["--pg", &in_schema])
            .args(args)
            .serial_output()
    };
    let stats = pg(&["stats", "--check", "--max-age", "4h"]);
    assert_status(&stats, 0);
    assert!(
        stdout(&stats).starts_with("pending: 3\n"),
        "{}",
        stdout(&stats)
    );
    assert_status(&pg(&["stats", "--check", "--max-age", "1h"]), 1);
    let list = pg(&["list", "--class", "data"]);
    assert_status(&list, 0);
    assert!(
        stdout(&list).starts_with("M-3\tdata\t5\t"),
        "{}",
        stdout(&list)
    );
    let show = pg(&["show", "M-1"]);
    assert_status(&show, 0);
    assert_eq!(
        serde_json::from_slice::<DeadLetter>(&show.stdout).unwrap(),
        letters[1]
    );
    assert_status(&pg(&["show", "M-404"]), 1);
    let export = pg(&["export"]);
    assert_status(&export, 0);
    assert_eq!(stdout(&export).lines().count(), 3);

    // DATABASE_URL when no option is given.
    let from_env = retry_dlq()
        .env("DATABASE_URL", &in_schema)
        .args(["stats", "--check"])
        .serial_output();
    assert_status(&from_env, 1);

    // A server that is not there: exit 2, naming it, without the password.
    let down = retry_dlq()
        .args(["--pg", "postgres://app:secret@127.0.0.1:1/none", "stats"])
        .serial_output();
    assert_status(&down, 2);
    assert!(stderr(&down).contains("127.0.0.1:1"), "{}", stderr(&down));
    assert!(!stderr(&down).contains("secret"), "{}", stderr(&down));

    block_on(async {
        let admin = PgDeadLetters::connect(&url).await.unwrap();
        let client = admin.pool().get().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    });
}

#[test]
fn a_reader_that_goes_away_does_not_change_the_status() {
    let dir = TempDir::new("closed-pipe");
    let path = dir.path(STORE);
    park(&path, &three_letters());
    let status = |args: &[&str]| {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let _serial = serial();
        std::process::Command::new(env!("CARGO_BIN_EXE_retry-dlq"))
            .env_remove("DATABASE_URL")
            .arg("--sqlite")
            .arg(&path)
            .args(args)
            .stdout(writer)
            .status()
            .unwrap()
            .code()
    };
    // `retry-dlq stats --check | head -1` still alerts; `export | head` is no error.
    assert_eq!(status(&["stats", "--check"]), Some(1));
    assert_eq!(status(&["export"]), Some(0));
}

// ---- redrive ----

/// An idempotent HTTP receiver on loopback: it deduplicates on `Idempotency-Key`, counts each
/// key's effects, and answers 503 (no effect) once its `healthy_for` successes are used up.
struct Receiver {
    url: String,
    state: std::sync::Arc<ReceiverState>,
    _runtime: tokio::runtime::Runtime,
}

#[derive(Default)]
struct ReceiverState {
    effects: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    requests: std::sync::atomic::AtomicU32,
    /// Every request, effect or not, per `Idempotency-Key`.
    requests_by_key: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// The `Authorization` and `X-Shop` headers of every request.
    credentials: std::sync::Mutex<Vec<(String, String)>>,
    healthy_for: std::sync::atomic::AtomicU32,
}

impl Receiver {
    fn start(healthy_for: u32) -> Receiver {
        use axum::http::{HeaderMap, StatusCode};
        use std::sync::atomic::Ordering;

        let state = std::sync::Arc::new(ReceiverState::default());
        state.healthy_for.store(healthy_for, Ordering::SeqCst);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = state.clone();
        let handler = move |headers: HeaderMap, body: String| {
            let state = shared.clone();
            async move {
                state.requests.fetch_add(1, Ordering::SeqCst);
                let Some(key) = headers.get("idempotency-key") else {
                    return (
                        StatusCode::BAD_REQUEST,
                        "Idempotency-Key required".to_owned(),
                    );
                };
                let key = key.to_str().unwrap().trim_matches('"').to_owned();
                *state
                    .requests_by_key
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_default() += 1;
                let header = |name: &str| {
                    headers
                        .get(name)
                        .map(|v| v.to_str().unwrap().to_owned())
                        .unwrap_or_default()
                };
                state
                    .credentials
                    .lock()
                    .unwrap()
                    .push((header("authorization"), header("x-shop")));
                // A receiver that takes a moment: runs at once overlap.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                if state.effects.lock().unwrap().contains_key(&key) {
                    return (StatusCode::OK, format!("replayed {key}"));
                }
                if state
                    .healthy_for
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_err()
                {
                    return (StatusCode::SERVICE_UNAVAILABLE, "down".to_owned());
                }
                assert!(body.contains("\"amount\":10"), "{body}");
                *state
                    .effects
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_default() += 1;
                (StatusCode::OK, format!("done {key}"))
            }
        };
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}/deposits", listener.local_addr().unwrap());
        let app = axum::Router::new().route("/deposits", axum::routing::post(handler));
        runtime.spawn(async move { axum::serve(listener, app).await });
        Receiver {
            url,
            state,
            _runtime: runtime,
        }
    }

    fn effects(&self) -> u32 {
        self.state.effects.lock().unwrap().values().sum()
    }

    fn most_effects_of_one_key(&self) -> u32 {
        self.state
            .effects
            .lock()
            .unwrap()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

fn hundred_system_letters() -> Vec<DeadLetter> {
    (0..100)
        .map(|n| {
            letter(
                &format!("M-{n:03}"),
                FailureClass::System,
                "upstream 503 after 5 attempts",
                Duration::from_secs(3600 - n),
            )
        })
        .collect()
}

fn count(path: &Path) -> usize {
    stdout(&run(path, &["list"])).lines().count()
}

#[test]
fn redrive_sends_a_small_batch_records_it_and_a_second_run_repeats_no_effect() {
    let dir = TempDir::new("redrive");
    let path = dir.path(STORE);
    let letters = hundred_system_letters();
    park(&path, &letters);
    park(&path, &three_letters()[2..]); // one `data` letter, never chosen
    let receiver = Receiver::start(u32::MAX);
    let redrive = |limit: &str| {
        run(
            &path,
            &[
                "redrive",
                "--to",
                &receiver.url,
                "--who",
                "alice",
                "--class",
                "system",
                "--limit",
                limit,
                "--rate",
                "1000/s",
            ],
        )
    };

    let output = redrive("10");
    assert_status(&output, 0);
    let sent: Vec<_> = stdout(&output)
        .lines()
        .filter(|l| l.starts_with("sent\t"))
        .map(str::to_owned)
        .collect();
    assert_eq!(sent.len(), 10, "{}", stdout(&output));
    assert_eq!(sent[0], "sent\tM-000", "oldest first");
    assert_eq!(receiver.effects(), 10);
    assert_eq!(count(&path), 91, "90 system + 1 data left");
    let audit = stdout(&run(&path, &["audit"]));
    let rows: Vec<Vec<&str>> = audit.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 1, "one audit row: {audit}");
    assert_eq!(
        &rows[0][2..],
        [
            "alice",
            receiver.url.as_str(),
            "class=system",
            "10",
            "10",
            "0",
            "0",
            "-"
        ]
    );

    // The acks of that run were lost: its 10 letters are pending again. Everything goes.
    park(&path, &letters[..10]);
    let output = redrive("1000");
    assert_status(&output, 0);
    assert_eq!(receiver.effects(), 100, "no duplicate effect");
    assert_eq!(receiver.most_effects_of_one_key(), 1);
    assert_eq!(count(&path), 1);
    assert_eq!(stdout(&run(&path, &["audit"])).lines().count(), 2);
}

#[test]
fn redrive_stops_at_the_failure_threshold_and_puts_failed_letters_back() {
    let dir = TempDir::new("redrive-stop");
    let path = dir.path(STORE);
    let letters = hundred_system_letters();
    park(&path, &letters[..20]);
    let receiver = Receiver::start(5);
    let output = run(
        &path,
        &[
            "redrive",
            "--to",
            &receiver.url,
            "--who",
            "bob",
            "--limit",
            "20",
            "--rate",
            "1000",
            "--stop-after",
            "3",
        ],
    );
    assert_status(&output, 1);
    let out = stdout(&output);
    assert!(
        out.contains(
            "20 selected, 5 succeeded, 3 failed, 12 skipped; stopped: 3 letters failed again"
        ),
        "{out}"
    );
    assert_eq!(
        receiver
            .state
            .requests
            .load(std::sync::atomic::Ordering::SeqCst),
        8,
        "nothing sent after the threshold"
    );
    assert_eq!(count(&path), 15);
    let shown = stdout(&run(&path, &["show", "M-005"]));
    let back: DeadLetter = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        (back.attempts, &back.reason),
        (letters[5].attempts, &letters[5].reason),
        "the service's attempts and reason"
    );
    assert_eq!(
        back.first_failed_at, letters[5].first_failed_at,
        "first failure kept"
    );
    let failed = back.history.last().expect("the redrive's failure");
    assert!(failed.reason.contains("503"), "{}", failed.reason);
}

#[test]
fn a_dry_run_lists_and_sends_nothing() {
    let dir = TempDir::new("redrive-dry");
    let path = dir.path("dlq.sqlite");
    park(&path, &three_letters());
    let receiver = Receiver::start(u32::MAX);
    let output = run(
        &path,
        &[
            "redrive",
            "--to",
            &receiver.url,
            "--who",
            "alice",
            "--class",
            "system",
            "--dry-run",
        ],
    );
    assert_status(&output, 0);
    let out = stdout(&output);
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("would send\t"))
            .count(),
        2,
        "{out}"
    );
    assert!(out.contains("nothing sent, nothing recorded"), "{out}");
    assert_eq!(
        receiver
            .state
            .requests
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert_eq!(count(&path), 3);
    assert_eq!(stdout(&run(&path, &["audit"])), "");
}

#[test]
fn redrive_needs_who_and_an_http_url_and_runs_beside_the_service() {
    let dir = TempDir::new("redrive-usage");
    let path = dir.path(STORE);
    park(&path, &three_letters());
    let output = run(&path, &["redrive", "--to", "http://127.0.0.1:9/x"]);
    assert_status(&output, 2);
    assert!(stderr(&output).contains("--who"), "{}", stderr(&output));
    // Letters and credentials in clear text over the network: refused without --insecure.
    let output = run(
        &path,
        &["redrive", "--to", "http://payments.invalid/x", "--who", "a"],
    );
    assert_status(&output, 2);
    assert!(
        stderr(&output).contains("http:// only to a loopback address"),
        "{}",
        stderr(&output)
    );

    // The service is running with the store open: the redrive runs beside it, and the service
    // sees what it did.
    let _serial = serial();
    let service = SqliteDeadLetters::open(&path).unwrap();
    let output = retry_dlq()
        .arg("--sqlite")
        .arg(&path)
        .args(["redrive", "--to", "http://127.0.0.1:9/x", "--who", "a"])
        .output()
        .unwrap();
    assert_status(&output, 1);
    use retry_core::dlq::DeadLetterStore as _;
    assert_eq!(block_on(service.redrives()).unwrap().len(), 1);
    let letter = block_on(service.get("M-1")).unwrap().unwrap();
    let failed = letter
        .history
        .last()
        .expect("the redrive's failure, in the history");
    assert!(
        failed.reason.starts_with("redrive by a failed"),
        "{letter:?}"
    );
}

#[test]
fn credentials_come_from_the_environment_or_a_file_and_a_literal_header_warns() {
    let dir = TempDir::new("redrive-credentials");
    let path = dir.path("dlq.sqlite");
    let letters = hundred_system_letters();
    park(&path, &letters[..3]);
    let receiver = Receiver::start(u32::MAX);
    let headers = dir.path("headers");
    std::fs::write(&headers, "# the shop\n\nX-Shop: 42\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&headers, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let output = retry_dlq()
        .env("DLQ_AUTH", "Bearer s3cret")
        .arg("--sqlite")
        .arg(&path)
        .args([
            "redrive",
            "--to",
            &receiver.url,
            "--who",
            "alice",
            "--rate",
            "1000",
        ])
        .args(["--header-env", "Authorization=DLQ_AUTH", "--header-file"])
        .arg(&headers)
        .serial_output();
    assert_status(&output, 0);
    assert_eq!(
        stderr(&output),
        "",
        "no warning for credentials kept off the command line"
    );
    let seen = receiver.state.credentials.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|(auth, shop)| auth == "Bearer s3cret" && shop == "42"),
        "{seen:?}"
    );

    // A literal header works, and says it can be seen.
    park(&path, &letters[3..4]);
    let output = run(
        &path,
        &[
            "redrive",
            "--to",
            &receiver.url,
            "--who",
            "alice",
            "--header",
            "Authorization: Bearer s3cret",
        ],
    );
    assert_status(&output, 0);
    assert!(
        stderr(&output).contains("visible to other users"),
        "{}",
        stderr(&output)
    );

    // An unset variable, a file that is not there: usage errors, nothing sent.
    park(&path, &letters[4..5]);
    let before = receiver
        .state
        .requests
        .load(std::sync::atomic::Ordering::SeqCst);
    for extra in [
        &["--header-env", "Authorization=NOT_SET_ANYWHERE"][..],
        &["--header-file", "/nonexistent/headers"],
    ] {
        let output = retry_dlq()
            .env_remove("NOT_SET_ANYWHERE")
            .arg("--sqlite")
            .arg(&path)
            .args(["redrive", "--to", &receiver.url, "--who", "alice"])
            .args(extra)
            .serial_output();
        assert_status(&output, 2);
    }
    assert_eq!(
        receiver
            .state
            .requests
            .load(std::sync::atomic::Ordering::SeqCst),
        before
    );
}

#[test]
fn http_to_a_host_that_is_not_loopback_needs_insecure() {
    let dir = TempDir::new("redrive-insecure");
    let path = dir.path("dlq.sqlite");
    park(&path, &three_letters());
    let refused = run(
        &path,
        &["redrive", "--to", "http://192.0.2.1:9/x", "--who", "a"],
    );
    assert_status(&refused, 2);
    assert!(
        stderr(&refused).contains("loopback"),
        "{}",
        stderr(&refused)
    );
    // With --insecure the command goes ahead: a dry run, so nothing leaves this machine.
    let allowed = run(
        &path,
        &[
            "redrive",
            "--to",
            "http://192.0.2.1:9/x",
            "--who",
            "a",
            "--insecure",
            "--dry-run",
        ],
    );
    assert_status(&allowed, 0);
}

#[test]
fn ack_resolves_by_hand_and_show_says_who() {
    let dir = TempDir::new("ack");
    let path = dir.path(STORE);
    park(&path, &three_letters());
    let output = run(&path, &["ack", "M-1", "M-404", "--who", "carol"]);
    assert_status(&output, 1);
    assert_eq!(stdout(&output), "resolved\tM-1\nnot pending\tM-404\n");
    assert_eq!(count(&path), 2);
    let shown: DeadLetter = serde_json::from_str(&stdout(&run(&path, &["show", "M-1"]))).unwrap();
    let resolution = shown.resolved.expect("kept, resolved");
    assert_eq!((resolution.by.as_str(), resolution.run_id), ("carol", None));
    assert_status(&run(&path, &["ack", "M-2", "--who", "carol"]), 0);
    assert_status(&run(&path, &["ack", "M-2"]), 2);
}

#[test]
fn audit_run_shows_a_row_per_letter() {
    let dir = TempDir::new("audit-run");
    let path = dir.path("dlq.sqlite");
    let letters = hundred_system_letters();
    park(&path, &letters[..4]);
    let redacted = DeadLetter {
        redacted: true,
        ..letter("M-R", FailureClass::System, "503", 2 * HOUR)
    };
    park(&path, &[redacted]);
    let receiver = Receiver::start(u32::MAX);
    let output = run(
        &path,
        &[
            "redrive",
            "--to",
            &receiver.url,
            "--who",
            "alice",
            "--rate",
            "1000",
        ],
    );
    assert_status(&output, 1);
    assert!(
        stdout(&output).contains("skipped\tM-R\tthe original was redacted"),
        "{}",
        stdout(&output)
    );
    let runs = stdout(&run(&path, &["audit"]));
    let run_id = runs
        .lines()
        .next()
        .unwrap()
        .split('\t')
        .nth(1)
        .unwrap()
        .to_owned();
    let rows = stdout(&run(&path, &["audit", "--run", &run_id]));
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 5, "{rows:?}");
    let outcome = |id: &str| rows.iter().find(|r| r[1] == id).unwrap()[2];
    assert_eq!(outcome("M-000"), "redriven");
    assert!(outcome("M-R").starts_with("skipped: the original was redacted"));
    assert!(
        rows.iter().all(|r| r[3] != "-"),
        "every row has its outcome"
    );
    assert_status(&run(&path, &["audit", "--run", "no-such-run"]), 1);
}

/// Two `retry-dlq redrive` processes at once over the same 200 letters of one SQLite file: the
/// leases let each letter through once, and the audit has one row per letter.
#[test]
fn two_redrive_processes_at_once_send_each_letter_once() {
    let dir = TempDir::new("redrive-two");
    let path = dir.path("dlq.sqlite");
    let letters: Vec<DeadLetter> = (0..200)
        .map(|n| {
            letter(
                &format!("M-{n:03}"),
                FailureClass::System,
                "upstream 503 after 5 attempts",
                Duration::from_secs(7200 - n),
            )
        })
        .collect();
    park(&path, &letters);
    let receiver = Receiver::start(u32::MAX);
    let children: Vec<std::process::Child> = {
        let _serial = serial();
        ["alice", "bob"]
            .into_iter()
            .map(|who| {
                std::process::Command::new(env!("CARGO_BIN_EXE_retry-dlq"))
                    .env_remove("DATABASE_URL")
                    .arg("--sqlite")
                    .arg(&path)
                    .args(["redrive", "--to", &receiver.url, "--who", who])
                    .args(["--limit", "1000", "--rate", "1000", "--stop-after", "1000"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect()
    };
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    let sent: usize = outputs
        .iter()
        .map(|o| {
            stdout(o)
                .lines()
                .filter(|l| l.starts_with("sent\t"))
                .count()
        })
        .sum();
    assert_eq!(
        sent,
        200,
        "{:?}",
        outputs.iter().map(stderr).collect::<Vec<_>>()
    );
    let by_key = receiver.state.requests_by_key.lock().unwrap().clone();
    assert_eq!(by_key.len(), 200);
    assert!(
        by_key.values().all(|&n| n == 1),
        "a letter was sent twice: {by_key:?}"
    );
    assert_eq!(count(&path), 0);

    let runs = stdout(&run(&path, &["audit"]));
    let mut rows = Vec::new();
    for line in runs.lines() {
        let run_id = line.split('\t').nth(1).unwrap();
        rows.extend(
            stdout(&run(&path, &["audit", "--run", run_id]))
                .lines()
                .map(|l| l.split('\t').map(str::to_owned).collect::<Vec<_>>()),
        );
    }
    assert_eq!(rows.len(), 200, "one row per letter");
    let mut ids: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 200);
    assert!(rows.iter().all(|r| r[2] == "redriven"), "{rows:?}");
}

/// Operators redrive while the service runs. The service (this process) keeps its SQLite store
/// open and keeps parking new letters from a thread of its own while `retry-dlq redrive
/// --dry-run` and then `retry-dlq redrive` run against the same file: both succeed, the service
/// parks on through the redrive, each redriven letter reaches the receiver once, and every
/// letter the service parked is there exactly once afterwards, pending.
#[test]
fn a_service_keeps_parking_while_a_redrive_and_a_dry_run_run_on_its_file() {
    use retry_core::dlq::{DeadLetterStore as _, Page};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let dir = TempDir::new("redrive-live");
    let path = dir.path(STORE);
    let receiver = Receiver::start(u32::MAX);
    let _serial = serial();
    let service = Arc::new(SqliteDeadLetters::open(&path).unwrap());
    let old = hundred_system_letters();
    block_on(async {
        for letter in &old {
            service.park(letter).await.unwrap();
        }
    });

    // The service's own give-ups go on: newer than every old letter, so a redrive of the 100
    // oldest never picks them.
    let stop = Arc::new(AtomicBool::new(false));
    let parked = Arc::new(AtomicU32::new(0));
    let parker = std::thread::spawn({
        let (service, stop, parked) = (service.clone(), stop.clone(), parked.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            while !stop.load(Ordering::SeqCst) {
                let n = parked.load(Ordering::SeqCst);
                let letter = letter(
                    &format!("S-{n:05}"),
                    FailureClass::System,
                    "upstream 503 after 5 attempts",
                    Duration::from_secs(1),
                );
                runtime.block_on(service.park(&letter)).unwrap();
                parked.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let redrive = |extra: &[&str]| {
        retry_dlq()
            .arg("--sqlite")
            .arg(&path)
            .args(["redrive", "--to", &receiver.url, "--who", "ops"])
            .args(["--limit", "100", "--rate", "1000/s"])
            .args(extra)
            .output()
            .unwrap()
    };

    let dry = redrive(&["--dry-run"]);
    assert_status(&dry, 0);
    assert_eq!(receiver.effects(), 0, "a dry run sends nothing");
    let before = parked.load(Ordering::SeqCst);
    let run = redrive(&[]);
    let during = parked.load(Ordering::SeqCst) - before;
    assert_status(&run, 0);
    stop.store(true, Ordering::SeqCst);
    parker.join().unwrap();
    assert!(during > 0, "the service went on parking during the redrive");
    assert_eq!(
        receiver.effects(),
        100,
        "every old letter reached the receiver"
    );
    assert_eq!(receiver.most_effects_of_one_key(), 1, "none of them twice");

    // What the service sees, and what a fresh reader of the store sees: the old letters
    // resolved, every new one pending exactly once.
    let parked = parked.load(Ordering::SeqCst) as usize;
    let fresh = SqliteDeadLetters::open(&path).unwrap();
    for store in [&*service, &fresh] {
        let pending = block_on(store.page(&Page::first(usize::MAX))).unwrap();
        let mut ids: Vec<&str> = pending.iter().map(|l| l.msg_id.as_str()).collect();
        assert_eq!(
            ids.len(),
            parked,
            "every letter the service parked, nothing else"
        );
        ids.dedup();
        assert_eq!(ids.len(), parked, "none twice");
        assert!(ids.iter().all(|id| id.starts_with("S-")));
        for letter in &old {
            let stored = block_on(store.get(&letter.msg_id)).unwrap().unwrap();
            assert!(stored.resolved.is_some(), "{} resolved", letter.msg_id);
        }
    }
}

// ---- hostile receivers ----

/// A receiver that does not take letters the way a redrive expects: it redirects (`302` and
/// `303` to a login page, `307` to another origin), or fails with a body and a problem that hold
/// secrets. It counts what reaches the login page and the other origin, and keeps the
/// `Authorization` header each request carried.
struct Hostile {
    base: String,
    logins: std::sync::Arc<std::sync::atomic::AtomicU32>,
    stolen: std::sync::Arc<std::sync::atomic::AtomicU32>,
    authorizations: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Hostile {
    fn start() -> Hostile {
        use axum::http::{HeaderMap, StatusCode, header};
        use axum::routing::{any, get, post};
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::sync::{Arc, Mutex};

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let bind = || {
            runtime
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .unwrap()
        };
        let (listener, thief) = (bind(), bind());
        let base = format!("http://{}", listener.local_addr().unwrap());
        let thief_url = format!("http://{}/steal", thief.local_addr().unwrap());
        let logins = Arc::new(AtomicU32::new(0));
        let stolen = Arc::new(AtomicU32::new(0));
        let authorizations = Arc::new(Mutex::new(Vec::new()));

        let counted = stolen.clone();
        let thief_app = axum::Router::new().route(
            "/steal",
            any(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "thanks" }
            }),
        );
        let counted = logins.clone();
        let seen = authorizations.clone();
        let app = axum::Router::new()
            .route(
                "/found",
                post(|| async { (StatusCode::FOUND, [(header::LOCATION, "/login")]) }),
            )
            .route(
                "/see-other",
                post(|| async { (StatusCode::SEE_OTHER, [(header::LOCATION, "/login?next=%2Fdeposits")]) }),
            )
            .route(
                "/temporary",
                post(move || async move {
                    (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, thief_url)])
                }),
            )
            .route(
                "/login",
                get(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { "please log in" }
                }),
            )
            .route(
                "/secret",
                post(move |headers: HeaderMap| {
                    let auth = headers
                        .get(header::AUTHORIZATION)
                        .map(|v| v.to_str().unwrap().to_owned())
                        .unwrap_or_default();
                    seen.lock().unwrap().push(auth);
                    async {
                        (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "SECRET-BODY: card 4111111111111111, token=abc123",
                        )
                    }
                }),
            )
            .route(
                "/problem",
                post(|| async {
                    (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        [(header::CONTENT_TYPE, "application/problem+json")],
                        r#"{"type":"about:blank","title":"Ledger rejected the deposit","detail":"SECRET-DETAIL for card 4111111111111111"}"#,
                    )
                }),
            );
        runtime.spawn(async move { axum::serve(listener, app).await });
        runtime.spawn(async move { axum::serve(thief, thief_app).await });
        Hostile {
            base,
            logins,
            stolen,
            authorizations,
            _runtime: runtime,
        }
    }

    fn redrive(&self, path: &Path, to: &str) -> Output {
        run(
            path,
            &["redrive", "--to", to, "--who", "alice", "--rate", "1000/s"],
        )
    }
}

/// A `302` or `303` to a login page and a `307` to another origin: no redirect is followed, no
/// letter counts as delivered, each failure names the status and where it pointed, and every
/// letter stays pending with the failure in its history.
#[test]
fn redrive_follows_no_redirect_and_resolves_no_letter_the_receiver_did_not_take() {
    use std::sync::atomic::Ordering;

    let receiver = Hostile::start();
    for (route, status, location) in [
        ("found", "302 Found", format!("{}/login", receiver.base)),
        (
            "see-other",
            "303 See Other",
            format!("{}/login", receiver.base),
        ),
        (
            "temporary",
            "307 Temporary Redirect",
            "http://127.0.0.1:".to_owned(),
        ),
    ] {
        let dir = TempDir::new("redrive-redirect");
        let path = dir.path(STORE);
        park(&path, &hundred_system_letters()[..3]);
        let output = receiver.redrive(&path, &format!("{}/{route}", receiver.base));
        assert_status(&output, 1);
        let out = stdout(&output);
        let failed: Vec<&str> = out.lines().filter(|l| l.starts_with("failed\t")).collect();
        assert_eq!(failed.len(), 3, "{route}: {out}");
        for line in failed {
            assert!(line.contains(status), "{line}");
            assert!(line.contains(&format!("Location: {location}")), "{line}");
            assert!(line.contains("only a 2xx acknowledges"), "{line}");
        }
        assert!(out.contains("0 succeeded, 3 failed"), "{route}: {out}");
        assert_eq!(count(&path), 3, "{route}: every letter still pending");
        let shown: DeadLetter =
            serde_json::from_str(&stdout(&run(&path, &["show", "M-000"]))).unwrap();
        assert!(shown.resolved.is_none());
        assert!(
            shown.reason.contains(status)
                || shown.history.iter().any(|h| h.reason.contains(status)),
            "{route}: the failure is on the letter: {shown:?}"
        );
    }
    assert_eq!(receiver.logins.load(Ordering::SeqCst), 0, "no GET /login");
    assert_eq!(
        receiver.stolen.load(Ordering::SeqCst),
        0,
        "nothing reached the other origin"
    );
}

/// Credentials in `--to` (userinfo, query), a receiver's failing body and its problem's
/// detail: none of them is written to the audit record or the letter; the userinfo is still
/// sent (as Basic authentication), with a warning that `ps` shows it.
#[test]
fn redrive_keeps_no_url_credentials_and_no_receiver_body() {
    let receiver = Hostile::start();
    let port = receiver.base.rsplit(':').next().unwrap();
    let dir = TempDir::new("redrive-secrets");
    let path = dir.path(STORE);
    park(&path, &hundred_system_letters()[..2]);
    let to = format!("http://shop:pa55word@127.0.0.1:{port}/secret?api_key=K3Y#frag");
    let output = receiver.redrive(&path, &to);
    assert_status(&output, 1);
    assert!(
        stderr(&output).contains("user and password are visible to other users"),
        "{}",
        stderr(&output)
    );
    assert!(
        stdout(&output).contains("500 Internal Server Error"),
        "{}",
        stdout(&output)
    );
    let problem = receiver.redrive(&path, &format!("{}/problem", receiver.base));
    assert!(
        stdout(&problem).contains("422 Unprocessable Entity: \"Ledger rejected the deposit\""),
        "the problem's title is kept: {}",
        stdout(&problem)
    );

    let runs = stdout(&run(&path, &["audit", "--format", "json"]));
    assert!(
        runs.contains(&format!("http://127.0.0.1:{port}/secret")),
        "the target without its credentials: {runs}"
    );
    let mut kept = runs;
    for run_line in stdout(&run(&path, &["audit"])).lines() {
        let run_id = run_line.split('\t').nth(1).unwrap();
        kept += &stdout(&run(&path, &["audit", "--run", run_id, "--format", "json"]));
    }
    kept += &stdout(&run(&path, &["export"]));
    kept += &stdout(&problem);
    for secret in [
        "pa55word",
        "shop:",
        "api_key",
        "K3Y",
        "frag",
        "SECRET",
        "4111111111111111",
        "token=abc123",
    ] {
        assert!(!kept.contains(secret), "{secret:?} kept in:\n{kept}");
    }
    let authorizations = receiver.authorizations.lock().unwrap();
    assert!(!authorizations.is_empty());
    assert!(
        authorizations
            .iter()
            .all(|a| a == "Basic c2hvcDpwYTU1d29yZA=="),
        "the userinfo is sent as Basic authentication: {authorizations:?}"
    );
}

#[cfg(not(feature = "amqp"))]
#[test]
fn a_brokers_queue_needs_the_amqp_feature() {
    let output = retry_dlq()
        .args([
            "--queue",
            "orders.dlq",
            "--amqp",
            "amqp://127.0.0.1:9/%2f",
            "stats",
        ])
        .serial_output();
    assert_status(&output, 2);
    assert!(
        stderr(&output).contains("built without RabbitMQ support (cargo feature `amqp`)"),
        "{}",
        stderr(&output)
    );
}
