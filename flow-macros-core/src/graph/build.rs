//! The builder: steps into nodes and edges. Each step returns its *entries* and *exits*: a
//! `Sequential` joins every exit of step *k* to every entry of step *k+1*; a `Parallel` unions
//! its children; a `Conditional`'s entry is its decision node, and its exits are the exits of
//! both branches (or the decision itself when there is no `else`).

use std::collections::BTreeMap;

use syn::{Expr, Ident};

use super::display::name_nodes;
use super::{Dag, Kind, Node, Region, Waits, edge};
use crate::ctxt::Ctxt;
use crate::parse::options;
use crate::parse::policy::Policy;
use crate::parse::rules::Rule;
use crate::parse::{
    BlockStep, CancelTarget, CondStep, DelayStep, OpStep, SignalStep, Step, Workflow,
};
use crate::suggest::on_line;

/// The state of one build: the DAG so far, and where the step being built sits.
pub(super) struct Builder<'a> {
    /// The graph so far.
    pub(super) dag: Dag,
    /// Where the errors found while building go.
    pub(super) cx: &'a mut Ctxt,
    /// The enclosing branches, outermost first.
    pub(super) branches: Vec<(usize, bool)>,
    /// The limited `Parallel` blocks around the step.
    pub(super) groups: Vec<usize>,
    /// The sections around the step being built, innermost last.
    pub(super) sections: Vec<usize>,
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
    /// A node of `kind` at the current place: no name, no options, no rule.
    pub(super) fn node(&self, kind: Kind, keyword: &Ident, expr: Expr) -> Node {
        Node {
            kind,
            name: None,
            display: String::new(),
            keyword: keyword.clone(),
            expr,
            after: Vec::new(),
            policy: Policy::default(),
            branches: self.branches.clone(),
            groups: self.groups.clone(),
            rule: Rule::Default,
            when_span: None,
            then_nodes: Vec::new(),
            else_nodes: Vec::new(),
            waits: None,
            patch: None,
        }
    }

    /// Adds `node`, and it to the sections around it; returns its id.
    pub(super) fn push(&mut self, node: Node) -> usize {
        self.dag.nodes.push(node);
        let id = self.dag.nodes.len() - 1;
        self.enter_sections(id);
        id
    }

    /// Builds steps in sequence; returns (entries, exits).
    pub(super) fn sequence(&mut self, steps: &[Step]) -> (Vec<usize>, Vec<usize>) {
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

    /// Builds one step; returns (entries, exits).
    pub(super) fn step(&mut self, step: &Step) -> (Vec<usize>, Vec<usize>) {
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

    /// Reports a block without steps.
    pub(super) fn non_empty(&mut self, block: &BlockStep, kind: &str) {
        if block.steps.is_empty() {
            self.cx.error(
                block.brace,
                format!("empty `{kind}` block: give it at least one step, or remove it"),
            );
        }
    }

    fn operation(&mut self, op: &OpStep) -> usize {
        let options = options::operation(&op.options, self.cx);
        let opened = self.open_section(options.exclusive.as_ref());
        let (rule, when_span) = options
            .rule
            .map_or((Rule::Default, None), |(rule, span)| (rule, Some(span)));
        let id = self.push(Node {
            name: op.name.clone(),
            after: options.after,
            policy: options.policy,
            rule,
            when_span,
            ..self.node(Kind::Operation, &op.keyword, op.call.clone())
        });
        if let Some(undo) = options.compensate {
            self.dag.compensations.push((id, undo));
        }
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
        self.push(Node {
            name: name.clone(),
            waits: Some(waits),
            ..self.node(kind, keyword, expr)
        })
    }

    /// A `Cancel` or `Terminate` node: no options, no limits (it does its work the moment
    /// it starts). A `Cancel`'s `expr` is its target's tokens, which read no node.
    fn instant(&mut self, kind: Kind, keyword: &Ident, expr: Expr) -> usize {
        self.push(Node {
            groups: Vec::new(),
            ..self.node(kind, keyword, expr)
        })
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
                    on_line(first.label.span()),
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

    fn conditional(&mut self, cond: &CondStep) -> (Vec<usize>, Vec<usize>) {
        if let Some(id) = &cond.patch
            && self
                .dag
                .nodes
                .iter()
                .filter_map(|node| node.patch.as_ref())
                .any(|other| other.value() == id.value())
        {
            self.cx.error(
                id.span(),
                format!(
                    "two version markers named \"{}\": give each `Patched` its own id",
                    id.value()
                ),
            );
        }
        let decision = self.push(Node {
            groups: Vec::new(),
            patch: cond.patch.clone(),
            ..self.node(Kind::Decision, &cond.keyword, cond.test.clone())
        });
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
