//! Fault: a dead-letter directory that is full, or read-only.
//!
//! - Full: a 256 KiB tmpfs, filled up while the `JsonlSink` is open. A `#[retryable(dlq(...))]`
//!   call that gives up gets `DlqFailed` carrying its letter and naming the file and "No space
//!   left on device"; so does every call of a group that gives up at once; the file keeps no
//!   partial line; once space frees up the sink parks again and the earlier letters are intact.
//! - Read-only, at start: a read-only bind mount. Opening the sink fails naming the file and
//!   "Read-only file system" (a service cannot start and silently drop letters); every letter
//!   can still be read, and after the remount the sink opens with them intact.
//! - Read-only, while open: Linux refuses to remount a file system read-only while a file on it
//!   is open for writing (EBUSY), and the sink holds its file open. So the file is made
//!   immutable instead (`chattr +i`, which stops root too, also through an open descriptor, on
//!   ext4, xfs and btrfs): parks fail with "Operation not permitted", the caller keeps the
//!   letter, and after `chattr -i` it parks.
//!
//! Tests run as root, so permission bits would not stop a write. The mounts happen in a child
//! process (this binary again, `--exact <test> --nocapture`, with `RETRY_CORE_FAULT_DLQ_CHILD`)
//! started by `unshare --mount --propagation private`, so they vanish with it whatever happens.
//! A machine where that (or `chattr`) is not possible fails these tests, saying what is missing.
#![cfg(target_os = "linux")]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use retry_core::dlq::{DeadLetter, DeadLetterSink, DlqError, DlqFailed, JsonlSink};
use retry_core::{Classify, Decision, retryable};
use serde::Serialize;

#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

/// Set in the child process: the directory it mounts over and works in.
const CHILD_ENV: &str = "RETRY_CORE_FAULT_DLQ_CHILD";

/// What a child prints last when every check passed (a child that ran no test prints nothing).
const CHILD_OK: &str = "FAULT-DLQ-CHILD-OK";

#[derive(Debug)]
enum Failed {
    Upstream,
    NotParked(Box<DlqFailed>),
}

impl From<DlqFailed> for Failed {
    fn from(e: DlqFailed) -> Self {
        Failed::NotParked(Box::new(e))
    }
}

impl Classify for Failed {
    fn classify(&self) -> Decision {
        match self {
            Failed::Upstream => Decision::Retry,
            Failed::NotParked(_) => Decision::Stop,
        }
    }
    fn reason(&self) -> Option<String> {
        Some("upstream 503".into())
    }
}

#[derive(Debug, Clone, Serialize)]
struct Payment {
    id: String,
    pad: String,
}

fn payment(id: &str, pad: usize) -> Payment {
    Payment {
        id: id.into(),
        pad: "x".repeat(pad),
    }
}

#[retryable(max = 2, base = "10ms", dlq(sink = letters, id = payment.id.clone(), original = payment))]
async fn pay(letters: &JsonlSink, payment: Payment) -> Result<(), Failed> {
    Err(Failed::Upstream)
}

/// Gives up on `payment` into `letters`: parked (the caller sees its own error), or not, with the
/// letter handed back.
async fn give_up(letters: &JsonlSink, payment: Payment) -> Result<(), Box<DlqFailed>> {
    match pay(letters, payment).await.unwrap_err() {
        Failed::Upstream => Ok(()),
        Failed::NotParked(failed) => Err(failed),
    }
}

/// Every line of the file is a whole letter (nothing partial at the end either); returns them.
fn whole_lines(path: &Path) -> Vec<DeadLetter> {
    let text = std::fs::read_to_string(path).unwrap();
    let tail = &text[text.rfind('\n').map_or(0, |i| i + 1)..];
    assert!(
        tail.is_empty(),
        "a partial line of {} bytes is left at the end of {}: {:?}...",
        tail.len(),
        path.display(),
        &tail[..tail.len().min(60)]
    );
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a whole letter per line"))
        .collect()
}

/// Asserts the caller got its letter back, with an error naming the file (after one of `doing`)
/// and the cause.
fn assert_not_parked(failed: &DlqFailed, msg_id: &str, doing: &[&str], path: &Path, cause: &str) {
    assert_eq!(failed.letter.msg_id, msg_id, "the caller keeps the letter");
    assert!(
        matches!(failed.sink_error(), Some(DlqError::Io(_))),
        "{:?}",
        failed.why
    );
    let message = retry_core::error_chain(&failed).to_string();
    let file = |doing: &str| format!("{doing} dead-letter file {}: ", path.display());
    assert!(
        doing.iter().any(|doing| message.contains(&file(doing))) && message.contains(cause),
        "`{message}` should name `{}` and `{cause}`",
        file(doing[0])
    );
    assert!(
        message.starts_with(
            "not parked (the sink failed): gave up after 2 attempts: upstream 503: \
             dead-letter store failed: "
        ),
        "{message}"
    );
}

/// Runs `test` again as a child in a mount namespace of its own, with `dir` to work in, and
/// fails with the child's output unless it passed.
fn run_child_in_mount_namespace(test: &str, dir: &Path) {
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "this test needs util-linux `unshare` (to mount a tmpfs in a mount namespace of \
                 its own, as root): {e}"
            )
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(CHILD_OK),
        "the child failed ({}); it needs root (CAP_SYS_ADMIN) for `unshare --mount` and `mount`.\n\
         --- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
}

/// Runs `program args`, failing the test with its output if it fails.
fn run(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}`: {e}"));
    assert!(
        output.status.success(),
        "`{program} {}` failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

fn dir_arg(dir: &Path) -> &str {
    dir.to_str().expect("a UTF-8 temporary directory")
}

#[tokio::test]
async fn a_full_dead_letter_directory_hands_the_letter_back_and_keeps_no_partial_line() {
    const TEST: &str =
        "a_full_dead_letter_directory_hands_the_letter_back_and_keeps_no_partial_line";
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        let dir = TempDir::new("fault-dlq-full");
        return run_child_in_mount_namespace(TEST, &dir.0);
    };
    let dir = PathBuf::from(dir);
    run(
        "mount",
        &["-t", "tmpfs", "-o", "size=256k", "tmpfs", dir_arg(&dir)],
    );
    let path = dir.join("dlq.jsonl");
    let letters = JsonlSink::open(&path).unwrap();
    for id in ["P-0", "P-1", "P-2"] {
        give_up(&letters, payment(id, 100)).await.unwrap();
    }
    let before = whole_lines(&path);
    assert_eq!(before.len(), 3);

    // Fill the file system up to the last byte.
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0u8; 4096];
    let full = loop {
        if let Err(e) = filler.write_all(&chunk) {
            break e;
        }
    };
    assert_eq!(full.kind(), std::io::ErrorKind::StorageFull, "{full}");
    drop(filler);

    // A letter larger than any slack left in the file's last page: its write is cut short.
    let failed = give_up(&letters, payment("P-3", 16 << 10))
        .await
        .unwrap_err();
    assert_not_parked(
        &failed,
        "P-3",
        &["cannot append to"],
        &path,
        "No space left on device",
    );
    assert_eq!(
        failed.letter.original["pad"].as_str().unwrap().len(),
        16 << 10
    );
    assert_eq!(whole_lines(&path), before, "no partial line, nothing lost");

    // Many calls giving up at once (one group, or a few): every one of them gets its letter
    // back, and nothing of them stays in the file.
    let group = tokio::join!(
        give_up(&letters, payment("G-0", 4 << 10)),
        give_up(&letters, payment("G-1", 4 << 10)),
        give_up(&letters, payment("G-2", 4 << 10)),
        give_up(&letters, payment("G-3", 4 << 10)),
    );
    for (id, result) in [
        ("G-0", group.0),
        ("G-1", group.1),
        ("G-2", group.2),
        ("G-3", group.3),
    ] {
        let failed = result.expect_err("parked on a full disk");
        assert_not_parked(
            &failed,
            id,
            &["cannot append to"],
            &path,
            "No space left on device",
        );
    }
    assert_eq!(whole_lines(&path), before, "no partial line, nothing lost");

    // Space again: the letter the caller kept parks, next to the intact earlier ones.
    std::fs::remove_file(dir.join("filler")).unwrap();
    letters.park(&failed.letter).await.unwrap();
    let mut expected = before.clone();
    expected.push(failed.letter.clone());
    assert_eq!(whole_lines(&path), expected);
    drop(letters);
    let letters = JsonlSink::open(&path).unwrap();
    assert!(letters.torn().is_none());
    assert_eq!(whole_lines(&path), expected, "no letter lost");
    println!("{CHILD_OK}");
}

#[tokio::test]
async fn a_read_only_dead_letter_directory_fails_open_naming_it_and_loses_nothing() {
    const TEST: &str = "a_read_only_dead_letter_directory_fails_open_naming_it_and_loses_nothing";
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        let dir = TempDir::new("fault-dlq-ro");
        return run_child_in_mount_namespace(TEST, &dir.0);
    };
    let dir = PathBuf::from(dir);
    run(
        "mount",
        &["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir_arg(&dir)],
    );
    let path = dir.join("dlq.jsonl");
    let before = {
        let letters = JsonlSink::open(&path).unwrap();
        for id in ["P-0", "P-1"] {
            give_up(&letters, payment(id, 100)).await.unwrap();
        }
        whole_lines(&path)
    };

    // The directory turns read-only (a bind mount of it, remounted read-only).
    run("mount", &["--bind", dir_arg(&dir), dir_arg(&dir)]);
    run("mount", &["-o", "remount,bind,ro", dir_arg(&dir)]);
    let error = JsonlSink::open(&path).unwrap_err();
    assert!(matches!(error, DlqError::Io(_)), "{error:?}");
    let message = retry_core::error_chain(&error).to_string();
    let file = format!("cannot open dead-letter file {}", path.display());
    assert!(
        message.contains(&file) && message.contains("Read-only file system"),
        "`{message}` should name `{file}` and the cause"
    );
    // Every letter can still be read (and imported).
    assert_eq!(whole_lines(&path), before);

    // Writable again: the sink opens with the letters intact and parks new ones.
    run("umount", &[dir_arg(&dir)]);
    let letters = JsonlSink::open(&path).unwrap();
    assert_eq!(whole_lines(&path), before, "no letter lost");
    give_up(&letters, payment("P-2", 100)).await.unwrap();
    assert_eq!(whole_lines(&path).len(), 3);
    println!("{CHILD_OK}");
}

/// Clears the immutable attribute again, however the test ends (an immutable file cannot be
/// removed, even by root).
struct Immutable<'a>(&'a Path);

impl<'a> Immutable<'a> {
    fn set(path: &'a Path) -> Self {
        run("chattr", &["+i", path.to_str().unwrap()]);
        Immutable(path)
    }
}

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = Command::new("chattr").args(["-i"]).arg(self.0).status();
    }
}

#[tokio::test]
async fn a_dead_letter_file_that_turns_unwritable_while_open_hands_letters_back() {
    let dir = TempDir::new("fault-dlq-immutable");
    let path = dir.file("dlq.jsonl");
    let letters = JsonlSink::open(&path).unwrap();
    for id in ["P-0", "P-1"] {
        give_up(&letters, payment(id, 100)).await.unwrap();
    }
    let before = whole_lines(&path);

    let immutable = Immutable::set(&path);
    let mut kept = Vec::new();
    for id in ["P-2", "P-3"] {
        let failed = match give_up(&letters, payment(id, 100)).await {
            Err(failed) => failed,
            Ok(()) => panic!(
                "{id} was parked into an immutable file: the file system under {} does not \
                 refuse writes to an immutable file through an open descriptor (tmpfs?); run \
                 this test with TMPDIR on ext4, xfs or btrfs",
                dir.0.display()
            ),
        };
        assert_not_parked(
            &failed,
            id,
            // The first failed write could not be cut back either (the file takes no change), so
            // the next park first retries that.
            &["cannot append to", "cannot remove a partial line from"],
            &path,
            "Operation not permitted",
        );
        kept.push(failed.letter);
    }
    drop(immutable);
    assert_eq!(whole_lines(&path), before, "no partial line, nothing lost");

    for letter in &kept {
        letters.park(letter).await.unwrap();
    }
    let mut expected = before;
    expected.extend(kept);
    assert_eq!(whole_lines(&path), expected, "no letter lost");
}
