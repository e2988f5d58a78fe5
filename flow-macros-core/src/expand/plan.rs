//! The scheduling tables of a plan: predecessor counts, successor lists and joins.

use super::gates::arm_of_exit;
use crate::check::Checked;
use crate::graph::{Kind, edge};

/// The scheduling tables of a plan (see `flowdag_runtime::Plan`).
pub struct Tables {
    /// Per node, how many predecessors it waits for.
    pub pred_count: Vec<u32>,
    /// Per node, where its successors start in `succ` (one more entry at the end).
    pub succ_start: Vec<u32>,
    /// The successor entries: a node, a join or an arm, with flags.
    pub succ: Vec<u32>,
    /// Per join, how many sources it waits for.
    pub join_pred_count: Vec<u32>,
    /// Per join, where its targets start in `join_succ`.
    pub join_succ_start: Vec<u32>,
    /// The targets of the joins.
    pub join_succ: Vec<u32>,
}

/// Flag bits of a successor entry, as `flowdag_runtime::Plan` defines them.
const DATA_FLAG: u32 = 1 << 31;
const CAUGHT_FLAG: u32 = 1 << 30;
const JOIN_FLAG: u32 = 1 << 29;
const GATE_FLAG: u32 = 1 << 28;
const SOFT_FLAG: u32 = 1 << 27;

/// Builds the successor lists from `edges` (runtime indices, sorted by source), routing each
/// complete bipartite set of ordering edges through a join.
///
/// A `Sequential` of `Parallel`s makes every exit of one step a predecessor of every entry of
/// the next: `p * s` edges, each a counter decrement at run time. Targets whose ordering
/// predecessors (sequence and `after` edges that a test does not catch) are the same set share
/// one join when that saves entries (`p * s > p + s`): each source lists the join, the join
/// lists the targets. An edge that also carries data keeps a direct data entry beside the join,
/// so a skipped source still skips its reader, and an edge a test catches stays direct.
///
/// An edge from an exit of a gate's arm to the gate's node is the arm's entry (`GATE`), not a
/// predecessor of the node: the gate's node counts one predecessor, its firing. A read of a
/// node its gate may withdraw is `SOFT`.
pub fn plan_tables(checked: &Checked, edges: &[(usize, usize, u8)], pos: &[usize]) -> Tables {
    let dag = &checked.dag;
    let n = checked.order.len();
    let arm_of_exit = if dag.gates.is_empty() {
        Vec::new()
    } else {
        let by_id = arm_of_exit(checked, pos);
        let mut by_pos = vec![None; n];
        for (id, arm) in by_id.into_iter().enumerate() {
            by_pos[pos[id]] = arm;
        }
        by_pos
    };
    let is_decision = |p: usize| dag.nodes[checked.order[p]].kind == Kind::Decision;
    let caught =
        |to: usize, why: u8| why & (edge::DATA | edge::OPTIONAL_READ) != 0 && is_decision(to);
    let ordering =
        |to: usize, why: u8| why & (edge::SEQUENCE | edge::AFTER) != 0 && !caught(to, why);

    // Each target's ordering predecessors, and the targets that share each such set.
    let mut ordering_preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for &(from, to, why) in edges {
        if ordering(to, why) {
            ordering_preds[to].push(from as u32);
        }
    }
    let mut groups: std::collections::BTreeMap<&[u32], Vec<usize>> = Default::default();
    for (to, preds) in ordering_preds.iter().enumerate() {
        if preds.len() > 1 {
            groups.entry(preds.as_slice()).or_default().push(to);
        }
    }
    // join_of[to]: the join that carries `to`'s ordering edges.
    let mut join_of: Vec<Option<u32>> = vec![None; n];
    let mut join_sources: Vec<&[u32]> = Vec::new();
    let mut join_succ_start = vec![0];
    let mut join_succ = Vec::new();
    for (preds, targets) in &groups {
        let (p, t) = (preds.len(), targets.len());
        if p * t <= p + t {
            continue;
        }
        let join = join_sources.len() as u32;
        for &to in targets {
            join_of[to] = Some(join);
        }
        join_sources.push(preds);
        join_succ.extend(targets.iter().map(|&t| t as u32));
        join_succ_start.push(join_succ.len() as u32);
    }
    // The joins each source feeds, in join order.
    let mut feeds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (join, sources) in join_sources.iter().enumerate() {
        for &from in *sources {
            feeds[from as usize].push(join as u32);
        }
    }

    let mut pred_count = vec![0u32; n];
    let mut succ_start = Vec::with_capacity(n + 1);
    let mut succ = Vec::with_capacity(edges.len());
    let mut cursor = 0;
    for (from, joins) in feeds.iter().enumerate() {
        succ_start.push(succ.len() as u32);
        succ.extend(joins.iter().map(|&join| join | JOIN_FLAG));
        while cursor < edges.len() && edges[cursor].0 == from {
            let (_, to, why) = edges[cursor];
            cursor += 1;
            if why & edge::GATED != 0
                && let Some(arm) = arm_of_exit[from]
            {
                succ.push(arm | GATE_FLAG);
                continue;
            }
            let joined = join_of[to].is_some() && ordering(to, why);
            if joined && why & edge::DATA == 0 {
                continue;
            }
            pred_count[to] += 1;
            let mut entry = to as u32;
            if why & edge::DATA != 0 {
                entry |= DATA_FLAG;
            }
            if caught(to, why) {
                entry |= CAUGHT_FLAG;
            }
            // A read that is also the order of a sequence (the steps after a `Pick` reading
            // the last step of an arm) passes the arm's failure on, as after a `Conditional`.
            if why & edge::SOFT_READ != 0 && why & edge::SEQUENCE == 0 {
                entry |= SOFT_FLAG;
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
    for gate in &dag.gates {
        // Its one predecessor: the gate firing.
        pred_count[pos[gate.node]] += 1;
    }
    Tables {
        pred_count,
        succ_start,
        succ,
        join_pred_count: join_sources.iter().map(|s| s.len() as u32).collect(),
        join_succ_start,
        join_succ,
    }
}
