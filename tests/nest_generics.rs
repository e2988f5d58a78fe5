//! Generic workflows and nested graphs together: a `ForEach` and a `Loop` inside a generic
//! workflow (their bodies see the workflow's type and lifetime parameters), and sub-workflow
//! steps that call generic workflows, with the type inferred from the arguments or given with a
//! turbofish. And runs of workflows with a lifetime parameter are `Send`.

mod common;

use flowdag::prelude::*;
use flowdag::{NodeKind, NodeStatus};

use common::Boom;

async fn weigh<T: Clone + Into<u64>>(item: &T, factor: u64) -> Result<u64, Boom> {
    let weight: u64 = item.clone().into();
    if weight == 0 {
        Err(Boom("weightless"))
    } else {
        Ok(weight * factor)
    }
}

async fn factor() -> Result<u64, Boom> {
    Ok(10)
}

workflow! {
    /// A `ForEach` over a borrowed slice of a generic item type, reading a parent node.
    pub Weigh<'a, T: Clone + Into<u64> + Sync>(items: &'a [T]) -> Vec<u64> {
        Sequential {
            f = Operation(factor()),
            weights = ForEach(item in items.iter(), max_concurrency = 2) {
                w = Operation(weigh(item, f))
                => w
            },
        }
        => weights.clone()
    }
}

#[tokio::test]
async fn a_foreach_inside_a_generic_workflow_runs_for_each_type() {
    assert_eq!(
        Weigh::run(&[1u8, 2, 3]).await.expect("every item weighs"),
        [10, 20, 30]
    );
    assert_eq!(Weigh::run(&[7u32]).await.expect("every item weighs"), [70]);
    // A failed instance fails the generic workflow's ForEach like any other.
    let outcome = Weigh::<u16>::runner().execute(&[4, 0, 5]).await;
    assert_eq!(outcome.report.status("weights"), Some(NodeStatus::Failed));
    let nest = outcome
        .report
        .nest("weights")
        .expect("the ForEach's report");
    assert_eq!(nest.failures.first().map(|f| f.0), Some(1));
    // One graph for every type, with the body nested in it.
    assert_eq!(Weigh::<u8>::GRAPH.to_dot(), Weigh::<u32>::GRAPH.to_dot());
    assert_eq!(Weigh::<u8>::GRAPH.nodes()[1].kind, NodeKind::ForEach);
}

async fn grow<T: Clone + Into<u64>>(prev: Option<&u64>, step: &T) -> Result<u64, Boom> {
    let step: u64 = step.clone().into();
    Ok(prev.copied().unwrap_or(0) + step)
}

workflow! {
    /// A `Loop` whose body reads a generic parameter and the previous iteration.
    pub Grow<T: Clone + Into<u64> + Sync>(step: &T, limit: u64) -> u64 {
        total = Loop(max = 50, prev = last) {
            n = Operation(grow(last, step))
            => n
        } until (n >= limit)
        => total
    }
}

#[tokio::test]
async fn a_loop_inside_a_generic_workflow_reads_its_parameters() {
    assert_eq!(Grow::run(&3u8, 10).await.expect("the loop ends"), 12);
    assert_eq!(Grow::run(&5u32, 5).await.expect("the loop ends"), 5);
}

workflow! {
    /// Calls the generic `Weigh` as a sub-workflow step: a turbofish names the item type (the
    /// step names the child's graph in a constant, where rustc infers nothing).
    pub Heaviest(items: &[u8]) -> u64 {
        weights = Workflow(Weigh::<u8>(items))
        => weights.iter().copied().max().unwrap_or(0)
    }
}

workflow! {
    /// Calls the generic `Grow` with a turbofish, then `Weigh` over the items.
    pub Both(items: &[u16]) -> (u64, u64) {
        Parallel {
            grown = Workflow(Grow::<u16>(&2, 7)),
            weighed = Workflow(Weigh::<u16>(items)),
        }
        => (grown, weighed.iter().sum())
    }
}

#[tokio::test]
async fn a_sub_workflow_step_calls_a_generic_workflow() {
    assert_eq!(
        Heaviest::run(&[3, 9, 4]).await.expect("every item weighs"),
        90
    );
    assert_eq!(Both::run(&[1, 2]).await.expect("both succeed"), (8, 30));
    // The child's failure is the step's, with the generic child's error reachable.
    let outcome = Heaviest::runner().execute(&[3, 0]).await;
    let error = outcome.result.expect_err("an item weighs nothing");
    let failed: Vec<_> = error.failed().collect();
    assert_eq!(failed[0].node, "weights");
    let NodeError::Workflow(child) = &failed[0].error else {
        panic!("expected the child's error, got {:?}", failed[0].error);
    };
    assert_eq!(child.workflow(), "Weigh");
    // The child's report nests in the parent's, with the child's own nest inside it.
    let inner = outcome
        .report
        .nest("weights")
        .and_then(|n| n.report())
        .expect("the child's report");
    assert_eq!(inner.nest("weights").map(|n| n.failed), Some(1));
}

async fn first(items: &[u64]) -> Result<usize, Boom> {
    if items.is_empty() {
        Err(Boom("no items"))
    } else {
        Ok(0)
    }
}

workflow! {
    /// A child with a declared lifetime, whose output borrows its parameter.
    pub FirstOf<'a>(items: &'a [u64]) -> &'a u64 {
        at = Operation(first(items))
        => &items[at]
    }
}

workflow! {
    /// Calls `FirstOf` as a step: the step's output is the child's reference.
    pub Lead<'a>(items: &'a [u64]) -> &'a u64 {
        lead = Workflow(FirstOf(items))
        => lead
    }
}

#[tokio::test]
async fn a_sub_workflow_step_calls_a_workflow_with_a_lifetime() {
    let items = [5u64, 6];
    let lead = Lead::run(&items).await.expect("one item at least");
    assert!(std::ptr::eq(lead, &items[0]));
    assert!(Lead::run(&[]).await.is_err());
}

#[test]
fn runs_with_generic_nests_are_send() {
    drop(common::require_send(Weigh::run(&[1u8])));
    drop(common::require_send(Heaviest::run(&[1])));
    drop(common::require_send(Both::run(&[1])));
    drop(common::require_send(Lead::run(&[1])));
}

static WEIGHTS: [u64; 2] = [4, 2];

async fn pick(items: &[u64]) -> Result<usize, Boom> {
    first(items).await
}

workflow! {
    /// A workflow with a lifetime parameter and no nest.
    pub Pick<'a>(items: &'a [u64]) -> &'a u64 {
        at = Operation(pick(items))
        => &items[at]
    }
}

#[tokio::test]
async fn workflows_with_a_lifetime_parameter_can_be_spawned() {
    // `W::run` of a workflow with a declared lifetime is `Send` (rustc cannot prove it of an
    // `async fn` there), with or without nests.
    let picked = tokio::spawn(Pick::run(&WEIGHTS));
    let lead = tokio::spawn(Lead::run(&WEIGHTS));
    let weighed = tokio::spawn(Weigh::run(&WEIGHTS));
    assert!(std::ptr::eq(
        picked.await.expect("joined").expect("an item"),
        &WEIGHTS[0]
    ));
    assert!(std::ptr::eq(
        lead.await.expect("joined").expect("an item"),
        &WEIGHTS[0]
    ));
    assert_eq!(weighed.await.expect("joined").expect("all weigh"), [40, 20]);
}
