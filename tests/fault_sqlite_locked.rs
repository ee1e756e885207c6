//! Fault: another process holds the SQLite file's write lock (`BEGIN EXCLUSIVE`, then sleeps).
//! Calls through `SqliteStore` fail after the busy timeout with an error naming the file and
//! saying it is locked, without running their body (fail closed); a `#[retryable(dlq(...))]`
//! call that gives up meanwhile gets `DlqFailed` carrying its letter. Once the other process lets
//! go, resends run each body once and the letters park: nothing lost, nothing doubled.
//!
//! The other process is this test binary run again (`--exact <test> --nocapture`, with
//! `RETRY_CORE_FAULT_LOCK_CHILD=<file>`): it takes the lock, says `LOCKED`, and holds it until
//! the parent writes a line (or closes the pipe).
#![cfg(feature = "sqlite")]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DeadLetterStore, DlqError, DlqFailed, FailureClass, Page,
};
use retry_core::idempotency::{
    ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, encode_namespaced_key,
};
use retry_core::{Classify, Decision, retryable};
use retry_sqlite::SqliteDeadLetters;
use retry_sqlite::SqliteStore;

#[path = "common/child.rs"]
mod child;
#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

/// Set in the child process: the SQLite file whose write lock it holds.
const CHILD_ENV: &str = "RETRY_CORE_FAULT_LOCK_CHILD";

/// The stores' busy timeout here: short, so the test is quick.
const BUSY: Duration = Duration::from_millis(200);

/// The child's side: takes the write lock, says so, holds it until told (or orphaned).
fn hold_lock(path: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    println!("LOCKED");
    std::io::stdout().flush().unwrap();
    // Any line, or the parent gone (end of input), ends the hold.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    conn.execute_batch("COMMIT").unwrap();
}

/// The other process, holding the lock until [`release`](Self::release); killed if the test
/// fails first.
struct LockHolder {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl LockHolder {
    /// Runs `test` again as a child holding the write lock of `path`; returns once it holds it.
    fn start(test: &str, path: &Path) -> Self {
        let (mut child, lines) = child::rerun(test, CHILD_ENV, path, Stdio::piped());
        let stdin = child.stdin.take();
        let mut holder = LockHolder { child, stdin };
        if let Err(e) = child::wait_for_line(&lines, "LOCKED") {
            let _ = holder.child.kill();
            panic!("the child never took the lock on {}: {e}", path.display());
        }
        holder
    }

    /// Lets the lock go and waits for the child to end.
    fn release(mut self) {
        writeln!(self.stdin.take().unwrap(), "go").unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the lock holder failed: {status:?}");
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Debug)]
enum Failed {
    Idempotency(IdempotencyError),
    Upstream,
    NotParked(Box<DlqFailed>),
}

impl From<IdempotencyError> for Failed {
    fn from(e: IdempotencyError) -> Self {
        Failed::Idempotency(e)
    }
}

impl From<DlqFailed> for Failed {
    fn from(e: DlqFailed) -> Self {
        Failed::NotParked(Box::new(e))
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Idempotency(e) => write!(f, "{}", retry_core::error_chain(e)),
            Failed::Upstream => f.write_str("upstream 503"),
            Failed::NotParked(e) => write!(f, "{}", retry_core::error_chain(e)),
        }
    }
}

impl Classify for Failed {
    fn classify(&self) -> Decision {
        match self {
            Failed::Idempotency(e) => e.classify(),
            Failed::Upstream => Decision::Retry,
            Failed::NotParked(_) => Decision::Stop,
        }
    }
    fn reason(&self) -> Option<String> {
        Some(self.to_string())
    }
}

/// The side effects: deposit numbers, one per body run.
#[derive(Default)]
struct Ledger(Mutex<Vec<u64>>);

impl Ledger {
    fn effects(&self) -> Vec<u64> {
        let mut effects = self.0.lock().unwrap().clone();
        effects.sort_unstable();
        effects
    }
}

#[retryable(max = 2, base = "20ms")]
#[idempotent(key = deposit_no, store = inbox, on_err = "release")]
async fn deposit(inbox: &SqliteStore, ledger: &Ledger, deposit_no: u64) -> Result<u64, Failed> {
    ledger.0.lock().unwrap().push(deposit_no);
    Ok(deposit_no)
}

/// What the inbox holds for `deposit_no` (a probe: the key is expected to be done), under the
/// key `#[idempotent]` stores: namespaced by the function's name.
async fn row(inbox: &SqliteStore, deposit_no: u64) -> ClaimOutcome {
    let key = encode_namespaced_key("deposit", None::<&str>, &deposit_no);
    let request = ClaimRequest {
        key: &key,
        biz_key: &key,
        fingerprint: None,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(86_400),
    };
    inbox.claim(&request).await.unwrap()
}

fn locked_message(path: &Path) -> String {
    format!(
        "database file {} is locked by another process (busy for {BUSY:?})",
        path.display()
    )
}

/// The chain of a call refused for the lock: the store, the file and the wait, then SQLite's own
/// error.
fn assert_locked(message: &str, path: &Path) {
    let ours = format!("idempotency store unavailable: {}: ", locked_message(path));
    assert!(
        message.starts_with(&ours) && message[ours.len()..].contains("database is locked"),
        "{message}"
    );
}

#[tokio::test]
async fn idempotent_calls_on_a_locked_file_fail_closed_naming_it_and_resends_run_once() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return hold_lock(&path);
    }
    let dir = TempDir::new("fault-locked-inbox");
    let path: PathBuf = dir.file("inbox.sqlite3");
    let inbox = SqliteStore::open(&path).unwrap().with_busy_timeout(BUSY);
    let ledger = Ledger::default();
    assert_eq!(deposit(&inbox, &ledger, 1).await.unwrap(), 1);

    let holder = LockHolder::start(
        "idempotent_calls_on_a_locked_file_fail_closed_naming_it_and_resends_run_once",
        &path,
    );
    // A duplicate of a done key may be answered from a plain read, which in WAL mode needs no
    // write lock; if the store takes the lock for it, it fails like the new keys below.
    match deposit(&inbox, &ledger, 1).await {
        Ok(answer) => assert_eq!(answer, 1),
        Err(error) => assert_locked(&error.to_string(), &path),
    }
    for deposit_no in [2, 3, 4] {
        let started = Instant::now();
        let error = deposit(&inbox, &ledger, deposit_no).await.unwrap_err();
        assert!(
            matches!(error, Failed::Idempotency(IdempotencyError::Store(_))),
            "{error:?}"
        );
        assert_locked(&error.to_string(), &path);
        // Two attempts of one busy timeout each, and the pause between them.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        ledger.effects(),
        [1],
        "fail closed: no body ran while locked"
    );
    holder.release();

    for deposit_no in [1, 2, 3, 4, 2] {
        assert_eq!(
            deposit(&inbox, &ledger, deposit_no).await.unwrap(),
            deposit_no
        );
    }
    assert_eq!(
        ledger.effects(),
        [1, 2, 3, 4],
        "side effects == unique keys"
    );
    for deposit_no in 1..=4 {
        assert_eq!(
            row(&inbox, deposit_no).await,
            ClaimOutcome::Done(deposit_no.to_string()),
            "no inbox row lost"
        );
    }
}

#[retryable(max = 2, base = "20ms", dlq(sink = letters, id = id, original = id))]
async fn submit(letters: &SqliteDeadLetters, id: &str) -> Result<(), Failed> {
    Err(Failed::Upstream)
}

fn letter(msg_id: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.into(),
        original: serde_json::json!({ "id": msg_id }),
        reason: "gave up after 2 attempts: upstream 503".into(),
        attempts: 2,
        first_failed_at: instant("2026-08-19T02:11:03+09:00"),
        last_failed_at: instant("2026-08-19T02:12:47+09:00"),
        trace_id: "t".into(),
        class: FailureClass::System,
        error_type: "Failed".into(),
        idempotency_key: None,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

#[tokio::test]
async fn letters_given_up_on_a_locked_file_come_back_to_the_caller_and_park_once_it_is_free() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return hold_lock(&path);
    }
    let dir = TempDir::new("fault-locked-dlq");
    let path: PathBuf = dir.file("letters.sqlite3");
    let letters = SqliteDeadLetters::open(&path)
        .unwrap()
        .with_busy_timeout(BUSY);
    letters.park(&letter("M-0")).await.unwrap();

    let holder = LockHolder::start(
        "letters_given_up_on_a_locked_file_come_back_to_the_caller_and_park_once_it_is_free",
        &path,
    );
    // Given up while locked, at the same time (one group commit): each caller gets its letter
    // back, with why it was not parked.
    let mut not_parked = Vec::new();
    let (one, two) = tokio::join!(submit(&letters, "M-1"), submit(&letters, "M-2"));
    for (id, given_up) in [("M-1", one), ("M-2", two)] {
        let Failed::NotParked(failed) = given_up.unwrap_err() else {
            panic!("the caller must see that {id} was not parked");
        };
        assert_eq!(failed.letter.msg_id, id);
        assert!(
            matches!(failed.sink_error(), Some(DlqError::Io(_))),
            "{:?}",
            failed.why
        );
        // The call's own reason, then the cause (the file, locked), for the caller to log.
        let message = retry_core::error_chain(&failed).to_string();
        assert!(
            message.starts_with(&format!(
                "not parked (the sink failed): gave up after 2 attempts: upstream 503: \
                 dead-letter store failed: {}",
                locked_message(&path)
            )),
            "{message}"
        );
        not_parked.push(failed.letter);
    }
    // A park of its own fails the same way.
    let error = letters.park(&letter("M-3")).await.unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    assert!(
        retry_core::error_chain(&error)
            .to_string()
            .contains(&locked_message(&path)),
        "{error}"
    );
    not_parked.push(letter("M-3"));
    holder.release();

    // The caller still holds every letter; they park now, and the earlier one is intact.
    for l in &not_parked {
        letters.park(l).await.unwrap();
    }
    let parked = letters.page(&Page::first(100)).await.unwrap();
    let mut expected = vec![letter("M-0")];
    expected.extend(not_parked);
    let ids = |ls: &[DeadLetter]| {
        let mut ids: Vec<String> = ls.iter().map(|l| l.msg_id.clone()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&parked), ids(&expected), "no letter lost");
    for l in &expected {
        assert_eq!(letters.get(&l.msg_id).await.unwrap().as_ref(), Some(l));
    }
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
