//! One attempt: the body, its arguments bound, in an `async` block of its own or inline in the
//! loop, and bounded by the attempt timeout when there is one.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, Type};

use super::body::AttemptBody;
use super::names::Names;
use super::state::duration_tokens;
use super::types::inferred;
use crate::args::RetryArgs;

pub(super) struct Attempt {
    /// The attempt's statements: they end the block whose value is the attempt's outcome.
    pub(super) run: TokenStream,
    /// `#[allow(unreachable_code)]` when the body runs inline.
    pub(super) allow_unreachable: Option<TokenStream>,
}

/// The attempt; `bindings` bind the user's patterns to this attempt's arguments.
pub(super) fn attempt(
    args: &RetryArgs,
    names: &Names,
    sig: &syn::Signature,
    output: &Type,
    body: &AttemptBody,
    bindings: &[TokenStream],
) -> Attempt {
    let Names { private, state, .. } = names;
    let site = names.site();
    let output_span = output.span();
    let AttemptBody { items, stmts, .. } = body;
    let private_out = private.at(output_span);
    let by_move = by_move(sig, body);
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
    let run = match (&args.attempt_timeout, &args.policy) {
        // Written on the attribute: it wins over a `policy`'s own, and needs `E: From<Elapsed>`.
        (Some(limit), _) => {
            let (private, span) = (private.at(limit.span), limit.span);
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
    Attempt {
        run,
        allow_unreachable,
    }
}

/// `async move` hands each attempt its arguments by value: a non-move block borrows a `Copy`
/// argument from the loop, and the future keeps it twice. Not with a `&mut self` receiver (it
/// would move into the first attempt), nor when other code reads the arguments.
fn by_move(sig: &syn::Signature, body: &AttemptBody) -> Option<TokenStream> {
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
    (!mut_receiver && !body.args_used_elsewhere && body.idempotency_key.is_none())
        .then(|| quote!(move))
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
