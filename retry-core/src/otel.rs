//! What OpenTelemetry users see (feature `opentelemetry`: the API crate only, so the
//! application's own SDK, exporter and propagators decide where it goes).
//!
//! - A dead letter parked while an OpenTelemetry span is current (`Context::current()`: a span
//!   the application entered, a context attached with `FutureExt::with_context`, or the span of
//!   tracing-opentelemetry's layer when it activates contexts) carries that span's trace id, the
//!   128-bit W3C form (32 lowercase hex digits), so the letter leads to the trace in the
//!   tracing backend. Without one, the letter keeps the call's own 64-bit id (16 hex digits),
//!   the one on the call's `retry` span in `tracing`.
//! - A request sent again by a retry through
//!   [`send_checked`](crate::reqwest::RequestBuilderExt::send_checked) or by `RetryMiddleware`
//!   (feature `reqwest-middleware`) sets the attribute
//!   `http.request.resend_count` (semantic conventions: 1 on the second attempt, 2 on the
//!   third; not set on the first) on the current span: the one around the attempt, when the
//!   application opens one per request, else the one around the whole call, which then ends
//!   with the count of the last resend. An attribute, not a `tracing` field: a `tracing` span
//!   can only record fields it declared when it was made, and retry-core makes none of the
//!   application's spans.

/// The trace id a dead letter parked here carries: the current OpenTelemetry span's (feature
/// `opentelemetry`), else the call's own.
#[cfg(feature = "dlq")]
pub(crate) fn letter_trace_id() -> String {
    #[cfg(feature = "opentelemetry")]
    if let Some(id) = current::trace_id() {
        return id;
    }
    format!("{:016x}", crate::scope::current_trace_id())
}

#[cfg(all(feature = "opentelemetry", feature = "reqwest"))]
pub(crate) use current::record_resend;

// Only the dead letters' trace id and the resend count read the current span.
#[cfg(all(feature = "opentelemetry", any(feature = "dlq", feature = "reqwest")))]
mod current {
    use opentelemetry::Context;
    #[cfg(feature = "reqwest")]
    use opentelemetry::KeyValue;
    use opentelemetry::trace::TraceContextExt as _;

    /// The semantic conventions' name for how many times a request was sent before this time.
    #[cfg(feature = "reqwest")]
    const RESEND_COUNT: &str = "http.request.resend_count";

    /// The current span's trace id in W3C form, if a valid span context is current.
    #[cfg(feature = "dlq")]
    pub(super) fn trace_id() -> Option<String> {
        Context::map_current(|cx| {
            let span = cx.span();
            let context = span.span_context();
            context.is_valid().then(|| context.trace_id().to_string())
        })
    }

    #[cfg(feature = "reqwest")]
    /// On a request sent by the retry running here: sets `http.request.resend_count` on the
    /// current span when its attempt is a resend (attempt 2 and on).
    pub(crate) fn record_resend() {
        let resends = crate::scope::current_attempt().saturating_sub(1);
        if resends > 0 {
            Context::map_current(|cx| {
                cx.span()
                    .set_attribute(KeyValue::new(RESEND_COUNT, i64::from(resends)));
            });
        }
    }
}
