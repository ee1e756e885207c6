//! `kill -9` in the middle of a burst of give-ups: every letter whose caller heard "parked" is
//! in the store when it is opened again, for the JSONL file and the SQLite table alike.
//!
//! The child is this test binary again (`--exact <test>`, with `RETRY_CORE_DLQ_KILL_CHILD` set
//! to the store's path): 64 tasks on a 2-worker runtime give up through a real
//! `#[retryable(max = 1, dlq(...))]` function, without end, and each prints `PARKED <msg_id>`
//! (flushed) once its call returned "parked". The parent reads those lines and sends SIGKILL
//! after the first 1,000, while the burst is in full flow (groups being written and synced),
//! then reads what was printed before the kill and opens the store.

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

#[path = "common/burst.rs"]
mod burst;
#[path = "common/tempdir.rs"]
mod tempdir;

use burst::{SendError, Sink, send, transfer};
use retry_core::dlq::{DeadLetterStore, JsonlLine, JsonlReader, JsonlSink, Page};
use retry_sqlite::SqliteDeadLetters;

/// Set in the child: the store's path.
const CHILD: &str = "RETRY_CORE_DLQ_KILL_CHILD";
const TASKS: usize = 64;
/// The parent kills the child after this many reports.
const KILL_AFTER: usize = 1_000;

/// The child: gives up without end, reporting each parked letter. Ends when killed (or when
/// its stdout is gone).
fn burst_until_killed(path: &str, jsonl: bool) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sink = Arc::new(Sink::open(Path::new(path), jsonl).unwrap());
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let sink = Arc::clone(&sink);
                tokio::spawn(async move {
                    for call in 0.. {
                        let transfer = transfer(task, call);
                        let id = transfer.id.clone();
                        match send(&sink, transfer).await {
                            Err(SendError::Unavailable) => {}
                            Err(SendError::NotParked(failed)) => {
                                eprintln!("not parked: {failed}");
                                std::process::exit(3);
                            }
                            Ok(()) => unreachable!("the upstream is down"),
                        }
                        let mut out = std::io::stdout().lock();
                        if writeln!(out, "PARKED {id}")
                            .and_then(|()| out.flush())
                            .is_err()
                        {
                            std::process::exit(0);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// Starts the child on `path`, kills it mid-burst, and returns every id it reported parked.
fn kill_mid_burst(test: &str, path: &Path) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut reported = Vec::new();
    let mut line = String::new();
    while reported.len() < KILL_AFTER {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "the child stopped early"
        );
        if let Some(id) = line.trim_end().strip_prefix("PARKED ") {
            reported.push(id.to_owned());
        }
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed: {status:?}");
    // What it reported before it died.
    for line in out.lines() {
        if let Some(id) = line.unwrap().strip_prefix("PARKED ") {
            reported.push(id.to_owned());
        }
    }
    reported
}

/// Every reported id is among `stored`, and nothing is stored twice (a second park of one
/// message would be a second line in a JSONL file, and merge into 2 attempts in a store).
fn assert_none_lost(reported: &[String], stored: &[(String, u32)], store: &str) {
    let ids: HashSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    let lost: Vec<_> = reported
        .iter()
        .filter(|id| !ids.contains(id.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{store}: {} of {} letters reported parked, then lost: {:?}",
        lost.len(),
        reported.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(ids.len(), stored.len(), "{store}: a letter is listed twice");
    assert!(
        stored.iter().all(|(_, attempts)| *attempts == 1),
        "{store}: a letter was parked twice"
    );
    eprintln!(
        "{store}: killed after {} reports; {} letters in the store",
        reported.len(),
        stored.len()
    );
}

#[test]
fn a_jsonl_burst_killed_midway_keeps_every_parked_letter() {
    const TEST: &str = "a_jsonl_burst_killed_midway_keeps_every_parked_letter";
    if let Ok(path) = std::env::var(CHILD) {
        return burst_until_killed(&path, true);
    }
    let dir = tempdir::TempDir::new("dlq-kill-jsonl");
    let path = dir.file("dlq.jsonl");
    let reported = kill_mid_burst(TEST, &path);

    let sink = JsonlSink::open(&path).unwrap();
    // At most the group being written when the kill landed is torn, and it was cut off.
    let torn = sink.torn().cloned();
    drop(sink);
    let stored: Vec<(String, u32)> = JsonlReader::open(&path)
        .unwrap()
        .map(|line| match line.unwrap() {
            JsonlLine::Letter(l) => (l.msg_id, l.attempts),
            other => panic!("only whole letters are left in the file: {other:?} (torn: {torn:?})"),
        })
        .collect();
    assert_none_lost(&reported, &stored, "jsonl");
    // Clean now: every line whole.
    let sink = JsonlSink::open(&path).unwrap();
    assert!(sink.torn().is_none());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    assert_eq!(text.lines().count(), stored.len());
}

#[test]
fn a_sqlite_burst_killed_midway_keeps_every_parked_letter() {
    const TEST: &str = "a_sqlite_burst_killed_midway_keeps_every_parked_letter";
    if let Ok(path) = std::env::var(CHILD) {
        return burst_until_killed(&path, false);
    }
    let dir = tempdir::TempDir::new("dlq-kill-sqlite");
    let path = dir.file("dlq.sqlite3");
    let reported = kill_mid_burst(TEST, &path);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = SqliteDeadLetters::open(&path).unwrap();
    let stored: Vec<(String, u32)> = runtime
        .block_on(store.page(&Page::first(usize::MAX)))
        .unwrap()
        .into_iter()
        .map(|l| (l.msg_id, l.attempts))
        .collect();
    assert_none_lost(&reported, &stored, "sqlite");
}
