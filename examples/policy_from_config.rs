//! `cargo run --example policy_from_config [-- PATH]`: a service's retry policy read from its
//! TOML configuration file (default `examples/policy.toml`), then used with `policy.retry(..)`.
//!
//! The file's `[retry]` table is a `retry_core::Policy` (feature `serde`): the builder's knob
//! names, durations as `#[retryable]` writes them ("50ms", "1h30m"). A mistake in it (an unknown
//! field, "1.5s", a zero deadline) stops the service at start with the line and the reason,
//! rather than a retry loop that quietly runs on defaults. The flaky upstream here resets the
//! first two connections and answers the third.

use std::error::Error;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use retry_core::Policy;
use serde::{Deserialize, Serialize};

/// The whole configuration file: the service's own settings beside its retry policy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    quotes: Upstream,
    retry: Policy,
}

/// The service's own settings; a duration of its own reads with the same grammar.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Upstream {
    url: String,
    #[serde(with = "retry_core::duration::serde")]
    connect_timeout: Duration,
}

/// Reads and checks the configuration file: every error names the file and, from the `toml`
/// crate, the line and what is wrong there.
fn load(path: &PathBuf) -> Result<Config, Box<dyn Error>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// The upstream call: connection resets on the first two attempts, then a quote.
async fn fetch_quote(upstream: &Upstream, symbol: &str) -> io::Result<String> {
    let attempt = ATTEMPTS.fetch_add(1, Ordering::SeqCst) + 1;
    if attempt <= 2 {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            format!("{} reset the connection", upstream.url),
        ));
    }
    Ok(format!("{symbol} 187.25"))
}

/// The `on_retry` hook: what failed and how long the policy waits before the next attempt.
fn log_retry(attempt: u32, error: &io::Error, wait: Duration) {
    println!(
        "  attempt {attempt} failed: {error} -> wait {} ms",
        wait.as_millis()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policy.toml")),
        PathBuf::from,
    );
    let config = match load(&path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("configuration error: {error}");
            std::process::exit(2);
        }
    };
    println!(
        "upstream {} (connect timeout {})",
        config.quotes.url,
        retry_core::duration::format(config.quotes.connect_timeout)
    );
    // Written back in the canonical form: what the service will actually do.
    #[derive(Serialize)]
    struct Shown<'a> {
        retry: &'a Policy,
    }
    println!(
        "as read from {}:\n{}",
        path.display(),
        toml::to_string(&Shown {
            retry: &config.retry
        })?
    );

    let policy = config.retry;
    let started = Instant::now();
    let quote = policy
        .retry(|| fetch_quote(&config.quotes, "AAPL"))
        .on_retry(log_retry)
        .name("fetch_quote")
        // `attempt_timeout` cuts an attempt off only where the error can say so
        // (`io::Error: From<Elapsed>`).
        .timed()
        .await?;
    println!(
        "quote: {quote} after {} attempts in {} ms",
        ATTEMPTS.load(Ordering::SeqCst),
        started.elapsed().as_millis()
    );
    Ok(())
}
