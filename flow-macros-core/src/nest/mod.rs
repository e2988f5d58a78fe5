//! Nested static graphs: `ForEach`, `Loop` and sub-workflow steps, and `Complete`.
//!
//! ```text
//! charged = ForEach(line in order.lines.iter(), max_concurrency = 64) {
//!     r = Operation(charge(ctx, line)) => r.clone()
//! },
//! export = Loop(max = 20, prev = last) { st = Operation(poll(last)) => st.clone() } until (st.ready),
//! more = Loop(max = 100, prev = last) while (last.is_none_or(|p| p.more)) { .. => .. },
//! receipt = Workflow(Payment(ctx, &order)),
//! Complete(charged),
//! ```
//!
//! A body is a workflow of its own: [`graph::build`] makes its DAG when the parent's is built,
//! and [`validate::check`] checks it with the item, `prev`, the parent's parameters and the
//! parent's nodes as its parameters. In the parent graph a nest is one node, which reads what
//! its source expression and its body read of the parent: the parent's checks see one
//! expression ([`reads`]) in which the body's names and the item are closure parameters, so
//! every name of the body stays inside it.

//!
//! The stages are files, as for a workflow: [`parse`] (the syntax), [`check`] (the bodies and
//! the rules of nests) and [`expand`] (the code and the tables).

mod check;
mod expand;
mod parse;

pub use check::{check_bodies, check_completes, check_outside_reads, inner_names};
pub(crate) use expand::{complete_target, node_statements, table};
pub use parse::{complete, nest};

use syn::{Expr, Ident};

use crate::graph::{Dag, Kind};
use crate::parse::Workflow;
use crate::validate::Checked;

/// `[name =] ForEach(..) { .. }`, `[name =] Loop(..) ..` or `[name =] Workflow(Child(..))`.
pub struct NestStep {
    pub name: Option<Ident>,
    pub keyword: Ident,
    pub what: What,
    /// The body as a workflow of its own (no body for a sub-workflow step): its steps and its
    /// output; the rest of it is filled when it is checked.
    pub body: Option<Workflow>,
}

/// What kind of nest, with what only that kind has.
pub enum What {
    ForEach(ForEach),
    Loop(Loop),
    Workflow(SubWorkflow),
}

pub struct ForEach {
    pub item: Ident,
    /// `item in stream expr`.
    pub stream: bool,
    pub source: Expr,
    pub max_concurrency: Option<u32>,
    pub min: Option<u32>,
    pub rest_cancel: bool,
    pub collect: bool,
    /// `after = [..]`.
    pub after: Vec<Ident>,
}

pub struct Loop {
    pub max: u32,
    pub prev: Option<Ident>,
    pub stop_at_max: bool,
    pub test: Expr,
    /// `while (test) { .. }`, or `{ .. } until (test)`.
    pub while_: bool,
    /// `until` or `while`, as written.
    pub test_keyword: Ident,
    /// `after = [..]`.
    pub after: Vec<Ident>,
}

pub struct SubWorkflow {
    /// The child workflow's type, as written: `Payment`, `billing::Payment`.
    pub child: syn::Path,
    /// The arguments of its `run`.
    pub args: Vec<Expr>,
    /// `Payment(ctx, &order)`, for the node's label.
    pub call: Expr,
    pub after: Vec<Ident>,
}

/// `Complete(name)`: completes the `ForEach` `name` with the outputs of the instances that
/// completed, and withdraws the others.
pub struct CompleteStep {
    pub keyword: Ident,
    pub target: Ident,
}

impl NestStep {
    /// The steps named in `after = [..]`.
    pub fn after(&self) -> &[Ident] {
        match &self.what {
            What::ForEach(each) => &each.after,
            What::Loop(repeat) => &repeat.after,
            What::Workflow(sub) => &sub.after,
        }
    }

    /// The kind of the nest's node.
    pub fn kind(&self) -> Kind {
        match self.what {
            What::ForEach(_) => Kind::ForEach,
            What::Loop(_) => Kind::Loop,
            What::Workflow(_) => Kind::Workflow,
        }
    }
}

/// A nest node of a graph, with its step and its body's DAG (taken when the body is checked).
pub struct NestDef {
    pub node: usize,
    pub step: std::rc::Rc<NestStep>,
    pub body: Option<Dag>,
}

/// A checked nest: its body as a checked workflow (none for a sub-workflow step).
pub struct CheckedNest {
    pub node: usize,
    pub step: std::rc::Rc<NestStep>,
    pub body: Option<(Workflow, Checked)>,
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

fn tuple(elems: Vec<Expr>) -> Expr {
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
pub fn reads(step: &NestStep, body: Option<&Dag>) -> Expr {
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

/// The label of a nest node in the graph: `line in order.lines()`, `max = 20, until st.ready`,
/// `Payment(ctx, &order)`.
pub fn label(step: &NestStep) -> String {
    let text = crate::graph::source_text;
    match &step.what {
        What::ForEach(each) => format!(
            "{} in {}{}",
            each.item,
            if each.stream { "stream " } else { "" },
            text(&each.source)
        ),
        What::Loop(repeat) => format!(
            "max = {}, {} {}",
            repeat.max,
            repeat.test_keyword,
            text(&repeat.test)
        ),
        What::Workflow(sub) => text(&sub.call),
    }
}

fn what_name(step: &NestStep) -> &'static str {
    match step.what {
        What::ForEach(_) => "ForEach",
        What::Loop(_) => "Loop",
        What::Workflow(_) => "Workflow",
    }
}
