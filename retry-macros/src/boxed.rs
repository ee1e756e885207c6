//! `#[retryable]` on a method of an `#[async_trait]` impl.
//!
//! `#[async_trait]` expands the whole impl first, so `#[retryable]` sees the method as it made
//! it: `fn m<'life0, 'async_trait>(&'life0 self, ..) -> Pin<Box<dyn Future<Output = R> + Send +
//! 'async_trait>>` whose body is `Box::pin(async move { .. })`. [`unbox`] turns that back into
//! the `async fn` it was (the async block's statements as the body, `R` as the output), so the
//! retry loop is built as for any `async fn` and boxed in place of the original future.

use syn::{Expr, ItemFn, Pat, ReturnType, Signature, Stmt, Type};

use crate::walk::{self, Walk};

/// The signature `#[async_trait]` wrote, kept for the rewritten method.
pub(crate) struct Boxed {
    pub(crate) sig: Signature,
}

/// When `function` is an `#[async_trait]` method, makes it the `async fn` it was written as and
/// returns the signature to emit; `None` leaves any other function alone.
pub(crate) fn unbox(function: &mut ItemFn) -> Option<Boxed> {
    if function.sig.asyncness.is_some() {
        return None;
    }
    let ReturnType::Type(arrow, ty) = &function.sig.output else {
        return None;
    };
    let output = future_output(ty)?;
    let Some(Stmt::Expr(Expr::Call(call), None)) = function.block.stmts.last() else {
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
    let Some(Expr::Async(future)) = call.args.first() else {
        return None;
    };
    let mut block = future.block.clone();
    let mut_receiver = function.sig.receiver().is_some_and(|receiver| {
        matches!(&receiver.kind, syn::ReceiverKind::Reference(_, _, Some(_)))
    });
    if mut_receiver {
        // `let mut __self = self;` would move the `&mut self` into the first attempt.
        walk::block(&mut Reborrow, &mut block);
    }
    let boxed = Boxed {
        sig: function.sig.clone(),
    };
    let arrow = *arrow;
    function.sig.asyncness = Some(syn::Token![async](function.sig.fn_token.span));
    function.sig.output = ReturnType::Type(arrow, Box::new(output));
    *function.block = block;
    Some(boxed)
}

/// `R` of `Pin<Box<dyn Future<Output = R> + ..>>`.
fn future_output(ty: &Type) -> Option<Type> {
    let Type::Path(pin) = ty else { return None };
    let pin = pin.path.segments.last().filter(|s| s.ident == "Pin")?;
    let syn::PathArguments::AngleBracketed(args) = &pin.arguments else {
        return None;
    };
    let Some(syn::GenericArgument::Type(Type::Path(boxed))) = args.args.first() else {
        return None;
    };
    let boxed = boxed.path.segments.last().filter(|s| s.ident == "Box")?;
    let syn::PathArguments::AngleBracketed(args) = &boxed.arguments else {
        return None;
    };
    let Some(syn::GenericArgument::Type(Type::TraitObject(object))) = args.args.first() else {
        return None;
    };
    object.bounds.iter().find_map(|bound| {
        let syn::TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let future = bound.path.segments.last().filter(|s| s.ident == "Future")?;
        let syn::PathArguments::AngleBracketed(args) = &future.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            syn::GenericArgument::AssocType(assoc) if assoc.ident == "Output" => {
                Some(assoc.ty.clone())
            }
            _ => None,
        })
    })
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
