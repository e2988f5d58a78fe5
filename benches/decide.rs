//! The time of a distributed run's decision at step 10, 100 and 1,000 of a chain of 1,000
//! no-op operations: with a sticky worker (decisions from the run's state in memory) against a
//! worker that keeps nothing sticky (each step's decision loads the run and replays its
//! journal).
//!
//! ```text
//! cargo bench -p flow-benches --bench decide
//! ```
//!
//! One worker on a `MemoryStore` (the store's own cost out of the way: what grows, grows in
//! the decider), polling every millisecond. A decision's time is the time from the claim of
//! step k-1's task to the commit that requests step k: the operation's execution (nothing),
//! its outcome reaching the decider (in memory when sticky; through the store, a look for due
//! runs and a load and replay of the run when not), and the decision that journals it and
//! requests the next. A step's time adds the worker's wait for its next look (the poll). The
//! table gives the median over the ten steps up to k. Not criterion: one run is measured whole
//! and the program prints a table. A run of 10,000 steps cannot be written yet (a durable
//! workflow is a static graph: durable `Loop`s do not exist), and a 10,000-node workflow takes
//! too long to compile to be a bench.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowdag::prelude::*;
use flowdag_runtime::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunSummary, SignalSent, Store, StoreFuture, StoredEvent, StoredSignal,
    TaskClaim, TaskCommitted, TaskInputs, TaskOutcome, TaskResult, WorkflowVersion,
};
use flowdag_runtime::worker::Worker;

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never fails")
    }
}

impl std::error::Error for Never {}

async fn op(x: u64) -> Result<u64, Never> {
    Ok(x + 1)
}

include!("generated/durable_chain_1000.rs");

/// A `MemoryStore` that notes when each node's task was claimed and when each node's
/// `Requested` was committed.
#[derive(Clone)]
struct Timed {
    inner: MemoryStore,
    requested: Arc<Mutex<HashMap<u32, Instant>>>,
    claimed: Arc<Mutex<HashMap<u32, Instant>>>,
}

/// When each node's event happened.
type Times = HashMap<u32, Instant>;

fn lock(times: &Mutex<Times>) -> std::sync::MutexGuard<'_, Times> {
    times
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Store for Timed {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        self.inner.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        self.inner.load_run(run, owner, lease)
    }
    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
        self.inner.list_runs(filter)
    }
    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
        self.inner.events(run, from_seq)
    }
    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
        self.inner.run_data(run)
    }
    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        let now = Instant::now();
        let mut requested = lock(&self.requested);
        for event in &batch.events {
            if let (Some(node), "Requested") = (event.node, event.kind.as_str()) {
                requested.entry(node).or_insert(now);
            }
        }
        self.inner.commit(batch)
    }
    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        self.inner.due_timers(horizon, limit)
    }
    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        self.inner.send_signal(signal)
    }
    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        self.inner.signals(run, after)
    }
    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        self.inner.heartbeat(owner, held, lease)
    }
    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        self.inner.release(owner, held)
    }
    fn due_runs<'a>(
        &'a self,
        owner: &'a Owner,
        workflows: &'a [WorkflowVersion],
        limit: u32,
    ) -> StoreFuture<'a, Vec<RunSummary>> {
        self.inner.due_runs(owner, workflows, limit)
    }
    fn claim_tasks<'a>(
        &'a self,
        owner: &'a Owner,
        workflows: &'a [WorkflowVersion],
        limit: u32,
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        Box::pin(async move {
            let claims = self
                .inner
                .claim_tasks(owner, workflows, limit, lease)
                .await?;
            let now = Instant::now();
            let mut claimed = lock(&self.claimed);
            for claim in &claims {
                claimed.entry(claim.node).or_insert(now);
            }
            Ok(claims)
        })
    }
    fn heartbeat_tasks<'a>(
        &'a self,
        held: &'a [TaskClaim],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        self.inner.heartbeat_tasks(held, lease)
    }
    fn complete_task<'a>(
        &'a self,
        claim: &'a TaskClaim,
        outcome: TaskOutcome,
    ) -> StoreFuture<'a, TaskCommitted> {
        self.inner.complete_task(claim, outcome)
    }
    fn task_results<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<TaskResult>> {
        self.inner.task_results(run)
    }
    fn task_inputs<'a>(&'a self, run: &'a str) -> StoreFuture<'a, TaskInputs> {
        self.inner.task_inputs(run)
    }
}

/// Runs the chain on one worker keeping runs sticky for `window`; when each step was
/// requested, by node.
async fn run(window: Duration) -> Result<(Times, Times), Box<dyn std::error::Error>> {
    let store = Timed {
        inner: MemoryStore::new(),
        requested: Arc::default(),
        claimed: Arc::default(),
    };
    DurableChain1000::runner()
        .durable(&store, "chain")
        .distributed()
        .submit(0)
        .await?;
    let worker = Worker::new(store.clone())
        .register::<DurableChain1000>()
        .poll_interval(Duration::from_millis(1))
        .sticky(window);
    let done = tokio::sync::Notify::new();
    let watch = async {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(600) {
            let runs = store.list_runs(&RunFilter::default()).await;
            if runs.is_ok_and(|runs| runs.iter().all(|r| r.status.is_finished())) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        done.notify_waiters();
    };
    let (report, ()) = tokio::join!(worker.run(done.notified()), watch);
    let report = report?;
    if report.tasks_completed != 1000 {
        return Err(format!("{} of 1000 steps completed", report.tasks_completed).into());
    }
    let requested = lock(&store.requested).clone();
    let claimed = lock(&store.claimed).clone();
    Ok((requested, claimed))
}

/// The median, over the ten steps up to `k` (node k-1 is step k), of the time from `from` of
/// the step before to `to` of the step.
fn step_time(from: &Times, to: &Times, k: u32) -> Option<Duration> {
    let mut times: Vec<Duration> = (k.saturating_sub(10)..k)
        .filter(|&node| node >= 1)
        .filter_map(|node| {
            let now = to.get(&node)?;
            let before = from.get(&(node - 1))?;
            Some(now.saturating_duration_since(*before))
        })
        .collect();
    times.sort_unstable();
    times.get(times.len() / 2).copied()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!("A distributed chain of 1,000 no-op steps, one worker on a MemoryStore, 1 ms poll\n");
    println!(
        "| decider | what | step 10 | step 100 | step 1,000 | all 1,000 steps |\n\
         |---|---|---:|---:|---:|---:|"
    );
    for (name, window) in [
        ("sticky (the default)", Duration::from_secs(60)),
        ("not sticky", Duration::ZERO),
    ] {
        let (requested, claimed) = runtime.block_on(run(window))?;
        let all = match (requested.get(&0), requested.get(&999)) {
            (Some(first), Some(last)) => format!("{:.2?}", last.saturating_duration_since(*first)),
            _ => "n/a".to_owned(),
        };
        let show = |from: &Times, to: &Times, k| {
            step_time(from, to, k).map_or("n/a".to_owned(), |d| format!("{d:.2?}"))
        };
        // The decision: from the step's task claimed (then executed, its outcome handed over
        // or stored) to the next step requested.
        println!(
            "| {name} | decision (claim to next request) | {} | {} | {} | |",
            show(&claimed, &requested, 10),
            show(&claimed, &requested, 100),
            show(&claimed, &requested, 1000),
        );
        // The whole step, the worker's polling included.
        println!(
            "| {name} | step (request to next request) | {} | {} | {} | {all} |",
            show(&requested, &requested, 10),
            show(&requested, &requested, 100),
            show(&requested, &requested, 1000),
        );
    }
    Ok(())
}
