//! The conformance suite every [`IdempotencyStore`](super::IdempotencyStore) passes.
