//! Durable runs in the scheduler (feature `durable`): the write-ahead gate and the replay.
//!
//! A durable run has `Scheduler::journal`; every other run has `None` there and never reaches
//! this module. The rules:
//!
//! - every event the run emits goes to the pending [`Batch`]; at the end of each round of the
//!   run loop the batch is committed (at most one commit in flight);
//! - a node's attempt is *held* when it is requested: its `Requested` is in the batch, its
//!   future is not made before that batch has committed (first attempts and retries alike);
//! - a completion's output goes into the same batch as its `Completed`; its successors are
//!   requested after it, so they start only once both are durable;
//! - the run ends only after the batch with `RunFinished` (and the run's final status) has
//!   committed; a commit that fails stops the run at once, nothing more is written, and the
//!   error is the run's ([`DurableError::Store`]).
//!
//! On resume the scheduler replays the journal: the events it emits itself (`RunStarted`, a
//! first `Requested`, a decision's `Completed`, `Skipped`, `Aborted`, …) must be the journal's
//! events of the same sequence number, else the replay stops with [`DurableError::Diverged`];
//! the events only the world produces (an operation's `Completed`, `Failed`, `TimedOut`,
//! `Retrying`, a retry's `Requested`) are applied from the journal in journal order. A
//! completed node's output is restored into its slot (its code does not run); at the end of the
//! journal, attempts in flight start again with the same attempt number (so the same
//! idempotency key), and a node in backoff waits what is left of its backoff by the store's
//! clock.
//!
//! A live run keeps its lease: every commit extends it, and a run that commits nothing for a
//! third of its lease (a long operation, a long `Delay`) commits an empty batch, which extends
//! it too. Without that, another owner (a `Worker`) could take the run while it still runs.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{Halt, Scheduler, Settle};
use crate::durable::{AttemptCtx, DurableError, JournalSetup, attempt_ctx, with_attempt};
use crate::error::NodeError;
use crate::events::{Event, EventKind};
use crate::graph::NodeKind;
use crate::nodes::{Idle, Leaves};
use crate::panic::{panic_message, timer};
use crate::policy::CancelReason;
use crate::status::NodeStatus;
use crate::store::{
    Batch, Committed, RunEnd, RunStatus, StoreFuture, StoredEvent, StoredOutput, TimerChange,
    TimerKey, TimerKind, now_ms,
};
use crate::verdict::Finished;
use crate::wake::WakeSet;

mod inbox;
mod remote;

pub(super) use remote::{poll_task_run, start_task_run};

/// A durable run's journal: what is pending, what is committing, what waits for a commit.
pub(super) struct Journal {
    setup: Arc<JournalSetup>,
    run: Arc<str>,
    /// Events with a lower sequence number are durable.
    durable_seq: u64,
    /// What this round emitted.
    pending: Batch,
    /// The batch being committed, and the sequence number after its last event.
    commit: Option<(StoreFuture<'static, Committed>, u64)>,
    /// Attempts requested and not started: (node, the sequence number of its `Requested`).
    held: Vec<(u32, u64)>,
    /// Nodes whose attempt failed and that wait for their next one (replay only).
    backoff: Vec<u32>,
    /// `Delay` steps whose `TimerSet` was replayed: when they start again they wait what is
    /// left of their stored timer, and set no new one.
    timer_set: Vec<u32>,
    /// The run's signals and its waiting `Signal` steps (`inbox.rs`), made when the first
    /// `Signal` step is requested.
    inbox: Option<Box<inbox::Inbox>>,
    /// The next journal event to replay; the replay ends at `setup.events.len()`.
    cursor: usize,
    /// The replay has ended: the run is live.
    live: bool,
    /// A commit failed or the replay diverged: nothing more is written or started.
    broken: bool,
    /// When the run's deadline passes, and the deadline, if it has one (`run_nodes` sets
    /// it).
    pub(super) deadline: Option<(tokio::time::Instant, Duration)>,
    /// The run is being unloaded, with its wake-up time: nothing more is written but its
    /// status `Waiting` (`broken` is set too).
    unloading: Option<Option<u64>>,
    /// When the lease was last extended (by a commit that completed).
    renewed: tokio::time::Instant,
    /// How long the run may go without a commit before it renews its lease.
    renew_every: Duration,
    /// The timer of the next renewal (made on the first look; `None` after that when no
    /// timer can be made, outside a tokio runtime with time: then the lease is not renewed).
    renew: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `renew` was tried.
    renew_tried: bool,
    /// The run's timers in the store, as of the batches handed to it.
    open: Vec<TimerKey>,
    /// A distributed run's tasks (`remote.rs`); `None` for every other run.
    tasks: Option<Box<remote::Tasks>>,
}

/// The shortest time between two renewals of a lease.
const MIN_RENEW: Duration = Duration::from_millis(10);

impl Journal {
    pub(super) fn new(
        setup: &Arc<JournalSetup>,
        graph: &'static crate::graph::Graph,
    ) -> Box<Journal> {
        let next = setup.events.len() as u64;
        Box::new(Journal {
            run: Arc::from(setup.lease.run.as_str()),
            durable_seq: next,
            pending: Batch::new(&setup.lease, next, setup.extend),
            commit: None,
            held: Vec::new(),
            backoff: Vec::new(),
            timer_set: Vec::new(),
            inbox: None,
            cursor: 0,
            live: setup.events.is_empty(),
            broken: false,
            deadline: None,
            unloading: None,
            renewed: tokio::time::Instant::now(),
            renew_every: renew_every(setup),
            renew: None,
            renew_tried: false,
            open: setup.timers.iter().map(|t| t.key.clone()).collect(),
            tasks: remote::Tasks::new(setup, graph),
            setup: Arc::clone(setup),
        })
    }

    /// Whether the lease is due for renewal: the live run has committed nothing for
    /// `renew_every`. Registers `cx` to be woken when it will be.
    fn renewal_due(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.live {
            return false;
        }
        if !self.renew_tried {
            self.renew_tried = true;
            self.renew = timer(self.renew_every).ok();
        }
        let Some(sleep) = self.renew.as_mut() else {
            return false;
        };
        if sleep.as_mut().poll(cx).is_pending() {
            return false;
        }
        let next = self.renewed + self.renew_every;
        if next > tokio::time::Instant::now() {
            // A commit extended the lease since the timer was set: wait from that commit.
            sleep.as_mut().reset(next);
            return sleep.as_mut().poll(cx).is_ready();
        }
        true
    }

    /// Takes an event the scheduler emitted: compared with the journal while replaying,
    /// added to the pending batch afterwards.
    pub(super) fn record(&mut self, event: &Event) {
        if self.broken {
            return;
        }
        let stored = match StoredEvent::try_from(event) {
            Ok(stored) => stored,
            Err(error) => return self.fail(DurableError::Store(error)),
        };
        if let Some(journal) = self.setup.events.get(self.cursor) {
            if same(journal, &stored) {
                self.cursor += 1;
            } else {
                let seq = journal.seq;
                let journal = describe(journal);
                self.diverge(seq, journal, describe(&stored));
            }
            return;
        }
        match &event.kind {
            EventKind::Retrying { delay, .. } => self.pending.timers.push(TimerChange::Set {
                key: backoff_key(event.node),
                after: *delay,
            }),
            EventKind::Requested if event.attempt > 1 => {
                self.pending.timers.push(TimerChange::Clear {
                    key: backoff_key(event.node),
                })
            }
            EventKind::TimerSet { after } => self.pending.timers.push(TimerChange::Set {
                key: delay_key(event.node),
                after: *after,
            }),
            EventKind::TimerFired => self.pending.timers.push(TimerChange::Clear {
                key: delay_key(event.node),
            }),
            // A compensation's backoff is the step's backoff timer: the step has completed, so
            // its own retries' timer is free.
            EventKind::CompensationRetrying { delay, .. } => {
                self.pending.timers.push(TimerChange::Set {
                    key: backoff_key(event.node),
                    after: *delay,
                })
            }
            EventKind::Compensating if event.attempt > 1 => {
                self.pending.timers.push(TimerChange::Clear {
                    key: backoff_key(event.node),
                })
            }
            EventKind::Completed { .. }
            | EventKind::Failed { .. }
            | EventKind::Aborted { .. }
            | EventKind::Withdrawn { .. }
            | EventKind::Compensated
            | EventKind::CompensationFailed { .. } => self.clear_timers(event.node),
            EventKind::RunFinished { .. } => self.clear_timers(None),
            _ => {}
        }
        if let Some(tasks) = self.tasks.as_deref() {
            tasks.record(event, &mut self.pending);
        }
        self.pending.events.push(stored);
    }

    /// A step has ended (`Some(node)`) or the run has (`None`): its timers that are in the
    /// store or set by the pending batch (a deadline, a backoff, a `Delay` cut short) are
    /// cleared with this batch, so that they no longer make the run's wake-up time.
    fn clear_timers(&mut self, node: Option<u32>) {
        let mine = |key: &TimerKey| node.is_none() || key.node == node;
        let mut keys: Vec<TimerKey> = self.open.iter().filter(|k| mine(k)).cloned().collect();
        for change in &self.pending.timers {
            match change {
                TimerChange::Set { key, .. } if mine(key) && !keys.contains(key) => {
                    keys.push(key.clone());
                }
                TimerChange::Clear { key } => keys.retain(|k| k != key),
                TimerChange::Set { .. } => {}
            }
        }
        self.pending
            .timers
            .extend(keys.into_iter().map(|key| TimerChange::Clear { key }));
    }

    /// Notes the timer changes of a batch handed to the store.
    fn note_timers(&mut self, changes: &[TimerChange]) {
        for change in changes {
            match change {
                TimerChange::Set { key, .. } => {
                    if !self.open.contains(key) {
                        self.open.push(key.clone());
                    }
                }
                TimerChange::Clear { key } => self.open.retain(|k| k != key),
            }
        }
    }

    fn fail(&mut self, error: DurableError) {
        self.broken = true;
        self.setup.fail(error);
    }

    fn diverge(&mut self, seq: u64, journal: String, replay: String) {
        let run = self.setup.lease.run.clone();
        self.fail(DurableError::Diverged {
            run,
            seq,
            journal,
            replay,
        });
    }

    /// Whether `node` runs but has no attempt to poll: requested and waiting for its
    /// `Requested` to commit, or (replaying) between a failed attempt and the next.
    pub(super) fn is_waiting(&self, node: u32) -> bool {
        self.held.iter().any(|&(n, _)| n == node) || self.backoff.contains(&node)
    }

    fn unhold(&mut self, node: u32) -> bool {
        match self.held.iter().position(|&(n, _)| n == node) {
            Some(i) => {
                self.held.remove(i);
                true
            }
            None => false,
        }
    }

    /// The context of an attempt of `node` (its idempotency key).
    pub(super) fn ctx(&self, node: &'static str, attempt: u32) -> AttemptCtx {
        attempt_ctx(&self.run, node, attempt)
    }

    /// Keeps the output a node captured, for the batch with its `Completed`.
    pub(super) fn capture(&mut self, node: u32, ctx: AttemptCtx) {
        if let Some((type_name, bytes)) = ctx.captured {
            self.pending.outputs.push(StoredOutput {
                node,
                instance: String::new(),
                type_name: type_name.to_owned(),
                bytes,
            });
        }
    }

    /// Polls the commit in flight, or submits the pending batch. `Ready(true)`: a commit
    /// completed; `Ready(false)`: nothing to commit, or the commit failed (`broken`).
    fn pump(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        loop {
            if let Some((commit, end)) = &mut self.commit {
                let end = *end;
                return match commit.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Ok(_)) => {
                        self.commit = None;
                        self.durable_seq = end;
                        self.renewed = tokio::time::Instant::now();
                        Poll::Ready(true)
                    }
                    Poll::Ready(Err(error)) => {
                        self.commit = None;
                        self.fail(DurableError::Store(error));
                        Poll::Ready(false)
                    }
                };
            }
            if self.pending.events.is_empty()
                && self.pending.outputs.is_empty()
                && self.pending.timers.is_empty()
                && self.pending.waits.is_empty()
                && self.pending.consumed.is_empty()
                && self.pending.tasks.is_empty()
                && !self.renewal_due(cx)
            {
                return Poll::Ready(false);
            }
            // Something to write, or an empty batch that only extends the lease.
            let end = self.pending.end_seq();
            let batch = std::mem::replace(
                &mut self.pending,
                Batch::new(&self.setup.lease, end, self.setup.extend),
            );
            self.note_timers(&batch.timers);
            let store = Arc::clone(&self.setup.store);
            self.commit = Some((Box::pin(async move { store.commit(batch).await }), end));
        }
    }

    /// Commits everything pending, the run's end with it, then gives up the run's lease (a
    /// run stopped by a failed commit can be resumed at once). Called once, after
    /// `RunFinished`.
    async fn finish(&mut self, status: RunStatus) {
        match self.unloading {
            Some(wake_at_ms) => self.commit_unload(wake_at_ms).await,
            None => self.commit_end(status).await,
        }
        let lease = &self.setup.lease;
        // Best effort: a lease that is not released expires by itself.
        let _ = self
            .setup
            .store
            .release(&lease.owner, std::slice::from_ref(lease))
            .await;
    }

    async fn commit_end(&mut self, status: RunStatus) {
        if self.broken {
            return;
        }
        if let Some((commit, end)) = self.commit.take() {
            match commit.await {
                Ok(_) => self.durable_seq = end,
                Err(error) => return self.fail(DurableError::Store(error)),
            }
        }
        if self.pending.events.is_empty() {
            // Replayed to the end: the journal holds everything already.
            return;
        }
        let end = self.pending.end_seq();
        let mut batch = std::mem::replace(
            &mut self.pending,
            Batch::new(&self.setup.lease, end, Duration::ZERO),
        );
        batch.status = Some(status);
        batch.end = Some(RunEnd {
            result: None,
            error: None,
        });
        if self.deadline.is_some() {
            batch.timers.push(TimerChange::Clear {
                key: crate::durable::run_deadline_key(),
            });
        }
        match self.setup.store.commit(batch).await {
            Ok(_) => self.durable_seq = end,
            Err(error) => self.fail(DurableError::Store(error)),
        }
    }
}

/// Unloading a run that waits (`DurableRunner::unload_when_waiting`).
impl Journal {
    /// Commits the status `Waiting` (everything else is durable already: the run unloads
    /// only with nothing pending and no commit in flight); on success the run's future
    /// returns `Ended::Unloaded`.
    async fn commit_unload(&mut self, wake_at_ms: Option<u64>) {
        let mut batch = Batch::new(&self.setup.lease, self.durable_seq, Duration::ZERO);
        batch.status = Some(RunStatus::Waiting);
        match self.setup.store.commit(batch).await {
            Ok(_) => self.setup.set_unloaded(wake_at_ms),
            Err(error) => self.setup.fail(DurableError::Store(error)),
        }
    }

    /// Whether this distributed run is unloaded as soon as it waits for tasks alone.
    fn unloads_tasks(&self) -> bool {
        self.tasks.is_some() && self.setup.unload_tasks
    }

    /// Whether the journal is live (the replay has ended); `true` for a run that has no
    /// journal to replay.
    pub(super) fn is_live(&self) -> bool {
        self.live
    }

    /// What is left of the run's deadline `full` by its stored timer (a resumed run's
    /// deadline counts from the run's start); `full` for a new run.
    pub(super) fn deadline_left(&self, full: Duration) -> Duration {
        let setup = &self.setup;
        setup
            .timers
            .iter()
            .find(|t| t.key == crate::durable::run_deadline_key())
            .map_or(full, |t| {
                Duration::from_millis(t.due_ms.saturating_sub(setup.now_ms))
            })
    }
}

/// What the compensation phase (`saga.rs`) needs of the journal.
impl Journal {
    /// Commits everything pending (after the commit in flight, if any). `false` when a commit
    /// failed or the replay diverged: the run stops.
    pub(super) async fn flush(&mut self) -> bool {
        while !self.broken && std::future::poll_fn(|cx| self.pump(cx)).await {}
        !self.broken
    }

    /// Drives `work` (a compensation's attempt, its backoff) while keeping the run's lease: a
    /// live run whose work lasts longer than a third of its lease renews it meanwhile, as the
    /// forward phase does between rounds. `None` when a renewal failed (the journal broke):
    /// the work is dropped.
    pub(super) async fn keep_lease<F: Future>(&mut self, work: F) -> Option<F::Output> {
        let mut work = std::pin::pin!(work);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = work.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            loop {
                match self.pump(cx) {
                    Poll::Ready(true) => continue,
                    Poll::Ready(false) if self.broken => return Poll::Ready(None),
                    Poll::Ready(false) | Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await
    }

    /// The compensation phase starts: the run's status becomes `Compensating` with the next
    /// commit (live; a replayed run has it already).
    pub(super) fn compensating(&mut self) {
        if !self.replaying() {
            self.pending.status = Some(RunStatus::Compensating);
        }
    }

    /// Whether a commit failed or the replay diverged.
    pub(super) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Replaying: the journal's next event, if it is an end of attempt `attempt` of `node`'s
    /// compensation (`Compensated`, `CompensationRetrying`, `CompensationFailed`), with its
    /// error text for a failure. `None`: the attempt has no recorded end (it runs now).
    pub(super) fn compensation_end(&self, node: u32, attempt: u32) -> Option<Result<(), String>> {
        let event = self.setup.events.get(self.cursor)?;
        if event.node != Some(node) || event.attempt != attempt {
            return None;
        }
        match event.kind.as_str() {
            "Compensated" => Some(Ok(())),
            "CompensationRetrying" | "CompensationFailed" => Some(Err(error_text(event))),
            _ => None,
        }
    }

    /// Whether the replay has journal events left.
    pub(super) fn replaying(&self) -> bool {
        !self.broken && self.cursor < self.setup.events.len()
    }

    /// What is left of the backoff of `node`'s compensation by its stored timer (the replay
    /// ended in that backoff); zero when no timer is stored.
    pub(super) fn compensation_backoff_left(&self, node: u32) -> Duration {
        let setup = &self.setup;
        setup
            .timers
            .iter()
            .find(|t| t.key == backoff_key(Some(node)))
            .map_or(Duration::ZERO, |t| {
                Duration::from_millis(t.due_ms.saturating_sub(setup.now_ms))
            })
    }

    /// The context of an attempt of `node`'s compensation (its idempotency key).
    pub(super) fn compensation_ctx(&self, node: &'static str, attempt: u32) -> AttemptCtx {
        let mut ctx = attempt_ctx(&self.run, node, attempt);
        ctx.attempt.set_compensation();
        ctx
    }
}

/// How long a run may go without a commit before it renews its lease: a third of the lease
/// the store gave (by the store's clock when it gave it, so a shorter lease than asked for
/// counts), at least [`MIN_RENEW`].
fn renew_every(setup: &JournalSetup) -> Duration {
    let granted = Duration::from_millis(setup.lease.until_ms.saturating_sub(now_ms()));
    let lease = if granted.is_zero() {
        setup.extend
    } else {
        granted.min(setup.extend)
    };
    (lease / 3).max(MIN_RENEW)
}

/// The timer of `node`'s backoff.
fn backoff_key(node: Option<u32>) -> TimerKey {
    timer_key(node, TimerKind::Backoff)
}

fn timer_key(node: Option<u32>, kind: TimerKind) -> TimerKey {
    TimerKey {
        node,
        instance: String::new(),
        kind,
    }
}

/// The timer of `node`, a `Delay` step.
fn delay_key(node: Option<u32>) -> TimerKey {
    TimerKey {
        node,
        instance: String::new(),
        kind: TimerKind::Delay,
    }
}

/// Whether the replay's event is the journal's: same kind, node and attempt, and for a
/// `Completed` the same branch.
fn same(journal: &StoredEvent, replay: &StoredEvent) -> bool {
    journal.seq == replay.seq
        && journal.kind == replay.kind
        && journal.node == replay.node
        && journal.attempt == replay.attempt
        && (journal.kind != "Completed" || journal.data == replay.data)
}

fn describe(event: &StoredEvent) -> String {
    let data = String::from_utf8_lossy(&event.data);
    match &event.node_name {
        Some(node) => format!(
            "`{}{}` of `{node}` attempt {}",
            event.kind,
            if data.is_empty() {
                String::new()
            } else {
                format!(" {data}")
            },
            event.attempt
        ),
        None => format!("`{}`", event.kind),
    }
}

/// The `error` field of a stored `Failed` or `Retrying` event.
fn error_text(event: &StoredEvent) -> String {
    serde_json::from_slice::<serde_json::Value>(&event.data)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "failed (no message stored)".to_owned())
}

/// The `cause` field of a stored `Aborted` event: `None` for a cancellation.
fn cause_field(event: &StoredEvent) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(&event.data)
        .ok()
        .and_then(|v| v.get("cause").and_then(|c| c.as_str()).map(str::to_owned))
}

/// A duration field (`{"secs":..,"nanos":..}`) of a stored event; zero when absent.
fn duration_field(event: &StoredEvent, field: &str) -> Duration {
    serde_json::from_slice::<serde_json::Value>(&event.data)
        .ok()
        .and_then(|v| serde_json::from_value::<Duration>(v.get(field)?.clone()).ok())
        .unwrap_or_default()
}

/// Whether the world (an operation's future, a timer) produces `kind`'s events, rather than
/// the scheduler's own decisions.
fn worldly(kind: NodeKind) -> bool {
    !matches!(
        kind,
        NodeKind::Decision | NodeKind::Gate | NodeKind::Cancel | NodeKind::Terminate
    )
}

impl Scheduler {
    /// A journaled attempt of `node` is over (ended, restored or never started): its node
    /// leaves the running set and its attempt is counted.
    fn end_attempt(&mut self, node: u32) {
        let attempts = self.nodes[node as usize].attempt;
        self.release(node);
        self.record_attempts(node, attempts, 1);
    }

    #[inline]
    fn journal_mut(&mut self) -> Option<&mut Journal> {
        self.journal.as_deref_mut()
    }

    /// Requests `node`'s first attempt in a durable run: its `Requested` goes to the batch;
    /// its future is made once that batch has committed.
    #[cold]
    #[inline(never)]
    pub(super) fn hold_first(&mut self, node: u32) -> Result<(), NodeError> {
        if let Some(after) = self.plan().policy(node as usize).deadline() {
            self.watch(node).deadline = Some(timer(after)?);
            // Stored with the `Requested`, so that a resume keeps the deadline's due time.
            if let Some(journal) = self.journal_mut()
                && journal.live
            {
                journal.pending.timers.push(TimerChange::Set {
                    key: timer_key(Some(node), TimerKind::NodeDeadline),
                    after,
                });
            }
        } else {
            // Every node of a durable run is polled the long way (`poll_watched`).
            self.watch(node);
        }
        self.hold(node);
        Ok(())
    }

    /// Requests the next attempt of `node` (a retry after its backoff), held as the first.
    #[cold]
    #[inline(never)]
    pub(super) fn hold_retry(&mut self, node: u32) {
        if let Some(watch) = self.watch_of(node) {
            watch.backoff = None;
            watch.timeout = None;
        }
        self.hold(node);
    }

    fn hold(&mut self, node: u32) {
        let state = &mut self.nodes[node as usize];
        state.attempt += 1;
        let attempt = state.attempt;
        self.emit(Some(node), attempt, || EventKind::Requested);
        let seq = self
            .recording
            .as_ref()
            .map_or(0, |r| r.seq.saturating_sub(1));
        if let Some(journal) = self.journal_mut() {
            journal.held.push((node, seq));
        }
        if self.graph.nodes[node as usize].kind == NodeKind::Signal {
            self.signal_requested(node);
        }
    }

    /// Starts the held attempts whose `Requested` is durable.
    fn release_durable(&mut self, leaves: &mut Leaves<'_>) {
        let Some(journal) = self.journal.as_deref_mut() else {
            return;
        };
        let durable = journal.durable_seq;
        let mut ready = Vec::new();
        journal.held.retain(|&(node, seq)| {
            if seq < durable {
                ready.push(node);
                false
            } else {
                true
            }
        });
        for node in ready {
            self.start_held(leaves, node);
        }
    }

    /// Makes the future of `node`'s requested attempt and sets its timeout.
    fn start_held(&mut self, leaves: &mut Leaves<'_>, node: u32) {
        if self.nodes[node as usize].status != NodeStatus::Running {
            return;
        }
        // A task's attempt runs on whichever worker claims it: nothing to start here.
        let started = match self.is_task(node) {
            true => Ok(()),
            false => catch_unwind(AssertUnwindSafe(|| leaves[node as usize].as_mut().start())),
        };
        let timeout = match started {
            Err(payload) => Err(NodeError::Panicked(panic_message(payload))),
            Ok(()) if self.is_task(node) => self.task_timeout(node).map(timer).transpose(),
            Ok(()) => self.node_policy(node).timeout().map(timer).transpose(),
        };
        let timeout = match timeout {
            Ok(timeout) if self.graph.nodes[node as usize].kind == NodeKind::Delay => {
                self.start_delay(leaves, node);
                Ok(timeout)
            }
            other => other,
        };
        match timeout {
            Ok(timeout) => {
                self.nodes[node as usize].fresh = true;
                self.watch(node).timeout = timeout;
                self.due.push(node);
            }
            Err(error) => {
                leaves[node as usize].as_mut().stop();
                self.end_attempt(node);
                self.fail(node, error);
            }
        }
    }

    /// A started `Delay` step: a fresh one records its `TimerSet` (whose batch stores the
    /// timer); one whose `TimerSet` the replay found waits what is left of the stored timer.
    fn start_delay(&mut self, leaves: &mut Leaves<'_>, node: u32) {
        let Some(journal) = self.journal.as_deref_mut() else {
            return;
        };
        if let Some(i) = journal.timer_set.iter().position(|&n| n == node) {
            journal.timer_set.swap_remove(i);
            let setup = &journal.setup;
            let left = setup
                .timers
                .iter()
                .find(|t| t.key == delay_key(Some(node)))
                .map_or(Duration::ZERO, |t| {
                    Duration::from_millis(t.due_ms.saturating_sub(setup.now_ms))
                });
            leaves[node as usize].as_mut().resume_timer(left);
            return;
        }
        if let Some(after) = leaves[node as usize].delay() {
            let attempt = self.nodes[node as usize].attempt;
            self.emit(Some(node), attempt, || EventKind::TimerSet { after });
        }
    }

    /// Polls `node`'s attempt with its idempotency key set, and keeps the output it stored.
    pub(super) fn poll_journaled(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
        given: Option<(
            super::attempt::PollResult,
            Option<&'static crate::scope::OperationSpec>,
        )>,
    ) -> Poll<Result<(), NodeError>> {
        let name = self.graph.nodes[node as usize].name;
        let attempt = self.nodes[node as usize].attempt;
        let Some(journal) = self.journal.as_deref() else {
            return self.poll_attempt(leaves, node, cx, given);
        };
        if journal.tasks.is_some() && self.is_task(node) {
            return self.poll_task(leaves, node, cx);
        }
        let mut ctx = journal.ctx(name, attempt);
        let signal = self.graph.nodes[node as usize].kind == NodeKind::Signal;
        if signal {
            ctx.signal = Some(self.signal_ctx(node));
        }
        let (polled, mut ctx) = with_attempt(ctx, || self.poll_attempt(leaves, node, cx, given));
        if signal {
            self.signal_polled(node, &mut ctx);
        }
        if let (Poll::Ready(Ok(())), Some(journal)) = (&polled, self.journal.as_deref_mut()) {
            journal.capture(node, ctx);
        }
        polled
    }

    /// Applies the next journal event if the world produced it (replay). Returns whether it
    /// applied one.
    fn apply_journal(&mut self, leaves: &mut Leaves<'_>) -> bool {
        let Some(journal) = self.journal.as_deref() else {
            return false;
        };
        if journal.broken {
            return false;
        }
        let Some(event) = journal.setup.events.get(journal.cursor).cloned() else {
            return false;
        };
        let Some(node) = event.node.filter(|&n| (n as usize) < self.len()) else {
            return false;
        };
        if !worldly(self.graph.nodes[node as usize].kind) {
            return false;
        }
        let running = self.nodes[node as usize].status == NodeStatus::Running;
        match event.kind.as_str() {
            "Completed" | "Failed" => {
                let Some(journal) = self.journal_mut() else {
                    return false;
                };
                if !running || !journal.unhold(node) {
                    return false;
                }
                if event.kind == "Completed" {
                    self.restore(leaves, node);
                } else {
                    let error = self.replayed_error(node, &event);
                    self.end_attempt(node);
                    self.fail(node, error);
                }
            }
            "TimerSet" => {
                let Some(journal) = self.journal_mut() else {
                    return false;
                };
                if !running || !journal.held.iter().any(|&(n, _)| n == node) {
                    return false;
                }
                journal.timer_set.push(node);
                let after = duration_field(&event, "after");
                self.emit(Some(node), event.attempt, || EventKind::TimerSet { after });
            }
            "TimerFired" => {
                let Some(journal) = self.journal_mut() else {
                    return false;
                };
                if !running || !journal.unhold(node) {
                    return false;
                }
                journal.timer_set.retain(|&n| n != node);
                self.end_attempt(node);
                // Emits the `TimerFired` and the `Completed` the journal holds.
                self.settle(node, Settle::Completed);
            }
            "SignalReceived" => {
                let Some(journal) = self.journal_mut() else {
                    return false;
                };
                if !running || !journal.unhold(node) {
                    return false;
                }
                self.signal_replayed(node);
                // Restores the payload stored as the step's output, and emits the
                // `SignalReceived` and the `Completed` the journal holds.
                self.restore(leaves, node);
            }
            "SignalRejected" => {
                if !running {
                    return false;
                }
                self.emit_rejected(node, &event);
            }
            "TimedOut" => {
                let after = duration_field(&event, "after");
                self.emit(Some(node), event.attempt, || EventKind::TimedOut { after });
            }
            "Retrying" => {
                let Some(journal) = self.journal_mut() else {
                    return false;
                };
                if !running || !journal.unhold(node) {
                    return false;
                }
                journal.backoff.push(node);
                let error = NodeError::Failed(error_text(&event).into());
                let rendered = self.record_attempt_error(node, &error);
                let delay = duration_field(&event, "delay");
                self.emit(Some(node), event.attempt, || EventKind::Retrying {
                    error: rendered,
                    delay,
                });
            }
            "Requested" if event.attempt > 1 => {
                let Some(journal) = self.journal_mut() else {
                    return false;
                };
                let Some(i) = journal.backoff.iter().position(|&n| n == node) else {
                    return false;
                };
                journal.backoff.remove(i);
                journal.held.push((node, event.seq));
                self.nodes[node as usize].attempt = event.attempt;
                self.emit(Some(node), event.attempt, || EventKind::Requested);
            }
            _ => return false,
        }
        true
    }

    /// The error of `node`'s journaled `Failed`: a timeout when the journal's event before
    /// it is the same attempt's `TimedOut`, the step's deadline when its text is that
    /// deadline's, else the stored message (an operation's own error type, a panic, are not
    /// stored: only their message is).
    fn replayed_error(&self, node: u32, failed: &StoredEvent) -> NodeError {
        let text = error_text(failed);
        let before = self.journal.as_deref().and_then(|j| {
            let at = usize::try_from(failed.seq.checked_sub(1)?).ok()?;
            j.setup.events.get(at)
        });
        if let Some(before) = before
            && before.kind == "TimedOut"
            && before.node == failed.node
            && before.attempt == failed.attempt
        {
            let error = NodeError::TimedOut(duration_field(before, "after"));
            if error.to_string() == text {
                return error;
            }
        }
        if let Some(after) = self.node_policy(node).deadline() {
            let error = NodeError::DeadlineExceeded(after);
            if error.to_string() == text {
                return error;
            }
        }
        NodeError::Failed(text.into())
    }

    /// Restores a completed node from the journal: its future runs with the stored output to
    /// put in its slot, which it does before anything of the user's code.
    fn restore(&mut self, leaves: &mut Leaves<'_>, node: u32) {
        let bytes = self.journal.as_deref().map_or_else(Vec::new, |j| {
            j.setup.outputs.get(&node).cloned().unwrap_or_default()
        });
        let name = self.graph.nodes[node as usize].name;
        let attempt = self.nodes[node as usize].attempt;
        let mut ctx = self
            .journal
            .as_deref()
            .map(|j| j.ctx(name, attempt))
            .unwrap_or_else(|| attempt_ctx(&Arc::from(""), name, attempt));
        ctx.restore = Some(bytes);
        let mut cx = Context::from_waker(Waker::noop());
        let (polled, _) = with_attempt(ctx, || {
            catch_unwind(AssertUnwindSafe(|| {
                let mut leaf = leaves[node as usize].as_mut();
                leaf.as_mut().start();
                leaf.poll(&mut cx)
            }))
        });
        let result = match polled {
            Ok(Poll::Ready(result)) => result,
            Ok(Poll::Pending) => Err(NodeError::Internal(
                "a durable step did not restore its stored output",
            )),
            Err(payload) => Err(NodeError::Panicked(panic_message(payload))),
        };
        leaves[node as usize].as_mut().stop();
        self.end_attempt(node);
        match result {
            Ok(()) => self.settle(node, Settle::Completed),
            Err(error) => self.fail(node, error),
        }
    }

    /// The end of the replay: attempts in flight start again (same attempt number), nodes in
    /// backoff wait what is left of it.
    fn go_live(&mut self, leaves: &mut Leaves<'_>) {
        let Some(journal) = self.journal.as_deref_mut() else {
            return;
        };
        journal.live = true;
        if journal.setup.waiting {
            // An unloaded run runs again.
            journal.pending.status = Some(RunStatus::Running);
        }
        let backoff = std::mem::take(&mut journal.backoff);
        let setup = Arc::clone(&journal.setup);
        // Deadlines keep their due time by the store's clock.
        for stored in &setup.timers {
            let Some(node) = stored.key.node else {
                continue;
            };
            if stored.key.kind != TimerKind::NodeDeadline
                || (node as usize) >= self.len()
                || self.nodes[node as usize].status != NodeStatus::Running
            {
                continue;
            }
            let left = Duration::from_millis(stored.due_ms.saturating_sub(setup.now_ms));
            match timer(left) {
                Ok(deadline) => {
                    self.watch(node).deadline = Some(deadline);
                    self.due.push(node);
                }
                Err(error) => {
                    self.end_attempt(node);
                    self.fail(node, error);
                }
            }
        }
        for node in backoff {
            let left = setup
                .timers
                .iter()
                .find(|t| t.key == backoff_key(Some(node)))
                .map_or(Duration::ZERO, |t| {
                    Duration::from_millis(t.due_ms.saturating_sub(setup.now_ms))
                });
            match timer(left) {
                Ok(backoff) => {
                    self.watch(node).backoff = Some(backoff);
                    self.due.push(node);
                }
                Err(error) => {
                    self.end_attempt(node);
                    self.fail(node, error);
                }
            }
        }
        self.release_durable(leaves);
    }

    /// The run loop's step for a durable run, after each `poll` of the scheduler: replays,
    /// commits, and starts what a commit made durable, until nothing more can happen now.
    #[cold]
    #[inline(never)]
    pub(super) fn journal_poll(
        &mut self,
        leaves: &mut Leaves<'_>,
        wakes: &mut Option<Arc<WakeSet>>,
        cx: &mut Context<'_>,
        mut poll: Poll<()>,
    ) -> Poll<()> {
        loop {
            let Some(journal) = self.journal.as_deref_mut() else {
                return poll;
            };
            if journal.broken {
                if self.halt.is_none() {
                    self.set_halt(Halt::Cancelled(CancelReason::Token));
                }
                self.stop_all(leaves);
                return Poll::Ready(());
            }
            if !journal.live {
                if journal.cursor < journal.setup.events.len() {
                    if self.replay_cancel(leaves) {
                        return Poll::Ready(());
                    }
                    if self.apply_journal(leaves) {
                        poll = self.poll(leaves, wakes, cx);
                        continue;
                    }
                    if poll.is_ready() {
                        // `RunFinished` is compared when the run finishes.
                        return poll;
                    }
                    let before = self.journal.as_deref().map_or(0, |j| j.cursor);
                    poll = self.poll(leaves, wakes, cx);
                    if let Some(journal) = self.journal.as_deref_mut()
                        && journal.cursor == before
                        && !journal.broken
                        && let Some(event) = journal.setup.events.get(before)
                    {
                        let seq = event.seq;
                        let what = describe(event);
                        journal.diverge(seq, what, "has nothing left to do there".to_owned());
                    }
                    continue;
                }
                self.go_live(leaves);
                poll = self.poll(leaves, wakes, cx);
                continue;
            }
            if poll.is_ready() {
                return poll;
            }
            if journal.inbox.is_some() && self.poll_signals(cx) {
                // A waiting `Signal` step was handed a signal: poll it now.
                poll = self.poll(leaves, wakes, cx);
                continue;
            }
            if self.journal.as_deref().is_some_and(|j| j.tasks.is_some()) && self.poll_tasks(cx) {
                // A task's outcome is known: its node takes it now.
                poll = self.poll(leaves, wakes, cx);
                continue;
            }
            let Some(journal) = self.journal.as_deref_mut() else {
                return poll;
            };
            match journal.pump(cx) {
                Poll::Ready(true) => {
                    self.release_durable(leaves);
                    poll = self.poll(leaves, wakes, cx);
                }
                Poll::Ready(false) if journal.broken => {}
                Poll::Ready(false)
                    if (journal.setup.unload.is_some() || journal.unloads_tasks())
                        && self.unload_idle(leaves) =>
                {
                    return Poll::Ready(());
                }
                Poll::Ready(false) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Scheduler {
    /// Replaying: when the journal's next event is an `Aborted` without a cause, the run was
    /// cancelled there (its deadline passed, or its token): cancels it again, which emits the
    /// journal's `Aborted` events, and returns `true`.
    fn replay_cancel(&mut self, leaves: &mut Leaves<'_>) -> bool {
        let Some(journal) = self.journal.as_deref() else {
            return false;
        };
        let Some(event) = journal.setup.events.get(journal.cursor) else {
            return false;
        };
        if event.kind != "Aborted" || cause_field(event).is_some() {
            return false;
        }
        let reason = match journal.deadline {
            Some((_, after)) => CancelReason::Deadline(after),
            None => CancelReason::Token,
        };
        self.set_halt(Halt::Cancelled(reason));
        self.stop_all(leaves);
        true
    }

    /// With nothing to commit: when every running node waits (for a timer due later than the
    /// run's `unload` threshold from now, or for a signal), stops the run to unload it (its
    /// nodes are dropped, nothing more is journaled; `finish_journaled` commits the status
    /// `Waiting`) and returns `true`.
    #[cold]
    #[inline(never)]
    fn unload_idle(&mut self, leaves: &mut Leaves<'_>) -> bool {
        let Some(journal) = self.journal.as_deref() else {
            return false;
        };
        if journal.commit.is_some() {
            return false;
        }
        // Without `unload`, a distributed run is unloaded only when it waits for tasks alone.
        let tasks_only = journal.setup.unload.is_none();
        let Some(after) = journal
            .setup
            .unload
            .or(journal.unloads_tasks().then_some(Duration::ZERO))
        else {
            return false;
        };
        if self
            .nest_home
            .as_deref()
            .is_some_and(|home| !home.lingering.is_empty())
        {
            return false;
        }
        let now = tokio::time::Instant::now();
        let Some(horizon) = now.checked_add(after) else {
            return false;
        };
        let mut wake = journal.deadline.map(|(at, _)| at);
        let mut running = false;
        for node in 0..self.len() as u32 {
            if self.nodes[node as usize].status != NodeStatus::Running {
                continue;
            }
            running = true;
            // `Leaf::idle` does not see a step's future: a `Signal` step's wait is the
            // journal's (its inbox).
            // A task out with a worker waits as a signal does: no due time of its own (its
            // completion makes the run due in the store); its timeout and deadline count below.
            let task = self.task_idle(node);
            if tasks_only && !task {
                return false;
            }
            let idle = match task {
                true => Some(Idle::Signal),
                false => leaves[node as usize]
                    .idle()
                    .or_else(|| self.signal_idle(node).then_some(Idle::Signal)),
            };
            match idle {
                Some(Idle::Until(at)) => wake = Some(wake.map_or(at, |w| w.min(at))),
                Some(Idle::Signal) => {}
                None => return false,
            }
            // The node's own timers (an attempt's timeout, its deadline) count as well.
            if let Some(watch) = self.watch_of(node) {
                for sleep in [&watch.timeout, &watch.deadline, &watch.backoff]
                    .into_iter()
                    .flatten()
                {
                    let at = sleep.deadline();
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                }
            }
        }
        if !running || wake.is_some_and(|at| at <= horizon) {
            return false;
        }
        let wake_at_ms = wake.map(|at| {
            let left = at.saturating_duration_since(now);
            crate::store::due_after(crate::store::now_ms(), left)
        });
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.unloading = Some(wake_at_ms);
            journal.broken = true;
        }
        // The run stops as a process that exits would: observers see no event of it.
        self.recording = None;
        self.set_halt(Halt::Cancelled(CancelReason::Token));
        self.stop_all(leaves);
        true
    }
}

/// Ends a durable run: `RunFinished` and the run's status are committed before the run's
/// future returns.
pub(super) async fn finish_journaled(mut scheduler: Scheduler) -> Finished {
    let (statuses, verdict, succeeded) = scheduler.conclude();
    let status = if scheduler.cancelled.is_some() {
        RunStatus::Cancelled
    } else if succeeded {
        RunStatus::Succeeded
    } else {
        RunStatus::Failed
    };
    if let Some(journal) = scheduler.journal.as_deref_mut() {
        if journal.cursor < journal.setup.events.len() && !journal.broken {
            let event = &journal.setup.events[journal.cursor];
            let (seq, what) = (event.seq, describe(event));
            journal.diverge(seq, what, "had ended the run".to_owned());
        }
        journal.finish(status).await;
    }
    scheduler.into_finished(statuses, verdict)
}
