//! The `Workflow` trait and the generic `Runner`: code generic over workflows, the three input
//! shapes, and the runner's own traits.

use std::num::NonZeroUsize;

use flowdag::prelude::*;
use flowdag::{Graph, Recorder};

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

async fn add(a: &u64, b: &u64) -> Result<u64, Never> {
    Ok(a + b)
}

async fn constant(n: u64) -> Result<u64, Never> {
    Ok(n)
}

workflow! {
    /// No parameter: its input is `()`.
    Zero() -> u64 {
        n = Operation(constant(5))
        => n
    }
}

workflow! {
    /// One parameter: its input is the parameter itself.
    One(n: u64) -> u64 {
        m = Operation(constant(n))
        => m
    }
}

workflow! {
    /// Two parameters, one borrowed: its input is a tuple.
    Two(a: &u64, b: u64) -> u64 {
        sum = Operation(add(a, &b))
        => sum
    }
}

/// Generic over workflows: any workflow's graph, through the trait.
fn node_count<W: Workflow>() -> usize {
    W::GRAPH.nodes().len()
}

/// Generic over workflows without parameters: runs one with an observer. Under `for<'a>`, the
/// input's `where Self: 'a` asks for `W: 'static`.
async fn run_observed<W: for<'a> Workflow<Input<'a> = ()> + 'static>(
    recorder: &Recorder,
) -> Outcome<W::Output> {
    Runner::<W>::new()
        .observer(recorder.clone())
        .execute(())
        .await
}

#[test]
fn code_generic_over_workflows_reads_graphs_and_runs_them() {
    assert_eq!(node_count::<Zero>(), 1);
    assert_eq!(node_count::<Two>(), 1);
    let graph: Graph = <Two as Workflow>::GRAPH;
    assert_eq!(graph.name(), Two::GRAPH.name());

    let recorder = Recorder::new();
    let outcome = futures::executor::block_on(run_observed::<Zero>(&recorder));
    assert_eq!(outcome.result.expect("the run succeeds"), 5);
    let run = outcome.report.run().expect("execute records the run");
    assert_eq!(recorder.log(run).events(), outcome.report.log().events());
}

#[test]
fn inputs_are_unit_the_value_or_a_tuple() {
    let a = 40;
    futures::executor::block_on(async {
        assert_eq!(Zero::runner().execute(()).await.result.ok(), Some(5));
        assert_eq!(One::runner().execute(7).await.result.ok(), Some(7));
        assert_eq!(Two::runner().execute((&a, 2)).await.result.ok(), Some(42));
        // `run` takes the same input and returns the result alone.
        assert_eq!(Two::runner().run((&a, 2)).await.ok(), Some(42));
        assert_eq!(Zero::runner().run(()).await.ok(), Some(5));
        // The inherent shortcut takes the parameters one by one.
        assert_eq!(Two::run(&a, 2).await.ok(), Some(42));
    });
}

#[test]
fn a_runner_run_keeps_no_log_but_observers_see_every_event() {
    let recorder = Recorder::new();
    let value = futures::executor::block_on(One::runner().observer(recorder.clone()).run(3));
    assert_eq!(value.ok(), Some(3));
    let kinds: Vec<&str> = recorder.events().iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds.first(), Some(&"RunStarted"));
    assert_eq!(kinds.last(), Some(&"RunFinished"));
}

#[test]
fn a_runner_is_cloned_with_its_options_and_debug_prints_them() {
    let runner = One::runner()
        .max_concurrency(NonZeroUsize::MIN)
        .failure_policy(FailurePolicy::FailFast)
        .record(false);
    let copy = runner.clone();
    let text = format!("{copy:?}");
    assert!(text.contains("\"One\""), "{text}");
    assert!(text.contains("FailFast"), "{text}");
    assert!(text.contains("record: false"), "{text}");
    let outcome = futures::executor::block_on(copy.execute(9));
    assert_eq!(outcome.result.ok(), Some(9));
    assert!(
        outcome.report.log().is_empty(),
        "record(false) carried over to the clone"
    );
    assert_eq!(
        format!("{:?}", Runner::<One>::default()),
        format!("{:?}", One::runner())
    );
    drop(runner);
}
