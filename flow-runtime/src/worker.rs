//! The [`Worker`] (feature `durable`): registers durable workflows by name and resumes the
//! unfinished runs of a store that no live process holds, in a poll loop.
//!
//! A run is picked up when it is unfinished (`running`, `waiting` or `compensating`), its
//! workflow is registered and it was started with the graph the worker has (a run of another
//! graph is left to a worker that has it), no live owner holds its lease, and, if it is `waiting` (nothing
//! drives it until a timer or a signal), its wake-up time (its earliest timer) has come. A run
//! whose process died is picked up once its lease has expired, a run stopped by a failed commit
//! at once (it released its lease).
//!
//! With [`Worker::unload_after`], a run it drives that comes to wait long (every running step
//! waits for a `Delay` due later than the threshold, or for a signal) is unloaded: its state
//! stays in the store, the worker holds nothing of it, and picks it up again when it is due.
//!
//! On a store shared by processes (`flowdag-postgres`), the worker also executes the tasks of
//! distributed runs (`DurableRunner::distributed`): it claims the operations' attempts of the
//! registered workflows' runs, up to [`Worker::max_tasks`] at a time, executes each with its
//! idempotency key, renews its claims by heartbeat, and stores their outcomes; the runs
//! themselves are decided by whichever worker picks them up when they are due, and stay with
//! it while their tasks complete ([`Worker::sticky`]). On a store that notifies
//! (`flowdag-postgres`, through `LISTEN/NOTIFY`), the worker looks as soon as there is new
//! work rather than at its next poll. See `docs/scale-out.md`.
//!
//! With the feature `metrics`, the runs a worker drives and the tasks it executes are counted
//! through the `metrics` facade ([`crate::metrics`]); with `prometheus`, [`Worker::prometheus`]
//! serves them at `GET /metrics` while the worker runs.
//!
//! The worker drives the runs it resumes and the tasks it executes on its own task,
//! concurrently, up to [`Worker::max_runs`] and [`Worker::max_tasks`] at a time: it spawns
//! nothing, so it needs no `Send` workflow and no tokio runtime beyond the timer.
//!
//! ```
//! use std::time::Duration;
//! use flowdag_runtime::store::MemoryStore;
//! use flowdag_runtime::worker::Worker;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! // In an application: `.register::<Checkout>()` for each `#[flow(durable)]` workflow.
//! let worker = Worker::new(store.clone()).poll_interval(Duration::from_millis(10));
//! // Until the shutdown future completes (Ctrl-C in a service); then the runs in flight end.
//! let report = worker.run(tokio::time::sleep(Duration::from_millis(50))).await?;
//! assert!(report.polls >= 2);
//! # Ok::<(), flowdag_runtime::durable::DurableError>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use std::sync::{Arc, Mutex};

use crate::durable::{
    DurableError, DurableWorkflow, Ended, Holder, Mailbox, Unload, execute_task, graph_rows,
    resume_shaped,
};
use crate::report::Outcome;
use crate::store::{
    Notified, Owner, RunSummary, Store, StoreError, TASK_LEASE, TaskClaim, TaskCommitted,
    TaskOutcome, Watch, WorkflowVersion,
};

/// How a worker resumes a run of one registered workflow (unloading it again when it waits
/// longer than the duration, if one is given).
type ResumeFn<S> = fn(&S, &str, Unload, Holder) -> Pin<Box<dyn Future<Output = ResumeResult>>>;

/// The mailboxes of the runs a worker drives, by run: where it hands the outcomes of the
/// tasks of those runs it executes itself.
type Mailboxes = Arc<Mutex<HashMap<String, Arc<Mailbox>>>>;

/// How a worker executes a task of a distributed run of one registered workflow.
type ExecuteFn<S> =
    fn(&S, TaskClaim) -> Pin<Box<dyn Future<Output = Result<TaskOutcome, DurableError>>>>;

/// What the worker knows of one registered workflow.
struct Registered<S> {
    resume: ResumeFn<S>,
    execute: ExecuteFn<S>,
    /// The fingerprint of the workflow's graph: the worker picks up runs and claims tasks of
    /// runs started with this graph alone.
    graph_hash: u64,
}

/// The default lease of a run a worker resumes.
const RUN_LEASE: Duration = Duration::from_secs(60);

/// How long a distributed run stays with its worker by default once it waits for tasks alone.
const STICKY: Duration = Duration::from_secs(2);

/// The default number of tasks a worker executes at once.
const MAX_TASKS: usize = 16;

/// The first wait after a store request failed with a retryable error; it doubles up to
/// [`MAX_BACKOFF`] while the failures go on.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

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
    workflows: HashMap<String, Registered<S>>,
    interval: Duration,
    max_runs: usize,
    unload: Option<Duration>,
    sticky: Duration,
    max_tasks: usize,
    task_lease: Duration,
    run_lease: Duration,
    owner: Owner,
    mailboxes: Mailboxes,
    /// Its looks for runs so far: at the first and every [`ADOPT_EVERY`] after, it also looks
    /// for the runs of its workflows started with another graph (see [`Worker::due`]).
    looks: std::sync::atomic::AtomicU64,
    /// The runs of another graph it took at that look: one whose change is not compatible
    /// is not the worker's, and is not reported.
    adoptees: Mutex<std::collections::HashSet<String>>,
    /// The runs of another graph the worker found it cannot go on with: not taken again.
    foreign: Mutex<std::collections::HashSet<String>>,
    /// Where it serves its metrics while it runs ([`Worker::prometheus`]); nowhere by default.
    endpoint: crate::metrics::Listener,
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
/// with the status `waiting`, and is picked up again when it is due. The same event as
/// [`Ended::Unloaded`], with the run it happened to.
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
    /// Tasks of distributed runs it executed and whose outcome it stored.
    pub tasks_completed: u64,
    /// Tasks it executed whose claim it had lost when it tried to store their outcome, or
    /// while they ran (their lease lapsed and another worker took them, or their run gave
    /// them up): nothing of them was stored.
    pub tasks_lost: u64,
    /// Requests to the store that failed with a retryable error (the database unreachable, a
    /// busy run): the worker waited (100 ms, doubling up to 10 s) and tried again.
    pub store_retries: u64,
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
            sticky: STICKY,
            max_tasks: MAX_TASKS,
            task_lease: TASK_LEASE,
            run_lease: RUN_LEASE,
            owner: Owner::process(),
            mailboxes: Mailboxes::default(),
            looks: std::sync::atomic::AtomicU64::new(0),
            adoptees: Mutex::new(std::collections::HashSet::new()),
            foreign: Mutex::new(std::collections::HashSet::new()),
            endpoint: crate::metrics::Listener::none(),
        }
    }

    /// Registers `W`: the worker resumes the runs of `W` (by its name,
    /// [`DurableWorkflow::durable_name`]).
    /// Runs of workflows no registered type knows are left alone.
    pub fn register<W: DurableWorkflow>(mut self) -> Worker<S> {
        let registered = Registered {
            resume: resume_erased::<W, S> as ResumeFn<S>,
            execute: execute_erased::<W, S> as ExecuteFn<S>,
            graph_hash: graph_rows(&W::GRAPH).0,
        };
        self.workflows
            .insert(W::durable_name().into_owned(), registered);
        self
    }

    /// The most tasks of distributed runs the worker executes at once (16 by default; 0: it
    /// executes none, and only decides runs).
    pub fn max_tasks(mut self, max: usize) -> Worker<S> {
        self.max_tasks = max;
        self
    }

    /// The lease of each task the worker claims (30 s by default; at least 30 ms): renewed
    /// every third of it while the task runs; a worker that dies loses its tasks to another
    /// worker once it lapses.
    pub fn task_lease(mut self, lease: Duration) -> Worker<S> {
        self.task_lease = lease.max(Duration::from_millis(30));
        self
    }

    /// The lease of each run the worker resumes (60 s by default; at least 30 ms): extended by
    /// every commit and renewed every third of it while the run waits; when the worker dies,
    /// another worker takes its runs once their leases lapse. The worker takes back at once a
    /// run of its own whose commit failed (the database was unreachable). Shorter leases move a
    /// dead worker's runs sooner, at the cost of more renewals.
    pub fn run_lease(mut self, lease: Duration) -> Worker<S> {
        self.run_lease = lease.max(Duration::from_millis(30));
        self
    }

    /// Serves the process's metrics in Prometheus's text format at `GET /metrics` on `addr`
    /// while [`Worker::run`] runs (feature `prometheus`): installs the Prometheus recorder
    /// ([`Prometheus::install`](crate::metrics::Prometheus::install)) and binds `addr` now, so
    /// that a taken address is an error here; `127.0.0.1:0` binds a free port, which
    /// [`Worker::metrics_addr`] tells. The endpoint is a small HTTP/1.1 responder on a thread
    /// of its own while [`Worker::run`] runs (a scrape never wakes the worker's runs, and it
    /// needs nothing of the tokio runtime): one request at a time, each read and write given
    /// 2 s, requests up to 8 KiB; anything but `GET` or `HEAD /metrics` gets `400`, `404` or
    /// `405`. Between runs, and in [`Worker::resume_due`], the address stays bound but
    /// nothing answers.
    ///
    /// # Errors
    ///
    /// [`MetricsError::OtherRecorder`](crate::metrics::MetricsError::OtherRecorder): another
    /// `metrics` recorder is installed; [`MetricsError::Bind`](crate::metrics::MetricsError::Bind):
    /// `addr` cannot be bound.
    #[cfg(feature = "prometheus")]
    pub fn prometheus(
        mut self,
        addr: std::net::SocketAddr,
    ) -> Result<Worker<S>, crate::metrics::MetricsError> {
        self.endpoint = crate::metrics::Listener::bind(addr)?;
        Ok(self)
    }

    /// The address the worker serves its metrics on ([`Worker::prometheus`]), if it does
    /// (feature `prometheus`).
    #[cfg(feature = "prometheus")]
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.endpoint.local_addr()
    }

    /// The name the worker claims runs and tasks under (`"{host}:{pid}:{random}"` by default).
    pub fn owner(&self) -> &Owner {
        &self.owner
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

    /// How long a distributed run the worker decides stays with it once it waits for tasks
    /// alone (2 s by default; zero: it is unloaded as soon as it does).
    ///
    /// While it stays, the run is *sticky*: the worker holds its lease and its decided state
    /// in memory, and when a task completes it takes the outcome from the store (at the
    /// store's notification, where it notifies, or at the run's next look) and decides from
    /// that state, without loading the run or replaying its journal. A decision then costs
    /// the same at the run's 10th step as at its 10,000th. A run that waits longer is
    /// unloaded and decided later by whichever worker is free, from its journal. A sticky run
    /// takes one of [`Worker::max_runs`] slots while it stays.
    pub fn sticky(mut self, window: Duration) -> Worker<S> {
        self.sticky = window;
        self
    }

    /// The names of the registered workflows, sorted.
    pub fn workflows(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.workflows.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The runs the worker would pick up now, oldest first, at most `limit`; `skip` are runs
    /// it drives already.
    ///
    /// At its first look, and every [`ADOPT_EVERY`] looks after, the worker also picks up the
    /// unfinished runs of its workflows that were started with another graph, that no live
    /// owner holds and that are due: resuming one adopts the graph the worker has when the
    /// change is compatible (see [`incompatible_changes`](crate::durable::incompatible_changes)),
    /// after which the store hands it to the workers of that graph; one that is not is
    /// released at once, not reported, and left to a worker with its graph.
    async fn due(&self, limit: usize, skip: &[String]) -> Result<Vec<RunSummary>, DurableError> {
        let versions = self.versions();
        let asked = u32::try_from(limit.saturating_add(skip.len())).unwrap_or(u32::MAX);
        let mut runs = self.store.due_runs(&self.owner, &versions, asked).await?;
        let look = self
            .looks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if look.is_multiple_of(ADOPT_EVERY) {
            let others = self.of_other_graphs().await?;
            if let Ok(mut adoptees) = self.adoptees.lock() {
                adoptees.extend(others.iter().map(|run| run.id.clone()));
            }
            runs.extend(others);
        }
        Ok(runs
            .into_iter()
            .filter(|run| self.workflows.contains_key(run.workflow.as_str()))
            .filter(|run| !skip.contains(&run.id))
            .take(limit)
            .collect())
    }

    /// Whether `resumed` is a run of another graph that the worker took to adopt its graph and
    /// that refused it: not the worker's run, and not reported.
    fn not_mine(&self, resumed: &Resumed) -> bool {
        let mine = !matches!(resumed.result, Err(DurableError::GraphChanged { .. }))
            || !self
                .adoptees
                .lock()
                .is_ok_and(|adoptees| adoptees.contains(&resumed.run));
        if !mine && let Ok(mut foreign) = self.foreign.lock() {
            foreign.insert(resumed.run.clone());
        }
        !mine
    }

    /// The unfinished runs of the registered workflows started with another graph than the
    /// worker's, that no other live owner holds.
    async fn of_other_graphs(&self) -> Result<Vec<RunSummary>, DurableError> {
        let now = crate::store::now_ms();
        let mut found = Vec::new();
        for (name, registered) in &self.workflows {
            let filter = crate::store::RunFilter {
                workflow: Some((*name).to_owned()),
                statuses: vec![
                    crate::store::RunStatus::Running,
                    crate::store::RunStatus::Waiting,
                    crate::store::RunStatus::Compensating,
                ],
                ..crate::store::RunFilter::default()
            };
            let runs = self.store.list_runs(&filter).await?;
            let foreign = self.foreign.lock().map(|f| f.clone()).unwrap_or_default();
            found.extend(runs.into_iter().filter(|run| {
                run.graph_hash != registered.graph_hash
                    && run.is_due_for(&self.owner, now)
                    && !foreign.contains(&run.id)
            }));
        }
        Ok(found)
    }

    /// The registered workflows, each at the version of its graph this worker has: the runs
    /// and tasks the store hands it.
    fn versions(&self) -> Vec<WorkflowVersion> {
        self.workflows
            .iter()
            .map(|(name, registered)| WorkflowVersion::new(name.clone(), registered.graph_hash))
            .collect()
    }

    /// One look at the store: the runs to pick up (at most `runs`, but those of `skip`) and
    /// up to `claims` tasks claimed.
    async fn look(&self, runs: usize, skip: Vec<String>, claims: usize) -> Look {
        let runs = match runs {
            0 => Ok(Vec::new()),
            n => self.due(n, &skip).await,
        };
        let claims = match claims {
            0 => Ok(Vec::new()),
            n => {
                let versions = self.versions();
                let limit = u32::try_from(n).unwrap_or(u32::MAX);
                self.store
                    .claim_tasks(&self.owner, &versions, limit, self.task_lease)
                    .await
            }
        };
        Look { runs, claims }
    }

    /// Renews the claims of `held`; the answer is the claims lost.
    async fn beat(&self, held: Vec<TaskClaim>) -> Beat {
        self.store.heartbeat_tasks(&held, self.task_lease).await
    }

    /// Starts executing claimed tasks.
    fn execute(&self, claims: Vec<TaskClaim>) -> Vec<Executing> {
        claims
            .into_iter()
            .filter_map(|mut claim| {
                let registered = self.workflows.get(claim.workflow.as_str())?;
                // The inputs read with the claim go with the execution alone, not with the
                // claim the worker keeps (and renews).
                let inputs = claim.inputs.take();
                let future = execute_and_complete(
                    self.store.clone(),
                    TaskClaim {
                        inputs,
                        ..claim.clone()
                    },
                    registered.execute,
                    self.task_lease,
                    Arc::clone(&self.mailboxes),
                );
                crate::metrics::task_claimed(&claim.workflow);
                if let Some(ready_ms) = claim.ready_ms {
                    // The store's clock at the claim: the lease it gave, less its length.
                    let lease_ms = u64::try_from(self.task_lease.as_millis()).unwrap_or(u64::MAX);
                    let claimed_ms = claim.until_ms.saturating_sub(lease_ms);
                    crate::metrics::task_queue_lag(&claim.workflow, ready_ms, claimed_ms);
                }
                let _in_flight = crate::metrics::InFlight::task(&claim.workflow);
                Some(Executing {
                    claim,
                    future,
                    _in_flight,
                })
            })
            .collect()
    }

    /// Starts resuming `run`, if its workflow is registered.
    fn start(&self, run: &RunSummary) -> Option<InFlight> {
        let registered = self.workflows.get(run.workflow.as_str())?;
        crate::metrics::run_queue_lag(&run.workflow, run.due_since_ms(), crate::store::now_ms());
        let mailbox = Arc::new(Mailbox::default());
        let posted = Posted::new(&self.mailboxes, &run.id, &mailbox);
        Some(InFlight {
            run: run.id.clone(),
            workflow: run.workflow.clone(),
            future: (registered.resume)(
                &self.store,
                &run.id,
                (self.unload, Some(self.sticky)),
                Holder {
                    owner: self.owner.clone(),
                    lease: self.run_lease,
                    mailbox: Some(mailbox),
                },
            ),
            _posted: posted,
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
                let before = flying.len();
                poll_all(&mut flying, &mut done, &mut unloaded, cx);
                done.retain(|resumed| !self.not_mine(resumed));
                if flying.len() < before {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }

    /// Looks at the store every [`Worker::poll_interval`] and resumes the runs to pick up,
    /// driving up to [`Worker::max_runs`] at once, and claims the tasks of distributed runs,
    /// executing up to [`Worker::max_tasks`] at once, until `shutdown` completes. Then it
    /// picks up nothing more and returns once the runs it drives and the tasks it executes
    /// have ended or stopped.
    ///
    /// A distributed run it drives stays with it while its tasks complete (it is sticky,
    /// [`Worker::sticky`]); once it has waited for tasks alone longer than that window it is
    /// unloaded, and whichever worker is free picks it up when a task completes. A task's
    /// claim is renewed every third of [`Worker::task_lease`]; a task whose claim is lost is
    /// dropped. The worker looks again at once after a run or a task of its own ended, and,
    /// on a store that notifies ([`Store::watch`]: PostgreSQL's `LISTEN/NOTIFY`), as soon as
    /// a task is opened or completed or a signal is sent; the interval is then the fallback.
    ///
    /// A run that could not be resumed because of the store ([`DurableError::Store`]: busy,
    /// locked, full, closed, an I/O error) is tried again at a later look; one refused for a
    /// reason a new attempt would meet again (its replay diverged, its input cannot be read,
    /// its stored content is damaged or invalid, it no longer exists) is reported once and
    /// left alone. The store hands the worker only runs started with its graph of a
    /// registered workflow; at its first look it also takes those started with another graph,
    /// and goes on with them when the change is compatible (see `Worker::due`); the others
    /// wait for a worker that has their graph. A store that cannot be reached, or answers a retryable
    /// error, is asked again after a backoff (100 ms, doubling up to 10 s): the worker rides
    /// out a database restart.
    ///
    /// Dropping the future drops the runs it drives and the tasks it executes, which is safe:
    /// each run is journaled and is picked up again once its lease expires, each task is
    /// claimed again once its lease lapses.
    ///
    /// # Errors
    ///
    /// Looking for runs or tasks failed with an error that is not retryable (after the runs
    /// and tasks in flight have ended).
    pub async fn run(
        &self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<WorkerReport, DurableError> {
        let mut shutdown = pin!(shutdown);
        let mut flying: Vec<InFlight> = Vec::new();
        let mut executing: Vec<Executing> = Vec::new();
        let mut report = WorkerReport::default();
        let mut stopping = false;
        let mut failed = None;
        // Runs refused for a reason a new attempt would meet again (a diverged replay, an
        // unreadable input): not picked up again by this loop.
        let mut refused: Vec<String> = Vec::new();
        let mut seen = 0;
        let mut tasks = self.max_tasks > 0;
        let mut backoff = Duration::ZERO;
        let renew_every = self.task_lease / 3;
        // The worker's own requests are futures polled beside the runs and tasks in flight,
        // never awaited alone: those hold connections of the store's pool and row locks
        // halfway through their transactions, and must go on while the worker asks for more.
        let mut look: Option<Pin<Box<dyn Future<Output = Look> + '_>>> = None;
        let mut beat: Option<Pin<Box<dyn Future<Output = Beat> + '_>>> = None;
        // Whether the next look asks for runs to decide, for tasks to claim: both at the
        // start, after a run or task of its own ended, and at every interval; one of them when
        // the store notifies that kind of work (where it notifies: the look then comes at once
        // instead of after the interval).
        let mut want = Want {
            runs: true,
            tasks: true,
        };
        let mut wake_runs: Option<Notified> = None;
        let mut wake_tasks: Option<Notified> = None;
        let mut next_look = pin!(tokio::time::sleep(Duration::ZERO));
        let mut next_beat = pin!(tokio::time::sleep(renew_every));
        // Served on a thread of its own while this runs.
        let _endpoint = self.endpoint.serve();
        poll_fn(|cx| {
            loop {
                let (resumed, unloaded) = (report.resumed.len(), report.unloaded.len());
                poll_all(&mut flying, &mut report.resumed, &mut report.unloaded, cx);
                // (Only the runs that ended now can be taken out: the others were seen.)
                let mut at = resumed;
                while at < report.resumed.len() {
                    match self.not_mine(&report.resumed[at]) {
                        true => drop(report.resumed.remove(at)),
                        false => at += 1,
                    }
                }
                let tasks_before = executing.len();
                poll_tasks(&mut executing, &mut report, cx);
                // A run that ended or was unloaded, a task that ended: a slot is free and a
                // run may have become due. (A run another worker took first is not news.)
                if report.unloaded.len() > unloaded
                    || report.resumed[resumed..].iter().any(|r| r.result.is_ok())
                    || executing.len() < tasks_before
                {
                    want = Want::BOTH;
                }
                for resumed in &report.resumed[seen..] {
                    let for_good = matches!(&resumed.result, Err(e) if refused_for_good(e));
                    if for_good && !refused.contains(&resumed.run) {
                        refused.push(resumed.run.clone());
                    }
                }
                seen = report.resumed.len();
                if !stopping && shutdown.as_mut().poll(cx).is_ready() {
                    stopping = true;
                }

                // Looking for runs to decide and tasks to execute.
                if wake_runs
                    .as_mut()
                    .is_some_and(|notice| notice.as_mut().poll(cx).is_ready())
                {
                    wake_runs = None;
                    want.runs = true;
                }
                if wake_tasks
                    .as_mut()
                    .is_some_and(|notice| notice.as_mut().poll(cx).is_ready())
                {
                    wake_tasks = None;
                    want.tasks = true;
                }
                if next_look.as_mut().poll(cx).is_ready() {
                    want = Want::BOTH;
                }
                if look.is_none() && !stopping && (want.runs || want.tasks) {
                    let asked = std::mem::take(&mut want);
                    // Asked for before the look: work made while it runs is noticed.
                    if asked.runs {
                        wake_runs = self.store.watch(Watch::Runs);
                    }
                    if asked.tasks {
                        wake_tasks = self.store.watch(Watch::Tasks);
                    }
                    report.polls += 1;
                    let skip: Vec<String> = flying
                        .iter()
                        .map(|f| f.run.clone())
                        .chain(refused.iter().cloned())
                        .collect();
                    let runs = match asked.runs {
                        true => self.max_runs.saturating_sub(flying.len()),
                        false => 0,
                    };
                    let claims = match tasks && asked.tasks {
                        true => self.max_tasks.saturating_sub(executing.len()),
                        false => 0,
                    };
                    look = Some(Box::pin(self.look(runs, skip, claims)));
                }
                if let Some(pending) = look.as_mut()
                    && let Poll::Ready(found) = pending.as_mut().poll(cx)
                {
                    look = None;
                    let mut retry = false;
                    match found.runs {
                        Ok(runs) => flying.extend(runs.iter().filter_map(|run| self.start(run))),
                        Err(DurableError::Store(error)) if error.is_retryable() => {
                            crate::metrics::store_retry("due_runs");
                            retry = true;
                        }
                        Err(error) => {
                            failed = Some(error);
                            stopping = true;
                        }
                    }
                    match found.claims {
                        Ok(claims) => executing.extend(self.execute(claims)),
                        // A store of one process: this worker only resumes runs.
                        Err(StoreError::Unsupported { .. }) => tasks = false,
                        Err(error) if error.is_retryable() => {
                            crate::metrics::store_retry("claim_tasks");
                            retry = true;
                        }
                        Err(error) => {
                            failed = Some(DurableError::Store(error));
                            stopping = true;
                        }
                    }
                    let wait = if retry {
                        report.store_retries += 1;
                        backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                        warn_retry(backoff);
                        backoff
                    } else {
                        backoff = Duration::ZERO;
                        self.interval
                    };
                    next_look.as_mut().reset(tokio::time::Instant::now() + wait);
                    // Let the other tasks of this thread run before going on (a store in
                    // memory answers at once, and this loop would never yield).
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }

                // Renewing the claims of the tasks in flight.
                if beat.is_none() && !executing.is_empty() && next_beat.as_mut().poll(cx).is_ready()
                {
                    let held: Vec<TaskClaim> = executing.iter().map(|e| e.claim.clone()).collect();
                    beat = Some(Box::pin(self.beat(held)));
                }
                if let Some(pending) = beat.as_mut()
                    && let Poll::Ready(lost) = pending.as_mut().poll(cx)
                {
                    beat = None;
                    // A failed heartbeat is tried again soon; a claim not renewed lapses.
                    let again = match lost {
                        Ok(lost) => {
                            // Only the tasks still executing are lost: one that ended while
                            // the heartbeat was on its way was counted as it ended.
                            executing.retain(|e| {
                                let gone = lost.contains(&e.claim);
                                if gone {
                                    crate::metrics::task_lost(&e.claim.workflow);
                                    report.tasks_lost += 1;
                                }
                                !gone
                            });
                            renew_every
                        }
                        Err(_) => {
                            crate::metrics::store_retry("heartbeat_tasks");
                            MIN_BACKOFF.min(renew_every)
                        }
                    };
                    next_beat
                        .as_mut()
                        .reset(tokio::time::Instant::now() + again);
                    continue;
                }
                if executing.is_empty() && beat.is_none() && next_beat.is_elapsed() {
                    // The first task claimed after an idle spell is renewed a third of a
                    // lease after it starts, not at once.
                    next_beat
                        .as_mut()
                        .reset(tokio::time::Instant::now() + renew_every);
                }

                if stopping
                    && look.is_none()
                    && beat.is_none()
                    && flying.is_empty()
                    && executing.is_empty()
                {
                    return Poll::Ready(());
                }
                return Poll::Pending;
            }
        })
        .await;
        match failed {
            Some(error) => Err(error),
            None => Ok(report),
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
            .field("sticky", &self.sticky)
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

/// How often (in looks) a worker looks for the runs of its workflows started with another
/// graph: at its first look and then every this many (about a minute at the default poll
/// interval).
const ADOPT_EVERY: u64 = 120;

/// A run the worker drives.
struct InFlight {
    run: String,
    workflow: String,
    future: Pin<Box<dyn Future<Output = ResumeResult>>>,
    /// The run's mailbox is known to the worker's tasks while the run is in flight.
    _posted: Posted,
}

/// A run's mailbox in the worker's list, taken out when the run leaves the worker.
struct Posted {
    mailboxes: Mailboxes,
    run: String,
    mailbox: Arc<Mailbox>,
}

impl Posted {
    fn new(mailboxes: &Mailboxes, run: &str, mailbox: &Arc<Mailbox>) -> Posted {
        lock(mailboxes).insert(run.to_owned(), Arc::clone(mailbox));
        Posted {
            mailboxes: Arc::clone(mailboxes),
            run: run.to_owned(),
            mailbox: Arc::clone(mailbox),
        }
    }
}

impl Drop for Posted {
    fn drop(&mut self) {
        let mut mailboxes = lock(&self.mailboxes);
        if mailboxes
            .get(&self.run)
            .is_some_and(|posted| Arc::ptr_eq(posted, &self.mailbox))
        {
            mailboxes.remove(&self.run);
        }
    }
}

/// The worker's mailboxes; a panic while they were held leaves them whole.
fn lock(mailboxes: &Mailboxes) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Mailbox>>> {
    mailboxes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// What the worker's next look asks the store for.
#[derive(Clone, Copy, Default)]
struct Want {
    runs: bool,
    tasks: bool,
}

impl Want {
    const BOTH: Want = Want {
        runs: true,
        tasks: true,
    };
}

/// What one look at the store found: runs to pick up, tasks claimed.
struct Look {
    runs: Result<Vec<RunSummary>, DurableError>,
    claims: Result<Vec<TaskClaim>, StoreError>,
}

/// The claims a heartbeat found lost.
type Beat = Result<Vec<TaskClaim>, StoreError>;

/// A task the worker executes: its claim, and its execution followed by its completion.
struct Executing {
    claim: TaskClaim,
    future: Pin<Box<dyn Future<Output = TaskEnd>>>,
    /// The task is in the gauge of tasks in flight while it is here.
    _in_flight: crate::metrics::InFlight,
}

/// How a task's execution ended on this worker.
enum TaskEnd {
    /// Its outcome is stored, or handed to its run, which this worker drives (the batch
    /// that journals it stores it).
    Completed,
    /// Its claim was lost before the outcome could be stored: nothing was.
    Lost,
    /// The store kept failing, or this worker may not execute it (another graph): left to
    /// lapse, so that another worker takes it.
    Left,
}

/// Polls every task in flight once; counts and drops those that ended.
fn poll_tasks(
    executing: &mut Vec<Executing>,
    report: &mut WorkerReport,
    cx: &mut std::task::Context<'_>,
) {
    executing.retain_mut(|task| match task.future.as_mut().poll(cx) {
        Poll::Pending => true,
        Poll::Ready(end) => {
            match end {
                TaskEnd::Completed => report.tasks_completed += 1,
                TaskEnd::Lost => {
                    crate::metrics::task_lost(&task.claim.workflow);
                    report.tasks_lost += 1;
                }
                TaskEnd::Left => {}
            }
            false
        }
    });
}

/// Executes a claimed task, then stores its outcome: again after a backoff while the store
/// answers a retryable error, for as long as the claim's lease would last.
fn execute_and_complete<S: Store + Clone>(
    store: S,
    mut claim: TaskClaim,
    execute: ExecuteFn<S>,
    lease: Duration,
    mailboxes: Mailboxes,
) -> Pin<Box<dyn Future<Output = TaskEnd>>> {
    Box::pin(async move {
        let inputs = claim.inputs.take();
        let executed = TaskClaim {
            inputs,
            ..claim.clone()
        };
        let outcome = match execute(&store, executed).await {
            Ok(outcome) => outcome,
            // Another version of the workflow (the store hands a worker only tasks of its own
            // graphs, so only a store that does not keep to that gets here), or the store
            // failing: left for the lease to lapse; another worker (or this one, later) takes
            // it.
            Err(DurableError::GraphChanged { .. } | DurableError::Store(_)) => {
                return TaskEnd::Left;
            }
            // What any worker would meet again (an input that cannot be read): the attempt
            // fails, and the run's policy decides.
            Err(error) => TaskOutcome::Failed {
                error: error.to_string(),
            },
        };
        // The run is this worker's (sticky): the outcome goes to it in memory, and the batch
        // that journals it is its only write. A run that stops taking outcomes gives it back.
        let mailbox = lock(&mailboxes).get(&claim.run).cloned();
        let outcome = match mailbox {
            Some(mailbox) => match mailbox.deliver(&claim, outcome) {
                None => return TaskEnd::Completed,
                Some(back) => back,
            },
            None => outcome,
        };
        let give_up = tokio::time::Instant::now() + lease;
        let mut backoff = MIN_BACKOFF;
        loop {
            match store.complete_task(&claim, outcome.clone()).await {
                Ok(TaskCommitted::Applied) => return TaskEnd::Completed,
                Ok(TaskCommitted::Stale) => return TaskEnd::Lost,
                Err(error) if error.is_retryable() && tokio::time::Instant::now() < give_up => {
                    crate::metrics::store_retry("complete_task");
                    warn_retry(backoff);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(_) => return TaskEnd::Left,
            }
        }
    })
}

/// Says that the worker waits before asking the store again.
fn warn_retry(after: Duration) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        retry_in_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        "the store failed; retrying"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = after;
}

/// [`execute_task`] of `W`.
fn execute_erased<W: DurableWorkflow, S: Store + Clone>(
    store: &S,
    claim: TaskClaim,
) -> Pin<Box<dyn Future<Output = Result<TaskOutcome, DurableError>>>> {
    let store: Arc<dyn Store> = Arc::new(store.clone());
    Box::pin(async move { execute_task::<W>(store, claim).await })
}

/// [`resume`](crate::durable::resume) of `W` (unloaded again once it waits longer than
/// `unload`, if given), its output dropped.
fn resume_erased<W: DurableWorkflow, S: Store + Clone>(
    store: &S,
    id: &str,
    unload: Unload,
    holder: Holder,
) -> Pin<Box<dyn Future<Output = ResumeResult>>> {
    let run = resume_shaped::<W, S, Ended<W::Output>>(store, id, unload, Some(holder));
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
    use crate::store::RunStatus;

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
        assert!(RunSummary::is_due(&summary(None, None, None), 100));
        assert!(RunSummary::is_due(
            &summary(Some("p"), Some(100), None),
            100
        ));
        assert!(!RunSummary::is_due(
            &summary(Some("p"), Some(101), None),
            100
        ));
        assert!(RunSummary::is_due(&waiting(Some(100)), 100));
        assert!(!RunSummary::is_due(&waiting(Some(101)), 100));
        assert!(!RunSummary::is_due(&waiting(None), 100));
        // A run stopped while it ran is due whatever its timers say.
        assert!(RunSummary::is_due(&summary(None, None, Some(101)), 100));
    }
}
