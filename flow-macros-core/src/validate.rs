//! Every compile-time check of a workflow's graph. Errors go to the shared context, each on the
//! user's own tokens, with a second error standing as a note on the other tokens involved.

use std::collections::{HashMap, HashSet};

use syn::{Expr, Ident};

use crate::ctxt::Ctxt;
use crate::graph::{Dag, Kind, edge};
use crate::names;
use crate::parse::{CancelTarget, Workflow};
use crate::rules::Rule;
use crate::suggest::{at_line, closest, did_you_mean, on_line};

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
    pub nests: Vec<crate::nest::CheckedNest>,
    /// The compensable operations in execution order: each with the call that undoes it and
    /// the node names that call reads (its own output among them).
    pub compensations: Vec<(usize, Expr, Vec<Use>)>,
}

pub fn check(workflow: &Workflow, mut dag: Dag, cx: &mut Ctxt) -> Option<Checked> {
    let names = check_names(workflow, &dag, cx);
    resolve_after(&mut dag, &names, cx);
    let cancels = resolve_cancels(&dag, &names, cx);

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

    // The names an expression may read: every node name that is not shadowed by a parameter.
    let readable: HashSet<String> = names
        .keys()
        .filter(|n| !params.contains(*n))
        .cloned()
        .collect();
    // The names inside nest bodies are the bodies' own; each body is a workflow of its own.
    let inner = crate::nest::inner_names(&dag);
    crate::nest::check_outside_reads(&dag, &readable, &inner, workflow.output.as_ref(), cx);
    let nests = crate::nest::check_bodies(workflow, &mut dag, &names, cx);
    let raw_uses: Vec<Vec<Ident>> = dag
        .nodes
        .iter()
        .map(|n| names::uses(&n.expr, &readable))
        .collect();

    // Sorted, so that a tie between two close names is decided the same way every time.
    let mut candidates: Vec<&str> = readable.iter().map(String::as_str).collect();
    candidates.sort_unstable();
    let hints: Vec<Vec<Ident>> = dag
        .nodes
        .iter()
        .zip(&raw_uses)
        .map(|(node, read)| {
            let mut hints: Vec<Ident> = Vec::new();
            for other in names::others(&node.expr, &readable) {
                if let Some(close) = closest(&other.to_string(), candidates.iter().copied())
                    && !read.iter().any(|r| r == close)
                    && !hints.iter().any(|h| h == close)
                    && !names::mentions(&node.expr, close)
                {
                    hints.push(Ident::new(close, other.span()));
                }
            }
            hints
        })
        .collect();

    let order = order_or_cycles(&dag, cx)?;

    // Ancestors over order edges (sequence, after, branch), as bitsets by node id.
    let n = dag.nodes.len();
    let words = n.div_ceil(64).max(1);
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(from, to) in dag.edges.keys() {
        preds[to].push(from);
    }
    let mut ancestors = vec![0u64; n * words];
    for &node in &order {
        for &pred in &preds[node] {
            for w in 0..words {
                let bits = ancestors[pred * words + w];
                ancestors[node * words + w] |= bits;
            }
            ancestors[node * words + pred / 64] |= 1 << (pred % 64);
        }
    }
    let is_ancestor = |a: usize, of: usize| ancestors[of * words + a / 64] & (1 << (a % 64)) != 0;
    crate::nest::check_completes(&dag, &names, &is_ancestor, cx);

    // A `Cancel` whose whole target comes before it has nothing left to withdraw. One inside
    // its own target is a `break 'label`.
    for (cancel, scope) in &cancels {
        if !scope.is_empty() && scope.iter().all(|&m| is_ancestor(m, *cancel)) {
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
    // Whether `source` may be withdrawn by a `Cancel` while `reader`, outside that `Cancel`'s
    // target, has not started yet: the reader then sees it as an `Option`.
    let withdrawn_apart = |source: usize, reader: usize| {
        cancels.iter().any(|(cancel, scope)| {
            scope.binary_search(&source).is_ok()
                && scope.binary_search(&reader).is_err()
                && !is_ancestor(reader, *cancel)
        })
    };

    let arms_of = arms_of(&dag);
    let mut soft_reads = Vec::new();
    let mut uses: Vec<Vec<Use>> = (0..n).map(|_| Vec::new()).collect();
    for (node, idents) in raw_uses.into_iter().enumerate() {
        for ident in idents {
            let Some(&source) = names.get(&ident.to_string()) else {
                continue;
            };
            if source == node {
                cx.error(
                    ident.span(),
                    format!("`{ident}` reads its own output: a step cannot use its own result"),
                );
                continue;
            }
            if !is_ancestor(source, node) {
                // The message names the other step involved, with its line.
                let at = at_line(dag.nodes[source].span());
                let why = if is_ancestor(node, source) {
                    format!(
                        "`{ident}`{at} runs after this step, so its output does not exist yet; move this step after it"
                    )
                } else if other_branch(&dag, source, node) {
                    format!(
                        "`{ident}`{at} is in the other branch of the same `Conditional`, which never runs together with this one; to use `{ident}` in both branches, move its step before the `Conditional`"
                    )
                } else {
                    format!(
                        "`{ident}`{at} may run at the same time as this step, so its output may not exist yet; add `after = [{ident}]` to the step, or move it after `{ident}` in a `Sequential`"
                    )
                };
                cx.error(ident.span(), why);
                continue;
            }
            let inside = &dag.nodes[node].branches;
            // A node in a gate's arm may be withdrawn apart from a reader outside that arm.
            let withdrawable = !arms_of[source].iter().all(|a| arms_of[node].contains(a));
            // A step with a trigger rule runs after failed inputs too, and a `one_failed`
            // step is skipped when nothing failed: such reads are optional as well.
            let optional = withdrawable
                || !dag.nodes[source]
                    .branches
                    .iter()
                    .all(|b| inside.contains(b))
                || withdrawn_apart(source, node)
                || dag.nodes[node].rule != Rule::Default
                || dag.nodes[source].rule == Rule::OneFailed;
            if withdrawable {
                soft_reads.push((source, node));
            }
            uses[node].push(Use {
                ident,
                source,
                optional,
            });
        }
    }
    // A compensation reads what its step could read, and the step's own output.
    let mut compensations = Vec::new();
    for (node, undo) in &dag.compensations {
        let node = *node;
        let mut reads = Vec::new();
        for ident in names::uses(undo, &readable) {
            let Some(&source) = names.get(&ident.to_string()) else {
                continue;
            };
            if source == node {
                reads.push(Use {
                    ident,
                    source,
                    optional: false,
                });
                continue;
            }
            if !is_ancestor(source, node) {
                let at = at_line(dag.nodes[source].span());
                let step = dag.nodes[node]
                    .name
                    .as_ref()
                    .map_or_else(|| "this step".to_string(), |name| format!("`{name}`"));
                cx.error(
                    ident.span(),
                    format!(
                        "the compensation of {step} reads `{ident}`{at}, which {step} itself cannot read (it does not run before it); a compensation reads the step's own output, the parameters and the steps that run before the step"
                    ),
                );
                continue;
            }
            let inside = &dag.nodes[node].branches;
            let optional = !arms_of[source].iter().all(|a| arms_of[node].contains(a))
                || !dag.nodes[source]
                    .branches
                    .iter()
                    .all(|b| inside.contains(b))
                || withdrawn_apart(source, node)
                || dag.nodes[node].rule != Rule::Default
                || dag.nodes[source].rule == Rule::OneFailed;
            reads.push(Use {
                ident,
                source,
                optional,
            });
        }
        compensations.push((node, undo.clone(), reads));
    }
    for (node, reads) in uses.iter().enumerate() {
        for read in reads {
            let why = if read.optional {
                edge::OPTIONAL_READ
            } else {
                edge::DATA
            };
            dag.add_edge(read.source, node, why);
        }
    }
    for (source, node) in soft_reads {
        dag.add_edge(source, node, edge::SOFT_READ);
    }

    let output_uses = match &workflow.output {
        Some(expr) => {
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
            names::uses(expr, &readable)
                .into_iter()
                .filter_map(|ident| names.get(&ident.to_string()).map(|&id| (ident, id)))
                .collect()
        }
        None => Vec::new(),
    };

    crate::rules::check(&dag, &order, cx);
    if cx.has_errors() {
        return None;
    }

    // Reads of a node in another branch are optional and never skip the reader, so only a
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
    for (_, scope) in &cancels {
        for &m in scope {
            cancellable[m] = true;
        }
    }
    let sure = (0..n)
        .map(|i| !may_skip[i] && !reaches_test[i] && arms_of[i].is_empty() && !cancellable[i])
        .collect();

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

/// The nodes each `Cancel` withdraws: the nodes of the block its `'label` names, or the step
/// its name names. An unknown target is an error, with the closest label or name.
fn resolve_cancels(
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

/// For each node, the gate arms it sits in: (gate, arm) pairs, outermost first.
fn arms_of(dag: &Dag) -> Vec<Vec<(usize, usize)>> {
    let mut arms = vec![Vec::new(); dag.nodes.len()];
    for (g, gate) in dag.gates.iter().enumerate() {
        for (a, arm) in gate.arms.iter().enumerate() {
            for &node in &arm.nodes {
                arms[node].push((g, a));
            }
        }
    }
    arms
}

/// Node names: unique, and no shadowing of parameters.
fn check_names(workflow: &Workflow, dag: &Dag, cx: &mut Ctxt) -> HashMap<String, usize> {
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

fn resolve_after(dag: &mut Dag, names: &HashMap<String, usize>, cx: &mut Ctxt) {
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

fn other_branch(dag: &Dag, a: usize, b: usize) -> bool {
    dag.nodes[a].branches.iter().any(|&(decision, side)| {
        dag.nodes[b]
            .branches
            .iter()
            .any(|&(d, s)| d == decision && s != side)
    })
}

/// A topological order that keeps source order where it can (Kahn's algorithm, lowest ready id
/// first); or one error per dependency cycle.
fn order_or_cycles(dag: &Dag, cx: &mut Ctxt) -> Option<Vec<usize>> {
    let n = dag.nodes.len();
    let mut indegree = vec![0usize; n];
    for &(_, to) in dag.edges.keys() {
        indegree[to] += 1;
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(node) = ready.pop_first() {
        order.push(node);
        for (&(from, to), _) in dag.edges.range((node, 0)..(node + 1, 0)) {
            debug_assert_eq!(from, node);
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.insert(to);
            }
        }
    }
    if order.len() == n {
        return Some(order);
    }
    // What Kahn's algorithm could not order lies on a cycle or after one.
    let mut left = vec![true; n];
    for &node in &order {
        left[node] = false;
    }
    for members in cycles(dag, &left) {
        cycle_error(dag, &members, cx);
    }
    None
}

/// The dependency cycles among the nodes marked in `left`: the strongly connected components of
/// more than one node (Tarjan's algorithm, iterative so that a long chain cannot overflow the
/// stack), each sorted by id, ordered by their first member.
fn cycles(dag: &Dag, left: &[bool]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = dag.nodes.len();
    let mut successors = vec![Vec::new(); n];
    for &(from, to) in dag.edges.keys() {
        if left[from] && left[to] {
            successors[from].push(to);
        }
    }
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut found = Vec::new();
    for root in (0..n).filter(|&v| left[v]) {
        if index[root] != UNSEEN {
            continue;
        }
        // Each frame is a node and how many of its successors it has visited.
        let mut frames = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(frame) = frames.last_mut() {
            let (v, visited) = *frame;
            if let Some(&w) = successors[v].get(visited) {
                frame.1 += 1;
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    frames.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut members = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    members.push(w);
                    if w == v {
                        break;
                    }
                }
                if members.len() > 1 {
                    members.sort_unstable();
                    found.push(members);
                }
            }
        }
    }
    found.sort_unstable();
    found
}

/// One error for one cycle, naming every member once with its line: on the first `after` that
/// closes it, or on its first member.
fn cycle_error(dag: &Dag, members: &[usize], cx: &mut Ctxt) {
    let names = members
        .iter()
        .map(|&m| format!("`{}`{}", dag.nodes[m].display, at_line(dag.nodes[m].span())))
        .collect::<Vec<_>>()
        .join(", ");
    let closing = members.iter().find_map(|&m| {
        dag.nodes[m].after.iter().find(|t| {
            members
                .iter()
                .any(|&other| dag.nodes[other].name.as_ref() == Some(*t))
        })
    });
    match closing {
        Some(target) => cx.error(
            target.span(),
            format!("`after = [{target}]` closes a dependency cycle through {names}; a step cannot wait for a step that waits for it"),
        ),
        None => cx.error(
            dag.nodes[members[0]].span(),
            format!("dependency cycle through {names}; a step cannot wait for a step that waits for it"),
        ),
    }
}
