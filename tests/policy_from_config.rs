//! `cargo run --example policy_from_config` reads the policy of examples/policy.toml and retries
//! with it; a configuration file with a mistake stops it at start with the line and the reason.

use crate::example;
use crate::tempdir;

#[test]
fn the_example_retries_with_the_policy_of_its_configuration_file() {
    let stdout = example::stdout_of_success("policy_from_config", &[]);
    assert!(
        stdout.contains("upstream http://quotes.internal:8080 (connect timeout 500ms)"),
        "{stdout}"
    );
    // The policy as read, written back in the canonical form.
    for line in [
        "[retry]",
        "max_attempts = 4",
        "base = \"50ms\"",
        "cap = \"1s\"",
        "jitter = \"full\"",
        "deadline = \"10s\"",
        "attempt_timeout = \"2s\"",
        "max_retry_after = \"5m\"",
        "[retry.budget]",
        "ttl = \"10s\"",
        "min_per_sec = 10",
        "retry_ratio = 0.1",
    ] {
        assert!(stdout.lines().any(|l| l == line), "{line:?} in:\n{stdout}");
    }
    let retries: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("attempt "))
        .collect();
    assert_eq!(retries.len(), 2, "{stdout}");
    assert!(
        retries[0].contains(
            "attempt 1 failed: http://quotes.internal:8080 reset the connection -> wait "
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("quote: AAPL 187.25 after 3 attempts"),
        "{stdout}"
    );
}

#[test]
fn a_mistake_in_the_configuration_stops_it_with_the_line_and_the_reason() {
    let dir = tempdir::TempDir::new("policy-config");
    let original =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policy.toml"))
            .unwrap();
    for (mistake, replacement, says) in [
        (
            "base = \"50ms\"",
            "base = \"0.05s\"",
            "fractions are not supported",
        ),
        (
            "deadline = \"10s\"",
            "deadline = \"0s\"",
            "`deadline` must be longer than zero",
        ),
        (
            "max_attempts = 4",
            "max = 4",
            "unknown field `max`, expected one of `max_attempts`",
        ),
    ] {
        assert!(original.contains(mistake), "{mistake}");
        let path = dir.file("policy.toml");
        std::fs::write(&path, original.replace(mistake, replacement)).unwrap();
        let output = example::run("policy_from_config", &[path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{replacement}: {stderr}");
        assert!(
            stderr.contains("configuration error") && stderr.contains(says),
            "{replacement}: {stderr}"
        );
        // toml shows the line of the mistake.
        assert!(
            stderr.contains(replacement.split(" = ").next().unwrap()),
            "{stderr}"
        );
        assert!(output.stdout.is_empty(), "nothing ran");
    }
}
