//! Checking a choice against the fields it names, so expansion only ever reads a field that
//! exists.

use syn::spanned::Spanned as _;
use syn::{Fields, Index, Member, Type};

use super::WRITE_ONE_OF;
use super::parse::{Choice, Found, Owner};
use crate::errors::Errors;
use crate::suggest::{closest, list};

/// What one arm does, with the field it reads.
pub(super) enum Action<'a> {
    Retry,
    Stop,
    Delegate(Member, &'a Type),
    RetryAfter(Member, &'a Type),
}

/// Reads the choice against the fields it names; `None` when it cannot be expanded (reported).
pub(super) fn resolve<'a>(
    found: Found,
    fields: &'a Fields,
    owner: &Owner<'_>,
    errors: &mut Errors,
) -> Option<Action<'a>> {
    let Some(chosen) = found.chosen else {
        if !found.reported {
            let message = match owner {
                Owner::Variant(ident) => format!(
                    "variant `{ident}` does not say whether it may be retried; add one of {WRITE_ONE_OF}"
                ),
                Owner::Struct(ident) => format!(
                    "struct `{ident}` does not say whether it may be retried; add one of {WRITE_ONE_OF} on the struct"
                ),
            };
            errors.at(owner.ident().span(), message);
        }
        return None;
    };
    if found.reported {
        return None;
    }
    match chosen.choice {
        Choice::Retry => Some(Action::Retry),
        Choice::Stop => Some(Action::Stop),
        Choice::Delegate => {
            let mut iter = fields.iter();
            match (iter.next(), iter.next()) {
                (Some(field), None) => Some(Action::Delegate(member_of(field, 0), &field.ty)),
                (None, _) => {
                    errors.at(
                        chosen.span,
                        format!(
                            "`delegate` asks the single field to classify itself, but {} has no fields; write `#[classify(retry)]` or `#[classify(stop)]`",
                            owner.describe(fields)
                        ),
                    );
                    None
                }
                (Some(_), Some(_)) => {
                    errors.at(
                        chosen.span,
                        format!(
                            "`delegate` asks the single field to classify itself, but {} has {} fields; write `#[classify(retry)]` or `#[classify(stop)]`, or gather the fields into one type that implements `Classify`",
                            owner.describe(fields),
                            fields.len()
                        ),
                    );
                    None
                }
            }
        }
        Choice::RetryAfter(member) => {
            let (member, ty) = find_field(fields, &member, owner, errors)?;
            Some(Action::RetryAfter(member, ty))
        }
    }
}

fn member_of(field: &syn::Field, index: usize) -> Member {
    match &field.ident {
        Some(ident) => Member::Named(ident.clone()),
        None => Member::Unnamed(Index {
            index: u32::try_from(index).unwrap_or(u32::MAX),
            span: field.ty.span(),
        }),
    }
}

/// The field `retry_after = <member>` names, reporting one that does not exist.
fn find_field<'a>(
    fields: &'a Fields,
    member: &Member,
    owner: &Owner<'_>,
    errors: &mut Errors,
) -> Option<(Member, &'a Type)> {
    let described = owner.describe(fields);
    match (fields, member) {
        (Fields::Named(named), Member::Named(wanted)) => {
            if let Some(field) = named
                .named
                .iter()
                .find(|f| f.ident.as_ref() == Some(wanted))
            {
                return Some((member_of(field, 0), &field.ty));
            }
            let known: Vec<String> = named
                .named
                .iter()
                .filter_map(|f| f.ident.as_ref().map(ToString::to_string))
                .collect();
            let candidates: Vec<&str> = known.iter().map(String::as_str).collect();
            let hint = match (closest(&wanted.to_string(), &candidates), &candidates[..]) {
                (Some(near), _) => format!("did you mean `retry_after = {near}`?"),
                (None, [only]) => {
                    format!("its only field is `{only}`: write `retry_after = {only}`")
                }
                (None, []) => "it has no fields to wait for; write `#[classify(retry)]`".to_owned(),
                (None, all) => format!("name the field holding the wait, one of {}", list(all)),
            };
            errors.at(
                wanted.span(),
                format!("{described} has no field `{wanted}`; {hint}"),
            );
            None
        }
        (Fields::Named(named), Member::Unnamed(index)) => {
            let known: Vec<String> = named
                .named
                .iter()
                .filter_map(|f| f.ident.as_ref().map(|i| format!("`retry_after = {i}`")))
                .collect();
            errors.at(
                index.span,
                format!(
                    "{described} has named fields; name the one holding the wait: {}",
                    known.join(" or ")
                ),
            );
            None
        }
        (Fields::Unnamed(unnamed), Member::Unnamed(index)) => {
            let len = unnamed.unnamed.len();
            if let Some(field) = usize::try_from(index.index)
                .ok()
                .and_then(|i| unnamed.unnamed.get(i))
            {
                let member = Member::Unnamed(syn::Index {
                    index: index.index,
                    span: field.ty.span(),
                });
                return Some((member, &field.ty));
            }
            let fix = match len {
                0 => "it has no fields to wait for; write `#[classify(retry)]`".to_owned(),
                1 => "its only field is `0`: write `retry_after = 0`".to_owned(),
                _ => format!(
                    "its fields are numbered `0` to `{}`: write the index of the one holding the wait",
                    len - 1
                ),
            };
            errors.at(
                index.span,
                format!("{described} has no field `{}`; {fix}", index.index),
            );
            None
        }
        (Fields::Unnamed(unnamed), Member::Named(wanted)) => {
            let fix = match unnamed.unnamed.len() {
                1 => "write `retry_after = 0`".to_owned(),
                len => format!("write its index, `0` to `{}`", len - 1),
            };
            errors.at(
                wanted.span(),
                format!(
                    "{described} has no named fields; name the field holding the wait by its position: {fix}"
                ),
            );
            None
        }
        (Fields::Unit, _) => {
            errors.at(
                member.span(),
                format!(
                    "{described} has no fields, so none holds the wait; add a `Duration` field, or write `#[classify(retry)]`"
                ),
            );
            None
        }
    }
}
