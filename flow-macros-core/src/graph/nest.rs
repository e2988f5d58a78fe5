//! Nest nodes: a `ForEach`'s or a `Loop`'s body is built as a workflow of its own when the
//! parent's graph is built, and the nest is one node of the parent. That node reads what its
//! source and its body read of the parent: the parent's checks see one expression ([`reads`])
//! in which the body's names and the item are closure parameters, so every name of the body
//! stays inside it.

use std::rc::Rc;

use syn::{Expr, Ident};

use super::build::{Builder, build};
use super::{Dag, Kind, NestDef, Node};
use crate::parse::{NestStep, What};

impl Builder<'_> {
    /// A nest node: its body's DAG is built here, as a workflow of its own, and the node
    /// reads what its source and its body read of this graph ([`reads`]).
    pub(super) fn nest(&mut self, step: &Rc<NestStep>) -> usize {
        // An empty body is reported where it is parsed.
        let body = step
            .body
            .as_ref()
            .filter(|body| !body.body.is_empty())
            .map(|body| build(body, self.cx));
        if let Some(body) = &body {
            for id in body.nodes.iter().filter_map(|node| node.patch.as_ref()) {
                self.cx.error(
                    id.span(),
                    "a version marker (`Patched`) goes in the workflow's own steps, not in a `ForEach`, `Loop` or `Workflow` body: put it around the nest step",
                );
            }
        }
        let expr = reads(step, body.as_ref());
        let kind = match step.what {
            What::ForEach(_) => Kind::ForEach,
            What::Loop(_) => Kind::Loop,
            What::Workflow(_) => Kind::Workflow,
        };
        let node = self.push(Node {
            name: step.name.clone(),
            after: step.after().to_vec(),
            ..self.node(kind, &step.keyword, expr)
        });
        self.dag.nests.push(NestDef {
            node,
            step: step.clone(),
            body,
        });
        node
    }
}

/// `|a, b| (x, y)`, built as syntax rather than parsed: `x` and `y` need not be expressions
/// that parse (a `Cancel`'s target is none), and nothing the user wrote is parsed again.
fn closure(params: Vec<&Ident>, body: Vec<Expr>) -> Expr {
    let inputs = params.into_iter().map(|ident| {
        syn::Pat::Ident(syn::PatIdent {
            attrs: Vec::new(),
            by_ref: None,
            mutability: None,
            ident: ident.clone(),
            subpat: None,
        })
    });
    Expr::Closure(syn::ExprClosure {
        attrs: Vec::new(),
        lifetimes: None,
        modifiers: syn::ClosureModifiers::default(),
        constness: None,
        asyncness: None,
        capture: None,
        inputs_begin: Default::default(),
        inputs: inputs.collect(),
        inputs_end: Default::default(),
        output: syn::ReturnType::Default,
        body: Box::new(tuple(body)),
    })
}

/// `(a, b, ..)`, built as syntax.
pub fn tuple(elems: Vec<Expr>) -> Expr {
    Expr::Tuple(syn::ExprTuple {
        attrs: Vec::new(),
        paren_token: Default::default(),
        elems: elems.into_iter().collect(),
    })
}

/// What a nest node reads of its graph, as one expression for the parent's checks: the
/// source, then a closure whose parameters are the item (or `prev`) and the body's names, and
/// whose body holds every expression of the body. Names of the body are therefore bound in
/// it, and everything else it reads is the parent's.
fn reads(step: &NestStep, body: Option<&Dag>) -> Expr {
    let mut names: Vec<&Ident> = Vec::new();
    let mut exprs: Vec<Expr> = Vec::new();
    if let Some(body) = body {
        for node in &body.nodes {
            names.extend(node.name.as_ref());
            exprs.push(node.expr.clone());
        }
    }
    let output = step.body.as_ref().and_then(|b| b.output.clone());
    exprs.extend(output);
    match &step.what {
        What::ForEach(each) => {
            let mut params = vec![&each.item];
            params.extend(names);
            tuple(vec![each.source.clone(), closure(params, exprs)])
        }
        What::Loop(repeat) => {
            let mut params: Vec<&Ident> = repeat.prev.iter().collect();
            if repeat.while_ {
                let test = closure(params.clone(), vec![repeat.test.clone()]);
                params.extend(names);
                tuple(vec![test, closure(params, exprs)])
            } else {
                exprs.push(repeat.test.clone());
                params.extend(names);
                closure(params, exprs)
            }
        }
        What::Workflow(sub) => sub.call.clone(),
    }
}
