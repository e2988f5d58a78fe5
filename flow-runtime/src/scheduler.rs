//! The scheduler: one generic loop, compiled once, that drives any generated node set.
//!
//! It keeps one small record per node (status, count of unsettled predecessors, pending fate),
//! a queue of ready nodes and a list of running ones. When a node settles, it walks the node's
//! constant successor list from the [`Plan`] and decrements each successor's counter; a
//! successor whose counter reaches zero has its fate decided at once: aborted if an uncaught
//! failure reached it, skipped if its data came from a skipped node, ready otherwise. Nothing is
//! hashed, locked or traversed.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

use crate::error::{NodeError, NodeFailure, WorkflowError, render};
use crate::events::{Event, EventKind, EventLog, Observer, RunId};
use crate::graph::{Graph, NodeKind, Plan};
use crate::nodes::{IntoNodes, Leaves, Nodes, Slot, Table};
use crate::panic::{deadline_timer, panic_message, timer};
use crate::policy::{CancelReason, CancelToken, FailurePolicy, NodePolicy};
use crate::report::{NodeReport, Outcome, Report, ReportParts};
use crate::scope::{OperationSpec, listen};
use crate::status::NodeStatus;
use crate::wake::WakeSet;

/// Options of one run, set through a workflow's `runner()`.
#[derive(Clone)]
pub struct RunOptions {
    max_concurrency: Option<NonZeroUsize>,
    failure: Option<FailurePolicy>,
    cancel: Option<CancelToken>,
    deadline: Option<Duration>,
    observers: Vec<Arc<dyn Observer>>,
    record: bool,
    report: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_concurrency: None,
            failure: None,
            cancel: None,
            deadline: None,
            observers: Vec::new(),
            record: true,
            report: true,
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("max_concurrency", &self.max_concurrency)
            .field("failure", &self.failure)
            .field("cancel", &self.cancel)
            .field("deadline", &self.deadline)
            .field("observers", &self.observers.len())
            .field("record", &self.record)
            .finish()
    }
}

impl RunOptions {
    /// Adds an observer: it sees every event of the run as it happens.
    pub fn observer(&mut self, observer: impl Observer + 'static) -> &mut Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// For a caller that only wants the result (a workflow's plain `run`): no event log, and
    /// no per-node report is built.
    #[doc(hidden)]
    pub fn result_only(&mut self) -> &mut Self {
        self.record = false;
        self.report = false;
        self
    }

    /// Whether the run keeps its event log for the report (on by default; a workflow's plain
    /// `run` turns it off, since it returns no report).
    pub fn record(&mut self, record: bool) -> &mut Self {
        self.record = record;
        self
    }

    /// Limits how many operations of the run may be in flight at once (on top of any
    /// `Parallel(max_concurrency = N)` in the workflow).
    pub fn max_concurrency(&mut self, limit: NonZeroUsize) -> &mut Self {
        self.max_concurrency = Some(limit);
        self
    }

    /// Overrides the workflow's failure policy for this run.
    pub fn failure_policy(&mut self, policy: FailurePolicy) -> &mut Self {
        self.failure = Some(policy);
        self
    }

    /// Cancels the run when `token` is cancelled.
    pub fn cancel_on(&mut self, token: CancelToken) -> &mut Self {
        self.cancel = Some(token);
        self
    }

    /// Cancels the run when it has run for `after` (needs a tokio runtime with time enabled).
    pub fn deadline(&mut self, after: Duration) -> &mut Self {
        self.deadline = Some(after);
        self
    }
}

const NO_CAUSE: u32 = u32::MAX;

/// Up to this many operations in flight, the scheduler polls them with the run's own waker
/// (and all of them on each wake-up); above it, each with its own (`wake.rs`). `join_all`
/// makes the same switch at 30.
const SHARED_WAKER_LIMIT: usize = 16;

/// One node's record during a run: where it stands, what reached it, and (while it runs) its
/// attempt. Plain data in one array, so a node's start, polls and end touch one record.
#[derive(Clone, Copy)]
struct NodeState {
    status: NodeStatus,
    /// A decision (else an operation): kept here, beside the status that starting a node
    /// writes, rather than looked up in the graph's node list.
    decision: bool,
    /// A data predecessor was skipped.
    skip: bool,
    /// The current attempt has not been polled yet: its first poll listens for an
    /// `#[operation]`'s defaults.
    fresh: bool,
    /// Predecessors not yet settled.
    remaining: u32,
    /// The failed node whose failure reached this one, or `NO_CAUSE`.
    abort_cause: u32,
    /// The current attempt while the node runs, 1 for the first.
    attempt: u32,
}

#[derive(Clone, Copy)]
enum Settle {
    Completed,
    Failed,
    Aborted(u32),
    Skipped,
}

/// What a running node may have besides its future: kept apart from its [`NodeState`], in
/// `Scheduler::watches`, which a run allocates only when some node needs one.
#[derive(Default)]
struct Watch {
    /// The current attempt's timeout.
    timeout: Option<Pin<Box<Sleep>>>,
    /// The node's deadline over all attempts.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Waiting before the next attempt.
    backoff: Option<Pin<Box<Sleep>>>,
    /// The attempt's span, entered while it is polled (when a subscriber wants it).
    #[cfg(feature = "tracing")]
    span: Option<tracing::Span>,
}

/// A node's poll, with a panic caught.
type PollResult = std::thread::Result<Poll<Result<(), NodeError>>>;

/// What [`Scheduler::poll_one`] did before it handed a node to [`Scheduler::poll_watched`].
enum Polled {
    /// Nothing: the node has timers or a span, the long way polls it.
    Not,
    /// It polled the node and the attempt failed.
    Failed(NodeError),
    /// It made the attempt's first poll, which heard an `#[operation]`'s defaults.
    Given(PollResult, Option<&'static OperationSpec>),
}

/// What a decision's test can see: the errors of failed and aborted nodes.
///
/// Generated code reads it through [`RunState::outcome`]; users never build one.
pub struct RunState {
    errors: Vec<Option<NodeError>>,
}

static MISSING: NodeError =
    NodeError::Internal("a decision read the outcome of a node that has none");

impl RunState {
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

    fn set_error(&mut self, node: usize, len: usize, error: NodeError) {
        if self.errors.is_empty() {
            self.errors.resize_with(len, || None);
        }
        self.errors[node] = Some(error);
    }
}

/// Per-node records that only runs with failures, retries or `#[operation]`s need; empty
/// otherwise, so a plain run allocates nothing for them.
#[derive(Default)]
struct Extras {
    operations: Vec<Option<&'static OperationSpec>>,
    attempts: Vec<u32>,
    failed_attempts: Vec<Vec<Arc<str>>>,
    /// Each failed node's final error as its `Failed` event rendered it, for the report to share.
    rendered: Vec<Option<Arc<str>>>,
}

/// The event log of a run being recorded, and the observers to tell.
struct Recording {
    run: RunId,
    start: tokio::time::Instant,
    seq: u64,
    log: Option<EventLog>,
    observers: Vec<Arc<dyn Observer>>,
}

/// Why the run stops early.
enum Halt {
    FailFast(u32),
    Cancelled(CancelReason),
}

/// A join of the plan during a run.
#[derive(Clone, Copy)]
struct JoinState {
    /// Sources not yet settled.
    remaining: u32,
    /// The first failure that reached the join, or `NO_CAUSE`.
    cause: u32,
}

/// The scheduler's state for one run.
struct Scheduler {
    graph: &'static Graph,
    nodes: Vec<NodeState>,
    joins: Vec<JoinState>,
    state: RunState,
    ready: Vec<u32>,
    /// Timers and spans of running nodes, indexed by node: empty until a node needs one (a
    /// step with a policy, an `#[operation]`'s defaults, a span), so a plain run neither
    /// allocates nor drops it, and testing a node for one is a length check.
    watches: Vec<Option<Box<Watch>>>,
    /// How many nodes are running.
    in_flight: usize,
    /// The nodes to poll in this wake-up: those started since the last poll and those woken.
    due: Vec<u32>,
    /// Running nodes last polled with the run's own waker: due on every wake-up.
    shared: Vec<u32>,
    group_running: Vec<u32>,
    limit: usize,
    limited: bool,
    settled: usize,
    /// How many nodes ended failed or aborted: none in most runs, which then need no verdict
    /// and (without a report) no list of final statuses.
    failures: usize,
    work: Vec<(u32, Settle)>,
    /// (decision, node) pairs: the decision's test names a failed or aborted node.
    catches: Vec<(u32, u32)>,
    caught: Vec<u32>,
    extras: Extras,
    policy: FailurePolicy,
    /// For `FailFast`: whether a test could catch a failure of each node (computed on demand).
    catchable: Vec<bool>,
    halt: Option<Halt>,
    cancelled: Option<CancelReason>,
    seed: u64,
    /// `None` when nobody wants events: then none are built.
    recording: Option<Box<Recording>>,
    /// The branch the decision being settled took.
    decided: Option<bool>,
    /// Whether the caller wants the per-node report.
    report: bool,
    /// Starting an attempt is making its future and nothing else: no step has a policy, no
    /// `#[operation]`'s defaults were heard, nobody records events and no subscriber can want
    /// a span. Cleared when an operation is heard.
    lean: bool,
}

impl Scheduler {
    fn new(graph: &'static Graph, options: &RunOptions) -> Self {
        let plan = &graph.plan;
        let mut nodes: Vec<NodeState> = plan
            .pred_count
            .iter()
            .map(|&count| NodeState {
                status: NodeStatus::Idle,
                decision: false,
                skip: false,
                fresh: false,
                remaining: count,
                abort_cause: NO_CAUSE,
                attempt: 0,
            })
            .collect();
        // A workflow without decisions has no branch lists, and its node list need not be read.
        if !plan.then_nodes.is_empty() {
            for (state, info) in nodes.iter_mut().zip(graph.nodes) {
                state.decision = info.kind == NodeKind::Decision;
            }
        }
        let limit = options
            .max_concurrency
            .map_or(usize::MAX, NonZeroUsize::get);
        let joins = plan
            .join_pred_count
            .iter()
            .map(|&count| JoinState {
                remaining: count,
                cause: NO_CAUSE,
            })
            .collect();
        let mut scheduler = Scheduler {
            graph,
            nodes,
            joins,
            state: RunState { errors: Vec::new() },
            // Room for the usual widths up front: growing these lists showed in profiles.
            ready: Vec::with_capacity(plan.roots.len().max(plan.pred_count.len().min(64))),
            watches: Vec::new(),
            in_flight: 0,
            due: Vec::with_capacity(plan.pred_count.len().min(64)),
            shared: Vec::with_capacity(SHARED_WAKER_LIMIT),
            group_running: vec![0; plan.group_limits.len()],
            limit,
            limited: limit != usize::MAX || !plan.group_limits.is_empty(),
            settled: 0,
            failures: 0,
            work: Vec::new(),
            catches: Vec::new(),
            caught: Vec::new(),
            extras: Extras::default(),
            policy: options.failure.unwrap_or(plan.failure),
            catchable: Vec::new(),
            halt: None,
            cancelled: None,
            seed: 0,
            recording: (options.record || !options.observers.is_empty()).then(|| {
                let mut log = options.record.then(EventLog::new);
                if let Some(log) = &mut log {
                    log.reserve(2 * plan.pred_count.len() + 2);
                }
                Box::new(Recording {
                    run: RunId::next(),
                    start: tokio::time::Instant::now(),
                    seq: 0,
                    log,
                    observers: options.observers.clone(),
                })
            }),
            decided: None,
            report: options.report,
            lean: false,
        };
        scheduler.lean = plan.policies.is_empty() && scheduler.recording.is_none() && !spans();
        scheduler.emit(None, 0, || EventKind::RunStarted {
            workflow: graph.name,
            nodes: graph.nodes.len() as u32,
        });
        for &root in plan.roots {
            scheduler.nodes[root as usize].status = NodeStatus::Ready;
            scheduler.ready.push(root);
        }
        scheduler
    }

    /// Appends an event to the log and tells the observers; builds nothing when no one listens.
    #[inline]
    fn emit(&mut self, node: Option<u32>, attempt: u32, kind: impl FnOnce() -> EventKind) {
        let Some(recording) = &mut self.recording else {
            return;
        };
        let event = Event {
            run: recording.run,
            seq: recording.seq,
            node,
            attempt,
            at: recording.start.elapsed(),
            kind: kind(),
        };
        recording.seq += 1;
        #[cfg(feature = "tracing")]
        trace_event(self.graph, &event);
        for observer in &recording.observers {
            observer.on_event(&event);
        }
        if let Some(log) = &mut recording.log {
            log.push(event);
        }
    }

    /// The attempt number to stamp on a node's terminal event.
    fn attempt_of(&self, node: u32) -> u32 {
        attempts_of(
            &self.extras.attempts,
            node as usize,
            self.nodes[node as usize].status,
        )
    }

    fn plan(&self) -> &'static Plan {
        &self.graph.plan
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }

    /// `node`'s timers and span, if it has any.
    #[inline(always)]
    fn watch_of(&mut self, node: u32) -> Option<&mut Watch> {
        self.watches
            .get_mut(node as usize)
            .and_then(Option::as_deref_mut)
    }

    /// `node`'s timers and span, made on first use.
    fn watch(&mut self, node: u32) -> &mut Watch {
        if self.watches.is_empty() {
            self.watches.resize_with(self.len(), || None);
        }
        self.watches[node as usize].get_or_insert_with(Box::default)
    }

    /// One of `node`'s timers (`|w| &mut w.deadline`), if it has it.
    fn timer(
        &mut self,
        node: u32,
        which: fn(&mut Watch) -> &mut Option<Pin<Box<Sleep>>>,
    ) -> Option<&mut Pin<Box<Sleep>>> {
        self.watch_of(node).and_then(|w| which(w).as_mut())
    }

    /// The policy in force for `node`: the step's own settings, then its operation's defaults.
    #[inline]
    fn node_policy(&self, node: u32) -> NodePolicy {
        if self.plan().policies.is_empty() && self.extras.operations.is_empty() {
            return NodePolicy::NONE;
        }
        let own = self.plan().policy(node as usize);
        match self.extras.operations.get(node as usize).copied().flatten() {
            Some(spec) => own.or(&spec.policy),
            None => own,
        }
    }

    fn has_capacity(&self, node: u32) -> bool {
        if self.in_flight >= self.limit {
            return false;
        }
        match self.plan().node_groups.get(node as usize) {
            Some(groups) => groups
                .iter()
                .all(|&g| self.group_running[g as usize] < self.plan().group_limits[g as usize]),
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

    /// Starts every ready node that may start, in the order they became ready. Decisions are
    /// evaluated on the spot.
    fn start_ready(&mut self, leaves: &mut Leaves<'_>) {
        if self.limited {
            return self.start_ready_limited(leaves);
        }
        // Walked by index: a node made ready meanwhile (by a decision, or a start that failed)
        // joins the end of the list and is started in this walk too.
        let mut i = 0;
        while self.halt.is_none()
            && let Some(&node) = self.ready.get(i)
        {
            i += 1;
            self.start_one(leaves, node);
        }
        if i == self.ready.len() {
            self.ready.clear();
        } else {
            // `halt`: the rest is never started (`stop_all` aborts it).
            self.ready.drain(..i);
        }
    }

    /// [`Scheduler::start_ready`] under concurrency limits: a node without room stays ready,
    /// in its place, for a later turn.
    #[inline(never)]
    fn start_ready_limited(&mut self, leaves: &mut Leaves<'_>) {
        let mut i = 0;
        while self.halt.is_none()
            && let Some(&node) = self.ready.get(i)
        {
            if !self.nodes[node as usize].decision && !self.has_capacity(node) {
                i += 1;
                continue;
            }
            self.ready.remove(i);
            self.start_one(leaves, node);
        }
    }

    /// Starts a ready node: evaluates a decision, or starts an operation's first attempt.
    #[inline(always)]
    fn start_one(&mut self, leaves: &mut Leaves<'_>, node: u32) {
        if self.nodes[node as usize].decision {
            self.decide(leaves, node);
            return;
        }
        self.nodes[node as usize].status = NodeStatus::Running;
        if self.limited {
            self.occupy(node, 1);
        }
        self.in_flight += 1;
        let started = if self.lean {
            self.start_attempt(leaves, node)
        } else {
            self.start_first(leaves, node)
        };
        match started {
            Ok(()) => self.due.push(node),
            Err(error) => {
                self.release(node);
                self.fail(node, error);
            }
        }
    }

    /// A running node has stopped: it no longer counts against any limit, and its timers go.
    #[inline(always)]
    fn release(&mut self, node: u32) {
        let state = &mut self.nodes[node as usize];
        state.attempt = 0;
        state.fresh = false;
        // Tested first: assigning alone calls the box's drop glue out of line for every node,
        // though most have no `Watch` (and most runs no `watches` at all).
        if let Some(watch) = self.watches.get_mut(node as usize)
            && watch.is_some()
        {
            *watch = None;
        }
        self.in_flight -= 1;
        if self.limited {
            self.occupy(node, -1);
        }
    }

    /// Starts `node`'s first attempt when the run is not lean: its deadline over all attempts
    /// first.
    #[inline(never)]
    fn start_first(&mut self, leaves: &mut Leaves<'_>, node: u32) -> Result<(), NodeError> {
        if let Some(after) = self.plan().policy(node as usize).deadline() {
            self.watch(node).deadline = Some(timer(after)?);
        }
        self.start_attempt(leaves, node)
    }

    /// Makes the future of `node`'s next attempt. In a lean run that is all; otherwise
    /// [`Scheduler::attempt_started`] sets the attempt's timeout and span and records it.
    #[inline(always)]
    fn start_attempt(&mut self, leaves: &mut Leaves<'_>, node: u32) -> Result<(), NodeError> {
        let started = catch_unwind(AssertUnwindSafe(|| leaves[node as usize].as_mut().start()));
        if let Err(payload) = started {
            return Err(NodeError::Panicked(panic_message(payload)));
        }
        let state = &mut self.nodes[node as usize];
        state.attempt += 1;
        state.fresh = true;
        if self.lean {
            return Ok(());
        }
        self.attempt_started(node)
    }

    /// The rest of [`Scheduler::start_attempt`] outside a lean run: the attempt's timeout, its
    /// span, its event; what the previous attempt left (backoff, timeout, span) goes.
    #[inline(never)]
    fn attempt_started(&mut self, node: u32) -> Result<(), NodeError> {
        let timeout = self.node_policy(node).timeout().map(timer).transpose()?;
        if let Some(watch) = self.watch_of(node) {
            watch.backoff = None;
            watch.timeout = None;
            #[cfg(feature = "tracing")]
            {
                watch.span = None;
            }
        }
        if let Some(timeout) = timeout {
            self.watch(node).timeout = Some(timeout);
        }
        let attempt = self.nodes[node as usize].attempt;
        #[cfg(feature = "tracing")]
        {
            let span = tracing::info_span!(
                "flow_node",
                workflow = self.graph.name,
                node = self.graph.nodes[node as usize].name,
                attempt
            );
            if !span.is_disabled() {
                self.watch(node).span = Some(span);
            }
        }
        self.emit(Some(node), attempt, || EventKind::Requested);
        Ok(())
    }

    fn decide(&mut self, leaves: &mut Leaves<'_>, node: u32) {
        let state = &self.state;
        let chosen = catch_unwind(AssertUnwindSafe(|| {
            leaves[node as usize].as_mut().decide(state)
        }));
        match chosen {
            Ok(branch) => {
                // The test ran: every failure it named is caught.
                let caught = self
                    .catches
                    .iter()
                    .filter(|(d, _)| *d == node)
                    .map(|&(_, n)| n);
                self.caught.extend(caught);
                let plan = self.plan();
                let untaken = if branch {
                    plan.else_nodes[node as usize]
                } else {
                    plan.then_nodes[node as usize]
                };
                self.decided = Some(branch);
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
        if self.policy == FailurePolicy::FailFast && self.halt.is_none() && !self.catchable(node) {
            self.halt = Some(Halt::FailFast(node));
        }
    }

    /// Whether some `Conditional` test could still catch a failure of `node`: a test names it,
    /// or names a node downstream of it (which the failure would abort). Node ids are in
    /// topological order, so one backward pass computes it for every node.
    fn catchable(&mut self, node: u32) -> bool {
        if self.catchable.is_empty() {
            let plan = self.plan();
            let mut catchable = vec![false; self.len()];
            for n in (0..self.len()).rev() {
                let mut any = false;
                plan.for_each_target(n, |target, caught| any |= caught || catchable[target]);
                catchable[n] = any;
            }
            self.catchable = catchable;
        }
        self.catchable[node as usize]
    }

    /// Records a failed attempt's error, rendered once: the report and the `Retrying` event
    /// share the returned text.
    fn record_attempt_error(&mut self, node: u32, error: &NodeError) -> Arc<str> {
        if self.extras.failed_attempts.is_empty() {
            self.extras
                .failed_attempts
                .resize_with(self.len(), Vec::new);
        }
        let rendered = render(error);
        self.extras.failed_attempts[node as usize].push(Arc::clone(&rendered));
        rendered
    }

    /// Records how many attempts `node` made, unless its final status implies it (1 for an
    /// operation that completed or failed, 0 otherwise), so plain runs allocate nothing here.
    fn record_attempts(&mut self, node: u32, attempts: u32, implied: u32) {
        if attempts == implied && self.extras.attempts.is_empty() {
            return;
        }
        if self.extras.attempts.is_empty() {
            self.extras.attempts.resize(self.len(), IMPLIED);
        }
        self.extras.attempts[node as usize] = attempts;
    }

    /// `node`'s final error rendered once, kept for the report to share with the event.
    fn render_final(&mut self, node: u32) -> Arc<str> {
        let rendered = match self
            .state
            .errors
            .get(node as usize)
            .and_then(Option::as_ref)
        {
            Some(error) => render(error),
            None => Arc::from(""),
        };
        if self.extras.rendered.is_empty() {
            self.extras.rendered.resize(self.len(), None);
        }
        self.extras.rendered[node as usize] = Some(Arc::clone(&rendered));
        rendered
    }

    /// A pseudo-random fraction in [0, 1) for jitter: per run, node and attempt.
    fn jitter_fraction(&mut self, node: u32, attempt: u32) -> f64 {
        if self.seed == 0 {
            self.seed = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
                | 1;
        }
        let mut x = self.seed ^ (u64::from(node) << 32 | u64::from(attempt));
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Polls the due nodes (started or woken since the last poll), each with its own waker.
    ///
    /// While few nodes are in flight (`SHARED_WAKER_LIMIT`), a node is polled with the run's own
    /// waker instead, as `join_all` does for small sets: its wake-up then costs what a
    /// hand-written `join!` pays, and the run polls every such node (at most that many) on each
    /// wake-up, since it cannot tell which one was woken.
    fn poll_due(
        &mut self,
        leaves: &mut Leaves<'_>,
        wakes: &mut Option<Arc<WakeSet>>,
        parent: &Context<'_>,
    ) {
        // Polling adds nothing to `due` (nodes started from here on are polled by the next
        // round), so the list is walked by index and cleared at the end, keeping its room.
        let mut i = 0;
        while let Some(&node) = self.due.get(i) {
            i += 1;
            if self.halt.is_some() {
                // `halt` stops whatever is still running.
                break;
            }
            if self.nodes[node as usize].status != NodeStatus::Running {
                // Woken after it ended (a timer or an earlier attempt's future).
                continue;
            }
            let shared = self.in_flight <= SHARED_WAKER_LIMIT;
            let own;
            let waker = if shared {
                parent.waker()
            } else {
                // Made on first use: small and narrow workflows never need it.
                let wakes = wakes.get_or_insert_with(|| {
                    let wakes = WakeSet::new(self.len());
                    wakes.register(parent.waker());
                    wakes
                });
                wakes.polling(node);
                own = wakes.waker(node);
                &*own
            };
            // One call site, so that the short path is inlined here.
            let result = self.poll_one(leaves, node, &mut Context::from_waker(waker));
            if let Some(result) = result {
                if result.is_err() {
                    // A failed future has ended, but a timeout, a deadline or a panic leaves
                    // the attempt's future in place (a completed one dropped itself).
                    leaves[node as usize].as_mut().stop();
                }
                let attempts = self.nodes[node as usize].attempt;
                self.release(node);
                self.record_attempts(node, attempts, 1);
                match result {
                    Ok(()) => self.settle(node, Settle::Completed),
                    Err(error) => self.fail(node, error),
                }
            } else if shared {
                self.shared.push(node);
            }
        }
        self.due.clear();
    }

    /// Polls one running node. `None` while it is still going; `Some` with its final result.
    ///
    /// The common case is short: a node without timers or span. Everything else (timers, an
    /// `#[operation]`'s defaults heard on the first poll, a failed attempt) goes through
    /// [`Scheduler::poll_watched`].
    #[inline(always)]
    fn poll_one(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
    ) -> Option<Result<(), NodeError>> {
        let index = node as usize;
        if self.watch_of(node).is_some() {
            return self.poll_watched(leaves, node, cx, Polled::Not);
        }
        let state = &mut self.nodes[index];
        let polled = if state.fresh {
            state.fresh = false;
            // The attempt's first poll: it may hear an `#[operation]`'s defaults.
            let (polled, heard) =
                listen(|| catch_unwind(AssertUnwindSafe(|| leaves[index].as_mut().poll(cx))));
            if heard.is_some() {
                // Its defaults may bring timers: the long way applies them.
                return self.poll_watched(leaves, node, cx, Polled::Given(polled, heard));
            }
            polled
        } else {
            catch_unwind(AssertUnwindSafe(|| leaves[index].as_mut().poll(cx)))
        };
        match polled {
            Ok(Poll::Pending) => None,
            Ok(Poll::Ready(Ok(()))) => Some(Ok(())),
            Ok(Poll::Ready(Err(error))) => {
                self.poll_watched(leaves, node, cx, Polled::Failed(error))
            }
            Err(payload) => {
                let error = NodeError::Panicked(panic_message(payload));
                self.poll_watched(leaves, node, cx, Polled::Failed(error))
            }
        }
    }

    /// Polls one running node the long way: its deadline, its backoff, then its attempt and
    /// the attempt's timeout. `polled` says what [`Scheduler::poll_one`] has already done.
    #[inline(never)]
    fn poll_watched(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
        polled: Polled,
    ) -> Option<Result<(), NodeError>> {
        let (mut failed, mut given) = match polled {
            Polled::Not => (None, None),
            Polled::Failed(error) => (Some(error), None),
            Polled::Given(result, heard) => (None, Some((result, heard))),
        };
        loop {
            if let Some(error) = failed.take() {
                // An attempt that failed: retry it after its backoff, or give up.
                if let Some(done) = self.retry_or_give_up(leaves, node, error) {
                    return Some(done);
                }
                continue;
            }
            if let Some(deadline) = self.timer(node, |w| &mut w.deadline)
                && deadline.as_mut().poll(cx).is_ready()
            {
                let after = self.node_policy(node).deadline().unwrap_or_default();
                return Some(Err(NodeError::DeadlineExceeded(after)));
            }
            if let Some(backoff) = self.timer(node, |w| &mut w.backoff) {
                if backoff.as_mut().poll(cx).is_pending() {
                    return None;
                }
                if let Err(error) = self.start_attempt(leaves, node) {
                    return Some(Err(error));
                }
            }
            let had_deadline = self.timer(node, |w| &mut w.deadline).is_some();
            let error = match self.poll_attempt(leaves, node, cx, given.take()) {
                Poll::Pending => {
                    // A deadline that this poll made (an `#[operation]`'s default, heard on the
                    // attempt's first poll) must be polled once to wake the node when it passes:
                    // nothing else polls a node that nobody wakes.
                    if !had_deadline
                        && let Some(deadline) = self.timer(node, |w| &mut w.deadline)
                        && deadline.as_mut().poll(cx).is_ready()
                    {
                        let after = self.node_policy(node).deadline().unwrap_or_default();
                        return Some(Err(NodeError::DeadlineExceeded(after)));
                    }
                    return None;
                }
                Poll::Ready(Ok(())) => return Some(Ok(())),
                Poll::Ready(Err(error)) => error,
            };
            if let Some(done) = self.retry_or_give_up(leaves, node, error) {
                return Some(done);
            }
            // Loop: poll the new backoff so that its timer is registered (or fires at once).
        }
    }

    /// An attempt of `node` failed: sets the backoff timer before the next attempt and returns
    /// `None`, or returns the node's final error when no retry is left (or no timer can be made).
    fn retry_or_give_up(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        error: NodeError,
    ) -> Option<Result<(), NodeError>> {
        let attempt = self.nodes[node as usize].attempt;
        let policy = self.node_policy(node);
        if attempt > policy.retries() {
            return Some(Err(error));
        }
        leaves[node as usize].as_mut().stop();
        let rendered = self.record_attempt_error(node, &error);
        let mut delay = policy.backoff.unwrap_or_default().delay(attempt);
        if policy.jitter.unwrap_or(false) {
            delay = delay.mul_f64(self.jitter_fraction(node, attempt));
        }
        self.emit(Some(node), attempt, || EventKind::Retrying {
            error: rendered,
            delay,
        });
        let backoff = match timer(delay) {
            Ok(backoff) => backoff,
            Err(error) => return Some(Err(error)),
        };
        let watch = self.watch(node);
        watch.timeout = None;
        watch.backoff = Some(backoff);
        None
    }

    /// Polls the current attempt of `node` and its timeout.
    ///
    /// `given` is the result and what was heard of a first poll already made.
    fn poll_attempt(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
        given: Option<(PollResult, Option<&'static OperationSpec>)>,
    ) -> Poll<Result<(), NodeError>> {
        let index = node as usize;
        #[cfg(feature = "tracing")]
        let span = self.watch_of(node).and_then(|w| w.span.clone());
        #[cfg(feature = "tracing")]
        let _entered = span.as_ref().map(tracing::Span::enter);
        let polled = if let Some((polled, heard)) = given {
            match heard.map(|spec| self.heard(node, spec)) {
                Some(Err(error)) => Ok(Poll::Ready(Err(error))),
                _ => polled,
            }
        } else if self.nodes[index].fresh {
            self.nodes[index].fresh = false;
            let (polled, heard) = listen(|| {
                catch_unwind(AssertUnwindSafe(|| leaves[node as usize].as_mut().poll(cx)))
            });
            match heard.map(|spec| self.heard(node, spec)) {
                Some(Err(error)) => Ok(Poll::Ready(Err(error))),
                _ => polled,
            }
        } else {
            catch_unwind(AssertUnwindSafe(|| leaves[node as usize].as_mut().poll(cx)))
        };
        match polled {
            Ok(Poll::Ready(result)) => Poll::Ready(result),
            Err(payload) => Poll::Ready(Err(NodeError::Panicked(panic_message(payload)))),
            Ok(Poll::Pending) => {
                let expired = match self.timer(node, |w| &mut w.timeout) {
                    Some(timeout) => timeout.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if expired {
                    let after = self.node_policy(node).timeout().unwrap_or_default();
                    let attempt = self.nodes[index].attempt;
                    self.emit(Some(node), attempt, || EventKind::TimedOut { after });
                    Poll::Ready(Err(NodeError::TimedOut(after)))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    /// Applies the defaults of the `#[operation]` that `node` called.
    fn heard(&mut self, node: u32, spec: &'static OperationSpec) -> Result<(), NodeError> {
        let node = node as usize;
        // From now on attempts may have defaults to apply.
        self.lean = false;
        if self.extras.operations.is_empty() {
            self.extras.operations.resize(self.len(), None);
        }
        let first = self.extras.operations[node].is_none();
        self.extras.operations[node] = Some(spec);
        let own = self.plan().policy(node);
        if own.timeout_ms.is_none()
            && let Some(after) = spec.policy.timeout()
        {
            self.watch(node as u32).timeout = Some(timer(after)?);
        }
        if first
            && own.deadline_ms.is_none()
            && let Some(after) = spec.policy.deadline()
        {
            self.watch(node as u32).deadline = Some(timer(after)?);
        }
        Ok(())
    }

    /// Polls the run: starts what is ready and polls the nodes started or woken (`wakes` holds
    /// the nodes' wakers) until nothing more can happen in this wake-up.
    fn poll(
        &mut self,
        leaves: &mut Leaves<'_>,
        wakes: &mut Option<Arc<WakeSet>>,
        cx: &Context<'_>,
    ) -> Poll<()> {
        // Nodes polled with the run's waker may be the ones woken; the others say so.
        if self.due.is_empty() {
            std::mem::swap(&mut self.due, &mut self.shared);
        } else {
            self.due.append(&mut self.shared);
        }
        if let Some(wakes) = wakes {
            wakes.register(cx.waker());
            wakes.take(&mut self.due);
        }
        loop {
            self.start_ready(leaves);
            if self.halt.is_some() {
                self.stop_all(leaves);
                return Poll::Ready(());
            }
            if self.due.is_empty() {
                return if self.settled == self.len() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                };
            }
            self.poll_due(leaves, wakes, cx);
            if self.halt.is_some() {
                self.stop_all(leaves);
                return Poll::Ready(());
            }
            if self.settled == self.len() {
                return Poll::Ready(());
            }
            if self.ready.is_empty() {
                // `poll_due` left `due` empty, and nothing new is ready: nothing more can
                // happen in this wake-up (a node woken meanwhile has woken the run).
                return Poll::Pending;
            }
        }
    }

    /// Ends the run early: drops every running operation and aborts every unfinished node.
    fn stop_all(&mut self, leaves: &mut Leaves<'_>) {
        for node in 0..self.len() as u32 {
            if self.nodes[node as usize].status == NodeStatus::Running {
                leaves[node as usize].as_mut().stop();
                let attempts = self.nodes[node as usize].attempt;
                self.release(node);
                self.record_attempts(node, attempts, 0);
            }
        }
        self.ready.clear();
        let len = self.len();
        for node in 0..len {
            if self.nodes[node].status.is_terminal() {
                continue;
            }
            self.nodes[node].status = NodeStatus::Aborted;
            self.settled += 1;
            self.failures += 1;
            let cause_id = match &self.halt {
                Some(Halt::FailFast(cause)) => *cause,
                _ => NO_CAUSE,
            };
            self.nodes[node].abort_cause = cause_id;
            let cause = (cause_id != NO_CAUSE).then(|| self.graph.nodes[cause_id as usize].name);
            let error = match (&self.halt, cause) {
                (_, Some(cause)) => NodeError::Aborted { cause },
                _ => NodeError::Cancelled,
            };
            self.state.set_error(node, len, error);
            let attempt = self.attempt_of(node as u32);
            self.emit(Some(node as u32), attempt, || EventKind::Aborted { cause });
        }
        if let Some(Halt::Cancelled(reason)) = self.halt {
            self.cancelled = Some(reason);
        }
    }

    #[inline(always)]
    fn mark(&mut self, node: u32, how: Settle) {
        self.nodes[node as usize].status = match how {
            Settle::Completed => NodeStatus::Completed,
            Settle::Failed => NodeStatus::Failed,
            Settle::Aborted(_) => NodeStatus::Aborted,
            Settle::Skipped => NodeStatus::Skipped,
        };
        self.settled += 1;
        if !matches!(how, Settle::Completed) || self.recording.is_some() {
            // Not the common case, where there is nothing to record and no failure to pass on.
            self.mark_more(node, how);
        }
    }

    /// The rest of [`Scheduler::mark`]: passes a failure on and records the event.
    #[cold]
    #[inline(never)]
    fn mark_more(&mut self, node: u32, how: Settle) {
        if matches!(how, Settle::Failed | Settle::Aborted(_)) {
            self.failures += 1;
        }
        let state = &mut self.nodes[node as usize];
        if let Settle::Aborted(cause) = how {
            state.abort_cause = cause;
        }
        if self.policy == FailurePolicy::FailFast
            && self.halt.is_none()
            && matches!(how, Settle::Failed | Settle::Aborted(_))
            && self.plan().successors(node as usize).is_empty()
        {
            // A failure reached the end of the graph: the run has failed.
            let cause = match how {
                Settle::Aborted(cause) => cause,
                _ => node,
            };
            self.halt = Some(Halt::FailFast(cause));
        }
        if let Settle::Aborted(cause) = how {
            let cause = self.graph.nodes[cause as usize].name;
            let len = self.len();
            self.state
                .set_error(node as usize, len, NodeError::Aborted { cause });
        }
        if self.recording.is_some() {
            let attempt = self.attempt_of(node);
            let kind = match how {
                Settle::Completed => EventKind::Completed {
                    branch: match self.graph.nodes[node as usize].kind {
                        NodeKind::Decision => self.decided.take(),
                        NodeKind::Operation => None,
                    },
                },
                Settle::Failed => EventKind::Failed {
                    error: self.render_final(node),
                },
                Settle::Aborted(cause) => EventKind::Aborted {
                    cause: Some(self.graph.nodes[cause as usize].name),
                },
                Settle::Skipped => EventKind::Skipped,
            };
            self.emit(Some(node), attempt, || kind);
        }
    }

    #[inline(always)]
    fn settle(&mut self, node: u32, how: Settle) {
        self.mark(node, how);
        self.settled_one(node, how);
        while let Some((node, how)) = self.work.pop() {
            self.settled_one(node, how);
        }
    }

    /// Tells everything after `node` that it has settled, passing on its failure (the cause)
    /// or its skip; nodes settled in turn go on `work`.
    #[inline(always)]
    fn settled_one(&mut self, node: u32, how: Settle) {
        let (cause, skipped) = match how {
            // The common case: nothing to pass on.
            Settle::Completed => (NO_CAUSE, false),
            Settle::Failed => (node, false),
            Settle::Aborted(cause) => (cause, false),
            Settle::Skipped => {
                self.skip_branches(node);
                (NO_CAUSE, true)
            }
        };
        self.reach(self.plan().successors(node as usize), node, cause, skipped);
    }

    /// A skipped decision takes neither branch: both are skipped.
    #[cold]
    fn skip_branches(&mut self, node: u32) {
        if self.graph.nodes[node as usize].kind == NodeKind::Decision {
            let plan = self.plan();
            self.skip_all(plan.then_nodes[node as usize]);
            self.skip_all(plan.else_nodes[node as usize]);
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

    /// Tells the targets of `entries` that `node` has settled; `cause` is the failure it passes
    /// on (`NO_CAUSE` if none), `skipped` whether it was skipped.
    ///
    /// Not recursive (a join lists nodes, never joins), so that it inlines where a node settles.
    #[inline(always)]
    fn reach(&mut self, entries: &'static [u32], node: u32, cause: u32, skipped: bool) {
        for &entry in entries {
            if entry & Plan::JOIN == 0 {
                self.reach_one(entry, node, cause, skipped);
                continue;
            }
            let join_id = (entry & Plan::NODE) as usize;
            let join = &mut self.joins[join_id];
            join.remaining -= 1;
            if join.cause == NO_CAUSE {
                join.cause = cause;
            }
            if join.remaining == 0 {
                // Skips do not pass through joins: they join ordering edges, not data.
                let cause = join.cause;
                for &target in self.plan().join_targets(join_id) {
                    self.reach_one(target, node, cause, false);
                }
            }
        }
    }

    /// Tells one target, through the successor `entry` (its index and flags), that `node` has
    /// settled: the target is decided when this was its last unsettled predecessor.
    #[inline(always)]
    fn reach_one(&mut self, entry: u32, node: u32, cause: u32, skipped: bool) {
        let succ = entry & Plan::NODE;
        let state = &mut self.nodes[succ as usize];
        if state.status.is_terminal() {
            return;
        }
        state.remaining -= 1;
        if cause != NO_CAUSE {
            if entry & Plan::CAUGHT != 0 {
                self.catches.push((succ, node));
            } else if state.abort_cause == NO_CAUSE {
                state.abort_cause = cause;
            }
        } else if skipped && entry & Plan::DATA != 0 {
            state.skip = true;
        }
        if state.remaining > 0 {
            state.status = NodeStatus::Waiting;
            return;
        }
        let next = if state.abort_cause != NO_CAUSE {
            Settle::Aborted(state.abort_cause)
        } else if state.skip {
            Settle::Skipped
        } else {
            state.status = NodeStatus::Ready;
            self.ready.push(succ);
            return;
        };
        self.mark(succ, next);
        self.work.push((succ, next));
    }

    fn finish(mut self) -> Finished {
        debug_assert_eq!(
            self.failures,
            self.nodes
                .iter()
                .filter(|n| matches!(n.status, NodeStatus::Failed | NodeStatus::Aborted))
                .count()
        );
        // A run where nothing failed needs the statuses only for its report.
        let statuses: Vec<NodeStatus> = if self.failures > 0 || self.report {
            self.nodes.iter().map(|n| n.status).collect()
        } else {
            Vec::new()
        };
        let verdict = if self.failures == 0 {
            Verdict::SUCCEEDED
        } else {
            Verdict::judge(self.graph, &statuses, &self.caught)
        };
        let succeeded = self.cancelled.is_none() && verdict.succeeded;
        self.emit(None, 0, || EventKind::RunFinished { succeeded });
        let recording = self.recording.take();
        Finished {
            graph: self.graph,
            statuses,
            errors: self.state.errors,
            verdict,
            extras: self.extras,
            cancelled: self.cancelled,
            run: recording.as_ref().map(|r| r.run),
            elapsed: recording.as_ref().map(|r| r.start.elapsed()),
            log: recording.and_then(|r| r.log),
            report: self.report,
        }
    }
}

/// In `Extras::attempts`: the node's status implies its attempts.
const IMPLIED: u32 = u32::MAX;

/// How many attempts a node made: recorded, or implied by its status (1 for a node that
/// completed or failed, 0 for one that never ran).
fn attempts_of(recorded: &[u32], node: usize, status: NodeStatus) -> u32 {
    match recorded.get(node) {
        Some(&n) if n != IMPLIED => n,
        _ => u32::from(matches!(status, NodeStatus::Completed | NodeStatus::Failed)),
    }
}

/// Whether a finished run succeeded, and which nodes its error lists.
struct Verdict {
    succeeded: bool,
    listed: Vec<bool>,
}

impl Verdict {
    /// The verdict of a run where no node failed or was aborted.
    const SUCCEEDED: Verdict = Verdict {
        succeeded: true,
        listed: Vec::new(),
    };

    /// The run fails when a failure reached the end of the graph (a node without successors
    /// ended failed or aborted), when it was cancelled, or when a failed node's failure was not
    /// caught: no `Conditional` test that ran named it, or named a node its failure aborted.
    /// The error lists every failed node not caught, every aborted node no test named, and
    /// every failure that reached an aborted node it lists. Called only when some node failed
    /// or was aborted ([`Verdict::SUCCEEDED`] otherwise).
    fn judge(graph: &Graph, statuses: &[NodeStatus], named: &[u32]) -> Verdict {
        let n = statuses.len();
        let bad = |s: NodeStatus| matches!(s, NodeStatus::Failed | NodeStatus::Aborted);
        // The failed nodes whose failure reached each aborted node, in one forward pass (ids
        // are in topological order). Aborts with no failure behind them are cancellations.
        let mut roots: Vec<Vec<u32>> = vec![Vec::new(); n];
        for node in 0..n {
            if !bad(statuses[node]) {
                continue;
            }
            let from = match statuses[node] {
                NodeStatus::Failed => vec![node as u32],
                _ => roots[node].clone(),
            };
            graph.plan.for_each_target(node, |succ, caught| {
                if !caught && statuses[succ] == NodeStatus::Aborted {
                    for &root in &from {
                        if !roots[succ].contains(&root) {
                            roots[succ].push(root);
                        }
                    }
                }
            });
        }
        let mut is_named = vec![false; n];
        let mut caught = vec![false; n];
        for &node in named {
            let node = node as usize;
            is_named[node] = true;
            match statuses[node] {
                NodeStatus::Failed => caught[node] = true,
                NodeStatus::Aborted => roots[node].iter().for_each(|&r| caught[r as usize] = true),
                _ => {}
            }
        }
        let mut succeeded = true;
        let mut listed = vec![false; n];
        for node in 0..n {
            let sink = graph.plan.successors(node).is_empty();
            match statuses[node] {
                NodeStatus::Failed => {
                    listed[node] = !caught[node] || sink;
                    succeeded &= !listed[node];
                }
                NodeStatus::Aborted => {
                    listed[node] = !is_named[node];
                    succeeded &= !sink && !roots[node].is_empty();
                }
                _ => {}
            }
        }
        for node in 0..n {
            if listed[node] && statuses[node] == NodeStatus::Aborted {
                for &root in &roots[node] {
                    listed[root as usize] = true;
                }
            }
        }
        Verdict { succeeded, listed }
    }
}

/// Logs an event through `tracing`: failures at `warn`, the rest at `debug`.
#[cfg(feature = "tracing")]
fn trace_event(graph: &Graph, event: &Event) {
    let node = event
        .node
        .and_then(|n| graph.nodes.get(n as usize))
        .map_or("", |n| n.name);
    let attempt = event.attempt;
    match &event.kind {
        EventKind::Failed { error } => {
            tracing::warn!(workflow = graph.name, node, attempt, error = %error, "node failed")
        }
        EventKind::Retrying { error, delay } => tracing::warn!(
            workflow = graph.name, node, attempt, error = %error, ?delay, "attempt failed; retrying"
        ),
        EventKind::TimedOut { after } => {
            tracing::warn!(
                workflow = graph.name,
                node,
                attempt,
                ?after,
                "attempt timed out"
            )
        }
        EventKind::Aborted { cause } => {
            tracing::warn!(
                workflow = graph.name,
                node,
                cause = cause.unwrap_or("cancelled"),
                "node aborted"
            )
        }
        EventKind::RunFinished { succeeded: false } => {
            tracing::warn!(workflow = graph.name, "run failed")
        }
        kind => tracing::debug!(workflow = graph.name, node, attempt, event = kind.name()),
    }
}

/// Whether a `tracing` subscriber may want the attempts' spans: their level is enabled by the
/// current max level hint. Without the `tracing` feature there are none.
fn spans() -> bool {
    #[cfg(feature = "tracing")]
    {
        tracing::level_enabled!(tracing::Level::INFO)
    }
    #[cfg(not(feature = "tracing"))]
    {
        false
    }
}

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
    options: RunOptions,
    tree: T,
) -> impl Future<Output = Finished> {
    execute_nodes(graph, options, tree.inline())
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
    options: RunOptions,
    tree: T,
) -> impl Future<Output = Finished> {
    // The run's own future is `run_nodes`'s, with the box as its argument: no async layer of
    // its own to pass through on every wake-up.
    run_nodes(graph, options, Box::pin(tree.in_arena()))
}

/// As [`execute`], over a node set built some other way: any [`Nodes`] implementation whose
/// nodes match `graph` in number and order.
pub fn execute_nodes<N: Nodes>(
    graph: &'static Graph,
    options: RunOptions,
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
        run_nodes(graph, options, nodes).await
    }
}

/// Runs the pinned node set `nodes` to the end: the body of [`execute_nodes`] (a pinned
/// reference into its future) and [`execute_in_arena`] (a pinned box), which differ only in
/// where the set lives.
async fn run_nodes<P, N>(graph: &'static Graph, options: RunOptions, mut nodes: Pin<P>) -> Finished
where
    P: std::ops::DerefMut<Target = N>,
    N: Nodes,
{
    let mut table = Table::new(nodes.as_mut());
    debug_assert_eq!(table.len(), graph.nodes.len());
    let mut scheduler = Scheduler::new(graph, &options);
    // The nodes' own wakers, made when the first node needs one.
    let mut wakes = None;
    let mut deadline = match options.deadline.map(deadline_timer).transpose() {
        Ok(deadline) => deadline,
        Err(reason) => {
            scheduler.halt = Some(Halt::Cancelled(reason));
            scheduler.stop_all(table.leaves());
            return scheduler.finish();
        }
    };
    let token = options.cancel.clone();
    let cancelled = async {
        match &token {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let mut cancelled = std::pin::pin!(cancelled);
    let watched = token.is_some() || deadline.is_some();
    std::future::poll_fn(|cx| {
        let leaves = table.leaves();
        if watched {
            let reason = if cancelled.as_mut().poll(cx).is_ready() {
                Some(CancelReason::Token)
            } else if deadline
                .as_mut()
                .is_some_and(|d| d.as_mut().poll(cx).is_ready())
            {
                options.deadline.map(CancelReason::Deadline)
            } else {
                None
            };
            if let Some(reason) = reason {
                scheduler.halt = Some(Halt::Cancelled(reason));
                scheduler.stop_all(leaves);
                return Poll::Ready(());
            }
        }
        scheduler.poll(leaves, &mut wakes, cx)
    })
    .await;
    scheduler.finish()
}

/// A run that has ended: every node's status and every failure. Generated code turns it into an
/// [`Outcome`].
pub struct Finished {
    graph: &'static Graph,
    statuses: Vec<NodeStatus>,
    errors: Vec<Option<NodeError>>,
    verdict: Verdict,
    extras: Extras,
    cancelled: Option<CancelReason>,
    run: Option<RunId>,
    elapsed: Option<Duration>,
    log: Option<EventLog>,
    /// Whether to build the per-node report (not for a plain `run`).
    report: bool,
}

impl Finished {
    /// Whether the run succeeded: it was not cancelled, no failure reached the end of the graph
    /// (every node without successors completed or was skipped), and every failure was caught
    /// by a `Conditional`.
    pub fn succeeded(&self) -> bool {
        self.cancelled.is_none() && self.verdict.succeeded
    }

    /// Finishes the run: on success evaluates `output` (the workflow's output expression), on
    /// failure returns the [`WorkflowError`]. Either way the [`Report`] comes with it.
    pub fn output<T>(self, output: impl FnOnce() -> Result<T, NodeFailure>) -> Outcome<T> {
        let succeeded = self.succeeded();
        let Finished {
            graph,
            statuses,
            mut errors,
            verdict,
            mut extras,
            cancelled,
            run,
            elapsed,
            log,
            report: wants_report,
        } = self;
        let attempts = |id: usize, status: NodeStatus| attempts_of(&extras.attempts, id, status);
        let report = Report::new(ReportParts {
            graph,
            run,
            succeeded,
            elapsed,
            log,
            nodes: graph
                .nodes
                .iter()
                .zip(&statuses)
                .take(if wants_report { usize::MAX } else { 0 })
                .enumerate()
                .map(|(id, (node, &status))| NodeReport {
                    name: node.name,
                    operation: extras
                        .operations
                        .get(id)
                        .copied()
                        .flatten()
                        .map(|spec| spec.name),
                    status,
                    attempts: if node.kind == NodeKind::Decision {
                        u32::from(status == NodeStatus::Completed || status == NodeStatus::Failed)
                    } else {
                        attempts(id, status)
                    },
                    failed_attempts: extras
                        .failed_attempts
                        .get_mut(id)
                        .map(std::mem::take)
                        .unwrap_or_default(),
                    error: extras
                        .rendered
                        .get_mut(id)
                        .and_then(Option::take)
                        .or_else(|| errors.get(id).and_then(Option::as_ref).map(render)),
                    started: None,
                    ended: None,
                })
                .collect(),
        });
        let result = if succeeded {
            output().map_err(|failure| WorkflowError::new(graph.name, vec![failure], None))
        } else {
            let failures = errors
                .iter_mut()
                .enumerate()
                .filter(|(id, _)| verdict.listed.get(*id).copied().unwrap_or(false))
                .filter_map(|(id, error)| {
                    error.take().map(|error| NodeFailure {
                        node: graph.nodes[id].name,
                        attempts: attempts(id, statuses[id]),
                        error,
                    })
                })
                .collect();
            Err(WorkflowError::new(graph.name, failures, cancelled))
        };
        Outcome { result, report }
    }
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
