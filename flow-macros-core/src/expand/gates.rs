//! The order of the gates and of their arms in the control tables, which the node code and the
//! plan name too.

use crate::check::Checked;

/// The gate blocks (indices into `Dag::gates`) in the order of their nodes: the order of
/// `Control::gates`.
pub fn gate_order(checked: &Checked, pos: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..checked.dag.gates.len()).collect();
    order.sort_by_key(|&g| pos[checked.dag.gates[g].node]);
    order
}

/// For each node id, the arm (an index into `Control::arms`) whose exit it is, if any.
pub fn arm_of_exit(checked: &Checked, pos: &[usize]) -> Vec<Option<u32>> {
    let mut arm_of = vec![None; checked.dag.nodes.len()];
    let mut next = 0u32;
    for g in gate_order(checked, pos) {
        for arm in &checked.dag.gates[g].arms {
            for &exit in &arm.exits {
                arm_of[exit] = Some(next);
            }
            next += 1;
        }
    }
    arm_of
}
