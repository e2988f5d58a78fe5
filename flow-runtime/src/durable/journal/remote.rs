//! Distributed runs (`DurableRunner::distributed`): operations, and the instances of
//! nests, executed as tasks by any worker.
//!
//! The owner of a distributed run's lease decides it exactly as it decides any durable run:
//! the same replay, the same write-ahead gate, the same settling. Only an operation's attempt
//! is not run here (nor an instance of a nest whose body may run anywhere: its future waits
//! for its task's outcome through the run's `Records`, see `durable/nested.rs`). The batch
//! with its `Requested` opens a task ([`TaskChange::Open`]); its "future" is the task's
//! outcome, which a worker stores
//! (`Store::complete_task`) and the run takes from the store: loaded with the run
//! (`Loaded::tasks`) or fetched every `signal_poll` while a task runs. A completed outcome is
//! restored through the node's own future, as a replayed completion is (the output is in the
//! store already); a failed one is the attempt's error, which retries, timeouts and failure
//! policies treat as any other. The batch journaling the outcome, or giving up the attempt,
//! closes the task ([`TaskChange::Close`]).
//!
//! A worker executes a task with a [`TaskRun`] hook: the workflow's own run, whose node set the
//! hook drives itself. It restores the stored outputs into their slots and runs the one
//! attempt, with its idempotency key (or the nest node with the one instance, whose end is
//! the outcome), journals nothing, and gives back the attempt's outcome.

use std::any::Any;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::Journal;
use crate::attempt::{Nested, Records, instance_index};
use crate::durable::{JournalSetup, attempt_ctx, with_attempt};
use crate::error::NodeError;
use crate::events::{Event, EventKind};
use crate::graph::{Graph, NodeKind};
use crate::panic::{panic_message, timer};
use crate::report::HookEnd;
use crate::scheduler::{Hook, HookFuture, Run, RunEnd, Steps};
use crate::status::NodeStatus;
use crate::store::{
    Batch, Notified, StoreFuture, StoredOutput, TaskChange, TaskClaim, TaskOutcome, TaskResult,
    TimerChange, TimerKey, TimerKind, Watch, previous_instance,
};

/// Outcomes of a run's tasks executed by the worker that drives the run (sticky), handed to the
/// run in memory instead of through the store: the batch that journals an outcome is then the
/// only write of it (its task is closed there), and the run needs no look at the store to
/// learn of it. Shared by the worker (which delivers) and the run's journal (which takes).
#[derive(Default)]
pub(crate) struct Mailbox {
    state: Mutex<MailboxState>,
}

#[derive(Default)]
struct MailboxState {
    /// The run's journal takes outcomes from the mailbox: until then (the run is still being
    /// loaded, or its load was refused) delivery fails, and the worker stores the outcome as
    /// any other.
    attached: bool,
    /// The run stopped taking outcomes (it ends, unloads or compensates): delivery fails,
    /// and the worker stores the outcome as any other.
    closed: bool,
    delivered: Vec<(TaskClaim, TaskOutcome)>,
    waker: Option<Waker>,
}

impl Mailbox {
    fn state(&self) -> std::sync::MutexGuard<'_, MailboxState> {
        // A panic while the state was held leaves it whole: use it as it is.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hands the outcome of `claim`'s attempt to the run; gives it back when the run no
    /// longer takes outcomes.
    pub(crate) fn deliver(&self, claim: &TaskClaim, outcome: TaskOutcome) -> Option<TaskOutcome> {
        let mut state = self.state();
        if state.closed || !state.attached {
            return Some(outcome);
        }
        state.delivered.push((claim.clone(), outcome));
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        None
    }

    /// The outcomes delivered so far; the run is woken at the next delivery.
    fn take(&self, cx: &mut Context<'_>) -> Vec<(TaskClaim, TaskOutcome)> {
        let mut state = self.state();
        if !state.closed {
            state.waker = Some(cx.waker().clone());
        }
        std::mem::take(&mut state.delivered)
    }

    /// The run's journal takes outcomes from now on. A mailbox once closed stays closed: the next generation of a run that continued as new
    /// takes no outcome in memory (one of the generation before, still executing, would
    /// otherwise reach it); the worker stores those, and the store fences them.
    fn attach(&self) {
        self.state().attached = true;
    }

    /// Stops taking outcomes; those delivered and not taken.
    fn close(&self) -> Vec<(TaskClaim, TaskOutcome)> {
        let mut state = self.state();
        state.closed = true;
        state.waker = None;
        std::mem::take(&mut state.delivered)
    }
}

/// A distributed run's side of its tasks.
pub(super) struct Tasks {
    /// Which nodes are operations (executed as tasks).
    remote: Box<[bool]>,
    /// Outcomes known and not yet taken by their node.
    results: Vec<TaskResult>,
    /// Nodes whose stored attempt timeout was loaded with the run and not used yet: the
    /// attempt in flight waits what is left of it.
    loaded_timeouts: Vec<u32>,
    /// The next look at the store, while a task runs.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The store's notice that a task of the run is done (where the store notifies): the
    /// run looks at once instead of at the next `sleep`.
    wake: Option<Notified>,
    /// A look at the store in flight.
    fetch: Option<StoreFuture<'static, Vec<TaskResult>>>,
    /// While the run waits for tasks alone, when it stops waiting to be unloaded (a sticky
    /// run's window, `JournalSetup::unload_tasks`).
    kept_until: Option<Pin<Box<Sleep>>>,
    /// Where the worker driving the run hands it the outcomes of the tasks it executed.
    mailbox: Option<Arc<Mailbox>>,
    /// Outcomes taken from the mailbox that no node has taken yet: stored in the store by
    /// the run if it stops before journaling them.
    local: Vec<(TaskClaim, TaskOutcome)>,
}

impl Drop for Tasks {
    /// A run dropped without stopping (its future dropped) takes no more outcomes: later
    /// deliveries fail, and their workers store them.
    fn drop(&mut self) {
        if let Some(mailbox) = &self.mailbox {
            mailbox.close();
        }
    }
}

impl Tasks {
    /// Stops looking at the store: drops the request in flight, if any (which gives its
    /// connection back to the store's pool) and the wait for the next one.
    /// Also stops taking outcomes from the mailbox: gives back those not journaled, which
    /// the run stores before it lets go ([`Journal::finish_run`]).
    pub(super) fn stop(&mut self) -> Vec<(TaskClaim, TaskOutcome)> {
        self.sleep = None;
        self.wake = None;
        self.fetch = None;
        self.kept_until = None;
        let mut left = std::mem::take(&mut self.local);
        if let Some(mailbox) = &self.mailbox {
            left.extend(mailbox.close());
        }
        left
    }

    pub(super) fn new(setup: &JournalSetup, graph: &'static Graph) -> Option<Box<Tasks>> {
        if !setup.distributed {
            return None;
        }
        if let Some(mailbox) = &setup.mailbox {
            mailbox.attach();
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
            wake: None,
            fetch: None,
            kept_until: None,
            mailbox: setup.mailbox.clone(),
            local: Vec::new(),
        }))
    }

    pub(super) fn is_remote(&self, node: u32) -> bool {
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
                instance: String::new(),
                attempt: event.attempt,
            }),
            EventKind::Completed { .. }
            | EventKind::Failed { .. }
            | EventKind::Retrying { .. }
            | EventKind::Aborted { .. }
            | EventKind::Withdrawn { .. } => {
                pending.tasks.push(TaskChange::Close {
                    node,
                    instance: String::new(),
                });
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
            .retain(|r| r.node != node || !r.instance.is_empty() || r.attempt >= attempt);
        let i = self
            .results
            .iter()
            .position(|r| r.node == node && r.instance.is_empty() && r.attempt == attempt)?;
        // Taken: the batch that journals it closes the task.
        self.local.retain(|(claim, _)| {
            claim.node != node || !claim.instance.is_empty() || claim.attempt != attempt
        });
        Some(self.results.swap_remove(i).outcome)
    }

    /// The end of instance `record` of nest node `node` is in the pending batch: the run no
    /// longer stores its task's outcome itself if it stops.
    pub(super) fn journaled(&mut self, node: u32, record: &str) {
        self.local
            .retain(|(claim, _)| claim.node != node || claim.instance != record);
        self.results
            .retain(|r| r.node != node || r.instance != record);
    }

    /// Hands the known outcomes of instance tasks to the instances waiting for them; whether
    /// one was handed over.
    fn deliver_instances(&mut self, records: &Records) -> bool {
        let mut handed = false;
        self.results.retain(|result| {
            if result.instance.is_empty() || !records.waits(result.node, &result.instance) {
                return true;
            }
            let outcome = match &result.outcome {
                TaskOutcome::Completed { bytes, .. } => Ok(bytes.clone()),
                TaskOutcome::Failed { error } => Err(error.clone()),
            };
            let taken = records.deliver(result.node, &result.instance, outcome);
            handed |= taken;
            !taken
        });
        handed
    }

    /// Takes the outcomes the worker handed over since the last look.
    fn take_delivered(&mut self, cx: &mut Context<'_>) {
        let Some(mailbox) = &self.mailbox else {
            return;
        };
        let delivered = mailbox.take(cx);
        if delivered.is_empty() {
            return;
        }
        self.add(
            delivered
                .iter()
                .map(|(claim, outcome)| TaskResult {
                    node: claim.node,
                    instance: claim.instance.clone(),
                    attempt: claim.attempt,
                    outcome: outcome.clone(),
                })
                .collect(),
            None,
        );
        self.local.extend(delivered);
    }

    fn has(&self, node: u32, attempt: u32) -> bool {
        self.results
            .iter()
            .any(|r| r.node == node && r.instance.is_empty() && r.attempt == attempt)
    }

    /// Keeps the outcomes known (the newest of each task). Of those fetched from the store
    /// (`records` given), an instance's is kept only while the instance waits for it: any
    /// other is stale (its end is journaled, or about to be, and a look that started before
    /// that batch committed brought it back), and one an instance asks for later is fetched
    /// again, since the store keeps it until the batch with the instance's end closes it.
    fn add(&mut self, fetched: Vec<TaskResult>, records: Option<&Records>) {
        for result in fetched {
            if !result.instance.is_empty()
                && records.is_some_and(|records| !records.waits(result.node, &result.instance))
            {
                continue;
            }
            match self
                .results
                .iter_mut()
                .find(|r| r.node == result.node && r.instance == result.instance)
            {
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

/// The run's tasks, if it is distributed.
fn tasks<'a>(run: &'a mut Run<'_, '_>) -> Option<&'a mut Tasks> {
    run.hook::<Journal>()?.tasks.as_deref_mut()
}

/// The timeout of a task's attempt that starts now: what is left of the stored one when
/// the attempt was in flight when the run was loaded, else the step's full timeout, which
/// is stored (with the next batch) so that it holds while the run is unloaded.
pub(super) fn task_timeout(run: &mut Run<'_, '_>, node: u32) -> Option<Duration> {
    let full = run.policy(node).timeout()?;
    let journal = run.hook::<Journal>()?;
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
pub(super) fn is_task(run: &mut Run<'_, '_>, node: u32) -> bool {
    tasks(run).is_some_and(|t| t.is_remote(node))
}

/// Whether `node` waits for its task's outcome and none is known (an operation), or for its
/// instances' tasks alone (a nest): unloading counts it as waiting without a due time (a
/// task's completion makes the run due in the store).
pub(super) fn task_idle(run: &mut Run<'_, '_>, node: u32) -> bool {
    let attempt = run.attempt(node);
    let backoff = run.in_backoff(node);
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    // Out as a task: not waiting for its `Requested` to commit, not between two attempts.
    let out = !journal.is_waiting(node) && !backoff;
    let Some(tasks) = journal.tasks.as_deref() else {
        return false;
    };
    if tasks.is_remote(node) {
        return out && !tasks.has(node, attempt);
    }
    // A nest whose instances run as tasks, waiting for them alone (the outcomes known of
    // waiting instances are handed over before the run looks whether it is idle).
    journal.live && journal.records.waits_for_tasks(node)
}

/// Polls a task's attempt: its outcome once a worker stored it, else its timeout.
pub(super) fn poll_task(
    run: &mut Run<'_, '_>,
    node: u32,
    cx: &mut Context<'_>,
) -> Poll<Result<(), NodeError>> {
    let attempt = run.attempt(node);
    let outcome = tasks(run).and_then(|t| t.take(node, attempt));
    match outcome {
        Some(TaskOutcome::Completed { type_name, bytes }) => {
            let restored = restore_task(run, node, bytes.clone());
            // The output becomes the node's with the batch that journals its completion.
            if let (Poll::Ready(Ok(())), Some(journal)) = (&restored, run.hook::<Journal>()) {
                journal.pending.outputs.push(StoredOutput {
                    node,
                    instance: String::new(),
                    type_name,
                    bytes,
                });
            }
            restored
        }
        Some(TaskOutcome::Failed { error }) => Poll::Ready(Err(NodeError::Failed(error.into()))),
        None => {
            if !run.timeout_passed(node, cx) {
                return Poll::Pending;
            }
            let after = run.policy(node).timeout().unwrap_or_default();
            run.emit(Some(node), attempt, EventKind::TimedOut { after });
            Poll::Ready(Err(NodeError::TimedOut(after)))
        }
    }
}

/// Puts a task's output in the node's slot through the node's own future, as a replayed
/// completion is restored.
fn restore_task(run: &mut Run<'_, '_>, node: u32, bytes: Vec<u8>) -> Poll<Result<(), NodeError>> {
    let name = run.graph().nodes[node as usize].name;
    let attempt = run.attempt(node);
    let Some(journal) = run.hook::<Journal>() else {
        return Poll::Ready(Err(NodeError::Internal("a task outside a durable run")));
    };
    let mut ctx = journal.ctx(name, attempt, false);
    ctx.restore = Some(bytes);
    let mut noop = Context::from_waker(Waker::noop());
    let (polled, _) = with_attempt(ctx, || {
        catch_unwind(AssertUnwindSafe(|| {
            let mut leaf = run.leaf(node);
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
pub(super) fn poll_tasks(run: &mut Run<'_, '_>, cx: &mut Context<'_>) -> bool {
    let mut waiting = Vec::new();
    for node in 0..run.len() as u32 {
        // Not a node between two attempts: the outcome of the attempt it gave up may still be
        // in the store (until the batch that closes its task commits), and handing it over
        // would wake a node that has nothing to take.
        if run.status(node) == NodeStatus::Running
            && is_task(run, node)
            && !run.in_backoff(node)
            && !run.hook::<Journal>().is_some_and(|j| j.is_waiting(node))
        {
            waiting.push((node, run.attempt(node)));
        }
    }
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    if journal.moving {
        // The store's task rows have the steps' old numbers until the run's rows move.
        return false;
    }
    let every = journal.setup.signal_poll;
    let store = Arc::clone(&journal.setup.store);
    let run_id = journal.setup.lease.run.clone();
    let records = Arc::clone(&journal.records);
    let Some(tasks) = journal.tasks.as_deref_mut() else {
        return false;
    };
    // Instances executed as tasks wait too (only while live: a replaying run has opened no
    // task for them yet).
    let instances = journal.live && records.awaits_outcomes();
    if waiting.is_empty() && !instances {
        tasks.sleep = None;
        tasks.wake = None;
        tasks.fetch = None;
        return false;
    }
    tasks.take_delivered(cx);
    let mut handed = Vec::new();
    let mut instances_handed = false;
    loop {
        instances_handed |= tasks.deliver_instances(&records);
        for &(node, attempt) in &waiting {
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
                        tasks.add(results, Some(&records));
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
            if tasks.wake.is_none() {
                tasks.wake = store.watch(Watch::Run(run_id.to_string()));
            }
        }
        // The store's notice of a done task, where it notifies, or else the interval.
        let noticed = tasks
            .wake
            .as_mut()
            .is_some_and(|wake| wake.as_mut().poll(cx).is_ready());
        if !noticed
            && let Some(sleep) = tasks.sleep.as_mut()
            && sleep.as_mut().poll(cx).is_pending()
        {
            break;
        }
        tasks.sleep = None;
        // Asked for before the look, so that a task done while the look runs is noticed.
        tasks.wake = store.watch(Watch::Run(run_id.to_string()));
        let store = Arc::clone(&store);
        let run_id = run_id.clone();
        tasks.fetch = Some(Box::pin(async move { store.task_results(&run_id).await }));
    }
    let dealt = !handed.is_empty() || instances_handed;
    if dealt {
        // Progress: a sticky run's window starts again when it next waits for tasks alone.
        tasks.kept_until = None;
    }
    for node in handed {
        run.due(node);
    }
    dealt
}

/// The run does not wait for tasks alone (anymore): a sticky run's window is closed.
pub(super) fn busy(run: &mut Run<'_, '_>) {
    if let Some(tasks) = tasks(run) {
        tasks.kept_until = None;
    }
}

/// A sticky run that waits for tasks alone: whether it has waited so for `window` (then it
/// is unloaded). The first time, starts the window's timer, which wakes the run when it ends.
pub(super) fn kept_long_enough(
    run: &mut Run<'_, '_>,
    window: Duration,
    cx: &mut Context<'_>,
) -> bool {
    let Some(tasks) = tasks(run) else {
        return true;
    };
    if tasks.kept_until.is_none() {
        match timer(window) {
            Ok(sleep) => tasks.kept_until = Some(sleep),
            // No tokio timer: nothing would end the window; unload now.
            Err(_) => return true,
        }
    }
    tasks
        .kept_until
        .as_mut()
        .is_some_and(|until| until.as_mut().poll(cx).is_ready())
}

/// A worker's execution of one task of a distributed run: the hook of the workflow's own run,
/// which drives the node set itself. It restores every stored output into its node's slot,
/// makes the task's attempt and polls it with its idempotency key; the run journals nothing
/// and settles nothing. Its end is the attempt's [`TaskOutcome`].
pub(crate) struct TaskRun {
    run: Arc<str>,
    /// The run's stored outputs, by node.
    outputs: HashMap<u32, Vec<u8>>,
    node: u32,
    attempt: u32,
    /// A task of one instance of nest node `node`: the instance's record and index (`None`:
    /// the record names none), and the records its end goes to (loaded with the iteration
    /// before it, for a `Loop`).
    instance: Option<(Arc<str>, Option<u64>, Arc<Records>)>,
    started: bool,
    outcome: Option<TaskOutcome>,
}

impl TaskRun {
    /// The execution of `claim`'s attempt, with the run's stored outputs: those of its own
    /// nodes, by node, and those of nest instances, by (node, record).
    pub(crate) fn new(
        claim: &TaskClaim,
        outputs: HashMap<u32, Vec<u8>>,
        instances: HashMap<(u32, String), Vec<u8>>,
    ) -> Box<TaskRun> {
        let instance = (!claim.instance.is_empty()).then(|| {
            // The iteration before a `Loop`'s is the one stored end the instance reads.
            let before = previous_instance(&claim.instance);
            let loaded = instances
                .into_iter()
                .filter(|((node, record), _)| {
                    *node == claim.node && before.as_deref() == Some(record.as_str())
                })
                .collect();
            (
                Arc::from(claim.instance.as_str()),
                instance_index(&claim.instance),
                Arc::new(Records::loaded(loaded)),
            )
        });
        Box::new(TaskRun {
            run: Arc::from(claim.run.as_str()),
            outputs,
            node: claim.node,
            attempt: claim.attempt,
            instance,
            started: false,
            outcome: None,
        })
    }
}

/// The attempt of the nest node an instance belongs to, from its record: `ship#2[3]` → 2,
/// `ship[3]` → 1.
pub(crate) fn instance_attempt(record: &str) -> u32 {
    let head = record.split(['[', '@']).next().unwrap_or(record);
    head.rsplit_once('#')
        .and_then(|(_, attempt)| attempt.parse().ok())
        .unwrap_or(1)
}

/// The calls of a [`TaskRun`]: it drives the node set alone.
struct TaskSteps;

impl Steps for TaskSteps {
    fn request(&self, _: &mut Run<'_, '_>, _: u32, _: bool) -> Result<(), NodeError> {
        Ok(())
    }

    fn poll(
        &self,
        _: &mut Run<'_, '_>,
        _: u32,
        _: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        Poll::Pending
    }

    fn after_poll(&self, _: &mut Run<'_, '_>, _: &mut Context<'_>, poll: Poll<()>) -> Poll<()> {
        poll
    }

    fn alone(&self) -> bool {
        true
    }

    fn poll_alone(&self, run: &mut Run<'_, '_>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(task) = run.hook::<TaskRun>() else {
            return Poll::Ready(());
        };
        if !task.started {
            task.started = true;
            if !start_task_run(run) {
                return Poll::Ready(());
            }
        }
        poll_task_run(run, cx)
    }
}

impl Hook for TaskRun {
    fn attach(&mut self, _: &'static Graph) {}

    fn record(&mut self, _: &Event) {}

    fn steps(&self) -> &'static dyn Steps {
        &TaskSteps
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn finish(self: Box<Self>, _: RunEnd) -> HookFuture<'static, HookEnd> {
        Box::pin(std::future::ready(HookEnd::new(self.outcome)))
    }
}

/// A worker's execution of one task, first step: restores every stored output into its
/// node's slot and makes the task's attempt. `false` when that failed: the outcome is set.
/// Then [`poll_task_run`] runs the attempt.
fn start_task_run(run: &mut Run<'_, '_>) -> bool {
    let graph = run.graph();
    let len = run.len();
    let Some(task) = run.hook::<TaskRun>() else {
        return false;
    };
    let (run_id, target) = (Arc::clone(&task.run), task.node);
    let outputs = std::mem::take(&mut task.outputs);
    let instance = task
        .instance
        .as_ref()
        .map(|(record, index, records)| (Arc::clone(record), *index, Arc::clone(records)));
    let mut noop = Context::from_waker(Waker::noop());
    let failed = 'start: {
        let kind = graph.nodes.get(target as usize).map(|node| node.kind);
        match (&instance, kind) {
            (None, Some(NodeKind::Operation)) => {}
            (Some((record, index, records)), Some(kind @ (NodeKind::ForEach | NodeKind::Loop))) => {
                if index.is_none() {
                    break 'start format!("`{record}` names no instance of a nest");
                }
                if kind == NodeKind::Loop
                    && let Some(before) = previous_instance(record)
                    && records.loaded_end(target, &before).is_none()
                {
                    break 'start format!(
                        "the stored end of `{before}`, which iteration `{record}` starts from, is not in the store"
                    );
                }
            }
            (None, _) => {
                break 'start format!("node {target} of `{}` is not an operation", graph.name);
            }
            (Some((record, _, _)), _) => {
                break 'start format!(
                    "node {target} of `{}` is not a `ForEach` or a `Loop`, so it has no instance `{record}`",
                    graph.name
                );
            }
        }
        for (&node, bytes) in &outputs {
            if node == target || (node as usize) >= len {
                continue;
            }
            let name = graph.nodes[node as usize].name;
            run.give_nest(node);
            let mut ctx = attempt_ctx(&run_id, name, 1);
            ctx.restore = Some(bytes.clone());
            let (polled, _) = with_attempt(ctx, || {
                catch_unwind(AssertUnwindSafe(|| {
                    let mut leaf = run.leaf(node);
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
            run.leaf(node).stop();
            if let Some(why) = why {
                break 'start format!("the stored output of `{name}` cannot be restored: {why}");
            }
        }
        run.give_nest(target);
        match catch_unwind(AssertUnwindSafe(|| run.leaf(target).start())) {
            Ok(()) => return true,
            Err(payload) => NodeError::Panicked(panic_message(payload)).to_string(),
        }
    };
    if let Some(task) = run.hook::<TaskRun>() {
        task.outcome = Some(TaskOutcome::Failed { error: failed });
    }
    false
}

/// A worker's execution of one task, second step: polls the attempt with its idempotency
/// key; once it ends, its outcome (with the output it stored) is set.
fn poll_task_run(run: &mut Run<'_, '_>, cx: &mut Context<'_>) -> Poll<()> {
    let graph = run.graph();
    let Some(task) = run.hook::<TaskRun>() else {
        return Poll::Ready(());
    };
    let target = task.node;
    let mut ctx = attempt_ctx(&task.run, graph.nodes[target as usize].name, task.attempt);
    let instance = task.instance.as_ref().map(|(record, index, records)| {
        ctx.nest = Some(Nested {
            records: Arc::clone(records),
            within: Arc::from(""),
            solo: *index,
        });
        (Arc::clone(record), Arc::clone(records))
    });
    let (polled, ctx) = with_attempt(ctx, || {
        catch_unwind(AssertUnwindSafe(|| run.leaf(target).poll(cx)))
    });
    if let Some((record, records)) = instance {
        // The instance's end is the task's outcome, whatever the nest node does after it.
        let end = records
            .take_ended()
            .into_iter()
            .find(|end| end.node == target && *end.record == *record);
        let outcome = match (end, polled) {
            (Some(end), _) => TaskOutcome::Completed {
                type_name: end.type_name.to_owned(),
                bytes: end.bytes,
            },
            (None, _) if let Some((_, reason)) = records.broken() => TaskOutcome::Failed {
                error: format!("instance `{record}` cannot be stored: {reason}"),
            },
            (None, Ok(Poll::Pending)) => return Poll::Pending,
            (None, Ok(Poll::Ready(Ok(())))) => TaskOutcome::Failed {
                error: format!(
                    "the nest ended without running instance `{record}` (its source has no such item, or its loop ended before it)"
                ),
            },
            (None, Ok(Poll::Ready(Err(error)))) => TaskOutcome::Failed {
                error: format!("instance `{record}` did not run: {error}"),
            },
            (None, Err(payload)) => TaskOutcome::Failed {
                error: NodeError::Panicked(panic_message(payload)).to_string(),
            },
        };
        run.leaf(target).stop();
        if let Some(task) = run.hook::<TaskRun>() {
            task.outcome = Some(outcome);
        }
        return Poll::Ready(());
    }
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
    run.leaf(target).stop();
    if let Some(task) = run.hook::<TaskRun>() {
        task.outcome = Some(outcome);
    }
    Poll::Ready(())
}
