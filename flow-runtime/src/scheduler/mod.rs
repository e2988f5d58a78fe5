//! The scheduler: one generic loop, compiled once, that drives any generated node set.
//!
//! It keeps one small record per node (status, count of unsettled predecessors, pending fate),
//! a queue of ready nodes and a list of running ones. When a node settles, it walks the node's
//! constant successor list from the [`Plan`] and decrements each successor's counter; a
//! successor whose counter reaches zero has its fate decided at once: aborted if an uncaught
//! failure reached it, skipped if its data came from a skipped node, ready otherwise. Nothing is
//! hashed, locked or traversed.
//!
//! The scheduler's methods are split by job: this module holds its state, the run loop and the
//! end of a run; [`attempt`] starts, polls, times and retries operations; [`settle`] records a
//! node's end and decides what it makes ready, skipped or aborted.

mod attempt;
mod compensate;
mod gate;
mod hook;
mod rules;
mod settle;
mod setup;

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Sleep;

use crate::events::EventSink;
use crate::events::{Event, EventKind, EventLog, Observer, RunId};
use crate::exclusion::{Groups, Seat};
use crate::graph::{Graph, NestInfo, NodeKind, Plan};
use crate::nest_ctx::{NestCtx, NestShared, Pool};
use crate::nodes::{Leaves, Nodes, Table};
use crate::panic::deadline_timer;
use crate::path::NodePath;
use crate::policy::{CancelReason, FailurePolicy, NodePolicy};
use crate::report::HookEnd;
use crate::report::NestReport;
use crate::run_state::RunState;
use crate::status::NodeStatus;
use crate::verdict::{Extras, Finished, Verdict, attempts_of};
use crate::wake::WakeSet;

#[cfg(feature = "durable")]
pub(crate) use compensate::AttemptScope;
#[cfg_attr(not(feature = "durable"), allow(unused_imports))]
pub(crate) use hook::{Before, Hook, HookFuture, Run, RunEnd, Scope, Steps};
pub use setup::{RunSetup, with_mailbox};

const NO_CAUSE: u32 = u32::MAX;

/// In `Scheduler::catchable`: nothing can catch the failure or must run after it.
const NOT_CATCHABLE: u8 = 0;
/// In `Scheduler::catchable`: a `Conditional` test may catch the failure.
const BY_TEST: u8 = 1;
/// In `Scheduler::catchable`: a step with a trigger rule must run after the failure.
const BY_RULE: u8 = 2;

/// The scope of a withdrawal that takes every node that has not ended (`Terminate`).
pub(crate) const ALL_NODES: u32 = u32::MAX;

/// Up to this many operations in flight, the scheduler polls them with the run's own waker
/// (and all of them on each wake-up); above it, each with its own (`wake.rs`). `join_all`
/// makes the same switch at 30.
const SHARED_WAKER_LIMIT: usize = 16;

/// The lists a finished run's scheduler leaves behind, kept to be reused by the next run
/// that takes them from the same [`Pool`] (a nest node's instances: design §4.4, one set per
/// place in flight), so that after the first instances an instance's scheduler allocates
/// nothing. Its box goes back and forth with it.
#[derive(Default)]
struct StateBuffers {
    nodes: Vec<NodeState>,
    ready: Vec<u32>,
    due: Vec<u32>,
    shared: Vec<u32>,
}

/// One node's record during a run: where it stands, what reached it, and (while it runs) its
/// attempt. Plain data in one array, so a node's start, polls and end touch one record.
#[derive(Clone, Copy)]
struct NodeState {
    status: NodeStatus,
    /// A decision, or a `Cancel` or `Terminate` step (else an operation): a node that acts
    /// the moment it starts. Kept here, beside the status that starting a node writes, rather
    /// than looked up in the graph's node list.
    decision: bool,
    /// A data predecessor was skipped.
    skip: bool,
    /// The node's next poll listens for an `#[operation]`'s defaults: the attempt's first
    /// poll, and each poll of a step that has not reached its operation yet (`Deferred`).
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
    /// What a node with a trigger rule that completed after a failure reached it passes on:
    /// the failure (its cause), as an aborted node would. Never given to `mark`.
    Carried(u32),
    /// Withdrawn by the node it names (a gate that fired, a `Cancel`, a `Terminate`).
    Withdrawn(u32),
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

/// The event log of a run being recorded, and the observers to tell.
struct Recording {
    run: RunId,
    start: tokio::time::Instant,
    seq: u64,
    log: Option<EventLog>,
    observers: Vec<Arc<dyn Observer>>,
    /// The run is a nest instance whose events go to the root's sink, a root whose nest
    /// instances send theirs to its sink, or a hooked run (its events go to its hook):
    /// each event takes [`Scheduler::emit_nested`].
    nested: bool,
    /// A nest instance: the root's sink, where a copy of each event goes with `path`.
    forward: Option<Arc<EventSink>>,
    path: Option<NodePath>,
    /// A root with nest nodes: the sink its instances' events wait in, and a buffer to drain
    /// it into.
    sink: Option<Arc<EventSink>>,
    drained: Vec<Event>,
}

impl Recording {
    /// Sequences the events the root's nest instances sent since the last drain: appends
    /// them to the log and tells the observers (and the run's hook), in the order they
    /// happened.
    fn drain(&mut self, mut hook: Option<&mut Box<dyn Hook>>) {
        let Some(sink) = &self.sink else {
            return;
        };
        let mut events = std::mem::take(&mut self.drained);
        sink.take(&mut events);
        for mut event in events.drain(..) {
            event.seq = self.seq;
            self.seq += 1;
            if let Some(hook) = hook.as_deref_mut() {
                hook.record(&event);
            }
            for observer in &self.observers {
                observer.on_event(&event);
            }
            if let Some(log) = &mut self.log {
                log.push(event);
            }
        }
        self.drained = events;
    }
}

/// What a run with nest nodes gives each of them when it starts (see [`NestCtx`]).
struct NestHome {
    /// The run's own path, when it is an instance of a nest.
    path: Option<NodePath>,
    signals: Option<Arc<crate::signal::Mailbox>>,
    /// Where the instances' events go: the root's sink (this run's own, at the root).
    sink: Option<Arc<EventSink>>,
    /// What each nest node (by its place in `Control::nests`) shares with its driver, once
    /// it started.
    shared: Vec<Option<Arc<NestShared>>>,
    /// Nest nodes that completed with their driver still running (`min` with `rest = run`):
    /// polled on every wake-up until they end; the run ends after them.
    lingering: Vec<u32>,
    /// The exclusion groups of the run tree, handed to every instance.
    groups: Option<Groups>,
}

impl Recording {
    /// The recording of a run with `options`: a nest instance's events go to the root's
    /// sink too, with the root's run id; a root with nest nodes makes the sink.
    fn new(plan: &Plan, setup: &RunSetup) -> Box<Recording> {
        let mut log = setup.options.record.then(EventLog::new);
        if let Some(log) = &mut log {
            log.reserve(2 * plan.pred_count.len() + 2);
        }
        let start = tokio::time::Instant::now();
        let forward = setup.sink.clone();
        let run = forward.as_ref().map_or_else(RunId::next, |sink| sink.run);
        let sink = (forward.is_none() && !plan.control.nests.is_empty())
            .then(|| Arc::new(EventSink::new(run, start)));
        Box::new(Recording {
            run,
            start,
            seq: 0,
            log,
            observers: setup.options.observers.clone(),
            nested: forward.is_some() || sink.is_some(),
            path: forward.as_ref().and(setup.path.clone()),
            forward,
            sink,
            drained: Vec::new(),
        })
    }
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

/// An arm of a gate during a run.
#[derive(Clone, Copy)]
struct ArmState {
    /// Exits not yet settled.
    remaining: u32,
    /// The first failure that reached an exit, or `NO_CAUSE`.
    cause: u32,
    /// The node that withdrew an exit, or `NO_CAUSE`.
    withdrawn: u32,
}

/// Where a gate stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fired {
    No,
    Ok,
    Failed,
}

/// A gate during a run (its winners are in `RunState::winners`, for its node's leaf).
#[derive(Clone, Copy)]
struct GateState {
    /// Arms that failed.
    failed: u32,
    /// Arms withdrawn from outside (a `Cancel`): neither a win nor a failure.
    lost: u32,
    /// The first arm failure, or `NO_CAUSE`.
    cause: u32,
    fired: Fired,
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
    /// For `FailFast`: whether a test could catch a failure of each node, or a step with a
    /// trigger rule must run after it (flags, computed on demand).
    catchable: Vec<u8>,
    halt: Option<Halt>,
    /// Something must happen before any node is started or polled again: a halt, or a
    /// withdrawal in `withdrawals`. One test in the loops, so a plain run pays nothing more.
    interrupt: bool,
    /// Queued withdrawals: (scope, an index into `Control::scopes` or [`ALL_NODES`]; cause).
    withdrawals: Vec<(u32, u32)>,
    /// Some node was withdrawn.
    withdrawn_any: bool,
    /// The gates and their arms (`Control::gates`, `Control::arms`): empty without gates.
    gates: Vec<GateState>,
    arms: Vec<ArmState>,
    cancelled: Option<CancelReason>,
    seed: u64,
    /// `None` when nobody wants events: then none are built.
    recording: Option<Box<Recording>>,
    /// The branch the decision being settled took.
    decided: Option<bool>,
    /// Whether the caller wants the per-node report.
    report: bool,
    /// A `Terminate` step ended the run: it succeeds, whatever failed before.
    terminated: bool,
    /// What the run's nest nodes share with their instances: `None` without nest nodes.
    nest_home: Option<Box<NestHome>>,
    /// Every settle takes `mark_more`, not only failures: events are recorded, or a trigger
    /// rule or a critical section must see completions. Set once, in `Scheduler::new`.
    mark_more_always: bool,
    /// Critical sections: members of each section not yet settled (empty without sections).
    section_left: Vec<u32>,
    /// Critical sections: the section holding each exclusion group, or `NO_CAUSE` when free.
    group_holder: Vec<u32>,
    /// A group was freed since [`Scheduler::start_ready`] last looked.
    section_freed: bool,
    /// Critical sections in a run tree with nests: the run's place in the tree's exclusion
    /// groups (`exclusion.rs`), where its sections hold their groups by name too.
    seat: Option<Box<Seat>>,
    /// Starting an attempt is making its future and nothing else: no step has a policy, no
    /// `#[operation]`'s defaults were heard, nobody records events and no subscriber can want
    /// a span. Cleared when an operation is heard.
    lean: bool,
    /// Where the run's lists go back when it finishes (a nest instance's run), and the box
    /// they go back in (the one they came in, once there is one).
    pool: Option<(Arc<Pool>, Option<Box<StateBuffers>>)>,
    /// What watches and steers the run from outside the engine (`hook.rs`): `None` for a
    /// plain run.
    hook: Option<Box<dyn Hook>>,
    /// A plain run made inside a durable step's attempt: the keys its steps' attempts get
    /// (`attempt::KeyScope`); every node is then polled the long way, inside its context.
    #[cfg(feature = "durable")]
    keys: Option<Box<crate::attempt::KeyScope>>,
}

impl Scheduler {
    #[cfg(test)]
    fn new(graph: &'static Graph, setup: &RunSetup) -> Self {
        Scheduler::hooked_by(graph, setup, None)
    }

    /// The scheduler of a run of `graph` from `setup`, and `hook` if it has one.
    fn hooked_by(graph: &'static Graph, setup: &RunSetup, hook: Option<Box<dyn Hook>>) -> Self {
        // A plain run inside a durable step's attempt: its steps get keys of their own. (A
        // hooked run's hook gives its nodes theirs.)
        #[cfg(feature = "durable")]
        let keys = match (&hook, setup.instance) {
            (Some(_), _) => None,
            (None, true) => setup.keys.clone().map(Box::new),
            (None, false) => crate::attempt::KeyScope::inside_attempt().map(Box::new),
        };
        let options = &setup.options;
        let plan = &graph.plan;
        let node_state = |&count| NodeState {
            status: NodeStatus::Idle,
            decision: false,
            skip: false,
            fresh: false,
            remaining: count,
            abort_cause: NO_CAUSE,
            attempt: 0,
        };
        // A nest instance reuses the lists of an instance that finished (cleared, not freed).
        let mut reused = setup.pool.as_deref().and_then(Pool::take::<StateBuffers>);
        let taken = reused.as_deref_mut().map(std::mem::take);
        let (mut nodes, ready, due, shared) = match taken {
            None => (
                plan.pred_count.iter().map(node_state).collect(),
                // Room for the usual widths up front: growing these lists showed in profiles.
                Vec::with_capacity(plan.roots.len().max(plan.pred_count.len().min(64))),
                Vec::with_capacity(plan.pred_count.len().min(64)),
                Vec::with_capacity(SHARED_WAKER_LIMIT),
            ),
            Some(mut reused) => {
                reused.nodes.clear();
                reused.nodes.extend(plan.pred_count.iter().map(node_state));
                reused.ready.clear();
                reused.due.clear();
                reused.shared.clear();
                (reused.nodes, reused.ready, reused.due, reused.shared)
            }
        };
        // A workflow without decisions, gates, `Cancel` or `Terminate` steps has no branch
        // lists, gates or instants, and its node list need not be read. A gate's node and an
        // instant node are started like a decision: at once, without a limit.
        if !plan.then_nodes.is_empty()
            || !plan.control.gates.is_empty()
            || !plan.control.instants.is_empty()
        {
            for (state, info) in nodes.iter_mut().zip(graph.nodes) {
                state.decision = matches!(
                    info.kind,
                    NodeKind::Decision | NodeKind::Gate | NodeKind::Cancel | NodeKind::Terminate
                );
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
            state: RunState {
                errors: Vec::new(),
                winners: Vec::new(),
                old: Vec::new(),
            },
            ready,
            watches: Vec::new(),
            in_flight: 0,
            due,
            shared,
            group_running: vec![0; plan.group_limits.len()],
            limit,
            limited: limit != usize::MAX
                || !plan.group_limits.is_empty()
                || !plan.control.sections.is_empty(),
            settled: 0,
            failures: 0,
            work: Vec::new(),
            catches: Vec::new(),
            caught: Vec::new(),
            extras: Extras::default(),
            policy: options.failure.unwrap_or(plan.failure),
            catchable: Vec::new(),
            halt: None,
            interrupt: false,
            withdrawals: Vec::new(),
            withdrawn_any: false,
            gates: Vec::new(),
            arms: Vec::new(),
            cancelled: None,
            seed: 0,
            recording: (options.record
                || !options.observers.is_empty()
                || setup.sink.is_some()
                || hook.is_some())
            .then(|| Recording::new(plan, setup)),
            decided: None,
            nest_home: None,
            report: options.report,
            terminated: false,
            lean: false,
            mark_more_always: false,
            section_left: Vec::new(),
            group_holder: Vec::new(),
            section_freed: false,
            seat: None,
            pool: setup.pool.clone().map(|pool| (pool, reused)),
            hook,
            #[cfg(feature = "durable")]
            keys,
        };
        if let Some(hook) = scheduler.hook.as_deref_mut() {
            hook.attach(graph);
            scheduler.state.old = hook.old_paths();
            if let Some(recording) = scheduler.recording.as_deref_mut() {
                // The hook takes every event, on `emit`'s out-of-line path.
                recording.nested = true;
            }
        }
        // A run tree with nests shares its exclusion groups: the root makes them, each
        // instance is handed them.
        let groups = match &setup.groups {
            _ if plan.control.sections.is_empty() && plan.control.nests.is_empty() => None,
            Some(groups) => Some(groups.clone()),
            None => (!plan.control.nests.is_empty()).then(Groups::default),
        };
        if !plan.control.sections.is_empty()
            && let Some(groups) = &groups
        {
            scheduler.seat = Some(Seat::new(groups));
        }
        if !plan.control.nests.is_empty() {
            scheduler.nest_home = Some(Box::new(NestHome {
                path: setup.path.clone(),
                signals: options.signals.clone(),
                sink: setup.sink.clone().or_else(|| {
                    let recording = scheduler.recording.as_deref()?;
                    Some(Arc::clone(recording.sink.as_ref()?))
                }),
                shared: vec![None; plan.control.nests.len()],
                lingering: Vec::new(),
                groups,
            }));
        }
        // A nest node that completes may linger (`Scheduler::linger`).
        scheduler.mark_more_always = scheduler.recording.is_some()
            || !plan.control.nests.is_empty()
            || !plan.control.rules.is_empty()
            || !plan.control.sections.is_empty();
        if !plan.control.rules.is_empty() || !plan.control.sections.is_empty() {
            scheduler.prepare_control();
        }
        if !plan.control.gates.is_empty() {
            scheduler.init_gates();
        }
        // A nest node gets its context when it starts, on the long way.
        // A hooked run records, so it is never lean.
        scheduler.lean = plan.policies.is_empty()
            && scheduler.recording.is_none()
            && plan.control.nests.is_empty()
            && !spans()
            && !scheduler.keyed();
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
        if recording.nested {
            return self.emit_nested(node, attempt, kind);
        }
        let event = Event {
            run: recording.run,
            seq: recording.seq,
            node,
            node_name: node.map(|n| self.graph.nodes[n as usize].name),
            attempt,
            at: recording.start.elapsed(),
            kind: kind(),
            path: None,
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

    /// [`Scheduler::emit`] in a run with nests, or a hooked run: a root first sequences the events its
    /// instances sent (they happened before this one); an instance sends a copy of its event,
    /// with its path and on the root's clock, to the root's sink.
    #[cold]
    #[inline(never)]
    fn emit_nested(&mut self, node: Option<u32>, attempt: u32, kind: impl FnOnce() -> EventKind) {
        let Some(recording) = self.recording.as_deref_mut() else {
            return;
        };
        recording.drain(self.hook.as_mut());
        let now = tokio::time::Instant::now();
        let event = Event {
            run: recording.run,
            seq: recording.seq,
            node,
            node_name: node.map(|n| self.graph.nodes[n as usize].name),
            attempt,
            at: now.saturating_duration_since(recording.start),
            kind: kind(),
            path: None,
        };
        recording.seq += 1;
        #[cfg(feature = "tracing")]
        trace_event(self.graph, &event);
        if let Some(hook) = &mut self.hook {
            hook.record(&event);
        }
        if let Some(sink) = &recording.forward {
            sink.push(Event {
                at: now.saturating_duration_since(sink.start),
                path: recording.path.clone(),
                ..event.clone()
            });
        }
        for observer in &recording.observers {
            observer.on_event(&event);
        }
        if let Some(log) = &mut recording.log {
            log.push(event);
        }
    }

    /// Sequences the events the run's nest instances sent since the last drain (a root's).
    fn drain_nested(&mut self) {
        if let Some(recording) = self.recording.as_deref_mut() {
            recording.drain(self.hook.as_mut());
        }
    }

    /// The context of nest node `nest`, for its driver.
    fn nest_ctx(&mut self, nest: &'static NestInfo) -> NestCtx {
        let node = self.graph.nodes[nest.node as usize].name;
        let report = self.report;
        let Some(home) = self.nest_home.as_deref_mut() else {
            return NestCtx::detached(node, nest.kind, nest.body);
        };
        let place = self
            .graph
            .plan
            .control
            .nests
            .binary_search_by_key(&nest.node, |n| n.node)
            .unwrap_or(0);
        let shared = home.shared[place]
            .get_or_insert_with(|| Arc::new(NestShared::new(node, nest.kind)))
            .clone();
        NestCtx {
            node,
            index: nest.node,
            kind: nest.kind,
            body: nest.body,
            path: home.path.clone(),
            signals: home.signals.clone(),
            report,
            sink: home.sink.clone(),
            shared,
            pool: Arc::default(),
            groups: home.groups.as_ref().map(|groups| {
                let sections = self
                    .graph
                    .plan
                    .control
                    .node_sections
                    .get(nest.node as usize)
                    .copied()
                    .unwrap_or_default();
                groups.within(self.seat.as_deref(), sections)
            }),
        }
    }

    /// What a `Complete(node)` step does to the nest node `node`: asks its driver to end (it
    /// sees [`NestCtx::completing`] and is woken). Returns whether `node` is a nest node that
    /// has started. The `Instant::Complete` arm of `settle.rs` calls it.
    pub(super) fn complete_nest(&mut self, node: u32) -> bool {
        let Some(home) = self.nest_home.as_deref() else {
            return false;
        };
        let nests = self.graph.plan.control.nests;
        let Ok(place) = nests.binary_search_by_key(&node, |n| n.node) else {
            return false;
        };
        match &home.shared[place] {
            Some(shared) => {
                shared.complete();
                true
            }
            None => false,
        }
    }

    /// Nest node `node` has completed: if its driver still runs (`min` with `rest = run`), it
    /// lingers, and the run does not end before it has.
    pub(super) fn linger(&mut self, node: u32) {
        let Some(home) = self.nest_home.as_deref_mut() else {
            return;
        };
        let nests = self.graph.plan.control.nests;
        let Ok(place) = nests.binary_search_by_key(&node, |n| n.node) else {
            return;
        };
        if home.shared[place].as_ref().is_some_and(|s| s.lingering()) {
            home.lingering.push(node);
            // Counted settled again when its driver ends.
            self.settled -= 1;
        }
    }

    /// Polls the lingering nest nodes' drivers; those that ended are settled for good.
    #[cold]
    #[inline(never)]
    fn poll_lingering(&mut self, leaves: &mut Leaves<'_>, cx: &Context<'_>) {
        let graph = self.graph;
        let nodes = &self.nodes;
        #[cfg(feature = "durable")]
        let keys = self.keys.as_deref();
        #[cfg(feature = "durable")]
        let hook = self.hook.as_deref();
        let Some(home) = self.nest_home.as_deref_mut() else {
            return;
        };
        let before = home.lingering.len();
        home.lingering.retain(|&node| {
            let leaf = &mut leaves[node as usize];
            let mut cx = Context::from_waker(cx.waker());
            let mut poll = || {
                // A panic in the driver ends it: its instances' panics are theirs already.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    leaf.as_mut().poll_rest(&mut cx)
                }))
            };
            #[cfg(feature = "durable")]
            {
                // A plain run inside a durable step, or a durable run: its keys.
                let name = graph.nodes[node as usize].name;
                let attempt = nodes[node as usize].attempt;
                let ctx = match keys {
                    Some(keys) => Some(keys.ctx(name, attempt)),
                    None => hook.and_then(|hook| hook.lingering_ctx(name, attempt)),
                };
                if let Some(ctx) = ctx {
                    let (polled, _) = crate::attempt::with_attempt(ctx, poll);
                    return polled.is_ok_and(|poll| poll.is_pending());
                }
            }
            let _ = (graph, nodes);
            poll().is_ok_and(|poll| poll.is_pending())
        });
        self.settled += before - home.lingering.len();
    }

    /// Drops the lingering drivers of the nodes in `scope` ([`ALL_NODES`] for all): a halt,
    /// a `Terminate`, a withdrawal of a region holding them.
    #[cold]
    #[inline(never)]
    pub(super) fn drop_lingering(&mut self, leaves: &mut Leaves<'_>, scope: u32) {
        let Some(home) = self.nest_home.as_deref_mut() else {
            return;
        };
        let before = home.lingering.len();
        let scopes = self.graph.plan.control.scopes;
        home.lingering.retain(|&node| {
            if scope != ALL_NODES && !scopes[scope as usize].contains(&node) {
                return true;
            }
            leaves[node as usize].as_mut().stop();
            false
        });
        self.settled += before - home.lingering.len();
    }

    /// The attempt number to stamp on a node's terminal event.
    #[inline]
    fn attempt_of(&self, node: u32) -> u32 {
        attempts_of(
            &self.extras.attempts,
            node as usize,
            self.nodes[node as usize].status,
        )
    }

    #[inline]
    fn plan(&self) -> &'static Plan {
        &self.graph.plan
    }

    #[inline]
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

    /// Whether the run's steps get keys of their own (a plain run inside a durable step).
    #[inline]
    fn keyed(&self) -> bool {
        #[cfg(feature = "durable")]
        return self.keys.is_some();
        #[cfg(not(feature = "durable"))]
        false
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
        if let Some(home) = &self.nest_home
            && !home.lingering.is_empty()
        {
            self.poll_lingering(leaves, cx);
        }
        loop {
            self.start_ready(leaves);
            if self.interrupt {
                if self.interrupted(leaves) {
                    return Poll::Ready(());
                }
                // Withdrawals applied: start what is ready now.
                continue;
            }
            if self.due.is_empty() {
                return if self.settled == self.len() {
                    Poll::Ready(())
                } else {
                    self.wait_for_groups(cx);
                    Poll::Pending
                };
            }
            self.poll_due(leaves, wakes, cx);
            if self.interrupt {
                if self.interrupted(leaves) {
                    return Poll::Ready(());
                }
                // Withdrawals applied: start what is ready, poll what is left.
                continue;
            }
            if self.settled == self.len() {
                return Poll::Ready(());
            }
            if self.ready.is_empty() {
                // `poll_due` left `due` empty, and nothing new is ready: nothing more can
                // happen in this wake-up (a node woken meanwhile has woken the run).
                self.wait_for_groups(cx);
                return Poll::Pending;
            }
        }
    }

    /// The cold branch of the `interrupt` test: with a halt, stops the run and returns `true`;
    /// otherwise applies the queued withdrawals and returns whether that halted the run.
    #[cold]
    #[inline(never)]
    fn interrupted(&mut self, leaves: &mut Leaves<'_>) -> bool {
        if self.halt.is_none() {
            self.apply_withdrawals(leaves);
            if self.halt.is_none() {
                return false;
            }
        }
        self.stop_all(leaves);
        true
    }

    /// Whether the run's cancel token and deadline count: always, unless its hook holds them
    /// off.
    #[inline]
    fn live(&self) -> bool {
        self.hook.as_deref().is_none_or(Hook::live)
    }

    /// What is left of the run's deadline `full` (its hook may have started it earlier).
    fn deadline_left(&self, full: std::time::Duration) -> std::time::Duration {
        match &self.hook {
            Some(hook) => hook.deadline_left(full),
            None => full,
        }
    }

    /// Ends the run early: the halt is applied before anything else is started or polled.
    pub(super) fn set_halt(&mut self, halt: Halt) {
        self.halt = Some(halt);
        self.interrupt = true;
    }

    fn finish(mut self) -> Finished {
        let (statuses, verdict, _) = self.conclude();
        self.into_finished(statuses, verdict)
    }

    /// Judges the run and emits `RunFinished`: the final statuses (when they are needed), the
    /// verdict, and whether the run succeeded.
    fn conclude(&mut self) -> (Vec<NodeStatus>, Verdict, bool) {
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
        if let Some((pool, set)) = self.pool.take() {
            let mut set = set.unwrap_or_default();
            *set = StateBuffers {
                nodes: std::mem::take(&mut self.nodes),
                ready: std::mem::take(&mut self.ready),
                due: std::mem::take(&mut self.due),
                shared: std::mem::take(&mut self.shared),
            };
            pool.give(set);
        }
        let succeeded = self.cancelled.is_none() && (self.terminated || verdict.succeeded);
        self.emit(None, 0, || EventKind::RunFinished { succeeded });
        (statuses, verdict, succeeded)
    }

    /// The end of [`Scheduler::finish`], once `RunFinished` is emitted.
    fn into_finished(mut self, statuses: Vec<NodeStatus>, verdict: Verdict) -> Finished {
        let recording = self.recording.take();
        let nests = self.nest_home.take().map_or_else(Vec::new, |home| {
            home.shared
                .into_iter()
                .flatten()
                .map(|shared| shared.take_report())
                .collect::<Vec<NestReport>>()
        });
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
            terminated: self.terminated,
            nests,
            compensations: Vec::new(),
            hook: HookEnd::default(),
        }
    }

    /// Ends a hooked run: judges it, emits `RunFinished`, and hands the hook the run's end;
    /// the run ends once the hook's last work has.
    async fn finish_hooked(mut self) -> Finished {
        let (statuses, verdict, succeeded) = self.conclude();
        let end = if self.cancelled.is_some() {
            RunEnd::Cancelled
        } else if succeeded {
            RunEnd::Succeeded
        } else {
            RunEnd::Failed
        };
        let handed = match self.hook.take() {
            Some(hook) => hook.finish(end).await,
            None => HookEnd::default(),
        };
        let mut finished = self.into_finished(statuses, verdict);
        finished.hook = handed;
        finished
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
pub(crate) fn spans() -> bool {
    #[cfg(feature = "tracing")]
    {
        tracing::level_enabled!(tracing::Level::INFO)
    }
    #[cfg(not(feature = "tracing"))]
    {
        false
    }
}

/// Runs the pinned node set `nodes` to the end: the body of [`execute_nodes`] (a pinned
/// reference into its future) and [`execute_in_arena`] (a pinned box), which differ only in
/// where the set lives.
pub(crate) async fn run_nodes<P, N>(
    graph: &'static Graph,
    mut setup: RunSetup,
    mut nodes: Pin<P>,
) -> Finished
where
    P: std::ops::DerefMut<Target = N>,
    N: Nodes,
{
    let mut table = Table::new(nodes.as_mut());
    debug_assert_eq!(table.len(), graph.nodes.len() + setup.compensations.len());
    // Once the run has ended, or its future is dropped, signals are refused. Declared after
    // the table, so dropped before it: the steps' waits are dropped first. Only the run at the
    // top closes it: a nest's instances share it with that run, which goes on after them.
    let _mailbox = match setup.instance {
        false => setup.options.signals.clone().map(FinishOnDrop),
        true => None,
    };
    let hook = setup.hook.take();
    let mut scheduler = Scheduler::hooked_by(graph, &setup, hook);
    let options = &setup.options;
    if scheduler
        .hook
        .as_deref()
        .is_some_and(|hook| hook.steps().alone())
    {
        // The hook drives the node set itself: no run loop.
        // Moved in as `&mut`: a shared borrow held across the await would ask `Sync`.
        let (run, nodes) = (&mut scheduler, &mut table);
        std::future::poll_fn(move |cx| {
            run.hooked(
                nodes.leaves(),
                None,
                None,
                |steps, run| steps.poll_alone(run, cx),
                Poll::Ready(()),
            )
        })
        .await;
        scheduler.stop_all(table.leaves());
        return Box::pin(scheduler.finish_hooked()).await;
    }
    // The nodes' own wakers, made when the first node needs one.
    let mut wakes = None;
    let mut deadline = match options
        .deadline
        .map(|after| scheduler.deadline_left(after))
        .map(deadline_timer)
        .transpose()
    {
        Ok(deadline) => deadline,
        Err(reason) => {
            scheduler.set_halt(Halt::Cancelled(reason));
            scheduler.stop_all(table.leaves());
            if let Some(hook) = scheduler.hook.as_deref_mut() {
                // A durable run stops without writing anything: it can be resumed where a
                // timer can be made.
                hook.no_timer();
                return Box::pin(scheduler.finish_hooked()).await;
            }
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
    if let (Some(hook), Some(deadline), Some(after)) =
        (scheduler.hook.as_deref_mut(), &deadline, options.deadline)
    {
        hook.deadline_set(deadline.deadline(), after);
    }
    let drains = scheduler
        .recording
        .as_ref()
        .is_some_and(|r| r.sink.is_some());
    let mut halted = |cx: &mut Context<'_>| {
        if cancelled.as_mut().poll(cx).is_ready() {
            Some(CancelReason::Token)
        } else if deadline
            .as_mut()
            .is_some_and(|d| d.as_mut().poll(cx).is_ready())
        {
            options.deadline.map(CancelReason::Deadline)
        } else {
            None
        }
    };
    std::future::poll_fn(|cx| {
        let leaves = table.leaves();
        // A hooked run's deadline and token count once its hook says so.
        if watched
            && scheduler.live()
            && let Some(reason) = halted(cx)
        {
            scheduler.set_halt(Halt::Cancelled(reason));
            scheduler.stop_all(leaves);
            return Poll::Ready(());
        }
        let poll = scheduler.poll(leaves, &mut wakes, cx);
        if drains {
            // The instances' events of this wake-up reach the log and the observers now.
            scheduler.drain_nested();
        }
        if scheduler.hook.is_some() {
            let poll = scheduler.hooked(
                leaves,
                Some(&mut wakes),
                None,
                |steps, run| steps.after_poll(run, cx, poll),
                poll,
            );
            // A deadline that passed while the hook held it off ends the run once it counts.
            if poll.is_pending()
                && watched
                && scheduler.live()
                && let Some(reason) = halted(cx)
            {
                scheduler.set_halt(Halt::Cancelled(reason));
                scheduler.stop_all(leaves);
                return Poll::Ready(());
            }
            return poll;
        }
        poll
    })
    .await;
    // A failed run with compensations undoes its completed steps before it ends.
    let compensations = if setup.compensations.is_empty() {
        Vec::new()
    } else {
        Box::pin(compensate::compensate(
            &mut scheduler,
            &mut table,
            setup.compensations,
            setup.compensates,
        ))
        .await
    };
    if scheduler.hook.is_some() {
        // Boxed: inline, its state (a second scheduler, the hook's last work) would grow every
        // run's future, which tokio moves.
        return Box::pin(scheduler.finish_hooked())
            .await
            .compensated(compensations);
    }
    scheduler.finish().compensated(compensations)
}

/// Closes a run's mailbox when the run ends or its future is dropped.
struct FinishOnDrop(Arc<crate::signal::Mailbox>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[cfg(test)]
mod tests;
