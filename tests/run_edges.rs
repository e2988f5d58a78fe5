//! Faults at the edges of a run: a panic whose payload panics again when dropped, a run deadline
//! without a tokio timer, and a large error message retried.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use flowdag::prelude::*;
use flowdag::{CancelReason, EventKind};

#[derive(Debug)]
struct Failure(String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// A panic payload whose own `Drop` panics.
struct Grenade;

impl Drop for Grenade {
    fn drop(&mut self) {
        panic!("the payload's drop panicked too");
    }
}

async fn throw_grenade() -> Result<u32, Failure> {
    std::panic::panic_any(Grenade)
}

async fn fine() -> Result<u32, Failure> {
    Ok(1)
}

workflow! {
    /// One operation panics with a payload that panics again when dropped.
    Grenades() {
        Parallel {
            thrown = Operation(throw_grenade()),
            other = Operation(fine()),
        }
    }
}

#[tokio::test]
async fn a_panic_payload_whose_drop_panics_fails_its_node() {
    let outcome = Grenades::runner().execute(()).await;
    let error = outcome.result.expect_err("the node panicked");
    assert!(
        matches!(
            error.error_of("thrown"),
            Some(NodeError::Panicked(m)) if m == "a panic with a non-string payload"
        ),
        "{:?}",
        error.error_of("thrown")
    );
    let other = outcome.report.node("other").expect("reported");
    assert_eq!(other.status, NodeStatus::Completed);
}

workflow! {
    /// Two steps, for a run with a deadline.
    Steps() -> u32 {
        Sequential {
            first = Operation(fine()),
            second = Operation(fine()),
        }
        => first + second
    }
}

#[test]
fn a_run_deadline_without_a_timer_cancels_the_run_with_one_message() {
    let after = Duration::from_millis(1_500);
    let outcome = futures::executor::block_on(Steps::runner().deadline(after).execute(()));
    let error = outcome.result.expect_err("no timer for the deadline");
    assert_eq!(error.cancel_reason(), Some(CancelReason::NoTimer(after)));
    for failure in error.failures() {
        assert!(matches!(failure.error, NodeError::Cancelled), "{failure:?}");
        assert_eq!(failure.attempts, 0, "{failure:?}");
    }
    let message = error.to_string();
    assert_eq!(
        message,
        "workflow `Steps` was cancelled before it started: its deadline of 1.5s needs a tokio \
         runtime with time enabled"
    );
    for node in outcome.report.nodes() {
        assert_eq!(node.status, NodeStatus::Aborted, "{node:?}");
        assert_eq!(node.error.as_deref(), Some("cancelled"), "{node:?}");
    }
}

/// Fails its first attempt with a message of `len` bytes.
async fn fails_once(attempt: &std::cell::Cell<u32>, len: usize) -> Result<u32, Failure> {
    attempt.set(attempt.get() + 1);
    Err(Failure("x".repeat(len)))
}

workflow! {
    /// A step that fails every attempt, retried once.
    Retried(attempt: &std::cell::Cell<u32>) {
        big = Operation(fails_once(attempt, 1 << 20), retries = 1, backoff = "1ms")
    }
}

#[tokio::test(start_paused = true)]
async fn an_attempt_error_is_rendered_once_for_the_report_and_the_events() {
    let attempt = std::cell::Cell::new(0);
    let outcome = Retried::runner().execute(&attempt).await;
    assert_eq!(attempt.get(), 2);
    let node = outcome.report.node("big").expect("reported");
    let retried = outcome
        .report
        .log()
        .events()
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Retrying { error, .. } => Some(Arc::clone(error)),
            _ => None,
        })
        .expect("a Retrying event");
    let failed = outcome
        .report
        .log()
        .events()
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Failed { error } => Some(Arc::clone(error)),
            _ => None,
        })
        .expect("a Failed event");
    assert_eq!(retried.len(), 1 << 20);
    assert_eq!(node.failed_attempts.len(), 1);
    assert!(
        Arc::ptr_eq(&node.failed_attempts[0], &retried),
        "the retried attempt's error is one allocation"
    );
    let final_error = node.error.as_ref().expect("the node failed");
    assert!(
        Arc::ptr_eq(final_error, &failed),
        "the final error is one allocation"
    );
}
