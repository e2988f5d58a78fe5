//! The options of one run: what a workflow's `runner()` sets before the run starts.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use crate::events::Observer;
use crate::policy::{CancelToken, FailurePolicy};

/// Options of one run, set through a workflow's `runner()`.
#[derive(Clone)]
pub struct RunOptions {
    pub(crate) max_concurrency: Option<NonZeroUsize>,
    pub(crate) failure: Option<FailurePolicy>,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) observers: Vec<Arc<dyn Observer>>,
    pub(crate) record: bool,
    pub(crate) report: bool,
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
            .finish()
    }
}

impl RunOptions {
    /// Adds an observer: it sees every event of the run as it happens.
    pub fn observer(&mut self, observer: impl Observer + 'static) -> &mut Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// For a caller that only wants the result (a workflow's plain `run`): no event log, and
    /// no per-node report is built.
    #[doc(hidden)]
    pub fn result_only(&mut self) -> &mut Self {
        self.record = false;
        self.report = false;
        self
    }

    /// Whether the run keeps its event log for the report (on by default; a workflow's plain
    /// `run` turns it off, since it returns no report).
    pub fn record(&mut self, record: bool) -> &mut Self {
        self.record = record;
        self
    }

    /// Limits how many operations of the run may be in flight at once (on top of any
    /// `Parallel(max_concurrency = N)` in the workflow).
    pub fn max_concurrency(&mut self, limit: NonZeroUsize) -> &mut Self {
        self.max_concurrency = Some(limit);
        self
    }

    /// Overrides the workflow's failure policy for this run.
    pub fn failure_policy(&mut self, policy: FailurePolicy) -> &mut Self {
        self.failure = Some(policy);
        self
    }

    /// Cancels the run when `token` is cancelled.
    pub fn cancel_on(&mut self, token: CancelToken) -> &mut Self {
        self.cancel = Some(token);
        self
    }

    /// Cancels the run when it has run for `after` (needs a tokio runtime with time enabled).
    pub fn deadline(&mut self, after: Duration) -> &mut Self {
        self.deadline = Some(after);
        self
    }
}
