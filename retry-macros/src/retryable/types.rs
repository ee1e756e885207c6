//! How the emitted code names the runtime and the function's output type.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{AngleBracketedGenericArguments, GenericArgument, PathArguments, Type};

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
pub(crate) fn inferred(output: &Type) -> TokenStream {
    let mut tokens = TokenStream::new();
    print_inferred(output, &mut tokens);
    tokens
}

/// Prints `ty` as syn does, with each `impl Trait` as `_`: through the types `ty` is made of
/// (references, tuples, arrays...) and the type arguments of its paths (`Result<impl Display,
/// E>`). Trait objects, function pointers and the bounds of an `impl` cannot hold an `impl Trait`
/// and are printed as written.
fn print_inferred(ty: &Type, tokens: &mut TokenStream) {
    match ty {
        Type::ImplTrait(opaque) => tokens.extend(quote_spanned!(opaque.impl_token.span=> _)),
        Type::Array(array) => array.bracket_token.surround(tokens, |tokens| {
            print_inferred(&array.elem, tokens);
            array.semi_token.to_tokens(tokens);
            array.len.to_tokens(tokens);
        }),
        Type::Group(group) => group
            .group_token
            .surround(tokens, |tokens| print_inferred(&group.elem, tokens)),
        Type::Paren(paren) => paren
            .paren_token
            .surround(tokens, |tokens| print_inferred(&paren.elem, tokens)),
        Type::Slice(slice) => slice
            .bracket_token
            .surround(tokens, |tokens| print_inferred(&slice.elem, tokens)),
        Type::Ptr(ptr) => {
            ptr.star_token.to_tokens(tokens);
            ptr.mutability.to_tokens(tokens);
            print_inferred(&ptr.elem, tokens);
        }
        Type::Reference(reference) => {
            reference.and_token.to_tokens(tokens);
            reference.lifetime.to_tokens(tokens);
            reference.mutability.to_tokens(tokens);
            print_inferred(&reference.elem, tokens);
        }
        Type::Tuple(tuple) => tuple.paren_token.surround(tokens, |tokens| {
            for pair in tuple.elems.pairs() {
                print_inferred(pair.value(), tokens);
                pair.punct().to_tokens(tokens);
            }
            // `(T,)`, not `(T)`.
            if tuple.elems.len() == 1 && !tuple.elems.trailing_punct() {
                <syn::Token![,]>::default().to_tokens(tokens);
            }
        }),
        Type::Path(path) if path.qself.is_none() => {
            path.path.leading_colon.to_tokens(tokens);
            for pair in path.path.segments.pairs() {
                let segment = pair.value();
                segment.ident.to_tokens(tokens);
                match &segment.arguments {
                    PathArguments::AngleBracketed(args) => print_arguments(args, tokens),
                    other => other.to_tokens(tokens),
                }
                pair.punct().to_tokens(tokens);
            }
        }
        other => other.to_tokens(tokens),
    }
}

/// `<'a, T, N>` as syn prints it (lifetimes first), each type argument through
/// [`print_inferred`].
fn print_arguments(args: &AngleBracketedGenericArguments, tokens: &mut TokenStream) {
    args.colon2_token.to_tokens(tokens);
    args.lt_token.to_tokens(tokens);
    let mut trailing_or_empty = true;
    let lifetimes_first = args
        .args
        .pairs()
        .filter(|pair| matches!(pair.value(), GenericArgument::Lifetime(_)))
        .chain(
            args.args
                .pairs()
                .filter(|pair| !matches!(pair.value(), GenericArgument::Lifetime(_))),
        );
    for pair in lifetimes_first {
        if !trailing_or_empty {
            <syn::Token![,]>::default().to_tokens(tokens);
        }
        match pair.value() {
            GenericArgument::Type(ty) => print_inferred(ty, tokens),
            other => other.to_tokens(tokens),
        }
        pair.punct().to_tokens(tokens);
        trailing_or_empty = pair.punct().is_some();
    }
    args.gt_token.to_tokens(tokens);
}

/// `crate = path`, or `::retry_core`.
pub(crate) fn crate_path(krate: Option<&syn::Path>) -> TokenStream {
    krate.map_or_else(|| quote!(::retry_core), ToTokens::to_token_stream)
}

#[cfg(test)]
mod tests {
    use super::inferred;
    use quote::ToTokens;

    #[test]
    fn every_impl_trait_becomes_an_inferred_type_and_the_rest_is_printed_as_syn_prints_it() {
        for (written, expected) in [
            ("Result<impl Display, E>", "Result < _ , E >"),
            (
                "::std::result::Result<(impl Debug, u8,), io::Error>",
                ":: std :: result :: Result < (_ , u8 ,) , io :: Error >",
            ),
            ("Result<(impl Debug), E>", "Result < (_) , E >"),
            ("Result<(impl Debug,), E>", "Result < (_ ,) , E >"),
            (
                "Result<&'a mut [impl Debug], Box<[impl Error; 2]>>",
                "Result < & 'a mut [_] , Box < [_ ; 2] > >",
            ),
            ("Result<*const impl Debug, E>", "Result < * const _ , E >"),
            (
                "Result<Vec<impl Iterator<Item = impl Debug> + Send>, E>",
                "Result < Vec < _ > , E >",
            ),
            (
                "Result<Foo<T, 'a, 3>, E>",
                "Result < Foo < 'a , T , 3 > , E >",
            ),
        ] {
            let ty: syn::Type = syn::parse_str(written).expect("a type");
            assert_eq!(inferred(&ty).to_string(), expected, "{written}");
        }
        for unchanged in [
            "Result<u8, E>",
            "Result<Box<dyn Fn(u8) -> u8 + Send>, E>",
            "Result<<T as Trait>::Out, E>",
            "Result<fn(u8) -> u8, E>",
        ] {
            let ty: syn::Type = syn::parse_str(unchanged).expect("a type");
            assert_eq!(
                inferred(&ty).to_string(),
                ty.to_token_stream().to_string(),
                "{unchanged}"
            );
        }
    }
}
