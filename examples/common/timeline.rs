//! What the loopback examples (`demo`, `reqwest_client`) share: a timeline printed in
//! milliseconds since the program started, and a scratch directory for their files.

use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

/// When the program started: the first call fixes it.
pub(crate) fn start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// One line of the timeline: `  1383 ms  client   A-3 gave up ...`.
pub(crate) fn event(who: &str, what: fmt::Arguments<'_>) {
    println!("{:>6} ms  {who:<8} {what}", start().elapsed().as_millis());
}

/// A directory of the program's own under the system's temporary directory, removed when
/// dropped unless `keep` (the example's `--keep`, to look at the files afterwards).
pub(crate) struct Scratch {
    pub(crate) dir: PathBuf,
    pub(crate) keep: bool,
}

impl Scratch {
    /// `retry-core-NAME-PID`, created.
    pub(crate) fn new(name: &str, keep: bool) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("retry-core-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch { dir, keep })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
