//! The event log, observers and reports: what a run did, as events, tables, pictures and traces.

use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowdag::prelude::*;
use flowdag::{Event, EventKind, EventLog, Recorder, RunId};
use tokio::time::sleep;

#[derive(Debug)]
struct Broken;
impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("broken")
    }
}
impl std::error::Error for Broken {}

async fn task(ms: u64) -> Result<u64, Infallible> {
    sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

async fn broken(ms: u64) -> Result<u64, Broken> {
    sleep(Duration::from_millis(ms)).await;
    Err(Broken)
}

workflow! {
    /// The "meets and joins" graph of The Flow Algorithm: B before C and F, A and C before D.
    MeetsAndJoins() {
        Parallel {
            a = Operation(task(30)),
            b = Operation(task(10)),
            c = Operation(task(10), after = [b]),
            f = Operation(task(50), after = [b]),
            d = Operation(task(10), after = [a, c]),
        }
    }
}

workflow! {
    /// Steps that become ready together: four at the start, four when the first four are done.
    Waves() {
        Sequential {
            Parallel {
                w0 = Operation(task(1)),
                w1 = Operation(task(1)),
                w2 = Operation(task(1)),
                w3 = Operation(task(1)),
            },
            Parallel {
                v0 = Operation(task(1)),
                v1 = Operation(task(1)),
                v2 = Operation(task(1)),
                v3 = Operation(task(1)),
            },
        }
    }
}

workflow! {
    /// Every kind of event: retries, a timeout, a failure, an abort, a skip and a decision.
    Eventful() {
        Parallel {
            Sequential {
                bad = Operation(broken(5), retries = 1, backoff = "10ms"),
                Operation(task(1)),
            },
            Sequential {
                slow = Operation(task(100), timeout = "20ms"),
            },
            Sequential {
                good = Operation(task(5)),
                Conditional(good.is_ok()) {
                    Operation(task(5)),
                } else {
                    skipped = Operation(task(5)),
                },
            },
        }
    }
}

fn assert_projection(report: &Report) {
    let replayed = report.log().statuses();
    let live: Vec<NodeStatus> = report.nodes().iter().map(|n| n.status).collect();
    assert_eq!(replayed, live, "replaying the log gives the live statuses");
}

#[tokio::test(start_paused = true)]
async fn node_statuses_are_a_projection_of_the_log() {
    let outcome = Eventful::runner().execute(()).await;
    assert_projection(&outcome.report);
    let outcome = MeetsAndJoins::runner().execute(()).await;
    assert_projection(&outcome.report);

    let kinds: Vec<&str> = Eventful::runner()
        .execute(())
        .await
        .report
        .log()
        .events()
        .iter()
        .map(|e| e.kind.name())
        .collect();
    for kind in [
        "RunStarted",
        "Requested",
        "Completed",
        "Failed",
        "Retrying",
        "TimedOut",
        "Skipped",
        "Aborted",
        "RunFinished",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    assert_eq!(kinds.first(), Some(&"RunStarted"));
    assert_eq!(kinds.last(), Some(&"RunFinished"));
}

#[tokio::test(start_paused = true)]
async fn steps_ready_together_start_in_the_order_they_became_ready() {
    let outcome = Waves::runner().execute(()).await;
    let started: Vec<&str> = outcome
        .report
        .log()
        .events()
        .iter()
        .filter(|e| e.kind.name() == "Requested")
        .filter_map(|e| e.node)
        .map(|n| Waves::GRAPH.nodes()[n as usize].name)
        .collect();
    assert_eq!(
        started,
        ["w0", "w1", "w2", "w3", "v0", "v1", "v2", "v3"],
        "in the order written, wave by wave"
    );
}

#[tokio::test(start_paused = true)]
async fn events_are_numbered_timed_and_attempted() {
    let outcome = Eventful::runner().execute(()).await;
    let log = outcome.report.log();
    let run = outcome.report.run().expect("execute records the run");
    for (i, event) in log.events().iter().enumerate() {
        assert_eq!(event.seq, i as u64);
        assert_eq!(event.run, run);
    }
    assert!(
        log.events().windows(2).all(|w| w[0].at <= w[1].at),
        "timestamps are monotonic"
    );
    let bad = Eventful::GRAPH.node_id("bad").expect("bad exists") as u32;
    let attempts: Vec<(u32, &str)> = log
        .events()
        .iter()
        .filter(|e| e.node == Some(bad))
        .map(|e| (e.attempt, e.kind.name()))
        .collect();
    assert_eq!(
        attempts,
        [
            (1, "Requested"),
            (1, "Retrying"),
            (2, "Requested"),
            (2, "Failed")
        ]
    );
    let retry_at = log
        .events()
        .iter()
        .find(|e| e.node == Some(bad) && e.attempt == 2)
        .map(|e| e.at);
    assert_eq!(
        retry_at,
        Some(Duration::from_millis(15)),
        "5 ms attempt, then 10 ms backoff"
    );
}

#[test]
fn appending_an_event_twice_changes_nothing() {
    let event = |seq| Event {
        run: RunId(7),
        seq,
        node: Some(0),
        node_name: Some("a"),
        attempt: 1,
        at: Duration::ZERO,
        kind: EventKind::Requested,
        path: None,
    };
    let mut log = EventLog::new();
    assert_eq!(log.append(event(0)), Ok(true));
    assert_eq!(log.append(event(1)), Ok(true));
    assert_eq!(log.append(event(0)), Ok(false));
    assert_eq!(log.append(event(1)), Ok(false));
    assert_eq!(log.len(), 2);
    assert!(log.append(event(5)).is_err(), "a gap is refused");
    let other = Event {
        run: RunId(8),
        ..event(2)
    };
    assert!(log.append(other).is_err(), "another run's event is refused");
}

#[tokio::test(start_paused = true)]
async fn events_name_their_node() {
    let outcome = MeetsAndJoins::runner().execute(()).await;
    let events = outcome.report.log().events();
    assert!(events.iter().any(|e| e.node.is_some()));
    for event in events {
        let expected = event
            .node
            .map(|n| MeetsAndJoins::GRAPH.nodes()[n as usize].name);
        assert_eq!(event.node_name, expected, "{event}");
    }
    let first_request = events
        .iter()
        .find(|e| e.kind == EventKind::Requested)
        .expect("a node started");
    let name = first_request.node_name.expect("a node event");
    assert!(
        first_request
            .to_string()
            .contains(&format!("{name} attempt 1")),
        "an event prints its node's name: {first_request}"
    );
}

#[test]
fn a_log_without_its_run_started_event_replays_the_nodes_it_names() {
    let event = |seq, node, kind| Event {
        run: RunId(3),
        seq,
        node: Some(node),
        node_name: None,
        attempt: 1,
        at: Duration::ZERO,
        kind,
        path: None,
    };
    let mut log = EventLog::new();
    assert_eq!(log.append(event(0, 2, EventKind::Requested)), Ok(true));
    assert_eq!(log.append(event(1, 0, EventKind::Skipped)), Ok(true));
    assert_eq!(
        log.statuses(),
        [NodeStatus::Skipped, NodeStatus::Idle, NodeStatus::Running]
    );
    assert!(EventLog::new().statuses().is_empty());
}

#[tokio::test(start_paused = true)]
async fn observers_see_every_event_in_order() {
    let recorder = Recorder::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_closure = seen.clone();
    let outcome = Eventful::runner()
        .observer(recorder.clone())
        .observer(move |e: &Event| seen_by_closure.lock().expect("not poisoned").push(e.seq))
        .execute(())
        .await;
    let logged = outcome.report.log().events().to_vec();
    assert_eq!(recorder.events(), logged);
    let seqs: Vec<u64> = logged.iter().map(|e| e.seq).collect();
    assert_eq!(*seen.lock().expect("not poisoned"), seqs);
    let run = outcome.report.run().expect("recorded");
    assert_eq!(recorder.log(run).events(), logged.as_slice());
}

#[tokio::test(start_paused = true)]
async fn a_plain_run_records_nothing_but_observers_still_see_events() {
    // `run` keeps no log; `record(false)` keeps none either, but observers are still told.
    let recorder = Recorder::new();
    let outcome = MeetsAndJoins::runner()
        .record(false)
        .observer(recorder.clone())
        .execute(())
        .await;
    assert!(outcome.report.log().is_empty());
    assert!(outcome.report.nodes().iter().all(|n| n.started.is_none()));
    assert_eq!(
        recorder.events().len(),
        2 + 2 * 5,
        "RunStarted, Requested and Completed per node, RunFinished"
    );
}

#[tokio::test(start_paused = true)]
async fn the_channel_observer_streams_events() {
    use futures::StreamExt;
    let (observer, stream) = flowdag::channel();
    let outcome = MeetsAndJoins::runner().observer(observer).execute(()).await;
    // The run is over and dropped its observer: the stream ends after the last event.
    let streamed: Vec<Event> = stream.collect().await;
    assert_eq!(streamed, outcome.report.log().events());
}

#[tokio::test(start_paused = true)]
async fn the_report_has_times_attempts_and_totals() {
    let outcome = MeetsAndJoins::runner().execute(()).await;
    let report = &outcome.report;
    let node = |name: &str| report.node(name).expect("node exists").clone();
    assert_eq!(node("b").started, Some(Duration::ZERO));
    assert_eq!(node("b").ended, Some(Duration::from_millis(10)));
    assert_eq!(node("f").started, Some(Duration::from_millis(10)));
    assert_eq!(node("f").duration(), Some(Duration::from_millis(50)));
    assert_eq!(node("d").started, Some(Duration::from_millis(30)));
    assert_eq!(report.elapsed(), Some(Duration::from_millis(60)));
    assert!(report.succeeded());
    let table = report.to_string();
    assert!(
        table.contains("MeetsAndJoins: succeeded in 60.0 ms: 5 completed, 0 failed"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 1 + 5 + 1);
}

#[tokio::test(start_paused = true)]
async fn the_timeline_exports_are_well_formed() {
    let outcome = MeetsAndJoins::runner().execute(()).await;
    let report = &outcome.report;
    let trace: serde_json::Value =
        serde_json::from_str(&report.to_chrome_trace()).expect("valid JSON");
    let events = trace["traceEvents"]
        .as_array()
        .expect("traceEvents is an array");
    assert_eq!(events.len(), 5);
    for event in events {
        // The fields a Chrome/Perfetto complete event needs.
        assert_eq!(event["ph"], "X");
        assert!(event["name"].is_string());
        assert!(event["ts"].is_u64() && event["dur"].is_u64());
        assert!(event["pid"].is_u64() && event["tid"].is_u64());
    }
    let f = events
        .iter()
        .find(|e| e["name"] == "f")
        .expect("f is traced");
    assert_eq!(
        (f["ts"].as_u64(), f["dur"].as_u64()),
        (Some(10_000), Some(50_000))
    );

    let gantt = report.to_mermaid_gantt();
    assert!(gantt.starts_with("gantt\n"));
    assert!(gantt.contains("    f : 10, 60\n"), "{gantt}");

    let svg = report.to_svg_timeline();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<rect x=").count(), 5, "one bar per node");
}

#[tokio::test(start_paused = true)]
async fn the_trace_matrix_follows_the_flow_algorithm() {
    let outcome = MeetsAndJoins::runner().execute(()).await;
    let matrix = outcome.report.trace_matrix();
    println!("{matrix}");
    let rows = matrix.rows.len();
    assert_eq!(matrix.rows.first(), Some(&"start"));
    assert_eq!(matrix.rows.last(), Some(&"end"));
    assert_eq!(
        matrix.columns.len(),
        2 * rows,
        "one start and one end per row"
    );
    // Every row sums to zero: each task starts once and ends once.
    for row in 0..rows {
        assert_eq!(matrix.row_sum(row), 0, "row {}", matrix.rows[row]);
    }
    // Start is the first column pair, end the last.
    assert_eq!(matrix.span(0), Some((0, 1)));
    assert_eq!(matrix.span(rows - 1), Some((2 * rows - 2, 2 * rows - 1)));
    // Each column has a single entry, -1 or +1.
    assert!(matrix.columns.iter().all(|c| c.value == -1 || c.value == 1));
    // No node starts before its predecessors end.
    let graph = MeetsAndJoins::GRAPH;
    for edge in graph.edges() {
        let (_, from_end) = matrix.span(edge.from as usize + 1).expect("ran");
        let (to_start, _) = matrix.span(edge.to as usize + 1).expect("ran");
        assert!(from_end < to_start, "{edge:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn reports_serialize_to_json() {
    let outcome = Eventful::runner().execute(()).await;
    let json: serde_json::Value =
        serde_json::from_str(&outcome.report.to_json().expect("serializes")).expect("valid JSON");
    assert_eq!(json["workflow"], "Eventful");
    assert_eq!(json["succeeded"], false);
    let nodes = json["nodes"].as_array().expect("nodes");
    let bad = nodes
        .iter()
        .find(|n| n["name"] == "bad")
        .expect("bad is there");
    assert_eq!(bad["status"], "Failed");
    assert_eq!(bad["attempts"], 2);
    assert!(
        json["log"]["events"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
}

#[tokio::test(start_paused = true)]
async fn pictures_show_kinds_branches_and_statuses() {
    let dot = Eventful::GRAPH.to_dot();
    assert!(dot.contains("shape=diamond"), "decisions are diamonds");
    let skipped = Eventful::GRAPH.node_id("skipped").expect("exists");
    assert!(
        dot.contains(&format!(
            "n{skipped} [label=\"skipped\\ntask(5)\", shape=box, style=\"rounded,dashed\"]"
        )),
        "{dot}"
    );
    let mermaid = Eventful::GRAPH.to_mermaid();
    assert!(
        mermaid.contains("class ") && mermaid.contains(" branch"),
        "{mermaid}"
    );

    let outcome = Eventful::runner().execute(()).await;
    let dot = outcome.report.to_dot();
    assert!(
        dot.contains("[failed]") && dot.contains("[skipped]") && dot.contains("fillcolor"),
        "{dot}"
    );
    let mermaid = outcome.report.to_mermaid();
    assert!(mermaid.contains("classDef failed"), "{mermaid}");
}

#[tokio::test(start_paused = true)]
async fn the_progress_observer_counts_settled_nodes() {
    let progress = flowdag::Progress::with_bar(indicatif_hidden());
    let bar = progress.bar().clone();
    let outcome = Eventful::runner().observer(progress).execute(()).await;
    assert_eq!(bar.length(), Some(outcome.report.nodes().len() as u64));
    assert_eq!(bar.position(), outcome.report.nodes().len() as u64);
    assert!(bar.is_finished());
}

fn indicatif_hidden() -> flowdag::ProgressBar {
    flowdag::ProgressBar::hidden()
}
