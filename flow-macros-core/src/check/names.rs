//! The names a user expression reads, found with Rust's scoping.
//!
//! Inside a step, a node's name reads like a borrowed local of the node's output type, and a
//! parameter like a borrowed local of its type: the generated code binds `name: &T` and rewrites
//! every free use of `name` into `(*name)`, a place of type `T` that can be borrowed, read or
//! cloned but not moved. Names inside macro calls are found (for edges) but left as they are:
//! there they are `&T`, which formats the same.
//!
//! A name that a pattern binds hides the node of that name where the binding is in scope, as
//! in Rust: a `let` for the rest of its block (not in its own initializer or `else`), closure
//! parameters in the closure's body, a `match` arm's pattern in its guard and body, `if let` and
//! `while let` (and each `let` of a chain) in the rest of the chain and the body, not in the
//! `else`, and a `for` pattern in the loop's body. Nested `fn` items see no local at all.
//! One walk finds the reads and, for `expand`, replaces them ([`replace_uses`]): [`uses`] runs
//! it on a copy and keeps what it found.

use std::collections::HashSet;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;
use syn::visit_mut::VisitMut;
use syn::{BinOp, Expr, Ident, Pat};

/// The free uses, in order of first appearance, of any name in `names`.
pub fn uses(expr: &Expr, names: &HashSet<String>) -> Vec<Ident> {
    let (found, _) = walk(expr, names);
    let mut seen = HashSet::new();
    found
        .into_iter()
        .filter(|ident| seen.insert(ident.to_string()))
        .collect()
}

/// The free lowercase names `expr` reads as values that are not in `names` nor bound inside
/// it: items in scope (functions passed as values, statics), or misspelled nodes.
pub fn others(expr: &Expr, names: &HashSet<String>) -> Vec<Ident> {
    walk(expr, names).1
}

/// Whether `name` is any identifier token of `expr`, in any position.
pub fn mentions(expr: &Expr, name: &str) -> bool {
    fn any(tokens: TokenStream, name: &str) -> bool {
        tokens.into_iter().any(|tree| match tree {
            TokenTree::Ident(ident) => ident == name,
            TokenTree::Group(group) => any(group.stream(), name),
            _ => false,
        })
    }
    any(quote::ToTokens::to_token_stream(expr), name)
}

fn walk(expr: &Expr, names: &HashSet<String>) -> (Vec<Ident>, Vec<Ident>) {
    let mut walker = Walker {
        names,
        shadowed: Vec::new(),
        found: Vec::new(),
        others: Vec::new(),
        replace: None,
    };
    walker.visit_expr_mut(&mut expr.clone());
    (walker.found, walker.others)
}

/// Replaces every free use of a name in `names` with `with(name)`; `expand` writes `(*name)`.
pub fn replace_uses(expr: &mut Expr, names: &HashSet<String>, with: &dyn Fn(&Ident) -> Expr) {
    let mut walker = Walker {
        names,
        shadowed: Vec::new(),
        found: Vec::new(),
        others: Vec::new(),
        replace: Some(with),
    };
    walker.visit_expr_mut(expr);
}

fn single_ident(expr: &Expr) -> Option<&Ident> {
    match expr {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => path.path.get_ident(),
        _ => None,
    }
}

/// Every name `pat` binds.
fn pattern_names(pat: &Pat, out: &mut Vec<String>) {
    struct Collect<'a>(&'a mut Vec<String>);
    impl<'ast> Visit<'ast> for Collect<'_> {
        fn visit_pat_ident(&mut self, pat: &'ast syn::PatIdent) {
            self.0.push(pat.ident.to_string());
            syn::visit::visit_pat_ident(self, pat);
        }
        // A guard's expression binds nothing, and a nested item is another scope.
        fn visit_expr(&mut self, _: &'ast Expr) {}
    }
    Collect(out).visit_pat(pat);
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

/// Walks an expression with the names in scope: finds the free uses of `names`, and with
/// `replace` replaces each.
struct Walker<'a> {
    names: &'a HashSet<String>,
    /// The names bound by the patterns in scope, innermost last.
    shadowed: Vec<String>,
    found: Vec<Ident>,
    /// Free lowercase names outside `names`.
    others: Vec<Ident>,
    replace: Option<&'a dyn Fn(&Ident) -> Expr>,
}

impl Walker<'_> {
    fn free(&self, ident: &Ident) -> bool {
        let name = ident.to_string();
        self.names.contains(&name) && !self.shadowed.contains(&name)
    }

    fn bind(&mut self, pat: &Pat) {
        pattern_names(pat, &mut self.shadowed);
    }

    /// The guards of a pattern (`Some(x) if x > 0`), with the pattern's names in scope.
    fn visit_guards(&mut self, pat: &mut Pat) {
        match pat {
            Pat::Guard(guarded) => {
                self.visit_guards(&mut guarded.pat);
                self.visit_expr_mut(&mut guarded.guard);
            }
            Pat::Or(or) => {
                for case in &mut or.cases {
                    self.visit_guards(case);
                }
            }
            Pat::Paren(paren) => self.visit_guards(&mut paren.pat),
            _ => {}
        }
    }

    /// The condition of an `if` or `while`: a `let` binds its names for the rest of a `&&`
    /// chain and, left in scope for the caller to drop, for the body.
    fn visit_condition(&mut self, cond: &mut Expr) {
        match cond {
            Expr::Let(expr_let) => {
                self.visit_expr_mut(&mut expr_let.expr);
                self.bind(&expr_let.pat);
                self.visit_guards(&mut expr_let.pat);
            }
            Expr::Binary(binary) if matches!(binary.op, BinOp::And(_)) => {
                self.visit_condition(&mut binary.left);
                self.visit_condition(&mut binary.right);
            }
            other => self.visit_expr_mut(other),
        }
    }
}

impl VisitMut for Walker<'_> {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        if let Some(ident) = single_ident(expr) {
            if self.free(ident) {
                let ident = ident.clone();
                if let Some(replace) = self.replace {
                    *expr = replace(&ident);
                }
                self.found.push(ident);
            } else {
                let name = ident.to_string();
                if name.starts_with(|c: char| c.is_lowercase()) && !self.shadowed.contains(&name) {
                    self.others.push(ident.clone());
                }
            }
            return;
        }
        syn::visit_mut::visit_expr_mut(self, expr);
    }

    fn visit_expr_call_mut(&mut self, call: &mut syn::ExprCall) {
        // `reject(..)` calls a function: a node called `reject` is not read here.
        if single_ident(&call.func).is_none() {
            self.visit_expr_mut(&mut call.func);
        }
        for arg in &mut call.args {
            self.visit_expr_mut(arg);
        }
    }

    fn visit_expr_closure_mut(&mut self, closure: &mut syn::ExprClosure) {
        let depth = self.shadowed.len();
        for input in &closure.inputs {
            self.bind(input);
        }
        self.visit_expr_mut(&mut closure.body);
        self.shadowed.truncate(depth);
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
                    self.bind(&local.pat);
                }
                other => self.visit_stmt_mut(other),
            }
        }
        self.shadowed.truncate(depth);
    }

    fn visit_expr_match_mut(&mut self, expr: &mut syn::ExprMatch) {
        self.visit_expr_mut(&mut expr.expr);
        for arm in &mut expr.arms {
            let depth = self.shadowed.len();
            self.bind(&arm.pat);
            self.visit_guards(&mut arm.pat);
            self.visit_expr_mut(&mut arm.body);
            self.shadowed.truncate(depth);
        }
    }

    fn visit_expr_if_mut(&mut self, expr: &mut syn::ExprIf) {
        let depth = self.shadowed.len();
        self.visit_condition(&mut expr.cond);
        self.visit_block_mut(&mut expr.then_branch);
        self.shadowed.truncate(depth);
        if let Some((_, otherwise)) = &mut expr.else_branch {
            self.visit_expr_mut(otherwise);
        }
    }

    fn visit_expr_while_mut(&mut self, expr: &mut syn::ExprWhile) {
        let depth = self.shadowed.len();
        self.visit_condition(&mut expr.cond);
        self.visit_block_mut(&mut expr.body);
        self.shadowed.truncate(depth);
    }

    fn visit_expr_let_mut(&mut self, expr: &mut syn::ExprLet) {
        // A `let` outside an `if` or `while` condition binds nowhere.
        self.visit_expr_mut(&mut expr.expr);
    }

    fn visit_expr_for_loop_mut(&mut self, expr: &mut syn::ExprForLoop) {
        self.visit_expr_mut(&mut expr.expr);
        let depth = self.shadowed.len();
        self.bind(&expr.pat);
        self.visit_block_mut(&mut expr.body);
        self.shadowed.truncate(depth);
    }

    // Patterns hold no reads of a node (their names are bindings, their paths are constants);
    // the guards are visited where the pattern's names are in scope.
    fn visit_pat_mut(&mut self, _: &mut Pat) {}

    // A nested item sees no local of the step, so no node either.
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        let mut found = Vec::new();
        tokens_uses(mac.tokens.clone(), self.names, &mut found);
        let free: Vec<Ident> = found.into_iter().filter(|i| self.free(i)).collect();
        self.found.extend(free);
    }

    fn visit_field_value_mut(&mut self, field: &mut syn::FieldValue) {
        // `Point { x }` must become `Point { x: (*x) }`.
        if self.replace.is_some() && field.colon_token.is_none() {
            field.colon_token = Some(Default::default());
        }
        syn::visit_mut::visit_field_value_mut(self, field);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use syn::Expr;

    const NONE: [&str; 0] = [];

    fn names() -> HashSet<String> {
        ["user", "order", "items"].map(String::from).into()
    }

    fn parse(source: &str) -> Expr {
        match syn::parse_str(source) {
            Ok(expr) => expr,
            Err(error) => panic!("{source}: {error}"),
        }
    }

    /// The node names `source` reads, in order.
    fn reads(source: &str) -> Vec<String> {
        super::uses(&parse(source), &names())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn other_names() {
        let others = |source: &str| -> Vec<String> {
            super::others(&parse(source), &names())
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            others("f(&usr, user, NONE, helper, |x| x + ordr)"),
            ["usr", "helper", "ordr"]
        );
        assert_eq!(others("{ let usr = 1; usr }"), NONE);
        assert!(super::mentions(&parse("user(1)"), "user"));
        assert!(!super::mentions(&parse("users(1)"), "user"));
    }

    #[test]
    fn plain_reads() {
        assert_eq!(reads("f(&user, order.id)"), ["user", "order"]);
        assert_eq!(
            reads("user(order)"),
            ["order"],
            "a call of a function named like a node"
        );
        assert_eq!(reads("Point { user }"), ["user"]);
        assert_eq!(reads("format!(\"{}\", user)"), ["user"]);
    }

    #[test]
    fn match_arms() {
        assert_eq!(reads("match x { Some(user) => user.id, None => 0 }"), NONE);
        assert_eq!(
            reads("match x { Some(user) => 1, None => user.id }"),
            ["user"]
        );
        assert_eq!(
            reads("match user { Some(user) => user.id, None => 0 }"),
            ["user"]
        );
        assert_eq!(
            reads("match x { Some(user) if user.ok => 1, _ => 0 }"),
            NONE
        );
        assert_eq!(
            reads("match x { Some(y) if user.ok(y) => 1, _ => 0 }"),
            ["user"]
        );
        assert_eq!(reads("match x { (user, _) | (_, user) => user, }"), NONE);
        assert_eq!(reads("match x { P { user, .. } => user }"), NONE);
        assert_eq!(reads("match x { all @ Some(user) => (all, user) }"), NONE);
    }

    #[test]
    fn if_let_and_while_let() {
        assert_eq!(reads("if let Some(user) = x { user.id } else { 0 }"), NONE);
        assert_eq!(
            reads("if let Some(user) = order.get() { user.id } else { user.id }"),
            ["order", "user"],
            "the `else` does not see the binding"
        );
        assert_eq!(reads("if let Some(user) = user { user }"), ["user"]);
        assert_eq!(reads("while let Some(user) = it.next() { g(user) }"), NONE);
        assert_eq!(
            reads("{ while let Some(x) = it.next() { g(x) } user }"),
            ["user"]
        );
    }

    #[test]
    fn let_chains() {
        assert_eq!(
            reads("if let Some(user) = a && let Some(order) = user.find() { (user, order) }"),
            NONE
        );
        assert_eq!(
            reads("if let Some(x) = user && let Some(order) = x.o && order.ok { order }"),
            ["user"]
        );
        assert_eq!(reads("if user.ok && let Some(user) = y { user }"), ["user"]);
        assert_eq!(
            reads("while let Some(user) = a && user.ok { g(user) }"),
            NONE
        );
    }

    #[test]
    fn for_loops() {
        assert_eq!(reads("for user in list { g(user) }"), NONE);
        assert_eq!(reads("for (user, order) in list { g(user, order) }"), NONE);
        assert_eq!(reads("for x in items.iter() { g(x) }"), ["items"]);
        assert_eq!(reads("{ for user in list { g(user) } user }"), ["user"]);
    }

    #[test]
    fn closures_blocks_and_items() {
        assert_eq!(reads("|user| user.id"), NONE);
        assert_eq!(reads("|(user, o): (u8, u8)| user + o"), NONE);
        assert_eq!(reads("items.iter().map(|user| user.id)"), ["items"]);
        assert_eq!(reads("{ let user = 1; user }"), NONE);
        assert_eq!(reads("{ let user = user.clone(); user }"), ["user"]);
        assert_eq!(reads("{ { let user = 1; } user }"), ["user"]);
        assert_eq!(
            reads("{ let Some(user) = order else { return user.x }; user }"),
            ["order", "user"],
            "`let .. else` binds after its initializer and its `else`"
        );
        assert_eq!(reads("{ fn h() -> u32 { user } h() }"), NONE);
        assert_eq!(reads("{ let user = 1; format!(\"{}\", user) }"), NONE);
        assert_eq!(
            reads("async move { let order = 1; (order, user) }"),
            ["user"]
        );
    }
}
