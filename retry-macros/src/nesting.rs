//! The compile-time half of "retry in only one layer": every `.await` in a `#[retryable]` body
//! is routed through a probe that fails to compile when the awaited future is itself a
//! `Retrying` one.
//!
//! `x.await` becomes `__retry_awaitN(Probe(x).check()).await`: only function and method calls,
//! so temporaries in `x` live exactly as long as before (wrapping `x` in a block would drop
//! them early). The per-site trait and function are hoisted to the top of the attempt's block,
//! and the trait's `on_unimplemented` message names both functions.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{Expr, Item, Macro, Token};

use crate::respan::respan;

pub(crate) struct AwaitProbes<'a> {
    private: &'a TokenStream,
    outer: String,
    /// The items of every site, hoisted to the top of the attempt's block.
    items: Vec<TokenStream>,
}

impl<'a> AwaitProbes<'a> {
    pub(crate) fn new(private: &'a TokenStream, outer: String) -> Self {
        AwaitProbes {
            private,
            outer,
            items: Vec::new(),
        }
    }

    /// The hoisted items, to place before any statement of the attempt's block.
    pub(crate) fn into_items(self) -> TokenStream {
        if self.items.is_empty() {
            return TokenStream::new();
        }
        let private = self.private;
        let items = self.items;
        quote! {
            #[allow(unused_imports)]
            use #private::ProbePlain as _;
            #(#items)*
        }
    }

    fn probe(&mut self, operand: &Expr) -> Expr {
        let site = self.items.len();
        let span = operand.span();
        let trait_name = format_ident!("__RetryAwait{}", site, span = Span::call_site());
        let function = format_ident!("__retry_await{}", site, span = span);
        let inner = escape_braces(&callee(operand));
        let outer = escape_braces(&self.outer);
        let message = format!(
            "retry in only one layer: `{outer}` retries, and awaits `{inner}`, which retries too"
        );
        let label = format!(
            "`{inner}` is `#[retryable]`: its attempts would multiply with those of `{outer}`"
        );
        let note = format!(
            "call it once with `.single_attempt().await`, or remove `#[retryable]` from one of `{outer}` and `{inner}`"
        );
        let private = self.private;
        self.items.push(quote! {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait #trait_name {}
            impl<T> #trait_name for #private::Plain<T> {}
            #[inline]
            fn #function<P: #trait_name + #private::Operand>(operand: P) -> P::Inner {
                #private::Operand::into_inner(operand)
            }
        });
        let probe = respan(quote!(#private::Probe), span);
        Expr::Verbatim(quote_spanned!(span=> #function(#probe(#operand).check())))
    }
}

impl VisitMut for AwaitProbes<'_> {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        visit_mut::visit_expr_mut(self, expr);
        if let Expr::Await(awaited) = expr {
            let probed = self.probe(&awaited.base);
            *awaited.base = probed;
        }
    }

    // A nested `fn` is not part of the retry body: it runs wherever it is called.
    fn visit_item_mut(&mut self, _: &mut Item) {}

    // `join!(a.await, async { b.await })` and other macros whose input is a list of
    // expressions; other macro syntax (`select!` arms) is left alone and covered at run time.
    fn visit_macro_mut(&mut self, mac: &mut Macro) {
        let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
        let Ok(mut exprs) = syn::parse::Parser::parse2(parser, mac.tokens.clone()) else {
            return;
        };
        let before = self.items.len();
        for expr in exprs.iter_mut() {
            self.visit_expr_mut(expr);
        }
        if self.items.len() > before {
            mac.tokens = exprs.into_token_stream();
        }
    }
}

/// What to call the awaited future in the message: the called function or method, or the
/// expression itself.
fn callee(operand: &Expr) -> String {
    match operand {
        Expr::Call(call) => compact(&call.func.to_token_stream()),
        Expr::MethodCall(call) => call.method.to_string(),
        other => compact(&other.to_token_stream()),
    }
}

fn compact(tokens: &TokenStream) -> String {
    tokens
        .to_string()
        .replace(" :: ", "::")
        .replace(" . ", ".")
        .replace(" (", "(")
        .replace(" ,", ",")
}

/// `on_unimplemented` messages are format strings.
fn escape_braces(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}
