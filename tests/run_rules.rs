//! Trigger rules (`when = all_done | one_failed`) and critical sections (`exclusive = ".."`),
//! checked on tokio's paused clock.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use flowdag::prelude::*;
use tokio::time::sleep;

use common::{Boom, Log, fail, ms, work};

/// Every node's `(name, status)`, in node order; the run's event log replays to the same.
fn statuses(report: &Report) -> Vec<(&'static str, NodeStatus)> {
    let live: Vec<NodeStatus> = report.nodes().iter().map(|n| n.status).collect();
    assert_eq!(
        report.log().statuses(),
        live,
        "the log replays to the live statuses"
    );
    report.nodes().iter().map(|n| (n.name, n.status)).collect()
}

/// `work` or `fail`, as `failing` says.
async fn maybe_fail(log: &Log, name: &'static str, failing: bool) -> Result<u64, Boom> {
    match failing {
        true => fail(log, name, 10).await,
        false => work(log, name, 10).await,
    }
}

/// A cleanup step: logs itself and what it saw of its input.
async fn cleanup(
    log: &Log,
    seen: &Mutex<Vec<Option<u64>>>,
    input: Option<u64>,
) -> Result<(), Boom> {
    seen.lock().unwrap_or_else(|p| p.into_inner()).push(input);
    work(log, "cleanup", 5).await.map(drop)
}

// ---------------------------------------------------------------------------------------------
// `all_done`: runs whatever its inputs' fate; the failure goes on past it.

workflow! {
    /// `cleanup` runs after `work` whatever happened to it, reading `work` as an `Option`;
    /// `next` follows `cleanup` in the ordinary way.
    Cleanup(log: &Log, seen: &Mutex<Vec<Option<u64>>>, failing: bool) {
        Sequential {
            w = Operation(maybe_fail(log, "work", failing)),
            Operation(cleanup(log, seen, w.copied()), when = all_done),
            Operation(work(log, "next", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn all_done_runs_after_a_failure_and_the_run_still_fails_with_it() {
    let log = Log::new();
    let seen = Mutex::new(Vec::new());
    let outcome = Cleanup::runner()
        .record(true)
        .execute((&log, &seen, true))
        .await;
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("w", NodeStatus::Failed),
            ("cleanup", NodeStatus::Completed),
            ("work", NodeStatus::Aborted),
        ]
    );
    // The cleanup ran after the failure and saw no value; the step after it never ran.
    assert_eq!(log.started(), vec!["work", "cleanup"]);
    assert_eq!(*seen.lock().expect("not poisoned"), vec![None]);
    let err = outcome
        .result
        .expect_err("the cleanup does not rescue the run");
    let failed: Vec<_> = err.failed().map(|f| f.node).collect();
    assert_eq!(failed, vec!["w"]);
    assert_eq!(
        err.error_of("w").map(ToString::to_string).as_deref(),
        Some("boom: work")
    );
    let aborted: Vec<_> = err
        .aborted()
        .map(|f| match f.error {
            NodeError::Aborted { cause } => (f.node, cause),
            ref other => panic!("`{}` should be aborted, is {other:?}", f.node),
        })
        .collect();
    assert_eq!(aborted, vec![("work", "w")]);
}

#[tokio::test(start_paused = true)]
async fn all_done_runs_when_everything_succeeded() {
    let log = Log::new();
    let seen = Mutex::new(Vec::new());
    let outcome = Cleanup::runner()
        .record(true)
        .execute((&log, &seen, false))
        .await;
    outcome.result.expect("nothing failed");
    assert!(
        statuses(&outcome.report)
            .iter()
            .all(|(_, s)| *s == NodeStatus::Completed)
    );
    assert_eq!(log.started(), vec!["work", "cleanup", "next"]);
    assert_eq!(*seen.lock().expect("not poisoned"), vec![Some(10)]);
}

// ---------------------------------------------------------------------------------------------
// `one_failed`: runs only when a failure reached it.

workflow! {
    /// `page` runs when `a` or `b` failed. Three sources before two targets make the plan
    /// route the edges through a join.
    OnFailure(log: &Log, failing: bool) {
        Sequential {
            Parallel {
                a = Operation(work(log, "a", 10)),
                b = Operation(maybe_fail(log, "b", failing)),
                c = Operation(work(log, "c", 10)),
            },
            Parallel {
                page = Operation(work(log, "page", 1), when = one_failed),
                d = Operation(work(log, "d", 1)),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn one_failed_is_skipped_when_all_succeeded() {
    let log = Log::new();
    let outcome = OnFailure::runner()
        .record(true)
        .execute((&log, false))
        .await;
    outcome.result.expect("nothing failed");
    let statuses = statuses(&outcome.report);
    assert!(statuses.contains(&("page", NodeStatus::Skipped)));
    assert!(!log.started().contains(&"page".to_string()));
}

#[tokio::test(start_paused = true)]
async fn one_failed_runs_when_one_input_failed() {
    let log = Log::new();
    let outcome = OnFailure::runner().record(true).execute((&log, true)).await;
    let statuses = statuses(&outcome.report);
    assert!(statuses.contains(&("b", NodeStatus::Failed)));
    assert!(statuses.contains(&("page", NodeStatus::Completed)));
    assert!(statuses.contains(&("d", NodeStatus::Aborted)));
    assert_eq!(log.at("page", "start"), ms(10));
    let err = outcome.result.expect_err("paging does not rescue the run");
    let failed: Vec<_> = err.failed().map(|f| f.node).collect();
    assert_eq!(failed, vec!["b"]);
}

// ---------------------------------------------------------------------------------------------
// FailFast does not stop the run before a cleanup downstream of the failure.

workflow! {
    /// `w` fails at 10ms; `slow` would run to 1s.
    #[flow(failure = FailFast)]
    FastCleanup(log: &Log, seen: &Mutex<Vec<Option<u64>>>) {
        Parallel {
            Sequential {
                w = Operation(fail(log, "work", 10)),
                Operation(cleanup(log, seen, w.copied()), when = all_done),
            },
            slow = Operation(work(log, "slow", 1_000)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn fail_fast_lets_an_all_done_cleanup_run() {
    let log = Log::new();
    let seen = Mutex::new(Vec::new());
    let outcome = FastCleanup::runner()
        .record(true)
        .execute((&log, &seen))
        .await;
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("w", NodeStatus::Failed),
            ("cleanup", NodeStatus::Completed),
            ("slow", NodeStatus::Aborted),
        ]
    );
    // The cleanup ran at once after the failure; the run then stopped, without waiting for
    // `slow`.
    assert_eq!(log.at("cleanup", "start"), ms(10));
    assert_eq!(log.elapsed(), ms(15));
    assert_eq!(*seen.lock().expect("not poisoned"), vec![None]);
    let err = outcome.result.expect_err("the failure fails the run");
    let failed: Vec<_> = err.failed().map(|f| f.node).collect();
    assert_eq!(failed, vec!["w"]);
}

// ---------------------------------------------------------------------------------------------
// Critical sections.

/// Counts the operations of one exclusion group in flight.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// Logs start and end around 10ms of work that yields between its steps, counted in `gauge`.
async fn guarded(log: &Log, gauge: &Gauge, name: &'static str) -> Result<u64, Boom> {
    let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
    gauge.peak.fetch_max(now, Ordering::SeqCst);
    log.record(name, "start");
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    sleep(ms(10)).await;
    log.record(name, "end");
    gauge.now.fetch_sub(1, Ordering::SeqCst);
    Ok(10)
}

workflow! {
    /// Two `ledger` sections in separate branches, an `audit` step and a free step.
    Ledger(log: &Log, ledger: &Gauge, other: &Gauge) {
        Parallel {
            Sequential(exclusive = "ledger") {
                a1 = Operation(guarded(log, ledger, "a1")),
                a2 = Operation(guarded(log, ledger, "a2")),
            },
            Parallel(exclusive = "ledger") {
                b1 = Operation(guarded(log, ledger, "b1")),
                b2 = Operation(guarded(log, ledger, "b2")),
            },
            audit = Operation(guarded(log, other, "audit"), exclusive = "audit"),
            free = Operation(guarded(log, other, "free")),
        }
    }
}

workflow! {
    /// `Ledger` without its sections.
    Unguarded(log: &Log, ledger: &Gauge, other: &Gauge) {
        Parallel {
            Sequential {
                a1 = Operation(guarded(log, ledger, "a1")),
                a2 = Operation(guarded(log, ledger, "a2")),
            },
            Parallel {
                b1 = Operation(guarded(log, ledger, "b1")),
                b2 = Operation(guarded(log, ledger, "b2")),
            },
            audit = Operation(guarded(log, other, "audit")),
            free = Operation(guarded(log, other, "free")),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn sections_of_one_group_never_overlap() {
    // Control: without sections the ledger steps overlap.
    let (log, ledger, other) = (Log::new(), Gauge::default(), Gauge::default());
    Unguarded::run(&log, &ledger, &other).await.expect("runs");
    assert_eq!(ledger.peak.load(Ordering::SeqCst), 3);

    let (log, ledger, other) = (Log::new(), Gauge::default(), Gauge::default());
    Ledger::run(&log, &ledger, &other).await.expect("runs");
    // The second section started only when every node of the first had ended: the first
    // section (granted in ready order) is held from `a1`'s start to `a2`'s end.
    assert_eq!(
        ledger.peak.load(Ordering::SeqCst),
        2,
        "b1 and b2 share one section"
    );
    let ledger_events: Vec<(String, &str)> = log
        .events()
        .into_iter()
        .filter(|(name, _, _)| name.starts_with('a') || name.starts_with('b'))
        .filter(|(name, _, _)| name != "audit")
        .map(|(name, what, _)| (name, what))
        .collect();
    let first_b = ledger_events.iter().position(|(n, _)| n.starts_with('b'));
    let last_a = ledger_events.iter().rposition(|(n, _)| n.starts_with('a'));
    assert!(
        first_b > last_a,
        "the sections interleaved: {ledger_events:?}"
    );
    assert_eq!(log.at("a2", "end"), ms(20));
    assert_eq!(log.at("b1", "start"), ms(20));
    assert_eq!(log.at("b2", "start"), ms(20));
    // Steps of another group or of none overlap with the sections.
    assert_eq!(log.at("audit", "start"), ms(0));
    assert_eq!(log.at("free", "start"), ms(0));
    assert_eq!(other.peak.load(Ordering::SeqCst), 2);
}

workflow! {
    /// `x` fails inside the first section; the second still gets the group.
    SectionFailure(log: &Log) {
        Parallel {
            Sequential(exclusive = "ledger") {
                x = Operation(fail(log, "x", 10)),
                y = Operation(work(log, "y", 10)),
            },
            z = Operation(work(log, "z", 10), exclusive = "ledger"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_failure_inside_a_section_releases_it() {
    let log = Log::new();
    let outcome = SectionFailure::runner().record(true).execute(&log).await;
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("x", NodeStatus::Failed),
            ("y", NodeStatus::Aborted),
            ("z", NodeStatus::Completed),
        ]
    );
    assert_eq!(log.started(), vec!["x", "z"]);
    assert_eq!(log.at("z", "start"), ms(10));
    let err = outcome.result.expect_err("x failed");
    let failed: Vec<_> = err.failed().map(|f| f.node).collect();
    assert_eq!(failed, vec!["x"]);
}

workflow! {
    /// The first section ends with a decision that skips the rest of it.
    SkippedMembers(log: &Log, flag: bool) {
        Parallel {
            Sequential(exclusive = "ledger") {
                a = Operation(work(log, "a", 10)),
                Conditional(flag) {
                    b = Operation(work(log, "b", 10)),
                },
            },
            c = Operation(work(log, "c", 10), exclusive = "ledger"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn skipped_members_end_their_section() {
    let log = Log::new();
    let outcome = SkippedMembers::runner()
        .record(true)
        .execute((&log, false))
        .await;
    outcome.result.expect("nothing fails");
    assert!(statuses(&outcome.report).contains(&("b", NodeStatus::Skipped)));
    assert_eq!(log.started(), vec!["a", "c"]);
    assert_eq!(log.at("c", "start"), ms(10));

    // Taken, the branch keeps the section until `b` has ended.
    let log = Log::new();
    SkippedMembers::run(&log, true)
        .await
        .expect("nothing fails");
    assert_eq!(log.started(), vec!["a", "b", "c"]);
    assert_eq!(log.at("c", "start"), ms(20));
}

// ---------------------------------------------------------------------------------------------
// With gates: a withdrawn node counts as ended, for trigger rules and for sections alike.

workflow! {
    /// `slow` loses the race and is withdrawn; `cleanup` runs after the race whatever happened
    /// to its arms, `page` only if something failed.
    RaceCleanup(log: &Log, seen: &Mutex<Vec<Option<u64>>>) {
        Sequential {
            Race {
                fast = Operation(work(log, "fast", 10)),
                slow = Operation(work(log, "slow", 50)),
            },
            Parallel {
                Operation(cleanup(log, seen, slow.copied()), when = all_done),
                page = Operation(work(log, "page", 1), when = one_failed),
            },
            Operation(work(log, "next", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn all_done_after_a_race_runs_when_the_loser_is_withdrawn() {
    let log = Log::new();
    let seen = Mutex::new(Vec::new());
    let outcome = RaceCleanup::runner()
        .record(true)
        .execute((&log, &seen))
        .await;
    outcome
        .result
        .expect("a withdrawn loser fails nothing, and the cleanup rescues nothing");
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("fast", NodeStatus::Completed),
            ("slow", NodeStatus::Withdrawn),
            ("race#1", NodeStatus::Completed),
            ("cleanup", NodeStatus::Completed),
            // A withdrawal is not a failure.
            ("page", NodeStatus::Skipped),
            ("work", NodeStatus::Completed),
        ]
    );
    // The cleanup ran once the race was decided and saw the withdrawn loser as `None`.
    assert_eq!(log.started(), vec!["fast", "slow", "cleanup", "next"]);
    assert_eq!(log.at("cleanup", "start"), ms(10));
    assert_eq!(*seen.lock().expect("not poisoned"), vec![None]);
}

workflow! {
    /// The slow arm of the race is a `ledger` section that holds the group when the race is
    /// decided; `later` is another `ledger` section, waiting for it.
    SectionInRace(log: &Log) {
        Parallel {
            Parallel(min = 1, rest = cancel) {
                fast = Operation(work(log, "fast", 10)),
                Sequential(exclusive = "ledger") {
                    s1 = Operation(work(log, "s1", 50)),
                    s2 = Operation(work(log, "s2", 10)),
                },
            },
            later = Operation(work(log, "later", 10), exclusive = "ledger"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_section_withdrawn_by_a_race_releases_its_group() {
    let log = Log::new();
    // A group never released would leave the run pending forever: fail instead of hanging.
    let outcome =
        tokio::time::timeout(ms(1000), SectionInRace::runner().record(true).execute(&log))
            .await
            .expect("the group is released");
    outcome.result.expect("nothing fails");
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("fast", NodeStatus::Completed),
            ("s1", NodeStatus::Withdrawn),
            ("s2", NodeStatus::Withdrawn),
            ("join#1", NodeStatus::Completed),
            ("later", NodeStatus::Completed),
        ]
    );
    // `s1` held the group from the start; its withdrawal (with `s2`, which never started)
    // ended the section, and `later` got the group at once.
    assert_eq!(log.started(), vec!["fast", "s1", "later"]);
    assert_eq!(log.at("later", "start"), ms(10));
    assert_eq!(log.elapsed(), ms(20));
}

workflow! {
    /// The whole race is a `ledger` section: `later` waits for the winner and the withdrawal
    /// of the loser.
    RaceSection(log: &Log) {
        Parallel {
            Race(exclusive = "ledger") {
                fast = Operation(work(log, "fast", 10)),
                slow = Operation(work(log, "slow", 50)),
            },
            later = Operation(work(log, "later", 10), exclusive = "ledger"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_race_block_can_be_a_section() {
    let log = Log::new();
    // A group never released would leave the run pending forever: fail instead of hanging.
    let outcome = tokio::time::timeout(ms(1000), RaceSection::runner().record(true).execute(&log))
        .await
        .expect("the group is released");
    outcome.result.expect("nothing fails");
    assert_eq!(
        statuses(&outcome.report),
        vec![
            ("fast", NodeStatus::Completed),
            ("slow", NodeStatus::Withdrawn),
            ("race#1", NodeStatus::Completed),
            ("later", NodeStatus::Completed),
        ]
    );
    assert_eq!(log.started(), vec!["fast", "slow", "later"]);
    assert_eq!(log.at("later", "start"), ms(10));
}

workflow! {
    /// Sections of one group in a `ForEach`'s instances and beside the `ForEach`.
    NestedLedger(log: &Log, ledger: &Gauge) {
        Parallel {
            each = ForEach(i in 0..3usize) {
                Operation(guarded(log, ledger, "item"), exclusive = "ledger")
            },
            top = Operation(guarded(log, ledger, "top"), exclusive = "ledger"),
            free = Operation(guarded(log, ledger, "free")),
        }
    }
}

workflow! {
    /// A `Loop` whose body holds the group once per iteration, beside a `ForEach` of two
    /// instances that each hold it across two steps.
    NestedSequences(log: &Log, ledger: &Gauge) {
        Parallel {
            rounds = Loop(max = 3, on_max = stop) {
                r = Operation(guarded(log, ledger, "round"), exclusive = "ledger")
                => r
            } until (r > 100),
            each = ForEach(i in 0..2usize) {
                Sequential(exclusive = "ledger") {
                    first = Operation(guarded(log, ledger, "first")),
                    second = Operation(guarded(log, ledger, "second")),
                }
            },
        }
    }
}

workflow! {
    /// A `ForEach` inside a section of the group its instances' sections take, beside
    /// another section of the group.
    AroundLedger(log: &Log, ledger: &Gauge) {
        Parallel {
            Sequential(exclusive = "ledger") {
                each = ForEach(i in 0..2usize) {
                    Operation(guarded(log, ledger, "item"), exclusive = "ledger")
                },
                after = Operation(guarded(log, ledger, "after")),
            },
            top = Operation(guarded(log, ledger, "top"), exclusive = "ledger"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_nest_inside_a_section_runs_its_instances_sections_one_at_a_time_inside_it() {
    let (log, ledger) = (Log::new(), Gauge::default());
    AroundLedger::run(&log, &ledger)
        .await
        .expect("runs, without waiting for itself");
    assert_eq!(ledger.peak.load(Ordering::SeqCst), 1, "{:?}", log.events());
    // The outer section first (two items and `after`, 10 ms each), then `top`.
    assert_eq!(log.at("after", "end"), ms(30));
    assert_eq!(log.at("top", "start"), ms(30));
    assert_eq!(log.elapsed(), ms(40));
}

#[tokio::test(start_paused = true)]
async fn sections_exclude_each_other_across_nest_instances_and_the_run_holding_them() {
    let (log, ledger) = (Log::new(), Gauge::default());
    NestedLedger::run(&log, &ledger).await.expect("runs");
    // `free` overlaps with one section: never more than two ledger steps at once, and the
    // four sections (three items and `top`) ran one after another.
    assert_eq!(ledger.peak.load(Ordering::SeqCst), 2);
    let starts: Vec<_> = log
        .events()
        .into_iter()
        .filter(|(name, what, _)| name != "free" && *what == "start")
        .map(|(_, _, at)| at)
        .collect();
    let from_first: Vec<_> = starts.iter().map(|&at| at - starts[0]).collect();
    assert_eq!(from_first, [ms(0), ms(10), ms(20), ms(30)], "{starts:?}");

    let (log, ledger) = (Log::new(), Gauge::default());
    NestedSequences::run(&log, &ledger).await.expect("runs");
    assert_eq!(ledger.peak.load(Ordering::SeqCst), 1, "{:?}", log.events());
    // Three rounds of 10 ms and two sections of 20 ms, one at a time.
    assert_eq!(log.elapsed(), ms(70));
}
