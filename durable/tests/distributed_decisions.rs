//! The decisions of a distributed run do not depend on where they are made: a property test
//! runs one workflow (retries, a fan-out and its join, a `Conditional`, a `Loop` whose
//! iterations retry and may fail, a failure that ends the run) whose attempts fail or succeed
//! as a seed says, four ways:
//!
//! - by one worker that keeps the run sticky: every decision from the state in memory, no
//!   load after the first;
//! - by one worker that keeps nothing sticky: the run is unloaded after each decision and
//!   taken over for the next from its decided state (the store loads the run's own events
//!   and the ends a resume needs: a `Loop`'s last iteration, not those before it);
//! - the same on a store that loads the whole history (`MemoryStore::loading_history`):
//!   every event and every end, each decision replays everything from the first event;
//! - by two sticky workers sharing the tasks, each run taken over when its worker lets it go;
//!
//! and checks that all four journal the same attempts of the same steps, with the same
//! outcomes, store the same instance ends, and end with the same result as the run made in
//! one process, without workers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flowdag::prelude::*;
use flowdag::store::{MemoryStore, RunFilter, Store};
use flowdag::{Worker, WorkerReport};
use proptest::prelude::*;

#[derive(Debug)]
struct Flaky(&'static str);

impl std::fmt::Display for Flaky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step {} failed", self.0)
    }
}

impl std::error::Error for Flaky {}

/// Whether attempt `attempt` of `step` fails under `seed`: about one in three.
fn fails(seed: u64, step: &str, attempt: u32) -> bool {
    let mut x = seed;
    for byte in step.bytes().chain(attempt.to_le_bytes()) {
        // splitmix64 of each part in turn.
        x = x
            .wrapping_add(u64::from(byte))
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
    }
    x.is_multiple_of(3)
}

/// An operation whose attempts fail as the seed says; its output names the attempt that
/// succeeded, so that a later decision depends on it.
async fn flaky(seed: u64, step: &'static str, x: u64) -> Result<u64, Flaky> {
    let attempt = flowdag::attempt().map_or(1, |a| a.attempt());
    match fails(seed, step, attempt) {
        true => Err(Flaky(step)),
        false => Ok(x * 3 + u64::from(attempt)),
    }
}

/// A loop's round: its attempts fail as the seed and the round's input say; its output is
/// even about half the time (which ends the loop).
async fn round(seed: u64, x: u64) -> Result<u64, Flaky> {
    let attempt = flowdag::attempt().map_or(1, |a| a.attempt());
    match fails(seed ^ x.wrapping_mul(0x9e37_79b9), "h", attempt) {
        true => Err(Flaky("h")),
        false => Ok(x * 3 + u64::from(attempt)),
    }
}

workflow! {
    #[flow(durable)]
    Mixed(seed: u64) -> u64 {
        Sequential {
            a = Operation(flaky(seed, "a", seed % 100), retries = 2, backoff = "0ms"),
            Parallel {
                b = Operation(flaky(seed, "b", a), retries = 1, backoff = "0ms"),
                c = Operation(flaky(seed, "c", a), retries = 3, backoff = "0ms"),
                g = Operation(flaky(seed, "g", a), retries = 2, backoff = "0ms"),
            },
            Conditional(seed % 2 == 0) {
                Operation(flaky(seed, "d", b + c), retries = 2, backoff = "0ms"),
            } else {
                Operation(flaky(seed, "e", c + g), retries = 2, backoff = "0ms"),
            },
            f = Operation(flaky(seed, "f", b + c + g), retries = 1, backoff = "0ms"),
            h = Loop(max = 6, prev = last, on_max = stop) {
                y = Operation(round(seed, last.copied().unwrap_or(seed % 7)), retries = 2, backoff = "0ms")
                => y
            } until (y % 2 == 0),
        }
        => f + h
    }
}

/// What a run decided: for each of its own steps, its journal's events in order (kind and
/// attempt), its nest instances' stored ends, and how the run ended. (The steps inside an
/// instance that a worker executed as a task are not journaled one by one: the end is.)
#[derive(Debug, PartialEq, Eq)]
struct Decided {
    steps: BTreeMap<String, Vec<(String, u32)>>,
    ends: BTreeMap<String, Vec<u8>>,
    result: Result<u64, String>,
}

/// The kinds of events that are decisions (timing events, such as when an attempt started,
/// differ between a task and an attempt run in place, and decide nothing).
const DECISIONS: [&str; 7] = [
    "Requested",
    "Completed",
    "Failed",
    "Retrying",
    "Skipped",
    "Withdrawn",
    "Aborted",
];

async fn decided(store: &MemoryStore, run: &str) -> Decided {
    let events = store.events(run, 0).await.expect("the journal");
    let mut steps: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
    for event in events.into_iter().filter(|e| e.path.is_none()) {
        let Some(name) = event.node_name else {
            continue;
        };
        if DECISIONS.contains(&event.kind.as_str()) {
            steps
                .entry(name)
                .or_default()
                .push((event.kind, event.attempt));
        }
    }
    let data = store.run_data(run).await.expect("the run's data");
    let ends = data
        .outputs
        .into_iter()
        .filter(|o| !o.instance.is_empty())
        .map(|o| (o.instance, o.bytes))
        .collect();
    let outcome = Mixed::resume(store, run).await.expect("a finished run");
    Decided {
        steps,
        ends,
        result: outcome.result.map_err(|e| e.to_string()),
    }
}

/// Runs `workers` until every run of `store` has finished (at most 20 s), then stops them.
async fn until_finished(store: &MemoryStore, workers: Vec<Worker<MemoryStore>>) {
    let done = tokio::sync::Notify::new();
    let watch = async {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs.iter().all(|r| r.status.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        done.notify_waiters();
    };
    let runs = futures::future::join_all(workers.iter().map(|w| w.run(done.notified())));
    let (reports, ()) = tokio::join!(runs, watch);
    for report in reports {
        let report: WorkerReport = report.expect("the worker ran");
        assert_eq!(report.tasks_lost, 0, "{report:?}");
    }
}

/// Runs `seed`'s run distributed on `workers` (each keeping runs sticky for `sticky`), on
/// `store`.
async fn distributed(store: MemoryStore, seed: u64, workers: usize, sticky: Duration) -> Decided {
    Mixed::runner()
        .durable(&store, "mixed")
        .distributed()
        .submit(seed)
        .await
        .expect("submitted");
    let workers = (0..workers)
        .map(|_| {
            Worker::new(store.clone())
                .register::<Mixed>()
                .poll_interval(Duration::from_millis(1))
                .max_tasks(2)
                .sticky(sticky)
        })
        .collect();
    until_finished(&store, workers).await;
    decided(&store, "mixed").await
}

/// Runs `seed`'s run in this process, without workers.
async fn in_place(seed: u64) -> Decided {
    let store = MemoryStore::new();
    let _ = Mixed::runner()
        .durable(&store, "mixed")
        .execute(seed)
        .await
        .expect("the run ends");
    decided(&store, "mixed").await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn sticky_taken_over_replayed_and_shared_deciders_decide_the_same(seed in any::<u64>()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let fresh = MemoryStore::new;
        let (reference, sticky, taken_over, replayed, shared) = runtime.block_on(async {
            (
                in_place(seed).await,
                distributed(fresh(), seed, 1, Duration::from_secs(60)).await,
                distributed(fresh(), seed, 1, Duration::ZERO).await,
                distributed(fresh().loading_history(), seed, 1, Duration::ZERO).await,
                distributed(fresh(), seed, 2, Duration::from_millis(1)).await,
            )
        });
        prop_assert_eq!(&sticky, &reference, "sticky worker");
        prop_assert_eq!(&taken_over, &reference, "taken over from the decided state per decision");
        prop_assert_eq!(&replayed, &reference, "the whole history replayed per decision");
        prop_assert_eq!(&shared, &reference, "two workers");
    }
}

/// The seeds the property draws from cover both kinds of end (a run that succeeds after
/// retries and one that fails for good) and loops of several rounds.
#[tokio::test(flavor = "current_thread")]
async fn the_seeds_reach_both_ends() {
    let mut ends = (false, false);
    let mut rounds = 0;
    for seed in 0..64 {
        let run = in_place(seed).await;
        rounds = rounds.max(run.ends.len());
        let retried = run.steps.values().any(|events| {
            events
                .iter()
                .any(|(kind, attempt)| kind == "Completed" && *attempt > 1)
        });
        match run.result {
            Ok(_) if retried => ends.0 = true,
            Err(_) => ends.1 = true,
            Ok(_) => {}
        }
    }
    assert_eq!(ends, (true, true), "successes after retries, and failures");
    assert!(rounds >= 3, "loops of several rounds: at most {rounds}");
}
