//! Cancel scopes and explicit termination: `Cancel('label)` and `Cancel(name)` withdraw a
//! region or a step (WCP 19 Cancel Task, WCP 25 Cancel Region), `Terminate(expr)` ends the run
//! successfully with an output (WCP 43 Explicit Termination). Timing on tokio's paused clock.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Boom, Log, fail, ms, work};
use flowdag::prelude::*;
use flowdag::{EventKind, NodeStatus, Report};

/// Every node's `(name, status)` sorted by name; checks that the log replays to them.
fn statuses(report: &Report) -> Vec<(&'static str, NodeStatus)> {
    let live: Vec<NodeStatus> = report.nodes().iter().map(|n| n.status).collect();
    assert_eq!(
        report.log().statuses(),
        live,
        "the log replays to the live statuses"
    );
    let mut pairs: Vec<_> = report.nodes().iter().map(|n| (n.name, n.status)).collect();
    pairs.sort_unstable_by_key(|(name, _)| *name);
    pairs
}

/// The `Withdrawn` events of a run: `(node, cause)`, in log order.
fn withdrawals(report: &Report) -> Vec<(&'static str, &'static str)> {
    report
        .log()
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Withdrawn { cause } => Some((e.node_name.unwrap_or("?"), *cause)),
            _ => None,
        })
        .collect()
}

/// Counts drops of the futures that hold it.
struct Dropped<'a>(&'a AtomicUsize);

impl Drop for Dropped<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Like `work`, counting the drop of its future (whether it ended or was cut short).
async fn guarded(
    log: &Log,
    drops: &AtomicUsize,
    name: &'static str,
    millis: u64,
) -> Result<u64, Boom> {
    let _guard = Dropped(drops);
    work(log, name, millis).await
}

/// Reports whether its input was there.
async fn seen(log: &Log, name: &'static str, input: Option<&u64>) -> Result<bool, Boom> {
    log.record(name, "start");
    log.record(name, "end");
    Ok(input.is_some())
}

// ---------------------------------------------------------------------------------------------
// WCP 19: cancel a task.

workflow! {
    CancelTask(log: &Log, drops: &AtomicUsize, cancel: bool) -> bool {
        Sequential {
            Parallel {
                slow = Operation(guarded(log, drops, "slow", 1000)),
                Sequential {
                    quick = Operation(work(log, "quick", 10)),
                    Conditional(cancel) {
                        Cancel(slow),
                    },
                },
            },
            // `slow` may be withdrawn: it reads as `Option<&u64>` here and in the output.
            after = Operation(seen(log, "after", slow)),
        }
        => after && slow.is_some()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_19_cancel_task_withdraws_a_running_step_and_drops_its_future_once() {
    let (log, drops) = (Log::new(), AtomicUsize::new(0));
    let outcome = CancelTask::runner()
        .record(true)
        .execute((&log, &drops, true))
        .await;
    assert!(outcome.report.succeeded(), "a withdrawal is no failure");
    assert!(!outcome.result.expect("the run succeeds"));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the future was dropped once"
    );
    assert_eq!(outcome.report.status("slow"), Some(NodeStatus::Withdrawn));
    assert_eq!(
        outcome.report.status("cancel#1"),
        Some(NodeStatus::Completed)
    );
    assert_eq!(outcome.report.status("after"), Some(NodeStatus::Completed));
    assert_eq!(withdrawals(&outcome.report), vec![("slow", "cancel#1")]);
    statuses(&outcome.report);
    // `slow` never ended by itself; the run went on when `quick` had ended and the step was
    // cancelled.
    assert!(
        log.ended().iter().all(|n| n != "slow"),
        "{:?}",
        log.events()
    );
    assert_eq!(log.at("after", "start"), ms(10));

    // Without the Cancel, the same workflow waits for `slow` and reads it.
    let (log, drops) = (Log::new(), AtomicUsize::new(0));
    let outcome = CancelTask::runner().execute((&log, &drops, false)).await;
    assert!(outcome.result.expect("the run succeeds"));
    assert_eq!(outcome.report.status("slow"), Some(NodeStatus::Completed));
    assert_eq!(outcome.report.status("cancel#1"), Some(NodeStatus::Skipped));
    assert_eq!(log.at("after", "start"), ms(1000));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// WCP 25: cancel a region.

workflow! {
    CancelRegion(log: &Log, drops: &AtomicUsize) -> (Option<u64>, Option<u64>, u64) {
        Sequential {
            Parallel {
                'export: Sequential {
                    first = Operation(work(log, "first", 5)),
                    running = Operation(guarded(log, drops, "running", 1000)),
                    Parallel {
                        waiting = Operation(work(log, "waiting", 10)),
                        also = Operation(work(log, "also", 10)),
                    },
                },
                Sequential {
                    trigger = Operation(work(log, "trigger", 20)),
                    Cancel('export),
                },
            },
            done = Operation(work(log, "done", 1)),
        }
        => (first.copied(), running.copied().or(waiting.copied()), done)
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_25_cancel_region_withdraws_its_running_and_waiting_steps() {
    let (log, drops) = (Log::new(), AtomicUsize::new(0));
    let outcome = CancelRegion::runner()
        .record(true)
        .execute((&log, &drops))
        .await;
    assert!(outcome.report.succeeded());
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("also", NodeStatus::Withdrawn),
            ("cancel#1", NodeStatus::Completed),
            ("done", NodeStatus::Completed),
            // Ended before the Cancel: it keeps its status.
            ("first", NodeStatus::Completed),
            ("running", NodeStatus::Withdrawn),
            ("trigger", NodeStatus::Completed),
            ("waiting", NodeStatus::Withdrawn),
        ]
    );
    assert_eq!(
        outcome.result.expect("the run succeeds"),
        (Some(5), None, 1)
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(log.started(), vec!["first", "trigger", "running", "done"]);
    assert_eq!(log.at("done", "start"), ms(20));
    let mut withdrawn = withdrawals(&outcome.report);
    withdrawn.sort_unstable();
    assert_eq!(
        withdrawn,
        vec![
            ("also", "cancel#1"),
            ("running", "cancel#1"),
            ("waiting", "cancel#1"),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// A Cancel inside its own region: `break 'label`.

workflow! {
    Break(log: &Log, stop: bool) -> (Option<u64>, u64) {
        Sequential {
            'work: Sequential {
                one = Operation(work(log, "one", 5)),
                Conditional(stop) {
                    Cancel('work),
                },
                two = Operation(work(log, "two", 5)),
            },
            next = Operation(work(log, "next", 5)),
        }
        => (two.copied(), next)
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_inside_its_own_region_breaks_out_of_it() {
    let log = Log::new();
    let outcome = Break::runner().record(true).execute((&log, true)).await;
    assert_eq!(outcome.result.expect("the run succeeds"), (None, 5));
    assert_eq!(log.started(), vec!["one", "next"]);
    assert_eq!(log.at("next", "start"), ms(5));
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("cancel#1", NodeStatus::Completed),
            ("decision#1", NodeStatus::Completed),
            ("next", NodeStatus::Completed),
            ("one", NodeStatus::Completed),
            ("two", NodeStatus::Withdrawn),
        ]
    );

    let log = Log::new();
    let outcome = Break::runner().execute((&log, false)).await;
    assert_eq!(outcome.result.expect("the run succeeds"), (Some(5), 5));
    assert_eq!(log.started(), vec!["one", "two", "next"]);
}

// ---------------------------------------------------------------------------------------------
// A failure settled in a region before its Cancel stays a failure.

workflow! {
    CancelAfterFailure(log: &Log) {
        Parallel {
            'region: Parallel {
                broken = Operation(fail(log, "broken", 5)),
                long = Operation(work(log, "long", 1000)),
            },
            Sequential {
                wait = Operation(work(log, "wait", 10)),
                Cancel('region),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_region_does_not_forgive_a_failure_already_there() {
    let log = Log::new();
    let outcome = CancelAfterFailure::runner()
        .record(true)
        .execute(&log)
        .await;
    assert_eq!(outcome.report.status("broken"), Some(NodeStatus::Failed));
    assert_eq!(outcome.report.status("long"), Some(NodeStatus::Withdrawn));
    let error = outcome.result.expect_err("the failure fails the run");
    assert_eq!(error.failures().len(), 1, "{error}");
    assert_eq!(error.failures()[0].node, "broken");
    assert_eq!(log.at("wait", "end"), ms(10));
}

// ---------------------------------------------------------------------------------------------
// WCP 43: explicit termination.

workflow! {
    Early(log: &Log, drops: &AtomicUsize, hit: bool) -> u64 {
        Sequential {
            Parallel {
                background = Operation(guarded(log, drops, "background", 1000)),
                Sequential {
                    cached = Operation(work(log, "cached", 10)),
                    Conditional(hit) {
                        Terminate(cached * 100),
                    },
                    computed = Operation(work(log, "computed", 50)),
                },
            },
            publish = Operation(work(log, "publish", 5)),
        }
        => computed
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_43_terminate_ends_the_run_early_with_its_value() {
    let (log, drops) = (Log::new(), AtomicUsize::new(0));
    let outcome = Early::runner()
        .record(true)
        .execute((&log, &drops, true))
        .await;
    assert!(outcome.report.succeeded());
    assert_eq!(outcome.result.expect("the run succeeds"), 1000);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the background step was dropped"
    );
    assert_eq!(log.started(), vec!["background", "cached"]);
    assert_eq!(log.elapsed(), ms(10), "the run ended when Terminate ran");
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("background", NodeStatus::Withdrawn),
            ("cached", NodeStatus::Completed),
            ("computed", NodeStatus::Withdrawn),
            ("decision#1", NodeStatus::Completed),
            ("publish", NodeStatus::Withdrawn),
            ("terminate#1", NodeStatus::Completed),
        ]
    );
    // Every withdrawal names the Terminate step, and the run's end comes after them.
    let events = outcome.report.log().events();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
    let last_withdrawn = kinds.iter().rposition(|k| *k == "Withdrawn");
    assert_eq!(last_withdrawn, Some(kinds.len() - 2), "{kinds:?}");
    assert!(matches!(
        events.last().map(|e| &e.kind),
        Some(EventKind::RunFinished { succeeded: true })
    ));
    let mut withdrawn = withdrawals(&outcome.report);
    withdrawn.sort_unstable();
    assert_eq!(
        withdrawn,
        vec![
            ("background", "terminate#1"),
            ("computed", "terminate#1"),
            ("publish", "terminate#1"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_terminate_whose_branch_is_not_taken_leaves_the_run_to_its_normal_output() {
    let (log, drops) = (Log::new(), AtomicUsize::new(0));
    let outcome = Early::runner()
        .record(true)
        .execute((&log, &drops, false))
        .await;
    assert_eq!(outcome.result.expect("the run succeeds"), 50);
    assert_eq!(
        outcome.report.status("terminate#1"),
        Some(NodeStatus::Skipped)
    );
    assert_eq!(outcome.report.count(NodeStatus::Withdrawn), 0);
    assert_eq!(log.elapsed(), ms(1005));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

// Failures settled before Terminate do not fail the run; they stay in the report.

workflow! {
    TerminateAfterFailure(log: &Log) -> &'static str {
        Parallel {
            broken = Operation(fail(log, "broken", 5)),
            Sequential {
                wait = Operation(work(log, "wait", 10)),
                Terminate("early"),
            },
        }
        => "late"
    }
}

#[tokio::test(start_paused = true)]
async fn terminate_succeeds_even_after_a_failure_which_stays_in_the_report() {
    let log = Log::new();
    let outcome = TerminateAfterFailure::runner()
        .record(true)
        .execute(&log)
        .await;
    assert!(outcome.report.succeeded());
    assert_eq!(outcome.report.status("broken"), Some(NodeStatus::Failed));
    let error = outcome.report.node("broken").and_then(|n| n.error.clone());
    assert!(error.is_some_and(|e| e.contains("boom: broken")));
    assert_eq!(outcome.result.expect("Terminate gives the output"), "early");
}

// `Terminate(())` in a workflow without output; the graph shows the new kinds.

workflow! {
    Stop(log: &Log) {
        Sequential {
            one = Operation(work(log, "one", 5)),
            Terminate(()),
            two = Operation(work(log, "two", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn terminate_in_a_workflow_without_output() {
    let log = Log::new();
    let outcome = Stop::runner().record(true).execute(&log).await;
    outcome.result.expect("the run succeeds");
    assert_eq!(log.started(), vec!["one"]);
    assert_eq!(outcome.report.status("two"), Some(NodeStatus::Withdrawn));
    let kinds: Vec<&str> = Stop::GRAPH
        .nodes()
        .iter()
        .map(|n| n.kind.as_str())
        .collect();
    assert_eq!(kinds, vec!["operation", "terminate", "operation"]);
    let cancel = CancelRegion::GRAPH
        .node_id("cancel#1")
        .expect("the Cancel node");
    assert_eq!(CancelRegion::GRAPH.nodes()[cancel].label, "'export");
}

// Two Terminates ready at once: the first in source order ends the run. A Terminate whose
// expression panics fails like an operation.

fn explode() -> u32 {
    panic!("no value")
}

workflow! {
    TwoEnds(log: &Log, panics: bool) -> u32 {
        Sequential {
            Parallel {
                Terminate(1),
                Terminate(2),
                Conditional(panics) {
                    Terminate(explode()),
                },
            },
            rest = Operation(work(log, "rest", 5)),
        }
        => 0
    }
}

#[tokio::test(start_paused = true)]
async fn the_first_terminate_in_source_order_wins() {
    let log = Log::new();
    let outcome = TwoEnds::runner().record(true).execute((&log, false)).await;
    assert_eq!(outcome.result.expect("the run succeeds"), 1);
    assert_eq!(
        outcome.report.status("terminate#1"),
        Some(NodeStatus::Completed)
    );
    assert_eq!(
        outcome.report.status("terminate#2"),
        Some(NodeStatus::Withdrawn)
    );
    assert_eq!(outcome.report.status("rest"), Some(NodeStatus::Withdrawn));
    assert!(log.started().is_empty());
    let dot = TwoEnds::GRAPH.to_dot();
    assert!(dot.contains("terminate#1\\n1\", shape=octagon"), "{dot}");
}

workflow! {
    PanickingEnd(log: &Log) -> u32 {
        Sequential {
            Terminate(explode()),
            rest = Operation(work(log, "rest", 5)),
        }
        => 0
    }
}

#[tokio::test(start_paused = true)]
async fn a_terminate_whose_expression_panics_fails_its_step() {
    let log = Log::new();
    let outcome = PanickingEnd::runner().execute(&log).await;
    assert_eq!(
        outcome.report.status("terminate#1"),
        Some(NodeStatus::Failed)
    );
    assert_eq!(outcome.report.status("rest"), Some(NodeStatus::Aborted));
    let error = outcome.result.expect_err("the panic fails the run");
    assert!(error.to_string().contains("terminate#1"), "{error}");
    assert!(log.started().is_empty());
}

// A test reads a node a Cancel may withdraw as `Option<Result<&T, &NodeError>>`.

workflow! {
    TestAfterCancel(log: &Log) -> bool {
        Sequential {
            Parallel {
                slow = Operation(work(log, "slow", 1000)),
                Sequential {
                    quick = Operation(work(log, "quick", 10)),
                    Cancel(slow),
                },
            },
            Conditional(slow.is_none()) {
                gone = Operation(work(log, "gone", 1)),
            },
        }
        => gone.is_some()
    }
}

#[tokio::test(start_paused = true)]
async fn a_test_sees_a_withdrawn_node_as_none() {
    let log = Log::new();
    let outcome = TestAfterCancel::runner().execute(&log).await;
    assert!(outcome.result.expect("the run succeeds"));
    assert_eq!(outcome.report.status("slow"), Some(NodeStatus::Withdrawn));
    assert_eq!(log.at("gone", "start"), ms(10));
}

// A withdrawn node whose predecessors are still running lets nothing after it start before
// they end: a Sequential keeps its order, and a branch waits for its decision.

workflow! {
    CancelAhead(log: &Log, take: bool) {
        Parallel {
            Sequential {
                first = Operation(work(log, "first", 50)),
                'later: Sequential { later = Operation(work(log, "later", 5)) },
                last = Operation(work(log, "last", 5)),
                Conditional(take) {
                    'entry: entry = Operation(work(log, "entry", 5)),
                    rest = Operation(work(log, "rest", 5)),
                },
            },
            Sequential {
                quick = Operation(work(log, "quick", 10)),
                Cancel('later),
                Cancel('entry),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_withdrawn_waiting_node_keeps_the_order_around_it() {
    let log = Log::new();
    let outcome = CancelAhead::runner().execute((&log, false)).await;
    outcome.result.expect("the run succeeds");
    assert_eq!(outcome.report.status("later"), Some(NodeStatus::Withdrawn));
    assert_eq!(
        log.at("last", "start"),
        ms(50),
        "after `first`, not at the Cancel"
    );
    assert_eq!(outcome.report.status("entry"), Some(NodeStatus::Withdrawn));
    assert_eq!(outcome.report.status("rest"), Some(NodeStatus::Skipped));
    assert_eq!(log.started(), vec!["first", "quick", "last"]);

    // Taken, the branch runs what the Cancel left: `rest`, after its decision.
    let log = Log::new();
    let outcome = CancelAhead::runner().execute((&log, true)).await;
    outcome.result.expect("the run succeeds");
    assert_eq!(outcome.report.status("rest"), Some(NodeStatus::Completed));
    assert_eq!(log.at("rest", "start"), ms(55));
}

// `Cancel(name)` of a named `Race` withdraws the whole block: its arms and its gate.

workflow! {
    CancelRace(log: &Log, drops: &AtomicUsize) -> Option<usize> {
        Sequential {
            Parallel {
                won = Race {
                    a = Operation(guarded(log, drops, "a", 100)),
                    b = Operation(guarded(log, drops, "b", 200)),
                },
                Sequential {
                    quick = Operation(work(log, "quick", 10)),
                    Cancel(won),
                },
            },
            next = Operation(work(log, "next", 1)),
        }
        => won.copied()
    }
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_named_race_withdraws_its_arms_and_its_gate() {
    let (log, drops) = (Log::new(), AtomicUsize::new(0));
    let outcome = CancelRace::runner()
        .record(true)
        .execute((&log, &drops))
        .await;
    assert_eq!(outcome.result.expect("the run succeeds"), None);
    assert_eq!(drops.load(Ordering::SeqCst), 2, "both arms dropped");
    assert_eq!(outcome.report.status("a"), Some(NodeStatus::Withdrawn));
    assert_eq!(outcome.report.status("b"), Some(NodeStatus::Withdrawn));
    assert_eq!(outcome.report.status("won"), Some(NodeStatus::Withdrawn));
    assert_eq!(log.at("next", "start"), ms(10));
    statuses(&outcome.report);
}
