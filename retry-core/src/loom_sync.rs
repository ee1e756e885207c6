//! The locks that guard shared state, and the thread-locals, named once so the model checker
//! can swap them: std's in every build, loom's under `--cfg retry_core_loom`, where
//! `tests/loom.rs` explores every interleaving of concurrent callers. (A cfg of our own, not
//! `loom`: tokio reads `cfg(loom)` too and would switch itself to a loom build it cannot compile
//! as a dependency.)

#[cfg(retry_core_loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(retry_core_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(retry_core_loom))]
pub(crate) use std::sync::atomic::AtomicU64;
#[cfg(not(retry_core_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// A per-thread `static`, the same way: `thread_local!` with a `const` initialiser in every
/// build, `loom::thread_local!` under `--cfg retry_core_loom` (loom runs its model threads on
/// one OS thread, so only its own thread-locals are per model thread).
macro_rules! thread_local_cell {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(retry_core_loom))]
        thread_local! {
            $(#[$attr])*
            static $name: $ty = const { $init };
        }
        #[cfg(retry_core_loom)]
        loom::thread_local! {
            static $name: $ty = $init;
        }
    };
}
pub(crate) use thread_local_cell;
