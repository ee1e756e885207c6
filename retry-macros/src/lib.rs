//! Procedural macros of [`retry-core`](https://docs.rs/retry-core). Depend on `retry-core`,
//! which re-exports them; the code they generate calls `retry_core::__private`.

mod args;
mod boxed;
mod classify;
mod errors;
mod idempotent;
mod instrument;
mod nesting;
mod respan;
mod retryable;
mod suggest;
mod walk;

use proc_macro::TokenStream;

/// Retries an `async fn` according to its arguments; documented in `retry_core::retryable`.
#[proc_macro_attribute]
pub fn retryable(attr: TokenStream, item: TokenStream) -> TokenStream {
    retryable::expand(attr.into(), item.into()).into()
}

/// Derives `Classify` from a `#[classify(...)]` on every variant; documented in
/// `retry_core::Classify`.
#[proc_macro_derive(Classify, attributes(classify))]
pub fn derive_classify(input: TokenStream) -> TokenStream {
    classify::expand(input.into()).into()
}

/// Makes an `async fn` idempotent by key; documented in `retry_core::idempotent`.
#[proc_macro_attribute]
pub fn idempotent(attr: TokenStream, item: TokenStream) -> TokenStream {
    idempotent::expand(attr.into(), item.into()).into()
}
