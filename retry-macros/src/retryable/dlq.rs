//! `dlq(...)`: the sink, evaluated before the first attempt, and the dead letter parked in it
//! when the call gives up.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use super::names::Names;
use crate::args::{Classes, DlqArgs};

/// Empty without `dlq(...)`.
#[derive(Default)]
pub(super) struct DeadLetter {
    /// Before the first attempt: binds the sink.
    pub(super) hold_sink: TokenStream,
    /// On give-up, before the error is returned: parks the letter, and rebinds `__retry_returned`
    /// to what the call returns then.
    pub(super) park: TokenStream,
}

/// `dlq(...)`: the sink is evaluated before the first attempt; `id` and `original` only on
/// give-up (by-value arguments are cloned for every attempt, so they are still there).
/// `idempotency_key` is `#[idempotent]`'s encoded key, which the letter carries.
pub(super) fn dead_letter(
    dlq: Option<&DlqArgs>,
    names: &Names,
    idempotency_key: Option<&TokenStream>,
) -> DeadLetter {
    let Some(dlq) = dlq else {
        return DeadLetter::default();
    };
    let private = &names.private;
    let site = names.site();
    let (sink, id, original) = (&dlq.sink, &dlq.id, &dlq.original);
    let held = Ident::new("__retry_dlq_sink", Span::mixed_site());
    let classes = match dlq.classes {
        None => quote!(#private::ParkClasses::All),
        Some(Classes::System) => quote!(#private::ParkClasses::System),
        Some(Classes::Data) => quote!(#private::ParkClasses::Data),
    };
    let redact = match &dlq.redact {
        Some(path) => quote!(::core::option::Option::Some(#path as fn(_) -> _)),
        None => quote!(::core::option::Option::None),
    };
    // The one check that `sink` is a sink: every token at the sink's span, with the
    // hygiene of the binding it reads.
    let sink_at = Span::mixed_site().located_at(sink.span());
    let sink_private = private.at(sink_at);
    let sink_held = Ident::new("__retry_dlq_sink", sink_at);
    let sink_check = quote_spanned!(sink_at=> #sink_private::sink(#sink_held));
    let park_private = private.at(dlq.span);
    let key = match idempotency_key {
        Some(key) => quote!(::core::option::Option::Some(#key)),
        None => quote!(::core::option::Option::None),
    };
    // The same hygienic names, located at `dlq` so unmet bounds point there.
    let at = |name: &str| Ident::new(name, Span::mixed_site().located_at(dlq.span));
    let (state, returned) = (at("__retry_state"), at("__retry_returned"));
    let input = at("__retry_dlq_input");
    // The one check that the error converts from `DlqFailed`, at `dlq`.
    let dlq_at = Span::mixed_site().located_at(dlq.span);
    let dlq_private = private.at(dlq_at);
    let not_parked = quote_spanned!(dlq_at=> #dlq_private::not_parked());
    // `id` and `original` are read only on give-up, by a closure called before
    // the `.await` (so it is not kept in the future).
    let make_input = quote! {
        let #input = #private::letter_on_give_up(&#state, &#returned, || #private::letter_input(&(#id), &(#original), #redact, #key));
    };
    let park = quote_spanned! {dlq.span=>
        let #returned = #park_private::park_on_give_up(#site, &#state, #returned, #sink_check, #input, #classes, #not_parked).await;
    };
    DeadLetter {
        hold_sink: quote! {
            let #held = &(#sink);
        },
        park: quote!(#make_input #park),
    }
}
