//! Gates: `Race { .. }` and `Parallel(min = k, rest = cancel | run) { .. }`, on tokio's paused
//! clock. Losers are withdrawn (their futures dropped at once), which never fails a run; which
//! arms won is the block's binding; a gate fails as soon as `min` is out of reach.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use flowdag::prelude::*;
use flowdag::{EventKind, NodeKind};

use common::{Boom, Log, fail, ms, work};

/// Counts its drops: a future that holds one is dropped exactly when the counter moves.
struct DropCounter<'a>(&'a AtomicUsize);

impl Drop for DropCounter<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Like `work`, holding a [`DropCounter`] while it runs.
async fn counted(
    log: &Log,
    drops: &AtomicUsize,
    name: &'static str,
    millis: u64,
) -> Result<u64, Boom> {
    let _guard = DropCounter(drops);
    work(log, name, millis).await
}

fn statuses(report: &Report) -> Vec<(&'static str, NodeStatus)> {
    let live: Vec<NodeStatus> = report.nodes().iter().map(|n| n.status).collect();
    assert_eq!(
        report.log().statuses(),
        live,
        "the log replays to the live statuses"
    );
    report.nodes().iter().map(|n| (n.name, n.status)).collect()
}

fn status(report: &Report, name: &str) -> NodeStatus {
    report
        .nodes()
        .iter()
        .find(|n| n.name == name)
        .map(|n| n.status)
        .unwrap_or_else(|| panic!("no node `{name}`"))
}

workflow! {
    /// Two replicas race; the slow one is withdrawn; `next` reads which won and both values.
    Replicas(log: &Log, drops: &AtomicUsize) -> (usize, Option<u64>, Option<u64>) {
        Sequential {
            won = Race {
                fast = Operation(counted(log, drops, "fast", 10)),
                slow = Operation(counted(log, drops, "slow", 50)),
            },
            Operation(work(log, "next", 5)),
        }
        => (won, fast.copied(), slow.copied())
    }
}

#[tokio::test(start_paused = true)]
async fn race_first_branch_wins_and_the_loser_is_withdrawn() {
    let log = Log::new();
    let drops = AtomicUsize::new(0);
    let report = Replicas::runner().execute((&log, &drops)).await;
    let report = report.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(
        statuses(&report),
        [
            ("fast", NodeStatus::Completed),
            ("slow", NodeStatus::Withdrawn),
            ("won", NodeStatus::Completed),
            ("work", NodeStatus::Completed),
        ]
    );
    // Both futures dropped once: the winner's when it ended, the loser's when it lost.
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    assert_eq!(log.started(), ["fast", "slow", "next"]);
    assert_eq!(log.ended(), ["fast", "next"]);
    assert_eq!(status(&report, "slow"), NodeStatus::Withdrawn);
    assert_eq!(
        log.at("next", "start"),
        ms(10),
        "the race ends with its first branch"
    );
    assert_eq!(log.elapsed(), ms(15));
    let events: Vec<(Option<&str>, &EventKind)> = report
        .log()
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Won { .. } | EventKind::Withdrawn { .. }))
        .map(|e| (e.node_name, &e.kind))
        .collect();
    assert_eq!(
        events,
        [
            (Some("won"), &EventKind::Won { arms: vec![0] }),
            (Some("slow"), &EventKind::Withdrawn { cause: "won" }),
        ]
    );
    assert!(report.to_string().contains("1 withdrawn"), "{report}");
    let slow = report.node("slow").expect("the loser's line");
    assert_eq!(slow.withdrawn_by, Some("won"));
    assert!(
        report.to_string().contains("withdrawn by `won`"),
        "{report}"
    );
    assert_eq!(report.node("fast").map(|n| n.withdrawn_by), Some(None));
    // The gate's row: it started and ended in the instant it fired, its first arm's end.
    let won = report.node("won").expect("the gate's line");
    assert_eq!(
        (won.attempts, won.started, won.ended),
        (1, Some(ms(10)), Some(ms(10)))
    );
    assert_eq!(Replicas::GRAPH.nodes()[2].kind, NodeKind::Gate);
}

#[tokio::test(start_paused = true)]
async fn the_binding_says_which_branch_won() {
    let log = Log::new();
    let drops = AtomicUsize::new(0);
    let (won, fast, slow) = Replicas::run(&log, &drops)
        .await
        .expect("the race succeeds");
    assert_eq!((won, fast, slow), (0, Some(10), None));
}

/// How many of three reads are there.
async fn present(a: Option<&u64>, b: Option<&u64>, c: Option<&u64>) -> Result<usize, Boom> {
    Ok([a, b, c].iter().filter(|x| x.is_some()).count())
}

workflow! {
    /// A failing replica does not win: the other one does, and the failure is caught.
    FailingReplica(log: &Log) -> usize {
        Sequential {
            won = Race {
                bad = Operation(fail(log, "bad", 5)),
                good = Operation(work(log, "good", 20)),
            },
            Operation(work(log, "next", 5)),
        }
        => won
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_branch_does_not_win() {
    let log = Log::new();
    let outcome = FailingReplica::runner().execute(&log).await;
    let report = outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.expect("the good branch wins"), 1);
    assert_eq!(status(&report, "bad"), NodeStatus::Failed);
    assert_eq!(status(&report, "good"), NodeStatus::Completed);
    assert_eq!(log.at("next", "start"), ms(20));
}

workflow! {
    /// The same race under FailFast: the failure a gate may still catch does not halt the run.
    #[flow(failure = FailFast)]
    FailingReplicaFailFast(log: &Log) -> usize {
        Sequential {
            won = Race {
                bad = Operation(fail(log, "bad", 5)),
                good = Operation(work(log, "good", 20)),
            },
            Operation(work(log, "next", 5)),
        }
        => won
    }
}

#[tokio::test(start_paused = true)]
async fn fail_fast_waits_for_the_gate_to_judge_an_arm_failure() {
    let log = Log::new();
    let won = FailingReplicaFailFast::run(&log)
        .await
        .expect("the good branch wins");
    assert_eq!(won, 1);
    assert_eq!(log.ended(), ["bad", "good", "next"]);
}

workflow! {
    /// Every replica fails.
    AllFail(log: &Log) {
        Sequential {
            Race {
                a = Operation(fail(log, "a", 5)),
                b = Operation(fail(log, "b", 10)),
            },
            Operation(work(log, "next", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_race_fails_only_when_every_branch_failed_and_lists_every_error() {
    let log = Log::new();
    let outcome = AllFail::runner().execute(&log).await;
    let report = outcome.report;
    assert!(!report.succeeded());
    let error = outcome.result.expect_err("every branch failed");
    let failed: Vec<&str> = error.failed().map(|f| f.node).collect();
    assert_eq!(failed, ["a", "b"], "{error}");
    assert_eq!(
        error.error_of("a").and_then(|e| e.downcast_ref::<Boom>()),
        Some(&Boom("a"))
    );
    assert_eq!(
        error.error_of("b").and_then(|e| e.downcast_ref::<Boom>()),
        Some(&Boom("b"))
    );
    // The gate is aborted by the first failure; the step after it never runs.
    assert_eq!(status(&report, "race#1"), NodeStatus::Aborted);
    assert_eq!(status(&report, "work"), NodeStatus::Aborted);
    assert_eq!(log.started(), ["a", "b"]);
}

workflow! {
    /// A quorum read: two of three replicas; reads after the block are optional.
    Quorum(log: &Log, drops: &AtomicUsize) -> (Vec<usize>, usize) {
        Sequential {
            got = Parallel(min = 2) {
                r1 = Operation(counted(log, drops, "r1", 10)),
                r2 = Operation(counted(log, drops, "r2", 20)),
                r3 = Operation(counted(log, drops, "r3", 50)),
            },
            n = Operation(present(r1, r2, r3)),
        }
        => (got.clone(), n)
    }
}

#[tokio::test(start_paused = true)]
async fn a_quorum_of_two_goes_on_and_the_third_is_withdrawn() {
    let log = Log::new();
    let drops = AtomicUsize::new(0);
    let outcome = Quorum::runner().execute((&log, &drops)).await;
    let report = outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.expect("a quorum"), (vec![0, 1], 2));
    assert_eq!(status(&report, "r3"), NodeStatus::Withdrawn);
    assert_eq!(status(&report, "got"), NodeStatus::Completed);
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    assert_eq!(log.ended(), ["r1", "r2"]);
    assert_eq!(log.elapsed(), ms(20));
    assert_eq!(report.count(NodeStatus::Withdrawn), 1);
    // The gate fired when its second arm completed, and its row says so.
    let got = report.node("got").expect("the gate's line");
    assert_eq!((got.started, got.ended), (Some(ms(20)), Some(ms(20))));
}

workflow! {
    /// Two of three, letting the third finish: the join ignores it.
    QuorumRestRun(log: &Log) -> Vec<usize> {
        Sequential {
            got = Parallel(min = 2, rest = run) {
                Operation(work(log, "r1", 10)),
                Operation(work(log, "r2", 20)),
                Operation(work(log, "r3", 50)),
            },
            Operation(work(log, "next", 5)),
        }
        => got.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn rest_run_lets_the_others_finish_and_the_join_ignores_them() {
    let log = Log::new();
    let outcome = QuorumRestRun::runner().execute(&log).await;
    let report = outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.expect("a quorum"), vec![0, 1]);
    assert_eq!(log.at("next", "start"), ms(20), "the join fires at two");
    assert_eq!(log.at("r3", "end"), ms(50), "the third runs on");
    assert_eq!(report.count(NodeStatus::Withdrawn), 0);
    assert_eq!(report.count(NodeStatus::Completed), 5);
}

workflow! {
    /// Two of three, where two fail early: the join fails at once.
    LostQuorum(log: &Log) {
        Sequential {
            Parallel(min = 2) {
                f1 = Operation(fail(log, "f1", 10)),
                f2 = Operation(fail(log, "f2", 20)),
                slow = Operation(work(log, "slow", 100)),
            },
            Operation(work(log, "next", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_quorum_that_cannot_be_reached_fails_at_once() {
    let log = Log::new();
    let outcome = LostQuorum::runner().execute(&log).await;
    let report = outcome.report;
    let error = outcome.result.expect_err("two of three failed");
    let failed: Vec<&str> = error.failed().map(|f| f.node).collect();
    assert_eq!(failed, ["f1", "f2"], "{error}");
    // The slow arm was still running when the join failed: withdrawn, never ended.
    assert_eq!(log.started(), ["f1", "f2", "slow"]);
    assert_eq!(log.ended(), ["f1", "f2"]);
    assert_eq!(log.elapsed(), ms(20));
    assert_eq!(status(&report, "slow"), NodeStatus::Withdrawn);
    assert_eq!(status(&report, "join#1"), NodeStatus::Aborted);
    assert_eq!(status(&report, "work"), NodeStatus::Aborted);
}

workflow! {
    /// Two of three, one at a time.
    LimitedQuorum(log: &Log) -> Vec<usize> {
        got = Parallel(min = 2, max_concurrency = 1) {
            Operation(work(log, "a", 10)),
            Operation(work(log, "b", 10)),
            Operation(work(log, "c", 10)),
        }
        => got.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_combines_with_min() {
    let log = Log::new();
    let outcome = LimitedQuorum::runner().execute(&log).await;
    let report = outcome.report;
    assert_eq!(outcome.result.expect("a quorum"), vec![0, 1]);
    assert_eq!(
        log.started(),
        ["a", "b"],
        "one at a time, and the third never starts"
    );
    assert_eq!(log.at("b", "start"), ms(10));
    assert_eq!(log.elapsed(), ms(20));
    assert_eq!(status(&report, "work#3"), NodeStatus::Withdrawn);
    assert_eq!(report.node("work#3").map(|n| n.attempts), Some(0));
}

workflow! {
    /// A race inside a race's arm: the inner race decides first, then its arm wins the outer.
    InnerFirst(log: &Log) -> usize {
        outer = Race {
            Sequential {
                Operation(work(log, "a", 10)),
                Race {
                    Operation(work(log, "b", 5)),
                    Operation(work(log, "c", 30)),
                },
            },
            Operation(work(log, "d", 50)),
        }
        => outer
    }
}

#[tokio::test(start_paused = true)]
async fn an_inner_race_decides_then_its_arm_wins_the_outer_race() {
    let log = Log::new();
    let outcome = InnerFirst::runner().execute(&log).await;
    let report = outcome.report;
    assert_eq!(outcome.result.expect("arm 0 wins"), 0);
    assert_eq!(
        statuses(&report),
        [
            ("work#1", NodeStatus::Completed),
            ("work#2", NodeStatus::Completed),
            ("work#3", NodeStatus::Withdrawn),
            ("race#1", NodeStatus::Completed),
            ("work#4", NodeStatus::Withdrawn),
            ("outer", NodeStatus::Completed),
        ]
    );
    assert_eq!(log.ended(), ["a", "b"]);
    assert_eq!(log.elapsed(), ms(15));
}

workflow! {
    /// The outer race decides while the inner one is still running: the whole arm is withdrawn,
    /// the inner gate with it.
    OuterFirst(log: &Log) -> usize {
        outer = Race {
            Sequential {
                Operation(work(log, "a", 10)),
                Race {
                    Operation(work(log, "b", 50)),
                    Operation(work(log, "c", 60)),
                },
            },
            Operation(work(log, "d", 20)),
        }
        => outer
    }
}

#[tokio::test(start_paused = true)]
async fn an_outer_race_withdraws_an_inner_race_that_is_still_running() {
    let log = Log::new();
    let outcome = OuterFirst::runner().execute(&log).await;
    let report = outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.expect("arm 1 wins"), 1);
    assert_eq!(
        statuses(&report),
        [
            ("work#1", NodeStatus::Completed),
            ("work#2", NodeStatus::Withdrawn),
            ("work#3", NodeStatus::Withdrawn),
            ("race#1", NodeStatus::Withdrawn),
            ("work#4", NodeStatus::Completed),
            ("outer", NodeStatus::Completed),
        ]
    );
    assert_eq!(log.started(), ["a", "d", "b", "c"]);
    assert_eq!(log.ended(), ["a", "d"]);
    assert_eq!(log.elapsed(), ms(20));
}

workflow! {
    /// An arm that ends in a Conditional completes when its branch is skipped; a test after
    /// the race sees a withdrawn node as `None`.
    BranchyArm(log: &Log) -> usize {
        Sequential {
            won = Race {
                Sequential {
                    a = Operation(work(log, "a", 5)),
                    Conditional(a.is_err()) {
                        recover = Operation(work(log, "recover", 1)),
                    },
                },
                slow = Operation(work(log, "slow", 20)),
            },
            Conditional(slow.is_none()) {
                Operation(work(log, "slow_was_withdrawn", 1)),
            },
        }
        => won
    }
}

#[tokio::test(start_paused = true)]
async fn an_arm_with_a_skipped_branch_completes_and_a_test_sees_a_withdrawn_node_as_none() {
    let log = Log::new();
    let outcome = BranchyArm::runner().execute(&log).await;
    let report = outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.expect("arm 0 wins"), 0);
    assert_eq!(status(&report, "recover"), NodeStatus::Skipped);
    assert_eq!(status(&report, "slow"), NodeStatus::Withdrawn);
    assert_eq!(log.ended(), ["a", "slow_was_withdrawn"]);
}

workflow! {
    /// Under FailFast, a join that can no longer reach `min` stops the run at once, even with
    /// `rest = run`.
    #[flow(failure = FailFast)]
    LostQuorumFailFast(log: &Log) {
        Sequential {
            Parallel(min = 2, rest = run) {
                f1 = Operation(fail(log, "f1", 10)),
                f2 = Operation(fail(log, "f2", 20)),
                slow = Operation(work(log, "slow", 100)),
            },
            Operation(work(log, "next", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn fail_fast_stops_the_run_when_a_join_fails() {
    let log = Log::new();
    let outcome = LostQuorumFailFast::runner().execute(&log).await;
    let report = outcome.report;
    let error = outcome.result.expect_err("two of three failed");
    let failed: Vec<&str> = error.failed().map(|f| f.node).collect();
    assert_eq!(failed, ["f1", "f2"], "{error}");
    assert_eq!(log.ended(), ["f1", "f2"]);
    assert_eq!(log.elapsed(), ms(20));
    assert_eq!(status(&report, "slow"), NodeStatus::Aborted);
    assert_eq!(status(&report, "join#1"), NodeStatus::Aborted);
}

workflow! {
    /// A race in a branch that is not taken is skipped whole: no winner, nothing withdrawn.
    SkippedRace(log: &Log, go: bool) {
        Conditional(go) {
            Race {
                Operation(work(log, "a", 5)),
                Operation(work(log, "b", 10)),
            },
            Operation(work(log, "after", 1)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_race_in_an_untaken_branch_is_skipped_without_a_winner() {
    let log = Log::new();
    let outcome = SkippedRace::runner().execute((&log, false)).await;
    let report = outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(status(&report, "race#1"), NodeStatus::Skipped);
    assert_eq!(report.count(NodeStatus::Skipped), 4);
    assert!(
        !report
            .log()
            .events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::Won { .. } | EventKind::Withdrawn { .. })),
        "{:?}",
        report.log().events()
    );
    assert!(log.started().is_empty());
}

workflow! {
    /// With `rest = run`, an arm that fails after its gate fired is forgiven.
    LateFailure(log: &Log) {
        Parallel(min = 1, rest = run) {
            Operation(work(log, "fast", 5)),
            late = Operation(fail(log, "late", 20)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_arm_that_fails_after_its_gate_fired_is_forgiven() {
    let log = Log::new();
    let outcome = LateFailure::runner().execute(&log).await;
    let report = outcome.report;
    assert!(outcome.result.is_ok(), "{report}");
    assert_eq!(status(&report, "late"), NodeStatus::Failed);
    assert_eq!(log.at("late", "end"), ms(20));
}

#[tokio::test(start_paused = true)]
async fn pictures_draw_a_race_as_a_gate_and_a_loser_as_withdrawn() {
    let log = Log::new();
    let drops = AtomicUsize::new(0);
    let outcome = Replicas::runner().execute((&log, &drops)).await;
    let report = outcome.report;

    // The gate says what it waits for; the arms are dashed like branches.
    let dot = Replicas::GRAPH.to_dot();
    assert!(dot.contains("first of 2"), "{dot}");
    assert!(dot.contains("shape=invtrapezium"), "{dot}");
    let mermaid = Replicas::GRAPH.to_mermaid();
    assert!(mermaid.contains("won: first of 2"), "{mermaid}");
    assert!(mermaid.contains("classDef branch"), "{mermaid}");

    // After the run, the loser is drawn withdrawn.
    let dot = report.to_dot();
    assert!(dot.contains("[withdrawn]"), "{dot}");
    let mermaid = report.to_mermaid();
    assert!(mermaid.contains("classDef withdrawn"), "{mermaid}");

    // The gantt chart draws the loser up to its withdrawal; the trace matrix ends it there.
    let gantt = report.to_mermaid_gantt();
    assert!(gantt.contains("slow (withdrawn) : done, 0, 10"), "{gantt}");
    let matrix = report.trace_matrix();
    let slow = 1 + report
        .nodes()
        .iter()
        .position(|n| n.name == "slow")
        .expect("slow");
    assert_eq!(matrix.row_sum(slow), 0, "a start and an end");
    assert!(matrix.span(slow).is_some());
}

/// Answers at once, without suspending.
async fn at_once(value: u64) -> Result<u64, Boom> {
    Ok(value)
}

workflow! {
    /// Two arms that are both ready at once and never suspend.
    Tie() -> (usize, Option<u64>, Option<u64>) {
        won = Race {
            first = Operation(at_once(1)),
            second = Operation(at_once(2)),
        }
        => (won, first.copied(), second.copied())
    }
}

#[tokio::test(start_paused = true)]
async fn arms_ready_together_are_decided_in_the_order_written() {
    let outcome = Tie::runner().execute(()).await;
    let (won, first, second) = outcome.result.expect("the race succeeds");
    assert_eq!((won, first, second), (0, Some(1), None));
    // The second arm was started in the same wake-up and withdrawn before it was polled.
    assert_eq!(outcome.report.status("second"), Some(NodeStatus::Withdrawn));
    assert_eq!(
        outcome.report.node("second").and_then(|n| n.withdrawn_by),
        Some("won")
    );
}
