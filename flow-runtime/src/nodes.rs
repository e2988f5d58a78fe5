//! The node set of a run: the generated code hands the scheduler one value that holds every
//! node's future-maker, and the scheduler addresses nodes by index.
//!
//! The set is a balanced binary tree of [`Pair`]s whose leaves are [`Op`]s and [`Decide`]s.
//! Every leaf keeps its closure and, while running, its future inline: no per-node heap
//! allocation, and the tree is `Send` exactly when every node's closure and future are. Reaching
//! leaf `i` costs one comparison per level (about ten for a thousand nodes).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::error::NodeError;
use crate::scheduler::RunState;

/// A set of nodes addressed by index `0..LEN`. Implemented by [`Pair`], [`Op`] and [`Decide`];
/// generated code builds the tree, the scheduler drives it.
pub trait Nodes {
    /// The number of nodes in the set.
    const LEN: usize;

    /// Creates the future of operation `i` (a new attempt). No effect on a decision.
    fn start(self: Pin<&mut Self>, i: usize);

    /// Polls the future of operation `i`. Resolves to `Ready(Err(..))` when the operation
    /// failed. Must only be called between [`Nodes::start`] and completion.
    fn poll_node(
        self: Pin<&mut Self>,
        i: usize,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>>;

    /// Drops the future of operation `i`, if any (cancellation, completion, timeout).
    fn stop(self: Pin<&mut Self>, i: usize);

    /// Evaluates the test of decision `i`.
    fn decide(self: Pin<&mut Self>, i: usize, state: &RunState) -> bool;
}

pin_project! {
    /// Two node sets side by side: indices `0..A::LEN` go left, the rest go right.
    #[derive(Debug)]
    pub struct Pair<A, B> {
        #[pin]
        left: A,
        #[pin]
        right: B,
    }
}

impl<A: Nodes, B: Nodes> Pair<A, B> {
    /// Joins two node sets.
    pub const fn new(left: A, right: B) -> Self {
        Pair { left, right }
    }
}

impl<A: Nodes, B: Nodes> Nodes for Pair<A, B> {
    const LEN: usize = A::LEN + B::LEN;

    #[inline]
    fn start(self: Pin<&mut Self>, i: usize) {
        let this = self.project();
        if i < A::LEN {
            this.left.start(i)
        } else {
            this.right.start(i - A::LEN)
        }
    }

    #[inline]
    fn poll_node(
        self: Pin<&mut Self>,
        i: usize,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        let this = self.project();
        if i < A::LEN {
            this.left.poll_node(i, cx)
        } else {
            this.right.poll_node(i - A::LEN, cx)
        }
    }

    #[inline]
    fn stop(self: Pin<&mut Self>, i: usize) {
        let this = self.project();
        if i < A::LEN {
            this.left.stop(i)
        } else {
            this.right.stop(i - A::LEN)
        }
    }

    #[inline]
    fn decide(self: Pin<&mut Self>, i: usize, state: &RunState) -> bool {
        let this = self.project();
        if i < A::LEN {
            this.left.decide(i, state)
        } else {
            this.right.decide(i - A::LEN, state)
        }
    }
}

pin_project! {
    /// An operation node: a closure that makes the node's future, and the future while it runs.
    ///
    /// The closure is `Fn` so that a retry can make a fresh future.
    pub struct Op<F, Fut> {
        make: F,
        #[pin]
        running: Option<Fut>,
    }
}

impl<F, Fut> Op<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    /// Wraps the closure that makes the node's future.
    pub const fn new(make: F) -> Self {
        Op {
            make,
            running: None,
        }
    }
}

impl<F, Fut> Nodes for Op<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    const LEN: usize = 1;

    #[inline]
    fn start(self: Pin<&mut Self>, _: usize) {
        let mut this = self.project();
        let fut = (this.make)();
        this.running.set(Some(fut));
    }

    #[inline]
    fn poll_node(
        self: Pin<&mut Self>,
        _: usize,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        match self.project().running.as_pin_mut() {
            Some(fut) => fut.poll(cx),
            // The scheduler polls only started nodes; answering instead of panicking keeps a
            // scheduler bug from taking the caller's process down.
            None => Poll::Ready(Err(NodeError::Panicked(
                "flow internal error: polled an operation that was not started".to_string(),
            ))),
        }
    }

    #[inline]
    fn stop(self: Pin<&mut Self>, _: usize) {
        self.project().running.set(None);
    }

    fn decide(self: Pin<&mut Self>, _: usize, _: &RunState) -> bool {
        false
    }
}

impl<F, Fut> std::fmt::Debug for Op<F, Fut> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Op")
            .field("running", &self.running.is_some())
            .finish()
    }
}

/// An operation node whose future lives on the heap while it runs: one allocation per attempt,
/// and no space reserved for nodes that are not running.
///
/// Generated code uses it for large workflows, where keeping every future inline ([`Op`])
/// would make the run's future as large as all node futures together.
pub struct BoxedOp<F, Fut> {
    make: F,
    running: Option<Pin<Box<Fut>>>,
}

impl<F, Fut> BoxedOp<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    /// Wraps the closure that makes the node's future.
    pub const fn new(make: F) -> Self {
        BoxedOp {
            make,
            running: None,
        }
    }
}

impl<F, Fut> Nodes for BoxedOp<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    const LEN: usize = 1;

    #[inline]
    fn start(self: Pin<&mut Self>, _: usize) {
        let this = self.get_mut();
        this.running = Some(Box::pin((this.make)()));
    }

    #[inline]
    fn poll_node(
        self: Pin<&mut Self>,
        _: usize,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        match &mut self.get_mut().running {
            Some(fut) => fut.as_mut().poll(cx),
            None => Poll::Ready(Err(NodeError::Panicked(
                "flow internal error: polled an operation that was not started".to_string(),
            ))),
        }
    }

    #[inline]
    fn stop(self: Pin<&mut Self>, _: usize) {
        self.get_mut().running = None;
    }

    fn decide(self: Pin<&mut Self>, _: usize, _: &RunState) -> bool {
        false
    }
}

// Nothing in a `BoxedOp` is structurally pinned: the future is pinned in its own box.
impl<F, Fut> Unpin for BoxedOp<F, Fut> {}

impl<F, Fut> std::fmt::Debug for BoxedOp<F, Fut> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxedOp")
            .field("running", &self.running.is_some())
            .finish()
    }
}

/// A decision node: the test of a `Conditional`.
pub struct Decide<F> {
    test: F,
}

impl<F: Fn(&RunState) -> bool> Decide<F> {
    /// Wraps the test.
    pub const fn new(test: F) -> Self {
        Decide { test }
    }
}

impl<F: Fn(&RunState) -> bool> Nodes for Decide<F> {
    const LEN: usize = 1;

    fn start(self: Pin<&mut Self>, _: usize) {}

    fn poll_node(
        self: Pin<&mut Self>,
        _: usize,
        _: &mut Context<'_>,
    ) -> Poll<Result<(), NodeError>> {
        Poll::Ready(Ok(()))
    }

    fn stop(self: Pin<&mut Self>, _: usize) {}

    #[inline]
    fn decide(self: Pin<&mut Self>, _: usize, state: &RunState) -> bool {
        (self.test)(state)
    }
}

impl<F> std::fmt::Debug for Decide<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decide").finish_non_exhaustive()
    }
}

// Decide holds no pinned data.
impl<F> Unpin for Decide<F> {}

/// The output of one named node: written once when the node completes, then read by reference
/// by every node that names it.
pub struct Slot<T> {
    value: OnceLock<T>,
}

impl<T> Slot<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Slot {
            value: OnceLock::new(),
        }
    }

    /// The value, once the node has completed.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        self.value.get()
    }

    /// Stores the node's value. A second write is ignored (a node completes once).
    #[inline]
    pub fn put(&self, value: T) {
        let _ = self.value.set(value);
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Slot").field(&self.value.get()).finish()
    }
}
