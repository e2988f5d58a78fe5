//! A reference model of flow's run semantics, and property tests that compare the real
//! scheduler with it on random workflows, below the macro.
//!
//! A random workflow is generated as a tree of `Sequential`, `Parallel`, `Conditional` and
//! `Operation` steps, compiled to a [`Graph`] the way `workflow!` compiles it, and run by
//! [`flowdag_runtime::__private::execute_nodes`] on tokio's paused clock with a hand-written [`Nodes`] set that logs
//! every start, end and decision. The model walks the same nodes in topological order and
//! applies the rules of the design one node at a time; the two must agree on every status, on
//! the run's result, on the failures it lists and on the causes of aborts.
//!
//! Any operation may carry a trigger rule (`when = all_done | one_failed`): it runs after its
//! inputs settle whatever their status (`one_failed` only if a failure reached it, else it is
//! skipped), and when it completes it passes on the failure it carried. Reads by such a step,
//! and of a `one_failed` step, are optional.
//!
//! Workflows with gates (`Race`, `Parallel(min = k, rest = ..)`) are generated apart, with gates
//! at the top of the workflow, some followed by a step with a rule: which arms win depends on
//! timing, so the model takes the winners the run logged and checks that they could win, that
//! a gate fires exactly when `min` of its arms can complete (an arm whose exit carries a
//! failure cannot), and that only the arms a gate withdraws hold withdrawn nodes. A node read
//! from outside its arm is read as the macro reads it: the reader waits for it and inherits
//! nothing, so a withdrawn input counts as ended and is no failure.
//!
//! Any leaf of a random workflow may instead be a nest node: a `ForEach` (iterator or stream,
//! `fail_fast` or `collect`, a limit, `min` with `rest = cancel | run`) or a `Loop` (`until` or
//! `while`, `max`, `on_max`) over instances that fail at random, driven by the real drivers in
//! the run's task. The model decides its fate with the reference model of nests
//! (`nest_model/mod.rs`): it completes or fails as that model says, and then behaves as an
//! operation that did; the run's `NestReport` of it must count the instances that model
//! counts.
//!
//! Each property runs 1,000 random workflows; `FLOW_MODEL_CASES` sets another number, for a
//! long hunt (`FLOW_MODEL_CASES=200000 cargo test -p flowdag-runtime --release --test model`)
//! or a quick look.

mod nest_model;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use flowdag_runtime::__private::{
    Arm, Control, Gate, Leaf, NestCtx, NestInfo, NestKind, Nodes, Plan, Rest, Rule, RunSetup,
    RunState, Slot, execute_nodes, unreachable_run,
};
use flowdag_runtime::NodeStatus::{Aborted, Completed, Failed, Skipped, Withdrawn};
use flowdag_runtime::{
    Edge, EdgeKind, FailurePolicy, Graph, NodeError, NodeInfo, NodeKind, NodeStatus, Outcome,
    Runner, Workflow,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// Workflows as structure
// ---------------------------------------------------------------------------------------------

/// What an operation does when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Ok,
    Err,
    Panic,
    /// Sleeps this many milliseconds, then succeeds.
    SlowOk(u64),
    /// Sleeps this many milliseconds, then fails.
    SlowErr(u64),
}

impl Behaviour {
    fn succeeds(self) -> bool {
        matches!(self, Behaviour::Ok | Behaviour::SlowOk(_))
    }
}

/// A decision's test over the nodes it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    /// Every named node is `Ok` (true when it names none).
    AllOk,
    /// Some named node is `Err` (false when it names none).
    AnyErr,
    Const(bool),
}

/// A reference to an earlier node: an index into the valid choices (random workflows), or
/// into those of them that sit in a gate's arm (the choices when none does), or a node id that
/// must be one of them (hand-built workflows).
#[derive(Debug, Clone, Copy)]
enum Ref {
    Pick(u16),
    InArm(u16),
    Node(usize),
}

#[derive(Debug, Clone)]
enum Step {
    Op {
        behaviour: Behaviour,
        /// `when = ..`: `Rule::Default` for an ordinary step.
        rule: Rule,
        /// `after = [..]`: operations that come earlier in node order.
        after: Vec<Ref>,
        /// Outputs read: operations that are ancestors over order edges.
        reads: Vec<Ref>,
    },
    Seq(Vec<Step>),
    Par {
        max_concurrency: Option<u32>,
        steps: Vec<Step>,
    },
    Cond {
        test: Test,
        /// The operations the test names: ancestors over order edges.
        names: Vec<Ref>,
        then: Vec<Step>,
        otherwise: Option<Vec<Step>>,
    },
    /// A `ForEach` or a `Loop` over instances of a one-operation body, reading earlier
    /// operations as an operation does.
    Nest {
        case: NestCase,
        reads: Vec<Ref>,
    },
    /// `Parallel(min = k, rest = ..)` (a `Race` is `min = 1`, `rest = cancel`): each step is an
    /// arm. Generated only at the top of a workflow, with arms that hold no gate.
    Gate {
        min: u32,
        rest_run: bool,
        max_concurrency: Option<u32>,
        arms: Vec<Step>,
    },
}

/// What a nest node runs: a case of the nest model, whose stop never comes.
#[derive(Debug, Clone)]
enum NestCase {
    Each(nest_model::EachCase),
    Loop(nest_model::LoopCase),
}

impl NestCase {
    /// What the nest model says the node ends with.
    fn seen(&self) -> nest_model::Seen {
        match self {
            NestCase::Each(case) => nest_model::model_each(case),
            NestCase::Loop(case) => nest_model::model_loop(case),
        }
    }

    fn kind(&self) -> (NodeKind, NestKind) {
        match self {
            NestCase::Each(_) => (NodeKind::ForEach, NestKind::ForEach),
            NestCase::Loop(_) => (NodeKind::Loop, NestKind::Loop),
        }
    }

    /// The instances `(started, completed, failed, withdrawn)` the nest model counts.
    fn counts(&self) -> [u64; 4] {
        let seen = self.seen();
        [
            seen.started.len() as u64,
            seen.completed,
            seen.failed.len() as u64,
            seen.withdrawn,
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// Structure -> DAG, as the macro builds it
// ---------------------------------------------------------------------------------------------

/// Why an edge exists (as in the macro's `graph::edge`).
const SEQUENCE: u8 = 1;
const DATA: u8 = 2;
const AFTER: u8 = 4;
const THEN: u8 = 8;
const ELSE: u8 = 16;
/// A read that sees `Option<&T>`: by a node with a trigger rule, or of a `one_failed` node. It
/// orders, and passes on failures, but never skips the reader.
const OPTIONAL: u8 = 32;
/// From an exit of a gate's arm to the gate's node (as in the macro's `graph::edge`).
const GATED: u8 = 64;
/// A read, from outside a gate's arm, of a node in it: the reader waits for the source to
/// settle and inherits nothing from it (as the macro's `SOFT_READ`).
const SOFT: u8 = 128;

#[derive(Debug, Clone)]
struct Node {
    kind: NodeKind,
    behaviour: Behaviour,
    test: Test,
    /// The outputs an operation reads, or the nodes a decision's test names.
    reads: Vec<usize>,
    /// The reads that are not optional: they must be there when the node starts.
    required: Vec<usize>,
    /// The trigger rule of an operation (`Rule::Default` for a decision).
    rule: Rule,
    /// Enclosing branches, outermost first: (decision, is the `then` branch).
    branches: Vec<(usize, bool)>,
    /// Limited `Parallel` blocks the node sits in (operations only).
    groups: Vec<usize>,
    then_nodes: Vec<usize>,
    else_nodes: Vec<usize>,
    /// The gate arm the node sits in: (gate, arm), indices into `Wf::gates`.
    arm: Option<(usize, usize)>,
    /// A nest node's case: the node is an operation to the model, whose behaviour is what the
    /// nest model says it ends with.
    nest: Option<NestCase>,
}

/// A gate block: its node, its rule, and each arm's nodes and exits.
#[derive(Debug, Clone)]
struct GateInfo {
    node: usize,
    min: u32,
    rest_run: bool,
    arms: Vec<(Vec<usize>, Vec<usize>)>,
}

/// A compiled workflow. Node ids are in source order, which is a topological order because
/// every `after` and every read points to an earlier node.
#[derive(Debug, Clone)]
struct Wf {
    nodes: Vec<Node>,
    edges: BTreeMap<(usize, usize), u8>,
    group_limits: Vec<u32>,
    gates: Vec<GateInfo>,
}

impl Wf {
    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn preds(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.edges
            .keys()
            .filter(move |&&(_, to)| to == node)
            .map(|&(from, _)| from)
    }

    /// The predecessors whose end `node` inherits: all but those it reads from outside their
    /// gate's arm (`SOFT`), which it only waits for.
    fn hard_preds(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.edges
            .iter()
            .filter(move |&(&(_, to), &why)| to == node && why & SOFT == 0)
            .map(|(&(from, _), _)| from)
    }

    fn is_sink(&self, node: usize) -> bool {
        !self.edges.keys().any(|&(from, _)| from == node)
    }

    /// Whether no decision's test names `node` or a node downstream of it, and no step with a
    /// trigger rule is downstream of it: nothing can catch a failure of `node` or must still
    /// run after it ("a failure no `Conditional` can catch", where `FailFast` stops).
    /// With `rules` false, only tests count.
    fn uncatchable(&self, rules: bool) -> Vec<bool> {
        let mut catchable = vec![false; self.len()];
        for node in (0..self.len()).rev() {
            catchable[node] = self.edges.keys().any(|&(from, to)| {
                from == node
                    && (self.catches(to, from)
                        || catchable[to]
                        || (rules && self.nodes[to].rule != Rule::Default))
            });
        }
        catchable.into_iter().map(|c| !c).collect()
    }

    /// Whether `node` is a decision whose test names `pred`.
    fn catches(&self, node: usize, pred: usize) -> bool {
        self.nodes[node].kind == NodeKind::Decision && self.nodes[node].reads.contains(&pred)
    }

    fn name(&self, node: usize) -> String {
        match self.nodes[node].kind {
            NodeKind::Operation => format!("n{node}"),
            NodeKind::Decision => format!("d{node}"),
            NodeKind::Gate => format!("g{node}"),
            _ => unreachable!("the model builds operations, decisions and gates only"),
        }
    }

    fn label(&self, node: usize) -> String {
        let n = &self.nodes[node];
        let names = n
            .reads
            .iter()
            .map(|&r| self.name(r))
            .collect::<Vec<_>>()
            .join(", ");
        match n.kind {
            NodeKind::Operation if n.nest.is_some() => {
                let what = match &n.nest {
                    Some(NestCase::Each(_)) => "for_each",
                    _ => "loop",
                };
                format!("{what}({names})")
            }
            NodeKind::Operation => {
                let what = match n.behaviour {
                    Behaviour::Ok => "ok".to_string(),
                    Behaviour::Err => "err".to_string(),
                    Behaviour::Panic => "panic".to_string(),
                    Behaviour::SlowOk(ms) => format!("slow_ok_{ms}ms"),
                    Behaviour::SlowErr(ms) => format!("slow_err_{ms}ms"),
                };
                let when = match n.rule {
                    Rule::AllDone => ", when = all_done",
                    Rule::OneFailed => ", when = one_failed",
                    _ => "",
                };
                format!("{what}({names}{when})")
            }
            NodeKind::Decision => match n.test {
                Test::AllOk => format!("all_ok({names})"),
                Test::AnyErr => format!("any_err({names})"),
                Test::Const(b) => format!("{b}"),
            },
            NodeKind::Gate => {
                let gate = self.gates.iter().find(|g| g.node == node);
                gate.map_or_else(String::new, |g| format!("gate({}/{})", g.min, g.arms.len()))
            }
            _ => unreachable!("the model builds operations, decisions and gates only"),
        }
    }
}

struct Builder {
    wf: Wf,
    branches: Vec<(usize, bool)>,
    groups: Vec<usize>,
    /// The arm being built, if any.
    arm: Option<(usize, usize)>,
    /// Per node: its `after` and its reads (or a test's names), resolved once every node exists.
    refs: Vec<(Vec<Ref>, Vec<Ref>)>,
}

fn compile(body: &[Step]) -> Wf {
    let mut b = Builder {
        wf: Wf {
            nodes: Vec::new(),
            edges: BTreeMap::new(),
            group_limits: Vec::new(),
            gates: Vec::new(),
        },
        branches: Vec::new(),
        groups: Vec::new(),
        arm: None,
        refs: Vec::new(),
    };
    b.sequence(body);
    b.resolve();
    b.wf
}

fn resolve_ref(r: Ref, candidates: &[usize], node: usize) -> Option<usize> {
    match r {
        Ref::Pick(_) | Ref::InArm(_) if candidates.is_empty() => None,
        Ref::Pick(p) | Ref::InArm(p) => Some(candidates[p as usize % candidates.len()]),
        Ref::Node(id) => {
            assert!(
                candidates.contains(&id),
                "hand-built workflow: node {node} cannot refer to node {id} (choices {candidates:?})"
            );
            Some(id)
        }
    }
}

impl Builder {
    fn add_edge(&mut self, from: usize, to: usize, why: u8) {
        assert!(from < to, "edges go from lower to higher ids");
        *self.wf.edges.entry((from, to)).or_insert(0) |= why;
    }

    fn push(
        &mut self,
        kind: NodeKind,
        behaviour: Behaviour,
        rule: Rule,
        test: Test,
        after: &[Ref],
        reads: &[Ref],
    ) -> usize {
        let groups = match kind {
            NodeKind::Operation => self.groups.clone(),
            NodeKind::Decision | NodeKind::Gate => Vec::new(),
            _ => unreachable!("the model builds operations, decisions and gates only"),
        };
        self.wf.nodes.push(Node {
            kind,
            behaviour,
            test,
            reads: Vec::new(),
            required: Vec::new(),
            rule,
            branches: self.branches.clone(),
            groups,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            arm: self.arm,
            nest: None,
        });
        self.refs.push((after.to_vec(), reads.to_vec()));
        self.wf.nodes.len() - 1
    }

    /// Steps in sequence: each step's entries depend on the previous step's exits.
    fn sequence(&mut self, steps: &[Step]) -> (Vec<usize>, Vec<usize>) {
        let mut entries = Vec::new();
        let mut exits: Vec<usize> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let (step_entries, step_exits) = self.step(step);
            for &from in &exits {
                for &to in &step_entries {
                    self.add_edge(from, to, SEQUENCE);
                }
            }
            if i == 0 {
                entries = step_entries;
            }
            exits = step_exits;
        }
        (entries, exits)
    }

    fn step(&mut self, step: &Step) -> (Vec<usize>, Vec<usize>) {
        match step {
            Step::Op {
                behaviour,
                rule,
                after,
                reads,
            } => {
                let id = self.push(
                    NodeKind::Operation,
                    *behaviour,
                    *rule,
                    Test::Const(false),
                    after,
                    reads,
                );
                (vec![id], vec![id])
            }
            Step::Nest { case, reads } => {
                let behaviour = match case.seen().status {
                    NodeStatus::Completed => Behaviour::Ok,
                    _ => Behaviour::Err,
                };
                let id = self.push(
                    NodeKind::Operation,
                    behaviour,
                    Rule::Default,
                    Test::Const(false),
                    &[],
                    reads,
                );
                self.wf.nodes[id].nest = Some(case.clone());
                (vec![id], vec![id])
            }
            Step::Seq(steps) => self.sequence(steps),
            Step::Par {
                max_concurrency,
                steps,
            } => {
                let depth = self.groups.len();
                if let Some(limit) = max_concurrency {
                    self.wf.group_limits.push(*limit);
                    self.groups.push(self.wf.group_limits.len() - 1);
                }
                let mut entries = Vec::new();
                let mut exits = Vec::new();
                for step in steps {
                    let (e, x) = self.step(step);
                    entries.extend(e);
                    exits.extend(x);
                }
                self.groups.truncate(depth);
                (entries, exits)
            }
            Step::Cond {
                test,
                names,
                then,
                otherwise,
            } => {
                let decision = self.push(
                    NodeKind::Decision,
                    Behaviour::Ok,
                    Rule::Default,
                    *test,
                    &[],
                    names,
                );
                let (then_entries, mut exits, then_nodes) = self.branch(decision, true, then);
                for to in then_entries {
                    self.add_edge(decision, to, THEN);
                }
                match otherwise {
                    Some(steps) => {
                        let (else_entries, else_exits, else_nodes) =
                            self.branch(decision, false, steps);
                        for to in else_entries {
                            self.add_edge(decision, to, ELSE);
                        }
                        exits.extend(else_exits);
                        self.wf.nodes[decision].else_nodes = else_nodes;
                    }
                    None => exits.push(decision),
                }
                self.wf.nodes[decision].then_nodes = then_nodes;
                (vec![decision], exits)
            }
            Step::Gate {
                min,
                rest_run,
                max_concurrency,
                arms,
            } => {
                assert!(
                    self.arm.is_none(),
                    "the model nests no gate in a gate's arm"
                );
                let depth = self.groups.len();
                if let Some(limit) = max_concurrency {
                    self.wf.group_limits.push(*limit);
                    self.groups.push(self.wf.group_limits.len() - 1);
                }
                let gate = self.wf.gates.len();
                self.wf.gates.push(GateInfo {
                    node: usize::MAX,
                    min: *min,
                    rest_run: *rest_run,
                    arms: Vec::new(),
                });
                let mut entries = Vec::new();
                for (a, arm) in arms.iter().enumerate() {
                    self.arm = Some((gate, a));
                    let first = self.wf.nodes.len();
                    let (e, x) = self.step(arm);
                    let last = self.wf.nodes.len();
                    self.arm = None;
                    entries.extend(e);
                    self.wf.gates[gate].arms.push(((first..last).collect(), x));
                }
                self.groups.truncate(depth);
                let node = self.push(
                    NodeKind::Gate,
                    Behaviour::Ok,
                    Rule::Default,
                    Test::Const(true),
                    &[],
                    &[],
                );
                self.wf.gates[gate].node = node;
                for (_, exits) in self.wf.gates[gate].arms.clone() {
                    for exit in exits {
                        self.add_edge(exit, node, GATED);
                    }
                }
                (entries, vec![node])
            }
        }
    }

    fn branch(
        &mut self,
        decision: usize,
        then: bool,
        steps: &[Step],
    ) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
        self.branches.push((decision, then));
        let first = self.wf.nodes.len();
        let (entries, exits) = self.sequence(steps);
        let last = self.wf.nodes.len();
        self.branches.pop();
        (entries, exits, (first..last).collect())
    }

    /// Adds `after` edges (to earlier operations), then data edges (to operations that are
    /// ancestors over sequence, branch and `after` edges), as the macro's validation does: a
    /// read by a step with a rule, or of a `one_failed` step, is optional. A decision names no
    /// `one_failed` step, and a step that waits for nothing has no rule (the macro rejects it).
    fn resolve(&mut self) {
        let n = self.wf.len();
        let ops: Vec<usize> = (0..n)
            .filter(|&i| self.wf.nodes[i].kind == NodeKind::Operation)
            .collect();
        // A node of a gate's arm may be withdrawn apart from a node outside that arm: the model
        // waits for it (`after`) only from inside, and reads it from outside as the macro does,
        // through an optional read that inherits nothing (`SOFT`).
        let arm_of: Vec<Option<(usize, usize)>> = self.wf.nodes.iter().map(|n| n.arm).collect();
        let visible =
            |source: usize, node: usize| arm_of[source].is_none() || arm_of[source] == arm_of[node];
        for node in 0..n {
            let earlier: Vec<usize> = ops
                .iter()
                .copied()
                .filter(|&op| op < node && visible(op, node))
                .collect();
            for r in self.refs[node].0.clone() {
                if let Some(from) = resolve_ref(r, &earlier, node) {
                    self.add_edge(from, node, AFTER);
                }
            }
        }
        // A step that waits for nothing has no rule (the macro rejects it).
        for node in 0..n {
            if self.wf.preds(node).next().is_none() {
                self.wf.nodes[node].rule = Rule::Default;
            }
        }
        let mut ancestors = vec![vec![false; n]; n];
        for node in 0..n {
            let preds: Vec<usize> = self.wf.preds(node).collect();
            for pred in preds {
                let inherited = ancestors[pred].clone();
                for (a, yes) in inherited.into_iter().enumerate() {
                    ancestors[node][a] |= yes;
                }
                ancestors[node][pred] = true;
            }
        }
        for (node, ancestors) in ancestors.iter().enumerate() {
            let decision = self.wf.nodes[node].kind == NodeKind::Decision;
            let candidates: Vec<usize> = ops
                .iter()
                .copied()
                .filter(|&op| ancestors[op])
                .filter(|&op| !decision || self.wf.nodes[op].rule != Rule::OneFailed)
                .collect();
            let mut reads = BTreeSet::new();
            let in_arms: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|&op| self.wf.nodes[op].arm.is_some())
                .collect();
            for r in self.refs[node].1.clone() {
                let choices = match r {
                    Ref::InArm(_) if !in_arms.is_empty() => &in_arms,
                    _ => &candidates,
                };
                if let Some(source) = resolve_ref(r, choices, node) {
                    reads.insert(source);
                }
            }
            let ruled = self.wf.nodes[node].rule != Rule::Default;
            let mut required = Vec::new();
            for &source in &reads {
                if !visible(source, node) {
                    self.add_edge(source, node, OPTIONAL | SOFT);
                } else if ruled || self.wf.nodes[source].rule == Rule::OneFailed {
                    self.add_edge(source, node, OPTIONAL);
                } else {
                    self.add_edge(source, node, DATA);
                    required.push(source);
                }
            }
            self.wf.nodes[node].reads = reads.into_iter().collect();
            self.wf.nodes[node].required = required;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DAG -> Graph, as the macro's `graph_const` writes it
// ---------------------------------------------------------------------------------------------

fn leak<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}

fn leak_str(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// The graph of `wf`, with its `Parallel` limits when `limits` is set.
fn graph(wf: &Wf, limits: bool) -> &'static Graph {
    let n = wf.len();
    let nodes = (0..n)
        .map(|i| {
            NodeInfo::__new(
                leak_str(wf.name(i)),
                wf.nodes[i]
                    .nest
                    .as_ref()
                    .map_or(wf.nodes[i].kind, |c| c.kind().0),
                leak_str(wf.label(i)),
                i as u32 + 1,
                1,
            )
        })
        .collect();
    let edges = wf
        .edges
        .iter()
        .map(|(&(from, to), &why)| {
            let kind = if why & THEN != 0 {
                EdgeKind::Then
            } else if why & ELSE != 0 {
                EdgeKind::Else
            } else if why & (DATA | OPTIONAL) != 0 {
                EdgeKind::Data
            } else if why & AFTER != 0 {
                EdgeKind::After
            } else {
                EdgeKind::Sequence
            };
            Edge::__new(from as u32, to as u32, kind)
        })
        .collect();
    // Half the workflows route ordering edges through joins, as the macro does for a
    // `Sequential` of `Parallel`s; here every target with two or more ordering predecessors
    // gets one (shared by targets with the same set), to exercise joins as often as possible.
    let use_joins = wf.edges.len().is_multiple_of(2);
    let caught = |to: usize, why: u8| {
        why & (DATA | OPTIONAL) != 0 && wf.nodes[to].kind == NodeKind::Decision
    };
    let ordering = |to: usize, why: u8| why & (SEQUENCE | AFTER) != 0 && !caught(to, why);
    let mut ordering_preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (&(from, to), &why) in &wf.edges {
        if use_joins && ordering(to, why) {
            ordering_preds[to].push(from as u32);
        }
    }
    let mut groups: BTreeMap<Vec<u32>, Vec<u32>> = BTreeMap::new();
    for (to, preds) in ordering_preds.into_iter().enumerate() {
        if preds.len() > 1 {
            groups.entry(preds).or_default().push(to as u32);
        }
    }
    let mut join_of = vec![None; n];
    let mut feeds: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut join_pred_count = Vec::new();
    let mut join_succ_start = Vec::new();
    let mut join_succ = Vec::new();
    for (join, (preds, targets)) in groups.iter().enumerate() {
        for &from in preds {
            feeds[from as usize].push(join as u32);
        }
        for &to in targets {
            join_of[to as usize] = Some(join);
        }
        join_pred_count.push(preds.len() as u32);
        join_succ_start.push(join_succ.len() as u32);
        join_succ.extend(targets);
    }
    join_succ_start.push(join_succ.len() as u32);
    // Each arm's id in `Control::arms`: the gates' arms in gate order.
    let mut arm_of_exit = vec![None; n];
    let mut arm_id = 0u32;
    for gate in &wf.gates {
        for (_, exits) in &gate.arms {
            for &exit in exits {
                arm_of_exit[exit] = Some(arm_id);
            }
            arm_id += 1;
        }
    }
    let mut pred_count = vec![0u32; n];
    let mut succ_start = Vec::with_capacity(n + 1);
    let mut succ = Vec::new();
    for (from, joins) in feeds.iter().enumerate() {
        succ_start.push(succ.len() as u32);
        succ.extend(joins.iter().map(|&join| join | Plan::JOIN));
        for (&(_, to), &why) in wf.edges.range((from, 0)..(from + 1, 0)) {
            if why & GATED != 0 {
                // The arm's entry to its gate; the gate's node counts its firing only.
                let arm = arm_of_exit[from].expect("a gated edge leaves an arm's exit");
                succ.push(arm | Plan::GATE);
                continue;
            }
            if join_of[to].is_some() && ordering(to, why) && why & DATA == 0 {
                continue;
            }
            pred_count[to] += 1;
            let mut entry = to as u32;
            if why & DATA != 0 {
                entry |= Plan::DATA;
            }
            if caught(to, why) {
                entry |= Plan::CAUGHT;
            }
            if why & SOFT != 0 {
                entry |= Plan::SOFT;
            }
            succ.push(entry);
        }
    }
    succ_start.push(succ.len() as u32);
    for (to, join) in join_of.iter().enumerate() {
        if join.is_some() {
            pred_count[to] += 1;
        }
    }
    for gate in &wf.gates {
        pred_count[gate.node] += 1;
    }
    let roots = (0..n)
        .filter(|&i| pred_count[i] == 0)
        .map(|i| i as u32)
        .collect();
    let lists = |select: fn(&Node) -> &Vec<usize>| -> &'static [&'static [u32]] {
        leak(
            wf.nodes
                .iter()
                .map(|node| leak(select(node).iter().map(|&m| m as u32).collect()))
                .collect(),
        )
    };
    let limited = limits && !wf.group_limits.is_empty();
    let plan = Plan {
        control: control(wf),
        pred_count: leak(pred_count),
        succ_start: leak(succ_start),
        succ: leak(succ),
        roots: leak(roots),
        join_pred_count: leak(join_pred_count),
        join_succ_start: leak(join_succ_start),
        join_succ: leak(join_succ),
        then_nodes: lists(|node| &node.then_nodes),
        else_nodes: lists(|node| &node.else_nodes),
        group_limits: if limited {
            leak(wf.group_limits.clone())
        } else {
            &[]
        },
        node_groups: if limited {
            lists(|node| &node.groups)
        } else {
            &[]
        },
        policies: &[],
        failure: FailurePolicy::ContinueIndependent,
    };
    Box::leak(Box::new(Graph::__new(
        "Model",
        leak(nodes),
        leak(edges),
        plan,
    )))
}

/// The control tables of `wf`: its gates, one scope per arm, and its trigger rules.
fn control(wf: &Wf) -> &'static Control {
    let ruled = wf.nodes.iter().any(|node| node.rule != Rule::Default);
    let nests: Vec<NestInfo> = (0..wf.len())
        .filter_map(|i| {
            let case = wf.nodes[i].nest.as_ref()?;
            Some(NestInfo {
                node: i as u32,
                kind: case.kind().1,
                body: &nest_model::BODY,
            })
        })
        .collect();
    if wf.gates.is_empty() && !ruled && nests.is_empty() {
        return &Control::NONE;
    }
    let mut scopes = Vec::new();
    let mut gates = Vec::new();
    let mut arms = Vec::new();
    for (g, gate) in wf.gates.iter().enumerate() {
        gates.push(Gate {
            node: gate.node as u32,
            min: gate.min,
            rest: if gate.rest_run {
                Rest::Run
            } else {
                Rest::Cancel
            },
            first_arm: arms.len() as u32,
            arms: gate.arms.len() as u32,
        });
        for (nodes, exits) in &gate.arms {
            arms.push(Arm {
                gate: g as u32,
                exits: exits.len() as u32,
                scope: scopes.len() as u32,
            });
            scopes.push(leak(nodes.iter().map(|&m| m as u32).collect()));
        }
    }
    Box::leak(Box::new(Control {
        scopes: leak(scopes),
        gates: leak(gates),
        arms: leak(arms),
        rules: if ruled {
            leak(wf.nodes.iter().map(|node| node.rule).collect())
        } else {
            &[]
        },
        nests: leak(nests),
        ..Control::NONE
    }))
}

/// Stands for the workflows of this file in a [`Runner`], whose builder methods make the
/// options the tests hand to `execute_nodes` (each test builds its graph at run time, so it is
/// no `Workflow` of its own).
struct Model;

impl Workflow for Model {
    const GRAPH: Graph = Graph::__new("Model", &[], &[], Plan::EMPTY);
    type Input<'a> = ();
    type Output = ();

    fn __execute<'a>(_: RunSetup, _: ()) -> impl std::future::Future<Output = Outcome<()>> {
        unreachable_run()
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

/// What the rules say a run of `wf` ends with (under `ContinueIndependent`).
#[derive(Debug)]
struct Expected {
    status: Vec<NodeStatus>,
    /// For an aborted node: every failed node at the root of a chain that reached it; for a
    /// step with a rule that completed after failures, the failures it passes on.
    causes: Vec<BTreeSet<usize>>,
    /// A step with a rule that completed after a failure reached it: it passes the failure on.
    carried: Vec<bool>,
    run_fails: bool,
    /// The nodes the run's error lists, when it fails: failed or aborted, except those a
    /// decision caught.
    listed: BTreeSet<usize>,
}

/// Walks the nodes in topological order and decides each one from its predecessors alone.
/// For a workflow without gates.
fn model(wf: &Wf) -> Expected {
    model_with(wf, None).unwrap_or_else(|why| panic!("{why}"))
}

/// What the rules decide for one node: its status, the failures behind an abort (or the ones
/// a step with a rule carries on), a decision's branch, and whether it carries a failure on.
#[derive(Debug, Clone, Default)]
struct Fate {
    status: Vec<NodeStatus>,
    causes: Vec<BTreeSet<usize>>,
    chose: Vec<Option<bool>>,
    /// A step with a rule that completed after a failure reached it: it passes the failure on.
    carried: Vec<bool>,
}

impl Fate {
    fn new(n: usize) -> Self {
        Fate {
            status: vec![NodeStatus::Idle; n],
            causes: vec![BTreeSet::new(); n],
            chose: vec![None; n],
            carried: vec![false; n],
        }
    }

    /// Takes `node`'s fate from `other`.
    fn copy_from(&mut self, other: &Fate, node: usize) {
        self.status[node] = other.status[node];
        self.causes[node] = other.causes[node].clone();
        self.chose[node] = other.chose[node];
        self.carried[node] = other.carried[node];
    }

    /// Whether `node` passes a failure on: it failed, was aborted, or carries one.
    fn passes_failure(&self, node: usize) -> bool {
        matches!(self.status[node], Failed | Aborted) || self.carried[node]
    }

    /// Decides node `i`, an operation or a decision, from its predecessors' fates.
    fn decide(&mut self, wf: &Wf, i: usize) {
        let node = &wf.nodes[i];
        self.causes[i].clear();
        self.chose[i] = None;
        self.carried[i] = false;
        // In a branch that was not taken, or under a decision that was skipped.
        let untaken = node.branches.iter().any(|&(d, side)| {
            self.status[d] == Skipped
                || (self.status[d] == Completed && self.chose[d] != Some(side))
        });
        if untaken {
            self.status[i] = Skipped;
            return;
        }
        // A failure reaching it over an edge that its own test does not catch (a read from
        // outside a gate's arm passes nothing on); a step with a rule that ran after a failure
        // passes it on, as an aborted node does. A withdrawn or skipped node is no failure.
        let uncaught: Vec<usize> = wf
            .hard_preds(i)
            .filter(|&p| self.passes_failure(p) && !wf.catches(i, p))
            .collect();
        let mut from = BTreeSet::new();
        for &p in &uncaught {
            if self.status[p] == Failed {
                from.insert(p);
            } else {
                from.extend(self.causes[p].iter().copied());
            }
        }
        self.causes[i] = from;
        match node.rule {
            // Runs whatever reached it; a failure that did goes on past it.
            Rule::AllDone => self.carried[i] = !uncaught.is_empty(),
            Rule::OneFailed if uncaught.is_empty() => {
                self.status[i] = Skipped;
                return;
            }
            Rule::OneFailed => self.carried[i] = true,
            _ if !uncaught.is_empty() => {
                self.status[i] = Aborted;
                return;
            }
            _ => {}
        }
        if node.required.iter().any(|&r| self.status[r] == Skipped) {
            self.status[i] = Skipped;
            return;
        }
        match node.kind {
            NodeKind::Operation => {
                self.status[i] = if node.behaviour.succeeds() {
                    Completed
                } else {
                    // Its own failure goes on, not the one it carried.
                    self.carried[i] = false;
                    self.causes[i].clear();
                    Failed
                };
            }
            NodeKind::Decision => {
                // A test sees a named node as `Err` when it failed or was aborted, and when it
                // was skipped or withdrawn (it has no value).
                let ok = |r: &usize| self.status[*r] == Completed;
                self.chose[i] = Some(match node.test {
                    Test::AllOk => node.reads.iter().all(ok),
                    Test::AnyErr => !node.reads.iter().all(ok),
                    Test::Const(b) => b,
                });
                self.status[i] = Completed;
            }
            _ => unreachable!("gates are decided by the walk"),
        }
    }
}

/// The model's run. Which arms win a gate depends on timing, so with gates the model takes the
/// winners the run logged (`oracle`) and checks them: a gate fires exactly when `min` of its
/// arms can complete (no failure reaches their exits: none failed, was aborted or carries a
/// failure on), and its winners are `min` such arms. A node of an arm that the gate withdraws
/// (rest = cancel: the losers, or every arm when the gate fails) ends as the rules say or
/// withdrawn, as the run says; the nodes after a withdrawn node of its arm are withdrawn with
/// it; no other node is ever withdrawn. The failures in the arms that lost a gate that fired
/// are caught; those of its winners are not.
fn model_with(wf: &Wf, oracle: Option<&Observed>) -> Result<Expected, String> {
    let n = wf.len();
    let mut now = Fate::new(n);
    // The same, as if no arm were ever withdrawn: what decides the gates.
    let mut ran = Fate::new(n);
    // Failed or aborted nodes of the arms that lost gates that fired: caught, as a test's
    // names are.
    let mut forgiven = BTreeSet::new();
    for i in 0..n {
        let node = &wf.nodes[i];
        if node.kind == NodeKind::Gate {
            let g = wf
                .gates
                .iter()
                .position(|gate| gate.node == i)
                .ok_or_else(|| format!("node {i} is a gate of no block"))?;
            let gate = &wf.gates[g];
            let completable: Vec<bool> = gate
                .arms
                .iter()
                .map(|(_, exits)| {
                    exits
                        .iter()
                        .all(|&e| matches!(ran.status[e], Completed | Skipped) && !ran.carried[e])
                })
                .collect();
            let fires = completable.iter().filter(|&&c| c).count() >= gate.min as usize;
            let won = oracle.and_then(|o| o.won.get(&i));
            let withdrawable: Vec<bool> = if fires {
                let winners =
                    won.ok_or_else(|| format!("gate {i} can fire, but the run logged no winners"))?;
                let distinct: BTreeSet<u32> = winners.iter().copied().collect();
                if winners.len() != gate.min as usize
                    || distinct.len() != winners.len()
                    || winners
                        .iter()
                        .any(|&a| !completable.get(a as usize).copied().unwrap_or(false))
                {
                    return Err(format!(
                        "gate {i} logged winners {winners:?}; {} of the arms {completable:?} that can complete should win",
                        gate.min
                    ));
                }
                now.status[i] = Completed;
                for (a, (nodes, _)) in gate.arms.iter().enumerate() {
                    if distinct.contains(&(a as u32)) {
                        continue;
                    }
                    forgiven.extend(
                        nodes
                            .iter()
                            .copied()
                            .filter(|&m| matches!(now.status[m], Failed | Aborted)),
                    );
                }
                (0..gate.arms.len())
                    .map(|a| !gate.rest_run && !distinct.contains(&(a as u32)))
                    .collect()
            } else {
                if let Some(winners) = won {
                    return Err(format!(
                        "gate {i} cannot reach min = {}, yet the run logged winners {winners:?}",
                        gate.min
                    ));
                }
                now.status[i] = Aborted;
                for (_, exits) in &gate.arms {
                    for &e in exits {
                        match now.status[e] {
                            Failed => {
                                now.causes[i].insert(e);
                            }
                            Aborted | Completed if now.passes_failure(e) => {
                                let from = now.causes[e].clone();
                                now.causes[i].extend(from);
                            }
                            _ => {}
                        }
                    }
                }
                vec![!gate.rest_run; gate.arms.len()]
            };
            for (a, (nodes, _)) in gate.arms.iter().enumerate() {
                if let Some(&m) = nodes.iter().find(|&&m| now.status[m] == Withdrawn)
                    && !withdrawable[a]
                {
                    return Err(format!(
                        "node {m} is withdrawn, but gate {i} withdraws nothing of its arm {a}"
                    ));
                }
            }
            // The gate is decided: what comes after it sees its arms as they ended.
            for m in gate
                .arms
                .iter()
                .flat_map(|(nodes, _)| nodes.iter().copied())
            {
                ran.copy_from(&now, m);
            }
            ran.copy_from(&now, i);
            continue;
        }
        if node.arm.is_some() {
            ran.decide(wf, i);
            // A branch not taken (or under a skipped decision) was skipped when its decision
            // settled, before any withdrawal; otherwise a node after a withdrawn one had not
            // ended, and went with it.
            let untaken = node.branches.iter().any(|&(d, side)| {
                now.status[d] == Skipped
                    || (now.status[d] == Completed && now.chose[d] != Some(side))
            });
            let after_withdrawn = !untaken
                && wf
                    .preds(i)
                    .any(|p| wf.nodes[p].arm == node.arm && now.status[p] == Withdrawn);
            let observed = oracle.is_some_and(|o| o.status[i] == Withdrawn);
            if after_withdrawn || observed {
                now.status[i] = Withdrawn;
                now.causes[i].clear();
                now.carried[i] = false;
                continue;
            }
            now.decide(wf, i);
        } else {
            now.decide(wf, i);
            ran.copy_from(&now, i);
        }
    }
    let Fate {
        status,
        causes,
        carried,
        ..
    } = now;
    let bad = |s: NodeStatus| matches!(s, Failed | Aborted);
    // The nodes a test that ran names.
    let named: BTreeSet<usize> = (0..n)
        .filter(|&d| wf.nodes[d].kind == NodeKind::Decision && status[d] == Completed)
        .flat_map(|d| wf.nodes[d].reads.iter().copied())
        .filter(|&r| bad(status[r]))
        .chain(forgiven)
        .collect();
    // A failure is caught when a test that ran names the failed node, or a node it aborted.
    let caught: BTreeSet<usize> = named
        .iter()
        .flat_map(|&r| match status[r] {
            Failed => BTreeSet::from([r]),
            _ => causes[r].clone(),
        })
        .collect();
    // The run fails when a failure reaches the end of the graph or is not caught.
    let run_fails = (0..n).any(|i| {
        (wf.is_sink(i) && bad(status[i])) || (status[i] == Failed && !caught.contains(&i))
    });
    let listed = match run_fails {
        true => {
            let mut listed: BTreeSet<usize> = (0..n)
                .filter(|&i| match status[i] {
                    Failed => !caught.contains(&i) || wf.is_sink(i),
                    Aborted => !named.contains(&i),
                    _ => false,
                })
                .collect();
            let roots: Vec<usize> = listed
                .iter()
                .filter(|&&i| status[i] == Aborted)
                .flat_map(|&i| causes[i].iter().copied())
                .collect();
            listed.extend(roots);
            listed
        }
        false => BTreeSet::new(),
    };
    Ok(Expected {
        status,
        causes,
        carried,
        run_fails,
        listed,
    })
}

// ---------------------------------------------------------------------------------------------
// The node set the scheduler drives
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Start(usize, Instant),
    /// An operation's future resolved (or panicked); `true` when it failed.
    End(usize, Instant, bool),
    Decide(usize, Instant),
}

#[derive(Debug, Default)]
struct Log {
    events: Vec<Event>,
    running: usize,
    peak: usize,
    group_running: Vec<usize>,
    group_peak: Vec<usize>,
    /// Misuses of the node set by the scheduler.
    misuse: Vec<String>,
}

struct Shared {
    wf: Wf,
    slots: Vec<Slot<u32>>,
    log: RefCell<Log>,
}

impl Shared {
    fn record(&self, event: Event) {
        self.log.borrow_mut().events.push(event);
    }
}

type NodeFuture = Pin<Box<dyn Future<Output = Result<(), NodeError>>>>;

/// The node set: one [`HarnessNode`] per node of the workflow.
struct Harness {
    nodes: Vec<HarnessNode>,
}

// SAFETY: collects its own nodes, each once.
unsafe impl Nodes for Harness {
    const LEN: usize = usize::MAX;

    unsafe fn collect<'a>(
        self: Pin<&'a mut Self>,
        _arena: *mut u8,
        out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    ) where
        Self: 'a,
    {
        for node in &mut self.get_mut().nodes {
            let node: Pin<&mut HarnessNode> = Pin::new(node);
            out.push(node);
        }
    }
}

/// Node `i`: logs every call the scheduler makes and runs the node's behaviour.
struct HarnessNode {
    shared: Rc<Shared>,
    i: usize,
    running: Option<NodeFuture>,
    /// A nest node's context, given by the scheduler before its first attempt.
    nest: Option<NestCtx>,
}

impl HarnessNode {
    /// Drops the running future, if any, and counts it out.
    fn end(&mut self) {
        if self.running.take().is_some() {
            let mut log = self.shared.log.borrow_mut();
            log.running -= 1;
            for &g in &self.shared.wf.nodes[self.i].groups {
                log.group_running[g] -= 1;
            }
        }
    }
}

impl Leaf for HarnessNode {
    fn start(self: Pin<&mut Self>) {
        let this = self.get_mut();
        let i = this.i;
        let node = &this.shared.wf.nodes[i];
        {
            let mut log = this.shared.log.borrow_mut();
            if node.kind != NodeKind::Operation || this.running.is_some() {
                log.misuse
                    .push(format!("start({i}) on a decision or a running node"));
            }
            log.events.push(Event::Start(i, Instant::now()));
            log.running += 1;
            log.peak = log.peak.max(log.running);
            for &g in &node.groups {
                log.group_running[g] += 1;
                log.group_peak[g] = log.group_peak[g].max(log.group_running[g]);
            }
        }
        let shared = Rc::clone(&this.shared);
        let behaviour = node.behaviour;
        let required = node.required.clone();
        if let Some(case) = node.nest.clone() {
            let ctx = this.nest.clone();
            this.running = Some(Box::pin(async move {
                if required.iter().any(|&r| shared.slots[r].get().is_none()) {
                    shared.record(Event::End(i, Instant::now(), true));
                    return Err(NodeError::Aborted {
                        cause: "missing input",
                    });
                }
                let Some(ctx) = ctx else {
                    let mut log = shared.log.borrow_mut();
                    log.misuse
                        .push(format!("start({i}) on a nest node given no NestCtx"));
                    return Err(NodeError::Aborted {
                        cause: "no NestCtx",
                    });
                };
                let (_, result) = match &case {
                    NestCase::Each(case) => nest_model::drive_each(ctx, case).await,
                    NestCase::Loop(case) => nest_model::drive_loop(ctx, case).await,
                };
                shared.record(Event::End(i, Instant::now(), result.is_err()));
                if result.is_ok() {
                    shared.slots[i].put(i as u32);
                }
                result
            }));
            return;
        }
        this.running = Some(Box::pin(async move {
            // An input that is missing fails the node, as generated code's `input` does (there
            // with an internal error): the scheduler must never start a node that early.
            if required.iter().any(|&r| shared.slots[r].get().is_none()) {
                shared.record(Event::End(i, Instant::now(), true));
                return Err(NodeError::Aborted {
                    cause: "missing input",
                });
            }
            if let Behaviour::SlowOk(ms) | Behaviour::SlowErr(ms) = behaviour {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            shared.record(Event::End(i, Instant::now(), !behaviour.succeeds()));
            match behaviour {
                Behaviour::Ok | Behaviour::SlowOk(_) => {
                    shared.slots[i].put(i as u32);
                    Ok(())
                }
                Behaviour::Err | Behaviour::SlowErr(_) => Err(NodeError::Failed(Box::new(
                    std::io::Error::other(format!("n{i} failed")),
                ))),
                Behaviour::Panic => panic!("n{i} panicked"),
            }
        }));
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        let this = self.get_mut();
        let i = this.i;
        match &mut this.running {
            Some(future) => {
                let polled = future.as_mut().poll(cx);
                if polled.is_ready() {
                    // The `Leaf` contract: a future that has resolved is dropped at once.
                    this.end();
                }
                polled
            }
            None => {
                let mut log = this.shared.log.borrow_mut();
                log.misuse
                    .push(format!("poll_node({i}) on a node that is not running"));
                Poll::Ready(Err(NodeError::Panicked("not running".to_string())))
            }
        }
    }

    fn stop(self: Pin<&mut Self>) {
        self.get_mut().end();
    }

    fn nest(self: Pin<&mut Self>, ctx: NestCtx) {
        let this = self.get_mut();
        if this.shared.wf.nodes[this.i].nest.is_none() {
            let misuse = format!("nest({}) on a node that is no nest", this.i);
            this.shared.log.borrow_mut().misuse.push(misuse);
        }
        this.nest = Some(ctx);
    }

    fn decide(self: Pin<&mut Self>, state: &RunState) -> bool {
        let i = self.i;
        let shared = &self.get_mut().shared;
        let node = &shared.wf.nodes[i];
        let mut log = shared.log.borrow_mut();
        if node.kind == NodeKind::Operation {
            log.misuse.push(format!("decide({i}) on an operation"));
        }
        log.events.push(Event::Decide(i, Instant::now()));
        if node.kind == NodeKind::Gate {
            return true;
        }
        let ok = |r: &usize| state.outcome(&shared.slots[*r], *r).is_ok();
        match node.test {
            Test::AllOk => node.reads.iter().all(ok),
            Test::AnyErr => !node.reads.iter().all(ok),
            Test::Const(b) => b,
        }
    }
}

/// What the scheduler did.
#[derive(Debug)]
struct Observed {
    status: Vec<NodeStatus>,
    errors: Vec<Option<String>>,
    run_fails: bool,
    /// The nodes the run's error lists (empty on success).
    listed: BTreeSet<usize>,
    /// The arms each gate that fired logged as its winners, by the gate's node.
    won: BTreeMap<usize, Vec<u32>>,
    /// Each nest node that started: its instances `(started, completed, failed, withdrawn)`.
    nests: BTreeMap<usize, [u64; 4]>,
    log: Log,
}

fn run(wf: &Wf, graph: &'static Graph, options: RunSetup) -> Result<Observed, String> {
    let shared = Rc::new(Shared {
        wf: wf.clone(),
        slots: (0..wf.len()).map(|_| Slot::new()).collect(),
        log: RefCell::new(Log {
            group_running: vec![0; wf.group_limits.len()],
            group_peak: vec![0; wf.group_limits.len()],
            ..Log::default()
        }),
    });
    let harness = Harness {
        nodes: (0..wf.len())
            .map(|i| HarnessNode {
                shared: Rc::clone(&shared),
                i,
                running: None,
                nest: None,
            })
            .collect(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("no tokio runtime: {e}"))?;
    let finished = runtime.block_on(async {
        // On the paused clock a run that hangs meets this timeout at once.
        tokio::time::timeout(
            Duration::from_secs(24 * 3600),
            execute_nodes(graph, options, harness),
        )
        .await
    });
    let outcome = finished
        .map_err(|_| "the run never finished".to_string())?
        .output(|| Ok(()));
    let log = std::mem::take(&mut *shared.log.borrow_mut());
    // The run's event log replays to the statuses the scheduler reports.
    let live: Vec<NodeStatus> = outcome.report.nodes().iter().map(|n| n.status).collect();
    let replayed = outcome.report.log().statuses();
    if replayed != live {
        return Err(format!(
            "the log replays to {replayed:?}, the run ended with {live:?}"
        ));
    }
    let listed = match &outcome.result {
        Ok(()) => BTreeSet::new(),
        Err(error) => error
            .failures()
            .iter()
            .map(|f| {
                graph
                    .node_id(f.node)
                    .ok_or_else(|| format!("unknown node `{}` in the error", f.node))
            })
            .collect::<Result<_, _>>()?,
    };
    let won = outcome
        .report
        .log()
        .events()
        .iter()
        .filter_map(|e| match (&e.kind, e.node) {
            (flowdag_runtime::EventKind::Won { arms }, Some(node)) => {
                Some((node as usize, arms.clone()))
            }
            _ => None,
        })
        .collect();
    let nests = outcome
        .report
        .nests()
        .iter()
        .map(|nest| {
            let node = graph
                .node_id(nest.node)
                .ok_or_else(|| format!("unknown nest node `{}` in the report", nest.node))?;
            let counts = [nest.started, nest.completed, nest.failed, nest.withdrawn];
            Ok((node, counts))
        })
        .collect::<Result<_, String>>()?;
    Ok(Observed {
        won,
        nests,
        status: outcome.report.nodes().iter().map(|n| n.status).collect(),
        errors: outcome
            .report
            .nodes()
            .iter()
            .map(|n| n.error.as_deref().map(str::to_owned))
            .collect(),
        run_fails: outcome.result.is_err(),
        listed,
        log,
    })
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// The graph, the model's and the scheduler's statuses and the log, for failure messages.
fn describe(graph: &Graph, expected: &Expected, observed: &Observed) -> String {
    let mut out = format!("{graph}");
    let _ = writeln!(
        out,
        "run fails: model {}, scheduler {}",
        expected.run_fails, observed.run_fails
    );
    for (i, node) in graph.nodes().iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:>4}: model {:<9} scheduler {:<9} {}",
            node.name,
            expected.status[i],
            observed.status[i],
            observed.errors[i].as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(out, "events: {:?}", observed.log.events);
    out
}

/// The node an abort names as its cause, from the rendered error.
fn abort_cause(graph: &Graph, error: Option<&str>) -> Option<usize> {
    let rest = error?.strip_prefix("aborted because `")?;
    let name = &rest[..rest.find('`')?];
    graph.node_id(name)
}

/// A place in the log: the event's position and its instant.
type At = (usize, Instant);

/// Where each node began (start or decision) and settled (end or decision) in the log.
fn positions(observed: &Observed, n: usize) -> Result<Vec<Option<(At, At)>>, String> {
    let mut begin = vec![None; n];
    let mut done = vec![None; n];
    for (at, &event) in observed.log.events.iter().enumerate() {
        let (node, first, last) = match event {
            Event::Start(node, t) => (node, Some((at, t)), None),
            Event::End(node, t, _) => (node, None, Some((at, t))),
            Event::Decide(node, t) => (node, Some((at, t)), Some((at, t))),
        };
        if let Some(b) = first {
            if begin[node].is_some() {
                return Err(format!("node {node} began twice"));
            }
            begin[node] = Some(b);
        }
        if let Some(d) = last {
            if begin[node].is_none() || done[node].is_some() {
                return Err(format!("node {node} ended twice or before it began"));
            }
            done[node] = Some(d);
        }
    }
    Ok((0..n).map(|i| begin[i].zip(done[i])).collect())
}

/// No node begins before every predecessor that ran has settled (by log position and by time),
/// and the node set was used as the trait says.
fn check_order(wf: &Wf, observed: &Observed) -> Result<(), String> {
    if let Some(misuse) = observed.log.misuse.first() {
        return Err(format!("the scheduler misused the node set: {misuse}"));
    }
    let spans = positions(observed, wf.len())?;
    for (&(from, to), &why) in &wf.edges {
        if why & GATED != 0 {
            // A gate waits for `min` arms, not for all of them.
            continue;
        }
        let (Some((_, (from_done, from_t))), Some(((to_begin, to_t), _))) =
            (spans[from], spans[to])
        else {
            continue;
        };
        if to_begin <= from_done || to_t < from_t {
            return Err(format!(
                "node {to} began before its predecessor {from} settled"
            ));
        }
    }
    Ok(())
}

/// Statuses, result, listed failures and abort causes equal the model's; every node that ran
/// ran exactly once.
fn check_against_model(
    wf: &Wf,
    graph: &Graph,
    expected: &Expected,
    observed: &Observed,
) -> Result<(), String> {
    check_order(wf, observed)?;
    if observed.status != expected.status {
        return Err("statuses differ from the model".to_string());
    }
    if observed.run_fails != expected.run_fails {
        return Err("the run's result differs from the model".to_string());
    }
    if observed.listed != expected.listed {
        return Err(format!(
            "the run's error lists {:?}, the model {:?}",
            observed.listed, expected.listed
        ));
    }
    let spans = positions(observed, wf.len())?;
    for (i, span) in spans.iter().enumerate() {
        let ran = match wf.nodes[i].kind {
            NodeKind::Operation => matches!(
                expected.status[i],
                NodeStatus::Completed | NodeStatus::Failed
            ),
            NodeKind::Decision | NodeKind::Gate => expected.status[i] == NodeStatus::Completed,
            _ => unreachable!("the model builds operations, decisions and gates only"),
        };
        if ran != span.is_some() {
            return Err(format!(
                "node {i}: ran {}, the model says {ran}",
                span.is_some()
            ));
        }
        if let Some(case) = &wf.nodes[i].nest
            && ran
            && observed.nests.get(&i) != Some(&case.counts())
        {
            return Err(format!(
                "nest node {i} counts its instances {:?}, the nest model {:?}",
                observed.nests.get(&i),
                case.counts()
            ));
        }
        if expected.status[i] == NodeStatus::Aborted {
            let cause = abort_cause(graph, observed.errors[i].as_deref());
            if !cause.is_some_and(|c| expected.causes[i].contains(&c)) {
                return Err(format!(
                    "node {i} is aborted by {cause:?}, the model allows {:?}",
                    expected.causes[i]
                ));
            }
        }
    }
    Ok(())
}

/// Runs `wf` under `ContinueIndependent` and compares with the model.
fn check_continue(wf: &Wf, limits: bool, max_concurrency: Option<usize>) -> Result<(), String> {
    let graph = graph(wf, limits);
    let mut options = Runner::<Model>::new();
    if let Some(limit) = max_concurrency.and_then(NonZeroUsize::new) {
        options = options.max_concurrency(limit);
    }
    let observed = run(wf, graph, options.__into_setup())?;
    let expected = model_with(wf, Some(&observed)).map_err(|why| {
        format!(
            "{why}\n{graph}statuses: {:?}\nwinners: {:?}\nevents: {:?}",
            observed.status, observed.won, observed.log.events
        )
    })?;
    let mut verdict = check_against_model(wf, graph, &expected, &observed);
    if verdict.is_ok() {
        verdict = check_limits(wf, limits, max_concurrency, &observed);
    }
    verdict.map_err(|why| format!("{why}\n{}", describe(graph, &expected, &observed)))
}

/// The peak number of running operations stays within every limit.
fn check_limits(
    wf: &Wf,
    limits: bool,
    max_concurrency: Option<usize>,
    observed: &Observed,
) -> Result<(), String> {
    let log = &observed.log;
    if let Some(limit) = max_concurrency
        && log.peak > limit
    {
        return Err(format!(
            "{} operations ran at once, over the run's limit of {limit}",
            log.peak
        ));
    }
    if limits {
        for (g, (&peak, &limit)) in log.group_peak.iter().zip(&wf.group_limits).enumerate() {
            if peak > limit as usize {
                return Err(format!(
                    "{peak} operations of block {g} ran at once, over its limit of {limit}"
                ));
            }
        }
    }
    Ok(())
}

/// Runs `wf` under `FailFast`: nothing runs after the first failure that no `Conditional` can
/// catch; until then the run is the model's, and every node keeps the model's status or is
/// aborted; without such a failure the whole run is the model's; a run the model fails fails.
fn check_fail_fast(wf: &Wf) -> Result<(), String> {
    let graph = graph(wf, false);
    let expected = model(wf);
    let options = Runner::<Model>::new()
        .failure_policy(FailurePolicy::FailFast)
        .__into_setup();
    let observed = run(wf, graph, options)?;
    let verdict = fail_fast_verdict(wf, graph, &expected, &observed);
    verdict.map_err(|why| format!("{why}\n{}", describe(graph, &expected, &observed)))
}

/// Runs `wf`, with gates, under `ContinueIndependent` (whose winners the model takes) and under
/// `FailFast`: the two runs share their timing until `FailFast` stops, so under `FailFast`
/// every node keeps the model's status or is aborted, and the run fails exactly when the
/// model's does.
fn check_fail_fast_gated(wf: &Wf) -> Result<(), String> {
    let graph = graph(wf, false);
    let full = run(wf, graph, RunSetup::default())?;
    let expected = model_with(wf, Some(&full))?;
    let options = Runner::<Model>::new()
        .failure_policy(FailurePolicy::FailFast)
        .__into_setup();
    let observed = run(wf, graph, options)?;
    let verdict = (|| {
        check_order(wf, &observed)?;
        for i in 0..wf.len() {
            let s = observed.status[i];
            if s != expected.status[i] && s != Aborted {
                return Err(format!(
                    "node {i} is {s}: neither the model's status nor aborted"
                ));
            }
        }
        if expected.run_fails != observed.run_fails {
            return Err(format!(
                "the model's run fails: {}, the FailFast run fails: {}",
                expected.run_fails, observed.run_fails
            ));
        }
        Ok(())
    })();
    verdict.map_err(|why| format!("{why}\n{}", describe(graph, &expected, &observed)))
}

fn fail_fast_verdict(
    wf: &Wf,
    graph: &Graph,
    expected: &Expected,
    observed: &Observed,
) -> Result<(), String> {
    check_order(wf, observed)?;
    let uncatchable = wf.uncatchable(true);
    let untestable = wf.uncatchable(false);
    let first = observed
        .log
        .events
        .iter()
        .position(|e| matches!(*e, Event::End(node, _, true) if uncatchable[node]));
    // A failure carried past a step with a rule to the end stops the run when no test can
    // catch it.
    let reaches_end = (0..wf.len()).any(|i| {
        wf.is_sink(i)
            && (matches!(expected.status[i], Failed | Aborted)
                || (expected.carried[i] && expected.causes[i].iter().any(|&c| untestable[c])))
    });
    match first {
        // No failure it must stop for: exactly the model's run.
        None if !reaches_end => check_against_model(wf, graph, expected, observed)?,
        // A caught-able failure that reaches the end of the graph stops the run when it gets
        // there: every node keeps the model's status or is aborted, and the run fails.
        None => {
            for i in 0..wf.len() {
                let s = observed.status[i];
                if s != expected.status[i] && s != NodeStatus::Aborted {
                    return Err(format!(
                        "node {i} is {s}: neither the model's status nor aborted"
                    ));
                }
            }
            if !observed.run_fails {
                return Err("a failure reached the end of the graph, yet the run succeeded".into());
            }
        }
        Some(at) => {
            if at + 1 != observed.log.events.len() {
                return Err(format!(
                    "something ran after the uncaught failure at event {at}: {:?}",
                    &observed.log.events[at + 1..]
                ));
            }
            for i in 0..wf.len() {
                let s = observed.status[i];
                if s != expected.status[i] && s != NodeStatus::Aborted {
                    return Err(format!(
                        "node {i} is {s}: neither the model's status nor aborted"
                    ));
                }
            }
        }
    }
    // `FailFast` changes when a run stops, never whether it fails.
    if expected.run_fails != observed.run_fails {
        return Err(format!(
            "the model's run fails: {}, the FailFast run fails: {}",
            expected.run_fails, observed.run_fails
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Random workflows
// ---------------------------------------------------------------------------------------------

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        6 => Just(Behaviour::Ok),
        6 => (1u64..=50).prop_map(Behaviour::SlowOk),
        1 => Just(Behaviour::Err),
        1 => Just(Behaviour::Panic),
        1 => (1u64..=50).prop_map(Behaviour::SlowErr),
    ]
}

fn picks(max: usize) -> impl Strategy<Value = Vec<Ref>> {
    prop::collection::vec(any::<u16>().prop_map(Ref::Pick), 0..=max)
}

fn operation() -> impl Strategy<Value = Step> {
    let after = prop::option::weighted(0.3, any::<u16>().prop_map(Ref::Pick))
        .prop_map(|p| p.into_iter().collect());
    let rule = prop_oneof![
        10 => Just(Rule::Default),
        1 => Just(Rule::AllDone),
        1 => Just(Rule::OneFailed),
    ];
    (behaviour(), rule, after, picks(2)).prop_map(|(behaviour, rule, after, reads)| Step::Op {
        behaviour,
        rule,
        after,
        reads,
    })
}

fn test() -> impl Strategy<Value = Test> {
    prop_oneof![
        Just(Test::AllOk),
        Just(Test::AnyErr),
        any::<bool>().prop_map(Test::Const),
    ]
}

/// A nest node: a `ForEach` or a `Loop` of the nest model, with no `Complete` or `Cancel`.
fn nest() -> impl Strategy<Value = Step> {
    let case = prop_oneof![
        nest_model::each_case().prop_map(|mut case| {
            case.stop.at_us = nest_model::LATE_US;
            NestCase::Each(case)
        }),
        nest_model::loop_case().prop_map(|mut case| {
            case.cancel_us = nest_model::LATE_US;
            NestCase::Loop(case)
        }),
    ];
    (case, picks(2)).prop_map(|(case, reads)| Step::Nest { case, reads })
}

fn step() -> impl Strategy<Value = Step> {
    let leaf = prop_oneof![8 => operation(), 1 => nest()];
    leaf.prop_recursive(4, 30, 3, |inner| {
        let block = prop::collection::vec(inner, 1..=3);
        prop_oneof![
            block.clone().prop_map(Step::Seq),
            (prop::option::of(1u32..=3), block.clone()).prop_map(|(max_concurrency, steps)| {
                Step::Par {
                    max_concurrency,
                    steps,
                }
            }),
            (test(), picks(2), block.clone(), prop::option::of(block)).prop_map(
                |(test, names, then, otherwise)| {
                    Step::Cond {
                        test,
                        names,
                        then,
                        otherwise,
                    }
                }
            ),
        ]
    })
}

fn workflow() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..=4)
}

/// A gate over two or three arms: any `min` up to their number, `rest = cancel` or `run`,
/// sometimes a limit.
fn gate() -> impl Strategy<Value = Step> {
    (
        prop::collection::vec(step(), 2..=3),
        any::<u8>(),
        any::<bool>(),
        prop::option::weighted(0.2, 1u32..=2),
    )
        .prop_map(|(arms, min, rest_run, max_concurrency)| Step::Gate {
            min: 1 + u32::from(min) % arms.len() as u32,
            rest_run,
            max_concurrency,
            arms,
        })
}

/// A gate and a step with a rule right after it that reads nodes of the arms of this or an
/// earlier gate: a cleanup that sees what a gate withdrew, or an alarm that its failure may
/// reach.
fn gate_then_rule() -> impl Strategy<Value = Step> {
    let rule = prop_oneof![Just(Rule::AllDone), Just(Rule::OneFailed)];
    let reads = prop::collection::vec(any::<u16>().prop_map(Ref::InArm), 1..=2);
    (gate(), behaviour(), rule, reads).prop_map(|(gate, behaviour, rule, reads)| {
        Step::Seq(vec![
            gate,
            Step::Op {
                behaviour,
                rule,
                after: Vec::new(),
                reads,
            },
        ])
    })
}

/// A workflow whose top-level steps are steps or gates (some followed by a step with a rule).
fn gated_workflow() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![2 => step(), 2 => gate(), 1 => gate_then_rule()],
        1..=4,
    )
}

/// How many random workflows each property runs: `FLOW_MODEL_CASES`, or 1,000.
fn cases() -> u32 {
    match std::env::var("FLOW_MODEL_CASES") {
        Ok(value) => value.trim().parse().unwrap_or_else(|_| {
            panic!("FLOW_MODEL_CASES must be a number of cases, not {value:?}")
        }),
        Err(_) => 1000,
    }
}

#[test]
fn the_proptest_config_runs_the_case_count_it_is_given() {
    assert_eq!(config(7).cases, 7);
    assert_eq!(config(cases()).cases, cases());
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn verdict(result: Result<(), String>) -> Result<(), TestCaseError> {
    result.map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(config(cases()))]

    /// Every status, the result, the listed failures and the abort causes are the model's, and
    /// no node starts before its predecessors have settled.
    #[test]
    fn scheduler_agrees_with_model(body in workflow()) {
        verdict(check_continue(&compile(&body), false, None))?;
    }

    /// With `Parallel` limits and a run-wide limit, no limit is ever exceeded and the run is
    /// still the model's.
    #[test]
    fn limits_hold_and_statuses_match(body in workflow(), limit in prop::option::of(1usize..=4)) {
        verdict(check_continue(&compile(&body), true, limit))?;
    }

    /// With races and joins of k of n: the gates fire when the rules say, with winners that can
    /// win; only the arms a gate withdraws hold withdrawn nodes; everything else is the
    /// model's.
    #[test]
    fn gates_agree_with_model(body in gated_workflow()) {
        verdict(check_continue(&compile(&body), false, None))?;
    }

    /// The same under limits.
    #[test]
    fn gates_under_limits_agree_with_model(
        body in gated_workflow(),
        limit in prop::option::of(1usize..=4),
    ) {
        verdict(check_continue(&compile(&body), true, limit))?;
    }

    /// Under `FailFast`, nothing runs after the first failure no `Conditional` can catch.
    #[test]
    fn fail_fast_stops_at_first_uncaught_failure(body in workflow()) {
        verdict(check_fail_fast(&compile(&body)))?;
    }

    /// Under `FailFast`, with gates and rules: every node keeps the model's status or is
    /// aborted, and the run fails exactly when the model's does.
    #[test]
    fn fail_fast_with_gates_keeps_the_models_result(body in gated_workflow()) {
        verdict(check_fail_fast_gated(&compile(&body)))?;
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-built graphs
// ---------------------------------------------------------------------------------------------

fn op(behaviour: Behaviour, reads: &[usize]) -> Step {
    Step::Op {
        behaviour,
        rule: Rule::Default,
        after: Vec::new(),
        reads: reads.iter().map(|&r| Ref::Node(r)).collect(),
    }
}

fn op_after(behaviour: Behaviour, after: &[usize]) -> Step {
    Step::Op {
        behaviour,
        rule: Rule::Default,
        after: after.iter().map(|&r| Ref::Node(r)).collect(),
        reads: Vec::new(),
    }
}

fn op_when(behaviour: Behaviour, rule: Rule, reads: &[usize]) -> Step {
    Step::Op {
        behaviour,
        rule,
        after: Vec::new(),
        reads: reads.iter().map(|&r| Ref::Node(r)).collect(),
    }
}

fn cond(test: Test, names: &[usize], then: Vec<Step>, otherwise: Option<Vec<Step>>) -> Step {
    Step::Cond {
        test,
        names: names.iter().map(|&r| Ref::Node(r)).collect(),
        then,
        otherwise,
    }
}

fn par(steps: Vec<Step>) -> Step {
    Step::Par {
        max_concurrency: None,
        steps,
    }
}

/// A race (`min = 1`, `rest = cancel`) over `arms`.
fn race(arms: Vec<Step>) -> Step {
    Step::Gate {
        min: 1,
        rest_run: false,
        max_concurrency: None,
        arms,
    }
}

/// Runs a workflow with gates, checks the model (which takes the run's winners) against
/// hand-written expectations, then the scheduler against the model, with and without limits.
fn assert_gated_run(body: &[Step], statuses: &[NodeStatus], run_fails: bool) -> (Wf, Expected) {
    let wf = compile(body);
    let observed = run(&wf, graph(&wf, false), RunSetup::default()).expect("the run ends");
    let expected = model_with(&wf, Some(&observed)).unwrap_or_else(|why| panic!("{why}"));
    assert_eq!(
        expected.status, statuses,
        "the model disagrees with the hand-written statuses"
    );
    assert_eq!(
        expected.run_fails, run_fails,
        "the model disagrees with the hand-written result"
    );
    for limits in [false, true] {
        if let Err(why) = check_continue(&wf, limits, None) {
            panic!("{why}");
        }
    }
    (wf, expected)
}

/// Checks the model against hand-written expectations, then the scheduler against the model.
fn assert_run(body: &[Step], statuses: &[NodeStatus], run_fails: bool) -> Wf {
    let wf = compile(body);
    let expected = model(&wf);
    assert_eq!(
        expected.status, statuses,
        "the model disagrees with the hand-written statuses"
    );
    assert_eq!(
        expected.run_fails, run_fails,
        "the model disagrees with the hand-written result"
    );
    if let Err(why) = check_continue(&wf, true, None) {
        panic!("{why}");
    }
    wf
}

#[test]
fn diamond_runs_every_node_after_its_inputs() {
    // n0; { n1(n0) | n2(n0) }; n3(n1, n2)
    let body = |b: Behaviour| {
        vec![
            op(Behaviour::SlowOk(5), &[]),
            par(vec![op(b, &[0]), op(Behaviour::SlowOk(3), &[0])]),
            op(Behaviour::Ok, &[1, 2]),
        ]
    };
    let wf = assert_run(&body(Behaviour::SlowOk(7)), &[Completed; 4], false);
    assert_eq!(wf.preds(3).collect::<Vec<_>>(), [1, 2]);
    let wf = assert_run(
        &body(Behaviour::Err),
        &[Completed, Failed, Completed, Aborted],
        true,
    );
    assert_eq!(model(&wf).causes[3], BTreeSet::from([1]));
}

#[test]
fn conditional_is_an_error_boundary() {
    // n0 fails; the test names it, so the decision runs, takes `then`, and the run succeeds.
    let body = [
        op(Behaviour::SlowErr(4), &[]),
        cond(
            Test::AnyErr,
            &[0],
            vec![op(Behaviour::Ok, &[])],
            Some(vec![op(Behaviour::Ok, &[])]),
        ),
        op(Behaviour::Ok, &[]),
    ];
    assert_run(
        &body,
        &[Failed, Completed, Completed, Skipped, Completed],
        false,
    );

    // The same failure reaching the decision through a node its test does not name aborts it.
    let body = [
        op(Behaviour::Err, &[]),
        op(Behaviour::Ok, &[0]),
        cond(Test::AnyErr, &[0], vec![op(Behaviour::Ok, &[])], None),
    ];
    let wf = assert_run(&body, &[Failed, Aborted, Aborted, Aborted], true);
    assert_eq!(model(&wf).causes[3], BTreeSet::from([0]));
}

#[test]
fn trigger_rules_beside_gates() {
    // The race's loser n1 is withdrawn. The cleanup n3 reads it (from outside its arm, so it
    // inherits nothing) and runs; a withdrawal is no failure, so the alarm n4 is skipped; n5
    // runs; the run succeeds.
    let body = [
        race(vec![
            op(Behaviour::SlowOk(10), &[]),
            op(Behaviour::SlowOk(50), &[]),
        ]),
        par(vec![
            op_when(Behaviour::Ok, Rule::AllDone, &[1]),
            op_when(Behaviour::Ok, Rule::OneFailed, &[1]),
        ]),
        op(Behaviour::Ok, &[]),
    ];
    assert_gated_run(
        &body,
        &[
            Completed, Withdrawn, Completed, Completed, Skipped, Completed,
        ],
        false,
    );

    // The cleanup n1 ends arm 0 carrying n0's failure on: the arm cannot win, n2's arm wins,
    // and n0's failure, in an arm that lost, is caught. Nothing reaches the alarm n4.
    let body = [
        race(vec![
            Step::Seq(vec![
                op(Behaviour::Err, &[]),
                op_when(Behaviour::Ok, Rule::AllDone, &[0]),
            ]),
            op(Behaviour::SlowOk(5), &[]),
        ]),
        op_when(Behaviour::Ok, Rule::OneFailed, &[]),
    ];
    assert_gated_run(
        &body,
        &[Failed, Completed, Completed, Completed, Skipped],
        false,
    );

    // Both arms fail (arm 0 through the failure its cleanup carries): the race fails, the
    // cleanup n4 after it runs and carries the failure on, n5 is aborted, the run fails.
    let body = [
        race(vec![
            Step::Seq(vec![
                op(Behaviour::Err, &[]),
                op_when(Behaviour::Ok, Rule::AllDone, &[0]),
            ]),
            op(Behaviour::SlowErr(5), &[]),
        ]),
        op_when(Behaviour::Ok, Rule::AllDone, &[]),
        op(Behaviour::Ok, &[]),
    ];
    let (_, expected) = assert_gated_run(
        &body,
        &[Failed, Completed, Failed, Aborted, Completed, Aborted],
        true,
    );
    assert!(expected.carried[4]);
    assert_eq!(expected.causes[5], BTreeSet::from([0, 2]));
    assert_eq!(expected.listed, BTreeSet::from([0, 2, 3, 5]));

    // Arm 0 wins: its test d2 names the cleanup n1, which completed, so nothing aborts it; but
    // n0's failure was only carried, never caught, and a winning arm's failures are the run's.
    let body = [race(vec![
        Step::Seq(vec![
            op(Behaviour::Err, &[]),
            op_when(Behaviour::Ok, Rule::AllDone, &[0]),
            cond(Test::Const(true), &[1], vec![op(Behaviour::Ok, &[])], None),
        ]),
        op(Behaviour::SlowOk(5), &[]),
    ])];
    let (_, expected) = assert_gated_run(
        &body,
        &[
            Failed, Completed, Completed, Completed, Withdrawn, Completed,
        ],
        true,
    );
    assert_eq!(expected.listed, BTreeSet::from([0]));
}

#[test]
fn trigger_rules_run_after_failures_and_pass_them_on() {
    // n0 fails; the cleanup n1 runs anyway, reading n0 as missing, and passes the failure on
    // to n2, which is aborted by n0; the run fails.
    let body = [
        op(Behaviour::Err, &[]),
        op_when(Behaviour::Ok, Rule::AllDone, &[0]),
        op(Behaviour::Ok, &[]),
    ];
    let wf = assert_run(&body, &[Failed, Completed, Aborted], true);
    assert_eq!(model(&wf).causes[2], BTreeSet::from([0]));

    // Nothing fails: the alarm n1 is skipped, and n2 after it runs.
    let body = [
        op(Behaviour::Ok, &[]),
        op_when(Behaviour::Ok, Rule::OneFailed, &[]),
        op(Behaviour::Ok, &[]),
    ];
    assert_run(&body, &[Completed, Skipped, Completed], false);

    // n0's failure aborts n1 and n2; the alarm n3 after them runs, since a failure reached
    // it (over an aborted node), and the run still fails.
    let body = [
        op(Behaviour::Err, &[]),
        par(vec![op(Behaviour::Ok, &[]), op(Behaviour::SlowOk(5), &[])]),
        op_when(Behaviour::Ok, Rule::OneFailed, &[]),
    ];
    assert_run(&body, &[Failed, Aborted, Aborted, Completed], true);
}

#[test]
fn skip_propagates_through_data_only() {
    // The branch is not taken: n1 is skipped, n2 reads it and is skipped too, n3 only follows
    // n2 and runs.
    let body = [
        cond(Test::Const(false), &[], vec![op(Behaviour::Ok, &[])], None),
        op(Behaviour::Ok, &[1]),
        op(Behaviour::Ok, &[]),
    ];
    assert_run(&body, &[Completed, Skipped, Skipped, Completed], false);

    // A decision whose test names a skipped node is skipped, and so are both its branches.
    let body = [
        cond(Test::Const(false), &[], vec![op(Behaviour::Ok, &[])], None),
        cond(
            Test::AllOk,
            &[1],
            vec![op(Behaviour::Ok, &[])],
            Some(vec![op(Behaviour::Ok, &[])]),
        ),
        op(Behaviour::Ok, &[]),
    ];
    assert_run(
        &body,
        &[Completed, Skipped, Skipped, Skipped, Skipped, Completed],
        false,
    );
}

#[test]
fn after_edge_into_an_untaken_branch() {
    // n1 runs beside the decision; n3, in the untaken branch, waits for it and is skipped.
    let body = [
        op(Behaviour::SlowOk(5), &[]),
        par(vec![
            op(Behaviour::SlowOk(9), &[]),
            cond(
                Test::AllOk,
                &[0],
                vec![op(Behaviour::Ok, &[])],
                Some(vec![op_after(Behaviour::Ok, &[1])]),
            ),
        ]),
    ];
    assert_run(
        &body,
        &[Completed, Completed, Completed, Completed, Skipped],
        false,
    );
}

/// The generator reaches the cases the properties are about: sizeable workflows, skips,
/// aborts, failing and succeeding runs, nested branches and failures caught by a test.
#[test]
fn generator_covers_the_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let samples = 1000;
    let mut sizes = Vec::new();
    let [mut fails, mut caught, mut skipped, mut aborted, mut nested] = [0usize; 5];
    // Workflows whose plan routes edges through joins, and of those, ones with a failure.
    let [mut joined, mut joined_fails] = [0usize; 2];
    // Workflows where a step with a rule carried a failure on, and where a `one_failed` step
    // was skipped.
    let [mut carried, mut quiet] = [0usize; 2];
    // Workflows with a `ForEach` that ran, with a `Loop` that ran, and with a nest that failed.
    let [mut each_ran, mut loop_ran, mut nest_failed] = [0usize; 3];
    for _ in 0..samples {
        let body = workflow()
            .new_tree(&mut runner)
            .expect("a workflow")
            .current();
        let wf = compile(&body);
        let m = model(&wf);
        sizes.push(wf.len());
        fails += usize::from(m.run_fails);
        caught += usize::from((0..wf.len()).any(|d| {
            wf.nodes[d].kind == NodeKind::Decision
                && m.status[d] == Completed
                && wf.nodes[d]
                    .reads
                    .iter()
                    .any(|&r| matches!(m.status[r], Failed | Aborted))
        }));
        skipped += usize::from(m.status.contains(&Skipped));
        aborted += usize::from(m.status.contains(&Aborted));
        nested += usize::from(wf.nodes.iter().any(|n| n.branches.len() >= 2));
        carried += usize::from(m.carried.contains(&true));
        quiet += usize::from(
            (0..wf.len()).any(|i| wf.nodes[i].rule == Rule::OneFailed && m.status[i] == Skipped),
        );
        let nests_that = |kind: NodeKind, status: &[NodeStatus]| {
            (0..wf.len()).any(|i| {
                wf.nodes[i]
                    .nest
                    .as_ref()
                    .is_some_and(|c| c.kind().0 == kind)
                    && status.contains(&m.status[i])
            })
        };
        each_ran += usize::from(nests_that(NodeKind::ForEach, &[Completed, Failed]));
        loop_ran += usize::from(nests_that(NodeKind::Loop, &[Completed, Failed]));
        nest_failed += usize::from(
            nests_that(NodeKind::ForEach, &[Failed]) || nests_that(NodeKind::Loop, &[Failed]),
        );
        if !graph(&wf, false).__plan().join_pred_count.is_empty() {
            joined += 1;
            joined_fails += usize::from(m.status.contains(&Failed));
        }
    }
    sizes.sort_unstable();
    let summary = format!(
        "sizes: median {}, max {}; runs failing {fails}, with a caught failure {caught}, with skips {skipped}, with aborts {aborted}, with nested branches {nested}, with joins {joined} ({joined_fails} with a failure), with a carried failure {carried}, with a skipped one_failed step {quiet}, with a ForEach that ran {each_ran}, a Loop that ran {loop_ran}, a nest that failed {nest_failed} (of {samples})",
        sizes[samples / 2],
        sizes[samples - 1]
    );
    assert!(
        sizes[samples / 2] >= 10 && sizes[samples - 1] >= 30,
        "{summary}"
    );
    assert!(fails > samples / 5 && fails < samples * 9 / 10, "{summary}");
    assert!(caught > samples / 50, "{summary}");
    assert!(carried > samples / 10 && quiet > samples / 10, "{summary}");
    assert!(
        joined > samples / 5 && joined_fails > samples / 10,
        "{summary}"
    );
    assert!(
        skipped > samples / 3 && aborted > samples / 3 && nested > samples / 5,
        "{summary}"
    );
    assert!(
        each_ran > samples / 10 && loop_ran > samples / 10 && nest_failed > samples / 20,
        "{summary}"
    );
}

/// The error boundary of the design (`n0 = fetch(); Conditional(n0.is_ok()) { use(&n0) }`):
/// a test could catch the failure of `n0`, so `FailFast` does not stop there, the decision
/// takes the else side and the run succeeds, as under `ContinueIndependent`.
#[test]
fn fail_fast_stops_on_a_failure_its_conditional_routes_around() {
    let body = [
        op(Behaviour::Err, &[]),
        cond(Test::AllOk, &[0], vec![op(Behaviour::Ok, &[0])], None),
    ];
    let wf = assert_run(&body, &[Failed, Completed, Skipped], false);
    let graph = graph(&wf, false);
    let options = Runner::<Model>::new()
        .failure_policy(FailurePolicy::FailFast)
        .__into_setup();
    let observed = run(&wf, graph, options).expect("the run ends");
    assert_eq!(
        observed.status,
        [Failed, Completed, Skipped],
        "{}",
        describe(graph, &model(&wf), &observed)
    );
    assert!(!observed.run_fails);
}

/// The gated generator reaches what the gate properties are about: withdrawn nodes, gates
/// that fire and gates that fail, `rest = run` gates that fire, and k-of-n gates.
#[test]
fn gated_generator_covers_the_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let samples = 300;
    let [mut withdrawn, mut fired, mut failed, mut run_on, mut k_of_n] = [0usize; 5];
    // Runs where a step with a rule outside an arm read a withdrawn node and was decided (it
    // ran, or a `one_failed` step was skipped); where an arm's exit carried a failure on; and
    // where a step with a rule after a gate ran carrying the gate's failure.
    let [mut ruled_withdrawn, mut carried_exit, mut after_failed_gate] = [0usize; 3];
    for _ in 0..samples {
        let body = gated_workflow()
            .new_tree(&mut runner)
            .expect("a workflow")
            .current();
        let wf = compile(&body);
        let observed = run(&wf, graph(&wf, false), RunSetup::default()).expect("the run ends");
        let m = model_with(&wf, Some(&observed)).unwrap_or_else(|why| panic!("{why}"));
        withdrawn += usize::from(observed.status.contains(&Withdrawn));
        ruled_withdrawn += usize::from((0..wf.len()).any(|i| {
            wf.nodes[i].rule != Rule::Default
                && wf.nodes[i].arm.is_none()
                && matches!(m.status[i], Completed | Skipped)
                && wf.nodes[i].reads.iter().any(|&r| m.status[r] == Withdrawn)
        }));
        carried_exit += usize::from(wf.gates.iter().any(|gate| {
            gate.arms
                .iter()
                .any(|(_, exits)| exits.iter().any(|&e| m.carried[e]))
        }));
        after_failed_gate += usize::from(wf.gates.iter().any(|gate| {
            m.status[gate.node] == Aborted
                && wf
                    .edges
                    .keys()
                    .any(|&(from, to)| from == gate.node && m.carried[to])
        }));
        for gate in &wf.gates {
            match observed.status[gate.node] {
                Completed => {
                    fired += 1;
                    run_on += usize::from(gate.rest_run);
                    k_of_n += usize::from(gate.min > 1);
                }
                Aborted => failed += 1,
                _ => {}
            }
        }
    }
    let summary = format!(
        "of {samples} runs, {withdrawn} withdrew nodes; gates fired {fired} ({run_on} with rest = run, {k_of_n} with min > 1), failed {failed}; a step with a rule read a withdrawn node in {ruled_withdrawn}, an arm's exit carried a failure in {carried_exit}, a step with a rule carried a gate's failure in {after_failed_gate}"
    );
    assert!(
        ruled_withdrawn > samples / 30
            && carried_exit > samples / 10
            && after_failed_gate > samples / 20,
        "{summary}"
    );
    assert!(withdrawn > samples / 5, "{summary}");
    assert!(fired > samples / 2 && failed > samples / 20, "{summary}");
    assert!(run_on > samples / 10 && k_of_n > samples / 10, "{summary}");
}
