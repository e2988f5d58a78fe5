//! The runtime of nested runs under a workflow `workflow!` generated: a sub-workflow run by
//! `child` inside an ordinary operation, with a detached context.

use flowdag::__private::{NestCtx, NestKind, child};
use flowdag::prelude::*;

#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("card declined")
    }
}

impl std::error::Error for Declined {}

async fn charge(amount: u64) -> Result<u64, Declined> {
    if amount > 100 {
        Err(Declined)
    } else {
        Ok(amount)
    }
}

workflow! {
    /// Charges one amount.
    Payment(amount: u64) -> u64 {
        receipt = Operation(charge(amount))
        => receipt
    }
}

async fn pay(amount: u64) -> Result<u64, NodeError> {
    let ctx = NestCtx::detached("payment", NestKind::Workflow, &<Payment as Workflow>::GRAPH);
    child::<Payment>(ctx, amount).await
}

workflow! {
    /// Pays through `Payment`, run inside one operation.
    Checkout(amount: u64) -> u64 {
        paid = Operation(pay(amount))
        => paid
    }
}

#[tokio::test]
async fn a_child_run_gives_its_output() {
    assert_eq!(Checkout::run(40).await.ok(), Some(40));
}

#[tokio::test]
async fn a_failed_child_run_is_the_steps_failure_with_the_childs_error() {
    let error = Checkout::run(500).await.expect_err("declined");
    let step = error.error_of("paid").expect("the step failed");
    let Some(NodeError::Workflow(child)) = step.downcast_ref::<NodeError>() else {
        panic!("not a nested run's failure: {step:?}");
    };
    assert_eq!(child.workflow(), "Payment");
    assert_eq!(
        child.path().map(ToString::to_string).as_deref(),
        Some("payment")
    );
    assert!(
        child
            .error_of("receipt")
            .is_some_and(|e| e.downcast_ref::<Declined>().is_some())
    );
    assert_eq!(
        step.to_string(),
        "workflow `Payment` (`payment`) failed: 1 node failed (`receipt`)"
    );
}

#[tokio::test]
async fn a_run_with_a_child_run_is_send() {
    let handle = tokio::spawn(Checkout::run(7));
    assert_eq!(handle.await.ok().and_then(Result::ok), Some(7));
}
