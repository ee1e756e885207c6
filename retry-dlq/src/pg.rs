//! `--pg URL`: PostgreSQL, over TLS when the URL says `sslmode=require`.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use retry_core::dlq::PgDeadLetters;
use rustls_platform_verifier::ConfigVerifierExt;
use tokio_postgres::config::SslMode;

use crate::Failure;

/// Connections a command uses at most: it runs one query at a time.
const POOL_SIZE: usize = 2;

/// Connects to the dead-letter tables at `url`. With `sslmode=require`, over TLS (rustls, the
/// server's certificate and name checked against the platform's trust store); otherwise as
/// [`PgDeadLetters::connect`] does, without TLS.
pub(crate) async fn connect(url: &str) -> Result<PgDeadLetters, Failure> {
    // The URL may hold a password: messages never repeat it.
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Failure::Usage(format!("--pg: not a PostgreSQL URL: {e}")))?;
    if !wants_tls(&config) {
        return PgDeadLetters::connect(url).await.map_err(Failure::Store);
    }
    let tls = rustls::ClientConfig::with_platform_verifier()
        .map_err(|e| Failure::Usage(format!("--pg: cannot set up TLS: {e}")))?;
    let manager = Manager::from_config(
        config,
        tokio_postgres_rustls::MakeRustlsConnect::new(tls),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .build()
        .map_err(|e| Failure::Usage(format!("--pg: cannot make a connection pool: {e}")))?;
    PgDeadLetters::from_pool(pool).await.map_err(Failure::Store)
}

/// Whether the connection must be encrypted: `sslmode=require`. (`prefer`, tokio-postgres's
/// default, stays without TLS, as before: a server with a certificate nobody trusts would
/// otherwise stop working.)
fn wants_tls(config: &tokio_postgres::Config) -> bool {
    matches!(config.get_ssl_mode(), SslMode::Require)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_only_when_the_url_requires_it() {
        let config = |url: &str| url.parse::<tokio_postgres::Config>().unwrap();
        assert!(wants_tls(&config(
            "postgres://app@db/payments?sslmode=require"
        )));
        assert!(wants_tls(&config("host=db user=app sslmode=require")));
        assert!(!wants_tls(&config("postgres://app@db/payments")));
        assert!(!wants_tls(&config(
            "postgres://app@db/payments?sslmode=disable"
        )));
        assert!(!wants_tls(&config(
            "postgres://app@db/payments?sslmode=prefer"
        )));
    }

    #[test]
    fn a_bad_url_is_a_usage_error_that_does_not_repeat_the_password() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let error = runtime
            .block_on(connect(
                "postgres://app:s3cret@db/payments?sslmode=sometimes",
            ))
            .unwrap_err();
        let Failure::Usage(message) = error else {
            panic!("{error:?}")
        };
        assert!(!message.contains("s3cret"), "{message}");
    }
}
