//! `PgStore` against the same SQL issued directly through tokio-postgres (BENCHMARKS.md,
//! "Idempotency stores"): claim + complete throughput and duplicate replay at 1, 8 and 64
//! concurrent callers, on a 2-worker Tokio runtime. Prints the markdown table with the ratios.
//!
//! The raw side is what a careful hand-written service does: a deadpool-postgres pool of the
//! same size and settings as the store's (fast recycling, no TLS), prepared statements cached per
//! connection; the claim of a new key is the store's two statements, its read of the row (which
//! finds none) and its `INSERT .. ON CONFLICT DO NOTHING` in autocommit, the completion the
//! store's guarded `UPDATE` in autocommit, the replay a primary-key `SELECT`.
//! Both sides start from new, empty tables: the run creates a schema of its own
//! (`retry_core_bench_<pid>`), puts it first on both pools' `search_path` (so the store creates
//! its `inbox_log` there, next to the raw table `retry_core_bench_raw`), and drops it at the end.
//! The database's own `inbox_log`, if any, is not touched: a table that carries the dead rows and
//! statistics of other work would be planned differently from the raw side's new one.
//!
//! `DATABASE_URL=postgres://... cargo bench --bench pg_store --features postgres`

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Pool;
use retry_postgres::PgStore;
use support::store::{
    Config, REPLAY_KEYS, RESPONSE, compare, in_schema, pg_pool, print_table, store_claim_complete,
    store_replay,
};
use tokio_postgres::NoTls;

const RAW_TABLE: &str = "CREATE TABLE retry_core_bench_raw (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('in_progress', 'done', 'failed', 'released')),
    response TEXT,
    created_at timestamptz NOT NULL,
    fingerprint TEXT,
    token BIGINT NOT NULL,
    lease_until timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX retry_core_bench_raw_created_at ON retry_core_bench_raw (created_at);";
/// The floor: what a hand-written dedup issues on a table of the store's layout (its columns
/// and types): the claim inserted unless the key is there, the completing update, and a plain
/// primary-key read for the replay (without the store's `FOR UPDATE` and clock reads).
const INSERT_CLAIM: &str = "INSERT INTO retry_core_bench_raw \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES ($1, $2, 'in_progress', NULL, $3, $4, 1, $5, $6) \
     ON CONFLICT (msg_id) DO NOTHING";
const COMPLETE: &str = "UPDATE retry_core_bench_raw SET status = 'done', response = $1 \
     WHERE msg_id = $2 AND token = $3 AND status = 'in_progress'";
const READ_ROW: &str = "SELECT status, response, fingerprint, token, lease_until, expires_at \
     FROM retry_core_bench_raw WHERE msg_id = $1";
const SELECT_ROW: &str = "SELECT status, response, fingerprint, token, lease_until \
     FROM retry_core_bench_raw WHERE msg_id = $1";

/// A fixed instant `seconds` after 2026-01-01T00:00:00Z, bound as `timestamptz` as the store
/// binds its times.
fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600 + seconds)
}

async fn raw_claim_complete(pool: Pool, key: String) {
    let client = pool.get().await.expect("a raw connection");
    let read = client.prepare_cached(READ_ROW).await.expect("prepare");
    let insert = client.prepare_cached(INSERT_CLAIM).await.expect("prepare");
    let row = client.query_opt(&read, &[&key]).await.expect("read");
    assert!(row.is_none(), "raw claim of {key}: the key is new");
    let inserted = client
        .execute(
            &insert,
            &[&key, &key, &at(0), &None::<String>, &at(30), &at(86_400)],
        )
        .await
        .expect("insert");
    assert_eq!(inserted, 1, "raw claim of {key}");
    drop(client);
    let client = pool.get().await.expect("a raw connection");
    let complete = client.prepare_cached(COMPLETE).await.expect("prepare");
    let changed = client
        .execute(&complete, &[&RESPONSE, &key, &1_i64])
        .await
        .expect("update");
    assert_eq!(changed, 1, "raw complete of {key}");
}

async fn raw_replay(pool: Pool, key: String) {
    let client = pool.get().await.expect("a raw connection");
    let select = client.prepare_cached(SELECT_ROW).await.expect("prepare");
    let row = client.query_one(&select, &[&key]).await.expect("select");
    let (status, response): (String, Option<String>) = (row.get(0), row.get(1));
    assert!(status == "done" && response.as_deref() == Some(RESPONSE));
}

fn main() {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!(
            "pg_store bench: DATABASE_URL is not set. Point it at a throwaway PostgreSQL database \
             (postgres://user@host:port/db); the bench creates and drops a schema of its own \
             there (retry_core_bench_<pid>)."
        );
        std::process::exit(2);
    };
    let config = Config::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let prefix = format!("bench-{}-", std::process::id());
    let schema = format!("retry_core_bench_{}", std::process::id());

    let (rows, pool_size) = rt.block_on(async {
        let (admin, connection) = tokio_postgres::connect(&url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        tokio::spawn(connection);
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .expect("create the bench's schema");
        // Both pools see the bench's schema first, so each side's tables are new ones there.
        let url = in_schema(&url, &schema);
        let store = Arc::new(
            PgStore::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("PgStore::connect({url}): {e}")),
        );
        let pool_size = store.pool().status().max_size;
        let raw = pg_pool(&url, pool_size);
        {
            let client = raw.get().await.expect("a raw connection");
            client
                .batch_execute(&format!(
                    "DROP TABLE IF EXISTS retry_core_bench_raw; {RAW_TABLE}"
                ))
                .await
                .expect("create the raw table");
        }

        // The keys replayed later, which also checks that both sides do the work.
        for i in 0..REPLAY_KEYS {
            raw_claim_complete(raw.clone(), format!("{prefix}r-{i}")).await;
            store_claim_complete(Arc::clone(&store), format!("{prefix}r-{i}")).await;
        }
        raw_replay(raw.clone(), format!("{prefix}r-0")).await;
        store_replay(Arc::clone(&store), format!("{prefix}r-0")).await;

        let mut next = 0;
        let mut rows = {
            let (raw, store, p1, p2) = (
                raw.clone(),
                Arc::clone(&store),
                prefix.clone(),
                prefix.clone(),
            );
            compare(
                "claim + complete",
                config,
                config.claim_ops,
                &mut next,
                move |n| raw_claim_complete(raw.clone(), format!("{p1}k-{n}")),
                move |n| store_claim_complete(Arc::clone(&store), format!("{p2}k-{n}")),
            )
            .await
        };
        {
            let (raw, store, p1, p2) = (
                raw.clone(),
                Arc::clone(&store),
                prefix.clone(),
                prefix.clone(),
            );
            rows.extend(
                compare(
                    "duplicate replay",
                    config,
                    config.replay_ops,
                    &mut next,
                    move |n| raw_replay(raw.clone(), format!("{p1}r-{}", n % REPLAY_KEYS)),
                    move |n| store_replay(Arc::clone(&store), format!("{p2}r-{}", n % REPLAY_KEYS)),
                )
                .await,
            );
        }

        drop((store, raw));
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("drop the bench's schema");
        (rows, pool_size)
    });
    println!(
        "\nPgStore vs raw tokio-postgres + deadpool ({pool_size} connections each), {} rounds (medians), {} claim + complete and {} replays per measurement\n",
        config.rounds, config.claim_ops, config.replay_ops
    );
    print_table("PgStore", &rows);
}
