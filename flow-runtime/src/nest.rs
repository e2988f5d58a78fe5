//! Nested static graphs: a `ForEach`'s instances, a `Loop`'s iterations and a sub-workflow
//! step are each a run of a static graph of their own, driven by one node of the parent's
//! graph (a *nest node*), in the run's task.
//!
//! A nest node is an ordinary node whose future (the *driver*) runs the instances: each
//! instance is a nested `execute` of the body's graph, with [`RunOptions`] made by the node's
//! [`NestCtx`]. The scheduler hands the context to the node's leaf when the node starts
//! ([`Leaf::nest`]); the context carries what an instance shares with the run that holds it:
//! where its events go, its path, the run's mailbox.

mod summary;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use pin_project_lite::pin_project;

use crate::error::{NodeError, WorkflowError};
use crate::events::{Event, RunId};
use crate::graph::Graph;
use crate::nodes::{IntoNodes, Leaf, Nodes};
use crate::options::RunOptions;
use crate::report::Outcome;
use crate::run_state::RunState;
use crate::scheduler::StatePool;
use crate::signal::Mailbox;

pub use summary::NestReport;
pub(crate) use summary::Summary;

/// What kind of nest a node drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum NestKind {
    /// A `ForEach`: one instance per item.
    ForEach,
    /// A `Loop`: one instance per iteration, one after the other.
    Loop,
    /// A sub-workflow step: one instance, of another workflow.
    Workflow,
}

/// One step of a [`NodePath`]: an instance of a nest node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PathStep {
    /// The nest node's name in its graph.
    pub node: &'static str,
    /// What kind of nest it is.
    pub kind: NestKind,
    /// The instance: the item's index (`ForEach`), the iteration from 0 (`Loop`), 0 for a
    /// sub-workflow.
    pub index: u64,
}

impl fmt::Display for PathStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            NestKind::ForEach => write!(f, "{}[{}]", self.node, self.index),
            NestKind::Loop => write!(f, "{}@{}", self.node, self.index),
            NestKind::Workflow => f.write_str(self.node),
        }
    }
}

/// Where a node of a nested graph sits: the nest instances that hold it, outermost first.
/// Shown as `charge[3]`, `poll@2`, `payment`, nested as `order/charge[3]/retry@1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NodePath(Arc<[PathStep]>);

impl NodePath {
    /// A path of one step.
    pub fn new(step: PathStep) -> NodePath {
        NodePath(Arc::new([step]))
    }

    /// This path with `step` appended.
    pub fn child(&self, step: PathStep) -> NodePath {
        let mut steps = self.0.to_vec();
        steps.push(step);
        NodePath(steps.into())
    }

    /// The steps, outermost first.
    pub fn steps(&self) -> &[PathStep] {
        &self.0
    }

    /// The full name of `node` inside this path: `charge[3]/fetch`.
    pub fn name_of(&self, node: &str) -> String {
        format!("{self}/{node}")
    }
}

impl fmt::Display for NodePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{step}")?;
        }
        Ok(())
    }
}

/// Where the events of a recorded run's nest instances wait for the run at the top (the
/// *root*) to sequence them: every instance, at any depth, pushes its events here with their
/// path; the root drains the buffer into its own log and observers, in order, each time it has
/// polled its nodes and before each event of its own.
pub(crate) struct EventSink {
    /// The root run's id, which every nested event carries.
    pub(crate) run: RunId,
    /// The root run's start: nested events are timed from it, on the root's timeline.
    pub(crate) start: tokio::time::Instant,
    events: Mutex<Vec<Event>>,
}

impl EventSink {
    pub(crate) fn new(run: RunId, start: tokio::time::Instant) -> EventSink {
        EventSink {
            run,
            start,
            events: Mutex::new(Vec::new()),
        }
    }

    /// Queues a nested event (its `seq` is given when the root drains it).
    pub(crate) fn push(&self, event: Event) {
        lock(&self.events).push(event);
    }

    /// Moves the queued events into `into` (emptied first), keeping the buffer's capacity.
    pub(crate) fn take(&self, into: &mut Vec<Event>) {
        into.clear();
        let mut events = lock(&self.events);
        if !events.is_empty() {
            std::mem::swap(&mut *events, into);
        }
    }
}

/// Locks `mutex`, whether or not a panic poisoned it: every value guarded here stays valid
/// between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one start of a nest node shares between its driver (through the [`NestCtx`]) and the
/// scheduler of the run that holds the node: the summary of its instances, which the run's
/// report takes when the run ends, and the `Complete(node)` request with the driver's waker.
pub(crate) struct NestShared {
    completing: AtomicBool,
    /// A `ForEach` with `min` and `rest = run` has put its output in its slot: the node
    /// completes while its driver runs the rest of its instances.
    settled: AtomicBool,
    /// The node completed with its driver still running: the scheduler keeps polling it
    /// ([`Leaf::poll_rest`]) until it ends.
    lingering: AtomicBool,
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
    pub(crate) pool: Arc<StatePool>,
}

impl NestCtx {
    /// The context of a nest node outside any run (a driver polled without a scheduler, as in
    /// unit tests): instances record nothing and report nothing; [`NestCtx::report`] still
    /// counts them.
    pub fn detached(node: &'static str, kind: NestKind, body: &'static Graph) -> NestCtx {
        NestCtx {
            node,
            kind,
            body,
            path: None,
            signals: None,
            report: false,
            sink: None,
            shared: Arc::new(NestShared::new(node, kind)),
            pool: Arc::default(),
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

    /// The options of instance `index`'s run. Call it once per instance, when the instance
    /// starts: it counts the instance as started.
    pub fn instance(&self, index: u64) -> RunOptions {
        lock(&self.shared.summary).started(index);
        // The instance's run reads its path only to tag the events it sends to the root and
        // to give it to nests of its own; a failure gets its path in `ended`.
        let path = (self.sink.is_some() || !self.body.plan.control.nests.is_empty())
            .then(|| self.path_of(index));
        RunOptions {
            record: self.report,
            report: self.report,
            signals: self.signals.clone(),
            path,
            sink: self.sink.clone(),
            pool: Some(Arc::clone(&self.pool)),
            instance: true,
            ..RunOptions::default()
        }
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

/// Runs a sub-workflow step: one instance of workflow `W` (its own graph and options), whose
/// events go to the parent's log with the path of the step (`payment/charge`) and whose report
/// is kept whole in the parent's ([`NestReport::report`]). The child's failure is the step's:
/// [`NodeError::Workflow`], whose [`source`](std::error::Error::source) is the child's
/// [`WorkflowError`] (its [`path`](WorkflowError::path) names the step).
///
/// # Cancel safety
///
/// Dropping the future (the step withdrawn, the run cancelled) drops the child run, and every
/// node future it holds, at once.
pub fn child<'a, W: crate::runner::Workflow + 'a>(
    ctx: NestCtx,
    input: W::Input<'a>,
) -> ChildRun<impl Future<Output = Outcome<W::Output>> + 'a> {
    let run = W::__execute(ctx.instance(0), input);
    ChildRun { ctx, run }
}

pin_project! {
    /// The future of a sub-workflow step: the child's run, then its outcome handed to the
    /// step's [`NestCtx`] (see [`child`]). A plain future rather than an `async fn`, so that a
    /// run holding it is `Send` whenever the child's run is.
    #[must_use = "futures do nothing unless polled"]
    pub struct ChildRun<F> {
        ctx: NestCtx,
        #[pin]
        run: F,
    }
}

impl<F, T> Future for ChildRun<F>
where
    F: Future<Output = Outcome<T>>,
{
    type Output = Result<T, NodeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = std::task::ready!(this.run.poll(cx));
        Poll::Ready(
            this.ctx
                .ended(0, outcome)
                .map_err(|error| NodeError::Workflow(Box::new(error))),
        )
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

/// Marks a nest node in the tuple tree generated code builds: `(Nest, make)`, where `make`
/// makes the driver's future from the node's [`NestCtx`].
#[derive(Debug, Clone, Copy)]
pub struct Nest;

pin_project! {
    /// A nest node: the closure that makes its driver from the context the scheduler gives,
    /// and the driver while it runs.
    pub struct NestOp<F, Fut> {
        make: F,
        ctx: Option<NestCtx>,
        #[pin]
        running: Option<Fut>,
    }
}

impl<F, Fut> NestOp<F, Fut>
where
    F: Fn(NestCtx) -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    /// Wraps the closure that makes the node's driver.
    pub const fn new(make: F) -> Self {
        NestOp {
            make,
            ctx: None,
            running: None,
        }
    }
}

// SAFETY: collects itself.
unsafe impl<F, Fut> Nodes for NestOp<F, Fut>
where
    F: Fn(NestCtx) -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    const LEN: usize = 1;

    #[inline]
    unsafe fn collect<'a>(
        self: Pin<&'a mut Self>,
        _arena: *mut u8,
        out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    ) where
        Self: 'a,
    {
        out.push(self);
    }
}

impl<F, Fut> Leaf for NestOp<F, Fut>
where
    F: Fn(NestCtx) -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    fn start(self: Pin<&mut Self>) {
        let mut this = self.project();
        this.running.set(None);
        if let Some(ctx) = this.ctx.clone() {
            ctx.shared.settled.store(false, Ordering::Relaxed);
            ctx.shared.lingering.store(false, Ordering::Relaxed);
            let future = (this.make)(ctx);
            this.running.set(Some(future));
        }
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        let mut this = self.project();
        let Some(running) = this.running.as_mut().as_pin_mut() else {
            return Poll::Ready(Err(NodeError::Internal(
                "polled a nest node that was not started",
            )));
        };
        match running.poll(cx) {
            Poll::Ready(result) => {
                this.running.set(None);
                Poll::Ready(result)
            }
            Poll::Pending => match this.ctx {
                // `min` with `rest = run`: the output is in the slot, the node completes, and
                // the driver lingers with the rest of its instances (`poll_rest`).
                Some(ctx) if ctx.settled() => {
                    ctx.shared.lingering.store(true, Ordering::Release);
                    Poll::Ready(Ok(()))
                }
                _ => Poll::Pending,
            },
        }
    }

    fn poll_rest(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let Some(running) = this.running.as_mut().as_pin_mut() else {
            return Poll::Ready(());
        };
        // After the settle, the driver's result is `Ok`: later failures are in the report.
        std::task::ready!(running.poll(cx)).ok();
        this.running.set(None);
        if let Some(ctx) = this.ctx {
            ctx.shared.lingering.store(false, Ordering::Release);
        }
        Poll::Ready(())
    }

    fn stop(self: Pin<&mut Self>) {
        let mut this = self.project();
        this.running.set(None);
        if let Some(ctx) = this.ctx {
            ctx.shared.lingering.store(false, Ordering::Release);
        }
    }

    fn decide(self: Pin<&mut Self>, _state: &RunState) -> bool {
        false
    }

    fn nest(self: Pin<&mut Self>, ctx: NestCtx) {
        *self.project().ctx = Some(ctx);
    }
}

impl<F, Fut> IntoNodes for (Nest, F)
where
    F: Fn(NestCtx) -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    type Inline = NestOp<F, Fut>;
    type InArena = NestOp<F, Fut>;

    #[inline]
    fn inline(self) -> Self::Inline {
        NestOp::new(self.1)
    }

    #[inline]
    fn in_arena(self) -> Self::InArena {
        NestOp::new(self.1)
    }
}

#[cfg(test)]
mod tests;
