//! The scheduler: one generic loop, compiled once, that drives any generated node set.
//!
//! It keeps one small record per node (status, count of unsettled predecessors, pending fate),
//! a queue of ready nodes and a list of running ones. When a node settles, it walks the node's
//! constant successor list from the [`Plan`](crate::graph::Plan) and decrements each
//! successor's counter; a successor whose counter reaches zero has its fate decided at once:
//! aborted if an uncaught failure reached it, skipped if its data came from a skipped node,
//! ready otherwise. Nothing is hashed, locked or traversed.

use std::future::Future;
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::error::{NodeError, NodeFailure, WorkflowError};
use crate::graph::{Graph, NodeKind, Plan};
use crate::nodes::{Nodes, Slot};
use crate::report::{NodeReport, Outcome, Report};
use crate::scope::{OperationSpec, listen};
use crate::status::NodeStatus;

/// Options of one run, set through a workflow's `runner()`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    max_concurrency: Option<NonZeroUsize>,
}

impl RunOptions {
    /// Limits how many operations of the run may be in flight at once (on top of any
    /// `Parallel(max_concurrency = N)` in the workflow).
    pub fn max_concurrency(&mut self, limit: NonZeroUsize) -> &mut Self {
        self.max_concurrency = Some(limit);
        self
    }
}

const NO_CAUSE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct NodeState {
    status: NodeStatus,
    /// Predecessors not yet settled.
    remaining: u32,
    /// The failed node whose failure reached this one, or `NO_CAUSE`.
    abort_cause: u32,
    /// A data predecessor was skipped.
    skip: bool,
}

#[derive(Clone, Copy)]
enum Settle {
    Completed,
    Failed,
    Aborted(u32),
    Skipped,
}

struct Running {
    node: u32,
    /// Not polled yet: the first poll listens for `#[operation]` defaults.
    fresh: bool,
    timeout: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// What a decision's test can see: the errors of failed and aborted nodes.
///
/// Generated code reads it through [`RunState::outcome`]; users never build one.
pub struct RunState {
    errors: Vec<Option<NodeError>>,
}

static MISSING: NodeError = NodeError::Aborted {
    cause: "<flow internal error: outcome missing>",
};

impl RunState {
    /// The outcome of node `node`, whose output lives in `slot`: `Ok` with the value when it
    /// completed, `Err` with its error when it failed or was aborted.
    pub fn outcome<'a, T>(&'a self, slot: &'a Slot<T>, node: usize) -> Result<&'a T, &'a NodeError> {
        match slot.get() {
            Some(value) => Ok(value),
            None => Err(self
                .errors
                .get(node)
                .and_then(Option::as_ref)
                .unwrap_or(&MISSING)),
        }
    }

    fn set_error(&mut self, node: usize, len: usize, error: NodeError) {
        if self.errors.is_empty() {
            self.errors.resize_with(len, || None);
        }
        self.errors[node] = Some(error);
    }
}

/// The scheduler's state for one run.
struct Scheduler {
    graph: &'static Graph,
    nodes: Vec<NodeState>,
    state: RunState,
    ready: Vec<u32>,
    running: Vec<Running>,
    group_running: Vec<u32>,
    limit: usize,
    limited: bool,
    settled: usize,
    work: Vec<(u32, Settle)>,
    /// (decision, node) pairs: the decision's test names a failed or aborted node.
    catches: Vec<(u32, u32)>,
    caught: Vec<u32>,
    /// The `#[operation]` each node called, if any; empty until one is heard.
    operations: Vec<Option<&'static OperationSpec>>,
}

impl Scheduler {
    fn new(graph: &'static Graph, options: &RunOptions) -> Self {
        let plan = &graph.plan;
        let nodes: Vec<NodeState> = plan
            .pred_count
            .iter()
            .map(|&count| NodeState {
                status: NodeStatus::Idle,
                remaining: count,
                abort_cause: NO_CAUSE,
                skip: false,
            })
            .collect();
        let limit = options.max_concurrency.map_or(usize::MAX, NonZeroUsize::get);
        let mut scheduler = Scheduler {
            graph,
            nodes,
            state: RunState { errors: Vec::new() },
            ready: Vec::with_capacity(plan.roots.len()),
            running: Vec::new(),
            group_running: vec![0; plan.group_limits.len()],
            limit,
            limited: limit != usize::MAX || !plan.group_limits.is_empty(),
            settled: 0,
            work: Vec::new(),
            catches: Vec::new(),
            caught: Vec::new(),
            operations: Vec::new(),
        };
        for &root in plan.roots {
            scheduler.nodes[root as usize].status = NodeStatus::Ready;
            scheduler.ready.push(root);
        }
        scheduler
    }

    fn plan(&self) -> &'static Plan {
        &self.graph.plan
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn has_capacity(&self, node: u32) -> bool {
        if self.running.len() >= self.limit {
            return false;
        }
        match self.plan().node_groups.get(node as usize) {
            Some(groups) => groups.iter().all(|&g| {
                self.group_running[g as usize] < self.plan().group_limits[g as usize]
            }),
            None => true,
        }
    }

    fn occupy(&mut self, node: u32, delta: i32) {
        if let Some(groups) = self.plan().node_groups.get(node as usize) {
            for &g in *groups {
                let count = &mut self.group_running[g as usize];
                *count = count.saturating_add_signed(delta);
            }
        }
    }

    /// Starts every ready node that may start. Decisions are evaluated on the spot.
    fn start_ready<N: Nodes>(&mut self, mut set: Pin<&mut N>) {
        let mut i = 0;
        while i < self.ready.len() {
            let node = self.ready[i];
            let kind = self.graph.nodes[node as usize].kind;
            if kind == NodeKind::Operation && self.limited && !self.has_capacity(node) {
                i += 1;
                continue;
            }
            if self.limited {
                self.ready.remove(i);
            } else {
                self.ready.swap_remove(i);
            }
            match kind {
                NodeKind::Decision => self.decide(set.as_mut(), node),
                NodeKind::Operation => {
                    let started = catch_unwind(AssertUnwindSafe(|| {
                        set.as_mut().start(node as usize);
                    }));
                    if let Err(payload) = started {
                        self.fail(node, NodeError::Panicked(panic_message(payload)));
                        continue;
                    }
                    self.nodes[node as usize].status = NodeStatus::Running;
                    self.occupy(node, 1);
                    let timeout = self
                        .plan()
                        .timeout(node as usize)
                        .map(|after| Box::pin(tokio::time::sleep(after)));
                    self.running.push(Running {
                        node,
                        fresh: true,
                        timeout,
                    });
                }
            }
        }
    }

    fn decide<N: Nodes>(&mut self, set: Pin<&mut N>, node: u32) {
        let state = &self.state;
        let chosen = catch_unwind(AssertUnwindSafe(|| set.decide(node as usize, state)));
        match chosen {
            Ok(branch) => {
                // The test ran: every failure it named is caught.
                let caught = self.catches.iter().filter(|(d, _)| *d == node).map(|&(_, n)| n);
                self.caught.extend(caught);
                let plan = self.plan();
                let untaken = if branch {
                    plan.else_nodes[node as usize]
                } else {
                    plan.then_nodes[node as usize]
                };
                self.skip_all(untaken);
                self.settle(node, Settle::Completed);
            }
            Err(payload) => self.fail(node, NodeError::Panicked(panic_message(payload))),
        }
    }

    fn fail(&mut self, node: u32, error: NodeError) {
        let len = self.len();
        self.state.set_error(node as usize, len, error);
        self.settle(node, Settle::Failed);
    }

    /// Polls `running[from..]`, keeping the pending ones in order. Returns whether any settled.
    fn poll_running<N: Nodes>(&mut self, mut set: Pin<&mut N>, from: usize, cx: &mut Context<'_>) {
        let mut write = from;
        for read in from..self.running.len() {
            let node = self.running[read].node;
            let polled = if self.running[read].fresh {
                self.running[read].fresh = false;
                let (polled, heard) = listen(|| {
                    catch_unwind(AssertUnwindSafe(|| set.as_mut().poll_node(node as usize, cx)))
                });
                if let Some(spec) = heard {
                    self.heard(read, spec);
                }
                polled
            } else {
                catch_unwind(AssertUnwindSafe(|| set.as_mut().poll_node(node as usize, cx)))
            };
            let result = match polled {
                Ok(Poll::Pending) => {
                    let expired = match &mut self.running[read].timeout {
                        Some(sleep) => sleep.as_mut().poll(cx).is_ready(),
                        None => false,
                    };
                    if !expired {
                        self.running.swap(write, read);
                        write += 1;
                        continue;
                    }
                    Err(NodeError::TimedOut(self.timeout_of(node)))
                }
                Ok(Poll::Ready(result)) => result,
                Err(payload) => Err(NodeError::Panicked(panic_message(payload))),
            };
            set.as_mut().stop(node as usize);
            self.occupy(node, -1);
            match result {
                Ok(()) => self.settle(node, Settle::Completed),
                Err(error) => self.fail(node, error),
            }
        }
        self.running.truncate(write);
    }

    /// Applies the defaults of the `#[operation]` that `running[index]` called.
    fn heard(&mut self, index: usize, spec: &'static OperationSpec) {
        let node = self.running[index].node as usize;
        if self.operations.is_empty() {
            self.operations.resize(self.len(), None);
        }
        self.operations[node] = Some(spec);
        let running = &mut self.running[index];
        if running.timeout.is_none()
            && let Some(after) = spec.timeout()
        {
            running.timeout = Some(Box::pin(tokio::time::sleep(after)));
        }
    }

    /// The timeout in force for `node`: the step's own, else its operation's default.
    fn timeout_of(&self, node: u32) -> Duration {
        self.plan()
            .timeout(node as usize)
            .or_else(|| {
                self.operations
                    .get(node as usize)
                    .copied()
                    .flatten()
                    .and_then(OperationSpec::timeout)
            })
            .unwrap_or_default()
    }

    fn poll<N: Nodes>(&mut self, mut set: Pin<&mut N>, cx: &mut Context<'_>) -> Poll<()> {
        let mut from = 0;
        loop {
            self.start_ready(set.as_mut());
            if from == self.running.len() {
                return if self.settled == self.len() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                };
            }
            self.poll_running(set.as_mut(), from, cx);
            if self.settled == self.len() {
                return Poll::Ready(());
            }
            // Everything still running has just been polled; only nodes started from here on
            // need a first poll in this wake-up.
            from = self.running.len();
        }
    }

    fn mark(&mut self, node: u32, how: Settle) {
        let state = &mut self.nodes[node as usize];
        state.status = match how {
            Settle::Completed => NodeStatus::Completed,
            Settle::Failed => NodeStatus::Failed,
            Settle::Aborted(_) => NodeStatus::Aborted,
            Settle::Skipped => NodeStatus::Skipped,
        };
        self.settled += 1;
        if let Settle::Aborted(cause) = how {
            let cause = self.graph.nodes[cause as usize].name;
            let len = self.len();
            self.state
                .set_error(node as usize, len, NodeError::Aborted { cause });
        }
    }

    fn settle(&mut self, node: u32, how: Settle) {
        self.mark(node, how);
        self.work.push((node, how));
        while let Some((node, how)) = self.work.pop() {
            if matches!(how, Settle::Skipped)
                && self.graph.nodes[node as usize].kind == NodeKind::Decision
            {
                let plan = self.plan();
                self.skip_all(plan.then_nodes[node as usize]);
                self.skip_all(plan.else_nodes[node as usize]);
            }
            self.propagate(node, how);
        }
    }

    /// Marks a whole untaken branch skipped, then tells the nodes outside it.
    fn skip_all(&mut self, branch: &'static [u32]) {
        for &node in branch {
            if !self.nodes[node as usize].status.is_terminal() {
                self.mark(node, Settle::Skipped);
                self.work.push((node, Settle::Skipped));
            }
        }
    }

    fn propagate(&mut self, node: u32, how: Settle) {
        let cause = match how {
            Settle::Failed => node,
            Settle::Aborted(cause) => cause,
            _ => NO_CAUSE,
        };
        for &entry in self.plan().successors(node as usize) {
            let succ = entry & Plan::NODE;
            let state = &mut self.nodes[succ as usize];
            if state.status.is_terminal() {
                continue;
            }
            state.remaining -= 1;
            if cause != NO_CAUSE {
                if entry & Plan::CAUGHT != 0 {
                    self.catches.push((succ, node));
                } else if state.abort_cause == NO_CAUSE {
                    state.abort_cause = cause;
                }
            } else if matches!(how, Settle::Skipped) && entry & Plan::DATA != 0 {
                state.skip = true;
            }
            if state.remaining > 0 {
                state.status = NodeStatus::Waiting;
                continue;
            }
            let next = if state.abort_cause != NO_CAUSE {
                Some(Settle::Aborted(state.abort_cause))
            } else if state.skip {
                Some(Settle::Skipped)
            } else {
                state.status = NodeStatus::Ready;
                self.ready.push(succ);
                None
            };
            if let Some(next) = next {
                self.mark(succ, next);
                self.work.push((succ, next));
            }
        }
    }

    fn finish(self) -> Finished {
        Finished {
            graph: self.graph,
            statuses: self.nodes.into_iter().map(|n| n.status).collect(),
            errors: self.state.errors,
            caught: self.caught,
            operations: self.operations,
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => (*message).to_string(),
            Err(_) => "a panic with a non-string payload".to_string(),
        },
    }
}

/// Runs a node set to the end. Called by generated code.
///
/// # Cancel safety
///
/// Dropping the returned future drops every running operation's future.
pub async fn execute<N: Nodes>(graph: &'static Graph, options: RunOptions, nodes: N) -> Finished {
    debug_assert_eq!(N::LEN, graph.nodes.len());
    let mut nodes = Box::pin(nodes);
    let mut scheduler = Scheduler::new(graph, &options);
    std::future::poll_fn(|cx| scheduler.poll(nodes.as_mut(), cx)).await;
    scheduler.finish()
}

/// A run that has ended: every node's status and every failure. Generated code turns it into an
/// [`Outcome`].
pub struct Finished {
    graph: &'static Graph,
    statuses: Vec<NodeStatus>,
    errors: Vec<Option<NodeError>>,
    caught: Vec<u32>,
    operations: Vec<Option<&'static OperationSpec>>,
}

impl Finished {
    /// Whether the run succeeded: no failure reached the end of the graph (every node without
    /// successors completed or was skipped).
    pub fn succeeded(&self) -> bool {
        self.statuses.iter().enumerate().all(|(node, status)| {
            !matches!(status, NodeStatus::Failed | NodeStatus::Aborted)
                || !self.graph.plan.successors(node).is_empty()
        })
    }

    /// Finishes the run: on success evaluates `output` (the workflow's output expression), on
    /// failure returns the [`WorkflowError`]. Either way the [`Report`] comes with it.
    pub fn output<T>(self, output: impl FnOnce() -> Result<T, NodeFailure>) -> Outcome<T> {
        let succeeded = self.succeeded();
        let Finished {
            graph,
            statuses,
            mut errors,
            caught,
            operations,
        } = self;
        let report = Report::new(
            graph.name,
            graph
                .nodes
                .iter()
                .zip(&statuses)
                .enumerate()
                .map(|(id, (node, &status))| NodeReport {
                    name: node.name,
                    operation: operations.get(id).copied().flatten().map(|spec| spec.name),
                    status,
                    error: errors.get(id).and_then(Option::as_ref).map(|e| e.to_string()),
                })
                .collect(),
        );
        let result = if succeeded {
            output().map_err(|failure| WorkflowError::new(graph.name, vec![failure]))
        } else {
            let failures = errors
                .iter_mut()
                .enumerate()
                .filter(|(id, _)| !caught.contains(&(*id as u32)))
                .filter_map(|(id, error)| {
                    error.take().map(|error| NodeFailure {
                        node: graph.nodes[id].name,
                        error,
                    })
                })
                .collect();
            Err(WorkflowError::new(graph.name, failures))
        };
        Outcome { result, report }
    }
}

/// Reads the output of a node that is sure to have completed in a successful run.
pub fn require<'a, T>(slot: &'a Slot<T>, node: &'static str) -> Result<&'a T, NodeFailure> {
    slot.get().ok_or(NodeFailure {
        node,
        error: NodeError::Panicked(format!(
            "flow internal error: the output of `{node}` is missing after a successful run"
        )),
    })
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
