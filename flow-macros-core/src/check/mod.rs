//! Stage 3, the checks: [`check`] runs every check of a workflow's graph and collects every
//! error in the context, each on the user's own tokens, with the other places involved named by
//! line. It gives a [`Checked`] graph: nodes in execution order, every read resolved.
//!
//! The header's checks ([`header`]: the output and its type, lifetimes), the signals a
//! workflow declares ([`signals::declared`]) and what a durable workflow cannot do yet
//! ([`durable`]) are here too; the driver in `expand` calls them in order.
//!
//! Imports `parse` and `graph`.

mod bodies;
mod cancel;
pub mod durable;
pub mod generics;
pub mod header;
pub mod names;
mod nest;
mod nodes;
mod order;
mod output;
mod reads;
mod rules;
pub mod signals;

use std::collections::HashSet;

use syn::{Expr, Ident};

use crate::ctxt::Ctxt;
use crate::graph::Dag;
use crate::parse::{NestStep, Workflow};

/// A name an expression reads.
pub struct Use {
    /// The name as the expression spells it.
    pub ident: Ident,
    /// The node it names.
    pub source: usize,
    /// Whether the source may have been skipped when the reader runs (it sits in a branch the
    /// reader is not in): the reader then sees it as an `Option`.
    pub optional: bool,
}

/// A checked graph: nodes in a topological order, ready to expand.
pub struct Checked {
    /// The graph, with the edges of the reads.
    pub dag: Dag,
    /// Node ids in execution order: every edge goes from an earlier to a later position.
    pub order: Vec<usize>,
    /// For each node, the node names its expression reads.
    pub uses: Vec<Vec<Use>>,
    /// For each node, whether it is sure to have completed after a successful run.
    pub sure: Vec<bool>,
    /// The node names the output expression reads.
    pub output_uses: Vec<(Ident, usize)>,
    /// For each node, node names close to a name its expression reads that is no node: the
    /// generated code binds each, unused, so that when rustc finds no such name it suggests the
    /// node ("a local variable with a similar name exists").
    pub hints: Vec<Vec<Ident>>,
    /// Each `Cancel` node, with the nodes it withdraws (its scope), sorted by id.
    pub cancels: Vec<(usize, Vec<usize>)>,
    /// The nest nodes, each with its checked body.
    pub nests: Vec<CheckedNest>,
    /// The compensable operations in execution order: each with the call that undoes it and
    /// the node names that call reads (its own output among them).
    pub compensations: Vec<(usize, Expr, Vec<Use>)>,
}

/// A checked nest: its body as a checked workflow (none for a sub-workflow step).
pub struct CheckedNest {
    /// The nest's node.
    pub node: usize,
    /// The step as parsed.
    pub step: std::rc::Rc<NestStep>,
    /// The body as a workflow of its own, and its checked graph.
    pub body: Option<(Workflow, Checked)>,
}

/// Checks the graph of `workflow`; `None` when there were errors (in `cx`).
pub fn check(workflow: &Workflow, mut dag: Dag, cx: &mut Ctxt) -> Option<Checked> {
    let names = nodes::check_names(workflow, &dag, cx);
    nodes::resolve_after(&mut dag, &names, cx);
    let cancels = cancel::resolve_cancels(&dag, &names, cx);
    let params = nodes::params(workflow, cx);

    // The names an expression may read: every node name that is not shadowed by a parameter.
    let readable: HashSet<String> = names
        .keys()
        .filter(|n| !params.contains(*n))
        .cloned()
        .collect();
    // The names inside nest bodies are the bodies' own; each body is a workflow of its own.
    let inner = nest::inner_names(&dag);
    nest::check_outside_reads(&dag, &readable, &inner, workflow.output.as_ref(), cx);
    let nests = bodies::check_bodies(workflow, &mut dag, &names, cx);
    let raw_uses: Vec<Vec<Ident>> = dag
        .nodes
        .iter()
        .map(|n| names::uses(&n.expr, &readable))
        .collect();
    let hints = reads::hints(&dag, &raw_uses, &readable);

    let order = order::order_or_cycles(&dag, cx)?;
    // Ancestors over order edges (sequence, after, branch). The reads' edges added below join
    // nodes that are ancestors already, so they stay true.
    let ancestors = order::Ancestors::new(&dag, &order);
    nest::check_completes(&dag, &names, &ancestors, cx);
    cancel::ended_before(&dag, &cancels, &ancestors, cx);

    let arms_of = reads::arms_of(&dag);
    let reads = reads::Reads {
        dag: &dag,
        names: &names,
        ancestors: &ancestors,
        cancels: &cancels,
        arms_of: &arms_of,
    };
    let (uses, soft_reads) = reads.nodes(raw_uses, cx);
    let compensations = reads.compensations(&readable, cx);
    reads::add_edges(&mut dag, &uses, soft_reads);

    let scope = output::Scope {
        names: &names,
        params: &params,
        inner: &inner,
        readable: &readable,
    };
    let output_uses = output::uses(workflow.output.as_ref(), &scope, cx);

    rules::check(&dag, &ancestors, cx);
    if cx.has_errors() {
        return None;
    }
    let sure = output::sure(&dag, &order, &uses, &cancels, &arms_of);

    Some(Checked {
        dag,
        order,
        uses,
        sure,
        output_uses,
        hints,
        cancels,
        nests,
        compensations,
    })
}
