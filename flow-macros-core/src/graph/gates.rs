//! Gates: `Race`, `Parallel(min = k)` and `Pick`. Each child of the block (each trigger of a
//! `Pick`) is an arm; the arms' exits reach the gate's node through gated edges.

use syn::{Expr, Ident};

use super::build::Builder;
use super::{ArmBlock, GateBlock, Kind, Node, edge};
use crate::parse::options;
use crate::parse::{GateStep, PickStep};

impl Builder<'_> {
    /// A gate block: each child is an arm; the arms' exits reach the gate's node, which is
    /// the block's only exit.
    pub(super) fn gate(&mut self, step: &GateStep) -> (Vec<usize>, Vec<usize>) {
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
    pub(super) fn pick(&mut self, step: &PickStep) -> (Vec<usize>, Vec<usize>) {
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
        let node = self.push(Node {
            name,
            ..self.node(Kind::Gate, keyword, expr)
        });
        for arm in arms {
            for &exit in &arm.exits {
                self.dag.add_edge(exit, node, edge::GATED);
            }
        }
        node
    }
}
