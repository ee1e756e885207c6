//! `SqliteStore` against the same SQL issued directly through rusqlite (BENCHMARKS.md,
//! "Idempotency stores"): claim + complete throughput and duplicate replay at 1, 8 and 64
//! concurrent callers, on a 2-worker Tokio runtime. Prints the markdown table with the ratios.
//!
//! The raw side is what a careful hand-written service does: a pool of 4 rusqlite connections
//! (WAL, `synchronous=NORMAL`, 5 s busy timeout) behind a Tokio semaphore with a
//! permit per connection, taken before `spawn_blocking` runs each operation. It issues the
//! store's statements for the same work: the claim of a new key is the store's read of the row
//! (which finds none) and its `INSERT .. ON CONFLICT DO NOTHING`, the completion its guarded
//! `UPDATE`, each in autocommit as the store runs them; the replay a primary-key `SELECT`.
//!
//! `cargo bench --bench sqlite_store` (`STORE_BENCH_OPS`, `STORE_BENCH_ROUNDS` scale it).

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_sqlite::SqliteStore;
use rusqlite::{Connection, OptionalExtension, params};
use support::store::{
    Config, REPLAY_KEYS, RESPONSE, compare, print_table, store_claim_complete, store_replay,
};
use tokio::sync::Semaphore;

/// The store's table, as `SqliteStore` creates it.
const TABLE: &str = "CREATE TABLE IF NOT EXISTS inbox_log (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('in_progress', 'done', 'failed', 'released')),
    response TEXT,
    created_at TEXT NOT NULL,
    fingerprint TEXT,
    token INTEGER NOT NULL,
    lease_until TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_log_created_at ON inbox_log (created_at);";
/// The store's statements, verbatim.
const INSERT_CLAIM: &str = "INSERT INTO inbox_log \
     (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) \
     VALUES (?1, ?2, 'in_progress', NULL, ?3, ?4, 1, ?5, ?6) \
     ON CONFLICT(msg_id) DO NOTHING";
const COMPLETE: &str = "UPDATE inbox_log SET status = 'done', response = ?1 \
     WHERE msg_id = ?2 AND token = ?3 AND status = 'in_progress'";
const SELECT_ROW: &str =
    "SELECT status, response, fingerprint, token, lease_until FROM inbox_log WHERE msg_id = ?1";

const CONNECTIONS: usize = 4;

/// The raw floor: 4 connections behind a semaphore, every operation on the blocking pool.
struct RawPool {
    connections: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl RawPool {
    fn open(path: &Path) -> Arc<Self> {
        let connections = (0..CONNECTIONS)
            .map(|i| {
                let conn = Connection::open(path).expect("open the raw SQLite file");
                conn.busy_timeout(Duration::from_secs(5))
                    .expect("busy timeout");
                if i == 0 {
                    let mode: String = conn
                        .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
                        .expect("WAL");
                    assert_eq!(mode, "wal");
                    conn.execute_batch(TABLE).expect("create the table");
                }
                conn.pragma_update(None, "synchronous", "NORMAL")
                    .expect("synchronous=NORMAL");
                conn
            })
            .collect();
        Arc::new(RawPool {
            connections: Mutex::new(connections),
            permits: Semaphore::new(CONNECTIONS),
        })
    }

    /// Runs `work` on a pooled connection on the blocking pool, after waiting (without holding a
    /// thread) for a connection to be free.
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> T {
        let _permit = self
            .permits
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut conn = pool
                .connections
                .lock()
                .expect("pool lock")
                .pop()
                .expect("a connection for every permit");
            let out = work(&mut conn);
            pool.connections.lock().expect("pool lock").push(conn);
            out
        })
        .await
        .expect("the blocking task")
    }

    async fn claim_complete(self: Arc<Self>, key: String) {
        let claim_key = key.clone();
        let inserted = self
            .run(move |conn| {
                let row = conn
                    .prepare_cached(SELECT_ROW)
                    .expect("prepare")
                    .query_row([&claim_key], |_| Ok(()))
                    .optional()
                    .expect("read");
                assert!(row.is_none(), "raw claim of {claim_key}: the key is new");
                conn.prepare_cached(INSERT_CLAIM)
                    .expect("prepare")
                    .execute(params![
                        claim_key,
                        claim_key,
                        "2026-01-01T00:00:00.000000Z",
                        None::<String>,
                        "2026-01-01T00:00:30.000000Z",
                        "2026-01-02T00:00:00.000000Z",
                    ])
                    .expect("insert")
            })
            .await;
        assert_eq!(inserted, 1, "raw claim of {key}");
        let completed = self
            .run(move |conn| {
                conn.prepare_cached(COMPLETE)
                    .expect("prepare")
                    .execute(params![RESPONSE, key, 1_i64])
                    .expect("update")
            })
            .await;
        assert_eq!(completed, 1, "raw complete");
    }

    async fn replay(self: Arc<Self>, key: String) {
        let (status, response) = self
            .run(move |conn| {
                conn.prepare_cached(SELECT_ROW)
                    .expect("prepare")
                    .query_row([&key], |row| {
                        Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?))
                    })
                    .expect("select")
            })
            .await;
        assert!(status == "done" && response.as_deref() == Some(RESPONSE));
    }
}

/// A directory of its own under the temp dir, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    let config = Config::from_env();
    let dir = TempDir(
        std::env::temp_dir().join(format!("retry-core-bench-sqlite-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).expect("a temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let raw = RawPool::open(&dir.0.join("raw.sqlite3"));
    // Both sides on `synchronous=NORMAL` (the store's default is FULL): the bench
    // compares the store's work with the same SQL's, not two durability levels, and keeps the
    // recorded figures comparable.
    let store = Arc::new(
        SqliteStore::open(dir.0.join("store.sqlite3"))
            .expect("open the store")
            .with_synchronous_full(false),
    );

    let rows = rt.block_on(async {
        // The keys replayed later, which also checks that both sides do the work.
        for i in 0..REPLAY_KEYS {
            Arc::clone(&raw).claim_complete(format!("r-{i}")).await;
            store_claim_complete(Arc::clone(&store), format!("r-{i}")).await;
        }
        Arc::clone(&raw).replay("r-0".to_owned()).await;
        store_replay(Arc::clone(&store), "r-0".to_owned()).await;

        let mut next = 0;
        let mut rows = {
            let (raw, store) = (Arc::clone(&raw), Arc::clone(&store));
            compare(
                "claim + complete",
                config,
                config.claim_ops,
                &mut next,
                move |n| Arc::clone(&raw).claim_complete(format!("k-{n}")),
                move |n| store_claim_complete(Arc::clone(&store), format!("k-{n}")),
            )
            .await
        };
        let (raw, store) = (Arc::clone(&raw), Arc::clone(&store));
        rows.extend(
            compare(
                "duplicate replay",
                config,
                config.replay_ops,
                &mut next,
                move |n| Arc::clone(&raw).replay(format!("r-{}", n % REPLAY_KEYS)),
                move |n| store_replay(Arc::clone(&store), format!("r-{}", n % REPLAY_KEYS)),
            )
            .await,
        );
        rows
    });
    drop(rt);
    println!(
        "\nSqliteStore vs raw rusqlite, {} rounds (medians), {} claim + complete and {} replays per measurement\n",
        config.rounds, config.claim_ops, config.replay_ops
    );
    print_table("SqliteStore", &rows);
}
