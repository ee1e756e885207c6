//! `cargo run --example reqwest_client` end to end on loopback (real sockets, real clock): each
//! order's attempts carry one `Idempotency-Key` and `Caller-Retries`, `503`s are retried, a
//! `429`'s `Retry-After` is waited for, an order that runs out of attempts and one the server
//! refuses (`422`, not retried) are parked in the JSONL file under their keys.
#![cfg(all(feature = "reqwest", feature = "tower"))]

use crate::example;

use std::collections::HashMap;

/// One request the example's server printed.
#[derive(Debug)]
struct Seen {
    at_ms: u64,
    key: String,
    caller_retries: String,
    status: u16,
}

/// The server's lines, `  128 ms  server   A-1 request 1 (Idempotency-Key "K", Caller-Retries
/// ?1): 503 Service Unavailable`, by order id, in order.
fn requests(stdout: &str) -> HashMap<String, Vec<Seen>> {
    let mut by_order: HashMap<String, Vec<Seen>> = HashMap::new();
    for line in stdout.lines() {
        let Some((at, rest)) = line.split_once(" ms  server ") else {
            continue;
        };
        let rest = rest.trim_start();
        let parse = || -> Option<(String, Seen)> {
            let (order, rest) = rest.split_once(" request ")?;
            let (_, rest) = rest.split_once("(Idempotency-Key ")?;
            let (key, rest) = rest.split_once(", Caller-Retries ")?;
            let (caller_retries, status) = rest.split_once("): ")?;
            let seen = Seen {
                at_ms: at.trim().parse().ok()?,
                key: key.trim_matches('"').to_owned(),
                caller_retries: caller_retries.to_owned(),
                status: status.split_whitespace().next()?.parse().ok()?,
            };
            Some((order.to_owned(), seen))
        };
        let (order, seen) = parse().unwrap_or_else(|| panic!("cannot read {line:?}"));
        by_order.entry(order).or_default().push(seen);
    }
    by_order
}

#[test]
fn retries_what_may_succeed_waits_for_retry_after_and_parks_the_rest_under_their_keys() {
    let stdout = example::stdout_of_success("reqwest_client", &[]);
    let requests = requests(&stdout);
    let statuses = |order: &str| -> Vec<u16> {
        requests
            .get(order)
            .unwrap_or_else(|| panic!("no request for {order}:\n{stdout}"))
            .iter()
            .map(|s| s.status)
            .collect()
    };
    assert_eq!(statuses("A-1"), [503, 503, 201], "{stdout}");
    assert_eq!(statuses("A-2"), [429, 201], "{stdout}");
    assert_eq!(statuses("A-3"), [503; 4], "{stdout}");
    // A 422 is not retried.
    assert_eq!(statuses("A-4"), [422], "{stdout}");

    let mut keys = HashMap::new();
    for (order, seen) in &requests {
        // Every attempt of one order carries the same key, made outside the retries.
        let key = &seen[0].key;
        assert_eq!(key.len(), 32, "{order}: {key:?}");
        assert!(seen.iter().all(|s| &s.key == key), "{order}: {seen:?}");
        // Sent from inside a retry: the server is told its caller retries, and which attempt of
        // the function's `max = 4` each request is.
        for (n, s) in seen.iter().enumerate() {
            assert_eq!(
                s.caller_retries,
                format!("?1;attempt={};max=4", n + 1),
                "{seen:?}"
            );
        }
        keys.insert(order.as_str(), key.clone());
    }
    let distinct: std::collections::HashSet<_> = keys.values().collect();
    assert_eq!(distinct.len(), 4, "one key per order: {keys:?}");

    // `Retry-After: 1` is a floor for the wait.
    let a2 = &requests["A-2"];
    assert!(a2[1].at_ms - a2[0].at_ms >= 1000, "{stdout}");

    let summary = stdout
        .split_once("\nsummary\n")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    assert!(summary.contains("orders accepted  2"), "{summary}");
    assert!(summary.contains("orders parked    2"), "{summary}");
    let letter = |order: &str| -> &str {
        summary
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{order}  class")))
            .unwrap_or_else(|| panic!("no letter for {order}:\n{summary}"))
    };
    let a3 = letter("A-3");
    assert!(a3.contains("class system  attempts 4"), "{a3}");
    assert!(a3.ends_with(&format!("key {}", keys["A-3"])), "{a3}");
    let a4 = letter("A-4");
    assert!(a4.contains("class data    attempts 1"), "{a4}");
    assert!(a4.contains("422"), "{a4}");
    assert!(a4.ends_with(&format!("key {}", keys["A-4"])), "{a4}");
    assert_eq!(
        summary.lines().filter(|l| l.contains("  class ")).count(),
        2,
        "only the two orders that gave up are parked:\n{summary}"
    );
}
