//! Runs an example of this package the way the README tells people to: `cargo run --example`.

use std::process::{Command, Output};

/// `cargo run --quiet --example NAME -- ARGS`, from the package's directory.
pub(crate) fn run(name: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--example", name, "--"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs")
}

/// The stdout of an example run that must succeed; a failure shows both outputs.
pub(crate) fn stdout_of_success(name: &str, args: &[&str]) -> String {
    let output = run(name, args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "example {name} failed ({})\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
