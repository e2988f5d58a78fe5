//! The order of execution: a topological order that keeps source order where edges allow, or
//! one error per dependency cycle; and ancestry over the graph's edges.

use crate::ctxt::Ctxt;
use crate::graph::Dag;
use crate::suggest::at_line;

/// Which nodes come before which: one bitset of ancestors per node, filled in execution order,
/// in O(edges × nodes/64).
pub struct Ancestors {
    words: usize,
    bits: Vec<u64>,
}

impl Ancestors {
    /// The ancestors of every node of `dag` over its edges; `order` is a topological order.
    pub fn new(dag: &Dag, order: &[usize]) -> Ancestors {
        let n = dag.nodes.len();
        let words = n.div_ceil(64).max(1);
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(from, to) in dag.edges.keys() {
            preds[to].push(from);
        }
        let mut bits = vec![0u64; n * words];
        for &node in order {
            for &pred in &preds[node] {
                for w in 0..words {
                    let ancestor = bits[pred * words + w];
                    bits[node * words + w] |= ancestor;
                }
                bits[node * words + pred / 64] |= 1 << (pred % 64);
            }
        }
        Ancestors { words, bits }
    }

    /// Whether `a` comes before `of`: a path of edges leads from `a` to `of`.
    pub fn is(&self, a: usize, of: usize) -> bool {
        self.bits[of * self.words + a / 64] & (1 << (a % 64)) != 0
    }
}

/// A topological order that keeps source order where it can (Kahn's algorithm, lowest ready id
/// first); or one error per dependency cycle.
pub fn order_or_cycles(dag: &Dag, cx: &mut Ctxt) -> Option<Vec<usize>> {
    let n = dag.nodes.len();
    let mut indegree = vec![0usize; n];
    for &(_, to) in dag.edges.keys() {
        indegree[to] += 1;
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(node) = ready.pop_first() {
        order.push(node);
        for (&(from, to), _) in dag.edges.range((node, 0)..(node + 1, 0)) {
            debug_assert_eq!(from, node);
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.insert(to);
            }
        }
    }
    if order.len() == n {
        return Some(order);
    }
    // What Kahn's algorithm could not order lies on a cycle or after one.
    let mut left = vec![true; n];
    for &node in &order {
        left[node] = false;
    }
    for members in cycles(dag, &left) {
        cycle_error(dag, &members, cx);
    }
    None
}

/// The dependency cycles among the nodes marked in `left`: the strongly connected components of
/// more than one node (Tarjan's algorithm, iterative so that a long chain cannot overflow the
/// stack), each sorted by id, ordered by their first member.
fn cycles(dag: &Dag, left: &[bool]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = dag.nodes.len();
    let mut successors = vec![Vec::new(); n];
    for &(from, to) in dag.edges.keys() {
        if left[from] && left[to] {
            successors[from].push(to);
        }
    }
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut found = Vec::new();
    for root in (0..n).filter(|&v| left[v]) {
        if index[root] != UNSEEN {
            continue;
        }
        // Each frame is a node and how many of its successors it has visited.
        let mut frames = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(frame) = frames.last_mut() {
            let (v, visited) = *frame;
            if let Some(&w) = successors[v].get(visited) {
                frame.1 += 1;
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    frames.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut members = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    members.push(w);
                    if w == v {
                        break;
                    }
                }
                if members.len() > 1 {
                    members.sort_unstable();
                    found.push(members);
                }
            }
        }
    }
    found.sort_unstable();
    found
}

/// One error for one cycle, naming every member once with its line: on the first `after` that
/// closes it, or on its first member.
fn cycle_error(dag: &Dag, members: &[usize], cx: &mut Ctxt) {
    let names = members
        .iter()
        .map(|&m| format!("`{}`{}", dag.nodes[m].display, at_line(dag.nodes[m].span())))
        .collect::<Vec<_>>()
        .join(", ");
    let closing = members.iter().find_map(|&m| {
        dag.nodes[m].after.iter().find(|t| {
            members
                .iter()
                .any(|&other| dag.nodes[other].name.as_ref() == Some(*t))
        })
    });
    match closing {
        Some(target) => cx.error(
            target.span(),
            format!("`after = [{target}]` closes a dependency cycle through {names}; a step cannot wait for a step that waits for it"),
        ),
        None => cx.error(
            dag.nodes[members[0]].span(),
            format!("dependency cycle through {names}; a step cannot wait for a step that waits for it"),
        ),
    }
}
