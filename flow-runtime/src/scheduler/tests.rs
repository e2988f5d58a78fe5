//! The scheduler driven by hand on hand-built plans: withdrawal.

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use super::{ALL_NODES, Scheduler};
use crate::error::NodeError;
use crate::events::EventKind;
use crate::graph::{Control, Edge, EdgeKind, Graph, NodeInfo, NodeKind, Plan};
use crate::nodes::{Op, Pair, Table};
use crate::options::RunOptions;
use crate::policy::FailurePolicy;
use crate::status::NodeStatus;

/// A future that never ends and counts its drops and its starts.
struct Forever(&'static AtomicUsize);

impl Future for Forever {
    type Output = Result<(), NodeError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Pending
    }
}

impl Drop for Forever {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

const fn op(name: &'static str) -> NodeInfo {
    NodeInfo::__new(name, NodeKind::Operation, name, 1, 1)
}

/// `slow` never ends; `quick` ends at once; `reads_slow` reads `slow`'s data; `after_slow`
/// comes after `slow` in sequence. Scope 0 is `slow`.
static CONTROL: Control = Control {
    scopes: &[&[0]],
    ..Control::NONE
};
static GRAPH: Graph = Graph::__new(
    "Withdraw",
    &[op("slow"), op("quick"), op("reads_slow"), op("after_slow")],
    &[
        Edge::__new(0, 2, EdgeKind::Data),
        Edge::__new(0, 3, EdgeKind::Sequence),
    ],
    Plan::new(
        &[0, 0, 1, 1],
        &[0, 2, 2, 2, 2],
        &[2 | Plan::DATA, 3],
        &[0, 1],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(&CONTROL),
);

fn ready() -> impl Future<Output = Result<(), NodeError>> {
    async { Ok(()) }
}

#[test]
fn a_withdrawn_running_node_is_dropped_at_once_and_the_run_succeeds() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    static AFTER: AtomicUsize = AtomicUsize::new(0);
    let set = pin!(Pair::new(
        Pair::new(Op::new(|| Forever(&DROPS)), Op::new(ready)),
        Pair::new(
            Op::new(ready),
            Op::new(|| async {
                AFTER.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        ),
    ));
    let mut table = Table::new(set);
    let mut scheduler = Scheduler::new(&GRAPH, &RunOptions::default());
    let cx = Context::from_waker(Waker::noop());
    let mut wakes = None;
    assert!(scheduler.poll(table.leaves(), &mut wakes, &cx).is_pending());
    assert_eq!(scheduler.nodes[0].status, NodeStatus::Running);
    assert_eq!(DROPS.load(Ordering::SeqCst), 0);

    // Withdrawn by `quick`: applied before anything else is polled.
    scheduler.withdraw(0, 1);
    assert!(scheduler.poll(table.leaves(), &mut wakes, &cx).is_ready());
    assert_eq!(DROPS.load(Ordering::SeqCst), 1, "the future was dropped");
    assert_eq!(
        AFTER.load(Ordering::SeqCst),
        1,
        "a successor in sequence ran"
    );
    assert_eq!(scheduler.in_flight, 0);

    let finished = scheduler.finish();
    assert!(finished.verdict.succeeded);
    use NodeStatus::*;
    assert_eq!(
        finished.statuses,
        [Withdrawn, Completed, Withdrawn, Completed],
        "the data successor is withdrawn too; the one in sequence counts it as done"
    );
    let log = finished.log.expect("recorded");
    let withdrawn: Vec<_> = log
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Withdrawn { cause } => Some((e.node_name, cause)),
            _ => None,
        })
        .collect();
    assert_eq!(
        withdrawn,
        [(Some("slow"), "quick"), (Some("reads_slow"), "quick")]
    );
    assert_eq!(log.statuses()[0], Withdrawn);
    drop(table);
    assert_eq!(DROPS.load(Ordering::SeqCst), 1, "dropped exactly once");
}

/// Two roots that never end, under a limit of one: the second waits in the ready list.
static PAIR: Graph = Graph::__new(
    "WithdrawAll",
    &[op("first"), op("second")],
    &[],
    Plan::new(
        &[0, 0],
        &[0, 0, 0],
        &[],
        &[0, 1],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::FailFast,
    ),
);

#[test]
fn withdrawing_every_node_drops_the_running_and_never_starts_the_ready() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    static STARTS: AtomicUsize = AtomicUsize::new(0);
    let set = pin!(Pair::new(
        Op::new(|| {
            STARTS.fetch_add(1, Ordering::SeqCst);
            Forever(&DROPS)
        }),
        Op::new(|| {
            STARTS.fetch_add(1, Ordering::SeqCst);
            Forever(&DROPS)
        }),
    ));
    let mut table = Table::new(set);
    let options = RunOptions {
        max_concurrency: NonZeroUsize::new(1),
        ..RunOptions::default()
    };
    let mut scheduler = Scheduler::new(&PAIR, &options);
    let cx = Context::from_waker(Waker::noop());
    let mut wakes = None;
    assert!(scheduler.poll(table.leaves(), &mut wakes, &cx).is_pending());
    assert_eq!(STARTS.load(Ordering::SeqCst), 1);
    assert_eq!(scheduler.ready, [1]);

    scheduler.withdraw(ALL_NODES, 0);
    assert!(scheduler.poll(table.leaves(), &mut wakes, &cx).is_ready());
    assert_eq!(
        STARTS.load(Ordering::SeqCst),
        1,
        "the ready node never started"
    );
    assert_eq!(DROPS.load(Ordering::SeqCst), 1);
    assert!(scheduler.ready.is_empty());
    let finished = scheduler.finish();
    // Withdrawn is no failure, even under FailFast with sinks.
    assert!(finished.verdict.succeeded);
    assert_eq!(
        finished.statuses,
        [NodeStatus::Withdrawn, NodeStatus::Withdrawn]
    );
    // The running node made one attempt; the other none.
    assert_eq!(
        super::attempts_of(&finished.extras.attempts, 0, NodeStatus::Withdrawn),
        1
    );
    assert_eq!(
        super::attempts_of(&finished.extras.attempts, 1, NodeStatus::Withdrawn),
        0
    );
}
