//! An order waits for a manager's approval, or for a deadline, whichever comes first; a
//! cleanup step releases the stock whatever happened.
//!
//! The approval is a *signal*: code outside the run sends it through the handle the runner
//! gives (`runner.signals()`), with a typed payload. The deadline is a `Delay`. `Pick` lets the
//! first of the two events choose the branch and withdraws the other. The release step has the
//! trigger rule `when = all_done`: it runs once the steps before it settled, whatever their
//! status, and it does not turn a failed run into a success (the third order shows it). A signal
//! sent before its step waits is kept until the step reads it (the third order's approval is sent
//! before the run starts).
//!
//! `cargo run --example approval`

use std::fmt;
use std::time::Duration;

use flowdag::prelude::*;

/// An error from the order service.
#[derive(Debug)]
struct OrderError(String);

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OrderError {}

/// What the manager decided, sent as the `approve` signal's payload.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Who approved.
    pub by: String,
}

/// Stock held for the order until it ships or expires.
#[derive(Debug)]
pub struct Hold(u32);

async fn reserve(order: &str) -> Result<Hold, OrderError> {
    println!("  reserve stock for {order}");
    Ok(Hold(7))
}

async fn ship(order: &str, decision: &Decision) -> Result<String, OrderError> {
    if order.starts_with('C') {
        return Err(OrderError(format!("the carrier refused {order}")));
    }
    println!("  ship {order}, approved by {}", decision.by);
    Ok(format!("{order} shipped (approved by {})", decision.by))
}

async fn expire(order: &str) -> Result<String, OrderError> {
    println!("  nobody approved {order} in time");
    Ok(format!("{order} expired"))
}

async fn release(order: &str, hold: Option<&Hold>) -> Result<(), OrderError> {
    match hold {
        Some(Hold(n)) => println!("  release hold #{n} of {order}"),
        None => println!("  nothing to release for {order}"),
    }
    Ok(())
}

workflow! {
    /// Reserves stock, waits for approval or for `patience` to pass, then releases the hold.
    pub Approval(order: &str, patience: Duration) -> String {
        Sequential {
            hold = Operation(reserve(order)),
            Pick {
                ok = Signal(approve: Decision) => {
                    shipped = Operation(ship(order, &ok)),
                },
                Delay(patience) => {
                    expired = Operation(expire(order)),
                },
            },
            // Runs after the Pick whatever happened (reads are optional for such a step).
            Operation(release(order, hold), when = all_done),
        }
        => shipped.or(expired).cloned().unwrap_or_default()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // A manager approves after 50 ms, well within 48 hours.
    println!("order A-17, approved in time:");
    let mut runner = Approval::runner();
    let signals = runner.signals();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let decision = Decision { by: "ann".into() };
        if let Err(error) = signals.send(Approval::APPROVE, decision) {
            eprintln!("the approval was not delivered: {error}");
        }
    });
    let outcome = runner
        .execute(("A-17", Duration::from_secs(48 * 3600)))
        .await;
    println!("{}", outcome.report);
    println!("result: {:?}\n", outcome.result);

    // Nobody answers; the (short, for the demo) deadline chooses the other branch.
    println!("order B-4, nobody answers:");
    let outcome = Approval::runner()
        .execute(("B-4", Duration::from_millis(100)))
        .await;
    println!("{}", outcome.report);
    println!("result: {:?}\n", outcome.result);

    // Approved, but shipping fails: the hold is still released, and the run still fails.
    println!("order C-2, approved, but the carrier refuses it:");
    let mut runner = Approval::runner();
    let signals = runner.signals();
    if let Err(error) = signals.send(Approval::APPROVE, Decision { by: "bo".into() }) {
        eprintln!("the approval was not delivered: {error}");
    }
    let outcome = runner
        .execute(("C-2", Duration::from_secs(48 * 3600)))
        .await;
    println!("{}", outcome.report);
    match outcome.result {
        Ok(done) => println!("result: {done}"),
        Err(error) => println!("the run failed, after the cleanup ran: {error}"),
    }
}
