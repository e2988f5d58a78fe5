//! Run time of flow against hand-written async code and dagrs, side by side in one run.
//!
//! Shapes of 1000 operations (chain, fan-out/fan-in, 100 layers of 10) and the 50-node mixed
//! workflow, each with the immediate and the yielding operation, on a tokio `current_thread`
//! runtime; the yielding fan and layered graphs and the mixed workflow also on a multi-thread
//! runtime (where dagrs's per-node tasks can use both cores); the fan with nodes that finish
//! one per turn of the runtime (`fan_gated`); the cost of observers; and a race of two replicas
//! (`race2`) and a 2-of-3 quorum (`quorum_2of3`) against the hand-written `tokio::select!` and
//! `FuturesUnordered` code that does the same; and a workflow that is one `ForEach` over 10,000
//! items, 64 at a time, with a one-node body (`foreach_10k`), against
//! `stream::iter(..).buffer_unordered(64)` calling the operation directly.
//!
//! `cargo bench -p flow-benches --bench shapes` runs everything (about ten minutes on two
//! cores); `cargo bench -p flow-benches --bench shapes -- chain_` runs one group.
//! `python3 benches/report.py` turns criterion's estimates into the tables of
//! docs/performance.md.

mod common;

use std::future::Future;
use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, Throughput};
use tokio::runtime::Runtime;

use common::{MIXED_NODES, MIXED_OUTPUT, NODES, WIDTH, dag, gate, hand, ok, ops};

/// One module per operation, each with every benchmarked workflow calling it as `op`.
macro_rules! workflows {
    ($($variant:ident),*) => {$(
        /// The workflows with the operation of the same name.
        mod $variant {
            use flowdag::workflow;
            use crate::common::ops::$variant as op;
            include!("generated/chain_1000.rs");
            include!("generated/fan_1000.rs");
            include!("generated/layered_1000.rs");
            include!("common/mixed.rs");
        }
    )*};
}

workflows!(imm, yld);

/// The fan with the gated operation: its nodes finish one per turn of the runtime.
mod gated {
    use crate::common::gate::gated as op;
    use flowdag::workflow;
    include!("generated/fan_1000.rs");
}

/// The workflows of `race2` and `quorum_2of3`: the same replicas as the hand-written contenders;
/// the workflow of `foreach_10k`, and its body as a workflow of its own.
mod control {
    use crate::common::ops::{after, yld};
    use flowdag::workflow;

    workflow! {
        /// The body of `foreach_10k` as a workflow: one operation that yields once.
        pub Item(x: u64) -> u64 {
            r = Operation(yld(x)) => r
        }
    }

    workflow! {
        /// `foreach_10k`: a `ForEach` over `0..items`, 64 at a time, each instance a run of a
        /// one-node body (the operation of [`Item`]); the sum of the outputs.
        pub Each(items: u64) -> u64 {
            all = ForEach(x in 0..items, max_concurrency = 64) {
                r = Operation(yld(x)) => r
            }
            => all.iter().sum()
        }
    }

    workflow! {
        /// The first of two replicas to answer wins; the other is withdrawn.
        pub Race2(x: u64) -> u64 {
            Race {
                a = Operation(after(x, 1)),
                b = Operation(after(x, 2)),
            }
            => *a.or(b).unwrap_or(&0)
        }
    }

    workflow! {
        /// Goes on once two of three replicas answered; the third is withdrawn.
        pub Quorum2of3(x: u64) -> u64 {
            Parallel(min = 2, rest = cancel) {
                r1 = Operation(after(x, 1)),
                r2 = Operation(after(x, 2)),
                r3 = Operation(after(x, 1)),
            }
            => [r1, r2, r3].into_iter().flatten().sum()
        }
    }
}

/// The replicas of `race2` (turns of the runtime before each answers): the second is slower, so
/// it loses and is dropped.
const RACE_TURNS: [u32; 2] = [1, 2];
/// The replicas of `quorum_2of3`: the first and the third answer first, so the second is dropped
/// once [`QUORUM`] of them have answered.
const QUORUM_TURNS: [u32; 3] = [1, 2, 1];
/// How many replicas of `quorum_2of3` must answer.
const QUORUM: usize = 2;

/// The items of `foreach_10k`.
const ITEMS: u64 = 10_000;
/// The instances of `foreach_10k` in flight at most.
const IN_FLIGHT: usize = 64;
/// What `foreach_10k`'s contenders return: the sum of `x + 1` over the items.
const ITEMS_SUM: u64 = ITEMS * (ITEMS + 1) / 2;

/// A workflow that is one `ForEach` over `0..items`, `IN_FLIGHT` at a time, each instance a
/// run of a one-node body (`control::Each`); the sum of the output `Vec`.
async fn flow_for_each(items: u64) -> u64 {
    const _: () = assert!(IN_FLIGHT == 64, "control::Each says 64");
    control::Each::run(items).await.unwrap_or(0)
}

/// The same operation over the same items, `IN_FLIGHT` at a time, written by hand: a stream of
/// the operation's futures through `buffer_unordered`, collected in a `Vec` (in completion
/// order).
async fn hand_buffer_unordered(items: u64) -> u64 {
    use futures::StreamExt;
    let outputs: Vec<u64> = futures::stream::iter(0..items)
        .map(ops::yld)
        .buffer_unordered(IN_FLIGHT)
        .map(ok)
        .collect()
        .await;
    outputs.iter().sum()
}

/// As [`hand_buffer_unordered`], each item a plain run of `control::Item` (what the
/// `ForEach`'s instances run): the cost of the runs themselves, without the driver.
async fn hand_buffer_unordered_runs(items: u64) -> u64 {
    use futures::StreamExt;
    let outputs: Vec<u64> = futures::stream::iter(0..items)
        .map(control::Item::run)
        .buffer_unordered(IN_FLIGHT)
        .map(|output| output.unwrap_or(0))
        .collect()
        .await;
    outputs.iter().sum()
}

/// Benchmarks `run` on `rt`: one call of `run` is one iteration.
fn bench<F, Fut>(group: &mut BenchmarkGroup<'_, WallTime>, id: &str, rt: &Runtime, run: F)
where
    F: Fn() -> Fut,
    Fut: Future,
{
    group.bench_function(id, |b| b.iter(|| rt.block_on(run())));
}

/// Benchmarks a dagrs run: the graph is built outside the timed part, and dropped outside it.
fn bench_dagrs(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    build: impl Fn() -> dagrs::Graph,
) {
    group.bench_function("dagrs", |b| {
        b.iter_batched(
            &build,
            |mut graph| {
                rt.block_on(graph.async_start()).expect("dagrs run");
                graph
            },
            BatchSize::SmallInput,
        )
    });
}

/// Checks once, before timing, that every contender computes the same thing.
fn check(rt: &Runtime) {
    for yielding in [false, true] {
        let (chain, fan, layered, mixed) = if yielding {
            rt.block_on(async {
                (
                    yld::Chain1000::run(0).await,
                    yld::Fan1000::run(0).await,
                    yld::Layered1000::run(0).await,
                    yld::Mixed::run(0).await,
                )
            })
        } else {
            rt.block_on(async {
                (
                    imm::Chain1000::run(0).await,
                    imm::Fan1000::run(0).await,
                    imm::Layered1000::run(0).await,
                    imm::Mixed::run(0).await,
                )
            })
        };
        assert_eq!(chain.ok(), Some(NODES as u64));
        assert_eq!(fan.ok(), Some(2));
        assert_eq!(layered.ok(), Some((NODES / WIDTH) as u64));
        assert_eq!(mixed.ok(), Some(MIXED_OUTPUT));
        for (expected, (mut graph, last)) in [
            (NODES as u64, dag::chain(NODES, yielding)),
            (2, dag::fan(NODES, yielding)),
            ((NODES / WIDTH) as u64, dag::layered(NODES, WIDTH, yielding)),
        ] {
            rt.block_on(graph.async_start()).expect("dagrs run");
            assert_eq!(dag::output(&graph, last), Some(expected));
        }
    }
    assert_eq!(imm::Mixed::GRAPH.nodes().len(), MIXED_NODES);
    assert_eq!(ok(rt.block_on(hand::mixed(ops::imm, 0))), MIXED_OUTPUT);
    let (gated, ()) = rt.block_on(async {
        gate::reset();
        tokio::join!(gated::Fan1000::run(0), gate::open(NODES))
    });
    assert_eq!(gated.ok(), Some(2));
    let (gated, ()) = rt.block_on(async {
        gate::reset();
        tokio::join!(
            hand::fan_unordered(gate::gated, 0, NODES),
            gate::open(NODES)
        )
    });
    assert_eq!(ok(gated), 2);
    assert_eq!(ok(rt.block_on(hand::fan_unordered(ops::yld, 0, NODES))), 2);
    // The winner's output; the sum of the two outputs of the quorum.
    let race = rt.block_on(hand::race2(ops::after, 0, RACE_TURNS));
    assert_eq!(race.ok(), Some(1));
    assert_eq!(rt.block_on(control::Race2::run(0)).ok(), Some(1));
    let quorum = rt.block_on(hand::quorum(ops::after, 0, &QUORUM_TURNS, QUORUM));
    assert_eq!(quorum.ok(), Some(2));
    assert_eq!(rt.block_on(control::Quorum2of3::run(0)).ok(), Some(2));
    assert_eq!(
        ok(rt.block_on(hand::layered(ops::yld, 0, NODES, WIDTH))),
        (NODES / WIDTH) as u64
    );
    assert_eq!(rt.block_on(flow_for_each(ITEMS)), ITEMS_SUM);
    assert_eq!(rt.block_on(hand_buffer_unordered(ITEMS)), ITEMS_SUM);
    assert_eq!(rt.block_on(hand_buffer_unordered_runs(ITEMS)), ITEMS_SUM);
}

/// The three shapes and the mixed workflow with one operation on one runtime.
macro_rules! shapes {
    ($c:expr, $rt:expr, $suffix:literal, $variant:ident, $yielding:expr) => {{
        let (c, rt): (&mut Criterion, &Runtime) = ($c, $rt);
        let op = ops::$variant;

        let mut g = c.benchmark_group(concat!("chain_", $suffix));
        g.throughput(Throughput::Elements(NODES as u64));
        bench(&mut g, "flow_run", rt, || {
            $variant::Chain1000::run(black_box(0))
        });
        bench(&mut g, "flow_log", rt, || {
            $variant::Chain1000::runner().execute(black_box(0))
        });
        bench(&mut g, "hand_await", rt, || {
            hand::chain(op, black_box(0), NODES)
        });
        bench_dagrs(&mut g, rt, || dag::chain(NODES, $yielding).0);
        g.finish();

        let mut g = c.benchmark_group(concat!("fan_", $suffix));
        g.throughput(Throughput::Elements(NODES as u64));
        bench(&mut g, "flow_run", rt, || {
            $variant::Fan1000::run(black_box(0))
        });
        bench(&mut g, "flow_log", rt, || {
            $variant::Fan1000::runner().execute(black_box(0))
        });
        bench(&mut g, "hand_join_all", rt, || {
            hand::fan_join_all(op, black_box(0), NODES)
        });
        bench(&mut g, "hand_unordered", rt, || {
            hand::fan_unordered(op, black_box(0), NODES)
        });
        bench_dagrs(&mut g, rt, || dag::fan(NODES, $yielding).0);
        g.finish();

        let mut g = c.benchmark_group(concat!("layered_", $suffix));
        g.throughput(Throughput::Elements(NODES as u64));
        bench(&mut g, "flow_run", rt, || {
            $variant::Layered1000::run(black_box(0))
        });
        bench(&mut g, "flow_log", rt, || {
            $variant::Layered1000::runner().execute(black_box(0))
        });
        bench(&mut g, "hand_join_all", rt, || {
            hand::layered(op, black_box(0), NODES, WIDTH)
        });
        bench_dagrs(&mut g, rt, || dag::layered(NODES, WIDTH, $yielding).0);
        g.finish();

        let mut g = c.benchmark_group(concat!("mixed_", $suffix));
        g.throughput(Throughput::Elements(MIXED_NODES as u64));
        bench(&mut g, "flow_run", rt, || {
            $variant::Mixed::run(black_box(0))
        });
        bench(&mut g, "flow_log", rt, || {
            $variant::Mixed::runner().execute(black_box(0))
        });
        bench(&mut g, "hand_try_join", rt, || {
            hand::mixed(op, black_box(0))
        });
        g.finish();
    }};
}

/// On a multi-thread runtime: the yielding fan and layered graphs and the mixed workflow. flow
/// and the hand-written code run in the caller's task; dagrs spawns a task per node.
fn multi_thread(c: &mut Criterion, rt: &Runtime) {
    let op = ops::yld;

    let mut g = c.benchmark_group("mt_fan_yield");
    g.throughput(Throughput::Elements(NODES as u64));
    bench(&mut g, "flow_run", rt, || yld::Fan1000::run(black_box(0)));
    bench(&mut g, "hand_join_all", rt, || {
        hand::fan_join_all(op, black_box(0), NODES)
    });
    bench(&mut g, "hand_unordered", rt, || {
        hand::fan_unordered(op, black_box(0), NODES)
    });
    bench_dagrs(&mut g, rt, || dag::fan(NODES, true).0);
    g.finish();

    let mut g = c.benchmark_group("mt_layered_yield");
    g.throughput(Throughput::Elements(NODES as u64));
    bench(&mut g, "flow_run", rt, || {
        yld::Layered1000::run(black_box(0))
    });
    bench(&mut g, "hand_join_all", rt, || {
        hand::layered(op, black_box(0), NODES, WIDTH)
    });
    bench_dagrs(&mut g, rt, || dag::layered(NODES, WIDTH, true).0);
    g.finish();

    let mut g = c.benchmark_group("mt_mixed_yield");
    g.throughput(Throughput::Elements(MIXED_NODES as u64));
    bench(&mut g, "flow_run", rt, || yld::Mixed::run(black_box(0)));
    bench(&mut g, "hand_try_join", rt, || {
        hand::mixed(op, black_box(0))
    });
    g.finish();
}

/// The fan whose nodes finish one per turn (`common::gate`): each contender runs beside the
/// task that opens the gates, in one `join!`.
fn gated_fan(c: &mut Criterion, rt: &Runtime) {
    let mut g = c.benchmark_group("fan_gated");
    g.throughput(Throughput::Elements(NODES as u64));
    bench(&mut g, "flow_run", rt, || async {
        gate::reset();
        tokio::join!(gated::Fan1000::run(black_box(0)), gate::open(NODES)).0
    });
    bench(&mut g, "hand_join_all", rt, || async {
        gate::reset();
        tokio::join!(
            hand::fan_join_all(gate::gated, black_box(0), NODES),
            gate::open(NODES)
        )
        .0
    });
    bench(&mut g, "hand_unordered", rt, || async {
        gate::reset();
        tokio::join!(
            hand::fan_unordered(gate::gated, black_box(0), NODES),
            gate::open(NODES)
        )
        .0
    });
    g.finish();
}

/// A race of two replicas of `ops::after`: the first to answer wins, the other is dropped.
fn race2(c: &mut Criterion, rt: &Runtime) {
    let mut g = c.benchmark_group("race2");
    g.throughput(Throughput::Elements(RACE_TURNS.len() as u64));
    bench(&mut g, "flow_run", rt, || control::Race2::run(black_box(0)));
    bench(&mut g, "hand_select", rt, || {
        hand::race2(ops::after, black_box(0), RACE_TURNS)
    });
    g.finish();
}

/// A quorum of two out of three replicas of `ops::after`: go on once two answered, drop the
/// third.
fn quorum_2of3(c: &mut Criterion, rt: &Runtime) {
    let mut g = c.benchmark_group("quorum_2of3");
    g.throughput(Throughput::Elements(QUORUM_TURNS.len() as u64));
    bench(&mut g, "flow_run", rt, || {
        control::Quorum2of3::run(black_box(0))
    });
    bench(&mut g, "hand_unordered", rt, || {
        hand::quorum(ops::after, black_box(0), &QUORUM_TURNS, QUORUM)
    });
    g.finish();
}

/// A `ForEach` over 10,000 items, 64 in flight, each a one-node workflow run whose operation
/// yields once, against `buffer_unordered(64)` over the operation itself.
fn foreach_10k(c: &mut Criterion, rt: &Runtime) {
    let mut g = c.benchmark_group("foreach_10k");
    g.throughput(Throughput::Elements(ITEMS));
    bench(&mut g, "flow_for_each", rt, || {
        flow_for_each(black_box(ITEMS))
    });
    bench(&mut g, "hand_buffer_unordered", rt, || {
        hand_buffer_unordered(black_box(ITEMS))
    });
    bench(&mut g, "hand_buffer_unordered_runs", rt, || {
        hand_buffer_unordered_runs(black_box(ITEMS))
    });
    g.finish();
}

/// The cost of observing a run (immediate operation, `current_thread`): no observer and no log
/// (`run`), the runner with its log turned off (the same code path plus the report), an
/// observer that does nothing, a `Recorder` (fresh for every run), and the event log.
macro_rules! observer_group {
    ($c:expr, $rt:expr, $name:literal, $workflow:ty, $nodes:expr) => {{
        let (c, rt): (&mut Criterion, &Runtime) = ($c, $rt);
        let mut g = c.benchmark_group(concat!("observer_", $name));
        g.throughput(Throughput::Elements($nodes as u64));
        bench(&mut g, "run", rt, || <$workflow>::run(black_box(0)));
        bench(&mut g, "runner_no_log", rt, || {
            <$workflow>::runner().record(false).execute(black_box(0))
        });
        bench(&mut g, "noop_observer", rt, || {
            <$workflow>::runner()
                .record(false)
                .observer(|_: &flowdag::Event| {})
                .execute(black_box(0))
        });
        g.bench_function("recorder", |b| {
            b.iter_batched(
                flowdag::Recorder::new,
                |recorder| {
                    let outcome = rt.block_on(
                        <$workflow>::runner()
                            .record(false)
                            .observer(recorder.clone())
                            .execute(black_box(0)),
                    );
                    // Dropped after the timed part, with the recorded events.
                    (outcome, recorder)
                },
                BatchSize::SmallInput,
            )
        });
        bench(&mut g, "event_log", rt, || {
            <$workflow>::runner().execute(black_box(0))
        });
        g.finish();
    }};
}

/// Runs one contender `runs` times (`repeat <shape>_<op> <runs>` on the command line), for
/// counting instructions under callgrind, which this machine's timing noise does not touch:
///
/// ```text
/// valgrind --tool=callgrind --collect-atstart=no --toggle-collect='shapes::repeat' \
///     target/release/deps/shapes-<hash> repeat chain_yield 20
/// ```
///
/// The count divided by `runs × 1000` is instructions per node (the run's set-up included); for
/// the race and quorum contenders, divide by `runs` for instructions per race or quorum.
#[inline(never)]
fn repeat(rt: &Runtime, which: &str, runs: usize) -> Option<u64> {
    let mut total = 0;
    for _ in 0..runs {
        total += match which {
            "chain_imm" => rt.block_on(imm::Chain1000::run(black_box(0))).ok()?,
            "chain_yield" => rt.block_on(yld::Chain1000::run(black_box(0))).ok()?,
            "fan_imm" => rt.block_on(imm::Fan1000::run(black_box(0))).ok()?,
            "fan_yield" => rt.block_on(yld::Fan1000::run(black_box(0))).ok()?,
            "layered_imm" => rt.block_on(imm::Layered1000::run(black_box(0))).ok()?,
            "layered_yield" => rt.block_on(yld::Layered1000::run(black_box(0))).ok()?,
            "log_layered_imm" => rt
                .block_on(imm::Layered1000::runner().execute(black_box(0)))
                .result
                .ok()?,
            "log_chain_yield" => rt
                .block_on(yld::Chain1000::runner().execute(black_box(0)))
                .result
                .ok()?,
            "hand_chain_yield" => ok(rt.block_on(hand::chain(ops::yld, black_box(0), NODES))),
            "hand_layered_yield" => {
                ok(rt.block_on(hand::layered(ops::yld, black_box(0), NODES, WIDTH)))
            }
            "race2" => rt.block_on(control::Race2::run(black_box(0))).ok()?,
            "quorum_2of3" => rt.block_on(control::Quorum2of3::run(black_box(0))).ok()?,
            "foreach_10k" => rt.block_on(flow_for_each(black_box(ITEMS))),
            "hand_foreach_10k" => rt.block_on(hand_buffer_unordered(black_box(ITEMS))),
            "hand_foreach_10k_runs" => rt.block_on(hand_buffer_unordered_runs(black_box(ITEMS))),
            "hand_race2" => rt
                .block_on(hand::race2(ops::after, black_box(0), RACE_TURNS))
                .ok()?,
            "hand_quorum_2of3" => rt
                .block_on(hand::quorum(
                    ops::after,
                    black_box(0),
                    &QUORUM_TURNS,
                    QUORUM,
                ))
                .ok()?,
            _ => return None,
        };
    }
    Some(total)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, which, runs] = &args[..]
        && mode == "repeat"
    {
        let Ok(runs) = runs.parse() else {
            eprintln!("repeat: `{runs}` is not a number of runs");
            return;
        };
        let rt = common::current_thread();
        match repeat(&rt, which, runs) {
            Some(total) => println!("{which}: {runs} runs, outputs sum to {total}"),
            None => {
                eprintln!("repeat: unknown contender `{which}` (see `repeat` in benches/shapes.rs)")
            }
        }
        return;
    }
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let rt = common::current_thread();
    check(&rt);
    shapes!(&mut c, &rt, "imm", imm, false);
    shapes!(&mut c, &rt, "yield", yld, true);
    gated_fan(&mut c, &rt);
    race2(&mut c, &rt);
    quorum_2of3(&mut c, &rt);
    foreach_10k(&mut c, &rt);
    observer_group!(&mut c, &rt, "chain", imm::Chain1000, NODES);
    observer_group!(&mut c, &rt, "fan", imm::Fan1000, NODES);
    observer_group!(&mut c, &rt, "layered", imm::Layered1000, NODES);
    observer_group!(&mut c, &rt, "mixed", imm::Mixed, MIXED_NODES);
    let mt = common::multi_thread();
    multi_thread(&mut c, &mt);
    c.final_summary();
}
