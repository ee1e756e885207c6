//! What the server tests share: the server of `DATABASE_URL`, failing loudly without one, and a
//! schema of each test's own.
// Each test binary uses its own part of this.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `DATABASE_URL`, or a panic saying the tests need it.
pub fn database_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "PostgreSQL tests need DATABASE_URL (scripts/test sets it): \
             postgres://USER@HOST:PORT/DATABASE of a server these tests may create schemas in"
        ),
    }
}

/// A plain client, failing the test loudly if the server cannot be reached.
pub async fn admin() -> tokio_postgres::Client {
    let connected = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_postgres::connect(&database_url(), tokio_postgres::NoTls),
    )
    .await;
    let (client, connection) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => panic!(
            "PostgreSQL tests need a reachable server at DATABASE_URL (scripts/test starts one): {}",
            retry_core::error_chain(&e)
        ),
        Err(_) => panic!(
            "PostgreSQL tests need a reachable server at DATABASE_URL (scripts/test starts one): no answer within 10s"
        ),
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A schema of one check's own, created afresh; its URL resolves unqualified names in it.
pub struct Schema {
    pub name: String,
    pub url: String,
}

impl Schema {
    pub async fn new(test: &str, n: usize) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("rp_{test}_{n}_{}_{nanos}", std::process::id());
        admin()
            .await
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .await
            .unwrap();
        let url = database_url();
        let url = if url.contains("://") {
            let separator = if url.contains('?') { '&' } else { '?' };
            format!("{url}{separator}options=-c%20search_path%3D{name}")
        } else {
            format!("{url} options='-c search_path={name}'")
        };
        Schema { name, url }
    }

    pub async fn drop_all(self) {
        admin()
            .await
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name))
            .await
            .unwrap();
    }
}
