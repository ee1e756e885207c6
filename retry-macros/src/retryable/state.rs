//! The call site's statics, the policy and the state it drives: a literal policy's `static`, a
//! `policy = expr` held in the future, the budget and the recording of failures.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use super::names::{Names, Private};
use crate::args::RetryArgs;

/// The function as metrics and tracing name it, built at compile time: one `static` that the
/// future and every step of the loop name (the state does not keep a copy). Names no body would
/// use, as items are not hygienic.
pub(super) fn site_statics(name: &str, names: &Names) -> TokenStream {
    let Names {
        private,
        site_static,
        ..
    } = names;
    let labels_static = Ident::new("__RETRY_CORE_LABELS", Span::call_site());
    quote! {
        static #labels_static: [#private::metrics::Label; 2] = #private::Site::labels(#name, ::core::module_path!());
        static #site_static: #private::Site = #private::Site::new(#name, ::core::module_path!(), &#labels_static);
    }
}

/// What the loop does with the policy and its state.
pub(super) struct PolicyState {
    /// Before the first attempt: the policy, and the state with its budget and its record of
    /// failures.
    pub(super) setup: TokenStream,
    /// Counts the attempt about to start; evaluates to what `__retry_last` holds.
    pub(super) start_attempt: TokenStream,
}

pub(super) fn policy_and_state(args: &RetryArgs, names: &Names) -> PolicyState {
    let Names { private, state, .. } = names;
    let site = names.site();
    let policy = policy(args, names);
    // Only a dead letter needs the times of the failures.
    let record_failures = args
        .dlq
        .as_ref()
        .map(|_| quote!(let #state = #state.recording_failures();));
    let budget = args.budget.as_ref().map(|expr| {
        let budget = Ident::new("__retry_budget", Span::mixed_site());
        quote_spanned! {expr.span()=>
            let #budget = &(#expr);
            let #state = #state.with_budget(::core::convert::AsRef::<#private::RetryBudget>::as_ref(&#budget));
        }
    });
    let setup = quote! {
        #policy
        #record_failures
        #budget
        let mut #state = #state;
    };
    let start_attempt = quote!(#state.start_attempt(#site));
    PolicyState {
        setup,
        start_attempt,
    }
}

/// A literal policy is a `static`, borrowed straight into the state; `policy = expr` is borrowed
/// (as `store = ..` is: `policy = self.policy` reads the field in place) and held in the future,
/// as the state borrows it.
fn policy(args: &RetryArgs, names: &Names) -> TokenStream {
    let Names { private, state, .. } = names;
    let held = Ident::new("__retry_policy", Span::mixed_site());
    match &args.policy {
        Some(expr) => {
            let expr = quote_spanned!(expr.span()=> #expr);
            quote! {
                let #held = &(#expr);
                let #state = #private::State::new(::core::convert::AsRef::<#private::Policy>::as_ref(&#held));
            }
        }
        None => {
            let knobs = policy_knobs(args, private);
            quote! {
                let #state = #private::State::new({
                    static POLICY: #private::Policy = #private::Policy::new() #knobs;
                    &POLICY
                });
            }
        }
    }
}

/// The builder calls of a literal policy: `.max_attempts(3).base(..)...`.
fn policy_knobs(args: &RetryArgs, private: &Private) -> TokenStream {
    let mut calls = TokenStream::new();
    if let Some(max) = &args.max {
        let n = max.value;
        calls.extend(quote!(.max_attempts(#n)));
    }
    for (method, value) in [
        ("base", &args.base),
        ("cap", &args.cap),
        ("deadline", &args.deadline),
        ("attempt_timeout", &args.attempt_timeout),
        ("max_retry_after", &args.max_retry_after),
    ] {
        if let Some(d) = value {
            let method = Ident::new(method, Span::call_site());
            let d = duration_tokens(d.value);
            calls.extend(quote!(.#method(#d)));
        }
    }
    if let Some(jitter) = &args.jitter {
        let variant = match jitter.value.as_str() {
            "none" => "None",
            "equal" => "Equal",
            "decorrelated" => "Decorrelated",
            _ => "Full",
        };
        let variant = Ident::new(variant, Span::call_site());
        calls.extend(quote!(.jitter(#private::Jitter::#variant)));
    }
    calls
}

pub(crate) fn duration_tokens(d: std::time::Duration) -> TokenStream {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}
