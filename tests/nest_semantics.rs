//! Rules of nested graphs (`docs/semantics.md`, "Nested graphs") that the other nest tests do
//! not show end to end: `min` with `rest = run`, `min` under `fail_fast`, a loop's failed
//! iteration, and a sub-workflow step's cancellation, events and report.

mod common;

use flowdag::prelude::*;
use flowdag::{CancelToken, EventKind};
use tokio::time::sleep;

use common::{Boom, Log, ms, work, work_on};

/// Records `(name, "dropped")` when the future holding it is dropped before it ended.
struct Cut<'a> {
    log: &'a Log,
    name: &'static str,
    ended: bool,
}

impl Drop for Cut<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.log.record(self.name, "dropped");
        }
    }
}

/// Like [`work`], failing at its end when `fails`; a `dropped` entry if cut short.
async fn step(log: &Log, name: &'static str, millis: u64, fails: bool) -> Result<u64, Boom> {
    let mut guard = Cut {
        log,
        name,
        ended: false,
    };
    let value = work(log, name, millis).await;
    guard.ended = true;
    if fails { Err(Boom(name)) } else { value }
}

fn dropped(log: &Log, name: &str) -> bool {
    log.events()
        .iter()
        .any(|(n, what, _)| n == name && *what == "dropped")
}

/// `(started, completed, failed, withdrawn)` of the nest node `name`.
fn instances(report: &Report, name: &str) -> (u64, u64, u64, u64) {
    let nest = report
        .nest(name)
        .unwrap_or_else(|| panic!("no nest node `{name}`:\n{report}"));
    (nest.started, nest.completed, nest.failed, nest.withdrawn)
}

// ---------------------------------------------------------------------------------------------
// ForEach: min

workflow! {
    /// Two of five, the others run on; `d` fails after the second completion.
    RestRun(log: &Log) -> Vec<u64> {
        Sequential {
            two = ForEach(
                x in [
                    ("a", 50u64, false),
                    ("b", 10, false),
                    ("c", 20, false),
                    ("d", 40, true),
                    ("e", 30, false),
                ],
                min = 2,
                rest = run,
            ) {
                w = Operation(step(log, x.0, x.1, x.2)) => w
            },
            next = Operation(work_on(log, "next", two.first().unwrap_or(&0), 5)),
        }
        => two.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn with_rest_run_the_node_completes_at_the_kth_and_the_rest_runs_on() {
    let log = Log::new();
    let outcome = RestRun::runner().record(true).execute(&log).await;
    let report = &outcome.report;
    // The output is the first two that completed (b at 10ms, c at 20ms), in input order.
    assert_eq!(
        outcome.result.as_ref().ok(),
        Some(&vec![10, 20]),
        "{report}"
    );
    // The node completes at the second completion: the step after it starts then, and ends
    // while the other instances still run.
    assert_eq!(log.at("next", "start"), ms(20));
    assert_eq!(log.at("next", "end"), ms(25));
    assert!(log.index("next", "end") < log.index("e", "end"));
    // Every instance runs to its end: none is dropped, and the run ends with the last.
    assert!(["a", "d", "e"].iter().all(|n| !dropped(&log, n)));
    assert_eq!(log.at("e", "end"), ms(30));
    assert_eq!(log.at("a", "end"), ms(50));
    assert_eq!(log.elapsed(), ms(50));
    // The node's `Completed` is recorded at the second completion, before the rest's events.
    let events = outcome.report.log().events();
    let completed = events
        .iter()
        .position(|e| {
            e.path.is_none()
                && e.node_name == Some("two")
                && matches!(e.kind, EventKind::Completed { .. })
        })
        .expect("two completed");
    assert_eq!(events[completed].at, ms(20));
    let late = events
        .iter()
        .position(|e| e.path.as_ref().is_some_and(|p| p.to_string() == "two[0]"))
        .map(|first| {
            events
                .iter()
                .rposition(|e| e.path.as_ref().is_some_and(|p| p.to_string() == "two[0]"))
                .unwrap_or(first)
        })
        .expect("events of two[0]");
    assert!(
        late > completed,
        "two[0]'s events go on after the node completed"
    );
    // A failure after the k-th completion is reported and fails neither the node nor the run.
    assert_eq!(report.status("two"), Some(NodeStatus::Completed));
    assert_eq!(report.status("next"), Some(NodeStatus::Completed));
    assert_eq!(instances(report, "two"), (5, 4, 1, 0));
    let nest = report.nest("two").map(|n| n.failures.clone());
    assert_eq!(
        nest.map(|f| f.iter().map(|(i, _)| *i).collect::<Vec<_>>()),
        Some(vec![3])
    );
    assert!(report.succeeded());
}

#[tokio::test(start_paused = true)]
async fn with_rest_run_cancelling_the_run_drops_the_instances_still_running() {
    let log = Log::new();
    let token = CancelToken::new();
    let canceller = token.clone();
    let run = RestRun::runner().cancel_on(token).execute(&log);
    let cancel = async {
        sleep(ms(27)).await;
        canceller.cancel();
    };
    let (outcome, ()) = tokio::join!(run, cancel);
    // `next` ended at 25ms; a, d and e were still running.
    assert_eq!(log.at("next", "end"), ms(25));
    assert!(["a", "d", "e"].iter().all(|n| dropped(&log, n)));
    assert_eq!(log.elapsed(), ms(27));
    assert_eq!(instances(&outcome.report, "two"), (5, 2, 0, 3));
    assert!(outcome.result.is_err_and(|e| e.is_cancelled()));
    // The same with a deadline.
    let log = Log::new();
    let outcome = RestRun::runner().deadline(ms(35)).execute(&log).await;
    assert!(["a", "d"].iter().all(|n| dropped(&log, n)));
    assert!(!dropped(&log, "e"));
    assert_eq!(log.elapsed(), ms(35));
    assert!(outcome.result.is_err_and(|e| e.is_cancelled()));
}

workflow! {
    /// Two of five, then `Terminate`: the instances still running are dropped.
    RestRunTerminated(log: &Log) -> u64 {
        Sequential {
            two = ForEach(
                x in [("a", 50u64, false), ("b", 10, false), ("c", 20, false), ("d", 40, true)],
                min = 2,
                rest = run,
            ) {
                w = Operation(step(log, x.0, x.1, x.2)) => w
            },
            Terminate(two.iter().sum::<u64>()),
        }
        => 0
    }
}

#[tokio::test(start_paused = true)]
async fn with_rest_run_terminate_after_the_foreach_drops_the_instances_still_running() {
    let log = Log::new();
    let outcome = RestRunTerminated::runner().execute(&log).await;
    assert_eq!(
        outcome.result.as_ref().ok(),
        Some(&30),
        "{}",
        outcome.report
    );
    assert!(dropped(&log, "a") && dropped(&log, "d"));
    assert_eq!(log.elapsed(), ms(20), "the run ended when Terminate ran");
    assert_eq!(instances(&outcome.report, "two"), (4, 2, 0, 2));
    assert_eq!(outcome.report.status("two"), Some(NodeStatus::Completed));
}

workflow! {
    /// Two of four, then `Cancel(two)` or `Complete(two)` at 25ms, while two instances still
    /// run.
    RestRunStopped(log: &Log, complete: bool) -> Vec<u64> {
        Parallel {
            two = ForEach(
                x in [("a", 50u64, false), ("b", 10, false), ("c", 20, false), ("d", 40, true)],
                min = 2,
                rest = run,
            ) {
                w = Operation(step(log, x.0, x.1, x.2)) => w
            },
            Sequential {
                Operation(work(log, "trigger", 25)),
                Conditional(complete) {
                    Complete(two),
                } else {
                    Cancel(two),
                },
            },
        }
        => two.cloned().unwrap_or_default()
    }
}

#[tokio::test(start_paused = true)]
async fn with_rest_run_cancel_or_complete_of_the_completed_foreach_drops_the_rest() {
    for complete in [false, true] {
        let log = Log::new();
        let outcome = RestRunStopped::runner().execute((&log, complete)).await;
        let report = &outcome.report;
        assert_eq!(
            outcome.result.as_ref().ok(),
            Some(&vec![10, 20]),
            "{report}"
        );
        assert!(
            dropped(&log, "a") && dropped(&log, "d"),
            "complete: {complete}"
        );
        assert_eq!(log.elapsed(), ms(25), "complete: {complete}");
        // The node had completed: it stays completed, its rest counted withdrawn.
        assert_eq!(report.status("two"), Some(NodeStatus::Completed));
        assert_eq!(instances(report, "two"), (4, 2, 0, 2));
        assert!(report.succeeded());
    }
}

workflow! {
    /// Two of three under `fail_fast`: `a` fails before the second completion.
    MinFailFast(log: &Log) -> Vec<u64> {
        two = ForEach(x in [("a", 10u64, true), ("b", 20, false), ("c", 30, false)], min = 2) {
            w = Operation(step(log, x.0, x.1, x.2)) => w
        }
        => two.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn under_fail_fast_a_failure_before_the_kth_completion_fails_the_foreach() {
    let log = Log::new();
    let outcome = MinFailFast::runner().execute(&log).await;
    let error = outcome.result.expect_err("a failed first");
    let failed: Vec<_> = error.failed().collect();
    assert_eq!(failed.len(), 1);
    let NodeError::Workflow(inner) = &failed[0].error else {
        panic!("expected the instance's error, got {:?}", failed[0].error);
    };
    assert_eq!(
        inner.path().map(ToString::to_string).as_deref(),
        Some("two[0]")
    );
    // The live instances are withdrawn at the failure.
    assert!(dropped(&log, "b") && dropped(&log, "c"));
    assert_eq!(instances(&outcome.report, "two"), (3, 0, 1, 2));
}

// ---------------------------------------------------------------------------------------------
// Loop: a failed iteration

/// The iteration after `prev` (1 for the first); the second fails.
async fn flaky(prev: Option<&u32>) -> Result<u32, Boom> {
    let n = prev.copied().unwrap_or(0) + 1;
    if n == 2 {
        Err(Boom("second try"))
    } else {
        Ok(n)
    }
}

workflow! {
    FailingLoop() -> u32 {
        polled = Loop(max = 5, prev = last) { n = Operation(flaky(last)) => n } until (n >= 4)
        => polled
    }
}

#[tokio::test]
async fn a_failed_iteration_fails_the_loop_with_its_error_and_ends_it() {
    let outcome = FailingLoop::runner().execute(()).await;
    let error = outcome.result.expect_err("the second iteration failed");
    let failed: Vec<_> = error.failed().collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].node, "polled");
    let NodeError::Workflow(inner) = &failed[0].error else {
        panic!("expected the iteration's error, got {:?}", failed[0].error);
    };
    // The error names the iteration: `polled@1`, the second.
    assert_eq!(
        inner.path().map(ToString::to_string).as_deref(),
        Some("polled@1")
    );
    assert!(inner.to_string().contains("polled@1"), "{inner}");
    // The chain of sources leads from the run's error to the operation's.
    let mut chain = vec![error.to_string()];
    let mut source = std::error::Error::source(&error);
    while let Some(next) = source {
        chain.push(next.to_string());
        source = next.source();
    }
    assert!(chain.iter().any(|m| m.contains("polled@1")), "{chain:?}");
    assert!(
        chain.last().is_some_and(|m| m.contains("second try")),
        "{chain:?}"
    );
    // No iteration runs after it.
    assert_eq!(instances(&outcome.report, "polled"), (2, 1, 1, 0));
}

// ---------------------------------------------------------------------------------------------
// Sub-workflows: cancellation, events and report

workflow! {
    /// The child: a long step, then a short one.
    Slow(log: &Log) {
        Sequential {
            Operation(step(log, "inner", 100, false)),
            Operation(work(log, "after", 1)),
        }
    }
}

workflow! {
    Outer(log: &Log) {
        Sequential {
            child = Workflow(Slow(log)),
            Operation(work(log, "next", 1)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_parent_cancels_its_sub_workflow() {
    let log = Log::new();
    let token = CancelToken::new();
    let canceller = token.clone();
    let run = Outer::runner().cancel_on(token).execute(&log);
    let cancel = async {
        sleep(ms(30)).await;
        canceller.cancel();
    };
    let (outcome, ()) = tokio::join!(run, cancel);
    // The child's running step is dropped when the parent is cancelled.
    assert_eq!(log.at("inner", "dropped"), ms(30));
    assert_eq!(log.started(), ["inner"]);
    let report = &outcome.report;
    assert_eq!(report.status("child"), Some(NodeStatus::Aborted));
    let error = outcome.result.expect_err("cancelled");
    assert!(error.is_cancelled(), "{error}");
    // The same with a deadline.
    let log = Log::new();
    let outcome = Outer::runner().deadline(ms(40)).execute(&log).await;
    assert_eq!(log.at("inner", "dropped"), ms(40));
    assert!(outcome.result.is_err_and(|e| e.is_cancelled()));
}

workflow! {
    CancelChild(log: &Log) {
        Parallel {
            child = Workflow(Slow(log)),
            Sequential {
                Operation(work(log, "trigger", 30)),
                Cancel(child),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_step_withdraws_a_sub_workflow_and_drops_its_running_steps() {
    let log = Log::new();
    let outcome = CancelChild::runner().execute(&log).await;
    assert!(outcome.result.is_ok(), "{}", outcome.report);
    assert_eq!(log.at("inner", "dropped"), ms(30));
    assert_eq!(outcome.report.status("child"), Some(NodeStatus::Withdrawn));
    assert_eq!(instances(&outcome.report, "child"), (1, 0, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_sub_workflows_events_and_report_nest_in_the_parents() {
    let log = Log::new();
    let outcome = Outer::runner().execute(&log).await;
    assert!(outcome.result.is_ok(), "{}", outcome.report);
    let report = &outcome.report;
    let events = report.log().events();
    // One log: the child's events come with the parent's run id, in sequence, on one clock,
    // each with its path.
    assert!(
        events
            .windows(2)
            .all(|w| w[0].seq < w[1].seq && w[0].at <= w[1].at)
    );
    assert!(events.iter().all(|e| e.run == events[0].run));
    let child: Vec<(&str, String)> = events
        .iter()
        .filter(|e| e.path.is_some())
        .filter(|e| matches!(e.kind, EventKind::Requested))
        .map(|e| {
            let path = e.path.as_ref().map(ToString::to_string).unwrap_or_default();
            (e.node_name.unwrap_or("?"), path)
        })
        .collect();
    let names: Vec<(&str, String)> = Slow::GRAPH
        .nodes()
        .iter()
        .map(|n| (n.name, "child".to_string()))
        .collect();
    assert_eq!(child, names);
    // The parent's statuses are its own nodes'.
    assert_eq!(report.log().statuses().len(), report.nodes().len());
    assert_eq!(report.nodes().len(), 2);
    // The child's whole report is the sub-workflow step's.
    let inner = report
        .nest("child")
        .and_then(|n| n.report())
        .expect("the child's report");
    assert_eq!(inner.nodes().len(), 2);
    assert!(
        inner
            .nodes()
            .iter()
            .all(|n| n.status == NodeStatus::Completed)
    );
}

// ---------------------------------------------------------------------------------------------
// docs/semantics.md stays true: every test its "Nested graphs" section names exists.

#[test]
fn the_nested_graphs_section_names_tests_that_exist() {
    let doc = include_str!("../docs/semantics.md");
    let start = doc
        .find("## 9. Nested graphs")
        .expect("a section on nested graphs");
    let section = &doc[start..];
    let files: &[(&str, &str)] = &[
        ("nest_foreach", include_str!("nest_foreach.rs")),
        ("nest_loops", include_str!("nest_loops.rs")),
        ("nest_subworkflows", include_str!("nest_subworkflows.rs")),
        ("run_patterns", include_str!("run_patterns.rs")),
        ("nest_semantics", include_str!("nest_semantics.rs")),
        ("run_signals", include_str!("run_signals.rs")),
        ("run_saga", include_str!("run_saga.rs")),
        (
            "durable_saga",
            include_str!("../durable/tests/durable_saga.rs"),
        ),
        (
            "model_nest",
            include_str!("../flow-runtime/tests/model_nest.rs"),
        ),
        (
            "flow-runtime/src/drivers/tests.rs",
            include_str!("../flow-runtime/src/drivers/tests.rs"),
        ),
        (
            "flow-runtime/src/nest/tests.rs",
            include_str!("../flow-runtime/src/nest/tests.rs"),
        ),
    ];
    let source = |file: &str| {
        files
            .iter()
            .find(|(name, _)| *name == file)
            .map(|(_, text)| *text)
            .unwrap_or_else(|| panic!("docs/semantics.md names tests of `{file}`"))
    };
    let defines = |text: &str, test: &str| text.contains(&format!("fn {test}("));
    let mut checked = 0;
    for line in section.lines().filter(|l| l.starts_with("| ")) {
        let Some(cell) = line.trim_end_matches('|').rsplit('|').next() else {
            continue;
        };
        // Code spans alternate with text: `file::test`, `ui/case.rs`, and `path/tests.rs`
        // followed by a parenthesized group of test names.
        let mut group: Option<&str> = None;
        for (i, piece) in cell.split('`').enumerate() {
            if i % 2 == 0 {
                if piece.contains(')') {
                    group = None;
                }
                continue;
            }
            if let Some((file, test)) = piece.split_once("::") {
                assert!(defines(source(file), test), "no `{test}` in {file}");
            } else if piece.starts_with("flow-runtime/src/") {
                group = Some(piece);
                continue;
            } else if let Some(file) = group {
                assert!(defines(source(file), piece), "no `{piece}` in {file}");
            } else if piece.starts_with("ui/") {
                let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests")
                    .join(piece);
                assert!(path.is_file(), "no {}", path.display());
            } else {
                continue;
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} tests found in the section");
}

// ---------------------------------------------------------------------------------------------
// Run options

workflow! {
    /// One instance whose `bad` fails at once while `good` runs on; the output counts the
    /// failed instances.
    Independent(log: &Log) -> usize {
        each = ForEach(x in [1u8], on_failure = collect) {
            Parallel {
                bad = Operation(step(log, "bad", 1, true)),
                good = Operation(step(log, "good", 20, false)),
            }
        }
        => each.iter().filter(|r| r.is_err()).count()
    }
}

#[tokio::test(start_paused = true)]
async fn the_runners_failure_policy_stays_with_the_runs_own_nodes() {
    let log = Log::default();
    let outcome = Independent::runner()
        .failure_policy(FailurePolicy::FailFast)
        .execute(&log)
        .await;
    // The instance failed, but its body keeps the workflow's declared policy
    // (`ContinueIndependent`): `good` was not cut short by `bad`'s failure.
    assert_eq!(outcome.result.expect("collect never fails the node"), 1);
    assert!(!dropped(&log, "good"), "{:?}", log.events());
    let child = outcome
        .report
        .nest("each")
        .and_then(|n| n.instance(0))
        .expect("the failed instance's report is kept");
    assert_eq!(child.status("good"), Some(NodeStatus::Completed), "{child}");
}
