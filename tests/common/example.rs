//! Runs an example of this package the way the README tells people to: `cargo run --example`.
#![allow(dead_code)]

use std::process::{Command, Output};

/// This test binary's features of the root package, comma-separated. Examples are built with
/// exactly these, so running one under `--all-features` neither rebuilds the crates with other
/// features nor leaves out a feature the example needs (`postgres`). A new feature of the root
/// package belongs in this list.
pub(crate) fn features() -> String {
    [
        ("http", cfg!(feature = "http")),
        ("reqwest", cfg!(feature = "reqwest")),
        ("reqwest-middleware", cfg!(feature = "reqwest-middleware")),
        ("serde", cfg!(feature = "serde")),
        ("tonic", cfg!(feature = "tonic")),
        ("tower", cfg!(feature = "tower")),
        ("sqlite", cfg!(feature = "sqlite")),
        ("postgres", cfg!(feature = "postgres")),
        ("ui-tests", cfg!(feature = "ui-tests")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect::<Vec<_>>()
    .join(",")
}

/// `cargo run --quiet --example NAME -- ARGS` from the package's directory, with this test
/// binary's features; not run yet, so a test can change its environment.
pub(crate) fn command(name: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO"));
    command
        .args(["run", "--quiet", "--no-default-features", "--features"])
        .arg(features())
        .args(["--example", name, "--"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

/// Runs `cargo run --example NAME -- ARGS` (see [`command`]) to the end.
pub(crate) fn run(name: &str, args: &[&str]) -> Output {
    command(name, args).output().expect("cargo runs")
}

/// The stdout of an example run that must succeed; a failure shows both outputs.
pub(crate) fn stdout_of_success(name: &str, args: &[&str]) -> String {
    success(name, run(name, args))
}

/// The stdout of `output`, which must be a success; a failure shows both outputs.
pub(crate) fn success(name: &str, output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "example {name} failed ({})\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
