//! `cargo run --example quotes` runs end to end and its summary reports what the retry policy did:
//! which scenarios were retried, how many attempts each made, and why it stopped.

use crate::example;

#[test]
fn the_demo_retries_transient_failures_and_stops_on_permanent_ones() {
    let stdout = example::stdout_of_success("quotes", &[]);

    let summary = stdout
        .split_once("\nsummary")
        .map(|(_, summary)| summary)
        .unwrap_or_else(|| panic!("no summary in the demo's output:\n{stdout}"));
    let line = |scenario: &str| {
        summary
            .lines()
            .find(|l| l.trim_start().starts_with(scenario))
            .unwrap_or_else(|| panic!("no summary line for {scenario:?}:\n{stdout}"))
            .to_owned()
    };
    let expect = |scenario: &str, outcome: &str| {
        let line = line(scenario);
        assert!(
            line.contains(outcome),
            "{scenario}: expected {outcome:?} in {line:?}\n--- stdout\n{stdout}"
        );
    };

    // Reset, then a hang cut short by `attempt_timeout`, then the answer: both failures were
    // retried, in that order.
    expect(
        "1. flaky server",
        "succeeded on attempt 3 (retried after: connection reset, timed out)",
    );
    // Connection refused is retried until `max = 4` runs out.
    expect(
        "2. nothing listening",
        "gave up after 4 attempts: connection refused",
    );
    // `NotFound` is classified `Stop`: called exactly once.
    expect("3. unknown symbol", "not retryable: not found, 1 attempt");
    // The closure API with a policy built at run time; EOF before the reply is a reset.
    expect(
        "4. Policy::retry",
        "succeeded on attempt 2 (retried after: connection reset)",
    );

    // The server saw every attempt that reached it, and no more.
    let seen = |request: &str| {
        stdout
            .lines()
            .filter(|l| l.contains(" server ") && l.contains(&format!("{request:?}")))
            .count()
    };
    assert_eq!(seen("quote AAPL"), 3, "{stdout}");
    assert_eq!(seen("quote NOPE"), 1, "{stdout}");
    assert_eq!(seen("balance acct-7"), 2, "{stdout}");
}
