//! Placeholder.
/// Placeholder.
#[derive(Debug)]
pub struct SqliteDeadLetters;
