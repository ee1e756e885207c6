//! How each argument of the signature reaches each attempt (reborrowed, copied, or cloned for
//! every attempt but the last), and the attributes that follow it there: an attempt must be able
//! to run again with the same arguments.

use syn::{Ident, Pat, Type};

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
    pub(super) ty: Type,
    /// The parameter's `#[cfg]`/`#[cfg_attr]`, repeated on every statement that names it.
    pub(super) cfgs: Vec<syn::Attribute>,
    /// Its lint attributes (`#[allow(..)]`...), on the binding the body sees.
    pub(super) lints: Vec<syn::Attribute>,
}

/// The attributes of a parameter that must follow it into the generated statements: its
/// `#[cfg]`s (a parameter compiled out has no slot either) and its lint levels.
pub(super) fn parameter_attributes(
    attrs: &[syn::Attribute],
) -> (Vec<syn::Attribute>, Vec<syn::Attribute>) {
    let named = |attr: &syn::Attribute, names: &[&str]| {
        attr.path()
            .get_ident()
            .is_some_and(|ident| names.iter().any(|name| ident == name))
    };
    let cfgs = attrs
        .iter()
        .filter(|a| named(a, &["cfg", "cfg_attr"]))
        .cloned()
        .collect();
    let lints = attrs
        .iter()
        .filter(|a| named(a, &["allow", "expect", "warn", "deny", "forbid"]))
        .cloned()
        .collect();
    (cfgs, lints)
}

/// `x: T` patterns do not occur inside fn args, but a `Pat::Type` would need its type dropped
/// to be rebound with `let`.
pub(super) fn strip_type_ascription(pat: &Pat) -> &Pat {
    match pat {
        Pat::Type(typed) => &typed.pat,
        other => other,
    }
}
