//! Saga compensation: the phase a failed run goes through before it ends.
//!
//! The generated node set of a workflow with `compensate = ..` options holds, after its
//! `graph.nodes.len()` nodes, one more leaf per compensable step (in the order of
//! `RunSetup::compensations`, which names each one's step; the macro emits them in
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

use super::{Before, Halt, Hook, Scheduler, Scope};
use crate::compensation::{Compensation, CompensationOutcome};
use crate::error::{NodeError, render};
use crate::events::EventKind;
use crate::nodes::{Nodes, Table};
use crate::panic::{panic_message, timer};
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

/// Runs the compensations of a failed run's completed steps (see the module's doc) and returns
/// what each did, in the order they ran; nothing when the run did not fail. In a hooked run
/// whose hook cannot go on ([`Before::Stop`], a failed [`Hook::tend`]), the phase stops there.
pub(super) async fn compensate<N: Nodes>(
    scheduler: &mut Scheduler,
    table: &mut Table<'_, N>,
    steps: &'static [u32],
    live: &'static [bool],
) -> Vec<Compensation> {
    let live = |k: usize| live.get(k).copied().unwrap_or(true);
    if !(0..steps.len()).any(live) || !scheduler.ended_failed() {
        return Vec::new();
    }
    if let Some(hook) = scheduler.hook.as_deref_mut() {
        hook.compensating();
    }
    let base = scheduler.len();
    let mut done = Vec::new();
    let mut stopped = false;
    for (k, &node) in steps.iter().enumerate().rev() {
        if scheduler.nodes[node as usize].status != NodeStatus::Completed
            || base + k >= table.len()
            || !live(k)
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
/// step's policy has no retry left, emitting its events. `None`: the run's hook cannot go on.
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
        scheduler.emit(Some(node), attempt, || EventKind::CompensationRetrying {
            error,
            delay,
        });
        // The hook may shorten the wait (it has waited before) or make its own work first.
        let wait = match scheduler.hook.as_deref_mut() {
            Some(hook) => hook.compensation_backoff(node, delay).await?,
            None => delay,
        };
        if !wait.is_zero()
            && let Ok(sleep) = timer(wait)
            && !wait_keeping_lease(scheduler, sleep).await
        {
            return None;
        }
    }
}

/// Waits for `sleep`; a hooked run's hook works meanwhile. `false`: it cannot go on.
async fn wait_keeping_lease(scheduler: &mut Scheduler, sleep: impl Future<Output = ()>) -> bool {
    match scheduler.hook.as_deref_mut() {
        Some(hook) => tended(hook, sleep).await.is_some(),
        None => {
            sleep.await;
            true
        }
    }
}

/// Drives `work` while `hook` does its own work ([`Hook::tend`]); `None` when the hook cannot
/// go on: the work is dropped.
async fn tended<F: Future>(hook: &mut dyn Hook, work: F) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    poll_fn(|cx| {
        if let std::task::Poll::Ready(out) = work.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        match hook.tend(cx) {
            true => std::task::Poll::Pending,
            false => std::task::Poll::Ready(None),
        }
    })
    .await
}

/// Attempt `attempt` of a compensation. A hooked run asks its hook first: the attempt may have
/// ended before (it does not run again), and it runs inside the hook's scope while the hook
/// works. `None`: the hook cannot go on.
async fn run_attempt<N: Nodes>(
    scheduler: &mut Scheduler,
    table: &mut Table<'_, N>,
    leaf: usize,
    node: u32,
    attempt: u32,
    timeout: Option<std::time::Duration>,
) -> Option<Result<(), NodeError>> {
    let name = scheduler.graph.nodes[node as usize].name;
    // The number of the attempt that completed it (recorded when it stopped running).
    let child = (scheduler.graph.nodes[node as usize].kind == crate::graph::NodeKind::Workflow)
        .then(|| scheduler.attempt_of(node));
    let Some(hook) = scheduler.hook.as_deref_mut() else {
        // A plain run inside a durable step: the compensation's own key.
        #[cfg(feature = "durable")]
        let scope = scheduler.keys.as_deref().map(|keys| {
            let mut ctx = keys.ctx(name, attempt);
            ctx.attempt.set_compensation();
            Box::new(AttemptScope(Some(ctx))) as Box<dyn Scope>
        });
        #[cfg(not(feature = "durable"))]
        let scope = None;
        return Some(attempt_once(table, leaf, timeout, scope).await);
    };
    match hook.before_compensation(node, name, attempt, child).await {
        Before::Stop => None,
        Before::Ended(end) => Some(end.map_err(|text| NodeError::Failed(text.into()))),
        Before::Run(scope) => tended(hook, attempt_once(table, leaf, timeout, scope)).await,
    }
}

/// Polls what it is given inside an attempt's context (its idempotency key set): a durable
/// run's compensations, for its journal, and those of a plain run inside a durable step.
#[cfg(feature = "durable")]
pub(crate) struct AttemptScope(pub(crate) Option<crate::attempt::AttemptCtx>);

#[cfg(feature = "durable")]
impl Scope for AttemptScope {
    fn within(&mut self, f: &mut dyn FnMut()) {
        match self.0.take() {
            Some(ctx) => {
                let ((), ctx) = crate::attempt::with_attempt(ctx, f);
                self.0 = Some(ctx);
            }
            None => f(),
        }
    }
}

/// Calls `f` inside the attempt's scope, if it has one.
fn within<R>(scope: &mut Option<Box<dyn Scope>>, f: impl FnOnce() -> R) -> R {
    let Some(scope) = scope else {
        return f();
    };
    let mut f = Some(f);
    let mut out = None;
    scope.within(&mut || {
        if let Some(f) = f.take() {
            out = Some(f());
        }
    });
    match out {
        Some(out) => out,
        // A scope that did not call its closure: the attempt is polled outside it.
        None => match f.take() {
            Some(f) => f(),
            None => unreachable_scope(),
        },
    }
}

#[cold]
fn unreachable_scope() -> ! {
    unreachable!("the closure ran, so its output is set")
}

/// One attempt of a compensation: starts its leaf and polls it to the end, with the step's
/// per-attempt timeout; a panic is the attempt's failure.
async fn attempt_once<N: Nodes>(
    table: &mut Table<'_, N>,
    leaf: usize,
    timeout: Option<std::time::Duration>,
    mut ctx: Option<Box<dyn Scope>>,
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
