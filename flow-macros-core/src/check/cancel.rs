//! `Cancel` targets: what each one withdraws (a labelled block, or a named step and, for a
//! named gate, its whole block), and whether anything is left to withdraw when it runs.

use std::collections::HashMap;

use super::order::Ancestors;
use crate::ctxt::Ctxt;
use crate::graph::Dag;
use crate::parse::CancelTarget;
use crate::suggest::{at_line, closest};

/// The nodes each `Cancel` withdraws: the nodes of the block its `'label` names, or the step
/// its name names. An unknown target is an error, with the closest label or name.
pub fn resolve_cancels(
    dag: &Dag,
    names: &HashMap<String, usize>,
    cx: &mut Ctxt,
) -> Vec<(usize, Vec<usize>)> {
    let mut out = Vec::new();
    for (cancel, target) in &dag.cancels {
        let scope: Option<Vec<usize>> = match target {
            CancelTarget::Label(label) => dag
                .regions
                .iter()
                .find(|r| r.label.ident == label.ident)
                .map(|r| r.nodes.clone().collect()),
            // A named `Race` or `Parallel(min = k)` names its gate: the whole block goes.
            CancelTarget::Node(name) => names.get(&name.to_string()).map(|&id| {
                let mut scope = vec![id];
                if let Some(gate) = dag.gates.iter().find(|g| g.node == id) {
                    scope.extend(gate.arms.iter().flat_map(|arm| arm.nodes.iter().copied()));
                    scope.sort_unstable();
                    scope.dedup();
                }
                scope
            }),
        };
        match scope {
            Some(scope) => out.push((*cancel, scope)),
            None => cx.error(target_span(target), unknown_target(dag, names, target)),
        }
    }
    out
}

fn target_span(target: &CancelTarget) -> proc_macro2::Span {
    match target {
        CancelTarget::Label(label) => label.span(),
        CancelTarget::Node(name) => name.span(),
    }
}

/// The error for a `Cancel` target that is no label and no step name, with the closest of
/// either as a suggestion.
fn unknown_target(dag: &Dag, names: &HashMap<String, usize>, target: &CancelTarget) -> String {
    let mut candidates: Vec<(String, String)> = dag
        .regions
        .iter()
        .map(|r| (r.label.ident.to_string(), r.label.to_string()))
        .chain(names.keys().map(|n| (n.clone(), n.clone())))
        .collect();
    candidates.sort_unstable();
    let (bare, written, what, fix) = match target {
        CancelTarget::Label(label) => (
            label.ident.to_string(),
            label.to_string(),
            "no label",
            format!("label the block to withdraw, as in `{label}: Sequential {{ .. }}`"),
        ),
        CancelTarget::Node(name) => (
            name.to_string(),
            name.to_string(),
            "no named step",
            format!(
                "name the step to withdraw, as in `{name} = Operation(..)`, or label a block, as in `'{name}: Sequential {{ .. }}`"
            ),
        ),
    };
    let hint = closest(&bare, candidates.iter().map(|(b, _)| b.as_str()))
        .or_else(|| {
            candidates
                .iter()
                .find(|(b, _)| *b == bare)
                .map(|(b, _)| b.as_str())
        })
        .and_then(|close| candidates.iter().find(|(b, w)| b == close && *w != written))
        .map(|(_, w)| format!("; did you mean `{w}`?"));
    match hint {
        Some(hint) => format!("`Cancel` names `{written}`, which is {what} of this workflow{hint}"),
        None => format!("`Cancel` names `{written}`, which is {what} of this workflow; {fix}"),
    }
}

/// A `Cancel` whose whole target comes before it has nothing left to withdraw. One inside its
/// own target is a `break 'label`.
pub fn ended_before(
    dag: &Dag,
    cancels: &[(usize, Vec<usize>)],
    ancestors: &Ancestors,
    cx: &mut Ctxt,
) {
    for (cancel, scope) in cancels {
        if !scope.is_empty() && scope.iter().all(|&m| ancestors.is(m, *cancel)) {
            let Some((_, target)) = dag.cancels.iter().find(|(c, _)| c == cancel) else {
                continue;
            };
            let (span, what) = match target {
                CancelTarget::Label(label) => {
                    (label.span(), format!("the block labelled `{label}`"))
                }
                CancelTarget::Node(name) => (name.span(), format!("`{name}`")),
            };
            let at = at_line(dag.nodes[scope[0]].span());
            cx.error(
                span,
                format!("{what}{at} has always ended before this `Cancel` runs, so there is nothing left to withdraw; cancel a step or block that may still be running or waiting when the `Cancel` starts"),
            );
        }
    }
}
