//! Tasks: the attempts of a distributed run's operations, and the instances of its nests,
//! which any worker process may claim, execute and complete (`Store::claim_tasks`,
//! `Store::complete_task`).
//!
//! A distributed run is still *decided* by one owner at a time, the holder of its lease, which
//! replays its journal and commits its batches as any durable run does: that is what makes a
//! join fire exactly once (the run's row is the one conditionally updated row every decision
//! goes through). What it does not do is execute its operations: the batch with an
//! operation's `Requested` (or the first look of a nest instance at its end) opens a task
//! ([`TaskChange::Open`]); a worker claims it by a
//! compare-and-set on the task's version, executes the attempt with its idempotency key, and
//! completes it in one transaction that stores the outcome (and the output) and makes the run
//! due; the run's next owner journals the outcome and closes the task
//! ([`TaskChange::Close`]).

use super::{Owner, StoredOutput};

/// A change to a distributed run's tasks, committed with a [`Batch`](super::Batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskChange {
    /// Opens a task for an attempt of `node`, ready to be claimed at once. Replaces the task
    /// of another attempt the node (instance) had; when one batch holds several changes of one
    /// task, the last holds.
    ///
    /// A task is named by its node and its `instance`: empty for an attempt of the run's own
    /// node, or the record of one instance of a nest node (`ship[3]`, `poll@7`: the instance
    /// runs whole as one task, and its end is stored under that record). Opening a task for the
    /// attempt it has already keeps it as it is (claimed, running or done): a decider that
    /// resumes a run and asks again for an instance whose task is out does not take it from
    /// the worker executing it.
    Open {
        /// The node.
        node: u32,
        /// The nest instance's record, or empty for the node itself.
        instance: String,
        /// The attempt (1 for the first), the same in its idempotency key.
        attempt: u32,
    },
    /// Removes the task of `node` (and `instance`): its outcome is journaled, or the attempt
    /// was given up (a timeout, a cancellation). A worker still executing it loses its claim:
    /// its heartbeat reports it lost and its completion is [`TaskCommitted::Stale`].
    Close {
        /// The node.
        node: u32,
        /// The nest instance's record, or empty for the node itself.
        instance: String,
    },
}

/// A task claimed by a worker: the right to execute one attempt of one node, fenced by the
/// task's version (claiming it again, after the lease lapsed, makes a new version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskClaim {
    /// The run.
    pub run: String,
    /// The run's workflow.
    pub workflow: String,
    /// The node.
    pub node: u32,
    /// The nest instance the task runs (`ship[3]`), or empty for an attempt of the node.
    pub instance: String,
    /// The attempt: the same when a lapsed claim is taken over, so the idempotency key is too.
    pub attempt: u32,
    /// Who holds the claim.
    pub owner: Owner,
    /// The task's version when it was claimed: the fencing token.
    pub version: u64,
    /// When the claim lapses unless renewed, in ms since the Unix epoch (the store's clock).
    pub until_ms: u64,
    /// The task was claimed before by a worker whose lease lapsed (it died or stalled): this
    /// is a re-execution of the same attempt.
    pub lapsed: bool,
    /// What executing the task needs (the run's parameters and the outputs of the node's
    /// predecessors; for an iteration of a `Loop`, `poll@7`, the stored end of the iteration
    /// before it, `poll@6`, too: see [`previous_instance`]), when the store read it with the claim, in the same transaction: the
    /// worker then asks nothing more before it executes. `None`: the worker asks
    /// [`Store::task_inputs`](crate::Store::task_inputs).
    pub inputs: Option<TaskInputs>,
    /// When the task could first be claimed, in ms since the Unix epoch (the store's clock):
    /// when it was opened, or, for a lapsed claim taken over, when that claim's lease ended.
    /// The time from it to the claim is the task's wait in the queue. `None`: the store does
    /// not record it.
    pub ready_ms: Option<u64>,
}

/// How an executed attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    /// It succeeded with this output (JSON; empty for a node without output).
    Completed {
        /// The output's Rust type, as journaled outputs record it.
        type_name: String,
        /// The output's JSON.
        bytes: Vec<u8>,
    },
    /// It failed with this error (its message).
    Failed {
        /// The error's message.
        error: String,
    },
}

/// A completed task, not yet journaled by the run (in [`Loaded::tasks`](super::Loaded)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskResult {
    /// The node.
    pub node: u32,
    /// The nest instance, or empty for an attempt of the node.
    pub instance: String,
    /// The attempt that ended.
    pub attempt: u32,
    /// How it ended.
    pub outcome: TaskOutcome,
}

/// The answer of [`Store::complete_task`](super::Store::complete_task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskCommitted {
    /// The outcome is stored and the run is due.
    Applied,
    /// The claim was no longer the task's (its lease lapsed and another worker claimed it, or
    /// the run closed the task): nothing was written.
    Stale,
}

/// What a worker needs to execute a task: the run's parameters and the outputs of its
/// completed nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInputs {
    /// The run's graph hash: a worker whose workflow has another graph does not execute it.
    pub graph_hash: u64,
    /// The run's stored parameters (JSON).
    pub input: Vec<u8>,
    /// The outputs stored so far.
    pub outputs: Vec<StoredOutput>,
}

/// The instance whose stored end an instance task reads besides its node's predecessors'
/// outputs: for a `Loop` iteration (`poll@7`, or `ship[3]/poll@7` inside an instance), the
/// iteration before it (`poll@6`), whose output is the `prev` it starts with; the journal
/// also supersedes that end with the iteration's own. `None` for a `ForEach` instance, a first
/// iteration, or a node's own task.
///
/// ```
/// use flowdag_store::previous_instance;
///
/// assert_eq!(previous_instance("poll@7").as_deref(), Some("poll@6"));
/// assert_eq!(previous_instance("poll#2@1").as_deref(), Some("poll#2@0"));
/// assert_eq!(previous_instance("ship[3]/poll@2").as_deref(), Some("ship[3]/poll@1"));
/// assert_eq!(previous_instance("poll@2/ship[3]"), None);
/// assert_eq!(previous_instance("poll@0"), None);
/// assert_eq!(previous_instance("ship[3]"), None);
/// assert_eq!(previous_instance(""), None);
/// ```
pub fn previous_instance(instance: &str) -> Option<String> {
    let (head, index) = instance.rsplit_once('@')?;
    if head.is_empty() || head.ends_with('/') {
        return None;
    }
    let index: u64 = index.parse().ok()?;
    Some(format!("{head}@{}", index.checked_sub(1)?))
}
