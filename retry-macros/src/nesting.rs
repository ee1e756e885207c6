//! The compile-time half of "retry in only one layer": every `.await` in a `#[retryable]` body
//! is routed through a probe that fails to compile when the awaited future is itself a
//! `Retrying` one, or a `Policy::retry` call.
//!
//! `x.await` becomes `__retry_awaitN(Probe(x).check()).await`: only function and method calls,
//! so temporaries in `x` live exactly as long as before (wrapping `x` in a block would drop
//! them early). The per-site traits and function are hoisted to the top of the attempt's block,
//! and each trait's `on_unimplemented` message names both functions.
//!
//! The probe follows the run-time rule of what belongs to this task's retry:
//! - It descends into everything that runs in this task: awaited expressions, `async` blocks
//!   and closures, and the arguments of the macros in [`PROBED_MACROS`] (`join!`, `try_join!`,
//!   `format!`...).
//! - It does not descend into work handed to another task: the arguments of a call to a function
//!   or method whose name starts with `spawn` (`tokio::spawn`, `tokio::task::spawn_blocking`,
//!   `spawn_local`, `JoinSet::spawn`/`spawn_on`, `Handle::spawn`, `std::thread::spawn`,
//!   `Builder::spawn`...), matched by the last path segment or the method name, and the
//!   argument of `isolated(..)` (`retry_core::scope::isolated`), which marks a future polled in
//!   this task as independent at run time too. The future must be written inside the call: one
//!   built earlier in a `let` is probed where it is built.
//! - It does not rewrite inside any other macro: a macro may show its tokens (`assert!`,
//!   `assert_eq!`, `dbg!`, `stringify!`...), and its message must show the user's own code, not
//!   the probe. An awaited retry there is left to the run-time check (a single attempt, and a
//!   warning).
//! - A nested `fn` is not part of the retry body: it runs wherever it is called.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Macro, Token};

use crate::respan::respan;
use crate::walk::{self, Walk};

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
        let span = site_span(operand);
        let retrying = format_ident!("__RetryAwait{}", site, span = Span::call_site());
        let closure = format_ident!("__RetryAwaitClosure{}", site, span = Span::call_site());
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
        let closure_label = format!(
            "this `Policy::retry` retries: its attempts would multiply with those of `{outer}`"
        );
        let closure_note = format!(
            "make one attempt with `.single_attempt().await`, or keep the retries in one of `{outer}` and this `Policy::retry`"
        );
        let private = self.private;
        self.items.push(quote! {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait #retrying {}
            impl<T> #retrying for #private::Plain<T> {}
            impl<T> #retrying for #private::NestedClosure<T> {}
            #[diagnostic::on_unimplemented(message = #message, label = #closure_label, note = #closure_note)]
            trait #closure {}
            impl<T> #closure for #private::Plain<T> {}
            impl<T> #closure for #private::Nested<T> {}
            #[inline]
            fn #function<P: #retrying + #closure + #private::Operand>(operand: P) -> P::Inner {
                #private::Operand::into_inner(operand)
            }
        });
        let probe = respan(quote!(#private::Probe), span);
        Expr::Verbatim(quote_spanned!(span=> #function(#probe(#operand).check())))
    }
}

impl Walk for AwaitProbes<'_> {
    fn enter(&mut self, expr: &mut Expr) -> bool {
        match expr {
            // Work handed to another task, or marked independent: only what is evaluated here
            // to reach the call is this task's.
            Expr::Call(call) if path_hands_off(&call.func) => {
                walk::expr(self, &mut call.func);
                false
            }
            Expr::MethodCall(call) if hands_off(&call.method) => {
                walk::expr(self, &mut call.receiver);
                false
            }
            _ => true,
        }
    }

    fn leave(&mut self, expr: &mut Expr) {
        if let Expr::Await(awaited) = expr {
            let probed = self.probe(&awaited.base);
            *awaited.base = probed;
        }
    }

    // Only macros known to take a list of expressions and not to show them; `select!` arms and
    // everything else are left alone and covered at run time.
    fn mac(&mut self, mac: &mut Macro) {
        let Some(name) = mac.path.segments.last() else {
            return;
        };
        if !PROBED_MACROS.iter().any(|probed| name.ident == probed) {
            return;
        }
        let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
        let Ok(mut exprs) = syn::parse::Parser::parse2(parser, mac.tokens.clone()) else {
            return;
        };
        let before = self.items.len();
        for expr in exprs.iter_mut() {
            walk::expr(self, expr);
        }
        if self.items.len() > before {
            mac.tokens = exprs.into_token_stream();
        }
    }
}

/// The macros whose arguments are probed, by last path segment: they take a list of
/// expressions, run them in this task and never show their tokens (`assert!` and `dbg!` do:
/// they are not here).
const PROBED_MACROS: &[&str] = &[
    "join",
    "try_join",
    "pin",
    "vec",
    "format",
    "format_args",
    "print",
    "println",
    "eprint",
    "eprintln",
    "write",
    "writeln",
];

/// Whether a call to the function or method `name` hands its arguments to another task
/// (`spawn`, `spawn_blocking`, `spawn_local`, `spawn_on`...) or marks them independent
/// (`isolated`).
fn hands_off(name: &Ident) -> bool {
    let name = name.to_string();
    name.starts_with("spawn") || name == "isolated"
}

/// [`hands_off`] for the function of a call, by its path's last segment.
fn path_hands_off(func: &Expr) -> bool {
    match func {
        Expr::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| hands_off(&segment.ident)),
        _ => false,
    }
}

/// Where a site's error points: the called method, or the called function's name (its last path
/// segment), rather than the first token of the receiver or of a qualified path.
fn site_span(operand: &Expr) -> Span {
    match operand {
        Expr::MethodCall(call) => call.method.span(),
        Expr::Call(call) => match &*call.func {
            Expr::Path(path) => path
                .path
                .segments
                .last()
                .map_or_else(|| call.func.span(), |segment| segment.ident.span()),
            other => other.span(),
        },
        other => other.span(),
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

#[cfg(test)]
mod tests {
    use super::AwaitProbes;
    use quote::{ToTokens, quote};

    /// The number of probed sites in `block`, and the block after the rewrite.
    fn probe(block: proc_macro2::TokenStream) -> (usize, String) {
        let private = quote!(::retry_core::__private);
        let mut block: syn::Block = syn::parse2(block).expect("a block");
        let mut probes = AwaitProbes::new(&private, "outer".to_owned());
        crate::walk::block(&mut probes, &mut block);
        (probes.items.len(), block.into_token_stream().to_string())
    }

    #[test]
    fn probes_what_runs_in_this_task() {
        let (sites, _) = probe(quote!({
            a().await;
            async { b().await }.await;
            tokio::join!(c().await, async { d().await });
        }));
        assert_eq!(sites, 5);
    }

    #[test]
    fn probes_every_expression_of_the_body_but_nested_items() {
        let (sites, _) = probe(quote!({
            let Some(x) = a().await else { return b().await };
            match c().await {
                Some(y) if d(y).await => {}
                _ => {}
            }
            let s = S {
                f: e().await,
                ..f().await
            };
            let g = async || g().await;
            for i in h().await {
                while i.await {}
            }
            if let Some(z) = k().await {
                [m().await; 2];
            }
            fn nested() -> impl Future {
                async { n().await }
            }
        }));
        assert_eq!(sites, 11);
    }

    #[test]
    fn leaves_work_handed_to_another_task_or_isolated() {
        let (sites, _) = probe(quote!({
            tokio::spawn(async move { a().await });
            tokio::task::spawn_blocking(move || block_on(async { b().await }));
            set.spawn_on(async { c().await }, &handle);
            std::thread::spawn(|| ());
            retry_core::scope::isolated(d()).await;
            scope::isolated(async { e().await }).await;
        }));
        assert_eq!(
            sites, 2,
            "only the awaits of the two `isolated(..)` themselves"
        );
    }

    #[test]
    fn the_receiver_of_a_spawning_method_is_still_this_tasks() {
        let (sites, _) = probe(quote!({
            connect().await.spawn(async { a().await });
        }));
        assert_eq!(sites, 1);
    }

    #[test]
    fn macros_that_may_show_their_tokens_keep_them() {
        let (sites, rewritten) = probe(quote!({
            assert!(a().await);
            assert_eq!(b().await, 1, "{}", c().await);
            dbg!(d().await);
            my_macro!(e().await);
        }));
        assert_eq!(sites, 0);
        assert!(!rewritten.contains("__retry_await"), "{rewritten}");
    }
}
