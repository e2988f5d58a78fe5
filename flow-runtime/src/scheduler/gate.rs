//! Gates (`Race`, `Parallel(min = k)`): the arms' exits reach their gate through successor
//! entries flagged [`Plan::GATE`]; the gate fires when `min` arms completed, or fails as soon
//! as `min` is out of reach. Reached only from those entries: a workflow without gates never
//! runs any of this.

use super::{ArmState, Fired, GateState, Halt, NO_CAUSE, NOT_CATCHABLE, Scheduler, Settle};
use crate::events::EventKind;
use crate::graph::{Gate, Plan, Rest};
use crate::policy::FailurePolicy;
use crate::status::NodeStatus;

impl Scheduler {
    /// The run-time records of the plan's gates and arms.
    pub(super) fn init_gates(&mut self) {
        let control = self.plan().control;
        self.arms = control
            .arms
            .iter()
            .map(|arm| ArmState {
                remaining: arm.exits,
                cause: NO_CAUSE,
                withdrawn: NO_CAUSE,
            })
            .collect();
        self.gates = vec![
            GateState {
                failed: 0,
                lost: 0,
                cause: NO_CAUSE,
                fired: Fired::No,
            };
            control.gates.len()
        ];
        self.state.winners = vec![Vec::new(); control.gates.len()];
    }

    /// `node`, an exit of arm `arm`, has settled, passing on `cause` (a failure, or
    /// `NO_CAUSE`); the arm ends when all its exits have, and its gate counts it.
    #[cold]
    #[inline(never)]
    pub(super) fn reach_arm(&mut self, arm: u32, node: u32, cause: u32) {
        let state = &mut self.arms[arm as usize];
        state.remaining -= 1;
        if cause != NO_CAUSE && state.cause == NO_CAUSE {
            state.cause = cause;
        }
        if self.nodes[node as usize].status == NodeStatus::Withdrawn && state.withdrawn == NO_CAUSE
        {
            state.withdrawn = self.nodes[node as usize].abort_cause;
        }
        if state.remaining > 0 {
            return;
        }
        let ArmState {
            cause, withdrawn, ..
        } = *state;
        let control = self.plan().control;
        let gate_id = control.arms[arm as usize].gate;
        let gate = control.gates[gate_id as usize];
        let index = arm - gate.first_arm;
        match self.gates[gate_id as usize].fired {
            // Skipped or withdrawn with its block: there is nothing to decide. A gate withdrawn
            // (by a `Cancel` of its block) before its arms ended passes that on once they all
            // have (`reach_withdrawn`); a skipped one has already passed it on.
            Fired::No if self.nodes[gate.node as usize].status.is_terminal() => {
                let state = &mut self.gates[gate_id as usize];
                state.lost += 1;
                let ended =
                    state.failed + state.lost + self.state.winners[gate_id as usize].len() as u32;
                if ended == gate.arms && self.nodes[gate.node as usize].remaining > 0 {
                    self.reach_one(gate.node, node, NO_CAUSE, false);
                }
                return;
            }
            Fired::No => {}
            // Late: the join ignores the arm (its failures are caught as they happen).
            Fired::Ok => return,
            Fired::Failed => return,
        }
        let state = &mut self.gates[gate_id as usize];
        if cause != NO_CAUSE {
            state.failed += 1;
            if state.cause == NO_CAUSE {
                state.cause = cause;
            }
        } else if withdrawn != NO_CAUSE {
            state.lost += 1;
        } else {
            let winners = &mut self.state.winners[gate_id as usize];
            winners.push(index as usize);
            if winners.len() as u32 == gate.min {
                self.fire_ok(gate_id, gate, node);
            }
            return;
        }
        let state = self.gates[gate_id as usize];
        if gate.arms - state.failed - state.lost < gate.min {
            self.fire_failed(gate_id, gate, node, withdrawn);
        }
    }

    /// `min` arms completed, the last of them when `node` ended: the losing arms' failures are
    /// caught, the losing arms are withdrawn with `node` as their cause (with `rest = cancel`)
    /// and the gate's node becomes ready, to write the winners.
    fn fire_ok(&mut self, gate_id: u32, gate: Gate, node: u32) {
        self.gates[gate_id as usize].fired = Fired::Ok;
        let control = self.plan().control;
        for index in 0..gate.arms {
            let arm = gate.first_arm + index;
            let won = self.state.winners[gate_id as usize].contains(&(index as usize));
            if won {
                // A winning arm's steps may still run (a `Pick`'s arm after its event): their
                // failures are the run's.
                continue;
            }
            if gate.rest == Rest::Cancel {
                // The cause is the gate that fired, as when it fails: the winner is in its
                // `Won { arms }`.
                self.withdraw(control.arms[arm as usize].scope, gate.node);
            }
            self.catch_arm(arm);
        }
        let arms = self.state.winners[gate_id as usize]
            .iter()
            .map(|&a| a as u32)
            .collect::<Vec<u32>>();
        self.emit(Some(gate.node), 0, || EventKind::Won { arms });
        self.reach_one(gate.node, node, NO_CAUSE, false);
    }

    /// `min` arms can no longer complete: the gate's node ends aborted by the first arm
    /// failure (withdrawn, when no arm failed but some were withdrawn from outside), nothing
    /// is caught, and with `rest = cancel` the arms still going are withdrawn.
    fn fire_failed(&mut self, gate_id: u32, gate: Gate, node: u32, withdrawn: u32) {
        let state = &mut self.gates[gate_id as usize];
        state.fired = Fired::Failed;
        let cause = state.cause;
        if gate.rest == Rest::Cancel {
            let control = self.plan().control;
            for index in 0..gate.arms {
                self.withdraw(
                    control.arms[(gate.first_arm + index) as usize].scope,
                    gate.node,
                );
            }
        }
        if cause == NO_CAUSE {
            // Every arm that could have won was withdrawn: so is the gate.
            if !self.nodes[gate.node as usize].status.is_terminal() {
                let how = Settle::Withdrawn(withdrawn);
                // Withdrawn: nothing carried.
                self.mark(gate.node, how);
                self.work.push((gate.node, how));
            } else {
                // Withdrawn with its block (a `Cancel` of it) before its arms ended: it
                // passes that on now (`reach_withdrawn`).
                self.reach_one(gate.node, node, NO_CAUSE, false);
            }
            return;
        }
        if self.policy == FailurePolicy::FailFast
            && self.halt.is_none()
            && self.catchable(gate.node) == NOT_CATCHABLE
        {
            self.set_halt(Halt::FailFast(cause));
        }
        self.reach_one(gate.node, node, cause, false);
    }

    /// `node` failed or was aborted: caught if it sits in an arm that lost a gate that has
    /// fired (an arm may go on after its gate fired: `rest = run`, or a node an untaken branch
    /// no longer waits for). A failure in a winning arm (the steps of a `Pick`'s chosen arm)
    /// is not caught.
    #[cold]
    #[inline(never)]
    pub(super) fn catch_late(&mut self, node: u32) {
        let control = self.plan().control;
        for (arm, info) in control.arms.iter().enumerate() {
            let gate = info.gate as usize;
            if self.gates[gate].fired == Fired::Ok
                && control.scopes[info.scope as usize]
                    .binary_search(&node)
                    .is_ok()
            {
                let index = arm - control.gates[gate].first_arm as usize;
                if !self.state.winners[gate].contains(&index) {
                    self.caught.push(node);
                }
                return;
            }
        }
    }

    /// The failures inside arm `arm` do not fail the run: its gate fired without it.
    fn catch_arm(&mut self, arm: u32) {
        let control = self.plan().control;
        for &node in control.scopes[control.arms[arm as usize].scope as usize] {
            if matches!(
                self.nodes[node as usize].status,
                NodeStatus::Failed | NodeStatus::Aborted
            ) {
                self.caught.push(node);
            }
        }
    }
}

/// Whether `entry`, a successor entry, leads to a gate (an arm id).
#[inline(always)]
pub(super) fn is_gate(entry: u32) -> bool {
    entry & Plan::GATE != 0
}
