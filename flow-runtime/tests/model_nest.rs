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
//! Each property runs 1,000 random nests; `FLOW_MODEL_CASES` sets another number.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use flow_runtime::__private::{
    Control, Decide, Edge, EdgeKind, FailurePolicy, ForEachConfig, Graph, Instant as Step,
    LoopConfig, NestCtx, NestInfo, NestKind, NestOp, NodeInfo, NodeKind, Op, Pair, Plan,
    RunOptions, RunState, Slot, complete, execute, execute_nodes, for_each, for_each_collect,
    for_each_stream, for_each_stream_collect, repeat_until, repeat_while, require,
};
use flow_runtime::{EventKind, NodeError, NodeStatus, Outcome, Report, WorkflowError};
use futures_core::Stream;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::time::{Instant, sleep, sleep_until};

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

/// One instance's body: sleeps `millis`, then succeeds or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    millis: u64,
    fails: bool,
}

/// The step after `wait`: `Complete(each)` or `Cancel(each)`, at `at_us` microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stop {
    complete: bool,
    at_us: u64,
}

/// A stop after anything a case can do (the longest `ForEach` takes 254ms, the longest
/// `Loop` 6 * 40ms): it changes nothing, and the run ends then.
const LATE_US: u64 = 10_001_000;

#[derive(Debug, Clone)]
struct EachCase {
    /// Item `i`'s output is `i`.
    items: Vec<Item>,
    max_concurrency: usize,
    min: usize,
    rest_cancel: bool,
    collect: bool,
    stream: bool,
    stop: Stop,
}

/// One iteration of a `Loop`: its body, its `until` test (after it), its `while` test (before
/// it; the entry after the last iteration is the test once more after `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Iteration {
    item: Item,
    done: bool,
    go: bool,
}

#[derive(Debug, Clone)]
struct LoopCase {
    /// `max + 1` entries; iteration `i`'s output is `i`.
    iterations: Vec<Iteration>,
    max: u32,
    stop_at_max: bool,
    until: bool,
    /// `Cancel(each)` at this instant.
    cancel_us: u64,
}

/// What the nest node ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    /// A `ForEach`'s output: each entry the instance's index, or (`collect`) the index of a
    /// failed instance.
    Each(Vec<Result<u64, u64>>),
    /// A `Loop`'s output (an until-loop's is never `None`).
    Loop(Option<u64>),
    /// `NodeError::Workflow` of this instance.
    FailedAt(u64),
    /// `NodeError::LoopExhausted`.
    Exhausted(u32),
    /// The node was withdrawn: its driver never returned.
    Withdrawn,
}

/// What a case must do: the model's answer, and what the run is compared on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    got: Got,
    status: NodeStatus,
    /// When the driver returned, in microseconds (`None`: withdrawn).
    ended_us: Option<u64>,
    /// Instances started, in order of index.
    started: Vec<u64>,
    completed: u64,
    /// The failed instances, in order of index.
    failed: Vec<u64>,
    withdrawn: u64,
    /// The run's end, in microseconds.
    elapsed_us: u64,
    succeeded: bool,
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

fn us(millis: u64) -> u64 {
    millis * 1000
}

/// A `ForEach`, played as events: instances start in input order while fewer than the limit
/// are live; the one that ends first is handled next, unless the stop comes before it.
fn model_each(case: &EachCase) -> Seen {
    let n = case.items.len();
    let limit = match case.max_concurrency {
        0 => usize::MAX,
        m => m,
    };
    let mut t = 0u64;
    let mut next = 0usize;
    // (end, index)
    let mut live: Vec<(u64, usize)> = Vec::new();
    let mut outputs: Vec<Option<Result<u64, u64>>> = Vec::new();
    let mut started = Vec::new();
    let (mut completed, mut failed, mut withdrawn) = (0u64, Vec::new(), 0u64);
    let mut settled = false;
    let flatten = |outputs: &mut Vec<Option<Result<u64, u64>>>| {
        Got::Each(std::mem::take(outputs).into_iter().flatten().collect())
    };
    let got = loop {
        while next < n && live.len() < limit {
            started.push(next as u64);
            if !settled {
                outputs.push(None);
            }
            live.push((t + us(case.items[next].millis), next));
            next += 1;
        }
        if next == n && live.is_empty() {
            break flatten(&mut outputs);
        }
        let Some(first) = (0..live.len()).min_by_key(|&k| live[k].0) else {
            unreachable!("live is not empty");
        };
        let (end, i) = live[first];
        if case.stop.at_us < end {
            t = case.stop.at_us;
            withdrawn += live.len() as u64;
            break if case.stop.complete {
                flatten(&mut outputs)
            } else {
                Got::Withdrawn
            };
        }
        t = end;
        live.swap_remove(first);
        if case.items[i].fails {
            failed.push(i as u64);
            if settled {
                continue;
            }
            if case.collect {
                outputs[i] = Some(Err(i as u64));
            } else {
                withdrawn += live.len() as u64;
                break Got::FailedAt(i as u64);
            }
        } else {
            completed += 1;
            if !settled {
                outputs[i] = Some(Ok(i as u64));
                if case.min > 0 && completed == case.min as u64 {
                    settled = true;
                    if case.rest_cancel {
                        withdrawn += live.len() as u64;
                        break flatten(&mut outputs);
                    }
                }
            }
        }
    };
    failed.sort_unstable();
    finish(
        got,
        t,
        case.stop.at_us,
        started,
        completed,
        failed,
        withdrawn,
    )
}

/// A `Loop`, iteration by iteration.
fn model_loop(case: &LoopCase) -> Seen {
    let mut t = 0u64;
    let mut prev: Option<u64> = None;
    let mut started = Vec::new();
    let (mut completed, mut failed, mut withdrawn) = (0u64, Vec::new(), 0u64);
    let mut got = None;
    for i in 0..case.max as usize {
        let iteration = case.iterations[i];
        if !case.until && !iteration.go {
            got = Some(Got::Loop(prev));
            break;
        }
        started.push(i as u64);
        if case.cancel_us < t + us(iteration.item.millis) {
            t = case.cancel_us;
            withdrawn += 1;
            got = Some(Got::Withdrawn);
            break;
        }
        t += us(iteration.item.millis);
        if iteration.item.fails {
            failed.push(i as u64);
            got = Some(Got::FailedAt(i as u64));
            break;
        }
        completed += 1;
        if case.until && iteration.done {
            got = Some(Got::Loop(Some(i as u64)));
            break;
        }
        prev = Some(i as u64);
    }
    let got = got.unwrap_or_else(|| {
        let tested_again = !case.until && !case.iterations[case.max as usize].go;
        if case.stop_at_max || tested_again {
            Got::Loop(prev)
        } else {
            Got::Exhausted(case.max)
        }
    });
    finish(
        got,
        t,
        case.cancel_us,
        started,
        completed,
        failed,
        withdrawn,
    )
}

/// The rest of a [`Seen`] from how the node ended, at `t`, beside a stop at `stop_us`.
fn finish(
    got: Got,
    t: u64,
    stop_us: u64,
    started: Vec<u64>,
    completed: u64,
    failed: Vec<u64>,
    withdrawn: u64,
) -> Seen {
    let status = match got {
        Got::Withdrawn => NodeStatus::Withdrawn,
        Got::FailedAt(_) | Got::Exhausted(_) => NodeStatus::Failed,
        Got::Each(_) | Got::Loop(_) => NodeStatus::Completed,
    };
    Seen {
        ended_us: (status != NodeStatus::Withdrawn).then_some(t),
        got,
        status,
        started,
        completed,
        failed,
        withdrawn,
        // `wait` and the stop end at `stop_us`; the node by then, or then.
        elapsed_us: t.max(stop_us),
        succeeded: status != NodeStatus::Failed,
    }
}

// ---------------------------------------------------------------------------------------------
// The runtime
// ---------------------------------------------------------------------------------------------

/// An instance's operation failed.
#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

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

/// One instance: a run of `BODY` whose operation sleeps `item.millis` and then fails or puts
/// out `value`.
async fn instance<T: Clone>(opts: RunOptions, item: Item, value: T) -> Outcome<T> {
    let slot = &Slot::new();
    let value = &value;
    let node = (move || {
        let value = value.clone();
        async move {
            sleep(Duration::from_millis(item.millis)).await;
            let result = if item.fails { Err(Declined) } else { Ok(value) };
            complete(slot, result)
        }
    },);
    execute(&BODY, opts, node)
        .await
        .output(|| Ok(require(slot, "step")?.clone()))
}

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

/// The items of a `ForEach(x in stream ..)`: every other poll is `Pending` (woken at once), so
/// that the driver meets a stream that is not ready.
struct Items {
    items: VecDeque<(u64, Item)>,
    ready: bool,
}

impl Stream for Items {
    type Item = (u64, Item);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<(u64, Item)>> {
        self.ready = !self.ready;
        if self.ready {
            Poll::Ready(self.items.pop_front())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// The instance a nest's error names.
fn index_of(error: &WorkflowError) -> u64 {
    error
        .path()
        .and_then(|path| path.steps().last())
        .map_or(u64::MAX, |step| step.index)
}

/// A driver's result as a [`Got`], and the node's result.
fn got_of<T>(
    result: Result<T, NodeError>,
    ok: impl FnOnce(&T) -> Got,
) -> (Got, Result<(), NodeError>) {
    match result {
        Ok(value) => (ok(&value), Ok(())),
        Err(error) => {
            let got = match &error {
                NodeError::Workflow(inner) => Got::FailedAt(index_of(inner)),
                NodeError::LoopExhausted { max } => Got::Exhausted(*max),
                other => panic!("a nest driver failed with {other:?}"),
            };
            (got, Err(error))
        }
    }
}

fn entries(results: &[Result<u64, WorkflowError>]) -> Got {
    Got::Each(
        results
            .iter()
            .map(|r| r.as_ref().copied().map_err(index_of))
            .collect(),
    )
}

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
            execute_nodes(graph, RunOptions::default(), nodes),
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
    let config = ForEachConfig {
        max_concurrency: case.max_concurrency,
        min: case.min,
        rest_cancel: case.rest_cancel,
    };
    let items = || {
        case.items
            .iter()
            .copied()
            .enumerate()
            .map(|(i, x)| (i as u64, x))
    };
    let body = |(i, item): (u64, Item), opts| instance(opts, item, i);
    let stream = || Items {
        items: items().collect(),
        ready: false,
    };
    run(graph, case.stop.at_us, |nest| async move {
        match (case.stream, case.collect) {
            (false, false) => {
                let r = for_each(nest, items(), config, body).await;
                got_of(r, |o| Got::Each(o.iter().map(|&i| Ok(i)).collect()))
            }
            (false, true) => got_of(for_each_collect(nest, items(), config, body).await, |o| {
                entries(o)
            }),
            (true, false) => {
                let r = for_each_stream(nest, stream(), config, body).await;
                got_of(r, |o| Got::Each(o.iter().map(|&i| Ok(i)).collect()))
            }
            (true, true) => got_of(
                for_each_stream_collect(nest, stream(), config, body).await,
                |o| entries(o),
            ),
        }
    })
}

fn run_loop(case: &LoopCase) -> Result<Seen, String> {
    let config = LoopConfig {
        max: case.max,
        stop_at_max: case.stop_at_max,
    };
    let at = |prev: Option<u64>| prev.map_or(0, |p| p as usize + 1);
    run(&LOOP_CANCEL, case.cancel_us, |nest| async move {
        if case.until {
            let body = |prev: Option<u64>, opts| {
                let i = at(prev);
                let iteration = case.iterations[i];
                instance(opts, iteration.item, (i as u64, iteration.done))
            };
            got_of(repeat_until(nest, config, body).await, |&o| {
                Got::Loop(Some(o))
            })
        } else {
            let test = |prev: Option<&u64>| case.iterations[at(prev.copied())].go;
            let body = |prev: Option<u64>, opts| {
                let i = at(prev);
                instance(opts, case.iterations[i].item, i as u64)
            };
            got_of(repeat_while(nest, config, test, body).await, |&o| {
                Got::Loop(o)
            })
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Random nests
// ---------------------------------------------------------------------------------------------

/// Up to 7 items sleeping distinct powers of two times 2 milliseconds (2 to 128), a quarter
/// failing.
fn items() -> impl Strategy<Value = Vec<Item>> {
    (0u32..=7)
        .prop_flat_map(|n| {
            (
                Just((0..n).collect::<Vec<u32>>()).prop_shuffle(),
                prop::collection::vec(prop::bool::weighted(0.25), n as usize),
            )
        })
        .prop_map(|(powers, fails)| {
            powers
                .into_iter()
                .zip(fails)
                .map(|(p, fails)| Item {
                    millis: 2 << p,
                    fails,
                })
                .collect()
        })
}

/// A stop at an odd number of milliseconds, within the span of a nest or after it.
fn stop_us(within: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (0..within).prop_map(|half| (2 * half + 1) * 1000),
        1 => Just(LATE_US),
    ]
}

fn each_case() -> impl Strategy<Value = EachCase> {
    (
        items(),
        prop_oneof![Just(0usize), 1usize..=4],
        prop_oneof![2 => Just(0usize), 1 => 1usize..=8],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        stop_us(130),
    )
        .prop_map(
            |(items, max_concurrency, min, rest_cancel, collect, stream, complete, at_us)| {
                EachCase {
                    items,
                    max_concurrency,
                    min,
                    rest_cancel,
                    collect,
                    stream,
                    stop: Stop { complete, at_us },
                }
            },
        )
}

fn iteration() -> impl Strategy<Value = Iteration> {
    (
        (1u64..=20).prop_map(|half| 2 * half),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.8),
    )
        .prop_map(|(millis, fails, done, go)| Iteration {
            item: Item { millis, fails },
            done,
            go,
        })
}

fn loop_case() -> impl Strategy<Value = LoopCase> {
    (1u32..=6)
        .prop_flat_map(|max| {
            (
                prop::collection::vec(iteration(), max as usize + 1),
                Just(max),
                any::<bool>(),
                any::<bool>(),
                stop_us(100),
            )
        })
        .prop_map(
            |(iterations, max, stop_at_max, until, cancel_us)| LoopCase {
                iterations,
                max,
                stop_at_max,
                until,
                cancel_us,
            },
        )
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
