//! `#[derive(Classify)]`: an impl of `retry_core::Classify` read from `#[classify(...)]`
//! attributes, one on every variant of an enum (or one on a struct).
//!
//! Parsing collects what each attribute says, checking reads it against the fields it names, and
//! expansion writes one `match` arm per variant. Every mistake is collected, so the user sees all
//! of them at once; on any mistake the errors are emitted beside a fallback impl (thiserror does
//! the same), so no "`X` does not implement `Classify`" errors follow from the mistake.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned as _;
use syn::{
    Attribute, Fields, GenericParam, Generics, Ident, Index, Item, LitInt, LitStr, Member, Meta,
    Path, Type,
};

use crate::errors::Errors;
use crate::respan::respan;
use crate::suggest::closest;

/// What a variant (or a struct) may say.
const CHOICES: &[&str] = &["retry", "stop", "delegate", "retry_after"];

/// What the type itself may say: on a struct, a choice; on an enum, only `crate`.
const CONTAINER_OPTIONS: &[&str] = &["retry", "stop", "delegate", "retry_after", "crate"];

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
                krate: found.krate.clone(),
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

// ---- parsing ----

/// Where a `#[classify]` attribute sits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Enum,
    Struct,
    Variant,
}

/// What is being classified, for messages.
enum Owner<'a> {
    Variant(&'a Ident),
    Struct(&'a Ident),
}

impl Owner<'_> {
    fn ident(&self) -> &Ident {
        match self {
            Owner::Variant(ident) | Owner::Struct(ident) => ident,
        }
    }

    /// "variant `Timeout`", "tuple struct `Wrapper`".
    fn describe(&self, fields: &Fields) -> String {
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

enum Choice {
    Retry,
    Stop,
    Delegate,
    RetryAfter(Member),
}

/// A choice with the span of its keyword.
struct Chosen {
    choice: Choice,
    keyword: &'static str,
    span: Span,
}

/// Everything the `#[classify]` attributes of one variant (or of the type) said.
#[derive(Default)]
struct Found {
    chosen: Option<Chosen>,
    krate: Option<Path>,
    /// An option was already reported as wrong: a "says nothing" error would only repeat it.
    reported: bool,
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
fn parse_container(attrs: &[Attribute], place: Place, ident: &Ident, errors: &mut Errors) -> Found {
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
fn parse_attrs(attrs: &[Attribute], place: Place, errors: &mut Errors) -> Found {
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
fn check_fields(fields: &Fields, owner: &Owner<'_>, errors: &mut Errors) -> bool {
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

// ---- checking ----

/// What one arm does, with the field it reads.
enum Action<'a> {
    Retry,
    Stop,
    Delegate(Member, &'a Type),
    RetryAfter(Member, &'a Type),
}

/// Reads the choice against the fields it names; `None` when it cannot be expanded (reported).
fn resolve<'a>(
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
                let mut member = member.clone();
                if let Member::Unnamed(index) = &mut member {
                    index.span = field.ty.span();
                }
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

fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---- expansion ----

struct Target<'a> {
    ident: &'a Ident,
    generics: &'a Generics,
    krate: Option<Path>,
}

impl Target<'_> {
    fn private(&self) -> TokenStream {
        match &self.krate {
            Some(path) => quote!(#path::__private),
            None => quote!(::retry_core::__private),
        }
    }

    /// The impl emitted beside errors: it never runs (the crate does not compile), and it keeps
    /// every use of the type as a `Classify` error from being reported too.
    fn fallback(&self) -> TokenStream {
        let private = self.private();
        let ident = self.ident;
        let (impl_generics, ty_generics, where_clause) = self.generics.split_for_impl();
        quote! {
            #[automatically_derived]
            impl #impl_generics #private::Classify for #ident #ty_generics #where_clause {
                fn classify(&self) -> #private::Decision {
                    #private::Decision::Stop
                }
            }
        }
    }

    fn expand_enum(&self, variants: &[(&Ident, Action<'_>)]) -> TokenStream {
        let private = self.private();
        let arms = variants.iter().map(|(variant, action)| {
            let pattern = match action {
                Action::Retry | Action::Stop => quote!(Self::#variant { .. }),
                Action::Delegate(member, ty) | Action::RetryAfter(member, ty) => {
                    let field = field_binding(ty.span());
                    quote!(Self::#variant { #member: #field, .. })
                }
            };
            let decision = decision(action, &private);
            quote!(#pattern => #decision,)
        });
        let body = if variants.is_empty() {
            // An enum without variants has no value to classify.
            quote!(match *self {})
        } else {
            quote!(match self { #(#arms)* })
        };
        // A delegated field also gives its reason; the other variants keep the default `None`.
        let delegates = variants
            .iter()
            .any(|(_, action)| matches!(action, Action::Delegate(..)));
        let reason = delegates.then(|| {
            let arms = variants.iter().map(|(variant, action)| match action {
                Action::Delegate(member, ty) => {
                    let field = field_binding(ty.span());
                    let reason = delegated(&private, ty, "reason");
                    quote!(Self::#variant { #member: #field, .. } => #reason,)
                }
                _ => quote!(Self::#variant { .. } => ::core::option::Option::None,),
            });
            quote!(match self { #(#arms)* })
        });
        self.implement(variants.iter().map(|(_, action)| action), &body, reason)
    }

    fn expand_struct(&self, action: &Action<'_>) -> TokenStream {
        let private = self.private();
        let binding = match action {
            Action::Retry | Action::Stop => TokenStream::new(),
            Action::Delegate(member, ty) | Action::RetryAfter(member, ty) => {
                let field = field_binding(ty.span());
                quote!(let Self { #member: #field, .. } = self;)
            }
        };
        let decision = decision(action, &private);
        let reason = match action {
            Action::Delegate(_, ty) => {
                let reason = delegated(&private, ty, "reason");
                Some(quote!(#binding #reason))
            }
            Action::Retry | Action::Stop | Action::RetryAfter(..) => None,
        };
        self.implement([action], &quote!(#binding #decision), reason)
    }

    /// The impl, with a `Classify` bound on every delegated field whose type uses a generic
    /// parameter (and on no other), and `reason` when a field is delegated to.
    fn implement<'b, 'a: 'b>(
        &self,
        actions: impl IntoIterator<Item = &'b Action<'a>>,
        body: &TokenStream,
        reason: Option<TokenStream>,
    ) -> TokenStream {
        let private = self.private();
        let mut generics = self.generics.clone();
        let params: Vec<&Ident> = self
            .generics
            .params
            .iter()
            .filter_map(|param| match param {
                GenericParam::Type(ty) => Some(&ty.ident),
                GenericParam::Const(c) => Some(&c.ident),
                GenericParam::Lifetime(_) => None,
            })
            .collect();
        let mut bounded: Vec<String> = Vec::new();
        let mut waits = false;
        for action in actions {
            match action {
                Action::Delegate(_, ty) => {
                    let key = ty.to_token_stream().to_string();
                    if mentions(ty.to_token_stream(), &params) && !bounded.contains(&key) {
                        bounded.push(key);
                        let classify = respan(quote!(#private::Classify), at(ty.span()));
                        generics
                            .make_where_clause()
                            .predicates
                            .push(syn::parse_quote_spanned!(ty.span()=> #ty: #classify));
                    }
                }
                Action::RetryAfter(..) => waits = true,
                Action::Retry | Action::Stop => {}
            }
        }
        let wait_trait = waits.then(retry_after_trait);
        let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
        let ident = self.ident;
        let reason = reason.map(|reason| {
            quote! {
                #[inline]
                fn reason(&self) -> ::core::option::Option<::std::string::String> {
                    #reason
                }
            }
        });
        quote! {
            #[automatically_derived]
            impl #impl_generics #private::Classify for #ident #ty_generics #where_clause {
                #[inline]
                fn classify(&self) -> #private::Decision {
                    #wait_trait
                    #body
                }
                #reason
            }
        }
    }
}

/// A span at the user's token `span` with the macro's own hygiene: errors point at the user's
/// code, and lints treat the tokens as generated.
fn at(span: Span) -> Span {
    Span::mixed_site().located_at(span)
}

/// The name a read field is bound to, located at the field's type so a type error points there.
/// Hygienic, so no local name of the user's can clash with it. (A constant in scope named
/// `__retry_field` would still turn it into a constant pattern: items resolve at the call site
/// even from `mixed_site` spans, and `ref` does not help.)
fn field_binding(ty: Span) -> Ident {
    Ident::new("__retry_field", at(ty))
}

/// The local trait's name, at `span` (hygienic wherever it is located).
fn retry_after_trait_ident(span: Span) -> Ident {
    Ident::new("RetryAfterField", Span::mixed_site().located_at(span))
}

/// What a `retry_after` field may be: `Duration` or `Option<Duration>`. A local trait (inside
/// `classify`, so invisible to the user) rather than `Into<Option<Duration>>`, for an error that
/// names the field's type and says what to write, instead of every `From` impl of `Option`.
fn retry_after_trait() -> TokenStream {
    let name = retry_after_trait_ident(Span::call_site());
    quote! {
        #[diagnostic::on_unimplemented(
            message = "a `retry_after` field must be a `Duration` or an `Option<Duration>`, not `{Self}`",
            label = "named by `retry_after`, but not a `Duration` or `Option<Duration>`",
            note = "store the wait as a `std::time::Duration` (e.g. `Duration::from_secs(n)`), or classify the variant with `#[classify(retry)]`"
        )]
        trait #name {
            fn wait(&self) -> ::core::option::Option<::core::time::Duration>;
        }
        impl #name for ::core::time::Duration {
            #[inline]
            fn wait(&self) -> ::core::option::Option<::core::time::Duration> {
                ::core::option::Option::Some(*self)
            }
        }
        impl #name for ::core::option::Option<::core::time::Duration> {
            #[inline]
            fn wait(&self) -> ::core::option::Option<::core::time::Duration> {
                *self
            }
        }
    }
}

/// The decision of one arm, spanned on the field it reads so a type error points at the field.
fn decision(action: &Action<'_>, private: &TokenStream) -> TokenStream {
    match action {
        Action::Retry => quote!(#private::Decision::Retry),
        Action::Stop => quote!(#private::Decision::Stop),
        Action::Delegate(_, ty) => delegated(private, ty, "classify"),
        Action::RetryAfter(_, ty) => {
            let span = at(ty.span());
            let field = field_binding(ty.span());
            let name = retry_after_trait_ident(span);
            let wait = quote_spanned!(span=> #name::wait(#field));
            quote! {
                ::core::option::Option::map_or(
                    #wait,
                    #private::Decision::Retry,
                    #private::Decision::RetryAfter,
                )
            }
        }
    }
}

/// `Classify::<method>(field)` on a delegated field, located at the field's type: a type that is
/// not `Classify` is reported there, once (`classify` and `reason` give identical errors, which
/// rustc shows once).
fn delegated(private: &TokenStream, ty: &Type, method: &str) -> TokenStream {
    let span = at(ty.span());
    let field = field_binding(ty.span());
    let private = respan(private.clone(), span);
    let method = Ident::new(method, span);
    quote_spanned!(span=> #private::Classify::#method(#field))
}

/// Whether `tokens` name one of `params`.
fn mentions(tokens: TokenStream, params: &[&Ident]) -> bool {
    tokens.into_iter().any(|tree| match tree {
        TokenTree::Ident(ident) => params.iter().any(|p| **p == ident),
        TokenTree::Group(group) => mentions(group.stream(), params),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}
