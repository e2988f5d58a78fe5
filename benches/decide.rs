//! The time of a distributed run's decision along a run: at step 10, 100 and 1,000 of a
//! chain of 1,000 no-op operations, and at iteration 10, 100, 1,000 and 10,000 of a `Loop` of
//! 10,000 iterations whose body is one no-op operation (each iteration a task). Three deciders:
//! a sticky worker (decisions from the run's state in memory), a worker that keeps nothing
//! sticky (each decision takes the run over: it loads the run's decided state and replays its
//! own events), and the same on a store that loads the whole history
//! (`MemoryStore::loading_history`: every event and every iteration's end, each decision
//! replays everything and walks the loop from its first iteration; up to iteration 2,000, as
//! its cost grows with the run).
//!
//! ```text
//! cargo bench -p flow-benches --bench decide
//! ```
//!
//! One worker on a `MemoryStore` (the store's own cost out of the way: what grows, grows in
//! the decider), polling every millisecond. A decision's time is the time from the claim of
//! step k-1's task to the commit that opens step k's task: the operation's execution
//! (nothing), its outcome reaching the decider (in memory when sticky; through the store, a
//! look for due runs and a load of the run when not), and the decision that journals it and
//! opens the next. A step's time adds the worker's wait for its next look (the poll). The
//! table gives the median over the ten steps up to k. Not criterion: one run is measured whole
//! and the program prints a table.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowdag::prelude::*;
use flowdag_runtime::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunSummary, SignalSent, Store, StoreFuture, StoredEvent, StoredSignal,
    TaskChange, TaskClaim, TaskCommitted, TaskInputs, TaskOutcome, TaskResult, WorkflowVersion,
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

/// A `MemoryStore` that notes when each step's task was opened and when it was claimed: a
/// step is a node of the chain, an iteration of the loop.
#[derive(Clone)]
struct Timed {
    inner: MemoryStore,
    requested: Arc<Mutex<Times>>,
    claimed: Arc<Mutex<Times>>,
}

/// When each step's event happened.
type Times = HashMap<u64, Instant>;

/// The step a task runs: its iteration for a loop's (`counted@7` → 7), else its node.
fn step_of(node: u32, instance: &str) -> u64 {
    match instance.rsplit_once('@') {
        Some((_, k)) => k.parse().unwrap_or(u64::MAX),
        None => u64::from(node),
    }
}

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
        for change in &batch.tasks {
            if let TaskChange::Open { node, instance, .. } = change {
                requested.entry(step_of(*node, instance)).or_insert(now);
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
                claimed
                    .entry(step_of(claim.node, &claim.instance))
                    .or_insert(now);
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

workflow! {
    /// Counts to `to`, one no-op operation per iteration: a chain of `to` steps.
    #[flow(durable)]
    Counter(to: u64) -> u64 {
        counted = Loop(max = 10_000, prev = last) {
            round = Operation(op(last.copied().unwrap_or(0)))
            => round
        } until (round >= to)
        => counted
    }
}

/// What a case runs: the chain of 1,000 nodes, or the loop of `to` iterations.
#[derive(Clone, Copy)]
enum Shape {
    Chain,
    Loop { to: u64 },
}

impl Shape {
    fn steps(self) -> u64 {
        match self {
            Shape::Chain => 1000,
            Shape::Loop { to } => to,
        }
    }
}

/// Runs `shape` on one worker keeping runs sticky for `window`, on `inner`; when each step's
/// task was opened and claimed.
async fn run(
    shape: Shape,
    inner: MemoryStore,
    window: Duration,
) -> Result<(Times, Times), Box<dyn std::error::Error>> {
    let store = Timed {
        inner,
        requested: Arc::default(),
        claimed: Arc::default(),
    };
    let worker = Worker::new(store.clone())
        .poll_interval(Duration::from_millis(1))
        .sticky(window);
    let worker = match shape {
        Shape::Chain => {
            DurableChain1000::runner()
                .durable(&store, "chain")
                .distributed()
                .submit(0)
                .await?;
            worker.register::<DurableChain1000>()
        }
        Shape::Loop { to } => {
            Counter::runner()
                .durable(&store, "loop")
                .distributed()
                .submit(to)
                .await?;
            worker.register::<Counter>()
        }
    };
    let done = tokio::sync::Notify::new();
    let watch = async {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(900) {
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
    if report.tasks_completed != shape.steps() {
        return Err(format!(
            "{} of {} steps completed",
            report.tasks_completed,
            shape.steps()
        )
        .into());
    }
    let requested = lock(&store.requested).clone();
    let claimed = lock(&store.claimed).clone();
    Ok((requested, claimed))
}

/// The median, over the ten steps up to `k` (step k-1 counted from 0), of the time from
/// `from` of the step before to `to` of the step.
fn step_time(from: &Times, to: &Times, k: u64) -> Option<Duration> {
    let mut times: Vec<Duration> = (k.saturating_sub(10)..k)
        .filter(|&step| step >= 1)
        .filter_map(|step| {
            let now = to.get(&step)?;
            let before = from.get(&(step - 1))?;
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
    println!("Distributed runs, one worker on a MemoryStore, 1 ms poll; medians of ten steps\n");
    println!(
        "| run | decider | what | step 10 | step 100 | step 1,000 | step 10,000 | all steps |\n\
         |---|---|---|---:|---:|---:|---:|---:|"
    );
    let cases = [
        (
            "chain of 1,000 nodes",
            Shape::Chain,
            "sticky (the default)",
            false,
            Duration::from_secs(60),
        ),
        (
            "chain of 1,000 nodes",
            Shape::Chain,
            "not sticky",
            false,
            Duration::ZERO,
        ),
        (
            "`Loop` of 10,000",
            Shape::Loop { to: 10_000 },
            "sticky (the default)",
            false,
            Duration::from_secs(60),
        ),
        (
            "`Loop` of 10,000",
            Shape::Loop { to: 10_000 },
            "not sticky: takes the run over",
            false,
            Duration::ZERO,
        ),
        (
            "`Loop` of 2,000",
            Shape::Loop { to: 2_000 },
            "not sticky, whole history loaded",
            true,
            Duration::ZERO,
        ),
    ];
    let only = std::env::var("ONLY").ok();
    for (run_name, shape, decider, history, window) in cases {
        if only.as_deref().is_some_and(|o| !run_name.contains(o)) {
            continue;
        }
        let store = match history {
            true => MemoryStore::new().loading_history(),
            false => MemoryStore::new(),
        };
        let (requested, claimed) = runtime.block_on(run(shape, store, window))?;
        let last = shape.steps() - 1;
        let all = match (requested.get(&0), requested.get(&last)) {
            (Some(first), Some(end)) => format!("{:.2?}", end.saturating_duration_since(*first)),
            _ => "n/a".to_owned(),
        };
        let show = |from: &Times, to: &Times, k: u64| match k <= shape.steps() {
            true => step_time(from, to, k).map_or("n/a".to_owned(), |d| format!("{d:.2?}")),
            false => String::new(),
        };
        // The decision: from the step's task claimed (then executed, its outcome handed over
        // or stored) to the next step's task opened.
        println!(
            "| {run_name} | {decider} | decision | {} | {} | {} | {} | |",
            show(&claimed, &requested, 10),
            show(&claimed, &requested, 100),
            show(&claimed, &requested, 1000),
            show(&claimed, &requested, 10_000),
        );
        // The whole step, the worker's polling included.
        println!(
            "| {run_name} | {decider} | step | {} | {} | {} | {} | {all} |",
            show(&requested, &requested, 10),
            show(&requested, &requested, 100),
            show(&requested, &requested, 1000),
            show(&requested, &requested, 10_000),
        );
    }
    Ok(())
}
