//! The names the parts of the retry loop share: the runtime's path, and the hygienic idents one
//! part binds and another reads.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::Ident;

use crate::respan::respan;

/// The runtime's path, `krate::__private`.
pub(super) struct Private(TokenStream);

impl Private {
    pub(super) fn new(krate: &TokenStream) -> Self {
        Private(quote!(#krate::__private))
    }

    /// The runtime's path with the span of a user token, so an unmet bound points at the token.
    pub(super) fn at(&self, span: Span) -> TokenStream {
        respan(self.0.clone(), span)
    }
}

impl ToTokens for Private {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        self.0.to_tokens(tokens);
    }
}

/// What more than one part of the loop names. The locals are `Span::mixed_site()`, so no body
/// sees or shadows them; the `static`s are names no body would use, as items are not hygienic.
pub(super) struct Names {
    pub(super) private: Private,
    /// `__retry_state`: the `State`.
    pub(super) state: Ident,
    /// `__RETRY_CORE_SITE`: the function as metrics and tracing name it.
    pub(super) site_static: Ident,
    /// `__retry_last`: what starting an attempt returns, read by the arguments' clones.
    pub(super) last: Ident,
    /// `__retry_classifier`: a `retry_if = path` held for the whole call.
    pub(super) classifier: Ident,
    /// `__retry_hook`: the `on_retry` hook.
    pub(super) hook: Ident,
    /// `__retry_wait`: the pause before the next attempt.
    pub(super) wait: Ident,
    /// `__retry_outcome`, `__retry_returned`, `__retry_error`: located at the output type, as
    /// they hold values of it.
    pub(super) outcome: Ident,
    pub(super) returned: Ident,
    pub(super) error: Ident,
}

impl Names {
    pub(super) fn new(private: Private, output_span: Span) -> Self {
        // `'__retry_loop` is never named by the user: the body runs inside its own async block.
        let at_output = Span::mixed_site().located_at(output_span);
        Names {
            private,
            state: Ident::new("__retry_state", Span::mixed_site()),
            site_static: Ident::new("__RETRY_CORE_SITE", Span::call_site()),
            last: Ident::new("__retry_last", Span::mixed_site()),
            classifier: Ident::new("__retry_classifier", Span::mixed_site()),
            hook: Ident::new("__retry_hook", Span::mixed_site()),
            wait: Ident::new("__retry_wait", Span::mixed_site()),
            outcome: Ident::new("__retry_outcome", at_output),
            returned: Ident::new("__retry_returned", at_output),
            error: Ident::new("__retry_error", at_output),
        }
    }

    /// `&__RETRY_CORE_SITE`, which the future and every step of the loop are given.
    pub(super) fn site(&self) -> TokenStream {
        let site_static = &self.site_static;
        quote!(&#site_static)
    }
}
