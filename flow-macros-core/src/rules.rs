//! Trigger rules (`when = all_done | one_failed` on an `Operation`) and critical sections
//! (`exclusive = "group"` on an `Operation`, `Sequential` or `Parallel`): their options, their
//! compile-time checks and their rows of the workflow's `Control` tables.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Expr, LitStr};

use crate::control::ControlTables;
use crate::ctxt::Ctxt;
use crate::graph::Dag;
use crate::parse::{Opt, OptValue};
use crate::suggest::{did_you_mean, on_line};
use crate::validate::Checked;

/// When a node runs, given how its inputs ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Rule {
    /// When every input completed or was skipped; aborted when a failure reaches it.
    #[default]
    Default,
    /// When every input has settled, whatever its status.
    AllDone,
    /// When every input has settled and some input failed or was aborted; skipped otherwise.
    OneFailed,
}

/// The values `when` takes.
const RULES: [(&str, Rule); 2] = [("all_done", Rule::AllDone), ("one_failed", Rule::OneFailed)];

/// A critical section: a step or block whose nodes hold their exclusion group while they run.
pub struct SectionDef {
    /// The group's name, as written.
    pub group: LitStr,
    /// The section's nodes (operations and decisions), by DAG id.
    pub nodes: Vec<usize>,
}

/// Reads `when = all_done | one_failed` on an `Operation`.
pub fn when(opt: &Opt, cx: &mut Ctxt) -> Rule {
    const EXPECTED: &str = "`when` takes `all_done` (run whatever the inputs' fate) or `one_failed` (run only if an input failed)";
    let name = match &opt.value {
        OptValue::Other(expr) => match &**expr {
            Expr::Path(path) => path.path.get_ident().map(ToString::to_string),
            _ => None,
        },
        _ => None,
    };
    let Some(name) = name else {
        cx.error(opt.value.span(), EXPECTED);
        return Rule::Default;
    };
    if let Some((_, rule)) = RULES.iter().find(|(n, _)| *n == name) {
        return *rule;
    }
    let hint = did_you_mean(&name, RULES.iter().map(|(n, _)| *n));
    let message = if hint.is_empty() {
        format!("unknown trigger rule `{name}`: {EXPECTED}")
    } else {
        format!("unknown trigger rule `{name}`{hint}")
    };
    cx.error(opt.value.span(), message);
    Rule::Default
}

/// Reads `exclusive = "group"` on an `Operation`, `Sequential` or `Parallel`.
pub fn exclusive(opt: &Opt, cx: &mut Ctxt) -> Option<LitStr> {
    match &opt.value {
        OptValue::Str(lit) if lit.value().trim().is_empty() => {
            cx.error(
                lit.span(),
                "`exclusive` needs a group name, as in `exclusive = \"ledger\"`: sections of the same group never run at the same time",
            );
            None
        }
        OptValue::Str(lit) => Some(lit.clone()),
        other => {
            cx.error(
                other.span(),
                "`exclusive` takes a group name in quotes, as in `exclusive = \"ledger\"`",
            );
            None
        }
    }
}

/// The error for `when` on a block: it is an option of an `Operation` only.
pub fn when_on_block(opt: &Opt, block: &str, cx: &mut Ctxt) {
    cx.error(
        opt.key.span(),
        format!(
            "`when` is an option of an `Operation`, not of `{block}`: put it on the step that should run when its inputs have ended, as in `Operation(cleanup(), when = all_done)`"
        ),
    );
}

/// Opens a section for `group` around the nodes a step is about to add, unless the step is
/// already inside a section of the same group, which could never be granted (an error).
/// `open` holds the sections around the step, innermost last.
pub fn open_section(dag: &mut Dag, open: &mut Vec<usize>, group: &LitStr, cx: &mut Ctxt) -> bool {
    if let Some(&outer) = open
        .iter()
        .find(|&&s| dag.sections[s].group.value() == group.value())
    {
        cx.error(
            group.span(),
            format!(
                "this section is inside another `exclusive = {:?}` section{}: it would wait for the group its own enclosing section holds, forever; remove one of the two `exclusive` options",
                group.value(),
                on_line(dag.sections[outer].group.span()),
            ),
        );
        return false;
    }
    dag.sections.push(SectionDef {
        group: group.clone(),
        nodes: Vec::new(),
    });
    open.push(dag.sections.len() - 1);
    true
}

/// Whole-graph checks of rules and sections, once every edge is known: a step with `when`
/// must wait for another step, and a section must not wait for a node of another section of
/// its group that may start after it (the two would wait for each other forever).
pub fn check(dag: &Dag, order: &[usize], cx: &mut Ctxt) {
    let n = dag.nodes.len();
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
    // Ancestors, as bitsets by node id.
    let words = n.div_ceil(64).max(1);
    let mut ancestors = vec![0u64; n * words];
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(from, to) in dag.edges.keys() {
        preds[to].push(from);
    }
    for &node in order {
        for &pred in &preds[node] {
            for w in 0..words {
                let bits = ancestors[pred * words + w];
                ancestors[node * words + w] |= bits;
            }
            ancestors[node * words + pred / 64] |= 1 << (pred % 64);
        }
    }
    let is_ancestor = |a: usize, of: usize| ancestors[of * words + a / 64] & (1 << (a % 64)) != 0;
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

/// Fills the trigger-rule and critical-section tables. `pos[id]` is node `id`'s runtime
/// index.
pub fn tables(checked: &Checked, pos: &[usize], private: &TokenStream, out: &mut ControlTables) {
    let dag = &checked.dag;
    if dag.nodes.iter().any(|n| n.rule != Rule::Default) {
        out.rules = checked
            .order
            .iter()
            .map(|&id| match dag.nodes[id].rule {
                Rule::Default => quote!(#private::Rule::Default),
                Rule::AllDone => quote!(#private::Rule::AllDone),
                Rule::OneFailed => quote!(#private::Rule::OneFailed),
            })
            .collect();
    }
    if dag.sections.is_empty() {
        return;
    }
    let mut groups: Vec<String> = Vec::new();
    let mut node_sections: Vec<Vec<u32>> = vec![Vec::new(); pos.len()];
    for (index, section) in dag.sections.iter().enumerate() {
        let name = section.group.value();
        let group = match groups.iter().position(|g| *g == name) {
            Some(g) => g,
            None => {
                groups.push(name);
                groups.len() - 1
            }
        } as u32;
        let mut members: Vec<u32> = section.nodes.iter().map(|&id| pos[id] as u32).collect();
        members.sort_unstable();
        for &member in &members {
            node_sections[member as usize].push(index as u32);
        }
        let scope = out.scopes.len() as u32;
        out.scopes.push(members);
        out.sections
            .push(quote!(#private::Section { group: #group, scope: #scope }));
    }
    out.node_sections = node_sections;
}
