//! The command's durations are the library's: the table of `retry-duration-table` (which
//! `tests/duration_grammar.rs` at the root runs through `#[retryable]` and `Policy`'s
//! configuration) read by every duration option, with the grammar's own message for a string it
//! refuses. Zero, a valid duration, is refused here as a value: every option bounds something.

use std::path::Path;
use std::process::Output;

use retry_duration_table::{INVALID, VALID};
use retry_sqlite::SqliteDeadLetters;

/// `retry-dlq --sqlite PATH ARGS...`, without the store variables of the environment.
fn run(store: &Path, args: &[&str]) -> Output {
    assert_cmd::Command::new(env!("CARGO_BIN_EXE_retry-dlq"))
        .env_remove("RETRY_DLQ_JSONL")
        .env_remove("RETRY_DLQ_SQLITE")
        .env_remove("DATABASE_URL")
        .arg("--sqlite")
        .arg(store)
        .args(args)
        .output()
        .unwrap()
}

fn status_and_stderr(output: &Output) -> (Option<i32>, String) {
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// An empty SQLite store in a fresh directory (removed when the guard drops).
struct Store(std::path::PathBuf);

impl Store {
    fn new(name: &str) -> Store {
        let dir =
            std::env::temp_dir().join(format!("retry-dlq-durations-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dlq.sqlite");
        drop(SqliteDeadLetters::open(&path).unwrap());
        Store(path)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Each duration option, as the arguments that give it `text` on an empty store (the other
/// options a command needs included; `redrive --dry-run` sends nothing).
fn options(text: &str) -> [(&'static str, Vec<String>); 4] {
    let redrive = |option: &str| {
        [
            "redrive",
            "--to",
            "http://127.0.0.1:9/letters",
            "--who",
            "duration-test",
            "--dry-run",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("{option}={text}")])
        .collect()
    };
    [
        (
            "--max-age",
            vec![
                "stats".to_owned(),
                "--check".to_owned(),
                format!("--max-age={text}"),
            ],
        ),
        ("--older-than", redrive("--older-than")),
        ("--retention", redrive("--retention")),
        ("--timeout", redrive("--timeout")),
    ]
}

#[test]
fn every_duration_option_reads_the_table_as_the_library_does() {
    let store = Store::new("table");
    for (text, duration) in VALID {
        for (option, args) in options(text) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (status, stderr) = status_and_stderr(&run(&store.0, &args));
            if duration.is_zero() {
                assert_eq!(status, Some(2), "{option}={text}: {stderr}");
                assert!(
                    stderr.contains(option) && stderr.contains("is zero"),
                    "{option}={text}: {stderr}"
                );
            } else {
                assert_eq!(status, Some(0), "{option}={text}: {stderr}");
            }
        }
    }
    for (text, _) in INVALID {
        let message = retry_core::duration::parse(text).unwrap_err().to_string();
        for (option, args) in options(text) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (status, stderr) = status_and_stderr(&run(&store.0, &args));
            assert_eq!(status, Some(2), "{option}={text}: {stderr}");
            assert!(
                stderr.contains(option) && stderr.contains(&message),
                "{option}={text:?}: {stderr}\nexpected: {message}"
            );
        }
    }
}

/// The case that started it: `--timeout 500ms` was refused while `base = "500ms"` was read.
#[test]
fn a_timeout_in_milliseconds_is_read_as_the_attribute_reads_it() {
    let store = Store::new("millis");
    let output = run(
        &store.0,
        &[
            "redrive",
            "--to",
            "http://127.0.0.1:9/letters",
            "--who",
            "duration-test",
            "--timeout",
            "500ms",
            "--dry-run",
        ],
    );
    let (status, stderr) = status_and_stderr(&output);
    assert_eq!(status, Some(0), "{stderr}");
}

#[test]
fn the_help_shows_the_grammar() {
    let store = Store::new("help");
    for command in ["stats", "redrive"] {
        let output = run(&store.0, &[command, "--help"]);
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(
            help.contains("Durations (--max-age, --older-than, --retention, --timeout):")
                && help.contains("500ms, 30s, 15m, 1h30m, 2d"),
            "{command}: {help}"
        );
    }
}
