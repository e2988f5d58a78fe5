//! Saga compensation (`compensate = ..`): a failed run undoes its completed steps in reverse
//! graph order, retries a compensation with its step's policy, stops at one that fails for
//! good, and does nothing when the run succeeds or for steps that never completed.

use std::sync::Mutex;
use std::time::Duration;

use flowdag::prelude::*;
use flowdag::{CompensationOutcome, EventKind};

#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

/// What the operations did, in order, per test (each test uses its own order number).
static EFFECTS: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());

fn effect(order: u64, what: String) {
    EFFECTS.lock().expect("not poisoned").push((order, what));
}

fn effects(order: u64) -> Vec<String> {
    EFFECTS
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|(o, _)| *o == order)
        .map(|(_, what)| what.clone())
        .collect()
}

fn count(order: u64, what: &str) -> usize {
    effects(order).iter().filter(|e| *e == what).count()
}

async fn reserve(order: u64) -> Result<String, Refused> {
    effect(order, "reserve".into());
    Ok(format!("stock-{order}"))
}

async fn release(order: u64, stock: &str) -> Result<(), Refused> {
    effect(order, format!("release {stock}"));
    Ok(())
}

async fn charge(order: u64, stock: &str) -> Result<u32, Refused> {
    effect(order, format!("charge for {stock}"));
    Ok(42)
}

/// Fails its first `fails` attempts (counted in the effects), then refunds.
async fn refund(order: u64, receipt: &u32, fails: usize) -> Result<(), Refused> {
    let tries = count(order, "refund attempt");
    effect(order, "refund attempt".into());
    if tries < fails {
        return Err(Refused("the bank is down"));
    }
    effect(order, format!("refund {receipt}"));
    Ok(())
}

/// Ships when `ok`, else fails.
async fn ship(order: u64, ok: bool) -> Result<(), Refused> {
    effect(order, "ship".into());
    match ok {
        true => Ok(()),
        false => Err(Refused("no courier")),
    }
}

workflow! {
    Checkout(order: u64, ships: bool, refund_fails: usize) -> u32 {
        Sequential {
            stock = Operation(reserve(order), compensate = release(order, &stock)),
            receipt = Operation(
                charge(order, &stock),
                retries = 3,
                backoff = "1ms",
                compensate = refund(order, &receipt, refund_fails),
            ),
            Operation(ship(order, ships)),
        }
        => receipt
    }
}

/// The bpm-engine seed's case: reserve stock, charge, ship; ship fails; the charge is
/// refunded, then the reservation released.
#[tokio::test]
async fn bpm_seed_order() {
    let outcome = Checkout::runner().execute((1, false, 0)).await;
    let error = outcome.result.expect_err("shipping failed");
    assert_eq!(
        effects(1),
        [
            "reserve",
            "charge for stock-1",
            "ship",
            "refund attempt",
            "refund 42",
            "release stock-1",
        ]
    );
    // The error and the report list both compensations, in the order they ran.
    let undone: Vec<(&str, &CompensationOutcome)> = error
        .compensations()
        .iter()
        .map(|c| (c.node(), c.outcome()))
        .collect();
    assert_eq!(
        undone,
        [
            ("receipt", &CompensationOutcome::Compensated),
            ("stock", &CompensationOutcome::Compensated),
        ]
    );
    assert!(error.compensated());
    assert_eq!(outcome.report.compensations(), error.compensations());
    // The events: the compensations come after the failure and before the run's end.
    let events: Vec<(Option<&str>, &str)> = outcome
        .report
        .log()
        .events()
        .iter()
        .map(|e| (e.node_name, e.kind.name()))
        .collect();
    let tail = &events[events.len() - 6..];
    assert_eq!(
        tail,
        [
            (Some("ship"), "Failed"),
            (Some("receipt"), "Compensating"),
            (Some("receipt"), "Compensated"),
            (Some("stock"), "Compensating"),
            (Some("stock"), "Compensated"),
            (None, "RunFinished"),
        ]
    );
}

#[tokio::test]
async fn a_run_that_succeeds_compensates_nothing() {
    let outcome = Checkout::runner().execute((2, true, 0)).await;
    assert_eq!(outcome.result.expect("it ships"), 42);
    assert_eq!(effects(2), ["reserve", "charge for stock-2", "ship"]);
    assert!(outcome.report.compensations().is_empty());
    assert!(
        !outcome
            .report
            .log()
            .events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::Compensating))
    );
}

/// A compensation that fails is retried with its step's policy (`retries = 3`).
#[tokio::test]
async fn a_compensation_that_fails_is_retried() {
    let outcome = Checkout::runner().execute((3, false, 2)).await;
    let error = outcome.result.expect_err("shipping failed");
    assert_eq!(count(3, "refund attempt"), 3);
    assert_eq!(count(3, "refund 42"), 1);
    assert_eq!(count(3, "release stock-3"), 1);
    assert_eq!(error.compensations()[0].attempts(), 3);
    assert!(error.compensated());
    let retries = outcome
        .report
        .log()
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::CompensationRetrying { .. }))
        .count();
    assert_eq!(retries, 2);
}

/// A compensation that fails for good stops the phase: the earlier steps are not undone,
/// and the error says which compensation failed.
#[tokio::test]
async fn a_compensation_that_fails_for_good_stops_the_phase() {
    let outcome = Checkout::runner().execute((4, false, 10)).await;
    let error = outcome.result.expect_err("shipping failed");
    assert_eq!(count(4, "refund attempt"), 4);
    assert_eq!(count(4, "release stock-4"), 0);
    assert!(!error.compensated());
    let outcomes: Vec<(&str, &CompensationOutcome)> = error
        .compensations()
        .iter()
        .map(|c| (c.node(), c.outcome()))
        .collect();
    assert_eq!(
        outcomes,
        [
            (
                "receipt",
                &CompensationOutcome::Failed {
                    error: "the bank is down".into()
                }
            ),
            ("stock", &CompensationOutcome::NotRun),
        ]
    );
    let message = error.to_string();
    assert!(
        message.contains("the compensation of `receipt` failed after 4 attempts: the bank is down"),
        "{message}"
    );
}

async fn refuse(order: u64) -> Result<u32, Refused> {
    tokio::time::sleep(Duration::from_millis(10)).await;
    effect(order, "refuse".into());
    Err(Refused("card declined"))
}

async fn slow(order: u64) -> Result<u32, Refused> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    effect(order, "slow done".into());
    Ok(1)
}

async fn undo(order: u64, what: &str) -> Result<(), Refused> {
    effect(order, format!("undo {what}"));
    Ok(())
}

workflow! {
    Partial(order: u64) {
        Sequential {
            first = Operation(reserve(order), compensate = undo(order, "first")),
            Parallel {
                Operation(refuse(order), compensate = undo(order, "refuse")),
                Operation(slow(order), compensate = undo(order, "slow")),
                done = Operation(charge(order, &first), compensate = undo(order, "done")),
            },
            Operation(charge(order, &first), compensate = undo(order, "never")),
        }
    }
}

/// Only completed steps are compensated: not the one that failed, not the one the failure
/// stopped, not the one that never started; concurrent completed ones in reverse graph order.
#[tokio::test(start_paused = true)]
async fn steps_that_never_completed_are_not_compensated() {
    let outcome = Partial::runner()
        .failure_policy(FailurePolicy::FailFast)
        .execute(5)
        .await;
    assert!(outcome.result.is_err());
    let undone: Vec<String> = effects(5)
        .into_iter()
        .filter(|e| e.starts_with("undo"))
        .collect();
    assert_eq!(undone, ["undo done", "undo first"]);
}

workflow! {
    Cancelled(order: u64) {
        Sequential {
            first = Operation(reserve(order), compensate = undo(order, "first")),
            Operation(slow(order)),
        }
    }
}

/// A run cut by its deadline compensates too; the deadline does not cut the compensation.
#[tokio::test(start_paused = true)]
async fn a_run_past_its_deadline_compensates() {
    let outcome = Cancelled::runner()
        .deadline(Duration::from_secs(1))
        .execute(6)
        .await;
    assert!(outcome.result.is_err());
    assert_eq!(effects(6), ["reserve", "undo first"]);
}

async fn hold(order: u64, item: u64) -> Result<String, Refused> {
    effect(order, format!("hold {item}"));
    Ok(format!("held-{item}"))
}

async fn check(order: u64, item: u64) -> Result<(), Refused> {
    match item {
        1 => Err(Refused("item 1 is out of stock")),
        _ => Ok(()),
    }
    .inspect(|()| effect(order, format!("checked {item}")))
}

async fn unhold(order: u64, held: &str) -> Result<(), Refused> {
    effect(order, format!("undo {held}"));
    Ok(())
}

workflow! {
    Batch(order: u64) {
        Sequential {
            first = Operation(reserve(order), compensate = undo(order, "first")),
            ForEach(item in 0..3u64, max_concurrency = 1) {
                Sequential {
                    held = Operation(hold(order, item), compensate = unhold(order, &held)),
                    Operation(check(order, item)),
                }
            },
        }
    }
}

/// A `ForEach` instance is a run of its own: when it fails, it compensates its own completed
/// steps; an instance that succeeded is not compensated. Then the parent, failed, compensates
/// its own.
#[tokio::test]
async fn a_failed_instance_compensates_its_own_steps() {
    let outcome = Batch::runner().execute(7).await;
    assert!(outcome.result.is_err());
    assert_eq!(
        effects(7),
        [
            "reserve",
            "hold 0",
            "checked 0",
            "hold 1",
            "undo held-1",
            "undo first",
        ]
    );
}
