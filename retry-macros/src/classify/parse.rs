//! Reading the `#[classify(...)]` attributes: what each one says, every mistake reported where it
//! was written, before any field is looked at.

use proc_macro2::Span;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned as _;
use syn::{Attribute, Fields, Ident, Index, LitInt, LitStr, Member, Meta, Path};

use super::WRITE_ONE_OF;
use crate::errors::Errors;
use crate::suggest::closest;

/// What a variant (or a struct) may say.
const CHOICES: &[&str] = &["retry", "stop", "delegate", "retry_after"];

/// What the type itself may say: on a struct, a choice; on an enum, only `crate`.
const CONTAINER_OPTIONS: &[&str] = &[
    "retry",
    "stop",
    "delegate",
    "retry_after",
    "crate",
    "reason",
];

/// Where a `#[classify]` attribute sits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Enum,
    Struct,
    Variant,
}

/// What is being classified, for messages.
pub(super) enum Owner<'a> {
    Variant(&'a Ident),
    Struct(&'a Ident),
}

impl Owner<'_> {
    pub(super) fn ident(&self) -> &Ident {
        match self {
            Owner::Variant(ident) | Owner::Struct(ident) => ident,
        }
    }

    /// "variant `Timeout`", "tuple struct `Wrapper`".
    pub(super) fn describe(&self, fields: &Fields) -> String {
        let shape = match fields {
            Fields::Unnamed(_) => "tuple ",
            Fields::Named(_) | Fields::Unit => "",
        };
        match self {
            Owner::Variant(ident) => format!("{shape}variant `{ident}`"),
            Owner::Struct(ident) => format!("{shape}struct `{ident}`"),
        }
    }

    /// Where its attribute goes, for messages: "on the variant", "on the struct".
    fn attribute_place(&self) -> &'static str {
        match self {
            Owner::Variant(_) => "on the variant",
            Owner::Struct(_) => "on the struct",
        }
    }
}

pub(super) enum Choice {
    Retry,
    Stop,
    Delegate,
    RetryAfter(Member),
}

/// A choice with the span of its keyword.
pub(super) struct Chosen {
    pub(super) choice: Choice,
    keyword: &'static str,
    pub(super) span: Span,
}

/// Everything the `#[classify]` attributes of one variant (or of the type) said.
#[derive(Default)]
pub(super) struct Found {
    pub(super) chosen: Option<Chosen>,
    pub(super) krate: Option<Path>,
    /// `reason = display`: the error's `Display` is its reason (the span of `display`).
    pub(super) reason_display: Option<Span>,
    /// An option was already reported as wrong: a "says nothing" error would only repeat it.
    pub(super) reported: bool,
}

impl Found {
    fn choose(&mut self, new: Chosen, errors: &mut Errors) {
        match &self.chosen {
            None => self.chosen = Some(new),
            Some(old) if old.keyword == new.keyword => {
                self.reported = true;
                errors.at(
                    new.span,
                    format!("duplicate `{}`; write it once", new.keyword),
                );
            }
            Some(old) => {
                self.reported = true;
                errors.at(
                    new.span,
                    format!(
                        "`{}` conflicts with the earlier `{}`; keep only the one that is true of this error",
                        new.keyword, old.keyword
                    ),
                );
            }
        }
    }
}

fn is_classify(attr: &Attribute) -> bool {
    attr.path().is_ident("classify")
}

/// The attributes on the enum or struct itself.
pub(super) fn parse_container(
    attrs: &[Attribute],
    place: Place,
    ident: &Ident,
    errors: &mut Errors,
) -> Found {
    let mut found = parse_attrs(attrs, place, errors);
    if place == Place::Enum
        && let Some(chosen) = found.chosen.take()
    {
        errors.at(
            chosen.span,
            format!(
                "`{}` cannot go on the enum `{ident}` itself; write `#[classify(...)]` on each variant, so every error is classified on purpose",
                chosen.keyword
            ),
        );
    }
    found
}

/// Reads every `#[classify(...)]` among `attrs`; other attributes (`#[error(...)]`,
/// `#[from]`, docs) are left alone.
pub(super) fn parse_attrs(attrs: &[Attribute], place: Place, errors: &mut Errors) -> Found {
    let mut found = Found::default();
    for attr in attrs.iter().filter(|a| is_classify(a)) {
        match &attr.meta {
            Meta::List(list) if list.tokens.is_empty() => {
                found.reported = true;
                errors.at(
                    list.delimiter.span().join(),
                    format!("empty `#[classify()]`; write one of {WRITE_ONE_OF}"),
                );
            }
            Meta::List(_) => {
                let parsed =
                    attr.parse_nested_meta(|meta| parse_option(&meta, place, &mut found, errors));
                if let Err(e) = parsed {
                    found.reported = true;
                    errors.push(e);
                }
            }
            Meta::Path(path) => {
                found.reported = true;
                errors.at(
                    path.span(),
                    format!("`#[classify]` needs a choice; write one of {WRITE_ONE_OF}"),
                );
            }
            Meta::NameValue(name_value) => {
                found.reported = true;
                errors.at(
                    name_value.eq_token.span,
                    format!(
                        "`#[classify]` takes its choice in parentheses; write one of {WRITE_ONE_OF}"
                    ),
                );
            }
        }
    }
    found
}

fn parse_option(
    meta: &ParseNestedMeta<'_>,
    place: Place,
    found: &mut Found,
    errors: &mut Errors,
) -> syn::Result<()> {
    // `crate` is a keyword: `get_ident` does not see it, the printed path does.
    let key = meta.path.to_token_stream().to_string().replace(' ', "");
    let span = meta.path.span();
    let keyword = match key.as_str() {
        "retry" => "retry",
        "stop" => "stop",
        "delegate" => "delegate",
        "retry_after" => "retry_after",
        "crate" => "crate",
        "reason" => "reason",
        _ => {
            found.reported = true;
            let options = if place == Place::Variant {
                CHOICES
            } else {
                CONTAINER_OPTIONS
            };
            let hint = match closest(&key, options) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("expected {WRITE_ONE_OF}"),
            };
            errors.at(
                span,
                format!("unknown `#[classify]` option `{key}`; {hint}"),
            );
            return skip_value(meta);
        }
    };
    match keyword {
        "reason" => {
            if place == Place::Variant {
                found.reported = true;
                errors.at(
                    span,
                    "`reason` applies to the whole type; write `#[classify(reason = display)]` on the enum or struct",
                );
                return skip_value(meta);
            }
            let written = if meta.input.peek(syn::Token![=]) {
                meta.value()?.parse::<Ident>().ok()
            } else {
                None
            };
            match written {
                Some(display) if display == "display" && found.reason_display.is_none() => {
                    found.reason_display = Some(display.span());
                }
                Some(display) if display == "display" => {
                    found.reported = true;
                    errors.at(display.span(), "duplicate `reason`; write it once");
                }
                other => {
                    found.reported = true;
                    errors.at(
                        other.map_or(span, |ident| ident.span()),
                        "`reason` takes `display`: `#[classify(reason = display)]` gives the error's `Display` as its reason in events and dead letters",
                    );
                    return skip_value(meta);
                }
            }
        }
        "crate" => {
            if place == Place::Variant {
                found.reported = true;
                errors.at(
                    span,
                    "`crate` applies to the whole type; write `#[classify(crate = path)]` on the enum",
                );
                return skip_value(meta);
            }
            if found.krate.is_some() {
                found.reported = true;
                errors.at(span, "duplicate `crate`; write it once");
                return skip_value(meta);
            }
            if !meta.input.peek(syn::Token![=]) {
                found.reported = true;
                errors.at(
                    span,
                    "`crate` names where `retry_core` is; write `crate = path`, e.g. `crate = my_retry_core`",
                );
                return skip_value(meta);
            }
            found.krate = Some(meta.value()?.call(Path::parse_mod_style)?);
        }
        "retry_after" => {
            if !meta.input.peek(syn::Token![=]) {
                found.reported = true;
                errors.at(
                    span,
                    "`retry_after` names the field holding the wait; write `retry_after = <field>` (in a tuple variant, the field's index: `retry_after = 0`)",
                );
                return skip_value(meta);
            }
            let value = meta.value()?;
            let lookahead = value.lookahead1();
            let member = if lookahead.peek(Ident) {
                Member::Named(value.parse()?)
            } else if lookahead.peek(LitInt) {
                Member::Unnamed(value.parse::<Index>()?)
            } else if value.peek(LitStr) {
                let lit: LitStr = value.parse()?;
                found.reported = true;
                errors.at(
                    lit.span(),
                    format!(
                        "write the field without quotes: `retry_after = {}`",
                        lit.value()
                    ),
                );
                return Ok(());
            } else {
                return Err(lookahead.error());
            };
            found.choose(
                Chosen {
                    choice: Choice::RetryAfter(member),
                    keyword,
                    span,
                },
                errors,
            );
        }
        _ => {
            if meta.input.peek(syn::Token![=]) || meta.input.peek(syn::token::Paren) {
                found.reported = true;
                errors.at(
                    span,
                    format!("`{keyword}` takes no value; write `#[classify({keyword})]`"),
                );
                return skip_value(meta);
            }
            let choice = match keyword {
                "retry" => Choice::Retry,
                "stop" => Choice::Stop,
                _ => Choice::Delegate,
            };
            found.choose(
                Chosen {
                    choice,
                    keyword,
                    span,
                },
                errors,
            );
        }
    }
    Ok(())
}

/// Consumes `= value` or `(...)` after an option that was already reported.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_value(&inner))?;
    }
    Ok(())
}

/// `#[classify]` on a field is a likely slip for one on its variant: say where it goes.
/// Returns whether one was reported.
pub(super) fn check_fields(fields: &Fields, owner: &Owner<'_>, errors: &mut Errors) -> bool {
    let mut reported = false;
    for (index, field) in fields.iter().enumerate() {
        if let Some(attr) = field.attrs.iter().find(|a| is_classify(a)) {
            reported = true;
            let member = match &field.ident {
                Some(ident) => ident.to_string(),
                None => index.to_string(),
            };
            errors.at(
                attr.path().span(),
                format!(
                    "`#[classify]` goes {} `{}`, not on a field; write `#[classify(delegate)]` or `#[classify(retry_after = {member})]` there",
                    owner.attribute_place(),
                    owner.ident()
                ),
            );
        }
    }
    reported
}
