//! Nest instances run by hand-made drivers on hand-built graphs: what the context folds, and
//! where the instances' events go.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use super::{NestCtx, NestKind};
use crate::error::NodeError;
use crate::graph::{Graph, NodeInfo, NodeKind, Plan};
use crate::policy::FailurePolicy;
use crate::report::Outcome;
use crate::support::execute;

const fn op(name: &'static str) -> NodeInfo {
    NodeInfo::__new(name, NodeKind::Operation, name, 1, 1)
}

/// A body of one operation, `charge`.
static BODY: Graph = Graph::__new(
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
