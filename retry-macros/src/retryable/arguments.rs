//! How each argument of the signature reaches each attempt (reborrowed, copied, or cloned for
//! every attempt but the last), and the attributes that follow it there: an attempt must be able
//! to run again with the same arguments.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, Pat, Type};

use super::names::Names;
use crate::args::RetryArgs;

/// How an argument reaches each attempt.
pub(super) enum Passing {
    /// `&mut T`: reborrowed for each attempt.
    Reborrow,
    /// `&T`: copied into each attempt; no slot to keep it in, nothing to clone.
    Copy,
    /// Everything else: cloned for every attempt but the last, which gets the original.
    CloneUntilLast,
}

pub(super) struct Argument {
    /// What the body binds (`x`, `mut x`, `(a, b)`).
    pub(super) pat: Pat,
    /// The name the signature binds the argument to.
    pub(super) outer: Ident,
    pub(super) passing: Passing,
    /// Where its type is written: errors about the value point there.
    pub(super) ty: Span,
    /// The parameter's `#[cfg]`/`#[cfg_attr]`, repeated on every statement that names it.
    pub(super) cfgs: Vec<TokenStream>,
    /// Its lint attributes (`#[allow(..)]`...), on the binding the body sees.
    pub(super) lints: Vec<TokenStream>,
}

/// The attributes of a parameter that must follow it into the generated statements: its
/// `#[cfg]`s (a parameter compiled out has no slot either) and its lint levels.
fn parameter_attributes(attrs: &[syn::Attribute]) -> (Vec<TokenStream>, Vec<TokenStream>) {
    let named = |attr: &syn::Attribute, names: &[&str]| {
        attr.path()
            .get_ident()
            .is_some_and(|ident| names.iter().any(|name| ident == name))
    };
    let cfgs = attrs
        .iter()
        .filter(|a| named(a, &["cfg", "cfg_attr"]))
        .map(ToTokens::to_token_stream)
        .collect();
    let lints = attrs
        .iter()
        .filter(|a| named(a, &["allow", "expect", "warn", "deny", "forbid"]))
        .map(ToTokens::to_token_stream)
        .collect();
    (cfgs, lints)
}

/// `x: T` patterns do not occur inside fn args, but a `Pat::Type` would need its type dropped
/// to be rebound with `let`.
fn strip_type_ascription(pat: &Pat) -> &Pat {
    match pat {
        Pat::Type(typed) => &typed.pat,
        other => other,
    }
}

/// The signature's typed arguments, each renamed in the signature where its pattern is more than
/// a name (`__retry_argN`), so the loop can clone or reborrow it for each attempt.
pub(super) fn take_arguments(sig: &mut syn::Signature) -> Vec<Argument> {
    let mut arguments = Vec::new();
    for (index, input) in sig.inputs.iter_mut().enumerate() {
        let FnArg::Typed(typed) = input else { continue };
        let outer = match &*typed.pat {
            // Keep the user's name in the signature (rustdoc shows it); `mut` moves inside.
            Pat::Ident(ident) if ident.by_ref.is_none() && ident.subpat.is_none() => {
                ident.ident.clone()
            }
            _ => format_ident!("__retry_arg{}", index, span = Span::mixed_site()),
        };
        let pat = std::mem::replace(&mut *typed.pat, syn::parse_quote!(#outer));
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
            ty: typed.ty.span(),
            cfgs,
            lints,
        });
    }
    arguments
}

/// The statements that hand the arguments to each attempt, one of each kind per argument.
pub(super) struct PerAttempt {
    /// Before the loop: the slot a by-value argument waits in until the last attempt takes it.
    pub(super) slots: Vec<TokenStream>,
    /// At the start of each attempt: its own clone, copy or reborrow of the argument.
    pub(super) per_attempt: Vec<TokenStream>,
    /// Inside the attempt's block: the user's pattern bound to that value.
    pub(super) bindings: Vec<TokenStream>,
}

// Hygienic names, located at the argument's type so errors about it point there.
fn slot(i: usize, at: Span) -> Ident {
    format_ident!(
        "__retry_slot{}",
        i,
        span = Span::mixed_site().located_at(at)
    )
}

fn this_attempt(i: usize, at: Span) -> Ident {
    format_ident!(
        "__retry_attempt{}",
        i,
        span = Span::mixed_site().located_at(at)
    )
}

/// The slots, per-attempt values and bindings of `arguments`; `body_reads_elsewhere` when code
/// beside the body (`#[idempotent]`'s key...) reads the arguments too.
pub(super) fn per_attempt(
    arguments: &[Argument],
    args: &RetryArgs,
    body_reads_elsewhere: bool,
    names: &Names,
) -> PerAttempt {
    let Names { private, last, .. } = names;
    // Arguments the attribute itself reads (`dlq(...)`, `policy`, `budget`, `#[idempotent]`'s
    // key) need not be read by the body too.
    let used_elsewhere = body_reads_elsewhere
        || args.dlq.is_some()
        || args.policy.is_some()
        || args.budget.is_some();
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
        let ty = *ty;
        let (slot, this_attempt) = (slot(i, ty), this_attempt(i, ty));
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
                let private = private.at(ty);
                per_attempt.push(quote_spanned! {ty=>
                    #(#cfgs)* let #this_attempt = #private::clone_arg(&#outer);
                });
            }
            Passing::CloneUntilLast => {
                slots.push(quote!(#(#cfgs)* let mut #slot = ::core::option::Option::Some(#outer);));
                // Spanned on the type, so a missing `Clone` points at the argument: every token
                // of the call has the slot's hygiene, or rustc would widen the span of the
                // argument `&mut slot` to the whole attribute.
                let at = Span::mixed_site().located_at(ty);
                let private = private.at(at);
                per_attempt.push(quote_spanned! {at=>
                    #(#cfgs)* let #this_attempt = #private::take_or_clone(&mut #slot, #last);
                });
            }
        }
        // The pattern is bound inside the attempt's block, so the body sees a fresh value
        // each time, and `mut` and destructuring work as written.
        let pat = strip_type_ascription(pat);
        let allow = used_elsewhere.then(|| quote!(#[allow(unused_variables)]));
        bindings.push(quote!(#(#cfgs)* #(#lints)* #allow let #pat = #this_attempt;));
    }
    PerAttempt {
        slots,
        per_attempt,
        bindings,
    }
}
