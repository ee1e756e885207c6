//! `#[idempotent]`: rewrites an `async fn` into a fn returning `Idempotent<impl Future>` that
//! claims the call's key before running the body, through `__private::run_idempotent`.
//!
//! Above `#[retryable]` it claims once and retries inside the claim (the lease must outlast the
//! retries); below it (`#[retryable]` expands first and calls [`flow_expr`]) every attempt claims.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned as _;
use syn::{Expr, Ident, Item, ItemFn, LitStr, Path, ReturnType};

use crate::args::{RetryArgs, Spanned};
use crate::errors::Errors;
use crate::respan::respan;
use crate::retryable::{self, AttemptBody};
use crate::suggest::unknown_hint;

const ARGUMENTS: &[&str] = &[
    "key",
    "store",
    "biz_key",
    "fingerprint",
    "scope",
    "lease",
    "retention",
    "on_err",
    "namespace",
    "transaction",
    "crate",
];

// The defaults of `retry_core::idempotency::{DEFAULT_LEASE, DEFAULT_RETENTION}`.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// What a failed body's claim becomes.
enum OnErrArg {
    Keep(Span),
    Release(Span),
    /// A resend runs the body again, skipping its finished steps.
    Resume(Span),
    /// A `fn(&E) -> OnErr`.
    Path(Path),
}

impl OnErrArg {
    fn span(&self) -> Span {
        match self {
            OnErrArg::Keep(span) | OnErrArg::Release(span) | OnErrArg::Resume(span) => *span,
            OnErrArg::Path(path) => path.span(),
        }
    }
}

#[derive(Default)]
pub(crate) struct IdempotentArgs {
    key: Option<Expr>,
    store: Option<Expr>,
    biz_key: Option<Expr>,
    fingerprint: Option<Expr>,
    scope: Option<Expr>,
    lease: Option<Spanned<Duration>>,
    retention: Option<Spanned<Duration>>,
    /// `on_err = ...`, when written.
    on_err: Option<OnErrArg>,
    /// `namespace = "..."`, when written; the function's name otherwise.
    namespace: Option<LitStr>,
    /// `transaction = tx`: the parameter that receives the store's transaction.
    transaction: Option<Ident>,
    /// Its declared type.
    transaction_ty: Option<TokenStream>,
    krate: Option<Path>,
    seen: Vec<String>,
    /// Where to point errors about the attribute as a whole.
    span: Option<Span>,
}

impl IdempotentArgs {
    fn parse_one(&mut self, meta: ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
        let key = if meta.path.is_ident("crate") {
            "crate".to_owned()
        } else {
            meta.path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        let key_span = meta.path.span();
        if !ARGUMENTS.contains(&key.as_str()) {
            let shown = meta.path.to_token_stream().to_string().replace(' ', "");
            let hint = unknown_hint(&shown, ARGUMENTS);
            errors.at(
                key_span,
                format!("unknown `#[idempotent]` argument `{shown}`{hint}"),
            );
            meta.value()?.parse::<Expr>()?;
            return Ok(());
        }
        if self.seen.contains(&key) {
            errors.at(
                key_span,
                format!("duplicate `{key}` argument; write it once"),
            );
            meta.value()?.parse::<Expr>()?;
            return Ok(());
        }
        self.seen.push(key.clone());
        let value = meta.value()?;
        match key.as_str() {
            "key" => self.key = Some(value.parse()?),
            "store" => self.store = Some(value.parse()?),
            "biz_key" => self.biz_key = Some(value.parse()?),
            "fingerprint" => self.fingerprint = Some(value.parse()?),
            "scope" => self.scope = Some(value.parse()?),
            "lease" | "retention" => {
                let lit: LitStr = value.parse()?;
                match retry_duration::parse(&lit.value()) {
                    Ok(d) if d.is_zero() => {
                        errors.at(lit.span(), format!("`{key}` must be longer than zero"))
                    }
                    Ok(d) => {
                        let parsed = Some(Spanned {
                            value: d,
                            span: lit.span(),
                        });
                        if key == "lease" {
                            self.lease = parsed
                        } else {
                            self.retention = parsed
                        }
                    }
                    Err(message) => errors.at(lit.span(), message),
                }
            }
            "transaction" => self.transaction = Some(value.parse()?),
            "on_err" => {
                if value.peek(LitStr) {
                    let lit: LitStr = value.parse()?;
                    match lit.value().as_str() {
                        "release" => self.on_err = Some(OnErrArg::Release(lit.span())),
                        "keep" => self.on_err = Some(OnErrArg::Keep(lit.span())),
                        "resume" => self.on_err = Some(OnErrArg::Resume(lit.span())),
                        other => errors.at(
                            lit.span(),
                            format!("unknown `on_err` \"{other}\"; write \"keep\" (a failed call keeps its failure for resends: its effect may have happened), \"release\" (the body fails before any effect, so a resend may run it again), \"resume\" (the body's effects are all in `step`s, so a resend runs it again and skips the finished ones) or the path of a `fn(&E) -> retry_core::idempotency::OnErr` that decides per error"),
                        ),
                    }
                } else {
                    self.on_err = Some(OnErrArg::Path(value.call(Path::parse_mod_style)?));
                }
            }
            "namespace" => {
                let lit: LitStr = value.parse()?;
                if lit.value().is_empty() {
                    errors.at(lit.span(), "`namespace` must not be empty; write a stable name such as `namespace = \"charge.v1\"`, or leave it out to use the function's name");
                }
                self.namespace = Some(lit);
            }
            _ => self.krate = Some(value.call(Path::parse_mod_style)?),
        }
        Ok(())
    }

    fn check(&self, errors: &mut Errors) {
        let span = self.span.unwrap_or_else(Span::call_site);
        if self.key.is_none() {
            errors.at(span, "`#[idempotent]` needs `key = ...`: the values that identify a request, e.g. `key = (req.sender.as_str(), req.msg_no)`");
        }
        if self.store.is_none() {
            errors.at(span, "`#[idempotent]` needs `store = ...`: where claims and responses are kept, e.g. `store = inbox` for an `inbox: &SqliteStore` argument");
        }
        let lease = self.lease();
        let retention = self
            .retention
            .as_ref()
            .map_or(DEFAULT_RETENTION, |r| r.value);
        if retention <= lease {
            let at = self.retention.as_ref().map_or(span, |r| r.span);
            errors.at(at, format!("`retention` ({retention:?}) must be longer than `lease` ({lease:?}): keep rows longer than any resend can arrive"));
        }
    }

    fn lease(&self) -> Duration {
        self.lease.as_ref().map_or(DEFAULT_LEASE, |l| l.value)
    }

    /// `on_err` only decides in non-transactional mode: a transactional `Err` rolls back.
    fn check_on_err(&self, errors: &mut Errors) {
        if let (Some(on_err), Some(_)) = (&self.on_err, &self.transaction) {
            errors.at(on_err.span(), "`on_err` has no effect with `transaction`: an `Err` rolls the transaction back, so nothing happened and the key is always released; remove `on_err`");
        }
    }
}

/// `#[retryable]` above a non-transactional `#[idempotent]`: every attempt is a resend of the
/// same key, so whether a failure is kept decides whether the retries can run at all. The
/// choice must be written.
pub(crate) fn check_below_retry(args: &IdempotentArgs, attr: &syn::Attribute, errors: &mut Errors) {
    if args.on_err.is_none() && args.transaction.is_none() {
        errors.at(
            attr.path().span(),
            "`#[retryable]` above `#[idempotent]` retries by resending the same key, so say what a failed attempt leaves: `on_err = \"release\"` if the body fails before any effect (the next attempt runs it again), `on_err = \"keep\"` if it may fail after its effect (the next attempts get the kept failure, so nothing is retried), or `on_err = path` to decide per error; or use `transaction = tx`, which rolls failures back",
        );
    }
}

/// Checks `on_err` beside `transaction`, and that `transaction = tx` names a parameter, whose
/// declared type the flow's transaction then gets. [`take_transaction_param`] takes the parameter
/// out of the signature once the function is rewritten.
pub(crate) fn check_transaction_param(
    args: &mut IdempotentArgs,
    sig: &syn::Signature,
    errors: &mut Errors,
) {
    args.check_on_err(errors);
    let Some(name) = &args.transaction else {
        return;
    };
    match sig.inputs.iter().find_map(|input| typed_param_named(input, name)) {
        Some(typed) => args.transaction_ty = Some(typed.ty.to_token_stream()),
        None => errors.at(
            name.span(),
            format!("`transaction = {name}` names no parameter; add `{name}: &mut SqliteTransaction` (or your store's transaction type) to the function"),
        ),
    }
}

/// Takes the `transaction = tx` parameter out of the signature: the caller does not pass it, the
/// flow provides it.
pub(crate) fn take_transaction_param(args: &IdempotentArgs, sig: &mut syn::Signature) {
    let Some(name) = &args.transaction else {
        return;
    };
    let inputs = std::mem::take(&mut sig.inputs);
    for input in inputs {
        if typed_param_named(&input, name).is_none() {
            sig.inputs.push(input);
        }
    }
}

/// `input` when it is the parameter `name: T`.
fn typed_param_named<'a>(input: &'a syn::FnArg, name: &Ident) -> Option<&'a syn::PatType> {
    match input {
        syn::FnArg::Typed(typed) if matches!(&*typed.pat, syn::Pat::Ident(p) if p.ident == *name) => {
            Some(typed)
        }
        _ => None,
    }
}

/// Parses the arguments of an `#[idempotent(...)]` attribute found below `#[retryable]`.
pub(crate) fn parse_attr(attr: &syn::Attribute, errors: &mut Errors) -> IdempotentArgs {
    let tokens = match &attr.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    };
    parse_args(tokens, attr.path().span(), errors)
}

fn parse_args(tokens: TokenStream, span: Span, errors: &mut Errors) -> IdempotentArgs {
    let mut args = IdempotentArgs {
        span: Some(span),
        ..IdempotentArgs::default()
    };
    let parser = syn::meta::parser(|meta| args.parse_one(meta, errors));
    if let Err(e) = syn::parse::Parser::parse2(parser, tokens) {
        errors.push(e);
    }
    args.check(errors);
    args
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = parse_args(attr.clone(), Span::call_site(), &mut errors);
    let mut function = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(function)) => function,
        Ok(other) => {
            errors.at(
                retryable::first_token_span(&other),
                "`#[idempotent]` applies to `async fn` only",
            );
            return retryable::with_errors(errors, item);
        }
        Err(e) => {
            errors.push(e);
            return retryable::with_errors(errors, item);
        }
    };
    if let Some(instrument) = crate::instrument::take(&mut function.attrs) {
        // `#[instrument]` below: it expands first, then this attribute again, so its span goes
        // around the retries as `#[retryable]` places it (crate::instrument).
        let krate = retryable::crate_path(args.krate.as_ref());
        return quote!(#instrument #[#krate::idempotent(#attr)] #function);
    }
    // A method of an `#[async_trait]` impl, made an `async fn` again; boxed in `rewrite`.
    let boxed = crate::boxed::unbox(&mut function);
    if let (Some(_), Some(tx)) = (&boxed, &args.transaction) {
        errors.at(tx.span(), "`transaction` cannot take a parameter out of an `#[async_trait]` method, whose signature the trait fixes; write the method without `#[async_trait]` (Rust 1.75 has `async fn` in traits)");
    }
    retryable::check_async_result(&function.sig, "idempotent", &mut errors);
    if let Some(second) = retryable::take_attr(&mut function, "idempotent") {
        errors.at(
            second.path().span(),
            format!(
                "`#[idempotent]` is applied to `{}` twice; remove one of them",
                function.sig.ident
            ),
        );
    }
    // `#[retryable]` below: one claim, retries inside it.
    let mut args = args;
    check_transaction_param(&mut args, &function.sig, &mut errors);
    let consumed = retryable::take_attr(&mut function, "retryable");
    let retry = consumed.as_ref().map(|attr| {
        let tokens = match &attr.meta {
            syn::Meta::List(list) => list.tokens.clone(),
            _ => TokenStream::new(),
        };
        let retry_args = retryable::parse_args(tokens, &mut errors);
        check_lease_outlasts(&args, &retry_args, attr.path().span(), &mut errors);
        if let Some(tx) = &args.transaction {
            errors.at(tx.span(), "`transaction` cannot hold across retries: put `#[retryable]` above `#[idempotent]`, so each attempt claims and begins a transaction of its own");
        }
        retry_args
    });
    if !errors.is_empty() {
        // The function without the `#[retryable]` this macro took (its arguments were checked
        // here).
        return retryable::with_errors(errors, retryable::fallback(function, consumed.as_ref()));
    }
    rewrite(&args, function, retry.as_ref(), boxed)
}

/// One claim holds while every retry inside it runs: its lease must outlast them all, or a
/// duplicate could take the key over and run the body a second time.
fn check_lease_outlasts(
    args: &IdempotentArgs,
    retry: &RetryArgs,
    retry_span: Span,
    errors: &mut Errors,
) {
    let lease = args.lease();
    let lease_span = args.lease.as_ref().map_or(retry_span, |l| l.span);
    if retry.policy.is_some() {
        errors.at(retry_span, "`#[idempotent]` above `#[retryable(policy = ...)]` cannot check that `lease` outlasts the retries; write the knobs (`max`, `deadline`, `attempt_timeout`) literally");
        return;
    }
    match (retry.deadline_value(), retry.attempt_timeout_value()) {
        (Some(deadline), Some(timeout)) if deadline + timeout < lease => {}
        (Some(deadline), Some(timeout)) => errors.at(
            lease_span,
            format!("`lease` ({lease:?}) must outlast the retries inside it: up to `deadline` + `attempt_timeout` = {:?}; raise `lease` or shorten `deadline`", deadline + timeout),
        ),
        _ => errors.at(
            retry_span,
            format!("`#[idempotent]` above `#[retryable]` needs `deadline` and `attempt_timeout` on `#[retryable]`, so the claim's `lease` ({lease:?}) provably outlasts the retries; e.g. `deadline = \"20s\", attempt_timeout = \"5s\"`"),
        ),
    }
}

fn rewrite(
    args: &IdempotentArgs,
    function: ItemFn,
    retry: Option<&RetryArgs>,
    boxed: Option<crate::boxed::Boxed>,
) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        modifiers: _,
        mut sig,
        block,
    } = function;
    let krate = retryable::crate_path(args.krate.as_ref());
    let private = quote!(#krate::__private);
    let name = sig.ident.to_string();
    let ReturnType::Type(arrow, output) = std::mem::replace(&mut sig.output, ReturnType::Default)
    else {
        unreachable!("checked in check_async_result")
    };
    let output_span = output.span();
    // `#[async_trait]`: its signature is the one to emit (and to rename arguments in); it has no
    // `transaction` parameter (an error in `expand`).
    let boxed = boxed.map(|boxed| boxed.restore(&mut sig)).is_some();
    take_transaction_param(args, &mut sig);
    let caller = Ident::new("__retry_caller", Span::mixed_site());
    let (body, kind) = match retry {
        None => {
            let stmts = &block.stmts;
            let private_out = respan(private.clone(), output_span);
            let inferred = retryable::inferred(&output);
            let once = quote_spanned!(output_span=> #private_out::attempt::<#inferred, _>(async { #(#stmts)* }));
            (once, quote!(Once))
        }
        Some(retry) => {
            let mut probes = crate::nesting::AwaitProbes::new(&private, name.clone());
            let brace_token = syn::token::Brace {
                span: block.brace_token.span,
            };
            let (stmts, around) = retryable::attempt_statements(*block);
            let mut block = syn::Block { brace_token, stmts };
            crate::walk::block(&mut probes, &mut block);
            let stmts = &block.stmts;
            let body = AttemptBody {
                items: probes.into_items(),
                stmts: quote!(#(#stmts)*),
                args_used_elsewhere: true,
                idempotency_key: None,
                around,
            };
            (
                retryable::retry_loop(retry, &mut sig, &output, body, &quote!(#caller)),
                quote!(Retries),
            )
        }
    };
    let flow = flow_expr(args, &name, &output, body, retry.is_some());
    if boxed {
        return quote! {
            #(#attrs)*
            #vis #sig {
                let #caller = ::core::panic::Location::caller();
                let _ = #caller;
                ::std::boxed::Box::pin(#flow)
            }
        };
    }
    sig.asyncness = None;
    let future = retryable::opaque_future(&output);
    sig.output = syn::parse_quote_spanned! {output_span=>
        #arrow #krate::Idempotent<#future, #krate::idempotency::#kind>
    };
    quote! {
        #(#attrs)*
        #[allow(refining_impl_trait)]
        #[track_caller]
        #vis #sig {
            let #caller = ::core::panic::Location::caller();
            let _ = #caller;
            #flow
        }
    }
}

/// The stored key, (namespace, scope, key), as a `String` expression; `function` is the
/// namespace unless `namespace = "..."` pins it.
fn key_expr(args: &IdempotentArgs, key: &Expr, function: &str) -> TokenStream {
    let krate = retryable::crate_path(args.krate.as_ref());
    let private = respan(quote!(#krate::__private), key.span());
    let namespace = match &args.namespace {
        Some(pinned) => pinned.value(),
        None => function.to_owned(),
    };
    let scope = match &args.scope {
        Some(scope) => quote_spanned!(scope.span()=> ::core::option::Option::Some(&(#scope))),
        None => quote!(::core::option::Option::None::<&str>),
    };
    quote_spanned!(key.span()=> #private::encode_namespaced_key(#namespace, #scope, &(#key)))
}

/// The call's idempotency key for its dead letter, as a `LetterKey` expression: the encoded key,
/// the namespace it was claimed in, and how long the store keeps it.
pub(crate) fn letter_key(args: &IdempotentArgs, function: &str) -> Option<TokenStream> {
    let key = args.key.as_ref()?;
    let krate = retryable::crate_path(args.krate.as_ref());
    let encoded = key_expr(args, key, function);
    let namespace = match &args.namespace {
        Some(pinned) => pinned.value(),
        None => function.to_owned(),
    };
    let retention = retryable::duration_tokens(retention(args));
    Some(quote!(#krate::__private::LetterKey {
        key: #encoded,
        scope: #namespace,
        retention: #retention,
    }))
}

/// `retention`, or the default.
fn retention(args: &IdempotentArgs) -> Duration {
    args.retention
        .as_ref()
        .map_or(DEFAULT_RETENTION, |r| r.value)
}

/// The idempotent flow around `body` (a future of the function's output), as an expression of
/// type `Idempotent<impl Future, K>`.
pub(crate) fn flow_expr(
    args: &IdempotentArgs,
    function: &str,
    output: &syn::Type,
    body: TokenStream,
    retries: bool,
) -> TokenStream {
    let krate = retryable::crate_path(args.krate.as_ref());
    let private = quote!(#krate::__private);
    let at = |expr: &Expr| respan(private.clone(), expr.span());
    let (Some(key), Some(store)) = (&args.key, &args.store) else {
        // `check` reported the missing argument.
        return quote!(::core::compile_error!(
            "`#[idempotent]` needs `key` and `store`"
        ));
    };
    let key = key_expr(args, key, function);
    let biz_key = match &args.biz_key {
        Some(biz) => {
            quote_spanned!(biz.span()=> ::core::option::Option::Some(::std::string::ToString::to_string(&(#biz))))
        }
        None => quote!(::core::option::Option::None),
    };
    let fingerprint = match &args.fingerprint {
        Some(fp) => {
            let private = at(fp);
            quote_spanned!(fp.span()=> ::core::option::Option::Some(#private::fingerprint(&(#fp))))
        }
        None => quote!(::core::option::Option::None),
    };
    let lease = retryable::duration_tokens(args.lease());
    let retention = retryable::duration_tokens(retention(args));
    let on_err = match &args.on_err {
        None | Some(OnErrArg::Keep(_)) => quote!(#private::keep_failures),
        Some(OnErrArg::Release(_)) => quote!(#private::release_failures),
        Some(OnErrArg::Resume(_)) => quote!(#private::resume_failures),
        Some(OnErrArg::Path(path)) => {
            let private = respan(private.clone(), path.span());
            quote_spanned!(path.span()=> #private::on_err(#path))
        }
    };
    let kind = if retries {
        quote!(#private::Retries)
    } else {
        quote!(#private::Once)
    };
    let call = Ident::new("__retry_call", Span::mixed_site().located_at(output.span()));
    let settings = quote! {
        let #call = #private::IdempotentCall {
            key: #key,
            biz_key: #biz_key,
            fingerprint: #fingerprint,
            lease: #lease,
            retention: #retention,
            function: ::std::borrow::Cow::Borrowed(#function),
        };
    };
    // Unmet bounds on `T` and `E` point at the return type.
    let run = respan(quote!(#private::run_idempotent), output.span());
    let store_private = at(store);
    let store = quote_spanned!(store.span()=> #store_private::store(&(#store)));
    if let (Some(tx), Some(tx_ty)) = (&args.transaction, &args.transaction_ty) {
        // Transactional: the claim commits alone, the body gets the store's transaction, and
        // the response commits with the body's writes.
        let held = Ident::new("__retry_held", Span::mixed_site());
        let transaction = Ident::new("__retry_transaction", Span::mixed_site());
        let outcome = Ident::new("__retry_outcome", Span::mixed_site());
        let claim = respan(quote!(#private::claim_transactional), output.span());
        let finish = respan(quote!(#private::finish_transactional), output.span());
        return quote! {{
            #settings
            #private::idempotent::<_, #kind>(::core::clone::Clone::clone(&#call.key), async move {
                let (#held, mut #transaction) = match #claim(#store, &#call).await {
                    ::core::result::Result::Ok(claimed) => claimed,
                    ::core::result::Result::Err(answer) => return answer,
                };
                let #outcome = {
                    let #tx: #tx_ty = &mut #transaction;
                    #held.hold(#body).await
                };
                #finish(#held, #transaction, &#call, #outcome).await
            })
        }};
    }
    // Every token of the call and its `.await` at one span, the output type's, with the
    // hygiene of the locals it reads: rustc then reports an unmet bound on `T` or `E` once.
    let at = Span::mixed_site().located_at(output.span());
    let run = respan(run, at);
    let (store_arg, on_err_arg, body_arg) = (
        Ident::new("__retry_store", at),
        Ident::new("__retry_on_err", at),
        Ident::new("__retry_body", at),
    );
    let call_arg = Ident::new("__retry_call", at);
    // In a block of their own, so the locals are not kept in the future across the `.await`.
    let run_call = quote_spanned! {at=>
        {
            let #store_arg = #store;
            let #on_err_arg = #on_err;
            let #body_arg = #body;
            #run(#store_arg, #call_arg, #on_err_arg, #body_arg)
        }.await
    };
    // The settings are evaluated when the function is called, so the returned future knows its
    // key before it is polled (a redrive checks it against the dead letter's).
    quote! {{
        #settings
        #private::idempotent::<_, #kind>(::core::clone::Clone::clone(&#call.key), async move {
            #run_call
        })
    }}
}
