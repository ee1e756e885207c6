//! How the emitted code names the runtime and the function's output type.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{GenericArgument, PathArguments, ReturnType, Type};

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
    let mut output = output.clone();
    infer(&mut output);
    output
}

/// [`inferred`] in place, through the types `ty` is made of (references, tuples, arrays...) and
/// the type arguments of its paths (`Result<impl Display, E>`). Trait objects and function
/// pointers cannot hold an `impl Trait` and are left as written.
fn infer(ty: &mut Type) {
    match ty {
        Type::ImplTrait(opaque) => {
            let span = opaque.impl_token.span;
            *ty = syn::parse_quote_spanned!(span=> _);
        }
        Type::Array(array) => infer(&mut array.elem),
        Type::Group(group) => infer(&mut group.elem),
        Type::Paren(paren) => infer(&mut paren.elem),
        Type::Ptr(ptr) => infer(&mut ptr.elem),
        Type::Reference(reference) => infer(&mut reference.elem),
        Type::Slice(slice) => infer(&mut slice.elem),
        Type::Tuple(tuple) => tuple.elems.iter_mut().for_each(infer),
        Type::Path(path) => {
            if let Some(qself) = &mut path.qself {
                infer(&mut qself.ty);
            }
            for segment in &mut path.path.segments {
                match &mut segment.arguments {
                    PathArguments::AngleBracketed(args) => {
                        for arg in &mut args.args {
                            match arg {
                                GenericArgument::Type(ty) => infer(ty),
                                GenericArgument::AssocType(assoc) => infer(&mut assoc.ty),
                                _ => {}
                            }
                        }
                    }
                    PathArguments::Parenthesized(args) => {
                        args.inputs.iter_mut().for_each(|arg| infer(&mut arg.ty));
                        if let ReturnType::Type(_, ty) = &mut args.output {
                            infer(ty);
                        }
                    }
                    PathArguments::None => {}
                }
            }
        }
        _ => {}
    }
}

/// `crate = path`, or `::retry_core`.
pub(crate) fn crate_path(krate: Option<&syn::Path>) -> syn::Path {
    krate
        .cloned()
        .unwrap_or_else(|| syn::parse_quote!(::retry_core))
}
