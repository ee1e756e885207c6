//! Most of the workspace's integration tests, one module per file of `tests/`, in one test binary:
//! each binary links every dependency on its own (tens of MB, a link of seconds), so sixty of them
//! filled CI's disk and took minutes of its time. Run one file's tests with
//! `cargo test --test suite FILE::` (for example `cargo test --test suite budget::`).
//!
//! A file stays a binary of its own (a `[[test]]` in Cargo.toml) when it cannot share a process:
//! it installs a global `tracing` subscriber or captures events (a subscriber changes what every
//! other test's call sites are interested in), runs itself again as a child process by test name,
//! checks metric labels that name its own module path, or is the trybuild or soak run.

// The helpers several files use, once for the whole binary (each file says `use crate::NAME`).
#[path = "common/curl.rs"]
mod curl;
#[path = "common/example.rs"]
mod example;
#[cfg(feature = "postgres")]
#[path = "common/pg.rs"]
mod pg;
#[path = "common/runtime.rs"]
mod runtime;
#[path = "common/tempdir.rs"]
mod tempdir;
// The examples' upstream: the tests use only part of it.
#[allow(dead_code)]
#[path = "../examples/common/scripted.rs"]
mod scripted;

mod amplification;
mod budget;
mod conformance;
mod demo;
mod derive_classify;
mod dlq;
mod dlq_conformance;
mod dlq_pg;
mod dlq_sqlite;
mod duration_grammar;
mod error_sources;
mod fault_pg_restart;
mod fault_store_hangs;
mod file_permissions;
mod herd;
mod http_classify;
mod http_transactional;
mod http_unknown_outcome;
mod idempotency_hostile;
mod idempotency_key;
mod idempotency_layer;
mod idempotent;
mod import_dag;
mod jitter;
mod jsonl_props;
mod key_props;
mod layer_props;
mod layers;
mod lint_clean;
mod nested;
mod on_retry_context;
mod opentelemetry;
mod pg_tls;
mod pg_transactional;
mod policy;
mod policy_config;
mod policy_from_config;
mod postgres_setup;
mod quotes;
mod redrive;
mod reqwest_client;
mod reqwest_connect;
mod reqwest_middleware;
mod retryable;
mod rides;
mod sql_bound_params;
mod sqlite_idempotent;
mod sqlite_transactional;
mod steps;
mod tonic;
mod tower_retry;
mod transactional;
mod unknown_outcome;
