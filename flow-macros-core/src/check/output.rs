//! The output: what the output expression reads, and which nodes are sure to have completed
//! after a successful run (see the output rule in `semantics.md`).

use std::collections::{HashMap, HashSet};

use syn::{Expr, Ident};

use super::Use;
use super::names;
use crate::ctxt::Ctxt;
use crate::graph::{Dag, Kind};
use crate::parse::rules::Rule;
use crate::suggest::did_you_mean;

/// The names of the workflow, as the output expression sees them.
pub struct Scope<'a> {
    /// Node names, by name.
    pub names: &'a HashMap<String, usize>,
    /// The parameters' names.
    pub params: &'a HashSet<String>,
    /// The names inside nest bodies.
    pub inner: &'a HashMap<String, usize>,
    /// The names an expression may read.
    pub readable: &'a HashSet<String>,
}

/// The node names the output expression reads. A lone lowercase name that is no node and no
/// parameter is an error, with the closest name.
pub fn uses(output: Option<&Expr>, scope: &Scope<'_>, cx: &mut Ctxt) -> Vec<(Ident, usize)> {
    let Scope {
        names,
        params,
        inner,
        readable,
    } = scope;
    let Some(expr) = output else {
        return Vec::new();
    };
    // A lone lowercase name reads like a node; `None`, `DEFAULT` or `Unit` are values.
    if let syn::Expr::Path(path) = expr
        && let Some(ident) = path.path.get_ident()
        && ident.to_string().starts_with(|c: char| c.is_lowercase())
        && !names.contains_key(&ident.to_string())
        && !params.contains(&ident.to_string())
        && !inner.contains_key(&ident.to_string())
    {
        let name = ident.to_string();
        let mut known: Vec<&str> = names
            .keys()
            .chain(params.iter())
            .map(String::as_str)
            .collect();
        known.sort_unstable();
        let hint = match did_you_mean(&name, known) {
            hint if !hint.is_empty() => hint,
            _ if names.is_empty() => {
                "; this workflow names no node: name the step whose output it returns, as in `total = Operation(..)`".to_string()
            }
            _ => String::new(),
        };
        cx.error(
            ident.span(),
            format!("the output `{ident}` is no node or parameter of this workflow{hint}"),
        );
    }
    names::uses(expr, readable)
        .into_iter()
        .filter_map(|ident| names.get(&ident.to_string()).map(|&id| (ident, id)))
        .collect()
}

/// For each node, whether it is sure to have completed after a successful run. `uses` are the
/// reads of each node, `cancels` the scopes of the `Cancel`s and `arms_of` the gate arms each
/// node sits in.
pub fn sure(
    dag: &Dag,
    order: &[usize],
    uses: &[Vec<Use>],
    cancels: &[(usize, Vec<usize>)],
    arms_of: &[Vec<(usize, usize)>],
) -> Vec<bool> {
    let n = dag.nodes.len();
    // node inside a branch may be skipped, or a `one_failed` step when nothing failed.
    let may_skip: Vec<bool> = dag
        .nodes
        .iter()
        .map(|node| !node.branches.is_empty() || node.rule == Rule::OneFailed)
        .collect();
    // A node is sure to have completed in a successful run unless it may be skipped, or a
    // Conditional test reads it or something downstream of it (a caught failure).
    let mut tested = vec![false; n];
    for (node, reads) in uses.iter().enumerate() {
        if dag.nodes[node].kind == Kind::Decision {
            for read in reads {
                tested[read.source] = true;
            }
        }
    }
    let mut reaches_test = tested;
    for &node in order.iter().rev() {
        let downstream = dag
            .edges
            .range((node, 0)..(node + 1, 0))
            .any(|(&(_, to), _)| reaches_test[to]);
        reaches_test[node] |= downstream;
    }
    // A node a `Cancel` may withdraw may be missing after a successful run too.
    let mut cancellable = vec![false; n];
    for (_, scope) in cancels {
        for &m in scope {
            cancellable[m] = true;
        }
    }
    (0..n)
        .map(|i| !may_skip[i] && !reaches_test[i] && arms_of[i].is_empty() && !cancellable[i])
        .collect()
}
