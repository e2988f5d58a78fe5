//! Polling: start an export, then ask for its status until it is ready, with a pause between
//! tries and at most 20 tries, as a `Loop`. Each try reads the previous try's status (`prev`).
//!
//! `cargo run --example poll_export`
//!
//! Three runs: an export that becomes ready after a few tries; one that never does, where the
//! loop fails after its 20th try (`NodeError::LoopExhausted`); and the same stuck export polled
//! by a loop declared `on_max = stop`, which gives up quietly with the last status instead.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use flowdag::prelude::*;
use tokio::time::Instant;

/// The pause between two tries.
const PAUSE: Duration = Duration::from_millis(50);

/// A simulated export service: a job started at `started` is ready after `takes`.
struct ExportService {
    takes: Duration,
}

/// An export job, as `start` returns it.
#[derive(Debug, Clone)]
struct Job {
    id: u32,
    started: Instant,
}

/// One poll's answer.
#[derive(Debug, Clone)]
struct Status {
    /// The try that got it, from 1.
    attempt: u32,
    /// How far the export is, in percent.
    percent: u32,
    /// Where to download it, once ready.
    url: Option<String>,
}

/// The service is unreachable (never here: polling only ever sees a status).
#[derive(Debug)]
struct Unreachable;

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("export service unreachable")
    }
}

impl std::error::Error for Unreachable {}

impl ExportService {
    /// Starts an export job.
    async fn start(&self, id: u32) -> Result<Job, Infallible> {
        println!("  export {id} started");
        Ok(Job {
            id,
            started: Instant::now(),
        })
    }

    /// Asks for the job's status. `last` is the previous try's answer (`None` on the first):
    /// it numbers the tries and shows the progress since then.
    async fn poll(&self, job: &Job, last: Option<&Status>) -> Result<Status, Unreachable> {
        // The round trip to the service.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let elapsed = job.started.elapsed();
        let percent = if elapsed >= self.takes {
            100
        } else {
            (elapsed.as_millis() * 100 / self.takes.as_millis()) as u32
        };
        let attempt = last.map_or(1, |l| l.attempt + 1);
        let url = (percent == 100).then(|| format!("https://exports.example/{}.csv", job.id));
        let since = match last {
            Some(last) => format!(
                "+{} since try {}",
                percent.saturating_sub(last.percent),
                last.attempt
            ),
            None => "first try".to_string(),
        };
        println!(
            "  try {attempt:>2}: {percent:>3}% ({since}){}",
            if url.is_some() { ", ready" } else { "" }
        );
        Ok(Status {
            attempt,
            percent,
            url,
        })
    }
}

/// No pause before the first try; `PAUSE` before each of the others.
fn pause_after(last: Option<&Status>) -> Duration {
    match last {
        Some(_) => PAUSE,
        None => Duration::ZERO,
    }
}

workflow! {
    /// Starts an export and polls it until it is ready, at most 20 times. Past the 20th try
    /// the loop fails with `NodeError::LoopExhausted { max: 20 }` (the default, `on_max =
    /// fail`).
    WaitForExport(service: &ExportService, id: u32) -> String {
        Sequential {
            job = Operation(service.start(id)),
            ready = Loop(max = 20, prev = last) {
                Sequential {
                    Delay(pause_after(last)),
                    status = Operation(service.poll(&job, last)),
                }
                => status.clone()
            } until (status.url.is_some()),
        }
        // `until` held, so the last status has its url.
        => ready.url.clone().unwrap_or_default()
    }
}

workflow! {
    /// The same poll, declared `on_max = stop`: after 5 tries the loop ends with the last
    /// status, ready or not, and the workflow decides what that means.
    PeekExport(service: &ExportService, id: u32) -> Status {
        Sequential {
            job = Operation(service.start(id)),
            latest = Loop(max = 5, prev = last, on_max = stop) {
                Sequential {
                    Delay(pause_after(last)),
                    status = Operation(service.poll(&job, last)),
                }
                => status.clone()
            } until (status.url.is_some()),
        }
        => latest.clone()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("An export that takes 400 ms, polled every {PAUSE:?}:");
    let quick = ExportService {
        takes: Duration::from_millis(400),
    };
    let outcome = WaitForExport::runner().execute((&quick, 1)).await;
    match &outcome.result {
        Ok(url) => println!("  download {url}"),
        Err(error) => println!("  failed: {error}"),
    }
    // The loop is one node of the run; its line shows the tries: `ready@0..N`.
    println!("\n{}", outcome.report);

    println!("\nAn export that takes 10 s, polled at most 20 times:");
    let stuck = ExportService {
        takes: Duration::from_secs(10),
    };
    match WaitForExport::run(&stuck, 2).await {
        Ok(url) => println!("  download {url}"),
        Err(error) => {
            // The loop's node failed with `LoopExhausted`, a typed error.
            for failed in error.failed() {
                if let NodeError::LoopExhausted { max } = failed.error {
                    println!(
                        "  `{}` gave up after {max} tries: {}",
                        failed.node, failed.error
                    );
                }
            }
            println!("  {error}");
        }
    }

    println!("\nThe same export, peeked at with `on_max = stop` (at most 5 tries):");
    match PeekExport::run(&stuck, 3).await {
        Ok(status) if status.url.is_some() => println!("  ready after {} tries", status.attempt),
        Ok(status) => println!(
            "  not ready after {} tries ({}%): ask again later",
            status.attempt, status.percent
        ),
        Err(error) => println!("  failed: {error}"),
    }
}
