//! Throughput and peak memory: 10,000 runs of the 50-node mixed workflow spawned at once on a
//! multi-thread tokio runtime (one worker per core), then joined; the same with the
//! hand-written `try_join!` equivalent.
//!
//! `cargo bench -p flow-benches --bench throughput` prints the table of docs/performance.md.
//! `RUNS=100000 REPEAT=3 cargo bench -p flow-benches --bench throughput` changes the counts.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use common::counting::{Counting, measure};
use common::{MIXED_OUTPUT, hand, ops};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The mixed workflow with each operation.
mod imm {
    use crate::common::ops::imm as op;
    use flowdag::workflow;

    include!("common/mixed.rs");
}

/// The mixed workflow with each operation.
mod yld {
    use crate::common::ops::yld as op;
    use flowdag::workflow;

    include!("common/mixed.rs");
}

/// One measurement: wall time, heap calls, peak heap above the start, peak RSS.
struct Sample {
    time: Duration,
    calls: usize,
    peak_heap: usize,
    peak_rss_kib: Option<u64>,
}

/// The process's peak resident set size (VmHWM), in KiB, on Linux.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets the peak RSS to the current RSS (Linux: `5` into `/proc/self/clear_refs`).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Spawns `runs` runs of `make(i)` on `rt`, all before the first is joined, then joins them.
fn sample<F>(rt: &Runtime, runs: usize, make: fn(u64) -> F) -> Sample
where
    F: Future<Output = Result<u64, String>> + Send + 'static,
{
    let rss = reset_peak_rss();
    let start = Instant::now();
    let ((), usage) = measure(|| {
        rt.block_on(async {
            let handles: Vec<_> = (0..runs as u64).map(|i| tokio::spawn(make(i))).collect();
            for (i, handle) in handles.into_iter().enumerate() {
                let output = handle
                    .await
                    .expect("the task ran")
                    .expect("the run succeeded");
                if i == 0 {
                    assert_eq!(output, MIXED_OUTPUT);
                }
            }
        })
    });
    Sample {
        time: start.elapsed(),
        calls: usage.calls,
        peak_heap: usage.peak,
        peak_rss_kib: if rss { peak_rss_kib() } else { None },
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runs = env("RUNS", 10_000);
    let repeat = env("REPEAT", 5);
    let rt = common::multi_thread();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());

    println!(
        "{runs} runs of the 50-node mixed workflow spawned at once on a multi-thread runtime \
         ({workers} workers), then joined; median of {repeat}.\n"
    );
    println!(
        "Size of one run's future: flow {} bytes (immediate) / {} bytes (yielding); \
         hand-written {} / {} bytes.\n",
        std::mem::size_of_val(&imm::Mixed::run(0)),
        std::mem::size_of_val(&yld::Mixed::run(0)),
        std::mem::size_of_val(&hand::mixed(ops::imm, 0)),
        std::mem::size_of_val(&hand::mixed(ops::yld, 0)),
    );
    println!(
        "| code | operation | runs/s | µs per run | nodes/s | heap calls per run \
         | peak heap (MiB) | per run (KiB) | peak RSS (MiB) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    type Make = fn(u64) -> Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>;
    let cases: [(&str, &str, Make); 4] = [
        ("flow `run`", "immediate", |i| {
            Box::pin(async move { imm::Mixed::run(i).await.map_err(|e| e.to_string()) })
        }),
        ("hand-written", "immediate", |i| {
            Box::pin(async move { hand::mixed(ops::imm, i).await.map_err(|e| e.to_string()) })
        }),
        ("flow `run`", "yielding", |i| {
            Box::pin(async move { yld::Mixed::run(i).await.map_err(|e| e.to_string()) })
        }),
        ("hand-written", "yielding", |i| {
            Box::pin(async move { hand::mixed(ops::yld, i).await.map_err(|e| e.to_string()) })
        }),
    ];
    for (code, operation, make) in cases {
        // Warm-up: the runtime's workers, queues and thread-locals.
        sample(&rt, runs / 10, make);
        let mut samples: Vec<Sample> = (0..repeat).map(|_| sample(&rt, runs, make)).collect();
        samples.sort_by_key(|s| s.time);
        let median = &samples[samples.len() / 2];
        let secs = median.time.as_secs_f64();
        println!(
            "| {code} | {operation} | {:.0} | {:.2} | {:.2e} | {:.1} | {:.1} | {:.2} | {} |",
            runs as f64 / secs,
            secs * 1e6 / runs as f64,
            (runs * common::MIXED_NODES) as f64 / secs,
            median.calls as f64 / runs as f64,
            median.peak_heap as f64 / (1024.0 * 1024.0),
            median.peak_heap as f64 / 1024.0 / runs as f64,
            median
                .peak_rss_kib
                .map_or("n/a".to_string(), |k| format!("{:.1}", k as f64 / 1024.0)),
        );
    }
    println!(
        "\nEvery run is boxed once (`Box::pin`, one call) so the four cases share one spawn \
         path; the task itself is one more allocation."
    );
}
