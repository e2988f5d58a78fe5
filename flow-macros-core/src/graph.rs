//! AST -> DAG.
//!
//! Containers are transparent: one node per `Operation`, one decision node per `Conditional`.
//! In a `Sequential`, every entry of a step depends on every exit of the step before; `Parallel`
//! children are independent; a decision's branches depend on the decision. Every node keeps the
//! user's tokens, so later stages can put errors and generated code on them.

use std::collections::BTreeMap;

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::{Expr, Ident};

use crate::ctxt::Ctxt;
use crate::options;
use crate::parse::{BlockStep, CancelTarget, CondStep, GateStep, OpStep, Step, Workflow};
use crate::pick::PickStep;
use crate::rules::{self, Rule, SectionDef};
use crate::signals::{DelayStep, SignalStep};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Operation,
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
    pub const SEQUENCE: u8 = 1;
    pub const DATA: u8 = 2;
    pub const AFTER: u8 = 4;
    pub const THEN: u8 = 8;
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
    pub race: bool,
    pub min: u32,
    pub rest_cancel: bool,
    /// Each child of the block: its nodes (all depths) and its exits.
    pub arms: Vec<ArmBlock>,
}

pub struct ArmBlock {
    pub nodes: Vec<usize>,
    pub exits: Vec<usize>,
}

pub struct Node {
    pub kind: Kind,
    /// The binding, for a named operation.
    pub name: Option<Ident>,
    /// The name shown in the graph and in reports; unique within the workflow.
    pub display: String,
    /// `Operation` or `Conditional`, as the user wrote it.
    pub keyword: Ident,
    /// The call of an operation, or the test of a decision.
    pub expr: Expr,
    pub after: Vec<Ident>,
    pub policy: options::Policy,
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
    pub else_nodes: Vec<usize>,
    /// For a `Signal` or `Delay` step: what it waits for.
    pub waits: Option<Waits>,
}

impl Node {
    /// The span that stands for the node in errors: its name, or its keyword.
    pub fn span(&self) -> Span {
        self.name.as_ref().map_or(self.keyword.span(), Ident::span)
    }
}

pub struct Dag {
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
    pub nests: Vec<crate::nest::NestDef>,
    /// The `Complete` nodes and the `ForEach` each names.
    pub completes: Vec<(usize, Ident)>,
    /// The operations with `compensate = ..`, each with the call that undoes it, by node id.
    pub compensations: Vec<(usize, Expr)>,
}

/// A labelled step or block: the nodes it holds are the ids `nodes` (a block's nodes are
/// built one after the other, so they are a range).
pub struct Region {
    pub label: syn::Lifetime,
    pub nodes: std::ops::Range<usize>,
}

impl Dag {
    pub fn add_edge(&mut self, from: usize, to: usize, why: u8) {
        *self.edges.entry((from, to)).or_insert(0) |= why;
    }
}

struct Builder<'a> {
    dag: Dag,
    cx: &'a mut Ctxt,
    branches: Vec<(usize, bool)>,
    groups: Vec<usize>,
    /// The sections around the step being built, innermost last.
    sections: Vec<usize>,
}

/// Builds the DAG of a workflow. Structural problems (empty blocks, bad options) go to `cx`.
pub fn build(workflow: &Workflow, cx: &mut Ctxt) -> Dag {
    let mut builder = Builder {
        dag: Dag {
            nodes: Vec::new(),
            edges: BTreeMap::new(),
            group_limits: Vec::new(),
            regions: Vec::new(),
            cancels: Vec::new(),
            sections: Vec::new(),
            gates: Vec::new(),
            nests: Vec::new(),
            completes: Vec::new(),
            compensations: Vec::new(),
        },
        cx,
        branches: Vec::new(),
        groups: Vec::new(),
        sections: Vec::new(),
    };
    if workflow.body.is_empty() {
        builder.cx.error(
            workflow.body_span,
            "a workflow needs at least one step, as in `{ Operation(work()) }`",
        );
    }
    builder.sequence(&workflow.body);
    let mut dag = builder.dag;
    name_nodes(&mut dag);
    dag
}

impl Builder<'_> {
    /// Builds steps in sequence; returns (entries, exits).
    fn sequence(&mut self, steps: &[Step]) -> (Vec<usize>, Vec<usize>) {
        let mut entries = Vec::new();
        let mut exits: Vec<usize> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let (step_entries, step_exits) = self.step(step);
            if step_entries.is_empty() {
                continue;
            }
            for &from in &exits {
                for &to in &step_entries {
                    self.dag.add_edge(from, to, edge::SEQUENCE);
                }
            }
            if i == 0 || entries.is_empty() {
                entries = step_entries;
            }
            exits = step_exits;
        }
        (entries, exits)
    }

    fn step(&mut self, step: &Step) -> (Vec<usize>, Vec<usize>) {
        match step {
            Step::Operation(op) => {
                let id = self.operation(op);
                (vec![id], vec![id])
            }
            Step::Sequential(block) => {
                let exclusive = options::sequential(&block.options, self.cx);
                self.non_empty(block, "Sequential");
                let opened = self.open_section(exclusive.as_ref());
                let ends = self.sequence(&block.steps);
                self.close_section(opened);
                ends
            }
            Step::Parallel(block) => self.parallel(block),
            Step::Conditional(cond) => self.conditional(cond),
            Step::Signal(signal) => {
                let id = self.signal(signal);
                (vec![id], vec![id])
            }
            Step::Delay(delay) => {
                let id = self.delay(delay);
                (vec![id], vec![id])
            }
            Step::Cancel(cancel) => {
                let target = Expr::Verbatim(cancel.target.tokens());
                let id = self.instant(Kind::Cancel, &cancel.keyword, target);
                let target = match &cancel.target {
                    CancelTarget::Label(label) => CancelTarget::Label(label.clone()),
                    CancelTarget::Node(name) => CancelTarget::Node(name.clone()),
                };
                self.dag.cancels.push((id, target));
                (vec![id], vec![id])
            }
            Step::Terminate(term) => {
                let id = self.instant(Kind::Terminate, &term.keyword, term.value.clone());
                (vec![id], vec![id])
            }
            Step::Labelled(label, inner) => self.labelled(label, inner),
            Step::Gate(gate) => self.gate(gate),
            Step::Pick(pick) => self.pick(pick),
            Step::Nest(nest) => {
                let id = self.nest(nest);
                (vec![id], vec![id])
            }
            Step::Complete(complete) => {
                let target = Expr::Verbatim(quote::ToTokens::to_token_stream(&complete.target));
                let id = self.instant(Kind::Complete, &complete.keyword, target);
                self.dag.completes.push((id, complete.target.clone()));
                (vec![id], vec![id])
            }
            Step::Invalid => (Vec::new(), Vec::new()),
        }
    }

    fn non_empty(&mut self, block: &BlockStep, kind: &str) {
        if block.steps.is_empty() {
            self.cx.error(
                block.brace,
                format!("empty `{kind}` block: give it at least one step, or remove it"),
            );
        }
    }

    /// Opens the section of `exclusive = group`, if given; whether it opened one.
    fn open_section(&mut self, group: Option<&syn::LitStr>) -> bool {
        group.is_some_and(|group| {
            rules::open_section(&mut self.dag, &mut self.sections, group, self.cx)
        })
    }

    fn close_section(&mut self, opened: bool) {
        if opened {
            self.sections.pop();
        }
    }

    /// Adds `node`, the last node pushed, to the sections around it.
    fn enter_sections(&mut self, node: usize) {
        for &section in &self.sections {
            self.dag.sections[section].nodes.push(node);
        }
    }

    fn operation(&mut self, op: &OpStep) -> usize {
        let options = options::operation(&op.options, self.cx);
        let opened = self.open_section(options.exclusive.as_ref());
        let (rule, when_span) = options
            .rule
            .map_or((Rule::Default, None), |(rule, span)| (rule, Some(span)));
        self.dag.nodes.push(Node {
            kind: Kind::Operation,
            name: op.name.clone(),
            display: String::new(),
            keyword: op.keyword.clone(),
            expr: op.call.clone(),
            after: options.after,
            policy: options.policy,
            branches: self.branches.clone(),
            groups: self.groups.clone(),
            rule,
            when_span,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            waits: None,
        });
        let id = self.dag.nodes.len() - 1;
        if let Some(undo) = options.compensate {
            self.dag.compensations.push((id, undo));
        }
        self.enter_sections(id);
        self.close_section(opened);
        id
    }

    /// A node that waits for the environment: it has no options, and its `expr` is its label
    /// (a `Signal`) or its duration (a `Delay`).
    fn waiting(
        &mut self,
        kind: Kind,
        name: &Option<Ident>,
        keyword: &Ident,
        expr: Expr,
        waits: Waits,
    ) -> usize {
        self.dag.nodes.push(Node {
            kind,
            name: name.clone(),
            display: String::new(),
            keyword: keyword.clone(),
            expr,
            after: Vec::new(),
            policy: options::Policy::default(),
            branches: self.branches.clone(),
            groups: self.groups.clone(),
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            rule: Rule::Default,
            when_span: None,
            waits: Some(waits),
        });
        let node = self.dag.nodes.len() - 1;
        self.enter_sections(node);
        node
    }

    /// A `Cancel` or `Terminate` node: no options, no limits (it does its work the moment
    /// it starts). A `Cancel`'s `expr` is its target's tokens, which read no node.
    fn instant(&mut self, kind: Kind, keyword: &Ident, expr: Expr) -> usize {
        self.dag.nodes.push(Node {
            kind,
            name: None,
            display: String::new(),
            keyword: keyword.clone(),
            expr,
            after: Vec::new(),
            policy: options::Policy::default(),
            branches: self.branches.clone(),
            groups: Vec::new(),
            rule: Rule::Default,
            when_span: None,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            waits: None,
        });
        let node = self.dag.nodes.len() - 1;
        self.enter_sections(node);
        node
    }

    /// A nest node: its body's DAG is built here, as a workflow of its own, and the node
    /// reads what its source and its body read of this graph (`nest::reads`).
    fn nest(&mut self, step: &std::rc::Rc<crate::nest::NestStep>) -> usize {
        // An empty body is reported where it is parsed.
        let body = step
            .body
            .as_ref()
            .filter(|body| !body.body.is_empty())
            .map(|body| build(body, self.cx));
        let expr = crate::nest::reads(step, body.as_ref());
        let after = step.after().to_vec();
        self.dag.nodes.push(Node {
            kind: step.kind(),
            name: step.name.clone(),
            display: String::new(),
            keyword: step.keyword.clone(),
            expr,
            after,
            policy: options::Policy::default(),
            branches: self.branches.clone(),
            groups: self.groups.clone(),
            rule: Rule::Default,
            when_span: None,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            waits: None,
        });
        let node = self.dag.nodes.len() - 1;
        self.enter_sections(node);
        self.dag.nests.push(crate::nest::NestDef {
            node,
            step: step.clone(),
            body,
        });
        node
    }

    fn signal(&mut self, step: &SignalStep) -> usize {
        let waits = Waits::Signal {
            signal: step.signal.clone(),
            ty: Box::new(step.ty.clone()),
            transient: step.transient,
        };
        // The label: the arguments as written. Never walked for names: a `Signal` reads none.
        let label = Expr::Verbatim(step.args.clone());
        self.waiting(Kind::Signal, &step.name, &step.keyword, label, waits)
    }

    fn delay(&mut self, step: &DelayStep) -> usize {
        let waits = Waits::Delay { ms: step.ms };
        self.waiting(
            Kind::Delay,
            &step.name,
            &step.keyword,
            step.after.clone(),
            waits,
        )
    }

    /// `'label: step`: the step, and the region of its nodes. A label names a region once.
    fn labelled(&mut self, label: &syn::Lifetime, inner: &Step) -> (Vec<usize>, Vec<usize>) {
        if let Some(first) = self
            .dag
            .regions
            .iter()
            .find(|r| r.label.ident == label.ident)
        {
            self.cx.error(
                label.span(),
                format!(
                    "duplicate label `{label}`: it already names the step{}; every label needs its own name",
                    crate::suggest::on_line(first.label.span()),
                ),
            );
        }
        let first = self.dag.nodes.len();
        let ends = self.step(inner);
        let last = self.dag.nodes.len();
        self.dag.regions.push(Region {
            label: label.clone(),
            nodes: first..last,
        });
        ends
    }

    fn parallel(&mut self, block: &BlockStep) -> (Vec<usize>, Vec<usize>) {
        let options = options::parallel(&block.options, self.cx);
        self.non_empty(block, "Parallel");
        let depth = self.groups.len();
        if let Some(limit) = options.max_concurrency {
            self.dag.group_limits.push(limit);
            self.groups.push(self.dag.group_limits.len() - 1);
        }
        let opened = self.open_section(options.exclusive.as_ref());
        let mut entries = Vec::new();
        let mut exits = Vec::new();
        for step in &block.steps {
            let (e, x) = self.step(step);
            entries.extend(e);
            exits.extend(x);
        }
        self.close_section(opened);
        self.groups.truncate(depth);
        (entries, exits)
    }

    /// A gate block: each child is an arm; the arms' exits reach the gate's node, which is
    /// the block's only exit.
    fn gate(&mut self, step: &GateStep) -> (Vec<usize>, Vec<usize>) {
        let block = &step.block;
        let kind = step.keyword.to_string();
        let options = options::gate(
            &block.options,
            step.race,
            block.steps.len(),
            &step.keyword,
            self.cx,
        );
        self.non_empty(block, &kind);
        if step.race && block.steps.len() == 1 {
            self.cx.error(
                step.keyword.span(),
                "a `Race` needs at least two branches to race, found 1; add a branch, or write the step without `Race`",
            );
        }
        let depth = self.groups.len();
        if let Some(limit) = options.max_concurrency {
            self.dag.group_limits.push(limit);
            self.groups.push(self.dag.group_limits.len() - 1);
        }
        let opened = self.open_section(options.exclusive.as_ref());
        let mut entries = Vec::new();
        let mut arms = Vec::new();
        for child in &block.steps {
            let first = self.dag.nodes.len();
            let (e, x) = self.step(child);
            let last = self.dag.nodes.len();
            if e.is_empty() {
                continue;
            }
            entries.extend(e);
            arms.push(ArmBlock {
                nodes: (first..last).collect(),
                exits: x,
            });
        }
        self.groups.truncate(depth);
        let node = self.gate_node(step.name.clone(), &step.keyword, &arms);
        self.close_section(opened);
        self.dag.gates.push(GateBlock {
            node,
            race: step.race,
            min: options.min,
            rest_cancel: options.rest_cancel,
            arms,
        });
        if entries.is_empty() {
            entries.push(node);
        }
        (entries, vec![node])
    }

    /// A `Pick`: a gate of `min = 1, rest = cancel` whose arms are its triggers alone (each arm
    /// withdraws as a whole: its trigger and its steps). An arm's steps follow its trigger; the
    /// steps after the `Pick` follow the last steps of every arm and the gate.
    fn pick(&mut self, step: &PickStep) -> (Vec<usize>, Vec<usize>) {
        let mut entries = Vec::new();
        let mut exits = Vec::new();
        let mut arms = Vec::new();
        for arm in &step.arms {
            let first = self.dag.nodes.len();
            let (trigger, _) = self.step(&arm.trigger);
            let (body_entries, body_exits) = self.sequence(&arm.body);
            let last = self.dag.nodes.len();
            for &from in &trigger {
                for &to in &body_entries {
                    self.dag.add_edge(from, to, edge::SEQUENCE);
                }
            }
            entries.extend(trigger.iter().copied());
            exits.extend(if body_entries.is_empty() {
                trigger.clone()
            } else {
                body_exits
            });
            arms.push(ArmBlock {
                nodes: (first..last).collect(),
                exits: trigger,
            });
        }
        let node = self.gate_node(None, &step.keyword, &arms);
        self.dag.gates.push(GateBlock {
            node,
            race: true,
            min: 1,
            rest_cancel: true,
            arms,
        });
        if entries.is_empty() {
            entries.push(node);
        }
        exits.push(node);
        (entries, exits)
    }

    /// The node of a gate (`Race`, `Parallel(min = k)`, `Pick`) after its arms, which reach it
    /// through gated edges from their exits.
    fn gate_node(&mut self, name: Option<Ident>, keyword: &Ident, arms: &[ArmBlock]) -> usize {
        let expr: Expr = syn::Expr::Path(syn::ExprPath {
            attrs: Vec::new(),
            qself: None,
            path: keyword.clone().into(),
        });
        self.dag.nodes.push(Node {
            kind: Kind::Gate,
            name,
            display: String::new(),
            keyword: keyword.clone(),
            expr,
            after: Vec::new(),
            policy: options::Policy::default(),
            branches: self.branches.clone(),
            groups: self.groups.clone(),
            rule: Rule::Default,
            when_span: None,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            waits: None,
        });
        let node = self.dag.nodes.len() - 1;
        self.enter_sections(node);
        for arm in arms {
            for &exit in &arm.exits {
                self.dag.add_edge(exit, node, edge::GATED);
            }
        }
        node
    }

    fn conditional(&mut self, cond: &CondStep) -> (Vec<usize>, Vec<usize>) {
        self.dag.nodes.push(Node {
            kind: Kind::Decision,
            name: None,
            display: String::new(),
            keyword: cond.keyword.clone(),
            expr: cond.test.clone(),
            after: Vec::new(),
            policy: options::Policy::default(),
            branches: self.branches.clone(),
            groups: Vec::new(),
            rule: Rule::Default,
            when_span: None,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            waits: None,
        });
        let decision = self.dag.nodes.len() - 1;
        self.enter_sections(decision);
        if cond.then.is_empty() {
            let fix = if cond.otherwise.is_some() {
                "; to act only when the test is false, negate the test and move the `else` steps here"
            } else {
                ", or remove the `Conditional`"
            };
            self.cx.error(
                cond.then_brace,
                format!("empty `Conditional` branch: give it at least one step{fix}"),
            );
        }
        let (then_entries, then_exits, then_nodes) = self.branch(decision, true, &cond.then);
        for &to in &then_entries {
            self.dag.add_edge(decision, to, edge::THEN);
        }
        let mut exits = then_exits;
        match &cond.otherwise {
            Some((else_span, steps)) => {
                if steps.is_empty() {
                    self.cx.error(
                        *else_span,
                        "empty `else` branch: give it at least one step, or remove the `else`",
                    );
                }
                let (else_entries, else_exits, else_nodes) = self.branch(decision, false, steps);
                for &to in &else_entries {
                    self.dag.add_edge(decision, to, edge::ELSE);
                }
                exits.extend(else_exits);
                self.dag.nodes[decision].else_nodes = else_nodes;
            }
            None => exits.push(decision),
        }
        self.dag.nodes[decision].then_nodes = then_nodes;
        if exits.is_empty() {
            exits.push(decision);
        }
        (vec![decision], exits)
    }

    fn branch(
        &mut self,
        decision: usize,
        then: bool,
        steps: &[Step],
    ) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
        self.branches.push((decision, then));
        let first = self.dag.nodes.len();
        let (entries, exits) = self.sequence(steps);
        let last = self.dag.nodes.len();
        self.branches.pop();
        (entries, exits, (first..last).collect())
    }
}

/// Gives every node a unique display name: its binding, or for an unnamed operation the name of
/// the function it calls (`reject`, or `reject#2` when several steps call `reject`), for an
/// unnamed `Signal` the signal's name (numbered the same way), or `decision#N` for the N-th
/// `Conditional` and `delay#N` for the N-th unnamed `Delay`.
fn name_nodes(dag: &mut Dag) {
    let bases: Vec<String> = dag
        .nodes
        .iter()
        .map(|node| match (&node.name, node.kind) {
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

/// The text of an expression, for labels: as the user wrote it (`parse::<u32>(&s)`), on one
/// line; or, for tokens without a position in the source (made by another macro), its tokens
/// spaced as people write them.
pub fn source_text(expr: &Expr) -> String {
    let tokens = quote::ToTokens::to_token_stream(expr);
    as_written(tokens.clone()).unwrap_or_else(|| tidy(tokens))
}

/// The tokens as written: each token's own source text, and one space wherever the source has
/// space, a comment or a line break between two tokens. `None` when a token has no position or
/// the positions do not follow the tokens.
///
/// Each token is read on its own: inside the compiler a span that covers the whole expression
/// exists only on nightly (`Span::join`).
fn as_written(tokens: TokenStream) -> Option<String> {
    let mut text = Text {
        out: String::new(),
        end: None,
    };
    text.trees(tokens)?;
    Some(text.out)
}

struct Text {
    out: String,
    /// Where the last token ends: (line, column).
    end: Option<(usize, usize)>,
}

impl Text {
    fn trees(&mut self, tokens: TokenStream) -> Option<()> {
        for tree in tokens {
            match tree {
                TokenTree::Group(group) => {
                    let (open, close) = match group.delimiter() {
                        Delimiter::Parenthesis => ('(', ')'),
                        Delimiter::Brace => ('{', '}'),
                        Delimiter::Bracket => ('[', ']'),
                        Delimiter::None => {
                            self.trees(group.stream())?;
                            continue;
                        }
                    };
                    // A reprinted group keeps only its whole span: the delimiters are its
                    // first and last character.
                    let (start, end) = (group.span().start(), group.span().end());
                    self.piece(
                        &open.to_string(),
                        (start.line, start.column),
                        (start.line, start.column + 1),
                    )?;
                    self.trees(group.stream())?;
                    let close_start = (end.line, end.column.checked_sub(1)?);
                    self.piece(&close.to_string(), close_start, (end.line, end.column))?;
                }
                other => {
                    let span = other.span();
                    let text = span.source_text().unwrap_or_else(|| other.to_string());
                    let (start, end) = (span.start(), span.end());
                    self.piece(&text, (start.line, start.column), (end.line, end.column))?;
                }
            }
        }
        Some(())
    }

    fn piece(&mut self, text: &str, start: (usize, usize), end: (usize, usize)) -> Option<()> {
        if start.0 == 0 || end < start {
            return None;
        }
        if let Some(last) = self.end {
            if start < last {
                return None;
            }
            if start > last {
                self.out.push(' ');
            }
        }
        self.out.push_str(text);
        self.end = Some(end);
        Some(())
    }
}

/// The tokens, spaced as people write them.
fn tidy(tokens: TokenStream) -> String {
    let mut text = tokens.to_string();
    for (spaced, tight) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" . ", "."),
        (" ,", ","),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
        ("& ", "&"),
        (" ?", "?"),
        (" (", "("),
        ("! (", "!("),
        ("(| ", "(|"),
        (" | ", "| "),
    ] {
        text = text.replace(spaced, tight);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::source_text;
    use syn::Expr;

    fn written(source: &str) -> String {
        let expr: Expr = syn::parse_str(source).expect("an expression");
        source_text(&expr)
    }

    #[test]
    fn labels_keep_the_source_text() {
        assert_eq!(written("parse::<u32>(&s)"), "parse::<u32>(&s)");
        assert_eq!(
            written("q  &&\n   !flag.load(Ordering::SeqCst)"),
            "q && !flag.load(Ordering::SeqCst)"
        );
        assert_eq!(written("f(a, /* b */ c)"), "f(a, c)");
        assert_eq!(
            written("xs.iter().map(|x| x * 2)"),
            "xs.iter().map(|x| x * 2)"
        );
        assert_eq!(
            written("r#type(1_000u32, \"a  b\")"),
            "r#type(1_000u32, \"a  b\")"
        );
    }

    #[test]
    fn tokens_without_a_position_are_spaced_tidily() {
        let made: Expr = syn::parse_quote!(fetch(&order, ctx.id));
        assert_eq!(source_text(&made), "fetch(&order, ctx.id)");
    }
}
