//! The store conformance suite (`retry_core::idempotency::conformance`) on retry-core's own store,
//! `MemoryStore`. The engines run it on theirs: `retry-sqlite/tests/conformance.rs` (a new file
//! per check) and `retry-postgres/tests/conformance.rs` (a new schema per check, on the server of
//! `DATABASE_URL`; without one the test fails, never passes).

use retry_core::idempotency::{MemoryStore, conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    conformance::run(async || MemoryStore::new()).await;
}
