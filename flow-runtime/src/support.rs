//! What the code `workflow!` generates calls: the entry points that run a node set, and the
//! helpers each node's future uses to read its inputs and store its output.

use std::future::Future;
use std::pin::Pin;

use crate::error::{NodeError, NodeFailure};
use crate::graph::Graph;
use crate::nodes::{IntoNodes, Nodes};
use crate::scheduler::{RunSetup, run_nodes};
use crate::slot::Slot;
use crate::verdict::Finished;

/// Runs a workflow's nodes to the end, each operation's future inline in the run's future.
/// Called by the code `workflow!` generates for small workflows, with the tuple tree of its
/// nodes (see [`IntoNodes`]).
///
/// Node ids must be in topological order (every edge from a lower id to a higher one), as the
/// macro generates them.
///
/// # Cancel safety
///
/// Dropping the returned future drops every running operation's future.
pub fn execute<T: IntoNodes>(
    graph: &'static Graph,
    setup: RunSetup,
    tree: T,
) -> impl Future<Output = Finished> {
    execute_nodes(graph, setup, tree.inline())
}

/// As [`execute`], with each operation's future in one arena allocated per run: for large
/// workflows, whose run future would otherwise hold every node's future.
///
/// The node set itself (every node's closure and record, tens of bytes each) goes to the heap
/// too: inline, it made a 1000-node run future about 49 KB, which every move of the future
/// copies (tokio's `block_on` moves it and boxes it, a caller's `async fn` moves it into its
/// own state); about a fifth of the instructions of such a run were those copies.
pub fn execute_in_arena<T: IntoNodes>(
    graph: &'static Graph,
    setup: RunSetup,
    tree: T,
) -> impl Future<Output = Finished> {
    // The run's own future is `run_nodes`'s, with the box as its argument: no async layer of
    // its own to pass through on every wake-up.
    run_nodes(graph, setup, Box::pin(tree.in_arena()))
}

/// As [`execute`], over a node set built some other way: any [`Nodes`] implementation whose
/// nodes match `graph` in number and order.
pub fn execute_nodes<N: Nodes>(
    graph: &'static Graph,
    setup: RunSetup,
    mut nodes: N,
) -> impl Future<Output = Finished> {
    debug_assert!(N::LEN >= graph.nodes.len());
    // An `async` block (not an `async fn`) so that the node set is stored once in the run's
    // future, as the block's captured variable, and pinned right there: an `async fn` would keep
    // its argument and the pinned copy side by side, doubling every inline node future.
    async move {
        // SAFETY: `nodes` is a variable of this future's state, which is pinned while it is
        // polled, and it is never moved again: the name now stands for the pinned reference.
        let nodes = unsafe { Pin::new_unchecked(&mut nodes) };
        run_nodes(graph, setup, nodes).await
    }
}

/// The setup of a run whose node set holds, after the graph's nodes, one compensation leaf
/// per step named in `steps` (in that order, which is topological), and by leaf whether it
/// has anything to do (`false`: the compensation of a child run whose workflow compensates
/// nothing, which the phase skips): the code `workflow!` generates for a workflow with
/// `compensate = ..` options or durable child runs.
pub fn compensated(mut setup: RunSetup, steps: &'static [u32], live: &'static [bool]) -> RunSetup {
    setup.compensations = steps;
    setup.compensates = live;
    setup
}

/// Reads the output of a node that is sure to have completed in a successful run.
pub fn require<'a, T>(slot: &'a Slot<T>, node: &'static str) -> Result<&'a T, NodeFailure> {
    slot.get().ok_or(NodeFailure {
        node,
        attempts: 0,
        error: NodeError::Internal("a node's output is missing after a successful run"),
    })
}

/// Reads an input of an operation: the output of a node that has completed (the scheduler
/// starts a node only then, so a missing input is a flow bug, reported as the step's failure).
///
/// It takes no name of the producer: generated code would pass a different constant in every
/// node, and nodes of the same shape would no longer compile to the same machine code, which
/// LLVM merges into one function (`docs/architecture.md`, "Nodes of one shape share code").
#[inline]
pub fn input<T>(slot: &Slot<T>) -> Result<&T, NodeError> {
    match slot.get() {
        Some(value) => Ok(value),
        None => Err(missing_input()),
    }
}

/// The error of a missing input: out of line, one copy for every node.
#[cold]
#[inline(never)]
fn missing_input() -> NodeError {
    NodeError::Internal("a step started before one of its inputs was ready")
}

/// Stores an operation's result in its slot, or turns its error into a [`NodeError`].
#[inline]
pub fn complete<R: crate::error::IntoNodeResult>(
    slot: &Slot<R::Ok>,
    result: R,
) -> Result<(), NodeError> {
    result.into_node_result().map(|value| slot.put(value))
}

/// Checks an unnamed operation's result; its value is dropped.
#[inline]
pub fn discard<R: crate::error::IntoNodeResult>(result: R) -> Result<(), NodeError> {
    result.into_node_result().map(drop)
}
