//! Durable runs (feature `durable`): a workflow declared `#[flow(durable)]` runs with a
//! [`Store`] and a run id, writes every event to the store's journal before it acts on it, and
//! resumes after a crash from that journal: nothing that completed runs again, and the attempts
//! that were in flight run again with the same idempotency key ([`attempt`]).
//!
//! ```ignore
//! // `flow` with the `durable` feature; `flowdag_sqlite::SqliteStore` keeps runs in a file.
//! let store = SqliteStore::open("target/runs.db")?;
//! let outcome = Checkout::runner().durable(&store, "order-42").execute(42).await?;
//! // After a crash, in a new process on the same file:
//! Checkout::resume(&store, "order-42").await?;
//! ```
//!
//! - Start or resume one run with [`DurableRunner`] (`W::runner().durable(&store, id)`), resume
//!   runs by id with [`resume`] and [`resume_all`]; a [`Worker`](crate::worker::Worker)
//!   resumes every due run of a store.
//! - A run that waits (a long `Delay`, a `Signal`) can give up its memory and its lease while
//!   it waits: [`DurableRunner::unload_when_waiting`], [`resume_or_unload`]; such a run's
//!   future ends as [`Ended::Unloaded`].
//! - A distributed run ([`DurableRunner::distributed`], [`DurableRunner::submit`]) has its
//!   operations executed by whichever worker claims them.
//! - [`send_signal`] sends a `Signal` step its payload through the store.
//! - [`DurableError`] says why a run could not start, resume or go on; [`graph_rows`] and
//!   [`GraphChange`] are how a changed workflow is recognized and refused.
//!
//! `docs/durability.md` states the guarantees. How it is built: the run's journal
//! (`durable/journal.rs`) is the scheduler's hook, the one interface through which the
//! scheduler knows of durable runs (`scheduler/hook.rs`).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::graph::{Graph, NodeKind};
use crate::options::RunOptions;
use crate::policy::FailurePolicy;
use crate::report::Outcome;
use crate::runner::{Runner, Workflow};
use crate::scheduler::Hook;
use crate::scheduler::RunSetup;
use crate::store::{
    Batch, ContinueRun, Created, Lease, Loaded, NewRun, NodeRow, Owner, RunEnd, RunFilter,
    RunStatus, RunSummary, Store, StoreError, StoredEvent, StoredOutput, StoredSignal, StoredTimer,
    TaskClaim, TaskOutcome, TaskResult, TimerChange, TimerKey, TimerKind, fnv1a,
};

pub(crate) mod child;
pub(crate) mod generated;
mod journal;
pub(crate) mod nested;
mod operations;

pub use operations::{Redriven, Stop, cancel_run, delete_runs, redrive_run, terminate_run};

pub use crate::attempt::Attempt;
pub(crate) use crate::attempt::{AttemptCtx, CURRENT, attempt_ctx, with_attempt};
pub(crate) use journal::Mailbox;
pub(crate) mod stored_signals;

pub(crate) use stored_signals::{SignalCtx, Taken};
pub use stored_signals::{send_signal, send_signal_json};

/// The version of the journal's meaning (which events exist and when the scheduler emits
/// them): part of every graph hash, so a run journaled by another format is refused.
const JOURNAL_FORMAT: u32 = 1;

/// What a value must be to be stored with a durable run: a parameter, a node's output or the
/// workflow's output. Implemented for every `Serialize + DeserializeOwned + Send + 'static`
/// type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be stored with a durable run",
    label = "it must be `Serialize + DeserializeOwned`",
    note = "derive `serde::Serialize` and `serde::Deserialize` for it, or use an owned type that has them (`String`, not `&str`)"
)]
pub trait Durable: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> Durable for T {}

/// The idempotency key of the attempt being polled: `Some` inside an operation of a durable
/// run (read it synchronously, before the first `.await` that may move the future to another
/// task), `None` anywhere else.
///
/// ```
/// assert!(flowdag_runtime::durable::attempt().is_none());
/// ```
pub fn attempt() -> Option<Attempt> {
    crate::attempt::current()
}

/// Why a durable run could not start, resume or go on.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DurableError {
    /// The store failed (a commit, a load): the run stopped; nothing it acknowledged is lost,
    /// and it can be resumed from its last commit.
    Store(StoreError),
    /// A run of this id exists with another workflow or another input.
    RunExists {
        /// The run's id.
        run: String,
        /// Why it is not the same run.
        why: String,
    },
    /// The workflow's graph changed since the run started: it is refused.
    GraphChanged {
        /// The run's id.
        run: String,
        /// The workflow's name.
        workflow: String,
        /// What changed, node by node.
        changes: Vec<GraphChange>,
    },
    /// Replaying the journal did not give the journal's events: the code is not the code
    /// that wrote it (or is not deterministic in its decisions).
    Diverged {
        /// The run's id.
        run: String,
        /// The sequence number where they differ.
        seq: u64,
        /// The journal's event there (`Completed of node 2 attempt 1`), or `end of journal`.
        journal: String,
        /// What the replay did there.
        replay: String,
    },
    /// A nest instance of the run cannot go on: its item is not the one it had before the
    /// run stopped (a `ForEach` whose source changed), or its output cannot be stored.
    Instance {
        /// The run's id.
        run: String,
        /// The instance (`ship[3]`; `ship#2[3]` for the nest's second attempt).
        instance: String,
        /// Why.
        reason: String,
    },
    /// A signal was refused before it was stored: the run's workflow declares no signal of
    /// that name, the payload does not read as the signal's type, or the run is not a run of
    /// the workflow the signal was checked against. Nothing was stored.
    Signal {
        /// The run's id.
        run: String,
        /// The signal's name.
        signal: String,
        /// Why.
        why: String,
    },
    /// The stored input cannot be read as the workflow's parameters.
    Input {
        /// The run's id.
        run: String,
        /// Why.
        why: String,
    },
    /// An operator terminated the run ([`terminate_run`], `flow terminate`): it ended
    /// `cancelled`, without compensation, and nothing of it runs again.
    Terminated {
        /// The run's id.
        run: String,
        /// The reason the operator gave, if any.
        reason: Option<String>,
    },
    /// A redrive was refused ([`redrive_run`]); nothing was written.
    Redrive {
        /// The run's id.
        run: String,
        /// Why.
        why: String,
    },
    /// This process cannot run the run as it is set up (a step needs a timer and the run is
    /// not polled inside a tokio runtime with time enabled). Nothing was written for it: the
    /// run is as it was, and resuming it where the environment is right goes on.
    Environment {
        /// The run's id.
        run: String,
        /// What is missing.
        why: String,
    },
    /// A child run, started at one of the run's `Workflow` steps, stopped without an end (its
    /// store failed, its graph changed, its replay diverged): the run stopped too, writing
    /// nothing more. Resuming the run resumes the child where it stopped.
    Child {
        /// The run's id.
        run: String,
        /// Why the child stopped (its id and its own error).
        why: String,
    },
}

impl fmt::Display for DurableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurableError::Store(error) => write!(f, "the run's store failed: {error}"),
            DurableError::RunExists { run, why } => {
                write!(f, "a different run `{run}` exists: {why}")
            }
            DurableError::GraphChanged {
                run,
                workflow,
                changes,
            } => {
                write!(
                    f,
                    "the graph of `{workflow}` changed since run `{run}` started: "
                )?;
                for (i, change) in changes.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{change}")?;
                }
                Ok(())
            }
            DurableError::Diverged {
                run,
                seq,
                journal,
                replay,
            } => write!(
                f,
                "replaying run `{run}` diverged from its journal at event #{seq}: the journal has {journal}, the replay {replay}"
            ),
            DurableError::Instance {
                run,
                instance,
                reason,
            } => write!(f, "run `{run}`, instance `{instance}`: {reason}"),
            DurableError::Signal { run, signal, why } => {
                write!(f, "signal `{signal}` for run `{run}` refused: {why}")
            }
            DurableError::Input { run, why } => {
                write!(f, "the stored input of run `{run}` cannot be read: {why}")
            }
            DurableError::Terminated { run, reason } => {
                write!(f, "run `{run}` was terminated by an operator")?;
                match reason {
                    Some(reason) => write!(f, ": {reason}"),
                    None => Ok(()),
                }
            }
            DurableError::Redrive { run, why } => {
                write!(f, "run `{run}` cannot be redriven: {why}")
            }
            DurableError::Environment { run, why } => write!(
                f,
                "run `{run}` cannot run in this process: {why}; nothing was written, resume it where this is right"
            ),
            DurableError::Child { run, why } => write!(
                f,
                "run `{run}` stopped: {why}; resume it once its child can go on"
            ),
        }
    }
}

impl std::error::Error for DurableError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DurableError::Store(error) => Some(error),
            _ => None,
        }
    }
}

impl From<StoreError> for DurableError {
    fn from(error: StoreError) -> DurableError {
        DurableError::Store(error)
    }
}

/// One node-level difference between a run's stored graph and the workflow's graph now, with
/// what it was and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GraphChange {
    /// A step was added.
    Added(String),
    /// A step was removed.
    Removed(String),
    /// A step now calls something else (its label changed).
    ///
    /// With `was == now`, the step's label is the same but its kind or policy changed, and the
    /// run's stored row does not say which or what it was: the row was written without them
    /// (its [`NodeRow::kind`] is empty).
    Changed {
        /// The step.
        node: String,
        /// Its label when the run started.
        was: String,
        /// Its label now.
        now: String,
    },
    /// A step is of another kind (`operation`, `signal`, … as [`NodeKind::as_str`] names them).
    ///
    /// [`NodeKind::as_str`]: crate::NodeKind::as_str
    KindChanged {
        /// The step.
        node: String,
        /// Its kind when the run started; empty if the run's stored row does not say.
        was: String,
        /// Its kind now.
        now: String,
    },
    /// A step has other resilience settings (`timeout`, `retries`, `backoff`, `jitter`,
    /// `deadline`), written as a step writes them (`retries = 3, timeout = 5s`; see
    /// [`NodePolicy`](crate::NodePolicy)'s `Display`). An empty text is a step with none of
    /// its own: the built-in defaults.
    PolicyChanged {
        /// The step.
        node: String,
        /// Its settings when the run started.
        was: String,
        /// Its settings now.
        now: String,
    },
    /// A step now waits for other steps.
    EdgesChanged {
        /// The step.
        node: String,
        /// Its predecessors when the run started.
        was: Vec<String>,
        /// Its predecessors now.
        now: Vec<String>,
    },
    /// A step is undone by another call (`compensate = ..`), or gained or lost its
    /// compensation.
    CompensationChanged {
        /// The step.
        node: String,
        /// The call that undid it when the run started, if any.
        was: Option<String>,
        /// The call that undoes it now, if any.
        now: Option<String>,
    },
    /// The steps are in another order (another topological order): the steps concerned, in
    /// the order they had and the order they have. When both are the same, the graph changed
    /// in a way no step shows (the journal's format).
    Reordered {
        /// The steps in their order when the run started.
        was: Vec<String>,
        /// The same steps in their order now.
        now: Vec<String>,
    },
}

impl fmt::Display for GraphChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphChange::Added(node) => write!(f, "step `{node}` was added"),
            GraphChange::Removed(node) => write!(f, "step `{node}` was removed"),
            GraphChange::Changed { node, was, now } if was == now => write!(
                f,
                "step `{node}` changed its kind or policy (the run's stored graph does not say which, nor what it was)"
            ),
            GraphChange::Changed { node, was, now } => {
                write!(f, "step `{node}` now calls `{now}` (was `{was}`)")
            }
            GraphChange::KindChanged { node, was, now } => {
                write!(f, "step `{node}` is now {} `{now}` ", article(now))?;
                match was.is_empty() {
                    true => f.write_str("(its kind before was not stored)"),
                    false => write!(f, "(was {} `{was}`)", article(was)),
                }
            }
            GraphChange::PolicyChanged { node, was, now } => {
                let settings = |text: &str| match text.is_empty() {
                    true => "the defaults".to_owned(),
                    false => format!("`{text}`"),
                };
                write!(
                    f,
                    "step `{node}` changed its policy from {} to {}",
                    settings(was),
                    settings(now)
                )
            }
            GraphChange::EdgesChanged { node, was, now } => write!(
                f,
                "step `{node}` now follows [{}] (was [{}])",
                now.join(", "),
                was.join(", ")
            ),
            GraphChange::CompensationChanged { node, was, now } => match (was, now) {
                (Some(was), Some(now)) => {
                    write!(f, "step `{node}` is now undone by `{now}` (was `{was}`)")
                }
                (None, Some(now)) => {
                    write!(f, "step `{node}` is now undone by `{now}` (was not undone)")
                }
                (Some(was), None) => {
                    write!(f, "step `{node}` is no longer undone (was by `{was}`)")
                }
                (None, None) => write!(f, "step `{node}` changed its compensation"),
            },
            GraphChange::Reordered { was, now } if was == now => {
                f.write_str("it changed in a way no step shows (the journal's format)")
            }
            GraphChange::Reordered { was, now } => write!(
                f,
                "its steps are now in the order [{}] (was [{}])",
                now.join(", "),
                was.join(", ")
            ),
        }
    }
}

/// "a" or "an", as a kind's name (`an operation`, `a signal`) takes.
fn article(word: &str) -> &'static str {
    match word.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

/// The node rows of `graph` (name, label, fingerprint, predecessors, compensation, kind,
/// policy) and its hash: what a durable run stores to refuse a changed graph and to say what
/// changed. A node's fingerprint covers its name, kind, label with whitespace removed, policy,
/// predecessors' names and the call that undoes it (`compensate = ..`, whitespace removed);
/// not its line or column, so moving code is not a change.
pub fn graph_rows(graph: &Graph) -> (u64, Vec<NodeRow>) {
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); graph.nodes.len()];
    for edge in graph.edges {
        if let Some(list) = preds.get_mut(edge.to as usize)
            && !list.contains(&edge.from)
        {
            list.push(edge.from);
        }
    }
    let rows: Vec<NodeRow> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, info)| {
            let mut pred_names: Vec<&str> = preds[i]
                .iter()
                .map(|&p| graph.nodes[p as usize].name)
                .collect();
            pred_names.sort_unstable();
            let label: String = info.label.split_whitespace().collect();
            let settings = graph.plan.policy(i);
            // The fingerprint hashes the policy's `Debug` text: stored runs keep their hashes.
            let policy = format!("{settings:?}");
            let compensate = graph.compensation(i).unwrap_or("");
            let undo: String = compensate.split_whitespace().collect();
            let preds_text = pred_names.join(",");
            let mut parts: Vec<&[u8]> = vec![
                info.name.as_bytes(),
                b"\0",
                info.kind.as_str().as_bytes(),
                b"\0",
                label.as_bytes(),
                b"\0",
                policy.as_bytes(),
                b"\0",
                preds_text.as_bytes(),
            ];
            // A step without compensation keeps the fingerprint it had before they existed.
            if !undo.is_empty() {
                parts.extend([&b"\0undo\0"[..], undo.as_bytes()]);
            }
            let fingerprint = fnv1a(&parts);
            let mut node_preds = preds[i].clone();
            node_preds.sort_unstable();
            NodeRow {
                node: i as u32,
                name: info.name.to_owned(),
                label: info.label.to_owned(),
                fingerprint,
                preds: node_preds,
                compensate: compensate.to_owned(),
                kind: info.kind.as_str().to_owned(),
                policy: settings.to_string(),
            }
        })
        .collect();
    let mut parts: Vec<[u8; 8]> = rows.iter().map(|r| r.fingerprint.to_le_bytes()).collect();
    parts.push(u64::from(JOURNAL_FORMAT).to_le_bytes());
    let slices: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    (fnv1a(&slices), rows)
}

/// What changed between a run's stored node rows and `now`, by node name.
pub fn graph_changes(stored: &[NodeRow], now: &[NodeRow]) -> Vec<GraphChange> {
    let names = |rows: &[NodeRow], preds: &[u32]| -> Vec<String> {
        let mut names: Vec<String> = preds
            .iter()
            .filter_map(|&p| rows.get(p as usize).map(|r| r.name.clone()))
            .collect();
        names.sort_unstable();
        names
    };
    let mut changes = Vec::new();
    for row in now {
        match stored.iter().find(|s| s.name == row.name) {
            None => changes.push(GraphChange::Added(row.name.clone())),
            Some(old) => {
                let (was, is) = (names(stored, &old.preds), names(now, &row.preds));
                let edges = was != is;
                if edges {
                    changes.push(GraphChange::EdgesChanged {
                        node: row.name.clone(),
                        was,
                        now: is,
                    });
                }
                let label = |l: &str| l.split_whitespace().collect::<String>();
                let undo = label(&old.compensate) != label(&row.compensate);
                let call = label(&old.label) != label(&row.label);
                if call {
                    changes.push(GraphChange::Changed {
                        node: row.name.clone(),
                        was: old.label.clone(),
                        now: row.label.clone(),
                    });
                }
                // Kinds and policies are compared only where the fingerprint saw a change, and
                // only when both rows have them (a row stored without them has an empty kind).
                let print = old.fingerprint != row.fingerprint;
                let known = print && !old.kind.is_empty() && !row.kind.is_empty();
                let kind = known && old.kind != row.kind;
                let policy = known && old.policy != row.policy;
                if kind {
                    changes.push(GraphChange::KindChanged {
                        node: row.name.clone(),
                        was: old.kind.clone(),
                        now: row.kind.clone(),
                    });
                }
                if policy {
                    changes.push(GraphChange::PolicyChanged {
                        node: row.name.clone(),
                        was: old.policy.clone(),
                        now: row.policy.clone(),
                    });
                }
                // A change the fingerprint shows and the rows do not name: the stored row does
                // not have the kind and policy the step had.
                if print && !(call || edges || undo || kind || policy) {
                    changes.push(GraphChange::Changed {
                        node: row.name.clone(),
                        was: old.label.clone(),
                        now: row.label.clone(),
                    });
                }
                if undo {
                    let call = |c: &str| (!c.is_empty()).then(|| c.to_owned());
                    changes.push(GraphChange::CompensationChanged {
                        node: row.name.clone(),
                        was: call(&old.compensate),
                        now: call(&row.compensate),
                    });
                }
            }
        }
    }
    for old in stored {
        if !now.iter().any(|r| r.name == old.name) {
            changes.push(GraphChange::Removed(old.name.clone()));
        }
    }
    if changes.is_empty() {
        let names = |rows: &[NodeRow]| rows.iter().map(|row| row.name.clone()).collect();
        changes.push(GraphChange::Reordered {
            was: names(stored),
            now: names(now),
        });
    }
    changes
}

/// What a durable run's journal starts from: the store, the lease, and (on resume) the journal
/// to replay.
pub(crate) struct JournalSetup {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) lease: Lease,
    pub(crate) extend: Duration,
    /// The journal to replay: the run's own events (empty for a new run).
    pub(crate) events: Vec<StoredEvent>,
    /// The run's next sequence number (0 for a new run).
    pub(crate) next_seq: u64,
    /// Completed nodes' outputs, by node.
    pub(crate) outputs: HashMap<u32, Vec<u8>>,
    /// The ends of nest instances, by nest node and record (`ship[3]`; see
    /// `attempt::Records`).
    pub(crate) instances: HashMap<(u32, String), Vec<u8>>,
    /// Open timers, and the store's clock when they were loaded.
    pub(crate) timers: Vec<StoredTimer>,
    pub(crate) now_ms: u64,
    /// The run's unconsumed signals when it was loaded, oldest first.
    pub(crate) signals: Vec<StoredSignal>,
    /// How often a run whose `Signal` step waits asks the store for new signals.
    pub(crate) signal_poll: Duration,
    /// How often a live run asks the store for an operator's requests.
    pub(crate) request_poll: Duration,
    /// Unload the run when all its running nodes wait longer than this
    /// ([`DurableRunner::unload_when_waiting`]).
    pub(crate) unload: Option<Duration>,
    /// The run was loaded from the status `Waiting`: its first commit sets it `Running` again.
    pub(crate) waiting: bool,
    /// The run is distributed: its operations are tasks for any worker
    /// ([`DurableRunner::distributed`]).
    pub(crate) distributed: bool,
    /// A distributed run is unloaded once it has waited for tasks alone this long (zero: at
    /// once); `None`: it is not unloaded for them (the process that drives it takes their
    /// outcomes as they come).
    pub(crate) unload_tasks: Option<Duration>,
    /// The done tasks loaded with the run, whose outcomes it has not journaled yet.
    pub(crate) tasks: Vec<TaskResult>,
    /// Where the worker that drives the run hands it the outcomes of the tasks it executes
    /// itself (a `Worker`'s sticky runs).
    pub(crate) mailbox: Option<Arc<journal::Mailbox>>,
    /// The graph the run goes on with, when it changed compatibly since the run started:
    /// stored with the run's first live commit.
    pub(crate) adopt: Option<(u64, Vec<NodeRow>)>,
    /// With `adopt`: the stored steps the adopted graph numbers otherwise (stored index,
    /// index now); the journal's rows were loaded renumbered, the store's follow with the
    /// adopted graph.
    pub(crate) renumber: Vec<(u32, u32)>,
    /// The ids of the version markers the run started with (`None`: a new run, which has
    /// all of its graph's).
    pub(crate) patches: Option<Vec<String>>,
    /// The workflow continues as new and the run has not finished: a success is settled by
    /// the run's future ([`journal::Settle`]).
    pub(crate) continues: bool,
    /// The run's generation (1 for the first; one more each time it continued as new).
    pub(crate) generation: u32,
    /// The run that started this one at a `Workflow` step, if one did.
    pub(crate) parent: Option<String>,
    /// The run's graph has `Workflow` steps (which start child runs).
    pub(crate) children: bool,
}

impl JournalSetup {
    /// The setup of a run with nothing to replay under `lease`, extended by `extend` at each
    /// commit; the other fields are set by the caller where they differ.
    fn new(store: Arc<dyn Store>, lease: Lease, extend: Duration) -> JournalSetup {
        JournalSetup {
            store,
            lease,
            extend,
            events: Vec::new(),
            next_seq: 0,
            outputs: HashMap::new(),
            instances: HashMap::new(),
            timers: Vec::new(),
            now_ms: 0,
            signals: Vec::new(),
            signal_poll: SIGNAL_POLL,
            request_poll: REQUEST_POLL,
            unload: None,
            waiting: false,
            distributed: false,
            unload_tasks: None,
            tasks: Vec::new(),
            mailbox: None,
            adopt: None,
            renumber: Vec::new(),
            patches: None,
            continues: false,
            generation: 1,
            parent: None,
            children: false,
        }
    }
}

impl fmt::Debug for JournalSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalSetup")
            .field("run", &self.lease.run)
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

/// The output of a workflow that *continues as new* (`#[flow(durable, continue_as_new)]`): the
/// run is done, or it ends this generation and starts again under the same id with a new
/// input, its journal empty. A run that loops for ever (a poller, a subscription, an entity
/// that takes commands) keeps a journal as long as one generation's.
///
/// `I` is the workflow's stored parameters (the value for one parameter, a tuple for
/// several), `T` what the run gives when it is done. The run's future (`execute`, `resume`, a
/// `Worker`) goes on through every generation and gives the last one's `Done`.
///
/// ```
/// use flowdag_runtime::durable::Continue;
/// let next: Continue<u64, String> = Continue::Again(42);
/// assert_eq!(next.done(), None);
/// assert_eq!(Continue::<u64, _>::Done("read").done(), Some("read"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Continue<I, T> {
    /// The run is done, with this output.
    Done(T),
    /// End this generation and start the run again with this input. The ended generation
    /// is kept as a finished run of its own, `"{id}~{n}"` (`order-1~1` for the first), with
    /// the status `continued`: `flow show` reads it, `flow delete --status continued` removes
    /// it.
    Again(I),
    /// As [`Continue::Again`], but the ended generation's events, outputs and consumed
    /// signals are deleted: nothing of it is kept.
    AgainDropping(I),
}

impl<I, T> Continue<I, T> {
    /// The output of a run that is done; `None` for one that goes on.
    pub fn done(self) -> Option<T> {
        match self {
            Continue::Done(output) => Some(output),
            Continue::Again(_) | Continue::AgainDropping(_) => None,
        }
    }
}

/// The output type of a workflow declared `continue_as_new`: a [`Continue`] whose input is
/// the workflow's stored parameters. Not a public API: the code the macro generates calls
/// [`again`].
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a workflow that continues as new returns `flowdag::durable::Continue<{S}, T>`: `{Self}` is not",
    label = "the output of a `continue_as_new` workflow",
    note = "`Continue::Again(input)` starts the run again with `input` (the workflow's parameters: the value for one, a tuple for several); `Continue::Done(output)` ends it"
)]
pub trait ContinueOutput<S>: Sized {
    /// The next generation's input and whether the ended one is kept; else `self`.
    fn again(self) -> Result<(S, bool), Self>;
}

impl<S, T> ContinueOutput<S> for Continue<S, T> {
    fn again(self) -> Result<(S, bool), Self> {
        match self {
            Continue::Again(input) => Ok((input, true)),
            Continue::AgainDropping(input) => Ok((input, false)),
            done => Err(done),
        }
    }
}

/// What `__again` of a `continue_as_new` workflow calls. Not a public API.
#[doc(hidden)]
pub fn again<S, O: ContinueOutput<S>>(output: O) -> Result<(S, bool), O> {
    output.again()
}

/// A workflow declared `#[flow(durable)]`: its parameters are stored with each run. The macro
/// implements it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a durable workflow",
    label = "not declared `#[flow(durable)]`",
    note = "a `Workflow(..)` step of a durable workflow starts its child as a durable run of its own: declare the child `#[flow(durable)]` too"
)]
pub trait DurableWorkflow: Workflow + 'static {
    /// The workflow's parameters as stored: the same as `Input`, which for a durable workflow
    /// borrows nothing.
    type Stored: Durable;

    /// The stored parameters as the run takes them. Not a public API.
    #[doc(hidden)]
    fn __input<'a>(stored: Self::Stored) -> Self::Input<'a>;

    /// Whether the workflow continues as new (`#[flow(durable, continue_as_new)]`): its
    /// output is a [`Continue`]. Not a public API.
    #[doc(hidden)]
    const __CONTINUES: bool = false;

    /// The input of the next generation and whether the ended one is kept, when `output`
    /// says to continue as new ([`Continue::Again`], [`Continue::AgainDropping`]); else the
    /// output, given back. Not a public API.
    #[doc(hidden)]
    fn __again(output: Self::Output) -> Result<(Self::Stored, bool), Self::Output> {
        Err(output)
    }

    /// The name a run of this workflow is stored under, and found by (`flow runs
    /// --workflow`, a [`Worker`](crate::worker::Worker)'s registry, [`resume_all`]): the workflow's
    /// name; for a generic workflow, with its type (and const) arguments, written without
    /// their module paths (`Process<Email>`, `Process<Vec<u8>>`). Generated by
    /// `#[flow(durable)]`; the default is the graph's name.
    fn durable_name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(Self::GRAPH.name())
    }

    /// Whether a cancelled run of this workflow has compensations to run: its steps', or a
    /// child run's. A parent's compensation of a child run whose workflow has none does
    /// nothing. Not a public API.
    #[doc(hidden)]
    const __COMPENSATES: bool = false;

    /// Checks a signal before it is stored for a run of this workflow: `Ok(transient)` when
    /// the workflow declares `name` and `payload` reads as its type, else why not. Not a
    /// public API: [`send_signal_json`] calls it.
    #[doc(hidden)]
    fn __check_signal(name: &str, payload: &[u8]) -> Result<bool, String> {
        let _ = payload;
        Err(format!(
            "the signals of `{}` are not known: `{name}` cannot be checked",
            Self::durable_name()
        ))
    }
}

/// How long a lease is given and extended by each commit.
const LEASE: Duration = Duration::from_secs(60);

/// The default of [`DurableRunner::signal_poll`].
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// The default of [`DurableRunner::request_poll`].
const REQUEST_POLL: Duration = Duration::from_secs(5);

/// A durable run of `W` under a store and an id: `W::runner().durable(&store, "order-42")`.
#[must_use = "a durable runner does nothing until `execute` is awaited"]
pub struct DurableRunner<W> {
    options: RunOptions,
    store: Arc<dyn Store>,
    id: String,
    owner: Owner,
    signal_poll: Duration,
    request_poll: Duration,
    distributed: bool,
    /// The run that started this one at a `Workflow` step (a child run), if one did.
    parent: Option<String>,
    workflow: PhantomData<fn() -> W>,
}

impl<W: DurableWorkflow> Runner<W> {
    /// Makes this run durable: journaled in `store` under `id`.
    /// Stores are cheap to clone (their clones share the runs): the runner keeps a clone.
    ///
    /// The runner's options that change what the run does (its [`deadline`](Runner::deadline),
    /// [`failure_policy`](Runner::failure_policy) and
    /// [`max_concurrency`](Runner::max_concurrency)) are stored with the run and hold again
    /// when it is resumed; its deadline counts from the run's start, not from a resume.
    pub fn durable<S: Store + Clone>(self, store: &S, id: impl Into<String>) -> DurableRunner<W> {
        DurableRunner::new(self.into_options(), Arc::new(store.clone()), id.into())
    }
}

impl<W: DurableWorkflow> DurableRunner<W> {
    /// A runner of `W` with `options` under `store` and `id`, the other settings their
    /// defaults.
    fn new(options: RunOptions, store: Arc<dyn Store>, id: String) -> DurableRunner<W> {
        DurableRunner {
            options,
            store,
            id,
            owner: Owner::process(),
            signal_poll: SIGNAL_POLL,
            request_poll: REQUEST_POLL,
            distributed: false,
            parent: None,
            workflow: PhantomData,
        }
    }
}

impl<W: DurableWorkflow> DurableRunner<W> {
    /// How often the run asks its store for new signals while one of its `Signal` steps
    /// waits (100 ms by default; at least 1 ms): a signal sent by another process, or through
    /// another handle of the store, reaches the step within this time. A run asks nothing
    /// while no `Signal` step waits.
    pub fn signal_poll(mut self, every: Duration) -> Self {
        self.signal_poll = every.max(Duration::from_millis(1));
        self
    }

    /// How often the live run asks its store for an operator's requests (a cancel or a
    /// terminate from [`cancel_run`], [`terminate_run`] or `flow`): 5 s by default, at least
    /// 1 ms. A store that tells the run of new signals (PostgreSQL, by `LISTEN/NOTIFY`) has it
    /// ask at once; this is then the fallback. A run that is loaded (resumed, picked up by a
    /// worker) takes the requests stored for it before anything of it runs.
    pub fn request_poll(mut self, every: Duration) -> Self {
        self.request_poll = every.max(Duration::from_millis(1));
        self
    }

    /// Runs the workflow with `input`, journaling every event before acting on it. A run of
    /// this id that exists with the same workflow, graph and input is resumed instead (a
    /// finished one gives its result again without running anything); the options stored
    /// with it hold, not this runner's.
    ///
    /// # Errors
    ///
    /// [`DurableError`]: the store failed (the run can be resumed), the id is taken by
    /// another run, the graph changed, or the replay diverged.
    pub fn execute(
        self,
        input: W::Stored,
    ) -> impl Future<Output = Result<Outcome<W::Output>, DurableError>> {
        Then::First {
            first: self.prepare(input, None, None),
            next: Some(drive::<W, Outcome<W::Output>>),
        }
    }

    /// Makes the run *distributed*: its operations are executed by whichever
    /// [`Worker`](crate::worker::Worker) claims them (in any process sharing the store), its
    /// outputs pass through the store, and its decisions (what runs next, joins, retries,
    /// compensation) are made by the owner of its lease, one at a time. Stored with the run.
    /// Needs a store shared by processes (`flowdag-postgres`); see `docs/scale-out.md`.
    pub fn distributed(mut self) -> Self {
        self.distributed = true;
        self
    }

    /// Starts the run and hands it to the workers: creates it, commits its first decisions
    /// (its first tasks), and returns [`Ended::Unloaded`] as soon as it only waits for tasks,
    /// timers or signals. A run that needs no worker (it has no operation) ends here:
    /// [`Ended::Finished`]. Read a finished run's result with [`resume`].
    ///
    /// # Errors
    ///
    /// As [`DurableRunner::execute`].
    pub fn submit(
        self,
        input: W::Stored,
    ) -> impl Future<Output = Result<Ended<W::Output>, DurableError>> {
        Then::First {
            first: self.prepare(input, Some(Duration::ZERO), Some(Duration::ZERO)),
            next: Some(drive::<W, Ended<W::Output>>),
        }
    }

    /// Lets the run be unloaded while it waits: once every running step of the run waits
    /// for a `Delay` due more than `after` from now (or for a signal), the run commits its
    /// state with the status `Waiting` and its wake-up time (its earliest timer), gives up
    /// its lease, drops everything it holds, and its future returns
    /// [`Ended::Unloaded`]. A [`Worker`](crate::worker::Worker) (or [`resume`]) continues it
    /// once its timer is due.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # fn f<W: flowdag_runtime::durable::DurableWorkflow>(runner: flowdag_runtime::durable::DurableRunner<W>) {
    /// // Runs waiting a minute or more hold no memory.
    /// let unloading = runner.unload_when_waiting(Duration::from_secs(60));
    /// # let _ = unloading;
    /// # }
    /// ```
    pub fn unload_when_waiting(self, after: Duration) -> UnloadingRunner<W> {
        UnloadingRunner {
            runner: self,
            after,
        }
    }

    /// Creates the run, or loads it to resume it.
    async fn prepare(
        self,
        input: W::Stored,
        unload: Option<Duration>,
        unload_tasks: Option<Duration>,
    ) -> Result<Prepared<W>, DurableError> {
        let (graph_hash, nodes) = graph_rows(&W::GRAPH);
        let bytes = serde_json::to_vec(&input).map_err(|error| DurableError::Input {
            run: self.id.clone(),
            why: error.to_string(),
        })?;
        let input_hash = input_hash(&bytes);
        let mut run = NewRun::new(
            self.id.clone(),
            W::durable_name(),
            graph_hash,
            self.owner.clone(),
            LEASE,
        );
        run.nodes = nodes;
        run.input = bytes;
        run.input_hash = input_hash;
        run.options = new_options::<W>(&self.options, self.distributed, 1, self.parent.as_deref());
        if let Some(after) = self.options.deadline {
            run.timers.push(TimerChange::Set {
                key: run_deadline_key(),
                after,
            });
        }
        match self.store.create_run(run).await? {
            Created::New { lease, next_seq } => {
                crate::metrics::run_started(W::durable_name);
                let setup = JournalSetup {
                    signal_poll: self.signal_poll,
                    request_poll: self.request_poll,
                    unload,
                    distributed: self.distributed,
                    unload_tasks,
                    continues: W::__CONTINUES,
                    parent: self.parent,
                    children: has_children(&W::GRAPH),
                    ..JournalSetup::new(self.store, lease, LEASE)
                };
                debug_assert_eq!(next_seq, 0);
                Ok((self.options, setup, input))
            }
            Created::Exists(summary) => {
                if summary.workflow != W::durable_name() {
                    return Err(DurableError::RunExists {
                        run: self.id,
                        why: format!("it is a run of `{}`", summary.workflow),
                    });
                }
                if summary.input_hash != input_hash {
                    return Err(DurableError::RunExists {
                        run: self.id,
                        why: "it was started with another input".to_owned(),
                    });
                }
                let mut prepared = prepare_resume::<W>(
                    self.options,
                    &self.store,
                    &self.id,
                    (&self.owner, LEASE),
                    (unload, unload_tasks),
                )
                .await?;
                prepared.1.signal_poll = self.signal_poll;
                prepared.1.request_poll = self.request_poll;
                Ok(prepared)
            }
        }
    }
}

impl<W: DurableWorkflow> fmt::Debug for DurableRunner<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableRunner")
            .field("workflow", &W::durable_name())
            .field("id", &self.id)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// A durable run that is unloaded while it waits:
/// [`DurableRunner::unload_when_waiting`] makes one.
#[must_use = "a durable runner does nothing until `execute` is awaited"]
pub struct UnloadingRunner<W> {
    runner: DurableRunner<W>,
    after: Duration,
}

impl<W: DurableWorkflow> UnloadingRunner<W> {
    /// Runs the workflow with `input` as [`DurableRunner::execute`] does, until it ends
    /// ([`Ended::Finished`]) or is unloaded while it waits ([`Ended::Unloaded`]).
    ///
    /// # Errors
    ///
    /// As [`DurableRunner::execute`].
    pub fn execute(
        self,
        input: W::Stored,
    ) -> impl Future<Output = Result<Ended<W::Output>, DurableError>> {
        Then::First {
            first: self
                .runner
                .prepare(input, Some(self.after), Some(Duration::ZERO)),
            next: Some(drive::<W, Ended<W::Output>>),
        }
    }
}

impl<W: DurableWorkflow> fmt::Debug for UnloadingRunner<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnloadingRunner")
            .field("runner", &self.runner)
            .field("after", &self.after)
            .finish()
    }
}

/// How the future of a run that may be unloaded ended: [`UnloadingRunner::execute`],
/// [`resume_or_unload`].
// Returned once per run, and mostly `Finished`: boxing the outcome would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Ended<T> {
    /// The run ended: its result and report.
    Finished(Outcome<T>),
    /// The run waits and was unloaded: its state is in the store with the status `Waiting`,
    /// no process holds it, and a [`Worker`](crate::worker::Worker) (or [`resume`]) continues
    /// it once it is due.
    Unloaded {
        /// When its earliest timer is due, in ms since the Unix epoch by this process's clock
        /// (the store keeps its own in [`RunSummary::wake_at_ms`](crate::store::RunSummary));
        /// `None` when it waits only for signals.
        wake_at_ms: Option<u64>,
    },
}

impl<T> Ended<T> {
    /// The outcome of a run that ended; `None` for one that was unloaded.
    pub fn finished(self) -> Option<Outcome<T>> {
        match self {
            Ended::Finished(outcome) => Some(outcome),
            Ended::Unloaded { .. } => None,
        }
    }

    /// Whether the run was unloaded.
    pub fn is_unloaded(&self) -> bool {
        matches!(self, Ended::Unloaded { .. })
    }
}

/// What a durable run's future gives when the run's own future ends: its outcome, or
/// ([`Ended`]) that it was unloaded.
pub(crate) trait Shape<T>: Sized {
    /// The run's outcome, or `unloaded` (`Some`) when it was unloaded.
    fn shape(outcome: Outcome<T>, unloaded: Option<Option<u64>>) -> Self;
}

impl<T> Shape<T> for Outcome<T> {
    /// A run that cannot be unloaded (no `unload_when_waiting`): its outcome.
    fn shape(outcome: Outcome<T>, _: Option<Option<u64>>) -> Self {
        outcome
    }
}

impl<T> Shape<T> for Ended<T> {
    fn shape(outcome: Outcome<T>, unloaded: Option<Option<u64>>) -> Self {
        match unloaded {
            Some(wake_at_ms) => Ended::Unloaded { wake_at_ms },
            None => Ended::Finished(outcome),
        }
    }
}

/// The runner options stored with a durable run: those that change what the run does.
#[derive(Debug, Default, PartialEq, Serialize, serde::Deserialize)]
struct StoredOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deadline_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fail_fast: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_concurrency: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    distributed: Option<bool>,
    /// The ids of the version markers (`Patched`) the run's graph had when it started: the
    /// run takes their new paths, and the old paths of those written since. `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    patches: Option<Vec<String>>,
    /// The run's generation, when it continued as new (`None`: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation: Option<u32>,
    /// The run that started this one at a `Workflow` step, when one did (a child run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
}

impl StoredOptions {
    fn of(options: &RunOptions) -> StoredOptions {
        StoredOptions {
            deadline_ms: options
                .deadline
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            fail_fast: options.failure.map(|f| f == FailurePolicy::FailFast),
            max_concurrency: options.max_concurrency.map(NonZeroUsize::get),
            distributed: None,
            patches: None,
            generation: None,
            parent: None,
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        match self == &StoredOptions::default() {
            true => Vec::new(),
            // Serializing this struct of numbers and flags cannot fail.
            false => serde_json::to_vec(self).unwrap_or_default(),
        }
    }

    /// The options stored as `bytes` (none when empty).
    fn from_bytes(run: &str, bytes: &[u8]) -> Result<StoredOptions, DurableError> {
        if bytes.is_empty() {
            return Ok(StoredOptions::default());
        }
        serde_json::from_slice(bytes).map_err(|error| DurableError::Input {
            run: run.to_owned(),
            why: format!("its stored runner options: {error}"),
        })
    }

    /// Puts the stored options in `options`, in place of the caller's.
    fn apply(self, options: &mut RunOptions) {
        options.deadline = self.deadline_ms.map(Duration::from_millis);
        options.failure = self.fail_fast.map(|fail_fast| match fail_fast {
            true => FailurePolicy::FailFast,
            false => FailurePolicy::ContinueIndependent,
        });
        options.max_concurrency = self.max_concurrency.and_then(NonZeroUsize::new);
    }
}

/// The runner options stored with a new run of `W` (or a new generation of one): those of
/// `options` that change what the run does, whether it is distributed, the version markers of
/// its graph, its generation and its parent run (a child run's).
fn new_options<W: DurableWorkflow>(
    options: &RunOptions,
    distributed: bool,
    generation: u32,
    parent: Option<&str>,
) -> Vec<u8> {
    let mut stored = StoredOptions::of(options);
    stored.parent = parent.map(str::to_owned);
    stored.distributed = distributed.then_some(true);
    let patches: Vec<String> = markers(&W::GRAPH)
        .into_iter()
        .map(|(_, id)| id.to_owned())
        .collect();
    stored.patches = (!patches.is_empty()).then_some(patches);
    stored.generation = (generation > 1).then_some(generation);
    stored.to_bytes()
}

/// Whether `graph` has `Workflow` steps: a durable run of it starts child runs.
fn has_children(graph: &Graph) -> bool {
    graph
        .nodes
        .iter()
        .any(|node| node.kind == crate::graph::NodeKind::Workflow)
}

/// The timer of a run's deadline.
pub(crate) fn run_deadline_key() -> TimerKey {
    TimerKey {
        node: None,
        instance: String::new(),
        kind: TimerKind::RunDeadline,
    }
}

/// Resumes run `id` of `W` from `store`: replays its journal (nothing that completed runs
/// again; attempts in flight run again with the same [`Attempt`] key) and goes on live, with
/// the runner options stored with it.
///
/// # Errors
///
/// [`DurableError`]: the run does not exist or is held by another owner (`Store`), it is a
/// run of another workflow (`RunExists`), its graph changed (`GraphChanged`), its stored input
/// cannot be read (`Input`), the replay diverged (`Diverged`), or a commit failed (`Store`).
pub fn resume<W: DurableWorkflow, S: Store + Clone>(
    store: &S,
    id: &str,
) -> impl Future<Output = Result<Outcome<W::Output>, DurableError>> + use<W, S> {
    resume_shaped::<W, S, Outcome<W::Output>>(store, id, (None, None), None)
}

/// Resumes run `id` of `W` as [`resume`] does, and unloads it again when every running step
/// waits longer than `after` ([`DurableRunner::unload_when_waiting`]).
///
/// # Errors
///
/// As [`resume`].
pub fn resume_or_unload<W: DurableWorkflow, S: Store + Clone>(
    store: &S,
    id: &str,
    after: Duration,
) -> impl Future<Output = Result<Ended<W::Output>, DurableError>> + use<W, S> {
    resume_shaped::<W, S, Ended<W::Output>>(store, id, (Some(after), Some(Duration::ZERO)), None)
}

/// [`resume`] or [`resume_or_unload`], as `R` says; never unloaded without `unload`.
pub(crate) fn resume_shaped<W: DurableWorkflow, S: Store + Clone, R: Shape<W::Output>>(
    store: &S,
    id: &str,
    unload: Unload,
    holder: Option<Holder>,
) -> impl Future<Output = Result<R, DurableError>> + use<W, S, R> {
    resume_in::<W, R>(Arc::new(store.clone()), id.to_owned(), unload, holder)
}

/// [`resume_shaped`] in a store already shared.
pub(crate) fn resume_in<W: DurableWorkflow, R: Shape<W::Output>>(
    store: Arc<dyn Store>,
    id: String,
    unload: Unload,
    holder: Option<Holder>,
) -> impl Future<Output = Result<R, DurableError>> + use<W, R> {
    let Holder {
        owner,
        lease,
        mailbox,
    } = holder.unwrap_or_else(|| Holder {
        owner: Owner::process(),
        lease: LEASE,
        mailbox: None,
    });
    let first = async move {
        let mut prepared =
            prepare_resume::<W>(RunOptions::default(), &store, &id, (&owner, lease), unload)
                .await?;
        prepared.1.mailbox = mailbox;
        Ok(prepared)
    };
    Then::First {
        first,
        next: Some(drive::<W, R>),
    }
}

/// Executes one claimed task of a distributed run of `W` (a worker's side): restores the
/// run's stored outputs, runs the task's attempt with its idempotency key, and returns its
/// outcome. Nothing is journaled; the caller completes the task.
pub(crate) async fn execute_task<W: DurableWorkflow>(
    store: Arc<dyn Store>,
    mut claim: TaskClaim,
) -> Result<TaskOutcome, DurableError> {
    let inputs = match claim.inputs.take() {
        Some(inputs) => inputs,
        None => store.task_inputs(&claim.run).await?,
    };
    let (graph_hash, _) = graph_rows(&W::GRAPH);
    if inputs.graph_hash != graph_hash {
        return Err(DurableError::GraphChanged {
            run: claim.run.clone(),
            workflow: W::durable_name().into_owned(),
            // The task does not carry the run's node rows: the run's owner names the changes.
            changes: Vec::new(),
        });
    }
    let input: W::Stored =
        serde_json::from_slice(&inputs.input).map_err(|error| DurableError::Input {
            run: claim.run.clone(),
            why: error.to_string(),
        })?;
    let (outputs, instances) = split_outputs(inputs.outputs);
    let task = journal::TaskRun::new(&claim, outputs, instances);
    let setup = RunSetup::hooked(RunOptions::default(), task as Box<dyn Hook>);
    let mut ran = W::__execute::<'static>(setup, W::__input::<'static>(input)).await;
    let outcome = ran.report.take_hook_end::<Option<TaskOutcome>>().flatten();
    outcome.ok_or_else(|| {
        DurableError::Store(StoreError::Invalid {
            why: format!(
                "task {}{} of run `{}` ended without an outcome",
                claim.node, claim.instance, claim.run
            ),
        })
    })
}

/// Resumes every unfinished run of `W` in `store`, one after the other, oldest first; returns
/// each run's id with its result.
///
/// # Errors
///
/// Listing the runs failed; a run that fails to resume is reported in its entry.
pub async fn resume_all<W: DurableWorkflow, S: Store + Clone>(
    store: &S,
) -> Result<Vec<(String, Result<Outcome<W::Output>, DurableError>)>, DurableError> {
    let filter = RunFilter {
        workflow: Some(W::durable_name().into_owned()),
        statuses: vec![
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Compensating,
        ],
        ..RunFilter::default()
    };
    let runs = store.list_runs(&filter).await?;
    let mut results = Vec::with_capacity(runs.len());
    for run in runs {
        let result = resume::<W, S>(store, &run.id).await;
        results.push((run.id, result));
    }
    Ok(results)
}

/// The hash of a run's stored parameters, over their canonical JSON (object keys sorted), so
/// that the same input hashes the same whatever order a map in it serializes its keys in (a
/// `HashMap`'s order differs from one map to the next).
fn input_hash(bytes: &[u8]) -> u64 {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(value) => fnv1a(&[value.to_string().as_bytes()]),
        Err(_) => fnv1a(&[bytes]),
    }
}

/// Who resumes a run (a `Worker`): its owner, the lease it takes, and where it hands the run
/// the outcomes of the tasks it executes itself.
pub(crate) struct Holder {
    pub(crate) owner: Owner,
    pub(crate) lease: Duration,
    pub(crate) mailbox: Option<Arc<journal::Mailbox>>,
}

/// When a run is unloaded: after waiting this long (any wait), and after a distributed run
/// has waited this long for tasks alone (zero: as soon as it does).
pub(crate) type Unload = (Option<Duration>, Option<Duration>);

/// What a durable run starts from: its options, its journal, its parameters.
type Prepared<W> = (RunOptions, JournalSetup, <W as DurableWorkflow>::Stored);

async fn prepare_resume<W: DurableWorkflow>(
    options: RunOptions,
    store: &Arc<dyn Store>,
    id: &str,
    (owner, extend): (&Owner, Duration),
    unload: Unload,
) -> Result<Prepared<W>, DurableError> {
    let mut asked = false;
    loop {
        let loaded: Loaded = store.load_run(id, owner, extend).await?;
        let lease = loaded.lease.clone();
        let finished = loaded.run.status.is_finished();
        let prepared = check_loaded::<W>(options.clone(), store, id, loaded, unload, extend);
        match &prepared {
            // Refused: the lease taken to look at the run is given back, so that a process
            // with the right code may take the run at once. Best effort: a lease not released
            // expires.
            Err(_) => {
                let _ = store.release(owner, std::slice::from_ref(&lease)).await;
            }
            // A child run whose parent has ended is asked to cancel, and loaded again with
            // the request, which it takes before anything of it runs.
            Ok((_, setup, _)) if !asked && !finished => {
                if let Some(parent) = &setup.parent
                    && child::cancel_if_orphaned(&**store, id, parent).await
                {
                    asked = true;
                    let _ = store.release(owner, std::slice::from_ref(&lease)).await;
                    continue;
                }
            }
            Ok(_) => {}
        }
        return prepared;
    }
}

/// Checks a loaded run against `W` (workflow, graph, input) and makes its journal setup.
fn check_loaded<W: DurableWorkflow>(
    mut options: RunOptions,
    store: &Arc<dyn Store>,
    id: &str,
    loaded: Loaded,
    (unload, unload_tasks): Unload,
    extend: Duration,
) -> Result<Prepared<W>, DurableError> {
    if loaded.run.workflow != W::durable_name() {
        return Err(DurableError::RunExists {
            run: id.to_owned(),
            why: format!("it is a run of `{}`", loaded.run.workflow),
        });
    }
    let (graph_hash, nodes) = graph_rows(&W::GRAPH);
    let mut adopt = None;
    let stored = StoredOptions::from_bytes(id, &loaded.options)?;
    let patches = stored.patches.clone().unwrap_or_default();
    let mut loaded = loaded;
    let mut renumber = Vec::new();
    if loaded.run.graph_hash != graph_hash {
        let (started, settled) = progress(&loaded.events);
        let dead = dead_steps(&W::GRAPH, &patches);
        let refused = changes_for_run(
            &loaded.nodes,
            &nodes,
            |node| started.contains(&node),
            |node| settled.contains(&node),
            |name| dead.contains(&name),
        );
        // A finished run is not refused: nothing of it runs again, and its replay (which
        // writes nothing) gives its result again, or says where this code would have done
        // otherwise (`Diverged`).
        if !refused.is_empty() && !loaded.run.status.is_finished() {
            return Err(DurableError::GraphChanged {
                run: id.to_owned(),
                workflow: W::durable_name().into_owned(),
                changes: refused,
            });
        }
        // Compatible: the run goes on with the graph it has now, stored with its first
        // commit once its replay has checked that the past is the same.
        renumber = renumbering(&loaded.nodes, &nodes);
        // In memory, a stored step the graph no longer has takes a number no step has: its
        // events (a finished run's, replayed) meet no step of this graph.
        let mut moves = renumber.clone();
        moves.extend(
            loaded
                .nodes
                .iter()
                .filter(|row| !nodes.iter().any(|now| now.name == row.name))
                .enumerate()
                .map(|(k, row)| (row.node, u32::MAX - k as u32)),
        );
        renumber_loaded(&mut loaded, &moves);
        if !loaded.run.status.is_finished() {
            adopt = Some((graph_hash, nodes));
        }
    }
    let input: W::Stored =
        serde_json::from_slice(&loaded.input).map_err(|error| DurableError::Input {
            run: id.to_owned(),
            why: error.to_string(),
        })?;
    let distributed = stored.distributed == Some(true);
    let generation = stored.generation.unwrap_or(1);
    let parent = stored.parent.clone();
    stored.apply(&mut options);
    let (outputs, instances) = split_outputs(loaded.outputs);
    let setup = JournalSetup {
        events: loaded.events,
        next_seq: loaded.next_seq,
        outputs,
        instances,
        timers: loaded.timers,
        now_ms: loaded.now_ms,
        signals: loaded.signals,
        unload,
        waiting: loaded.run.status == RunStatus::Waiting,
        distributed,
        unload_tasks,
        tasks: loaded.tasks,
        adopt,
        renumber,
        patches: Some(patches),
        continues: W::__CONTINUES && !loaded.run.status.is_finished(),
        generation,
        parent,
        children: has_children(&W::GRAPH),
        ..JournalSetup::new(Arc::clone(store), loaded.lease, extend)
    };
    Ok((options, setup, input))
}

/// The steps of a run (its own, not of nest instances) that have an event in its journal
/// (that it started), and those that settled (completed, failed for good, skipped, aborted,
/// withdrawn).
fn progress(events: &[StoredEvent]) -> (HashSet<u32>, HashSet<u32>) {
    let own = || events.iter().filter(|event| event.path.is_none());
    let started = own().filter_map(|event| event.node).collect();
    let settled = own()
        .filter(|event| {
            matches!(
                event.kind.as_str(),
                "Completed" | "Failed" | "Skipped" | "Aborted" | "Withdrawn"
            )
        })
        .filter_map(|event| event.node)
        .collect();
    (started, settled)
}

/// The changes from a run's stored graph to the workflow's graph now that may alter what the
/// run did: empty when the run can go on with the graph it has now.
///
/// Steps are matched by name, wherever the graph now puts them. Compatible: a step that
/// changed (its call, its kind or policy, what it waits for, what undoes it) and has not
/// started (`started`: it has an event in the run's journal); a step removed that has not
/// started; a step added where the run has not reached (one of the steps it follows has not
/// settled, `settled`: completed, failed, skipped, aborted or withdrawn); steps that moved
/// while those that started keep their order. Anything else is refused: a started step
/// changed or removed, a step added after steps that have all settled (it would have run
/// already) or with no step before it, started steps in another order, a change of the graph
/// that no step shows. A compatible change can still alter the run's past in a way the rows
/// do not show (a step added behind a race that has been decided): the replay sees it
/// (`DurableError::Diverged`) before anything is written.
pub fn incompatible_changes(
    stored: &[NodeRow],
    now: &[NodeRow],
    started: impl Fn(u32) -> bool,
    settled: impl Fn(u32) -> bool,
) -> Vec<GraphChange> {
    changes_for_run(stored, now, started, settled, |_| false)
}

/// The runs that `filter` selects and that started before version marker `patch` was
/// written (`Patched("patch")` was not in their graph): they take its old path. Once none of
/// a workflow's unfinished runs (`running`, `waiting`, `compensating`) is left, the marker
/// can be removed (the new path kept as plain steps): the runs that started with it go on
/// without it. `flow runs --without-patch` asks this.
///
/// # Errors
///
/// [`DurableError::Store`]: listing the runs or reading one failed; [`DurableError::Input`]:
/// a run's stored options are not readable.
pub async fn runs_without_patch<S: Store + ?Sized>(
    store: &S,
    filter: &RunFilter,
    patch: &str,
) -> Result<Vec<RunSummary>, DurableError> {
    let mut old = Vec::new();
    for run in store.list_runs(filter).await? {
        let data = match store.run_data(&run.id).await {
            Ok(data) => data,
            // Deleted meanwhile: not a run any more.
            Err(StoreError::NotFound { .. }) => continue,
            Err(error) => return Err(error.into()),
        };
        let options = StoredOptions::from_bytes(&run.id, &data.options)?;
        if !options
            .patches
            .unwrap_or_default()
            .iter()
            .any(|p| p == patch)
        {
            old.push(run);
        }
    }
    Ok(old)
}

/// The prefix of a version marker's name (`Patched("id")` is the decision `patched:id`).
const MARKER: &str = "patched:";

/// The version markers of `graph`: (node, id).
pub(crate) fn markers(graph: &Graph) -> Vec<(u32, &'static str)> {
    graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, info)| info.kind == NodeKind::Decision)
        .filter_map(|(at, info)| Some((u32::try_from(at).ok()?, info.name.strip_prefix(MARKER)?)))
        .collect()
}

/// The names of the steps of `graph` that a run with the version markers `patches` never
/// runs: the markers themselves (decided by the run, not journaled), the old path of each
/// marker it has, the new path of each it has not.
pub(crate) fn dead_steps(graph: &Graph, patches: &[String]) -> Vec<&'static str> {
    let mut dead = Vec::new();
    for (node, _) in unjournaled(graph, patches) {
        dead.push(graph.nodes[node as usize].name);
    }
    dead
}

/// The nodes of `graph` whose events a run with the version markers `patches` does not
/// journal, each with whether it is a marker whose old path the run takes.
pub(crate) fn unjournaled(graph: &Graph, patches: &[String]) -> Vec<(u32, bool)> {
    let mut nodes = Vec::new();
    for (marker, id) in markers(graph) {
        let has = patches.iter().any(|p| p == id);
        nodes.push((marker, !has));
        let plan = &graph.plan;
        let untaken = match has {
            true => plan.else_nodes.get(marker as usize),
            false => plan.then_nodes.get(marker as usize),
        };
        nodes.extend(
            untaken
                .into_iter()
                .flat_map(|branch| branch.iter())
                .map(|&n| (n, false)),
        );
    }
    nodes
}

/// The names of the steps `row` follows as a run sees them: a version marker stands for the
/// steps it follows, and the steps `skip` names (those the run never runs) are left out.
fn effective_preds(rows: &[NodeRow], row: &NodeRow, skip: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut names = Vec::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<u32> = row.preds.clone();
    while let Some(pred) = stack.pop() {
        if !seen.insert(pred) {
            continue;
        }
        let Some(pred) = rows.get(pred as usize) else {
            continue;
        };
        if pred.name.starts_with(MARKER) {
            stack.extend(&pred.preds);
        } else if !skip(&pred.name) {
            names.push(pred.name.clone());
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// [`incompatible_changes`] for one run: `dead` names the steps of the graph now that the run
/// never runs (a version marker's path it does not take, see [`dead_steps`]); they, and the
/// version markers, change as they like.
fn changes_for_run(
    stored: &[NodeRow],
    now: &[NodeRow],
    started: impl Fn(u32) -> bool,
    settled: impl Fn(u32) -> bool,
    dead: impl Fn(&str) -> bool,
) -> Vec<GraphChange> {
    let all = graph_changes(stored, now);
    // (A run stored without steps is not another version of this workflow.)
    if stored.is_empty() {
        return all;
    }
    // No step changed: the steps moved, or the hash changed for a reason no step shows.
    let nothing_changed = matches!(&all[..], [GraphChange::Reordered { .. }]);
    let stored_node = |name: &str| stored.iter().find(|row| row.name == name).map(|r| r.node);
    let started_name = |name: &str| stored_node(name).is_some_and(&started);
    let in_now = |name: &str| now.iter().any(|row| row.name == name);
    let unseen = |name: &str| name.starts_with(MARKER) || dead(name);
    // What each side's steps follow, as the run sees them.
    let skip_now = |name: &str| dead(name);
    let skip_stored = |name: &str| dead(name) || (!in_now(name) && !started_name(name));
    let same_preds = |name: &str| {
        let was = stored.iter().find(|row| row.name == name);
        let is = now.iter().find(|row| row.name == name);
        match (was, is) {
            (Some(was), Some(is)) => {
                effective_preds(stored, was, &skip_stored) == effective_preds(now, is, &skip_now)
            }
            _ => false,
        }
    };
    let reached = |name: &str| {
        now.iter().find(|row| row.name == name).is_none_or(|row| {
            effective_preds(now, row, &skip_now)
                .iter()
                .all(|pred| stored_node(pred).is_some_and(&settled))
        })
    };
    let mut refused: Vec<GraphChange> = all
        .into_iter()
        .filter(|change| match change {
            GraphChange::Added(node) => !unseen(node) && reached(node),
            GraphChange::Removed(node) => started_name(node),
            // Decided below, from the steps' order.
            GraphChange::Reordered { .. } => false,
            // A step the run started is refused even on a path it no longer takes (moved
            // into a marker's branch): its events would meet nothing.
            GraphChange::EdgesChanged { node, .. } => {
                !node.starts_with(MARKER) && started_name(node) && (dead(node) || !same_preds(node))
            }
            GraphChange::Changed { node, .. }
            | GraphChange::KindChanged { node, .. }
            | GraphChange::PolicyChanged { node, .. }
            | GraphChange::CompensationChanged { node, .. } => {
                !node.starts_with(MARKER) && started_name(node)
            }
        })
        .collect();
    // The started steps, in the order the graph has them now, must be in their stored order:
    // the replay meets their events in that order.
    let order: Vec<(usize, &str)> = stored
        .iter()
        .filter(|row| started(row.node))
        .filter_map(|row| {
            let at = now.iter().position(|r| r.name == row.name)?;
            Some((at, row.name.as_str()))
        })
        .collect();
    let same_places = stored.len() == now.len()
        && stored
            .iter()
            .zip(now)
            .all(|(old, row)| old.name == row.name);
    let moved = order.windows(2).any(|pair| pair[0].0 > pair[1].0);
    if moved {
        let was: Vec<String> = order.iter().map(|(_, name)| (*name).to_owned()).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        let now = sorted.iter().map(|(_, name)| (*name).to_owned()).collect();
        refused.push(GraphChange::Reordered { was, now });
    }
    // Same steps in the same places and nothing changed: the hash differs for a reason no
    // step shows (the journal's format).
    let unexplained = refused.is_empty() && same_places && nothing_changed;
    if unexplained {
        let names: Vec<String> = stored.iter().map(|row| row.name.clone()).collect();
        refused.push(GraphChange::Reordered {
            was: names.clone(),
            now: names,
        });
    }
    refused
}

/// How a run's stored graph maps to the workflow's graph now: (stored index, index now) of
/// each stored step that the graph now numbers otherwise.
fn renumbering(stored: &[NodeRow], now: &[NodeRow]) -> Vec<(u32, u32)> {
    stored
        .iter()
        .filter_map(|row| {
            let at = now.iter().position(|r| r.name == row.name)?;
            let at = u32::try_from(at).ok()?;
            (at != row.node).then_some((row.node, at))
        })
        .collect()
}

/// A loaded run's rows as the graph now numbers its steps (`map`: see [`renumbering`]); the
/// store's rows follow with the run's first live commit ([`Batch::renumber`]).
fn renumber_loaded(loaded: &mut Loaded, map: &[(u32, u32)]) {
    let to = |node: u32| crate::store::renumbered(map, node);
    for event in loaded.events.iter_mut().filter(|e| e.path.is_none()) {
        event.node = event.node.map(to);
    }
    for output in loaded
        .outputs
        .iter_mut()
        .filter(|output| crate::store::own_output(&output.instance))
    {
        output.node = to(output.node);
    }
    for timer in &mut loaded.timers {
        timer.key.node = timer.key.node.map(to);
    }
    for wait in &mut loaded.waits {
        wait.0 = to(wait.0);
    }
    for task in &mut loaded.tasks {
        task.node = to(task.node);
    }
}

/// The stored outputs of a run's own nodes, by node, and the ends of its nest instances, by
/// record.
/// The ends of a run's nest instances, by nest node and record.
type InstanceEnds = HashMap<(u32, String), Vec<u8>>;

fn split_outputs(outputs: Vec<StoredOutput>) -> (HashMap<u32, Vec<u8>>, InstanceEnds) {
    let mut own = HashMap::new();
    let mut instances = HashMap::new();
    for output in outputs {
        match output.instance.is_empty() {
            true => own.insert(output.node, output.bytes),
            false => instances.insert((output.node, output.instance), output.bytes),
        };
    }
    (own, instances)
}

/// Runs a prepared durable run: the workflow's own run, with its journal handed to the
/// scheduler in the run's setup (the scheduler's `Hook`), beside the runner's options; a
/// workflow that continues as new goes on through its generations.
fn drive<W: DurableWorkflow, R: Shape<W::Output>>(
    (options, setup, input): Prepared<W>,
) -> Drive<W, impl Future<Output = Outcome<W::Output>>, R> {
    let next = Next {
        store: Arc::clone(&setup.store),
        extend: setup.extend,
        signal_poll: setup.signal_poll,
        request_poll: setup.request_poll,
        unload: setup.unload,
        distributed: setup.distributed,
        unload_tasks: setup.unload_tasks,
        mailbox: setup.mailbox.clone(),
        generation: setup.generation,
        parent: setup.parent.clone(),
        options: options.clone(),
    };
    let start: fn(RunOptions, JournalSetup, W::Stored) -> _ = start::<W>;
    Drive {
        run: start(options, setup, input),
        start,
        next,
        settling: None,
        failed: None,
        shape: PhantomData,
    }
}

/// The workflow's run under its journal.
fn start<W: DurableWorkflow>(
    mut options: RunOptions,
    setup: JournalSetup,
    input: W::Stored,
) -> impl Future<Output = Outcome<W::Output>> {
    options.record = true;
    options.report = true;
    let meter = crate::metrics::RunMeter::new(W::durable_name);
    let journal = journal::Journal::new(setup, meter);
    let setup = RunSetup::hooked(options, journal as Box<dyn Hook>);
    W::__execute::<'static>(setup, W::__input::<'static>(input))
}

/// What a run that continues as new takes from one generation to the next: the runner's
/// settings (the journal setup's, and the run's options).
struct Next {
    store: Arc<dyn Store>,
    extend: Duration,
    signal_poll: Duration,
    request_poll: Duration,
    unload: Option<Duration>,
    distributed: bool,
    unload_tasks: Option<Duration>,
    mailbox: Option<Arc<journal::Mailbox>>,
    generation: u32,
    parent: Option<String>,
    options: RunOptions,
}

/// A store call that settles a generation: the run's success committed (`None`), or its next
/// generation started under this lease.
type Settling = Pin<Box<dyn Future<Output = Result<Option<Lease>, StoreError>> + Send>>;

pin_project_lite::pin_project! {
    /// The future of a durable run: the workflow's run, whose result is replaced by the error
    /// that stopped it, if one did (or, shaped as [`Ended`], by its unloading): what the
    /// journal gave back when the run ended. A workflow that continues as new is settled here
    /// once its output is known: its success committed, or its next generation started under
    /// the same id and run. Written by hand (not an `async` block) so that the run's future
    /// can be spawned: an `async` block generic over the workflow trips rustc's
    /// higher-ranked `Send` check (rust-lang/rust#100013).
    struct Drive<W: DurableWorkflow, F, R> {
        #[pin]
        run: F,
        start: fn(RunOptions, JournalSetup, W::Stored) -> F,
        next: Next,
        // The store call in flight, with the outcome it settles (`None` when it starts the
        // next generation, with that generation's input).
        settling: Option<(Settling, Option<Outcome<W::Output>>, Option<W::Stored>)>,
        // The error the run's future ends with once the call in flight is done.
        failed: Option<DurableError>,
        shape: PhantomData<fn() -> R>,
    }
}

impl<W: DurableWorkflow, F: Future<Output = Outcome<W::Output>>, R: Shape<W::Output>> Future
    for Drive<W, F, R>
{
    type Output = Result<R, DurableError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            if let Some((settling, outcome, input)) = this.settling.as_mut() {
                let lease = match std::task::ready!(settling.as_mut().poll(cx)) {
                    Ok(lease) => lease,
                    Err(error) => {
                        *this.settling = None;
                        return Poll::Ready(Err(DurableError::Store(error)));
                    }
                };
                let (outcome, input) = (outcome.take(), input.take());
                *this.settling = None;
                if let Some(error) = this.failed.take() {
                    return Poll::Ready(Err(error));
                }
                match (lease, outcome, input) {
                    (None, Some(outcome), _) => return Poll::Ready(Ok(R::shape(outcome, None))),
                    (Some(lease), _, Some(input)) => {
                        let next = &mut *this.next;
                        next.generation += 1;
                        let setup = JournalSetup {
                            signal_poll: next.signal_poll,
                            request_poll: next.request_poll,
                            unload: next.unload,
                            distributed: next.distributed,
                            unload_tasks: next.unload_tasks,
                            mailbox: next.mailbox.clone(),
                            continues: W::__CONTINUES,
                            generation: next.generation,
                            parent: next.parent.clone(),
                            children: has_children(&W::GRAPH),
                            ..JournalSetup::new(Arc::clone(&next.store), lease, next.extend)
                        };
                        let run = (this.start)(next.options.clone(), setup, input);
                        this.run.set(run);
                    }
                    // Each call is made with what its end needs: not reached.
                    _ => return Poll::Pending,
                }
            }
            let mut outcome = std::task::ready!(this.run.as_mut().poll(cx));
            let end = outcome.report.take_hook_end::<journal::JournalEnd>();
            let (error, unloaded, settle) = end.map_or((None, None, None), |end| {
                (end.error, end.unloaded, end.settle)
            });
            if let Some(error) = error {
                return Poll::Ready(Err(error));
            }
            let Some(settle) = settle else {
                return Poll::Ready(Ok(R::shape(outcome, unloaded)));
            };
            let store = Arc::clone(&this.next.store);
            let Outcome { result, report } = outcome;
            let (again, result) = match result {
                Ok(output) => match W::__again(output) {
                    Ok(again) => (Some(again), None),
                    Err(output) => (None, Some(Ok(output))),
                },
                Err(error) => (None, Some(Err(error))),
            };
            let outcome = result.map(|result| Outcome { result, report });
            *this.settling = Some(match again {
                None => {
                    let workflow = crate::metrics::Workflow::of(W::durable_name);
                    (succeeded(store, settle, workflow), outcome, None)
                }
                Some((input, keep)) => {
                    let next = &*this.next;
                    let generation = next.generation;
                    let bytes = match serde_json::to_vec(&input) {
                        Ok(bytes) => bytes,
                        Err(error) => {
                            // The generation stays as it is (its journal whole, not settled):
                            // a resume by code whose input serializes settles it.
                            let run = settle.lease.run.clone();
                            let store = Arc::clone(&next.store);
                            let call: Settling = Box::pin(async move {
                                release(&*store, &settle.lease).await;
                                Ok(None)
                            });
                            *this.settling = Some((call, None, None));
                            *this.failed = Some(DurableError::Input {
                                run,
                                why: format!(
                                    "the input the run continues with cannot be stored: {error}"
                                ),
                            });
                            continue;
                        }
                    };
                    let continued = ContinueRun {
                        next_seq: settle.next_seq,
                        input: bytes.clone(),
                        options: new_options::<W>(
                            &next.options,
                            next.distributed,
                            generation + 1,
                            next.parent.as_deref(),
                        ),
                        archive: keep.then(|| format!("{}~{generation}", settle.lease.run)),
                        end: RunEnd {
                            result: Some(bytes),
                            error: None,
                        },
                        timers: next
                            .options
                            .deadline
                            .map(|after| TimerChange::Set {
                                key: run_deadline_key(),
                                after,
                            })
                            .into_iter()
                            .collect(),
                        lease: next.extend,
                    };
                    let call: Settling = Box::pin(async move {
                        let next = store.continue_run(&settle.lease, continued).await;
                        if next.is_err() {
                            release(&*store, &settle.lease).await;
                        }
                        next.map(Some)
                    });
                    (call, None, Some(input))
                }
            });
        }
    }
}

/// Commits the success of a generation that does not continue, and gives the run's lease
/// back.
fn succeeded(
    store: Arc<dyn Store>,
    settle: journal::Settle,
    workflow: crate::metrics::Workflow,
) -> Settling {
    Box::pin(async move {
        let mut batch = Batch::new(&settle.lease, settle.next_seq, Duration::ZERO);
        batch.status = Some(RunStatus::Succeeded);
        batch.end = Some(RunEnd {
            result: None,
            error: None,
        });
        let committed = store.commit(batch).await;
        if committed.is_ok() {
            crate::metrics::run_finished(&workflow, RunStatus::Succeeded.as_str());
        }
        release(&*store, &settle.lease).await;
        committed.map(|_| None)
    })
}

/// Gives a run's lease back once its future has settled it, or failed to (so that a resume
/// may take it at once). Best effort: a lease not released expires.
async fn release(store: &dyn Store, lease: &Lease) {
    let _ = store
        .release(&lease.owner, std::slice::from_ref(lease))
        .await;
}

pin_project_lite::pin_project! {
    /// `first`, then the future `next` makes of its value.
    #[project = ThenProj]
    enum Then<A, F, B> {
        First { #[pin] first: A, next: Option<F> },
        Second { #[pin] second: B },
        Done,
    }
}

impl<A, F, B, T, U> Future for Then<A, F, B>
where
    A: Future<Output = Result<T, DurableError>>,
    F: FnOnce(T) -> B,
    B: Future<Output = Result<U, DurableError>>,
{
    type Output = Result<U, DurableError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                ThenProj::First { first, next } => {
                    let value = std::task::ready!(first.poll(cx));
                    match (value, next.take()) {
                        (Ok(value), Some(next)) => self.set(Then::Second {
                            second: next(value),
                        }),
                        (Err(error), _) => {
                            self.set(Then::Done);
                            return Poll::Ready(Err(error));
                        }
                        // `next` is taken once, when `first` ends: never reached.
                        (Ok(_), None) => {
                            self.set(Then::Done);
                            return Poll::Pending;
                        }
                    }
                }
                ThenProj::Second { second } => {
                    let output = std::task::ready!(second.poll(cx));
                    self.set(Then::Done);
                    return Poll::Ready(output);
                }
                // Polled after it completed: a future that has ended stays pending.
                ThenProj::Done => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner options a durable run stores come back as they were, in place of the
    /// resuming caller's; a run without any stores nothing.
    #[test]
    fn stored_runner_options_round_trip() {
        let mut options = RunOptions {
            deadline: Some(Duration::from_millis(1_500)),
            failure: Some(FailurePolicy::FailFast),
            max_concurrency: NonZeroUsize::new(3),
            ..RunOptions::default()
        };
        let bytes = StoredOptions::of(&options).to_bytes();
        let mut resumed = RunOptions {
            deadline: Some(Duration::from_secs(9)),
            ..RunOptions::default()
        };
        StoredOptions::from_bytes("r", &bytes)
            .expect("reads")
            .apply(&mut resumed);
        assert_eq!(resumed.deadline, options.deadline);
        assert_eq!(resumed.failure, options.failure);
        assert_eq!(resumed.max_concurrency, options.max_concurrency);

        options = RunOptions::default();
        assert!(StoredOptions::of(&options).to_bytes().is_empty());
        StoredOptions::from_bytes("r", &[])
            .expect("none stored")
            .apply(&mut resumed);
        assert_eq!(resumed.deadline, None);
        let err = StoredOptions::from_bytes("r", b"{not json").expect_err("corrupt");
        assert!(err.to_string().contains("stored runner options"), "{err}");
    }

    fn row(node: u32, name: &str, fingerprint: u64, kind: &str, policy: &str) -> NodeRow {
        NodeRow {
            node,
            name: name.to_owned(),
            label: format!("{name}()"),
            fingerprint,
            preds: node.checked_sub(1).into_iter().collect(),
            compensate: String::new(),
            kind: kind.to_owned(),
            policy: policy.to_owned(),
        }
    }

    /// Started steps in another order are named in both orders; a hash that changed with no
    /// step changed says so.
    #[test]
    fn steps_in_another_order_are_named_in_both_orders() {
        let stored = [
            row(0, "a", 1, "operation", ""),
            row(1, "b", 2, "operation", ""),
        ];
        let now = [
            row(0, "b", 2, "operation", ""),
            row(1, "a", 1, "operation", ""),
        ];
        let changes = incompatible_changes(&stored, &now, |_| true, |_| true);
        let reordered = changes
            .iter()
            .find(|c| matches!(c, GraphChange::Reordered { .. }))
            .expect("reordered");
        assert_eq!(
            reordered,
            &GraphChange::Reordered {
                was: vec!["a".into(), "b".into()],
                now: vec!["b".into(), "a".into()],
            }
        );
        assert_eq!(
            reordered.to_string(),
            "its steps are now in the order [b, a] (was [a, b])"
        );
        let same = incompatible_changes(&stored, &stored, |_| true, |_| true);
        assert_eq!(
            same.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["it changed in a way no step shows (the journal's format)"]
        );
    }

    /// A step's other kind or policy is named with what it was and what it is.
    #[test]
    fn a_changed_kind_or_policy_is_named_with_both_values() {
        let stored = [
            row(0, "fetch", 1, "operation", ""),
            row(1, "receipt", 2, "operation", "retries = 3"),
            row(2, "approve", 3, "operation", "timeout = 5s"),
        ];
        let now = [
            row(0, "fetch", 1, "operation", ""),
            row(1, "receipt", 20, "operation", "retries = 4"),
            row(2, "approve", 30, "signal", ""),
        ];
        let changes = graph_changes(&stored, &now);
        assert_eq!(
            changes,
            [
                GraphChange::PolicyChanged {
                    node: "receipt".into(),
                    was: "retries = 3".into(),
                    now: "retries = 4".into(),
                },
                GraphChange::KindChanged {
                    node: "approve".into(),
                    was: "operation".into(),
                    now: "signal".into(),
                },
                GraphChange::PolicyChanged {
                    node: "approve".into(),
                    was: "timeout = 5s".into(),
                    now: String::new(),
                },
            ]
        );
        let texts: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "step `receipt` changed its policy from `retries = 3` to `retries = 4`",
                "step `approve` is now a `signal` (was an `operation`)",
                "step `approve` changed its policy from `timeout = 5s` to the defaults",
            ]
        );
        let gained = GraphChange::PolicyChanged {
            node: "x".into(),
            was: String::new(),
            now: "retries = 1".into(),
        };
        assert_eq!(
            gained.to_string(),
            "step `x` changed its policy from the defaults to `retries = 1`"
        );
        let unknown = GraphChange::KindChanged {
            node: "x".into(),
            was: String::new(),
            now: "delay".into(),
        };
        assert_eq!(
            unknown.to_string(),
            "step `x` is now a `delay` (its kind before was not stored)"
        );
        // Where the fingerprint is the same, the texts are not compared.
        let mut same = now.clone();
        same[1].policy = "retries=4".into();
        assert!(matches!(
            &graph_changes(&now, &same)[..],
            [GraphChange::Reordered { .. }]
        ));
    }

    /// A row stored without kind and policy says that one of them changed, not which.
    #[test]
    fn a_row_without_kind_and_policy_says_that_one_changed() {
        let stored = [row(0, "fetch", 1, "", ""), row(1, "receipt", 2, "", "")];
        let now = [
            row(0, "fetch", 1, "operation", ""),
            row(1, "receipt", 20, "operation", "retries = 4"),
        ];
        let changes = graph_changes(&stored, &now);
        assert_eq!(
            changes,
            [GraphChange::Changed {
                node: "receipt".into(),
                was: "receipt()".into(),
                now: "receipt()".into(),
            }]
        );
        assert_eq!(
            changes[0].to_string(),
            "step `receipt` changed its kind or policy (the run's stored graph does not say which, nor what it was)"
        );
    }

    /// A step's other kind or policy is compatible while the step has not started.
    #[test]
    fn a_changed_policy_is_compatible_until_the_step_started() {
        let stored = [
            row(0, "fetch", 1, "operation", ""),
            row(1, "receipt", 2, "operation", "retries = 3"),
        ];
        let now = [
            row(0, "fetch", 1, "operation", ""),
            row(1, "receipt", 20, "signal", "retries = 4"),
        ];
        assert_eq!(
            incompatible_changes(&stored, &now, |node| node == 0, |_| true),
            []
        );
        assert_eq!(
            incompatible_changes(&stored, &now, |node| node == 1, |_| true).len(),
            2
        );
    }
}
