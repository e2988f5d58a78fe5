//! `Loop` in the DSL: `until` and `while` tests, `prev`, `max` exceeded and `on_max = stop`.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use flowdag::NodeKind;
use flowdag::prelude::*;

use common::Boom;

/// Counts its calls; the n-th call (from 1) returns n.
async fn tick(counter: &AtomicU32) -> Result<u32, Boom> {
    Ok(counter.fetch_add(1, Ordering::SeqCst) + 1)
}

async fn add(prev: Option<&u32>, step: u32) -> Result<u32, Boom> {
    Ok(prev.copied().unwrap_or(0) + step)
}

workflow! {
    UntilThree(counter: &AtomicU32) -> u32 {
        polled = Loop(max = 10) {
            n = Operation(tick(counter))
            => n
        } until (n >= 3)
        => polled + 100
    }
}

#[tokio::test]
async fn until_runs_the_body_until_the_test_holds_and_outputs_the_last_iteration() {
    let counter = AtomicU32::new(0);
    assert_eq!(
        UntilThree::run(&counter).await.expect("the run succeeds"),
        103
    );
    assert_eq!(counter.load(Ordering::SeqCst), 3);
    let graph = UntilThree::GRAPH;
    assert_eq!(graph.nodes()[0].kind, NodeKind::Loop);
    assert_eq!(graph.nodes()[0].name, "polled");
}

workflow! {
    Sum(step: u32) -> u32 {
        Sequential {
            start = Operation(add(None, 1)),
            total = Loop(max = 5, prev = last) {
                s = Operation(add(last.or(Some(&start)), step))
                => s
            } until (s > 20),
        }
        => total
    }
}

#[tokio::test]
async fn prev_is_the_previous_iterations_output_and_none_at_first() {
    // 1 (start), then 1 + 6 = 7, 13, 19, 25 > 20.
    assert_eq!(Sum::run(6).await.expect("the run succeeds"), 25);
}

workflow! {
    Exhausted(counter: &AtomicU32) -> u32 {
        polled = Loop(max = 3) { n = Operation(tick(counter)) => n } until (n > 100)
        => polled
    }
}

#[tokio::test]
async fn a_loop_past_max_fails_its_node_with_loop_exhausted() {
    let counter = AtomicU32::new(0);
    let error = Exhausted::run(&counter).await.expect_err("the run fails");
    let failed: Vec<_> = error.failed().collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].node, "polled");
    assert!(
        matches!(failed[0].error, NodeError::LoopExhausted { max: 3 }),
        "{:?}",
        failed[0].error
    );
    assert_eq!(counter.load(Ordering::SeqCst), 3);
}

workflow! {
    Stopped(counter: &AtomicU32) -> u32 {
        polled = Loop(max = 3, on_max = stop) { n = Operation(tick(counter)) => n } until (n > 100)
        => polled
    }
}

#[tokio::test]
async fn on_max_stop_ends_with_the_last_output() {
    let counter = AtomicU32::new(0);
    assert_eq!(Stopped::run(&counter).await.expect("the run succeeds"), 3);
}

workflow! {
    Pages(limit: u32) -> Option<u32> {
        pages = Loop(max = 100, prev = last) while (last.is_none_or(|p| *p < limit)) {
            p = Operation(add(last, 1))
            => p
        }
        => pages
    }
}

#[tokio::test]
async fn while_tests_before_each_iteration_and_outputs_an_option() {
    assert_eq!(Pages::run(4).await.expect("the run succeeds"), Some(4));
}

workflow! {
    Never(counter: &AtomicU32) -> Option<u32> {
        Sequential {
            go = Operation(add(None, 0)),
            looped = Loop(max = 5, prev = last) while (last.is_some() && go > 0) {
                n = Operation(tick(counter))
                => n
            },
        }
        => looped
    }
}

#[tokio::test]
async fn a_while_loop_whose_test_fails_at_once_runs_nothing() {
    let counter = AtomicU32::new(0);
    assert_eq!(Never::run(&counter).await.expect("the run succeeds"), None);
    assert_eq!(counter.load(Ordering::SeqCst), 0);
}

#[test]
fn a_run_with_a_loop_is_send() {
    let counter = AtomicU32::new(0);
    drop(common::require_send(UntilThree::run(&counter)));
    drop(common::require_send(Pages::run(1)));
}

#[tokio::test]
async fn each_iterations_nodes_show_in_the_events_and_report_with_their_iteration() {
    let counter = AtomicU32::new(0);
    let outcome = UntilThree::runner().execute(&counter).await;
    assert_eq!(outcome.result.expect("the run succeeds"), 103);
    let completed: Vec<(String, &str)> = outcome
        .report
        .log()
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Completed { .. }))
        .filter_map(|e| Some((e.path.as_ref()?.to_string(), e.node_name?)))
        .collect();
    assert_eq!(
        completed,
        [
            ("polled@0".to_string(), "n"),
            ("polled@1".to_string(), "n"),
            ("polled@2".to_string(), "n"),
        ]
    );
    let nest = outcome.report.nest("polled").expect("the loop's report");
    assert_eq!((nest.started, nest.completed, nest.failed), (3, 3, 0));
    let table = outcome.report.to_string();
    assert!(table.contains("\n  polled@0..3  3 completed\n"), "{table}");
}
