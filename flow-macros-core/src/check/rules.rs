//! The checks of trigger rules and critical sections, once every edge is known: a step with
//! `when` waits for another step, and sections never wait for each other forever.

use super::order::Ancestors;
use crate::ctxt::Ctxt;
use crate::graph::Dag;
use crate::suggest::on_line;

/// Whole-graph checks of rules and sections, once every edge is known: a step with `when`
/// must wait for another step, and a section must not wait for a node of another section of
/// its group that may start after it (the two would wait for each other forever).
pub fn check(dag: &Dag, ancestors: &Ancestors, cx: &mut Ctxt) {
    for (id, node) in dag.nodes.iter().enumerate() {
        if let Some(span) = node.when_span
            && !dag.edges.keys().any(|&(_, to)| to == id)
        {
            cx.error(
                span,
                "`when` on a step that waits for no other step: its rule would have no input to look at; put the step after the steps it should watch, in a `Sequential` or with `after = [..]`",
            );
        }
    }
    if dag.sections.len() < 2 {
        return;
    }
    nesting_order(dag, cx);
    let is_ancestor = |a: usize, of: usize| ancestors.is(a, of);
    // (waiting section, waiter, waited, section of the waited node) across two groups.
    let mut across: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (i, first) in dag.sections.iter().enumerate() {
        for (j, other) in dag.sections.iter().enumerate() {
            if i == j {
                continue;
            }
            // `first` may be held before `waited` has run (some member does not come after
            // it), and a member of `first` waits for `waited`: once `first` holds its group,
            // `waited` needs the group of `other`.
            let stuck = other.nodes.iter().find_map(|&waited| {
                if first.nodes.contains(&waited) {
                    return None;
                }
                let waiter = first.nodes.iter().find(|&&m| is_ancestor(waited, m))?;
                first
                    .nodes
                    .iter()
                    .any(|&m| !is_ancestor(waited, m))
                    .then_some((waited, *waiter))
            });
            let Some((waited, waiter)) = stuck else {
                continue;
            };
            if first.group.value() != other.group.value() {
                across.push((i, waiter, waited, j));
                continue;
            }
            let (waited, waiter) = (&dag.nodes[waited], &dag.nodes[waiter]);
            cx.error(
                first.group.span(),
                format!(
                    "`{}` in this `exclusive = {:?}` section waits for `{}`{}, which is in another section of the same group; once this section has started, `{}` can never run; move `{}` out of one of the sections, or order the two sections",
                    waiter.display,
                    first.group.value(),
                    waited.display,
                    on_line(waited.span()),
                    waited.display,
                    waited.display,
                ),
            );
        }
    }
    waits_across_groups(dag, &across, cx);
}

/// Waits between sections of different groups that close a cycle of groups: a section of `a`
/// that waits for a node of a `b` section while a section of `b` waits for a node of an `a`
/// section could each hold one group and wait for the other's. One error per cycle.
fn waits_across_groups(dag: &Dag, across: &[(usize, usize, usize, usize)], cx: &mut Ctxt) {
    let group = |section: usize| dag.sections[section].group.value();
    let mut reported: Vec<Vec<String>> = Vec::new();
    for &(first, waiter, waited, other) in across {
        // Follow waits from the waited node's group back to the waiting section's.
        let (from, to) = (group(first), group(other));
        let mut reached = vec![to.clone()];
        let mut k = 0;
        while k < reached.len() {
            for &(s, _, _, t) in across {
                if group(s) == reached[k] && !reached.contains(&group(t)) {
                    reached.push(group(t));
                }
            }
            k += 1;
        }
        if !reached.contains(&from) {
            continue;
        }
        let mut cycle = reached;
        cycle.push(from.clone());
        cycle.sort_unstable();
        cycle.dedup();
        if reported.contains(&cycle) {
            continue;
        }
        reported.push(cycle);
        let (waiter, waited) = (&dag.nodes[waiter], &dag.nodes[waited]);
        cx.error(
            dag.sections[first].group.span(),
            format!(
                "`{}` in this `exclusive = {from:?}` section waits for `{}`{}, in an `exclusive = {to:?}` section, while a section of {to:?} waits in the same way for a section of {from:?}: each could hold its group and wait for the other forever; order the sections one after the other",
                waiter.display,
                waited.display,
                on_line(waited.span()),
            ),
        );
    }
}

/// Sections of two groups must nest in one order: a `b` section inside an `a` section and an
/// `a` section inside a `b` section could each hold one group and wait for the other's.
fn nesting_order(dag: &Dag, cx: &mut Ctxt) {
    let sections = &dag.sections;
    // (outer group, inner group, the inner section), sections in the order they were opened.
    let mut nested: Vec<(String, String, usize)> = Vec::new();
    for (i, outer) in sections.iter().enumerate() {
        for (j, inner) in sections.iter().enumerate().skip(i + 1) {
            let (a, b) = (outer.group.value(), inner.group.value());
            if a != b
                && !inner.nodes.is_empty()
                && inner.nodes.iter().all(|n| outer.nodes.contains(n))
            {
                nested.push((a, b, j));
            }
        }
    }
    for (k, (a, b, inner)) in nested.iter().enumerate() {
        if let Some((_, _, first)) = nested[..k].iter().find(|(x, y, _)| x == b && y == a) {
            cx.error(
                sections[*inner].group.span(),
                format!(
                    "an `exclusive = {b:?}` section inside an `exclusive = {a:?}` section, while another `exclusive = {a:?}` section{} sits inside an `exclusive = {b:?}` one: each could hold one group and wait for the other forever; nest the two groups in one order",
                    on_line(sections[*first].group.span()),
                ),
            );
        }
    }
}
