//! Writing the impl: one `match` arm per variant, every token that reads a field located at the
//! field's type, so type errors point at the user's field.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{GenericParam, Generics, Ident, Path, Type, WhereClause};

use super::check::Action;
use crate::respan::respan;

pub(super) struct Target<'a> {
    pub(super) ident: &'a Ident,
    pub(super) generics: &'a Generics,
    pub(super) krate: Option<Path>,
    /// `#[classify(reason = display)]`: the span of `display`.
    pub(super) reason_display: Option<Span>,
}

impl Target<'_> {
    fn private(&self) -> TokenStream {
        match &self.krate {
            Some(path) => quote!(#path::__private),
            None => quote!(::retry_core::__private),
        }
    }

    /// The impl emitted beside errors: it never runs (the crate does not compile), and it keeps
    /// every use of the type as a `Classify` error from being reported too.
    pub(super) fn fallback(&self) -> TokenStream {
        let private = self.private();
        let ident = self.ident;
        let (impl_generics, ty_generics, where_clause) = self.generics.split_for_impl();
        quote! {
            #[automatically_derived]
            impl #impl_generics #private::Classify for #ident #ty_generics #where_clause {
                fn classify(&self) -> #private::Decision {
                    #private::Decision::Stop
                }
            }
        }
    }

    pub(super) fn expand_enum(&self, variants: &[(&Ident, Action<'_>)]) -> TokenStream {
        let private = self.private();
        let arms = variants.iter().map(|(variant, action)| {
            let pattern = match action {
                Action::Retry | Action::Stop => quote!(Self::#variant { .. }),
                Action::Delegate(member, ty) | Action::RetryAfter(member, ty) => {
                    let field = field_binding(ty.span());
                    quote!(Self::#variant { #member: #field, .. })
                }
            };
            let decision = decision(action, &private);
            quote!(#pattern => #decision,)
        });
        let body = if variants.is_empty() {
            // An enum without variants has no value to classify.
            quote!(match *self {})
        } else {
            quote!(match self { #(#arms)* })
        };
        // A delegated field also gives its reason; the other variants keep the default `None`.
        let delegates = variants
            .iter()
            .any(|(_, action)| matches!(action, Action::Delegate(..)));
        let reason = delegates.then(|| {
            let arms = variants.iter().map(|(variant, action)| match action {
                Action::Delegate(member, ty) => {
                    let field = field_binding(ty.span());
                    let reason = delegated(&private, ty, "reason");
                    quote!(Self::#variant { #member: #field, .. } => #reason,)
                }
                _ => quote!(Self::#variant { .. } => ::core::option::Option::None,),
            });
            quote!(match self { #(#arms)* })
        });
        let reason = self.or_display(reason);
        self.implement(variants.iter().map(|(_, action)| action), &body, reason)
    }

    pub(super) fn expand_struct(&self, action: &Action<'_>) -> TokenStream {
        let private = self.private();
        let binding = match action {
            Action::Retry | Action::Stop => TokenStream::new(),
            Action::Delegate(member, ty) | Action::RetryAfter(member, ty) => {
                let field = field_binding(ty.span());
                quote!(let Self { #member: #field, .. } = self;)
            }
        };
        let decision = decision(action, &private);
        let reason = match action {
            Action::Delegate(_, ty) => {
                let reason = delegated(&private, ty, "reason");
                Some(quote!(#binding #reason))
            }
            Action::Retry | Action::Stop | Action::RetryAfter(..) => None,
        };
        let reason = self.or_display(reason);
        self.implement([action], &quote!(#binding #decision), reason)
    }

    /// With `reason = display`, `reason` (a delegated field's), else the error's `Display`; the
    /// `to_string` is located at `display`, so a type without `Display` is reported there.
    fn or_display(&self, reason: Option<TokenStream>) -> Option<TokenStream> {
        let Some(span) = self.reason_display else {
            return reason;
        };
        let to_string = quote_spanned!(at(span)=> ::std::string::ToString::to_string);
        let display = quote!(#to_string(self));
        Some(match reason {
            Some(reason) => quote! {
                match { #reason } {
                    ::core::option::Option::Some(reason) => ::core::option::Option::Some(reason),
                    ::core::option::Option::None => ::core::option::Option::Some(#display),
                }
            },
            None => quote!(::core::option::Option::Some(#display)),
        })
    }

    /// The impl, with a `Classify` bound on every delegated field whose type uses a generic
    /// parameter (and on no other), and `reason` when a field is delegated to.
    fn implement<'b, 'a: 'b>(
        &self,
        actions: impl IntoIterator<Item = &'b Action<'a>>,
        body: &TokenStream,
        reason: Option<TokenStream>,
    ) -> TokenStream {
        let private = self.private();
        let params: Vec<&Ident> = self
            .generics
            .params
            .iter()
            .filter_map(|param| match param {
                GenericParam::Type(ty) => Some(&ty.ident),
                GenericParam::Const(c) => Some(&c.ident),
                GenericParam::Lifetime(_) => None,
            })
            .collect();
        let mut bounded: Vec<String> = Vec::new();
        let mut bounds: Vec<TokenStream> = Vec::new();
        let mut waits = false;
        for action in actions {
            match action {
                Action::Delegate(_, ty) => {
                    let key = ty.to_token_stream().to_string();
                    if mentions(ty.to_token_stream(), &params) && !bounded.contains(&key) {
                        bounded.push(key);
                        let classify = respan(quote!(#private::Classify), at(ty.span()));
                        bounds.push(quote_spanned!(ty.span()=> #ty: #classify));
                    }
                }
                Action::RetryAfter(..) => waits = true,
                Action::Retry | Action::Stop => {}
            }
        }
        let wait_trait = waits.then(retry_after_trait);
        let (impl_generics, ty_generics, written) = self.generics.split_for_impl();
        let where_clause = with_bounds(written, &bounds);
        let ident = self.ident;
        let reason = reason.map(|reason| {
            quote! {
                #[inline]
                fn reason(&self) -> ::core::option::Option<::std::string::String> {
                    #reason
                }
            }
        });
        quote! {
            #[automatically_derived]
            impl #impl_generics #private::Classify for #ident #ty_generics #where_clause {
                #[inline]
                fn classify(&self) -> #private::Decision {
                    #wait_trait
                    #body
                }
                #reason
            }
        }
    }
}

/// The type's own `where` clause (`written`) with `bounds` added.
fn with_bounds(written: Option<&WhereClause>, bounds: &[TokenStream]) -> TokenStream {
    if bounds.is_empty() {
        return written.to_token_stream();
    }
    let (where_token, mut predicates) = match written {
        Some(clause) => (
            clause.where_token.to_token_stream(),
            clause.predicates.to_token_stream(),
        ),
        None => (quote!(where), TokenStream::new()),
    };
    if written.is_some_and(|clause| !clause.predicates.empty_or_trailing()) {
        predicates.extend(quote!(,));
    }
    quote!(#where_token #predicates #(#bounds),*)
}

/// A span at the user's token `span` with the macro's own hygiene: errors point at the user's
/// code, and lints treat the tokens as generated.
fn at(span: Span) -> Span {
    Span::mixed_site().located_at(span)
}

/// The name a read field is bound to, located at the field's type so a type error points there.
/// Hygienic, so no local name of the user's can clash with it. (A constant in scope named
/// `__retry_field` would still turn it into a constant pattern: items resolve at the call site
/// even from `mixed_site` spans, and `ref` does not help.)
fn field_binding(ty: Span) -> Ident {
    Ident::new("__retry_field", at(ty))
}

/// The local trait's name, at `span` (hygienic wherever it is located).
fn retry_after_trait_ident(span: Span) -> Ident {
    Ident::new("RetryAfterField", Span::mixed_site().located_at(span))
}

/// What a `retry_after` field may be: `Duration` or `Option<Duration>`. A local trait (inside
/// `classify`, so invisible to the user) rather than `Into<Option<Duration>>`, for an error that
/// names the field's type and says what to write, instead of every `From` impl of `Option`.
fn retry_after_trait() -> TokenStream {
    let name = retry_after_trait_ident(Span::call_site());
    quote! {
        #[diagnostic::on_unimplemented(
            message = "a `retry_after` field must be a `Duration` or an `Option<Duration>`, not `{Self}`",
            label = "named by `retry_after`, but not a `Duration` or `Option<Duration>`",
            note = "store the wait as a `std::time::Duration` (e.g. `Duration::from_secs(n)`), or classify the variant with `#[classify(retry)]`"
        )]
        trait #name {
            fn wait(&self) -> ::core::option::Option<::core::time::Duration>;
        }
        impl #name for ::core::time::Duration {
            #[inline]
            fn wait(&self) -> ::core::option::Option<::core::time::Duration> {
                ::core::option::Option::Some(*self)
            }
        }
        impl #name for ::core::option::Option<::core::time::Duration> {
            #[inline]
            fn wait(&self) -> ::core::option::Option<::core::time::Duration> {
                *self
            }
        }
    }
}

/// The decision of one arm, spanned on the field it reads so a type error points at the field.
fn decision(action: &Action<'_>, private: &TokenStream) -> TokenStream {
    match action {
        Action::Retry => quote!(#private::Decision::Retry),
        Action::Stop => quote!(#private::Decision::Stop),
        Action::Delegate(_, ty) => delegated(private, ty, "classify"),
        Action::RetryAfter(_, ty) => {
            let span = at(ty.span());
            let field = field_binding(ty.span());
            let name = retry_after_trait_ident(span);
            let wait = quote_spanned!(span=> #name::wait(#field));
            quote! {
                ::core::option::Option::map_or(
                    #wait,
                    #private::Decision::Retry,
                    #private::Decision::RetryAfter,
                )
            }
        }
    }
}

/// `Classify::<method>(field)` on a delegated field, located at the field's type: a type that is
/// not `Classify` is reported there, once (`classify` and `reason` give identical errors, which
/// rustc shows once).
fn delegated(private: &TokenStream, ty: &Type, method: &str) -> TokenStream {
    let span = at(ty.span());
    let field = field_binding(ty.span());
    let private = respan(private.clone(), span);
    let method = Ident::new(method, span);
    quote_spanned!(span=> #private::Classify::#method(#field))
}

/// Whether `tokens` name one of `params`.
fn mentions(tokens: TokenStream, params: &[&Ident]) -> bool {
    tokens.into_iter().any(|tree| match tree {
        TokenTree::Ident(ident) => params.iter().any(|p| **p == ident),
        TokenTree::Group(group) => mentions(group.stream(), params),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}
