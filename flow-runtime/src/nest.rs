//! Nested static graphs: a `ForEach`'s instances, a `Loop`'s iterations and a sub-workflow
//! step are each a run of a static graph of their own, driven by one node of the parent's
//! graph (a *nest node*), in the run's task.
//!
//! A nest node is an ordinary node whose future (the *driver*) runs the instances: each
//! instance is a nested `execute` of the body's graph, with [`RunOptions`] made by the node's
//! [`NestCtx`]. The scheduler hands the context to the node's leaf when the node starts
//! ([`Leaf::nest`]); the context carries what an instance shares with the run that holds it:
//! where its events go, its path, the run's mailbox.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::error::NodeError;
use crate::graph::Graph;
use crate::nodes::{IntoNodes, Leaf, Nodes};
use crate::options::RunOptions;
use crate::run_state::RunState;
use crate::signal::Mailbox;

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

/// What a nest node's driver gets from the run that holds it, when the node starts: the
/// options of each instance, and where instances report.
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
}

impl NestCtx {
    /// The context of a nest node outside any run (a driver polled without a scheduler, as in
    /// unit tests): instances record nothing and report nothing.
    pub fn detached(node: &'static str, kind: NestKind, body: &'static Graph) -> NestCtx {
        NestCtx {
            node,
            kind,
            body,
            path: None,
            signals: None,
            report: false,
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

    /// The options of instance `index`'s run.
    pub fn instance(&self, index: u64) -> RunOptions {
        RunOptions {
            record: self.report,
            report: self.report,
            signals: self.signals.clone(),
            path: Some(self.path_of(index)),
            ..RunOptions::default()
        }
    }
}

impl fmt::Debug for NestCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NestCtx")
            .field("node", &self.node)
            .field("kind", &self.kind)
            .field("path", &self.path)
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
        let result = std::task::ready!(running.poll(cx));
        this.running.set(None);
        Poll::Ready(result)
    }

    fn stop(self: Pin<&mut Self>) {
        self.project().running.set(None);
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
