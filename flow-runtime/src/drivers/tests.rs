//! The drivers run directly, on tokio's paused clock, with bodies that run a one-node graph.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::*;
use crate::graph::{
    Control, Edge, EdgeKind, Graph, Instant as Step, NestInfo, NodeInfo, NodeKind, Plan,
};
use crate::nest::{NestKind, NestOp};
use crate::nodes::{Decide, Op, Pair};
use crate::policy::FailurePolicy;
use crate::run_state::RunState;
use crate::status::NodeStatus;
use crate::support::{complete, execute, execute_nodes, require};
use crate::verdict::Finished;

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

/// The node's counts: `[started, completed, failed, withdrawn]`.
fn counts(ctx: &NestCtx) -> [u64; 4] {
    let r = ctx.report();
    [r.started, r.completed, r.failed, r.withdrawn]
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
async fn run_one<T, Fut>(opts: RunSetup, work: impl Fn() -> Fut) -> Outcome<T>
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
                move |item, opts: RunSetup| async move {
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

/// A body over `u64` items: item `i` sleeps `delay(i)` and then ends with `i * 10`, or fails
/// when `fails(i)`. Counts its instances in `alive`.
fn timed(
    alive: &Arc<Alive>,
    delay: impl Fn(u64) -> u64 + Copy + 'static,
    fails: impl Fn(u64) -> bool + Copy + 'static,
) -> impl Fn(u64, RunSetup) -> Pin<Box<dyn Future<Output = Outcome<u64>>>> {
    let alive = Arc::clone(alive);
    move |item, opts| {
        let held = alive.hold();
        Box::pin(async move {
            let _held = held;
            run_one(opts, || async move {
                sleep(ms(delay(item))).await;
                if fails(item) {
                    Err(Declined(item as u32))
                } else {
                    Ok(item * 10)
                }
            })
            .await
        })
    }
}

fn never(_: u64) -> bool {
    false
}

#[tokio::test(start_paused = true)]
async fn without_a_limit_every_instance_starts_at_once() {
    let alive = Arc::new(Alive::default());
    let started = Instant::now();
    let out = for_each(ctx(), 0..50u64, limit(0), timed(&alive, |_| 10, never)).await;
    assert_eq!(out.ok().map(|v| v.len()), Some(50));
    assert_eq!(alive.most.load(Ordering::SeqCst), 50);
    assert_eq!(started.elapsed(), ms(10));
}

#[tokio::test(start_paused = true)]
async fn a_long_for_each_holds_only_its_live_instances() {
    let alive = Arc::new(Alive::default());
    let out = for_each(
        ctx(),
        0..10_000u64,
        limit(64),
        timed(&alive, |i| i % 7, never),
    )
    .await;
    assert_eq!(out.ok().map(|v| v[9_999]), Some(99_990));
    assert_eq!(alive.most.load(Ordering::SeqCst), 64);
    assert_eq!(
        alive.dropped.load(Ordering::SeqCst),
        10_000,
        "each freed once"
    );
}

#[tokio::test(start_paused = true)]
async fn min_with_rest_cancel_ends_at_the_kth_completion_and_drops_the_rest() {
    let alive = Arc::new(Alive::default());
    let started = Instant::now();
    let config = ForEachConfig {
        max_concurrency: 0,
        min: 2,
        rest_cancel: true,
    };
    // Items 3 and 1 are the fastest.
    let delays = [40, 20, 50, 10, 30];
    let node = ctx();
    let out = for_each(
        node.clone(),
        0..5u64,
        config,
        timed(&alive, move |i| delays[i as usize], never),
    )
    .await;
    assert_eq!(
        out.ok(),
        Some(vec![10, 30]),
        "the first two, in input order"
    );
    assert_eq!(started.elapsed(), ms(20), "ended at the second completion");
    assert_eq!(
        alive.now.load(Ordering::SeqCst),
        0,
        "the three others dropped"
    );
    assert_eq!(alive.dropped.load(Ordering::SeqCst), 5);
    assert_eq!(counts(&node), [5, 2, 0, 3]);
}

#[tokio::test(start_paused = true)]
async fn min_with_rest_run_keeps_the_first_k_outputs_and_ends_when_all_ended() {
    let alive = Arc::new(Alive::default());
    let ran = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let config = ForEachConfig {
        max_concurrency: 2,
        min: 2,
        rest_cancel: false,
    };
    let delays = [40, 20, 50, 10, 30];
    let body = timed(&alive, move |i| delays[i as usize], |i| i == 4);
    let node = ctx();
    let out = for_each(node.clone(), 0..5u64, config, |item, opts| {
        let ran = Arc::clone(&ran);
        let instance = body(item, opts);
        async move {
            let outcome = instance.await;
            ran.fetch_add(1, Ordering::SeqCst);
            outcome
        }
    })
    .await;
    // Limit 2: 0 and 1 start; 1 ends at 20 (2 starts, to end at 70); 0 ends at 40: min
    // reached, the output is settled as items 0 and 1. 3 runs 40..50, 4 runs 50..80 and
    // fails: not the node's failure.
    assert_eq!(out.ok(), Some(vec![0, 10]));
    assert_eq!(
        ran.load(Ordering::SeqCst),
        5,
        "every instance ran to its end"
    );
    assert_eq!(started.elapsed(), ms(80), "ended with the last instance");
    assert_eq!(counts(&node), [5, 4, 1, 0]);
}

#[tokio::test(start_paused = true)]
async fn into_with_rest_run_puts_the_output_and_settles_at_the_kth_then_runs_the_rest() {
    let alive = Arc::new(Alive::default());
    let started = Instant::now();
    let config = ForEachConfig {
        max_concurrency: 2,
        min: 2,
        rest_cancel: false,
    };
    let delays = [40, 20, 50, 10, 30];
    let body = timed(&alive, move |i| delays[i as usize], |i| i == 4);
    let node = ctx();
    let put = std::cell::RefCell::new(Vec::new());
    let out = for_each_into(node.clone(), 0..5u64, config, body, |outputs| {
        assert!(!node.settled(), "the node is told after the output is put");
        put.borrow_mut().push((started.elapsed(), outputs));
    })
    .await;
    // As `for_each` with `rest = run`, but the output is put (once) at the second completion
    // (40ms), and the node told then; the driver itself ends with the last instance.
    assert!(out.is_ok());
    assert_eq!(put.into_inner(), [(ms(40), vec![0, 10])]);
    assert!(node.settled());
    assert_eq!(started.elapsed(), ms(80));
    assert_eq!(counts(&node), [5, 4, 1, 0]);
}

#[tokio::test(start_paused = true)]
async fn into_without_k_completions_puts_what_completed_at_the_end() {
    let alive = Arc::new(Alive::default());
    let started = Instant::now();
    let config = ForEachConfig {
        max_concurrency: 0,
        min: 3,
        rest_cancel: false,
    };
    let body = timed(&alive, |i| 10 * (i + 1), |i| i == 1);
    let node = ctx();
    let put = std::cell::RefCell::new(Vec::new());
    let out = for_each_collect_into(node.clone(), 0..3u64, config, body, |outputs| {
        put.borrow_mut().push((
            started.elapsed(),
            outputs.iter().map(Result::is_ok).collect::<Vec<_>>(),
        ));
    })
    .await;
    // Item 1 fails: two completions, never three; the output is put when the last ended, and
    // the node was never settled early.
    assert!(out.is_ok());
    assert_eq!(put.into_inner(), [(ms(30), vec![true, false, true])]);
    assert!(!node.settled());
    assert_eq!(counts(&node), [3, 2, 1, 0]);
}

#[tokio::test(start_paused = true)]
async fn min_above_the_item_count_waits_for_every_instance() {
    let alive = Arc::new(Alive::default());
    let config = ForEachConfig {
        max_concurrency: 0,
        min: 10,
        rest_cancel: true,
    };
    let out = for_each(ctx(), 0..3u64, config, timed(&alive, |i| i, never)).await;
    assert_eq!(out.ok(), Some(vec![0, 10, 20]));
}

#[tokio::test(start_paused = true)]
async fn fail_fast_fails_the_node_with_the_first_failure_and_drops_the_live_ones() {
    let alive = Arc::new(Alive::default());
    let started = Instant::now();
    // Limit 4: items 0..4 start; item 2 fails at 5ms; 0, 1, 3 are still running.
    let node = ctx();
    let out = for_each(
        node.clone(),
        0..100u64,
        limit(4),
        timed(&alive, |i| if i == 2 { 5 } else { 50 }, |i| i == 2),
    )
    .await;
    let Err(NodeError::Workflow(error)) = out else {
        panic!("expected the instance's failure, got {out:?}");
    };
    assert_eq!(error.failures()[0].error.to_string(), "item 2 declined");
    assert_eq!(started.elapsed(), ms(5));
    assert_eq!(
        alive.dropped.load(Ordering::SeqCst),
        4,
        "only 4 ever started"
    );
    assert_eq!(
        alive.now.load(Ordering::SeqCst),
        0,
        "the 3 live ones dropped"
    );
    assert_eq!(counts(&node), [4, 0, 1, 3]);
    assert_eq!(
        error.path().map(ToString::to_string),
        Some("each[2]".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn collect_runs_every_instance_and_keeps_each_result_in_order() {
    let alive = Arc::new(Alive::default());
    let node = ctx();
    let out = for_each_collect(
        node.clone(),
        0..6u64,
        limit(2),
        timed(&alive, |i| 10 - i, |i| i % 3 == 1),
    )
    .await;
    let Ok(results) = out else {
        panic!("collect does not fail the node");
    };
    let shown: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok(v) => v.to_string(),
            Err(e) => format!("failed: {}", e.failures()[0].error),
        })
        .collect();
    assert_eq!(
        shown,
        [
            "0",
            "failed: item 1 declined",
            "20",
            "30",
            "failed: item 4 declined",
            "50"
        ]
    );
    assert_eq!(alive.dropped.load(Ordering::SeqCst), 6);
    assert_eq!(counts(&node), [6, 4, 2, 0]);
}

#[tokio::test(start_paused = true)]
async fn collect_with_min_counts_completions_not_failures() {
    let alive = Arc::new(Alive::default());
    let config = ForEachConfig {
        max_concurrency: 0,
        min: 2,
        rest_cancel: true,
    };
    // Item 0 fails first (5ms), 1 completes at 10, 2 at 20, 3 would at 30.
    let delays = [5, 10, 20, 30];
    let out = for_each_collect(
        ctx(),
        0..4u64,
        config,
        timed(&alive, move |i| delays[i as usize], |i| i == 0),
    )
    .await;
    let Ok(results) = out else {
        panic!("collect does not fail the node");
    };
    let kinds: Vec<Option<u64>> = results.into_iter().map(Result::ok).collect();
    assert_eq!(kinds, [None, Some(10), Some(20)], "3 never completed");
    assert_eq!(alive.now.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_driver_drops_each_live_instance_once() {
    let alive = Arc::new(Alive::default());
    let node = ctx();
    let driver = for_each(
        node.clone(),
        0..100u64,
        limit(8),
        timed(&alive, |_| 1_000, never),
    );
    let cut = tokio::time::timeout(ms(10), driver).await;
    assert!(cut.is_err(), "still running at 10ms");
    assert_eq!(alive.most.load(Ordering::SeqCst), 8);
    assert_eq!(alive.now.load(Ordering::SeqCst), 0);
    assert_eq!(alive.dropped.load(Ordering::SeqCst), 8, "each once");
    assert_eq!(counts(&node), [8, 0, 0, 8]);
}

#[tokio::test(start_paused = true)]
async fn completing_drops_the_live_instances_and_keeps_the_completed_outputs() {
    let alive = Arc::new(Alive::default());
    let ctx = ctx();
    let completion = ctx.clone();
    let started = Instant::now();
    // Item i ends at 10 * (i + 1) ms; completing at 35ms keeps 0, 1, 2.
    let (out, ()) = tokio::join!(
        for_each(
            ctx,
            0..10u64,
            limit(0),
            timed(&alive, |i| 10 * (i + 1), never)
        ),
        async {
            sleep(ms(35)).await;
            completion.complete();
        }
    );
    assert_eq!(out.ok(), Some(vec![0, 10, 20]));
    assert_eq!(started.elapsed(), ms(35), "ended when asked");
    assert_eq!(
        alive.now.load(Ordering::SeqCst),
        0,
        "the 7 live ones dropped"
    );
    assert_eq!(counts(&completion), [10, 3, 0, 7]);
}

/// Yields `0..n`, one item every `every`.
struct Ticks {
    next: u64,
    n: u64,
    every: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Ticks {
    fn new(n: u64, every: Duration) -> Ticks {
        Ticks {
            next: 0,
            n,
            every,
            sleep: Box::pin(sleep(every)),
        }
    }
}

impl Stream for Ticks {
    type Item = u64;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u64>> {
        if self.next == self.n {
            return Poll::Ready(None);
        }
        std::task::ready!(self.sleep.as_mut().poll(cx));
        let every = self.every;
        let at = self.sleep.deadline() + every;
        self.sleep.as_mut().reset(at);
        self.next += 1;
        Poll::Ready(Some(self.next - 1))
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_starts_instances_as_items_arrive_and_ends_with_the_stream() {
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let out = for_each_stream(ctx(), Ticks::new(5, ms(10)), limit(0), |item, opts| {
        let starts = Arc::clone(&starts);
        async move {
            if let Ok(mut starts) = starts.lock() {
                starts.push(started.elapsed());
            }
            run_one(opts, || async move {
                sleep(ms(25 - 5 * item)).await;
                Ok(item)
            })
            .await
        }
    })
    .await;
    assert_eq!(out.ok(), Some(vec![0, 1, 2, 3, 4]));
    let starts = starts.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(starts, [ms(10), ms(20), ms(30), ms(40), ms(50)]);
    // The last item arrives at 50 and runs 5.
    assert_eq!(started.elapsed(), ms(55));
}

#[tokio::test(start_paused = true)]
async fn a_stream_waits_for_a_free_place_before_it_takes_the_next_item() {
    let alive = Arc::new(Alive::default());
    let out = for_each_stream_collect(
        ctx(),
        Ticks::new(6, ms(1)),
        limit(2),
        timed(&alive, |_| 30, |i| i == 5),
    )
    .await;
    let Ok(results) = out else {
        panic!("collect does not fail the node");
    };
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 5);
    assert!(results[5].is_err());
    assert_eq!(alive.most.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_stream_for_each_fails_fast_too() {
    let alive = Arc::new(Alive::default());
    let out = for_each_stream(
        ctx(),
        Ticks::new(6, ms(1)),
        limit(0),
        timed(&alive, |_| 30, |i| i == 1),
    )
    .await;
    assert!(matches!(out, Err(NodeError::Workflow(_))));
    assert_eq!(alive.now.load(Ordering::SeqCst), 0);
}

fn loop_ctx() -> NestCtx {
    NestCtx::detached("poll", NestKind::Loop, &BODY)
}

const fn up_to(max: u32) -> LoopConfig {
    LoopConfig {
        max,
        stop_at_max: false,
    }
}

/// An until-loop's iteration, boxed.
type Iteration = Pin<Box<dyn Future<Output = Outcome<(u64, bool)>>>>;

/// An until-body: adds 1 to the previous output (0 first); done once it reaches `done_at`;
/// records the previous output each iteration saw.
fn counting(
    done_at: u64,
    seen: &Arc<std::sync::Mutex<Vec<Option<u64>>>>,
) -> impl Fn(Option<u64>, RunSetup) -> Iteration {
    let seen = Arc::clone(seen);
    move |prev, opts| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(prev);
        }
        Box::pin(async move {
            let last = prev.as_ref();
            let next = last.map_or(0, |p| p + 1);
            run_one(opts, move || async move {
                sleep(ms(1)).await;
                Ok((next, next >= done_at))
            })
            .await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn an_until_loop_runs_until_done_and_passes_each_output_on() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = repeat_until(loop_ctx(), up_to(10), counting(3, &seen)).await;
    assert_eq!(out.ok(), Some(3));
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen, [None, Some(0), Some(1), Some(2)]);
}

#[tokio::test(start_paused = true)]
async fn an_until_loop_done_at_once_runs_once() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = repeat_until(loop_ctx(), up_to(1), counting(0, &seen)).await;
    assert_eq!(out.ok(), Some(0));
    assert_eq!(seen.lock().map(|s| s.len()).unwrap_or_default(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_until_loop_past_max_fails_unless_it_stops() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = repeat_until(loop_ctx(), up_to(4), counting(100, &seen)).await;
    assert!(
        matches!(out, Err(NodeError::LoopExhausted { max: 4 })),
        "{out:?}"
    );
    assert_eq!(seen.lock().map(|s| s.len()).unwrap_or_default(), 4);
    let stop = LoopConfig {
        max: 4,
        stop_at_max: true,
    };
    let out = repeat_until(loop_ctx(), stop, counting(100, &seen)).await;
    assert_eq!(out.ok(), Some(3), "the fourth iteration's output");
}

#[tokio::test(start_paused = true)]
async fn a_failed_iteration_fails_the_loop_with_its_error() {
    let runs = AtomicUsize::new(0);
    let out = repeat_until(loop_ctx(), up_to(10), |prev: Option<u64>, opts| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move {
            let n = prev.map_or(0, |p| p + 1);
            run_one(opts, move || async move {
                if n == 2 {
                    Err(Declined(2))
                } else {
                    Ok((n, false))
                }
            })
            .await
        }
    })
    .await;
    let Err(NodeError::Workflow(error)) = out else {
        panic!("expected the iteration's failure, got {out:?}");
    };
    assert_eq!(error.failures()[0].error.to_string(), "item 2 declined");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

/// A while-body: adds 1 to the previous output (0 first).
fn plus_one(prev: Option<u64>, opts: RunSetup) -> impl Future<Output = Outcome<u64>> {
    let next = prev.map_or(0, |p| p + 1);
    run_one(opts, move || async move { Ok(next) })
}

#[tokio::test(start_paused = true)]
async fn a_while_loop_tests_before_each_iteration() {
    let mut tested = Vec::new();
    let out = repeat_while(
        loop_ctx(),
        up_to(10),
        |prev: Option<&u64>| {
            tested.push(prev.copied());
            prev.is_none_or(|p| *p < 2)
        },
        plus_one,
    )
    .await;
    assert_eq!(out.ok(), Some(Some(2)));
    assert_eq!(tested, [None, Some(0), Some(1), Some(2)]);
}

#[tokio::test(start_paused = true)]
async fn a_while_loop_whose_test_fails_first_runs_none() {
    let out = repeat_while(loop_ctx(), up_to(10), |_: Option<&u64>| false, plus_one).await;
    assert_eq!(out.ok(), Some(None));
}

#[tokio::test(start_paused = true)]
async fn a_while_loop_past_max_fails_unless_it_stops() {
    let out = repeat_while(loop_ctx(), up_to(3), |_: Option<&u64>| true, plus_one).await;
    assert!(
        matches!(out, Err(NodeError::LoopExhausted { max: 3 })),
        "{out:?}"
    );
    let stop = LoopConfig {
        max: 3,
        stop_at_max: true,
    };
    let out = repeat_while(loop_ctx(), stop, |_: Option<&u64>| true, plus_one).await;
    assert_eq!(out.ok(), Some(Some(2)));
    // Exactly `max` iterations whose last output ends the test: not exhausted.
    let out = repeat_while(
        loop_ctx(),
        up_to(3),
        |p: Option<&u64>| p.is_none_or(|p| *p < 2),
        plus_one,
    )
    .await;
    assert_eq!(out.ok(), Some(Some(2)));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_loop_drops_its_running_iteration() {
    let alive = Arc::new(Alive::default());
    let body = {
        let alive = Arc::clone(&alive);
        move |prev: Option<u64>, opts| {
            let held = alive.hold();
            async move {
                let _held = held;
                let _ = prev;
                run_one(opts, || async {
                    sleep(ms(100)).await;
                    Ok((0u64, false))
                })
                .await
            }
        }
    };
    let node = loop_ctx();
    let cut = tokio::time::timeout(ms(250), repeat_until(node.clone(), up_to(10), body)).await;
    assert!(cut.is_err());
    assert_eq!(
        alive.dropped.load(Ordering::SeqCst),
        3,
        "two ended, the third dropped"
    );
    assert_eq!(alive.now.load(Ordering::SeqCst), 0);
    assert_eq!(counts(&node), [3, 2, 0, 1]);
}

/// A parent graph: `each` (a `ForEach`), `wait` (an operation) and, after `wait`, `stop`:
/// `Complete(each)` or `Cancel(each)`.
const fn parent(name: &'static str, control: &'static Control) -> Graph {
    const NODES: &[NodeInfo] = &[
        NodeInfo::__new("each", NodeKind::ForEach, "ForEach", 1, 1),
        NodeInfo::__new("wait", NodeKind::Operation, "wait", 2, 1),
        NodeInfo::__new("stop", NodeKind::Cancel, "stop", 3, 1),
    ];
    const EDGES: &[Edge] = &[Edge::__new(1, 2, EdgeKind::Sequence)];
    Graph::__new(
        name,
        NODES,
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

const NESTS: &[NestInfo] = &[NestInfo {
    node: 0,
    kind: NestKind::ForEach,
    body: &BODY,
}];
static COMPLETE_CONTROL: Control = Control {
    instants: &[Step::None, Step::None, Step::Complete { node: 0 }],
    nests: NESTS,
    ..Control::NONE
};
static COMPLETE: Graph = parent("Complete", &COMPLETE_CONTROL);
static CANCEL_CONTROL: Control = Control {
    scopes: &[&[0]],
    instants: &[Step::None, Step::None, Step::Cancel { scope: 0 }],
    nests: NESTS,
    ..Control::NONE
};
static CANCEL: Graph = parent("Cancel", &CANCEL_CONTROL);

/// Runs `graph`: `each` over 10 items, item i ending at 10 * (i + 1) ms, and `wait` 35ms.
/// Returns the run, what `each` put out, and its instances' counts.
async fn run_parent(graph: &'static Graph) -> (Finished, Option<Vec<u64>>, Arc<Alive>) {
    let alive = Arc::new(Alive::default());
    let (finished, got) = run_with(&alive, graph).await;
    (finished, got, alive)
}

async fn run_with(alive: &Arc<Alive>, graph: &'static Graph) -> (Finished, Option<Vec<u64>>) {
    let body = timed(alive, |i| 10 * (i + 1), never);
    let body = &body;
    let out = &std::sync::Mutex::new(None);
    let nodes = Pair::new(
        Pair::new(
            NestOp::new(move |nest: NestCtx| async move {
                let got = for_each(nest, 0..10u64, limit(0), body).await?;
                if let Ok(mut out) = out.lock() {
                    *out = Some(got);
                }
                Ok(())
            }),
            Op::new(|| async {
                sleep(ms(35)).await;
                Ok(())
            }),
        ),
        Decide::new(|_: &RunState| true),
    );
    let finished = execute_nodes(graph, RunSetup::default(), nodes).await;
    let got = out.lock().ok().and_then(|mut o| o.take());
    (finished, got)
}

#[tokio::test(start_paused = true)]
async fn a_complete_step_ends_its_for_each_with_what_completed() {
    let started = Instant::now();
    let (finished, got, alive) = run_parent(&COMPLETE).await;
    assert_eq!(started.elapsed(), ms(35));
    assert!(finished.succeeded());
    assert_eq!(finished.statuses, [NodeStatus::Completed; 3]);
    assert_eq!(got, Some(vec![0, 10, 20]));
    assert_eq!(
        alive.now.load(Ordering::SeqCst),
        0,
        "the 7 live ones dropped"
    );
    assert_eq!(alive.dropped.load(Ordering::SeqCst), 10);
    let report = finished.output(|| Ok(())).report;
    let each = report
        .nest("each")
        .map(|r| [r.started, r.completed, r.failed, r.withdrawn]);
    assert_eq!(each, Some([10, 3, 0, 7]));
}

#[tokio::test(start_paused = true)]
async fn a_cancel_step_withdraws_its_for_each_and_drops_the_live_instances() {
    let started = Instant::now();
    let (finished, got, alive) = run_parent(&CANCEL).await;
    assert_eq!(started.elapsed(), ms(35));
    assert!(finished.succeeded());
    use NodeStatus::*;
    assert_eq!(finished.statuses, [Withdrawn, Completed, Completed]);
    assert_eq!(got, None);
    assert_eq!(
        alive.now.load(Ordering::SeqCst),
        0,
        "the 7 live ones dropped"
    );
    assert_eq!(alive.dropped.load(Ordering::SeqCst), 10, "each once");
    let report = finished.output(|| Ok(())).report;
    let each = report
        .nest("each")
        .map(|r| [r.started, r.completed, r.failed, r.withdrawn]);
    assert_eq!(each, Some([10, 3, 0, 7]));
}

/// `Complete` before its `ForEach` started: the `ForEach` ends at once, with no instance.
static EARLY: Graph = Graph::__new(
    "Early",
    &[
        NodeInfo::__new("stop", NodeKind::Cancel, "stop", 1, 1),
        NodeInfo::__new("each", NodeKind::ForEach, "ForEach", 2, 1),
    ],
    &[Edge::__new(0, 1, EdgeKind::Sequence)],
    Plan::new(
        &[0, 1],
        &[0, 1, 1],
        &[1],
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
    )
    .with_control(&EARLY_CONTROL),
);
static EARLY_CONTROL: Control = Control {
    instants: &[Step::Complete { node: 1 }, Step::None],
    nests: &[NestInfo {
        node: 1,
        kind: NestKind::ForEach,
        body: &BODY,
    }],
    ..Control::NONE
};

#[tokio::test(start_paused = true)]
async fn a_complete_step_before_its_for_each_starts_empties_it() {
    let alive = Arc::new(Alive::default());
    let body = timed(&alive, |_| 10, never);
    let body = &body;
    let out = &std::sync::Mutex::new(None);
    let nodes = Pair::new(
        Decide::new(|_: &RunState| true),
        NestOp::new(move |nest: NestCtx| async move {
            let got = for_each(nest, 0..10u64, limit(0), body).await?;
            if let Ok(mut out) = out.lock() {
                *out = Some(got);
            }
            Ok(())
        }),
    );
    let finished = execute_nodes(&EARLY, RunSetup::default(), nodes).await;
    assert!(finished.succeeded());
    assert_eq!(out.lock().ok().and_then(|mut o| o.take()), Some(vec![]));
    assert_eq!(alive.most.load(Ordering::SeqCst), 0, "no instance started");
}

#[tokio::test]
async fn no_items_is_an_empty_output() {
    let alive = Arc::new(Alive::default());
    let out = for_each(ctx(), 0..0u64, limit(4), timed(&alive, |_| 1, never)).await;
    assert_eq!(out.ok(), Some(vec![]));
    let out = for_each_stream(
        ctx(),
        Ticks::new(0, ms(1)),
        limit(4),
        timed(&alive, |_| 1, never),
    );
    assert_eq!(out.await.ok(), Some(vec![]));
    assert_eq!(alive.most.load(Ordering::SeqCst), 0);
}

/// Pending `left` times, waking itself each time, then ready.
struct Busy {
    left: u32,
}

impl Future for Busy {
    type Output = Result<u64, Declined>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.left == 0 {
            return Poll::Ready(Ok(1));
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn instances_that_keep_waking_themselves_do_not_hold_the_task() {
    let driver = for_each(ctx(), 0..2u64, limit(0), |_, opts| {
        run_one(opts, || Busy { left: 5_000 })
    });
    let mut driver = std::pin::pin!(driver);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut polls = 1;
    let out = loop {
        match driver.as_mut().poll(&mut cx) {
            Poll::Ready(out) => break out,
            Poll::Pending => polls += 1,
        }
    };
    assert_eq!(out.ok(), Some(vec![1, 1]));
    assert!(polls > 2, "the driver yielded to its task ({polls} polls)");
}

#[tokio::test]
async fn loops_with_captured_references_are_send() {
    let step = Arc::new(2u64);
    let handle = tokio::spawn(async move {
        let step = &step;
        let make = move |nest: NestCtx| async move {
            let until = repeat_until(
                nest.clone(),
                up_to(10),
                move |prev: Option<u64>, opts: RunSetup| async move {
                    let last = prev.as_ref();
                    let slot = &Slot::new();
                    let node = (move || async move {
                        tokio::task::yield_now().await;
                        complete(slot, Ok::<u64, Declined>(last.map_or(0, |l| l + **step)))
                    },);
                    execute(&BODY, opts, node)
                        .await
                        .output(move || Ok((*require(slot, "step")?, *require(slot, "step")? >= 6)))
                },
            )
            .await?;
            let whiles = repeat_while(
                nest,
                up_to(10),
                |last: Option<&u64>| last.is_none_or(|l| *l < 6),
                move |prev: Option<u64>, opts: RunSetup| async move {
                    let last = prev.as_ref();
                    let slot = &Slot::new();
                    let node = (move || async move {
                        tokio::task::yield_now().await;
                        complete(slot, Ok::<u64, Declined>(last.map_or(0, |l| l + **step)))
                    },);
                    execute(&BODY, opts, node)
                        .await
                        .output(move || Ok(*require(slot, "step")?))
                },
            )
            .await?;
            Ok::<_, NodeError>((until, whiles))
        };
        make(loop_ctx()).await
    });
    assert_eq!(handle.await.ok().and_then(Result::ok), Some((6, Some(6))));
}
