//! Distributed runs (`DurableRunner::distributed`): operations executed as tasks by any
//! worker.
//!
//! The owner of a distributed run's lease decides it exactly as it decides any durable run:
//! the same replay, the same write-ahead gate, the same settling. Only an operation's attempt
//! is not run here. The batch with its `Requested` opens a task
//! ([`TaskChange::Open`]); its "future" is the task's outcome, which a worker stores
//! (`Store::complete_task`) and the run takes from the store: loaded with the run
//! (`Loaded::tasks`) or fetched every `signal_poll` while a task runs. A completed outcome is
//! restored through the node's own future, as a replayed completion is (the output is in the
//! store already); a failed one is the attempt's error, which retries, timeouts and failure
//! policies treat as any other. The batch journaling the outcome, or giving up the attempt,
//! closes the task ([`TaskChange::Close`]).
//!
//! A worker executes a task with [`start_task_run`] and [`poll_task_run`]: the workflow's own
//! run, which restores the
//! stored outputs into their slots and runs the one attempt, with its idempotency key, and
//! journals nothing.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::super::Scheduler;
use crate::durable::{JournalSetup, TaskExec, attempt_ctx, with_attempt};
use crate::error::NodeError;
use crate::events::{Event, EventKind};
use crate::graph::{Graph, NodeKind};
use crate::nodes::Leaves;
use crate::panic::{panic_message, timer};
use crate::status::NodeStatus;
use crate::store::{
    Batch, StoreFuture, StoredOutput, TaskChange, TaskOutcome, TaskResult, TimerChange, TimerKey,
    TimerKind,
};

/// A distributed run's side of its tasks.
pub(in crate::scheduler) struct Tasks {
    /// Which nodes are operations (executed as tasks).
    remote: Box<[bool]>,
    /// Outcomes known and not yet taken by their node.
    results: Vec<TaskResult>,
    /// Nodes whose stored attempt timeout was loaded with the run and not used yet: the
    /// attempt in flight waits what is left of it.
    loaded_timeouts: Vec<u32>,
    /// The next look at the store, while a task runs.
    sleep: Option<Pin<Box<Sleep>>>,
    /// A look at the store in flight.
    fetch: Option<StoreFuture<'static, Vec<TaskResult>>>,
}

impl Tasks {
    pub(super) fn new(setup: &JournalSetup, graph: &'static Graph) -> Option<Box<Tasks>> {
        if !setup.distributed || setup.task.is_some() {
            return None;
        }
        Some(Box::new(Tasks {
            remote: graph
                .nodes
                .iter()
                .map(|node| node.kind == NodeKind::Operation)
                .collect(),
            results: setup.tasks.clone(),
            loaded_timeouts: setup
                .timers
                .iter()
                .filter(|t| t.key.kind == TimerKind::Timeout)
                .filter_map(|t| t.key.node)
                .collect(),
            sleep: None,
            fetch: None,
        }))
    }

    fn is_remote(&self, node: u32) -> bool {
        self.remote.get(node as usize).copied().unwrap_or(false)
    }

    /// The task changes an event of the live run implies: an operation's `Requested` opens
    /// its task, the end of its attempt (journaled, retried, given up, withdrawn) closes it.
    pub(super) fn record(&self, event: &Event, pending: &mut Batch) {
        let Some(node) = event.node.filter(|&n| self.is_remote(n)) else {
            return;
        };
        match &event.kind {
            EventKind::Requested => pending.tasks.push(TaskChange::Open {
                node,
                attempt: event.attempt,
            }),
            EventKind::Completed { .. }
            | EventKind::Failed { .. }
            | EventKind::Retrying { .. }
            | EventKind::Aborted { .. }
            | EventKind::Withdrawn { .. } => {
                pending.tasks.push(TaskChange::Close { node });
                // The attempt's stored timeout goes with it (the retry's backoff stays).
                pending.timers.push(TimerChange::Clear {
                    key: timeout_key(node),
                });
            }
            _ => {}
        }
    }

    /// Takes the outcome of `node`'s `attempt`, if it is known; drops outcomes of its earlier
    /// attempts (given up before they ended).
    fn take(&mut self, node: u32, attempt: u32) -> Option<TaskOutcome> {
        self.results
            .retain(|r| r.node != node || r.attempt >= attempt);
        let i = self
            .results
            .iter()
            .position(|r| r.node == node && r.attempt == attempt)?;
        Some(self.results.swap_remove(i).outcome)
    }

    fn has(&self, node: u32, attempt: u32) -> bool {
        self.results
            .iter()
            .any(|r| r.node == node && r.attempt == attempt)
    }

    /// Keeps the outcomes fetched from the store (the newest of each node).
    fn add(&mut self, fetched: Vec<TaskResult>) {
        for result in fetched {
            match self.results.iter_mut().find(|r| r.node == result.node) {
                Some(known) => *known = result,
                None => self.results.push(result),
            }
        }
    }
}

/// The stored timeout of `node`'s attempt in flight.
fn timeout_key(node: u32) -> TimerKey {
    TimerKey {
        node: Some(node),
        instance: String::new(),
        kind: TimerKind::Timeout,
    }
}

impl Scheduler {
    /// The timeout of a task's attempt that starts now: what is left of the stored one when
    /// the attempt was in flight when the run was loaded, else the step's full timeout, which
    /// is stored (with the next batch) so that it holds while the run is unloaded.
    pub(super) fn task_timeout(&mut self, node: u32) -> Option<Duration> {
        let full = self.node_policy(node).timeout()?;
        let journal = self.journal.as_deref_mut()?;
        let tasks = journal.tasks.as_deref_mut()?;
        if let Some(i) = tasks.loaded_timeouts.iter().position(|&n| n == node) {
            tasks.loaded_timeouts.swap_remove(i);
            let setup = &journal.setup;
            if let Some(stored) = setup.timers.iter().find(|t| t.key == timeout_key(node)) {
                return Some(Duration::from_millis(
                    stored.due_ms.saturating_sub(setup.now_ms),
                ));
            }
        }
        journal.pending.timers.push(TimerChange::Set {
            key: timeout_key(node),
            after: full,
        });
        Some(full)
    }

    /// Whether `node`'s attempts are tasks for the workers (an operation of a live
    /// distributed run).
    pub(super) fn is_task(&self, node: u32) -> bool {
        self.journal
            .as_deref()
            .and_then(|j| j.tasks.as_deref())
            .is_some_and(|t| t.is_remote(node))
    }

    /// Whether `node` waits for its task's outcome and none is known: unloading counts it as
    /// waiting without a due time (the task's completion makes the run due in the store).
    pub(super) fn task_idle(&self, node: u32) -> bool {
        let attempt = self.nodes[node as usize].attempt;
        let Some(journal) = self.journal.as_deref() else {
            return false;
        };
        // Out as a task: not waiting for its `Requested` to commit, not between two attempts.
        let out = !journal.is_waiting(node)
            && self
                .watches
                .get(node as usize)
                .and_then(Option::as_ref)
                .is_none_or(|w| w.backoff.is_none());
        out && journal
            .tasks
            .as_deref()
            .is_some_and(|t| t.is_remote(node) && !t.has(node, attempt))
    }

    /// Polls a task's attempt: its outcome once a worker stored it, else its timeout.
    pub(super) fn poll_task(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        let attempt = self.nodes[node as usize].attempt;
        let outcome = self
            .journal
            .as_deref_mut()
            .and_then(|j| j.tasks.as_deref_mut())
            .and_then(|t| t.take(node, attempt));
        match outcome {
            Some(TaskOutcome::Completed { type_name, bytes }) => {
                let restored = self.restore_task(leaves, node, bytes.clone());
                // The output becomes the node's with the batch that journals its completion.
                if let (Poll::Ready(Ok(())), Some(journal)) =
                    (&restored, self.journal.as_deref_mut())
                {
                    journal.pending.outputs.push(StoredOutput {
                        node,
                        instance: String::new(),
                        type_name,
                        bytes,
                    });
                }
                restored
            }
            Some(TaskOutcome::Failed { error }) => {
                Poll::Ready(Err(NodeError::Failed(error.into())))
            }
            None => {
                let expired = match self.timer(node, |w| &mut w.timeout) {
                    Some(timeout) => timeout.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if !expired {
                    return Poll::Pending;
                }
                let after = self.node_policy(node).timeout().unwrap_or_default();
                self.emit(Some(node), attempt, || EventKind::TimedOut { after });
                Poll::Ready(Err(NodeError::TimedOut(after)))
            }
        }
    }

    /// Puts a task's output in the node's slot through the node's own future, as a replayed
    /// completion is restored.
    fn restore_task(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        bytes: Vec<u8>,
    ) -> Poll<Result<(), NodeError>> {
        let name = self.graph.nodes[node as usize].name;
        let attempt = self.nodes[node as usize].attempt;
        let Some(journal) = self.journal.as_deref() else {
            return Poll::Ready(Err(NodeError::Internal("a task outside a durable run")));
        };
        let mut ctx = journal.ctx(name, attempt);
        ctx.restore = Some(bytes);
        let mut noop = Context::from_waker(Waker::noop());
        let (polled, _) = with_attempt(ctx, || {
            catch_unwind(AssertUnwindSafe(|| {
                let mut leaf = leaves[node as usize].as_mut();
                leaf.as_mut().start();
                leaf.poll(&mut noop)
            }))
        });
        match polled {
            Ok(Poll::Ready(result)) => Poll::Ready(result),
            Ok(Poll::Pending) => Poll::Ready(Err(NodeError::Internal(
                "a durable step did not restore its task's output",
            ))),
            Err(payload) => Poll::Ready(Err(NodeError::Panicked(panic_message(payload)))),
        }
    }

    /// The live distributed run's look for task outcomes, in each round: while a task runs,
    /// asks the store every `signal_poll`; hands each known outcome to its node (which is
    /// polled). Whether a node was handed one.
    pub(super) fn poll_tasks(&mut self, cx: &mut Context<'_>) -> bool {
        let waiting: Vec<u32> = (0..self.len() as u32)
            .filter(|&node| {
                self.nodes[node as usize].status == NodeStatus::Running
                    && self.is_task(node)
                    && !self.journal.as_deref().is_some_and(|j| j.is_waiting(node))
            })
            .collect();
        let Some(journal) = self.journal.as_deref_mut() else {
            return false;
        };
        let every = journal.setup.signal_poll;
        let store = Arc::clone(&journal.setup.store);
        let run = journal.setup.lease.run.clone();
        let Some(tasks) = journal.tasks.as_deref_mut() else {
            return false;
        };
        if waiting.is_empty() {
            tasks.sleep = None;
            tasks.fetch = None;
            return false;
        }
        let mut handed = Vec::new();
        loop {
            for &node in &waiting {
                let attempt = self.nodes[node as usize].attempt;
                if tasks.has(node, attempt) && !handed.contains(&node) {
                    handed.push(node);
                }
            }
            if let Some(fetch) = tasks.fetch.as_mut() {
                match fetch.as_mut().poll(cx) {
                    Poll::Pending => break,
                    Poll::Ready(result) => {
                        tasks.fetch = None;
                        // A failed request is made again after the next interval.
                        if let Ok(results) = result {
                            tasks.add(results);
                            continue;
                        }
                    }
                }
            }
            if tasks.sleep.is_none() {
                match timer(every) {
                    Ok(sleep) => tasks.sleep = Some(sleep),
                    // No tokio timer: the run takes the outcomes it loaded, and asks no more.
                    Err(_) => break,
                }
            }
            if let Some(sleep) = tasks.sleep.as_mut()
                && sleep.as_mut().poll(cx).is_pending()
            {
                break;
            }
            tasks.sleep = None;
            let store = Arc::clone(&store);
            let run = run.clone();
            tasks.fetch = Some(Box::pin(async move { store.task_results(&run).await }));
        }
        let dealt = !handed.is_empty();
        self.due.extend(handed);
        dealt
    }
}

/// A worker's execution of one task, first step: restores every stored output into its
/// node's slot and makes the task's attempt. `false` when that failed: the outcome is set.
/// Then [`poll_task_run`] runs the attempt. The run journals nothing and settles nothing.
pub(in crate::scheduler) fn start_task_run(
    scheduler: &Scheduler,
    leaves: &mut Leaves<'_>,
    setup: &JournalSetup,
    task: &TaskExec,
) -> bool {
    let run: Arc<str> = Arc::from(setup.lease.run.as_str());
    let mut noop = Context::from_waker(Waker::noop());
    let target = task.node;
    let failed = 'start: {
        if (target as usize) >= scheduler.len()
            || scheduler.graph.nodes[target as usize].kind != NodeKind::Operation
        {
            break 'start format!(
                "node {target} of `{}` is not an operation",
                scheduler.graph.name
            );
        }
        for (&node, bytes) in &setup.outputs {
            if node == target || (node as usize) >= scheduler.len() {
                continue;
            }
            let name = scheduler.graph.nodes[node as usize].name;
            let mut ctx = attempt_ctx(&run, name, 1);
            ctx.restore = Some(bytes.clone());
            let (polled, _) = with_attempt(ctx, || {
                catch_unwind(AssertUnwindSafe(|| {
                    let mut leaf = leaves[node as usize].as_mut();
                    leaf.as_mut().start();
                    leaf.poll(&mut noop)
                }))
            });
            let why = match polled {
                Ok(Poll::Ready(Ok(()))) => None,
                Ok(Poll::Ready(Err(error))) => Some(error.to_string()),
                Ok(Poll::Pending) => Some("its step did not restore it".to_owned()),
                Err(payload) => Some(panic_message(payload).to_string()),
            };
            leaves[node as usize].as_mut().stop();
            if let Some(why) = why {
                break 'start format!("the stored output of `{name}` cannot be restored: {why}");
            }
        }
        match catch_unwind(AssertUnwindSafe(|| {
            leaves[target as usize].as_mut().start()
        })) {
            Ok(()) => return true,
            Err(payload) => NodeError::Panicked(panic_message(payload)).to_string(),
        }
    };
    set_outcome(task, TaskOutcome::Failed { error: failed });
    false
}

/// A worker's execution of one task, second step: polls the attempt with its idempotency
/// key; once it ends, its outcome (with the output it stored) is set.
pub(in crate::scheduler) fn poll_task_run(
    scheduler: &Scheduler,
    leaves: &mut Leaves<'_>,
    setup: &JournalSetup,
    task: &TaskExec,
    cx: &mut Context<'_>,
) -> Poll<()> {
    let target = task.node as usize;
    let run: Arc<str> = Arc::from(setup.lease.run.as_str());
    let ctx = attempt_ctx(&run, scheduler.graph.nodes[target].name, task.attempt);
    let (polled, ctx) = with_attempt(ctx, || {
        catch_unwind(AssertUnwindSafe(|| leaves[target].as_mut().poll(cx)))
    });
    let outcome = match polled {
        Ok(Poll::Pending) => return Poll::Pending,
        Ok(Poll::Ready(Ok(()))) => {
            let (type_name, bytes) = ctx.captured.unwrap_or(("", Vec::new()));
            TaskOutcome::Completed {
                type_name: type_name.to_owned(),
                bytes,
            }
        }
        Ok(Poll::Ready(Err(error))) => TaskOutcome::Failed {
            error: error.to_string(),
        },
        Err(payload) => TaskOutcome::Failed {
            error: NodeError::Panicked(panic_message(payload)).to_string(),
        },
    };
    leaves[target].as_mut().stop();
    set_outcome(task, outcome);
    Poll::Ready(())
}

fn set_outcome(task: &TaskExec, outcome: TaskOutcome) {
    *task.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
}
