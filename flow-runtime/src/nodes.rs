//! The node set of a run: the generated code hands the scheduler one value that holds every
//! node's future-maker, and the scheduler addresses nodes by index.
//!
//! The set is a balanced binary tree of [`Pair`]s whose leaves are [`Op`]s, [`BoxedOp`]s and
//! [`Decide`]s: the tree owns every node (so the run is `Send` exactly when every node's
//! closure and future are), and its type is built without naming any node's type. The
//! scheduler pins the tree once and collects one `Pin<&mut dyn Leaf>` per node ([`Table`]), so
//! reaching node `i` is an index and one indirect call, not a walk down the tree.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::error::NodeError;
use crate::scheduler::RunState;

/// One node of a run as the scheduler drives it: an operation ([`Op`], [`BoxedOp`]) or a
/// decision ([`Decide`]). Object safe: the scheduler keeps one `Pin<&mut dyn Leaf>` per node,
/// so reaching a node is one indirect call whatever the workflow's size.
pub trait Leaf {
    /// Makes the future of a new attempt (dropping any earlier one). No effect on a decision.
    fn start(self: Pin<&mut Self>);

    /// Polls the current attempt. Resolves to `Ready(Err(..))` when the operation failed.
    /// A decision is always ready.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>>;

    /// Drops the current attempt's future, if any (completion, cancellation, timeout).
    fn stop(self: Pin<&mut Self>);

    /// Evaluates a decision's test; `false` for an operation.
    fn decide(self: Pin<&mut Self>, state: &RunState) -> bool;
}

/// A set of nodes: generated code builds one value holding every node, the scheduler pins it
/// once and collects a pointer to each node, in index order.
pub trait Nodes {
    /// The number of nodes in the set.
    const LEN: usize;

    /// Appends every node of the set to `out`, in index order.
    fn collect<'a>(self: Pin<&'a mut Self>, out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>)
    where
        Self: 'a;
}

pin_project! {
    /// Two node sets side by side: indices `0..A::LEN` are the left set's, the rest the right's.
    #[derive(Debug)]
    pub struct Pair<A, B> {
        #[pin]
        left: A,
        #[pin]
        right: B,
    }
}

impl<A, B> Pair<A, B> {
    /// Joins two node sets.
    pub const fn new(left: A, right: B) -> Self {
        Pair { left, right }
    }
}

impl<A: Nodes, B: Nodes> Nodes for Pair<A, B> {
    const LEN: usize = A::LEN + B::LEN;

    #[inline]
    fn collect<'a>(self: Pin<&'a mut Self>, out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>)
    where
        Self: 'a,
    {
        let this = self.project();
        this.left.collect(out);
        this.right.collect(out);
    }
}

/// Every leaf is a node set of one.
macro_rules! one_node {
    ($($ty:tt)*) => {
        const LEN: usize = 1;

        #[inline]
        fn collect<'a>(self: Pin<&'a mut Self>, out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>)
        where
            Self: 'a,
        {
            out.push(self);
        }
    };
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
    one_node!();
}

/// What a node answers when the scheduler polls it without starting it first: a scheduler bug,
/// reported as the node's failure instead of a panic in the caller's process.
fn not_started() -> Poll<Result<(), NodeError>> {
    Poll::Ready(Err(NodeError::Panicked(
        "flow internal error: polled an operation that was not started".to_string(),
    )))
}

impl<F, Fut> Leaf for Op<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    #[inline]
    fn start(self: Pin<&mut Self>) {
        let mut this = self.project();
        let fut = (this.make)();
        this.running.set(Some(fut));
    }

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        match self.project().running.as_pin_mut() {
            Some(fut) => fut.poll(cx),
            None => not_started(),
        }
    }

    #[inline]
    fn stop(self: Pin<&mut Self>) {
        self.project().running.set(None);
    }

    fn decide(self: Pin<&mut Self>, _: &RunState) -> bool {
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
    one_node!();
}

impl<F, Fut> Leaf for BoxedOp<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    #[inline]
    fn start(self: Pin<&mut Self>) {
        let this = self.get_mut();
        this.running = Some(Box::pin((this.make)()));
    }

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        match &mut self.get_mut().running {
            Some(fut) => fut.as_mut().poll(cx),
            None => not_started(),
        }
    }

    #[inline]
    fn stop(self: Pin<&mut Self>) {
        self.get_mut().running = None;
    }

    fn decide(self: Pin<&mut Self>, _: &RunState) -> bool {
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
    one_node!();
}

impl<F: Fn(&RunState) -> bool> Leaf for Decide<F> {
    fn start(self: Pin<&mut Self>) {}

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        Poll::Ready(Ok(()))
    }

    fn stop(self: Pin<&mut Self>) {}

    #[inline]
    fn decide(self: Pin<&mut Self>, state: &RunState) -> bool {
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

/// One pointer per node of a run, in index order: what the scheduler works on.
pub(crate) type Leaves<'a> = [Pin<&'a mut (dyn Leaf + 'a)>];

/// The nodes of one run, pinned where the run keeps them, as one pointer per node in index
/// order: reaching node `i` is an index and one indirect call.
pub(crate) struct Table<'a, N> {
    leaves: Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    /// The table borrows the set `N` mutably, and only its parts.
    _set: PhantomData<Pin<&'a mut N>>,
}

impl<'a, N: Nodes> Table<'a, N> {
    pub(crate) fn new(set: Pin<&'a mut N>) -> Self {
        let mut leaves = Vec::with_capacity(N::LEN.min(1 << 20));
        set.collect(&mut leaves);
        Table {
            leaves,
            _set: PhantomData,
        }
    }
}

impl<'a, N> Table<'a, N> {
    /// Every node, in index order.
    #[inline]
    pub(crate) fn leaves(&mut self) -> &mut Leaves<'a> {
        &mut self.leaves
    }

    pub(crate) fn len(&self) -> usize {
        self.leaves.len()
    }
}

// SAFETY: the table holds exclusive borrows of the parts of one `N` and nothing else, so moving
// it to another thread moves `&mut N`, which is `Send` when `N` is. The trait objects merely
// forget that the parts are `Send`. Shared access (`&Table`) reaches no leaf, so it is `Sync`
// whenever `N` is.
unsafe impl<N: Send> Send for Table<'_, N> {}
// SAFETY: see above; `&Table` gives no access to the leaves.
unsafe impl<N: Sync> Sync for Table<'_, N> {}

/// The output of one named node: written once when the node completes, then read by reference
/// by every node that names it.
///
/// A write-once cell like `OnceLock`, without its blocking machinery: a second write is
/// ignored, and a read during the write sees no value.
pub struct Slot<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const FULL: u8 = 2;

// SAFETY: as `OnceLock<T>`: the value is written once, by whoever wins `EMPTY -> WRITING`, and
// read only after `FULL` is published with release/acquire ordering. Sharing a slot shares `&T`
// (needs `Sync`) and lets another thread put the value (needs `Send`).
unsafe impl<T: Send + Sync> Sync for Slot<T> {}
// SAFETY: a slot owns its value.
unsafe impl<T: Send> Send for Slot<T> {}

impl<T> Slot<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Slot {
            state: AtomicU8::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The value, once the node has completed.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == FULL {
            // SAFETY: `FULL` is stored after the value is written, and the value is never
            // written again nor dropped while `&self` lives.
            Some(unsafe { (*self.value.get()).assume_init_ref() })
        } else {
            None
        }
    }

    /// Stores the node's value. A second write is ignored (a node completes once).
    #[inline]
    pub fn put(&self, value: T) {
        if self
            .state
            .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: winning `EMPTY -> WRITING` gives this call the only access to the value;
            // readers wait for `FULL`. Writing moves `value` and cannot unwind.
            unsafe { (*self.value.get()).write(value) };
            self.state.store(FULL, Ordering::Release);
        }
    }
}

impl<T> Drop for Slot<T> {
    fn drop(&mut self) {
        if *self.state.get_mut() == FULL {
            // SAFETY: the value was written (`FULL`) and is dropped once, here.
            unsafe { self.value.get_mut().assume_init_drop() };
        }
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Slot").field(&self.get()).finish()
    }
}
