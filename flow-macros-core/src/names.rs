//! Finding and rewriting the names a user expression reads.
//!
//! Inside a step, a node's name reads like a borrowed local of the node's output type, and a
//! parameter like a borrowed local of its type: the generated code binds `name: &T` and rewrites
//! every free use of `name` into `(*name)`, a place of type `T` that can be borrowed, read or
//! cloned but not moved. Names inside macro calls are found (for edges) but left as they are:
//! there they are `&T`, which formats the same.

use std::collections::HashSet;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;
use syn::visit_mut::VisitMut;
use syn::{Expr, Ident, Pat};

/// The free uses, in order of first appearance, of any name in `names`.
pub fn uses(expr: &Expr, names: &HashSet<String>) -> Vec<Ident> {
    let mut finder = Finder {
        names,
        shadowed: Vec::new(),
        found: Vec::new(),
    };
    finder.visit_expr(expr);
    let mut seen = HashSet::new();
    finder
        .found
        .into_iter()
        .filter(|ident| seen.insert(ident.to_string()))
        .collect()
}

/// Rewrites every free use of a name in `names` into `(*name)`, spanned on the user's token.
pub fn rewrite(expr: &mut Expr, names: &HashSet<String>) {
    let mut rewriter = Rewriter {
        names,
        shadowed: Vec::new(),
    };
    rewriter.visit_expr_mut(expr);
}

fn single_ident(expr: &Expr) -> Option<&Ident> {
    match expr {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => path.path.get_ident(),
        _ => None,
    }
}

fn pattern_names(pat: &Pat, out: &mut Vec<String>) {
    struct Collect<'a>(&'a mut Vec<String>);
    impl<'ast> Visit<'ast> for Collect<'_> {
        fn visit_pat_ident(&mut self, pat: &'ast syn::PatIdent) {
            self.0.push(pat.ident.to_string());
            syn::visit::visit_pat_ident(self, pat);
        }
    }
    Collect(out).visit_pat(pat);
}

fn closure_params(closure: &syn::ExprClosure) -> Vec<String> {
    let mut names = Vec::new();
    for input in &closure.inputs {
        pattern_names(input, &mut names);
    }
    names
}

fn tokens_uses(tokens: TokenStream, names: &HashSet<String>, found: &mut Vec<Ident>) {
    for tree in tokens {
        match tree {
            TokenTree::Ident(ident) if names.contains(&ident.to_string()) => found.push(ident),
            TokenTree::Group(group) => tokens_uses(group.stream(), names, found),
            _ => {}
        }
    }
}

struct Finder<'a> {
    names: &'a HashSet<String>,
    shadowed: Vec<String>,
    found: Vec<Ident>,
}

impl Finder<'_> {
    fn free(&self, ident: &Ident) -> bool {
        let name = ident.to_string();
        self.names.contains(&name) && !self.shadowed.contains(&name)
    }
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_expr(&mut self, expr: &'ast Expr) {
        if let Some(ident) = single_ident(expr) {
            if self.free(ident) {
                self.found.push(ident.clone());
            }
            return;
        }
        syn::visit::visit_expr(self, expr);
    }

    fn visit_expr_closure(&mut self, closure: &'ast syn::ExprClosure) {
        let params = closure_params(closure);
        let depth = self.shadowed.len();
        self.shadowed.extend(params);
        self.visit_expr(&closure.body);
        self.shadowed.truncate(depth);
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        // `reject(..)` calls a function: a node called `reject` is not read here.
        if single_ident(&call.func).is_none() {
            self.visit_expr(&call.func);
        }
        for arg in &call.args {
            self.visit_expr(arg);
        }
    }

    fn visit_block(&mut self, block: &'ast syn::Block) {
        let depth = self.shadowed.len();
        for stmt in &block.stmts {
            match stmt {
                syn::Stmt::Local(local) => {
                    if let Some(init) = &local.init {
                        self.visit_expr(&init.expr);
                        if let Some((_, diverge)) = &init.diverge {
                            self.visit_expr(diverge);
                        }
                    }
                    pattern_names(&local.pat, &mut self.shadowed);
                }
                other => self.visit_stmt(other),
            }
        }
        self.shadowed.truncate(depth);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let mut found = Vec::new();
        tokens_uses(mac.tokens.clone(), self.names, &mut found);
        let free: Vec<Ident> = found.into_iter().filter(|i| self.free(i)).collect();
        self.found.extend(free);
    }
}

struct Rewriter<'a> {
    names: &'a HashSet<String>,
    shadowed: Vec<String>,
}

impl VisitMut for Rewriter<'_> {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        if let Some(ident) = single_ident(expr) {
            let name = ident.to_string();
            if self.names.contains(&name) && !self.shadowed.contains(&name) {
                let ident = ident.clone();
                let span = ident.span();
                *expr = syn::parse_quote_spanned!(span=> (*#ident));
            }
            return;
        }
        syn::visit_mut::visit_expr_mut(self, expr);
    }

    fn visit_expr_call_mut(&mut self, call: &mut syn::ExprCall) {
        if single_ident(&call.func).is_none() {
            self.visit_expr_mut(&mut call.func);
        }
        for arg in &mut call.args {
            self.visit_expr_mut(arg);
        }
    }

    fn visit_block_mut(&mut self, block: &mut syn::Block) {
        let depth = self.shadowed.len();
        for stmt in &mut block.stmts {
            match stmt {
                syn::Stmt::Local(local) => {
                    if let Some(init) = &mut local.init {
                        self.visit_expr_mut(&mut init.expr);
                        if let Some((_, diverge)) = &mut init.diverge {
                            self.visit_expr_mut(diverge);
                        }
                    }
                    pattern_names(&local.pat, &mut self.shadowed);
                }
                other => self.visit_stmt_mut(other),
            }
        }
        self.shadowed.truncate(depth);
    }

    fn visit_field_value_mut(&mut self, field: &mut syn::FieldValue) {
        // `Point { x }` must become `Point { x: (*x) }`.
        if field.colon_token.is_none() {
            field.colon_token = Some(Default::default());
        }
        syn::visit_mut::visit_field_value_mut(self, field);
    }

    fn visit_expr_closure_mut(&mut self, closure: &mut syn::ExprClosure) {
        let params = closure_params(closure);
        let depth = self.shadowed.len();
        self.shadowed.extend(params);
        self.visit_expr_mut(&mut closure.body);
        self.shadowed.truncate(depth);
    }
}
