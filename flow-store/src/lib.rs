//! The storage interface of durable flow runs: the [`Store`] trait, the records a store keeps,
//! [`StoreError`], and [`MemoryStore`]; and, with the feature `contract`, the contract suite
//! every store must pass (the module `contract`).
//!
//! A store keeps the journal of each durable run (its events, in order), the outputs of its
//! completed nodes, its timers, the signals sent to it, its lease, and, for runs distributed
//! over many worker processes, its tasks. Here is a run's journal written to [`MemoryStore`]:
//!
//! ```
//! use std::time::Duration;
//! use flowdag_store::{Batch, Committed, MemoryStore, NewRun, Owner, Store, StoredEvent};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let owner = Owner::new("worker-1");
//! let lease = Duration::from_secs(30);
//! let run = NewRun::new("order-42", "Checkout", 0xF10, owner.clone(), lease);
//! let created = store.create_run(run).await?;
//! let lease_now = created.lease().expect("a new run").clone();
//!
//! let mut batch = Batch::new(&lease_now, 0, lease);
//! batch.events.push(StoredEvent::new(0, "RunStarted"));
//! assert_eq!(store.commit(batch.clone()).await?, Committed::Applied { next_seq: 1 });
//! // The answer was lost and the batch is sent again: nothing is written twice.
//! assert_eq!(store.commit(batch).await?, Committed::AlreadyApplied { next_seq: 1 });
//! assert_eq!(store.events("order-42", 0).await?.len(), 1);
//! # Ok::<(), flowdag_store::StoreError>(())
//! # }).unwrap();
//! ```
//!
//! Users of flow meet this crate as `flowdag::store`: they pick a store ([`MemoryStore`], or
//! `SqliteStore` of the crate `flowdag-sqlite`, or `PostgresStore` of `flowdag-postgres`) and hand it
//! to a durable run or a worker; the engine does the rest. Whoever writes a store depends on
//! this crate alone, not on the engine.
//!
//! # A store is dumb
//!
//! A store keeps what the engine hands it, atomically, and answers conditional updates. It
//! never makes an event number, never reads an event's meaning (an event's `kind` and `data`
//! are opaque to it), never decides what a run does next. Every decision is the engine's, so
//! every store (memory, SQLite, PostgreSQL) behaves the same, and one contract suite checks it.
//!
//! The journal of a run is written in [`Batch`]es: the events of one round of the scheduler
//! with the outputs, timers, signal consumptions and status they imply, committed in one
//! transaction that first checks the run's next sequence number and its lease. Re-sending a
//! batch that was applied (its answer was lost) is acknowledged as
//! [`Committed::AlreadyApplied`] and writes nothing.
//!
//! # Writing a store
//!
//! Implement [`Store`]: eleven required methods, each one atomic step (one transaction of a
//! database), whose rules are written on the method. The five task methods
//! ([`Store::claim_tasks`] and the rest) have defaults that answer [`StoreError::Unsupported`]:
//! a store that serves one process implements them only to run distributed runs.
//! [`Store::due_runs`] has a default over [`Store::list_runs`] and this process's clock; a
//! store shared by machines answers it by its own clock.
//!
//! What a store needs to apply the rules alike is here too: [`Batch::check_numbering`],
//! [`Batch::replayed`] (the idempotency of a commit), [`Batch::check_lease`] and [`Batch::gap`]
//! make the errors [`Store::commit`] must answer, in its order; [`RunSummary::is_due_for`] is
//! the rule of [`Store::due_runs`]; [`RunFilter::matches`] that of [`Store::list_runs`]. The
//! enums a store keeps as text have a stable name each ([`RunStatus::as_str`],
//! [`TimerKind::as_str`], [`SignalMode::as_str`], [`StoredPath`]'s `Display`) and parse back
//! with [`FromStr`].
//!
//! Then run the contract suite from the store's tests, with this crate in the store's
//! `[dev-dependencies]` with the feature `contract`:
//!
//! ```toml
//! [dev-dependencies]
//! flowdag-store = { version = "0.1", features = ["contract"] }
//! ```
//!
//! ```no_run
//! # #[cfg(feature = "contract")]
//! # {
//! use std::sync::Arc;
//! use flowdag_store::{MemoryStore, Store, contract};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! // A fresh, empty store of yours for each case (here, the store of this crate).
//! contract::all(|| Arc::new(MemoryStore::new()) as Arc<dyn Store>).await;
//! # });
//! # }
//! ```
//!
//! The module `contract` says what each case checks, and which stores also run its second
//! part, `contract::distributed` (the tasks of distributed runs).
//!
//! # Why the trait is object-safe
//!
//! The scheduler is compiled once for every workflow and must not become generic over the
//! store; a command line picks a store from a URL at run time. So stores are used as
//! `Arc<dyn Store>` and every method returns a [`StoreFuture`], a boxed `Send` future: one
//! allocation per call, nothing next to a disk flush.
//!
//! # Times
//!
//! The engine passes *durations* (a lease of 30 s, a timer due in 5 min); the store adds them to
//! its own clock. Every instant a store answers (a lease's end, a timer's due time, when a
//! signal was sent, [`Loaded::now_ms`]) is in milliseconds since the Unix epoch by that clock.
//! Stores shared by many processes (PostgreSQL) thus never compare the clocks of two machines:
//! a lease or a timer is due by the database's clock alone.

mod error;
mod event;
mod memory;
mod task;

#[cfg(any(test, feature = "contract"))]
pub mod contract;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use error::{StoreError, utc};
pub use event::{StepKind, StoredEvent, StoredPath, StoredStep};
pub use memory::MemoryStore;

/// Why [`Store::reopen`] refuses a run in another status ([`StoreError::WrongStatus`]).
pub const REOPENS: &str = "only a run that failed, was cancelled or succeeded (not a continued generation) can be reopened";
pub use task::{
    TaskChange, TaskClaim, TaskCommitted, TaskInputs, TaskOutcome, TaskResult, previous_instance,
};

/// What every [`Store`] method returns: a boxed `Send` future of the store's answer.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What [`Store::watch`] returns: a future that completes when the store may have a change
/// of the kind watched.
pub type Notified = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What a caller of [`Store::watch`] waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Watch {
    /// Tasks to claim: a batch opened tasks.
    Tasks,
    /// Runs to decide: a task done or a signal sent while no live worker holds the run.
    Runs,
    /// A change to this run from outside its decider: one of its tasks done, or a signal sent
    /// to it.
    Run(String),
}

/// Storage for durable runs. See the [crate documentation](crate).
///
/// Every method is one atomic step of the store: it is applied whole or not at all, and a
/// future dropped before it completes either applied it or not (a caller that lost an answer
/// sends the same request again; [`Store::commit`] and [`Store::create_run`] are idempotent).
pub trait Store: Send + Sync + 'static {
    /// Creates a run with its node rows and its first events and timers, in one transaction,
    /// and gives its lease to `run.owner`. An existing id is not an error: the answer is
    /// [`Created::Exists`] with the stored run, which the caller compares (graph hash, input
    /// hash) to decide whether it is the same run.
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created>;

    /// Everything needed to resume a run, and its lease for `owner` (a new fencing version):
    /// the run, its node rows, its own events (not its nest instances': see
    /// [`Loaded::events`]) and next sequence number, the outputs a resume needs (not the
    /// superseded ones: [`Batch::superseded`]), open timers, unconsumed signals and the
    /// store's clock: the run's decided state, whose size does not grow with a `Loop`'s
    /// iterations. Errors: [`StoreError::NotFound`]; [`StoreError::Busy`] while another owner's
    /// lease has not expired (never for a finished run: its lease guards nothing).
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded>;

    /// The runs that match `filter`, oldest first.
    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>>;

    /// The events of `run` from sequence number `from_seq` on, in order.
    /// [`StoreError::NotFound`] when the run does not exist.
    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>>;

    /// The data of `run`, read without its lease: its stored parameters, the outputs of its
    /// completed nodes and nest instances (by node, then instance), and how it ended, if it
    /// has. For those who look at a run without running it (a command line, a dashboard): it
    /// writes nothing, takes no lease and bumps no version, so a run that an owner holds is
    /// read as it stands and its owner goes on. [`StoreError::NotFound`] when the run does not
    /// exist.
    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData>;

    /// The node rows of `run`: its graph as the run stores it (each step's name, label,
    /// predecessors, kind and policy; the graph it adopted, if it changed compatibly), read
    /// without its lease, as [`Store::run_data`] is: for those who draw a run without its
    /// workflow's code (a dashboard). [`StoreError::NotFound`] when the run does not exist.
    ///
    /// The default is [`StoreError::Unsupported`].
    fn nodes<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<NodeRow>> {
        let _ = run;
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "nodes",
        })))
    }

    /// Appends a batch in one transaction, after checking, in this order:
    ///
    /// 1. the run exists ([`StoreError::NotFound`]);
    /// 2. the events are numbered from `batch.first_seq` without a gap, and an end comes with a
    ///    final status ([`StoreError::Invalid`]);
    /// 3. if every event of the batch is already stored with the same content, nothing is
    ///    written and the answer is [`Committed::AlreadyApplied`]; if some are stored with
    ///    other content, [`StoreError::Conflict`];
    /// 4. the batch's lease is the run's current one (owner and version), else
    ///    [`StoreError::LeaseLost`] naming the holder;
    /// 5. the run is not finished ([`StoreError::Finished`]);
    /// 6. `batch.first_seq` is the run's next sequence number ([`StoreError::Conflict`]);
    /// 7. every signal it consumes is the run's and still open ([`StoreError::SignalTaken`]).
    ///
    /// Then it stores the events, outputs, timer changes, signal consumptions, waits, task
    /// changes, status and end, replaces the run's graph hash and node rows when the batch
    /// has a `graph`, and extends the lease by `batch.lease`. A batch that ends the run removes
    /// all its tasks.
    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed>;

    /// The timers of unfinished runs due within `horizon` of the store's clock, earliest first
    /// (ties by run id, then node, instance and kind), at most `limit`.
    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>>;

    /// Sends a signal to a run. [`SignalMode::Kept`] signals are stored until a batch consumes
    /// them; [`SignalMode::Transient`] ones only when a step of the run waits for that name,
    /// else they are dropped ([`SignalSent::Dropped`]). A stored signal that a step of the run
    /// waits for makes the run due (`wake_at_ms` = when it was sent); one that no step waits
    /// for yet makes it due once a step opens a wait for its name; a request (a name that
    /// starts with [`requests::PREFIX`]) makes it due at once, waited for or not. Errors:
    /// [`StoreError::NotFound`], [`StoreError::Finished`].
    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent>;

    /// The unconsumed signals of `run` with an id above `after`, in the order they were sent.
    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>>;

    /// Extends the leases of `held` that `owner` still holds by `lease`; returns the others
    /// (lost: another owner took the run, or it was released): the caller stops those runs.
    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>>;

    /// Gives up the leases of `held` that `owner` still holds, so that another owner may load
    /// those runs at once.
    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()>;

    /// The unfinished runs of `workflows` that `owner` may pick up now, by the store's clock,
    /// oldest first, at most `limit`: runs of one of those workflows *and* started with that
    /// version of its graph (a worker never picks up a run it cannot decide), that no other
    /// owner's lease holds (none, `owner`'s own, or it expired), and, when `waiting`, that are
    /// due (its wake-up time has come, or one of its tasks is done).
    ///
    /// The default lists the runs and compares with this process's clock: right for a store
    /// of one machine. A store shared by machines answers by its own clock.
    fn due_runs<'a>(
        &'a self,
        owner: &'a Owner,
        workflows: &'a [WorkflowVersion],
        limit: u32,
    ) -> StoreFuture<'a, Vec<RunSummary>> {
        Box::pin(async move {
            let filter = RunFilter {
                statuses: vec![
                    RunStatus::Running,
                    RunStatus::Waiting,
                    RunStatus::Compensating,
                ],
                ..RunFilter::default()
            };
            let now = now_ms();
            let runs = self.list_runs(&filter).await?;
            Ok(runs
                .into_iter()
                .filter(|run| {
                    run.is_due_for(owner, now)
                        && workflows
                            .iter()
                            .any(|w| w.covers(&run.workflow, run.graph_hash))
                })
                .take(limit as usize)
                .collect())
        })
    }

    // -- tasks: the operations of distributed runs, executed by any worker (`task.rs`) -----

    /// Claims up to `limit` tasks of unfinished runs of `workflows` (each run of one of those
    /// workflows and started with that version of its graph: a worker never claims a task it
    /// cannot execute) for `owner`, each for `lease`: tasks nobody holds, and tasks whose
    /// claim lapsed (re-claimed with the same attempt, [`TaskClaim::lapsed`]). Each claim is a
    /// compare-and-set on the task's version, so two workers never hold one task. Oldest tasks
    /// first.
    ///
    /// The default is [`StoreError::Unsupported`]: a store of one process has no tasks.
    fn claim_tasks<'a>(
        &'a self,
        owner: &'a Owner,
        workflows: &'a [WorkflowVersion],
        limit: u32,
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        let _ = (owner, workflows, limit, lease);
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "claim_tasks",
        })))
    }

    /// Extends the claims of `held` still held (same version and owner) by `lease`; returns
    /// those lost, whose execution the worker stops.
    ///
    /// The default is [`StoreError::Unsupported`].
    fn heartbeat_tasks<'a>(
        &'a self,
        held: &'a [TaskClaim],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        let _ = (held, lease);
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "heartbeat_tasks",
        })))
    }

    /// Stores the outcome of a claimed task, in one transaction, if the claim is still the
    /// task's (same version and owner, still running; its lease may have lapsed as long as
    /// nobody claimed it since): the task becomes done with its outcome (a completed one's
    /// with its output) and the run becomes due ([`Store::due_runs`] answers it). Else
    /// [`TaskCommitted::Stale`] and nothing is written. The output becomes the node's
    /// (`Loaded::outputs`, [`TaskInputs::outputs`]) only when the run journals the outcome,
    /// in the batch's `outputs`: a task's output that the run gave up never reaches a
    /// successor.
    ///
    /// The default is [`StoreError::Unsupported`].
    fn complete_task<'a>(
        &'a self,
        claim: &'a TaskClaim,
        outcome: TaskOutcome,
    ) -> StoreFuture<'a, TaskCommitted> {
        let _ = (claim, outcome);
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "complete_task",
        })))
    }

    /// The done tasks of `run` (outcomes its journal has not taken yet), by node.
    ///
    /// The default is [`StoreError::Unsupported`].
    fn task_results<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<TaskResult>> {
        let _ = run;
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "task_results",
        })))
    }

    /// A wake-up for `what`: a future that completes at the next change of that kind the
    /// store sees, or when it may have missed one (its notifications were interrupted). A
    /// change made after this call and before the future is first polled wakes it too, so a
    /// caller asks for the future first, then looks at the store, then waits.
    ///
    /// `None` (the default) where the store does not notify: the caller looks again after an
    /// interval. `flowdag-postgres` notifies through `LISTEN/NOTIFY`; a notification is a
    /// hint, never the only way work is found: callers keep polling, less often.
    fn watch(&self, what: Watch) -> Option<Notified> {
        let _ = what;
        None
    }

    /// What executing a task of `run` needs: its parameters and stored outputs.
    /// [`StoreError::NotFound`] when the run does not exist.
    ///
    /// The default is [`StoreError::Unsupported`].
    fn task_inputs<'a>(&'a self, run: &'a str) -> StoreFuture<'a, TaskInputs> {
        let _ = run;
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "task_inputs",
        })))
    }

    /// Sets a finished run going again, in one transaction: a run that failed or was
    /// cancelled (a *redrive*), or one that succeeded (to undo it: its compensations run, as
    /// when a parent run compensates a child). It appends `marker` (an event at the run's
    /// next sequence number, which says from where the journal is replayed), clears the run's end, and leaves it `running` with no owner
    /// and no lease, so that the next owner to load it (a worker, a resume) runs it. Its
    /// events, outputs and signals stay. Errors: [`StoreError::NotFound`];
    /// [`StoreError::WrongStatus`] for a run in any other status (nothing is written);
    /// [`StoreError::Conflict`] when `marker.seq` is not the run's next sequence number (an
    /// event was appended since the caller read the journal).
    ///
    /// A run in this status has no owner (its lease guarded nothing once it ended), so a
    /// store opened as a client may do this beside the store's owner.
    ///
    /// The default is [`StoreError::Unsupported`] (the stores of this project implement it).
    fn reopen<'a>(&'a self, run: &'a str, marker: StoredEvent) -> StoreFuture<'a, RunSummary> {
        let _ = (run, marker);
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "reopen",
        })))
    }

    /// Ends the current generation of a run and starts the next under the same id, in one
    /// transaction (*continue as new*): the generation's rows are kept under `next.archive`
    /// (a finished run with the status [`RunStatus::Continued`]) or deleted; the run keeps its
    /// id, workflow, graph, `input_hash`, creation time and unconsumed signals, takes
    /// `next.input`, `next.options` and `next.timers`, has an empty journal (its next
    /// sequence number is 0), no outputs, waits or tasks, the status `running`, and a new
    /// lease for the caller (the version bumped: a batch of the ended generation cannot
    /// land). Errors: [`StoreError::NotFound`]; [`StoreError::LeaseLost`] when `lease` is not
    /// the run's; [`StoreError::Finished`] for a finished run; [`StoreError::Conflict`] when
    /// `next.next_seq` is not the run's next sequence number; [`StoreError::Invalid`] when a
    /// run named `next.archive` exists. Nothing is written on an error.
    ///
    /// The default is [`StoreError::Unsupported`] (the stores of this project implement it).
    fn continue_run<'a>(&'a self, lease: &'a Lease, next: ContinueRun) -> StoreFuture<'a, Lease> {
        let _ = (lease, next);
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "continue_run",
        })))
    }

    /// Deletes a finished run (`succeeded`, `failed`, `cancelled` or `continued`) and everything stored
    /// for it: its node rows, events, outputs, timers, signals, waits and tasks, in one
    /// transaction. Errors: [`StoreError::NotFound`]; [`StoreError::WrongStatus`] for a run
    /// that has not finished (nothing is deleted).
    ///
    /// As for [`Store::reopen`], a store opened as a client may do this beside its owner.
    ///
    /// The default is [`StoreError::Unsupported`] (the stores of this project implement it).
    fn delete_run<'a>(&'a self, run: &'a str) -> StoreFuture<'a, ()> {
        let _ = run;
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            what: "delete_run",
        })))
    }
}

/// The names of the signals that carry an operator's requests to a run: names a workflow
/// cannot declare (its signals are named by Rust identifiers), refused by the engine's
/// `send_signal` and by `flow signal`.
///
/// A stored, unconsumed signal whose name starts with [`requests::PREFIX`] makes its run due
/// at once, whatever its steps wait for: a run unloaded while it waits (for a long timer, a
/// signal) is loaded again by the next worker, which carries the request out.
pub mod requests {
    /// What every request's name starts with.
    pub const PREFIX: &str = "flow.";
    /// Cancel the run: its running steps are cancelled and its compensations run, as when its
    /// cancel token is cancelled.
    pub const CANCEL: &str = "flow.cancel";
    /// Terminate the run: it ends at once, cancelled, without compensation.
    pub const TERMINATE: &str = "flow.terminate";

    /// Whether `name` is a request's name (it starts with [`PREFIX`]).
    pub fn is_request(name: &str) -> bool {
        name.starts_with(PREFIX)
    }
}

/// A workflow at one version of its graph: what a worker can do. A worker picks up runs and
/// claims tasks of the versions it has, and only those ([`Store::due_runs`],
/// [`Store::claim_tasks`]): a run started with another graph of the same workflow is left to
/// a worker that has that graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkflowVersion {
    /// The workflow's name ([`RunSummary::workflow`]).
    pub workflow: String,
    /// The fingerprint of its graph ([`RunSummary::graph_hash`]).
    pub graph_hash: u64,
}

impl WorkflowVersion {
    /// Workflow `workflow` with the graph of fingerprint `graph_hash`.
    pub fn new(workflow: impl Into<String>, graph_hash: u64) -> WorkflowVersion {
        WorkflowVersion {
            workflow: workflow.into(),
            graph_hash,
        }
    }

    /// Whether a run of `workflow` started with the graph of fingerprint `graph_hash` is one
    /// of this version.
    pub fn covers(&self, workflow: &str, graph_hash: u64) -> bool {
        self.workflow == workflow && self.graph_hash == graph_hash
    }
}

/// Who holds a lease: one per process (or per worker), made once.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(Arc<str>);

impl Owner {
    /// An owner of this name.
    pub fn new(name: impl Into<Arc<str>>) -> Owner {
        Owner(name.into())
    }

    /// An owner for this process: `"{host}:{pid}:{random}"`, different for every call.
    pub fn process() -> Owner {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
        let pid = std::process::id();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        // Not secret, only distinct: the clock, this call's number, and the process id.
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let random = mix(&[
            &nanos.to_le_bytes(),
            &call.to_le_bytes(),
            &pid.to_le_bytes(),
        ]);
        Owner(format!("{host}:{pid}:{:08x}", random as u32).into())
    }

    /// The owner's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({:?})", &*self.0)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The right to write a run's journal: the owner, and the run's version when it was given (a
/// fencing token: taking the run bumps it, so a former owner's commits are refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The run.
    pub run: String,
    /// Who holds it.
    pub owner: Owner,
    /// The run's version when the lease was given.
    pub version: u64,
    /// When it expires, in ms since the Unix epoch by the store's clock.
    pub until_ms: u64,
}

/// A node of a run's graph, as stored with the run (to tell what changed when the graph did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// Its index in the workflow's `GRAPH.nodes()`.
    pub node: u32,
    /// Its name.
    pub name: String,
    /// Its label (the call as written).
    pub label: String,
    /// A stable hash of what defines it (name, kind, label, policy, predecessors, the call
    /// that undoes it).
    pub fingerprint: u64,
    /// Its predecessors, by index.
    pub preds: Vec<u32>,
    /// The call that undoes it (`compensate = refund(&charge)`, as written); empty when it
    /// has none.
    pub compensate: String,
    /// Its kind (`operation`, `signal`, `foreach`, …). Empty: not stored (a row written
    /// before stores kept it).
    pub kind: String,
    /// Its resilience settings as written (`timeout = 5s, retries = 3`); empty when it has
    /// none of its own, or when not stored (a row whose `kind` is empty).
    pub policy: String,
}

/// A run to create: [`Store::create_run`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// The run's id, chosen by the caller (`"order-42"`).
    pub id: String,
    /// The workflow's name.
    pub workflow: String,
    /// A hash of the workflow's graph: a run is resumed only by the same graph.
    pub graph_hash: u64,
    /// The graph's nodes.
    pub nodes: Vec<NodeRow>,
    /// The run's stored parameters (serialized).
    pub input: Vec<u8>,
    /// A hash of `input`: the same id with another input is another run.
    pub input_hash: u64,
    /// The runner's options (serialized): failure policy, limits, deadline.
    pub options: Vec<u8>,
    /// Who runs it first.
    pub owner: Owner,
    /// For how long the lease is given.
    pub lease: Duration,
    /// The first events (`RunStarted`, the roots' `Requested`), numbered from 0.
    pub events: Vec<StoredEvent>,
    /// The first timers (a run deadline).
    pub timers: Vec<TimerChange>,
}

impl NewRun {
    /// A run with no nodes, input, options, events or timers yet (fill the fields).
    pub fn new(
        id: impl Into<String>,
        workflow: impl Into<String>,
        graph_hash: u64,
        owner: Owner,
        lease: Duration,
    ) -> NewRun {
        NewRun {
            id: id.into(),
            workflow: workflow.into(),
            graph_hash,
            nodes: Vec::new(),
            input: Vec::new(),
            input_hash: 0,
            options: Vec::new(),
            owner,
            lease,
            events: Vec::new(),
            timers: Vec::new(),
        }
    }
}

/// A run that ends a generation and goes on under its own id with a new input (*continue as
/// new*): [`Store::continue_run`].
#[derive(Debug, Clone, PartialEq)]
pub struct ContinueRun {
    /// The run's next sequence number as the caller knows it: the generation's whole journal
    /// is committed (else [`StoreError::Conflict`]).
    pub next_seq: u64,
    /// The next generation's stored parameters (serialized). The run's `input_hash` stays the
    /// first generation's: it names the run, whatever generation it is in.
    pub input: Vec<u8>,
    /// The next generation's runner options (serialized).
    pub options: Vec<u8>,
    /// `Some(id)`: the ended generation is kept as a finished run of that id with the status
    /// [`RunStatus::Continued`]: its node rows, events, outputs, consumed signals and `end`.
    /// `None`: they are deleted.
    pub archive: Option<String>,
    /// How the ended generation ended (kept with its archive).
    pub end: RunEnd,
    /// The next generation's first timers (a run deadline).
    pub timers: Vec<TimerChange>,
    /// For how long the lease is given.
    pub lease: Duration,
}

/// The answer of [`Store::create_run`].
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// The run was created; the lease is the caller's.
    New {
        /// The caller's lease.
        lease: Lease,
        /// The next sequence number (the number of first events).
        next_seq: u64,
    },
    /// A run of that id existed; nothing was written.
    Exists(RunSummary),
}

impl Created {
    /// The lease of a new run; `None` when it existed.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Created::New { lease, .. } => Some(lease),
            Created::Exists(_) => None,
        }
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunStatus {
    /// Running (or to be resumed: its owner may have died).
    Running,
    /// Waiting for a timer or a signal; no process needs to hold it.
    Waiting,
    /// Running its compensations.
    Compensating,
    /// Ended successfully.
    Succeeded,
    /// Ended with an error (after its compensations).
    Failed,
    /// Cancelled.
    Cancelled,
    /// A compensation failed for good: an operator must look.
    Stuck,
    /// A generation of a run that continued as new, kept as a run of its own (`order-1~3`):
    /// it ended successfully and the run went on under its own id with a new input
    /// ([`Store::continue_run`]).
    Continued,
}

impl RunStatus {
    /// Every status, in declaration order.
    pub const ALL: [RunStatus; 8] = [
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Compensating,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Stuck,
        RunStatus::Continued,
    ];

    /// Its stored name: `running`, `waiting`, …
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Compensating => "compensating",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Stuck => "stuck",
            RunStatus::Continued => "continued",
        }
    }

    /// Whether the run has ended: nothing more is appended to its journal.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Continued
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<RunStatus, StoreError> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| StoreError::Invalid {
                why: format!(
                    "unknown run status `{s}`; expected one of running, waiting, compensating, succeeded, failed, cancelled, stuck, continued"
                ),
            })
    }
}

/// A run as listed: [`Store::list_runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// Its id.
    pub id: String,
    /// Its workflow's name.
    pub workflow: String,
    /// Its graph's hash.
    pub graph_hash: u64,
    /// Its input's hash.
    pub input_hash: u64,
    /// Where it stands.
    pub status: RunStatus,
    /// The number of events in its journal.
    pub next_seq: u64,
    /// The version of its lease (bumped each time the run is loaded).
    pub version: u64,
    /// Who holds its lease, if anyone.
    pub owner: Option<String>,
    /// Until when, in ms since the Unix epoch.
    pub lease_until_ms: Option<u64>,
    /// When it wants to run again: its earliest timer, or when a signal arrived that one of
    /// its steps waits for.
    pub wake_at_ms: Option<u64>,
    /// When it was created, in ms since the Unix epoch.
    pub created_ms: u64,
    /// When it last changed, in ms since the Unix epoch.
    pub updated_ms: u64,
}

impl RunSummary {
    /// Whether a worker may pick the run up at `now` (ms since the Unix epoch): it is not
    /// finished, no owner holds a lease on it that has not expired, and, for a `waiting` run
    /// (one that nothing drives until a timer, a signal or a task's completion), its wake-up
    /// time has come. A `running` or `compensating` run was stopped while it ran: its timers
    /// are not what it waits for.
    pub fn is_due(&self, now: u64) -> bool {
        self.due(None, now)
    }

    /// As [`RunSummary::is_due`], for `owner`: a run whose lease `owner` holds is free for it
    /// (a run it stopped, or unloaded without giving its lease back because the store could not
    /// be reached, is taken back at once).
    pub fn is_due_for(&self, owner: &Owner, now: u64) -> bool {
        self.due(Some(owner), now)
    }

    /// When the run became due, in ms since the Unix epoch, as its summary tells: a waiting
    /// run's wake-up time; else the end of the lease it was left with (a lapsed lease, or one
    /// its owner gave back at its release); else its last update. How long a due run has
    /// waited for a worker is `now` less this.
    pub fn due_since_ms(&self) -> u64 {
        match (self.status, self.wake_at_ms, self.lease_until_ms) {
            (RunStatus::Waiting, Some(wake), _) => wake,
            (_, _, Some(until)) => until,
            _ => self.updated_ms,
        }
    }

    fn due(&self, asking: Option<&Owner>, now: u64) -> bool {
        let awake =
            self.status != RunStatus::Waiting || self.wake_at_ms.is_some_and(|at| at <= now);
        let free = match &self.owner {
            None => true,
            Some(holder) if asking.is_some_and(|a| a.as_str() == holder) => true,
            Some(_) => self.lease_until_ms.is_none_or(|until| until <= now),
        };
        !self.status.is_finished() && awake && free
    }
}

/// Which runs [`Store::list_runs`] answers, oldest first (by creation time, then id).
///
/// Pages: ask for `limit` runs, then for the next page with `after` set to the last run of
/// the page ([`RunCursor::of`]); a run created meanwhile never shifts a page. For the page
/// before a page, turn the order round (`newest_first`), set `after` to the page's first run,
/// and reverse what comes back. Asking for `limit + 1` runs tells whether another page follows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only the run with this id: one run looked up, without listing the others.
    pub id: Option<String>,
    /// Only runs whose id contains this text (as written: no pattern, case counts).
    pub id_contains: Option<String>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs in one of these statuses; empty: any.
    pub statuses: Vec<RunStatus>,
    /// Only runs created at or after this time (ms since the Unix epoch, the store's clock).
    pub created_from_ms: Option<u64>,
    /// Only runs created before this time (ms since the Unix epoch, the store's clock).
    pub created_before_ms: Option<u64>,
    /// Only runs that come after this one in the list's order: the next page.
    pub after: Option<RunCursor>,
    /// At most this many.
    pub limit: Option<u32>,
    /// The newest runs first (creation time, then id, both descending), and `after` pages
    /// towards older runs; `false`: the oldest first.
    pub newest_first: bool,
}

/// A place in the list of runs ([`RunFilter::after`]): a run's creation time and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    /// The run's creation time (ms since the Unix epoch).
    pub created_ms: u64,
    /// The run's id.
    pub id: String,
}

impl RunCursor {
    /// The place of `run`: the runs after it are the next page.
    pub fn of(run: &RunSummary) -> RunCursor {
        RunCursor {
            created_ms: run.created_ms,
            id: run.id.clone(),
        }
    }
}

impl RunFilter {
    /// Whether `run` passes the filter (`limit` aside).
    pub fn matches(&self, run: &RunSummary) -> bool {
        self.id.as_ref().is_none_or(|id| *id == run.id)
            && self
                .id_contains
                .as_ref()
                .is_none_or(|text| run.id.contains(text.as_str()))
            && self.workflow.as_ref().is_none_or(|w| *w == run.workflow)
            && (self.statuses.is_empty() || self.statuses.contains(&run.status))
            && self
                .created_from_ms
                .is_none_or(|from| run.created_ms >= from)
            && self
                .created_before_ms
                .is_none_or(|before| run.created_ms < before)
            && self.after.as_ref().is_none_or(|after| {
                let place = (run.created_ms, run.id.as_str());
                let cursor = (after.created_ms, after.id.as_str());
                match self.newest_first {
                    false => place > cursor,
                    true => place < cursor,
                }
            })
    }
}

/// A completed node's output, serialized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOutput {
    /// The node, by index in its graph.
    pub node: u32,
    /// The nest instance it belongs to (`charge[3]`, as [`StoredPath`] shows it); empty for
    /// the workflow's own nodes.
    pub instance: String,
    /// The output's Rust type, to tell a mismatch apart from corruption.
    pub type_name: String,
    /// The serialized value.
    pub bytes: Vec<u8>,
}

/// What a timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TimerKind {
    /// The wait before a retry.
    Backoff,
    /// A `Delay` step.
    Delay,
    /// A node's deadline over all its attempts.
    NodeDeadline,
    /// The run's deadline.
    RunDeadline,
    /// The timeout of an attempt executed as a task (distributed runs): stored so that it
    /// holds while the run is unloaded.
    Timeout,
}

impl TimerKind {
    /// Every kind, in declaration order.
    pub const ALL: [TimerKind; 5] = [
        TimerKind::Backoff,
        TimerKind::Delay,
        TimerKind::NodeDeadline,
        TimerKind::RunDeadline,
        TimerKind::Timeout,
    ];

    /// Its stored name: `backoff`, `delay`, `node_deadline`, `run_deadline`, `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimerKind::Backoff => "backoff",
            TimerKind::Delay => "delay",
            TimerKind::NodeDeadline => "node_deadline",
            TimerKind::RunDeadline => "run_deadline",
            TimerKind::Timeout => "timeout",
        }
    }
}

impl FromStr for TimerKind {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<TimerKind, StoreError> {
        TimerKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| StoreError::Invalid {
                why: format!("unknown timer kind `{s}`"),
            })
    }
}

/// Which timer: a run has at most one of each kind per node (and per instance).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    /// The node; `None` for a timer of the run.
    pub node: Option<u32>,
    /// The nest instance; empty for the workflow's own nodes.
    pub instance: String,
    /// What it is for.
    pub kind: TimerKind,
}

/// A change to a run's timers, in a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerChange {
    /// Sets (or moves) a timer to `after` from the store's clock at commit.
    Set {
        /// Which timer.
        key: TimerKey,
        /// When it is due, from the commit.
        after: Duration,
    },
    /// Removes a timer (it fired or is no longer needed); removing none is not an error.
    Clear {
        /// Which timer.
        key: TimerKey,
    },
}

/// An open timer of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTimer {
    /// Which timer.
    pub key: TimerKey,
    /// When it is due, in ms since the Unix epoch by the store's clock.
    pub due_ms: u64,
}

/// A timer that is due: [`Store::due_timers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueTimer {
    /// Its run.
    pub run: String,
    /// Which timer.
    pub key: TimerKey,
    /// When it is due, in ms since the Unix epoch.
    pub due_ms: u64,
}

/// How a signal is kept: [`Store::send_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalMode {
    /// Stored until a step consumes it, even if none waits yet.
    Kept,
    /// Stored only if a step waits for it now; otherwise dropped.
    Transient,
}

impl SignalMode {
    /// Both modes, in declaration order.
    pub const ALL: [SignalMode; 2] = [SignalMode::Kept, SignalMode::Transient];

    /// Its stored name: `kept` or `transient`.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalMode::Kept => "kept",
            SignalMode::Transient => "transient",
        }
    }
}

impl FromStr for SignalMode {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<SignalMode, StoreError> {
        SignalMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| StoreError::Invalid {
                why: format!("unknown signal mode `{s}`; expected kept or transient"),
            })
    }
}

/// A signal to send: [`Store::send_signal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSignal {
    /// The run it is for.
    pub run: String,
    /// The signal's name.
    pub name: String,
    /// Its payload (serialized); the run checks its type when it consumes it.
    pub payload: Vec<u8>,
    /// How it is kept.
    pub mode: SignalMode,
}

/// The answer of [`Store::send_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalSent {
    /// Stored with this id (ids grow in the order signals are sent).
    Stored {
        /// The signal's id.
        id: u64,
    },
    /// Transient, and no step waits for it: not stored.
    Dropped,
}

/// A stored, unconsumed signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSignal {
    /// Its id, unique in the store, growing in the order signals were sent.
    pub id: u64,
    /// Its run.
    pub run: String,
    /// Its name.
    pub name: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// How it was sent.
    pub mode: SignalMode,
    /// When it was sent, in ms since the Unix epoch.
    pub sent_ms: u64,
}

/// A change to the steps of a run that wait for a signal, in a [`Batch`] (a transient signal is
/// stored only while one waits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitChange {
    /// A step starts waiting for the signal `name`.
    Open {
        /// The step, by index in its graph.
        node: u32,
        /// Its nest instance; empty for the workflow's own nodes.
        instance: String,
        /// The signal it waits for.
        name: String,
    },
    /// The step no longer waits.
    Close {
        /// The step.
        node: u32,
        /// Its nest instance.
        instance: String,
    },
}

/// How a run ended, stored with its last batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// Its output (serialized) when it succeeded.
    pub result: Option<Vec<u8>>,
    /// Its error, rendered, when it failed.
    pub error: Option<String>,
}

/// One atomic append to a run's journal: [`Store::commit`].
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The run.
    pub run: String,
    /// The lease's owner.
    pub owner: Owner,
    /// The lease's version (the fencing token from [`Store::load_run`] or
    /// [`Store::create_run`]).
    pub lease_version: u64,
    /// For how long the commit extends the lease.
    pub lease: Duration,
    /// The sequence number of the first event: the run's next one.
    pub first_seq: u64,
    /// The events, numbered from `first_seq` without a gap.
    pub events: Vec<StoredEvent>,
    /// Outputs of nodes that completed (an output stored again for the same node replaces it).
    pub outputs: Vec<StoredOutput>,
    /// Nest instance ends that later ends replace for resuming, as (node, instance record):
    /// a `Loop`'s iteration once the next one ended (a loop goes on from its last iteration
    /// alone), and the ends nested in an instance once the instance ended (`poll@6/items[2]`
    /// once `poll@6` ended). From this batch on, [`Store::load_run`] leaves them out, so that
    /// loading a run reads its decided state, not its history; [`Store::run_data`] and task
    /// claims still read them. Naming an end that is not stored is not an error.
    pub superseded: Vec<(u32, String)>,
    /// Timers set and cleared.
    pub timers: Vec<TimerChange>,
    /// Steps that start or stop waiting for a signal.
    pub waits: Vec<WaitChange>,
    /// Signals consumed, by id: marked consumed by this batch, exactly once.
    pub consumed: Vec<u64>,
    /// Tasks opened and closed (distributed runs only), applied in order.
    pub tasks: Vec<TaskChange>,
    /// The run's new status, if it changes.
    pub status: Option<RunStatus>,
    /// How the run ended, with its final status.
    pub end: Option<RunEnd>,
    /// The run's graph from now on, when it changed compatibly since the run started: the
    /// run's graph hash and node rows are replaced by these (a worker that has the new graph
    /// then picks the run up, [`Store::due_runs`]).
    pub graph: Option<(u64, Vec<NodeRow>)>,
    /// With `graph`: the steps the new graph numbers otherwise, as (index in the run's
    /// stored graph, index in the new one). Before the batch's own rows (which use the new
    /// indices) are written, every stored row of the run that names one of its own nodes by
    /// index takes the node's new index: its own events (not its nest instances'), its
    /// outputs (its own steps' and the ends of its own nests' instances, `ship[3]`; not the
    /// ends of instances nested deeper, `ship[3]/pack@2`, whose node is the nest body's),
    /// timers, waits and tasks. Empty when no step moved.
    pub renumber: Vec<(u32, u32)>,
}

/// Whether an output of `instance` names a node of the run's own graph ([`Batch::renumber`]):
/// a step's output (no instance) or the end of an instance of one of the run's nests
/// (`ship[3]`), not the end of an instance nested deeper (`ship[3]/pack@2`).
pub fn own_output(instance: &str) -> bool {
    !instance.contains('/')
}

/// The index `node` takes under `renumber` ([`Batch::renumber`]): its new one if it moved,
/// else its own.
pub fn renumbered(renumber: &[(u32, u32)], node: u32) -> u32 {
    renumber
        .iter()
        .find(|&&(old, _)| old == node)
        .map_or(node, |&(_, new)| new)
}

impl Batch {
    /// An empty batch under `lease`, starting at `first_seq`, that extends the lease by
    /// `extend`.
    pub fn new(lease: &Lease, first_seq: u64, extend: Duration) -> Batch {
        Batch {
            run: lease.run.clone(),
            owner: lease.owner.clone(),
            lease_version: lease.version,
            lease: extend,
            first_seq,
            events: Vec::new(),
            outputs: Vec::new(),
            superseded: Vec::new(),
            timers: Vec::new(),
            waits: Vec::new(),
            consumed: Vec::new(),
            tasks: Vec::new(),
            status: None,
            end: None,
            graph: None,
            renumber: Vec::new(),
        }
    }

    /// The sequence number after the batch's last event.
    pub fn end_seq(&self) -> u64 {
        self.first_seq + self.events.len() as u64
    }

    /// The idempotency rule of [`Store::commit`], for stores to share: `Some(AlreadyApplied)`
    /// when every event of the batch is stored with the same content; [`StoreError::Conflict`]
    /// when the batch overlaps the stored journal otherwise; `None` when it does not start in
    /// the stored journal (`next` is the run's next sequence number, `stored(seq)` reads the
    /// stored event of that number).
    pub fn replayed<'e>(
        &self,
        next: u64,
        stored: impl Fn(u64) -> Option<&'e StoredEvent>,
    ) -> Result<Option<Committed>, StoreError> {
        if self.events.is_empty() || self.first_seq >= next {
            return Ok(None);
        }
        for event in &self.events {
            let why = match stored(event.seq) {
                Some(old) if old == event => continue,
                Some(old) => format!(
                    "event #{} is stored as `{}` of node {:?} attempt {}, the batch has `{}` of node {:?} attempt {}",
                    event.seq,
                    old.kind,
                    old.node,
                    old.attempt,
                    event.kind,
                    event.node,
                    event.attempt
                ),
                None => format!(
                    "the batch repeats events up to #{} and adds event #{} after them",
                    next - 1,
                    event.seq
                ),
            };
            return Err(StoreError::Conflict {
                run: self.run.clone(),
                expected: next,
                found: self.first_seq,
                why,
            });
        }
        Ok(Some(Committed::AlreadyApplied { next_seq: next }))
    }

    /// The lease check of [`Store::commit`], for stores to share: the batch's owner and version
    /// are the run's, else [`StoreError::LeaseLost`]. An expired lease that nobody took still
    /// passes: the version is the fence, not the clock.
    pub fn check_lease(&self, run: &RunSummary) -> Result<(), StoreError> {
        if run.owner.as_deref() == Some(self.owner.as_str()) && run.version == self.lease_version {
            return Ok(());
        }
        Err(StoreError::LeaseLost {
            run: self.run.clone(),
            holder: run.owner.clone(),
            had: self.lease_version,
            now: run.version,
        })
    }

    /// The [`StoreError::Conflict`] of a batch that does not start at the run's next event.
    pub fn gap(&self, next: u64) -> StoreError {
        StoreError::Conflict {
            run: self.run.clone(),
            expected: next,
            found: self.first_seq,
            why: if self.first_seq > next {
                "events would be missing before it".to_owned()
            } else {
                "it starts inside the stored journal".to_owned()
            },
        }
    }

    /// Checks that the events are numbered from `first_seq` without a gap.
    pub fn check_numbering(&self) -> Result<(), StoreError> {
        for (i, event) in self.events.iter().enumerate() {
            let expected = self.first_seq + i as u64;
            if event.seq != expected {
                return Err(StoreError::Invalid {
                    why: format!(
                        "event #{} of the batch for run `{}` has sequence number {} where {expected} was expected",
                        i, self.run, event.seq
                    ),
                });
            }
        }
        if self.end.is_some() && !self.status.is_some_and(RunStatus::is_finished) {
            return Err(StoreError::Invalid {
                why: format!(
                    "the batch for run `{}` ends the run without a final status",
                    self.run
                ),
            });
        }
        Ok(())
    }
}

/// The answer of [`Store::commit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The batch was written.
    Applied {
        /// The run's next sequence number now.
        next_seq: u64,
    },
    /// The batch had been written before (same events): nothing was written.
    AlreadyApplied {
        /// The run's next sequence number.
        next_seq: u64,
    },
}

/// A run's data as [`Store::run_data`] reads it, without a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunData {
    /// Its stored parameters (serialized, as in [`NewRun::input`]).
    pub input: Vec<u8>,
    /// Its stored options (as in [`NewRun::options`]).
    pub options: Vec<u8>,
    /// The outputs of its completed nodes and nest instances, by node, then instance.
    pub outputs: Vec<StoredOutput>,
    /// How it ended, if it did (its last batch's [`Batch::end`]).
    pub end: Option<RunEnd>,
}

/// A run as loaded to resume it: [`Store::load_run`].
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The run.
    pub run: RunSummary,
    /// The caller's lease on it.
    pub lease: Lease,
    /// Its stored parameters.
    pub input: Vec<u8>,
    /// Its runner options.
    pub options: Vec<u8>,
    /// Its graph's nodes.
    pub nodes: Vec<NodeRow>,
    /// Its own events, in order: the journal without the events of its nest instances
    /// (their history: a resume does not replay them, it restores each ended instance from
    /// its end; [`Store::events`] reads them).
    pub events: Vec<StoredEvent>,
    /// Its next sequence number: one past its last event, a nest instance's included.
    pub next_seq: u64,
    /// The outputs of its completed nodes, and the ends of its nest instances that a resume
    /// needs: not those a later end superseded ([`Batch::superseded`]).
    pub outputs: Vec<StoredOutput>,
    /// Its open timers.
    pub timers: Vec<StoredTimer>,
    /// Its steps waiting for a signal: (node, instance, signal name).
    pub waits: Vec<(u32, String, String)>,
    /// Its unconsumed signals, in the order they were sent.
    pub signals: Vec<StoredSignal>,
    /// The done tasks whose outcome the journal has not taken yet (distributed runs), by node.
    pub tasks: Vec<TaskResult>,
    /// How it ended, if it did.
    pub end: Option<RunEnd>,
    /// The store's clock when it was loaded, in ms since the Unix epoch (for remaining backoffs
    /// and deadlines).
    pub now_ms: u64,
}

/// Milliseconds since the Unix epoch by this process's clock: the clock of [`MemoryStore`] and of
/// the default [`Store::due_runs`].
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `now + after` in ms, saturating.
pub(crate) fn due_after(now_ms: u64, after: Duration) -> u64 {
    now_ms.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
}

/// FNV-1a 64 over the concatenated `parts`: mixes the parts of [`Owner::process`]'s suffix.
fn mix(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_timer_kinds_and_signal_modes_round_trip_through_their_names() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>(), Ok(status));
        }
        for kind in TimerKind::ALL {
            assert_eq!(kind.as_str().parse::<TimerKind>(), Ok(kind));
        }
        for mode in SignalMode::ALL {
            assert_eq!(mode.as_str().parse::<SignalMode>(), Ok(mode));
        }
        let err = "sleeping"
            .parse::<RunStatus>()
            .expect_err("an unknown status");
        assert!(
            err.to_string().contains("unknown run status `sleeping`"),
            "{err}"
        );
    }

    #[test]
    fn owners_of_one_process_differ() {
        let a = Owner::process();
        let b = Owner::process();
        assert_ne!(a, b);
        assert!(a.as_str().contains(&std::process::id().to_string()));
    }

    #[test]
    fn batches_check_their_numbering() {
        let lease = Lease {
            run: "r".into(),
            owner: Owner::new("o"),
            version: 1,
            until_ms: 0,
        };
        let mut batch = Batch::new(&lease, 3, Duration::from_secs(1));
        batch.events.push(StoredEvent::new(3, "Requested"));
        batch.events.push(StoredEvent::new(5, "Completed"));
        let err = batch.check_numbering().expect_err("a gap");
        assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
        batch.events[1].seq = 4;
        assert_eq!(batch.check_numbering(), Ok(()));
        assert_eq!(batch.end_seq(), 5);
        batch.end = Some(RunEnd {
            result: None,
            error: None,
        });
        assert!(batch.check_numbering().is_err());
        batch.status = Some(RunStatus::Succeeded);
        assert_eq!(batch.check_numbering(), Ok(()));
    }
}
