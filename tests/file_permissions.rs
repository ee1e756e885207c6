//! Files that hold payloads are readable by their owner only when retry-core creates them: the
//! SQLite idempotency store (stored responses), the SQLite dead-letter table (originals) and
//! their WAL and shared-memory files. (The JSONL sink's own check is in `dlq_jsonl.rs`.)
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use retry_core::dlq::{DeadLetter, DeadLetterSink, FailureClass, SqliteDeadLetters};
use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore, SqliteStore};

#[path = "common/tempdir.rs"]
mod tempdir;

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
    letters
        .park(&DeadLetter {
            msg_id: "M-1".into(),
            original: serde_json::json!({"card": "4111"}),
            reason: "gave up".into(),
            attempts: 3,
            first_failed_at: "2026-08-19T02:11:03+09:00".into(),
            last_failed_at: "2026-08-19T02:12:47+09:00".into(),
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
        })
        .await
        .unwrap();

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

#[test]
fn an_existing_file_keeps_the_permissions_its_owner_gave_it() {
    let dir = tempdir::TempDir::new("permissions-existing");
    let path = dir.file("shared.sqlite3");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let _store = SqliteStore::open(&path).unwrap();
    assert_eq!(mode(&path), 0o640);
}
