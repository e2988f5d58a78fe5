//! Sub-workflow steps in the DSL: `name = Workflow(Child(args..))` runs another workflow as
//! one step; its output is the step's, and its failure is the step's, with the child's
//! `WorkflowError` reachable.

mod common;

use flowdag::prelude::*;
use flowdag::{NodeKind, NodeStatus};

use common::Boom;

async fn price(sku: &str) -> Result<u64, Boom> {
    match sku {
        "missing" => Err(Boom("no such sku")),
        _ => Ok(sku.len() as u64 * 100),
    }
}

async fn tax(amount: &u64, rate: u64) -> Result<u64, Boom> {
    Ok(amount * rate / 100)
}

workflow! {
    /// The child: prices one sku and adds the tax.
    Payment(sku: &str, rate: u64) -> u64 {
        Sequential {
            p = Operation(price(sku)),
            t = Operation(tax(&p, rate)),
        }
        => p + t
    }
}

async fn lookup(order: u32) -> Result<String, Boom> {
    Ok(match order {
        0 => "missing".to_string(),
        _ => "abc".to_string(),
    })
}

workflow! {
    Order(order: u32) -> u64 {
        Sequential {
            sku = Operation(lookup(order)),
            paid = Workflow(Payment(&sku, 20)),
        }
        => paid + 1
    }
}

#[tokio::test]
async fn the_childs_output_is_the_steps_output() {
    assert_eq!(Order::run(1).await.expect("the run succeeds"), 361);
    let graph = Order::GRAPH;
    assert_eq!(graph.nodes()[1].kind, NodeKind::Workflow);
    assert_eq!(graph.nodes()[1].label, "Payment(&sku, 20)");
}

#[tokio::test]
async fn a_failed_child_fails_the_step_with_the_childs_error() {
    let outcome = Order::runner().execute(0).await;
    assert_eq!(outcome.report.status("paid"), Some(NodeStatus::Failed));
    let error = outcome.result.expect_err("the run fails");
    let failed: Vec<_> = error.failed().collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].node, "paid");
    let NodeError::Workflow(child) = &failed[0].error else {
        panic!("expected the child's error, got {:?}", failed[0].error);
    };
    assert_eq!(child.workflow(), "Payment");
    let inside: Vec<_> = child.failed().collect();
    assert_eq!(inside[0].node, "p");
    assert!(inside[0].error.to_string().contains("no such sku"));
}

workflow! {
    /// An unnamed step is named after the child; a child without parameters takes `()`.
    Twice() {
        Sequential {
            Workflow(Order(1)),
            Workflow(Order(2)),
        }
    }
}

#[tokio::test]
async fn unnamed_steps_are_named_after_the_child() {
    Twice::run().await.expect("the run succeeds");
    let names: Vec<_> = Twice::GRAPH.nodes().iter().map(|n| n.name).collect();
    assert_eq!(names, ["Order#1", "Order#2"]);
}

#[test]
fn a_run_with_a_sub_workflow_is_send() {
    drop(common::require_send(Order::run(1)));
}

workflow! {
    /// A child run per item: a `ForEach` whose body is one sub-workflow step.
    Orders(skus: &[&'static str]) -> Vec<Result<u64, String>> {
        paid = ForEach(sku in skus.iter(), max_concurrency = 2, on_failure = collect) {
            charge = Workflow(Payment(sku, 10)) => charge
        }
        => paid.iter().map(|r| r.as_ref().copied().map_err(|e| e.to_string())).collect()
    }
}

#[tokio::test]
async fn a_foreach_runs_a_child_workflow_per_item() {
    let outcome = Orders::runner().execute(&["ab", "missing", "abc"]).await;
    let results = outcome.result.expect("collect never fails the node");
    assert_eq!(results[0], Ok(220));
    assert_eq!(results[2], Ok(330));
    // The failed item's error names its instance.
    let failure = results[1].as_ref().expect_err("no such sku");
    assert!(failure.contains("paid[1]"), "{failure}");
    let nest = outcome.report.nest("paid").expect("the ForEach's report");
    assert_eq!((nest.started, nest.completed, nest.failed), (3, 2, 1));
    // The events carry the whole path: the child's node `p` inside the step `charge` of
    // instance 1, then that step.
    let failed: Vec<(String, &str)> = outcome
        .report
        .log()
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Failed { .. }))
        .filter_map(|e| Some((e.path.as_ref()?.to_string(), e.node_name?)))
        .collect();
    assert_eq!(
        failed,
        [
            ("paid[1]/charge".to_string(), "p"),
            ("paid[1]".to_string(), "charge")
        ]
    );
}

#[tokio::test]
async fn the_parents_report_shows_the_childs_table_under_the_step() {
    let outcome = Order::runner().execute(1).await;
    let text = outcome.report.to_string();
    let lines: Vec<&str> = text.lines().collect();
    let step = lines
        .iter()
        .position(|l| l.starts_with("paid "))
        .expect("the step's row");
    let child: Vec<&str> = lines[step + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .copied()
        .collect();
    assert!(
        child.iter().any(|l| l.starts_with("  | p "))
            && child.iter().any(|l| l.starts_with("  | t ")),
        "the child's nodes are rows under the step:\n{text}"
    );
    assert!(
        child.iter().any(|l| l.contains("Payment: succeeded")),
        "the child's summary line is there:\n{text}"
    );
}
