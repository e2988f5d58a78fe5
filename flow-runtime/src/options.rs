//! The options of one run: what a workflow's `runner()` sets before the run starts.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use crate::events::Observer;
use crate::nest::{EventSink, NodePath};
use crate::policy::{CancelToken, FailurePolicy};
use crate::scheduler::StatePool;
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
    /// Where a nest instance's events go: the root run's sink (see `nest::EventSink`).
    pub(crate) sink: Option<Arc<EventSink>>,
    /// Where a nest instance's scheduler takes its lists and gives them back (its nest
    /// node's pool).
    pub(crate) pool: Option<Arc<StatePool>>,
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
