//! The metrics of durable runs and workers (feature `metrics`): a run a `Worker` resumes and a
//! distributed run whose tasks it executes, on `MemoryStore`, recorded by a `DebuggingRecorder`
//! installed for this thread alone (the worker's runtime is a current-thread runtime on it).

use std::collections::BTreeMap;
use std::time::Duration;

use flowdag::durable::Ended;
use flowdag::metrics;
use flowdag::prelude::*;
use flowdag::store::{MemoryStore, RunFilter, RunStatus, Store};
use flowdag::{Worker, WorkerReport};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

async fn fetch(order: u64) -> Result<u64, Declined> {
    Ok(order * 10)
}

/// Fails its first attempt, succeeds at its second.
async fn charge(amount: u64) -> Result<u64, Declined> {
    match flowdag::attempt().map_or(1, |a| a.attempt()) {
        1 => Err(Declined),
        _ => Ok(amount + 1),
    }
}

/// Outlasts its timeout at its first attempt.
async fn slow(amount: u64) -> Result<u64, Declined> {
    if flowdag::attempt().map_or(1, |a| a.attempt()) == 1 {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    Ok(amount)
}

workflow! {
    /// Waits first, so that a submitted run is unloaded and a worker picks it up when due.
    #[flow(durable)]
    Checkout(order: u64) -> u64 {
        Sequential {
            Delay("20ms"),
            amount = Operation(fetch(order)),
            charged = Operation(charge(amount), retries = 1, backoff = "1ms"),
            done = Operation(slow(charged), timeout = "50ms", retries = 1, backoff = "1ms"),
        }
        => done
    }
}

workflow! {
    /// Its operations are tasks that the worker claims (run distributed).
    #[flow(durable)]
    Fanout(order: u64) -> u64 {
        Sequential {
            amount = Operation(fetch(order)),
            charged = Operation(charge(amount), retries = 1, backoff = "1ms"),
        }
        => charged
    }
}

/// What a snapshot holds, by kind, name and labels (sorted `k=v` joined by `,`).
#[derive(Debug, Default)]
struct Seen {
    counters: BTreeMap<(String, String), u64>,
    gauges: BTreeMap<(String, String), f64>,
    histograms: BTreeMap<(String, String), Vec<f64>>,
}

fn seen(snapshotter: &Snapshotter) -> Seen {
    let mut seen = Seen::default();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let at = (key.name().to_owned(), labels.join(","));
        match value {
            DebugValue::Counter(n) => {
                seen.counters.insert(at, n);
            }
            DebugValue::Gauge(g) => {
                seen.gauges.insert(at, g.into_inner());
            }
            DebugValue::Histogram(values) => {
                seen.histograms
                    .insert(at, values.into_iter().map(|v| v.into_inner()).collect());
            }
        }
    }
    seen
}

fn at(name: &str, labels: &str) -> (String, String) {
    (name.to_owned(), labels.to_owned())
}

/// Runs `worker` until every run of `store` has finished.
async fn until_finished(worker: &Worker<MemoryStore>, store: &MemoryStore) -> WorkerReport {
    let all_done = async {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs.iter().all(|r| r.status.is_finished()) {
                return;
            }
        }
    };
    // Not a threshold: a run that never finishes fails the test instead of hanging it.
    tokio::time::timeout(Duration::from_secs(30), worker.run(all_done))
        .await
        .expect("the runs finish")
        .expect("the worker runs")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
fn a_run_resumed_by_a_worker_records_its_runs_attempts_and_steps() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let report = ::metrics::with_local_recorder(&recorder, || {
        runtime().block_on(async {
            let store = MemoryStore::new();
            let ended = Checkout::runner()
                .durable(&store, "checkout-1")
                .submit(4)
                .await
                .expect("submitted");
            assert!(ended.is_unloaded(), "it waits for its Delay: {ended:?}");
            let worker = Worker::new(store.clone())
                .register::<Checkout>()
                .poll_interval(Duration::from_millis(5));
            let report = until_finished(&worker, &store).await;
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            assert_eq!(runs[0].status, RunStatus::Succeeded, "{runs:?}");
            report
        })
    });
    assert_eq!(report.resumed.len(), 1, "{report:?}");
    let seen = seen(&snapshotter);
    let w = "workflow=Checkout";
    assert_eq!(
        seen.counters.get(&at(metrics::RUNS_STARTED, w)),
        Some(&1),
        "{seen:#?}"
    );
    assert_eq!(
        seen.counters.get(&at(
            metrics::RUNS_FINISHED,
            "status=succeeded,workflow=Checkout"
        )),
        Some(&1),
        "{seen:#?}"
    );
    let attempts = |outcome: &str| {
        seen.counters
            .get(&at(metrics::ATTEMPTS, &format!("outcome={outcome},{w}")))
            .copied()
    };
    // `fetch`, `charge`'s second attempt, `slow`'s second attempt, and the `Delay` (which the
    // worker's replay found requested, and which completed live).
    assert_eq!(attempts("completed"), Some(4), "{seen:#?}");
    assert_eq!(
        attempts("retrying"),
        Some(1),
        "charge's first attempt: {seen:#?}"
    );
    assert_eq!(
        attempts("timed_out"),
        Some(1),
        "slow's first attempt: {seen:#?}"
    );
    assert_eq!(attempts("failed"), None, "{seen:#?}");
    // One duration per attempt that ended, by step (the node's name: its binding).
    let durations = |step: &str| {
        seen.histograms
            .get(&at(metrics::STEP_DURATION, &format!("step={step},{w}")))
            .map_or(0, Vec::len)
    };
    assert_eq!(durations("amount"), 1, "{seen:#?}");
    assert_eq!(durations("charged"), 2, "{seen:#?}");
    assert_eq!(durations("done"), 2, "{seen:#?}");
    let timed_out = &seen.histograms[&at(metrics::STEP_DURATION, &format!("step=done,{w}"))];
    assert!(
        timed_out.iter().any(|&s| s >= 0.05),
        "the timed-out attempt lasted its timeout: {timed_out:?}"
    );
    // The worker picked the run up once, when its Delay was due; its batches committed.
    assert_eq!(
        seen.histograms
            .get(&at(metrics::QUEUE_LAG, &format!("kind=run,{w}")))
            .map(Vec::len),
        Some(1),
        "{seen:#?}"
    );
    assert!(
        seen.histograms
            .get(&at(metrics::DECISION_LATENCY, w))
            .is_some_and(|l| l.len() >= 4),
        "a commit at least per step: {seen:#?}"
    );
    // Nothing is in flight once the run has ended.
    assert_eq!(
        seen.gauges.get(&at(metrics::RUNS_IN_FLIGHT, w)),
        Some(&0.0),
        "{seen:#?}"
    );
    assert!(
        !seen
            .counters
            .keys()
            .any(|(name, _)| name == metrics::STORE_RETRIES),
        "{seen:#?}"
    );
}

/// Submits a distributed `Fanout` run `id` to `store`, for a worker to run.
async fn submitted(store: &MemoryStore, id: &str) {
    let ended = Fanout::runner()
        .durable(store, id)
        .distributed()
        .submit(2)
        .await
        .expect("submitted");
    assert!(matches!(ended, Ended::Unloaded { .. }), "{ended:?}");
}

#[test]
fn a_distributed_run_records_the_tasks_a_worker_claims() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    ::metrics::with_local_recorder(&recorder, || {
        runtime().block_on(async {
            let store = MemoryStore::new();
            submitted(&store, "fanout-1").await;
            let worker = Worker::new(store.clone())
                .register::<Fanout>()
                .poll_interval(Duration::from_millis(5));
            let report = until_finished(&worker, &store).await;
            // `fetch`, `charge` twice.
            assert_eq!(report.tasks_completed, 3, "{report:?}");
        })
    });
    let seen = seen(&snapshotter);
    let w = "workflow=Fanout";
    assert_eq!(
        seen.counters.get(&at(metrics::TASKS_CLAIMED, w)),
        Some(&3),
        "{seen:#?}"
    );
    assert_eq!(
        seen.counters.get(&at(metrics::TASKS_LOST, w)),
        None,
        "{seen:#?}"
    );
    assert_eq!(
        seen.counters
            .get(&at(metrics::ATTEMPTS, &format!("outcome=retrying,{w}"))),
        Some(&1),
        "{seen:#?}"
    );
    assert_eq!(
        seen.counters.get(&at(
            metrics::RUNS_FINISHED,
            "status=succeeded,workflow=Fanout"
        )),
        Some(&1),
        "{seen:#?}"
    );
    assert_eq!(
        seen.gauges.get(&at(metrics::TASKS_IN_FLIGHT, w)),
        Some(&0.0),
        "{seen:#?}"
    );
    assert_eq!(
        seen.gauges.get(&at(metrics::RUNS_IN_FLIGHT, w)),
        Some(&0.0),
        "{seen:#?}"
    );
    // Each claim's wait in the queue, from the task's readiness to its claim.
    let lags = seen
        .histograms
        .get(&at(metrics::QUEUE_LAG, &format!("kind=task,{w}")))
        .unwrap_or_else(|| panic!("task queue lag: {seen:#?}"));
    assert_eq!(lags.len(), 3, "one per claim: {lags:?}");
    assert!(lags.iter().all(|lag| *lag >= 0.0), "{lags:?}");
}

#[test]
fn a_run_an_operator_terminates_is_counted_as_finished() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    ::metrics::with_local_recorder(&recorder, || {
        runtime().block_on(async {
            let store = MemoryStore::new();
            submitted(&store, "fanout-2").await;
            // Nobody holds it: the operator's process ends it itself.
            let stop = flowdag::durable::terminate_run(
                &store,
                "fanout-2",
                Some("by hand"),
                &flowdag::store::Owner::new("operator"),
            )
            .await
            .expect("terminated");
            assert_eq!(stop, flowdag::durable::Stop::Ended);
        })
    });
    let seen = seen(&snapshotter);
    assert_eq!(
        seen.counters.get(&at(
            metrics::RUNS_FINISHED,
            "status=cancelled,workflow=Fanout"
        )),
        Some(&1),
        "{seen:#?}"
    );
}
