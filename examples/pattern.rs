//! A step that waits for some branches and not others.
//!
//! ```text
//! cargo run --example pattern
//! ```
//!
//! Two chains run side by side: `step1 -> step3` and `step2 -> step5`. `step4` must wait for
//! steps 1 and 2 and for nothing else, so it declares `after = [one, two]` and starts as soon as
//! both are done, while the long steps 3 and 5 go on beside it. With `tokio::join!` one would either
//! wait for whole chains (and start `step4` late) or restructure the code by hand.
//!
//! Each step prints when it starts and ends, in milliseconds since the run began. The schedule
//! it shows, one dot per 25 ms:
//!
//! ```text
//! step1 ····                    (100 ms)
//! step2 ········                (200 ms)
//! step3     ················    (400 ms, after step1)
//! step4         ··              ( 50 ms, after step1 and step2)
//! step5         ················(400 ms, after step2)
//! ```

use std::convert::Infallible;
use std::time::Duration;

use flowdag::prelude::*;
use tokio::time::{Instant, sleep};

/// When the run started, so that steps can print offsets from it.
pub struct Clock {
    start: Instant,
}

impl Clock {
    fn log(&self, step: &str, event: &str) {
        let ms = self.start.elapsed().as_millis();
        println!("{ms:>5} ms  {step} {event}");
    }
}

/// Simulates work: logs the start, sleeps `ms`, logs the end, returns `value`.
async fn work(clock: &Clock, step: &str, ms: u64, value: u32) -> Result<u32, Infallible> {
    clock.log(step, "starts");
    sleep(Duration::from_millis(ms)).await;
    clock.log(step, "ends");
    Ok(value)
}

async fn step1(clock: &Clock) -> Result<u32, Infallible> {
    work(clock, "step1", 100, 1).await
}

async fn step2(clock: &Clock) -> Result<u32, Infallible> {
    work(clock, "step2", 200, 2).await
}

/// Long; reads the output of step 1.
async fn step3(clock: &Clock, one: &u32) -> Result<u32, Infallible> {
    work(clock, "step3", 400, one + 2).await
}

/// Short; needs steps 1 and 2 to be done, but not their outputs.
async fn step4(clock: &Clock) -> Result<u32, Infallible> {
    work(clock, "step4", 50, 4).await
}

/// Long; reads the output of step 2.
async fn step5(clock: &Clock, two: &u32) -> Result<u32, Infallible> {
    work(clock, "step5", 400, two + 3).await
}

workflow! {
    /// Step 4 needs 1 and 2 only; the long steps 3 and 5 run on beside it.
    pub Pattern(clock: &Clock) {
        Parallel {
            Sequential { one = Operation(step1(clock)), Operation(step3(clock, &one)) },
            Sequential { two = Operation(step2(clock)), Operation(step5(clock, &two)) },
            // Control-only edges: step4 waits for `one` and `two` but reads neither.
            Operation(step4(clock), after = [one, two]),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), WorkflowError> {
    let clock = Clock {
        start: Instant::now(),
    };
    Pattern::run(&clock).await?;
    // step4 ended near 250 ms, long before step3 (~500 ms) and step5 (~600 ms); the whole run
    // took as long as its longest chain, step2 + step5.
    println!("total {} ms\n", clock.start.elapsed().as_millis());

    // Unnamed steps are called after the function they call.
    println!("{}", Pattern::GRAPH);
    Ok(())
}
