//! `#[retryable]` on a method of an `#[async_trait]` impl.
//!
//! `#[async_trait]` expands the whole impl first, so `#[retryable]` sees the method as it made
//! it: `fn m<'life0, 'async_trait>(&'life0 self, ..) -> Pin<Box<dyn Future<Output = R> + Send +
//! 'async_trait>>` whose body is `Box::pin(async move { .. })`. [`unbox`] turns that back into
//! the `async fn` it was (the async block's statements as the body, `R` as the output), so the
//! retry loop is built as for any `async fn` and boxed in place of the original future.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::{Expr, GenericArgument, ItemFn, Pat, ReturnType, Signature, Stmt, Type};

use crate::walk::{self, Walk};

/// What `#[async_trait]` wrote in the signature and [`unbox`] changed: the method is emitted
/// with it.
pub(crate) struct Boxed {
    /// `-> Pin<Box<dyn Future<Output = R> + ..>>`.
    output: ReturnType,
}

impl Boxed {
    /// Gives `sig`, the `async fn` [`unbox`] made, the output `#[async_trait]` wrote, and takes
    /// its `async` away again.
    pub(crate) fn restore(self, sig: &mut Signature) {
        sig.asyncness = None;
        sig.output = self.output;
    }
}

/// When `function` is an `#[async_trait]` method, makes it the `async fn` it was written as and
/// returns what [`Boxed::restore`] puts back in the signature to emit; `None` leaves any other
/// function alone.
pub(crate) fn unbox(function: &mut ItemFn) -> Option<Boxed> {
    if function.sig.asyncness.is_some() {
        return None;
    }
    let mut_receiver = function.sig.receiver().is_some_and(|receiver| {
        matches!(&receiver.kind, syn::ReceiverKind::Reference(_, _, Some(_)))
    });
    let ReturnType::Type(arrow, ty) = &mut function.sig.output else {
        return None;
    };
    // Tokens are not `Copy` in syn without its `clone-impls`; their spans are.
    let arrow = arrow.spans;
    let written = ty.to_token_stream();
    let output = future_output(ty)?;
    let Some(Stmt::Expr(Expr::Call(call), None)) = function.block.stmts.last_mut() else {
        return None;
    };
    let Expr::Path(callee) = &*call.func else {
        return None;
    };
    let segments: Vec<String> = callee
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    if !segments.ends_with(&["Box".to_owned(), "pin".to_owned()]) || call.args.len() != 1 {
        return None;
    }
    let Some(Expr::Async(future)) = call.args.first_mut() else {
        return None;
    };
    // The method is one: from here on it is rewritten.
    let mut block = syn::Block {
        brace_token: syn::token::Brace {
            span: future.block.brace_token.span,
        },
        stmts: std::mem::take(&mut future.block.stmts),
    };
    if mut_receiver {
        // `let mut __self = self;` would move the `&mut self` into the first attempt.
        walk::block(&mut Reborrow, &mut block);
    }
    let output = std::mem::replace(output, Type::Verbatim(TokenStream::new()));
    function.sig.asyncness = Some(syn::Token![async](function.sig.fn_token.span));
    function.sig.output = ReturnType::Type(syn::token::RArrow { spans: arrow }, Box::new(output));
    *function.block = block;
    Some(Boxed {
        output: ReturnType::Type(
            syn::token::RArrow { spans: arrow },
            Box::new(Type::Verbatim(written)),
        ),
    })
}

/// `R` of `Pin<Box<dyn Future<Output = R> + ..>>`.
fn future_output(ty: &mut Type) -> Option<&mut Type> {
    let Type::Path(pin) = ty else { return None };
    let Some(GenericArgument::Type(Type::Path(boxed))) =
        arguments_of(&mut pin.path, "Pin")?.first_mut()
    else {
        return None;
    };
    let Some(GenericArgument::Type(Type::TraitObject(object))) =
        arguments_of(&mut boxed.path, "Box")?.first_mut()
    else {
        return None;
    };
    object.bounds.iter_mut().find_map(|bound| {
        let syn::TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        arguments_of(&mut bound.path, "Future")?
            .iter_mut()
            .find_map(|arg| match arg {
                GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&mut assoc.ty),
                _ => None,
            })
    })
}

/// The `<..>` arguments of `path` when its last segment is `name` (`Pin<..>`, `Box<..>`).
fn arguments_of<'a>(
    path: &'a mut syn::Path,
    name: &str,
) -> Option<&'a mut Punctuated<GenericArgument, syn::Token![,]>> {
    let last = path.segments.last_mut().filter(|s| s.ident == name)?;
    match &mut last.arguments {
        syn::PathArguments::AngleBracketed(args) => Some(&mut args.args),
        _ => None,
    }
}

/// `let mut __self = self;` becomes `let mut __self = &mut *self;`, outside nested items.
struct Reborrow;

impl Walk for Reborrow {
    fn local(&mut self, local: &mut syn::Local) {
        let is_self = matches!(&local.pat, Pat::Ident(p) if p.ident == "__self");
        if let (true, Some(init)) = (is_self, &mut local.init)
            && matches!(&*init.expr, Expr::Path(p) if p.path.is_ident("self"))
        {
            let span = syn::spanned::Spanned::span(&*init.expr);
            *init.expr = syn::parse_quote_spanned!(span=> &mut *self);
        }
    }
}
