//! The store conformance suite (`retry_core::idempotency::conformance`) on every built-in store:
//! `MemoryStore`, `SqliteStore` (feature `sqlite`, on by default) and `PgStore` (feature
//! `postgres`, on a server at `DATABASE_URL`; without one the test fails, never passes).
//!
//! Each check gets a fresh store: a new file for SQLite, a new schema for PostgreSQL (the
//! `tests/pg_store.rs` harness), so the suite's purges never see another test's rows.

use retry_core::idempotency::{MemoryStore, conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    conformance::run(async || MemoryStore::new()).await;
}

#[cfg(feature = "sqlite")]
use crate::tempdir;

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms() {
    use retry_sqlite::SqliteStore;

    let dir = tempdir::TempDir::new("conformance");
    let mut made = 0;
    conformance::run(async || {
        made += 1;
        SqliteStore::open(dir.file(&format!("check-{made}.sqlite3")))
            .unwrap_or_else(|e| panic!("opening a fresh SqliteStore in {:?}: {e}", dir.0))
    })
    .await;
}

#[cfg(feature = "postgres")]
use crate::pg;

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_store_conforms() {
    let mut schemas = Vec::new();
    let report = conformance::check_all(async || {
        // `Schema::new` fails loudly without DATABASE_URL or a reachable server.
        let schema = pg::Schema::new(&format!("conf_{}", schemas.len())).await;
        let store = schema.store().await;
        schemas.push(schema);
        store
    })
    .await;
    // Dropped whatever the outcome: the report says what each failed check found, and a run that
    // fails would otherwise leave a schema per check behind in the shared database.
    for schema in schemas {
        schema.drop_all().await;
    }
    assert!(report.passed(), "{report}");
}
