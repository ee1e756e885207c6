//! One duration grammar: the table of `retry-duration-table` (tests/durations) read by the
//! attribute, by a `Policy` from JSON and TOML, and by the grammar itself, with the same result
//! for every string and, for a string it refuses, the same message. `retry-dlq/tests/durations.rs`
//! runs the same table through the command.
//!
//! The attribute's side: valid strings are expanded below by `valid_durations!`, and the wait
//! each one makes is read back; invalid ones are in `tests/ui/duration_table.rs`, whose
//! `.stderr` (checked against the compiler by `tests/ui.rs`) is read here.

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use retry_core::{Policy, duration, retryable};
use retry_duration_table::{INVALID, VALID, valid_durations};

/// The grammar's own message for a string it refuses.
fn grammar_error(text: &str) -> String {
    match duration::parse(text) {
        Ok(read) => panic!("{text:?} is in the table as invalid, but reads as {read:?}"),
        Err(error) => error.to_string(),
    }
}

/// The `error: ...` lines of a UI case's expected output, in order.
fn ui_errors(case: &str) -> Vec<String> {
    let path = format!("{}/tests/ui/{case}.stderr", env!("CARGO_MANIFEST_DIR"));
    let stderr = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    stderr
        .lines()
        .filter_map(|line| line.strip_prefix("error: "))
        .map(str::to_owned)
        .collect()
}

/// A policy with one field set to `text`, as JSON.
fn json_policy(field: &str, text: &str) -> Result<Policy, String> {
    let config = serde_json::json!({ field: text }).to_string();
    serde_json::from_str(&config).map_err(|e| e.to_string())
}

/// A policy with one field set to `text`, read from JSON and from TOML.
fn read_policy(field: &str, text: &str) -> [(&'static str, Result<Policy, String>); 2] {
    let toml = format!("{field} = {}", toml::Value::String(text.to_owned()));
    [
        ("JSON", json_policy(field, text)),
        ("TOML", toml::from_str(&toml).map_err(|e| e.to_string())),
    ]
}

#[test]
fn the_table_says_what_the_grammar_says() {
    for (text, expected) in VALID {
        assert_eq!(duration::parse(text), Ok(*expected), "{text:?}");
    }
    for (text, says) in INVALID {
        let message = grammar_error(text);
        assert!(message.contains(says), "{text:?}: {message}");
    }
}

/// The wait each valid string makes as `base` (and `cap`) of `#[retryable]`, with no jitter:
/// exactly the duration the table gives.
macro_rules! through_the_attribute {
    ($(($text:tt, $secs:expr, $nanos:expr)),* $(,)?) => {{
        let mut waits: Vec<(&str, Duration)> = Vec::new();
        $({
            static WAIT: Mutex<Option<Duration>> = Mutex::new(None);
            fn record(_attempt: u32, _error: &io::Error, wait: Duration) {
                *WAIT.lock().unwrap() = Some(wait);
            }
            #[retryable(max = 2, base = $text, cap = $text, jitter = "none", on_retry = record)]
            async fn refused() -> io::Result<()> {
                Err(io::ErrorKind::ConnectionRefused.into())
            }
            assert!(refused().await.is_err());
            let wait = WAIT.lock().unwrap().take().expect("one retry, so one wait");
            waits.push(($text, wait));
        })*
        waits
    }};
}

#[tokio::test(start_paused = true)]
async fn the_attribute_reads_every_valid_string_as_the_table_does() {
    let waits = valid_durations!(through_the_attribute);
    assert_eq!(waits, VALID);
}

#[test]
fn the_attribute_refuses_every_invalid_string_with_the_grammar_message() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ui/duration_table.rs");
    let source = std::fs::read_to_string(path).unwrap();
    let written: Vec<&str> = source
        .lines()
        .filter_map(|line| {
            line.strip_prefix("#[retryable(base = \"")?
                .strip_suffix("\")]")
        })
        .collect();
    let invalid: Vec<&str> = INVALID.iter().map(|(text, _)| *text).collect();
    assert_eq!(
        written, invalid,
        "tests/ui/duration_table.rs is the table's invalid strings"
    );

    let expected: Vec<String> = invalid.iter().map(|text| grammar_error(text)).collect();
    assert_eq!(ui_errors("duration_table"), expected);
}

#[test]
fn a_policy_from_json_or_toml_reads_every_valid_string_as_the_table_does() {
    // `max_retry_after`: a knob no other rule ties to another (`base` must not exceed `cap`).
    for (text, expected) in VALID {
        for (format, read) in read_policy("max_retry_after", text) {
            let policy = read.unwrap_or_else(|e| panic!("{format} {text:?}: {e}"));
            assert_eq!(
                policy.knobs().max_retry_after,
                *expected,
                "{format} {text:?}"
            );
        }
        // Written back in the canonical form, which reads back as the same duration.
        let policy = json_policy("max_retry_after", text).unwrap();
        let written = serde_json::to_value(&policy).unwrap();
        let canonical = duration::format(*expected).to_string();
        assert_eq!(written["max_retry_after"], canonical.as_str(), "{text:?}");
        let again: Policy = serde_json::from_value(written).unwrap();
        assert_eq!(
            again.knobs().max_retry_after,
            *expected,
            "{text:?} as {canonical:?}"
        );
    }
}

#[test]
fn a_policy_from_json_or_toml_refuses_every_invalid_string_with_the_grammar_message() {
    for field in [
        "base",
        "cap",
        "deadline",
        "attempt_timeout",
        "max_retry_after",
    ] {
        for (text, _) in INVALID {
            let message = grammar_error(text);
            for (format, read) in read_policy(field, text) {
                let error = read
                    .err()
                    .unwrap_or_else(|| panic!("{format} {field} = {text:?}"));
                assert!(
                    error.contains(&message),
                    "{format} {field} = {text:?}: {error}\nexpected: {message}"
                );
            }
        }
    }
}

/// A zero `deadline` or `attempt_timeout` is a valid duration but not a valid knob: the
/// attribute (tests/ui/zero_deadline.rs), configuration and the builder refuse it in the same
/// words.
#[test]
fn a_zero_deadline_or_attempt_timeout_is_refused_alike_everywhere() {
    let from_the_attribute = ui_errors("zero_deadline");
    let from_the_builder = |build: fn() -> Policy| {
        let panic = std::panic::catch_unwind(build).expect_err("the builder refuses zero");
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .expect("a text panic")
    };
    let builder: [fn() -> Policy; 2] = [
        || Policy::new().deadline(Duration::ZERO),
        || Policy::new().attempt_timeout(Duration::ZERO),
    ];
    for ((field, build), attribute) in ["deadline", "attempt_timeout"]
        .into_iter()
        .zip(builder)
        .zip(&from_the_attribute)
    {
        let message = from_the_builder(build);
        assert!(message.starts_with(&format!("`{field}` must be longer than zero")));
        assert_eq!(attribute, &message, "{field}");
        for zero in ["0s", "0ms", "0h0m"] {
            for (format, read) in read_policy(field, zero) {
                let error = read
                    .err()
                    .unwrap_or_else(|| panic!("{format} {field} = {zero:?}"));
                assert!(error.contains(&message), "{format} {field}: {error}");
            }
        }
    }
    assert_eq!(from_the_attribute.len(), 2, "{from_the_attribute:?}");
}
