//! Settling nodes: a node's end is recorded, and its successors learn whether they are ready,
//! skipped or aborted; a decision is settled the moment its test has run.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::rules::{rule_runs, runs_after_failure};
use super::{ALL_NODES, BY_RULE, BY_TEST, Halt, NO_CAUSE, NOT_CATCHABLE, Scheduler, Settle};
use crate::error::{NodeError, render};
use crate::events::EventKind;
use crate::graph::{Instant, NodeKind, Plan};
use crate::nest_ctx::NestShared;
use crate::nodes::Leaves;
use crate::panic::panic_message;
use crate::policy::FailurePolicy;
use crate::status::NodeStatus;

impl Scheduler {
    /// `node`'s final error rendered once, kept for the report to share with the event.
    fn render_final(&mut self, node: u32) -> Arc<str> {
        let rendered = match self
            .state
            .errors
            .get(node as usize)
            .and_then(Option::as_ref)
        {
            Some(error) => render(error),
            None => Arc::from(""),
        };
        if self.extras.rendered.is_empty() {
            self.extras.rendered.resize(self.len(), None);
        }
        self.extras.rendered[node as usize] = Some(Arc::clone(&rendered));
        rendered
    }

    pub(super) fn decide(&mut self, leaves: &mut Leaves<'_>, node: u32) {
        if let Some(&instant) = self.plan().control.instants.get(node as usize)
            && instant != Instant::None
        {
            return self.instant(leaves, node, instant);
        }
        let state = &self.state;
        let chosen = catch_unwind(AssertUnwindSafe(|| {
            leaves[node as usize].as_mut().decide(state)
        }));
        match chosen {
            Ok(_) if self.graph.nodes[node as usize].kind == NodeKind::Gate => {
                // A gate's node wrote its winners.
                self.settle(node, Settle::Completed);
            }
            Ok(branch) => {
                // The test ran: every failure it named is caught.
                let caught = self
                    .catches
                    .iter()
                    .filter(|(d, _)| *d == node)
                    .map(|&(_, n)| n);
                self.caught.extend(caught);
                let plan = self.plan();
                let untaken = if branch {
                    plan.else_nodes[node as usize]
                } else {
                    plan.then_nodes[node as usize]
                };
                self.decided = Some(branch);
                self.skip_all(untaken);
                self.settle(node, Settle::Completed);
            }
            Err(payload) => self.fail(node, NodeError::Panicked(panic_message(payload))),
        }
    }

    /// A `Cancel` or `Terminate` step, the moment it starts: it requests its withdrawal and
    /// completes. Its target's nodes that have ended keep their status (a failure there stays
    /// a failure); the others are withdrawn before anything else starts or is polled.
    #[cold]
    #[inline(never)]
    fn instant(&mut self, leaves: &mut Leaves<'_>, node: u32, instant: Instant) {
        match instant {
            Instant::Cancel { scope } => {
                self.withdraw(scope, node);
                self.settle(node, Settle::Completed);
            }
            Instant::Terminate => {
                // The step's expression puts the run's output in the run's `TermCell`.
                let state = &self.state;
                let given = catch_unwind(AssertUnwindSafe(|| {
                    leaves[node as usize].as_mut().decide(state)
                }));
                match given {
                    Ok(true) => {
                        self.terminated = true;
                        self.withdraw(ALL_NODES, node);
                        self.settle(node, Settle::Completed);
                    }
                    Ok(false) => self.fail(
                        node,
                        NodeError::Internal("a `Terminate` step found an input missing"),
                    ),
                    Err(payload) => self.fail(node, NodeError::Panicked(panic_message(payload))),
                }
            }
            Instant::Complete { node: target } => {
                // The `ForEach`'s driver drops its live instances and ends with the outputs
                // of those that completed, on its next poll (the request wakes it).
                if !self.complete_nest(target) {
                    self.complete_nest_early(target);
                }
                self.settle(node, Settle::Completed);
            }
            Instant::None => self.settle(node, Settle::Completed),
        }
    }

    /// A `Complete` step that ran before its nest node started: the node's shared state is
    /// made now, already completing, so that its driver ends at once without an instance.
    #[cold]
    fn complete_nest_early(&mut self, target: u32) {
        let graph = self.graph;
        let Some(status) = self.nodes.get(target as usize).map(|n| n.status) else {
            return;
        };
        let Ok(place) = graph
            .plan
            .control
            .nests
            .binary_search_by_key(&target, |n| n.node)
        else {
            return;
        };
        let Some(home) = self.nest_home.as_deref_mut() else {
            return;
        };
        if status.is_terminal() {
            return;
        }
        let nest = &graph.plan.control.nests[place];
        let name = graph.nodes[target as usize].name;
        home.shared[place]
            .get_or_insert_with(|| Arc::new(NestShared::new(name, nest.kind)))
            .complete();
    }

    pub(super) fn fail(&mut self, node: u32, error: NodeError) {
        let len = self.len();
        self.state.set_error(node as usize, len, error);
        self.settle(node, Settle::Failed);
        if self.policy == FailurePolicy::FailFast
            && self.halt.is_none()
            && self.catchable(node) == NOT_CATCHABLE
        {
            self.set_halt(Halt::FailFast(node));
        }
    }

    /// What may still happen to a failure of `node`, for `FailFast`: [`BY_TEST`] when
    /// something could catch it (a `Conditional` test names it, or names a node downstream of
    /// it, which the failure would abort; or it reaches a gate through an arm, which catches
    /// it if the gate fires), [`BY_RULE`] when a step with a trigger rule downstream of it must
    /// still run (a cleanup after the failure). Node ids are in topological order, so one
    /// backward pass computes it for every node.
    pub(super) fn catchable(&mut self, node: u32) -> u8 {
        if self.catchable.is_empty() {
            let plan = self.plan();
            let rules = plan.control.rules;
            let mut catchable = vec![NOT_CATCHABLE; self.len()];
            for n in (0..self.len()).rev() {
                let mut any = NOT_CATCHABLE;
                plan.for_each_target(n, |target, caught| {
                    any |= catchable[target];
                    if caught {
                        any |= BY_TEST;
                    }
                    if runs_after_failure(rules, target as u32) {
                        any |= BY_RULE;
                    }
                });
                // A gate catches its arms' failures, unless it fails itself.
                if plan.successors(n).iter().any(|&e| e & Plan::GATE != 0) {
                    any |= BY_TEST;
                }
                catchable[n] = any;
            }
            self.catchable = catchable;
        }
        self.catchable[node as usize]
    }

    /// Ends the run early: drops every running operation and aborts every unfinished node.
    pub(super) fn stop_all(&mut self, leaves: &mut Leaves<'_>) {
        self.drop_lingering(leaves, ALL_NODES);
        for node in 0..self.len() as u32 {
            if self.nodes[node as usize].status == NodeStatus::Running {
                leaves[node as usize].as_mut().stop();
                let attempts = self.nodes[node as usize].attempt;
                self.release(node);
                self.record_attempts(node, attempts, 0);
            }
        }
        self.ready.clear();
        let len = self.len();
        for node in 0..len {
            if self.nodes[node].status.is_terminal() {
                continue;
            }
            self.nodes[node].status = NodeStatus::Aborted;
            self.settled += 1;
            self.failures += 1;
            let cause_id = match &self.halt {
                Some(Halt::FailFast(cause)) => *cause,
                _ => NO_CAUSE,
            };
            self.nodes[node].abort_cause = cause_id;
            let cause = (cause_id != NO_CAUSE).then(|| self.graph.nodes[cause_id as usize].name);
            let error = match (&self.halt, cause) {
                (_, Some(cause)) => NodeError::Aborted { cause },
                _ => NodeError::Cancelled,
            };
            self.state.set_error(node, len, error);
            let attempt = self.attempt_of(node as u32);
            self.emit(Some(node as u32), attempt, || EventKind::Aborted { cause });
        }
        if let Some(Halt::Cancelled(reason)) = self.halt {
            self.cancelled = Some(reason);
        }
    }

    /// Records that `node` settled as `how`. Returns whether it passes on a failure it carried
    /// rather than `how` (a trigger-rule node that completed after a failure reached it): then
    /// its successors learn [`Settle::Carried`]. A `bool`, so that where a node completes the
    /// common path still passes `how` on as the constant it is.
    #[inline(always)]
    pub(super) fn mark(&mut self, node: u32, how: Settle) -> bool {
        self.nodes[node as usize].status = match how {
            Settle::Completed | Settle::Carried(_) => NodeStatus::Completed,
            Settle::Failed => NodeStatus::Failed,
            Settle::Aborted(_) => NodeStatus::Aborted,
            Settle::Skipped => NodeStatus::Skipped,
            Settle::Withdrawn(_) => NodeStatus::Withdrawn,
        };
        self.settled += 1;
        if !matches!(how, Settle::Completed) || self.mark_more_always {
            // Not the common case, where there is nothing to record and no failure to pass on.
            return self.mark_more(node, how);
        }
        false
    }

    /// The rest of [`Scheduler::mark`]: passes a failure on, frees a critical section and
    /// records the event.
    #[cold]
    #[inline(never)]
    fn mark_more(&mut self, node: u32, how: Settle) -> bool {
        if !self.section_left.is_empty() {
            self.leave_sections(node);
        }
        let passed = self.carried(node, how);
        if matches!(how, Settle::Failed | Settle::Aborted(_)) {
            self.failures += 1;
            if !self.gates.is_empty() {
                self.catch_late(node);
            }
        }
        let state = &mut self.nodes[node as usize];
        if let Settle::Aborted(cause) | Settle::Withdrawn(cause) = how {
            // The status tells an abort's cause from a withdrawal's.
            state.abort_cause = cause;
        }
        if let Settle::Withdrawn(_) = how {
            self.withdrawn_any = true;
        }
        if let Settle::Completed | Settle::Carried(_) = how
            && self.nest_home.is_some()
        {
            self.linger(node);
        }
        if self.policy == FailurePolicy::FailFast
            && self.halt.is_none()
            && !matches!(
                passed,
                Settle::Completed | Settle::Skipped | Settle::Withdrawn(_)
            )
            && self.plan().successors(node as usize).is_empty()
        {
            // A failure reached the end of the graph: the run has failed. A failure carried
            // past a cleanup to the end fails it only if no test can catch it elsewhere.
            let cause = match passed {
                Settle::Aborted(cause) => Some(cause),
                Settle::Carried(cause) => (self.catchable(cause) & BY_TEST == 0).then_some(cause),
                _ => Some(node),
            };
            if let Some(cause) = cause {
                self.set_halt(Halt::FailFast(cause));
            }
        }
        if let Settle::Aborted(cause) = how {
            let cause = self.graph.nodes[cause as usize].name;
            let len = self.len();
            self.state
                .set_error(node as usize, len, NodeError::Aborted { cause });
        }
        if self.recording.is_some() {
            let attempt = self.attempt_of(node);
            if let Settle::Completed = how {
                self.environment_event(node, attempt);
            }
            let kind = match how {
                Settle::Completed | Settle::Carried(_) => EventKind::Completed {
                    branch: match self.graph.nodes[node as usize].kind {
                        NodeKind::Decision => self.decided.take(),
                        _ => None,
                    },
                },
                Settle::Failed => EventKind::Failed {
                    error: self.render_final(node),
                },
                Settle::Aborted(cause) => EventKind::Aborted {
                    cause: Some(self.graph.nodes[cause as usize].name),
                },
                Settle::Skipped => EventKind::Skipped,
                Settle::Withdrawn(cause) => EventKind::Withdrawn {
                    cause: self.graph.nodes[cause as usize].name,
                },
            };
            self.emit(Some(node), attempt, || kind);
        }
        matches!(passed, Settle::Carried(_))
    }

    /// What the environment did for a `Signal` or `Delay` step that completed: recorded
    /// before its `Completed`.
    fn environment_event(&mut self, node: u32, attempt: u32) {
        let kind = match self.graph.nodes[node as usize].kind {
            NodeKind::Delay => EventKind::TimerFired,
            NodeKind::Signal => {
                let signals = self.plan().control.signals;
                match signals.iter().find(|s| s.node == node) {
                    Some(info) => EventKind::SignalReceived { signal: info.name },
                    None => return,
                }
            }
            _ => return,
        };
        self.emit(Some(node), attempt, || kind);
    }

    #[inline(always)]
    pub(super) fn settle(&mut self, node: u32, how: Settle) {
        if self.mark(node, how) {
            self.settled_carrier(node);
        } else {
            self.settled_one(node, how);
        }
        while let Some((node, how)) = self.work.pop() {
            self.settled_one(node, how);
        }
    }

    /// Tells everything after `node` that it has settled, passing on its failure (the cause)
    /// or its skip; nodes settled in turn go on `work`.
    #[inline(always)]
    fn settled_one(&mut self, node: u32, how: Settle) {
        let (cause, skipped) = match how {
            // The common case: nothing to pass on.
            Settle::Completed => (NO_CAUSE, false),
            Settle::Failed => (node, false),
            Settle::Aborted(cause) | Settle::Carried(cause) => (cause, false),
            // Withdrawn passes on like a skip: successors outside the withdrawn scope count
            // it as done, and those that read its data are withdrawn too (`reach_one`).
            Settle::Skipped | Settle::Withdrawn(_) => {
                self.close_branches(node, how);
                (NO_CAUSE, true)
            }
        };
        self.reach(self.plan().successors(node as usize), node, cause, skipped);
    }

    /// A trigger-rule node that completed after a failure reached it has settled: its
    /// successors learn of the failure it carried.
    #[cold]
    #[inline(never)]
    fn settled_carrier(&mut self, node: u32) {
        let cause = self.nodes[node as usize].abort_cause;
        self.settled_one(node, Settle::Carried(cause));
    }

    /// A skipped or withdrawn decision takes neither branch: both end the same way.
    #[cold]
    fn close_branches(&mut self, node: u32, how: Settle) {
        if self.graph.nodes[node as usize].kind == NodeKind::Decision {
            let plan = self.plan();
            self.close_all(plan.then_nodes[node as usize], how);
            self.close_all(plan.else_nodes[node as usize], how);
        }
    }

    /// Marks a whole untaken branch skipped, then tells the nodes outside it.
    fn skip_all(&mut self, branch: &'static [u32]) {
        self.close_all(branch, Settle::Skipped);
    }

    /// Marks every node of `nodes` that has not ended `how` (skipped or withdrawn), then tells
    /// the nodes outside it (through `work`).
    fn close_all(&mut self, nodes: &'static [u32], how: Settle) {
        for &node in nodes {
            if !self.nodes[node as usize].status.is_terminal() {
                self.mark(node, how);
                if let Settle::Withdrawn(_) = how {
                    // Passed on now, so not again when its predecessors settle.
                    self.nodes[node as usize].remaining = 0;
                }
                self.work.push((node, how));
            }
        }
    }

    /// Asks for the nodes of `scope` (an index into `Control::scopes`, or [`ALL_NODES`]) that
    /// have not ended to be withdrawn, `cause` being the node that decided it. The request is
    /// applied before anything else is started or polled: running nodes have their future
    /// dropped at once. Callable from settle code (a gate that fires, a `Cancel`).
    pub(super) fn withdraw(&mut self, scope: u32, cause: u32) {
        self.withdrawals.push((scope, cause));
        self.interrupt = true;
    }

    /// Applies the queued withdrawals: running nodes are stopped (their futures dropped) and
    /// released, ready ones leave `ready`, and every node of the scope that has not ended is
    /// marked withdrawn; then the nodes after them learn of it. Withdrawals that this queues
    /// in turn (a gate that fires or fails) are applied too.
    #[cold]
    #[inline(never)]
    pub(super) fn apply_withdrawals(&mut self, leaves: &mut Leaves<'_>) {
        let mut i = 0;
        while let Some(&(scope, cause)) = self.withdrawals.get(i) {
            i += 1;
            self.drop_lingering(leaves, scope);
            if scope == ALL_NODES {
                for node in 0..self.len() as u32 {
                    self.withdraw_node(leaves, node, cause);
                }
            } else {
                let plan = self.plan();
                for &node in plan.control.scopes[scope as usize] {
                    self.withdraw_node(leaves, node, cause);
                }
            }
            while let Some((node, how)) = self.work.pop() {
                self.settled_one(node, how);
            }
        }
        self.withdrawals.clear();
        self.ready
            .retain(|&node| self.nodes[node as usize].status == NodeStatus::Ready);
        self.interrupt = self.halt.is_some();
    }

    /// Withdraws one node unless it has ended; its successors learn of it from `work`.
    fn withdraw_node(&mut self, leaves: &mut Leaves<'_>, node: u32, cause: u32) {
        let status = self.nodes[node as usize].status;
        if status.is_terminal() {
            return;
        }
        if status == NodeStatus::Running {
            leaves[node as usize].as_mut().stop();
            let attempts = self.nodes[node as usize].attempt;
            self.release(node);
            self.record_attempts(node, attempts, 0);
        }
        self.mark(node, Settle::Withdrawn(cause));
        // A node some of whose predecessors have not settled passes its end on only once they
        // have (`reach_withdrawn`): nothing after it starts before what comes before it ended,
        // and no node of a branch starts before its decision has run.
        if self.nodes[node as usize].remaining == 0 {
            self.work.push((node, Settle::Withdrawn(cause)));
        }
    }

    /// A predecessor of `node`, withdrawn before all its predecessors had settled, has
    /// settled: once the last has, `node` passes its withdrawal on.
    #[cold]
    #[inline(never)]
    fn reach_withdrawn(&mut self, node: u32) {
        let state = &mut self.nodes[node as usize];
        if state.remaining == 0 {
            return;
        }
        state.remaining -= 1;
        if state.remaining == 0 {
            let cause = state.abort_cause;
            self.work.push((node, Settle::Withdrawn(cause)));
        }
    }

    /// Tells the targets of `entries` that `node` has settled; `cause` is the failure it passes
    /// on (`NO_CAUSE` if none), `skipped` whether it was skipped.
    ///
    /// Not recursive (a join lists nodes, never joins), so that it inlines where a node settles.
    #[inline(always)]
    fn reach(&mut self, entries: &'static [u32], node: u32, cause: u32, skipped: bool) {
        for &entry in entries {
            if entry & (Plan::JOIN | Plan::GATE) == 0 {
                self.reach_one(entry, node, cause, skipped);
                continue;
            }
            if super::gate::is_gate(entry) {
                self.reach_arm(entry & Plan::NODE, node, cause);
                continue;
            }
            let join_id = (entry & Plan::NODE) as usize;
            let join = &mut self.joins[join_id];
            join.remaining -= 1;
            if join.cause == NO_CAUSE {
                join.cause = cause;
            }
            if join.remaining == 0 {
                // Skips do not pass through joins: they join ordering edges, not data.
                let cause = join.cause;
                for &target in self.plan().join_targets(join_id) {
                    self.reach_one(target, node, cause, false);
                }
            }
        }
    }

    /// The fate of a node whose data came from a skipped or withdrawn node: withdrawn (with
    /// the same cause) when a data predecessor was withdrawn, else skipped. The macro never
    /// reads a possibly-withdrawn node through a data edge, so the search (predecessors have
    /// lower ids) runs only for hand-built plans, and only once something was withdrawn.
    #[cold]
    #[inline(never)]
    fn skip_fate(&self, succ: u32) -> Settle {
        if self.withdrawn_any {
            for pred in 0..succ as usize {
                let state = &self.nodes[pred];
                if state.status == NodeStatus::Withdrawn
                    && self.plan().successors(pred).iter().any(|&entry| {
                        entry & (Plan::JOIN | Plan::GATE) == 0
                            && entry & Plan::DATA != 0
                            && entry & Plan::NODE == succ
                    })
                {
                    return Settle::Withdrawn(state.abort_cause);
                }
            }
        }
        Settle::Skipped
    }

    /// Tells one target, through the successor `entry` (its index and flags), that `node` has
    /// settled: the target is decided when this was its last unsettled predecessor.
    #[inline(always)]
    pub(super) fn reach_one(&mut self, entry: u32, node: u32, cause: u32, skipped: bool) {
        let succ = entry & Plan::NODE;
        let state = &mut self.nodes[succ as usize];
        if state.status.is_terminal() {
            if state.status == NodeStatus::Withdrawn {
                self.reach_withdrawn(succ);
            }
            return;
        }
        state.remaining -= 1;
        if cause != NO_CAUSE {
            if entry & Plan::CAUGHT != 0 {
                self.catches.push((succ, node));
            } else if entry & Plan::SOFT != 0 {
                // An ordering edge only: the source's failure is judged elsewhere (its gate).
            } else if state.abort_cause == NO_CAUSE {
                state.abort_cause = cause;
            }
        } else if skipped && entry & Plan::DATA != 0 {
            state.skip = true;
        }
        if state.remaining > 0 {
            state.status = NodeStatus::Waiting;
            return;
        }
        let next = if state.abort_cause != NO_CAUSE {
            if rule_runs(self.graph, succ) {
                // A trigger rule: the node runs, carrying the failure (`Scheduler::carried`).
                state.status = NodeStatus::Ready;
                self.ready.push(succ);
                return;
            }
            Settle::Aborted(state.abort_cause)
        } else if state.skip {
            self.skip_fate(succ)
        } else {
            state.status = NodeStatus::Ready;
            self.ready.push(succ);
            return;
        };
        // Aborted or skipped: nothing carried.
        self.mark(succ, next);
        self.work.push((succ, next));
    }
}
