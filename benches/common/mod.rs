//! What the benchmark binaries share: the two operations, the generated workflows, the
//! hand-written equivalents and the dagrs graphs of the same shapes.
//!
//! Each binary uses part of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;

/// The size of the large shapes.
pub const NODES: usize = 1000;
/// The width of a layer of the layered shape.
pub const WIDTH: usize = 10;
/// The number of nodes of the mixed workflow.
pub const MIXED_NODES: usize = 50;
/// What the mixed workflow returns for `x = 0`.
pub const MIXED_OUTPUT: u64 = 37;

/// The operations every node runs: `x + 1`, at once or after one `yield_now`.
pub mod ops {
    use super::Infallible;

    /// Returns at once.
    pub async fn imm(x: u64) -> Result<u64, Infallible> {
        Ok(x + 1)
    }

    /// Yields to the runtime once first (returns `Pending` once), as real I/O would.
    pub async fn yld(x: u64) -> Result<u64, Infallible> {
        tokio::task::yield_now().await;
        Ok(x + 1)
    }

    /// Yields to the runtime `turns` times first: a replica that answers after `turns` turns
    /// (the contenders of the race and quorum groups, where the slower replicas lose).
    pub async fn after(x: u64, turns: u32) -> Result<u64, Infallible> {
        for _ in 0..turns {
            tokio::task::yield_now().await;
        }
        Ok(x + 1)
    }
}

/// An operation that waits for its turn: each call takes a ticket on its first poll, and
/// [`gate::open`] opens one ticket per turn of the runtime. A fan of gated operations finishes
/// one node per turn, as a fan of real I/O calls does; what it measures is the cost of a wake-up
/// that concerns one node out of a thousand in flight.
pub mod gate {
    use super::Infallible;
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    #[derive(Default)]
    struct Gates {
        tickets: usize,
        opened: usize,
        wakers: Vec<Option<Waker>>,
    }

    thread_local! {
        static GATES: RefCell<Gates> = RefCell::default();
    }

    struct Ticket(Option<usize>);

    impl Future for Ticket {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            GATES.with_borrow_mut(|gates| {
                let ticket = *self.0.get_or_insert_with(|| {
                    gates.tickets += 1;
                    gates.tickets - 1
                });
                if ticket < gates.opened {
                    return Poll::Ready(());
                }
                if gates.wakers.len() <= ticket {
                    gates.wakers.resize(ticket + 1, None);
                }
                gates.wakers[ticket] = Some(cx.waker().clone());
                Poll::Pending
            })
        }
    }

    /// `x + 1`, once this call's ticket is open.
    pub async fn gated(x: u64) -> Result<u64, Infallible> {
        Ticket(None).await;
        Ok(x + 1)
    }

    /// Forgets every ticket: call it before each run.
    pub fn reset() {
        GATES.with_borrow_mut(|gates| *gates = Gates::default());
    }

    /// Opens `n` tickets, one per turn of the runtime. Run it beside the workflow in one task
    /// (`join!`), on one thread, after [`reset`].
    pub async fn open(n: usize) {
        for _ in 0..n {
            let waker = GATES.with_borrow_mut(|gates| {
                gates.opened += 1;
                gates
                    .wakers
                    .get_mut(gates.opened - 1)
                    .and_then(Option::take)
            });
            if let Some(waker) = waker {
                waker.wake();
            }
            tokio::task::yield_now().await;
        }
    }
}

/// The hand-written equivalents, generic over the operation.
pub mod hand {
    use super::Future;
    use futures::StreamExt;
    use futures::future::join_all;
    use futures::stream::FuturesUnordered;

    /// The chain: sequential awaits.
    pub async fn chain<F, Fut, E>(op: F, x: u64, n: usize) -> Result<u64, E>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let mut value = x;
        for _ in 0..n {
            value = op(value).await?;
        }
        Ok(value)
    }

    /// Fan-out/fan-in with `join_all` (which keeps every output, as flow's slots do).
    pub async fn fan_join_all<F, Fut, E>(op: F, x: u64, n: usize) -> Result<u64, E>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let src = op(x).await?;
        for result in join_all((0..n - 2).map(|_| op(src))).await {
            result?;
        }
        op(src).await
    }

    /// Fan-out/fan-in with `FuturesUnordered`.
    pub async fn fan_unordered<F, Fut, E>(op: F, x: u64, n: usize) -> Result<u64, E>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let src = op(x).await?;
        let mut middle: FuturesUnordered<Fut> = (0..n - 2).map(|_| op(src)).collect();
        while let Some(result) = middle.next().await {
            result?;
        }
        op(src).await
    }

    /// The layered graph: one `join_all` per layer; node `j` reads node `j` of the layer before.
    pub async fn layered<F, Fut, E>(op: F, x: u64, n: usize, width: usize) -> Result<u64, E>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let mut layer = vec![x; width];
        for _ in 0..n / width {
            layer = join_all(layer.iter().map(|&input| op(input)))
                .await
                .into_iter()
                .collect::<Result<Vec<u64>, E>>()?;
        }
        Ok(layer[0])
    }

    /// A race of two replicas, as one writes it with `tokio::select!`: the first to *succeed*
    /// wins, and the other one's future is dropped when this function returns. A replica that
    /// fails does not win; the race fails, with both errors, only when both failed. (flow's
    /// `Race` has these rules; with infallible operations the first to complete wins.)
    /// `biased` polls the replicas in the order written, as flow polls the arms of a block,
    /// rather than from a random one.
    pub async fn race2<F, Fut, E>(op: F, x: u64, turns: [u32; 2]) -> Result<u64, Vec<E>>
    where
        F: Fn(u64, u32) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let first = op(x, turns[0]);
        let second = op(x, turns[1]);
        tokio::pin!(first, second);
        let (mut first_failed, mut second_failed) = (false, false);
        let mut errors = Vec::new();
        loop {
            tokio::select! {
                biased;
                result = &mut first, if !first_failed => match result {
                    Ok(value) => return Ok(value),
                    Err(error) => {
                        first_failed = true;
                        errors.push(error);
                    }
                },
                result = &mut second, if !second_failed => match result {
                    Ok(value) => return Ok(value),
                    Err(error) => {
                        second_failed = true;
                        errors.push(error);
                    }
                },
                else => return Err(errors),
            }
        }
    }

    /// A quorum read, as one writes it with a `FuturesUnordered` loop: one operation per entry
    /// of `turns`, all at once; returns the sum of the first `k` outputs as soon as `k`
    /// operations succeeded, and drops the ones still running. A failed operation does not
    /// count; once `k` can no longer be reached the quorum fails at once with every error so
    /// far. (flow's `Parallel(min = k, rest = cancel)` has these rules.)
    pub async fn quorum<F, Fut, E>(op: F, x: u64, turns: &[u32], k: usize) -> Result<u64, Vec<E>>
    where
        F: Fn(u64, u32) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let mut pending: FuturesUnordered<Fut> = turns.iter().map(|&t| op(x, t)).collect();
        let (mut sum, mut done, mut errors) = (0, 0, Vec::new());
        while done < k && done + pending.len() >= k {
            match pending.next().await {
                Some(Ok(value)) => {
                    sum += value;
                    done += 1;
                }
                Some(Err(error)) => errors.push(error),
                None => break,
            }
        }
        // `pending`, with the operations still running, is dropped on return.
        if done == k { Ok(sum) } else { Err(errors) }
    }

    /// The mixed workflow as one would write it by hand with `try_join!`. Where the graph lets a
    /// step start as soon as its own inputs are ready (`after = [pick, invoice]`, the
    /// `max_concurrency = 2` block), the hand-written code waits a little more, as hand-written
    /// code usually does.
    pub async fn mixed<F, Fut, E>(op: F, x: u64) -> Result<u64, E>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let op = &op;
        let request = op(x).await?;
        let (user, cart, prefs, (geo, zone)) =
            tokio::try_join!(op(request), op(request), op(request), async {
                let geo = op(request).await?;
                Ok((geo, op(geo).await?))
            },)?;
        let (tax, (stock, reserve), risk, fraud, _) = tokio::try_join!(
            async {
                let price = op(cart).await?;
                let discount = op(price + prefs).await?;
                op(discount + zone).await
            },
            async {
                let stock = op(cart).await?;
                Ok((stock, op(stock).await?))
            },
            op(user),
            op(user + geo),
            op(prefs),
        )?;
        let total = op(tax + reserve).await?;
        if risk > 0 && fraud < 1_000_000 {
            let charge = op(total).await?;
            tokio::try_join!(op(charge), op(charge), op(charge))?;
        } else {
            op(total).await?;
            op(request).await?;
        }
        let ((label, email), ()) = tokio::try_join!(
            async {
                let (pick, invoice) = tokio::try_join!(op(reserve), op(total))?;
                let (label, email, _) = tokio::try_join!(
                    async {
                        let pack = op(pick).await?;
                        op(pack + zone).await
                    },
                    op(invoice),
                    op(user),
                )?;
                Ok((label, email))
            },
            async {
                tokio::try_join!(op(prefs), op(prefs))?;
                tokio::try_join!(op(prefs), op(prefs))?;
                Ok(())
            },
        )?;
        tokio::try_join!(op(label), op(label), op(email))?;
        let (archive, dash, _, _, _) = tokio::try_join!(
            async {
                let report = op(total).await?;
                op(report).await
            },
            async {
                let metrics = op(x).await?;
                op(metrics).await
            },
            async {
                if prefs % 2 == 1 {
                    op(prefs).await
                } else {
                    op(prefs + 1).await
                }
            },
            op(stock + reserve),
            op(geo),
        )?;
        let (_, _, done) = tokio::try_join!(op(archive), op(dash), op(total + archive))?;
        op(done + zone).await
    }
}

/// The same shapes as dagrs graphs: one dagrs node per operation, one edge per dependency.
/// Each node receives its input over the channel of the edge it reads, runs the operation and
/// broadcasts the result to its successors.
pub mod dag {
    use std::sync::Arc;

    use dagrs::async_trait::async_trait;
    use dagrs::{
        Action, Content, DefaultNode, EnvVar, Graph, InChannels, Node, NodeId, NodeTable,
        OutChannels, Output,
    };

    use super::ops::{imm, yld};

    /// One operation node: reads `input` (or 0 for a source), returns `x + 1`.
    struct Step {
        input: Option<NodeId>,
        yielding: bool,
    }

    #[async_trait]
    impl Action for Step {
        async fn run(
            &self,
            inputs: &mut InChannels,
            outputs: &mut OutChannels,
            _env: Arc<EnvVar>,
        ) -> Output {
            let x = match &self.input {
                Some(id) => inputs
                    .recv_from(id)
                    .await
                    .ok()
                    .and_then(|content| content.into_inner::<u64>())
                    .map_or(0, |value| *value),
                None => 0,
            };
            let result = if self.yielding {
                yld(x).await
            } else {
                imm(x).await
            };
            let Ok(y) = result;
            outputs.broadcast(Content::new(y)).await;
            Output::new(y)
        }
    }

    /// A graph under construction.
    struct Builder {
        table: NodeTable,
        nodes: Vec<DefaultNode>,
        yielding: bool,
    }

    impl Builder {
        fn new(yielding: bool) -> Self {
            Builder {
                table: NodeTable::default(),
                nodes: Vec::new(),
                yielding,
            }
        }

        fn node(&mut self, input: Option<NodeId>) -> NodeId {
            let name = format!("n{}", self.nodes.len());
            let step = Step {
                input,
                yielding: self.yielding,
            };
            let node = DefaultNode::with_action(name, step, &mut self.table);
            let id = node.id();
            self.nodes.push(node);
            id
        }

        fn finish(self, edges: Vec<(NodeId, Vec<NodeId>)>) -> Graph {
            let mut graph = Graph::new();
            for node in self.nodes {
                graph.add_node(node).expect("node ids are unique");
            }
            for (from, to) in edges {
                graph.add_edge(from, to).expect("edges join existing nodes");
            }
            graph.set_env(EnvVar::new(self.table));
            graph
        }
    }

    /// A chain of `n` nodes; returns the graph and the id of the last node.
    pub fn chain(n: usize, yielding: bool) -> (Graph, NodeId) {
        let mut b = Builder::new(yielding);
        let mut edges = Vec::new();
        let mut last = b.node(None);
        for _ in 1..n {
            let next = b.node(Some(last));
            edges.push((last, vec![next]));
            last = next;
        }
        (b.finish(edges), last)
    }

    /// One source, `n - 2` nodes that read it, one sink that runs after all of them and reads
    /// the source.
    pub fn fan(n: usize, yielding: bool) -> (Graph, NodeId) {
        let mut b = Builder::new(yielding);
        let src = b.node(None);
        let middle: Vec<NodeId> = (0..n - 2).map(|_| b.node(Some(src))).collect();
        let sink = b.node(Some(src));
        let mut targets = middle.clone();
        targets.push(sink);
        let mut edges = vec![(src, targets)];
        edges.extend(middle.iter().map(|&m| (m, vec![sink])));
        (b.finish(edges), sink)
    }

    /// `n / width` layers of `width`: every node depends on every node of the layer before and
    /// reads the one in its own column.
    pub fn layered(n: usize, width: usize, yielding: bool) -> (Graph, NodeId) {
        let mut b = Builder::new(yielding);
        let mut edges = Vec::new();
        let mut layer: Vec<NodeId> = (0..width).map(|_| b.node(None)).collect();
        for _ in 1..n / width {
            let next: Vec<NodeId> = layer.iter().map(|&input| b.node(Some(input))).collect();
            edges.extend(layer.iter().map(|&from| (from, next.clone())));
            layer = next;
        }
        (b.finish(edges), layer[0])
    }

    /// The output of node `id` after a run.
    pub fn output(graph: &Graph, id: NodeId) -> Option<u64> {
        graph
            .get_results::<u64>()
            .get(&id)
            .cloned()
            .flatten()
            .map(|value| *value)
    }
}

/// A tokio runtime on the current thread, with the timer (flow's timeouts use it).
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

/// A multi-thread tokio runtime with one worker per core.
pub fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

/// Unwraps a result that cannot fail.
pub fn ok<T>(result: Result<T, Infallible>) -> T {
    let Ok(value) = result;
    value
}

/// A global allocator that counts: `#[global_allocator] static A: Counting = Counting;` in the
/// binaries that report allocations and peak memory.
pub mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Counts allocation calls (`alloc`, `alloc_zeroed`, `realloc`), bytes requested, and the
    /// live and peak heap bytes; the work is the system allocator's.
    pub struct Counting;

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static BYTES: AtomicUsize = AtomicUsize::new(0);
    static LIVE: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);

    fn grow(size: usize) {
        let live = LIVE.fetch_add(size, Relaxed) + size;
        PEAK.fetch_max(live, Relaxed);
    }

    // Safety: every method forwards to `System` with the caller's arguments, so `System`'s
    // guarantees hold; the counters are only bookkeeping.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // Safety: forwarded as is.
            let ptr = unsafe { System.alloc(layout) };
            if !ptr.is_null() {
                CALLS.fetch_add(1, Relaxed);
                BYTES.fetch_add(layout.size(), Relaxed);
                grow(layout.size());
            }
            ptr
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // Safety: forwarded as is.
            let ptr = unsafe { System.alloc_zeroed(layout) };
            if !ptr.is_null() {
                CALLS.fetch_add(1, Relaxed);
                BYTES.fetch_add(layout.size(), Relaxed);
                grow(layout.size());
            }
            ptr
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // Safety: forwarded as is.
            unsafe { System.dealloc(ptr, layout) };
            LIVE.fetch_sub(layout.size(), Relaxed);
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // Safety: forwarded as is.
            let new = unsafe { System.realloc(ptr, layout, new_size) };
            if !new.is_null() {
                CALLS.fetch_add(1, Relaxed);
                BYTES.fetch_add(new_size, Relaxed);
                if new_size >= layout.size() {
                    grow(new_size - layout.size());
                } else {
                    LIVE.fetch_sub(layout.size() - new_size, Relaxed);
                }
            }
            new
        }
    }

    /// The counters at one moment.
    #[derive(Clone, Copy, Debug)]
    pub struct Snapshot {
        /// Allocation calls so far.
        pub calls: usize,
        /// Bytes requested so far.
        pub bytes: usize,
        /// Bytes allocated and not freed.
        pub live: usize,
        /// The most bytes live at once since the last [`reset_peak`].
        pub peak: usize,
    }

    /// Reads the counters.
    pub fn snapshot() -> Snapshot {
        Snapshot {
            calls: CALLS.load(Relaxed),
            bytes: BYTES.load(Relaxed),
            live: LIVE.load(Relaxed),
            peak: PEAK.load(Relaxed),
        }
    }

    /// Starts a new peak from the bytes live now.
    pub fn reset_peak() {
        PEAK.store(LIVE.load(Relaxed), Relaxed);
    }

    /// What one piece of work allocated.
    #[derive(Clone, Copy, Debug)]
    pub struct Usage {
        /// Allocation calls.
        pub calls: usize,
        /// Bytes requested.
        pub bytes: usize,
        /// The most bytes it held at once.
        pub peak: usize,
    }

    /// Runs `work` and reports what it allocated.
    pub fn measure<R>(work: impl FnOnce() -> R) -> (R, Usage) {
        reset_peak();
        let before = snapshot();
        let result = work();
        let after = snapshot();
        let usage = Usage {
            calls: after.calls - before.calls,
            bytes: after.bytes - before.bytes,
            peak: after.peak - before.live,
        };
        (result, usage)
    }
}
