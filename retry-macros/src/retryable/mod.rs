//! `#[retryable]`: rewrites an `async fn` into a fn returning `Retrying<impl Future>` whose body
//! is the retry loop, driven by `__private::State`.

mod after_attempt;
mod arguments;
mod attempt;
mod body;
mod dlq;
mod names;
mod retry_loop;
mod state;
mod types;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Item, ItemFn, ReturnType, Type};

use crate::args::RetryArgs;
use crate::errors::Errors;
use crate::nesting::AwaitProbes;
use crate::respan::respan;

// Called by `#[idempotent]` too, as `retryable::retry_loop` and `retryable::duration_tokens`.
pub(crate) use body::{AttemptBody, attempt_statements};
pub(crate) use retry_loop::retry_loop;
pub(crate) use state::duration_tokens;
pub(crate) use types::{crate_path, inferred, opaque_future};

/// Parses and checks the arguments of `#[retryable(...)]`.
pub(crate) fn parse_args(attr: TokenStream, errors: &mut Errors) -> RetryArgs {
    let mut args = RetryArgs::default();
    let parser = syn::meta::parser(|meta| args.parse_one(meta, errors));
    if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
        errors.push(e);
    }
    args.check(errors);
    args
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = parse_args(attr.clone(), &mut errors);

    let mut function = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(function)) => function,
        Ok(other) => {
            let message = match other {
                Item::Verbatim(_) => {
                    "`#[retryable]` needs a function body; on a trait method, put it on the method in the `impl` instead"
                }
                _ => "`#[retryable]` applies to `async fn` only",
            };
            errors.at(first_token_span(&other), message);
            return with_errors(errors, item);
        }
        Err(e) => {
            errors.push(e);
            return with_errors(errors, item);
        }
    };
    if let Some(instrument) = crate::instrument::take(&mut function.attrs) {
        // `#[instrument]` below: it expands first, then this attribute again (crate::instrument).
        let krate = crate_path(args.krate.as_ref());
        return quote!(#instrument #[#krate::retryable(#attr)] #function);
    }
    // A method of an `#[async_trait]` impl, made an `async fn` again; boxed in `rewrite`.
    let boxed = crate::boxed::unbox(&mut function);
    check_signature(&function, &mut errors);
    let mut function = strip_second_retryable(function);
    // `#[idempotent]` below: a claim per attempt.
    let consumed = take_attr(&mut function, "idempotent");
    let idempotent = consumed.as_ref().map(|attr| {
        let mut idempotent = crate::idempotent::parse_attr(attr, &mut errors);
        crate::idempotent::check_transaction_param(&mut idempotent, &function.sig, &mut errors);
        crate::idempotent::check_below_retry(&idempotent, attr, &mut errors);
        idempotent
    });
    if !errors.is_empty() {
        // The user's function keeps IDEs working and avoids a cascade of "cannot find
        // function" errors.
        return with_errors(errors, fallback(function, consumed.as_ref()));
    }
    rewrite(&args, function, idempotent.as_ref(), boxed)
}

/// Removes the first attribute named `name` (by its last path segment) and returns it.
pub(crate) fn take_attr(function: &mut ItemFn, name: &str) -> Option<syn::Attribute> {
    let index = function
        .attrs
        .iter()
        .position(|a| a.path().segments.last().is_some_and(|s| s.ident == name))?;
    Some(function.attrs.remove(index))
}

pub(crate) fn with_errors(errors: Errors, item: TokenStream) -> TokenStream {
    let errors = errors.into_compile_errors();
    quote!(#errors #item)
}

/// The user's function as emitted beside errors: quiet about arguments only the expansion
/// would have read, and about the import of an attribute (`consumed`) this macro took off it.
pub(crate) fn fallback(mut function: ItemFn, consumed: Option<&syn::Attribute>) -> TokenStream {
    if let Some(attr) = consumed {
        // In the body, not beside the function: a method cannot have items beside it.
        let path = attr.path();
        let uses = syn::parse_quote!(#[allow(unused_imports)] use #path as _;);
        function.block.stmts.insert(0, uses);
    }
    quote! {
        #[allow(unused_variables)]
        #function
    }
}

pub(crate) fn first_token_span(item: &Item) -> Span {
    item.to_token_stream()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |t| t.span())
}

fn is_retryable_attr(attr: &syn::Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "retryable")
}

fn strip_second_retryable(mut function: ItemFn) -> ItemFn {
    function.attrs.retain(|a| !is_retryable_attr(a));
    function
}

/// `async fn` returning something: what both attributes need.
pub(crate) fn check_async_result(sig: &syn::Signature, attribute: &str, errors: &mut Errors) {
    if sig.asyncness.is_none() {
        errors.at(
            sig.fn_token.span,
            format!("`#[{attribute}]` needs an `async fn`; write `async fn`"),
        );
    }
    if let ReturnType::Default = sig.output {
        errors.at(
            sig.paren_token.span.close(),
            format!(
                "`#[{attribute}]` needs a function returning `Result<T, E>`; `{}` returns `()`",
                sig.ident
            ),
        );
    }
}

fn check_signature(function: &ItemFn, errors: &mut Errors) {
    let sig = &function.sig;
    if let Some(second) = function.attrs.iter().find(|a| is_retryable_attr(a)) {
        errors.at(
            second.path().span(),
            format!(
                "`#[retryable]` is applied to `{}` twice; retry in only one layer: remove one of them",
                sig.ident
            ),
        );
    }
    check_async_result(sig, "retryable", errors);
    for input in &sig.inputs {
        if let FnArg::Receiver(receiver) = input {
            let by_reference = match &receiver.kind {
                syn::ReceiverKind::Reference(..) => true,
                syn::ReceiverKind::Typed(_, ty) => matches!(**ty, Type::Reference(_)),
                _ => false,
            };
            if !by_reference {
                errors.at(
                    receiver.self_token.span,
                    "`#[retryable]` methods take `&self` or `&mut self`: a by-value `self` is gone after the first attempt; borrow it, or clone it inside the body",
                );
            }
        }
    }
}

fn rewrite(
    args: &RetryArgs,
    function: ItemFn,
    idempotent: Option<&crate::idempotent::IdempotentArgs>,
    boxed: Option<crate::boxed::Boxed>,
) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        modifiers: _,
        mut sig,
        block,
    } = function;
    let krate = crate_path(args.krate.as_ref());
    let private = quote!(#krate::__private);
    let name = sig.ident.to_string();
    let ReturnType::Type(arrow, output) = std::mem::replace(&mut sig.output, ReturnType::Default)
    else {
        unreachable!("checked in check_signature")
    };
    let output_span = output.span();
    let (stmts, around) = attempt_statements(*block);
    let mut block = syn::Block {
        brace_token: syn::token::Brace::default(),
        stmts,
    };
    let mut probes = AwaitProbes::new(&private, name.clone());
    crate::walk::block(&mut probes, &mut block);
    let items = probes.into_items();
    let stmts = &block.stmts;
    let body = match idempotent {
        None => AttemptBody {
            items,
            stmts: quote!(#(#stmts)*),
            args_used_elsewhere: false,
            idempotency_key: None,
            around,
        },
        Some(idempotent) => {
            // `#[idempotent]` below `#[retryable]`: every attempt claims the key anew.
            let private_out = respan(private.clone(), output_span);
            let inferred = inferred(&output);
            let once = quote_spanned! {output_span=>
                #private_out::attempt::<#inferred, _>(async { #items #(#stmts)* })
            };
            let flow = crate::idempotent::flow_expr(idempotent, &name, &output, once, false);
            AttemptBody {
                items: TokenStream::new(),
                stmts: quote!(#flow.await),
                args_used_elsewhere: false,
                idempotency_key: crate::idempotent::letter_key(idempotent, &name),
                around,
            }
        }
    };
    // `#[async_trait]`: the loop goes into its own signature, boxed as its future was; the trait
    // fixes its parameters. Otherwise an `#[idempotent(transaction = tx)]` below provides `tx`.
    let is_boxed = boxed.is_some();
    match (boxed, idempotent) {
        (Some(boxed), _) => boxed.restore(&mut sig),
        (None, Some(idempotent)) => crate::idempotent::take_transaction_param(idempotent, &mut sig),
        (None, None) => {}
    }
    let retry = retry_loop(
        args,
        &mut sig,
        &output,
        body,
        &quote!(::core::panic::Location::caller()),
    );
    if is_boxed {
        return quote! {
            #(#attrs)*
            #vis #sig {
                ::std::boxed::Box::pin(#retry)
            }
        };
    }
    sig.asyncness = None;
    let future = opaque_future(&output);
    sig.output = syn::parse_quote_spanned! {output_span=>
        #arrow #krate::Retrying<#future>
    };
    quote! {
        #(#attrs)*
        #[allow(refining_impl_trait)]
        // The caller's location names the call site when a nested retry is collapsed.
        #[track_caller]
        #vis #sig {
            #retry
        }
    }
}
