//! The scheduler driven by hand on hand-built plans: withdrawal.

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use super::{ALL_NODES, Scheduler};
use crate::error::NodeError;
use crate::events::EventKind;
use crate::graph::{Arm, Control, Edge, EdgeKind, Gate, Graph, NodeInfo, NodeKind, Plan, Rest};
use crate::nodes::{Decide, Op, Pair, Table};
use crate::options::RunOptions;
use crate::policy::FailurePolicy;
use crate::run_state::RunState;
use crate::scheduler::RunSetup;
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

async fn ready() -> Result<(), NodeError> {
    Ok(())
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
    let mut scheduler = Scheduler::new(&GRAPH, &RunSetup::default());
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
    let mut scheduler = Scheduler::new(&PAIR, &RunSetup::from(options));
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

/// `Race { a, b }` then `next`: `a` never ends, `b` ends at once; node 2 is the gate.
static RACE_CONTROL: Control = Control {
    scopes: &[&[0], &[1]],
    gates: &[Gate {
        node: 2,
        min: 1,
        rest: Rest::Cancel,
        first_arm: 0,
        arms: 2,
    }],
    arms: &[
        Arm {
            gate: 0,
            exits: 1,
            scope: 0,
        },
        Arm {
            gate: 0,
            exits: 1,
            scope: 1,
        },
    ],
    ..Control::NONE
};
static RACE: Graph = Graph::__new(
    "Race",
    &[
        op("a"),
        op("b"),
        NodeInfo::__new("race#1", NodeKind::Gate, "Race", 1, 1),
        op("next"),
    ],
    &[
        Edge::__new(0, 2, EdgeKind::Sequence),
        Edge::__new(1, 2, EdgeKind::Sequence),
        Edge::__new(2, 3, EdgeKind::Sequence),
    ],
    Plan::new(
        &[0, 0, 1, 1],
        &[0, 1, 2, 3, 3],
        &[Plan::GATE, 1 | Plan::GATE, 3],
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
    )
    .with_control(&RACE_CONTROL),
);

#[test]
fn a_race_drops_the_loser_before_its_gate_writes_the_winner() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    static WON: AtomicUsize = AtomicUsize::new(usize::MAX);
    let set = pin!(Pair::new(
        Pair::new(Op::new(|| Forever(&DROPS)), Op::new(ready)),
        Pair::new(
            Decide::new(|state: &RunState| {
                // The loser is gone before the gate's node runs.
                assert_eq!(DROPS.load(Ordering::SeqCst), 1);
                WON.store(state.winners(0)[0], Ordering::SeqCst);
                true
            }),
            Op::new(ready),
        ),
    ));
    let mut table = Table::new(set);
    let mut scheduler = Scheduler::new(&RACE, &RunSetup::default());
    let cx = Context::from_waker(Waker::noop());
    assert!(scheduler.poll(table.leaves(), &mut None, &cx).is_ready());
    assert_eq!(DROPS.load(Ordering::SeqCst), 1);
    assert_eq!(WON.load(Ordering::SeqCst), 1, "arm 1 (`b`) won");
    let finished = scheduler.finish();
    assert!(finished.verdict.succeeded);
    use NodeStatus::*;
    assert_eq!(
        finished.statuses,
        [Withdrawn, Completed, Completed, Completed]
    );
    let log = finished.log.expect("recorded");
    let kinds: Vec<String> = log
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Won { .. } | EventKind::Withdrawn { .. }))
        .map(|e| format!("{} {:?}", e.node_name.unwrap_or("-"), e.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            "race#1 Won { arms: [1] }",
            "a Withdrawn { cause: \"race#1\" }"
        ]
    );
}

/// A future that never ends and counts its polls (first counter) and its drops (second).
struct Polled(&'static AtomicUsize, &'static AtomicUsize);

impl Future for Polled {
    type Output = Result<(), NodeError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Poll::Pending
    }
}

impl Drop for Polled {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

/// `Race { a, b }` where `a` wins on its first poll, before `b` was polled.
static FIRST_CONTROL: Control = Control {
    scopes: &[&[0], &[1]],
    gates: &[Gate {
        node: 2,
        min: 1,
        rest: Rest::Cancel,
        first_arm: 0,
        arms: 2,
    }],
    arms: &[
        Arm {
            gate: 0,
            exits: 1,
            scope: 0,
        },
        Arm {
            gate: 0,
            exits: 1,
            scope: 1,
        },
    ],
    ..Control::NONE
};
static FIRST: Graph = Graph::__new(
    "First",
    &[
        op("a"),
        op("b"),
        NodeInfo::__new("race#1", NodeKind::Gate, "Race", 1, 1),
    ],
    &[],
    Plan::new(
        &[0, 0, 1],
        &[0, 1, 2, 2],
        &[Plan::GATE, 1 | Plan::GATE],
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
    .with_control(&FIRST_CONTROL),
);

#[test]
fn a_loser_due_in_the_same_wake_up_is_withdrawn_before_it_is_polled() {
    static POLLS: AtomicUsize = AtomicUsize::new(0);
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    let set = pin!(Pair::new(
        Pair::new(Op::new(ready), Op::new(|| Polled(&POLLS, &DROPS))),
        Decide::new(|_: &RunState| true),
    ));
    let mut table = Table::new(set);
    let mut scheduler = Scheduler::new(&FIRST, &RunSetup::default());
    let cx = Context::from_waker(Waker::noop());
    assert!(scheduler.poll(table.leaves(), &mut None, &cx).is_ready());
    assert_eq!(POLLS.load(Ordering::SeqCst), 0, "never polled");
    assert_eq!(DROPS.load(Ordering::SeqCst), 1, "dropped once");
    let finished = scheduler.finish();
    assert!(finished.verdict.succeeded);
    use NodeStatus::*;
    assert_eq!(finished.statuses, [Completed, Withdrawn, Completed]);
}
