//! Reads: every name an expression reads is resolved to its node, which must run before the
//! reader (not the reader itself, not a sibling, not the other branch, not a later step), and
//! the read is *optional* when the node may not have run when the reader does (the reader then
//! sees an `Option`). A compensation reads as its step does, and the step's own output.

use std::collections::{HashMap, HashSet};

use syn::{Expr, Ident};

use super::Use;
use super::names;
use super::order::Ancestors;
use crate::ctxt::Ctxt;
use crate::graph::{Dag, edge};
use crate::parse::rules::Rule;
use crate::suggest::{at_line, closest};

/// What decides how one node reads another.
pub struct Reads<'a> {
    /// The graph.
    pub dag: &'a Dag,
    /// Node names, by name.
    pub names: &'a HashMap<String, usize>,
    /// Which nodes come before which.
    pub ancestors: &'a Ancestors,
    /// Each `Cancel` node, with the nodes it withdraws, sorted.
    pub cancels: &'a [(usize, Vec<usize>)],
    /// For each node, the gate arms it sits in.
    pub arms_of: &'a [Vec<(usize, usize)>],
}

impl Reads<'_> {
    /// The reads of each node, from the names its expression reads (`raw`); and the reads of a
    /// node that its gate may withdraw apart from the reader (soft reads). A read of no node
    /// before the reader is an error, which names the other step involved with its line.
    pub fn nodes(
        &self,
        raw: Vec<Vec<Ident>>,
        cx: &mut Ctxt,
    ) -> (Vec<Vec<Use>>, Vec<(usize, usize)>) {
        let dag = self.dag;
        let mut soft_reads = Vec::new();
        let mut uses: Vec<Vec<Use>> = (0..dag.nodes.len()).map(|_| Vec::new()).collect();
        for (node, idents) in raw.into_iter().enumerate() {
            for ident in idents {
                let Some(&source) = self.names.get(&ident.to_string()) else {
                    continue;
                };
                if source == node {
                    cx.error(
                        ident.span(),
                        format!("`{ident}` reads its own output: a step cannot use its own result"),
                    );
                    continue;
                }
                if !self.ancestors.is(source, node) {
                    // The message names the other step involved, with its line.
                    let at = at_line(dag.nodes[source].span());
                    let why = if self.ancestors.is(node, source) {
                        format!(
                            "`{ident}`{at} runs after this step, so its output does not exist yet; move this step after it"
                        )
                    } else if other_branch(dag, source, node) {
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
                if self.withdrawable(source, node) {
                    soft_reads.push((source, node));
                }
                uses[node].push(Use {
                    ident,
                    source,
                    optional: self.optional(source, node),
                });
            }
        }
        (uses, soft_reads)
    }

    /// The compensable operations, each with the call that undoes it and what that call reads:
    /// what its step could read, and the step's own output.
    pub fn compensations(
        &self,
        readable: &HashSet<String>,
        cx: &mut Ctxt,
    ) -> Vec<(usize, Expr, Vec<Use>)> {
        let dag = self.dag;
        let mut compensations = Vec::new();
        for (node, undo) in &dag.compensations {
            let node = *node;
            let mut reads = Vec::new();
            for ident in names::uses(undo, readable) {
                let Some(&source) = self.names.get(&ident.to_string()) else {
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
                if !self.ancestors.is(source, node) {
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
                reads.push(Use {
                    ident,
                    source,
                    optional: self.optional(source, node),
                });
            }
            compensations.push((node, undo.clone(), reads));
        }
        compensations
    }

    /// Whether `source`, in a gate's arm, may be withdrawn apart from `reader`, outside that
    /// arm.
    fn withdrawable(&self, source: usize, reader: usize) -> bool {
        !self.arms_of[source]
            .iter()
            .all(|a| self.arms_of[reader].contains(a))
    }

    /// Whether `reader` may run while `source` did not complete: `source` may be withdrawn or
    /// skipped apart from it, or `reader` has a trigger rule (it runs after failed inputs too),
    /// or `source` is a `one_failed` step (skipped when nothing failed).
    fn optional(&self, source: usize, reader: usize) -> bool {
        let dag = self.dag;
        let inside = &dag.nodes[reader].branches;
        self.withdrawable(source, reader)
            || !dag.nodes[source]
                .branches
                .iter()
                .all(|b| inside.contains(b))
            || self.withdrawn_apart(source, reader)
            || dag.nodes[reader].rule != Rule::Default
            || dag.nodes[source].rule == Rule::OneFailed
    }

    /// Whether `source` may be withdrawn by a `Cancel` while `reader`, outside that `Cancel`'s
    /// target, has not started yet: the reader then sees it as an `Option`.
    fn withdrawn_apart(&self, source: usize, reader: usize) -> bool {
        self.cancels.iter().any(|(cancel, scope)| {
            scope.binary_search(&source).is_ok()
                && scope.binary_search(&reader).is_err()
                && !self.ancestors.is(reader, *cancel)
        })
    }
}

/// Adds the edges of the reads: data (or optional-read) edges, and soft-read edges.
pub fn add_edges(dag: &mut Dag, uses: &[Vec<Use>], soft_reads: Vec<(usize, usize)>) {
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
}

/// For each node, node names close to a name its expression reads that is no node (`raw` are
/// the names it reads that are): the generated code binds each, unused, so that when rustc finds
/// no such name it suggests the node.
pub fn hints(dag: &Dag, raw: &[Vec<Ident>], readable: &HashSet<String>) -> Vec<Vec<Ident>> {
    // Each readable name's own identifier (a raw one stays raw), by its text.
    let mut idents: HashMap<String, &Ident> = HashMap::new();
    for node in &dag.nodes {
        if let Some(name) = &node.name
            && readable.contains(&name.to_string())
        {
            idents.entry(name.to_string()).or_insert(name);
        }
    }
    // Sorted, so that a tie between two close names is decided the same way every time.
    let mut candidates: Vec<&str> = readable.iter().map(String::as_str).collect();
    candidates.sort_unstable();
    dag.nodes
        .iter()
        .zip(raw)
        .map(|(node, read)| {
            let mut hints: Vec<Ident> = Vec::new();
            for other in names::others(&node.expr, readable) {
                if let Some(close) = closest(&other.to_string(), candidates.iter().copied())
                    && !read.iter().any(|r| r == close)
                    && !hints.iter().any(|h| h == close)
                    && !names::mentions(&node.expr, close)
                    && let Some(&ident) = idents.get(close)
                {
                    let mut hint = ident.clone();
                    hint.set_span(other.span());
                    hints.push(hint);
                }
            }
            hints
        })
        .collect()
}

/// For each node, the gate arms it sits in: (gate, arm) pairs, outermost first.
pub fn arms_of(dag: &Dag) -> Vec<Vec<(usize, usize)>> {
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

fn other_branch(dag: &Dag, a: usize, b: usize) -> bool {
    dag.nodes[a].branches.iter().any(|&(decision, side)| {
        dag.nodes[b]
            .branches
            .iter()
            .any(|&(d, s)| d == decision && s != side)
    })
}
