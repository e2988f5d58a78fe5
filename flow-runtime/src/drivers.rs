//! The drivers of nest nodes: the futures that run a `ForEach`'s instances and a `Loop`'s
//! iterations, in the run's task.
//!
//! A driver gets the node's [`NestCtx`] and a *body*: a closure that makes one instance's future
//! from its item (a `ForEach`) or from the previous iteration's output (a `Loop`), and the
//! instance's [`RunSetup`]. Each instance is a nested run of the body's graph; its
//! [`Outcome`] goes through [`NestCtx`] (which folds its report into the node's summary) and its
//! state is dropped the moment it ends. Nothing is spawned.
//!
//! A `ForEach` keeps its live instances in *places*: pinned slots allocated in chunks as the
//! number of instances in flight grows, never more than `max_concurrency` of them, each with an
//! entry in a [`WakeSet`] so that a poll of the driver polls only the instances woken since
//! the last one (as the scheduler does with its nodes). A place is reused by the next item once
//! its instance ended: a `ForEach` over a million items with `max_concurrency = 64` holds 64
//! instances, the outputs of those in flight and the output `Vec` (no heap at all for a `()`
//! output).
//!
//! Bodies are `Fn(Item, RunSetup) -> Fut`, not `AsyncFn`: a future generic over an `AsyncFn`
//! whose closure captures a reference is not `Send` for rustc ("implementation of `Send` is
//! not general enough"), so a workflow with a `ForEach` could not be spawned.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;

use crate::error::{NodeError, WorkflowError};
use crate::nest_ctx::NestCtx;
use crate::report::Outcome;
use crate::scheduler::RunSetup;
use crate::slot::Slot;
use crate::wake::WakeSet;

/// The options of a `ForEach`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForEachConfig {
    /// At most this many instances in flight; 0 for no limit.
    pub max_concurrency: usize,
    /// Complete once this many instances completed (0: once every instance ended). A `min`
    /// above the number of items acts as 0.
    pub min: usize,
    /// With `min`: drop the instances still running when the `min`-th completes (`rest =
    /// cancel`). Otherwise (`rest = run`) every item still gets its instance and the node
    /// ends when the last one ended; its output is still the first `min` outputs.
    pub rest_cancel: bool,
}

impl Default for ForEachConfig {
    /// No limit, every instance, `rest = cancel` (the DSL's defaults).
    fn default() -> Self {
        ForEachConfig {
            max_concurrency: 0,
            min: 0,
            rest_cancel: true,
        }
    }
}

/// The options of a `Loop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopConfig {
    /// At most this many iterations.
    pub max: u32,
    /// Past `max`, end with the last iteration's output (`on_max = stop`) instead of failing
    /// with [`NodeError::LoopExhausted`].
    pub stop_at_max: bool,
}

/// Where a `ForEach` takes its items: `IntoIterator::into_iter` of the expression, behind a
/// trait of its own for a clear error on a value that cannot be iterated.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be iterated by ForEach",
    label = "not an iterator or a collection",
    note = "ForEach takes any `IntoIterator` (a `Vec`, a slice with `.iter()`, a range, an iterator); for a stream write `ForEach(item in stream expr)`"
)]
pub trait ForEachSource {
    /// The items.
    type Item;
    /// The iterator over them.
    type IntoIter: Iterator<Item = Self::Item>;
    /// The iterator.
    fn into_for_each(self) -> Self::IntoIter;
}

impl<T: IntoIterator> ForEachSource for T {
    type Item = T::Item;
    type IntoIter = T::IntoIter;

    #[inline]
    fn into_for_each(self) -> T::IntoIter {
        self.into_iter()
    }
}

/// The iterator of a `ForEach`'s expression.
#[inline]
pub fn for_each_source<S: ForEachSource>(source: S) -> S::IntoIter {
    source.into_for_each()
}

/// Where a `ForEach(item in stream expr)` takes its items: any [`Stream`], behind a trait of
/// its own for a clear error on a value that is not one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a stream ForEach can take items from",
    label = "not a `Stream`",
    note = "`ForEach(item in stream expr)` takes a `futures_core::Stream`; for a collection or an iterator drop `stream`"
)]
pub trait ForEachStream: Stream {}

impl<S: Stream> ForEachStream for S {}

/// The stream of a `ForEach(item in stream expr)`.
#[inline]
pub fn for_each_stream_source<S: ForEachStream>(source: S) -> S {
    source
}

/// Puts a nest node's output in its slot: `complete` for a driver's result, whose error is
/// already the node's.
#[inline]
pub fn complete_nest<T>(slot: &Slot<T>, result: Result<T, NodeError>) -> Result<(), NodeError> {
    result.map(|value| slot.put(value))
}

/// Runs `body` once per item of `items`, at most `config.max_concurrency` at a time, in the
/// caller's task. Ends with the instances' outputs in input order (with `min`, the outputs of
/// the first `min` instances that completed, in input order). The first instance that fails
/// before then fails the node with [`NodeError::Workflow`], dropping the live instances.
///
/// Cancel safety: dropping the future drops every live instance once, each counted withdrawn.
pub async fn for_each<I, B, Fut, O>(
    ctx: NestCtx,
    items: I,
    config: ForEachConfig,
    body: B,
) -> Result<Vec<O>, NodeError>
where
    I: IntoIterator,
    B: Fn(I::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
{
    drive::<_, _, _, O, FailFast>(ctx, FromIter(items.into_iter()), config, body).await
}

/// As [`for_each`], but a failed instance fails only itself: every instance runs (until `min`
/// of them completed), and the output holds each one's result, in input order. The node fails
/// only if it cannot run.
pub async fn for_each_collect<I, B, Fut, O>(
    ctx: NestCtx,
    items: I,
    config: ForEachConfig,
    body: B,
) -> Result<Vec<Result<O, WorkflowError>>, NodeError>
where
    I: IntoIterator,
    B: Fn(I::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
{
    drive::<_, _, _, O, Collect>(ctx, FromIter(items.into_iter()), config, body).await
}

/// As [`for_each`] over the items of a stream: an instance starts as its item arrives (and a
/// place is free); the node ends when the stream ended and every live instance ended.
pub async fn for_each_stream<S, B, Fut, O>(
    ctx: NestCtx,
    stream: S,
    config: ForEachConfig,
    body: B,
) -> Result<Vec<O>, NodeError>
where
    S: Stream,
    B: Fn(S::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
{
    drive::<_, _, _, O, FailFast>(ctx, FromStream(stream), config, body).await
}

/// As [`for_each_collect`] over the items of a stream (see [`for_each_stream`]).
pub async fn for_each_stream_collect<S, B, Fut, O>(
    ctx: NestCtx,
    stream: S,
    config: ForEachConfig,
    body: B,
) -> Result<Vec<Result<O, WorkflowError>>, NodeError>
where
    S: Stream,
    B: Fn(S::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
{
    drive::<_, _, _, O, Collect>(ctx, FromStream(stream), config, body).await
}

/// As [`for_each`] for `min` with `rest = run`, where the node completes before its driver
/// ends: at the `min`-th completed instance, `put` gets the output (the `min` outputs, in input
/// order) and the run that holds the node is told ([`NestCtx`]), so the node's successors
/// start while the other instances run on in the run's task. A failure after then is in the
/// node's report and fails nothing. Ends when the last instance ended (or, with fewer
/// completions than `min`, puts what completed then).
pub async fn for_each_into<I, B, Fut, O, P>(
    ctx: NestCtx,
    items: I,
    config: ForEachConfig,
    body: B,
    put: P,
) -> Result<(), NodeError>
where
    I: IntoIterator,
    B: Fn(I::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
    P: FnOnce(Vec<O>),
{
    drive_into::<_, _, _, O, FailFast, _>(ctx, FromIter(items.into_iter()), config, body, put).await
}

/// [`for_each_collect`] as [`for_each_into`] runs [`for_each`].
pub async fn for_each_collect_into<I, B, Fut, O, P>(
    ctx: NestCtx,
    items: I,
    config: ForEachConfig,
    body: B,
    put: P,
) -> Result<(), NodeError>
where
    I: IntoIterator,
    B: Fn(I::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
    P: FnOnce(Vec<Result<O, WorkflowError>>),
{
    drive_into::<_, _, _, O, Collect, _>(ctx, FromIter(items.into_iter()), config, body, put).await
}

/// [`for_each_stream`] as [`for_each_into`] runs [`for_each`].
pub async fn for_each_stream_into<S, B, Fut, O, P>(
    ctx: NestCtx,
    stream: S,
    config: ForEachConfig,
    body: B,
    put: P,
) -> Result<(), NodeError>
where
    S: Stream,
    B: Fn(S::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
    P: FnOnce(Vec<O>),
{
    drive_into::<_, _, _, O, FailFast, _>(ctx, FromStream(stream), config, body, put).await
}

/// [`for_each_stream_collect`] as [`for_each_into`] runs [`for_each`].
pub async fn for_each_stream_collect_into<S, B, Fut, O, P>(
    ctx: NestCtx,
    stream: S,
    config: ForEachConfig,
    body: B,
    put: P,
) -> Result<(), NodeError>
where
    S: Stream,
    B: Fn(S::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
    P: FnOnce(Vec<Result<O, WorkflowError>>),
{
    drive_into::<_, _, _, O, Collect, _>(ctx, FromStream(stream), config, body, put).await
}

/// An until-loop: runs `body` with the previous iteration's output (`None` for iteration 0)
/// until it says it is done, at least once and at most `config.max` times. Ends with the last
/// iteration's output. A failed iteration fails the node with [`NodeError::Workflow`]; `max`
/// iterations without `done` fail it with [`NodeError::LoopExhausted`], unless
/// `config.stop_at_max` (then the last output).
///
/// Cancel safety: dropping the future drops the running iteration, counted withdrawn.
pub async fn repeat_until<B, Fut, O>(
    ctx: NestCtx,
    config: LoopConfig,
    body: B,
) -> Result<O, NodeError>
where
    B: Fn(Option<O>, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<(O, bool)>>,
{
    let mut prev = None;
    let solo = solo();
    let (first, _) = first_iteration(&ctx, solo);
    for iteration in first..u64::from(config.max) {
        let (output, done) = iteration_of(&ctx, iteration, body(prev, ctx.instance(iteration)))
            .await
            .map_err(|error| NodeError::Workflow(Box::new(error)))?;
        if done || solo == Some(iteration) {
            return Ok(output);
        }
        prev = Some(output);
    }
    match prev {
        Some(last) if config.stop_at_max => Ok(last),
        _ => Err(NodeError::LoopExhausted { max: config.max }),
    }
}

/// A while-loop: before each iteration, `test` reads the previous iteration's output (`None`
/// before the first); while it holds, `body` runs with that output, at most `config.max`
/// times. Ends with the last iteration's output (`None` when it ran none). A failed iteration
/// fails the node with [`NodeError::Workflow`]; a test that still holds after `max` iterations
/// fails it with [`NodeError::LoopExhausted`], unless `config.stop_at_max` (then the last
/// output).
///
/// Cancel safety: dropping the future drops the running iteration, counted withdrawn.
pub async fn repeat_while<T, B, Fut, O>(
    ctx: NestCtx,
    config: LoopConfig,
    mut test: T,
    body: B,
) -> Result<Option<O>, NodeError>
where
    T: FnMut(Option<&O>) -> bool,
    B: Fn(Option<O>, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
{
    let mut prev = None;
    let solo = solo();
    let (first, restored) = first_iteration(&ctx, solo);
    for iteration in first..u64::from(config.max) {
        // An iteration restored from the store passed its test when it ran.
        let tested = restored && iteration == first;
        if !tested && !test(prev.as_ref()) {
            return Ok(prev);
        }
        let output = iteration_of(&ctx, iteration, body(prev, ctx.instance(iteration)))
            .await
            .map_err(|error| NodeError::Workflow(Box::new(error)))?;
        if solo == Some(iteration) {
            return Ok(Some(output));
        }
        prev = Some(output);
    }
    if config.stop_at_max || !test(prev.as_ref()) {
        Ok(prev)
    } else {
        Err(NodeError::LoopExhausted { max: config.max })
    }
}

/// The iteration a loop starts at, and whether its end is restored from the store (its
/// instance future gives the stored end back without running the body):
/// - for a worker executing iteration `k` alone (a task of a distributed run), the one
///   before it, whose output is `k`'s `prev` (restored when `k > 0`);
/// - for a resumed durable run, the last iteration that ended before it stopped: a loop's
///   decided state is its last iteration's output, so the iterations before it are not
///   walked through again (and a store does not load their ends);
/// - else 0.
fn first_iteration(ctx: &NestCtx, solo: Option<u64>) -> (u64, bool) {
    match solo {
        Some(k) => (k.saturating_sub(1), k > 0),
        None => resumed_iteration(ctx).map_or((0, false), |k| (k, true)),
    }
}

/// The iteration a resumed durable run's loop goes on from
/// ([`crate::attempt::resumed_iteration`]); the iterations before it are counted in the
/// node's report as they were: started and succeeded.
#[cfg(feature = "durable")]
fn resumed_iteration(ctx: &NestCtx) -> Option<u64> {
    let k = crate::attempt::resumed_iteration(ctx.node, ctx.index)?;
    ctx.restored_before(k);
    Some(k)
}

/// Without durable runs, no loop is resumed.
#[cfg(not(feature = "durable"))]
fn resumed_iteration(_: &NestCtx) -> Option<u64> {
    None
}

/// Runs one loop iteration to its end and hands its outcome to the ctx; dropped before then,
/// counts it withdrawn.
async fn iteration_of<T>(
    ctx: &NestCtx,
    index: u64,
    instance: impl Future<Output = Outcome<T>>,
) -> Result<T, WorkflowError> {
    /// Counts the iteration withdrawn if it is dropped before it ended.
    struct Live<'a> {
        ctx: &'a NestCtx,
        index: u64,
        ended: bool,
    }
    impl Drop for Live<'_> {
        fn drop(&mut self) {
            if !self.ended {
                self.ctx.withdrawn(self.index);
            }
        }
    }
    let mut live = Live {
        ctx,
        index,
        ended: false,
    };
    let outcome = instance.await;
    live.ended = true;
    ctx.ended(index, outcome)
}

/// What a `ForEach` keeps of each instance, and what a failed instance does.
trait Keep<O> {
    /// An instance's entry in the node's output.
    type Out;
    /// A completed instance's entry.
    fn ok(output: O) -> Self::Out;
    /// A failed instance's entry (`collect`), or its error back: it fails the node
    /// (`fail_fast`).
    fn failed(error: WorkflowError) -> Result<Self::Out, WorkflowError>;
}

/// `on_failure = fail_fast`.
struct FailFast;

impl<O> Keep<O> for FailFast {
    type Out = O;

    #[inline]
    fn ok(output: O) -> O {
        output
    }

    #[inline]
    fn failed(error: WorkflowError) -> Result<O, WorkflowError> {
        Err(error)
    }
}

/// `on_failure = collect`.
struct Collect;

impl<O> Keep<O> for Collect {
    type Out = Result<O, WorkflowError>;

    #[inline]
    fn ok(output: O) -> Self::Out {
        Ok(output)
    }

    #[inline]
    fn failed(error: WorkflowError) -> Result<Self::Out, WorkflowError> {
        Ok(Err(error))
    }
}

/// Where a `ForEach` takes its items: an iterator or a stream.
trait Items {
    type Item;
    /// The next item; `Ready(None)` once there is none left.
    fn poll_item(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>>;
    /// A lower bound of the items left.
    fn at_least(&self) -> usize;
    /// The items come from a stream (read once, in the process that drives the nest). Read
    /// by durable runs alone.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    const STREAM: bool = false;
    /// Drops the next `n` items, for a worker's one instance (`Iterator::nth`: O(1) for a
    /// range or a `Vec`); `false` when there were fewer. A stream is never skipped (its
    /// instances run where the run is decided, see `keep_streams_local`): it says it has
    /// none.
    fn skip(self: Pin<&mut Self>, n: u64) -> bool {
        let _ = n;
        false
    }
}

struct FromIter<I>(I);

impl<I: Iterator> Items for FromIter<I> {
    type Item = I::Item;

    #[inline]
    fn poll_item(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
        // SAFETY: the iterator is never pinned structurally: it is only called through `&mut`.
        Poll::Ready(unsafe { self.get_unchecked_mut() }.0.next())
    }

    fn at_least(&self) -> usize {
        self.0.size_hint().0
    }

    fn skip(self: Pin<&mut Self>, n: u64) -> bool {
        // SAFETY: as in `poll_item`.
        let items = &mut unsafe { self.get_unchecked_mut() }.0;
        let mut left = n;
        while left > 0 {
            let step = usize::try_from(left).unwrap_or(usize::MAX);
            if items.nth(step - 1).is_none() {
                return false;
            }
            left -= step as u64;
        }
        true
    }
}

pin_project_lite::pin_project! {
    struct FromStream<S> {
        #[pin]
        stream: S,
    }
}

#[allow(non_snake_case)]
fn FromStream<S>(stream: S) -> FromStream<S> {
    FromStream { stream }
}

impl<S: Stream> Items for FromStream<S> {
    const STREAM: bool = true;

    type Item = S::Item;

    #[inline]
    fn poll_item(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.project().stream.poll_next(cx)
    }

    fn at_least(&self) -> usize {
        self.stream.size_hint().0
    }
}

/// The size of the first chunk of places when nothing tells how many are needed.
const FIRST_CHUNK: usize = 4;

/// The polls of instances one poll of the driver makes before it yields to its task.
const BUDGET: usize = 1024;

/// One chunk of places: pinned instance futures, their item indices and their wakers.
struct Chunk<F> {
    /// Never moved while an element is `Some`: the elements are pinned.
    futures: Pin<Box<[Option<F>]>>,
    indices: Box<[u64]>,
    wakes: Arc<WakeSet>,
}

impl<F: Future> Chunk<F> {
    fn new(len: usize) -> Chunk<F> {
        Chunk {
            futures: Box::into_pin((0..len).map(|_| None).collect()),
            indices: vec![0; len].into_boxed_slice(),
            wakes: WakeSet::new(len),
        }
    }

    /// The place `at`, pinned.
    #[inline]
    fn place(&mut self, at: usize) -> Pin<&mut Option<F>> {
        place(&mut self.futures, at)
    }
}

/// Place `at` of `futures`, pinned.
#[inline]
fn place<F>(futures: &mut Pin<Box<[Option<F>]>>, at: usize) -> Pin<&mut Option<F>> {
    // SAFETY: nothing is moved out of the slice; the element is handed out pinned, and an
    // element is only replaced through `Pin::set`, which drops the old value in place.
    unsafe { futures.as_mut().map_unchecked_mut(|s| &mut s[at]) }
}

/// The live instances of a `ForEach`, in chunks of places that grow up to the limit.
struct Places<F> {
    chunks: Vec<Chunk<F>>,
    /// Free places: `(chunk, place)`.
    free: Vec<(u32, u32)>,
    /// At most this many places.
    limit: usize,
    /// Places allocated, over all chunks.
    allocated: usize,
    live: usize,
}

impl<F: Future> Places<F> {
    fn new(limit: usize) -> Places<F> {
        Places {
            chunks: Vec::new(),
            free: Vec::new(),
            limit,
            allocated: 0,
            live: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.live >= self.limit
    }

    /// Starts instance `index` in a free place (a new chunk if none is free; the caller
    /// checked [`Places::is_full`]), its future made by `make` right there, woken so that the
    /// next take polls it.
    #[inline]
    fn insert(&mut self, index: u64, wanted: usize, make: impl FnOnce() -> F) {
        if self.free.is_empty() {
            self.grow(wanted);
        }
        let Some((c, at)) = self.free.pop() else {
            return;
        };
        let chunk = &mut self.chunks[c as usize];
        chunk.indices[at as usize] = index;
        let place = chunk.place(at as usize);
        // SAFETY: a free place holds `None`, which is overwritten without moving any pinned
        // value. Written in place rather than through `Pin::set(Some(make()))`: instance
        // futures are large (a nested run, over a kilobyte) and each move is a copy.
        unsafe { *place.get_unchecked_mut() = Some(make()) };
        chunk.wakes.waker(at).wake_by_ref();
        self.live += 1;
    }

    /// Adds a chunk: as large as what is allocated (doubling), at least `wanted` (what the
    /// items promise), within the limit.
    fn grow(&mut self, wanted: usize) {
        let len = self
            .allocated
            .max(wanted)
            .max(FIRST_CHUNK)
            .min(self.limit - self.allocated)
            .min(u32::MAX as usize - 1);
        let c = self.chunks.len() as u32;
        self.chunks.push(Chunk::new(len));
        self.allocated += len;
        // Lowest places first.
        self.free.extend((0..len as u32).rev().map(|at| (c, at)));
    }

    /// Drops every live instance, telling `withdrawn` each one's index.
    fn clear(&mut self, mut withdrawn: impl FnMut(u64)) {
        for (c, chunk) in self.chunks.iter_mut().enumerate() {
            for at in 0..chunk.indices.len() {
                let mut place = chunk.place(at);
                if place.is_some() {
                    place.set(None);
                    withdrawn(chunk.indices[at]);
                    self.free.push((c as u32, at as u32));
                }
            }
        }
        self.live = 0;
    }
}

/// A `ForEach`'s outputs, in input order, held in memory that grows with the outputs and the
/// instances in flight, not with the items: the outputs of the instances that ended in order
/// (every instance before them ended too) are in `done`; those of the instances started since
/// wait in `window`, one entry per instance from the first that has not ended. With a
/// zero-sized output (`()`), `done` allocates nothing, so a `ForEach` over a million items
/// holds a window about `max_concurrency` long.
struct Outputs<Out> {
    done: Vec<Out>,
    /// Entry `i` is instance `done.len() + i`'s output, once it ended.
    window: VecDeque<Option<Out>>,
    /// The index of `window[0]`: every instance before it ended with an output.
    first: u64,
}

impl<Out> Default for Outputs<Out> {
    fn default() -> Self {
        Outputs::new()
    }
}

impl<Out> Outputs<Out> {
    fn new() -> Outputs<Out> {
        Outputs {
            done: Vec::new(),
            window: VecDeque::new(),
            first: 0,
        }
    }

    /// The next instance started.
    #[inline]
    fn started(&mut self) {
        self.window.push_back(None);
    }

    /// Instance `index` (started, not yet ended) ended with `output`.
    #[inline]
    fn ended(&mut self, index: u64, output: Out) {
        let at = index.checked_sub(self.first).map(|at| at as usize);
        if let Some(entry) = at.and_then(|at| self.window.get_mut(at)) {
            *entry = Some(output);
        }
        while let Some(Some(_)) = self.window.front() {
            if let Some(Some(output)) = self.window.pop_front() {
                self.done.push(output);
            }
            self.first += 1;
        }
    }

    /// The outputs kept, in input order; the instances that gave none are left out.
    fn finish(self) -> Vec<Out> {
        let mut outputs = self.done;
        outputs.extend(self.window.into_iter().flatten());
        outputs
    }
}

/// The state of one `ForEach` driver.
struct Each<'c, F, Out> {
    ctx: &'c NestCtx,
    places: Places<F>,
    /// The node's output so far, in input order (see [`Outputs`]).
    outputs: Outputs<Out>,
    next: u64,
    exhausted: bool,
    /// Instances that completed.
    completed: usize,
    min: usize,
    rest_cancel: bool,
    /// `min` instances completed: the output is settled; the rest only run out.
    settled: bool,
    /// `rest = run` through a `*_into` entry: at the settle, the output moves to `early`, for
    /// the driver to put in the node's slot while the rest runs.
    linger: bool,
    early: Option<Vec<Out>>,
    /// Woken places taken from a chunk, reused across polls.
    woken: Vec<u32>,
    /// A worker executes instance `solo` alone, as a task of a distributed run: the items
    /// before it are skipped, none after it is taken.
    solo: Option<u64>,
}

/// The instance a worker executes alone, as a task of a distributed run, when the nest node
/// being polled is that task's ([`crate::attempt::solo`]).
#[cfg(feature = "durable")]
fn solo() -> Option<u64> {
    crate::attempt::solo()
}

/// Without durable runs, no instance is executed alone.
#[cfg(not(feature = "durable"))]
fn solo() -> Option<u64> {
    None
}

/// A `ForEach` over a stream keeps its instances in the process that decides a distributed
/// run: a worker executing one instance would have to read the stream again up to its item.
#[cfg(feature = "durable")]
fn keep_streams_local<S: Items>(ctx: &NestCtx) {
    if S::STREAM {
        crate::attempt::keep_local(ctx.index);
    }
}

/// Without durable runs, instances run where their nest runs.
#[cfg(not(feature = "durable"))]
fn keep_streams_local<S: Items>(_: &NestCtx) {}

impl<F, Out> Drop for Each<'_, F, Out> {
    fn drop(&mut self) {
        // Dropping the driver (cancelled, withdrawn, or the run dropped): the live instances
        // are cut short. The places drop them right after, each once.
        for chunk in &self.places.chunks {
            for (at, future) in chunk.futures.iter().enumerate() {
                if future.is_some() {
                    self.ctx.withdrawn(chunk.indices[at]);
                }
            }
        }
    }
}

/// The one `ForEach` driver under the four entry points.
async fn drive<S, B, Fut, O, K>(
    ctx: NestCtx,
    items: S,
    config: ForEachConfig,
    body: B,
) -> Result<Vec<K::Out>, NodeError>
where
    S: Items,
    B: Fn(S::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
    K: Keep<O>,
{
    let mut items = pin!(items);
    keep_streams_local::<S>(&ctx);
    let mut each = Each::<Fut, K::Out>::new(&ctx, &config, false);
    poll_fn(|cx| each.poll::<_, _, O, K>(cx, items.as_mut(), &body)).await
}

/// The driver under the `*_into` entries: as [`drive`], but with `min` and `rest = run` the
/// output goes to `put` at the settle and the node is told it completed ([`NestCtx::settle`]).
async fn drive_into<S, B, Fut, O, K, P>(
    ctx: NestCtx,
    items: S,
    config: ForEachConfig,
    body: B,
    put: P,
) -> Result<(), NodeError>
where
    S: Items,
    B: Fn(S::Item, RunSetup) -> Fut,
    Fut: Future<Output = Outcome<O>>,
    K: Keep<O>,
    P: FnOnce(Vec<K::Out>),
{
    let mut items = pin!(items);
    keep_streams_local::<S>(&ctx);
    let mut each = Each::<Fut, K::Out>::new(&ctx, &config, config.min > 0 && !config.rest_cancel);
    let mut put = Some(put);
    let outputs = poll_fn(|cx| {
        let poll = each.poll::<_, _, O, K>(cx, items.as_mut(), &body);
        if let Some(early) = each.early.take()
            && let Some(put) = put.take()
        {
            put(early);
            ctx.settle();
        }
        poll
    })
    .await?;
    if let Some(put) = put {
        put(outputs);
    }
    Ok(())
}

impl<'c, F: Future, Out> Each<'c, F, Out> {
    /// A driver with no instance started yet; `linger`: the node completes at the `min`-th
    /// completed instance while the rest run on (`rest = run` through a `*_into` entry).
    fn new(ctx: &'c NestCtx, config: &ForEachConfig, linger: bool) -> Self {
        Each {
            ctx,
            places: Places::new(match config.max_concurrency {
                0 => usize::MAX,
                n => n,
            }),
            outputs: Outputs::new(),
            next: 0,
            exhausted: false,
            completed: 0,
            min: config.min,
            rest_cancel: config.rest_cancel,
            settled: false,
            linger,
            early: None,
            woken: Vec::new(),
            solo: solo(),
        }
    }
}

impl<F, Out> Each<'_, F, Out>
where
    F: Future,
{
    fn poll<S, B, O, K>(
        &mut self,
        cx: &mut Context<'_>,
        mut items: Pin<&mut S>,
        body: &B,
    ) -> Poll<Result<Vec<Out>, NodeError>>
    where
        S: Items,
        B: Fn(S::Item, RunSetup) -> F,
        F: Future<Output = Outcome<O>>,
        K: Keep<O, Out = Out>,
    {
        let mut budget = BUDGET;
        loop {
            if self.ctx.poll_completing(cx).is_ready() {
                return Poll::Ready(Ok(self.finish()));
            }
            let mut progress = false;
            // A worker's one instance: the items before it are dropped.
            if let Some(solo) = self.solo
                && self.next < solo
            {
                // Fewer items than that: the instance has none (the task fails so).
                self.exhausted = !items.as_mut().skip(solo - self.next);
                self.next = solo;
                self.outputs.first = solo;
            }
            // Start instances while there are places and items.
            while !self.exhausted && !self.places.is_full() {
                match items.as_mut().poll_item(cx) {
                    Poll::Ready(Some(item)) => {
                        let index = self.next;
                        self.next += 1;
                        // A worker's one instance: no item after it is taken.
                        self.exhausted |= self.solo.is_some();
                        if !self.settled {
                            self.outputs.started();
                        }
                        let wanted = items.at_least().saturating_add(1);
                        let ctx = self.ctx;
                        self.places
                            .insert(index, wanted, || body(item, ctx.instance(index)));
                        progress = true;
                    }
                    Poll::Ready(None) => self.exhausted = true,
                    Poll::Pending => break,
                }
            }
            // Poll the woken instances.
            for c in 0..self.places.chunks.len() {
                let chunk = &self.places.chunks[c];
                chunk.wakes.register(cx.waker());
                chunk.wakes.take(&mut self.woken);
                let mut woken = std::mem::take(&mut self.woken);
                let mut end = None;
                for &at in &woken {
                    progress = true;
                    budget = budget.saturating_sub(1);
                    end = self.poll_place::<O, K>(c, at);
                    if end.is_some() {
                        break;
                    }
                }
                woken.clear();
                self.woken = woken;
                if let Some(end) = end {
                    return Poll::Ready(end);
                }
            }
            if self.exhausted && self.places.live == 0 {
                return Poll::Ready(Ok(self.finish()));
            }
            if !progress {
                return Poll::Pending;
            }
            if budget == 0 {
                // Instances that keep waking themselves: let the task's other work run.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    }

    /// Polls place `at` of chunk `c` if it holds an instance; `Some` when that ended the node.
    fn poll_place<O, K>(&mut self, c: usize, at: u32) -> Option<Result<Vec<Out>, NodeError>>
    where
        F: Future<Output = Outcome<O>>,
        K: Keep<O, Out = Out>,
    {
        let chunk = &mut self.places.chunks[c];
        let index = chunk.indices[at as usize];
        chunk.wakes.polling(at);
        let waker = chunk.wakes.waker(at);
        let mut place = place(&mut chunk.futures, at as usize);
        let future = place.as_mut().as_pin_mut()?;
        let outcome = match future.poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => return None,
        };
        // The instance's state is freed now.
        place.set(None);
        self.places.free.push((c as u32, at));
        self.places.live -= 1;
        let result = self.ctx.ended(index, outcome);
        match result {
            Ok(output) => {
                self.completed += 1;
                if !self.settled {
                    self.outputs.ended(index, K::ok(output));
                    if self.min > 0 && self.completed == self.min {
                        self.settled = true;
                        if self.rest_cancel {
                            return Some(Ok(self.finish()));
                        }
                        if self.linger {
                            self.early = Some(std::mem::take(&mut self.outputs).finish());
                        }
                    }
                }
            }
            Err(error) if self.settled => drop(error),
            Err(error) => match K::failed(error) {
                Ok(kept) => self.outputs.ended(index, kept),
                Err(error) => {
                    self.withdraw_live();
                    return Some(Err(NodeError::Workflow(Box::new(error))));
                }
            },
        }
        None
    }

    /// Drops the live instances, each counted withdrawn.
    fn withdraw_live(&mut self) {
        let ctx = self.ctx;
        self.places.clear(|index| ctx.withdrawn(index));
    }

    /// Ends the node: drops what still runs and hands out the outputs kept, in input order.
    fn finish(&mut self) -> Vec<Out> {
        self.withdraw_live();
        std::mem::take(&mut self.outputs).finish()
    }
}

#[cfg(test)]
mod tests;
