//! Saga compensation: the phase a failed run goes through before it ends.
//!
//! The generated node set of a workflow with `compensate = ..` options holds, after its
//! `graph.nodes.len()` nodes, one more leaf per compensable step (in the order of
//! `RunOptions::compensations`, which names each one's step; the macro emits them in
//! topological order). When the forward phase ended failed (a failure reached the end of the
//! graph, or the run was cancelled or passed its deadline), this phase runs the compensations
//! of the steps that completed, **one at a time, in reverse topological order**, so that a
//! step's effect is undone only after the effects of every completed step after it are. Each
//! is retried with its step's policy (retries, backoff without jitter, per-attempt timeout).
//! A compensation that fails for good stops the phase: the ones not yet run are listed as
//! not run. The phase ignores the run's cancel token and deadline (they are what may have
//! failed the run), and ends with the run's future: dropping it drops the compensation.
//!
//! Nothing here is on the path of a run without compensations: `run_nodes` calls [`compensate`]
//! only when the run has some, and its future is boxed so that the run's future does not grow.

use std::future::poll_fn;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use super::{Halt, Scheduler};
use crate::error::{NodeError, render};
use crate::events::EventKind;
use crate::nodes::{Nodes, Table};
use crate::panic::{panic_message, timer};
use crate::saga::{Compensation, CompensationOutcome};
use crate::status::NodeStatus;
use crate::verdict::Verdict;

impl Scheduler {
    /// Whether the forward phase ended failed, so that the compensations run: the run was
    /// cancelled, or (no `Terminate` step ended it) a failure reached the end of the graph.
    fn ended_failed(&self) -> bool {
        if self.cancelled.is_some() || matches!(self.halt, Some(Halt::Cancelled(_))) {
            return true;
        }
        if self.terminated || self.failures == 0 {
            return false;
        }
        let statuses: Vec<NodeStatus> = self.nodes.iter().map(|n| n.status).collect();
        !Verdict::judge(self.graph, &statuses, &self.caught).succeeded
    }
}

/// The idempotency key an attempt of a compensation of a durable run is polled with.
#[cfg(feature = "durable")]
type Ctx = crate::durable::AttemptCtx;
#[cfg(not(feature = "durable"))]
type Ctx = ();

/// Runs the compensations of a failed run's completed steps (see the module's doc) and returns
/// what each did, in the order they ran; nothing when the run did not fail. In a durable run
/// whose journal breaks (a commit fails, the replay diverges), the phase stops there.
pub(super) async fn compensate<N: Nodes>(
    scheduler: &mut Scheduler,
    table: &mut Table<'_, N>,
    steps: &'static [u32],
) -> Vec<Compensation> {
    if !scheduler.ended_failed() {
        return Vec::new();
    }
    #[cfg(feature = "durable")]
    if let Some(journal) = scheduler.journal.as_deref_mut() {
        journal.compensating();
    }
    let base = scheduler.len();
    let mut done = Vec::new();
    let mut stopped = false;
    for (k, &node) in steps.iter().enumerate().rev() {
        if scheduler.nodes[node as usize].status != NodeStatus::Completed || base + k >= table.len()
        {
            continue;
        }
        let name = scheduler.graph.nodes[node as usize].name;
        if stopped {
            done.push(Compensation {
                node: name,
                attempts: 0,
                outcome: CompensationOutcome::NotRun,
            });
            continue;
        }
        let Some(record) = compensate_one(scheduler, table, base + k, node).await else {
            break;
        };
        stopped = !record.is_compensated();
        done.push(record);
    }
    done
}

/// Runs one compensation (leaf `leaf` of the table, for step `node`) until it succeeds or its
/// step's policy has no retry left, emitting its events. `None`: a durable run's journal
/// broke.
async fn compensate_one<N: Nodes>(
    scheduler: &mut Scheduler,
    table: &mut Table<'_, N>,
    leaf: usize,
    node: u32,
) -> Option<Compensation> {
    let policy = scheduler.node_policy(node);
    let backoff = policy.backoff.unwrap_or_default();
    let name = scheduler.graph.nodes[node as usize].name;
    let mut attempt = 0;
    loop {
        attempt += 1;
        scheduler.emit(Some(node), attempt, || EventKind::Compensating);
        let error =
            match run_attempt(scheduler, table, leaf, node, attempt, policy.timeout()).await? {
                Ok(()) => {
                    scheduler.emit(Some(node), attempt, || EventKind::Compensated);
                    return Some(Compensation {
                        node: name,
                        attempts: attempt,
                        outcome: CompensationOutcome::Compensated,
                    });
                }
                Err(error) => render(&error),
            };
        if attempt > policy.retries() {
            let shown = Arc::clone(&error);
            scheduler.emit(Some(node), attempt, || EventKind::CompensationFailed {
                error: shown,
            });
            return Some(Compensation {
                node: name,
                attempts: attempt,
                outcome: CompensationOutcome::Failed { error },
            });
        }
        let delay = backoff.delay(attempt);
        let replayed = replaying(scheduler);
        scheduler.emit(Some(node), attempt, || EventKind::CompensationRetrying {
            error,
            delay,
        });
        // A replay that has the next attempt in its journal waited already; one that ends in
        // this backoff waits what is left of it; live, the backoff (its timer) is durable
        // before the wait.
        let wait = match (replayed, replaying(scheduler)) {
            (_, true) => Duration::ZERO,
            (true, false) => backoff_left(scheduler, node),
            (false, false) if delay.is_zero() => delay,
            (false, false) => match flush(scheduler).await {
                true => delay,
                false => return None,
            },
        };
        if !wait.is_zero()
            && let Ok(sleep) = timer(wait)
            && !wait_keeping_lease(scheduler, sleep).await
        {
            return None;
        }
    }
}

/// Waits for `sleep`; a durable run renews its lease meanwhile. `false`: the journal broke.
async fn wait_keeping_lease(scheduler: &mut Scheduler, sleep: impl Future<Output = ()>) -> bool {
    #[cfg(feature = "durable")]
    if let Some(journal) = scheduler.journal.as_deref_mut() {
        return journal.keep_lease(sleep).await.is_some();
    }
    let _ = scheduler;
    sleep.await;
    true
}

/// What is left of the backoff of `node`'s compensation in a durable run whose replay ended in
/// it.
fn backoff_left(scheduler: &Scheduler, node: u32) -> Duration {
    #[cfg(feature = "durable")]
    if let Some(journal) = scheduler.journal.as_deref() {
        return journal.compensation_backoff_left(node);
    }
    let _ = (scheduler, node);
    Duration::ZERO
}

/// Commits what a durable run has pending; `false` when its journal broke. `true` at once
/// for any other run.
async fn flush(scheduler: &mut Scheduler) -> bool {
    #[cfg(feature = "durable")]
    if let Some(journal) = scheduler.journal.as_deref_mut() {
        return journal.flush().await;
    }
    let _ = scheduler;
    true
}

/// Whether a durable run is replaying its journal.
fn replaying(scheduler: &Scheduler) -> bool {
    #[cfg(feature = "durable")]
    if let Some(journal) = scheduler.journal.as_deref() {
        return journal.replaying();
    }
    let _ = scheduler;
    false
}

/// Attempt `attempt` of a compensation. In a durable run: the attempt's end, if the journal
/// has it (replay: the compensation does not run again); else its `Compensating` is committed
/// first, and the attempt runs with its idempotency key. `None`: the journal broke.
async fn run_attempt<N: Nodes>(
    scheduler: &mut Scheduler,
    table: &mut Table<'_, N>,
    leaf: usize,
    node: u32,
    attempt: u32,
    timeout: Option<std::time::Duration>,
) -> Option<Result<(), NodeError>> {
    #[cfg(feature = "durable")]
    if let Some(journal) = scheduler.journal.as_deref_mut() {
        if journal.is_broken() {
            return None;
        }
        if let Some(end) = journal.compensation_end(node, attempt) {
            return Some(end.map_err(|text| NodeError::Failed(text.into())));
        }
        if !journal.flush().await {
            return None;
        }
        let name = scheduler.graph.nodes[node as usize].name;
        let ctx = journal.compensation_ctx(name, attempt);
        return journal
            .keep_lease(attempt_once(table, leaf, timeout, Some(ctx)))
            .await;
    }
    let _ = (scheduler, node, attempt);
    Some(attempt_once(table, leaf, timeout, None).await)
}

/// Calls `f` with the attempt's context set (a durable run's idempotency key).
fn within<R>(ctx: &mut Option<Ctx>, f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "durable")]
    if let Some(given) = ctx.take() {
        let (result, given) = crate::durable::with_attempt(given, f);
        *ctx = Some(given);
        return result;
    }
    let _ = ctx;
    f()
}

/// One attempt of a compensation: starts its leaf and polls it to the end, with the step's
/// per-attempt timeout; a panic is the attempt's failure.
async fn attempt_once<N: Nodes>(
    table: &mut Table<'_, N>,
    leaf: usize,
    timeout: Option<std::time::Duration>,
    mut ctx: Option<Ctx>,
) -> Result<(), NodeError> {
    let started = within(&mut ctx, || {
        catch_unwind(AssertUnwindSafe(|| table.leaves()[leaf].as_mut().start()))
    });
    if let Err(payload) = started {
        return Err(NodeError::Panicked(panic_message(payload)));
    }
    let mut limit = match timeout.map(timer).transpose() {
        Ok(limit) => limit,
        Err(error) => {
            table.leaves()[leaf].as_mut().stop();
            return Err(error);
        }
    };
    poll_fn(|cx| {
        if let Some(limit) = &mut limit
            && limit.as_mut().poll(cx).is_ready()
        {
            table.leaves()[leaf].as_mut().stop();
            let after = timeout.unwrap_or_default();
            return std::task::Poll::Ready(Err(NodeError::TimedOut(after)));
        }
        let polled = within(&mut ctx, || {
            catch_unwind(AssertUnwindSafe(|| table.leaves()[leaf].as_mut().poll(cx)))
        });
        match polled {
            Ok(polled) => polled,
            Err(payload) => {
                table.leaves()[leaf].as_mut().stop();
                std::task::Poll::Ready(Err(NodeError::Panicked(panic_message(payload))))
            }
        }
    })
    .await
}
