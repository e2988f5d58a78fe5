//! The static graph of a workflow, built at compile time by `workflow!`.
//!
//! Every workflow type has a `GRAPH` constant of type [`Graph`]: its nodes, its edges and the
//! scheduling tables the runtime walks. Nothing here is computed at run time.

use std::fmt::{self, Write as _};

use crate::policy::{FailurePolicy, NodePolicy};

/// The static graph of one workflow: nodes, edges and the precomputed scheduling plan.
///
/// Built by the `workflow!` macro as a constant (`MyWorkflow::GRAPH`); read it to draw or
/// inspect a workflow.
///
/// ```
/// # use flowdag_runtime::__private::Plan;
/// # use flowdag_runtime::{Edge, EdgeKind, Graph, NodeInfo, NodeKind};
/// # const G: Graph = Graph::__new(
/// #     "Demo",
/// #     &[NodeInfo::__new("a", NodeKind::Operation, "a()", 3, 5), NodeInfo::__new("b", NodeKind::Operation, "b(&a)", 4, 5)],
/// #     &[Edge::__new(0, 1, EdgeKind::Data)],
/// #     Plan::EMPTY,
/// # );
/// assert_eq!(G.name(), "Demo");
/// assert_eq!(G.nodes()[1].label, "b(&a)");
/// assert_eq!(G.edges()[0].kind, EdgeKind::Data);
/// println!("{}", G.to_mermaid());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Graph {
    pub(crate) name: &'static str,
    pub(crate) nodes: &'static [NodeInfo],
    pub(crate) edges: &'static [Edge],
    pub(crate) plan: Plan,
    /// The steps with `compensate = ..`: (node, the call that undoes it, as written), by node.
    pub(crate) compensations: &'static [(u32, &'static str)],
}

/// One node of a [`Graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's name: its binding (`order = Operation(..)`), or a generated one such as
    /// `fetch_order#3` for an unnamed step.
    pub name: &'static str,
    /// What the node does.
    pub kind: NodeKind,
    /// The source text of the call or test, as written.
    pub label: &'static str,
    /// The line of the node in the source file (1-based).
    pub line: u32,
    /// The column of the node in the source file (1-based).
    pub column: u32,
}

impl NodeInfo {
    /// Builds a node record. For the code `workflow!` generates: not a public API.
    #[doc(hidden)]
    pub const fn __new(
        name: &'static str,
        kind: NodeKind,
        label: &'static str,
        line: u32,
        column: u32,
    ) -> Self {
        NodeInfo {
            name,
            kind,
            label,
            line,
            column,
        }
    }
}

/// The kind of a [`NodeInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeKind {
    /// An `Operation`: awaits an async call.
    Operation,
    /// The decision of a `Conditional`: evaluates the test and picks a branch.
    Decision,
    /// The join of a `Race`, a `Pick` or a `Parallel(min = k)`: completes when `k` of its arms
    /// completed; its output is the winning arms.
    Gate,
    /// A `Signal` step: waits for an external signal and outputs its payload.
    Signal,
    /// A `Delay` step: waits for a duration.
    Delay,
    /// A `Cancel` step: withdraws a named step or block.
    Cancel,
    /// A `Terminate` step: ends the run successfully with an output.
    Terminate,
    /// A `ForEach`: runs its body's graph once per item ([`Control::nests`] has the body).
    ForEach,
    /// A `Loop`: runs its body's graph once per iteration.
    Loop,
    /// A sub-workflow step: runs another workflow's graph.
    Workflow,
}

impl NodeKind {
    /// A short lowercase name: `operation`, `decision`, `gate`, `signal`, `delay`, `cancel`,
    /// `terminate`, `foreach`, `loop`, `workflow`.
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeKind::Operation => "operation",
            NodeKind::Decision => "decision",
            NodeKind::Gate => "gate",
            NodeKind::Signal => "signal",
            NodeKind::Delay => "delay",
            NodeKind::Cancel => "cancel",
            NodeKind::Terminate => "terminate",
            NodeKind::ForEach => "foreach",
            NodeKind::Loop => "loop",
            NodeKind::Workflow => "workflow",
        }
    }
}

/// One edge of a [`Graph`]: `to` may not start before `from` has settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Edge {
    /// The node the edge leaves.
    pub from: u32,
    /// The node the edge enters.
    pub to: u32,
    /// Why the edge exists.
    pub kind: EdgeKind,
}

impl Edge {
    /// Builds an edge record. For the code `workflow!` generates: not a public API.
    #[doc(hidden)]
    pub const fn __new(from: u32, to: u32, kind: EdgeKind) -> Self {
        Edge { from, to, kind }
    }
}

/// Why an [`Edge`] exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EdgeKind {
    /// Order of a `Sequential` block.
    Sequence,
    /// The target reads the source's output.
    Data,
    /// An explicit `after = [..]`.
    After,
    /// From a decision to the first steps of its `then` branch.
    Then,
    /// From a decision to the first steps of its `else` branch.
    Else,
}

impl EdgeKind {
    /// A short lowercase name: `sequence`, `data`, `after`, `then`, `else`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Sequence => "sequence",
            EdgeKind::Data => "data",
            EdgeKind::After => "after",
            EdgeKind::Then => "then",
            EdgeKind::Else => "else",
        }
    }
}

/// The scheduling tables of a graph, generated by the macro.
///
/// Successor lists are stored compressed: the successors of node `i` are
/// `succ[succ_start[i]..succ_start[i + 1]]`. Each successor entry carries flags (see
/// [`Plan::DATA`], [`Plan::CAUGHT`]). A node becomes decidable when its count of settled
/// predecessors reaches `pred_count[i]`: one counter decrement per edge, no traversal.
///
/// A *join* stands for a complete bipartite set of ordering edges (every exit of one
/// `Sequential` step to every entry of the next): its sources list the join (an entry with
/// [`Plan::JOIN`]) instead of each target, and the join lists the targets. `p` sources and `s`
/// targets then cost `p + s` entries instead of `p * s`. A join has no status and no events; it
/// fires when all its sources have settled, passing on the first failure that reached it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Number of incoming edges of each node.
    pub pred_count: &'static [u32],
    /// Offsets into `succ`, one more than there are nodes.
    pub succ_start: &'static [u32],
    /// Successor node ids, with the flag bits of [`Plan::DATA`] and [`Plan::CAUGHT`].
    pub succ: &'static [u32],
    /// Nodes with no predecessor.
    pub roots: &'static [u32],
    /// Number of sources of each join.
    pub join_pred_count: &'static [u32],
    /// Offsets into `join_succ`, one more than there are joins.
    pub join_succ_start: &'static [u32],
    /// The targets of each join (node ids, without flags).
    pub join_succ: &'static [u32],
    /// For each decision node, the nodes of its `then` branch (all depths); empty otherwise.
    /// One entry per node, or none at all when the workflow has no decision.
    pub then_nodes: &'static [&'static [u32]],
    /// For each decision node, the nodes of its `else` branch (all depths); empty otherwise.
    /// One entry per node, or none at all when the workflow has no decision.
    pub else_nodes: &'static [&'static [u32]],
    /// Concurrency limits of `Parallel(max_concurrency = N)` blocks, one per limited block.
    pub group_limits: &'static [u32],
    /// For each node, the limited blocks it sits in.
    pub node_groups: &'static [&'static [u32]],
    /// The resilience settings written at each step (empty when no step sets any).
    pub policies: &'static [NodePolicy],
    /// The workflow's failure policy, unless a run overrides it.
    pub failure: FailurePolicy,
    /// The tables of races, joins of k of n, trigger rules, cancel scopes, critical sections
    /// and signals: [`Control::NONE`] for a workflow that uses none of them, which then pays
    /// nothing for them.
    pub control: &'static Control,
}

impl Plan {
    /// Flag bit on a successor entry: the edge carries data, so a skipped source skips the target.
    pub const DATA: u32 = 1 << 31;
    /// Flag bit on a successor entry: the target is a decision whose test names the source, so
    /// a failure of the source is caught instead of aborting the target.
    pub const CAUGHT: u32 = 1 << 30;
    /// Flag bit on a successor entry: the entry is a join id, not a node id.
    pub const JOIN: u32 = 1 << 29;
    /// Flag bit on a successor entry: the entry is an arm id of [`Control::arms`], not a node
    /// id. The source is an exit of that arm; the arm's gate counts it.
    pub const GATE: u32 = 1 << 28;
    /// Flag bit on a successor entry: the edge orders only. The target waits for the source to
    /// settle but inherits nothing from it: no failure, no skip, no withdrawal (a read after a
    /// gate, which has already judged its arms).
    pub const SOFT: u32 = 1 << 27;
    /// Mask of the node (or join, or arm) id in a successor entry.
    pub const NODE: u32 = !(Self::DATA | Self::CAUGHT | Self::JOIN | Self::GATE | Self::SOFT);
    /// The plan of a workflow, from its tables (see the fields for what each holds).
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        pred_count: &'static [u32],
        succ_start: &'static [u32],
        succ: &'static [u32],
        roots: &'static [u32],
        join_pred_count: &'static [u32],
        join_succ_start: &'static [u32],
        join_succ: &'static [u32],
        then_nodes: &'static [&'static [u32]],
        else_nodes: &'static [&'static [u32]],
        group_limits: &'static [u32],
        node_groups: &'static [&'static [u32]],
        policies: &'static [NodePolicy],
        failure: FailurePolicy,
    ) -> Self {
        Plan {
            pred_count,
            succ_start,
            succ,
            roots,
            join_pred_count,
            join_succ_start,
            join_succ,
            then_nodes,
            else_nodes,
            group_limits,
            node_groups,
            policies,
            failure,
            control: &Control::NONE,
        }
    }

    /// The same plan with control tables (races, trigger rules, …).
    pub const fn with_control(self, control: &'static Control) -> Self {
        Plan { control, ..self }
    }

    /// A plan with no nodes.
    pub const EMPTY: Plan = Plan {
        pred_count: &[],
        succ_start: &[0],
        succ: &[],
        roots: &[],
        join_pred_count: &[],
        join_succ_start: &[0],
        join_succ: &[],
        then_nodes: &[],
        else_nodes: &[],
        group_limits: &[],
        node_groups: &[],
        policies: &[],
        failure: FailurePolicy::ContinueIndependent,
        control: &Control::NONE,
    };

    pub(crate) fn successors(&self, node: usize) -> &'static [u32] {
        let start = self.succ_start[node] as usize;
        let end = self.succ_start[node + 1] as usize;
        &self.succ[start..end]
    }

    /// The targets of join `join`.
    pub(crate) fn join_targets(&self, join: usize) -> &'static [u32] {
        let start = self.join_succ_start[join] as usize;
        let end = self.join_succ_start[join + 1] as usize;
        &self.join_succ[start..end]
    }

    /// Calls `f` with every node that node `node` reaches in one step (through its joins too,
    /// and through an arm to its gate's node) and whether the edge is [`Plan::CAUGHT`]. A
    /// [`Plan::SOFT`] edge passes nothing on and is left out.
    pub(crate) fn for_each_target(&self, node: usize, mut f: impl FnMut(usize, bool)) {
        for &entry in self.successors(node) {
            let id = (entry & Self::NODE) as usize;
            if entry & Self::JOIN != 0 {
                self.join_targets(id)
                    .iter()
                    .for_each(|&t| f(t as usize, false));
            } else if entry & Self::GATE != 0 {
                let gate = self.control.arms[id].gate;
                f(self.control.gates[gate as usize].node as usize, false);
            } else if entry & Self::SOFT != 0 {
                continue;
            } else {
                f(id, entry & Self::CAUGHT != 0);
            }
        }
    }

    pub(crate) fn policy(&self, node: usize) -> NodePolicy {
        self.policies.get(node).copied().unwrap_or(NodePolicy::NONE)
    }
}

/// The control tables of a [`Plan`]: what a workflow needs beyond joins that wait for all
/// their inputs and choices made by a test. Every table is empty in [`Control::NONE`].
///
/// Node ids index `rules`, `instants` and `node_sections` when they are not empty.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Control {
    /// Lists of node ids withdrawn together: a gate's arms, a block a `Cancel` targets, a
    /// critical section's nodes. Each list is sorted.
    pub scopes: &'static [&'static [u32]],
    /// The gates (`Race`, `Pick`, `Parallel(min = k)`), in the order of their nodes.
    pub gates: &'static [Gate],
    /// The arms of all gates: a gate's arms are `arms[first_arm..first_arm + arms]`.
    pub arms: &'static [Arm],
    /// The trigger rule of each node (empty when every node has the default rule).
    pub rules: &'static [Rule],
    /// What each node does when it starts, if it is a `Cancel` or `Terminate` step (empty when
    /// the workflow has neither).
    pub instants: &'static [Instant],
    /// The critical sections (`exclusive = "group"`).
    pub sections: &'static [Section],
    /// For each node, the sections it belongs to (empty when there are none).
    pub node_sections: &'static [&'static [u32]],
    /// The `Signal` steps, in node order: the signal each waits for.
    pub signals: &'static [SignalInfo],
    /// The nest nodes (`ForEach`, `Loop`, sub-workflow steps), in node order, each with its
    /// body's graph.
    pub nests: &'static [NestInfo],
}

impl Control {
    /// No control tables: a plain workflow.
    pub const NONE: Control = Control {
        scopes: &[],
        gates: &[],
        arms: &[],
        rules: &[],
        instants: &[],
        sections: &[],
        node_sections: &[],
        signals: &[],
        nests: &[],
    };

    /// Control tables, for the code `workflow!` generates.
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        scopes: &'static [&'static [u32]],
        gates: &'static [Gate],
        arms: &'static [Arm],
        rules: &'static [Rule],
        instants: &'static [Instant],
        sections: &'static [Section],
        node_sections: &'static [&'static [u32]],
        signals: &'static [SignalInfo],
    ) -> Self {
        Control {
            scopes,
            gates,
            arms,
            rules,
            instants,
            sections,
            node_sections,
            signals,
            nests: &[],
        }
    }

    /// These tables with the nest nodes `nests`.
    pub const fn with_nests(self, nests: &'static [NestInfo]) -> Self {
        Control { nests, ..self }
    }

    /// The nest node `node`, if it is one.
    pub fn nest(&self, node: u32) -> Option<&'static NestInfo> {
        let nests: &'static [NestInfo] = self.nests;
        nests
            .binary_search_by_key(&node, |n| n.node)
            .ok()
            .map(|i| &nests[i])
    }
}

/// A nest node: a `ForEach`, a `Loop` or a sub-workflow step, and the graph it runs.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct NestInfo {
    /// The nest node.
    pub node: u32,
    /// What kind of nest it is.
    pub kind: crate::path::NestKind,
    /// The graph of its body (of the child workflow, for a sub-workflow step).
    pub body: &'static Graph,
}

/// A gate: the node of a `Race`, `Pick` or `Parallel(min = k)` block, which completes when
/// `min` of its arms completed.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    /// The gate's own node (kind [`NodeKind::Gate`]).
    pub node: u32,
    /// How many arms must complete.
    pub min: u32,
    /// What happens to the arms still running when the gate fires.
    pub rest: Rest,
    /// The gate's first arm in [`Control::arms`].
    pub first_arm: u32,
    /// How many arms it has.
    pub arms: u32,
}

/// One arm of a gate: a child of the block.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Arm {
    /// The gate, an index into [`Control::gates`].
    pub gate: u32,
    /// How many exit nodes the arm has (successor entries with [`Plan::GATE`] naming it).
    pub exits: u32,
    /// The arm's nodes, an index into [`Control::scopes`].
    pub scope: u32,
}

/// What a gate does with the arms still running when it fires.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    /// Withdraw them.
    Cancel,
    /// Let them run on; the join ignores them.
    Run,
}

/// A node's trigger rule: when it runs, given how its inputs ended.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Run when every input completed or was skipped; abort when a failure reached it.
    Default,
    /// Run once every input settled, whatever its status.
    AllDone,
    /// Run once every input settled, if some input failed or was aborted; skip otherwise.
    OneFailed,
}

/// What a node does the moment it starts, beyond running its leaf.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instant {
    /// Nothing: an ordinary node.
    None,
    /// Withdraw the nodes of scope `scope` that have not ended.
    Cancel {
        /// An index into [`Control::scopes`].
        scope: u32,
    },
    /// End the run successfully, withdrawing every node that has not ended.
    Terminate,
    /// Complete the `ForEach` `node` with the outputs of the instances that completed,
    /// withdrawing the rest (`Complete(name)`).
    Complete {
        /// The `ForEach`'s node.
        node: u32,
    },
}

/// A critical section: a step or block that holds its exclusion group while it runs.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// The exclusion group: sections of one group never run at the same time.
    pub group: u32,
    /// The group's name (`exclusive = "ledger"`): a section of a nest's body and one of the
    /// run holding the nest exclude each other by it.
    pub name: &'static str,
    /// The section's nodes, an index into [`Control::scopes`].
    pub scope: u32,
}

/// A `Signal` step: the signal it waits for.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct SignalInfo {
    /// The step's node.
    pub node: u32,
    /// The signal's name, as written in the workflow.
    pub name: &'static str,
    /// A transient signal is lost when no step waits for it; others are kept until one does.
    pub transient: bool,
    /// The payload's type.
    pub payload: fn() -> std::any::TypeId,
}

impl SignalInfo {
    /// A row of [`Control::signals`], for the code `workflow!` generates.
    pub const fn new(
        node: u32,
        name: &'static str,
        transient: bool,
        payload: fn() -> std::any::TypeId,
    ) -> Self {
        SignalInfo {
            node,
            name,
            transient,
            payload,
        }
    }
}

impl Graph {
    /// Whether this graph (a nest's body) may run in any process: none of its steps, nor of
    /// the bodies nested in it, waits for a signal of the run, starts a child workflow, or
    /// is a `Cancel`, `Complete` (a [`NodeKind::Cancel`] node) or `Terminate` step (which may
    /// reach outside the instance). A distributed run executes the instances of such a nest
    /// as tasks.
    #[cfg(feature = "durable")]
    pub(crate) fn runs_anywhere(&self) -> bool {
        self.nodes
            .iter()
            .enumerate()
            .all(|(at, node)| match node.kind {
                NodeKind::Operation | NodeKind::Decision | NodeKind::Gate | NodeKind::Delay => true,
                NodeKind::ForEach | NodeKind::Loop => self
                    .plan
                    .control
                    .nest(at as u32)
                    .is_some_and(|nest| nest.body.runs_anywhere()),
                NodeKind::Signal | NodeKind::Cancel | NodeKind::Terminate | NodeKind::Workflow => {
                    false
                }
            })
    }

    /// Builds a graph. For the code `workflow!` generates: not a public API.
    #[doc(hidden)]
    pub const fn __new(
        name: &'static str,
        nodes: &'static [NodeInfo],
        edges: &'static [Edge],
        plan: Plan,
    ) -> Self {
        Graph {
            name,
            nodes,
            edges,
            plan,
            compensations: &[],
        }
    }

    /// Adds the calls of the steps' `compensate = ..` options: (node, the call as written).
    /// For the code `workflow!` generates: not a public API.
    #[doc(hidden)]
    pub const fn __with_compensations(self, compensations: &'static [(u32, &'static str)]) -> Self {
        Graph {
            compensations,
            ..self
        }
    }

    /// The call that undoes node `node` (`compensate = refund(&charge)`, as written), if it
    /// has one.
    pub fn compensation(&self, node: usize) -> Option<&'static str> {
        self.compensations
            .iter()
            .find(|&&(n, _)| n as usize == node)
            .map(|&(_, call)| call)
    }

    /// The workflow's name, as written in `workflow!`.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The nodes, indexed by node id: one per `Operation`, one decision per `Conditional`, in
    /// an order where every edge goes from a lower id to a higher one.
    pub const fn nodes(&self) -> &'static [NodeInfo] {
        self.nodes
    }

    /// The edges between nodes, each with the reason it exists.
    pub const fn edges(&self) -> &'static [Edge] {
        self.edges
    }

    /// The scheduling tables. For tests of the runtime: not a public API.
    #[doc(hidden)]
    pub const fn __plan(&self) -> &Plan {
        &self.plan
    }

    /// The number of nodes.
    pub const fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes (a valid workflow always has at least one).
    pub const fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The id of the node called `name`, if there is one.
    pub fn node_id(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The graph in Graphviz DOT: operations as rounded boxes, decisions as diamonds, nodes
    /// inside a `Conditional` branch (which a run may skip) dashed, and each edge styled by its
    /// kind (data solid, sequence dashed, `after` dotted, branches labelled).
    pub fn to_dot(&self) -> String {
        self.render_dot(None)
    }

    /// The graph as a Mermaid flowchart (`flowchart TD`), which GitHub renders in Markdown, with
    /// the same conventions as [`Graph::to_dot`].
    pub fn to_mermaid(&self) -> String {
        self.render_mermaid(None)
    }

    /// Whether `node` sits inside a branch of some `Conditional`.
    pub fn in_branch(&self, node: usize) -> bool {
        let plan = &self.plan;
        plan.then_nodes
            .iter()
            .chain(plan.else_nodes)
            .any(|branch| branch.contains(&(node as u32)))
    }

    /// What a gate node waits for, for pictures: `first of 2`, `2 of 3, the rest run on`.
    fn gate_summary(&self, node: usize) -> Option<String> {
        let gate = self
            .plan
            .control
            .gates
            .iter()
            .find(|g| g.node as usize == node)?;
        let rest = match gate.rest {
            Rest::Cancel => "",
            Rest::Run => ", the rest run on",
        };
        Some(match gate.min {
            1 => format!("first of {}{rest}", gate.arms),
            min => format!("{min} of {}{rest}", gate.arms),
        })
    }

    /// Whether `node` sits in an arm of a gate (a race, a pick or a join of k of n).
    fn in_arm(&self, node: usize) -> bool {
        let control = self.plan.control;
        control.arms.iter().any(|arm| {
            control
                .scopes
                .get(arm.scope as usize)
                .is_some_and(|scope| scope.contains(&(node as u32)))
        })
    }

    /// DOT, with each node filled by its status when `statuses` is given.
    pub(crate) fn render_dot(&self, statuses: Option<&[crate::status::NodeStatus]>) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph {} {{", quote_dot(self.name));
        out.push_str("    rankdir=TB;\n    node [fontname=\"Helvetica\", fontsize=11];\n    edge [fontname=\"Helvetica\", fontsize=9];\n");
        self.dot_body(
            &mut out,
            "n",
            "    ",
            statuses,
            &mut vec![self as *const Graph],
        );
        out.push_str("}\n");
        out
    }

    /// The nodes and edges of this graph in DOT, ids prefixed by `prefix`, each line indented
    /// by `indent`; each nest node's body follows as a cluster, tied to the node by a dotted
    /// edge. `open` holds the graphs being drawn: a body that is one of them (a workflow that
    /// runs itself) is not drawn again.
    fn dot_body(
        &self,
        out: &mut String,
        prefix: &str,
        indent: &str,
        statuses: Option<&[crate::status::NodeStatus]>,
        open: &mut Vec<*const Graph>,
    ) {
        for (id, node) in self.nodes.iter().enumerate() {
            let shape = match node.kind {
                NodeKind::Decision => "diamond",
                NodeKind::Gate => "invtrapezium",
                NodeKind::Signal | NodeKind::Delay => "cds",
                NodeKind::Cancel | NodeKind::Terminate => "octagon",
                NodeKind::ForEach | NodeKind::Loop | NodeKind::Workflow => "box3d",
                NodeKind::Operation => "box",
            };
            let mut style = vec![];
            if node.kind == NodeKind::Operation {
                style.push("rounded");
            }
            if self.in_branch(id) || self.in_arm(id) {
                style.push("dashed");
            }
            let status = statuses.and_then(|s| s.get(id)).copied();
            let fill = status.map(status_color);
            if fill.is_some() {
                style.push("filled");
            }
            let what = match self.gate_summary(id) {
                Some(summary) => format!("{}: {summary}", node.label),
                None => node.label.to_string(),
            };
            let label = match status {
                Some(status) => format!("{}\n{what}\n[{status}]", node.name),
                None => format!("{}\n{what}", node.name),
            };
            let _ = write!(
                out,
                "{indent}{prefix}{id} [label={}, shape={shape}",
                quote_dot(&label)
            );
            if !style.is_empty() {
                let _ = write!(out, ", style=\"{}\"", style.join(","));
            }
            if let Some(fill) = fill {
                let _ = write!(out, ", fillcolor=\"{fill}\"");
            }
            out.push_str("];\n");
        }
        for edge in self.edges {
            let style = match edge.kind {
                EdgeKind::Data => "",
                EdgeKind::Sequence => " [style=dashed]",
                EdgeKind::After => " [style=dotted, label=\"after\"]",
                EdgeKind::Then => " [label=\"then\"]",
                EdgeKind::Else => " [label=\"else\"]",
            };
            let _ = writeln!(
                out,
                "{indent}{prefix}{} -> {prefix}{}{style};",
                edge.from, edge.to
            );
        }
        for nest in self.plan.control.nests {
            let body = nest.body;
            if open.contains(&(body as *const Graph)) {
                continue;
            }
            let inner = format!("{prefix}{}_", nest.node);
            let _ = writeln!(out, "{indent}subgraph cluster_{inner}body {{");
            let _ = writeln!(
                out,
                "{indent}    label={}; style=\"rounded,dashed\"; fontname=\"Helvetica\"; fontsize=10;",
                quote_dot(&nest_title(self, nest))
            );
            open.push(body);
            body.dot_body(out, &inner, &format!("{indent}    "), None, open);
            open.pop();
            let _ = writeln!(out, "{indent}}}");
            for &root in body.plan.roots {
                let _ = writeln!(
                    out,
                    "{indent}{prefix}{} -> {inner}{root} [style=dotted, arrowhead=odot];",
                    nest.node
                );
            }
        }
    }

    /// Mermaid, with a class per status when `statuses` is given.
    pub(crate) fn render_mermaid(&self, statuses: Option<&[crate::status::NodeStatus]>) -> String {
        let mut out = String::from("flowchart TD\n");
        let mut branch = Vec::new();
        self.mermaid_body(
            &mut out,
            "n",
            "    ",
            &mut branch,
            &mut vec![self as *const Graph],
        );
        if !branch.is_empty() {
            out.push_str("    classDef branch stroke-dasharray: 5 5\n");
            let _ = writeln!(out, "    class {} branch", branch.join(","));
        }
        if let Some(statuses) = statuses {
            for status in [
                crate::status::NodeStatus::Completed,
                crate::status::NodeStatus::Failed,
                crate::status::NodeStatus::Aborted,
                crate::status::NodeStatus::Skipped,
                crate::status::NodeStatus::Withdrawn,
            ] {
                let members: Vec<String> = statuses
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| **s == status)
                    .map(|(id, _)| format!("n{id}"))
                    .collect();
                if members.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "    classDef {status} fill:{}", status_color(status));
                let _ = writeln!(out, "    class {} {status}", members.join(","));
            }
        }
        out
    }

    /// The nodes and edges of this graph in Mermaid (see [`Graph::dot_body`]); each nest
    /// node's body follows as a subgraph the node points to. Nodes in a branch or an arm are
    /// added to `branch`.
    fn mermaid_body(
        &self,
        out: &mut String,
        prefix: &str,
        indent: &str,
        branch: &mut Vec<String>,
        open: &mut Vec<*const Graph>,
    ) {
        for (id, node) in self.nodes.iter().enumerate() {
            let text = match self.gate_summary(id) {
                Some(summary) => quote_mermaid(&format!("{}: {summary}", node.name)),
                None => quote_mermaid(node.name),
            };
            let _ = match node.kind {
                NodeKind::Decision => writeln!(out, "{indent}{prefix}{id}{{{{{text}}}}}"),
                NodeKind::Gate => writeln!(out, "{indent}{prefix}{id}[/{text}\\]"),
                NodeKind::Signal | NodeKind::Delay => writeln!(out, "{indent}{prefix}{id}>{text}]"),
                NodeKind::Cancel | NodeKind::Terminate => {
                    writeln!(out, "{indent}{prefix}{id}{{{{{text}}}}}")
                }
                NodeKind::ForEach | NodeKind::Loop | NodeKind::Workflow => {
                    writeln!(out, "{indent}{prefix}{id}[[{text}]]")
                }
                NodeKind::Operation => writeln!(out, "{indent}{prefix}{id}([{text}])"),
            };
        }
        for edge in self.edges {
            let arrow = match edge.kind {
                EdgeKind::Data => "-->".to_string(),
                EdgeKind::Sequence => "-.->".to_string(),
                kind @ (EdgeKind::After | EdgeKind::Then | EdgeKind::Else) => {
                    format!("-->|{}|", kind.as_str())
                }
            };
            let _ = writeln!(
                out,
                "{indent}{prefix}{} {arrow} {prefix}{}",
                edge.from, edge.to
            );
        }
        branch.extend(
            (0..self.nodes.len())
                .filter(|&id| self.in_branch(id) || self.in_arm(id))
                .map(|id| format!("{prefix}{id}")),
        );
        for nest in self.plan.control.nests {
            let body = nest.body;
            if open.contains(&(body as *const Graph)) {
                continue;
            }
            let inner = format!("{prefix}{}_", nest.node);
            let _ = writeln!(
                out,
                "{indent}subgraph {inner}body[{}]",
                quote_mermaid(&nest_title(self, nest))
            );
            open.push(body);
            body.mermaid_body(out, &inner, &format!("{indent}    "), branch, open);
            open.pop();
            let _ = writeln!(out, "{indent}end");
            let _ = writeln!(out, "{indent}{prefix}{} -.-> {inner}body", nest.node);
        }
    }
}

/// The title of a nest node's body in pictures: `charge: ForEach of ChargeLine`, or
/// `charge: ForEach` when the body is named after its node (as `workflow!` names bodies:
/// `charge`, or `foreach_1` for the unnamed `foreach#1`).
fn nest_title(graph: &Graph, nest: &NestInfo) -> String {
    let name = graph.nodes.get(nest.node as usize).map_or("?", |n| n.name);
    let kind = match nest.kind {
        crate::path::NestKind::ForEach => "ForEach",
        crate::path::NestKind::Loop => "Loop",
        crate::path::NestKind::Workflow => "Workflow",
    };
    let body = nest.body.name;
    let own = body.len() == name.len()
        && body
            .bytes()
            .zip(name.bytes())
            .all(|(b, n)| b == n || (b, n) == (b'_', b'#'));
    match own {
        true => format!("{name}: {kind}"),
        false => format!("{name}: {kind} of {body}"),
    }
}

/// The fill colour of a status in pictures.
pub(crate) fn status_color(status: crate::status::NodeStatus) -> &'static str {
    use crate::status::NodeStatus::*;
    match status {
        Completed => "#b7e4c7",
        Failed => "#f4a6a6",
        Aborted => "#f9d29d",
        Skipped => "#e0e0e0",
        Withdrawn => "#d9c8f0",
        Running | Ready => "#a9d6f5",
        Idle | Waiting => "#ffffff",
    }
}

impl fmt::Display for Graph {
    /// One line per node with its kind and its predecessors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "workflow {} ({} nodes)", self.name, self.nodes.len())?;
        for (id, node) in self.nodes.iter().enumerate() {
            let kind = node.kind.as_str();
            write!(f, "  {id:>3} {} [{kind}] {}", node.name, node.label)?;
            let mut preds = self.edges.iter().filter(|e| e.to as usize == id).peekable();
            if preds.peek().is_some() {
                f.write_str("  <- ")?;
                for (i, e) in preds.enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    let from = self.nodes.get(e.from as usize).map_or("?", |n| n.name);
                    write!(f, "{from} ({})", e.kind.as_str())?;
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

fn quote_dot(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn quote_mermaid(text: &str) -> String {
    let escaped: String = text
        .chars()
        .map(|c| match c {
            '"' => '\''.to_string(),
            '#' => "#35;".to_string(),
            c => c.to_string(),
        })
        .collect();
    format!("\"{escaped}\"")
}
