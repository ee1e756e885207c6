//! A `Policy` (and its budget's settings) as configuration, feature `serde`: read from JSON and
//! TOML under the builder's names, mistakes refused with an error that says what is wrong, and
//! written back in a canonical form that reads back as the same policy.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use retry_core::{BudgetSettings, Jitter, Policy, RetryBudget};
use serde::Deserialize;

/// Every knob configuration carries, comparable (the budget by its settings).
fn knobs(policy: &Policy) -> impl PartialEq + std::fmt::Debug + use<> {
    let k = policy.knobs();
    (
        k.max_attempts,
        k.base,
        k.cap,
        k.jitter,
        k.deadline,
        k.attempt_timeout,
        k.max_retry_after,
        k.budget.map(RetryBudget::settings),
    )
}

fn json_error(config: &str) -> String {
    match serde_json::from_str::<Policy>(config) {
        Ok(policy) => panic!("{config} was read as {:?}", policy.knobs()),
        Err(error) => error.to_string(),
    }
}

fn toml_error(config: &str) -> String {
    match toml::from_str::<Policy>(config) {
        Ok(policy) => panic!("{config} was read as {:?}", policy.knobs()),
        Err(error) => error.to_string(),
    }
}

#[test]
fn the_knobs_read_from_json_under_the_builder_names() {
    let policy: Policy = serde_json::from_str(
        r#"{"max_attempts":5,"base":"250ms","cap":"30s","jitter":"full","deadline":"2m","attempt_timeout":"2s"}"#,
    )
    .unwrap();
    let expected = Policy::new()
        .max_attempts(5)
        .base(Duration::from_millis(250))
        .cap(Duration::from_secs(30))
        .jitter(Jitter::Full)
        .deadline(Duration::from_secs(120))
        .attempt_timeout(Duration::from_secs(2));
    assert_eq!(knobs(&policy), knobs(&expected));
    assert_eq!(
        serde_json::to_string(&policy).unwrap(),
        r#"{"max_attempts":5,"base":"250ms","cap":"30s","jitter":"full","deadline":"2m","attempt_timeout":"2s","max_retry_after":"5m"}"#
    );
}

#[test]
fn every_field_is_optional_with_the_builder_defaults() {
    let empty: Policy = serde_json::from_str("{}").unwrap();
    assert_eq!(knobs(&empty), knobs(&Policy::new()));
    let toml_empty: Policy = toml::from_str("").unwrap();
    assert_eq!(knobs(&toml_empty), knobs(&Policy::new()));
    // `null` is "not set" for the optional knobs.
    let nulls: Policy =
        serde_json::from_str(r#"{"deadline": null, "attempt_timeout": null, "budget": null}"#)
            .unwrap();
    assert_eq!(knobs(&nulls), knobs(&Policy::new()));
}

/// A service's own configuration file, with the policy as one of its tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Service {
    name: String,
    retry: Policy,
}

#[test]
fn a_policy_is_a_table_of_a_service_configuration_with_its_budget() {
    let service: Service = toml::from_str(
        r#"
        name = "quotes"

        [retry]
        max_attempts = 4
        base = "100ms"
        cap = "2s"
        jitter = "decorrelated"
        deadline = "1h30m"
        max_retry_after = "1m"

        [retry.budget]
        ttl = "10s"
        min_per_sec = 5
        retry_ratio = 0.2
        "#,
    )
    .unwrap();
    assert_eq!(service.name, "quotes");
    let knobs = service.retry.knobs();
    assert_eq!(knobs.jitter, Jitter::Decorrelated);
    assert_eq!(knobs.deadline, Some(Duration::from_secs(5400)));
    assert_eq!(knobs.max_retry_after, Duration::from_secs(60));
    let budget = knobs.budget.expect("a budget");
    assert_eq!(budget.settings().ttl, Duration::from_secs(10));
    assert_eq!(budget.settings().min_per_sec, 5);
    assert_eq!(budget.settings().retry_ratio, 0.2);
    assert_eq!(budget.remaining(), 50, "5 retries a second over 10 s");

    // Clones of the policy share its one budget, as `Policy::budget` does.
    let clone = service.retry.clone();
    assert!(std::ptr::eq(clone.knobs().budget.unwrap(), budget));
}

#[test]
fn unknown_fields_are_refused_naming_the_known_ones() {
    // The attribute's `max` is `max_attempts` here, as on the builder.
    let error = json_error(r#"{"max": 5}"#);
    assert!(
        error.contains(
            "unknown field `max`, expected one of `max_attempts`, `base`, `cap`, `jitter`, \
             `deadline`, `attempt_timeout`, `max_retry_after`, `budget`"
        ),
        "{error}"
    );
    // A typo would otherwise leave a knob at its default.
    assert!(toml_error("dead_line = \"2m\"").contains("unknown field `dead_line`"));
    // `seed` is for tests only (a shared seed synchronises clients): never from configuration.
    assert!(json_error(r#"{"seed": 7}"#).contains("unknown field `seed`"));
    let error =
        toml_error("[budget]\nttl = \"10s\"\nmin_per_sec = 1\nretry_ratio = 0.1\nratio = 1");
    assert!(
        error
            .contains("unknown field `ratio`, expected one of `ttl`, `min_per_sec`, `retry_ratio`"),
        "{error}"
    );
}

#[test]
fn values_the_builder_refuses_are_errors_not_panics() {
    for (config, says) in [
        (
            r#"{"max_attempts": 0}"#,
            "`max_attempts` must be at least 1; use `max_attempts = 1` to call once without retrying",
        ),
        (
            r#"{"deadline": "0s"}"#,
            "`deadline` must be longer than zero: no attempt could start",
        ),
        (
            r#"{"attempt_timeout": "0ms"}"#,
            "`attempt_timeout` must be longer than zero: every attempt would be cut off at once",
        ),
        (r#"{"max_attempts": -1}"#, "invalid value: integer `-1`"),
        (
            r#"{"base": 250}"#,
            "invalid type: integer `250`, expected a duration string such as \"250ms\"",
        ),
        (
            r#"{"jitter": "fully"}"#,
            "unknown jitter `fully`; expected one of \"none\", \"full\", \"equal\", \"decorrelated\"",
        ),
        (
            r#"{"budget": {"ttl": "5ms", "min_per_sec": 1, "retry_ratio": 0.1}}"#,
            "`ttl` must be at least 10ms, not 5ms",
        ),
        (
            r#"{"budget": {"ttl": "10s", "min_per_sec": 1, "retry_ratio": 1001}}"#,
            "`retry_ratio` must be from 0.0 to 1000.0 (retries per call), not 1001",
        ),
        (
            r#"{"budget": {"ttl": "10s", "min_per_sec": 1}}"#,
            "missing field `retry_ratio`",
        ),
    ] {
        let error = json_error(config);
        assert!(error.contains(says), "{config}: {error}");
    }
    let error = toml_error("[budget]\nttl = \"10s\"\nmin_per_sec = 1\nretry_ratio = nan");
    assert!(
        error.contains("`retry_ratio` must be from 0.0 to 1000.0"),
        "{error}"
    );
    // TOML points at the line of the mistake.
    let error = toml_error("max_attempts = 3\nbase = \"1.5s\"\n");
    assert!(
        error.contains("line 2") && error.contains("fractions are not supported"),
        "{error}"
    );
}

#[test]
fn configuration_obeys_the_attributes_rules() {
    // What `#[retryable]` refuses as a literal, configuration refuses too, naming the field:
    // a policy must not depend on where it was written.
    let error = toml_error("max_attempts = 5000\n");
    assert!(
        error.contains("`max_attempts` must be at most 1000, not 5000"),
        "{error}"
    );
    let error = toml_error("base = \"1m\"\ncap = \"30s\"\n");
    assert!(
        error.contains("`base` (1m) is longer than `cap` (30s)"),
        "{error}"
    );
    let error = toml_error("base = \"1m\"\n");
    assert!(
        error.contains("`base` (1m) is longer than `cap` (30s)"),
        "the default cap counts too: {error}"
    );
    let policy: Policy =
        serde_json::from_str(r#"{"max_attempts": 1000, "base": "30s", "cap": "30s"}"#).unwrap();
    assert_eq!(policy.knobs().max_attempts, 1000);
    assert_eq!(policy.knobs().base, policy.knobs().cap);
}

#[test]
fn a_budget_and_a_seed_are_written_as_configuration_can_read_them() {
    let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 10, 0.1));
    let policy = Policy::new().budget(budget).seed(7);
    let text = toml::to_string(&policy).unwrap();
    assert_eq!(
        text,
        "max_attempts = 3\nbase = \"1s\"\ncap = \"30s\"\njitter = \"full\"\nmax_retry_after = \"5m\"\n\n\
         [budget]\nttl = \"10s\"\nmin_per_sec = 10\nretry_ratio = 0.1\n"
    );
    let read: Policy = toml::from_str(&text).unwrap();
    assert_eq!(knobs(&read), knobs(&policy));
    assert_eq!(
        read.knobs().seed,
        None,
        "a seed is for tests; it is not written"
    );
    let settings: BudgetSettings =
        toml::from_str("ttl = \"1m\"\nmin_per_sec = 0\nretry_ratio = 0.25").unwrap();
    assert_eq!(
        settings,
        RetryBudget::new(Duration::from_secs(60), 0, 0.25).settings()
    );
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..100_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_policy() -> impl Strategy<Value = Policy> {
    (
        1u32..=1000,
        any_duration(),
        any_duration(),
        prop::sample::select(vec![
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ]),
        prop::option::of(any_duration().prop_filter("not zero", |d| !d.is_zero())),
        prop::option::of(any_duration().prop_filter("not zero", |d| !d.is_zero())),
        any_duration(),
        prop::option::of((any_duration(), any::<u32>(), 0.0f32..=1000.0)),
    )
        .prop_map(
            |(max, one, other, jitter, deadline, timeout, retry_after, budget)| {
                // Configuration, as `#[retryable]`, refuses a `base` longer than `cap`.
                let (base, cap) = (one.min(other), one.max(other));
                let mut policy = Policy::new()
                    .max_attempts(max)
                    .base(base)
                    .cap(cap)
                    .jitter(jitter)
                    .max_retry_after(retry_after);
                if let Some(deadline) = deadline {
                    policy = policy.deadline(deadline);
                }
                if let Some(timeout) = timeout {
                    policy = policy.attempt_timeout(timeout);
                }
                if let Some((ttl, floor, ratio)) = budget {
                    policy = policy.budget(Arc::new(RetryBudget::new(ttl, floor, ratio)));
                }
                policy
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any policy within the attribute's rules is written in JSON and TOML and reads back with
    /// the same knobs, down to the nanosecond.
    #[test]
    fn every_policy_reads_back_as_written(policy in any_policy()) {
        let json = serde_json::to_string(&policy).unwrap();
        let from_json: Policy = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(knobs(&from_json), knobs(&policy), "{}", json);
        let toml = toml::to_string(&policy).unwrap();
        let from_toml: Policy = toml::from_str(&toml).unwrap();
        prop_assert_eq!(knobs(&from_toml), knobs(&policy), "{}", toml);
    }
}
