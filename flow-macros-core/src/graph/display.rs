//! Display names: every node gets one, unique within its workflow.

use std::collections::BTreeMap;

use syn::Expr;

use super::{Dag, Kind, Waits};

/// Gives every node a unique display name: its binding, or for an unnamed operation the name of
/// the function it calls (`reject`, or `reject#2` when several steps call `reject`), for an
/// unnamed `Signal` the signal's name (numbered the same way), or `decision#N` for the N-th
/// `Conditional` and `delay#N` for the N-th unnamed `Delay`.
pub(super) fn name_nodes(dag: &mut Dag) {
    let bases: Vec<String> = dag
        .nodes
        .iter()
        .map(|node| match (&node.name, node.kind) {
            // A version marker's name is its id's: steps keep their names when one is added.
            _ if node.patch.is_some() => String::new(),
            (Some(name), _) => name.to_string(),
            (None, Kind::Decision) => "decision".to_string(),
            (None, Kind::Cancel) => "cancel".to_string(),
            (None, Kind::Terminate) => "terminate".to_string(),
            (None, Kind::Gate) if node.keyword == "Race" => "race".to_string(),
            (None, Kind::Gate) if node.keyword == "Pick" => "pick".to_string(),
            (None, Kind::Gate) => "join".to_string(),
            (None, Kind::Operation) => {
                callee(&node.expr).unwrap_or_else(|| "operation".to_string())
            }
            (None, Kind::Signal) => match &node.waits {
                Some(Waits::Signal { signal, .. }) => signal.to_string(),
                _ => "signal".to_string(),
            },
            (None, Kind::Delay) => "delay".to_string(),
            (None, Kind::ForEach) => "foreach".to_string(),
            (None, Kind::Loop) => "loop".to_string(),
            (None, Kind::Workflow) => callee(&node.expr).unwrap_or_else(|| "workflow".to_string()),
            (None, Kind::Complete) => "complete".to_string(),
        })
        .collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut names = Vec::with_capacity(bases.len());
    for (node, base) in dag.nodes.iter().zip(&bases) {
        if let Some(id) = &node.patch {
            names.push(format!("patched:{}", id.value()));
            continue;
        }
        if node.name.is_some() {
            names.push(base.clone());
            continue;
        }
        let count = bases.iter().filter(|b| *b == base).count();
        let index = seen.entry(base).or_insert(0);
        *index += 1;
        let unique =
            count == 1 && matches!(node.kind, Kind::Operation | Kind::Signal | Kind::Workflow);
        names.push(if unique {
            base.clone()
        } else {
            format!("{base}#{index}")
        });
    }
    for (node, name) in dag.nodes.iter_mut().zip(names) {
        node.display = name;
    }
}

/// The name of the function or method an operation calls, if it is a plain call.
fn callee(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Call(call) => match &*call.func {
            Expr::Path(path) => path.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        },
        Expr::MethodCall(call) => Some(call.method.to_string()),
        Expr::Paren(inner) => callee(&inner.expr),
        Expr::Async(_) => Some("async".to_string()),
        _ => None,
    }
}
