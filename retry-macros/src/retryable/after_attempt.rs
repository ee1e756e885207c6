//! What decides a failure besides the policy, the two arguments of `State::after_attempt` with
//! the outcome: the classifier (`retry_if`, or the error's `Classify`) and the `on_retry` hook.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use super::names::Names;
use crate::args::RetryArgs;

pub(super) struct AfterAttempt {
    /// Before the first attempt: a `retry_if` classifier and the hook, held for the whole call.
    pub(super) hold: TokenStream,
    /// The classifier, as `after_attempt` takes it (`&mut`).
    pub(super) classifier: TokenStream,
    /// The hook, as `after_attempt` takes it (`&mut`).
    pub(super) hook: TokenStream,
}

pub(super) fn classifier_and_hook(
    args: &RetryArgs,
    names: &Names,
    output_span: Span,
) -> AfterAttempt {
    let Names {
        private,
        classifier,
        hook,
        ..
    } = names;
    // `retry_if = path` is held for the whole call (it may keep state between attempts); the
    // default is made where it is used, so its two function pointers are not kept in the future.
    let (hold_classifier, classifier_ref) = match &args.retry_if {
        Some(path) => (
            quote!(let mut #classifier = #path;),
            quote!(&mut #classifier),
        ),
        None => {
            let private = private.at(output_span);
            (
                TokenStream::new(),
                quote_spanned!(output_span=> &mut #private::by_classify()),
            )
        }
    };
    let on_retry = match &args.on_retry {
        Some(path) => quote!(#private::Hook::new(#path)),
        None => quote!(#private::NoHook),
    };
    // Spanned at the path, so a function of the wrong signature is reported where it is named.
    let hook_arg = match &args.on_retry {
        Some(path) => {
            let at_path = Ident::new("__retry_hook", hook.span().located_at(path.span()));
            quote_spanned!(path.span()=> &mut #at_path)
        }
        None => quote!(&mut #hook),
    };
    AfterAttempt {
        hold: quote! {
            #hold_classifier
            let mut #hook = #on_retry;
        },
        classifier: classifier_ref,
        hook: hook_arg,
    }
}
