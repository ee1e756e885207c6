//! The same four sides on PostgreSQL.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Extension, Router};
use deadpool_postgres::Pool;
use retry_core::tower::{IdempotencyLayer, RequestTransaction};
use retry_postgres::PgStore;
use tokio_postgres::NoTls;

use super::support::store::{in_schema, pg_pool};
use super::{Side, key, listen, no_key, payment};

const TABLES: &str = "CREATE TABLE payments (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);
    CREATE TABLE seen (key TEXT PRIMARY KEY, response TEXT)";
const INSERT: &str = "INSERT INTO payments (body) VALUES ($1) RETURNING id";
// Under READ COMMITTED a duplicate's insert waits for the first request's transaction, then
// finds its committed row (or, if it rolled back, takes the key).
const CLAIM_SEEN: &str = "INSERT INTO seen (key) VALUES ($1) ON CONFLICT DO NOTHING";
const READ_SEEN: &str = "SELECT response FROM seen WHERE key = $1";
const STORE_SEEN: &str = "UPDATE seen SET response = $1 WHERE key = $2";

async fn store(url: &str) -> PgStore {
    PgStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("PgStore::connect({url}): {e}"))
        .with_pool_size(POOL_SIZE)
}

/// The handler's own pool, set up as `PgStore`'s.
fn pool(url: &str) -> Pool {
    pg_pool(url, POOL_SIZE)
}

async fn book_on_own_connection(State(pool): State<Pool>, body: String) -> (StatusCode, String) {
    let client = pool.get().await.expect("a connection");
    let insert = client.prepare_cached(INSERT).await.expect("prepare");
    let row = client
        .query_one(&insert, &[&body])
        .await
        .expect("the booking");
    (StatusCode::CREATED, payment(row.get(0)))
}

/// The floor on PostgreSQL: key, booking and response in one transaction.
async fn dedup_by_hand(
    State(pool): State<Pool>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let Some(key) = key(&headers) else {
        return no_key();
    };
    let mut client = pool.get().await.expect("a connection");
    let tx = client.transaction().await.expect("BEGIN");
    let claim = tx.prepare_cached(CLAIM_SEEN).await.expect("prepare");
    if tx.execute(&claim, &[&key]).await.expect("the key") == 0 {
        let read = tx.prepare_cached(READ_SEEN).await.expect("prepare");
        let row = tx
            .query_one(&read, &[&key])
            .await
            .expect("the stored response");
        tx.rollback().await.expect("ROLLBACK");
        return (StatusCode::CREATED, row.get(0));
    }
    let insert = tx.prepare_cached(INSERT).await.expect("prepare");
    let row = tx.query_one(&insert, &[&body]).await.expect("the booking");
    let response = payment(row.get(0));
    let store = tx.prepare_cached(STORE_SEEN).await.expect("prepare");
    tx.execute(&store, &[&response, &key])
        .await
        .expect("the response");
    tx.commit().await.expect("COMMIT");
    (StatusCode::CREATED, response)
}

async fn book_in_transaction(
    Extension(tx): Extension<RequestTransaction<PgStore>>,
    body: String,
) -> (StatusCode, String) {
    let tx = tx.get().await.expect("the transaction");
    let insert = tx.prepare_cached(INSERT).await.expect("prepare");
    let row = tx
        .client()
        .query_one(&insert, &[&body])
        .await
        .expect("the booking");
    drop(tx);
    (StatusCode::CREATED, payment(row.get(0)))
}

/// Connections in each pool, the store's and the handler's alike.
pub const POOL_SIZE: usize = 16;

/// The bench's schemas on the server, dropped by [`Cluster::drop_schemas`].
pub struct Cluster {
    admin: tokio_postgres::Client,
    url: String,
    schemas: Vec<String>,
}

impl Cluster {
    pub async fn connect(url: String) -> Cluster {
        let (admin, connection) = tokio_postgres::connect(&url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to DATABASE_URL ({url}): {e}"));
        tokio::spawn(connection);
        Cluster {
            admin,
            url,
            schemas: Vec::new(),
        }
    }

    /// The server's durability settings, for the table's caption.
    pub async fn settings(&self) -> String {
        let mut shown = Vec::new();
        for name in ["fsync", "synchronous_commit"] {
            let row = self
                .admin
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .expect("SHOW");
            shown.push(format!("`{name}={}`", row.get::<_, String>(0)));
        }
        shown.join(", ")
    }

    /// Serves `side` in a new schema of its own; returns the `/payments` URL.
    pub async fn serve(&mut self, side: Side) -> String {
        let schema = format!(
            "retry_core_bench_http_{}_{}",
            std::process::id(),
            side.slug()
        );
        self.admin
            .batch_execute(&format!(
                "CREATE SCHEMA {schema}; SET search_path TO {schema}; {TABLES}; RESET search_path"
            ))
            .await
            .expect("the side's schema and tables");
        self.schemas.push(schema.clone());
        // Every connection of the side, the store's too (which creates its `inbox_log`
        // there), sees the side's schema first.
        let url = in_schema(&self.url, &schema);
        let router = match side {
            Side::Alone => Router::new()
                .route("/payments", post(book_on_own_connection))
                .with_state(pool(&url)),
            Side::Floor => Router::new()
                .route("/payments", post(dedup_by_hand))
                .with_state(pool(&url)),
            Side::Plain => Router::new()
                .route("/payments", post(book_on_own_connection))
                .layer(IdempotencyLayer::unauthenticated(store(&url).await))
                .with_state(pool(&url)),
            Side::Transactional => Router::new()
                .route("/payments", post(book_in_transaction))
                .layer(IdempotencyLayer::unauthenticated(store(&url).await).transactional()),
            Side::OneCommit => Router::new()
                .route("/payments", post(book_in_transaction))
                .layer(
                    IdempotencyLayer::unauthenticated(store(&url).await)
                        .transactional()
                        .effects_in_transaction(),
                ),
        };
        listen(router).await
    }

    pub async fn drop_schemas(self) {
        for schema in &self.schemas {
            self.admin
                .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                .await
                .expect("drop the bench's schema");
        }
    }
}
