//! Nest instances run by hand-made drivers on hand-built graphs: what the context folds, and
//! where the instances' events go.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{EventSink, Nest, NestCtx, NestKind, NodePath, PathStep};
use crate::error::NodeError;
use crate::events::{Event, EventKind, EventLog, Recorder, RunId};
use crate::graph::{Control, Edge, EdgeKind, Graph, NestInfo, NodeInfo, NodeKind, Plan};
use crate::options::RunOptions;
use crate::policy::FailurePolicy;
use crate::report::Outcome;
use crate::scheduler::RunSetup;
use crate::status::NodeStatus;
use crate::support::execute;

const fn op(name: &'static str) -> NodeInfo {
    NodeInfo::__new(name, NodeKind::Operation, name, 1, 1)
}

/// A body of one operation, `charge`.
static BODY: Graph = BODY_GRAPH;
const BODY_GRAPH: Graph = Graph::__new(
    "ChargeLine",
    &[op("charge")],
    &[],
    Plan::new(
        &[0],
        &[0, 0],
        &[],
        &[0],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    ),
);

#[derive(Debug)]
struct Declined;

impl fmt::Display for Declined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("card declined")
    }
}

impl std::error::Error for Declined {}

/// Runs instance `index` of `BODY` under `ctx`: it fails when `fails`, else gives `index * 10`.
async fn instance(ctx: &NestCtx, index: u64, fails: bool) -> Outcome<u64> {
    let options = ctx.instance(index);
    let node = (move || async move {
        if fails {
            Err(NodeError::Failed(Box::new(Declined)))
        } else {
            Ok(())
        }
    },);
    execute(&BODY, options, node)
        .await
        .output(move || Ok(index * 10))
}

#[tokio::test(start_paused = true)]
async fn ended_folds_each_instance_and_returns_its_result() {
    let ctx = NestCtx::detached("charge", NestKind::ForEach, &BODY);
    let mut outputs = Vec::new();
    for index in 0..5 {
        let outcome = instance(&ctx, index, index == 3).await;
        outputs.push(ctx.ended(index, outcome));
    }
    let _ = ctx.instance(5);
    ctx.withdrawn(5);
    assert_eq!(outputs[0].as_ref().ok(), Some(&0));
    assert_eq!(outputs[4].as_ref().ok(), Some(&40));
    let error = outputs[3].as_ref().expect_err("instance 3 failed");
    assert_eq!(error.workflow(), "ChargeLine");
    assert_eq!(
        error.path().map(ToString::to_string).as_deref(),
        Some("charge[3]")
    );
    assert_eq!(
        error.to_string(),
        "workflow `ChargeLine` (`charge[3]`) failed: 1 node failed (`charge`)"
    );

    let report = ctx.report();
    assert_eq!(
        (
            report.started,
            report.completed,
            report.failed,
            report.withdrawn
        ),
        (6, 4, 1, 1)
    );
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].0, 3);
    assert_eq!(&*report.failures[0].1, "card declined");
    assert_eq!(
        report.to_string(),
        "charge[0..6]  4 completed · 1 failed (charge[3]: card declined) · 1 withdrawn"
    );
    assert!(
        report.reports.is_empty(),
        "a detached context keeps no report"
    );
}

#[test]
fn completing_is_seen_and_wakes_the_driver() {
    struct Count(AtomicU64);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let count = Arc::new(Count(AtomicU64::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    let ctx = NestCtx::detached("charge", NestKind::ForEach, &BODY);
    let driver = ctx.clone();
    assert!(!driver.completing());
    assert!(driver.poll_completing(&mut cx).is_pending());
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    ctx.complete();
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "the driver was woken");
    assert!(driver.completing());
    assert_eq!(driver.poll_completing(&mut cx), Poll::Ready(()));
}

/// The body of `instance`, after a pause of `pause` ms.
async fn paused_instance(ctx: &NestCtx, index: u64, fails: bool, pause: u64) -> Outcome<u64> {
    let options = ctx.instance(index);
    let node = (move || async move {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if fails {
            Err(NodeError::Failed(Box::new(Declined)))
        } else {
            Ok(())
        }
    },);
    execute(&BODY, options, node)
        .await
        .output(move || Ok(index * 10))
}

/// `order`, then the `ForEach` `charge` over `BODY`; `side` beside them.
static ORDER_NESTS: [NestInfo; 1] = [NestInfo {
    node: 1,
    kind: NestKind::ForEach,
    body: &BODY,
}];
static ORDER_CONTROL: Control = Control::NONE.with_nests(&ORDER_NESTS);
static ORDER: Graph = Graph::__new(
    "Order",
    &[
        op("order"),
        NodeInfo::__new("charge", NodeKind::ForEach, "charge", 2, 1),
        op("side"),
    ],
    &[Edge::__new(0, 1, EdgeKind::Sequence)],
    Plan::new(
        &[0, 1, 0],
        &[0, 1, 1, 1],
        &[1],
        &[0, 2],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(&ORDER_CONTROL),
);

/// A driver that runs three instances one after the other (each pausing 10 ms; the second
/// fails) and collects their failures.
async fn three_instances(ctx: NestCtx) -> Result<(), NodeError> {
    for index in 0..3 {
        let outcome = paused_instance(&ctx, index, index == 1, 10).await;
        let _ = ctx.ended(index, outcome);
    }
    Ok(())
}

/// Runs `ORDER` with `three_instances` as `charge`, and `side` pausing 15 ms.
async fn run_order(options: RunOptions) -> Outcome<()> {
    let tree = (
        (|| async { Ok(()) },),
        (
            (Nest, three_instances),
            (|| async {
                tokio::time::sleep(Duration::from_millis(15)).await;
                Ok(())
            },),
        ),
    );
    execute(&ORDER, options.into(), tree)
        .await
        .output(|| Ok(()))
}

#[tokio::test(start_paused = true)]
async fn instance_events_reach_the_roots_log_and_observers_in_order_with_their_paths() {
    let recorder = Recorder::new();
    let options = RunOptions {
        observers: vec![Arc::new(recorder.clone())],
        ..RunOptions::default()
    };
    let outcome = run_order(options).await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let report = outcome.report;
    let log = report.log();
    let run = report.run().expect("recorded");

    // One log: the root's run id, consecutive sequence numbers, one clock.
    for (i, event) in log.events().iter().enumerate() {
        assert_eq!(event.run, run);
        assert_eq!(event.seq, i as u64);
    }
    assert!(
        log.events().windows(2).all(|w| w[0].at <= w[1].at),
        "in time order: {log:#?}"
    );
    assert_eq!(
        recorder.events(),
        log.events(),
        "observers see the same events"
    );

    // The instances' events, with their paths and the body's node.
    let nested: Vec<(String, Option<&str>, &str)> = log
        .events()
        .iter()
        .filter_map(|e| Some((e.path.as_ref()?.to_string(), e.node_name, e.kind.name())))
        .collect();
    let expected: Vec<(String, Option<&str>, &str)> = (0..3)
        .flat_map(|i| {
            let path = format!("charge[{i}]");
            let end = if i == 1 { "Failed" } else { "Completed" };
            [
                (path.clone(), None, "RunStarted"),
                (path.clone(), Some("charge"), "Requested"),
                (path.clone(), Some("charge"), end),
                (path, None, "RunFinished"),
            ]
        })
        .collect();
    assert_eq!(nested, expected);
    let side_done = log
        .events()
        .iter()
        .position(|e| e.node_name == Some("side") && e.kind.name() == "Completed")
        .expect("side completed");
    let second = |kind: &str| {
        log.events()
            .iter()
            .position(|e| {
                e.path
                    .as_ref()
                    .is_some_and(|p| p.to_string() == "charge[1]")
                    && e.kind.name() == kind
            })
            .expect("charge[1] ran")
    };
    assert!(
        second("Requested") < side_done && side_done < second("Failed"),
        "`side` ends (15 ms) while charge[1] runs (10 to 20 ms)"
    );
    let charge_done = log
        .events()
        .iter()
        .position(|e| {
            e.path.is_none() && e.node_name == Some("charge") && e.kind.name() == "Completed"
        })
        .expect("the nest node completed");
    assert!(
        log.events()[..charge_done]
            .iter()
            .filter(|e| e.path.is_some())
            .count()
            == 12,
        "every instance event precedes the nest node's end"
    );

    // The root's projections count the root's nodes only.
    assert_eq!(log.statuses(), [NodeStatus::Completed; 3]);
    assert_eq!(report.nodes().len(), 3);
    assert_eq!(report.count(NodeStatus::Completed), 3);
    assert_eq!(report.count(NodeStatus::Failed), 0);
    assert_eq!(report.attempts(), 3);
    assert_eq!(
        report.node("order").and_then(|n| n.ended),
        Some(Duration::ZERO),
        "the body's node 0 is not the workflow's"
    );
    let matrix = report.trace_matrix();
    assert_eq!(matrix.rows.len(), 5);
    assert_eq!(
        matrix.columns.len(),
        4 + 2 * 3,
        "start, end and the root nodes only"
    );

    // The nest's line.
    let nest = report.nest("charge").expect("the nest node's report");
    assert_eq!(
        (nest.started, nest.completed, nest.failed, nest.withdrawn),
        (3, 2, 1, 0)
    );
    assert_eq!(nest.min, Some(Duration::from_millis(10)));
    assert_eq!(nest.median, Some(Duration::from_millis(10)));
    let kept: Vec<u64> = nest.reports.iter().map(|(i, _)| *i).collect();
    assert_eq!(kept, [0, 1], "the first instance and the failed one");
    let failed = nest.instance(1).expect("kept");
    assert!(!failed.succeeded());
    assert_eq!(failed.status("charge"), Some(NodeStatus::Failed));
    assert_eq!(failed.run(), Some(run));
    assert!(failed.log().events().iter().all(|e| e.path.is_none()));
    assert_eq!(report.nests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_plain_run_records_nothing_but_still_counts_the_instances() {
    let options = RunOptions {
        record: false,
        report: false,
        ..RunOptions::default()
    };
    let outcome = run_order(options).await;
    assert!(outcome.result.is_ok());
    assert!(outcome.report.log().is_empty());
    let nest = outcome.report.nest("charge").expect("counted");
    assert_eq!((nest.started, nest.completed, nest.failed), (3, 2, 1));
    assert!(nest.reports.is_empty());
    assert_eq!(nest.min, None, "instances without a clock");
}

#[test]
fn the_statuses_of_a_log_are_the_workflows_own_nodes() {
    let event = |seq, node: Option<u32>, kind, path: Option<NodePath>| Event {
        run: RunId(1),
        seq,
        node,
        node_name: node.map(|_| "charge"),
        attempt: u32::from(node.is_some()),
        at: Duration::ZERO,
        kind,
        path,
    };
    let path = || {
        Some(NodePath::new(PathStep {
            node: "charge",
            kind: NestKind::ForEach,
            index: 4,
        }))
    };
    let mut log = EventLog::new();
    let events = [
        event(
            0,
            None,
            EventKind::RunStarted {
                workflow: "Order",
                nodes: 1,
            },
            None,
        ),
        event(1, Some(0), EventKind::Requested, None),
        event(
            2,
            None,
            EventKind::RunStarted {
                workflow: "ChargeLine",
                nodes: 3,
            },
            path(),
        ),
        event(3, Some(2), EventKind::Requested, path()),
        event(
            4,
            Some(0),
            EventKind::Failed {
                error: "card declined".into(),
            },
            path(),
        ),
    ];
    for e in events {
        log.append(e).expect("in order");
    }
    assert_eq!(log.statuses(), [NodeStatus::Running]);
}

#[tokio::test(start_paused = true)]
async fn the_pictures_of_a_run_show_the_instances_nodes_on_its_timeline() {
    let outcome = run_order(RunOptions::default()).await;
    let report = outcome.report;

    let trace = report.to_chrome_trace();
    for name in [
        "\"order\"",
        "\"charge[0]/charge\"",
        "\"charge[1]/charge\"",
        "\"charge[2]/charge\"",
    ] {
        assert!(trace.contains(name), "{name} in {trace}");
    }
    assert!(trace.contains("\"cat\":\"nest\""));
    assert!(trace.contains("\"error\":\"card declined\""));
    // The instances ran one after the other: one lane, after the root's three nodes.
    assert_eq!(trace.matches("\"tid\":4").count(), 3, "{trace}");

    let gantt = report.to_mermaid_gantt();
    assert!(
        gantt.contains("    section charge\n    charge[0]/charge : 0, 10\n"),
        "{gantt}"
    );
    assert!(
        gantt.contains("    charge[1]/charge : crit, 10, 20\n"),
        "{gantt}"
    );

    let svg = report.to_svg_timeline();
    assert!(svg.contains(">charge[2]/charge</text>"), "{svg}");

    let table = report.to_string();
    assert!(
        table.contains("\n  charge[0..3]  2 completed · 1 failed (charge[1]: card declined)\n"),
        "{table}"
    );
}

/// `lines`: a `ForEach` whose body (`Line`) is itself a `ForEach` (`inner`) over `BODY`.
static LINE_NESTS: [NestInfo; 1] = [NestInfo {
    node: 0,
    kind: NestKind::ForEach,
    body: &BODY,
}];
static LINE_CONTROL: Control = Control::NONE.with_nests(&LINE_NESTS);
static LINE: Graph = Graph::__new(
    "Line",
    &[NodeInfo::__new("inner", NodeKind::ForEach, "inner", 1, 1)],
    &[],
    Plan::new(
        &[0],
        &[0, 0],
        &[],
        &[0],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(&LINE_CONTROL),
);
static LINES_NESTS: [NestInfo; 1] = [NestInfo {
    node: 0,
    kind: NestKind::ForEach,
    body: &LINE,
}];
static LINES_CONTROL: Control = Control::NONE.with_nests(&LINES_NESTS);
static LINES: Graph = Graph::__new(
    "Lines",
    &[NodeInfo::__new("lines", NodeKind::ForEach, "lines", 1, 1)],
    &[],
    Plan::new(
        &[0],
        &[0, 0],
        &[],
        &[0],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(&LINES_CONTROL),
);

async fn inner_driver(ctx: NestCtx) -> Result<(), NodeError> {
    for index in 0..2 {
        let outcome = paused_instance(&ctx, index, false, 1).await;
        let _ = ctx.ended(index, outcome);
    }
    Ok(())
}

async fn lines_driver(ctx: NestCtx) -> Result<(), NodeError> {
    for index in 0..2 {
        let options = ctx.instance(index);
        let outcome = execute(&LINE, options, (Nest, inner_driver))
            .await
            .output(|| Ok(()));
        let _ = ctx.ended(index, outcome);
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_nest_inside_an_instance_sends_its_events_straight_to_the_root() {
    let recorder = Recorder::new();
    let options = RunOptions {
        observers: vec![Arc::new(recorder.clone())],
        ..RunOptions::default()
    };
    let outcome = execute(&LINES, options.into(), (Nest, lines_driver))
        .await
        .output(|| Ok(()));
    assert!(outcome.result.is_ok());
    let log = outcome.report.log();
    for (i, event) in log.events().iter().enumerate() {
        assert_eq!(event.seq, i as u64);
    }
    assert!(log.events().windows(2).all(|w| w[0].at <= w[1].at));
    assert_eq!(recorder.events(), log.events());
    let charges: Vec<String> = log
        .events()
        .iter()
        .filter(|e| e.node_name == Some("charge") && e.kind.name() == "Completed")
        .filter_map(|e| Some(e.path.as_ref()?.to_string()))
        .collect();
    assert_eq!(
        charges,
        [
            "lines[0]/inner[0]",
            "lines[0]/inner[1]",
            "lines[1]/inner[0]",
            "lines[1]/inner[1]"
        ]
    );
    let lines = outcome.report.nest("lines").expect("reported");
    assert_eq!((lines.started, lines.completed), (2, 2));
    let first = lines.instance(0).expect("the first instance is kept");
    let inner = first.nest("inner").expect("its own nest");
    assert_eq!((inner.started, inner.completed), (2, 2));
    assert!(
        outcome
            .report
            .to_chrome_trace()
            .contains("\"lines[1]/inner[0]/charge\"")
    );
}

/// A workflow written by hand as `workflow!` would write it: `BODY`, whose `charge` fails
/// when asked to.
struct Payment;

impl crate::runner::Workflow for Payment {
    const GRAPH: Graph = BODY_GRAPH;
    type Input<'a> = bool;
    type Output = u64;

    fn __execute<'a>(
        options: RunSetup,
        fails: bool,
    ) -> impl std::future::Future<Output = Outcome<u64>> {
        let node = (move || async move {
            if fails {
                Err(NodeError::Failed(Box::new(Declined)))
            } else {
                Ok(())
            }
        },);
        async move { execute(&Self::GRAPH, options, node).await.output(|| Ok(7)) }
    }
}

/// `payment`: a sub-workflow step running `Payment`.
static CHECKOUT_NESTS: [NestInfo; 1] = [NestInfo {
    node: 0,
    kind: NestKind::Workflow,
    body: &BODY,
}];
static CHECKOUT_CONTROL: Control = Control::NONE.with_nests(&CHECKOUT_NESTS);
static CHECKOUT: Graph = Graph::__new(
    "Checkout",
    &[NodeInfo::__new(
        "payment",
        NodeKind::Workflow,
        "Payment",
        1,
        1,
    )],
    &[],
    Plan::new(
        &[0],
        &[0, 0],
        &[],
        &[0],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(&CHECKOUT_CONTROL),
);

async fn checkout(fails: bool) -> Outcome<()> {
    let step = (Nest, move |ctx: NestCtx| async move {
        let receipt = super::child::<Payment>(ctx, fails).await?;
        assert_eq!(receipt, 7);
        Ok(())
    });
    execute(&CHECKOUT, RunSetup::default(), step)
        .await
        .output(|| Ok(()))
}

#[tokio::test(start_paused = true)]
async fn a_sub_workflows_report_and_events_nest_in_its_parents() {
    let outcome = checkout(false).await;
    assert!(outcome.result.is_ok());
    let report = outcome.report;
    let payment = report.nest("payment").expect("reported");
    assert_eq!(payment.kind, NestKind::Workflow);
    let child = payment.report().expect("the child's whole report");
    assert_eq!(child.workflow(), "ChargeLine");
    assert_eq!(child.status("charge"), Some(NodeStatus::Completed));
    let paths: Vec<String> = report
        .log()
        .events()
        .iter()
        .filter_map(|e| Some(e.path.as_ref()?.name_of(e.node_name?)))
        .collect();
    assert_eq!(paths, ["payment/charge", "payment/charge"]);
    assert!(report.to_string().contains("\n  payment  1 completed\n"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_sub_workflow_fails_its_step_with_the_childs_error() {
    use std::error::Error as _;
    let outcome = checkout(true).await;
    let error = outcome.result.expect_err("the step failed");
    let step = error.error_of("payment").expect("the step is listed");
    let NodeError::Workflow(child) = step else {
        panic!("not a nested run's failure: {step:?}");
    };
    assert_eq!(child.workflow(), "ChargeLine");
    assert_eq!(
        child.path().map(ToString::to_string).as_deref(),
        Some("payment")
    );
    let source = step.source().expect("the child's error");
    assert_eq!(
        source.to_string(),
        "workflow `ChargeLine` (`payment`) failed: 1 node failed (`charge`)"
    );
    let mut chain = vec![error.to_string()];
    let mut next = error.source();
    while let Some(level) = next {
        chain.push(level.to_string());
        next = level.source();
    }
    assert_eq!(
        chain,
        [
            "workflow `Checkout` failed: 1 node failed (`payment`)",
            "workflow `ChargeLine` (`payment`) failed: 1 node failed (`charge`)",
            "card declined",
        ]
    );
    assert!(
        source
            .downcast_ref::<crate::error::WorkflowError>()
            .is_some(),
        "the step's error's source is the child's `WorkflowError`"
    );
    let payment = outcome.report.nest("payment").expect("reported");
    assert_eq!(payment.failed, 1);
    assert_eq!(
        outcome
            .report
            .node("payment")
            .and_then(|n| n.error.as_deref()),
        Some("workflow `ChargeLine` (`payment`) failed: 1 node failed (`charge`)")
    );
    assert!(!payment.report().expect("kept").succeeded());
}

#[test]
fn pictures_of_a_graph_draw_each_nest_body_beside_its_node() {
    let dot = ORDER.to_dot();
    assert!(dot.contains("    subgraph cluster_n1_body {\n"), "{dot}");
    assert!(
        dot.contains("label=\"charge: ForEach of ChargeLine\""),
        "{dot}"
    );
    assert!(
        dot.contains("        n1_0 [label=\"charge\\ncharge\", shape=box"),
        "{dot}"
    );
    assert!(
        dot.contains("    n1 -> n1_0 [style=dotted, arrowhead=odot];\n"),
        "{dot}"
    );

    let mermaid = ORDER.to_mermaid();
    assert!(
        mermaid.contains("    subgraph n1_body[\"charge: ForEach of ChargeLine\"]\n        n1_0([\"charge\"])\n    end\n    n1 -.-> n1_body\n"),
        "{mermaid}"
    );

    // A body inside a body: ids carry both places.
    let nested = LINES.to_mermaid();
    assert!(nested.contains("        subgraph n0_0_body["), "{nested}");
    assert!(
        nested.contains("            n0_0_0([\"charge\"])"),
        "{nested}"
    );
    assert!(
        LINES
            .to_dot()
            .contains("        n0_0 -> n0_0_0 [style=dotted")
    );
    // `FLOW_DOT_OUT=dir` writes the two graphs there, for Graphviz to check them.
    if let Ok(dir) = std::env::var("FLOW_DOT_OUT") {
        for (name, dot) in [("order", dot), ("lines", LINES.to_dot())] {
            std::fs::write(format!("{dir}/{name}.dot"), dot).expect("written");
        }
    }
}

/// A workflow one of whose steps runs the workflow itself.
static SELF_NESTS: [NestInfo; 1] = [NestInfo {
    node: 0,
    kind: NestKind::Workflow,
    body: &RECURSIVE,
}];
static SELF_CONTROL: Control = Control::NONE.with_nests(&SELF_NESTS);
static RECURSIVE: Graph = Graph::__new(
    "Recursive",
    &[NodeInfo::__new(
        "again",
        NodeKind::Workflow,
        "Recursive",
        1,
        1,
    )],
    &[],
    Plan::new(
        &[0],
        &[0, 0],
        &[],
        &[0],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(&SELF_CONTROL),
);

#[test]
fn a_workflow_that_runs_itself_is_drawn_once() {
    let dot = RECURSIVE.to_dot();
    assert!(!dot.contains("subgraph"), "{dot}");
    assert!(!RECURSIVE.to_mermaid().contains("subgraph"));
}

#[cfg(feature = "progress")]
#[tokio::test(start_paused = true)]
async fn a_progress_bar_ticks_once_per_instance() {
    let progress = Arc::new(crate::progress::Progress::with_bar(
        indicatif::ProgressBar::hidden(),
    ));
    let options = RunOptions {
        observers: vec![progress.clone()],
        ..RunOptions::default()
    };
    let outcome = run_order(options).await;
    assert!(outcome.result.is_ok());
    // The three nodes of `Order` and the three instances of `charge`, not the instances'
    // own nodes, and the instances' ends do not finish the bar.
    assert_eq!(progress.bar().length(), Some(6));
    assert_eq!(progress.bar().position(), 6);
    assert!(progress.bar().is_finished());
}

#[tokio::test(start_paused = true)]
async fn the_summary_of_many_instances_stays_bounded() {
    // Fewer under miri, which runs the same checks a thousand times slower.
    let count: u64 = if cfg!(miri) { 300 } else { 3_000 };
    let ctx = NestCtx {
        report: true,
        ..NestCtx::detached("charge", NestKind::ForEach, &BODY)
    };
    for index in 0..count {
        let outcome = paused_instance(&ctx, index, index % 2 == 1, index % 7).await;
        let _ = ctx.ended(index, outcome);
    }
    let report = ctx.report();
    let half = count / 2;
    assert_eq!(
        (report.started, report.completed, report.failed),
        (count, half, half)
    );
    assert_eq!(report.failures.len(), 100, "the first 100 failures");
    assert_eq!(report.failures[99].0, 199);
    assert_eq!(report.more_failures(), half - 100);
    let kept: Vec<u64> = report.reports.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        kept,
        [0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19],
        "instance 0 and 10 failed ones"
    );
    assert_eq!(report.min, Some(Duration::ZERO));
    assert_eq!(report.max, Some(Duration::from_millis(6)));
    if count == 3_000 {
        assert_eq!(
            report.to_string(),
            "charge[0..3000]  1,500 completed · 1,500 failed (charge[1]: card declined; \
             charge[3]: card declined; charge[5]: card declined; and 1,497 more)"
        );
    }
}

/// One `ForEach`, `charge`, over `BODY`.
static SOLO_NESTS: [NestInfo; 1] = [NestInfo {
    node: 0,
    kind: NestKind::ForEach,
    body: &BODY,
}];
static SOLO_CONTROL: Control = Control::NONE.with_nests(&SOLO_NESTS);
static SOLO: Graph = Graph::__new(
    "Solo",
    &[NodeInfo::__new("charge", NodeKind::ForEach, "charge", 1, 1)],
    &[],
    Plan::new(
        &[0],
        &[0, 0],
        &[],
        &[0],
        &[],
        &[0],
        &[],
        &[],
        &[],
        &[],
        &[],
        &[],
        FailurePolicy::ContinueIndependent,
    )
    .with_control(&SOLO_CONTROL),
);

#[tokio::test(start_paused = true)]
async fn observers_see_an_instances_events_when_they_happen_not_when_the_node_ends() {
    let recorder = Recorder::new();
    let options = RunOptions {
        observers: vec![Arc::new(recorder.clone())],
        ..RunOptions::default()
    };
    let driver = |ctx: NestCtx| async move {
        for (index, pause) in [(0, 10), (1, 1_000)] {
            let outcome = paused_instance(&ctx, index, false, pause).await;
            let _ = ctx.ended(index, outcome);
        }
        Ok(())
    };
    let run = execute(&SOLO, options.into(), (Nest, driver));
    let mut run = std::pin::pin!(async move { run.await.output(|| Ok(())) });
    let early = tokio::time::timeout(Duration::from_millis(500), run.as_mut()).await;
    assert!(early.is_err(), "the second instance still runs");
    let seen: Vec<String> = recorder
        .events()
        .iter()
        .filter_map(|e| Some(format!("{} {}", e.path.as_ref()?, e.kind.name())))
        .collect();
    assert_eq!(
        seen,
        [
            "charge[0] RunStarted",
            "charge[0] Requested",
            "charge[0] Completed",
            "charge[0] RunFinished",
            "charge[1] RunStarted",
            "charge[1] Requested",
        ]
    );
    let outcome = run.await;
    assert!(outcome.result.is_ok());
    assert_eq!(recorder.events(), outcome.report.log().events());
}

/// A workflow whose one step never ends, and counts its drops.
struct Stuck;

static STUCK_DROPS: AtomicU64 = AtomicU64::new(0);

struct CountDrop;

impl Drop for CountDrop {
    fn drop(&mut self) {
        STUCK_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

impl crate::runner::Workflow for Stuck {
    const GRAPH: Graph = BODY_GRAPH;
    type Input<'a> = ();
    type Output = ();

    fn __execute<'a>(options: RunSetup, (): ()) -> impl std::future::Future<Output = Outcome<()>> {
        let node = (|| async {
            let _guard = CountDrop;
            std::future::pending::<()>().await;
            Ok(())
        },);
        async move { execute(&Self::GRAPH, options, node).await.output(|| Ok(())) }
    }
}

#[tokio::test(start_paused = true)]
async fn a_sub_workflow_is_cancelled_with_its_parent() {
    let step = (Nest, |ctx: NestCtx| async move {
        super::child::<Stuck>(ctx, ()).await
    });
    let options = RunOptions {
        deadline: Some(Duration::from_millis(100)),
        ..RunOptions::default()
    };
    let outcome = execute(&CHECKOUT, options.into(), step)
        .await
        .output(|| Ok(()));
    let error = outcome.result.expect_err("cancelled");
    assert!(error.is_cancelled());
    assert_eq!(
        STUCK_DROPS.load(Ordering::SeqCst),
        1,
        "the child's step was dropped"
    );
    let payment = outcome.report.nest("payment").expect("reported");
    assert_eq!(
        (
            payment.started,
            payment.completed,
            payment.failed,
            payment.withdrawn
        ),
        (1, 0, 0, 1)
    );
    let child: Vec<String> = outcome
        .report
        .log()
        .events()
        .iter()
        .filter(|e| e.path.is_some())
        .map(|e| e.kind.name().to_string())
        .collect();
    assert_eq!(
        child,
        ["RunStarted", "Requested"],
        "the child never ended: it was dropped"
    );
    assert_eq!(outcome.report.status("payment"), Some(NodeStatus::Aborted));
}

#[tokio::test(start_paused = true)]
async fn instances_reuse_the_scheduler_lists_of_those_that_ended() {
    let ctx = NestCtx::detached("charge", NestKind::ForEach, &BODY);
    let pooled = |ctx: &NestCtx| ctx.pool.len();
    assert_eq!(pooled(&ctx), 0);
    // A failed instance gives its lists back; the next one starts from clean ones.
    let failed = paused_instance(&ctx, 0, true, 1).await;
    assert!(ctx.ended(0, failed).is_err());
    assert_eq!(pooled(&ctx), 1, "the lists of the instance that ended");
    let completed = paused_instance(&ctx, 1, false, 1).await;
    assert_eq!(ctx.ended(1, completed).ok(), Some(10));
    assert_eq!(pooled(&ctx), 1, "taken by instance 1, then given back");
    // Two at once take two sets.
    let (a, b) = tokio::join!(
        paused_instance(&ctx, 2, false, 2),
        paused_instance(&ctx, 3, true, 1)
    );
    assert_eq!(ctx.ended(2, a).ok(), Some(20));
    let error = ctx
        .ended(3, b)
        .err()
        .map(|e| e.path().map(ToString::to_string));
    assert_eq!(error, Some(Some("charge[3]".to_string())));
    assert_eq!(pooled(&ctx), 2);
}

#[test]
fn an_instance_that_records_nothing_gets_no_path() {
    let ctx = NestCtx::detached("charge", NestKind::ForEach, &BODY);
    assert!(
        ctx.instance(3).path.is_none(),
        "no events and no nests of its own"
    );
    let sink = Arc::new(EventSink::new(RunId::next(), tokio::time::Instant::now()));
    let recorded = NestCtx {
        sink: Some(sink),
        ..NestCtx::detached("charge", NestKind::ForEach, &BODY)
    };
    assert_eq!(
        recorded.instance(3).path.map(|p| p.to_string()).as_deref(),
        Some("charge[3]")
    );
    let holds_nests = NestCtx::detached("outer", NestKind::Loop, &ORDER);
    assert_eq!(
        holds_nests
            .instance(2)
            .path
            .map(|p| p.to_string())
            .as_deref(),
        Some("outer@2")
    );
}
