//! The node set of a run: the generated code hands the scheduler one value that holds every
//! node's future-maker, and the scheduler addresses nodes by index.
//!
//! The set is a balanced binary tree of [`Pair`]s whose leaves are [`Op`]s, [`ArenaOp`]s and
//! [`Decide`]s: the tree owns every node (so the run is `Send` exactly when every node's
//! closure and future are), and its type is built without naming any node's type. The
//! scheduler pins the tree once and collects one `Pin<&mut dyn Leaf>` per node ([`Table`]), so
//! reaching node `i` is an index and one indirect call, not a walk down the tree.

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::future::Future;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::ptr::NonNull;
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

    /// The space this node's future needs in the run's arena ([`ArenaOp`]); nodes that keep
    /// their future elsewhere need none.
    fn arena_layout(&self) -> Layout {
        Layout::new::<()>()
    }

    /// Gives the node its place in the run's arena, before its first start.
    ///
    /// # Safety
    ///
    /// `place` must be valid for `self.arena_layout()`, aligned to it, used by no other node,
    /// and stay valid until the node has been stopped for the last time.
    unsafe fn set_place(self: Pin<&mut Self>, place: NonNull<u8>) {
        let _ = place;
    }
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

/// An operation node whose future lives in the run's node arena: one allocation per run for
/// every such node together (sized from each node's future type), instead of one per node.
///
/// Generated code uses it for large workflows, where keeping every future inline ([`Op`])
/// would make the run's future as large as all node futures together, and building that
/// future could overflow a thread's stack in a debug build. Outside a run (before the
/// scheduler hands it its place) it has no future.
pub struct ArenaOp<F, Fut> {
    make: F,
    /// The node's place in the arena, set by the scheduler before the first start.
    place: Option<NonNull<Fut>>,
    /// Whether `place` holds a live future.
    running: bool,
    /// The node owns a `Fut` while running.
    _future: PhantomData<Fut>,
}

impl<F, Fut> ArenaOp<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    /// Wraps the closure that makes the node's future.
    pub const fn new(make: F) -> Self {
        ArenaOp {
            make,
            place: None,
            running: false,
            _future: PhantomData,
        }
    }
}

impl<F, Fut> Nodes for ArenaOp<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    one_node!();
}

impl<F, Fut> Leaf for ArenaOp<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    #[inline]
    fn start(self: Pin<&mut Self>) {
        let this = self.get_mut();
        this.stop_future();
        let Some(place) = this.place else {
            return;
        };
        let future = (this.make)();
        // SAFETY: `place` is this node's own, suitably aligned part of the arena, and holds no
        // live future (stopped above).
        unsafe { place.as_ptr().write(future) };
        this.running = true;
    }

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        let this = self.get_mut();
        match this.place {
            // SAFETY: a running node's future lives at `place`, which does not move until the
            // arena is freed, after every node was stopped.
            Some(place) if this.running => {
                unsafe { Pin::new_unchecked(&mut *place.as_ptr()) }.poll(cx)
            }
            _ => not_started(),
        }
    }

    #[inline]
    fn stop(self: Pin<&mut Self>) {
        self.get_mut().stop_future();
    }

    fn decide(self: Pin<&mut Self>, _: &RunState) -> bool {
        false
    }

    fn arena_layout(&self) -> Layout {
        Layout::new::<Fut>()
    }

    unsafe fn set_place(self: Pin<&mut Self>, place: NonNull<u8>) {
        self.get_mut().place = Some(place.cast());
    }
}

impl<F, Fut> ArenaOp<F, Fut> {
    /// Drops the running future, if any.
    #[inline]
    fn stop_future(&mut self) {
        if let (true, Some(place)) = (self.running, self.place) {
            // Cleared first: a future whose drop panics is not dropped twice.
            self.running = false;
            // SAFETY: `running` says `place` holds a live future; it is dropped once, here.
            unsafe { place.as_ptr().drop_in_place() };
        }
    }
}

// Nothing in an `ArenaOp` is structurally pinned: the future is pinned in the arena.
impl<F, Fut> Unpin for ArenaOp<F, Fut> {}

// SAFETY: an `ArenaOp` owns its closure and (while running) its future, as `Option<Box<Fut>>`
// would; the pointer only says where the future lives.
unsafe impl<F: Send, Fut: Send> Send for ArenaOp<F, Fut> {}
// SAFETY: `&ArenaOp` gives no access to the future.
unsafe impl<F: Sync, Fut: Sync> Sync for ArenaOp<F, Fut> {}

impl<F, Fut> std::fmt::Debug for ArenaOp<F, Fut> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaOp")
            .field("running", &self.running)
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
/// order: reaching node `i` is an index and one indirect call. The table also owns the arena
/// where [`ArenaOp`] nodes keep their futures; dropping it stops every node first.
pub(crate) struct Table<'a, N> {
    leaves: Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    /// The arena and its layout; `None` when no node needs one.
    arena: Option<(NonNull<u8>, Layout)>,
    /// The table borrows the set `N` mutably, and only its parts.
    _set: PhantomData<Pin<&'a mut N>>,
}

impl<'a, N: Nodes> Table<'a, N> {
    pub(crate) fn new(set: Pin<&'a mut N>) -> Self {
        let mut leaves = Vec::with_capacity(N::LEN.min(1 << 20));
        set.collect(&mut leaves);
        let mut table = Table {
            leaves,
            arena: None,
            _set: PhantomData,
        };
        table.place_futures();
        table
    }
}

impl<'a, N> Table<'a, N> {
    /// Lays out one arena for every node that asks for space, allocates it and hands each
    /// node its place. Without memory for it the nodes get no place, and fail when started.
    fn place_futures(&mut self) {
        let mut total = Layout::new::<()>();
        let mut offsets = Vec::new();
        for (i, leaf) in self.leaves.iter().enumerate() {
            let layout = leaf.arena_layout();
            if layout.size() == 0 {
                continue;
            }
            let Ok((extended, offset)) = total.extend(layout) else {
                return;
            };
            total = extended;
            offsets.push((i, offset));
        }
        if offsets.is_empty() {
            return;
        }
        // SAFETY: `total` has a non-zero size (some node asked for space).
        let Some(base) = NonNull::new(unsafe { std::alloc::alloc(total) }) else {
            return;
        };
        self.arena = Some((base, total));
        for (i, offset) in offsets {
            // SAFETY: `offset` is where `Layout::extend` put this node's layout inside the
            // arena: in bounds, aligned, and no other node's. The arena lives until `drop`,
            // which stops every node first.
            unsafe {
                let place = base.add(offset);
                self.leaves[i].as_mut().set_place(place);
            }
        }
    }

    /// Every node, in index order.
    #[inline]
    pub(crate) fn leaves(&mut self) -> &mut Leaves<'a> {
        &mut self.leaves
    }

    pub(crate) fn len(&self) -> usize {
        self.leaves.len()
    }
}

impl<N> Drop for Table<'_, N> {
    fn drop(&mut self) {
        if let Some((base, layout)) = self.arena.take() {
            // Every future in the arena is dropped before the arena is freed.
            for leaf in &mut self.leaves {
                leaf.as_mut().stop();
            }
            // SAFETY: allocated in `place_futures` with this layout; no node holds a live
            // future in it any more.
            unsafe { std::alloc::dealloc(base.as_ptr(), layout) };
        }
    }
}

// SAFETY: the table holds exclusive borrows of the parts of one `N`, and the arena where some of
// those parts keep their futures, so moving it to another thread moves `&mut N`, which is
// `Send` when `N` is. The trait objects merely forget that the parts are `Send`. Shared access
// (`&Table`) reaches no leaf, so it is `Sync` whenever `N` is.
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
