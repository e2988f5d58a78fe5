//! The options of one run: what a workflow's `runner()` sets before the run starts.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use crate::events::{EventSink, Observer};
use crate::graph::Graph;
use crate::path::NodePath;
use crate::policy::{CancelToken, FailurePolicy};
use crate::signal::Mailbox;

/// Options of one run: what a [`Runner`](crate::Runner)'s builder methods set.
#[derive(Clone)]
pub struct RunOptions {
    pub(crate) max_concurrency: Option<NonZeroUsize>,
    pub(crate) failure: Option<FailurePolicy>,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) observers: Vec<Arc<dyn Observer>>,
    /// Whether the run keeps its event log for the report.
    pub(crate) record: bool,
    /// Whether to build the per-node report (not for a plain `run`).
    pub(crate) report: bool,
    /// Where the run's `Signal` steps take their signals (`Runner::signals`).
    pub(crate) signals: Option<Arc<Mailbox>>,
    /// The nest instance this run is (`charge[3]`), when a nest node runs it.
    pub(crate) path: Option<NodePath>,
    /// Where a nest instance's events go: the root run's sink (see `events::EventSink`).
    pub(crate) sink: Option<Arc<EventSink>>,
    /// Where a nest instance's scheduler takes its lists and gives them back (its nest
    /// node's pool).
    pub(crate) pool: Option<Arc<Pool>>,
    /// The run is an instance of a nest node (a `ForEach` item, a `Loop` iteration, a child
    /// workflow), which shares the mailbox of the run holding it.
    pub(crate) instance: bool,
    /// What watches and steers the run from outside the engine (the scheduler's `Hook`, set
    /// by a durable run's driver): carried to the scheduler untouched.
    pub(crate) hook: Attached,
    /// The step of each compensation leaf of the node set, in leaf order (after the graph's
    /// nodes): empty for a workflow without `compensate = ..` (`scheduler/compensate.rs`).
    pub(crate) compensations: &'static [u32],
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_concurrency: None,
            failure: None,
            cancel: None,
            deadline: None,
            observers: Vec::new(),
            record: true,
            report: true,
            signals: None,
            path: None,
            sink: None,
            pool: None,
            instance: false,
            hook: Attached::default(),
            compensations: &[],
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("max_concurrency", &self.max_concurrency)
            .field("failure", &self.failure)
            .field("cancel", &self.cancel)
            .field("deadline", &self.deadline)
            .field("observers", &self.observers.len())
            .field("record", &self.record)
            .field("signals", &self.signals)
            .field("path", &self.path)
            .finish()
    }
}

/// A value handed to the run beside its options, opaque here (the scheduler's `Hook`). A clone
/// of the options does not carry it: it belongs to one run.
#[derive(Default)]
pub(crate) struct Attached(Option<Box<dyn std::any::Any + Send>>);

impl Attached {
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn new<T: std::any::Any + Send>(value: T) -> Attached {
        Attached(Some(Box::new(value)))
    }

    /// Takes the value, if it is a `T`.
    pub(crate) fn take<T: std::any::Any>(&mut self) -> Option<T> {
        let value = self.0.take()?;
        match value.downcast::<T>() {
            Ok(value) => Some(*value),
            Err(value) => {
                self.0 = Some(value);
                None
            }
        }
    }
}

impl Clone for Attached {
    fn clone(&self) -> Attached {
        Attached(None)
    }
}

// SAFETY: the value is reached only through `&mut Attached` (`take`), never through
// `&Attached`, so sharing `&Attached` between threads shares nothing of it.
unsafe impl Sync for Attached {}

/// `options` with a mailbox for `graph`'s signals (the runner's, or a new private one), and
/// that mailbox: what the generated code of a workflow with `Signal` steps starts with.
pub fn with_mailbox(mut options: RunOptions, graph: &'static Graph) -> (RunOptions, Arc<Mailbox>) {
    let mailbox = options
        .signals
        .get_or_insert_with(|| Mailbox::new(graph.plan.control.signals))
        .clone();
    (options, mailbox)
}

/// Values a run leaves behind for the next run that takes them from the same pool: a nest
/// node's instances reuse the scheduler's lists (one set per instance in flight). Opaque here:
/// the scheduler decides what it keeps. Boxed once, and the same box goes back and forth, so a
/// set taken and given back allocates nothing.
#[derive(Default)]
pub(crate) struct Pool {
    free: std::sync::Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

impl Pool {
    fn free(&self) -> std::sync::MutexGuard<'_, Vec<Box<dyn std::any::Any + Send>>> {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A set left by an earlier run, if one is free (and is a `T`).
    pub(crate) fn take<T: std::any::Any>(&self) -> Option<Box<T>> {
        let mut free = self.free();
        let last = free.pop()?;
        match last.downcast::<T>() {
            Ok(set) => Some(set),
            Err(other) => {
                free.push(other);
                None
            }
        }
    }

    /// Leaves `set` for the next run.
    pub(crate) fn give<T: std::any::Any + Send>(&self, set: Box<T>) {
        self.free().push(set);
    }

    /// How many sets wait to be reused.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.free().len()
    }
}
