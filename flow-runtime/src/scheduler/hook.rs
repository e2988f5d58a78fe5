//! The one seam between the scheduler and a feature that watches and steers a run from
//! outside the engine: a [`Hook`], handed to the run beside its options.
//!
//! A plain run has no hook, and none of this is on its path: the scheduler tests
//! `Scheduler::hook` only where a plain run already takes a slow branch (an attempt started
//! or polled the long way, an event built for a recording, the end of the run). A hooked run
//! is never lean.
//!
//! The scheduler calls a hook at these points, and nowhere else:
//!
//! - every event the run emits goes to [`Hook::record`], in order;
//! - a node's attempt that is about to start goes to [`Steps::request`] instead: the hook may
//!   hold it (the node runs, with no future) and start it later through [`Run::start_held`];
//!   while [`Hook::holds`] a node, the scheduler does not poll it;
//! - each poll of a started attempt goes through [`Steps::poll`], which calls
//!   [`Run::poll_attempt`] inside whatever context the hook sets;
//! - after each poll of the run, [`Steps::after_poll`] may act on the run (settle nodes, start
//!   held ones, poll the run again) before the run's future returns;
//! - [`Hook::live`] says whether the run's cancel token and deadline count yet;
//! - a compensation phase asks the hook before each attempt ([`Hook::before_compensation`])
//!   and lets it work while the phase waits ([`Hook::tend`]);
//! - at the end, [`Hook::finish`] takes the hook with the run's [`RunEnd`] and returns what
//!   the code that attached it reads back from the run's report ([`HookEnd`]).
//!
//! [`Run`] is what a hook may do to a run: read statuses and attempts, emit events, settle,
//! fail, start or stop nodes, set their timers, halt the run, poll it again.

// The hooks of this crate are a durable run's journal and a worker's task (feature `durable`):
// without it, nothing attaches one.
#![cfg_attr(not(feature = "durable"), allow(dead_code))]

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

use super::attempt::PollResult;
use super::{Halt, Scheduler, Settle};
use crate::error::NodeError;
use crate::events::EventKind;
use crate::graph::Graph;
use crate::nodes::{Leaf, Leaves};
use crate::policy::{CancelReason, NodePolicy};
use crate::report::HookEnd;
use crate::scope::OperationSpec;
use crate::status::NodeStatus;
use crate::wake::WakeSet;

/// A boxed future a hook returns to the scheduler.
pub(crate) type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What watches and steers one run: its data and the calls that need no access to the run.
/// The calls that act on the run are its [`Steps`].
pub(crate) trait Hook: Any + Send {
    /// The run starts with `graph`.
    fn attach(&mut self, graph: &'static Graph);

    /// Takes an event the run emitted (every one, in order).
    fn record(&mut self, event: &crate::events::Event);

    /// Whether the run's cancel token and deadline count yet.
    fn live(&self) -> bool {
        true
    }

    /// What is left of the run's deadline `full` when the run starts.
    fn deadline_left(&self, full: Duration) -> Duration {
        full
    }

    /// The run's deadline timer: when it passes, and the deadline.
    fn deadline_set(&mut self, _at: tokio::time::Instant, _after: Duration) {}

    /// Whether running `node` has no attempt to poll: the hook holds it.
    fn holds(&self, _node: u32) -> bool {
        false
    }

    /// The run cannot make a timer it needs (no tokio time driver): it stops now.
    fn no_timer(&mut self) {}

    /// The version markers (`Patched`, by node) whose old path the run takes: those its
    /// graph did not have when a durable run started. Called once, after `attach`.
    fn old_paths(&self) -> Vec<u32> {
        Vec::new()
    }

    /// The attempts of `node` that do not count against its retries: those made before a
    /// redrive of a durable run, whose next attempt has the step's whole retry budget again.
    fn attempts_before(&self, _node: u32) -> u32 {
        0
    }

    /// The context to poll the lingering driver of nest node `name` in (`min` with `rest =
    /// run`: its instances run on after the node completed): the attempt `attempt` that
    /// completed it, so that its instances keep their keys and their ends are recorded.
    #[cfg(feature = "durable")]
    fn lingering_ctx(
        &self,
        _name: &'static str,
        _attempt: u32,
    ) -> Option<crate::attempt::AttemptCtx> {
        None
    }

    /// The calls that act on the run.
    fn steps(&self) -> &'static dyn Steps;

    /// The hook itself, for its steps (`Run::hook`).
    fn as_any(&mut self) -> &mut dyn Any;

    /// The compensation phase starts.
    fn compensating(&mut self) {}

    /// Before attempt `attempt` of the compensation of `node` (named `name`): whether it runs,
    /// and in what scope its polls are made. `child`: the attempt that completed `node`, when
    /// it is a `Workflow` step (its compensation undoes the child run that attempt started).
    fn before_compensation(
        &mut self,
        _node: u32,
        _name: &'static str,
        _attempt: u32,
        _child: Option<u32>,
    ) -> HookFuture<'_, Before> {
        Box::pin(std::future::ready(Before::Run(None)))
    }

    /// After a compensation's failed attempt, whose `CompensationRetrying` was just emitted:
    /// how long to wait before the next one (`delay` is the step's backoff). `None`: the
    /// phase stops.
    fn compensation_backoff(
        &mut self,
        _node: u32,
        delay: Duration,
    ) -> HookFuture<'_, Option<Duration>> {
        Box::pin(std::future::ready(Some(delay)))
    }

    /// The hook's own work while the run waits outside its loop (a compensation's attempt or
    /// backoff). Registers `cx`; `false` when the hook cannot go on: the run stops waiting.
    fn tend(&mut self, _cx: &mut Context<'_>) -> bool {
        true
    }

    /// The run has ended as `end` (its `RunFinished` was recorded): the hook's last work,
    /// and what it gives back to the code that attached it.
    fn finish(self: Box<Self>, end: RunEnd) -> HookFuture<'static, HookEnd>;
}

/// The calls of a [`Hook`] that act on the run (the hook is reached through [`Run::hook`]).
pub(crate) trait Steps: Sync {
    /// `node`'s attempt is about to start (`retry`: after a backoff). The hook starts it now
    /// (`Run::start_held`) or holds it.
    fn request(&self, run: &mut Run<'_, '_>, node: u32, retry: bool) -> Result<(), NodeError>;

    /// Polls `node`'s started attempt: `Run::poll_attempt` inside the hook's context.
    fn poll(
        &self,
        run: &mut Run<'_, '_>,
        node: u32,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>>;

    /// After each poll of the run (`poll` is its result): what happens before the run's future
    /// returns.
    fn after_poll(&self, run: &mut Run<'_, '_>, cx: &mut Context<'_>, poll: Poll<()>) -> Poll<()>;

    /// Whether the hook runs the node set itself, instead of the run loop
    /// ([`Steps::poll_alone`] until ready; nothing is settled).
    fn alone(&self) -> bool {
        false
    }

    /// Drives the node set in place of the run loop (see [`Steps::alone`]).
    fn poll_alone(&self, _run: &mut Run<'_, '_>, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Ready(())
    }
}

/// How a hooked run ended, as the scheduler judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    Succeeded,
    Failed,
    Cancelled,
}

/// What a hook says before a compensation's attempt.
pub(crate) enum Before {
    /// The hook cannot go on: the phase stops.
    Stop,
    /// The attempt ended before: this is its end (`Err`: its error's text); it does not run.
    Ended(Result<(), String>),
    /// It runs, its polls inside this scope, if any.
    Run(Option<Box<dyn Scope>>),
}

/// Where a hook puts the polls of an attempt it does not drive itself (a compensation's).
pub(crate) trait Scope: Send {
    /// Calls `f` inside the scope.
    fn within(&mut self, f: &mut dyn FnMut());
}

/// The run, as its hook may act on it.
pub(crate) struct Run<'r, 'l> {
    scheduler: &'r mut Scheduler,
    leaves: &'r mut Leaves<'l>,
    /// The nodes' wakers: only in [`Steps::after_poll`] (which may poll the run again).
    wakes: Option<&'r mut Option<Arc<WakeSet>>>,
    /// The result of a first poll already made, for [`Run::poll_attempt`].
    given: Option<(PollResult, Option<&'static OperationSpec>)>,
}

impl<'r, 'l> Run<'r, 'l> {
    pub(super) fn new(
        scheduler: &'r mut Scheduler,
        leaves: &'r mut Leaves<'l>,
        wakes: Option<&'r mut Option<Arc<WakeSet>>>,
    ) -> Self {
        Run {
            scheduler,
            leaves,
            wakes,
            given: None,
        }
    }

    pub(super) fn given(
        mut self,
        given: Option<(PollResult, Option<&'static OperationSpec>)>,
    ) -> Self {
        self.given = given;
        self
    }

    /// The hook, as its own type.
    pub(crate) fn hook<H: Hook>(&mut self) -> Option<&mut H> {
        self.scheduler
            .hook
            .as_deref_mut()
            .and_then(|hook| hook.as_any().downcast_mut::<H>())
    }

    pub(crate) fn graph(&self) -> &'static Graph {
        self.scheduler.graph
    }

    /// How many nodes the graph has.
    pub(crate) fn len(&self) -> usize {
        self.scheduler.len()
    }

    pub(crate) fn status(&self, node: u32) -> NodeStatus {
        self.scheduler.nodes[node as usize].status
    }

    /// The node's current attempt, 1 for the first (0 when it is not running).
    pub(crate) fn attempt(&self, node: u32) -> u32 {
        self.scheduler.nodes[node as usize].attempt
    }

    pub(crate) fn set_attempt(&mut self, node: u32, attempt: u32) {
        self.scheduler.nodes[node as usize].attempt = attempt;
    }

    /// The policy in force for `node`: its step's, then its operation's defaults.
    pub(crate) fn policy(&self, node: u32) -> NodePolicy {
        self.scheduler.node_policy(node)
    }

    /// Emits an event (it goes to the hook's `record` too).
    pub(crate) fn emit(&mut self, node: Option<u32>, attempt: u32, kind: EventKind) {
        self.scheduler.emit(node, attempt, || kind);
    }

    /// `node`'s attempt completed: it settles.
    pub(crate) fn complete(&mut self, node: u32) {
        self.scheduler.settle(node, Settle::Completed);
    }

    /// `node` failed for good with `error`.
    pub(crate) fn fail(&mut self, node: u32, error: NodeError) {
        self.scheduler.fail(node, error);
    }

    /// `node`'s attempt is over (ended, or never started): it leaves the running set and its
    /// attempts are counted.
    pub(crate) fn end_attempt(&mut self, node: u32) {
        let attempts = self.scheduler.nodes[node as usize].attempt;
        self.scheduler.release(node);
        self.scheduler.record_attempts(node, attempts, 1);
    }

    /// Records an attempt's error for the report; returns its text.
    pub(crate) fn record_attempt_error(&mut self, node: u32, error: &NodeError) -> Arc<str> {
        self.scheduler.record_attempt_error(node, error)
    }

    /// `node` is polled the long way from now on (it gets a record of timers).
    pub(crate) fn watch(&mut self, node: u32) {
        self.scheduler.watch(node);
    }

    /// Sets `node`'s deadline over all its attempts.
    pub(crate) fn set_deadline(&mut self, node: u32, sleep: Pin<Box<Sleep>>) {
        self.scheduler.watch(node).deadline = Some(sleep);
    }

    /// Sets the wait before `node`'s next attempt.
    pub(crate) fn set_backoff(&mut self, node: u32, sleep: Pin<Box<Sleep>>) {
        self.scheduler.watch(node).backoff = Some(sleep);
    }

    /// Drops `node`'s backoff and attempt timeout (a new attempt is requested).
    pub(crate) fn clear_attempt_timers(&mut self, node: u32) {
        if let Some(watch) = self.scheduler.watch_of(node) {
            watch.backoff = None;
            watch.timeout = None;
        }
    }

    /// Whether `node` waits before its next attempt.
    pub(crate) fn in_backoff(&self, node: u32) -> bool {
        self.scheduler
            .watches
            .get(node as usize)
            .and_then(Option::as_ref)
            .is_some_and(|w| w.backoff.is_some())
    }

    /// Polls `node`'s attempt timeout: whether it has passed.
    pub(crate) fn timeout_passed(&mut self, node: u32, cx: &mut Context<'_>) -> bool {
        match self.scheduler.timer(node, |w| &mut w.timeout) {
            Some(timeout) => timeout.as_mut().poll(cx).is_ready(),
            None => false,
        }
    }

    /// When `node`'s timers (attempt timeout, deadline, backoff) pass, the earliest.
    pub(crate) fn next_timer(&mut self, node: u32) -> Option<tokio::time::Instant> {
        let watch = self.scheduler.watch_of(node)?;
        [&watch.timeout, &watch.deadline, &watch.backoff]
            .into_iter()
            .flatten()
            .map(|sleep| sleep.deadline())
            .min()
    }

    /// Makes the future of `node`'s attempt (the attempt number counted already) with
    /// `timeout`, and polls it from the next round. `false` when the node is not running.
    pub(crate) fn start_held(
        &mut self,
        node: u32,
        make: bool,
        timeout: impl FnOnce(&mut Run<'_, '_>) -> Result<Option<Pin<Box<Sleep>>>, NodeError>,
    ) -> bool {
        if self.status(node) != NodeStatus::Running {
            return false;
        }
        let started = match make {
            true => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.leaves[node as usize].as_mut().start()
            }))
            .map_err(|payload| NodeError::Panicked(crate::panic::panic_message(payload))),
            false => Ok(()),
        };
        match started.and_then(|()| timeout(self)) {
            Ok(timeout) => {
                self.scheduler.nodes[node as usize].fresh = true;
                self.scheduler.watch(node).timeout = timeout;
                self.scheduler.due.push(node);
            }
            Err(error) => {
                self.leaves[node as usize].as_mut().stop();
                self.end_attempt(node);
                self.fail(node, error);
            }
        }
        true
    }

    /// `node` is polled in this round.
    pub(crate) fn due(&mut self, node: u32) {
        self.scheduler.due.push(node);
    }

    /// `node`'s leaf.
    pub(crate) fn leaf(&mut self, node: u32) -> Pin<&mut (dyn Leaf + 'l)> {
        self.leaves[node as usize].as_mut()
    }

    /// Gives nest node `node` its context, as its first start does, for a hook that starts
    /// the node's leaf itself (a task's run restoring the stored outputs). Nothing for a node
    /// that is not a nest.
    pub(crate) fn give_nest(&mut self, node: u32) {
        if let Some(nest) = self.scheduler.plan().control.nest(node) {
            let ctx = self.scheduler.nest_ctx(nest);
            self.leaves[node as usize].as_mut().nest(ctx);
        }
    }

    /// Polls `node`'s current attempt and its timeout, as the scheduler does.
    pub(crate) fn poll_attempt(
        &mut self,
        node: u32,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        let given = self.given.take();
        self.scheduler.poll_attempt(self.leaves, node, cx, given)
    }

    /// Cancels the run (`reason`), unless it is halting already, and stops it at once: every
    /// running future is dropped, every unfinished node aborted.
    pub(crate) fn stop(&mut self, reason: CancelReason) {
        if self.scheduler.halt.is_none() {
            self.scheduler.set_halt(Halt::Cancelled(reason));
        }
        self.scheduler.stop_all(self.leaves);
    }

    /// Cancels the run (`reason`, whatever halted it before) and stops it at once.
    pub(crate) fn cancel(&mut self, reason: CancelReason) {
        self.scheduler.set_halt(Halt::Cancelled(reason));
        self.scheduler.stop_all(self.leaves);
    }

    /// Stops the run as a process that exits would: observers see no more events, then as
    /// [`Run::cancel`].
    pub(crate) fn drop_out(&mut self) {
        self.scheduler.recording = None;
        self.cancel(CancelReason::Token);
    }

    /// Whether nest node `node`'s driver runs on after the node completed (`min` with `rest =
    /// run`).
    pub(crate) fn lingers(&self, node: u32) -> bool {
        let Some(home) = self.scheduler.nest_home.as_deref() else {
            return false;
        };
        let nests = self.scheduler.graph.plan.control.nests;
        nests
            .binary_search_by_key(&node, |n| n.node)
            .ok()
            .and_then(|place| home.shared[place].as_ref())
            .is_some_and(|shared| shared.lingering())
    }

    /// Whether a nest node that completed still has a driver running.
    pub(crate) fn lingering(&self) -> bool {
        self.scheduler
            .nest_home
            .as_deref()
            .is_some_and(|home| !home.lingering.is_empty())
    }

    /// Polls the run again (in [`Steps::after_poll`] only; elsewhere, `Pending`).
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.wakes.as_deref_mut() {
            Some(wakes) => self.scheduler.poll(self.leaves, wakes, cx),
            None => Poll::Pending,
        }
    }
}

impl Scheduler {
    /// Calls `step` of the run's hook with the run.
    #[cold]
    #[inline(never)]
    pub(super) fn hooked<R>(
        &mut self,
        leaves: &mut Leaves<'_>,
        wakes: Option<&mut Option<Arc<WakeSet>>>,
        given: Option<(PollResult, Option<&'static OperationSpec>)>,
        step: impl FnOnce(&'static dyn Steps, &mut Run<'_, '_>) -> R,
        none: R,
    ) -> R {
        let Some(steps) = self.hook.as_deref().map(Hook::steps) else {
            return none;
        };
        step(steps, &mut Run::new(self, leaves, wakes).given(given))
    }
}
