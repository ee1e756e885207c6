//! `cargo run --example quotes`: retries against a flaky TCP server on loopback, as a timeline.
//!
//! A tiny line-based server on 127.0.0.1 answers `quote AAPL` only on the third connection (the
//! first is reset, the second hangs past the attempt timeout), answers `quote NOPE` with a
//! permanent `ERR not-found`, and a second port has nothing listening. One `#[retryable]`
//! client function meets all three; the error's classification, not the call site, decides
//! what is retried. Last, `Policy::retry` retries a closure with a policy read from config.

use std::collections::HashMap;
use std::error::Error;
use std::fmt::Display;
use std::future::IntoFuture;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use retry_core::{Classify, Decision, Policy, retryable};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

// ---- the client: what a user of the library writes ----

/// Asks the quote server for `symbol`. Connection failures and timeouts are retried; a
/// `not-found` answer is an `io::ErrorKind::NotFound`, which `Classify` says never to retry.
#[retryable(
    max = 4,
    base = "50ms",
    cap = "400ms",
    jitter = "full",
    attempt_timeout = "300ms",
    on_retry = log_retry
)]
async fn fetch_quote(server: SocketAddr, symbol: &str) -> io::Result<String> {
    request(server, &format!("quote {symbol}")).await
}

/// The `on_retry` hook: sees the attempt that failed, its error and the wait chosen before the
/// next attempt. It is not called when the call gives up.
fn log_retry(attempt: u32, error: &io::Error, wait: Duration) {
    FAILURES.lock().unwrap().push(reason(error));
    event(
        "retry",
        format_args!(
            "attempt {attempt} failed: {error} -> wait {} ms",
            wait.as_millis()
        ),
    );
}

/// The closure API takes a `Policy` built at run time: here read from configuration, as a
/// service reads the `[retry]` table of its config file (feature `serde`; the same knobs and
/// duration strings as the attribute above, see examples/policy_from_config.rs).
const CONFIG: &str = r#"max_attempts = 3
base = "40ms"
cap = "200ms"
jitter = "equal""#;

/// One request, one connection, one reply line: `OK <body>` or `ERR <code>`.
async fn request(server: SocketAddr, line: &str) -> io::Result<String> {
    ATTEMPTS.fetch_add(1, Ordering::SeqCst);
    let mut stream = TcpStream::connect(server).await?;
    stream.write_all(format!("{line}\n").as_bytes()).await?;
    let mut reply = String::new();
    if BufReader::new(stream).read_line(&mut reply).await? == 0 {
        // A close before the reply is a dropped connection, not an answer: retryable.
        return Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "server closed the connection before replying",
        ));
    }
    match reply.trim_end().split_once(' ') {
        Some(("OK", body)) => Ok(body.to_owned()),
        Some(("ERR", "not-found")) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("server answered {:?}", reply.trim_end()),
        )),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected reply {reply:?}"),
        )),
    }
}

// ---- the flaky server ----

/// What the server does with the `nth` connection carrying `request`.
enum Behaviour {
    /// Read the request, then close with `SO_LINGER` 0: the client reads a TCP reset.
    Reset,
    /// Read the request, then close normally without a reply: the client reads EOF.
    Close,
    /// Read the request and never answer.
    Hang,
    Reply(&'static str),
}

fn script(request: &str, nth: u32) -> Behaviour {
    match (request, nth) {
        ("quote AAPL", 1) => Behaviour::Reset,
        ("quote AAPL", 2) => Behaviour::Hang,
        ("quote AAPL", _) => Behaviour::Reply("OK AAPL 187.42"),
        ("balance acct-7", 1) => Behaviour::Close,
        ("balance acct-7", _) => Behaviour::Reply("OK acct-7 1024.00 EUR"),
        _ => Behaviour::Reply("ERR not-found"),
    }
}

async fn serve(listener: TcpListener) {
    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(handle(stream, seen.clone()));
    }
}

async fn handle(stream: TcpStream, seen: Arc<Mutex<HashMap<String, u32>>>) -> io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let request = line.trim_end().to_owned();
    let nth = {
        let mut seen = seen.lock().unwrap();
        let n = seen.entry(request.clone()).or_default();
        *n += 1;
        *n
    };
    let said = format!("connection #{nth} {request:?}");
    match script(&request, nth) {
        Behaviour::Reset => {
            event("server", format_args!("{said} -> reset (RST)"));
            reader.get_ref().set_zero_linger()?;
        }
        Behaviour::Close => event("server", format_args!("{said} -> close, no reply")),
        Behaviour::Hang => {
            event("server", format_args!("{said} -> hang, no reply"));
            // Hold the connection until the client gives up on it.
            while reader.read_line(&mut line).await? > 0 {}
        }
        Behaviour::Reply(reply) => {
            event("server", format_args!("{said} -> {reply:?}"));
            reader
                .get_mut()
                .write_all(format!("{reply}\n").as_bytes())
                .await?;
        }
    }
    Ok(())
}

// ---- the timeline ----

static START: OnceLock<Instant> = OnceLock::new();
/// Attempts the client made in the current scenario (counted in `request`, not by the library).
static ATTEMPTS: AtomicU32 = AtomicU32::new(0);
/// Why each retried attempt failed, in order (recorded by the `on_retry` hook).
static FAILURES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

fn event(who: &str, what: impl Display) {
    let ms = START.get_or_init(Instant::now).elapsed().as_millis();
    println!("{ms:>6} ms  {who:<8} {what}");
}

fn reason(error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused",
        io::ErrorKind::ConnectionReset => "connection reset",
        io::ErrorKind::TimedOut => "timed out",
        io::ErrorKind::NotFound => "not found",
        _ => "unexpected error",
    }
}

/// Runs one scenario: a header, the timeline the call produces, and one summary line.
async fn scenario(
    summary: &mut Vec<String>,
    title: &str,
    code: &str,
    call: impl IntoFuture<Output = io::Result<String>>,
) {
    println!("\n-- {title}: {code}");
    ATTEMPTS.store(0, Ordering::SeqCst);
    FAILURES.lock().unwrap().clear();
    let result = call.await;
    let attempts = ATTEMPTS.load(Ordering::SeqCst);
    let plural = if attempts == 1 { "" } else { "s" };
    let outcome = match &result {
        Ok(body) => {
            let failures = FAILURES.lock().unwrap();
            let after = if failures.is_empty() {
                String::new()
            } else {
                format!(" (retried after: {})", failures.join(", "))
            };
            event("done", format_args!("Ok({body:?})"));
            format!("succeeded on attempt {attempts}{after}")
        }
        // The caller gets only the last error, not why the retry stopped. Here (no deadline, no
        // Retry-After) a last error classified `Stop` was not retryable, any other one means
        // the attempts ran out.
        Err(error) if error.classify() == Decision::Stop => {
            event(
                "stop",
                format_args!("attempt {attempts} failed: {error} -> not retryable"),
            );
            format!(
                "not retryable: {}, {attempts} attempt{plural}",
                reason(error)
            )
        }
        Err(error) => {
            event(
                "give up",
                format_args!("attempt {attempts} failed: {error} -> no attempts left"),
            );
            format!(
                "gave up after {attempts} attempt{plural}: {}",
                reason(error)
            )
        }
    };
    summary.push(format!("{title:<22} {outcome}"));
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let server = listener.local_addr()?;
    tokio::spawn(serve(listener));
    // A port nobody listens on: bind it, note it, let it go.
    let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;

    println!("retry-core demo: a flaky line-based TCP server on {server}, nothing on {closed}");
    println!();
    println!("  #[retryable(max = 4, base = \"50ms\", cap = \"400ms\", jitter = \"full\",");
    println!("              attempt_timeout = \"300ms\", on_retry = log_retry)]");
    println!("  async fn fetch_quote(server: SocketAddr, symbol: &str) -> io::Result<String>");
    println!();
    println!("  waits:    full jitter, uniform in [0, min(400ms, 50ms * 2^(attempt-1))]");
    println!("  classify: io::Error refused, reset, timed out -> Retry; not found -> Stop");
    START.get_or_init(Instant::now);

    let mut summary = Vec::new();
    scenario(
        &mut summary,
        "1. flaky server",
        "fetch_quote(server, \"AAPL\")",
        fetch_quote(server, "AAPL"),
    )
    .await;
    scenario(
        &mut summary,
        "2. nothing listening",
        "fetch_quote(closed, \"AAPL\")",
        fetch_quote(closed, "AAPL"),
    )
    .await;
    scenario(
        &mut summary,
        "3. unknown symbol",
        "fetch_quote(server, \"NOPE\")",
        fetch_quote(server, "NOPE"),
    )
    .await;

    // The closure API, with a policy that exists only at run time.
    let policy: Policy = toml::from_str(CONFIG)?;
    scenario(
        &mut summary,
        "4. Policy::retry",
        &format!(
            "policy.retry(|| request(server, \"balance acct-7\")).on_retry(log_retry)\n   \
             with policy: Policy = toml::from_str(CONFIG), CONFIG: {}",
            CONFIG.replace('\n', ", ")
        ),
        policy
            .retry(|| request(server, "balance acct-7"))
            .on_retry(log_retry)
            .name("balance"),
    )
    .await;

    println!(
        "\nsummary (finished in {} ms)",
        START.get_or_init(Instant::now).elapsed().as_millis()
    );
    for line in summary {
        println!("  {line}");
    }
    Ok(())
}
