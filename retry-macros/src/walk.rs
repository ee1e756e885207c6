//! A walk over the code of a function body that runs where the body runs: its statements and
//! every expression in them, including closures, `async` blocks and match guards, but not nested
//! items (a nested `fn` runs wherever it is called), types, or the tokens of macro calls (each
//! rewrite decides which macros it reads, see [`Walk::mac`]).
//!
//! What the rewrites of this crate need from syn's `visit_mut`, for expressions alone: one
//! function over `&mut dyn Walk`, rather than syn's visitor of the whole syntax tree compiled
//! again for each rewrite.

use syn::{Block, Expr, Local, Macro, Pat, Stmt};

/// A rewrite applied by [`block`] and [`expr`].
pub(crate) trait Walk {
    /// Before the sub-expressions of `expr`; `false` skips them (and [`Walk::leave`]). A rewrite
    /// that visits only some of them calls [`expr`] on those and returns `false`.
    fn enter(&mut self, expr: &mut Expr) -> bool {
        let _ = expr;
        true
    }

    /// After the sub-expressions of `expr`.
    fn leave(&mut self, expr: &mut Expr) {
        let _ = expr;
    }

    /// Before the pattern and the expressions of a `let`.
    fn local(&mut self, local: &mut Local) {
        let _ = local;
    }

    /// A macro call, in statement or expression position; its tokens are not walked otherwise.
    fn mac(&mut self, mac: &mut Macro) {
        let _ = mac;
    }
}

/// Walks the statements of `block`.
pub(crate) fn block(walk: &mut dyn Walk, block: &mut Block) {
    for stmt in &mut block.stmts {
        match stmt {
            Stmt::Local(local) => {
                walk.local(local);
                pat(walk, &mut local.pat);
                if let Some(init) = &mut local.init {
                    expr(walk, &mut init.expr);
                    if let Some((_, diverge)) = &mut init.diverge {
                        expr(walk, diverge);
                    }
                }
            }
            Stmt::Expr(e, _) => expr(walk, e),
            Stmt::Macro(stmt) => walk.mac(&mut stmt.mac),
            Stmt::Item(_) => {}
        }
    }
}

/// Walks `e` and its sub-expressions, in the order they are written.
pub(crate) fn expr(walk: &mut dyn Walk, e: &mut Expr) {
    if !walk.enter(e) {
        return;
    }
    match e {
        Expr::Array(array) => array.elems.iter_mut().for_each(|e| expr(walk, e)),
        Expr::Tuple(tuple) => tuple.elems.iter_mut().for_each(|e| expr(walk, e)),
        Expr::Assign(assign) => {
            expr(walk, &mut assign.left);
            expr(walk, &mut assign.right);
        }
        Expr::Binary(binary) => {
            expr(walk, &mut binary.left);
            expr(walk, &mut binary.right);
        }
        Expr::Async(e) => block(walk, &mut e.block),
        Expr::Block(e) => block(walk, &mut e.block),
        Expr::Const(e) => block(walk, &mut e.block),
        Expr::TryBlock(e) => block(walk, &mut e.block),
        Expr::Unsafe(e) => block(walk, &mut e.block),
        Expr::Loop(e) => block(walk, &mut e.body),
        Expr::Await(e) => expr(walk, &mut e.base),
        Expr::Field(e) => expr(walk, &mut e.base),
        Expr::Cast(e) => expr(walk, &mut e.expr),
        Expr::Group(e) => expr(walk, &mut e.expr),
        Expr::Paren(e) => expr(walk, &mut e.expr),
        Expr::RawAddr(e) => expr(walk, &mut e.expr),
        Expr::Reference(e) => expr(walk, &mut e.expr),
        Expr::Try(e) => expr(walk, &mut e.expr),
        Expr::Unary(e) => expr(walk, &mut e.expr),
        Expr::Break(e) => optional(walk, &mut e.expr),
        Expr::Return(e) => optional(walk, &mut e.expr),
        Expr::Yield(e) => optional(walk, &mut e.expr),
        Expr::Call(call) => {
            expr(walk, &mut call.func);
            call.args.iter_mut().for_each(|e| expr(walk, e));
        }
        Expr::MethodCall(call) => {
            expr(walk, &mut call.receiver);
            call.args.iter_mut().for_each(|e| expr(walk, e));
        }
        Expr::Closure(closure) => {
            closure.inputs.iter_mut().for_each(|p| pat(walk, p));
            expr(walk, &mut closure.body);
        }
        Expr::ForLoop(e) => {
            pat(walk, &mut e.pat);
            expr(walk, &mut e.expr);
            block(walk, &mut e.body);
        }
        Expr::While(e) => {
            expr(walk, &mut e.cond);
            block(walk, &mut e.body);
        }
        Expr::If(e) => {
            expr(walk, &mut e.cond);
            block(walk, &mut e.then_branch);
            if let Some((_, otherwise)) = &mut e.else_branch {
                expr(walk, otherwise);
            }
        }
        Expr::Let(e) => {
            pat(walk, &mut e.pat);
            expr(walk, &mut e.expr);
        }
        Expr::Match(e) => {
            expr(walk, &mut e.expr);
            for arm in &mut e.arms {
                pat(walk, &mut arm.pat);
                expr(walk, &mut arm.body);
            }
        }
        Expr::Index(e) => {
            expr(walk, &mut e.expr);
            expr(walk, &mut e.index);
        }
        Expr::Range(range) => {
            optional(walk, &mut range.start);
            optional(walk, &mut range.end);
        }
        Expr::Repeat(e) => {
            expr(walk, &mut e.expr);
            expr(walk, &mut e.len);
        }
        Expr::Struct(e) => {
            for field in &mut e.fields {
                expr(walk, &mut field.expr);
            }
            optional(walk, &mut e.rest);
        }
        Expr::Macro(e) => walk.mac(&mut e.mac),
        // Paths, literals, `_`, `continue`, verbatim tokens, and variants syn may add.
        _ => {}
    }
    walk.leave(e);
}

fn optional(walk: &mut dyn Walk, e: &mut Option<Box<Expr>>) {
    if let Some(e) = e {
        expr(walk, e);
    }
}

/// The expressions in a pattern: its guards (`Some(x) if x.ready().await`).
fn pat(walk: &mut dyn Walk, p: &mut Pat) {
    match p {
        Pat::Guard(guarded) => {
            pat(walk, &mut guarded.pat);
            expr(walk, &mut guarded.guard);
        }
        Pat::Or(or) => or.cases.iter_mut().for_each(|p| pat(walk, p)),
        Pat::Slice(slice) => slice.elems.iter_mut().for_each(|p| pat(walk, p)),
        Pat::Tuple(tuple) => tuple.elems.iter_mut().for_each(|p| pat(walk, p)),
        Pat::TupleStruct(tuple) => tuple.elems.iter_mut().for_each(|p| pat(walk, p)),
        Pat::Struct(s) => {
            for field in &mut s.fields {
                pat(walk, &mut field.pat);
            }
        }
        Pat::Paren(paren) => pat(walk, &mut paren.pat),
        Pat::Reference(reference) => pat(walk, &mut reference.pat),
        Pat::Type(typed) => pat(walk, &mut typed.pat),
        Pat::Ident(ident) => {
            if let Some((_, sub)) = &mut ident.subpat {
                pat(walk, sub);
            }
        }
        _ => {}
    }
}
