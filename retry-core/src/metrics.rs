//! Metrics through the `metrics` facade. Names are stable: dashboards and alerts depend on them.
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `retry_core_calls_total` | counter | `function` | retrying calls started |
//! | `retry_core_retries_total` | counter | `function` | waits before another attempt |
//! | `retry_core_give_ups_total` | counter | `function`, `reason` | calls that returned their last error after failing |
//! | `retry_core_nested_suppressed_total` | counter | `function` | inner retries collapsed to one attempt |
//! | `retry_core_budget_refusals_total` | counter | `function` | retries skipped because the budget was empty |
//! | `retry_core_idempotency_duplicates_total` | counter | `function` | duplicates answered with the stored response |
//! | `retry_core_idempotency_fenced_total` | counter | `function` | late completions refused after a takeover |
//! | `retry_core_idempotency_not_stored_total` | counter | `function` | responses of finished calls that could not be stored |
//! | `retry_core_idempotency_abandoned_total` | counter | `function`, `released` | calls dropped while holding a claim |
//! | `retry_core_dlq_pending` | gauge | `queue` | dead letters waiting (set by `dlq::pending`) |
//! | `retry_core_dlq_oldest_age_seconds` | gauge | `queue` | age of the oldest waiting letter's first failure |

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
    /// Dead letters waiting.
    pub const DLQ_PENDING: &str = "retry_core_dlq_pending";
    /// Age in seconds of the oldest waiting dead letter's first failure.
    pub const DLQ_OLDEST_AGE: &str = "retry_core_dlq_oldest_age_seconds";
}

pub(crate) fn call_started(function: &'static str) {
    ::metrics::counter!(names::CALLS, "function" => function).increment(1);
}

pub(crate) fn retried(function: &'static str) {
    ::metrics::counter!(names::RETRIES, "function" => function).increment(1);
}

pub(crate) fn gave_up(function: &'static str, reason: &'static str) {
    ::metrics::counter!(names::GIVE_UPS, "function" => function, "reason" => reason).increment(1);
}

pub(crate) fn nested_suppressed(function: &'static str) {
    ::metrics::counter!(names::NESTED_SUPPRESSED, "function" => function).increment(1);
}

pub(crate) fn budget_refused(function: &'static str) {
    ::metrics::counter!(names::BUDGET_REFUSALS, "function" => function).increment(1);
}

pub(crate) fn duplicate_answered(function: &'static str) {
    ::metrics::counter!(names::DUPLICATES, "function" => function).increment(1);
}

pub(crate) fn fenced(function: &'static str) {
    ::metrics::counter!(names::FENCED, "function" => function).increment(1);
}

pub(crate) fn response_not_stored(function: &'static str) {
    ::metrics::counter!(names::NOT_STORED, "function" => function).increment(1);
}

pub(crate) fn abandoned(function: &'static str, released: bool) {
    let released = if released { "true" } else { "false" };
    ::metrics::counter!(names::ABANDONED, "function" => function, "released" => released)
        .increment(1);
}
