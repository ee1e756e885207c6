//! Moving generated tokens onto the user's tokens, so rustc's errors point at the user's code.

use proc_macro2::{Group, Span, TokenStream, TokenTree};

/// `tokens` with every span (nested groups included) set to `span`.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let TokenTree::Group(group) = &tree {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tree = inner.into();
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}
