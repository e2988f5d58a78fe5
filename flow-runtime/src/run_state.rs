//! What a decision's test sees of a run in progress: the outcome of the nodes it names.

use crate::error::NodeError;
use crate::slot::Slot;

/// What a decision's test can see: the errors of failed and aborted nodes.
///
/// Generated code reads it through [`RunState::outcome`]; users never build one.
pub struct RunState {
    pub(crate) errors: Vec<Option<NodeError>>,
    /// For each gate (`Race`, `Parallel(min = k)`), the arms that completed before it fired,
    /// in completion order (0-based, source order). Empty when the workflow has no gate.
    pub(crate) winners: Vec<Vec<usize>>,
    /// The version markers (`Patched`, by node) whose old path the run takes (a durable run
    /// started before they were written); empty for every other run.
    pub(crate) old: Vec<u32>,
}

static MISSING: NodeError =
    NodeError::Internal("a decision read the outcome of a node that has none");

impl RunState {
    /// The test of version marker `marker` (`Patched("id")`): `true` (its new path) unless
    /// the run is a durable run that started before the marker was written.
    #[doc(hidden)]
    pub fn patched(&self, marker: u32) -> bool {
        !self.old.contains(&marker)
    }

    /// The outcome of node `node`, whose output lives in `slot`: `Ok` with the value when it
    /// completed, `Err` with its error when it failed or was aborted.
    pub fn outcome<'a, T>(
        &'a self,
        slot: &'a Slot<T>,
        node: usize,
    ) -> Result<&'a T, &'a NodeError> {
        match slot.get() {
            Some(value) => Ok(value),
            None => Err(self
                .errors
                .get(node)
                .and_then(Option::as_ref)
                .unwrap_or(&MISSING)),
        }
    }

    /// The outcome of a node that may have been skipped: `None` when it did not run (it sits
    /// in a branch the decision is not in), else as [`RunState::outcome`].
    pub fn outcome_if_run<'a, T>(
        &'a self,
        slot: &'a Slot<T>,
        node: usize,
    ) -> Option<Result<&'a T, &'a NodeError>> {
        match slot.get() {
            Some(value) => Some(Ok(value)),
            None => self.errors.get(node).and_then(Option::as_ref).map(Err),
        }
    }

    /// The arms of gate `gate` (an index into the plan's gates) that completed before it
    /// fired, in the order they completed: what the gate's node writes as its output. Empty
    /// before the gate fires.
    pub fn winners(&self, gate: usize) -> &[usize] {
        self.winners.get(gate).map_or(&[], Vec::as_slice)
    }

    pub(crate) fn set_error(&mut self, node: usize, len: usize, error: NodeError) {
        if self.errors.is_empty() {
            self.errors.resize_with(len, || None);
        }
        self.errors[node] = Some(error);
    }
}
