//! The options of one run: what a workflow's `runner()` sets before the run starts.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use crate::events::Observer;
use crate::policy::{CancelToken, FailurePolicy};
use crate::signal::Mailbox;

/// Options of one run: what a [`Runner`](crate::Runner)'s builder methods set, and nothing
/// else. What the engine adds to them for one run (the place of a nest instance, where its
/// events go, a durable run's journal) is the scheduler's `RunSetup`.
#[derive(Clone)]
pub struct RunOptions {
    pub(crate) max_concurrency: Option<NonZeroUsize>,
    pub(crate) failure: Option<FailurePolicy>,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) observers: Vec<Arc<dyn Observer>>,
    /// Whether the run keeps its event log for the report (`Runner::record`).
    pub(crate) record: bool,
    /// Whether to build the per-node report (`Runner::execute`, not `Runner::run`).
    pub(crate) report: bool,
    /// Where the run's `Signal` steps take their signals (`Runner::signals`).
    pub(crate) signals: Option<Arc<Mailbox>>,
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
            .field("report", &self.report)
            .field("signals", &self.signals)
            .finish()
    }
}
