//! Files that hold payloads are readable by their owner only when retry-core creates them: the
//! SQLite idempotency store (stored responses), the SQLite dead-letter table (originals) and
//! their WAL and shared-memory files, and the JSONL dead-letter file with the `.torn` file
//! beside it and the new file a sink starts when its file was moved away. The JSONL sink also refuses a symbolic
//! link at its path and a file of another user. (Its warning when it narrows a wider file is
//! checked in `dlq_jsonl.rs`.)
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use retry_core::dlq::{DeadLetter, DeadLetterSink, FailureClass, JsonlReader, JsonlSink};
use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore};
use retry_sqlite::SqliteDeadLetters;
use retry_sqlite::SqliteStore;

use crate::tempdir;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn with_suffix(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

#[tokio::test]
async fn sqlite_files_holding_payloads_are_owner_only() {
    let dir = tempdir::TempDir::new("permissions");
    let inbox_path = dir.file("inbox.sqlite3");
    let inbox = SqliteStore::open(&inbox_path).unwrap();
    let request = ClaimRequest {
        key: "k",
        biz_key: "k",
        fingerprint: None,
        lease: std::time::Duration::from_secs(30),
        retention: std::time::Duration::from_secs(3600),
    };
    let ClaimOutcome::Claimed(claim) = inbox.claim(&request).await.unwrap() else {
        panic!("first claim")
    };
    inbox.complete(&claim, "{\"card\":\"4111\"}").await.unwrap();

    let letters_path = dir.file("dlq.sqlite3");
    let letters = SqliteDeadLetters::open(&letters_path).unwrap();
    letters.park(&card_letter("M-1")).await.unwrap();

    for path in [&inbox_path, &letters_path] {
        for suffix in ["", "-wal", "-shm"] {
            let file = with_suffix(path, suffix);
            assert_eq!(
                mode(&file),
                0o600,
                "{} is readable by others",
                file.display()
            );
        }
    }
}

/// A letter whose original holds a card number.
fn card_letter(msg_id: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.into(),
        original: serde_json::json!({"card": "4111"}),
        reason: "gave up".into(),
        attempts: 3,
        first_failed_at: instant("2026-08-19T02:11:03+09:00"),
        last_failed_at: instant("2026-08-19T02:12:47+09:00"),
        trace_id: "t".into(),
        class: FailureClass::System,
        error_type: "E".into(),
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
async fn jsonl_files_holding_letters_are_owner_only() {
    let dir = tempdir::TempDir::new("permissions-jsonl");
    let path = dir.file("dlq.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    sink.park(&card_letter("M-1")).await.unwrap();
    sink.park(&card_letter("M-2")).await.unwrap();
    assert_eq!(mode(&path), 0o600);
    // Moved away while open (archived after an import): the file the sink starts at the path
    // is owner-only too.
    let archived = dir.file("dlq.jsonl.imported");
    std::fs::rename(&path, &archived).unwrap();
    sink.park(&card_letter("M-3")).await.unwrap();
    drop(sink);
    assert_eq!(
        std::fs::read_to_string(&archived).unwrap().lines().count(),
        2
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    assert_eq!(mode(&path), 0o600);
    // A torn line is kept aside, owner-only.
    let mut text = std::fs::read(&path).unwrap();
    text.extend_from_slice(b"{\"msg_id\":\"M-3\",\"original\":{\"card\":\"41");
    std::fs::write(&path, text).unwrap();
    assert!(JsonlSink::open(&path).unwrap().torn().is_some());
    assert_eq!(mode(&with_suffix(&path, ".torn")), 0o600);
}

#[test]
fn a_jsonl_sink_does_not_follow_a_link_or_write_another_users_file() {
    let dir = tempdir::TempDir::new("permissions-jsonl-link");
    let path = dir.file("dlq.jsonl");
    drop(JsonlSink::open(&path).unwrap());

    // A link to the file, and a dangling link to where one would be created.
    let link = dir.file("link.jsonl");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let elsewhere = dir.file("elsewhere.jsonl");
    let dangling = dir.file("dangling.jsonl");
    std::os::unix::fs::symlink(&elsewhere, &dangling).unwrap();
    for link in [&link, &dangling] {
        let errors = [
            JsonlSink::open(link).unwrap_err(),
            JsonlReader::open(link).unwrap_err(),
        ];
        for error in errors {
            let error = retry_core::error_chain(&error).to_string();
            assert!(
                error.contains("symbolic link") && error.contains(&link.display().to_string()),
                "{error}"
            );
        }
    }
    assert!(!elsewhere.exists(), "nothing created where the link points");

    // Another user's file: refused for writing, readable (to import it). (Giving it away
    // needs root, as the fault tests do.)
    let theirs = dir.file("theirs.jsonl");
    std::fs::write(&theirs, "").unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534))
        .expect("this test gives a file to uid 65534, which needs root");
    let error = retry_core::error_chain(&JsonlSink::open(&theirs).unwrap_err()).to_string();
    assert!(error.contains("owned by uid 65534"), "{error}");
    JsonlReader::open(&theirs).unwrap();
}

/// SQLite's choice; the JSONL sink narrows a wider file to 0600 (see `JsonlSink`'s docs).
#[test]
fn an_existing_file_keeps_the_permissions_its_owner_gave_it() {
    let dir = tempdir::TempDir::new("permissions-existing");
    let path = dir.file("shared.sqlite3");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let _store = SqliteStore::open(&path).unwrap();
    assert_eq!(mode(&path), 0o640);
}

/// The instant an RFC 3339 time the test spells out stands for.
fn instant(text: &str) -> std::time::SystemTime {
    retry_core::time::parse_rfc3339(text).unwrap_or_else(|| panic!("{text:?} is not RFC 3339"))
}
