//! One multi-thread runtime shared by every case of a property test: a case is a few
//! microseconds to milliseconds of work, far less than building a runtime.

use std::sync::LazyLock;

pub(crate) static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});
