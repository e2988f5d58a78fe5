//! The journal of a durable run: the write-ahead gate and the replay.
//!
//! A [`Journal`] is the scheduler's [`Hook`] for a durable run (`durable::drive` hands it to
//! the run beside its options): the scheduler gives it every event and calls its [`Steps`] at
//! the few points the hook interface names (`scheduler/hook.rs`); everything it does to the
//! run goes through [`Run`]. A plain run has no hook and never reaches this module. The rules:
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
//! next events of the run's own nodes, in order (the events of nest instances are stored but not
//! replayed: an instance's end is an output row, see `attempt::Records`), else the replay stops with [`DurableError::Diverged`];
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

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::attempt::{Nested, Records};
use crate::durable::child::{self, ChildCtx};
use crate::durable::operations::Replay;
use crate::durable::{AttemptCtx, DurableError, JournalSetup, attempt_ctx, with_attempt};
use crate::error::NodeError;
use crate::events::{Event, EventKind};
use crate::graph::{Graph, NodeKind};
use crate::nodes::Idle;
use crate::panic::{NO_TIMER, panic_message, timer};
use crate::policy::CancelReason;
use crate::report::HookEnd;
use crate::scheduler::{AttemptScope, Before, Hook, HookFuture, Run, RunEnd, Scope, Steps};
use crate::status::NodeStatus;
use crate::store::{
    Batch, Committed, RunEnd as StoredEnd, RunStatus, StoreFuture, StoredEvent, StoredOutput,
    TaskChange, TaskClaim, TaskOutcome, TimerChange, TimerKey, TimerKind, WaitChange, now_ms,
};

mod inbox;
mod remote;
mod requests;

pub(crate) use remote::{Mailbox, TaskRun};
pub(crate) use requests::{CANCEL_REQUESTED, TERMINATED};

/// A durable run's journal: what is pending, what is committing, what waits for a commit.
/// The run's [`Hook`]: the scheduler hands it every event and calls its [`Steps`].
pub(crate) struct Journal {
    setup: JournalSetup,
    run: Arc<str>,
    /// The ends of the run's nest instances: loaded, and ended since the last batch.
    records: Arc<Records>,
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
    deadline: Option<(tokio::time::Instant, Duration)>,
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
    /// The error that stopped the run, if one did.
    error: Option<DurableError>,
    /// The run was unloaded and its status `Waiting` committed, with its wake-up time.
    unloaded: Option<Option<u64>>,
    /// The run of a workflow that continues as new succeeded and its whole journal is
    /// durable, but its status is left for the run's future to settle once the workflow's
    /// output says whether it continues ([`Settle`]); its lease is kept for that.
    settle: bool,
    /// The last event recorded was compared with the journal (replayed), not added to a batch.
    last_replayed: bool,
    /// Outcomes of tasks handed over by the worker that the run stopped before journaling.
    undelivered: Vec<(TaskClaim, TaskOutcome)>,
    /// An operator's requests to the run (`requests.rs`); dropped when the forward phase
    /// ends.
    requests: Option<Box<requests::Requests>>,
    /// The run was terminated (with the operator's reason): its end is committed by
    /// `finish`, nothing else is.
    terminated: Option<Option<String>>,
    /// Each redrive of the run: the index in `setup.events` of its first event, and the steps
    /// that had failed with their last attempt (see `operations.rs`).
    epochs: Vec<(usize, Vec<(u32, u32)>)>,
    /// The steps that completed in a part of the journal a redrive cut off: requested live,
    /// each takes its stored output (`salvage`).
    salvage: Vec<u32>,
    /// The run was reopened to be undone (`operations::undo_run`) and has not cancelled
    /// itself yet: it does once live.
    undo: bool,
    /// By node, once live after a redrive: whether its end is the one the run had before
    /// (settled in the replay, or salvaged). A step is salvaged only when every step before
    /// it is: else its inputs may differ from those its stored output was made of.
    kept: Vec<bool>,
    /// By node: whether its events stay out of the journal (a version marker, decided by the
    /// run; a step on a marker's path the run does not take). Made by `attach`.
    unjournaled: Vec<bool>,
    /// The version markers whose old path the run takes.
    old_paths: Vec<u32>,
    /// A compatible change moved the run's steps, and the batch that moves its stored rows
    /// (`Batch::renumber`) is not durable yet: until it is, the store's task rows still have
    /// the old numbers, and the run does not look at them.
    moving: bool,
    /// The commit in flight carries the moves.
    moving_in_flight: bool,
    /// The run's metrics (nothing without feature `metrics`): in flight while the journal
    /// lives; the attempts it journals live; the latency of its commits.
    meter: crate::metrics::RunMeter,
}

/// The shortest time between two renewals of a lease.
const MIN_RENEW: Duration = Duration::from_millis(10);

impl Journal {
    /// The journal of a run set up as `setup` (its tasks are made when the run starts).
    pub(crate) fn new(mut setup: JournalSetup, meter: crate::metrics::RunMeter) -> Box<Journal> {
        let next = setup.next_seq;
        // The events of nest instances are not replayed (see `record_nested`; a store does not
        // load them), nor the events that a redrive cut off (`operations.rs`).
        let replay = Replay::of_moved(std::mem::take(&mut setup.events), &setup.renumber);
        setup.events = replay.events;
        let requests = requests::Requests::new(&setup.signals, setup.request_poll);
        Box::new(Journal {
            run: Arc::from(setup.lease.run.as_str()),
            records: Arc::new(Records::loaded(std::mem::take(&mut setup.instances))),
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
            renew: None,
            renew_tried: false,
            open: setup.timers.iter().map(|t| t.key.clone()).collect(),
            tasks: None,
            error: None,
            unloaded: None,
            settle: false,
            last_replayed: false,
            undelivered: Vec::new(),
            requests: Some(requests),
            terminated: None,
            epochs: replay.epochs,
            salvage: replay.salvage,
            undo: replay.undo,
            kept: Vec::new(),
            unjournaled: Vec::new(),
            old_paths: Vec::new(),
            moving: false,
            moving_in_flight: false,
            meter,
            renew_every: renew_every(&setup),
            setup,
        })
    }

    /// The last attempt of `node` before the redrives that apply where the replay stands (all
    /// of them once live): its next attempt is numbered after it and has the step's whole
    /// retry budget. 0 for a run never redriven.
    fn floor(&self, node: u32) -> u32 {
        self.epochs
            .iter()
            .filter(|&&(start, _)| self.live || start <= self.cursor)
            .flat_map(|(_, floors)| floors.iter())
            .filter(|&&(n, _)| n == node)
            .map(|&(_, attempt)| attempt)
            .max()
            .unwrap_or(0)
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
    fn record(&mut self, event: &Event) {
        if event.path.is_some() {
            return self.record_nested(event);
        }
        // A version marker and the path the run does not take leave no trace: a run's markers
        // are fixed when it starts, so every replay decides them the same way.
        if let Some(node) = event.node
            && self.unjournaled.get(node as usize) == Some(&true)
        {
            return;
        }
        self.last_replayed = false;
        if self.broken {
            return;
        }
        if let EventKind::Failed { error } = &event.kind
            && error.contains(NO_TIMER)
            && !self.journaled_failure(event.node, error)
        {
            // Not the step's failure: this process cannot run it. Nothing more is written.
            return self.environment();
        }
        if let EventKind::Failed { error }
        | EventKind::Retrying { error, .. }
        | EventKind::CompensationRetrying { error, .. }
        | EventKind::CompensationFailed { error } = &event.kind
            && error.contains(child::CHILD_STOPPED)
            && !self.journaled_failure(event.node, error)
        {
            // Not the step's failure: its child run stopped, and goes on when it is resumed.
            let (run, why) = (self.run.to_string(), error.to_string());
            return self.fail(DurableError::Child { run, why });
        }
        let stored = match StoredEvent::try_from(event) {
            Ok(stored) => stored,
            Err(error) => return self.fail(DurableError::Store(error)),
        };
        if let Some(journal) = self.setup.events.get(self.cursor) {
            self.meter.replayed(event);
            self.last_replayed = true;
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
        // The journal numbers its events itself: the run's log also numbers the events of
        // its nest instances, which the journal does not hold (their ends are outputs).
        let mut stored = stored;
        stored.seq = self.pending.end_seq();
        self.pending.events.push(stored);
        self.meter.recorded(event);
    }

    /// Takes an event of a nest instance (it has a path): added to the pending batch. The
    /// journal does not replay them: a resumed run takes each instance's end from its record
    /// (`attempt::Records`), and runs again the instances that had not ended.
    fn record_nested(&mut self, event: &Event) {
        if self.broken || !self.live {
            return;
        }
        match StoredEvent::try_from(event) {
            Ok(mut stored) => {
                stored.seq = self.pending.end_seq();
                self.pending.events.push(stored);
                self.meter.recorded(event);
            }
            Err(error) => self.fail(DurableError::Store(error)),
        }
    }

    /// The journal's sequence number of the last event recorded (replayed or added).
    fn last_seq(&self) -> u64 {
        match self.last_replayed {
            true => self
                .cursor
                .checked_sub(1)
                .and_then(|at| self.setup.events.get(at))
                .map_or(0, |event| event.seq),
            false => self.pending.end_seq().saturating_sub(1),
        }
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

    /// Replaying: whether the journal's next event is this failure of `node` with this
    /// error (a journal written before a missing timer stopped runs instead of failing them).
    fn journaled_failure(&self, node: Option<u32>, error: &str) -> bool {
        self.setup.events.get(self.cursor).is_some_and(|journal| {
            journal.kind == "Failed" && journal.node == node && error_text(journal) == error
        })
    }

    /// This process cannot run the run (no tokio time driver): it stops, writing nothing
    /// more, and stays as it is in the store, to be resumed where a timer can be made.
    fn environment(&mut self) {
        let run = self.run.to_string();
        self.fail(DurableError::Environment {
            run,
            why: format!("{NO_TIMER} (this process polls it without one)"),
        });
    }

    fn fail(&mut self, error: DurableError) {
        self.broken = true;
        if self.error.is_none() {
            self.error = Some(error);
        }
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
    fn is_waiting(&self, node: u32) -> bool {
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

    /// The context of an attempt of `node` (its idempotency key); `nest`: the node is a nest
    /// node, whose instances record their ends.
    fn ctx(&self, node: &'static str, attempt: u32, nest: bool) -> AttemptCtx {
        let mut ctx = attempt_ctx(&self.run, node, attempt);
        if nest {
            ctx.nest = Some(Nested {
                records: Arc::clone(&self.records),
                within: Arc::from(""),
                solo: None,
            });
        }
        ctx
    }

    /// Moves the ends of nest instances since the last batch into the pending one; `false`
    /// when an instance stopped the run (the journal is broken).
    fn take_instances(&mut self) -> bool {
        if let Some((record, reason)) = self.records.broken() {
            if !self.broken {
                self.fail(DurableError::Instance {
                    run: self.run.to_string(),
                    instance: record,
                    reason,
                });
            }
            return false;
        }
        if self.broken {
            return false;
        }
        for end in self.records.take_ended() {
            if end.remote {
                // Its task's outcome is journaled: the task is closed with this batch.
                if let Some(tasks) = self.tasks.as_deref_mut() {
                    tasks.journaled(end.node, &end.record);
                }
                self.pending.tasks.push(TaskChange::Close {
                    node: end.node,
                    instance: end.record.clone(),
                });
            }
            let superseded = self.records.supersede(end.node, &end.record);
            self.pending.superseded.extend(superseded);
            self.pending.outputs.push(StoredOutput {
                node: end.node,
                instance: end.record,
                type_name: end.type_name.to_owned(),
                bytes: end.bytes,
            });
        }
        if self.live && self.tasks.is_some() {
            // The instances executed as tasks: opened as their futures ask, closed as they
            // are dropped before their end (the nest failed, or was withdrawn).
            // Closes first: an instance dropped and asked for again before this batch keeps
            // its task.
            let changes = self.records.tasks();
            for (node, instance) in changes.close {
                self.pending
                    .tasks
                    .push(TaskChange::Close { node, instance });
            }
            for (node, instance) in changes.open {
                let attempt = remote::instance_attempt(&instance);
                self.pending.tasks.push(TaskChange::Open {
                    node,
                    instance,
                    attempt,
                });
            }
        }
        true
    }

    /// Keeps the output a node captured, for the batch with its `Completed`.
    fn capture(&mut self, node: u32, ctx: AttemptCtx) {
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
                        if std::mem::take(&mut self.moving_in_flight) {
                            self.moving = false;
                        }
                        self.renewed = tokio::time::Instant::now();
                        self.meter.committed();
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
                && self.pending.graph.is_none()
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
            self.moving_in_flight = !batch.renumber.is_empty();
            self.meter.committing();
            let store = Arc::clone(&self.setup.store);
            self.commit = Some((Box::pin(async move { store.commit(batch).await }), end));
        }
    }

    /// Commits everything pending, the run's end with it, then gives up the run's lease (a
    /// run stopped by a failed commit can be resumed at once). Called once, after
    /// `RunFinished`.
    ///
    /// The looks at the store that the run's polls started are dropped first
    /// ([`Journal::stop_looking`]).
    async fn finish_run(&mut self, status: RunStatus) {
        self.stop_looking();
        match (self.terminated.take(), self.unloading) {
            (Some(reason), _) => self.commit_terminated(reason).await,
            (None, Some(wake_at_ms)) => self.commit_unload(wake_at_ms).await,
            (None, None) => self.commit_end(status).await,
        }
        // Outcomes the worker handed over that the run did not journal: stored as a worker
        // stores any (the next owner of the run takes them from there). Best effort: a task
        // whose outcome is not stored is executed again once its claim lapses.
        for (claim, outcome) in std::mem::take(&mut self.undelivered) {
            let _ = self.setup.store.complete_task(&claim, outcome).await;
        }
        if self.settle {
            // The run's future settles the run and gives the lease back.
            return;
        }
        let lease = &self.setup.lease;
        // Best effort: a lease that is not released expires by itself.
        let _ = self
            .setup
            .store
            .release(&lease.owner, std::slice::from_ref(lease))
            .await;
    }

    /// Commits the run's termination: what is pending (its `Terminated` event, the request's
    /// consumption), the status `cancelled` and the end; every timer is cleared. The run's
    /// caller gets [`DurableError::Terminated`].
    async fn commit_terminated(&mut self, reason: Option<String>) {
        if let Some((commit, end)) = self.commit.take() {
            match commit.await {
                Ok(_) => {
                    self.durable_seq = end;
                    self.meter.committed();
                }
                Err(error) => return self.fail_over(DurableError::Store(error)),
            }
        }
        self.clear_timers(None);
        let end = self.pending.end_seq();
        let mut batch = std::mem::replace(
            &mut self.pending,
            Batch::new(&self.setup.lease, end, Duration::ZERO),
        );
        batch.status = Some(RunStatus::Cancelled);
        batch.end = Some(StoredEnd {
            result: None,
            error: Some(crate::durable::operations::terminated_text(
                reason.as_deref(),
            )),
        });
        batch.timers.push(TimerChange::Clear {
            key: crate::durable::run_deadline_key(),
        });
        match self.setup.store.commit(batch).await {
            Ok(_) => {
                self.durable_seq = end;
                self.meter.finished(RunStatus::Cancelled.as_str());
                self.cancel_children().await;
                let run = self.run.to_string();
                self.fail_over(requests::terminated_error(&run, reason));
            }
            Err(error) => self.fail_over(DurableError::Store(error)),
        }
    }

    /// Sets the run's error, replacing any.
    fn fail_over(&mut self, error: DurableError) {
        self.broken = true;
        self.error = Some(error);
    }

    async fn commit_end(&mut self, status: RunStatus) {
        if !self.take_instances() {
            return;
        }
        if let Some((commit, end)) = self.commit.take() {
            match commit.await {
                Ok(_) => {
                    self.durable_seq = end;
                    self.meter.committed();
                }
                Err(error) => return self.fail(DurableError::Store(error)),
            }
        }
        // A workflow that continues as new: its success is settled by the run's future,
        // which reads the output (`Continue::Again` or `Done`) once the journal is durable.
        let defer = self.setup.continues && status == RunStatus::Succeeded;
        // A deferred end keeps the run's lease for its settling; an end gives it up.
        let lease = match defer {
            true => self.setup.extend,
            false => Duration::ZERO,
        };
        if self.pending.events.is_empty() && !(defer && self.pending.graph.is_some()) {
            // Replayed to the end: the journal holds everything already.
            self.settle = defer && !self.broken;
            return;
        }
        // (A replay to the end that adopted a changed graph commits it before the run is
        // settled: the next generation starts with the graph it runs.)
        let end = self.pending.end_seq();
        let mut batch =
            std::mem::replace(&mut self.pending, Batch::new(&self.setup.lease, end, lease));
        if !defer {
            batch.status = Some(status);
            batch.end = Some(StoredEnd {
                result: None,
                error: None,
            });
        }
        if self.deadline.is_some() {
            batch.timers.push(TimerChange::Clear {
                key: crate::durable::run_deadline_key(),
            });
        }
        match self.setup.store.commit(batch).await {
            Ok(_) => {
                self.durable_seq = end;
                self.settle = defer;
                if !defer {
                    self.meter.finished(status.as_str());
                }
                self.cancel_children().await;
            }
            Err(error) => self.fail(DurableError::Store(error)),
        }
    }

    /// Asks the child runs of this run that have not ended to cancel, once the run's end is
    /// durable (a run whose graph has `Workflow` steps).
    async fn cancel_children(&mut self) {
        if self.setup.children {
            let generation = self.setup.continues.then_some(self.setup.generation);
            child::cancel_orphans(&*self.setup.store, &self.run, generation).await;
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
        batch.graph = self.pending.graph.take();
        batch.renumber = std::mem::take(&mut self.pending.renumber);
        match self.setup.store.commit(batch).await {
            Ok(_) => self.unloaded = Some(wake_at_ms),
            Err(error) => self.fail(DurableError::Store(error)),
        }
    }

    /// How long this distributed run is kept once it waits for tasks alone before it is
    /// unloaded (zero: not at all); `None` when it is not unloaded for its tasks.
    fn unloads_tasks(&self) -> Option<Duration> {
        self.setup.unload_tasks.filter(|_| self.tasks.is_some())
    }

    /// What is left of the stored timer `key` by the store's clock; zero when none is stored.
    fn left(&self, key: &TimerKey) -> Duration {
        let setup = &self.setup;
        setup
            .timers
            .iter()
            .find(|t| &t.key == key)
            .map_or(Duration::ZERO, |t| {
                Duration::from_millis(t.due_ms.saturating_sub(setup.now_ms))
            })
    }

    /// What is left of the run's deadline `full` by its stored timer (a resumed run's
    /// deadline counts from the run's start); `full` for a new run.
    fn deadline_left(&self, full: Duration) -> Duration {
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

/// What the compensation phase (`scheduler/compensate.rs`, through the hook) needs of the journal.
impl Journal {
    /// Commits everything pending (after the commit in flight, if any). `false` when a commit
    /// failed or the replay diverged: the run stops.
    async fn flush(&mut self) -> bool {
        while !self.broken && std::future::poll_fn(|cx| self.pump(cx)).await {}
        !self.broken
    }

    /// Drops the looks at the store (for task outcomes and signals) that the forward phase's
    /// polls started: once it has ended nothing polls them any more, and one that holds a
    /// connection of the store's pool (in the middle of its transaction) would hold it while
    /// the commits after it (compensations, the run's end, an unloading) wait for one. With as
    /// many such runs as the pool has connections, a worker would wait until the pool gave up.
    fn stop_looking(&mut self) {
        if let Some(tasks) = self.tasks.as_deref_mut() {
            let left = tasks.stop();
            self.undelivered.extend(left);
        }
        if let Some(inbox) = self.inbox.as_deref_mut() {
            inbox.stop();
        }
        if let Some(requests) = self.requests.as_deref_mut() {
            requests.stop();
        }
        self.requests = None;
    }

    /// The compensation phase starts: the run's status becomes `Compensating` with the next
    /// commit (live; a replayed run has it already). The forward phase's looks at the store
    /// end here ([`Journal::stop_looking`]).
    fn compensating(&mut self) {
        self.stop_looking();
        if !self.replaying() {
            self.pending.status = Some(RunStatus::Compensating);
        }
    }

    /// Whether a commit failed or the replay diverged.
    fn is_broken(&self) -> bool {
        self.broken
    }

    /// Replaying: the journal's next event, if it is an end of attempt `attempt` of `node`'s
    /// compensation (`Compensated`, `CompensationRetrying`, `CompensationFailed`), with its
    /// error text for a failure. `None`: the attempt has no recorded end (it runs now).
    fn compensation_end(&self, node: u32, attempt: u32) -> Option<Result<(), String>> {
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
    fn replaying(&self) -> bool {
        !self.broken && self.cursor < self.setup.events.len()
    }

    /// What is left of the backoff of `node`'s compensation by its stored timer (the replay
    /// ended in that backoff); zero when no timer is stored.
    fn compensation_backoff_left(&self, node: u32) -> Duration {
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
    fn compensation_ctx(&self, node: &'static str, attempt: u32) -> AttemptCtx {
        let mut ctx = attempt_ctx(&self.run, node, attempt);
        ctx.attempt.set_compensation();
        ctx
    }

    /// What attempt `attempt` of a `Workflow` step (or the compensation of the child that
    /// attempt ran) needs to find its child run.
    fn child_ctx(&self, attempt: u32) -> Arc<ChildCtx> {
        Arc::new(ChildCtx {
            store: Arc::clone(&self.setup.store),
            owner: child::child_owner(&self.setup.lease.owner),
            distributed: self.setup.distributed,
            generation: self.setup.continues.then_some(self.setup.generation),
            attempt,
        })
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

/// Whether the replay's event is the journal's next one: same kind, node and attempt, and for
/// a `Completed` the same branch. (Their sequence numbers differ once nest instances ran: the
/// journal numbers their events too, which the replay skips.)
fn same(journal: &StoredEvent, replay: &StoredEvent) -> bool {
    journal.kind == replay.kind
        && journal.node == replay.node
        // Steps are known by name: a step numbered as another was is not that step.
        && (journal.node_name.is_none()
            || replay.node_name.is_none()
            || journal.node_name == replay.node_name)
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

/// Whether `node` is a `ForEach` or a `Loop`, whose instances record their ends.
fn is_nest(run: &Run<'_, '_>, node: u32) -> bool {
    matches!(
        run.graph().nodes[node as usize].kind,
        NodeKind::ForEach | NodeKind::Loop
    )
}

/// Whether the world (an operation's future, a timer) produces `kind`'s events, rather than
/// the scheduler's own decisions.
fn worldly(kind: NodeKind) -> bool {
    !matches!(
        kind,
        NodeKind::Decision | NodeKind::Gate | NodeKind::Cancel | NodeKind::Terminate
    )
}

/// The calls of a journal that act on its run: the scheduler's [`Steps`] for a durable run.
struct JournalSteps;

impl Steps for JournalSteps {
    fn request(&self, run: &mut Run<'_, '_>, node: u32, retry: bool) -> Result<(), NodeError> {
        match retry {
            false => hold_first(run, node),
            true => {
                hold_retry(run, node);
                Ok(())
            }
        }
    }

    fn poll(
        &self,
        run: &mut Run<'_, '_>,
        node: u32,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        poll_journaled(run, node, cx)
    }

    fn after_poll(&self, run: &mut Run<'_, '_>, cx: &mut Context<'_>, poll: Poll<()>) -> Poll<()> {
        journal_poll(run, cx, poll)
    }
}

impl Hook for Journal {
    fn attach(&mut self, graph: &'static Graph) {
        self.tasks = remote::Tasks::new(&self.setup, graph);
        if self.tasks.is_some() {
            self.records.set_remote();
        }
        // A new run has every marker of its graph; a loaded one those it started with.
        let patches = self.setup.patches.clone().unwrap_or_else(|| {
            crate::durable::markers(graph)
                .into_iter()
                .map(|(_, id)| id.to_owned())
                .collect()
        });
        let unjournaled = crate::durable::unjournaled(graph, &patches);
        if !unjournaled.is_empty() {
            self.unjournaled = vec![false; graph.nodes.len()];
            for &(node, old) in &unjournaled {
                if let Some(flag) = self.unjournaled.get_mut(node as usize) {
                    *flag = true;
                }
                if old {
                    self.old_paths.push(node);
                }
            }
        }
    }

    fn old_paths(&self) -> Vec<u32> {
        self.old_paths.clone()
    }

    fn record(&mut self, event: &Event) {
        Journal::record(self, event);
    }

    fn live(&self) -> bool {
        self.live
    }

    fn deadline_left(&self, full: Duration) -> Duration {
        Journal::deadline_left(self, full)
    }

    fn deadline_set(&mut self, at: tokio::time::Instant, after: Duration) {
        self.deadline = Some((at, after));
    }

    fn holds(&self, node: u32) -> bool {
        self.is_waiting(node)
    }

    fn attempts_before(&self, node: u32) -> u32 {
        self.floor(node)
    }

    fn no_timer(&mut self) {
        self.environment();
    }

    fn steps(&self) -> &'static dyn Steps {
        &JournalSteps
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn compensating(&mut self) {
        Journal::compensating(self);
    }

    fn lingering_ctx(&self, name: &'static str, attempt: u32) -> Option<AttemptCtx> {
        Some(self.ctx(name, attempt, true))
    }

    fn before_compensation(
        &mut self,
        node: u32,
        name: &'static str,
        attempt: u32,
        child: Option<u32>,
    ) -> HookFuture<'_, Before> {
        Box::pin(async move {
            if self.is_broken() {
                return Before::Stop;
            }
            // Replaying: the attempt's end is in the journal, and it does not run again.
            if let Some(end) = self.compensation_end(node, attempt) {
                return Before::Ended(end);
            }
            // Live: its `Compensating` is durable before it runs, with its idempotency key.
            if !self.flush().await {
                return Before::Stop;
            }
            let mut ctx = self.compensation_ctx(name, attempt);
            if let Some(completed) = child {
                ctx.child = Some(self.child_ctx(completed));
            }
            Before::Run(Some(Box::new(AttemptScope(Some(ctx))) as Box<dyn Scope>))
        })
    }

    fn compensation_backoff(
        &mut self,
        node: u32,
        delay: Duration,
    ) -> HookFuture<'_, Option<Duration>> {
        Box::pin(async move {
            // A replay that has the next attempt in its journal waited already; one that ends
            // in this backoff waits what is left of it; live, the backoff (its timer) is
            // durable before the wait.
            Some(match (self.last_replayed, self.replaying()) {
                (_, true) => Duration::ZERO,
                (true, false) => self.compensation_backoff_left(node),
                (false, false) if delay.is_zero() => delay,
                (false, false) => match self.flush().await {
                    true => delay,
                    false => return None,
                },
            })
        })
    }

    fn tend(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            match self.pump(cx) {
                Poll::Ready(true) => continue,
                Poll::Ready(false) if self.broken => return false,
                Poll::Ready(false) | Poll::Pending => return true,
            }
        }
    }

    fn finish(mut self: Box<Self>, end: RunEnd) -> HookFuture<'static, HookEnd> {
        Box::pin(async move {
            let status = match end {
                RunEnd::Succeeded => RunStatus::Succeeded,
                RunEnd::Failed => RunStatus::Failed,
                RunEnd::Cancelled => RunStatus::Cancelled,
            };
            if self.cursor < self.setup.events.len() && !self.broken {
                let event = &self.setup.events[self.cursor];
                let (seq, what) = (event.seq, describe(event));
                self.diverge(seq, what, "had ended the run".to_owned());
            }
            self.finish_run(status).await;
            let settle = (self.settle && self.error.is_none()).then(|| Settle {
                lease: self.setup.lease.clone(),
                next_seq: self.durable_seq,
            });
            HookEnd::new(JournalEnd {
                error: self.error.take(),
                unloaded: self.unloaded.take(),
                settle,
            })
        })
    }
}

/// What a durable run's journal gives back when the run's future ends (through its report).
pub(crate) struct JournalEnd {
    /// The error that stopped the run, if one did.
    pub(crate) error: Option<DurableError>,
    /// The run was unloaded (its status `Waiting` committed), with its wake-up time.
    pub(crate) unloaded: Option<Option<u64>>,
    /// The run of a workflow that continues as new succeeded, its journal durable, its status
    /// not set: the run's future settles it.
    pub(crate) settle: Option<Settle>,
}

/// What the future of a run that continues as new needs to settle it: the lease the journal
/// kept and where the generation's journal ends.
pub(crate) struct Settle {
    /// The run's lease, not given back.
    pub(crate) lease: crate::store::Lease,
    /// The run's next sequence number: the end of the generation's journal.
    pub(crate) next_seq: u64,
}

/// Requests `node`'s first attempt in a durable run: its `Requested` goes to the batch;
/// its future is made once that batch has committed.
fn hold_first(run: &mut Run<'_, '_>, node: u32) -> Result<(), NodeError> {
    if let Some(after) = run.graph().plan.policy(node as usize).deadline() {
        run.set_deadline(node, timer(after)?);
        // Stored with the `Requested`, so that a resume keeps the deadline's due time.
        if let Some(journal) = run.hook::<Journal>()
            && journal.live
        {
            journal.pending.timers.push(TimerChange::Set {
                key: timer_key(Some(node), TimerKind::NodeDeadline),
                after,
            });
        }
    } else {
        // Every node of a durable run is polled the long way.
        run.watch(node);
    }
    hold(run, node);
    Ok(())
}

/// Requests the next attempt of `node` (a retry after its backoff), held as the first.
fn hold_retry(run: &mut Run<'_, '_>, node: u32) {
    run.clear_attempt_timers(node);
    hold(run, node);
}

fn hold(run: &mut Run<'_, '_>, node: u32) {
    // After a redrive, a step that had failed is numbered after its last attempt.
    let floor = run
        .hook::<Journal>()
        .map_or(0, |journal| journal.floor(node));
    let attempt = run.attempt(node).max(floor) + 1;
    run.set_attempt(node, attempt);
    run.emit(Some(node), attempt, EventKind::Requested);
    if let Some(journal) = run.hook::<Journal>() {
        let seq = journal.last_seq();
        journal.held.push((node, seq));
    }
    if run.graph().nodes[node as usize].kind == NodeKind::Signal {
        inbox::signal_requested(run, node);
    }
}

/// Starts the held attempts whose `Requested` is durable.
fn release_durable(run: &mut Run<'_, '_>) {
    let Some(journal) = run.hook::<Journal>() else {
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
        start_held(run, node);
    }
}

/// Makes the future of `node`'s requested attempt and sets its timeout.
fn start_held(run: &mut Run<'_, '_>, node: u32) {
    // A task's attempt runs on whichever worker claims it: nothing to start here.
    let task = remote::is_task(run, node);
    let delay = run.graph().nodes[node as usize].kind == NodeKind::Delay;
    run.start_held(node, !task, |run| {
        let timeout = match task {
            true => remote::task_timeout(run, node).map(timer).transpose()?,
            false => run.policy(node).timeout().map(timer).transpose()?,
        };
        if delay {
            start_delay(run, node);
        }
        Ok(timeout)
    });
}

/// A started `Delay` step: a fresh one records its `TimerSet` (whose batch stores the
/// timer); one whose `TimerSet` the replay found waits what is left of the stored timer.
fn start_delay(run: &mut Run<'_, '_>, node: u32) {
    let Some(journal) = run.hook::<Journal>() else {
        return;
    };
    if let Some(i) = journal.timer_set.iter().position(|&n| n == node) {
        journal.timer_set.swap_remove(i);
        let key = delay_key(Some(node));
        if journal.setup.timers.iter().any(|t| t.key == key) {
            let left = journal.left(&key);
            run.leaf(node).resume_timer(left);
            return;
        }
        // Its timer went when the run ended: a redriven run's `Delay` waits its whole time
        // again, stored anew so that a later resume keeps its due time.
        let after = run.leaf(node).delay().unwrap_or_default();
        if let Some(journal) = run.hook::<Journal>() {
            journal.pending.timers.push(TimerChange::Set { key, after });
        }
        run.leaf(node).resume_timer(after);
        return;
    }
    let after = run.leaf(node).delay();
    if let Some(after) = after {
        let attempt = run.attempt(node);
        run.emit(Some(node), attempt, EventKind::TimerSet { after });
    }
}

/// Polls `node`'s attempt with its idempotency key set, and keeps the output it stored.
fn poll_journaled(
    run: &mut Run<'_, '_>,
    node: u32,
    cx: &mut Context<'_>,
) -> Poll<Result<(), NodeError>> {
    let name = run.graph().nodes[node as usize].name;
    let attempt = run.attempt(node);
    let nest = is_nest(run, node);
    let Some(journal) = run.hook::<Journal>() else {
        return run.poll_attempt(node, cx);
    };
    let tasks = journal.tasks.is_some();
    let mut ctx = journal.ctx(name, attempt, nest);
    if tasks && remote::is_task(run, node) {
        return remote::poll_task(run, node, cx);
    }
    let kind = run.graph().nodes[node as usize].kind;
    let signal = kind == NodeKind::Signal;
    if signal {
        ctx.signal = Some(Box::new(inbox::signal_ctx(run, node)));
    }
    let child = kind == NodeKind::Workflow;
    if child && let Some(journal) = run.hook::<Journal>() {
        ctx.child = Some(journal.child_ctx(attempt));
    }
    let (polled, mut ctx) = with_attempt(ctx, || run.poll_attempt(node, cx));
    if signal {
        inbox::signal_polled(run, node, &mut ctx);
    }
    if let (Poll::Ready(Ok(())), Some(journal)) = (&polled, run.hook::<Journal>()) {
        journal.capture(node, ctx);
    }
    polled
}

/// Applies the next journal event if the world produced it (replay). Returns whether it
/// applied one.
fn apply_journal(run: &mut Run<'_, '_>) -> bool {
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    if journal.broken {
        return false;
    }
    let Some(event) = journal.setup.events.get(journal.cursor).cloned() else {
        return false;
    };
    let Some(node) = event.node.filter(|&n| (n as usize) < run.len()) else {
        return false;
    };
    if !worldly(run.graph().nodes[node as usize].kind) {
        return false;
    }
    let running = run.status(node) == NodeStatus::Running;
    match event.kind.as_str() {
        "Completed" | "Failed" => {
            let Some(journal) = run.hook::<Journal>() else {
                return false;
            };
            if !running || !journal.unhold(node) {
                return false;
            }
            if event.kind == "Completed" {
                restore(run, node);
            } else {
                let error = replayed_error(run, node, &event);
                run.end_attempt(node);
                run.fail(node, error);
            }
        }
        "TimerSet" => {
            let Some(journal) = run.hook::<Journal>() else {
                return false;
            };
            if !running || !journal.held.iter().any(|&(n, _)| n == node) {
                return false;
            }
            journal.timer_set.push(node);
            let after = duration_field(&event, "after");
            run.emit(Some(node), event.attempt, EventKind::TimerSet { after });
        }
        "TimerFired" => {
            let Some(journal) = run.hook::<Journal>() else {
                return false;
            };
            if !running || !journal.unhold(node) {
                return false;
            }
            journal.timer_set.retain(|&n| n != node);
            run.end_attempt(node);
            // Emits the `TimerFired` and the `Completed` the journal holds.
            run.complete(node);
        }
        "SignalReceived" => {
            let Some(journal) = run.hook::<Journal>() else {
                return false;
            };
            if !running || !journal.unhold(node) {
                return false;
            }
            inbox::signal_replayed(run, node);
            // Restores the payload stored as the step's output, and emits the
            // `SignalReceived` and the `Completed` the journal holds.
            restore(run, node);
        }
        "SignalRejected" => {
            if !running {
                return false;
            }
            inbox::emit_rejected(run, node, &event);
        }
        "TimedOut" => {
            let after = duration_field(&event, "after");
            run.emit(Some(node), event.attempt, EventKind::TimedOut { after });
        }
        "Retrying" => {
            let Some(journal) = run.hook::<Journal>() else {
                return false;
            };
            if !running || !journal.unhold(node) {
                return false;
            }
            journal.backoff.push(node);
            let error = NodeError::Failed(error_text(&event).into());
            let rendered = run.record_attempt_error(node, &error);
            let delay = duration_field(&event, "delay");
            run.emit(
                Some(node),
                event.attempt,
                EventKind::Retrying {
                    error: rendered,
                    delay,
                },
            );
        }
        "Requested" if event.attempt > 1 => {
            let Some(journal) = run.hook::<Journal>() else {
                return false;
            };
            let Some(i) = journal.backoff.iter().position(|&n| n == node) else {
                return false;
            };
            journal.backoff.remove(i);
            journal.held.push((node, event.seq));
            run.set_attempt(node, event.attempt);
            run.emit(Some(node), event.attempt, EventKind::Requested);
        }
        _ => return false,
    }
    true
}

/// The error of `node`'s journaled `Failed`: a timeout when the journal's event before
/// it is the same attempt's `TimedOut`, the step's deadline when its text is that
/// deadline's, else the stored message (an operation's own error type, a panic, are not
/// stored: only their message is).
fn replayed_error(run: &mut Run<'_, '_>, node: u32, failed: &StoredEvent) -> NodeError {
    let text = error_text(failed);
    let before = run.hook::<Journal>().and_then(|j| {
        let at = j
            .setup
            .events
            .binary_search_by_key(&failed.seq, |event| event.seq)
            .ok()?;
        j.setup.events.get(at.checked_sub(1)?).cloned()
    });
    if let Some(before) = before
        && before.kind == "TimedOut"
        && before.node == failed.node
        && before.attempt == failed.attempt
    {
        let error = NodeError::TimedOut(duration_field(&before, "after"));
        if error.to_string() == text {
            return error;
        }
    }
    if let Some(after) = run.policy(node).deadline() {
        let error = NodeError::DeadlineExceeded(after);
        if error.to_string() == text {
            return error;
        }
    }
    NodeError::Failed(text.into())
}

/// Restores a completed node from the journal: its future runs with the stored output to
/// put in its slot, which it does before anything of the user's code.
fn restore(run: &mut Run<'_, '_>, node: u32) {
    let name = run.graph().nodes[node as usize].name;
    let attempt = run.attempt(node);
    let nest = is_nest(run, node);
    let Some(journal) = run.hook::<Journal>() else {
        return;
    };
    let bytes = journal
        .setup
        .outputs
        .get(&node)
        .cloned()
        .unwrap_or_default();
    let mut ctx = journal.ctx(name, attempt, nest);
    ctx.restore = Some(bytes);
    let mut cx = Context::from_waker(Waker::noop());
    let (polled, _) = with_attempt(ctx, || {
        catch_unwind(AssertUnwindSafe(|| {
            let mut leaf = run.leaf(node);
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
    // A restored `ForEach` whose other instances run on after `min` keeps its driver: the
    // instances whose end was not stored run again.
    if !(result.is_ok() && run.lingers(node)) {
        run.leaf(node).stop();
    }
    run.end_attempt(node);
    match result {
        Ok(()) => run.complete(node),
        Err(error) => run.fail(node, error),
    }
}

/// The end of the replay: attempts in flight start again (same attempt number), nodes in
/// backoff wait what is left of it.
fn go_live(run: &mut Run<'_, '_>) {
    let Some(journal) = run.hook::<Journal>() else {
        return;
    };
    journal.live = true;
    if journal.setup.waiting {
        // An unloaded run runs again.
        journal.pending.status = Some(RunStatus::Running);
    }
    // A compatible change of the run's graph is stored once the replay has shown the past
    // the same: with the run's first live commit.
    journal.pending.graph = journal.setup.adopt.take();
    if journal.pending.graph.is_some() {
        journal.pending.renumber = std::mem::take(&mut journal.setup.renumber);
        journal.moving = !journal.pending.renumber.is_empty();
    }
    if requests::undo(run) || requests::loaded_request(run) {
        // Undone, cancelled or terminated before anything of it runs again.
        return;
    }
    // In this order, which a replay of the events they journal meets the same way: the
    // failed steps' `Retrying`, then the salvaged steps' `Completed`.
    retry_redriven(run);
    salvage(run);
    let Some(journal) = run.hook::<Journal>() else {
        return;
    };
    let backoff = std::mem::take(&mut journal.backoff);
    let timers = journal.setup.timers.clone();
    let now_ms = journal.setup.now_ms;
    let left = |due_ms: u64| Duration::from_millis(due_ms.saturating_sub(now_ms));
    // Deadlines keep their due time by the store's clock.
    for stored in &timers {
        let Some(node) = stored.key.node else {
            continue;
        };
        if stored.key.kind != TimerKind::NodeDeadline
            || (node as usize) >= run.len()
            || run.status(node) != NodeStatus::Running
        {
            continue;
        }
        match timer(left(stored.due_ms)) {
            Ok(deadline) => {
                run.set_deadline(node, deadline);
                run.due(node);
            }
            Err(error) => {
                run.end_attempt(node);
                run.fail(node, error);
            }
        }
    }
    for node in backoff {
        let wait = timers
            .iter()
            .find(|t| t.key == backoff_key(Some(node)))
            .map_or(Duration::ZERO, |t| left(t.due_ms));
        match timer(wait) {
            Ok(backoff) => {
                run.set_backoff(node, backoff);
                run.due(node);
            }
            Err(error) => {
                run.end_attempt(node);
                run.fail(node, error);
            }
        }
    }
    release_durable(run);
}

/// Live after a redrive: each requested step that had completed in the part of the journal
/// the redrive cut off (a branch that went on after the failure) completes again from its
/// stored output, in the batch of its `Requested` (its task, its signal wait, its deadline
/// are closed with it), instead of running again. Returns whether one did.
fn salvage(run: &mut Run<'_, '_>) -> bool {
    let len = run.len();
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    if journal.kept.is_empty() && !journal.salvage.is_empty() {
        // At the end of the replay: what settled there is the run's past.
        journal.kept = vec![false; len];
        let settled: Vec<u32> = (0..len as u32)
            .filter(|&node| {
                matches!(
                    run.status(node),
                    NodeStatus::Completed | NodeStatus::Skipped
                )
            })
            .collect();
        if let Some(journal) = run.hook::<Journal>() {
            for node in settled {
                journal.kept[node as usize] = true;
            }
        }
    }
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    let ready: Vec<u32> = journal
        .held
        .iter()
        .map(|&(node, _)| node)
        .filter(|node| journal.salvage.contains(node))
        .collect();
    let mut any = false;
    for node in ready {
        let kind = run.graph().nodes[node as usize].kind;
        let Some(journal) = run.hook::<Journal>() else {
            return any;
        };
        // A step without a stored output (a `Delay` has none to restore) is restored from
        // its kind alone; one whose output is gone, or whose inputs may have changed (a step
        // before it ran again), runs again.
        let stored = journal.setup.outputs.contains_key(&node);
        journal.salvage.retain(|&n| n != node);
        let preds: Vec<u32> = run
            .graph()
            .edges
            .iter()
            .filter(|edge| edge.to == node)
            .map(|edge| edge.from)
            .collect();
        let before_kept = run.hook::<Journal>().is_some_and(|journal| {
            preds
                .iter()
                .all(|&pred| journal.kept.get(pred as usize) == Some(&true))
        });
        if !worldly(kind) || (kind != NodeKind::Delay && !stored) || !before_kept {
            continue;
        }
        let Some(journal) = run.hook::<Journal>() else {
            return any;
        };
        if let Some(flag) = journal.kept.get_mut(node as usize) {
            *flag = true;
        }
        journal.unhold(node);
        any = true;
        match kind {
            NodeKind::Delay => {
                run.end_attempt(node);
                run.complete(node);
            }
            NodeKind::Signal => {
                inbox::signal_replayed(run, node);
                if let Some(journal) = run.hook::<Journal>() {
                    journal.pending.waits.push(WaitChange::Close {
                        node,
                        instance: String::new(),
                    });
                }
                restore(run, node);
            }
            _ => restore(run, node),
        }
    }
    any
}

/// Going live after a redrive: each step whose attempt in flight had failed for good (its
/// attempt is not after its floor) is retried, with a `Retrying` journaled now, so its next
/// attempt has a new number (a new key) and its whole retry budget.
fn retry_redriven(run: &mut Run<'_, '_>) {
    let Some(journal) = run.hook::<Journal>() else {
        return;
    };
    if journal.epochs.is_empty() {
        return;
    }
    // Just redriven (nothing journaled since): the run's deadline, cleared when it ended,
    // counts from now, and is stored again so that a later resume keeps its due time.
    let fresh = journal
        .epochs
        .last()
        .is_some_and(|&(start, _)| start == journal.setup.events.len());
    if fresh && let Some((at, _)) = journal.deadline {
        let left = at.saturating_duration_since(tokio::time::Instant::now());
        journal.pending.timers.push(TimerChange::Set {
            key: crate::durable::run_deadline_key(),
            after: left,
        });
    }
    let held: Vec<(u32, u32)> = journal
        .held
        .iter()
        .map(|&(node, _)| (node, journal.floor(node)))
        .collect();
    for (node, floor) in held {
        let attempt = run.attempt(node);
        if floor == 0 || attempt > floor || run.status(node) != NodeStatus::Running {
            continue;
        }
        let Some(journal) = run.hook::<Journal>() else {
            return;
        };
        journal.unhold(node);
        journal.backoff.push(node);
        let error = NodeError::Failed("failed before the run was redriven".into());
        let rendered = run.record_attempt_error(node, &error);
        run.emit(
            Some(node),
            attempt,
            EventKind::Retrying {
                error: rendered,
                delay: Duration::ZERO,
            },
        );
    }
    if !fresh {
        return;
    }
    // A distributed run lost its tasks when it ended: the tasks of the attempts it runs again
    // are opened again.
    let Some(journal) = run.hook::<Journal>() else {
        return;
    };
    let remote: Vec<u32> = match journal.tasks.as_deref() {
        Some(tasks) => journal
            .held
            .iter()
            .map(|&(node, _)| node)
            .filter(|&node| tasks.is_remote(node))
            .collect(),
        None => return,
    };
    let opens: Vec<TaskChange> = remote
        .into_iter()
        .map(|node| TaskChange::Open {
            node,
            instance: String::new(),
            attempt: run.attempt(node),
        })
        .collect();
    if let Some(journal) = run.hook::<Journal>() {
        journal.pending.tasks.extend(opens);
    }
}

/// The run loop's step for a durable run, after each poll of the run: replays, commits, and
/// starts what a commit made durable, until nothing more can happen now.
fn journal_poll(run: &mut Run<'_, '_>, cx: &mut Context<'_>, mut poll: Poll<()>) -> Poll<()> {
    loop {
        let Some(journal) = run.hook::<Journal>() else {
            return poll;
        };
        if !journal.take_instances() {
            run.stop(CancelReason::Token);
            return Poll::Ready(());
        }
        if !journal.live {
            if journal.cursor < journal.setup.events.len() {
                if requests::replay_request(run) || replay_cancel(run) {
                    return Poll::Ready(());
                }
                if apply_journal(run) {
                    // The world's events that follow are applied before the run is polled:
                    // live, they came in one round (two steps completed together), and the
                    // steps that follow them were requested after both.
                    while apply_journal(run) {}
                    poll = run.poll(cx);
                    continue;
                }
                if poll.is_ready() {
                    // `RunFinished` is compared when the run finishes.
                    return poll;
                }
                let before = run.hook::<Journal>().map_or(0, |j| j.cursor);
                poll = run.poll(cx);
                if let Some(journal) = run.hook::<Journal>()
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
            go_live(run);
            poll = run.poll(cx);
            continue;
        }
        if poll.is_ready() {
            return poll;
        }
        if journal.requests.is_some() && requests::poll_requests(run, cx) {
            // Cancelled or terminated: the forward phase ends.
            return Poll::Ready(());
        }
        let Some(journal) = run.hook::<Journal>() else {
            return poll;
        };
        if !journal.salvage.is_empty() && salvage(run) {
            // A step a redrive had cut off completed again from its stored output (before
            // the signals are dealt: a salvaged `Signal` step takes none).
            poll = run.poll(cx);
            continue;
        }
        let Some(journal) = run.hook::<Journal>() else {
            return poll;
        };
        let signals = journal.inbox.is_some();
        let tasks = journal.tasks.is_some();
        if signals && inbox::poll_signals(run, cx) {
            // A waiting `Signal` step was handed a signal: poll it now.
            poll = run.poll(cx);
            continue;
        }
        if tasks && remote::poll_tasks(run, cx) {
            // A task's outcome is known: its node takes it now.
            poll = run.poll(cx);
            continue;
        }
        let Some(journal) = run.hook::<Journal>() else {
            return poll;
        };
        let unloads = journal.setup.unload.is_some() || journal.unloads_tasks().is_some();
        match journal.pump(cx) {
            Poll::Ready(true) => {
                release_durable(run);
                poll = run.poll(cx);
            }
            Poll::Ready(false) if journal.broken => {}
            Poll::Ready(false) if unloads && unload_idle(run, cx) => return Poll::Ready(()),
            Poll::Ready(false) | Poll::Pending => return Poll::Pending,
        }
    }
}

/// Replaying: when the journal's next event is an `Aborted` without a cause, the run was
/// cancelled there (its deadline passed, or its token): cancels it again, which emits the
/// journal's `Aborted` events, and returns `true`.
fn replay_cancel(run: &mut Run<'_, '_>) -> bool {
    let Some(journal) = run.hook::<Journal>() else {
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
    run.cancel(reason);
    true
}

/// With nothing to commit: when every running node waits (for a timer due later than the
/// run's `unload` threshold from now, or for a signal), stops the run to unload it (its
/// nodes are dropped, nothing more is journaled; the journal's `finish` commits the status
/// `Waiting`) and returns `true`. A distributed run that waits for tasks alone is kept (its
/// lease held, its outcomes taken as they come) until it has waited so for its
/// `unload_tasks` time: a sticky run, decided by the same process from its state in memory.
#[cold]
#[inline(never)]
fn unload_idle(run: &mut Run<'_, '_>, cx: &mut Context<'_>) -> bool {
    let Some(wake) = idle_wake(run) else {
        remote::busy(run);
        return false;
    };
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    let sticky = match journal.setup.unload {
        None => journal.unloads_tasks().unwrap_or_default(),
        Some(_) => Duration::ZERO,
    };
    if !sticky.is_zero() && !remote::kept_long_enough(run, sticky, cx) {
        return false;
    }
    let now = tokio::time::Instant::now();
    let wake_at_ms = wake.map(|at| {
        let left = at.saturating_duration_since(now);
        crate::store::due_after(crate::store::now_ms(), left)
    });
    if let Some(journal) = run.hook::<Journal>() {
        journal.unloading = Some(wake_at_ms);
        journal.broken = true;
    }
    // The run stops as a process that exits would: observers see no event of it.
    run.drop_out();
    true
}

/// When every running node waits (for a timer due later than the run's `unload` threshold
/// from now, for a signal, or for a task), the run's wake-up time (`None` inside: no timer);
/// `None` when some node does not wait so.
fn idle_wake(run: &mut Run<'_, '_>) -> Option<Option<tokio::time::Instant>> {
    let journal = run.hook::<Journal>()?;
    if journal.commit.is_some() {
        return None;
    }
    // Without `unload`, a distributed run is unloaded only when it waits for tasks alone.
    let tasks_only = journal.setup.unload.is_none();
    // A sticky run's wait for tasks is timed by `kept_long_enough`: here it counts as a
    // wait without a due time, as an unloaded run's does.
    let after = journal
        .setup
        .unload
        .or(journal.unloads_tasks().map(|_| Duration::ZERO))?;
    let mut wake = journal.deadline.map(|(at, _)| at);
    if run.lingering() {
        return None;
    }
    let now = tokio::time::Instant::now();
    let horizon = now.checked_add(after)?;
    let mut running = false;
    for node in 0..run.len() as u32 {
        if run.status(node) != NodeStatus::Running {
            continue;
        }
        running = true;
        // `Leaf::idle` does not see a step's future: a `Signal` step's wait is the
        // journal's (its inbox).
        // A task out with a worker waits as a signal does: no due time of its own (its
        // completion makes the run due in the store); its timeout and deadline count below.
        let task = remote::task_idle(run, node);
        if tasks_only && !task {
            return None;
        }
        let idle = match task {
            true => Some(Idle::Signal),
            false => {
                let idle = run.leaf(node).idle();
                idle.or_else(|| inbox::signal_idle(run, node).then_some(Idle::Signal))
            }
        };
        match idle {
            Some(Idle::Until(at)) => wake = Some(wake.map_or(at, |w| w.min(at))),
            Some(Idle::Signal) => {}
            None => return None,
        }
        // The node's own timers (an attempt's timeout, its deadline) count as well.
        if let Some(at) = run.next_timer(node) {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
    }
    if !running || wake.is_some_and(|at| at <= horizon) {
        return None;
    }
    Some(wake)
}
