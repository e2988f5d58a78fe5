//! The node set of a run: the generated code hands the scheduler one value that holds every
//! node's future-maker, and the scheduler addresses nodes by index.
//!
//! The set is a balanced binary tree of [`Pair`]s whose leaves are [`Op`]s, [`ArenaOp`]s and
//! [`Decide`]s, which [`IntoNodes`] builds from the tree of plain tuples that generated code
//! writes: the tree owns every node (so the run is `Send` exactly when every node's
//! closure and future are), and its type is built without naming any node's type. The
//! scheduler pins the tree once and collects one `Pin<&mut dyn Leaf>` per node ([`Table`]), so
//! reaching node `i` is an index and one indirect call, not a walk down the tree.

use std::alloc::Layout;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::error::NodeError;
use crate::run_state::RunState;

/// One node of a run as the scheduler drives it: an operation ([`Op`], [`ArenaOp`]) or a
/// decision ([`Decide`]). Object safe: the scheduler keeps one `Pin<&mut dyn Leaf>` per node,
/// so reaching a node is one indirect call whatever the workflow's size.
pub trait Leaf {
    /// Makes the future of a new attempt (dropping any earlier one). No effect on a decision.
    fn start(self: Pin<&mut Self>);

    /// Polls the current attempt. Resolves to `Ready(Err(..))` when the operation failed.
    /// When it resolves, the leaf drops the attempt's future before returning, so the
    /// scheduler calls [`stop`](Leaf::stop) only on an attempt cut short (one call fewer per
    /// node that ends by itself).
    /// A decision is always ready.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>>;

    /// Drops the current attempt's future, if any (cancellation, a timeout, a panic, a retry).
    fn stop(self: Pin<&mut Self>);

    /// Evaluates a decision's test; `false` for an operation.
    fn decide(self: Pin<&mut Self>, state: &RunState) -> bool;

    /// How long the current attempt of a `Delay` step waits; `None` for every other node.
    fn delay(&self) -> Option<std::time::Duration> {
        None
    }

    /// What the node does when all it does is wait: a `Delay` step waits for its timer, a
    /// `Signal` step for a signal. `None` (the default) for a node that works. A durable run
    /// whose running nodes all wait may be unloaded (`DurableRunner::unload_when_waiting`).
    fn idle(&self) -> Option<Idle> {
        None
    }

    /// A started `Delay` step of a resumed durable run waits `left` (what is left of its
    /// stored timer) instead of its whole duration. No effect on any other node.
    fn resume_timer(self: Pin<&mut Self>, left: std::time::Duration) {
        let _ = left;
    }

    /// Gives a nest node (`ForEach`, `Loop`, sub-workflow step) its context, before its first
    /// attempt starts. No effect on any other node.
    fn nest(self: Pin<&mut Self>, ctx: crate::nest_ctx::NestCtx) {
        let _ = ctx;
    }

    /// Polls what a node that has completed still runs: a `ForEach` with `min` and `rest =
    /// run` completes at its `min`-th instance and runs the others after. `Ready` once nothing
    /// is left (at once for every other node); [`stop`](Leaf::stop) drops what is left.
    fn poll_rest(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let _ = cx;
        Poll::Ready(())
    }
}

/// What a node that only waits waits for: [`Leaf::idle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// A timer due at this instant (a `Delay` step).
    Until(tokio::time::Instant),
    /// A signal, with no due time (a `Signal` step).
    Signal,
}

/// A set of nodes: generated code builds one value holding every node, the scheduler pins it
/// once and collects a pointer to each node, in index order.
///
/// # Safety
///
/// [`Nodes::collect`] must push only nodes that are parts of `self` (reached through the pinned
/// `self`), each once. The scheduler's node table relies on it: the table is `Send` or `Sync`
/// exactly when the set is, which holds only if every collected node belongs to the set.
pub unsafe trait Nodes {
    /// The number of nodes in the set.
    const LEN: usize;

    /// Size and alignment of the arena space the set's [`ArenaOp`]s need for their futures,
    /// laid out like a struct of them; known at compile time, so a run allocates it at once.
    const ARENA: (usize, usize) = (0, 1);

    /// Appends every node of the set to `out`, in index order, and gives each [`ArenaOp`] its
    /// place in `arena`.
    ///
    /// # Safety
    ///
    /// When [`Nodes::ARENA`] has a non-zero size, `arena` must point to that many bytes with
    /// that alignment, used by nothing else, and stay valid until every node of the set has
    /// been stopped for the last time ([`Leaf::stop`]). When the size is zero the set has no
    /// [`ArenaOp`] (each takes at least one byte) and `arena` may be null.
    unsafe fn collect<'a>(
        self: Pin<&'a mut Self>,
        arena: *mut u8,
        out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    ) where
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

impl<A: Nodes, B: Nodes> Pair<A, B> {
    /// Where the right set's arena space starts: after the left's, aligned for the right's.
    const RIGHT_OFFSET: usize = A::ARENA.0.next_multiple_of(B::ARENA.1);
}

// SAFETY: collects the two halves' nodes, which are parts of the pair.
unsafe impl<A: Nodes, B: Nodes> Nodes for Pair<A, B> {
    const LEN: usize = A::LEN + B::LEN;
    const ARENA: (usize, usize) = (
        Self::RIGHT_OFFSET + B::ARENA.0,
        if A::ARENA.1 > B::ARENA.1 {
            A::ARENA.1
        } else {
            B::ARENA.1
        },
    );

    #[inline]
    unsafe fn collect<'a>(
        self: Pin<&'a mut Self>,
        arena: *mut u8,
        out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    ) where
        Self: 'a,
    {
        let this = self.project();
        // SAFETY: the left set's space is the start of this set's, the right set's starts at
        // `RIGHT_OFFSET` (aligned for it): disjoint, and both inside `Self::ARENA`. `arena` is
        // null only when the set has no space, and then neither half has an `ArenaOp` (each
        // takes at least one byte), so no offset from null reaches a node.
        unsafe {
            this.left.collect(arena, out);
            this.right
                .collect(arena.wrapping_add(Self::RIGHT_OFFSET), out);
        }
    }
}

/// Every leaf but [`ArenaOp`] is a node set of one that needs no arena space.
macro_rules! one_node {
    () => {
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

// SAFETY: collects itself.
unsafe impl<F, Fut> Nodes for Op<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    one_node!();
}

/// What a node answers when the scheduler polls it without starting it first: a scheduler bug,
/// reported as the node's failure instead of a panic in the caller's process.
fn not_started() -> Poll<Result<(), NodeError>> {
    Poll::Ready(Err(NodeError::Internal(
        "polled an operation that was not started",
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
        let mut running = self.project().running;
        let Some(fut) = running.as_mut().as_pin_mut() else {
            return not_started();
        };
        let polled = fut.poll(cx);
        if polled.is_ready() {
            running.set(None);
        }
        polled
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

// SAFETY: collects itself.
unsafe impl<F, Fut> Nodes for ArenaOp<F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    const LEN: usize = 1;
    /// At least one byte, even for a zero-sized future: a set with an `ArenaOp` then always has
    /// an arena, and the table that owns it stops every node before freeing it, which drops
    /// every running future, zero-sized ones included, when a run is dropped midway. (A
    /// `Drop` of `ArenaOp` itself would do the same for every node set, and made the node tree
    /// costlier to move: 5-10% more instructions per node in the shapes bench.)
    const ARENA: (usize, usize) = (
        if size_of::<Fut>() == 0 {
            1
        } else {
            size_of::<Fut>()
        },
        align_of::<Fut>(),
    );

    #[inline]
    unsafe fn collect<'a>(
        mut self: Pin<&'a mut Self>,
        arena: *mut u8,
        out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    ) where
        Self: 'a,
    {
        self.place = if size_of::<Fut>() == 0 {
            Some(NonNull::dangling())
        } else {
            NonNull::new(arena.cast())
        };
        out.push(self);
    }
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
                let polled = unsafe { Pin::new_unchecked(&mut *place.as_ptr()) }.poll(cx);
                if polled.is_ready() {
                    this.stop_future();
                }
                polled
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

// SAFETY: collects itself.
unsafe impl<F: Fn(&RunState) -> bool> Nodes for Decide<F> {
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

/// Marks a decision in the tuple tree that generated code hands to [`execute`]: the pair
/// `(Decision, test)` becomes a [`Decide`].
///
/// [`execute`]: crate::__private::execute
#[derive(Debug, Clone, Copy)]
pub struct Decision;

/// A tree of plain tuples that becomes a node set: `(make,)` is an operation whose closure
/// makes its future, `(Decision, test)` a decision, `(left, right)` two sets side by side.
///
/// Generated code builds the tree from `let` statements, one per node, and calls [`execute`]
/// (small workflows: futures inline, [`IntoNodes::Inline`]) or [`execute_in_arena`] (large
/// ones: futures in the run's arena, [`IntoNodes::InArena`]) once with it. Nothing generic sees
/// a node's closure before that one call: a closure handed to a generic constructor
/// (`Op::new(..)`) leaves obligations that the type checker carries through the rest of the
/// function, which made `cargo check` grow with the square of the node count (see
/// docs/performance.md, "Compile time").
///
/// [`execute`]: crate::__private::execute
/// [`execute_in_arena`]: crate::__private::execute_in_arena
pub trait IntoNodes {
    /// The node set with every operation's future inline ([`Op`]).
    type Inline: Nodes;

    /// The node set with every operation's future in the run's arena ([`ArenaOp`]).
    type InArena: Nodes;

    /// Builds the node set with futures inline.
    fn inline(self) -> Self::Inline;

    /// Builds the node set with futures in the run's arena.
    fn in_arena(self) -> Self::InArena;
}

impl<F, Fut> IntoNodes for (F,)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    type Inline = Op<F, Fut>;
    type InArena = ArenaOp<F, Fut>;

    #[inline]
    fn inline(self) -> Self::Inline {
        Op::new(self.0)
    }

    #[inline]
    fn in_arena(self) -> Self::InArena {
        ArenaOp::new(self.0)
    }
}

impl<F> IntoNodes for (Decision, F)
where
    F: Fn(&RunState) -> bool,
{
    type Inline = Decide<F>;
    type InArena = Decide<F>;

    #[inline]
    fn inline(self) -> Self::Inline {
        Decide::new(self.1)
    }

    #[inline]
    fn in_arena(self) -> Self::InArena {
        Decide::new(self.1)
    }
}

impl<A: IntoNodes, B: IntoNodes> IntoNodes for (A, B) {
    type Inline = Pair<A::Inline, B::Inline>;
    type InArena = Pair<A::InArena, B::InArena>;

    #[inline]
    fn inline(self) -> Self::Inline {
        Pair::new(self.0.inline(), self.1.inline())
    }

    #[inline]
    fn in_arena(self) -> Self::InArena {
        Pair::new(self.0.in_arena(), self.1.in_arena())
    }
}

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
        let (size, align) = N::ARENA;
        const {
            assert!(
                Layout::from_size_align(N::ARENA.0, N::ARENA.1).is_ok(),
                "the node futures of this workflow are too large for one arena"
            );
        }
        let arena = match Layout::from_size_align(size, align) {
            Ok(layout) if size > 0 => {
                // SAFETY: the layout has a non-zero size.
                let base = unsafe { std::alloc::alloc(layout) };
                match NonNull::new(base) {
                    Some(base) => Some((base, layout)),
                    None => std::alloc::handle_alloc_error(layout),
                }
            }
            // No node needs space (the layout itself is checked at compile time above).
            _ => None,
        };
        let base = arena.map_or(std::ptr::null_mut(), |(base, _)| base.as_ptr());
        // SAFETY: `base` is null only when no node needs space (or none can have it), else it
        // points to `N::ARENA` bytes owned by the table, freed in `drop` after every node has
        // been stopped.
        unsafe { set.collect(base, &mut leaves) };
        Table {
            leaves,
            arena,
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

impl<N> Drop for Table<'_, N> {
    fn drop(&mut self) {
        if let Some((base, layout)) = self.arena.take() {
            // Every future in the arena is dropped before the arena is freed.
            for leaf in &mut self.leaves {
                leaf.as_mut().stop();
            }
            // SAFETY: allocated in `Table::new` with this layout; no node holds a live future
            // in it any more.
            unsafe { std::alloc::dealloc(base.as_ptr(), layout) };
        }
    }
}

// SAFETY: the table holds exclusive borrows of the parts of one `N` (the contract of `Nodes`),
// and the arena where some of those parts keep their futures, so moving it to another thread
// moves `&mut N`, which is `Send` when `N` is. The trait objects merely forget that the parts
// are `Send`. Shared access (`&Table`) reaches no leaf, so it is `Sync` whenever `N` is.
unsafe impl<N: Send> Send for Table<'_, N> {}
// SAFETY: see above; `&Table` gives no access to the leaves.
unsafe impl<N: Sync> Sync for Table<'_, N> {}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::{Pin, pin};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Waker};

    use super::{ArenaOp, Nodes, Pair, Table};
    use crate::error::NodeError;

    /// A zero-sized future that never ends and counts its drops in `DROPS`.
    struct Zst;

    static DROPS: AtomicUsize = AtomicUsize::new(0);

    impl Future for Zst {
        type Output = Result<(), NodeError>;

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
            Poll::Pending
        }
    }

    impl Drop for Zst {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn zero_sized_futures_of_a_run_dropped_midway_are_dropped() {
        // One byte each: the table owns an arena, and stops every node before freeing it.
        assert_eq!(
            <Pair<ArenaOp<fn() -> Zst, Zst>, ArenaOp<fn() -> Zst, Zst>>>::ARENA.0,
            2
        );
        let before = DROPS.load(Ordering::SeqCst);
        {
            // What a run's future holds: the node set, and the table that borrows it.
            let set = pin!(Pair::new(ArenaOp::new(|| Zst), ArenaOp::new(|| Zst)));
            let mut table = Table::new(set);
            let mut cx = Context::from_waker(Waker::noop());
            for leaf in table.leaves().iter_mut() {
                leaf.as_mut().start();
                assert!(leaf.as_mut().poll(&mut cx).is_pending());
            }
            assert_eq!(DROPS.load(Ordering::SeqCst), before, "both still running");
        }
        assert_eq!(
            DROPS.load(Ordering::SeqCst) - before,
            2,
            "both running futures dropped"
        );
    }

    #[test]
    fn only_a_set_without_arena_ops_has_no_arena() {
        type Zero = ArenaOp<fn() -> Zst, Zst>;
        type Inline = super::Op<fn() -> Zst, Zst>;
        // A null arena reaches only sets whose space is zero: sets without any `ArenaOp`, so
        // no node ever gets an offset from null as its place.
        assert_eq!(<Pair<Inline, Inline>>::ARENA, (0, 1));
        assert_eq!(<Pair<Inline, Zero>>::ARENA.0, 1);
        assert_eq!(<Pair<Zero, Inline>>::ARENA.0, 1);
        let set = pin!(Pair::new(ArenaOp::new(|| Zst), ArenaOp::new(|| Zst)));
        let table = Table::new(set);
        assert!(table.arena.is_some());
    }
}
