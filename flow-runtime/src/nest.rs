//! Nested static graphs: a `ForEach`'s instances, a `Loop`'s iterations and a sub-workflow
//! step are each a run of a static graph of their own, driven by one node of the parent's
//! graph (a *nest node*), in the run's task.
//!
//! A nest node is an ordinary node whose future (the *driver*) runs the instances: each
//! instance is a nested `execute` of the body's graph, with a `RunSetup` made by the node's
//! [`NestCtx`]. The scheduler hands the context to the node's leaf when the node starts
//! ([`Leaf::nest`]); the context carries what an instance shares with the run that holds it:
//! where its events go, its path, the run's mailbox.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::error::NodeError;
use crate::nodes::{IntoNodes, Leaf, Nodes};
use crate::report::Outcome;
use crate::run_state::RunState;

pub(crate) use crate::nest_ctx::NestCtx;
// Where the plain types of paths live; named here too for the code that knew them here.
#[cfg(test)]
use crate::events::EventSink;
#[cfg(test)]
pub(crate) use crate::path::PathStep;
#[cfg_attr(not(feature = "durable"), allow(unused_imports))]
pub(crate) use crate::path::{NestKind, NodePath};

/// Runs a sub-workflow step: one instance of workflow `W` (its own graph and options), whose
/// events go to the parent's log with the path of the step (`payment/charge`) and whose report
/// is kept whole in the parent's ([`NestReport::report`](crate::NestReport::report)). The child's failure is the step's:
/// [`NodeError::Workflow`], whose [`source`](std::error::Error::source) is the child's
/// [`WorkflowError`](crate::WorkflowError) (its [`path`](crate::WorkflowError::path) names the step).
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
