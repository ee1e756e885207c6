#![doc = include_str!("../../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

pub mod backoff;
mod call;
mod classify;
mod policy;
mod retrying;
mod state;

pub use call::{ByClassify, Classifier, NoHook, RetryCall, RetryFuture, RetryHook};
pub use classify::{Classify, Decision, Elapsed};
pub use policy::{Jitter, Policy, UnknownJitter};
pub use retrying::Retrying;
pub use state::GiveUp;

pub use retry_macros::retryable;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
