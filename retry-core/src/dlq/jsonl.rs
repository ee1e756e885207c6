//! Placeholder: being written.
/// Placeholder.
#[derive(Debug)]
pub struct JsonlSink;
/// Placeholder.
#[derive(Debug)]
pub struct TornLine;
