//! `cargo run --example demo`, the README's first command, runs the payments story end to end
//! on loopback and its summary holds: every logical operation had exactly one side effect,
//! duplicates were absorbed, the parked letter was redriven and the dead-letter queue is empty.

use crate::example;

#[test]
fn the_demo_books_every_payment_once_and_empties_its_dead_letter_queue() {
    let stdout = example::stdout_of_success("demo", &[]);
    let summary = stdout
        .split_once("\nsummary\n")
        .map(|(_, summary)| summary)
        .unwrap_or_else(|| panic!("no summary in the demo's output:\n{stdout}"));
    let figure = |name: &str| -> u64 {
        let line = summary
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} in the summary:\n{stdout}"));
        line.trim_start()[name.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number in {line:?}"))
    };

    let operations = figure("logical operations");
    assert_eq!(operations, 4);
    assert_eq!(
        figure("side effects"),
        operations,
        "side effects == logical operations\n{stdout}"
    );
    // The lost response's resend and the queue's redelivery, both answered from the store.
    assert_eq!(figure("duplicates absorbed"), 2, "{stdout}");
    assert_eq!(figure("letters parked"), 1, "{stdout}");
    assert_eq!(figure("letters redriven"), 1, "{stdout}");
    assert_eq!(
        figure("letters pending"),
        0,
        "an empty DLQ after the redrive\n{stdout}"
    );
    assert_eq!(figure("audit records"), 1, "{stdout}");
    // P1: 3 faults + 1; P2: 2; P3: 4; P4: 1 + the redelivery; the redrive: 1.
    assert_eq!(figure("requests sent"), 13, "{stdout}");
    // The 429's Retry-After (1 s) was honoured before payment 1 went through.
    let p1_done = stdout
        .lines()
        .find(|l| l.contains("P1 done"))
        .expect("P1 went through");
    let ms: u64 = p1_done.split_whitespace().next().unwrap().parse().unwrap();
    assert!(ms >= 1000, "P1 finished before Retry-After: {p1_done}");
    assert!(figure("took") < 20_000, "{stdout}");
}
