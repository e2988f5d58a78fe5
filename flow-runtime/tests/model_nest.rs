//! A reference model of `ForEach` and `Loop`, and property tests that compare the runtime with
//! it on random nests with random failures.
//!
//! Each case is one nest node in a small parent graph, run by the scheduler on tokio's paused
//! clock: `each` (a `ForEach` or a `Loop`, driven by `for_each`, `for_each_collect`,
//! `for_each_stream`, `for_each_stream_collect`, `repeat_until` or `repeat_while`), beside
//! `wait`, an operation that sleeps until a random instant, followed by `stop`: `Complete(each)`
//! or `Cancel(each)`. Every instance is a nested run of a one-operation body that sleeps its
//! own time and then succeeds or fails.
//!
//! A `ForEach`'s items sleep distinct powers of two times 2 milliseconds, loop iterations an
//! even number of milliseconds, and the stop comes at an odd number of milliseconds, so no two
//! things happen at the same instant: whatever the limit, an instance's end is the sum of the
//! durations of the chain of instances whose places it took, a different set of powers of two
//! for every instance, and always even. The model then plays
//! the rules of `docs/semantics.md` (nested graphs) as a small event simulation, and the two
//! must agree on the node's output (or its error, naming the failed instance), its status, the
//! instant the driver ended, the instances started, completed, failed and withdrawn (from the
//! report's `NestReport` and from the instances' events in the root's log), the failed
//! instances the report lists, and the run's result.
//!
//! The model, the cases and the drivers' use are in `nest_model/mod.rs`, which `model.rs` shares.
//! Each property runs 1,000 random nests; `FLOW_MODEL_CASES` sets another number.

mod nest_model;

use std::cell::{Cell, RefCell};
use std::time::Duration;

use flowdag_runtime::__private::{
    Control, Decide, Edge, EdgeKind, FailurePolicy, Graph, Instant as Step, NestCtx, NestInfo,
    NestKind, NestOp, NodeInfo, NodeKind, Op, Pair, Plan, RunSetup, RunState, execute_nodes,
};
use flowdag_runtime::{EventKind, NodeError, NodeStatus, Report};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::time::{Instant, sleep_until};

use nest_model::*;

/// A parent graph: `each` (the nest node), `wait` (an operation) and, after `wait`, `stop`.
const fn parent(
    name: &'static str,
    nodes: &'static [NodeInfo],
    control: &'static Control,
) -> Graph {
    const EDGES: &[Edge] = &[Edge::__new(1, 2, EdgeKind::Sequence)];
    Graph::__new(
        name,
        nodes,
        EDGES,
        Plan::new(
            &[0, 0, 1],
            &[0, 0, 1, 1],
            &[2],
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
        .with_control(control),
    )
}

const EACH_NODES: &[NodeInfo] = &[
    NodeInfo::__new("each", NodeKind::ForEach, "ForEach", 1, 1),
    NodeInfo::__new("wait", NodeKind::Operation, "wait", 2, 1),
    NodeInfo::__new("stop", NodeKind::Cancel, "stop", 3, 1),
];
const LOOP_NODES: &[NodeInfo] = &[
    NodeInfo::__new("each", NodeKind::Loop, "Loop", 1, 1),
    NodeInfo::__new("wait", NodeKind::Operation, "wait", 2, 1),
    NodeInfo::__new("stop", NodeKind::Cancel, "stop", 3, 1),
];
const EACH_NEST: &[NestInfo] = &[NestInfo {
    node: 0,
    kind: NestKind::ForEach,
    body: &BODY,
}];
const LOOP_NEST: &[NestInfo] = &[NestInfo {
    node: 0,
    kind: NestKind::Loop,
    body: &BODY,
}];
static EACH_COMPLETE_CONTROL: Control = Control {
    instants: &[Step::None, Step::None, Step::Complete { node: 0 }],
    ..Control::NONE
}
.with_nests(EACH_NEST);
static EACH_CANCEL_CONTROL: Control = Control {
    scopes: &[&[0]],
    instants: &[Step::None, Step::None, Step::Cancel { scope: 0 }],
    ..Control::NONE
}
.with_nests(EACH_NEST);
static LOOP_CANCEL_CONTROL: Control = Control {
    scopes: &[&[0]],
    instants: &[Step::None, Step::None, Step::Cancel { scope: 0 }],
    ..Control::NONE
}
.with_nests(LOOP_NEST);
static EACH_COMPLETE: Graph = parent("EachComplete", EACH_NODES, &EACH_COMPLETE_CONTROL);
static EACH_CANCEL: Graph = parent("EachCancel", EACH_NODES, &EACH_CANCEL_CONTROL);
static LOOP_CANCEL: Graph = parent("LoopCancel", LOOP_NODES, &LOOP_CANCEL_CONTROL);

/// Runs the parent graph, `drive` being the nest node's driver; the stop at `stop_us`.
fn run<F, Fut>(graph: &'static Graph, stop_us: u64, drive: F) -> Result<Seen, String>
where
    F: Fn(NestCtx) -> Fut,
    Fut: Future<Output = (Got, Result<(), NodeError>)>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("no tokio runtime: {e}"))?;
    let got = &RefCell::new(Got::Withdrawn);
    let ended = &Cell::new(None);
    let (report, elapsed) = runtime.block_on(async {
        let t0 = Instant::now();
        let drive = &drive;
        let nodes = Pair::new(
            Pair::new(
                NestOp::new(move |nest: NestCtx| async move {
                    let (seen, result) = drive(nest).await;
                    ended.set(Some(t0.elapsed()));
                    got.replace(seen);
                    result
                }),
                Op::new(move || async move {
                    sleep_until(t0 + Duration::from_micros(stop_us)).await;
                    Ok(())
                }),
            ),
            Decide::new(|_: &RunState| true),
        );
        let finished = tokio::time::timeout(
            Duration::from_secs(24 * 3600),
            execute_nodes(graph, RunSetup::default(), nodes),
        )
        .await;
        (finished.map(|f| f.output(|| Ok(())).report), t0.elapsed())
    });
    let report = report.map_err(|_| "the run never finished".to_string())?;
    observed(&report, got.replace(Got::Withdrawn), ended.get(), elapsed)
}

/// What the run did, from its report.
fn observed(
    report: &Report,
    got: Got,
    ended: Option<Duration>,
    elapsed: Duration,
) -> Result<Seen, String> {
    let live: Vec<NodeStatus> = report.nodes().iter().map(|n| n.status).collect();
    if report.log().statuses() != live {
        return Err(format!(
            "the root's log replays to {:?}, not the live statuses {live:?}",
            report.log().statuses()
        ));
    }
    let status = report.status("each").ok_or("no node `each`")?;
    let nest = report.nest("each").ok_or("no nest report for `each`")?;
    // The instances that started, from their events in the root's log.
    let mut started: Vec<u64> = report
        .log()
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Requested))
        .filter_map(|e| e.path.as_ref()?.steps().last().map(|s| s.index))
        .collect();
    started.sort_unstable();
    if started.len() as u64 != nest.started {
        return Err(format!(
            "{} instances started by the report, {started:?} by the events",
            nest.started
        ));
    }
    let mut failed: Vec<u64> = nest.failures.iter().map(|(i, _)| *i).collect();
    failed.sort_unstable();
    if failed.len() as u64 != nest.failed {
        return Err(format!(
            "{} failed by the count, {failed:?} listed",
            nest.failed
        ));
    }
    Ok(Seen {
        got,
        status,
        ended_us: ended.map(|d| d.as_micros() as u64),
        started,
        completed: nest.completed,
        failed,
        withdrawn: nest.withdrawn,
        elapsed_us: elapsed.as_micros() as u64,
        succeeded: report.succeeded(),
    })
}

fn run_each(case: &EachCase) -> Result<Seen, String> {
    let graph = if case.stop.complete {
        &EACH_COMPLETE
    } else {
        &EACH_CANCEL
    };
    run(graph, case.stop.at_us, |nest| drive_each(nest, case))
}

fn run_loop(case: &LoopCase) -> Result<Seen, String> {
    run(&LOOP_CANCEL, case.cancel_us, |nest| drive_loop(nest, case))
}

fn cases() -> u32 {
    match std::env::var("FLOW_MODEL_CASES") {
        Ok(value) => value.trim().parse().unwrap_or_else(|_| {
            panic!("FLOW_MODEL_CASES must be a number of cases, not {value:?}")
        }),
        Err(_) => 1000,
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn agree(expected: Seen, observed: Result<Seen, String>) -> Result<(), TestCaseError> {
    let observed = observed.map_err(TestCaseError::fail)?;
    if observed == expected {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "the model says\n  {expected:?}\nthe run did\n  {observed:?}"
        )))
    }
}

proptest! {
    #![proptest_config(config())]

    /// Random `ForEach`es (iterator and stream, `fail_fast` and `collect`, limits, `min` with
    /// `rest = cancel | run`, a `Complete` or a `Cancel` at a random instant) with random
    /// failures end as the model says.
    #[test]
    fn for_each_agrees_with_the_model(case in each_case()) {
        agree(model_each(&case), run_each(&case))?;
    }

    /// Random until- and while-loops (`max`, `on_max = stop`, random tests, a `Cancel` at a
    /// random instant) with random failures end as the model says.
    #[test]
    fn loops_agree_with_the_model(case in loop_case()) {
        agree(model_loop(&case), run_loop(&case))?;
    }
}

// ---------------------------------------------------------------------------------------------
// The model itself, on cases worked out by hand, and what the generators reach
// ---------------------------------------------------------------------------------------------

fn item(millis: u64, fails: bool) -> Item {
    Item { millis, fails }
}

fn each(items: Vec<Item>) -> EachCase {
    EachCase {
        items,
        max_concurrency: 0,
        min: 0,
        rest_cancel: true,
        collect: false,
        stream: false,
        stop: Stop {
            complete: true,
            at_us: LATE_US,
        },
    }
}

#[test]
fn hand_worked_for_each_cases() {
    let three = vec![item(8, false), item(2, true), item(4, false)];
    // fail_fast: item 1 fails at 2ms; 0 and 2 are withdrawn.
    let seen = model_each(&each(three.clone()));
    assert_eq!(seen.got, Got::FailedAt(1));
    assert_eq!((seen.ended_us, seen.withdrawn), (Some(2000), 2));
    // collect: every instance runs; the failure is kept in its place.
    let seen = model_each(&EachCase {
        collect: true,
        ..each(three.clone())
    });
    assert_eq!(seen.got, Got::Each(vec![Ok(0), Err(1), Ok(2)]));
    assert_eq!(seen.ended_us, Some(8000));
    // A limit of one: one after the other; min = 1 with rest = run: settled at 8ms with item
    // 0, the failure of item 1 after it is reported and does not fail the node.
    let seen = model_each(&EachCase {
        max_concurrency: 1,
        min: 1,
        rest_cancel: false,
        ..each(three.clone())
    });
    assert_eq!(seen.got, Got::Each(vec![Ok(0)]));
    assert_eq!((seen.ended_us, seen.failed.clone()), (Some(14000), vec![1]));
    // Complete at 5ms: item 2 completed, item 0 withdrawn.
    let seen = model_each(&EachCase {
        collect: true,
        stop: Stop {
            complete: true,
            at_us: 5000,
        },
        ..each(three)
    });
    assert_eq!(seen.got, Got::Each(vec![Err(1), Ok(2)]));
    assert_eq!((seen.withdrawn, seen.elapsed_us), (1, 5000));
    // Each model case agrees with the runtime.
    for case in [
        each(vec![item(8, false), item(2, true), item(4, false)]),
        each(vec![]),
    ] {
        assert_eq!(run_each(&case), Ok(model_each(&case)), "{case:?}");
    }
}

#[test]
fn hand_worked_loop_cases() {
    let it = |millis, fails, done, go| Iteration {
        item: item(millis, fails),
        done,
        go,
    };
    let case = LoopCase {
        iterations: vec![
            it(10, false, false, true),
            it(10, false, true, true),
            it(10, false, false, false),
        ],
        max: 2,
        stop_at_max: false,
        until: true,
        cancel_us: LATE_US,
    };
    assert_eq!(model_loop(&case).got, Got::Loop(Some(1)));
    // While: both tests hold, and the test once more after max still holds... it does not here.
    let seen = model_loop(&LoopCase {
        until: false,
        ..case.clone()
    });
    assert_eq!(seen.got, Got::Loop(Some(1)));
    let mut exhausted = LoopCase {
        until: false,
        ..case.clone()
    };
    exhausted.iterations[2].go = true;
    assert_eq!(model_loop(&exhausted).got, Got::Exhausted(2));
    assert_eq!(run_loop(&exhausted), Ok(model_loop(&exhausted)));
    // Cancelled at 13ms, in the second iteration.
    let cancelled = LoopCase {
        cancel_us: 13_000,
        ..case
    };
    let seen = model_loop(&cancelled);
    assert_eq!(
        (seen.got.clone(), seen.withdrawn, seen.completed),
        (Got::Withdrawn, 1, 1)
    );
    assert_eq!(run_loop(&cancelled), Ok(seen));
}

/// Samples each generator and counts the ends the model gives: each kind must come up, or the
/// properties would test less than they say.
#[test]
fn the_generators_reach_every_kind_of_end() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut kinds = std::collections::BTreeSet::new();
    for _ in 0..2000 {
        let Ok(tree) = each_case().new_tree(&mut runner) else {
            continue;
        };
        let case = tree.current();
        let seen = model_each(&case);
        let kind = match &seen.got {
            Got::FailedAt(_) => "each failed",
            Got::Withdrawn => "each withdrawn",
            Got::Each(_) if seen.withdrawn > 0 && case.min > 0 => "each min, rest cancelled",
            Got::Each(_) if seen.withdrawn > 0 => "each completed early",
            Got::Each(o) if o.iter().any(Result::is_err) => "each collected a failure",
            Got::Each(o) if case.min > 0 && o.len() < case.items.len() => "each min, rest ran",
            Got::Each(_) => "each all",
            _ => "?",
        };
        kinds.insert(kind);
        let Ok(tree) = loop_case().new_tree(&mut runner) else {
            continue;
        };
        let seen = model_loop(&tree.current());
        kinds.insert(match seen.got {
            Got::FailedAt(_) => "loop failed",
            Got::Withdrawn => "loop withdrawn",
            Got::Exhausted(_) => "loop exhausted",
            Got::Loop(None) => "loop ran none",
            Got::Loop(Some(_)) => "loop output",
            Got::Each(_) => "?",
        });
    }
    let expected = [
        "each all",
        "each collected a failure",
        "each completed early",
        "each failed",
        "each min, rest cancelled",
        "each min, rest ran",
        "each withdrawn",
        "loop exhausted",
        "loop failed",
        "loop output",
        "loop ran none",
        "loop withdrawn",
    ];
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), expected);
}
