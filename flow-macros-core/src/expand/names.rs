//! What the code of a workflow is written with ([`Names`]), and the reads of an expression
//! rewritten into places: a node or a parameter `name` becomes `(*name)` over a binding
//! `name: &T` (see `check::names`).

use std::collections::HashSet;

use proc_macro2::{Span, TokenStream};
use quote::format_ident;
use syn::{Expr, Ident};

use crate::check::Checked;
use crate::check::names::replace_uses;
use crate::parse::Workflow;

/// A checked workflow (or nest body) on its way to code, with the runtime index of each node.
pub struct Names<'a> {
    /// The workflow (or the nest body, as a workflow of its own).
    pub workflow: &'a Workflow,
    /// The path of the runtime's hidden module: `::flowdag::__private`, or the one
    /// `#[flow(crate = path)]` names.
    pub private: TokenStream,
    /// Its checked graph.
    pub checked: &'a Checked,
    /// Position of each node id in execution order: the node's runtime index.
    pub pos: Vec<usize>,
}

impl<'a> Names<'a> {
    /// The names of `workflow`, checked as `checked`, whose code reaches the runtime through
    /// `private`.
    pub fn new(workflow: &'a Workflow, private: TokenStream, checked: &'a Checked) -> Names<'a> {
        let mut pos = vec![0; checked.order.len()];
        for (p, &id) in checked.order.iter().enumerate() {
            pos[id] = p;
        }
        Names {
            workflow,
            private,
            checked,
            pos,
        }
    }
}

impl Names<'_> {
    /// The variable of node `id`'s output slot.
    pub fn slot(&self, id: usize) -> Ident {
        format_ident!("__flow_slot_{}", self.pos[id], span = Span::mixed_site())
    }

    fn params(&self) -> HashSet<String> {
        self.workflow
            .params
            .iter()
            .map(|p| p.name.to_string())
            .collect()
    }

    /// Rewrites an expression so that every parameter and every node it reads is a place
    /// `(*name)` over a binding `name: &T`.
    pub fn rewrite<'a>(&self, expr: &Expr, reads: impl IntoIterator<Item = &'a Ident>) -> Expr {
        let mut readable = self.params();
        readable.extend(reads.into_iter().map(Ident::to_string));
        let mut expr = expr.clone();
        rewrite(&mut expr, &readable);
        expr
    }
}

/// Rewrites every free use of a name in `names` into `(*name)`, spanned on the user's token.
pub fn rewrite(expr: &mut Expr, names: &HashSet<String>) {
    replace_uses(expr, names, &deref);
}

/// `(*name)`, spanned on the name.
fn deref(ident: &Ident) -> Expr {
    let span = ident.span();
    let path = Expr::Path(syn::ExprPath {
        attrs: Vec::new(),
        qself: None,
        path: ident.clone().into(),
    });
    Expr::Paren(syn::ExprParen {
        attrs: Vec::new(),
        paren_token: syn::token::Paren(span),
        expr: Box::new(Expr::Unary(syn::ExprUnary {
            attrs: Vec::new(),
            op: syn::UnOp::Deref(syn::Token![*](span)),
            expr: Box::new(path),
        })),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use quote::ToTokens;
    use syn::Expr;

    fn rewritten(source: &str) -> String {
        let names: HashSet<String> = ["user", "order", "items"].map(String::from).into();
        let mut expr: Expr = match syn::parse_str(source) {
            Ok(expr) => expr,
            Err(error) => panic!("{source}: {error}"),
        };
        super::rewrite(&mut expr, &names);
        expr.to_token_stream().to_string()
    }

    #[test]
    fn only_free_uses_are_rewritten() {
        let out = rewritten("match x { Some(user) => user.id, None => order.id }");
        assert!(
            out.contains("(* order)") && !out.contains("(* user)"),
            "{out}"
        );
        assert_eq!(rewritten("Point { user }"), "Point { user : (* user) }");
    }
}
