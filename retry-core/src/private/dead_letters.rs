//! What `dlq(..)` on `#[retryable]` expands to: the sink, the letter, and the check of the
//! function's error type.

pub use crate::dlq::parking::{
    LetterInput, LetterKey, ParkClasses, ParkSink, letter_input, letter_on_give_up, park_on_give_up,
};
use crate::dlq::{DeadLetterSink, DlqFailed};

/// `dlq(sink = expr)`, checked to be a sink where the user wrote it; see [`ParkSink`].
#[inline]
pub fn sink<S: DeadLetterSink>(sink: &S) -> &dyn ParkSink {
    sink
}

/// `E: From<DlqFailed>`, under a name whose error says what to write.
#[diagnostic::on_unimplemented(
    message = "`dlq(...)` needs the error type `{Self}` to implement `From<DlqFailed>`",
    label = "`{Self}` cannot carry a dead letter that was not parked",
    note = "add `impl From<retry_core::dlq::DlqFailed> for {Self}`: a call whose dead letter could not be parked fails with it, so the message is not acknowledged"
)]
pub trait FromDlqFailed: From<DlqFailed> {}

impl<E: From<DlqFailed>> FromDlqFailed for E {}

/// `E: From<DlqFailed>` for the error type of a function with `dlq(...)`, checked once, at `dlq`;
/// [`park_on_give_up`] converts through what it returns.
#[inline]
pub fn not_parked<E: FromDlqFailed>() -> fn(DlqFailed) -> E {
    E::from
}
