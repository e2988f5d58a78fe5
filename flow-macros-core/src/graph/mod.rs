//! Stage 2, the AST → DAG: [`build()`] makes one node per `Operation`, one decision node per
//! `Conditional`, one per `Signal`, `Delay`, `Cancel`, `Terminate`, `Complete` and nest step, and
//! one gate node per `Race`, `Parallel(min = k)` and `Pick`.
//!
//! Containers are transparent. In a `Sequential`, every entry of a step depends on every exit
//! of the step before; `Parallel` children are independent; a decision's branches depend on the
//! decision. Every node keeps the user's tokens, so later stages can put errors and generated
//! code on them. Building reports only what it finds while it builds (an empty block, a bad
//! option value, a section inside a section of its own group); every check of the whole graph
//! is `check`'s.
//!
//! Imports `parse`.

mod build;
mod display;
mod gates;
mod nest;
mod sections;

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::{Expr, Ident, LitStr};

use crate::parse::policy::Policy;
use crate::parse::rules::Rule;
use crate::parse::{CancelTarget, NestStep};

pub use build::build;
pub use nest::tuple;

/// What a node is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// An `Operation` step.
    Operation,
    /// The test of a `Conditional`.
    Decision,
    /// `Cancel(target)`: withdraws its target when it starts.
    Cancel,
    /// `Terminate(expr)`: ends the run with `expr` as its output.
    Terminate,
    /// The node of a `Race` or a `Parallel(min = k)`: completes when `min` arms did.
    Gate,
    /// A `Signal` step.
    Signal,
    /// A `Delay` step.
    Delay,
    /// A `ForEach`: runs its body once per item (`Dag::nests` has it).
    ForEach,
    /// A `Loop`: runs its body once per iteration.
    Loop,
    /// A sub-workflow step: runs another workflow.
    Workflow,
    /// `Complete(name)`: completes a `ForEach` with the outputs so far.
    Complete,
}

/// What a `Signal` or `Delay` node waits for.
pub enum Waits {
    /// The signal's name, its payload's type, and whether it is `transient`.
    Signal {
        signal: Ident,
        ty: Box<syn::Type>,
        transient: bool,
    },
    /// The literal's duration in milliseconds; `None` when the node's `expr` computes it.
    Delay { ms: Option<u64> },
}

/// Why an edge exists; one pair of nodes may have several reasons.
pub mod edge {
    /// The target follows the source in a `Sequential`.
    pub const SEQUENCE: u8 = 1;
    /// The target reads the source's output.
    pub const DATA: u8 = 2;
    /// The target names the source in `after = [..]`.
    pub const AFTER: u8 = 4;
    /// From a decision to an entry of its `then` branch.
    pub const THEN: u8 = 8;
    /// From a decision to an entry of its `else` branch.
    pub const ELSE: u8 = 16;
    /// The target reads the source, which sits in a branch the target is not in: the target
    /// sees it as an `Option` and is not skipped with it.
    pub const OPTIONAL_READ: u8 = 32;
    /// From an exit of a gate's arm to the gate's node: counted by the gate, not by the node.
    pub const GATED: u8 = 64;
    /// An optional read of a node that its gate may withdraw: the reader waits for the source
    /// to settle and inherits nothing from it.
    pub const SOFT_READ: u8 = 128;
}

/// A `Race` or a `Parallel(min = k)` block.
pub struct GateBlock {
    /// The gate's node.
    pub node: usize,
    /// A `Race` (or a `Pick`), rather than a `Parallel(min = k)`.
    pub race: bool,
    /// How many arms must complete for the gate to fire.
    pub min: u32,
    /// `rest = cancel`: the other arms are withdrawn when the gate fires.
    pub rest_cancel: bool,
    /// Each child of the block: its nodes (all depths) and its exits.
    pub arms: Vec<ArmBlock>,
}

/// Each child of a gate block: an arm.
pub struct ArmBlock {
    /// The arm's nodes, at all depths.
    pub nodes: Vec<usize>,
    /// Its last steps, whose completion completes the arm.
    pub exits: Vec<usize>,
}

/// A node of the DAG.
pub struct Node {
    /// What the node is.
    pub kind: Kind,
    /// The binding, for a named operation.
    pub name: Option<Ident>,
    /// The name shown in the graph and in reports; unique within the workflow.
    pub display: String,
    /// `Operation` or `Conditional`, as the user wrote it.
    pub keyword: Ident,
    /// The call of an operation, or the test of a decision.
    pub expr: Expr,
    /// The names in `after = [..]`.
    pub after: Vec<Ident>,
    /// Its resilience options.
    pub policy: Policy,
    /// The enclosing branches, outermost first: (decision, is the `then` branch).
    pub branches: Vec<(usize, bool)>,
    /// The limited `Parallel` blocks the node sits in.
    pub groups: Vec<usize>,
    /// Its trigger rule (`when = ..`).
    pub rule: Rule,
    /// Where `when` is written, if it is.
    pub when_span: Option<Span>,
    /// For a decision: the nodes of each branch, at all depths.
    pub then_nodes: Vec<usize>,
    /// For a decision: the nodes of its `else` branch.
    pub else_nodes: Vec<usize>,
    /// For a `Signal` or `Delay` step: what it waits for.
    pub waits: Option<Waits>,
    /// For a version marker (`Patched("id")`, a decision): its id.
    pub patch: Option<syn::LitStr>,
}

impl Node {
    /// The span that stands for the node in errors: its name, or its keyword.
    pub fn span(&self) -> Span {
        self.name.as_ref().map_or(self.keyword.span(), Ident::span)
    }
}

/// A workflow's graph, or a nest body's.
pub struct Dag {
    /// The nodes, by id: in source order.
    pub nodes: Vec<Node>,
    /// Edges keyed by (from, to), with the reasons they exist.
    pub edges: BTreeMap<(usize, usize), u8>,
    /// The limit of each limited `Parallel` block.
    pub group_limits: Vec<u32>,
    /// The critical sections (`exclusive = "group"`), outer before inner.
    pub sections: Vec<SectionDef>,
    /// The gate blocks, in source order.
    pub gates: Vec<GateBlock>,
    /// The labelled steps and blocks (`'export: Sequential { .. }`), each with its nodes.
    pub regions: Vec<Region>,
    /// The `Cancel` nodes and what each targets.
    pub cancels: Vec<(usize, CancelTarget)>,
    /// The nest nodes (`ForEach`, `Loop`, sub-workflow steps), in source order.
    pub nests: Vec<NestDef>,
    /// The `Complete` nodes and the `ForEach` each names.
    pub completes: Vec<(usize, Ident)>,
    /// The operations with `compensate = ..`, each with the call that undoes it, by node id.
    pub compensations: Vec<(usize, Expr)>,
}

/// A labelled step or block: the nodes it holds are the ids `nodes` (a block's nodes are
/// built one after the other, so they are a range).
pub struct Region {
    /// The label, as written.
    pub label: syn::Lifetime,
    /// The ids of its nodes.
    pub nodes: std::ops::Range<usize>,
}

impl Dag {
    /// Adds the edge `from -> to` for the reason `why` (an [`edge`] flag), or the reason to the
    /// edge that exists.
    pub fn add_edge(&mut self, from: usize, to: usize, why: u8) {
        *self.edges.entry((from, to)).or_insert(0) |= why;
    }
}

/// A critical section: a step or block whose nodes hold their exclusion group while they run.
pub struct SectionDef {
    /// The group's name, as written.
    pub group: LitStr,
    /// The section's nodes (operations and decisions), by DAG id.
    pub nodes: Vec<usize>,
}

/// A nest node of a graph, with its step and its body's DAG (taken when the body is checked).
pub struct NestDef {
    /// The nest's node.
    pub node: usize,
    /// The step as parsed.
    pub step: std::rc::Rc<NestStep>,
    /// The body's graph (none for a sub-workflow step, or a body that did not parse).
    pub body: Option<Dag>,
}
