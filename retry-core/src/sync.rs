//! The locks that guard shared state, named once so the model checker can swap them: std's in
//! every build, loom's under `--cfg retry_core_loom`, where `tests/loom.rs` explores every
//! interleaving of concurrent callers. (A cfg of our own, not `loom`: tokio reads `cfg(loom)`
//! too and would switch itself to a loom build it cannot compile as a dependency.)

#[cfg(retry_core_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(retry_core_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
