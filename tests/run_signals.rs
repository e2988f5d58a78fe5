//! Choices made by the environment: `Signal` steps that wait for a signal sent through the
//! runner's `Signals` handle, and `Delay` steps that wait for a duration. Time is tokio's paused
//! clock: a `Delay("48h")` takes no wall-clock time.

use std::convert::Infallible;
use std::time::Duration;

use flowdag::NodeKind;
use flowdag::prelude::*;
use tokio::time::{Instant, sleep};

#[derive(Debug, Clone, PartialEq)]
struct Approval {
    by: &'static str,
}

async fn ship(approval: &Approval) -> Result<String, Infallible> {
    Ok(format!("shipped, approved by {}", approval.by))
}

async fn seconds(n: u64) -> Result<u64, Infallible> {
    Ok(n)
}

async fn done() -> Result<(), Infallible> {
    Ok(())
}

workflow! {
    /// Waits for an approval, then ships.
    Release() -> String {
        Sequential {
            ok = Signal(approve: Approval),
            shipped = Operation(ship(&ok)),
        }
        => shipped.clone()
    }
}

workflow! {
    /// Waits for a transient ping: a ping sent while nobody waits is lost.
    Ping() -> u8 {
        Sequential {
            Delay("1s"),
            got = Signal(ping: u8, transient),
        }
        => got
    }
}

workflow! {
    /// Waits two days, and then as many seconds as `load` says.
    Cooldown(n: u64) {
        Sequential {
            Delay("2d"),
            secs = Operation(seconds(n)),
            Delay(Duration::from_secs(secs)),
            Operation(done()),
        }
    }
}

fn kinds(log: &EventLog, node: &str) -> Vec<&'static str> {
    log.events()
        .iter()
        .filter(|e| e.node_name == Some(node))
        .map(|e| e.kind.name())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_signal_sent_before_the_step_waits_is_kept() {
    let mut runner = Release::runner();
    let signals = runner.signals();
    signals
        .send(Release::APPROVE, Approval { by: "ann" })
        .expect("kept for the step");
    let outcome = runner.execute(()).await;
    assert_eq!(
        outcome.result.expect("the run succeeds"),
        "shipped, approved by ann"
    );
    assert_eq!(outcome.report.status("ok"), Some(NodeStatus::Completed));
}

#[tokio::test(start_paused = true)]
async fn kept_signals_are_taken_oldest_first() {
    workflow! {
        Twice() -> (Approval, Approval) {
            Sequential {
                first = Signal(approve: Approval),
                second = Signal(approve: Approval),
            }
            => (first.clone(), second.clone())
        }
    }
    let mut runner = Twice::runner();
    let signals = runner.signals();
    for by in ["ann", "bob"] {
        signals.send(Twice::APPROVE, Approval { by }).expect("kept");
    }
    let (first, second) = runner.run(()).await.expect("the run succeeds");
    assert_eq!((first.by, second.by), ("ann", "bob"));
}

#[tokio::test(start_paused = true)]
async fn a_signal_sent_while_the_step_waits_wakes_it_and_its_payload_flows_on() {
    let start = Instant::now();
    let mut runner = Release::runner();
    let signals = runner.signals();
    let send = async {
        sleep(Duration::from_secs(5)).await;
        signals.send(Release::APPROVE, Approval { by: "bob" })
    };
    let (outcome, sent) = tokio::join!(runner.execute(()), send);
    assert_eq!(sent, Ok(()));
    assert_eq!(
        outcome.result.expect("the run succeeds"),
        "shipped, approved by bob"
    );
    assert!(start.elapsed() >= Duration::from_secs(5));
    // The step completed when the signal came, not before.
    let received = outcome
        .report
        .log()
        .events()
        .iter()
        .find(|e| matches!(e.kind, EventKind::SignalReceived { .. }))
        .map(|e| e.at)
        .expect("a SignalReceived event");
    assert!(received >= Duration::from_secs(5), "{received:?}");
}

#[tokio::test(start_paused = true)]
async fn a_transient_signal_with_no_step_waiting_is_refused() {
    let mut runner = Ping::runner();
    let signals = runner.signals();
    // The step waits only after its one-second delay.
    assert_eq!(
        signals.send(Ping::PING, 7),
        Err(SendError::NotWaiting(7)),
        "nobody waits: refused, the value given back"
    );
    let send = async {
        sleep(Duration::from_millis(1500)).await;
        signals.send(Ping::PING, 9)
    };
    let (got, sent) = tokio::join!(runner.run(()), send);
    assert_eq!(sent, Ok(()));
    assert_eq!(
        got.expect("the run succeeds"),
        9,
        "the refused ping was not kept"
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_sent_after_the_run_ended_is_refused() {
    let mut runner = Release::runner();
    let signals = runner.signals();
    signals
        .send(Release::APPROVE, Approval { by: "ann" })
        .expect("kept");
    runner.run(()).await.expect("the run succeeds");
    let late = signals.send(Release::APPROVE, Approval { by: "cy" });
    assert_eq!(late, Err(SendError::Finished(Approval { by: "cy" })));
    let error = late.expect_err("refused");
    assert_eq!(
        error.to_string(),
        "the run has ended: no step will take the signal"
    );
    assert_eq!(error.into_inner(), Approval { by: "cy" });
}

#[tokio::test(start_paused = true)]
async fn a_run_without_a_handle_waits_until_its_deadline() {
    // Nobody can send to the private mailbox of `run(..)`: the deadline ends the wait.
    let error = Release::runner()
        .deadline(Duration::from_secs(60))
        .run(())
        .await
        .expect_err("cancelled by the deadline");
    assert!(error.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_delay_waits_its_virtual_duration() {
    let start = Instant::now();
    let outcome = Cooldown::runner().execute(30).await;
    assert!(outcome.report.succeeded());
    assert!(
        start.elapsed() >= Duration::from_secs(2 * 86_400 + 30),
        "{:?}",
        start.elapsed()
    );
    let delays: Vec<NodeStatus> = ["delay#1", "delay#2"]
        .into_iter()
        .filter_map(|name| outcome.report.status(name))
        .collect();
    assert_eq!(delays, [NodeStatus::Completed, NodeStatus::Completed]);
}

#[tokio::test(start_paused = true)]
async fn events_of_timers_and_signals() {
    let outcome = Cooldown::runner().execute(30).await;
    let log = outcome.report.log();
    assert_eq!(
        kinds(log, "delay#1"),
        ["Requested", "TimerSet", "TimerFired", "Completed"]
    );
    let set: Vec<Duration> = log
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TimerSet { after } => Some(after),
            _ => None,
        })
        .collect();
    assert_eq!(
        set,
        [Duration::from_secs(2 * 86_400), Duration::from_secs(30)],
        "the literal and the expression, each as computed when its step started"
    );
    let fired = log
        .events()
        .iter()
        .find(|e| e.kind == EventKind::TimerFired)
        .expect("TimerFired");
    assert_eq!(fired.at, Duration::from_secs(2 * 86_400));

    let mut runner = Release::runner();
    runner
        .signals()
        .send(Release::APPROVE, Approval { by: "ann" })
        .expect("kept");
    let outcome = runner.execute(()).await;
    let log = outcome.report.log();
    assert_eq!(
        kinds(log, "ok"),
        ["Requested", "SignalReceived", "Completed"]
    );
    assert!(
        log.events()
            .iter()
            .any(|e| e.kind == EventKind::SignalReceived { signal: "approve" })
    );
}

#[test]
fn without_a_tokio_timer_a_delay_fails_with_a_message() {
    // No tokio runtime: the delay fails instead of panicking.
    let error = futures::executor::block_on(Cooldown::run(1)).expect_err("no timer");
    let failed = error.error_of("delay#1").expect("the delay failed");
    assert!(
        failed
            .to_string()
            .contains("need a tokio runtime with time enabled"),
        "{failed}"
    );
}

#[test]
fn the_graph_shows_signals_and_delays() {
    let graph = Cooldown::GRAPH;
    let kinds: Vec<&str> = graph.nodes().iter().map(|n| n.kind.as_str()).collect();
    assert_eq!(kinds, ["delay", "operation", "delay", "operation"]);
    assert_eq!(graph.nodes()[0].label, "\"2d\"");
    assert_eq!(graph.nodes()[2].label, "Duration::from_secs(secs)");
    let release = Release::GRAPH;
    assert_eq!(release.nodes()[0].kind, NodeKind::Signal);
    assert_eq!(release.nodes()[0].label, "approve: Approval");
    assert_eq!(Release::APPROVE.name(), "approve");
}

#[test]
fn handles_are_send_and_sync() {
    fn is<T: Send + Sync + Clone + 'static>() {}
    is::<Signals>();
    is::<SignalKey<Approval>>();
    is::<SendError<Approval>>();
}

async fn expire() -> Result<&'static str, Infallible> {
    // Runs an hour, so the run is still going when a late signal is sent.
    sleep(Duration::from_secs(3600)).await;
    Ok("expired")
}

workflow! {
    /// Ships when approved within two days; expires the order otherwise.
    Deferred() -> (Option<String>, Option<&'static str>) {
        Pick {
            ok = Signal(approve: Approval, transient) => { shipped = Operation(ship(&ok)) },
            Delay("48h") => { expired = Operation(expire()) },
        },
        Operation(done()),
        => (shipped.cloned(), expired.copied())
    }
}

const HOUR: Duration = Duration::from_secs(3600);

fn statuses(report: &Report, names: &[&str]) -> Vec<Option<NodeStatus>> {
    names.iter().map(|name| report.status(name)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_pick_takes_the_signal_when_it_comes_first_and_withdraws_the_delay() {
    let start = Instant::now();
    let mut runner = Deferred::runner();
    let signals = runner.signals();
    let send = async {
        sleep(HOUR).await;
        signals.send(Deferred::APPROVE, Approval { by: "ann" })
    };
    let (outcome, sent) = tokio::join!(runner.execute(()), send);
    assert_eq!(sent, Ok(()));
    let (shipped, expired) = outcome.result.expect("the run succeeds");
    assert_eq!(shipped.as_deref(), Some("shipped, approved by ann"));
    assert_eq!(expired, None);
    use NodeStatus::{Completed, Withdrawn};
    assert_eq!(
        statuses(
            &outcome.report,
            &["ok", "shipped", "delay#1", "expired", "pick#1", "done"]
        ),
        [
            Completed, Completed, Withdrawn, Withdrawn, Completed, Completed
        ]
        .map(Some)
    );
    // The losing delay was dropped at once: the run did not wait its 48 hours.
    assert!(start.elapsed() < 2 * HOUR, "{:?}", start.elapsed());
    let log = outcome.report.log();
    assert!(
        log.events()
            .iter()
            .any(|e| e.node_name == Some("pick#1") && e.kind == EventKind::Won { arms: vec![0] })
    );
    assert!(
        log.events().iter().any(|e| e.node_name == Some("delay#1")
            && e.kind == EventKind::Withdrawn { cause: "pick#1" })
    );
    assert_eq!(
        kinds(log, "delay#1"),
        ["Requested", "TimerSet", "Withdrawn"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_pick_takes_the_delay_when_it_fires_first_and_stops_waiting_for_the_signal() {
    let start = Instant::now();
    let mut runner = Deferred::runner();
    let signals = runner.signals();
    let send = async {
        // The delay has fired and `expire` is running: the losing signal step no longer waits,
        // so the transient signal finds nobody.
        sleep(48 * HOUR + HOUR / 2).await;
        signals.send(Deferred::APPROVE, Approval { by: "late" })
    };
    let (outcome, sent) = tokio::join!(runner.execute(()), send);
    assert_eq!(sent, Err(SendError::NotWaiting(Approval { by: "late" })));
    let (shipped, expired) = outcome.result.expect("the run succeeds");
    assert_eq!((shipped, expired), (None, Some("expired")));
    use NodeStatus::{Completed, Withdrawn};
    assert_eq!(
        statuses(
            &outcome.report,
            &["ok", "shipped", "delay#1", "expired", "pick#1", "done"]
        ),
        [
            Withdrawn, Withdrawn, Completed, Completed, Completed, Completed
        ]
        .map(Some)
    );
    assert!(start.elapsed() >= 49 * HOUR);
    let log = outcome.report.log();
    assert!(
        log.events()
            .iter()
            .any(|e| e.node_name == Some("pick#1") && e.kind == EventKind::Won { arms: vec![1] })
    );
    assert_eq!(kinds(log, "ok"), ["Requested", "Withdrawn"]);
}

#[tokio::test(start_paused = true)]
async fn a_kept_signal_chooses_its_arm_before_any_delay() {
    workflow! {
        Kept() -> bool {
            Pick {
                ok = Signal(approve: Approval) => { },
                Delay("0ms") => { },
            }
            => ok.is_some()
        }
    }
    let mut runner = Kept::runner();
    runner
        .signals()
        .send(Kept::APPROVE, Approval { by: "ann" })
        .expect("kept");
    let outcome = runner.execute(()).await;
    assert!(
        outcome.result.expect("the run succeeds"),
        "the signal chose its arm"
    );
    assert_eq!(
        outcome.report.status("delay#1"),
        Some(NodeStatus::Withdrawn)
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_in_the_chosen_arm_fails_the_run() {
    #[derive(Debug)]
    struct Refusal;
    impl std::fmt::Display for Refusal {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("refused")
        }
    }
    impl std::error::Error for Refusal {}
    async fn refuse(_: &Approval) -> Result<(), Refusal> {
        Err(Refusal)
    }
    async fn tally(refused: bool) -> Result<bool, Infallible> {
        Ok(refused)
    }
    workflow! {
        Refused() {
            Pick {
                ok = Signal(approve: Approval) => { refused = Operation(refuse(&ok)) },
                Delay("1h") => { Operation(done()) },
            },
            // Reads the arm's last step (an `Option`): its failure still reaches it.
            Operation(tally(refused.is_some())),
        }
    }
    let mut runner = Refused::runner();
    runner
        .signals()
        .send(Refused::APPROVE, Approval { by: "ann" })
        .expect("kept");
    let error = runner
        .run(())
        .await
        .expect_err("the arm's failure is not caught");
    let failed: Vec<&str> = error.failed().map(|f| f.node).collect();
    assert_eq!(failed, ["refused"]);
    let aborted: Vec<&str> = error.aborted().map(|f| f.node).collect();
    assert_eq!(aborted, ["tally"]);

    // The same with a cleanup after the `Pick`: it runs, and the run still fails.
    workflow! {
        RefusedThenCleanup() {
            Pick {
                ok = Signal(approve: Approval) => { refused = Operation(refuse(&ok)) },
                Delay("1h") => { Operation(done()) },
            },
            Operation(tally(refused.is_some()), when = all_done),
        }
    }
    let mut runner = RefusedThenCleanup::runner();
    runner
        .signals()
        .send(RefusedThenCleanup::APPROVE, Approval { by: "ann" })
        .expect("kept");
    let outcome = runner.execute(()).await;
    assert_eq!(outcome.report.status("tally"), Some(NodeStatus::Completed));
    let error = outcome
        .result
        .expect_err("the cleanup does not turn the arm's failure into a success");
    let failed: Vec<&str> = error.failed().map(|f| f.node).collect();
    assert_eq!(failed, ["refused"]);

    // The same with nothing after the `Pick`.
    workflow! {
        RefusedLast() {
            Pick {
                ok = Signal(approve: Approval) => { Operation(refuse(&ok)) },
                Delay("1h") => { },
            }
        }
    }
    let mut runner = RefusedLast::runner();
    runner
        .signals()
        .send(RefusedLast::APPROVE, Approval { by: "ann" })
        .expect("kept");
    let error = runner
        .run(())
        .await
        .expect_err("the arm's failure is not caught");
    let failed: Vec<&str> = error.failed().map(|f| f.node).collect();
    assert_eq!(failed, ["refuse"]);
}

async fn double(n: &u32) -> Result<u32, Infallible> {
    Ok(n * 2)
}

workflow! {
    /// A `ForEach`, then a `Signal`: the instances share the run's mailbox.
    EachThenSignal() -> u32 {
        Sequential {
            all = ForEach(n in 0..3u32) { d = Operation(double(&n)) => d },
            go = Signal(go: u32),
        }
        => go + all.iter().sum::<u32>()
    }
}

workflow! {
    /// The child of `ChildThenSignal`: one operation.
    Doubler(n: u32) -> u32 {
        d = Operation(double(&n))
        => d
    }
}

workflow! {
    /// A sub-workflow step, then a `Signal`.
    ChildThenSignal() -> u32 {
        Sequential {
            c = Workflow(Doubler(4)),
            go = Signal(go: u32),
        }
        => go + c
    }
}

#[tokio::test(start_paused = true)]
async fn an_instance_that_ends_does_not_close_the_runs_mailbox() {
    // Kept before the run: the instances end first, and the signal is still there after them.
    let mut runner = EachThenSignal::runner().deadline(Duration::from_secs(60));
    runner
        .signals()
        .send(EachThenSignal::GO, 100)
        .expect("kept");
    assert_eq!(runner.run(()).await.expect("the signal arrives"), 106);

    // Sent while the run waits, after the child ended.
    let mut runner = ChildThenSignal::runner().deadline(Duration::from_secs(60));
    let signals = runner.signals();
    let send = async {
        sleep(Duration::from_secs(1)).await;
        signals.send(ChildThenSignal::GO, 1)
    };
    let (result, sent) = tokio::join!(runner.run(()), send);
    assert!(sent.is_ok(), "the run was still open");
    assert_eq!(result.expect("the signal arrives"), 9);
}
