//! A long run with a live progress bar: 40 slow steps in four stages, some retried.
//!
//! `cargo run --example progress`
//!
//! The bar is drawn on standard error when it is a terminal (and hidden otherwise, as in CI);
//! the report printed at the end shows what each step did.

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use flowdag::prelude::*;

/// A transient failure: the first attempt of every seventh item fails.
#[derive(Debug)]
struct Flaky(u32);

impl fmt::Display for Flaky {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "item {} hit a transient error", self.0)
    }
}

impl std::error::Error for Flaky {}

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// Processes one item: sleeps a little (a stand-in for I/O), fails once now and then.
async fn process(item: u32) -> Result<u32, Flaky> {
    tokio::time::sleep(Duration::from_millis(40 + u64::from(item % 5) * 15)).await;
    let attempt = ATTEMPTS.fetch_add(1, Ordering::Relaxed);
    if item % 7 == 3 && attempt.is_multiple_of(2) {
        return Err(Flaky(item));
    }
    Ok(item * 2)
}

/// Collects a stage's results.
async fn collect(stage: u32) -> Result<u32, Infallible> {
    tokio::time::sleep(Duration::from_millis(30)).await;
    Ok(stage)
}

workflow! {
    /// Four stages of ten items each; items run at most four at a time and retry once.
    Batch() {
        Sequential {
            Parallel(max_concurrency = 4) {
                Operation(process(0), retries = 1, backoff = "20ms"), Operation(process(1)),
                Operation(process(2)), Operation(process(3), retries = 1, backoff = "20ms"),
                Operation(process(4)), Operation(process(5)), Operation(process(6)),
                Operation(process(7)), Operation(process(8)), Operation(process(9)),
            },
            Operation(collect(1)),
            Parallel(max_concurrency = 4) {
                Operation(process(10), retries = 1, backoff = "20ms"), Operation(process(11)),
                Operation(process(12)), Operation(process(13)), Operation(process(14)),
                Operation(process(15)), Operation(process(16)),
                Operation(process(17), retries = 1, backoff = "20ms"),
                Operation(process(18)), Operation(process(19)),
            },
            Operation(collect(2)),
            Parallel(max_concurrency = 4) {
                Operation(process(20)), Operation(process(21)), Operation(process(22)),
                Operation(process(23)), Operation(process(24), retries = 1, backoff = "20ms"),
                Operation(process(25)), Operation(process(26)), Operation(process(27)),
                Operation(process(28)), Operation(process(29)),
            },
            Operation(collect(3)),
            Parallel(max_concurrency = 4) {
                Operation(process(30)), Operation(process(31), retries = 1, backoff = "20ms"),
                Operation(process(32)), Operation(process(33)), Operation(process(34)),
                Operation(process(35)), Operation(process(36)), Operation(process(37)),
                Operation(process(38), retries = 1, backoff = "20ms"), Operation(process(39)),
            },
            Operation(collect(4)),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let progress = flowdag::Progress::new();
    let outcome = Batch::runner().observer(progress).execute(()).await;
    println!("{}", outcome.report);
    match outcome.result {
        Ok(()) => println!("all {} steps done", Batch::GRAPH.len()),
        Err(error) => println!("the batch failed: {error}"),
    }
}
