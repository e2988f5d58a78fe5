//! The bodies of nests: each is checked as a workflow of its own, whose parameters are the item
//! (or `prev`), the parent's parameters and the parent's nodes; a loop's test reads what it
//! must.

use std::collections::{HashMap, HashSet};

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use super::{CheckedNest, check, names};
use crate::ctxt::Ctxt;
use crate::graph::{Dag, Kind, tuple};
use crate::parse::{Loop, Param, What, Workflow};
use crate::suggest::at_line;

/// Checks the body of every nest of `dag` as a workflow of its own, taking the bodies out of
/// `dag`. `names` are the graph's node names and `workflow` its workflow (a body's, for a
/// nest inside a body): a body reads them as parameters.
pub fn check_bodies(
    workflow: &Workflow,
    dag: &mut Dag,
    names: &HashMap<String, usize>,
    cx: &mut Ctxt,
) -> Vec<CheckedNest> {
    let mut out = Vec::new();
    let displays: Vec<String> = dag.nodes.iter().map(|n| n.display.clone()).collect();
    let spans: Vec<Span> = dag.nodes.iter().map(crate::graph::Node::span).collect();
    let idents: Vec<Option<Ident>> = dag.nodes.iter().map(|n| n.name.clone()).collect();
    for def in &mut dag.nests {
        let step = def.step.clone();
        let Some(body_dag) = def.body.take() else {
            out.push(CheckedNest {
                node: def.node,
                step,
                body: None,
            });
            continue;
        };
        let Some(body) = &step.body else { continue };
        let kind = step.kind_name();
        // The item or `prev`, then the graph's parameters and nodes.
        let binding: Option<(&Ident, &str)> = match &step.what {
            What::ForEach(each) => Some((&each.item, "the item of this `ForEach`")),
            What::Loop(repeat) => repeat
                .prev
                .as_ref()
                .map(|prev| (prev, "the previous iteration's output (`prev`)")),
            What::Workflow(_) => None,
        };
        let mut body_dag = body_dag;
        for node in &mut body_dag.nodes {
            if let Some(bad) = match node.kind {
                Kind::Signal => Some("a `Signal` step"),
                Kind::Terminate => Some("`Terminate`"),
                _ => None,
            } {
                cx.error(
                    node.keyword.span(),
                    format!("{bad} cannot be inside a `{kind}`: its body runs once per {}; put it before or after the `{kind}`", if kind == "Loop" { "iteration" } else { "item" }),
                );
            }
            let Some(name) = &node.name else { continue };
            let clash =
                if let Some((bound, what)) = binding
                    && bound == name
                {
                    Some(format!("`{name}` is already {what}"))
                } else if let Some(&outer) = names.get(&name.to_string()) {
                    Some(format!(
                        "`{name}` already names a step of the workflow{}",
                        at_line(spans[outer])
                    ))
                } else {
                    workflow.params.iter().find(|p| p.name == *name).map(|p| {
                        format!("`{name}` is already a parameter{}", at_line(p.name.span()))
                    })
                };
            if let Some(clash) = clash {
                cx.error(
                    name.span(),
                    format!("{clash}; a step inside the `{kind}` needs a name of its own"),
                );
                // Reported: the step is checked as if unnamed, so that reads of the name do
                // not add errors of their own.
                node.name = None;
            }
        }
        let body_names: HashSet<String> = body_dag
            .nodes
            .iter()
            .filter_map(|n| n.name.as_ref().map(Ident::to_string))
            .collect();
        let infer = syn::Type::Infer(syn::TypeInfer {
            attrs: Vec::new(),
            underscore_token: Default::default(),
        });
        let mut params: Vec<Param> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut outer: Vec<Ident> = binding.iter().map(|(b, _)| (*b).clone()).collect();
        outer.extend(workflow.params.iter().map(|p| p.name.clone()));
        let mut parent_nodes: Vec<(&String, &usize)> = names.iter().collect();
        parent_nodes.sort_by_key(|(_, id)| **id);
        outer.extend(
            parent_nodes
                .into_iter()
                .filter_map(|(_, &id)| idents[id].clone()),
        );
        for name in outer {
            let text = name.to_string();
            if !seen.insert(text) {
                continue;
            }
            params.push(Param {
                name,
                ty: infer.clone(),
            });
        }
        let mut output = body.output.clone();
        if let What::Loop(repeat) = &step.what {
            let test = &repeat.test;
            let reads = names::uses(test, &body_names);
            if repeat.while_ {
                check_while(repeat, &reads, kind, cx);
            } else {
                if reads.is_empty() {
                    cx.error(
                        test.span(),
                        "this `until` test reads no step of the loop's body, so every iteration would give it the same answer; test what an iteration computes, as in `until (st.ready)` with `st = Operation(..)` in the body",
                    );
                }
                let out = output.unwrap_or_else(|| tuple(Vec::new()));
                output = Some(tuple(vec![out, bool_test(test)]));
            }
        }
        let display = &displays[def.node];
        // An identifier: a display name is the node's name or its callee's (`r#type` becomes
        // `r_type`), or a word numbered with `#` (`foreach_2`).
        let graph_name = Ident::new(
            &display.replace('#', "_"),
            def.step
                .name
                .as_ref()
                .map_or(def.step.keyword.span(), Ident::span),
        );
        let stub = Workflow {
            attrs: Vec::new(),
            fail_fast: workflow.fail_fast,
            krate: workflow.krate.clone(),
            durable: None,
            continue_as_new: None,
            vis: syn::Visibility::Inherited,
            name: graph_name,
            generics: syn::Generics::default(),
            params,
            output_ty: Some(infer.clone()),
            body: Vec::new(),
            body_span: body.body_span,
            has_output: output.is_some(),
            output,
        };
        let checked = check(&stub, body_dag, cx);
        out.push(CheckedNest {
            node: def.node,
            step,
            body: checked.map(|checked| (stub, checked)),
        });
    }
    out
}

/// A `while` test runs before each iteration: it must read `prev`, and cannot read the body.
fn check_while(repeat: &Loop, body_reads: &[Ident], kind: &str, cx: &mut Ctxt) {
    for ident in body_reads {
        cx.error(
            ident.span(),
            format!(
                "`{ident}` is a step of the {kind}'s body, which has not run when the `while` test runs; test the previous iteration's output (`prev`), or write `{{ .. }} until (test)`"
            ),
        );
    }
    let prev = match &repeat.prev {
        Some(prev) => prev,
        None => {
            cx.error(
                repeat.test_keyword.span(),
                "a `while` test decides from the previous iteration's output: name it with `prev`, as in `Loop(max = 10, prev = last) while (last.is_none_or(|p| p.more)) { .. }`",
            );
            return;
        }
    };
    let mut only_prev = HashSet::new();
    only_prev.insert(prev.to_string());
    if names::uses(&repeat.test, &only_prev).is_empty() && body_reads.is_empty() {
        cx.error(
            repeat.test.span(),
            format!(
                "this `while` test reads nothing of `{prev}`, the previous iteration's output, so every iteration would give it the same answer; test `{prev}`, as in `while ({prev}.is_none_or(|p| p.more))`"
            ),
        );
    }
}

/// `{ let __flow_test: bool = test; __flow_test }` on the test's span, so that a test that is
/// no `bool` is reported on the user's tokens. Built as syntax: the test is not parsed again.
fn bool_test(test: &Expr) -> Expr {
    let span = test.span();
    let var = Ident::new("__flow_test", span);
    let binding = syn::Pat::Type(syn::PatType {
        attrs: Vec::new(),
        pat: Box::new(syn::Pat::Ident(syn::PatIdent {
            attrs: Vec::new(),
            by_ref: None,
            mutability: None,
            ident: var.clone(),
            subpat: None,
        })),
        colon_token: syn::Token![:](span),
        ty: Box::new(syn::Type::Path(syn::TypePath {
            attrs: Vec::new(),
            qself: None,
            path: Ident::new("bool", span).into(),
        })),
    });
    let local = syn::Stmt::Local(syn::Local {
        attrs: Vec::new(),
        let_token: syn::Token![let](span),
        modifiers: syn::LocalModifiers::default(),
        pat: binding,
        init: Some(syn::LocalInit {
            eq_token: syn::Token![=](span),
            expr: Box::new(test.clone()),
            diverge: None,
        }),
        semi_token: syn::Token![;](span),
    });
    let value = syn::Stmt::Expr(
        Expr::Path(syn::ExprPath {
            attrs: Vec::new(),
            qself: None,
            path: var.into(),
        }),
        None,
    );
    Expr::Block(syn::ExprBlock {
        attrs: Vec::new(),
        label: None,
        block: syn::Block {
            brace_token: syn::token::Brace(span),
            stmts: vec![local, value],
        },
    })
}
