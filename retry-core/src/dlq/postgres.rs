//! Placeholder.
/// Placeholder.
#[derive(Debug)]
pub struct PgDeadLetters;
