//! Metrics through the `metrics` facade. Names are stable: dashboards and alerts depend on them.
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `retry_core_calls_total` | counter | `function`, `module` | retrying calls started |
//! | `retry_core_retries_total` | counter | `function`, `module` | waits before another attempt |
//! | `retry_core_give_ups_total` | counter | `function`, `module`, `reason` | calls that returned their last error after failing |
//! | `retry_core_nested_suppressed_total` | counter | `function`, `module` | inner retries collapsed to one attempt |
//! | `retry_core_budget_refusals_total` | counter | `function`, `module` | retries skipped because the budget was empty |
//! | `retry_core_idempotency_duplicates_total` | counter | `function` | duplicates answered with the stored response |
//! | `retry_core_idempotency_fenced_total` | counter | `function` | late completions refused after a takeover |
//! | `retry_core_idempotency_not_stored_total` | counter | `function` | responses of finished calls that could not be stored |
//! | `retry_core_idempotency_abandoned_total` | counter | `function`, `released` | calls dropped while holding a claim |
//! | `retry_core_idempotency_renewal_failures_total` | counter | `function`, `reason` (`fenced`, `unavailable`) | lease renewals that failed while a body ran |
//! | `retry_core_dlq_park_failures_total` | counter | `function`, `module` | dead letters the sink refused (the caller got `DlqFailed`, nothing was parked) |
//! | `retry_core_dlq_pending` | gauge | `queue` | dead letters waiting (set by `dlq::pending`); 0 while the store cannot be read |
//! | `retry_core_dlq_oldest_age_seconds` | gauge | `queue` | age of the oldest waiting letter's first failure; 0 while the store cannot be read |
//! | `retry_core_dlq_monitor_up` | gauge | `queue` | 1 when the last read of the store worked, 0 when it failed |
//! | `retry_core_dlq_monitor_errors_total` | counter | `queue` | reads of the store by `dlq::pending` / `dlq::spawn_monitor` that failed |
//! | `retry_core_arrivals_total` | counter | `route`, `attempt` (`first`, `retry`, `unannounced`) | requests an amplification observer saw, by what their `Caller-Retries` announced |
//! | `retry_core_operation_arrivals` | histogram | `route`, `grouped_by` (`idempotency_key`, `traceparent`) | arrivals of one logical operation within its window, recorded when the window ends |
//! | `retry_core_amplified_operations_total` | counter | `route` | operations that arrived more often than one retrying layer may send them |
//!
//! The last three are the receiving side's view of retries layered upstream
//! (`retry_core::tower::AmplificationLayer`, or `IdempotencyLayer::observe`, feature `tower`):
//! `route` is the layer's route label (its method and path, or the name it was given; an
//! `IdempotencyLayer`'s `function` label). The share of requests that were announced retries
//! is `retry_core_arrivals_total{attempt="retry"}` over the sum of `retry_core_arrivals_total`.
//!
//! `module` is the module path of a `#[retryable]` function (`app::client` for `Client::fetch`,
//! `app::cache` for `Cache::fetch`), so two functions of one name are told apart; it is empty
//! for a closure retry, whose `.name(..)` is the whole label.
//!
//! A dead-letter monitor that cannot read its store must not look healthy: the read is
//! counted as an error, `retry_core_dlq_monitor_up` drops to 0, and the two gauges are set to 0
//! rather than left at their last value (the `metrics` facade has no way to remove a gauge).
//! Alert on `retry_core_dlq_monitor_up == 0` beside the queue itself, e.g.
//! `retry_core_dlq_monitor_up == 0 or retry_core_dlq_oldest_age_seconds > 3600`.

/// Metric names, for dashboards and tests.
pub mod names {
    /// Retrying calls started.
    pub const CALLS: &str = "retry_core_calls_total";
    /// Waits before another attempt.
    pub const RETRIES: &str = "retry_core_retries_total";
    /// Calls that gave up.
    pub const GIVE_UPS: &str = "retry_core_give_ups_total";
    /// Inner retries collapsed to a single attempt because an outer one was running.
    pub const NESTED_SUPPRESSED: &str = "retry_core_nested_suppressed_total";
    /// Retries skipped because the shared budget was empty.
    pub const BUDGET_REFUSALS: &str = "retry_core_budget_refusals_total";
    /// Duplicates answered with the stored response.
    pub const DUPLICATES: &str = "retry_core_idempotency_duplicates_total";
    /// Late completions refused because the claim was taken over.
    pub const FENCED: &str = "retry_core_idempotency_fenced_total";
    /// Responses of finished calls that could not be stored.
    pub const NOT_STORED: &str = "retry_core_idempotency_not_stored_total";
    /// Calls dropped while holding a claim; `released` says whether the claim was released.
    pub const ABANDONED: &str = "retry_core_idempotency_abandoned_total";
    /// Lease renewals that failed while a body ran; `reason` is `fenced` (the claim was taken
    /// over) or `unavailable` (the store did not answer).
    pub const RENEWAL_FAILURES: &str = "retry_core_idempotency_renewal_failures_total";
    /// Steps of idempotent bodies run again in doubt: an earlier run of the key started them and
    /// never journaled their end (a crash, a failed body resumed with `on_err = "resume"`).
    pub const STEPS_IN_DOUBT: &str = "retry_core_idempotency_steps_in_doubt_total";
    /// Dead letters waiting.
    pub const DLQ_PENDING: &str = "retry_core_dlq_pending";
    /// Age in seconds of the oldest waiting dead letter's first failure.
    pub const DLQ_OLDEST_AGE: &str = "retry_core_dlq_oldest_age_seconds";
    /// 1 when the dead-letter monitor's last read of its store worked, 0 when it failed.
    pub const DLQ_MONITOR_UP: &str = "retry_core_dlq_monitor_up";
    /// Reads of a dead-letter store by the monitor that failed.
    pub const DLQ_MONITOR_ERRORS: &str = "retry_core_dlq_monitor_errors_total";
    /// Dead letters a sink refused: the call gave up and nothing was parked.
    pub const DLQ_PARK_FAILURES: &str = "retry_core_dlq_park_failures_total";
    /// Requests an amplification observer saw; `attempt` is `first`, `retry` (an announced
    /// attempt after the first) or `unannounced`.
    pub const ARRIVALS: &str = "retry_core_arrivals_total";
    /// Histogram: arrivals of one logical operation within its window; `grouped_by` is
    /// `idempotency_key` or `traceparent`.
    pub const OPERATION_ARRIVALS: &str = "retry_core_operation_arrivals";
    /// Operations that arrived more often than one retrying layer may send them.
    pub const AMPLIFIED_OPERATIONS: &str = "retry_core_amplified_operations_total";
}

/// Adds one to the counter `key`, through the recorder installed now.
#[inline]
pub(crate) fn increment(key: &::metrics::Key) {
    static METADATA: ::metrics::Metadata<'static> =
        ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
    ::metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
}

#[cfg(feature = "idempotency")]
pub(crate) fn duplicate_answered(function: &str) {
    ::metrics::counter!(names::DUPLICATES, "function" => function.to_owned()).increment(1);
}

#[cfg(feature = "idempotency")]
pub(crate) fn fenced(function: &str) {
    ::metrics::counter!(names::FENCED, "function" => function.to_owned()).increment(1);
}

#[cfg(feature = "idempotency")]
pub(crate) fn step_in_doubt(function: &str) {
    ::metrics::counter!(names::STEPS_IN_DOUBT, "function" => function.to_owned()).increment(1);
}

#[cfg(feature = "idempotency")]
pub(crate) fn response_not_stored(function: &str) {
    ::metrics::counter!(names::NOT_STORED, "function" => function.to_owned()).increment(1);
}

#[cfg(feature = "idempotency")]
pub(crate) fn abandoned(function: &str, released: bool) {
    let released = if released { "true" } else { "false" };
    ::metrics::counter!(names::ABANDONED, "function" => function.to_owned(), "released" => released)
        .increment(1);
}

#[cfg(feature = "idempotency")]
pub(crate) fn renewal_failed(function: &str, fenced: bool) {
    let reason = if fenced { "fenced" } else { "unavailable" };
    ::metrics::counter!(names::RENEWAL_FAILURES, "function" => function.to_owned(), "reason" => reason)
        .increment(1);
}

#[cfg(feature = "tower")]
pub(crate) fn arrival(route: &str, attempt: Option<u32>) {
    let attempt = match attempt {
        Some(1) => "first",
        Some(_) => "retry",
        None => "unannounced",
    };
    ::metrics::counter!(names::ARRIVALS, "route" => route.to_owned(), "attempt" => attempt)
        .increment(1);
}

#[cfg(feature = "tower")]
pub(crate) fn operation_arrivals(route: &str, keyed: bool, arrivals: u32) {
    let grouped_by = if keyed {
        "idempotency_key"
    } else {
        "traceparent"
    };
    ::metrics::histogram!(names::OPERATION_ARRIVALS, "route" => route.to_owned(), "grouped_by" => grouped_by)
        .record(f64::from(arrivals));
}

#[cfg(feature = "tower")]
pub(crate) fn amplified(route: &str) {
    ::metrics::counter!(names::AMPLIFIED_OPERATIONS, "route" => route.to_owned()).increment(1);
}
