//! How the emitted code names the runtime and the function's output type.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::Type;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;

/// `impl Future<Output = output>` for the rewritten signature. The `impl` token carries a span of
/// this crate (edition 2024), so the opaque type captures every lifetime in scope, as an
/// `async fn`'s future does, in crates of every edition: with the user's span, an edition 2018
/// or 2021 crate would capture none of the elided ones (E0700 on every `&self` method).
pub(crate) fn opaque_future(output: &Type) -> TokenStream {
    let impl_token = syn::Token![impl](Span::mixed_site().located_at(output.span()));
    quote_spanned! {output.span()=> #impl_token ::core::future::Future<Output = #output>}
}

/// `output` as it may be written in expression position (turbofish): every `impl Trait` in it,
/// which only the signature may name, becomes `_` and is inferred from the body.
pub(crate) fn inferred(output: &Type) -> Type {
    struct Infer;
    impl VisitMut for Infer {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(opaque) = ty {
                let span = opaque.impl_token.span;
                *ty = syn::parse_quote_spanned!(span=> _);
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut output = output.clone();
    Infer.visit_type_mut(&mut output);
    output
}

/// `crate = path`, or `::retry_core`.
pub(crate) fn crate_path(krate: Option<&syn::Path>) -> syn::Path {
    krate
        .cloned()
        .unwrap_or_else(|| syn::parse_quote!(::retry_core))
}
