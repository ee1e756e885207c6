//! `#[tracing::instrument]` next to `#[retryable]`: one span around every attempt, in either order.
//!
//! Whichever of the two expands first, the function reaches `#[retryable]` as tracing-attributes
//! makes an `async fn`: `#[retryable]` above `#[instrument]` re-emits the function with the
//! `#[instrument]` moved above itself ([`take`]), so it always runs second. Its body is then
//!
//! ```text
//! let __tracing_attr_span = <the span>;
//! let __tracing_instrument_future = async move { <the body> };
//! if !__tracing_attr_span.is_disabled() { Instrument::instrument(__tracing_instrument_future, __tracing_attr_span).await } else { .. }
//! ```
//!
//! [`split`] takes that apart: each attempt awaits the body's future, and the span statements go
//! around the whole retry loop, which takes the place of `__tracing_instrument_future`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::{Attribute, Block, Expr, Pat, Stmt};

use crate::walk::{self, Walk};

/// Removes the first `#[instrument]` / `#[tracing::instrument]` attribute.
pub(crate) fn take(attrs: &mut Vec<Attribute>) -> Option<Attribute> {
    let index = attrs.iter().position(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "instrument")
    })?;
    Some(attrs.remove(index))
}

/// The statements of an instrumented `async fn` that go around all the attempts.
pub(crate) struct Around {
    /// Up to and including `let __tracing_attr_span = ..;`.
    before: Vec<Stmt>,
    /// `__tracing_instrument_future`, as tracing-attributes spelled it (its hygiene).
    future: Pat,
    /// The `if` that awaits the future inside the span.
    after: Vec<Stmt>,
}

impl Around {
    /// `future` (the retry loop's body) instrumented with the span, as statements of an `async`
    /// block.
    pub(crate) fn wrap(&self, future: TokenStream) -> TokenStream {
        let Around {
            before,
            future: name,
            after,
        } = self;
        quote! {
            #(#before)*
            let #name = async move { #future };
            #(#after)*
        }
    }
}

fn is_local_named(stmt: &Stmt, name: &str) -> bool {
    matches!(stmt, Stmt::Local(local) if matches!(&local.pat, Pat::Ident(ident) if ident.ident == name))
}

/// An instrumented `async fn` body split into what goes around the attempts and the future each
/// attempt awaits; any other body is given back.
pub(crate) fn split(block: Block) -> Result<(Around, Expr), Block> {
    let Some(at) = block.stmts.windows(2).position(|pair| {
        is_local_named(&pair[0], "__tracing_attr_span")
            && is_local_named(&pair[1], "__tracing_instrument_future")
    }) else {
        return Err(block);
    };
    let Block { brace_token, stmts } = block;
    let mut before = stmts;
    let after = before.split_off(at + 2);
    let (future, mut future_expr) = match before.pop() {
        Some(Stmt::Local(syn::Local {
            pat,
            init: Some(init),
            ..
        })) => (pat, *init.expr),
        // Without an initialiser: not tracing-attributes' body.
        other => {
            before.extend(other);
            before.extend(after);
            return Err(Block {
                brace_token,
                stmts: before,
            });
        }
    };
    // Each attempt awaits the future at once: it borrows the attempt's arguments instead of
    // moving them, so a `&mut self` is reborrowed for each attempt, not moved into the first.
    walk::expr(&mut Borrowing, &mut future_expr);
    let around = Around {
        before,
        future,
        after,
    };
    Ok((around, future_expr))
}

/// Drops `move` from tracing-attributes' own `async move` blocks, stopping at the user's body
/// (the block that starts with tracing-attributes' fake return), whose blocks stay as written.
struct Borrowing;

impl Walk for Borrowing {
    fn enter(&mut self, expr: &mut Expr) -> bool {
        let Expr::Async(block) = expr else {
            return true;
        };
        block.capture = None;
        let users = block.block.stmts.first().is_some_and(|first| {
            matches!(first, Stmt::Expr(Expr::If(_), _))
                && first
                    .to_token_stream()
                    .to_string()
                    .contains("__tracing_attr_fake_return")
        });
        !users
    }
}
