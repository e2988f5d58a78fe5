//! The face of a workflow: the [`Workflow`] trait that `workflow!` implements for each workflow
//! type, and the [`Runner`] that configures one run of it and starts it.
//!
//! The builder methods live here, once, for every workflow: the macro emits only the graph and
//! the node set.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::error::WorkflowError;
use crate::events::Observer;
use crate::graph::Graph;
use crate::options::RunOptions;
use crate::policy::{CancelToken, FailurePolicy};
use crate::report::Outcome;
use crate::scheduler::RunSetup;
use crate::signal::{Mailbox, Signals};

/// A workflow declared with `workflow!`: its static graph, its parameters and its output.
///
/// The macro implements it for the workflow's type; run a workflow through its [`Runner`]
/// (`MyWorkflow::runner()`) or its plain `MyWorkflow::run(..)`. Code generic over workflows can
/// name `W: Workflow` and use [`Runner::<W>::new`](Runner::new).
pub trait Workflow {
    /// The static graph of the workflow, built at compile time: nodes, edges and scheduling
    /// tables.
    const GRAPH: Graph;

    /// The workflow's parameters, as [`Runner::execute`] takes them: `()` for a workflow
    /// without parameters, the parameter's type for one, a tuple of them for several. Every
    /// parameter borrowed with an elided lifetime borrows for `'a`; a lifetime the workflow
    /// declares (`W<'b>(x: &'b X)`) is a parameter of the workflow's type instead, so that its
    /// output may name it.
    ///
    /// `Self: 'a`: a generic workflow's type parameters outlive the run's borrows, so that a
    /// parameter `&T` is well formed. A workflow without generics is `'static`, and the bound
    /// always holds.
    type Input<'a>
    where
        Self: 'a;

    /// The workflow's output: the type after `->` in `workflow!`, or `()`.
    type Output;

    /// Runs the workflow from `setup` (the runner's options and what the engine adds): the code
    /// `workflow!` generates. Not a public API: call [`Runner::execute`].
    #[doc(hidden)]
    fn __execute<'a>(
        setup: RunSetup,
        input: Self::Input<'a>,
    ) -> impl Future<Output = Outcome<Self::Output>>
    where
        Self: 'a;
}

/// One run of workflow `W`, to configure and start: `MyWorkflow::runner()` makes one with
/// default options.
///
/// Each builder method takes the runner by value and returns it, so a run reads as one chain.
/// [`Runner::execute`] runs the workflow and returns its result with a [`Report`](crate::Report)
/// of every node; [`Runner::run`] returns the result alone, keeping no event log.
///
/// Neither the runner nor its run spawns anything: the run's future does all the work when it
/// is awaited, and it is `Send` whenever the workflow's operations' futures are.
///
/// See the `flowdag` crate (`flowdag::Runner`) for an example.
#[must_use = "a runner does nothing until `execute` or `run` is awaited"]
pub struct Runner<W> {
    options: RunOptions,
    workflow: PhantomData<fn() -> W>,
}

impl<W: Workflow> Runner<W> {
    /// A runner with default options: no limit beyond the workflow's own, the workflow's
    /// failure policy, no cancellation, no observer, the event log kept.
    pub fn new() -> Self {
        Runner {
            options: RunOptions::default(),
            workflow: PhantomData,
        }
    }

    /// Limits how many operations of the run may be in flight at once, on top of any
    /// `Parallel(max_concurrency = N)` in the workflow. A `ForEach`, `Loop` or sub-workflow
    /// step counts as one operation: the limit does not reach inside its instances, which a
    /// `ForEach`'s own `max_concurrency = N` bounds.
    pub fn max_concurrency(mut self, limit: NonZeroUsize) -> Self {
        self.options.max_concurrency = Some(limit);
        self
    }

    /// Sets the failure policy of this run, in place of the workflow's own (which is
    /// [`FailurePolicy::ContinueIndependent`] unless the workflow says `fail_fast`). It
    /// governs the run's own nodes: the instances of a `ForEach` or `Loop` keep the policy
    /// their body inherits from the workflow's declaration, and a sub-workflow step's child
    /// keeps its own.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.options.failure = Some(policy);
        self
    }

    /// Cancels the run when `token` is cancelled: running operations are dropped and every
    /// unfinished node is aborted.
    pub fn cancel_on(mut self, token: CancelToken) -> Self {
        self.options.cancel = Some(token);
        self
    }

    /// Cancels the run when it has run for `after`, as [`Runner::cancel_on`] does (needs a
    /// tokio runtime with time enabled; without one the run ends cancelled at once).
    pub fn deadline(mut self, after: Duration) -> Self {
        self.options.deadline = Some(after);
        self
    }

    /// Adds an observer: it sees every event of the run, synchronously, as it is appended.
    /// Several observers see the events in the order they were added.
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.options.observers.push(Arc::new(observer));
        self
    }

    /// Whether to keep the run's event log in the report (on by default). Off, the report
    /// still has every status, attempt and error, but no times and no events.
    pub fn record(mut self, record: bool) -> Self {
        self.options.record = record;
        self
    }

    /// The handle that sends signals to this run's `Signal` steps: made on the first call,
    /// the same mailbox on later ones (and in clones of the runner made after it).
    ///
    /// Signals sent before the run starts are kept for it, like those sent while it runs
    /// before a step waits; once the run has ended, [`Signals::send`] refuses them. A run
    /// started without a handle (`MyWorkflow::run(..)`) has a mailbox nobody can send to: its
    /// `Signal` steps wait until a `Pick` chooses another event, the run's deadline passes or
    /// the run is cancelled.
    ///
    /// See the `flowdag` crate (`flowdag::Signals`) for an example.
    pub fn signals(&mut self) -> Signals {
        self.options
            .signals
            .get_or_insert_with(|| Mailbox::new(W::GRAPH.plan.control.signals))
            .handle()
    }

    /// Runs the workflow with `input` (its parameters: `()`, the one parameter, or a tuple of
    /// them) and returns its result together with a [`Report`](crate::Report) of every node.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future cancels the run and drops every running operation.
    pub fn execute<'a>(self, input: W::Input<'a>) -> impl Future<Output = Outcome<W::Output>>
    where
        W: 'a,
    {
        W::__execute(RunSetup::from(self.options), input)
    }

    /// Runs the workflow with `input` and returns its output, or a [`WorkflowError`] that
    /// lists every failed and aborted node. No event log is kept and no per-node report is
    /// built; observers still see every event.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future cancels the run and drops every running operation.
    pub fn run<'a>(
        mut self,
        input: W::Input<'a>,
    ) -> impl Future<Output = Result<W::Output, WorkflowError>>
    where
        W: 'a,
    {
        self.options.record = false;
        self.options.report = false;
        ResultOnly {
            run: W::__execute(RunSetup::from(self.options), input),
        }
    }

    /// The options this runner has collected, as a run's setup: for tests that drive the
    /// scheduler directly. Not a public API.
    #[doc(hidden)]
    pub fn __into_setup(self) -> RunSetup {
        RunSetup::from(self.options)
    }

    /// The options this runner has collected: what a durable run stores and starts from.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn into_options(self) -> RunOptions {
        self.options
    }
}

impl<W: Workflow> Default for Runner<W> {
    fn default() -> Self {
        Runner::new()
    }
}

impl<W> Clone for Runner<W> {
    fn clone(&self) -> Self {
        Runner {
            options: self.options.clone(),
            workflow: PhantomData,
        }
    }
}

impl<W: Workflow> fmt::Debug for Runner<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("workflow", &W::GRAPH.name())
            .field("options", &self.options)
            .finish()
    }
}

pin_project! {
    /// The future of [`Runner::run`]: the run's future, keeping only the result.
    #[must_use = "futures do nothing unless awaited"]
    struct ResultOnly<F> {
        #[pin]
        run: F,
    }
}

impl<F: Future<Output = Outcome<T>>, T> Future for ResultOnly<F> {
    type Output = Result<T, WorkflowError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().run.poll(cx).map(|outcome| outcome.result)
    }
}

/// The run of a workflow that has compile errors: the body of `__execute` in the skeleton that
/// `workflow!` emits beside its errors, so that code using the workflow still type-checks. A
/// crate with such a workflow does not compile, so this never runs; were it polled, it would
/// stay pending.
pub fn unreachable_run<T>() -> std::future::Pending<Outcome<T>> {
    std::future::pending()
}
