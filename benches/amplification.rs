//! The cost of `AmplificationLayer` over HTTP on loopback (BENCHMARKS.md, "`AmplificationLayer`"):
//! an axum service answering `200 ok`, measured without the layer and with it in front, on the
//! same requests: each carries a new `Idempotency-Key` (every request opens an operation, so
//! the observer's table, 10,000 operations by default, is full and closes its oldest on every
//! request after the first 10,000) and `Caller-Retries: ?1;attempt=1;max=4`.
//!
//! 8 and 64 concurrent clients, each on a keep-alive connection of its own (reqwest); the
//! server runs on a 2-worker Tokio runtime, the clients on another. The two sides alternate
//! within each round, so a machine whose load changes weighs on both. Prints requests per second
//! and the p50 / p99 latency a client saw, medians over the rounds, and with ÷ without.
//!
//! `cargo bench --bench amplification`; `AMP_BENCH_OPS` (requests per measurement, default
//! 20,000) and `AMP_BENCH_ROUNDS` (default 3) change it. Without `--bench` (`cargo test
//! --benches`) one small round only shows that both sides work.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use retry_core::tower::{AmplificationLayer, AmplificationObserver};
use tokio::runtime::Runtime;

use support::store::{Stats, measure_each, median, number, thousands};

#[path = "support/mod.rs"]
mod support;

const CLIENTS: [usize; 2] = [8, 64];

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Serves `router` on loopback from `server`; its URL.
fn serve(server: &Runtime, router: Router) -> String {
    let listener = server
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a port");
    let url = format!("http://{}/pay", listener.local_addr().expect("an address"));
    server.spawn(async move { axum::serve(listener, router).await });
    url
}

/// `ops` requests from each of `connections`, every one with a key of its own.
async fn measure(url: &str, connections: &[reqwest::Client], ops: usize, run: &str) -> Stats {
    measure_each(connections.len(), ops, 0, |caller| {
        let client = connections[caller].clone();
        let (url, run) = (url.to_owned(), run.to_owned());
        move |n| {
            let request = client
                .post(&url)
                .header("idempotency-key", format!("\"{run}-{n}\""))
                .header("caller-retries", "?1;attempt=1;max=4")
                .send();
            async move {
                let response = request.await.expect("an answer");
                assert_eq!(response.status(), 200);
                response.bytes().await.expect("the body");
            }
        }
    })
    .await
}

/// Nanoseconds per request the layer adds when called directly (no socket), its table full
/// and closing an operation on every request: the same requests through the bare service and
/// through the layer, `n` each, the difference per request.
fn direct(n: u64) -> f64 {
    use tower::{Layer, Service, service_fn};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let request = |i: u64| {
        http::Request::post("/pay")
            .header("idempotency-key", format!("\"direct-{i}\""))
            .header("caller-retries", "?1;attempt=1;max=4")
            .body(())
            .expect("a request")
    };
    let ok = || service_fn(|_: http::Request<()>| async { Ok::<_, std::convert::Infallible>(()) });
    let observer = AmplificationObserver::new();
    let mut bare = ok();
    let mut layered = AmplificationLayer::new(observer)
        .route("POST /pay")
        .layer(ok());
    runtime.block_on(async {
        // Fill the table first, so every measured request also closes an operation.
        for i in 0..20_000 {
            layered.call(request(u64::MAX - i)).await.expect("no error");
        }
        let started = std::time::Instant::now();
        for i in 0..n {
            bare.call(request(i)).await.expect("no error");
        }
        let without = started.elapsed();
        let started = std::time::Instant::now();
        for i in 0..n {
            layered.call(request(i)).await.expect("no error");
        }
        let with = started.elapsed();
        (with.as_secs_f64() - without.as_secs_f64()) * 1e9 / n as f64
    })
}

fn main() {
    let bench = std::env::args().any(|arg| arg == "--bench");
    let ops = if bench {
        number("AMP_BENCH_OPS", 20_000)
    } else {
        200
    };
    let rounds = if bench {
        number("AMP_BENCH_ROUNDS", 3)
    } else {
        1
    };
    let server = runtime();
    let clients = runtime();
    let app = || Router::new().route("/pay", post(|| async { "ok" }));
    let observer = AmplificationObserver::new();
    let without = serve(&server, app());
    let with = serve(
        &server,
        app().layer(AmplificationLayer::new(observer.clone()).route("POST /pay")),
    );

    println!(
        "| clients | without: req/s (p50 / p99) | with `AmplificationLayer` | ÷ |\n|---:|---|---|---:|"
    );
    let mut run = 0;
    for callers in CLIENTS {
        let connections: Vec<reqwest::Client> = (0..callers)
            .map(|_| {
                reqwest::Client::builder()
                    .pool_max_idle_per_host(1)
                    .build()
                    .expect("a client")
            })
            .collect();
        // Connections opened before any clock starts.
        let warm = format!("warm-{callers}");
        clients.block_on(measure(&without, &connections, callers, &warm));
        clients.block_on(measure(&with, &connections, callers, &warm));
        let (mut plain, mut observed) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            run += 1;
            plain.push(clients.block_on(measure(&without, &connections, ops, &format!("a{run}"))));
            observed.push(clients.block_on(measure(&with, &connections, ops, &format!("b{run}"))));
        }
        let (plain, observed) = (median(plain), median(observed));
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
        println!(
            "| {callers} | {} ({} / {}) | {} ({} / {}) | **{:.2}×** |",
            thousands(plain.ops_per_sec),
            ms(plain.p50),
            ms(plain.p99),
            thousands(observed.ops_per_sec),
            ms(observed.p50),
            ms(observed.p99),
            observed.ops_per_sec / plain.ops_per_sec
        );
    }
    let stats = observer.stats();
    assert_eq!(
        stats.operations, stats.arrivals,
        "every request its own operation"
    );
    let n = if bench { 1_000_000 } else { 1_000 };
    println!(
        "\ncalled directly, no socket: {:.0} ns a request added by the layer ({n} requests, table full)",
        direct(n)
    );
    assert_eq!(stats.amplified, 0, "{stats:?}");
    println!(
        "\nobserver: {} arrivals, {} operations, table of {} ({} bytes)",
        stats.arrivals,
        stats.operations,
        observer.capacity(),
        observer.footprint_bytes()
    );
}
