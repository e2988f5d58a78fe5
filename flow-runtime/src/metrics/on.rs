//! The recording calls of the runtime, with feature `metrics`: each goes to the recorder the
//! application installed (the `metrics` facade's no-op recorder when there is none).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::{SharedString, counter, gauge, histogram};

use super::{
    ATTEMPTS, DECISION_LATENCY, QUEUE_LAG, RUNS_FINISHED, RUNS_IN_FLIGHT, RUNS_STARTED,
    STEP_DURATION, STORE_RETRIES, TASKS_CLAIMED, TASKS_IN_FLIGHT, TASKS_LOST,
};
use crate::events::{Event, EventKind};
use crate::path::NodePath;

/// A workflow's name as a label value, shared by the metrics of one run.
#[derive(Clone, Debug)]
pub(crate) struct Workflow(Arc<str>);

impl Workflow {
    /// The label of the workflow `name` gives the name of (`DurableWorkflow::durable_name`,
    /// called only with the feature: a generic workflow's name is made at each call).
    pub(crate) fn of(name: fn() -> Cow<'static, str>) -> Workflow {
        Workflow(Arc::from(name().as_ref()))
    }

    fn label(&self) -> SharedString {
        SharedString::from(Arc::clone(&self.0))
    }
}

/// A run of the workflow `name` names was created in the store.
pub(crate) fn run_started(name: fn() -> Cow<'static, str>) {
    counter!(RUNS_STARTED, "workflow" => SharedString::from(name())).increment(1);
}

/// A run's end (`status`) was committed.
pub(crate) fn run_finished(workflow: &Workflow, status: &'static str) {
    counter!(RUNS_FINISHED, "workflow" => workflow.label(), "status" => status).increment(1);
}

/// A run of `workflow` that no process held was ended by an operator's `terminate_run`
/// (`cancelled`).
pub(crate) fn run_terminated(workflow: &str) {
    counter!(RUNS_FINISHED, "workflow" => workflow.to_owned(), "status" => "cancelled")
        .increment(1);
}

/// A worker claimed a task of a run of `workflow`.
pub(crate) fn task_claimed(workflow: &str) {
    counter!(TASKS_CLAIMED, "workflow" => workflow.to_owned()).increment(1);
}

/// A worker lost the claim of a task of a run of `workflow`.
pub(crate) fn task_lost(workflow: &str) {
    counter!(TASKS_LOST, "workflow" => workflow.to_owned()).increment(1);
}

/// A worker's store request `operation` failed with a retryable error; it is made again.
pub(crate) fn store_retry(operation: &'static str) {
    counter!(STORE_RETRIES, "operation" => operation).increment(1);
}

/// A worker picked up a run of `workflow` at `now_ms` that was due at `due_ms` (both in ms
/// since the Unix epoch).
pub(crate) fn run_queue_lag(workflow: &str, due_ms: u64, now_ms: u64) {
    let lag = Duration::from_millis(now_ms.saturating_sub(due_ms));
    histogram!(QUEUE_LAG, "workflow" => workflow.to_owned(), "kind" => "run")
        .record(lag.as_secs_f64());
}

/// A worker claimed a task of `workflow` at `claimed_ms` that could be claimed from
/// `ready_ms` (both in ms since the Unix epoch, the store's clock).
pub(crate) fn task_queue_lag(workflow: &str, ready_ms: u64, claimed_ms: u64) {
    let lag = Duration::from_millis(claimed_ms.saturating_sub(ready_ms));
    histogram!(QUEUE_LAG, "workflow" => workflow.to_owned(), "kind" => "task")
        .record(lag.as_secs_f64());
}

/// One in a gauge of things in flight while it lives: incremented when made, decremented when
/// dropped.
pub(crate) struct InFlight {
    name: &'static str,
    workflow: SharedString,
}

impl InFlight {
    /// A task of a run of `workflow` that a worker executes.
    pub(crate) fn task(workflow: &str) -> InFlight {
        InFlight::new(TASKS_IN_FLIGHT, SharedString::from(workflow.to_owned()))
    }

    fn new(name: &'static str, workflow: SharedString) -> InFlight {
        gauge!(name, "workflow" => workflow.clone()).increment(1.0);
        InFlight { name, workflow }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        gauge!(self.name, "workflow" => self.workflow.clone()).decrement(1.0);
    }
}

/// The metrics of one durable run's journal (one generation): the run in flight while it lives,
/// the attempts it journals, the latency of its commits.
pub(crate) struct RunMeter {
    workflow: Workflow,
    _in_flight: InFlight,
    /// When each attempt in flight was requested (on the run's clock), by nest instance and
    /// node; `None` for an attempt requested before this process loaded the run (the run's
    /// clock starts again at each load, so its duration is not known here).
    started: HashMap<(Option<NodePath>, u32), Option<Duration>>,
    /// When the first event of the pending batch was recorded.
    pending: Option<Instant>,
    /// The same, of the batch being committed.
    committing: Option<Instant>,
}

impl RunMeter {
    /// The meter of a run of the workflow `name` names, in flight until it is dropped.
    pub(crate) fn new(name: fn() -> Cow<'static, str>) -> RunMeter {
        let workflow = Workflow::of(name);
        RunMeter {
            _in_flight: InFlight::new(RUNS_IN_FLIGHT, workflow.label()),
            workflow,
            started: HashMap::new(),
            pending: None,
            committing: None,
        }
    }

    /// An event of the journal was replayed: an attempt it requests is in flight (when the
    /// replay ends there, it runs on live); one it ends is not.
    pub(crate) fn replayed(&mut self, event: &Event) {
        let Some(node) = event.node else {
            return;
        };
        let key = (event.path.clone(), node);
        match attempt_end(&event.kind) {
            Start::Requested => {
                self.started.insert(key, None);
            }
            Start::Ended(_) => {
                self.started.remove(&key);
            }
            Start::Other => {}
        }
    }

    /// An event went into the pending batch: an attempt that ends is counted by its outcome
    /// and its duration recorded.
    pub(crate) fn recorded(&mut self, event: &Event) {
        if self.pending.is_none() {
            self.pending = Some(Instant::now());
        }
        let Some(node) = event.node else {
            return;
        };
        let key = (event.path.clone(), node);
        let outcome = match attempt_end(&event.kind) {
            Start::Requested => {
                self.started.insert(key, Some(event.at));
                return;
            }
            Start::Ended(outcome) => outcome,
            Start::Other => return,
        };
        // Ended once: a `TimedOut` is followed by the same attempt's `Retrying` or `Failed`,
        // and an event of a node with no attempt in flight (a decision's `Completed`, a step
        // aborted before it started) is no attempt's end.
        let Some(at) = self.started.remove(&key) else {
            return;
        };
        let workflow = self.workflow.label();
        counter!(ATTEMPTS, "workflow" => workflow.clone(), "outcome" => outcome).increment(1);
        // An attempt started before this load is counted, but its duration is unknown.
        if let Some(at) = at {
            let step = event.node_name.unwrap_or("");
            histogram!(STEP_DURATION, "workflow" => workflow, "step" => step)
                .record(event.at.saturating_sub(at).as_secs_f64());
        }
    }

    /// The pending batch was handed to the store.
    pub(crate) fn committing(&mut self) {
        self.committing = self.pending.take();
    }

    /// The batch handed to the store is durable.
    pub(crate) fn committed(&mut self) {
        if let Some(first) = self.committing.take() {
            histogram!(DECISION_LATENCY, "workflow" => self.workflow.label())
                .record(first.elapsed().as_secs_f64());
        }
    }

    /// The run's end (`status`) was committed.
    pub(crate) fn finished(&self, status: &'static str) {
        run_finished(&self.workflow, status);
    }
}

/// What an event is to an attempt.
enum Start {
    Requested,
    Ended(&'static str),
    Other,
}

fn attempt_end(kind: &EventKind) -> Start {
    match kind {
        EventKind::Requested => Start::Requested,
        EventKind::Completed { .. } => Start::Ended("completed"),
        EventKind::Failed { .. } => Start::Ended("failed"),
        EventKind::Retrying { .. } => Start::Ended("retrying"),
        EventKind::TimedOut { .. } => Start::Ended("timed_out"),
        EventKind::Aborted { .. } | EventKind::Withdrawn { .. } => Start::Ended("aborted"),
        _ => Start::Other,
    }
}
