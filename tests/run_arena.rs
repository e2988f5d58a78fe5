//! Workflows above the inline limit (64 nodes): each running node future lives in the run's
//! arena (`ArenaOp`), and a `Sequential` of `Parallel`s routes its ordering edges through joins.
//! These tests check that futures there are made, dropped and sent exactly as inline ones.

#[macro_use]
mod common;

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use flowdag::prelude::*;

use common::{Boom, require_send};

/// Counts live node futures: one more when a node starts, one less when its future drops.
#[derive(Default)]
struct Live {
    started: AtomicUsize,
    dropped: AtomicUsize,
}

struct Guard<'a>(&'a Live);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Never finishes; its guard tells when the future is dropped.
async fn hang(live: &Live) -> Result<u64, Boom> {
    live.started.fetch_add(1, Ordering::SeqCst);
    let _guard = Guard(live);
    std::future::pending::<()>().await;
    Ok(0)
}

macro_rules! wide {
    ($($name:ident)*) => {
        workflow! {
            /// Seventy operations side by side, each hanging until dropped.
            Wide(live: &Live) {
                Parallel {
                    $( $name = Operation(hang(live)), )*
                }
            }
        }
    };
}

wide!(n00 n01 n02 n03 n04 n05 n06 n07 n08 n09 n10 n11 n12 n13 n14 n15 n16 n17 n18 n19 n20 n21 n22 n23 n24 n25 n26 n27 n28 n29 n30 n31 n32 n33 n34 n35 n36 n37 n38 n39 n40 n41 n42 n43 n44 n45 n46 n47 n48 n49 n50 n51 n52 n53 n54 n55 n56 n57 n58 n59 n60 n61 n62 n63 n64 n65 n66 n67 n68 n69);

#[test]
fn large_run_futures_are_send_exactly_when_their_operations_are() {
    let live = Live::default();
    // Compiles only if the future is `Send`: the arena forgets no `Send` bound.
    let wide = require_send(Wide::run(&live));
    assert!(is_send!(wide));
    let rc = Rc::new(Cell::new(0));
    let attempts = Cell::new(0);
    let retried = Retried::run(&attempts, &rc);
    assert!(!is_send!(retried));
}

#[test]
fn dropping_a_large_run_drops_every_running_future_once() {
    let live = Live::default();
    let mut run = Box::pin(Wide::run(&live));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(run.as_mut().poll(&mut cx).is_pending());
    assert_eq!(live.started.load(Ordering::SeqCst), 70);
    assert_eq!(live.dropped.load(Ordering::SeqCst), 0);
    drop(run);
    assert_eq!(live.dropped.load(Ordering::SeqCst), 70);
}

/// Builds a `String` from the one before (non-`Copy` outputs read by reference).
async fn grow(before: &str) -> Result<String, Boom> {
    tokio::task::yield_now().await;
    Ok(format!("{before}+"))
}

workflow! {
    /// Seventy steps, each appending to the text of the one before.
    Chain(seed: &str) -> String {
        Sequential {
            c00 = Operation(grow(seed)),
            c01 = Operation(grow(&c00)),
            c02 = Operation(grow(&c01)),
            c03 = Operation(grow(&c02)),
            c04 = Operation(grow(&c03)),
            c05 = Operation(grow(&c04)),
            c06 = Operation(grow(&c05)),
            c07 = Operation(grow(&c06)),
            c08 = Operation(grow(&c07)),
            c09 = Operation(grow(&c08)),
            c10 = Operation(grow(&c09)),
            c11 = Operation(grow(&c10)),
            c12 = Operation(grow(&c11)),
            c13 = Operation(grow(&c12)),
            c14 = Operation(grow(&c13)),
            c15 = Operation(grow(&c14)),
            c16 = Operation(grow(&c15)),
            c17 = Operation(grow(&c16)),
            c18 = Operation(grow(&c17)),
            c19 = Operation(grow(&c18)),
            c20 = Operation(grow(&c19)),
            c21 = Operation(grow(&c20)),
            c22 = Operation(grow(&c21)),
            c23 = Operation(grow(&c22)),
            c24 = Operation(grow(&c23)),
            c25 = Operation(grow(&c24)),
            c26 = Operation(grow(&c25)),
            c27 = Operation(grow(&c26)),
            c28 = Operation(grow(&c27)),
            c29 = Operation(grow(&c28)),
            c30 = Operation(grow(&c29)),
            c31 = Operation(grow(&c30)),
            c32 = Operation(grow(&c31)),
            c33 = Operation(grow(&c32)),
            c34 = Operation(grow(&c33)),
            c35 = Operation(grow(&c34)),
            c36 = Operation(grow(&c35)),
            c37 = Operation(grow(&c36)),
            c38 = Operation(grow(&c37)),
            c39 = Operation(grow(&c38)),
            c40 = Operation(grow(&c39)),
            c41 = Operation(grow(&c40)),
            c42 = Operation(grow(&c41)),
            c43 = Operation(grow(&c42)),
            c44 = Operation(grow(&c43)),
            c45 = Operation(grow(&c44)),
            c46 = Operation(grow(&c45)),
            c47 = Operation(grow(&c46)),
            c48 = Operation(grow(&c47)),
            c49 = Operation(grow(&c48)),
            c50 = Operation(grow(&c49)),
            c51 = Operation(grow(&c50)),
            c52 = Operation(grow(&c51)),
            c53 = Operation(grow(&c52)),
            c54 = Operation(grow(&c53)),
            c55 = Operation(grow(&c54)),
            c56 = Operation(grow(&c55)),
            c57 = Operation(grow(&c56)),
            c58 = Operation(grow(&c57)),
            c59 = Operation(grow(&c58)),
            c60 = Operation(grow(&c59)),
            c61 = Operation(grow(&c60)),
            c62 = Operation(grow(&c61)),
            c63 = Operation(grow(&c62)),
            c64 = Operation(grow(&c63)),
            c65 = Operation(grow(&c64)),
            c66 = Operation(grow(&c65)),
            c67 = Operation(grow(&c66)),
            c68 = Operation(grow(&c67)),
            c69 = Operation(grow(&c68)),
        }
        => c69.clone()
    }
}

#[tokio::test]
async fn large_chain_passes_owned_outputs_by_reference() {
    let out = Chain::run("x").await.expect("every step succeeds");
    assert_eq!(out, format!("x{}", "+".repeat(70)));
    assert_eq!(Chain::GRAPH.len(), 70);
}

/// Fails its first `fails` attempts, then succeeds; counts attempts and live futures.
async fn flaky(attempts: &Cell<u32>, fails: u32, live: &Rc<Cell<i32>>) -> Result<u64, Boom> {
    struct Alive(Rc<Cell<i32>>);
    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.set(self.0.get() - 1);
        }
    }
    live.set(live.get() + 1);
    let _alive = Alive(Rc::clone(live));
    let attempt = attempts.get() + 1;
    attempts.set(attempt);
    tokio::time::sleep(Duration::from_millis(5)).await;
    if attempt <= fails {
        Err(Boom("flaky"))
    } else {
        Ok(u64::from(attempt))
    }
}

macro_rules! retried {
    ($($name:ident)*) => {
        workflow! {
            /// Sixty-nine independent operations and one that needs three attempts.
            Retried(attempts: &Cell<u32>, live: &Rc<Cell<i32>>) -> u64 {
                Parallel {
                    $( $name = Operation(flaky(&Cell::new(0), 0, live)), )*
                    last = Operation(flaky(attempts, 2, live), retries = 2, backoff = "10ms"),
                }
                => last
            }
        }
    };
}

retried!(n00 n01 n02 n03 n04 n05 n06 n07 n08 n09 n10 n11 n12 n13 n14 n15 n16 n17 n18 n19 n20 n21 n22 n23 n24 n25 n26 n27 n28 n29 n30 n31 n32 n33 n34 n35 n36 n37 n38 n39 n40 n41 n42 n43 n44 n45 n46 n47 n48 n49 n50 n51 n52 n53 n54 n55 n56 n57 n58 n59 n60 n61 n62 n63 n64 n65 n66 n67 n68);

#[cfg_attr(miri, ignore = "tokio's timers are not run under miri")]
#[tokio::test(start_paused = true)]
async fn retries_in_a_large_workflow_drop_each_failed_attempt() {
    let attempts = Cell::new(0);
    let live = Rc::new(Cell::new(0));
    let outcome = Retried::runner().execute((&attempts, &live)).await;
    assert_eq!(outcome.result.expect("the third attempt succeeds"), 3);
    assert_eq!(attempts.get(), 3);
    // Every future, failed attempts included, was dropped: none is alive.
    assert_eq!(live.get(), 0);
    let last = outcome.report.node("last").expect("the node is reported");
    assert_eq!(last.attempts, 3);
}

/// Adds one to its input after a yield.
async fn inc(x: u64) -> Result<u64, Boom> {
    tokio::task::yield_now().await;
    Ok(x + 1)
}

/// Fails.
async fn broken(_: u64) -> Result<u64, Boom> {
    Err(Boom("broken"))
}

workflow! {
    /// Three layers of three: every node of a layer depends on every node of the layer before,
    /// so the plan routes those edges through joins.
    Layers(x: u64) -> u64 {
        Sequential {
            Parallel { a0 = Operation(inc(x)), a1 = Operation(inc(x)), a2 = Operation(inc(x)) },
            Parallel { b0 = Operation(inc(a0)), b1 = Operation(inc(a1)), b2 = Operation(inc(a2)) },
            Parallel { c0 = Operation(inc(b0)), c1 = Operation(inc(b1)), c2 = Operation(inc(b2)) },
        }
        => c0 + c1 + c2
    }
}

workflow! {
    /// As `Layers`, with a failing node in the middle layer.
    BrokenLayers(x: u64) -> u64 {
        Sequential {
            Parallel { a0 = Operation(inc(x)), a1 = Operation(inc(x)), a2 = Operation(inc(x)) },
            Parallel { b0 = Operation(inc(a0)), b1 = Operation(broken(a1)), b2 = Operation(inc(a2)) },
            Parallel { c0 = Operation(inc(b0)), c1 = Operation(inc(b2)), c2 = Operation(inc(b2)) },
        }
        => c0 + c1 + c2
    }
}

#[tokio::test]
async fn layers_are_joined_and_run_in_order() {
    let plan = &Layers::GRAPH.__plan();
    // Two joins (a -> b, b -> c), each with three sources and three targets.
    assert_eq!(plan.join_pred_count, &[3, 3]);
    assert_eq!(plan.join_succ.len(), 6);
    // 6 entries to joins and 6 direct data entries (a_i -> b_i, b_i -> c_i), not 18 edges.
    assert_eq!(plan.succ.len(), 12);
    // The graph itself still shows every edge.
    assert_eq!(Layers::GRAPH.edges().len(), 18);
    assert_eq!(Layers::run(0).await.expect("every node succeeds"), 9);
}

#[tokio::test]
async fn a_failure_before_a_join_aborts_every_node_after_it() {
    let outcome = BrokenLayers::runner().execute(0).await;
    let error = outcome.result.expect_err("b1 failed");
    let report = outcome.report;
    let status = |name: &str| report.node(name).expect("reported").status;
    assert_eq!(status("b1"), NodeStatus::Failed);
    assert_eq!(status("b0"), NodeStatus::Completed);
    assert_eq!(status("b2"), NodeStatus::Completed);
    for name in ["c0", "c1", "c2"] {
        assert_eq!(status(name), NodeStatus::Aborted, "{name}");
    }
    assert!(error.to_string().contains("b1"), "{error}");
}

/// A value that must sit on a 64-byte boundary.
#[repr(align(64))]
struct Aligned(u64);

/// Holds an over-aligned value across a suspension and reports whether it was aligned.
async fn aligned(small: &u8) -> Result<bool, Boom> {
    let value = Aligned(u64::from(*small));
    tokio::task::yield_now().await;
    let address = std::ptr::from_ref(&value) as usize;
    Ok(address.is_multiple_of(64) && value.0 == 7)
}

/// Makes a small output, so that arena places of different sizes and alignments alternate.
async fn byte() -> Result<u8, Boom> {
    Ok(7)
}

macro_rules! over_aligned {
    ($($name:ident)*) => {
        workflow! {
            /// Sixty-six over-aligned futures after one small one.
            OverAligned() -> bool {
                Sequential {
                    seed = Operation(byte()),
                    Parallel { $( $name = Operation(aligned(&seed)), )* },
                }
                => [$( $name ),*].iter().all(|ok| *ok)
            }
        }
    };
}

over_aligned!(a00 a01 a02 a03 a04 a05 a06 a07 a08 a09 a10 a11 a12 a13 a14 a15 a16 a17 a18 a19 a20 a21 a22 a23 a24 a25 a26 a27 a28 a29 a30 a31 a32 a33 a34 a35 a36 a37 a38 a39 a40 a41 a42 a43 a44 a45 a46 a47 a48 a49 a50 a51 a52 a53 a54 a55 a56 a57 a58 a59 a60 a61 a62 a63 a64 a65);

#[tokio::test]
async fn arena_places_keep_each_future_aligned() {
    assert!(OverAligned::run().await.expect("every node succeeds"));
}

#[test]
fn a_large_run_future_does_not_carry_its_nodes() {
    let live = Live::default();
    let run = Wide::run(&live);
    // Measured: 2304 bytes with the node set on the heap, 4536 with it inline in the future
    // (its 70 nodes at 32 bytes each), where every move of the future copied it. What stays
    // per node (about 33 bytes) is the generated `execute`'s own state, not analysed.
    let size = std::mem::size_of_val(&run);
    assert!(
        size < 70 * 48,
        "the run future of a 70-node workflow is {size} bytes"
    );
}
