//! This test binary run again as a child process for one test, told by an environment variable
//! that it is the child, with its stdout read line by line.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// Runs `test` alone again in a child with `env=value`; stderr goes to this test's, stdout is
/// read off on a thread and sent, line by line, on the returned channel. `stdin`: what the child
/// reads (piped when the test tells it when to stop).
pub(crate) fn rerun(
    test: &str,
    env: &str,
    value: impl AsRef<OsStr>,
    stdin: Stdio,
) -> (Child, Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(env, value)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Waits for the child's line ending in `marker`, at most 30 s without a line.
pub(crate) fn wait_for_line(
    lines: &Receiver<String>,
    marker: &str,
) -> Result<(), RecvTimeoutError> {
    loop {
        match lines.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.ends_with(marker) => return Ok(()),
            Ok(_) => continue,
            Err(e) => return Err(e),
        }
    }
}
