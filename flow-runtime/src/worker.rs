//! The [`Worker`] (feature `durable`): registers durable workflows by name and resumes the
//! unfinished runs of a store that no live process holds, in a poll loop.
//!
//! A run is picked up when it is unfinished (`running`, `waiting` or `compensating`), its
//! workflow is registered, no live owner holds its lease, and, if it is `waiting` (nothing
//! drives it until a timer or a signal), its wake-up time (its earliest timer) has come. A run
//! whose process died is picked up once its lease has expired, a run stopped by a failed commit
//! at once (it released its lease).
//!
//! With [`Worker::unload_after`], a run it drives that comes to wait long (every running step
//! waits for a `Delay` due later than the threshold, or for a signal) is unloaded: its state
//! stays in the store, the worker holds nothing of it, and picks it up again when it is due.
//!
//! The worker drives the runs it resumes on its own task, concurrently, up to
//! [`Worker::max_runs`] at a time: it spawns nothing, so it needs no `Send` workflow and no
//! tokio runtime beyond the timer.
//!
//! ```
//! use std::time::Duration;
//! use flow_runtime::store::MemoryStore;
//! use flow_runtime::worker::Worker;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! // In an application: `.register::<Checkout>()` for each `#[flow(durable)]` workflow.
//! let worker = Worker::new(store.clone()).poll_interval(Duration::from_millis(10));
//! // Until the shutdown future completes (Ctrl-C in a service); then the runs in flight end.
//! let report = worker.run(tokio::time::sleep(Duration::from_millis(50))).await?;
//! assert!(report.polls >= 2);
//! # Ok::<(), flow_runtime::durable::DurableError>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use crate::durable::{DurableError, DurableWorkflow, Ended, resume_shaped};
use crate::report::Outcome;
use crate::store::{RunFilter, RunStatus, RunSummary, Store, StoreError, now_ms};

/// How a worker resumes a run of one registered workflow (unloading it again when it waits
/// longer than the duration, if one is given).
type ResumeFn<S> = fn(&S, &str, Option<Duration>) -> Pin<Box<dyn Future<Output = ResumeResult>>>;

/// A resumed run's result with its output dropped (it is in the store).
type ResumeResult = Result<Ended<()>, DurableError>;

/// The default time between two looks at the store.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The default number of runs a worker drives at once.
const MAX_RUNS: usize = 64;

/// Resumes the unfinished runs of a store: `Worker::new(store).register::<Checkout>()`, then
/// [`Worker::resume_due`] once or [`Worker::run`] until shut down. See the
/// [module](self) for which runs it picks up.
#[must_use = "a worker does nothing until `resume_due` or `run` is awaited"]
pub struct Worker<S> {
    store: S,
    workflows: HashMap<&'static str, ResumeFn<S>>,
    interval: Duration,
    max_runs: usize,
    unload: Option<Duration>,
}

/// A run the worker resumed, and how it ended.
#[derive(Debug)]
pub struct Resumed {
    /// The run's id.
    pub run: String,
    /// Its workflow's name.
    pub workflow: String,
    /// Its outcome (the output itself is in the store), or why it could not be resumed or
    /// stopped again (a store error leaves it to be resumed later).
    pub result: Result<Outcome<()>, DurableError>,
}

/// A run the worker unloaded while it waits ([`Worker::unload_after`]): it is in the store
/// with the status `waiting`, and is picked up again when it is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unloaded {
    /// The run's id.
    pub run: String,
    /// Its workflow's name.
    pub workflow: String,
    /// When its earliest timer is due, in ms since the Unix epoch; `None` when it waits
    /// only for signals.
    pub wake_at_ms: Option<u64>,
}

/// What [`Worker::run`] did before it was shut down.
#[derive(Debug, Default)]
pub struct WorkerReport {
    /// Every run it resumed that ended or stopped, in the order they did.
    pub resumed: Vec<Resumed>,
    /// Every run it unloaded while it waits, in the order it did ([`Worker::unload_after`]).
    pub unloaded: Vec<Unloaded>,
    /// How many times it looked at the store.
    pub polls: u64,
}

impl<S: Store + Clone> Worker<S> {
    /// A worker on `store` that knows no workflow yet.
    pub fn new(store: S) -> Worker<S> {
        Worker {
            store,
            workflows: HashMap::new(),
            interval: POLL_INTERVAL,
            max_runs: MAX_RUNS,
            unload: None,
        }
    }

    /// Registers `W`: the worker resumes the runs of `W` (by its name, `W::GRAPH.name()`).
    /// Runs of workflows no registered type knows are left alone.
    pub fn register<W: DurableWorkflow>(mut self) -> Worker<S> {
        self.workflows
            .insert(W::GRAPH.name(), resume_erased::<W, S> as ResumeFn<S>);
        self
    }

    /// The time between two looks at the store in [`Worker::run`] (500 ms by default; at
    /// least 1 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Worker<S> {
        self.interval = interval.max(Duration::from_millis(1));
        self
    }

    /// The most runs the worker drives at once (64 by default; at least 1).
    pub fn max_runs(mut self, max: usize) -> Worker<S> {
        self.max_runs = max.max(1);
        self
    }

    /// Unloads the runs the worker drives once they wait longer than `after` (every running
    /// step waits for a `Delay` due later than `after` from now, or for a signal): their state
    /// is committed with the status `waiting`, the worker drops them and picks them up again
    /// when they are due ([`DurableRunner::unload_when_waiting`](crate::durable::DurableRunner::unload_when_waiting)).
    /// Off by default: a run stays with the worker until it ends.
    pub fn unload_after(mut self, after: Duration) -> Worker<S> {
        self.unload = Some(after);
        self
    }

    /// The names of the registered workflows, sorted.
    pub fn workflows(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.workflows.keys().copied().collect();
        names.sort_unstable();
        names
    }

    /// The runs the worker would pick up now, oldest first, at most `limit`; `skip` are runs
    /// it drives already.
    async fn due(&self, limit: usize, skip: &[String]) -> Result<Vec<RunSummary>, DurableError> {
        let filter = RunFilter {
            workflow: None,
            statuses: vec![
                RunStatus::Running,
                RunStatus::Waiting,
                RunStatus::Compensating,
            ],
            limit: None,
        };
        let now = now_ms();
        let runs = self.store.list_runs(&filter).await?;
        Ok(runs
            .into_iter()
            .filter(|run| is_due(run, now))
            .filter(|run| self.workflows.contains_key(run.workflow.as_str()))
            .filter(|run| !skip.contains(&run.id))
            .take(limit)
            .collect())
    }

    /// Starts resuming `run`, if its workflow is registered.
    fn start(&self, run: &RunSummary) -> Option<InFlight> {
        let resume = self.workflows.get(run.workflow.as_str())?;
        Some(InFlight {
            run: run.id.clone(),
            workflow: run.workflow.clone(),
            future: resume(&self.store, &run.id, self.unload),
        })
    }

    /// Looks once for the runs to pick up and resumes them all (up to
    /// [`Worker::max_runs`] at a time), until each has ended, stopped or been unloaded;
    /// returns those that ended or stopped, in the order they did (a run it unloaded is
    /// not in the list: it waits in the store).
    ///
    /// # Errors
    ///
    /// Listing the runs failed. A run that fails to resume is reported in its entry.
    pub async fn resume_due(&self) -> Result<Vec<Resumed>, DurableError> {
        let mut todo = self.due(usize::MAX, &[]).await?.into_iter();
        let mut flying: Vec<InFlight> = Vec::new();
        let mut done = Vec::new();
        loop {
            while flying.len() < self.max_runs {
                match todo.next() {
                    Some(run) => flying.extend(self.start(&run)),
                    None => break,
                }
            }
            if flying.is_empty() {
                return Ok(done);
            }
            let mut unloaded = Vec::new();
            poll_fn(|cx| {
                let before = done.len() + unloaded.len();
                poll_all(&mut flying, &mut done, &mut unloaded, cx);
                if done.len() + unloaded.len() > before {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }

    /// Looks at the store every [`Worker::poll_interval`] and resumes the runs to pick up,
    /// driving up to [`Worker::max_runs`] at once, until `shutdown` completes. Then it picks
    /// up nothing more and returns once the runs it drives have ended or stopped.
    ///
    /// A run that could not be resumed because of the store ([`DurableError::Store`]: busy,
    /// locked, full, closed, an I/O error) is tried again at a later look; one refused for a
    /// reason a new attempt would meet again (its graph changed, its replay diverged, its input
    /// cannot be read, its stored content is damaged or invalid, it no longer exists) is
    /// reported once and left alone.
    ///
    /// Dropping the future drops the runs it drives, which is safe: each is journaled and is
    /// picked up again once its lease expires.
    ///
    /// # Errors
    ///
    /// Listing the runs failed (after the runs in flight have ended).
    pub async fn run(
        &self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<WorkerReport, DurableError> {
        let mut shutdown = pin!(shutdown);
        let mut flying: Vec<InFlight> = Vec::new();
        let mut report = WorkerReport::default();
        let mut stopping = false;
        let mut failed = None;
        // Runs refused for a reason a new attempt would meet again (a changed graph, a
        // diverged replay, an unreadable input): not picked up again by this loop.
        let mut refused: Vec<String> = Vec::new();
        let mut seen = 0;
        loop {
            for resumed in &report.resumed[seen..] {
                let for_good = matches!(&resumed.result, Err(e) if refused_for_good(e));
                if for_good && !refused.contains(&resumed.run) {
                    refused.push(resumed.run.clone());
                }
            }
            seen = report.resumed.len();
            if !stopping && flying.len() < self.max_runs {
                report.polls += 1;
                let skip: Vec<String> = flying
                    .iter()
                    .map(|f| f.run.clone())
                    .chain(refused.iter().cloned())
                    .collect();
                match self.due(self.max_runs - flying.len(), &skip).await {
                    Ok(runs) => flying.extend(runs.iter().filter_map(|run| self.start(run))),
                    Err(error) => {
                        failed = Some(error);
                        stopping = true;
                    }
                }
            }
            let mut tick = pin!(tokio::time::sleep(self.interval));
            let ended = poll_fn(|cx| {
                poll_all(&mut flying, &mut report.resumed, &mut report.unloaded, cx);
                if !stopping && shutdown.as_mut().poll(cx).is_ready() {
                    stopping = true;
                }
                if stopping {
                    return if flying.is_empty() {
                        Poll::Ready(true)
                    } else {
                        Poll::Pending
                    };
                }
                tick.as_mut().poll(cx).map(|()| false)
            })
            .await;
            if ended {
                return match failed {
                    Some(error) => Err(error),
                    None => Ok(report),
                };
            }
        }
    }
}

impl<S> fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<_> = self.workflows.keys().collect();
        names.sort_unstable();
        f.debug_struct("Worker")
            .field("workflows", &names)
            .field("interval", &self.interval)
            .field("max_runs", &self.max_runs)
            .field("unload", &self.unload)
            .finish_non_exhaustive()
    }
}

/// Whether resuming a run failed for a reason that a new attempt would meet again.
fn refused_for_good(error: &DurableError) -> bool {
    match error {
        DurableError::Store(error) => matches!(
            error,
            StoreError::Corrupt { .. }
                | StoreError::Invalid { .. }
                | StoreError::NotFound { .. }
                | StoreError::Foreign { .. }
                | StoreError::SchemaVersion { .. }
        ),
        _ => true,
    }
}

/// Whether the worker may pick `run` up at `now`: no owner holds a lease on it that has not
/// expired, and, for a `waiting` run (one that nothing drives until a timer or a signal), its
/// wake-up time has come (one without any waits for a signal, which sets it). A `running` or `compensating` run was stopped while it ran: its
/// timers (a step's deadline, a `Delay` beside a step in flight) are not what it waits for.
fn is_due(run: &RunSummary, now: u64) -> bool {
    let awake = run.status != RunStatus::Waiting || run.wake_at_ms.is_some_and(|at| at <= now);
    let free = run.owner.is_none() || run.lease_until_ms.is_none_or(|until| until <= now);
    awake && free
}

/// A run the worker drives.
struct InFlight {
    run: String,
    workflow: String,
    future: Pin<Box<dyn Future<Output = ResumeResult>>>,
}

/// Polls every run in flight once; moves those that ended to `done`, those that were
/// unloaded to `unloaded`.
fn poll_all(
    flying: &mut Vec<InFlight>,
    done: &mut Vec<Resumed>,
    unloaded: &mut Vec<Unloaded>,
    cx: &mut std::task::Context<'_>,
) {
    let mut i = 0;
    while i < flying.len() {
        if let Poll::Ready(result) = flying[i].future.as_mut().poll(cx) {
            let ended = flying.swap_remove(i);
            let result = match result {
                Ok(Ended::Finished(outcome)) => Ok(outcome),
                Ok(Ended::Unloaded { wake_at_ms }) => {
                    unloaded.push(Unloaded {
                        run: ended.run,
                        workflow: ended.workflow,
                        wake_at_ms,
                    });
                    continue;
                }
                Err(error) => Err(error),
            };
            done.push(Resumed {
                run: ended.run,
                workflow: ended.workflow,
                result,
            });
        } else {
            i += 1;
        }
    }
}

/// [`resume`](crate::durable::resume) of `W` (unloaded again once it waits longer than
/// `unload`, if given), its output dropped.
fn resume_erased<W: DurableWorkflow, S: Store + Clone>(
    store: &S,
    id: &str,
    unload: Option<Duration>,
) -> Pin<Box<dyn Future<Output = ResumeResult>>> {
    let run = resume_shaped::<W, S, Ended<W::Output>>(store, id, unload);
    Box::pin(async move {
        run.await.map(|ended| match ended {
            Ended::Finished(outcome) => Ended::Finished(Outcome {
                result: outcome.result.map(|_| ()),
                report: outcome.report,
            }),
            Ended::Unloaded { wake_at_ms } => Ended::Unloaded { wake_at_ms },
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(owner: Option<&str>, lease: Option<u64>, wake: Option<u64>) -> RunSummary {
        RunSummary {
            id: "r".into(),
            workflow: "W".into(),
            graph_hash: 0,
            input_hash: 0,
            status: RunStatus::Running,
            next_seq: 0,
            version: 0,
            owner: owner.map(str::to_owned),
            lease_until_ms: lease,
            wake_at_ms: wake,
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn a_run_is_due_when_awake_and_not_held() {
        let waiting = |wake| RunSummary {
            status: RunStatus::Waiting,
            ..summary(None, None, wake)
        };
        assert!(is_due(&summary(None, None, None), 100));
        assert!(is_due(&summary(Some("p"), Some(100), None), 100));
        assert!(!is_due(&summary(Some("p"), Some(101), None), 100));
        assert!(is_due(&waiting(Some(100)), 100));
        assert!(!is_due(&waiting(Some(101)), 100));
        assert!(!is_due(&waiting(None), 100));
        // A run stopped while it ran is due whatever its timers say.
        assert!(is_due(&summary(None, None, Some(101)), 100));
    }
}
