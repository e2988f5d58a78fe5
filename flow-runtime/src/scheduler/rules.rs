//! Trigger rules and critical sections during a run. Nothing here runs for a workflow that
//! has neither: each entry point is reached behind a test of a table's length, or of a bool
//! set once in `Scheduler::new`.
//!
//! A node with a trigger rule (`all_done`, `one_failed`) has its fate decided once, when its
//! last input settles: a failure that reached it does not abort it but is *carried*, and passed
//! on to its successors when it ends. A critical section holds its exclusion group from the
//! start of its first node until all its nodes have settled; a node whose group another
//! section holds stays ready.

use super::{NO_CAUSE, Scheduler, Settle};
use crate::graph::{Graph, Rule};

/// Whether `node` runs when a failure reached it: it has a trigger rule.
#[inline]
pub(super) fn runs_after_failure(rules: &[Rule], node: u32) -> bool {
    rules
        .get(node as usize)
        .is_some_and(|rule| *rule != Rule::Default)
}

/// [`runs_after_failure`] for the decision of a node that a failure reached: out of line, so
/// that none of its loads is hoisted into the common path, where no failure reached the node.
#[cold]
#[inline(never)]
pub(super) fn rule_runs(graph: &Graph, node: u32) -> bool {
    runs_after_failure(graph.plan.control.rules, node)
}

impl Scheduler {
    /// Sets up the run's trigger rules and sections: a `one_failed` node is skipped unless a
    /// failure reaches it, and every exclusion group starts free.
    #[cold]
    pub(super) fn prepare_control(&mut self) {
        let control = self.plan().control;
        for (state, rule) in self.nodes.iter_mut().zip(control.rules) {
            // A failure that reaches the node takes precedence over this (`reach_one`).
            state.skip = *rule == Rule::OneFailed;
        }
        if !control.sections.is_empty() {
            self.section_left = control
                .sections
                .iter()
                .map(|s| control.scopes[s.scope as usize].len() as u32)
                .collect();
            let groups = control.sections.iter().map(|s| s.group + 1).max();
            self.group_holder = vec![NO_CAUSE; groups.unwrap_or(0) as usize];
        }
    }

    /// What a node that has just settled as `how` passes on: a trigger-rule node that
    /// completed after a failure reached it passes that failure on.
    #[inline]
    pub(super) fn carried(&self, node: u32, how: Settle) -> Settle {
        match how {
            Settle::Completed if self.nodes[node as usize].abort_cause != NO_CAUSE => {
                Settle::Carried(self.nodes[node as usize].abort_cause)
            }
            how => how,
        }
    }

    /// Whether `node`'s sections may run now: each one's group is free, or held by it.
    #[inline]
    pub(super) fn sections_free(&self, node: u32) -> bool {
        let control = self.plan().control;
        match control.node_sections.get(node as usize) {
            Some(sections) => sections.iter().all(|&s| {
                let section = control.sections[s as usize];
                let holder = self.group_holder[section.group as usize];
                (holder == NO_CAUSE || holder == s)
                    && self
                        .seat
                        .as_ref()
                        .is_none_or(|seat| seat.free(section.name, s))
            }),
            None => true,
        }
    }

    /// Before the run waits: a section kept from starting by a section of another run of
    /// the tree has the run woken when a group is released.
    pub(super) fn wait_for_groups(&self, cx: &std::task::Context<'_>) {
        if let Some(seat) = &self.seat {
            seat.wait(cx.waker());
        }
    }

    /// `node` starts: its sections hold their groups.
    #[inline]
    pub(super) fn hold_sections(&mut self, node: u32) {
        let control = self.plan().control;
        if let Some(sections) = control.node_sections.get(node as usize) {
            for &s in *sections {
                let section = control.sections[s as usize];
                self.group_holder[section.group as usize] = s;
                if let Some(seat) = &self.seat {
                    seat.hold(section.name, s);
                }
            }
        }
    }

    /// `node` has settled (whatever its status): a section whose last node it was frees its
    /// group.
    pub(super) fn leave_sections(&mut self, node: u32) {
        let control = self.plan().control;
        let Some(sections) = control.node_sections.get(node as usize) else {
            return;
        };
        for &s in *sections {
            let left = &mut self.section_left[s as usize];
            *left -= 1;
            let group = control.sections[s as usize].group as usize;
            if *left == 0 && self.group_holder[group] == s {
                self.group_holder[group] = NO_CAUSE;
                self.section_freed = true;
                if let Some(seat) = &self.seat {
                    seat.release(control.sections[s as usize].name, s);
                }
            }
        }
    }
}
