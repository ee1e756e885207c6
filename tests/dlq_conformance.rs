//! The dead-letter conformance suite (`retry_core::dlq::conformance`) on retry-core's own store,
//! each check on a fresh one. The engines run it on theirs: `retry-sqlite/tests/conformance.rs`
//! and `retry-postgres/tests/conformance.rs`. (`JsonlSink` only parks: it is not a store.)

use retry_core::dlq::{MemoryDeadLetters, conformance};

#[tokio::test]
async fn memory_dead_letters_conform() {
    conformance::run(async || MemoryDeadLetters::new()).await;
}
