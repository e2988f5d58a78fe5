//! What a nest node's driver gets from the run that holds it ([`NestCtx`]), and what the node
//! shares with that run's scheduler ([`NestShared`]): the options of each instance, the
//! summary of the instances, the `Complete(node)` request.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::error::WorkflowError;
use crate::events::EventSink;
use crate::graph::Graph;
use crate::path::{NestKind, NodePath, PathStep};
use crate::report::Outcome;
use crate::report::{NestReport, Summary};
use crate::signal::Mailbox;

/// What one start of a nest node shares between its driver (through the [`NestCtx`]) and the
/// scheduler of the run that holds the node: the summary of its instances, which the run's
/// report takes when the run ends, and the `Complete(node)` request with the driver's waker.
pub(crate) struct NestShared {
    completing: AtomicBool,
    /// A `ForEach` with `min` and `rest = run` has put its output in its slot: the node
    /// completes while its driver runs the rest of its instances.
    pub(crate) settled: AtomicBool,
    /// The node completed with its driver still running: the scheduler keeps polling it
    /// (`Leaf::poll_rest`) until it ends.
    pub(crate) lingering: AtomicBool,
    waker: Mutex<Option<Waker>>,
    summary: Mutex<Summary>,
}

impl NestShared {
    pub(crate) fn new(node: &'static str, kind: NestKind) -> NestShared {
        NestShared {
            completing: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            lingering: AtomicBool::new(false),
            waker: Mutex::new(None),
            summary: Mutex::new(Summary::new(node, kind)),
        }
    }

    /// What a `Complete(node)` step does: marks the nest as completing and wakes its driver.
    pub(crate) fn complete(&self) {
        self.completing.store(true, Ordering::Release);
        if let Some(waker) = lock(&self.waker).take() {
            waker.wake();
        }
    }

    /// Whether the node completed with its driver still running (until the scheduler has
    /// seen it end).
    pub(crate) fn lingering(&self) -> bool {
        self.lingering.load(Ordering::Acquire)
    }

    /// The report of the instances so far.
    pub(crate) fn report(&self) -> NestReport {
        lock(&self.summary).report()
    }

    /// The report of the instances, taken at the end of the run that holds the node.
    pub(crate) fn take_report(&self) -> NestReport {
        let mut summary = lock(&self.summary);
        let empty = summary.emptied();
        std::mem::replace(&mut *summary, empty).into_report()
    }
}

/// What a nest node's driver gets from the run that holds it, when the node starts: the
/// options of each instance, where instances report, and whether a `Complete` step asked the
/// node to end.
///
/// A driver hands every instance that ended to [`NestCtx::ended`], and tells
/// [`NestCtx::withdrawn`] of every live instance it drops; the node's line in the run's
/// report ([`NestReport`]) is made of what these two calls saw.
#[derive(Clone)]
pub struct NestCtx {
    /// The nest node's name.
    pub(crate) node: &'static str,
    /// The nest node's index in its graph.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) index: u32,
    pub(crate) kind: NestKind,
    /// The nest's body graph (the child workflow's graph for a sub-workflow).
    pub(crate) body: &'static Graph,
    /// The path of the run that holds the nest node (`None` at the top).
    pub(crate) path: Option<NodePath>,
    pub(crate) signals: Option<Arc<Mailbox>>,
    /// Whether the holding run builds a report (instances build theirs).
    pub(crate) report: bool,
    /// Where the instances' events go: the root run's sink, when the root records events.
    pub(crate) sink: Option<Arc<EventSink>>,
    /// Shared with the scheduler of the run that holds the node.
    pub(crate) shared: Arc<NestShared>,
    /// The scheduler lists the instances reuse.
    pub(crate) pool: Arc<Pool>,
    /// The exclusion groups of the run tree, which the instances' sections hold too.
    pub(crate) groups: Option<crate::exclusion::Groups>,
}

impl NestCtx {
    /// The context of a nest node outside any run (a driver polled without a scheduler, as in
    /// unit tests): instances record nothing and report nothing; [`NestCtx::report`] still
    /// counts them.
    pub fn detached(node: &'static str, kind: NestKind, body: &'static Graph) -> NestCtx {
        NestCtx {
            node,
            index: 0,
            kind,
            body,
            path: None,
            signals: None,
            report: false,
            sink: None,
            shared: Arc::new(NestShared::new(node, kind)),
            pool: Arc::default(),
            groups: None,
        }
    }

    /// The nest node's name.
    pub fn node(&self) -> &'static str {
        self.node
    }

    /// What kind of nest it is.
    pub fn kind(&self) -> NestKind {
        self.kind
    }

    /// The body's graph.
    pub fn body(&self) -> &'static Graph {
        self.body
    }

    /// The path of instance `index`'s nodes.
    pub fn path_of(&self, index: u64) -> NodePath {
        let step = PathStep {
            node: self.node,
            kind: self.kind,
            index,
        };
        match &self.path {
            Some(path) => path.child(step),
            None => NodePath::new(step),
        }
    }

    /// Counts instance `index` as started and returns the path its run reads (to tag the
    /// events it sends to the root, and for nests of its own): what
    /// [`NestCtx::instance`] builds the instance's setup from.
    pub(crate) fn start(&self, index: u64) -> Option<NodePath> {
        lock(&self.shared.summary).started(index);
        // A failure gets its path in `ended`.
        (self.sink.is_some() || !self.body.plan.control.nests.is_empty())
            .then(|| self.path_of(index))
    }

    /// Takes instance `index`'s outcome when it has ended: folds its report into the node's
    /// summary (counts, the first failures, durations, and the whole report of the first
    /// instance and of the first failed ones) and returns its result. A failed instance's
    /// error names the instance: its [`WorkflowError::path`] is `charge[3]`. This is how a
    /// driver consumes every instance that ended.
    pub fn ended<T>(&self, index: u64, outcome: Outcome<T>) -> Result<T, WorkflowError> {
        let Outcome { mut result, report } = outcome;
        if let Err(error) = &mut result {
            error.set_path(self.path_of(index));
        }
        let error = result.as_ref().err();
        lock(&self.shared.summary).ended(index, error, report, self.report);
        result
    }

    /// Counts instance `index` as started and ended with `error` (or succeeded) in an earlier
    /// process: a durable nest step restored whole from its stored output, its instances'
    /// ends from theirs.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn restored(&self, index: u64, error: Option<&WorkflowError>) {
        lock(&self.shared.summary).restored(index, error);
    }

    /// Counts the `count` instances before the one a resumed durable `Loop` goes on from as
    /// started and succeeded in an earlier process (their ends are not loaded: the loop goes
    /// on from its last iteration's).
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn restored_before(&self, count: u64) {
        lock(&self.shared.summary).restored_succeeded(count);
    }

    /// Counts instance `index` as withdrawn: the driver dropped it while it ran (`min` with
    /// `rest = cancel`, the first failure with `on_failure = fail_fast`, a `Complete` step).
    pub fn withdrawn(&self, index: u64) {
        lock(&self.shared.summary).withdrawn(index);
    }

    /// Whether a `Complete(node)` step asked the node to end: the driver then drops its live
    /// instances (telling [`NestCtx::withdrawn`] of each) and returns what the instances that
    /// completed gave.
    pub fn completing(&self) -> bool {
        self.shared.completing.load(Ordering::Acquire)
    }

    /// As [`NestCtx::completing`], for a driver that waits: `Ready` once a `Complete` step
    /// asked the node to end; otherwise `Pending`, and `cx`'s waker is woken when one does.
    pub fn poll_completing(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.completing() {
            return Poll::Ready(());
        }
        let mut waker = lock(&self.shared.waker);
        match &mut *waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        drop(waker);
        // A request between the test and the registration has found no waker: look again.
        if self.completing() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Asks the node to end as a `Complete(node)` step does: [`NestCtx::completing`] turns
    /// true and a driver waiting in [`NestCtx::poll_completing`] is woken. For drivers'
    /// tests; in a run the scheduler does it.
    pub fn complete(&self) {
        self.shared.complete();
    }

    /// What the node's instances did so far: the line the run's report will show for it.
    pub fn report(&self) -> NestReport {
        self.shared.report()
    }

    /// Tells the run that holds the node that the node's output is in its slot while the
    /// driver goes on (`min` with `rest = run`): the node completes now, its successors may
    /// start, and the run keeps polling the driver until it ends.
    pub(crate) fn settle(&self) {
        self.shared.settled.store(true, Ordering::Release);
    }

    /// Whether the driver said the node's output is settled ([`NestCtx::settle`]).
    pub(crate) fn settled(&self) -> bool {
        self.shared.settled.load(Ordering::Acquire)
    }
}

impl fmt::Debug for NestCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NestCtx")
            .field("node", &self.node)
            .field("kind", &self.kind)
            .field("path", &self.path)
            .field("completing", &self.completing())
            .finish_non_exhaustive()
    }
}

/// Locks `mutex`, whether or not a panic poisoned it: every value guarded here stays valid
/// between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
