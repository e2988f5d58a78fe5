//! The Workflow Control-flow Patterns (Russell, ter Hofstede, van der Aalst, Mulyar, "Workflow
//! Control-Flow Patterns: A Revised View", 2006) that flow expresses, one test each, named
//! `wcp_NN_<pattern>`. Each test is written from the paper's definition of its pattern and
//! asserts the property that defines it; `docs/patterns.md` maps all 43 patterns to these tests.
//! Time is tokio's paused clock, so every instant asserted is exact.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::prelude::*;
use flowdag::{EdgeKind, Graph};
use tokio::time::sleep;

use common::{Boom, Log, ms, work, work_on};

/// Every node's status in the report, checked against the replay of its event log.
fn status(report: &Report, name: &str) -> NodeStatus {
    assert_eq!(
        report.log().statuses(),
        report.nodes().iter().map(|n| n.status).collect::<Vec<_>>(),
        "the log replays to the live statuses"
    );
    report
        .status(name)
        .unwrap_or_else(|| panic!("no node `{name}` in the report:\n{report}"))
}

/// How many `start` entries `name` has in the log.
fn starts(log: &Log, name: &str) -> usize {
    log.started().iter().filter(|n| *n == name).count()
}

/// The names of the graph's nodes that no edge leaves.
fn sinks(graph: &Graph) -> Vec<&'static str> {
    graph
        .nodes()
        .iter()
        .enumerate()
        .filter(|&(i, _)| graph.edges().iter().all(|e| e.from as usize != i))
        .map(|(_, n)| n.name)
        .collect()
}

/// Like [`work`], failing (after logging its end) when `fails` is set.
async fn maybe_fail(log: &Log, name: &'static str, millis: u64, fails: bool) -> Result<u64, Boom> {
    let value = work(log, name, millis).await?;
    if fails { Err(Boom(name)) } else { Ok(value) }
}

/// Logs `name` for `millis` and returns the value it read, which is `None` when the node that
/// produced it was skipped.
async fn merge(
    log: &Log,
    name: &'static str,
    input: Option<&u64>,
    millis: u64,
) -> Result<u64, Boom> {
    let value = work(log, name, millis).await?;
    Ok(input.copied().unwrap_or(0) + value)
}

/// Records `(name, "dropped")` in the log when the future that holds it is dropped before it
/// ended: the instant an operation was cut short.
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

/// Like [`work`]; if its future is dropped before it ends, the log gets a `dropped` entry.
async fn cut(log: &Log, name: &'static str, millis: u64) -> Result<u64, Boom> {
    let mut guard = Cut {
        log,
        name,
        ended: false,
    };
    let value = work(log, name, millis).await;
    guard.ended = true;
    value
}

/// Whether `name`'s future was dropped before it ended.
fn dropped(log: &Log, name: &str) -> bool {
    log.events()
        .iter()
        .any(|(n, what, _)| n == name && *what == "dropped")
}

/// The node whose decision withdrew `name`, from the report and, checked against it, from the
/// `Withdrawn` event of the log.
fn withdrawn_by(report: &Report, name: &str) -> Option<&'static str> {
    let by = report.node(name).and_then(|n| n.withdrawn_by);
    let events: Vec<&'static str> = report
        .log()
        .events()
        .iter()
        .filter(|e| e.node_name == Some(name))
        .filter_map(|e| match e.kind {
            EventKind::Withdrawn { cause } => Some(cause),
            _ => None,
        })
        .collect();
    assert_eq!(events, by.into_iter().collect::<Vec<_>>(), "`{name}`");
    by
}

/// How many times the gate `name` fired.
fn fired(report: &Report, name: &str) -> usize {
    report
        .log()
        .events()
        .iter()
        .filter(|e| e.node_name == Some(name) && matches!(e.kind, EventKind::Won { .. }))
        .count()
}

/// When each `SignalReceived` event of the run happened, with its node.
fn received(report: &Report) -> Vec<(&'static str, Duration)> {
    report
        .log()
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::SignalReceived { .. }))
        .map(|e| (e.node_name.unwrap_or("?"), e.at))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// WCP 1 Sequence: a task is enabled after the completion of a preceding task.

workflow! {
    /// a, then b, then c (which reads b).
    Sequence(log: &Log) -> u64 {
        Sequential {
            a = Operation(work(log, "a", 10)),
            b = Operation(work(log, "b", 20)),
            c = Operation(work_on(log, "c", &b, 5)),
        }
        => c
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_01_sequence() {
    let log = Log::new();
    assert_eq!(Sequence::run(&log).await.ok(), Some(25));
    // Each task starts when, and only when, the one before it has completed.
    let entries: Vec<(String, &str)> = log.events().into_iter().map(|(n, w, _)| (n, w)).collect();
    let expected = ["a", "b", "c"]
        .into_iter()
        .flat_map(|n| [(n.to_string(), "start"), (n.to_string(), "end")])
        .collect::<Vec<_>>();
    assert_eq!(entries, expected);
    assert_eq!(log.at("b", "start"), log.at("a", "end"));
    assert_eq!(log.at("c", "start"), log.at("b", "end"));
    assert_eq!(log.elapsed(), ms(35));
}

// ---------------------------------------------------------------------------------------------
// WCP 2 Parallel Split: a branch diverges into several branches that run concurrently.

workflow! {
    /// a, then b, c and d at once.
    ParallelSplit(log: &Log) {
        Sequential {
            a = Operation(work(log, "a", 10)),
            Parallel {
                b = Operation(work_on(log, "b", &a, 30)),
                c = Operation(work_on(log, "c", &a, 20)),
                d = Operation(work(log, "d", 10)),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_02_parallel_split() {
    let log = Log::new();
    ParallelSplit::run(&log).await.expect("the split succeeds");
    // Every branch is enabled at the split (when a completes), and they run at the same time:
    // each starts before any of them ends.
    for name in ["b", "c", "d"] {
        assert_eq!(log.at(name, "start"), ms(10), "{name}");
    }
    let last_start = ["b", "c", "d"]
        .map(|n| log.index(n, "start"))
        .into_iter()
        .max();
    let first_end = ["b", "c", "d"]
        .map(|n| log.index(n, "end"))
        .into_iter()
        .min();
    assert!(last_start < first_end, "{:?}", log.events());
    // So the split takes as long as its longest branch, not the sum of them.
    assert_eq!(log.elapsed(), ms(40));
}

// ---------------------------------------------------------------------------------------------
// WCP 3 Synchronization: several branches converge into one, which is enabled when every
// incoming branch has completed.

workflow! {
    /// Three branches of different lengths, then `join`.
    Synchronization(log: &Log) -> u64 {
        Sequential {
            Parallel {
                b = Operation(work(log, "b", 30)),
                c = Operation(work(log, "c", 10)),
                d = Operation(work(log, "d", 20)),
            },
            join = Operation(work(log, "join", 5)),
        }
        => join
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_03_synchronization() {
    let log = Log::new();
    assert_eq!(Synchronization::run(&log).await.ok(), Some(5));
    // The join starts after every branch ended (by log position and by time), once, and at
    // the end of the last one: it waits for all of them and not a tick longer.
    let join = log.index("join", "start");
    for name in ["b", "c", "d"] {
        assert!(log.index(name, "end") < join, "{name}: {:?}", log.events());
        assert!(log.at(name, "end") <= log.at("join", "start"), "{name}");
    }
    assert_eq!(starts(&log, "join"), 1);
    assert_eq!(log.at("join", "start"), ms(30));
}

// ---------------------------------------------------------------------------------------------
// WCP 4 Exclusive Choice: a branch diverges into several; control passes to exactly one of
// them, chosen by a condition.

workflow! {
    /// One of three branches, chosen by `route` once `a` completed.
    ExclusiveChoice(log: &Log, route: u8) {
        Sequential {
            a = Operation(work(log, "a", 10)),
            Conditional(route == 0) {
                post = Operation(work(log, "post", 20)),
            } else {
                Conditional(route == 1) {
                    courier = Operation(work(log, "courier", 20)),
                } else {
                    pickup = Operation(work(log, "pickup", 20)),
                },
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_04_exclusive_choice() {
    let branches = ["post", "courier", "pickup"];
    for route in 0..3u8 {
        let log = Log::new();
        let outcome = ExclusiveChoice::runner().execute((&log, route)).await;
        outcome.result.expect("the choice succeeds");
        let chosen = branches[usize::from(route)];
        // Exactly one branch runs, the one whose condition holds, as soon as a completed.
        assert_eq!(log.started(), vec!["a", chosen], "route {route}");
        assert_eq!(log.at(chosen, "start"), ms(10));
        for name in branches {
            let expected = if name == chosen {
                NodeStatus::Completed
            } else {
                NodeStatus::Skipped
            };
            assert_eq!(status(&outcome.report, name), expected, "route {route}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// WCP 5 Simple Merge: several branches converge into one; each enablement of an incoming
// branch passes control on (in a structured context, only one of them is ever enabled).

workflow! {
    /// Card or invoice, then `confirm`, which reads whichever of the two ran.
    SimpleMerge(log: &Log, by_card: bool) -> u64 {
        Sequential {
            Conditional(by_card) {
                card = Operation(work(log, "card", 30)),
            } else {
                invoice = Operation(work(log, "invoice", 10)),
            },
            confirm = Operation(merge(log, "confirm", card.or(invoice), 5)),
        }
        => confirm
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_05_simple_merge() {
    for (by_card, branch, took) in [(true, "card", 30), (false, "invoice", 10)] {
        let log = Log::new();
        // `confirm` reads the output of the branch that ran: 30 or 10, plus its own 5.
        assert_eq!(SimpleMerge::run(&log, by_card).await.ok(), Some(took + 5));
        // The merge runs once, as soon as the one enabled branch completed.
        assert_eq!(log.started(), vec![branch, "confirm"]);
        assert_eq!(log.at("confirm", "start"), log.at(branch, "end"));
        assert_eq!(log.at("confirm", "start"), ms(took));
    }
}

// ---------------------------------------------------------------------------------------------
// WCP 6 Multi-Choice: a branch diverges into several; control passes to one or more of them,
// each chosen by its own condition. WCP 7 Structured Synchronizing Merge: the branches of that
// multi-choice converge into one, which is enabled when every *active* branch has completed.

workflow! {
    /// An emergency call dispatches the police, an ambulance or both, then transfers once
    /// every dispatched vehicle has arrived.
    MultiChoice(log: &Log, police: bool, ambulance: bool) {
        Sequential {
            call = Operation(work(log, "call", 10)),
            Parallel {
                Conditional(police) {
                    to_police = Operation(work_on(log, "police", &call, 30)),
                },
                Conditional(ambulance) {
                    to_ambulance = Operation(work_on(log, "ambulance", &call, 20)),
                },
            },
            transfer = Operation(work(log, "transfer", 5)),
        }
    }
}

/// The four choices of [`MultiChoice`], with the branches each one starts.
const CHOICES: [(bool, bool, &[&str]); 4] = [
    (true, true, &["police", "ambulance"]),
    (true, false, &["police"]),
    (false, true, &["ambulance"]),
    (false, false, &[]),
];

#[tokio::test(start_paused = true)]
async fn wcp_06_multi_choice() {
    for (police, ambulance, chosen) in CHOICES {
        let log = Log::new();
        let outcome = MultiChoice::runner()
            .execute((&log, police, ambulance))
            .await;
        outcome.result.expect("the multi-choice succeeds");
        // Every branch whose condition holds starts, all of them at once when `call`
        // completed; every other branch is skipped.
        let started: Vec<String> = log
            .started()
            .into_iter()
            .filter(|n| n == "police" || n == "ambulance")
            .collect();
        assert_eq!(started, chosen, "police {police}, ambulance {ambulance}");
        for &name in chosen {
            assert_eq!(log.at(name, "start"), ms(10), "{name}");
        }
        for (name, node) in [("police", "to_police"), ("ambulance", "to_ambulance")] {
            let expected = if chosen.contains(&name) {
                NodeStatus::Completed
            } else {
                NodeStatus::Skipped
            };
            assert_eq!(status(&outcome.report, node), expected, "{name}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_07_structured_synchronizing_merge() {
    for (police, ambulance, chosen) in CHOICES {
        let log = Log::new();
        MultiChoice::run(&log, police, ambulance)
            .await
            .expect("the multi-choice succeeds");
        // The merge runs exactly once, after every branch that was started has ended, and
        // waits for no branch that was not: at the end of the slowest active branch, or
        // right after `call` when none is active.
        assert_eq!(starts(&log, "transfer"), 1);
        let transfer = log.index("transfer", "start");
        for &name in chosen {
            assert!(
                log.index(name, "end") < transfer,
                "{name}: {:?}",
                log.events()
            );
        }
        let last_active_end = chosen
            .iter()
            .map(|&name| log.at(name, "end"))
            .max()
            .unwrap_or(log.at("call", "end"));
        assert_eq!(
            log.at("transfer", "start"),
            last_active_end,
            "police {police}, ambulance {ambulance}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// WCP 9 Structured Discriminator: branches of one earlier split converge; the first to complete
// enables the subsequent branch, later completions are ignored, and the construct resets once
// every incoming branch has completed.

workflow! {
    /// Three branches; `next` goes on after the first to complete, and the others run on.
    StructuredDiscriminator(log: &Log) -> Vec<usize> {
        Sequential {
            first = Parallel(min = 1, rest = run) {
                a = Operation(cut(log, "a", 10)),
                b = Operation(cut(log, "b", 30)),
                c = Operation(cut(log, "c", 50)),
            },
            next = Operation(work(log, "next", 5)),
        }
        => first.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_09_structured_discriminator() {
    let log = Log::new();
    let outcome = StructuredDiscriminator::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&vec![0]));
    // The first branch to complete enables the next task, once, as soon as it completed.
    assert_eq!(starts(&log, "next"), 1);
    assert_eq!(log.at("next", "start"), ms(10));
    assert_eq!(fired(report, "first"), 1);
    // The later completions are ignored: the other branches are not withdrawn, they run to
    // their end and complete, and start nothing.
    assert_eq!(log.at("b", "end"), ms(30));
    assert_eq!(log.at("c", "end"), ms(50));
    assert!(
        !dropped(&log, "b") && !dropped(&log, "c"),
        "{:?}",
        log.events()
    );
    for name in ["a", "b", "c", "first", "next"] {
        assert_eq!(status(report, name), NodeStatus::Completed, "{name}");
    }
    assert_eq!(report.count(NodeStatus::Withdrawn), 0);
    // The construct resets only once every branch completed: the run ends with the last one,
    // long after `next`.
    assert_eq!(log.at("next", "end"), ms(15));
    assert_eq!(log.elapsed(), ms(50));
}

// ---------------------------------------------------------------------------------------------
// WCP 11 Implicit Termination: a process instance terminates when no work item remains that
// can be done now or at any time in the future, without an explicit end node.

workflow! {
    /// Two branches with no common end: `a` then `b`; `c` then `d`, which reads `c`.
    ImplicitTermination(log: &Log, c_fails: bool) {
        Parallel {
            Sequential {
                a = Operation(work(log, "a", 10)),
                b = Operation(work(log, "b", 50)),
            },
            Sequential {
                c = Operation(maybe_fail(log, "c", 5, c_fails)),
                d = Operation(work_on(log, "d", &c, 100)),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_11_implicit_termination() {
    // No node is the end: the graph has two sinks, and nothing joins them.
    let mut ends = sinks(&ImplicitTermination::GRAPH);
    ends.sort_unstable();
    assert_eq!(ends, vec!["b", "d"]);

    // The run ends when the last work item ends, whichever branch it is in.
    let log = Log::new();
    let outcome = ImplicitTermination::runner().execute((&log, false)).await;
    outcome.result.expect("both branches complete");
    assert_eq!(log.elapsed(), ms(105));
    assert_eq!(log.at("d", "end"), ms(105));

    // When `c` fails, `d` can never run: the run does not wait for it, and ends when `b`,
    // the last work that could still be done, has ended.
    let log = Log::new();
    let outcome = ImplicitTermination::runner().execute((&log, true)).await;
    assert!(outcome.result.is_err(), "c's failure fails the run");
    assert_eq!(log.elapsed(), ms(60));
    assert_eq!(log.at("b", "end"), ms(60));
    assert_eq!(starts(&log, "d"), 0);
    assert_eq!(status(&outcome.report, "d"), NodeStatus::Aborted);
    // Nothing is left pending: every node has a final status.
    assert!(
        outcome
            .report
            .nodes()
            .iter()
            .all(|n| n.status.is_terminal()),
        "{}",
        outcome.report
    );
}

// ---------------------------------------------------------------------------------------------
// WCP 16 Deferred Choice: one of several branches is chosen by the environment; all are possible
// until an event of one of them happens, which chooses it, and the others are withdrawn.

workflow! {
    /// Ships when approved within the hour, expires the order otherwise; then `close`.
    DeferredChoice(log: &Log) -> (Option<u64>, Option<u64>) {
        Sequential {
            Pick {
                ok = Signal(approve: u64) => { ship = Operation(work_on(log, "ship", &ok, 10)) },
                Delay("1h") => { expire = Operation(work(log, "expire", 10)) },
            },
            close = Operation(work(log, "close", 5)),
        }
        => (ship.copied(), expire.copied())
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn wcp_16_deferred_choice() {
    use NodeStatus::{Completed, Withdrawn};
    // The approval comes after twenty minutes, before the delay: it chooses its branch.
    let log = Log::new();
    let mut runner = DeferredChoice::runner();
    let signals = runner.signals();
    let approve = async {
        sleep(HOUR / 3).await;
        signals.send(DeferredChoice::APPROVE, 7)
    };
    let (outcome, sent) = tokio::join!(runner.execute(&log), approve);
    assert_eq!(sent, Ok(()));
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&(Some(17), None)));
    assert_eq!(log.at("ship", "start"), HOUR / 3);
    // The other branch is withdrawn, its event and its steps, and its steps never start.
    assert_eq!(starts(&log, "expire"), 0);
    for (name, expected) in [
        ("ok", Completed),
        ("ship", Completed),
        ("delay#1", Withdrawn),
        ("expire", Withdrawn),
        ("pick#1", Completed),
        ("close", Completed),
    ] {
        assert_eq!(status(report, name), expected, "{name}");
    }
    assert_eq!(withdrawn_by(report, "delay#1"), Some("pick#1"));
    assert_eq!(withdrawn_by(report, "expire"), Some("pick#1"));
    // The step after runs once, after the chosen branch; the withdrawn timer holds nothing up.
    assert_eq!(starts(&log, "close"), 1);
    assert_eq!(log.at("close", "start"), HOUR / 3 + ms(10));
    assert_eq!(log.elapsed(), HOUR / 3 + ms(15));

    // Nobody approves: the delay chooses its branch, at exactly one hour.
    let log = Log::new();
    let outcome = DeferredChoice::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&(None, Some(10))));
    assert_eq!(log.at("expire", "start"), HOUR);
    assert_eq!(starts(&log, "ship"), 0);
    for (name, expected) in [
        ("ok", Withdrawn),
        ("ship", Withdrawn),
        ("delay#1", Completed),
        ("expire", Completed),
        ("pick#1", Completed),
        ("close", Completed),
    ] {
        assert_eq!(status(report, name), expected, "{name}");
    }
    assert_eq!(withdrawn_by(report, "ok"), Some("pick#1"));
    // The `Pick`'s row: it fired when the delay did.
    let pick = report.node("pick#1").expect("the pick's line");
    assert_eq!((pick.started, pick.ended), (Some(HOUR), Some(HOUR)));
    assert_eq!(withdrawn_by(report, "ship"), Some("pick#1"));
    assert_eq!(starts(&log, "close"), 1);
    assert_eq!(log.at("close", "start"), HOUR + ms(10));
    assert_eq!(log.elapsed(), HOUR + ms(15));
}

// ---------------------------------------------------------------------------------------------
// WCP 17 Interleaved Parallel Routing: each task of a set runs once, in any order that keeps a
// partial order, and no two of them run at the same time. WCP 40 Interleaved Routing: the same
// without a partial order, and the next task starts once all of them completed.

/// Counts the operations in flight and remembers the most at once.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// Logs `name` for `millis`, counted in `gauge` while it runs.
async fn gauged(log: &Log, gauge: &Gauge, name: &'static str, millis: u64) -> Result<u64, Boom> {
    let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
    gauge.peak.fetch_max(now, Ordering::SeqCst);
    let result = work(log, name, millis).await;
    gauge.now.fetch_sub(1, Ordering::SeqCst);
    result
}

/// Asserts that no two of `names` ran at the same time: of any two, one ended before the other
/// started (by log position and by time).
fn assert_one_at_a_time(log: &Log, names: &[&str]) {
    for (i, x) in names.iter().enumerate() {
        for y in &names[i + 1..] {
            let (first, second) = if log.index(x, "start") < log.index(y, "start") {
                (x, y)
            } else {
                (y, x)
            };
            assert!(
                log.index(first, "end") < log.index(second, "start"),
                "`{first}` and `{second}` overlap: {:?}",
                log.events()
            );
            assert!(log.at(first, "end") <= log.at(second, "start"));
        }
    }
}

workflow! {
    /// Pick the goods before packing them; prepare the invoice at any time; one task at a time.
    InterleavedParallelRouting(log: &Log, gauge: &Gauge) {
        Sequential {
            Parallel(max_concurrency = 1) {
                Sequential {
                    pick = Operation(gauged(log, gauge, "pick", 20)),
                    pack = Operation(gauged(log, gauge, "pack", 30)),
                },
                invoice = Operation(gauged(log, gauge, "invoice", 10)),
            },
            ship = Operation(work(log, "ship", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_17_interleaved_parallel_routing() {
    let log = Log::new();
    let gauge = Gauge::default();
    InterleavedParallelRouting::run(&log, &gauge)
        .await
        .expect("the routing succeeds");
    let tasks = ["pick", "pack", "invoice"];
    // Each task runs exactly once (`index` asserts one start and one end).
    for name in tasks {
        log.index(name, "start");
        log.index(name, "end");
    }
    // The partial order holds: pick before pack.
    assert!(log.index("pick", "end") < log.index("pack", "start"));
    // Never two at once: the in-flight count never passed one, and no two intervals overlap,
    // so the three take the sum of their times.
    assert_eq!(gauge.peak(), 1);
    assert_one_at_a_time(&log, &tasks);
    assert_eq!(log.at("ship", "start"), ms(60));
}

workflow! {
    /// Four checks of a machine service, in any order, one at a time; then `sign_off`.
    InterleavedRouting(log: &Log, gauge: &Gauge) {
        Sequential {
            Parallel(max_concurrency = 1) {
                oil = Operation(gauged(log, gauge, "oil", 10)),
                feeder = Operation(gauged(log, gauge, "feeder", 20)),
                main_unit = Operation(gauged(log, gauge, "main_unit", 30)),
                warranty = Operation(gauged(log, gauge, "warranty", 40)),
            },
            sign_off = Operation(work(log, "sign_off", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_40_interleaved_routing() {
    let log = Log::new();
    let gauge = Gauge::default();
    InterleavedRouting::run(&log, &gauge)
        .await
        .expect("the routing succeeds");
    let tasks = ["oil", "feeder", "main_unit", "warranty"];
    for name in tasks {
        log.index(name, "start");
        log.index(name, "end");
    }
    assert_eq!(gauge.peak(), 1);
    assert_one_at_a_time(&log, &tasks);
    // The next task starts once all of them completed, and not before.
    let sign_off = log.index("sign_off", "start");
    for name in tasks {
        assert!(log.index(name, "end") < sign_off, "{name}");
    }
    assert_eq!(log.at("sign_off", "start"), ms(100));
}

// ---------------------------------------------------------------------------------------------
// WCP 39 Critical Section: two or more connected subgraphs are marked as critical sections; at
// most one of them is active at a time, and one that has started completes before another starts.

workflow! {
    /// Two sections of the group `ledger` in two branches, the first a two-step `Sequential`;
    /// `report` is in no group.
    CriticalSection(log: &Log) {
        Sequential {
            Parallel {
                Sequential(exclusive = "ledger") {
                    debit = Operation(work(log, "debit", 10)),
                    credit = Operation(work(log, "credit", 10)),
                },
                audit = Operation(work(log, "audit", 15), exclusive = "ledger"),
                report = Operation(work(log, "report", 30)),
            },
            close = Operation(work(log, "close", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_39_critical_section() {
    let log = Log::new();
    CriticalSection::run(&log)
        .await
        .expect("the sections succeed");
    // The two-step section is active from its first start to its last end: the other section
    // does not start in the gap between its steps, and neither overlaps the other.
    let first = (log.at("debit", "start"), log.at("credit", "end"));
    let second = (log.at("audit", "start"), log.at("audit", "end"));
    assert!(
        first.1 <= second.0 || second.1 <= first.0,
        "the sections overlap: {first:?} and {second:?}"
    );
    // Ready in the order written, the Sequential section goes first; `audit` waits for it.
    assert_eq!(log.at("audit", "start"), ms(20));
    // A step of no group runs beside both.
    assert_eq!(log.at("report", "start"), ms(0));
    assert_eq!(log.at("close", "start"), ms(35));
}

// ---------------------------------------------------------------------------------------------
// WCP 19 Cancel Task: an enabled task is withdrawn before it starts; a task already running is
// stopped and removed.

workflow! {
    /// `running` and `queued` share one concurrency slot: `queued` is enabled from the start
    /// and waits for the slot. At 20ms `trigger`'s branch cancels both; `next` goes on.
    CancelTask(log: &Log) -> (Option<u64>, Option<u64>) {
        Sequential {
            Parallel {
                Parallel(max_concurrency = 1) {
                    running = Operation(cut(log, "running", 100)),
                    queued = Operation(cut(log, "queued", 10)),
                },
                Sequential {
                    trigger = Operation(work(log, "trigger", 20)),
                    Cancel(queued),
                    Cancel(running),
                },
            },
            next = Operation(work(log, "next", 5)),
        }
        => (running.copied(), queued.copied())
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_19_cancel_task() {
    // `queued` has no predecessor: only the slot keeps it from starting.
    let graph = &CancelTask::GRAPH;
    assert!(
        graph
            .edges()
            .iter()
            .all(|e| graph.nodes()[e.to as usize].name != "queued"),
        "{:?}",
        graph.edges()
    );
    let log = Log::new();
    let outcome = CancelTask::runner().execute(&log).await;
    let report = &outcome.report;
    // The run succeeds: a cancelled task is no failure.
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&(None, None)));
    // The running task is stopped: its future dropped when it was cancelled, before its end.
    assert_eq!(log.at("running", "start"), ms(0));
    assert_eq!(log.at("running", "dropped"), ms(20));
    assert!(
        log.ended().iter().all(|n| n != "running"),
        "{:?}",
        log.events()
    );
    // The enabled task never starts.
    assert_eq!(starts(&log, "queued"), 0);
    assert_eq!(report.node("queued").map(|n| n.attempts), Some(0));
    // Both are withdrawn, by their Cancel, not failed or aborted.
    assert_eq!(status(report, "queued"), NodeStatus::Withdrawn);
    assert_eq!(status(report, "running"), NodeStatus::Withdrawn);
    assert_eq!(withdrawn_by(report, "queued"), Some("cancel#1"));
    assert_eq!(withdrawn_by(report, "running"), Some("cancel#2"));
    assert_eq!(report.count(NodeStatus::Failed), 0);
    assert_eq!(report.count(NodeStatus::Aborted), 0);
    // The run goes on at once.
    assert_eq!(log.at("next", "start"), ms(20));
    assert_eq!(log.elapsed(), ms(25));
}

// ---------------------------------------------------------------------------------------------
// WCP 20 Cancel Case: a whole process instance is removed, with the tasks running now and the
// ones that would run later; the instance is recorded as having completed unsuccessfully.

/// Sets its flag when dropped.
struct DropFlag<'a>(&'a AtomicBool);

impl Drop for DropFlag<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Logs `name` for `millis`; `dropped` is set if the future is dropped before it ends.
async fn droppable(
    log: &Log,
    dropped: &AtomicBool,
    name: &'static str,
    millis: u64,
) -> Result<u64, Boom> {
    let flag = DropFlag(dropped);
    let result = work(log, name, millis).await;
    std::mem::forget(flag);
    result
}

workflow! {
    /// `a`, then `b` and `c` (long) at once, then `d`.
    CancelCase(log: &Log, b_dropped: &AtomicBool, c_dropped: &AtomicBool) {
        Sequential {
            a = Operation(work(log, "a", 10)),
            Parallel {
                b = Operation(droppable(log, b_dropped, "b", 100)),
                c = Operation(droppable(log, c_dropped, "c", 200)),
            },
            d = Operation(work(log, "d", 10)),
        }
    }
}

/// Asserts what cancelling [`CancelCase`] at 50ms must leave: `a` completed, `b` and `c`
/// dropped while running, `d` never started, every unfinished node aborted as cancelled, and a
/// failed run.
fn assert_case_removed(
    log: &Log,
    outcome: &Outcome<()>,
    dropped: [&AtomicBool; 2],
    reason: CancelReason,
) {
    assert_eq!(log.elapsed(), ms(50), "the run ends when it is cancelled");
    assert!(dropped.iter().all(|d| d.load(Ordering::SeqCst)));
    assert_eq!(log.started(), vec!["a", "b", "c"]);
    assert_eq!(log.ended(), vec!["a"]);
    let report = &outcome.report;
    assert_eq!(status(report, "a"), NodeStatus::Completed);
    for name in ["b", "c", "d"] {
        assert_eq!(status(report, name), NodeStatus::Aborted, "{name}");
    }
    let error = outcome
        .result
        .as_ref()
        .expect_err("a cancelled case failed");
    assert!(error.is_cancelled());
    assert_eq!(error.cancel_reason(), Some(reason));
    for name in ["b", "c", "d"] {
        assert!(
            matches!(error.error_of(name), Some(NodeError::Cancelled)),
            "{name}: {error}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_20_cancel_case() {
    // By a token, from outside the run.
    let log = Log::new();
    let (b_dropped, c_dropped) = (AtomicBool::new(false), AtomicBool::new(false));
    let token = CancelToken::new();
    let run = CancelCase::runner()
        .cancel_on(token.clone())
        .execute((&log, &b_dropped, &c_dropped));
    let cancel = async {
        sleep(ms(50)).await;
        token.cancel();
    };
    let (outcome, ()) = tokio::join!(run, cancel);
    assert_case_removed(
        &log,
        &outcome,
        [&b_dropped, &c_dropped],
        CancelReason::Token,
    );

    // By the run's deadline.
    let log = Log::new();
    let (b_dropped, c_dropped) = (AtomicBool::new(false), AtomicBool::new(false));
    let outcome = CancelCase::runner()
        .deadline(ms(50))
        .execute((&log, &b_dropped, &c_dropped))
        .await;
    assert_case_removed(
        &log,
        &outcome,
        [&b_dropped, &c_dropped],
        CancelReason::Deadline(ms(50)),
    );
}

// ---------------------------------------------------------------------------------------------
// WCP 22 Recursion: a task invokes, during its execution, the process it belongs to.

/// Logs the `what` entry of level `depth`.
async fn level(log: &Log, depth: u64, what: &'static str) -> Result<(), Boom> {
    log.record(&format!("level{depth}"), what);
    Ok(())
}

workflow! {
    /// Enters its level, runs itself one level down unless it is at the bottom, and leaves;
    /// returns the number of levels below it.
    Recursion(log: &Log, depth: u64) -> u64 {
        Sequential {
            Operation(level(log, depth, "start")),
            Conditional(depth > 0) {
                // Boxed, because the run's future contains itself.
                below = Operation(Box::pin(Recursion::run(log, depth - 1))),
            },
            Operation(level(log, depth, "end")),
        }
        => below.map_or(0, |levels| levels + 1)
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_22_recursion() {
    let log = Log::new();
    assert_eq!(Recursion::run(&log, 3).await.ok(), Some(3));
    // Each level's task runs the workflow again while it is itself running: the levels nest.
    assert_eq!(log.started(), ["level3", "level2", "level1", "level0"]);
    assert_eq!(log.ended(), ["level0", "level1", "level2", "level3"]);
    let outcome = Recursion::runner().execute((&log, 0)).await;
    assert_eq!(outcome.result.ok(), Some(0));
    assert_eq!(status(&outcome.report, "below"), NodeStatus::Skipped);
}

// ---------------------------------------------------------------------------------------------
// WCP 23 Transient Trigger: a task is triggered by a signal; a signal that no task is waiting
// for when it arrives is lost. WCP 24 Persistent Trigger: the same, but a signal is kept until
// a task can act on it.

workflow! {
    /// Prepares, then waits for a transient `ping`, then handles it.
    TransientTrigger(log: &Log) -> u64 {
        Sequential {
            prepare = Operation(work(log, "prepare", 10)),
            got = Signal(ping: u64, transient),
            handle = Operation(work_on(log, "handle", &got, 5)),
        }
        => handle
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_23_transient_trigger() {
    let log = Log::new();
    // The deadline only stops a run that would otherwise wait for ever.
    let mut runner = TransientTrigger::runner().deadline(HOUR);
    let signals = runner.signals();
    // Before the run, and at 5ms while `prepare` runs, no step waits: both are refused.
    let before = signals.send(TransientTrigger::PING, 1);
    let environment = async {
        sleep(ms(5)).await;
        let early = signals.send(TransientTrigger::PING, 2);
        // The step waits from 10ms on.
        sleep(ms(25)).await;
        let waited = signals.send(TransientTrigger::PING, 3);
        (early, waited)
    };
    let (outcome, (early, waited)) = tokio::join!(runner.execute(&log), environment);
    assert_eq!(before, Err(SendError::NotWaiting(1)));
    assert_eq!(early, Err(SendError::NotWaiting(2)));
    assert_eq!(waited, Ok(()));
    // The refused signals are lost: the step, waiting from 10ms, is triggered by the one sent
    // while it waited, at 30ms, and reads its payload.
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&(3 + 5)));
    assert_eq!(received(report), [("got", ms(30))]);
    assert_eq!(log.at("handle", "start"), ms(30));
}

workflow! {
    /// Prepares, waits for an order, handles it; then waits for a second order.
    PersistentTrigger(log: &Log) -> (u64, u64) {
        Sequential {
            prepare = Operation(work(log, "prepare", 10)),
            first = Signal(order: u64),
            handle = Operation(work_on(log, "handle", &first, 5)),
            second = Signal(order: u64),
            again = Operation(work_on(log, "again", &second, 5)),
        }
        => (handle, again)
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_24_persistent_trigger() {
    let log = Log::new();
    // The deadline only stops a run that would otherwise wait for ever.
    let mut runner = PersistentTrigger::runner().deadline(HOUR);
    let signals = runner.signals();
    let environment = async {
        // While `prepare` runs, before any step waits: kept.
        sleep(ms(5)).await;
        let early = signals.send(PersistentTrigger::ORDER, 1);
        sleep(ms(35)).await;
        let later = signals.send(PersistentTrigger::ORDER, 2);
        (early, later)
    };
    let (outcome, (early, later)) = tokio::join!(runner.execute(&log), environment);
    assert_eq!(early, Ok(()));
    assert_eq!(later, Ok(()));
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    // The kept signal triggers its step as soon as the step is reached, at 10ms, and is
    // consumed: the second step, reached at 15ms, does not take it again but waits for the
    // next one, sent at 40ms.
    assert_eq!(outcome.result.as_ref().ok(), Some(&(1 + 5, 2 + 5)));
    assert_eq!(received(report), [("first", ms(10)), ("second", ms(40))]);
    assert_eq!(log.at("handle", "start"), ms(10));
    assert_eq!(log.at("again", "start"), ms(40));
}

// ---------------------------------------------------------------------------------------------
// WCP 25 Cancel Region: a set of tasks is disabled at once; those running are withdrawn.

workflow! {
    /// A region of two arms: `done` ends first, `running` and `beside` run, `later` waits for
    /// `running`. At 20ms `trigger`'s branch cancels the region; `outside` is not in it.
    CancelRegion(log: &Log) {
        Sequential {
            Parallel {
                'region: Parallel {
                    Sequential {
                        done = Operation(cut(log, "done", 5)),
                        running = Operation(cut(log, "running", 100)),
                        later = Operation(cut(log, "later", 10)),
                    },
                    beside = Operation(cut(log, "beside", 100)),
                },
                outside = Operation(cut(log, "outside", 50)),
                Sequential {
                    trigger = Operation(work(log, "trigger", 20)),
                    Cancel('region),
                },
            },
            next = Operation(work(log, "next", 5)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_25_cancel_region() {
    let log = Log::new();
    let outcome = CancelRegion::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    // Every unfinished node of the region is withdrawn by the Cancel, at once: the running
    // ones are dropped at 20ms, before their end, and the one not yet started never starts.
    for name in ["running", "beside", "later"] {
        assert_eq!(status(report, name), NodeStatus::Withdrawn, "{name}");
        assert_eq!(withdrawn_by(report, name), Some("cancel#1"), "{name}");
    }
    for name in ["running", "beside"] {
        assert_eq!(log.at(name, "dropped"), ms(20), "{name}");
    }
    assert_eq!(starts(&log, "later"), 0);
    // A node of the region that had completed stays completed.
    assert_eq!(status(report, "done"), NodeStatus::Completed);
    assert_eq!(withdrawn_by(report, "done"), None);
    // Outside the region nothing changes: `outside` runs to its end, and `next` waits for it.
    assert_eq!(status(report, "outside"), NodeStatus::Completed);
    assert!(!dropped(&log, "outside"));
    assert_eq!(log.at("outside", "end"), ms(50));
    assert_eq!(log.at("next", "start"), ms(50));
    assert_eq!(log.ended(), ["done", "trigger", "outside", "next"]);
    assert_eq!(report.count(NodeStatus::Withdrawn), 3);
}

// ---------------------------------------------------------------------------------------------
// WCP 29 Cancelling Discriminator: the first active incoming branch to complete enables the
// subsequent branch and cancels the other incoming branches.

workflow! {
    /// Two branches race; `next` follows the winner.
    CancellingDiscriminator(log: &Log) -> usize {
        Sequential {
            won = Race {
                a = Operation(cut(log, "a", 10)),
                b = Operation(cut(log, "b", 30)),
            },
            next = Operation(work(log, "next", 5)),
        }
        => won
    }
}

workflow! {
    /// The branch that ends first fails.
    FailingDiscriminator(log: &Log) -> usize {
        Sequential {
            won = Race {
                bad = Operation(maybe_fail(log, "bad", 10, true)),
                good = Operation(cut(log, "good", 30)),
            },
            next = Operation(work(log, "next", 5)),
        }
        => won
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_29_cancelling_discriminator() {
    let log = Log::new();
    let outcome = CancellingDiscriminator::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&0));
    // The first branch to complete enables the next task, at once.
    assert_eq!(starts(&log, "next"), 1);
    assert_eq!(log.at("next", "start"), ms(10));
    // And cancels the other: dropped at that instant, withdrawn by the gate, never ended.
    assert_eq!(log.at("b", "dropped"), ms(10));
    assert_eq!(log.ended(), ["a", "next"]);
    assert_eq!(status(report, "b"), NodeStatus::Withdrawn);
    assert_eq!(withdrawn_by(report, "b"), Some("won"));
    assert_eq!(log.elapsed(), ms(15));

    // A branch that ends by failing does not complete, so it does not win: the other does.
    let log = Log::new();
    let outcome = FailingDiscriminator::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&1));
    assert_eq!(status(report, "bad"), NodeStatus::Failed);
    assert_eq!(status(report, "good"), NodeStatus::Completed);
    assert!(!dropped(&log, "good"));
    assert_eq!(log.at("bad", "end"), ms(10));
    assert_eq!(starts(&log, "next"), 1);
    assert_eq!(log.at("next", "start"), ms(30));
}

// ---------------------------------------------------------------------------------------------
// WCP 30 Structured Partial Join: M branches converge; the subsequent branch is enabled when N
// of them completed, and later completions are ignored. WCP 32 Cancelling Partial Join: the
// same, and the other branches are cancelled.

workflow! {
    /// Two of three; the third runs on.
    StructuredPartialJoin(log: &Log) -> Vec<usize> {
        Sequential {
            two = Parallel(min = 2, rest = run) {
                a = Operation(cut(log, "a", 10)),
                b = Operation(cut(log, "b", 20)),
                c = Operation(cut(log, "c", 30)),
            },
            next = Operation(work(log, "next", 5)),
        }
        => two.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_30_structured_partial_join() {
    let log = Log::new();
    let outcome = StructuredPartialJoin::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&vec![0, 1]));
    // The next task starts when the second branch completed.
    assert_eq!(log.at("next", "start"), ms(20));
    assert_eq!(fired(report, "two"), 1);
    // The third runs on and completes, and its completion does not start the next task again.
    assert_eq!(log.at("c", "end"), ms(30));
    assert!(!dropped(&log, "c"));
    assert_eq!(status(report, "c"), NodeStatus::Completed);
    assert_eq!(starts(&log, "next"), 1);
    assert_eq!(report.count(NodeStatus::Withdrawn), 0);
    assert_eq!(log.elapsed(), ms(30));
}

workflow! {
    /// Two of three; the third is cancelled.
    CancellingPartialJoin(log: &Log) -> Vec<usize> {
        Sequential {
            two = Parallel(min = 2, rest = cancel) {
                a = Operation(cut(log, "a", 10)),
                b = Operation(cut(log, "b", 20)),
                c = Operation(cut(log, "c", 30)),
            },
            next = Operation(work(log, "next", 5)),
        }
        => two.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_32_cancelling_partial_join() {
    let log = Log::new();
    let outcome = CancellingPartialJoin::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&vec![0, 1]));
    assert_eq!(starts(&log, "next"), 1);
    assert_eq!(log.at("next", "start"), ms(20));
    // The third is cancelled when the join fires: dropped then, withdrawn by the join.
    assert_eq!(log.at("c", "dropped"), ms(20));
    assert_eq!(log.ended(), ["a", "b", "next"]);
    assert_eq!(status(report, "c"), NodeStatus::Withdrawn);
    assert_eq!(withdrawn_by(report, "c"), Some("two"));
    for name in ["a", "b"] {
        assert_eq!(status(report, name), NodeStatus::Completed, "{name}");
    }
    assert_eq!(log.elapsed(), ms(25));
}

// ---------------------------------------------------------------------------------------------
// WCP 37 Local Synchronizing Merge: branches that diverged earlier converge into one, which is
// enabled when every active incoming branch has completed; how many are active is known from
// information local to the merge (here: a skipped branch reports itself, dead-path
// elimination), not from the structure of the model.

workflow! {
    /// Two branches that each may or may not do an optional task, and go on after it; `merge`
    /// waits for the two optional tasks only, not for the rest of their branches.
    LocalMerge(log: &Log, x: bool, y: bool) {
        Parallel {
            Sequential {
                a = Operation(work(log, "a", 10)),
                Conditional(x) {
                    b = Operation(work(log, "b", 30)),
                },
                c = Operation(work(log, "c", 100)),
            },
            Sequential {
                d = Operation(work(log, "d", 20)),
                Conditional(y) {
                    e = Operation(work(log, "e", 50)),
                },
            },
            merge = Operation(work(log, "merge", 5), after = [b, e]),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_37_local_synchronizing_merge() {
    // The merge is not the closing join of a block: its inputs are the optional steps of two
    // different choices, in two branches that go on past it.
    let into_merge: Vec<_> = LocalMerge::GRAPH
        .edges()
        .iter()
        .filter(|e| LocalMerge::GRAPH.nodes()[e.to as usize].name == "merge")
        .map(|e| (LocalMerge::GRAPH.nodes()[e.from as usize].name, e.kind))
        .collect();
    assert_eq!(into_merge, [("b", EdgeKind::After), ("e", EdgeKind::After)]);
    // b ends at 40 when taken, e at 70; a skipped branch is known to be inactive as soon as
    // its choice is made: x at 10, y at 20.
    for (x, y, merge_at) in [
        (true, true, 70),
        (true, false, 40),
        (false, true, 70),
        (false, false, 20),
    ] {
        let log = Log::new();
        let outcome = LocalMerge::runner().execute((&log, x, y)).await;
        outcome.result.expect("the run succeeds");
        assert_eq!(starts(&log, "merge"), 1);
        assert_eq!(log.at("merge", "start"), ms(merge_at), "x {x}, y {y}");
        for (taken, name) in [(x, "b"), (y, "e")] {
            if taken {
                assert!(
                    log.index(name, "end") < log.index("merge", "start"),
                    "{name}"
                );
            } else {
                assert_eq!(status(&outcome.report, name), NodeStatus::Skipped, "{name}");
            }
        }
        // It does not wait for `c`, which follows `b` in its branch.
        assert!(log.at("c", "end") > log.at("merge", "end"));
    }
}

// ---------------------------------------------------------------------------------------------
// WCP 43 Explicit Termination: a process instance ends when it reaches a given end point; the
// remaining work is cancelled and the instance is recorded as completed successfully.

workflow! {
    /// `found` ends at 10ms and terminates the run while `running` runs, `waiting` waits for
    /// it, and `approval` waits for a signal.
    ExplicitTermination(log: &Log) -> u64 {
        Sequential {
            Parallel {
                Sequential {
                    running = Operation(cut(log, "running", 100)),
                    waiting = Operation(cut(log, "waiting", 5)),
                },
                approval = Signal(approve: u64),
                Sequential {
                    found = Operation(work(log, "found", 10)),
                    Terminate(found * 3),
                },
            },
            after = Operation(work(log, "after", 5)),
        }
        => after
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_43_explicit_termination() {
    let log = Log::new();
    // The deadline only stops a run that would otherwise wait for ever.
    let outcome = ExplicitTermination::runner()
        .deadline(HOUR)
        .execute(&log)
        .await;
    let report = &outcome.report;
    // The run ends at the end point, at once, with its value.
    assert_eq!(outcome.result.as_ref().ok(), Some(&30));
    assert_eq!(log.elapsed(), ms(10));
    assert_eq!(status(report, "found"), NodeStatus::Completed);
    assert_eq!(status(report, "terminate#1"), NodeStatus::Completed);
    // The remaining work is cancelled: the running task dropped then, the waiting ones never
    // started; all withdrawn by the end point, none failed.
    assert_eq!(log.at("running", "dropped"), ms(10));
    assert_eq!(log.started(), ["running", "found"]);
    for name in ["running", "waiting", "approval", "after"] {
        assert_eq!(status(report, name), NodeStatus::Withdrawn, "{name}");
        assert_eq!(withdrawn_by(report, name), Some("terminate#1"), "{name}");
    }
    // The instance is recorded as completed successfully.
    assert!(report.succeeded(), "{report}");
    assert_eq!(report.count(NodeStatus::Failed), 0);
    assert_eq!(report.count(NodeStatus::Aborted), 0);
    assert!(matches!(
        report.log().events().last().map(|e| &e.kind),
        Some(EventKind::RunFinished { succeeded: true })
    ));
}

// ---------------------------------------------------------------------------------------------
// Multiple instances (WCP 12–15, 26, 27, 35) and loops (WCP 21, 28, 31). A `ForEach` runs one
// instance of its body per item; each instance is a nested run of the body, and the
// `ForEach`'s `NestReport` counts them. Instances log under their item's name.

/// `(started, completed, failed, withdrawn)` instances of the nest node (`ForEach`, `Loop`)
/// `name`, from its summary in the report.
fn instances(report: &Report, name: &str) -> (u64, u64, u64, u64) {
    let nest = report
        .nest(name)
        .unwrap_or_else(|| panic!("no nest node `{name}` in the report:\n{report}"));
    (nest.started, nest.completed, nest.failed, nest.withdrawn)
}

/// Logs `what` of round `round` (`"{what}{round}"`) for `millis`, and returns `round`.
async fn round(log: &Log, what: &str, round: u64, millis: u64) -> Result<u64, Boom> {
    let name = format!("{what}{round}");
    log.record(&name, "start");
    sleep(ms(millis)).await;
    log.record(&name, "end");
    Ok(round)
}

/// The names `i0`, `i1`, .. of instances whose number is known only at run time.
fn instance_name(index: u64) -> &'static str {
    const NAMES: [&str; 8] = ["i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"];
    NAMES[index as usize % NAMES.len()]
}

// ---------------------------------------------------------------------------------------------
// WCP 12 Multiple Instances without Synchronization: several instances of a task are created;
// they run concurrently and independently, and nothing waits for them to complete.

workflow! {
    /// Three instances, independent of each other (`on_failure = collect`: the one that fails
    /// touches no other); no step waits for the `ForEach`, and the branch beside it goes on.
    MiWithoutSynchronization(log: &Log) -> u64 {
        Parallel {
            spawned = ForEach(x in [("a", 30u64), ("b", 20), ("c", 40)], on_failure = collect) {
                Operation(maybe_fail(log, x.0, x.1, x.0 == "b"))
            },
            Sequential {
                first = Operation(work(log, "first", 5)),
                next = Operation(work_on(log, "next", &first, 10)),
            },
        }
        => next
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_12_mi_without_synchronization() {
    // Nothing waits for the instances: no edge leaves the `ForEach`, and the output does not
    // read it.
    assert!(sinks(&MiWithoutSynchronization::GRAPH).contains(&"spawned"));
    let log = Log::new();
    let outcome = MiWithoutSynchronization::runner().execute(&log).await;
    let report = &outcome.report;
    assert_eq!(outcome.result.as_ref().ok(), Some(&15), "{report}");
    // The instances run concurrently.
    for name in ["a", "b", "c"] {
        assert_eq!(log.at(name, "start"), ms(0), "{name}");
    }
    // The thread that created them goes on and ends before any of them completes.
    assert_eq!(log.at("next", "end"), ms(15));
    // Independent: the failed instance neither stops nor fails the others, nor the run.
    assert_eq!(log.at("a", "end"), ms(30));
    assert_eq!(log.at("c", "end"), ms(40));
    assert!(!dropped(&log, "a") && !dropped(&log, "c"));
    assert_eq!(instances(report, "spawned"), (3, 2, 1, 0));
    assert!(report.succeeded(), "{report}");
    // The run itself ends when no work remains (WCP 11), which is when the last one ended.
    assert_eq!(log.elapsed(), ms(40));
}

// ---------------------------------------------------------------------------------------------
// WCP 13 Multiple Instances with a priori Design-Time Knowledge: a number of instances known
// when the model is designed, run concurrently, synchronized before the next task starts.

workflow! {
    /// Three instances, written in the model.
    MiDesignTime(log: &Log) -> Vec<u64> {
        Sequential {
            each = ForEach(x in [("a", 30u64), ("b", 10), ("c", 20)]) {
                w = Operation(work(log, x.0, x.1)) => w
            },
            next = Operation(work(log, "next", 5)),
        }
        => each.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_13_mi_design_time() {
    let log = Log::new();
    let outcome = MiDesignTime::runner().execute(&log).await;
    let report = &outcome.report;
    // One output per instance, in the order of the items.
    assert_eq!(
        outcome.result.as_ref().ok(),
        Some(&vec![30, 10, 20]),
        "{report}"
    );
    // Concurrent.
    for name in ["a", "b", "c"] {
        assert_eq!(log.at(name, "start"), ms(0), "{name}");
    }
    // Synchronized: the next task starts when the last instance completed, once.
    assert_eq!(log.at("next", "start"), ms(30));
    assert_eq!(starts(&log, "next"), 1);
    assert_eq!(instances(report, "each"), (3, 3, 0, 0));
    assert_eq!(status(report, "each"), NodeStatus::Completed);
}

// ---------------------------------------------------------------------------------------------
// WCP 14 Multiple Instances with a priori Run-Time Knowledge: as 13, with the number of
// instances known only at run time, before the instances are created.

/// The items of the run: `1..=n`, after 5ms of planning.
async fn plan(log: &Log, n: u64) -> Result<Vec<u64>, Boom> {
    work(log, "plan", 5).await?;
    Ok((1..=n).collect())
}

workflow! {
    /// As many instances as `plan` says; instance `k` takes `10 * k` ms.
    MiRunTime(log: &Log, n: u64) -> Vec<u64> {
        Sequential {
            items = Operation(plan(log, n)),
            each = ForEach(k in items.iter()) {
                w = Operation(work(log, instance_name(*k), 10 * k)) => w
            },
            next = Operation(work(log, "next", 5)),
        }
        => each.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_14_mi_run_time() {
    for n in [2u64, 5] {
        let log = Log::new();
        let outcome = MiRunTime::runner().execute((&log, n)).await;
        let report = &outcome.report;
        let expected: Vec<u64> = (1..=n).map(|k| 10 * k).collect();
        assert_eq!(outcome.result.as_ref().ok(), Some(&expected), "{report}");
        // The number is the run's: known once `plan` ended, before the first instance.
        assert_eq!(instances(report, "each"), (n, n, 0, 0));
        for k in 1..=n {
            assert_eq!(log.at(instance_name(k), "start"), ms(5), "n = {n}, k = {k}");
        }
        // Synchronized: the next task starts once the last (longest) instance completed.
        assert_eq!(log.at("next", "start"), ms(5 + 10 * n));
    }
}

// ---------------------------------------------------------------------------------------------
// WCP 15 Multiple Instances without a priori Run-Time Knowledge: as 13, but instances may be
// added while others run, so the number is known only when the last one has completed.

/// Items that arrive one by one: each waits its delay after the one before, then is
/// `(name, millis)`. Nothing tells how many will come (`size_hint` is `(0, None)`).
fn arrivals(
    plan: &'static [(&'static str, u64, u64)],
) -> impl futures::Stream<Item = (&'static str, u64)> {
    futures::stream::unfold(0usize, move |at| async move {
        let &(name, delay, millis) = plan.get(at)?;
        sleep(ms(delay)).await;
        Some(((name, millis), at + 1))
    })
}

/// `a` at 0ms for 30ms, `b` at 10ms for 30ms, `c` at 25ms for 10ms.
const ARRIVALS: &[(&str, u64, u64)] = &[("a", 0, 30), ("b", 10, 30), ("c", 15, 10)];

workflow! {
    /// One instance per item of a stream, started as the item arrives.
    MiNoPriorKnowledge(log: &Log) -> Vec<u64> {
        Sequential {
            each = ForEach(x in stream arrivals(ARRIVALS)) {
                w = Operation(work(log, x.0, x.1)) => w
            },
            next = Operation(work(log, "next", 5)),
        }
        => each.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_15_mi_no_a_priori_knowledge() {
    let log = Log::new();
    let outcome = MiNoPriorKnowledge::runner().execute(&log).await;
    let report = &outcome.report;
    assert_eq!(
        outcome.result.as_ref().ok(),
        Some(&vec![30, 30, 10]),
        "{report}"
    );
    // Instances are added while others run: each starts when its item arrives.
    assert_eq!(log.at("a", "start"), ms(0));
    assert_eq!(log.at("b", "start"), ms(10));
    assert_eq!(log.at("c", "start"), ms(25));
    assert!(log.at("c", "start") < log.at("a", "end"));
    // Synchronized: the next task starts when the last instance completed (b, at 40ms),
    // not when the last one started or the stream ended.
    assert_eq!(log.at("next", "start"), ms(40));
    assert_eq!(instances(report, "each"), (3, 3, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// WCP 21 Structured Loop: a task or sub-process runs repeatedly, with a test after (post-test)
// or before (pre-test) each iteration; the loop has one entry and one exit.

/// Iteration `k` (from 0, the counter's value) logs `i{k}` for 10ms and returns `k + 1`.
async fn iteration(log: &Log, counter: &AtomicUsize) -> Result<u64, Boom> {
    let k = counter.fetch_add(1, Ordering::SeqCst) as u64;
    work(log, instance_name(k), 10).await?;
    Ok(k + 1)
}

workflow! {
    /// Repeat until `stop` iterations ran; the test reads the iteration's output.
    PostTestLoop(log: &Log, counter: &AtomicUsize, stop: u64) -> u64 {
        Sequential {
            before = Operation(work(log, "before", 5)),
            looped = Loop(max = 8) {
                n = Operation(iteration(log, counter))
                => n
            } until (n >= stop),
            after = Operation(work(log, "after", 5)),
        }
        => looped
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_21_structured_loop_post_test() {
    for (stop, iterations) in [(3u64, 3u64), (0, 1)] {
        let log = Log::new();
        let counter = AtomicUsize::new(0);
        let outcome = PostTestLoop::runner().execute((&log, &counter, stop)).await;
        let report = &outcome.report;
        // Tested after each iteration: the body runs at least once, even when the test holds
        // before the first.
        assert_eq!(outcome.result.as_ref().ok(), Some(&iterations), "{report}");
        assert_eq!(counter.load(Ordering::SeqCst) as u64, iterations);
        // One iteration after the other, entered once from `before`.
        for k in 0..iterations {
            assert_eq!(
                log.at(instance_name(k), "start"),
                ms(5 + 10 * k),
                "stop = {stop}"
            );
        }
        // One exit: the step after runs once, when the last iteration ended.
        assert_eq!(starts(&log, "after"), 1);
        assert_eq!(log.at("after", "start"), ms(5 + 10 * iterations));
        assert_eq!(instances(report, "looped"), (iterations, iterations, 0, 0));
    }
}

workflow! {
    /// While the previous iteration's output is below `limit`: tested before each iteration,
    /// the first included.
    PreTestLoop(log: &Log, counter: &AtomicUsize, limit: u64) -> Option<u64> {
        Sequential {
            before = Operation(work(log, "before", 5)),
            looped = Loop(max = 8, prev = last) while (last.copied().unwrap_or(0) < limit) {
                n = Operation(iteration(log, counter))
                => n
            },
            after = Operation(work(log, "after", 5)),
        }
        => looped
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_21_structured_loop_pre_test() {
    for (limit, iterations) in [(3u64, 3u64), (0, 0)] {
        let log = Log::new();
        let counter = AtomicUsize::new(0);
        let outcome = PreTestLoop::runner().execute((&log, &counter, limit)).await;
        let report = &outcome.report;
        // Tested before each iteration: a test that fails at once runs the body zero times.
        let output = (iterations > 0).then_some(iterations);
        assert_eq!(outcome.result.as_ref().ok(), Some(&output), "{report}");
        assert_eq!(counter.load(Ordering::SeqCst) as u64, iterations);
        for k in 0..iterations {
            assert_eq!(
                log.at(instance_name(k), "start"),
                ms(5 + 10 * k),
                "limit = {limit}"
            );
        }
        assert_eq!(starts(&log, "after"), 1);
        assert_eq!(log.at("after", "start"), ms(5 + 10 * iterations));
        assert_eq!(instances(report, "looped"), (iterations, iterations, 0, 0));
    }
}

// ---------------------------------------------------------------------------------------------
// WCP 26 Cancel Multiple Instance Activity: a multiple-instance task is cancelled; its
// instances not yet completed are withdrawn, the completed ones are unaffected.

workflow! {
    /// Four instances; at 25ms the `ForEach` is cancelled, when two have completed.
    CancelMiActivity(log: &Log) -> Option<usize> {
        Sequential {
            Parallel {
                each = ForEach(x in [("a", 10u64), ("b", 20), ("c", 40), ("d", 50)]) {
                    w = Operation(cut(log, x.0, x.1)) => w
                },
                Sequential {
                    trigger = Operation(work(log, "trigger", 25)),
                    Cancel(each),
                },
            },
            next = Operation(work(log, "next", 5)),
        }
        => each.map(Vec::len)
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_26_cancel_mi_activity() {
    let log = Log::new();
    let outcome = CancelMiActivity::runner().execute(&log).await;
    let report = &outcome.report;
    // Cancelling is no failure; the cancelled `ForEach` has no output.
    assert!(report.succeeded(), "{report}");
    assert_eq!(outcome.result.as_ref().ok(), Some(&None));
    // The instances not yet completed are withdrawn: their futures dropped at 25ms.
    for name in ["c", "d"] {
        assert_eq!(log.at(name, "dropped"), ms(25), "{name}");
    }
    assert_eq!(log.ended(), ["a", "b", "trigger", "next"]);
    // The completed ones are unaffected: they completed and stay counted so.
    assert_eq!(log.at("a", "end"), ms(10));
    assert_eq!(log.at("b", "end"), ms(20));
    assert_eq!(instances(report, "each"), (4, 2, 0, 2));
    assert_eq!(status(report, "each"), NodeStatus::Withdrawn);
    assert_eq!(withdrawn_by(report, "each"), Some("cancel#1"));
    assert_eq!(log.at("next", "start"), ms(25));
}

// ---------------------------------------------------------------------------------------------
// WCP 27 Complete Multiple Instance Activity: a multiple-instance task is forced to complete;
// its remaining instances are withdrawn and control passes on.

workflow! {
    /// Four instances; at 25ms the `ForEach` is completed, when two have completed. The step
    /// after it reads its output.
    CompleteMiActivity(log: &Log) -> Vec<u64> {
        Parallel {
            Sequential {
                each = ForEach(x in [("a", 10u64), ("b", 20), ("c", 40), ("d", 50)]) {
                    w = Operation(cut(log, x.0, x.1)) => w
                },
                next = Operation(work_on(log, "next", &(each.len() as u64), 5)),
            },
            Sequential {
                trigger = Operation(work(log, "trigger", 25)),
                Complete(each),
            },
        }
        => each.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_27_complete_mi_activity() {
    let log = Log::new();
    let outcome = CompleteMiActivity::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    // Completed, with the outputs of the instances that completed.
    assert_eq!(outcome.result.as_ref().ok(), Some(&vec![10, 20]));
    assert_eq!(status(report, "each"), NodeStatus::Completed);
    // The remaining instances are withdrawn at that instant.
    for name in ["c", "d"] {
        assert_eq!(log.at(name, "dropped"), ms(25), "{name}");
    }
    assert_eq!(instances(report, "each"), (4, 2, 0, 2));
    // Control passes on at once, to the step after the `ForEach`, which reads two outputs.
    assert_eq!(log.at("next", "start"), ms(25));
    assert_eq!(
        report.node("next").map(|n| n.status),
        Some(NodeStatus::Completed)
    );
    assert_eq!(log.elapsed(), ms(30));
}

// ---------------------------------------------------------------------------------------------
// WCP 28 Blocking Discriminator: the first active incoming branch to complete enables the
// subsequent branch; the construct resets once every active branch has completed, and further
// enablements of the branches are blocked until then. WCP 31 Blocking Partial Join: the same
// with N of M branches.

workflow! {
    /// Two rounds of two branches, `a` (10ms) and `b` (30ms), joined by a discriminator
    /// before `c`.
    BlockingDiscriminator(log: &Log) -> u64 {
        looped = Loop(max = 4, prev = last) {
            Parallel(min = 1, rest = run) {
                a = Operation(round(log, "a", last.map_or(0, |r| r + 1), 10)),
                b = Operation(round(log, "b", last.map_or(0, |r| r + 1), 30)),
            },
            c = Operation(round(log, "c", last.map_or(0, |r| r + 1), 5))
            => c
        } until (c >= 1)
        => looped
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_28_blocking_discriminator() {
    let log = Log::new();
    let outcome = BlockingDiscriminator::runner().execute(&log).await;
    let report = &outcome.report;
    assert_eq!(outcome.result.as_ref().ok(), Some(&1), "{report}");
    // Each round, the first branch to complete enables the subsequent branch, once.
    assert_eq!(log.at("c0", "start"), ms(10));
    assert_eq!(log.at("c1", "start"), ms(40));
    assert_eq!(
        log.started().iter().filter(|n| n.starts_with('c')).count(),
        2
    );
    // The construct resets when the slower branch completed (30ms); until then the branches
    // are not enabled again, though `c0` ended at 15ms.
    assert_eq!(log.at("b0", "end"), ms(30));
    assert_eq!(log.at("a1", "start"), ms(30));
    assert_eq!(log.at("b1", "start"), ms(30));
    assert_eq!(instances(report, "looped"), (2, 2, 0, 0));
    assert_eq!(log.elapsed(), ms(60));
}

workflow! {
    /// Two rounds of three branches, `a` (10ms), `b` (20ms) and `c` (40ms), joined two of
    /// three before `d`.
    BlockingPartialJoin(log: &Log) -> u64 {
        looped = Loop(max = 4, prev = last) {
            Parallel(min = 2, rest = run) {
                a = Operation(round(log, "a", last.map_or(0, |r| r + 1), 10)),
                b = Operation(round(log, "b", last.map_or(0, |r| r + 1), 20)),
                c = Operation(round(log, "c", last.map_or(0, |r| r + 1), 40)),
            },
            d = Operation(round(log, "d", last.map_or(0, |r| r + 1), 5))
            => d
        } until (d >= 1)
        => looped
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_31_blocking_partial_join() {
    let log = Log::new();
    let outcome = BlockingPartialJoin::runner().execute(&log).await;
    let report = &outcome.report;
    assert_eq!(outcome.result.as_ref().ok(), Some(&1), "{report}");
    // Each round, the second completion enables `d`, once; the third is ignored.
    assert_eq!(log.at("d0", "start"), ms(20));
    assert_eq!(log.at("d1", "start"), ms(60));
    assert_eq!(
        log.started().iter().filter(|n| n.starts_with('d')).count(),
        2
    );
    // Blocked until the join resets: the next round's branches start when the last branch
    // of this one completed.
    assert_eq!(log.at("c0", "end"), ms(40));
    for name in ["a1", "b1", "c1"] {
        assert_eq!(log.at(name, "start"), ms(40), "{name}");
    }
    assert_eq!(instances(report, "looped"), (2, 2, 0, 0));
    assert_eq!(log.elapsed(), ms(80));
}

// ---------------------------------------------------------------------------------------------
// WCP 34 Static Partial Join for Multiple Instances: several concurrent instances of a task are
// created, their number known before the first starts; the next task is triggered once N of them
// have completed. The completion of the others is inconsequential (they run on and do not
// trigger it again), and the construct resets once every instance has completed.

workflow! {
    /// Two of four; the others run on.
    StaticPartialJoinMi(log: &Log) -> Vec<u64> {
        Sequential {
            two = ForEach(x in [("a", 30u64), ("b", 10), ("c", 20), ("d", 40)], min = 2, rest = run) {
                w = Operation(cut(log, x.0, x.1)) => w
            },
            next = Operation(work(log, "next", 5)),
        }
        => two.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_34_static_partial_join_mi() {
    let log = Log::new();
    let outcome = StaticPartialJoinMi::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    // The outputs of the first two that completed, in input order.
    assert_eq!(outcome.result.as_ref().ok(), Some(&vec![10, 20]));
    // The next task is triggered at the second completion, once, while the others still run.
    assert_eq!(log.at("next", "start"), ms(20));
    assert_eq!(starts(&log, "next"), 1);
    assert_eq!(log.ended(), ["b", "c", "next", "a", "d"]);
    // The others are not cancelled: they complete, and trigger nothing more.
    assert!(!dropped(&log, "a") && !dropped(&log, "d"));
    assert_eq!(instances(report, "two"), (4, 4, 0, 0));
    assert_eq!(status(report, "two"), NodeStatus::Completed);
    // The construct resets (the run ends) once every instance has completed.
    assert_eq!(log.elapsed(), ms(40));
}

// ---------------------------------------------------------------------------------------------
// WCP 35 Cancelling Partial Join for Multiple Instances: of M concurrent instances, the next
// task starts once N have completed, and the remaining instances are cancelled.

workflow! {
    /// Two of four.
    CancellingPartialJoinMi(log: &Log) -> Vec<u64> {
        Sequential {
            two = ForEach(x in [("a", 30u64), ("b", 10), ("c", 20), ("d", 40)], min = 2, rest = cancel) {
                w = Operation(cut(log, x.0, x.1)) => w
            },
            next = Operation(work(log, "next", 5)),
        }
        => two.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn wcp_35_cancelling_partial_join_mi() {
    let log = Log::new();
    let outcome = CancellingPartialJoinMi::runner().execute(&log).await;
    let report = &outcome.report;
    assert!(report.succeeded(), "{report}");
    // The outputs of the two that completed, in input order.
    assert_eq!(outcome.result.as_ref().ok(), Some(&vec![10, 20]));
    // The next task starts at the second completion, once.
    assert_eq!(log.at("next", "start"), ms(20));
    assert_eq!(starts(&log, "next"), 1);
    // The others are cancelled then.
    for name in ["a", "d"] {
        assert_eq!(log.at(name, "dropped"), ms(20), "{name}");
    }
    assert_eq!(log.ended(), ["b", "c", "next"]);
    assert_eq!(instances(report, "two"), (4, 2, 0, 2));
    assert_eq!(log.elapsed(), ms(25));
}

// ---------------------------------------------------------------------------------------------
// docs/patterns.md stays true: 43 rows in order, every `direct` row names tests of this file,
// every `wcp_` test of this file is named by a `direct` row, and the count at the top is the
// number of `direct` rows.

#[test]
fn patterns_doc_matches_these_tests() {
    let doc = include_str!("../docs/patterns.md");
    let tests = include_str!("run_patterns.rs");
    let rows: Vec<Vec<&str>> = doc
        .lines()
        .filter(|line| {
            line.starts_with("| ") && line.as_bytes().get(2).is_some_and(u8::is_ascii_digit)
        })
        .map(|line| line.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 43, "one row per pattern");
    let mut named = Vec::new();
    for (i, cells) in rows.iter().enumerate() {
        // "", #, pattern, definition, form, test, status, "".
        assert_eq!(cells.len(), 8, "row {}: {cells:?}", i + 1);
        assert_eq!(cells[1], (i + 1).to_string(), "rows are in pattern order");
        let status = cells[6];
        assert!(
            ["direct", "planned", "not expressed"]
                .iter()
                .any(|s| status == *s || status.starts_with("not expressed:")),
            "row {}: unknown status `{status}`",
            i + 1
        );
        if status == "direct" {
            let names: Vec<&str> = cells[5].split('`').skip(1).step_by(2).collect();
            assert!(
                !names.is_empty(),
                "row {}: a direct pattern names its test",
                i + 1
            );
            for name in names {
                assert!(
                    name.starts_with(&format!("wcp_{:02}_", i + 1)),
                    "row {}: `{name}` is not a wcp_{:02}_ test",
                    i + 1,
                    i + 1
                );
                assert!(
                    tests.contains(&format!("async fn {name}()")),
                    "row {}: no test `{name}` in tests/run_patterns.rs",
                    i + 1
                );
                named.push(name);
            }
        }
    }
    for line in tests.lines() {
        if let Some(rest) = line.strip_prefix("async fn wcp_") {
            let name = format!("wcp_{}", rest.trim_end_matches("() {"));
            assert!(
                named.contains(&name.as_str()),
                "`{name}` is not named by a direct row of docs/patterns.md"
            );
        }
    }
    let direct = rows.iter().filter(|cells| cells[6] == "direct").count();
    assert!(
        doc.contains(&format!("**Expressed directly today: {direct} of 43**")),
        "the count at the top of docs/patterns.md says {direct}"
    );
}
