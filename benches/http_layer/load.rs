//! The load run: clients posting new keys, rounds, medians and the markdown table.

use std::time::Duration;

use tokio::runtime::Runtime;

use super::support::store::{Stats, measure_each, median, thousands};
use super::{ORDER, Side};

/// `ops` requests (rounded down to a multiple of the clients), each with a key of its own
/// (`{run}-{n}`), from each client in `connections` on a connection of its own.
async fn measure(url: &str, connections: &[reqwest::Client], ops: usize, run: &str) -> Stats {
    measure_each(connections.len(), ops, 0, |caller| {
        let client = connections[caller].clone();
        let (url, run) = (url.to_owned(), run.to_owned());
        move |n| {
            let request = client
                .post(&url)
                .header("idempotency-key", format!("\"{run}-{n}\""))
                .body(ORDER)
                .send();
            async move {
                let response = request.await.expect("an answer");
                assert_eq!(
                    response.status(),
                    201,
                    "{}",
                    response.text().await.unwrap_or_default()
                );
                response.bytes().await.expect("the body");
            }
        }
    })
    .await
}

/// One key sent twice to a side that deduplicates: the resend must get the first answer (the
/// booking ran once), or the side would be measured doing less than it claims.
async fn check_dedup(side: Side, url: &str) {
    let client = reqwest::Client::new();
    let key = format!("\"check-{}\"", std::process::id());
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let response = client
            .post(url)
            .header("idempotency-key", &key)
            .body(ORDER)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 201, "{}", side.name());
        bodies.push(response.text().await.expect("the body"));
    }
    assert_eq!(
        bodies[0],
        bodies[1],
        "{}: the resend was booked again",
        side.name()
    );
}

/// What every store's measurement shares: the clients and what to run.
pub(super) struct Plan {
    /// The clients' runtime.
    pub(super) clients: Runtime,
    /// One client per concurrent caller.
    pub(super) connections: Vec<reqwest::Client>,
    pub(super) callers_each: Vec<usize>,
    pub(super) ops: usize,
    pub(super) rounds: usize,
}

impl Plan {
    /// Measures `store`'s `urls` (one server per side) and prints their table under `caption`.
    pub(super) fn measure(&self, store: &str, urls: &[(Side, String)], caption: &str) {
        let table = run_sides(self, urls, store);
        print_table(caption, &self.callers_each, &table);
    }
}

/// Every side at every client count, `rounds` times; the medians, by client count then side.
fn run_sides(plan: &Plan, urls: &[(Side, String)], store: &str) -> Vec<(Side, usize, Stats)> {
    let Plan {
        clients,
        connections,
        callers_each,
        ops,
        rounds,
    } = plan;
    let (ops, rounds) = (*ops, *rounds);
    for (side, url) in urls {
        if *side != Side::Alone {
            clients.block_on(check_dedup(*side, url));
        }
    }
    let mut table = Vec::new();
    let mut run = 0;
    for &callers in callers_each {
        let mut results: Vec<Vec<Stats>> = vec![Vec::new(); urls.len()];
        for round in 0..rounds {
            // Each round starts with another side, so no side always meets a warm (or a
            // checkpointing) database.
            for offset in 0..urls.len() {
                let index = (round + offset) % urls.len();
                run += 1;
                let stats = clients.block_on(measure(
                    &urls[index].1,
                    &connections[..callers],
                    ops,
                    &format!("r{run}"),
                ));
                // Every round on stderr, so the spread behind a median can be seen (and lined
                // up with the server's log, e.g. its checkpoints).
                eprintln!(
                    "{store}, {} x{callers}, round {}: {:.0} req/s",
                    urls[index].0.name(),
                    round + 1,
                    stats.ops_per_sec
                );
                results[index].push(stats);
            }
        }
        for ((side, _), stats) in urls.iter().zip(results) {
            let stats = median(stats);
            eprintln!(
                "{store}, {} x{callers}: {:.0} req/s, p50 {:?}, p99 {:?}",
                side.name(),
                stats.ops_per_sec,
                stats.p50,
                stats.p99
            );
            table.push((*side, callers, stats));
        }
    }
    table
}

fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.0}")
    }
}

/// One row per client count: each side's requests/s (p50 / p99), then each layer mode's
/// requests/s divided by the floor's.
fn print_table(caption: &str, callers_each: &[usize], table: &[(Side, usize, Stats)]) {
    println!("\n{caption}\n");
    print!("| clients |");
    for side in Side::ALL {
        print!(" {}: req/s (p50 / p99) |", side.name());
    }
    println!(" non-transactional ÷ floor | transactional ÷ floor | one commit ÷ floor |");
    println!("|---:|---|---|---|---|---|---:|---:|---:|");
    for &callers in callers_each {
        let of = |side: Side| {
            table
                .iter()
                .find(|(s, c, _)| *s == side && *c == callers)
                .map(|(_, _, stats)| *stats)
        };
        print!("| {callers} |");
        for side in Side::ALL {
            match of(side) {
                Some(s) => print!(
                    " {} ({} / {} ms) |",
                    thousands(s.ops_per_sec),
                    millis(s.p50),
                    millis(s.p99)
                ),
                None => print!(" – |"),
            }
        }
        for side in Side::LAYERS {
            match (of(side), of(Side::Floor)) {
                (Some(layer), Some(floor)) => {
                    print!(" {:.2}× |", layer.ops_per_sec / floor.ops_per_sec)
                }
                _ => print!(" – |"),
            }
        }
        println!();
    }
}
