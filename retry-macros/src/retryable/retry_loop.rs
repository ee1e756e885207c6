//! The retry loop, the bulk of the expansion: `#[retryable]` emits it, and so does
//! `#[idempotent]` above a `#[retryable]`, so the two attributes retry the same way. Its parts
//! are built by the sibling modules; this one puts them together.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, Type};

use super::after_attempt::{AfterAttempt, classifier_and_hook};
use super::arguments::{PerAttempt, per_attempt, take_arguments};
use super::attempt::{Attempt, attempt};
use super::body::AttemptBody;
use super::dlq::{DeadLetter, dead_letter};
use super::names::{Names, Private};
use super::state::{PolicyState, policy_and_state, site_statics};
use super::types::{crate_path, inferred};
use crate::args::RetryArgs;

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
    let output_span = output.span();
    let names = Names::new(Private::new(&krate), output_span);
    let name = sig.ident.to_string();
    let arguments = take_arguments(sig);
    let PerAttempt {
        slots,
        per_attempt,
        bindings,
    } = per_attempt(&arguments, args, body.args_used_elsewhere, &names);
    let site_items = site_statics(&name, &names);
    let PolicyState {
        setup,
        start_attempt,
    } = policy_and_state(args, &names);
    let AfterAttempt {
        hold,
        classifier,
        hook,
    } = classifier_and_hook(args, &names, output_span);
    let Attempt {
        run,
        allow_unreachable,
    } = attempt(args, &names, sig, output, &body, &bindings);
    let DeadLetter { hold_sink, park } =
        dead_letter(args.dlq.as_ref(), &names, body.idempotency_key.as_ref());
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
    let Names {
        private,
        state,
        last,
        wait,
        outcome,
        returned,
        error,
        ..
    } = &names;
    let site = names.site();
    // How a failed attempt's error is written when its classifier has no reason for it.
    let describe = Ident::new("__retry_describe", Span::mixed_site());
    // The output type is checked to be a `Result` by `attempt` and `output`, all at the same
    // span, which rustc reports once.
    // `impl Trait` in the return type becomes `_` here: this is expression position.
    let inferred_output = inferred(output);
    let private_out = private.at(output_span);
    let output_check = quote_spanned!(output_span=> #private_out::output::<#inferred_output>());
    let retries = quote! {
            #setup
            #hold_sink
            #slots_inside
            #hold
            // The first attempt is counted before the loop, where the compiler still sees the
            // new state (and a literal policy's knobs).
            let mut #last = #start_attempt;
            loop {
                // In a block of its own, so this attempt's arguments are not kept in the
                // future while it waits for the next one.
                let #outcome = {
                    #(#per_attempt)*
                    #run
                };
                // Outside the `match`, so its scrutinee is not held across the pause; a zero
                // wait makes no `Pause` at all. A success is returned as it is (the state
                // machine has nothing to decide about it): straight out of the attempt.
                #allow_unreachable
                let #wait = match (#output_check.into)(#outcome) {
                    ::core::result::Result::Ok(#returned) => {
                        return (#output_check.from)(::core::result::Result::Ok(#returned));
                    }
                    ::core::result::Result::Err(#error) => {
                    #[allow(unused_imports)]
                    use #private::{DescribeDebug as _, DescribeDisplay as _, DescribeNothing as _};
                    let #describe = (&&&#private::Describe::of(&#error)).describe();
                    match #state.after_attempt(#site, ::core::result::Result::Err(#error), &mut #private::Described::new(#classifier, #describe), #hook) {
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
