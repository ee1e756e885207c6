//! The retry loop, the bulk of the expansion: `#[retryable]` emits it, and so does
//! `#[idempotent]` above a `#[retryable]`, so the two attributes retry the same way.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, Pat, Type};

use super::arguments::{Argument, Passing, parameter_attributes, strip_type_ascription};
use super::{AttemptBody, crate_path, inferred};
use crate::args::RetryArgs;
use crate::respan::respan;

/// The retry loop as an expression of type `Retrying<impl Future<Output = output>>`. Renames the
/// signature's arguments it needs to (patterns), so the loop can clone or reborrow them for
/// each attempt; `caller` is a `&'static Location` expression for the nesting warning.
pub(crate) fn retry_loop(
    args: &RetryArgs,
    sig: &mut syn::Signature,
    output: &Type,
    body: AttemptBody,
    caller: &TokenStream,
) -> TokenStream {
    let krate = crate_path(args.krate.as_ref());
    let private = quote!(#krate::__private);
    // The runtime's path with the span of a user token, so an unmet bound points at the token.
    let private_at = |span: Span| respan(private.clone(), span);
    let name = sig.ident.to_string();
    let output_span = output.span();
    let mut arguments = Vec::new();
    for (index, input) in sig.inputs.iter_mut().enumerate() {
        let FnArg::Typed(typed) = input else { continue };
        let pat = (*typed.pat).clone();
        let outer = match &pat {
            // Keep the user's name in the signature (rustdoc shows it); `mut` moves inside.
            Pat::Ident(ident) if ident.by_ref.is_none() && ident.subpat.is_none() => {
                ident.ident.clone()
            }
            _ => format_ident!("__retry_arg{}", index, span = Span::mixed_site()),
        };
        *typed.pat = syn::parse_quote!(#outer);
        let passing = match &*typed.ty {
            Type::Reference(r) if r.mutability.is_some() => Passing::Reborrow,
            Type::Reference(_) => Passing::Copy,
            _ => Passing::CloneUntilLast,
        };
        let (cfgs, lints) = parameter_attributes(&typed.attrs);
        arguments.push(Argument {
            pat,
            outer,
            passing,
            ty: (*typed.ty).clone(),
            cfgs,
            lints,
        });
    }

    // Hygienic names, located at the argument's type so errors about it point there.
    let slot = |i: usize, at: Span| {
        format_ident!(
            "__retry_slot{}",
            i,
            span = Span::mixed_site().located_at(at)
        )
    };
    let this_attempt = |i: usize, at: Span| {
        format_ident!(
            "__retry_attempt{}",
            i,
            span = Span::mixed_site().located_at(at)
        )
    };
    let last = Ident::new("__retry_last", Span::mixed_site());
    let mut slots = Vec::new();
    let mut per_attempt = Vec::new();
    let mut bindings = Vec::new();
    for (i, argument) in arguments.iter().enumerate() {
        let Argument {
            pat,
            outer,
            passing,
            ty,
            cfgs,
            lints,
        } = argument;
        let (slot, this_attempt) = (slot(i, ty.span()), this_attempt(i, ty.span()));
        match passing {
            Passing::Reborrow => {
                per_attempt.push(quote!(#(#cfgs)* let #this_attempt = &mut *#outer;));
            }
            Passing::Copy => {
                per_attempt.push(quote!(#(#cfgs)* let #this_attempt = #outer;));
            }
            // `dlq(..)`: the argument stays where it is, each attempt gets a clone (the last
            // one too), so `id` and `original` can still be read when the call gives up; a
            // successful call never serialises its original.
            Passing::CloneUntilLast if args.dlq.is_some() => {
                let private = private_at(ty.span());
                per_attempt.push(quote_spanned! {ty.span()=>
                    #(#cfgs)* let #this_attempt = #private::clone_arg(&#outer);
                });
            }
            Passing::CloneUntilLast => {
                slots.push(quote!(#(#cfgs)* let mut #slot = ::core::option::Option::Some(#outer);));
                // Spanned on the type, so a missing `Clone` points at the argument: every token
                // of the call has the slot's hygiene, or rustc would widen the span of the
                // argument `&mut slot` to the whole attribute.
                let at = Span::mixed_site().located_at(ty.span());
                let private = private_at(at);
                per_attempt.push(quote_spanned! {at=>
                    #(#cfgs)* let #this_attempt = #private::take_or_clone(&mut #slot, #last);
                });
            }
        }
        // The pattern is bound inside the attempt's block, so the body sees a fresh value
        // each time, and `mut` and destructuring work as written.
        let pat = strip_type_ascription(pat);
        // Arguments the attribute itself reads (`dlq(...)`, `policy`, `budget`, `#[idempotent]`'s
        // key) need not be read by the body too.
        let used_elsewhere = body.args_used_elsewhere
            || args.dlq.is_some()
            || args.policy.is_some()
            || args.budget.is_some();
        let allow = used_elsewhere.then(|| quote!(#[allow(unused_variables)]));
        bindings.push(quote!(#(#cfgs)* #(#lints)* #allow let #pat = #this_attempt;));
    }

    let state = Ident::new("__retry_state", Span::mixed_site());
    let held = Ident::new("__retry_policy", Span::mixed_site());
    // The function as metrics and tracing name it, built at compile time: one `static` that
    // the future and every step of the loop name (the state does not keep a copy). Names no
    // body would use, as items are not hygienic.
    let site_static = Ident::new("__RETRY_CORE_SITE", Span::call_site());
    let labels_static = Ident::new("__RETRY_CORE_LABELS", Span::call_site());
    let site_items = quote! {
        static #labels_static: [#private::metrics::Label; 2] = #private::Site::labels(#name, ::core::module_path!());
        static #site_static: #private::Site = #private::Site::new(#name, ::core::module_path!(), &#labels_static);
    };
    let site = quote!(&#site_static);
    // A literal policy is a `static`, borrowed straight into the state; `policy = expr` is held
    // in the future, as the state borrows it.
    // A literal policy with nothing to do before a failure (no deadline's clock, no budget, no
    // attempt timeout) gets its state at the first failure (`LazyState`): a call that succeeds
    // at once makes none.
    let lazy = args.policy.is_none()
        && args.budget.is_none()
        && args.deadline.is_none()
        && args.attempt_timeout.is_none();
    let lazy_state = Ident::new("__retry_lazy_state", Span::mixed_site());
    let policy_static = Ident::new("__RETRY_CORE_POLICY", Span::call_site());
    let policy = match &args.policy {
        None if lazy => {
            let knobs = policy_knobs(args, &private);
            quote! {
                static #policy_static: #private::Policy = #private::Policy::new() #knobs;
                let mut #lazy_state = #private::LazyState::new();
            }
        }
        Some(expr) => {
            let expr = quote_spanned!(expr.span()=> #expr);
            quote! {
                let #held = #expr;
                let #state = #private::State::new(::core::convert::AsRef::<#private::Policy>::as_ref(&#held));
            }
        }
        None => {
            let knobs = policy_knobs(args, &private);
            quote! {
                let #state = #private::State::new({
                    static POLICY: #private::Policy = #private::Policy::new() #knobs;
                    &POLICY
                });
            }
        }
    };
    // Only a dead letter needs the times of the failures.
    let record_failures = args
        .dlq
        .as_ref()
        .map(|_| quote!(let #state = #state.recording_failures();));
    let budget = args.budget.as_ref().map(|expr| {
        let budget = Ident::new("__retry_budget", Span::mixed_site());
        quote_spanned! {expr.span()=>
            let #budget = #expr;
            let #state = #state.with_budget(::core::convert::AsRef::<#private::RetryBudget>::as_ref(&#budget));
        }
    });
    let policy_ref = match lazy {
        true => policy,
        false => quote! {
            #policy
            #record_failures
            #budget
            let mut #state = #state;
        },
    };
    let start_attempt = match lazy {
        true => quote!(#lazy_state.start_attempt(&#policy_static, #site)),
        false => quote!(#state.start_attempt(#site)),
    };
    // With a lazy state, the state a failure is decided by is made (or found) here.
    let failed_state = lazy.then(|| {
        let record = args.dlq.is_some();
        quote!(let #state = #lazy_state.failed(&#policy_static, #record, #site);)
    });

    let classifier = Ident::new("__retry_classifier", Span::mixed_site());
    let hook = Ident::new("__retry_hook", Span::mixed_site());
    // `retry_if = path` is held for the whole call (it may keep state between attempts); the
    // default is made where it is used, so its two function pointers are not kept in the future.
    let (hold_classifier, classifier_ref) = match &args.retry_if {
        Some(path) => (
            quote!(let mut #classifier = #path;),
            quote!(&mut #classifier),
        ),
        None => {
            let private = private_at(output_span);
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

    let AttemptBody { items, stmts, .. } = &body;
    let private_out = private_at(output_span);
    // The output type is checked to be a `Result` by `attempt` and `output`, all at the same
    // span, which rustc reports once.
    // `impl Trait` in the return type becomes `_` here: this is expression position.
    let inferred_output = inferred(output);
    let output_check = quote_spanned!(output_span=> #private_out::output::<#inferred_output>());
    // `async move` hands each attempt its arguments by value: a non-move block borrows a `Copy`
    // argument from the loop, and the future keeps it twice. Not with a `&mut self` receiver
    // (it would move into the first attempt), nor when other code reads the arguments.
    let mut_receiver = sig.inputs.iter().any(|input| match input {
        FnArg::Receiver(receiver) => match &receiver.kind {
            syn::ReceiverKind::Reference(_, _, mutability) => mutability.is_some(),
            syn::ReceiverKind::Typed(_, ty) => {
                matches!(&**ty, Type::Reference(r) if r.mutability.is_some())
            }
            _ => false,
        },
        FnArg::Typed(_) => false,
    });
    let by_move = (!mut_receiver && !body.args_used_elsewhere && body.idempotency_key.is_none())
        .then(|| quote!(move));
    let inferred = inferred(output);
    let attempt_block = quote_spanned! {output_span=>
        #private_out::attempt::<#inferred, _>(async #by_move {
            #items
            #(#bindings)*
            #stmts
        })
    };
    // A body with nothing that leaves it early (`return`, `?`, `break`, `continue`, anywhere in
    // it, conservatively) runs in the loop itself, without an `async` block of its own.
    let inline_body = !has_early_exit(stmts.clone());
    // A body that never finishes (`panic!`, `todo!`, a loop it never leaves) would leave the
    // statement after it unreachable, a warning in the user's crate; in its own `async` block
    // it left nothing unreachable.
    let allow_unreachable = inline_body.then(|| quote!(#[allow(unreachable_code)]));
    let attempt = match (&args.attempt_timeout, &args.policy) {
        // Written on the attribute: it wins over a `policy`'s own, and needs `E: From<Elapsed>`.
        (Some(limit), _) => {
            let (private, span) = (private_at(limit.span), limit.span);
            let limit = duration_tokens(limit.value);
            // Bounded by the time left before the deadline too, so the call never outlives it.
            quote_spanned!(span=> #private::with_timeout(#state.attempt_limit(#limit), #attempt_block).await)
        }
        // The policy's own, known at run time: applied when `E: From<Elapsed>` (probed by
        // autoref, so the function compiles either way); the runtime decides the rest.
        (None, Some(_)) => {
            let attempt = Ident::new("__retry_attempt", Span::mixed_site());
            let on_timeout = Ident::new("__retry_on_timeout", Span::mixed_site());
            quote! {{
                #[allow(unused_imports)]
                use #private::{TimeoutNone as _, TimeoutVia as _};
                let #attempt = #attempt_block;
                let #on_timeout = (&&#private_out::TimeoutProbe::of(&#attempt)).on_timeout();
                #private::bound(&#state, #site, #on_timeout, #attempt).await
            }}
        }
        // The statements themselves, not a block of them: they end the attempt's block below
        // (a block there would be `unused_braces` in the user's crate).
        (None, None) if inline_body => quote! {
            #items
            #(#bindings)*
            #stmts
        },
        (None, None) => quote!(#attempt_block.await),
    };

    // `'__retry_loop` is never named by the user: the body runs inside its own async block.
    let at_output = Span::mixed_site().located_at(output_span);
    let outcome = Ident::new("__retry_outcome", at_output);
    let returned = Ident::new("__retry_returned", at_output);
    let wait = Ident::new("__retry_wait", Span::mixed_site());
    // `dlq(...)`: the sink is evaluated before the first attempt; `id` and `original` only on
    // give-up (by-value arguments are cloned for every attempt, so they are still there).
    let (dlq_prelude, park) = match &args.dlq {
        None => (TokenStream::new(), TokenStream::new()),
        Some(dlq) => {
            let (sink, id, original) = (&dlq.sink, &dlq.id, &dlq.original);
            let held = Ident::new("__retry_dlq_sink", Span::mixed_site());
            let redact = match &dlq.redact {
                Some(path) => quote!(::core::option::Option::Some(#path as fn(_) -> _)),
                None => quote!(::core::option::Option::None),
            };
            // The one check that `sink` is a sink: every token at the sink's span, with the
            // hygiene of the binding it reads.
            let sink_at = Span::mixed_site().located_at(sink.span());
            let sink_private = respan(private.clone(), sink_at);
            let sink_held = Ident::new("__retry_dlq_sink", sink_at);
            let sink_check = quote_spanned!(sink_at=> #sink_private::sink(&#sink_held));
            let park_private = respan(private.clone(), dlq.span);
            let key = match &body.idempotency_key {
                Some(key) => quote!(::core::option::Option::Some(#key)),
                None => quote!(::core::option::Option::None),
            };
            (
                quote! {
                    let #held = #sink;
                },
                {
                    // The same hygienic names, located at `dlq` so unmet bounds point there.
                    let at = |name: &str| Ident::new(name, Span::mixed_site().located_at(dlq.span));
                    let (state, returned) = (at("__retry_state"), at("__retry_returned"));
                    let input = at("__retry_dlq_input");
                    // The one check that the error converts from `DlqFailed`, at `dlq`.
                    let dlq_at = Span::mixed_site().located_at(dlq.span);
                    let dlq_private = respan(private.clone(), dlq_at);
                    let not_parked = quote_spanned!(dlq_at=> #dlq_private::not_parked());
                    // `id` and `original` are read only on give-up, by a closure called before
                    // the `.await` (so it is not kept in the future).
                    let make_input = quote! {
                        let #input = #private::letter_on_give_up(&#state, &#returned, || #private::letter_input(&(#id), &(#original), #redact, #key));
                    };
                    let park = quote_spanned! {dlq.span=>
                        let #returned = #park_private::park_on_give_up(#site, &#state, #returned, #sink_check, #input, #not_parked).await;
                    };
                    quote!(#make_input #park)
                },
            )
        }
    };
    // With nothing to evaluate from the arguments before they move into their slots (`dlq`,
    // `policy`, `budget`), the slots are made before the future: the future then holds each
    // by-value argument once (its slot), not also the moved-from original.
    // The span of `#[tracing::instrument]` reads the arguments too.
    let (slots_before, slots_inside) = if args.dlq.is_none()
        && args.policy.is_none()
        && args.budget.is_none()
        && body.around.is_none()
    {
        (quote!(#(#slots)*), TokenStream::new())
    } else {
        (TokenStream::new(), quote!(#(#slots)*))
    };
    let error = Ident::new("__retry_error", at_output);
    let retries = quote! {
            #policy_ref
            #dlq_prelude
            #slots_inside
            #hold_classifier
            let mut #hook = #on_retry;
            // The first attempt is counted before the loop, where the compiler still sees the
            // new state (and a literal policy's knobs).
            let mut #last = #start_attempt;
            loop {
                // In a block of its own, so this attempt's arguments are not kept in the
                // future while it waits for the next one.
                let #outcome = {
                    #(#per_attempt)*
                    #attempt
                };
                // Outside the `match`, so its scrutinee is not held across the pause; a zero
                // wait makes no `Pause` at all. A success is returned as it is (the state
                // machine has nothing to decide about it): straight out of the attempt.
                #allow_unreachable
                let #wait = match (#output_check.into)(#outcome) {
                    ::core::result::Result::Ok(#returned) => {
                        return (#output_check.from)(::core::result::Result::Ok(#returned));
                    }
                    ::core::result::Result::Err(#error) => { #failed_state match #state.after_attempt(#site, ::core::result::Result::Err(#error), #classifier_ref, #hook_arg) {
                        #private::Next::Return(#returned) => {
                            #park
                            return (#output_check.from)(#returned);
                        }
                        #private::Next::Retry(#wait) => #wait,
                    }},
                };
                if !#wait.is_zero() {
                    #private::pause(#wait).await;
                }
                #last = #start_attempt;
            }
    };
    let retries = match &body.around {
        Some(around) => around.wrap(retries),
        None => retries,
    };
    quote! {{
        #site_items
        #slots_before
        #private::retrying(#site, #caller, async move { #retries })
    }}
}

pub(crate) fn duration_tokens(d: std::time::Duration) -> TokenStream {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

fn policy_knobs(args: &RetryArgs, private: &TokenStream) -> TokenStream {
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

/// Whether `tokens` contain `return`, `?`, `break` or `continue` anywhere, nested closures and
/// blocks included (conservative: only a body without any runs without its own `async` block).
fn has_early_exit(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => {
            ident == "return" || ident == "break" || ident == "continue"
        }
        proc_macro2::TokenTree::Punct(punct) => punct.as_char() == '?',
        proc_macro2::TokenTree::Group(group) => has_early_exit(group.stream()),
        proc_macro2::TokenTree::Literal(_) => false,
    })
}
