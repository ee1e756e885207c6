//! Nothing but the test: `tests/editions/shapes.rs`, built in edition 2024.
