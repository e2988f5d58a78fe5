//! The checks of nests in their parent's graph: the graph does not read a body's names (the
//! body's names are its own), and `Complete` names a `ForEach` that may still run.

use std::collections::{HashMap, HashSet};

use syn::{Expr, Ident};

use super::names;
use super::order::Ancestors;
use crate::ctxt::Ctxt;
use crate::graph::{Dag, Kind};
use crate::parse::What;
use crate::suggest::{at_line, did_you_mean};

/// Every name of a body, at any depth, with the nest node of `dag` that holds it.
pub fn inner_names(dag: &Dag) -> HashMap<String, usize> {
    fn collect(dag: &Dag, holder: Option<usize>, out: &mut HashMap<String, usize>) {
        for def in &dag.nests {
            let holder = holder.unwrap_or(def.node);
            if let Some(body) = &def.body {
                for node in &body.nodes {
                    if let Some(name) = &node.name {
                        out.entry(name.to_string()).or_insert(holder);
                    }
                }
                collect(body, Some(holder), out);
            }
        }
    }
    let mut out = HashMap::new();
    collect(dag, None, &mut out);
    out
}

/// A step of this graph (or its output) that reads a name of a nest's body: the body's names
/// are its own; the graph reads the nest's output.
pub fn check_outside_reads(
    dag: &Dag,
    readable: &HashSet<String>,
    inner: &HashMap<String, usize>,
    output: Option<&Expr>,
    cx: &mut Ctxt,
) {
    if inner.is_empty() {
        return;
    }
    let mut exprs: Vec<&Expr> = Vec::new();
    for node in &dag.nodes {
        if !matches!(node.kind, Kind::ForEach | Kind::Loop) {
            exprs.push(&node.expr);
        }
    }
    for def in &dag.nests {
        if let What::ForEach(each) = &def.step.what {
            exprs.push(&each.source);
        }
    }
    exprs.extend(output);
    for expr in exprs {
        for ident in names::others(expr, readable) {
            let Some(&holder) = inner.get(&ident.to_string()) else {
                continue;
            };
            let nest = &dag.nodes[holder];
            let kind = match nest.kind {
                Kind::Loop => "Loop",
                _ => "ForEach",
            };
            let at = at_line(nest.keyword.span());
            let message = match &nest.name {
                Some(name) => format!(
                    "`{ident}` is inside the {kind} `{name}`{at}, and a body's names are its own; read the {kind}'s output `{name}`"
                ),
                None => format!(
                    "`{ident}` is inside a `{kind}`{at}, and a body's names are its own; name the {kind}, as in `results = {kind}(..)`, and read its output"
                ),
            };
            cx.error(ident.span(), message);
        }
    }
}

/// Each `Complete(name)` must name a `ForEach` of this graph that may still be running when
/// it starts.
pub fn check_completes(
    dag: &Dag,
    names: &HashMap<String, usize>,
    ancestors: &Ancestors,
    cx: &mut Ctxt,
) {
    for (complete, target) in &dag.completes {
        match names.get(&target.to_string()) {
            None => {
                let candidates: Vec<String> = dag
                    .nests
                    .iter()
                    .filter(|d| matches!(d.step.what, What::ForEach(_)))
                    .filter_map(|d| d.step.name.as_ref().map(Ident::to_string))
                    .collect();
                let hint = match did_you_mean(
                    &target.to_string(),
                    candidates.iter().map(String::as_str),
                ) {
                    hint if hint.is_empty() => format!(
                        "; name the `ForEach` to complete, as in `{target} = ForEach(..)`"
                    ),
                    hint => hint,
                };
                cx.error(
                    target.span(),
                    format!("`Complete` names `{target}`, which is no `ForEach` of this workflow{hint}"),
                );
            }
            Some(&node) if dag.nodes[node].kind != Kind::ForEach => {
                let what = match dag.nodes[node].kind {
                    Kind::Loop => "a `Loop`",
                    Kind::Workflow => "a sub-workflow step",
                    _ => "no `ForEach`",
                };
                cx.error(
                    target.span(),
                    format!(
                        "`Complete` completes a `ForEach` early, and `{target}`{} is {what}; to stop a step, write `Cancel({target})`",
                        at_line(dag.nodes[node].span())
                    ),
                );
            }
            Some(&node) if ancestors.is(node, *complete) => cx.error(
                target.span(),
                format!(
                    "the `ForEach` `{target}`{} has always ended before this `Complete` runs, so there is nothing left to complete; put the `Complete` beside the `ForEach`, in a `Parallel`",
                    at_line(dag.nodes[node].span())
                ),
            ),
            Some(_) => {}
        }
    }
}
