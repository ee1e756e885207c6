//! `cargo run --example rides` end to end: the first run fails after the charge, the resend
//! (`on_err = "resume"`) skips the ride and the charge and re-sends the receipt in doubt with the
//! same key, the third send is the stored response: one ride row, one charge, one receipt.
#![cfg(feature = "sqlite")]

use crate::example;

#[test]
fn the_resend_finishes_the_ride_with_one_effect_per_step() {
    let out = example::stdout_of_success("rides", &[]);
    assert!(out.contains("-> Err(MailerDown)"), "{out}");
    assert!(
        out.contains("receipt: in doubt, sent again with the same key"),
        "{out}"
    );
    assert_eq!(out.matches("database: ride").count(), 1, "{out}");
    assert_eq!(out.matches("gateway: charged").count(), 1, "{out}");
    assert!(
        out.contains("effects: 1 ride row, 1 charge, 1 receipt (2 requests to the mailer)"),
        "{out}"
    );
}
