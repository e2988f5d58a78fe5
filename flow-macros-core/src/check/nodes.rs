//! Names: node names are unique and shadow no parameter, parameters are unique, and `after`
//! names a node that is not the step itself.

use std::collections::{HashMap, HashSet};

use crate::ctxt::Ctxt;
use crate::graph::{Dag, edge};
use crate::parse::Workflow;
use crate::suggest::{at_line, did_you_mean, on_line};

/// Node names: unique, and no shadowing of parameters.
pub fn check_names(workflow: &Workflow, dag: &Dag, cx: &mut Ctxt) -> HashMap<String, usize> {
    let mut names: HashMap<String, usize> = HashMap::new();
    for (id, node) in dag.nodes.iter().enumerate() {
        let Some(name) = &node.name else { continue };
        if let Some(param) = workflow.params.iter().find(|p| p.name == *name) {
            cx.error(
                name.span(),
                format!(
                    "node name `{name}` shadows the workflow parameter `{name}`{}; rename the node",
                    at_line(param.name.span()),
                ),
            );
        }
        match names.get(&name.to_string()) {
            Some(&first) => {
                cx.error(
                    name.span(),
                    format!(
                        "duplicate node name `{name}`: it is already defined{}; every node needs its own name",
                        on_line(dag.nodes[first].span()),
                    ),
                );
            }
            None => {
                names.insert(name.to_string(), id);
            }
        }
    }
    names
}

/// Adds an edge for every `after = [..]` name; one that names no node, or the step itself, is
/// an error.
pub fn resolve_after(dag: &mut Dag, names: &HashMap<String, usize>, cx: &mut Ctxt) {
    let mut edges = Vec::new();
    for (id, node) in dag.nodes.iter().enumerate() {
        for target in &node.after {
            match names.get(&target.to_string()) {
                Some(&source) if source == id => cx.error(
                    target.span(),
                    format!("`{target}` cannot run after itself; remove it from `after`"),
                ),
                Some(&source) => edges.push((source, id)),
                None => {
                    let name = target.to_string();
                    let mut known: Vec<&str> = names.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    let message = match did_you_mean(&name, known) {
                        _ if names.is_empty() => format!(
                            "`after` names `{target}`, but this workflow has no named node; name the step to wait for, as in `{target} = Operation(..)`"
                        ),
                        hint if !hint.is_empty() => {
                            format!(
                                "`after` names `{target}`, which is no node of this workflow{hint}"
                            )
                        }
                        _ => format!(
                            "`after` names `{target}`, which is no node of this workflow; name the step to wait for, as in `{target} = Operation(..)`"
                        ),
                    };
                    cx.error(target.span(), message);
                }
            }
        }
    }
    for (from, to) in edges {
        dag.add_edge(from, to, edge::AFTER);
    }
}

/// The parameters' names; a parameter declared twice is an error on the second.
pub fn params(workflow: &Workflow, cx: &mut Ctxt) -> HashSet<String> {
    let params: HashSet<String> = workflow.params.iter().map(|p| p.name.to_string()).collect();
    for (i, param) in workflow.params.iter().enumerate() {
        if let Some(first) = workflow.params[..i].iter().find(|p| p.name == param.name) {
            cx.error(
                param.name.span(),
                format!(
                    "duplicate parameter `{}`: it is already declared{}; rename one of them",
                    param.name,
                    on_line(first.name.span()),
                ),
            );
        }
    }
    params
}
