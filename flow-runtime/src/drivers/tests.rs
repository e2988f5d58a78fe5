//! The drivers run directly, on tokio's paused clock, with bodies that run a one-node graph.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::*;
use crate::graph::{Graph, NodeInfo, NodeKind, Plan};
use crate::nest::NestKind;
use crate::policy::FailurePolicy;
use crate::support::{complete, execute, require};

/// The body's graph: one operation.
static BODY: Graph = Graph::__new(
    "Body",
    &[NodeInfo::__new("step", NodeKind::Operation, "step", 1, 1)],
    &[],
    Plan::new(
        &[0],
        &[0, 0],
        &[],
        &[0],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    ),
);

fn ctx() -> NestCtx {
    NestCtx::detached("each", NestKind::ForEach, &BODY)
}

/// An instance's operation failed.
#[derive(Debug)]
struct Declined(u32);

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "item {} declined", self.0)
    }
}

impl std::error::Error for Declined {}

/// One instance: a run of `BODY` whose operation is `work`'s future.
async fn run_one<T, Fut>(opts: RunOptions, work: impl Fn() -> Fut) -> Outcome<T>
where
    T: Clone,
    Fut: Future<Output = Result<T, Declined>>,
{
    let slot = &Slot::new();
    let work = &work;
    let node = (move || async move { complete(slot, work().await) },);
    execute(&BODY, opts, node)
        .await
        .output(|| Ok(require(slot, "step")?.clone()))
}

/// Counts the instances alive (their future not dropped) and the most alive at once.
#[derive(Default)]
struct Alive {
    now: AtomicUsize,
    most: AtomicUsize,
    dropped: AtomicUsize,
}

/// Held by an instance's future for as long as it lives.
struct Held(Arc<Alive>);

impl Alive {
    fn hold(self: &Arc<Self>) -> Held {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        Held(Arc::clone(self))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

const fn limit(max_concurrency: usize) -> ForEachConfig {
    ForEachConfig {
        max_concurrency,
        min: 0,
        rest_cancel: true,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn a_for_each_with_captured_references_is_send_and_its_closure_infers() {
    let offset = Arc::new(5u32);
    let handle = tokio::spawn(async move {
        let offset = &offset;
        // The shape the macro emits: the node's `make` closure, the body closure without
        // a type on the item, references captured.
        let make = move |nest: NestCtx| async move {
            for_each(
                nest,
                for_each_source(vec![1u32, 2, 3]),
                ForEachConfig::default(),
                move |item, opts: RunOptions| async move {
                    let line = &item;
                    let slot = &Slot::new();
                    let node = (move || async move {
                        tokio::task::yield_now().await;
                        complete(slot, Ok::<u32, Declined>(*line + **offset))
                    },);
                    execute(&BODY, opts, node)
                        .await
                        .output(move || Ok(*require(slot, "step")?))
                },
            )
            .await
        };
        make(ctx()).await
    });
    assert_eq!(handle.await.ok().and_then(Result::ok), Some(vec![6, 7, 8]));
}

#[tokio::test(start_paused = true)]
async fn at_most_max_concurrency_instances_live_and_outputs_come_in_input_order() {
    let alive = Arc::new(Alive::default());
    let started = Instant::now();
    // Later items end sooner: completion order is not input order.
    let out = for_each(ctx(), 0..20u64, limit(3), |item, opts| {
        let held = alive.hold();
        async move {
            let _held = held;
            run_one(opts, || async move {
                sleep(ms(20 - item)).await;
                Ok(item * 10)
            })
            .await
        }
    })
    .await;
    assert_eq!(out.ok(), Some((0..20).map(|i| i * 10).collect::<Vec<_>>()));
    assert_eq!(
        alive.most.load(Ordering::SeqCst),
        3,
        "the limit was reached, never passed"
    );
    assert_eq!(alive.now.load(Ordering::SeqCst), 0, "every instance freed");
    assert_eq!(alive.dropped.load(Ordering::SeqCst), 20);
    assert!(started.elapsed() < ms(20 * 20 / 2), "instances overlapped");
}
