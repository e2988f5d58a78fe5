//! The reference model of `ForEach` and `Loop` shared by `model_nest.rs` (nests on their own,
//! with `Complete` and `Cancel`) and `model.rs` (nests as nodes of random workflows): random
//! cases, what the rules say they end with, and the drivers that run them.
#![allow(dead_code, reason = "each test crate uses part of it")]

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use flowdag_runtime::__private::{
    FailurePolicy, ForEachConfig, Graph, LoopConfig, NestCtx, NodeInfo, NodeKind, Plan, RunSetup,
    Slot, complete, execute, for_each, for_each_collect, for_each_stream, for_each_stream_collect,
    repeat_until, repeat_while, require,
};
use flowdag_runtime::{NodeError, NodeStatus, Outcome, WorkflowError};
use futures_core::Stream;
use proptest::prelude::*;
use tokio::time::sleep;

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

/// One instance's body: sleeps `millis`, then succeeds or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    pub millis: u64,
    pub fails: bool,
}

/// The step after `wait`: `Complete(each)` or `Cancel(each)`, at `at_us` microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    pub complete: bool,
    pub at_us: u64,
}

/// A stop after anything a case can do (the longest `ForEach` takes 254ms, the longest
/// `Loop` 6 * 40ms): it changes nothing, and the run ends then.
pub const LATE_US: u64 = 10_001_000;

#[derive(Debug, Clone)]
pub struct EachCase {
    /// Item `i`'s output is `i`.
    pub items: Vec<Item>,
    pub max_concurrency: usize,
    pub min: usize,
    pub rest_cancel: bool,
    pub collect: bool,
    pub stream: bool,
    pub stop: Stop,
}

/// One iteration of a `Loop`: its body, its `until` test (after it), its `while` test (before
/// it; the entry after the last iteration is the test once more after `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iteration {
    pub item: Item,
    pub done: bool,
    pub go: bool,
}

#[derive(Debug, Clone)]
pub struct LoopCase {
    /// `max + 1` entries; iteration `i`'s output is `i`.
    pub iterations: Vec<Iteration>,
    pub max: u32,
    pub stop_at_max: bool,
    pub until: bool,
    /// `Cancel(each)` at this instant.
    pub cancel_us: u64,
}

/// What the nest node ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
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
pub struct Seen {
    pub got: Got,
    pub status: NodeStatus,
    /// When the driver returned, in microseconds (`None`: withdrawn).
    pub ended_us: Option<u64>,
    /// Instances started, in order of index.
    pub started: Vec<u64>,
    pub completed: u64,
    /// The failed instances, in order of index.
    pub failed: Vec<u64>,
    pub withdrawn: u64,
    /// The run's end, in microseconds.
    pub elapsed_us: u64,
    pub succeeded: bool,
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

pub fn us(millis: u64) -> u64 {
    millis * 1000
}

/// A `ForEach`, played as events: instances start in input order while fewer than the limit
/// are live; the one that ends first is handled next, unless the stop comes before it.
pub fn model_each(case: &EachCase) -> Seen {
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
pub fn model_loop(case: &LoopCase) -> Seen {
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
pub fn finish(
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
pub struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

/// The body's graph: one operation.
pub static BODY: Graph = Graph::__new(
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
pub async fn instance<T: Clone>(opts: RunSetup, item: Item, value: T) -> Outcome<T> {
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

/// The items of a `ForEach(x in stream ..)`: every other poll is `Pending` (woken at once), so
/// that the driver meets a stream that is not ready.
pub struct Items {
    pub items: VecDeque<(u64, Item)>,
    pub ready: bool,
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
pub fn index_of(error: &WorkflowError) -> u64 {
    error
        .path()
        .and_then(|path| path.steps().last())
        .map_or(u64::MAX, |step| step.index)
}

/// A driver's result as a [`Got`], and the node's result.
pub fn got_of<T>(
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

pub fn entries(results: &[Result<u64, WorkflowError>]) -> Got {
    Got::Each(
        results
            .iter()
            .map(|r| r.as_ref().copied().map_err(index_of))
            .collect(),
    )
}

/// Runs `case`'s `ForEach` with the driver its options choose; what it ended with, and the
/// node's result.
pub async fn drive_each(nest: NestCtx, case: &EachCase) -> (Got, Result<(), NodeError>) {
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
}

/// Runs `case`'s `Loop` with `repeat_until` or `repeat_while`; what it ended with, and the
/// node's result.
pub async fn drive_loop(nest: NestCtx, case: &LoopCase) -> (Got, Result<(), NodeError>) {
    let config = LoopConfig {
        max: case.max,
        stop_at_max: case.stop_at_max,
    };
    let at = |prev: Option<u64>| prev.map_or(0, |p| p as usize + 1);
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
}

// ---------------------------------------------------------------------------------------------
// Random nests
// ---------------------------------------------------------------------------------------------

/// Up to 7 items sleeping distinct powers of two times 2 milliseconds (2 to 128), a quarter
/// failing.
pub fn items() -> impl Strategy<Value = Vec<Item>> {
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
pub fn stop_us(within: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (0..within).prop_map(|half| (2 * half + 1) * 1000),
        1 => Just(LATE_US),
    ]
}

pub fn each_case() -> impl Strategy<Value = EachCase> {
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

pub fn iteration() -> impl Strategy<Value = Iteration> {
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

pub fn loop_case() -> impl Strategy<Value = LoopCase> {
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
