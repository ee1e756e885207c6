//! `#[derive(Classify)]`: an impl of `retry_core::Classify` read from `#[classify(...)]`
//! attributes, one on every variant of an enum (or one on a struct).
//!
//! Parsing collects what each attribute says, checking reads it against the fields it names, and
//! expansion writes one `match` arm per variant. Every mistake is collected, so the user sees all
//! of them at once; on any mistake the errors are emitted beside a fallback impl (thiserror does
//! the same), so no "`X` does not implement `Classify`" errors follow from the mistake.

mod check;
mod expand;
mod parse;

use proc_macro2::TokenStream;
use quote::quote;
use syn::Item;
use syn::spanned::Spanned as _;

use crate::errors::Errors;
use check::resolve;
use expand::Target;
use parse::{Owner, Place, check_fields, parse_attrs, parse_container};

const WRITE_ONE_OF: &str = "`#[classify(retry)]`, `#[classify(stop)]`, `#[classify(delegate)]` or `#[classify(retry_after = <field>)]`";

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    // The impl emitted beside the errors, once the type's name and generics are known.
    let mut fallback = None;
    let expanded = match syn::parse2::<Item>(input) {
        Ok(Item::Enum(item)) => {
            let container = parse_container(&item.attrs, Place::Enum, &item.ident, &mut errors);
            let variants = item
                .variants
                .iter()
                .filter_map(|variant| {
                    let owner = Owner::Variant(&variant.ident);
                    let mut found = parse_attrs(&variant.attrs, Place::Variant, &mut errors);
                    found.reported |= check_fields(&variant.fields, &owner, &mut errors);
                    let action = resolve(found, &variant.fields, &owner, &mut errors)?;
                    Some((&variant.ident, action))
                })
                .collect::<Vec<_>>();
            let target = Target {
                ident: &item.ident,
                generics: &item.generics,
                krate: container.krate,
                reason_display: container.reason_display,
            };
            fallback = Some(target.fallback());
            // Only expanded when every variant was read; `errors` says why otherwise.
            (variants.len() == item.variants.len()).then(|| target.expand_enum(&variants))
        }
        Ok(Item::Struct(item)) => {
            let owner = Owner::Struct(&item.ident);
            let mut found = parse_container(&item.attrs, Place::Struct, &item.ident, &mut errors);
            found.reported |= check_fields(&item.fields, &owner, &mut errors);
            let target = Target {
                ident: &item.ident,
                generics: &item.generics,
                krate: found.krate.take(),
                reason_display: found.reason_display,
            };
            fallback = Some(target.fallback());
            resolve(found, &item.fields, &owner, &mut errors)
                .map(|action| target.expand_struct(&action))
        }
        Ok(Item::Union(item)) => {
            let target = Target {
                ident: &item.ident,
                generics: &item.generics,
                krate: None,
                reason_display: None,
            };
            fallback = Some(target.fallback());
            errors.at(
                item.union_token.span,
                format!(
                    "`#[derive(Classify)]` cannot read a union: which field is set is not known; implement `retry_core::Classify` for `{}` by hand",
                    item.ident
                ),
            );
            None
        }
        Ok(other) => {
            // A derive only ever sees structs, enums and unions.
            errors.at(
                other.span(),
                "`#[derive(Classify)]` applies to enums and structs only",
            );
            None
        }
        Err(e) => {
            errors.push(e);
            None
        }
    };
    match expanded {
        Some(tokens) if errors.is_empty() => tokens,
        // Every path that expands nothing reports why; this guards against a silent no-op.
        None if errors.is_empty() => {
            quote!(::core::compile_error!("`#[derive(Classify)]` could not read this type");)
        }
        _ => {
            let errors = errors.into_compile_errors();
            quote!(#errors #fallback)
        }
    }
}
