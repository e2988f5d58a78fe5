#!/usr/bin/env python3
"""Standalone compile-time experiments for flow's `workflow!` expansion.

    python3 benches/gen/typeck_shapes.py VARIANT SHAPE N [--slots ..] [--ty u64|string] > /tmp/w.rs
    time rustc --edition 2024 --crate-type lib --emit=metadata -o /dev/null /tmp/w.rs

e.g. VARIANT `base` (one expression with every slot declared on top) or `tt_lets` with
`--slots inter` (the shape `workflow!` generates: one `let` per node, each slot right before its
producer; `--slots interarena` puts the slots in a heap arena; docs/performance.md, "Compile
time"); SHAPE chain, fan or layered. The mock runtime mirrors the `Pair`/`Op`/`BoxedOp`
signatures, which is what the type checker sees of the generated code; the compile-time tables in
docs/performance.md came from it.

Writes one Rust file (edition 2024, no deps): a mock of flowdag-runtime (same signatures as
flow-runtime/src/nodes.rs and the scheduler) and one generated workflow of N nodes in VARIANT.
"""

import argparse
import sys

FINAL = "exec"
BUILDER = False

# --------------------------------------------------------------------------------------------
# Mock runtime. `{PAIR_NEW_BOUND}` / `{OP_NEW_BOUND}` are switched off by the `nobound*`
# variants; the rest is shared.
RUNTIME = r'''
#![allow(unused, clippy::all)]
pub mod rt {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::OnceLock;
    use std::task::{Context, Poll};
    use std::error::Error as StdError;

    #[derive(Debug)]
    pub enum NodeError {
        Failed(Box<dyn StdError + Send + Sync + 'static>),
        Panicked(String),
        Aborted { cause: &'static str },
    }
    #[derive(Debug)]
    pub struct NodeFailure { pub node: &'static str, pub error: NodeError }

    pub trait IntoNodeResult {
        type Ok;
        fn into_node_result(self) -> Result<Self::Ok, NodeError>;
    }
    impl<T, E> IntoNodeResult for Result<T, E>
    where
        E: StdError + Send + Sync + 'static,
    {
        type Ok = T;
        #[inline]
        fn into_node_result(self) -> Result<T, NodeError> {
            self.map_err(|e| NodeError::Failed(Box::new(e)))
        }
    }

    pub struct RunState { pub done: Vec<bool> }
    pub struct Graph { pub len: usize, pub name: &'static str }
    #[derive(Default)]
    pub struct RunOptions { pub limit: Option<usize> }

    pub trait Nodes {
        const LEN: usize;
        fn start(self: Pin<&mut Self>, i: usize);
        fn poll_node(self: Pin<&mut Self>, i: usize, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>>;
        fn stop(self: Pin<&mut Self>, i: usize);
        fn decide(self: Pin<&mut Self>, i: usize, state: &RunState) -> bool;
    }

    pub struct Pair<A, B> { left: A, right: B }
    impl<A, B> Pair<A, B> {
        fn project(self: Pin<&mut Self>) -> (Pin<&mut A>, Pin<&mut B>) {
            unsafe {
                let this = self.get_unchecked_mut();
                (Pin::new_unchecked(&mut this.left), Pin::new_unchecked(&mut this.right))
            }
        }
    }
    impl<A, B> Pair<A, B> where {PAIR_NEW_BOUND} {
        pub const fn new(left: A, right: B) -> Self { Pair { left, right } }
    }
    impl<A: Nodes, B: Nodes> Nodes for Pair<A, B> {
        const LEN: usize = A::LEN + B::LEN;
        fn start(self: Pin<&mut Self>, i: usize) {
            let (l, r) = self.project();
            if i < A::LEN { l.start(i) } else { r.start(i - A::LEN) }
        }
        fn poll_node(self: Pin<&mut Self>, i: usize, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
            let (l, r) = self.project();
            if i < A::LEN { l.poll_node(i, cx) } else { r.poll_node(i - A::LEN, cx) }
        }
        fn stop(self: Pin<&mut Self>, i: usize) {
            let (l, r) = self.project();
            if i < A::LEN { l.stop(i) } else { r.stop(i - A::LEN) }
        }
        fn decide(self: Pin<&mut Self>, i: usize, s: &RunState) -> bool {
            let (l, r) = self.project();
            if i < A::LEN { l.decide(i, s) } else { r.decide(i - A::LEN, s) }
        }
    }

    /// Variant tuple*: a pair of node sets is a plain 2-tuple (no generic constructor path).
    impl<A: Nodes, B: Nodes> Nodes for (A, B) {
        const LEN: usize = A::LEN + B::LEN;
        fn start(self: Pin<&mut Self>, i: usize) {
            let this = unsafe { self.get_unchecked_mut() };
            let (l, r) = unsafe { (Pin::new_unchecked(&mut this.0), Pin::new_unchecked(&mut this.1)) };
            if i < A::LEN { l.start(i) } else { r.start(i - A::LEN) }
        }
        fn poll_node(self: Pin<&mut Self>, i: usize, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
            let this = unsafe { self.get_unchecked_mut() };
            let (l, r) = unsafe { (Pin::new_unchecked(&mut this.0), Pin::new_unchecked(&mut this.1)) };
            if i < A::LEN { l.poll_node(i, cx) } else { r.poll_node(i - A::LEN, cx) }
        }
        fn stop(self: Pin<&mut Self>, i: usize) {
            let this = unsafe { self.get_unchecked_mut() };
            let (l, r) = unsafe { (Pin::new_unchecked(&mut this.0), Pin::new_unchecked(&mut this.1)) };
            if i < A::LEN { l.stop(i) } else { r.stop(i - A::LEN) }
        }
        fn decide(self: Pin<&mut Self>, i: usize, s: &RunState) -> bool {
            let this = unsafe { self.get_unchecked_mut() };
            let (l, r) = unsafe { (Pin::new_unchecked(&mut this.0), Pin::new_unchecked(&mut this.1)) };
            if i < A::LEN { l.decide(i, s) } else { r.decide(i - A::LEN, s) }
        }
    }

    /// Variant dynref: a node's future-maker as a trait object (named lifetime through an alias).
    pub type BoxFut<'a> = Pin<Box<dyn Future<Output = Result<(), NodeError>> + 'a>>;
    pub type Make<'a> = dyn Fn() -> BoxFut<'a> + 'a;

    /// Variant comb*: polls an operation's future and stores its result in a slot.
    pub struct Complete<'a, Fut> where Fut: Future, Fut::Output: IntoNodeResult {
        slot: &'a Slot<<Fut::Output as IntoNodeResult>::Ok>,
        fut: Fut,
    }
    impl<'a, Fut> Complete<'a, Fut> where Fut: Future, Fut::Output: IntoNodeResult {
        pub fn new(slot: &'a Slot<<Fut::Output as IntoNodeResult>::Ok>, fut: Fut) -> Self { Complete { slot, fut } }
    }
    impl<'a, Fut> Future for Complete<'a, Fut> where Fut: Future, Fut::Output: IntoNodeResult {
        type Output = Result<(), NodeError>;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let this = unsafe { self.get_unchecked_mut() };
            match unsafe { Pin::new_unchecked(&mut this.fut) }.poll(cx) {
                Poll::Ready(r) => Poll::Ready(complete(this.slot, r)),
                Poll::Pending => Poll::Pending,
            }
        }
    }
    /// Variant combdyn*: a node's future-maker; `Err` = an input is missing.
    pub type MakeR<'a> = dyn Fn() -> Result<BoxFut<'a>, NodeError> + 'a;
    pub async fn execute_rfns<'a>(graph: &'static Graph, options: RunOptions, makers: &[&MakeR<'a>]) -> Finished {
        std::future::poll_fn(|cx| {
            for m in makers { if let Ok(mut f) = m() { if f.as_mut().poll(cx).is_pending() { return Poll::Pending; } } }
            Poll::Ready(())
        }).await;
        Finished { ok: true }
    }
    pub async fn execute_rvec<'a>(graph: &'static Graph, options: RunOptions, makers: Vec<Box<MakeR<'a>>>) -> Finished {
        std::future::poll_fn(|cx| {
            for m in &makers { if let Ok(mut f) = m() { if f.as_mut().poll(cx).is_pending() { return Poll::Pending; } } }
            Poll::Ready(())
        }).await;
        Finished { ok: true }
    }

    /// Variant tt*: the generated code hands over a tree of plain tuples — a leaf is a 1-tuple
    /// `(closure,)`, a pair a 2-tuple — and the runtime turns it into the node tree. No generic
    /// path (constructor) ever sees a closure type while the body is type-checked.
    pub trait IntoNodes { type Nodes: Nodes; fn into_nodes(self) -> Self::Nodes; }
    impl<F, Fut> IntoNodes for (F,)
    where F: Fn() -> Fut, Fut: Future<Output = Result<(), NodeError>>,
    {
        type Nodes = BoxedOp<F, Fut>;
        #[inline]
        fn into_nodes(self) -> Self::Nodes { BoxedOp::new(self.0) }
    }
    impl<A: IntoNodes, B: IntoNodes> IntoNodes for (A, B) {
        type Nodes = Pair<A::Nodes, B::Nodes>;
        #[inline]
        fn into_nodes(self) -> Self::Nodes { Pair::new(self.0.into_nodes(), self.1.into_nodes()) }
    }
    /// Diagnostics for the final call (see --final).
    pub fn consume<T: IntoNodes>(tree: T) { let _ = tree.into_nodes(); }
    pub async fn execute_tree_noawait<T: IntoNodes>(graph: &'static Graph, options: RunOptions, tree: T) -> Finished {
        let _ = tree.into_nodes(); Finished { ok: true }
    }
    pub fn execute_tree_dyn<'a, T: IntoNodes + 'a>(graph: &'static Graph, options: RunOptions, tree: T) -> Pin<Box<dyn Future<Output = Finished> + 'a>> {
        Box::pin(execute(graph, options, tree.into_nodes()))
    }
    /// The run as a boxed future, `Send` exactly when the node tree `N` is: the caller's
    /// coroutine holds a plain struct instead of an opaque type with the tree's where-clauses.
    pub struct Run<'a, N> { fut: Pin<Box<dyn Future<Output = Finished> + 'a>>, _nodes: std::marker::PhantomData<N> }
    // SAFETY (sketch): the boxed future holds the node tree `N` plus runtime state that is Send.
    unsafe impl<'a, N: Send> Send for Run<'a, N> {}
    impl<'a, N> Future for Run<'a, N> {
        type Output = Finished;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Finished> { unsafe { self.get_unchecked_mut() }.fut.as_mut().poll(cx) }
    }
    pub fn execute_tree_run<'a, T: IntoNodes + 'a>(graph: &'static Graph, options: RunOptions, tree: T) -> Run<'a, T::Nodes> {
        Run { fut: Box::pin(execute(graph, options, tree.into_nodes())), _nodes: std::marker::PhantomData }
    }
    pub async fn execute_tree<T: IntoNodes>(graph: &'static Graph, options: RunOptions, tree: T) -> Finished {
        execute(graph, options, tree.into_nodes()).await
    }

    pub struct Op<F, Fut> { make: F, running: Option<Fut> }
    impl<F, Fut> Op<F, Fut> where {OP_NEW_BOUND} {
        pub const fn new(make: F) -> Self { Op { make, running: None } }
    }
    impl<F, Fut> Nodes for Op<F, Fut>
    where F: Fn() -> Fut, Fut: Future<Output = Result<(), NodeError>>,
    {
        const LEN: usize = 1;
        fn start(self: Pin<&mut Self>, _: usize) {
            let this = unsafe { self.get_unchecked_mut() };
            let fut = (this.make)();
            this.running = Some(fut);
        }
        fn poll_node(self: Pin<&mut Self>, _: usize, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
            let this = unsafe { self.get_unchecked_mut() };
            match &mut this.running {
                Some(f) => unsafe { Pin::new_unchecked(f) }.poll(cx),
                None => Poll::Ready(Err(NodeError::Panicked(String::new()))),
            }
        }
        fn stop(self: Pin<&mut Self>, _: usize) { unsafe { self.get_unchecked_mut() }.running = None; }
        fn decide(self: Pin<&mut Self>, _: usize, _: &RunState) -> bool { false }
    }

    pub struct BoxedOp<F, Fut> { make: F, running: Option<Pin<Box<Fut>>> }
    impl<F, Fut> BoxedOp<F, Fut> where {OP_NEW_BOUND} {
        pub const fn new(make: F) -> Self { BoxedOp { make, running: None } }
    }
    impl<F, Fut> Nodes for BoxedOp<F, Fut>
    where F: Fn() -> Fut, Fut: Future<Output = Result<(), NodeError>>,
    {
        const LEN: usize = 1;
        fn start(self: Pin<&mut Self>, _: usize) {
            let this = self.get_mut();
            this.running = Some(Box::pin((this.make)()));
        }
        fn poll_node(self: Pin<&mut Self>, _: usize, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
            match &mut self.get_mut().running {
                Some(fut) => fut.as_mut().poll(cx),
                None => Poll::Ready(Err(NodeError::Panicked(String::new()))),
            }
        }
        fn stop(self: Pin<&mut Self>, _: usize) { self.get_mut().running = None; }
        fn decide(self: Pin<&mut Self>, _: usize, _: &RunState) -> bool { false }
    }
    impl<F, Fut> Unpin for BoxedOp<F, Fut> {}

    // ---- variant 3: combinator leaves (no async block per node) ----
    /// A leaf whose closure makes the operation's future directly (`Err` = a missing input).
    pub struct SlotOp<'a, T, F, Fut> { slot: &'a Slot<T>, make: F, running: Option<Pin<Box<Fut>>> }
    impl<'a, T, F, Fut> SlotOp<'a, T, F, Fut> where {SLOTOP_NEW_BOUND} {
        pub const fn new(slot: &'a Slot<T>, make: F) -> Self { SlotOp { slot, make, running: None } }
    }
    impl<'a, T, F, Fut> Nodes for SlotOp<'a, T, F, Fut>
    where F: Fn() -> Result<Fut, NodeError>, Fut: Future, Fut::Output: IntoNodeResult<Ok = T>,
    {
        const LEN: usize = 1;
        fn start(self: Pin<&mut Self>, _: usize) {
            let this = self.get_mut();
            // (a real one would keep the input error for the first poll)
            this.running = (this.make)().ok().map(Box::pin);
        }
        fn poll_node(self: Pin<&mut Self>, _: usize, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
            let this = self.get_mut();
            match &mut this.running {
                Some(fut) => match fut.as_mut().poll(cx) {
                    Poll::Ready(r) => Poll::Ready(complete(this.slot, r)),
                    Poll::Pending => Poll::Pending,
                },
                None => Poll::Ready(Err(NodeError::Panicked(String::new()))),
            }
        }
        fn stop(self: Pin<&mut Self>, _: usize) { self.get_mut().running = None; }
        fn decide(self: Pin<&mut Self>, _: usize, _: &RunState) -> bool { false }
    }
    impl<'a, T, F, Fut> Unpin for SlotOp<'a, T, F, Fut> {}


    // ---- variant 4: object-safe leaves ----
    pub trait Leaf {
        fn start(self: Pin<&mut Self>);
        fn poll_leaf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>>;
        fn stop(self: Pin<&mut Self>);
    }
    impl<F, Fut> Leaf for BoxedOp<F, Fut>
    where F: Fn() -> Fut, Fut: Future<Output = Result<(), NodeError>>,
    {
        fn start(self: Pin<&mut Self>) { Nodes::start(self, 0) }
        fn poll_leaf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> { Nodes::poll_node(self, 0, cx) }
        fn stop(self: Pin<&mut Self>) { Nodes::stop(self, 0) }
    }
    impl<F, Fut> Leaf for Op<F, Fut>
    where F: Fn() -> Fut, Fut: Future<Output = Result<(), NodeError>>,
    {
        fn start(self: Pin<&mut Self>) { Nodes::start(self, 0) }
        fn poll_leaf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> { Nodes::poll_node(self, 0, cx) }
        fn stop(self: Pin<&mut Self>) { Nodes::stop(self, 0) }
    }
    /// Boxes a leaf as a trait object (variant dynbox).
    pub fn boxed<'a, F, Fut>(make: F) -> Pin<Box<dyn Leaf + 'a>>
    where F: Fn() -> Fut + 'a, Fut: Future<Output = Result<(), NodeError>> + 'a {
        Box::pin(BoxedOp::new(make))
    }
    /// Makes a boxed future-maker from a closure (variant dynfn).
    pub fn maker<'a, F, Fut>(make: F) -> Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), NodeError>> + 'a>> + 'a>
    where F: Fn() -> Fut + 'a, Fut: Future<Output = Result<(), NodeError>> + 'a {
        Box::new(move || Box::pin(make()))
    }

    // ---- variant 6: identity fn fixing the closure kind ----
    #[inline(always)]
    pub fn leaf<F: Fn() -> Fut, Fut: Future<Output = Result<(), NodeError>>>(f: F) -> F { f }

    pub struct Slot<T> { value: OnceLock<T> }
    impl<T> Slot<T> {
        pub const fn new() -> Self { Slot { value: OnceLock::new() } }
        pub fn get(&self) -> Option<&T> { self.value.get() }
        pub fn put(&self, value: T) { let _ = self.value.set(value); }
    }

    #[inline]
    pub fn input<'a, T>(slot: &'a Slot<T>, node: &'static str) -> Result<&'a T, NodeError> {
        slot.get().ok_or_else(|| NodeError::Aborted { cause: node })
    }
    pub fn require<'a, T>(slot: &'a Slot<T>, node: &'static str) -> Result<&'a T, NodeFailure> {
        slot.get().ok_or(NodeFailure { node, error: NodeError::Panicked(String::new()) })
    }
    #[inline]
    pub fn complete<R: IntoNodeResult>(slot: &Slot<R::Ok>, result: R) -> Result<(), NodeError> {
        result.into_node_result().map(|value| slot.put(value))
    }

    /// Owns every slot of a run in one local (one heap allocation per slot, freed in reverse
    /// order when the run ends), so the run's coroutine holds one local instead of N.
    pub struct Arena { held: std::cell::UnsafeCell<Vec<(*mut (), unsafe fn(*mut ()))>> }
    impl Arena {
        pub fn new() -> Self { Arena { held: std::cell::UnsafeCell::new(Vec::new()) } }
        pub fn alloc<T>(&self, value: T) -> &T {
            unsafe fn free<T>(p: *mut ()) { unsafe { drop(Box::from_raw(p as *mut T)) } }
            let p = Box::into_raw(Box::new(value));
            unsafe { (*self.held.get()).push((p as *mut (), free::<T>)); &*p }
        }
    }
    // The arena holds the slots the node tree refers to: the run future is Send only if the
    // tree is, which requires every slot to be Sync (so its value Send + Sync).
    unsafe impl Send for Arena {}
    unsafe impl Sync for Arena {}
    impl Drop for Arena {
        fn drop(&mut self) { for (p, f) in self.held.get_mut().drain(..).rev() { unsafe { f(p) } } }
    }

    pub struct Finished { pub ok: bool }
    pub struct Outcome<T> { pub result: Result<T, NodeFailure> }
    impl Finished {
        pub fn output<T>(self, output: impl FnOnce() -> Result<T, NodeFailure>) -> Outcome<T> {
            Outcome { result: output() }
        }
    }

    fn drive<N: Nodes + ?Sized>(mut nodes: Pin<&mut N>, cx: &mut Context<'_>) -> Poll<()> {
        for i in 0..N::LEN { nodes.as_mut().start(i); }
        for i in 0..N::LEN { if nodes.as_mut().poll_node(i, cx).is_pending() { return Poll::Pending; } }
        Poll::Ready(())
    }

    pub async fn execute<N: Nodes>(graph: &'static Graph, options: RunOptions, nodes: N) -> Finished {
        debug_assert!(N::LEN >= graph.len);
        let mut nodes = Box::pin(nodes);
        std::future::poll_fn(|cx| drive(nodes.as_mut(), cx)).await;
        Finished { ok: true }
    }

    /// Variant dyn*: a slice of object-safe leaves.
    pub async fn execute_dyn(graph: &'static Graph, options: RunOptions, nodes: &mut [Pin<&mut (dyn Leaf + '_)>]) -> Finished {
        std::future::poll_fn(|cx| {
            for n in nodes.iter_mut() { n.as_mut().start(); }
            for n in nodes.iter_mut() { if n.as_mut().poll_leaf(cx).is_pending() { return Poll::Pending; } }
            Poll::Ready(())
        }).await;
        Finished { ok: true }
    }
    pub async fn execute_boxed(graph: &'static Graph, options: RunOptions, mut nodes: Vec<Pin<Box<dyn Leaf + '_>>>) -> Finished {
        std::future::poll_fn(|cx| {
            for n in nodes.iter_mut() { n.as_mut().start(); }
            for n in nodes.iter_mut() { if n.as_mut().poll_leaf(cx).is_pending() { return Poll::Pending; } }
            Poll::Ready(())
        }).await;
        Finished { ok: true }
    }
    pub async fn execute_makers<'a>(graph: &'static Graph, options: RunOptions, makers: Vec<Box<Make<'a>>>) -> Finished {
        std::future::poll_fn(|cx| {
            for m in &makers { let mut f = m(); if f.as_mut().poll(cx).is_pending() { return Poll::Pending; } }
            Poll::Ready(())
        }).await;
        Finished { ok: true }
    }
    pub async fn execute_fns<'a>(graph: &'static Graph, options: RunOptions, makers: &[&(dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), NodeError>> + 'a>> + 'a)]) -> Finished {
        std::future::poll_fn(|cx| {
            for m in makers { let mut f = m(); if f.as_mut().poll(cx).is_pending() { return Poll::Pending; } }
            Poll::Ready(())
        }).await;
        Finished { ok: true }
    }

    pub struct Yield(bool);
    impl Future for Yield {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 { Poll::Ready(()) } else { self.0 = true; cx.waker().wake_by_ref(); Poll::Pending }
        }
    }
    pub fn yield_now() -> Yield { Yield(false) }
}

use rt::*;
use std::convert::Infallible;

pub async fn imm(x: u64) -> Result<u64, Infallible> { Ok(x + 1) }
pub async fn yld(x: u64) -> Result<u64, Infallible> { rt::yield_now().await; Ok(x + 1) }
pub async fn rc(x: u64) -> Result<u64, Infallible> { let r = std::rc::Rc::new(x); rt::yield_now().await; Ok(*r + 1) }
pub async fn simm(x: &String) -> Result<String, Infallible> { Ok(format!("{x}.")) }
pub async fn syld(x: &String) -> Result<String, Infallible> { rt::yield_now().await; Ok(format!("{x}.")) }
'''

BOUNDS = {
    "PAIR_NEW_BOUND": "A: Nodes, B: Nodes",
    "OP_NEW_BOUND": "F: Fn() -> Fut, Fut: Future<Output = Result<(), NodeError>>",
    "SLOTOP_NEW_BOUND": "F: Fn() -> Result<Fut, NodeError>, Fut: Future, Fut::Output: IntoNodeResult<Ok = T>",
}


def runtime(variant):
    b = dict(BOUNDS)
    if variant.startswith("nobound") or variant in ("comb_nb",):
        b["PAIR_NEW_BOUND"] = ""
        if variant != "nobound_pair":
            b["OP_NEW_BOUND"] = ""
            b["SLOTOP_NEW_BOUND"] = ""
    if variant == "nobound_op":
        b["PAIR_NEW_BOUND"] = BOUNDS["PAIR_NEW_BOUND"]
    text = RUNTIME
    for k, v in b.items():
        text = text.replace("{" + k + "}", v)
    return text


# --------------------------------------------------------------------------------------------
# Workflow shapes: a list of (node index, source index or None (= the parameter x)).

def reads(shape, n):
    if shape == "chain":
        return [None] + list(range(n - 1))
    if shape == "fan":
        return [None] + [0] * (n - 1)
    if shape == "layered":
        w = 10
        assert n % w == 0
        return [None if i < w else i - w for i in range(n)]
    raise SystemExit(f"unknown shape {shape}")


def balanced(leaves, pair="Pair::new"):
    if len(leaves) == 1:
        return leaves[0]
    h = len(leaves) // 2
    return f"{pair}({balanced(leaves[:h], pair)}, {balanced(leaves[h:], pair)})"


LET_VARIANTS = {
    # name: (leaf kind, combiner)
    "tuple_lets": ("boxedop", "tuple"),
    "pair_lets": ("boxedop", "pair"),
    "dynref": ("dynref", "slice"),
    "dynboxmk": ("dynboxmk", "vec"),
    "dynpin": ("boxedop_pin", "dynslice"),
    "tt_lets": ("closure1", "tuple"),
    "tt_post": ("closure1", "post"),
}


def gen(variant, shape, n, ty, opk, slots="top"):
    srcs = reads(shape, n)
    string = ty == "string"
    opname = ("s" if string else "") + opk
    out_ty = "String" if string else "u64"
    ctor = "Op" if variant.endswith("_inline") else "BoxedOp"

    def arg(src):
        # the user's argument expression, after the macro's rewrite of node names
        name = "x" if src is None else f"n{src}"
        if string:
            if variant.endswith("_tmp"):
                return f"&format!(\"{{}}\", {name})"
            return f"{name}"
        return f"(*{name})"

    def input_stmt(src):
        if src is None:
            return ""
        return f"let n{src} = input(__flow_slot_{src}, \"n{src}\")?; "

    def body(i, src):
        return f"async move {{ {input_stmt(src)}complete(__flow_slot_{i}, ({opname}({arg(src)})).await) }}"

    def async_leaf(i, src):
        b = body(i, src)
        if variant == "noslot":  # diagnostic: no slot reads/writes at all
            b = f"async move {{ complete(&Slot::new(), ({opname}({arg(None)})).await) }}"
        if variant == "annot":
            return f"{ctor}::new(move || -> _ {{ {b} }})"
        if variant == "leaffn":
            return f"{ctor}::new(leaf(move || {b}))"
        return f"{ctor}::new(move || {b})"

    def comb_leaf(i, src):
        if src is None:
            inner = f"{opname}({arg(src)})"
        else:
            inner = f"{{ let n{src} = input(__flow_slot_{src}, \"n{src}\")?; {opname}({arg(src)}) }}"
        return f"SlotOp::new(__flow_slot_{i}, move || Ok::<_, NodeError>({inner}))"

    def slot_decl(i):
        if slots == "typed":  # diagnostic: the macro cannot know the type
            return f"let __flow_slot_{i} = &Slot::<{out_ty}>::new();"
        if slots == "leak":  # diagnostic: no slot temporaries in the coroutine
            return f"let __flow_slot_{i}: &Slot<_> = Box::leak(Box::new(Slot::new()));"
        if slots == "arena":
            return f"let __flow_slot_{i} = __flow_arena.alloc(Slot::new());"
        return f"let __flow_slot_{i} = &Slot::new();"

    last = n - 1
    lines = []
    lines.append("pub struct Wf { options: RunOptions }")
    lines.append("impl Wf {")
    lines.append(f"    pub const GRAPH: Graph = Graph {{ len: {n}, name: \"Wf\" }};")
    param_ty = "String" if string else "u64"
    lines.append(f"    pub async fn execute(self, x: {param_ty}) -> Outcome<{out_ty}> {{")
    lines.append("        let x = &x;")
    if slots == "arena":
        lines.append("        let __flow_arena = &Arena::new();")
    interleave = slots.startswith("inter")
    if interleave:
        slots = slots[len("inter"):] or "top"   # "inter" / "interarena" / "intertyped"
        if slots == "arena":
            lines.append("        let __flow_arena = &Arena::new();")
    else:
        for i in range(n):
            lines.append("        " + slot_decl(i))

    output = (f"__flow_finished.output(move || {{ let n{last} = require(__flow_slot_{last}, \"n{last}\")?; "
              f"Ok({{ let __flow_output: {out_ty} = {'n%d.clone()' % last if string else '*n%d' % last}; __flow_output }}) }})")

    base = variant.replace("_tmp", "").replace("_inline", "")
    def comb_make(i, src):
        # the operation's future made directly by the closure: no async block per node
        pre = "" if src is None else f"let n{src} = input(__flow_slot_{src}, \"n{src}\")?; "
        return f"move || {{ {pre}Ok(Box::pin(Complete::new(__flow_slot_{i}, {opname}({arg(src)})))) }}"

    if base in ("combdyn", "combdynvec", "combdynvec_b"):
        if slots not in ("arena",):
            raise SystemExit(f"{base} needs --slots arena or interarena")
        builder = base.endswith("_b")
        ind = "            " if builder else "        "
        out = []
        if base == "combdyn":
            for i, s in enumerate(srcs):
                if interleave:
                    out.append(slot_decl(i))
                out.append(f"let __flow_node_{i}: &MakeR<'_> = &{comb_make(i, s)};")
            call = f"execute_rfns(&Self::GRAPH, self.options, &[{', '.join(f'__flow_node_{i}' for i in range(n))}])"
        else:
            out.append(f"let mut __flow_nodes: Vec<Box<MakeR<'_>>> = Vec::with_capacity({n});")
            for i, s in enumerate(srcs):
                if interleave:
                    out.append(slot_decl(i))
                out.append(f"__flow_nodes.push(Box::new({comb_make(i, s)}));")
            call = "execute_rvec(&Self::GRAPH, self.options, __flow_nodes)"
        if builder:
            lines.append(f"        let (__flow_nodes, __flow_slot_{last}) = (move || {{")
            lines += [ind + l for l in out]
            lines.append(f"{ind}(__flow_nodes, __flow_slot_{last})")
            lines.append("        })();")
        else:
            lines += [ind + l for l in out]
        lines.append(f"        let __flow_finished = {call}.await;")
    elif base in ("dynvec", "dynvec_b", "base_b", "pair_b", "tuple_b"):
        # Construction in a synchronous builder closure (`_b`): its locals are not locals of the
        # run's coroutine. Slots live in an arena owned by the coroutine (one local).
        builder = base.endswith("_b")
        ind = "            " if builder else "        "
        if slots not in ("arena",):
            raise SystemExit(f"{base} needs --slots arena or interarena")
        out = []
        if base.startswith("dynvec"):
            out.append(f"let mut __flow_nodes: Vec<Box<Make<'_>>> = Vec::with_capacity({n});")
            for i, s in enumerate(srcs):
                if interleave:
                    out.append(slot_decl(i))
                out.append(f"__flow_nodes.push(Box::new(move || Box::pin({body(i, s)})));")
            result = "__flow_nodes"
            call = "execute_makers(&Self::GRAPH, self.options, __flow_nodes)"
        else:
            leaves = []
            for i, s in enumerate(srcs):
                if interleave:
                    out.append(slot_decl(i))
                if base == "base_b":
                    leaves.append(async_leaf(i, s))
                else:
                    out.append(f"let __flow_node_{i} = {async_leaf(i, s)};")
                    leaves.append(f"__flow_node_{i}")
            result = balanced(leaves, pair="" if base == "tuple_b" else "Pair::new")
            call = "execute(&Self::GRAPH, self.options, __flow_nodes)"
        if builder:
            lines.append(f"        let (__flow_nodes, __flow_slot_{last}) = (move || {{")
            lines += [ind + l for l in out]
            lines.append(f"{ind}({result}, __flow_slot_{last})")
            lines.append("        })();")
        else:
            lines += [ind + l for l in out]
            if not base.startswith("dynvec"):
                lines.append(f"        let __flow_nodes = {result};")
        lines.append(f"        let __flow_finished = {call}.await;")
    elif interleave and base not in LET_VARIANTS:
        raise SystemExit("--slots inter* needs a let-based variant: " + " ".join(LET_VARIANTS))
    elif base in LET_VARIANTS:
        kind, comb = LET_VARIANTS[base]
        for i, s in enumerate(srcs):
            if interleave:
                lines.append("        " + slot_decl(i))
            if kind == "boxedop":
                lines.append(f"        let __flow_node_{i} = {async_leaf(i, s)};")
            elif kind == "closure1":
                lines.append(f"        let __flow_node_{i} = (move || {body(i, s)},);")
            elif kind == "boxedop_pin":
                lines.append(f"        let __flow_node_{i} = ::core::pin::pin!({async_leaf(i, s)});")
            elif kind == "dynref":
                lines.append(f"        let __flow_node_{i}: &Make<'_> = &move || Box::pin({body(i, s)});")
            elif kind == "dynboxmk":
                lines.append(f"        let __flow_node_{i}: Box<Make<'_>> = Box::new(move || Box::pin({body(i, s)}));")
        names = [f"__flow_node_{i}" for i in range(n)]
        if comb == "post":
            # rebuild: same leaves, but subtrees are combined in post-order as soon as complete,
            # so only O(log N) partial trees are live at any point
            del lines[-(n * (2 if interleave else 1)):]
            def emit(lo, hi):
                if hi - lo == 1:
                    if interleave:
                        lines.append("        " + slot_decl(lo))
                    lines.append(f"        let __flow_t{lo}_{hi} = (move || {body(lo, srcs[lo])},);")
                else:
                    mid = lo + (hi - lo) // 2
                    emit(lo, mid); emit(mid, hi)
                    lines.append(f"        let __flow_t{lo}_{hi} = (__flow_t{lo}_{mid}, __flow_t{mid}_{hi});")
                return f"__flow_t{lo}_{hi}"
            root = emit(0, n)
            call = f"execute_tree(&Self::GRAPH, self.options, {root})"
        elif comb == "tuple" and kind == "closure1":
            call = f"execute_tree(&Self::GRAPH, self.options, {balanced(names, pair='')})"
        elif comb == "tuple":
            call = f"execute(&Self::GRAPH, self.options, {balanced(names, pair='')})"
        elif comb == "pair":
            call = f"execute(&Self::GRAPH, self.options, {balanced(names)})"
        elif comb == "slice":
            call = f"execute_fns(&Self::GRAPH, self.options, &[{', '.join(names)}])"
        elif comb == "vec":
            call = f"execute_makers(&Self::GRAPH, self.options, vec![{', '.join(names)}])"
        elif comb == "dynslice":
            call = f"execute_dyn(&Self::GRAPH, self.options, &mut [{', '.join(names)}])"
        if BUILDER:
            # move the construction into a synchronous closure: its locals are not the coroutine's
            start = next(k for k, l in enumerate(lines) if "__flow_slot_0 =" in l or "__flow_node_0" in l or "__flow_t0_1" in l)
            body_lines = lines[start:]
            del lines[start:]
            arg0 = call[call.index("self.options, ") + len("self.options, "):-1]
            lines.append(f"        let (__flow_nodes, __flow_slot_{last}) = (move || {{")
            lines += ["    " + l for l in body_lines]
            lines.append(f"            ({arg0}, __flow_slot_{last})")
            lines.append("        })();")
            call = call.replace(arg0, "__flow_nodes")
        if FINAL == "exec":
            lines.append(f"        let __flow_finished = {call}.await;")
        else:  # diagnostics: build the runtime's argument but do not call it / build nothing
            if FINAL in ("consume", "dyn", "noawait", "run"):
                arg0 = call[call.index("self.options, ") + len("self.options, "):-1]
                if FINAL == "run":
                    lines.append(f"        execute_tree_run(&Self::GRAPH, RunOptions::default(), {arg0}).await;")
                elif FINAL == "consume":
                    lines.append(f"        consume({arg0});")
                elif FINAL == "dyn":
                    lines.append(f"        execute_tree_dyn(&Self::GRAPH, RunOptions::default(), {arg0}).await;")
                else:
                    lines.append(f"        execute_tree_noawait(&Self::GRAPH, RunOptions::default(), {arg0}).await;")
            if FINAL == "forget":
                arg0 = call[call.index("self.options, ") + len("self.options, "):-1]
                lines.append(f"        ::core::mem::forget({arg0});")
            lines.append("        let __flow_finished = Finished { ok: true };")
    elif base in ("base", "noslot", "nobound", "nobound_pair", "nobound_op", "annot", "leaffn", "noexec", "nobound_noexec"):
        tree = balanced([async_leaf(i, s) for i, s in enumerate(srcs)])
        if base.endswith("noexec"):
            lines.append(f"        let __flow_tree = {tree};")
            lines.append("        drop(__flow_tree);")
            lines.append("        let __flow_finished = Finished { ok: true };")
        else:
            lines.append(f"        let __flow_finished = execute(&Self::GRAPH, self.options, {tree}).await;")
    elif base in ("tt", "tt_noexec", "tt_comb"):
        if base in ("tt", "tt_noexec"):
            leaves = [f"(move || {body(i, s)},)" for i, s in enumerate(srcs)]
        if base == "tt_noexec":  # diagnostic: build the tuple tree, never hand it to the runtime
            lines.append(f"        let __flow_tree = {balanced(leaves, pair='')};")
            lines.append("        drop(__flow_tree);")
            lines.append("        let __flow_finished = Finished { ok: true };")
        else:
          lines.append(f"        let __flow_finished = execute_tree(&Self::GRAPH, self.options, {balanced(leaves, pair='')}).await;")
    elif base == "tuple":
        tree = balanced([async_leaf(i, s) for i, s in enumerate(srcs)], pair="")
        lines.append(f"        let __flow_finished = execute(&Self::GRAPH, self.options, {tree}).await;")
    elif base == "dynref_arr":
        lines.append("        let __flow_makers: &[&Make<'_>] = &[")
        for i, s in enumerate(srcs):
            lines.append(f"            &move || Box::pin({body(i, s)}),")
        lines.append("        ];")
        lines.append("        let __flow_finished = execute_fns(&Self::GRAPH, self.options, __flow_makers).await;")
    elif base == "dynboxmk_vec":
        lines.append("        let __flow_makers: Vec<Box<Make<'_>>> = vec![")
        for i, s in enumerate(srcs):
            lines.append(f"            Box::new(move || Box::pin({body(i, s)})),")
        lines.append("        ];")
        lines.append("        let __flow_finished = execute_makers(&Self::GRAPH, self.options, __flow_makers).await;")
    elif base in ("comb", "comb_nb"):
        tree = balanced([comb_leaf(i, s) for i, s in enumerate(srcs)])
        lines.append(f"        let __flow_finished = execute(&Self::GRAPH, self.options, {tree}).await;")
    elif base == "dynlet":
        # every leaf a plain local (no pin!), coerced in the array
        for i, s in enumerate(srcs):
            lines.append(f"        let mut __flow_node_{i} = {async_leaf(i, s)};")
        items = ", ".join(f"::core::pin::Pin::new(&mut __flow_node_{i}) as ::core::pin::Pin<&mut dyn Leaf>" for i in range(n))
        lines.append(f"        let __flow_finished = execute_dyn(&Self::GRAPH, self.options, &mut [{items}]).await;")
    elif base == "dynbox":
        lines.append("        let __flow_finished = execute_boxed(&Self::GRAPH, self.options, vec![")
        for i, s in enumerate(srcs):
            lines.append(f"            boxed(move || {body(i, s)}),")
        lines.append("        ]).await;")
    elif base == "dynfn":
        for i, s in enumerate(srcs):
            lines.append(f"        let __flow_make_{i} = maker(move || {body(i, s)});")
        items = ", ".join(f"&*__flow_make_{i}" for i in range(n))
        lines.append(f"        let __flow_finished = execute_fns(&Self::GRAPH, self.options, &[{items}]).await;")
    elif base in ("chunkblock", "chunkclosure", "chunklet"):
        leaves = [async_leaf(i, s) for i, s in enumerate(srcs)]
        chunks = [leaves[k:k + 32] for k in range(0, n, 32)]
        if base == "chunklet":
            for c, ch in enumerate(chunks):
                lines.append(f"        let __flow_chunk_{c} = {balanced(ch)};")
            tree = balanced([f"__flow_chunk_{c}" for c in range(len(chunks))])
        elif base == "chunkblock":
            tree = balanced([f"{{ {balanced(ch)} }}" for ch in chunks])
        else:
            tree = balanced([f"(|| {balanced(ch)})()" for ch in chunks])
        lines.append(f"        let __flow_finished = execute(&Self::GRAPH, self.options, {tree}).await;")
    else:
        raise SystemExit(f"unknown variant {variant}")
    lines.append(f"        {output}")
    lines.append("    }")
    lines.append("}")
    return runtime(base) + "\n" + "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("variant")
    p.add_argument("shape")
    p.add_argument("n", type=int)
    p.add_argument("--ty", default="u64", choices=["u64", "string"])
    p.add_argument("--op", default="imm", choices=["imm", "yld", "rc"])
    p.add_argument("--slots", default="top",
                   choices=["top", "typed", "leak", "arena", "inter", "intertyped", "interarena"],
                   help="top: `let s = &Slot::new();` for all slots first (as now); typed/leak: diagnostics; "
                        "arena: one local owns every slot; inter*: slot i declared right before leaf i")
    p.add_argument("--final", default="exec", choices=["exec", "forget", "none", "consume", "dyn", "noawait", "run"],
                   help="let-based variants: exec = hand the nodes to the runtime; forget = build "
                        "the runtime's argument only; none = build the leaves only (diagnostics)")
    p.add_argument("--builder", action="store_true",
                   help="let-based variants: build slots+leaves+tree in a sync closure called in place")
    a = p.parse_args()
    global FINAL, BUILDER
    FINAL = a.final
    BUILDER = a.builder
    sys.stdout.write(gen(a.variant, a.shape, a.n, a.ty, a.op, a.slots))


if __name__ == "__main__":
    main()
