//! The body of one attempt, as the loop runs it.

use proc_macro2::TokenStream;

/// The statements of one attempt; `items` go first (the nesting probes are items).
pub(crate) struct AttemptBody {
    pub(crate) items: TokenStream,
    pub(crate) stmts: TokenStream,
    /// The arguments are also read outside the body (by `#[idempotent]`'s `key`, `store`...),
    /// so a body that does not read them is no reason to warn.
    pub(crate) args_used_elsewhere: bool,
    /// `#[idempotent]` below: its encoded key, for the dead letter.
    pub(crate) idempotency_key: Option<TokenStream>,
    /// `#[tracing::instrument]`: its span, around all the attempts.
    pub(crate) around: Option<crate::instrument::Around>,
}

/// The statements of one attempt, and the span of `#[tracing::instrument]` when the function was
/// instrumented: the span then goes around the loop, and each attempt awaits the body's future.
pub(crate) fn attempt_statements(
    block: syn::Block,
) -> (Vec<syn::Stmt>, Option<crate::instrument::Around>) {
    match crate::instrument::split(block) {
        Ok((around, future)) => (
            vec![syn::Stmt::Expr(syn::parse_quote!(#future.await), None)],
            Some(around),
        ),
        Err(block) => (block.stmts, None),
    }
}
