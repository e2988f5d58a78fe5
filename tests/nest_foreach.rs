//! `ForEach` in the DSL: one instance of the body per item, outputs in input order, a limit on
//! the instances in flight, the item and the parent's nodes read in the body, `on_failure =
//! collect`, `min`, `Complete`, the stream form and a `ForEach` inside a `ForEach`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::NodeKind;
use flowdag::prelude::*;
use tokio::time::sleep;

use common::Boom;

async fn double(n: &u32, millis: u64) -> Result<u32, Boom> {
    sleep(Duration::from_millis(millis)).await;
    Ok(n * 2)
}

async fn numbers(count: u32) -> Result<Vec<u32>, Boom> {
    Ok((1..=count).collect())
}

workflow! {
    Doubles(count: u32) -> Vec<u32> {
        Sequential {
            items = Operation(numbers(count)),
            doubled = ForEach(n in items.iter()) {
                d = Operation(double(n, 10 * u64::from(5 - *n % 5)))
                => d
            },
        }
        => doubled.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn outputs_come_in_input_order_whatever_order_instances_end_in() {
    assert_eq!(
        Doubles::run(6).await.expect("the run succeeds"),
        vec![2, 4, 6, 8, 10, 12]
    );
    let graph = Doubles::GRAPH;
    assert_eq!(graph.nodes()[1].kind, NodeKind::ForEach);
    assert_eq!(graph.nodes()[1].label, "n in items.iter()");
}

/// Counts the instances in flight and keeps the highest count.
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

async fn measured(gauge: &Gauge, n: u32) -> Result<u32, Boom> {
    let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
    gauge.peak.fetch_max(now, Ordering::SeqCst);
    sleep(Duration::from_millis(10)).await;
    gauge.now.fetch_sub(1, Ordering::SeqCst);
    Ok(n)
}

workflow! {
    Limited(gauge: &Gauge) -> Vec<u32> {
        all = ForEach(n in 0..20u32, max_concurrency = 3) {
            m = Operation(measured(gauge, n)) => m
        }
        => all.clone()
    }
}

workflow! {
    /// One named and one unnamed `ForEach`.
    Drawn(count: u32) -> Vec<u32> {
        Sequential {
            items = Operation(numbers(count)),
            doubled = ForEach(n in items.iter()) { d = Operation(double(n, 0)) => d },
            ForEach(n in items.iter()) { Operation(double(n, 0)) },
        }
        => doubled.clone()
    }
}

#[test]
fn pictures_title_a_body_by_its_node_once() {
    let dot = Drawn::GRAPH.to_dot();
    assert!(dot.contains("label=\"doubled: ForEach\""), "{dot}");
    assert!(dot.contains("label=\"foreach#1: ForEach\""), "{dot}");
    assert!(!dot.contains(" of "), "{dot}");
    let mermaid = Drawn::GRAPH.to_mermaid();
    assert!(mermaid.contains("[\"doubled: ForEach\"]"), "{mermaid}");
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_bounds_the_instances_in_flight() {
    let gauge = Gauge {
        now: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    };
    let started = tokio::time::Instant::now();
    assert_eq!(
        Limited::run(&gauge).await.expect("the run succeeds"),
        (0..20).collect::<Vec<_>>()
    );
    assert_eq!(gauge.peak.load(Ordering::SeqCst), 3);
    // 20 items, 3 at a time, 10 ms each: 7 rounds.
    assert_eq!(started.elapsed(), Duration::from_millis(70));
}

workflow! {
    Unbounded(gauge: &Gauge) -> Vec<u32> {
        all = ForEach(n in 0..6u32) {
            m = Operation(measured(gauge, n)) => m
        }
        => all.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn the_runners_max_concurrency_counts_a_foreach_as_one_operation() {
    // The run's limit bounds the workflow's own nodes; the ForEach's own `max_concurrency`
    // (none here) bounds its instances.
    let gauge = Gauge {
        now: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    };
    let one = std::num::NonZeroUsize::MIN;
    let all = Unbounded::runner().max_concurrency(one).run(&gauge).await;
    assert_eq!(all.expect("the run succeeds").len(), 6);
    assert_eq!(gauge.peak.load(Ordering::SeqCst), 6);
}

async fn label(prefix: &str, item: &str, index: usize) -> Result<String, Boom> {
    Ok(format!("{prefix}{item}#{index}"))
}

async fn prefix() -> Result<String, Boom> {
    Ok("item:".to_string())
}

workflow! {
    /// The body reads the item, a parameter and a node of the parent.
    Labels(items: &[&'static str]) -> Vec<String> {
        Sequential {
            p = Operation(prefix()),
            labelled = ForEach(item in items.iter().enumerate()) {
                l = Operation(label(&p, item.1, item.0))
                => l.clone()
            },
        }
        => labelled.clone()
    }
}

#[tokio::test]
async fn the_body_reads_the_item_parameters_and_the_parents_nodes() {
    let labels = Labels::run(&["a", "b"]).await.expect("the run succeeds");
    assert_eq!(labels, ["item:a#0", "item:b#1"]);
    // The ForEach waits for the node its body reads.
    let graph = Labels::GRAPH;
    assert!(graph.edges().iter().any(|e| e.from == 0 && e.to == 1));
}

async fn check(n: &u32) -> Result<u32, Boom> {
    if n.is_multiple_of(3) {
        Err(Boom("divisible by three"))
    } else {
        Ok(*n)
    }
}

workflow! {
    FailFast() -> Vec<u32> {
        checked = ForEach(n in [1u32, 2, 3, 4]) { c = Operation(check(&n)) => c }
        => checked.clone()
    }
}

#[tokio::test]
async fn by_default_a_failed_instance_fails_the_foreach() {
    let error = FailFast::run().await.expect_err("the run fails");
    let failed: Vec<_> = error.failed().collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].node, "checked");
    let NodeError::Workflow(inner) = &failed[0].error else {
        panic!("expected the instance's error, got {:?}", failed[0].error);
    };
    assert_eq!(inner.workflow(), "checked");
    let inside: Vec<_> = inner.failed().collect();
    assert_eq!(inside[0].node, "c");
    assert!(
        inside[0].error.to_string().contains("divisible by three"),
        "{inner}"
    );
}

workflow! {
    Collected() -> Vec<Result<u32, String>> {
        checked = ForEach(n in [1u32, 2, 3, 4], on_failure = collect) {
            c = Operation(check(&n)) => c
        }
        => checked
            .iter()
            .map(|r| r.as_ref().copied().map_err(|e| e.failed().map(|f| f.error.to_string()).collect()))
            .collect()
    }
}

#[tokio::test]
async fn collect_runs_every_instance_and_keeps_each_result() {
    let results = Collected::run().await.expect("the run succeeds");
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], Ok(1));
    assert_eq!(results[1], Ok(2));
    assert!(
        results[2]
            .as_ref()
            .is_err_and(|e| e.contains("divisible by three"))
    );
    assert_eq!(results[3], Ok(4));
}

workflow! {
    FirstTwo() -> Vec<u32> {
        quorum = ForEach(n in [30u32, 10, 20, 40], min = 2, rest = cancel) {
            d = Operation(double(&n, u64::from(n))) => d
        }
        => quorum.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn min_goes_on_once_k_instances_completed() {
    // The 10 ms and 20 ms items complete first; their outputs, in input order.
    assert_eq!(
        FirstTwo::run().await.expect("the run succeeds"),
        vec![20, 40]
    );
}

async fn pause(millis: u64) -> Result<(), Boom> {
    sleep(Duration::from_millis(millis)).await;
    Ok(())
}

workflow! {
    Enough() -> Vec<u32> {
        Parallel {
            results = ForEach(n in [10u32, 20, 100, 200]) {
                d = Operation(double(&n, u64::from(n))) => d
            },
            Sequential {
                Operation(pause(50)),
                Complete(results),
            },
        }
        => results.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn complete_ends_the_foreach_with_the_outputs_so_far() {
    let started = tokio::time::Instant::now();
    assert_eq!(Enough::run().await.expect("the run succeeds"), vec![20, 40]);
    assert_eq!(started.elapsed(), Duration::from_millis(50));
}

workflow! {
    Streamed() -> Vec<u32> {
        got = ForEach(n in stream futures::stream::iter([1u32, 2, 3])) {
            d = Operation(double(&n, 1)) => d
        }
        => got.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn the_stream_form_takes_items_as_they_come() {
    assert_eq!(
        Streamed::run().await.expect("the run succeeds"),
        vec![2, 4, 6]
    );
}

workflow! {
    Table(rows: u32, columns: u32) -> Vec<Vec<u32>> {
        table = ForEach(row in 0..rows) {
            cells = ForEach(column in 0..columns) {
                c = Operation(double(&(row * 10 + column), 1)) => c
            }
            => cells.clone()
        }
        => table.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn a_foreach_inside_a_foreach_reads_the_outer_item() {
    assert_eq!(
        Table::run(2, 3).await.expect("the run succeeds"),
        vec![vec![0, 2, 4], vec![20, 22, 24]]
    );
}

#[tokio::test]
async fn the_report_groups_a_foreachs_instances_under_its_node() {
    let outcome = Collected::runner().execute(()).await;
    let nest = outcome
        .report
        .nest("checked")
        .expect("a report of the ForEach");
    assert_eq!(format!("{:?}", nest.kind), "ForEach");
    assert_eq!((nest.started, nest.completed, nest.failed), (4, 3, 1));
    assert_eq!(nest.failures.len(), 1);
    assert_eq!(nest.failures[0].0, 2);
}

async fn charge(n: &u32) -> Result<u32, Boom> {
    if n % 1000 == 17 {
        Err(Boom("card declined"))
    } else {
        Ok(*n)
    }
}

workflow! {
    Batch() -> usize {
        charged = ForEach(n in 0..10_000u32, max_concurrency = 64, on_failure = collect) {
            c = Operation(charge(&n)) => c
        }
        => charged.iter().filter(|r| r.is_ok()).count()
    }
}

#[tokio::test]
async fn the_report_of_ten_thousand_instances_is_one_grouped_line() {
    let outcome = Batch::runner().execute(()).await;
    assert_eq!(outcome.result.expect("the run succeeds"), 9_990);
    let table = outcome.report.to_string();
    // The header, the node's row, its instances' line and the totals: not a row per instance.
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(
        table.contains(
            "\n  charged[0..10000]  9,990 completed · 10 failed (charged[17]: boom: card declined; \
             charged[1017]: boom: card declined; charged[2017]: boom: card declined; and 7 more)\n"
        ),
        "{table}"
    );
    let nest = outcome
        .report
        .nest("charged")
        .expect("the ForEach's report");
    assert_eq!(
        (nest.started, nest.completed, nest.failed),
        (10_000, 9_990, 10)
    );
    assert_eq!(nest.failures[9].0, 9_017);
}

#[test]
fn a_run_with_a_foreach_is_send() {
    let gauge = Gauge {
        now: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    };
    drop(common::require_send(Limited::run(&gauge)));
    drop(common::require_send(Table::run(1, 1)));
}

async fn several() -> Result<Vec<u32>, Boom> {
    Ok(vec![3, 4])
}

workflow! {
    /// A node called `stream` is an expression like any other: `stream` marks the stream form
    /// only when an expression follows it.
    NamedStream() -> Vec<u32> {
        Sequential {
            stream = Operation(several()),
            got = ForEach(n in stream.iter()) { d = Operation(double(n, 1)) => d },
        }
        => got.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_called_stream_can_be_iterated() {
    assert_eq!(
        NamedStream::run().await.expect("the run succeeds"),
        vec![6, 8]
    );
}

#[tokio::test]
async fn a_failed_instance_and_its_events_carry_the_instance_path() {
    let outcome = FailFast::runner().record(true).execute(()).await;
    let events = outcome.report.log().events();
    let paths: Vec<String> = events
        .iter()
        .filter_map(|e| {
            e.path
                .as_ref()
                .map(|p| format!("{p}/{}", e.node_name.unwrap_or("-")))
        })
        .collect();
    assert!(paths.iter().any(|p| p == "checked[2]/c"), "{paths:?}");
    let error = outcome.result.expect_err("the run fails");
    let NodeError::Workflow(inner) = &error.failed().next().expect("one failure").error else {
        panic!("expected the instance's error");
    };
    assert_eq!(
        inner.path().map(ToString::to_string).as_deref(),
        Some("checked[2]")
    );
}

workflow! {
    /// `after` makes a nest wait for a step it does not read.
    Ordered() -> Vec<u32> {
        Parallel {
            first = Operation(pause(30)),
            later = ForEach(n in [1u32], after = [first]) { d = Operation(double(&n, 1)) => d },
            looped = Loop(max = 1, after = [first]) { d = Operation(double(&2, 1)) => d } until (d > 0),
        }
        => later.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn after_makes_a_nest_wait_for_a_step_it_does_not_read() {
    let started = tokio::time::Instant::now();
    assert_eq!(Ordered::run().await.expect("the run succeeds"), vec![2]);
    assert_eq!(started.elapsed(), Duration::from_millis(31));
    let graph = Ordered::GRAPH;
    let after: Vec<_> = graph
        .edges()
        .iter()
        .filter(|e| e.kind == flowdag::EdgeKind::After)
        .map(|e| {
            (
                graph.nodes()[e.from as usize].name,
                graph.nodes()[e.to as usize].name,
            )
        })
        .collect();
    assert_eq!(after, [("first", "later"), ("first", "looped")]);
}

workflow! {
    StreamCollected() -> usize {
        got = ForEach(n in stream futures::stream::iter([1u32, 3, 4]), on_failure = collect) {
            c = Operation(check(&n)) => c
        }
        => got.iter().filter(|r| r.is_err()).count()
    }
}

#[tokio::test]
async fn the_stream_form_collects_failures_too() {
    assert_eq!(StreamCollected::run().await.expect("the run succeeds"), 1);
}

workflow! {
    /// `rest = run`: the output is settled by the first instance, the others still run.
    FirstOfAll(gauge: &Gauge) -> Vec<u32> {
        first = ForEach(n in [10u32, 40, 20], min = 1, rest = run) {
            m = Operation(measured(gauge, n)) => m
        }
        => first.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn rest_run_settles_the_output_at_min_and_lets_the_others_finish() {
    let gauge = Gauge {
        now: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    };
    let outcome = FirstOfAll::runner().execute(&gauge).await;
    let nest = outcome
        .report
        .nest("first")
        .expect("a report of the ForEach");
    assert_eq!(nest.completed, 3);
    assert_eq!(outcome.result.expect("the run succeeds").len(), 1);
    assert_eq!(gauge.now.load(Ordering::SeqCst), 0);
}
