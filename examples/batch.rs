//! A batch job: 10,000 card charges through one `ForEach`, 64 in flight at a time, with a live
//! progress bar over the instances; the charges that fail are collected, not fatal, and
//! reported at the end with their indices.
//!
//! `cargo run --example batch`
//!
//! The bar is drawn on standard error when it is a terminal (and hidden otherwise, as in CI).
//! The run takes about two seconds: each charge is a short simulated call.

use std::fmt;
use std::time::{Duration, Instant};

use flowdag::prelude::*;

/// How many lines the batch charges.
const LINES: u32 = 10_000;

/// One line of the batch: a customer's card and an amount in cents.
#[derive(Debug, Clone)]
struct Line {
    customer: u32,
    cents: u64,
}

/// A charge the card network refused.
#[derive(Debug)]
struct Declined {
    customer: u32,
}

impl fmt::Display for Declined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "card of customer {} declined", self.customer)
    }
}

impl std::error::Error for Declined {}

/// A hash of the customer, to spread latencies and failures without a random generator: the
/// run is the same every time.
fn mix(customer: u32) -> u32 {
    customer.wrapping_mul(2_654_435_761).rotate_left(13)
}

/// Charges one line: a simulated call of 1 to 20 ms; about one card in 200 is declined.
async fn charge(line: &Line) -> Result<u64, Declined> {
    let hash = mix(line.customer);
    tokio::time::sleep(Duration::from_millis(1 + u64::from(hash % 20))).await;
    if (hash >> 8) % 200 == 7 {
        return Err(Declined {
            customer: line.customer,
        });
    }
    Ok(line.cents)
}

/// What the batch did: the cents charged and the lines that failed, by index.
#[derive(Debug)]
struct Settlement {
    charged: u32,
    cents: u64,
    /// `(index, error)` of each failed line, in input order.
    failed: Vec<(usize, String)>,
}

/// Folds the `ForEach`'s output (one `Result` per line, in input order) into a settlement.
fn settle(results: &[Result<u64, WorkflowError>]) -> Settlement {
    let mut settlement = Settlement {
        charged: 0,
        cents: 0,
        failed: Vec::new(),
    };
    for (index, result) in results.iter().enumerate() {
        match result {
            Ok(cents) => {
                settlement.charged += 1;
                settlement.cents += cents;
            }
            // The instance's error names its failed node and that node's error.
            Err(error) => settlement.failed.push((
                index,
                error
                    .failed()
                    .map(|f| format!("{}: {}", f.node, f.error))
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }
    settlement
}

workflow! {
    /// Charges every line, 64 at a time. `on_failure = collect`: a declined card fails its
    /// own instance, every other line is still charged, and the output holds each line's
    /// result in input order.
    Batch(lines: &[Line]) -> Settlement {
        charged = ForEach(line in lines.iter(), max_concurrency = 64, on_failure = collect) {
            paid = Operation(charge(line))
            => paid
        }
        => settle(&charged)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let lines: Vec<Line> = (0..LINES)
        .map(|customer| Line {
            customer,
            cents: 500 + u64::from(mix(customer) % 10_000),
        })
        .collect();

    // The bar counts the instances of `charged` (the run itself has one node).
    let progress = flowdag::Progress::instances("charged", lines.len() as u64);
    let started = Instant::now();
    let outcome = Batch::runner().observer(progress).execute(&lines).await;
    let elapsed = started.elapsed();

    // The report shows the ForEach as one grouped line under its node: the instances' counts
    // and the first failures, whatever the number of items.
    println!("{}", outcome.report);
    // The same line's numbers, as data.
    if let Some(nest) = outcome.report.nest("charged") {
        println!(
            "instances: {} started, {} completed, {} failed, {} withdrawn; \
             took {:?} / {:?} / {:?} (min / median / max)",
            nest.started,
            nest.completed,
            nest.failed,
            nest.withdrawn,
            nest.min.unwrap_or_default(),
            nest.median.unwrap_or_default(),
            nest.max.unwrap_or_default(),
        );
    }

    match outcome.result {
        Ok(settlement) => {
            println!(
                "\ncharged {} of {} lines, {}.{:02} in all, in {:.2} s",
                settlement.charged,
                lines.len(),
                settlement.cents / 100,
                settlement.cents % 100,
                elapsed.as_secs_f64()
            );
            println!("{} lines failed; the first ones:", settlement.failed.len());
            for (index, error) in settlement.failed.iter().take(5) {
                println!("  line {index}: {error}");
            }
        }
        // Only a failure of the batch itself lands here: failed lines are collected above.
        Err(error) => println!("the batch failed: {error}"),
    }
}
