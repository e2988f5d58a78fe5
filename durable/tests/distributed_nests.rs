//! Distributed nests: in a `.distributed()` run, each instance of a `ForEach` and each
//! iteration of a `Loop` is a task that any worker claims and executes whole (its steps with
//! their instance's keys), while the run's decider only opens the tasks and journals their
//! ends. A decider that executes no task (`max_tasks(0)`) runs none of them itself; four
//! workers share the 500 instances of one `ForEach`; a `Loop`'s iterations go on from the
//! previous one's stored output, whichever worker executes each.
//! (`MemoryStore`, workers on threads of this process.)

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flowdag::WorkflowError;
use flowdag::prelude::*;
use flowdag::store::{MemoryStore, RunFilter, Store};
use flowdag::{Worker, WorkerReport};

/// Every step executed: its idempotency key, with the thread (worker) of each execution.
static RAN: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());

fn ran(pause: Duration) -> impl Future<Output = ()> {
    let key = flowdag::attempt().map_or_else(|| "none".to_owned(), |a| a.key());
    let thread = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_owned();
    RAN.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default()
        .push(thread);
    tokio::time::sleep(pause)
}

/// The executions of run `run`'s steps, by key.
fn ran_in(run: &str) -> BTreeMap<String, Vec<String>> {
    RAN.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{run}/")))
        .map(|(key, threads)| (key.clone(), threads.clone()))
        .collect()
}

#[derive(Debug)]
struct Lost;

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the parcel was lost")
    }
}

impl std::error::Error for Lost {}

async fn count(lines: u32) -> Result<u32, Lost> {
    ran(Duration::ZERO).await;
    Ok(lines)
}

async fn ship(line: u32) -> Result<u32, Lost> {
    ran(Duration::from_millis(3)).await;
    Ok(line * 10)
}

/// `ship_or_lose` calls in flight, and the most seen at once.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

async fn ship_or_lose(line: u32) -> Result<u32, Lost> {
    let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
    PEAK.fetch_max(now, Ordering::SeqCst);
    ran(Duration::from_millis(5)).await;
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    match line {
        4 => Err(Lost),
        _ => Ok(line * 10),
    }
}

async fn poll(round: u32) -> Result<u32, Lost> {
    ran(Duration::from_millis(1)).await;
    Ok(round + 1)
}

workflow! {
    /// Ships every line of an order, all at once.
    #[flow(durable)]
    Spread(lines: u32) -> Vec<u32> {
        Sequential {
            counted = Operation(count(lines)),
            shipped = ForEach(line in 0..counted) {
                parcel = Operation(ship(line))
                => parcel
            },
        }
        => shipped.clone()
    }
}

async fn pack(line: u32) -> Result<u32, Lost> {
    ran(Duration::from_millis(15)).await;
    Ok(line + 100)
}

workflow! {
    /// Packs every line, two at a time.
    #[flow(durable)]
    Packing(lines: u32) -> Vec<u32> {
        packed = ForEach(line in 0..lines, max_concurrency = 4) {
            parcel = Operation(pack(line))
            => parcel
        }
        => packed.clone()
    }
}

workflow! {
    /// Ships every line of a stream.
    #[flow(durable)]
    Streamed(lines: u32) -> Vec<u32> {
        shipped = ForEach(line in stream futures::stream::iter(0..lines)) {
            parcel = Operation(ship(line))
            => parcel
        }
        => shipped.clone()
    }
}

workflow! {
    /// Polls until the fifth round, each round from the previous one's output.
    #[flow(durable)]
    Poller(start: u32) -> u32 {
        polled = Loop(max = 10, prev = last) {
            round = Operation(poll(last.copied().unwrap_or(start)))
            => round
        } until (round >= start + 5)
        => polled
    }
}

workflow! {
    /// Ships every line, a lost parcel kept as a failure (`on_failure = collect`).
    #[flow(durable)]
    Collecting(lines: u32) -> Vec<Result<u32, String>> {
        shipped = ForEach(line in 0..lines, max_concurrency = 3, on_failure = collect) {
            parcel = Operation(ship_or_lose(line))
            => parcel
        }
        => shipped.iter().map(|r| r.as_ref().copied().map_err(|e| e.to_string())).collect()
    }
}

/// Runs `worker` on a thread of its own named `name` (its steps record that name) until
/// `stop` is set or 60 s passed.
fn start(
    name: &str,
    worker: Worker<MemoryStore>,
    stop: &'static AtomicBool,
) -> std::thread::JoinHandle<WorkerReport> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let until = async {
                    let began = Instant::now();
                    while !stop.load(Ordering::SeqCst) && began.elapsed() < Duration::from_secs(60)
                    {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                };
                worker.run(until).await.expect("the worker runs")
            })
        })
        .expect("a thread")
}

/// Waits (at most 60 s) until `check` holds.
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let began = Instant::now();
    while !check() {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The run's summary, looked up in `store`.
fn status_of(store: &MemoryStore, run: &str) -> Option<flowdag::store::RunSummary> {
    futures::executor::block_on(store.list_runs(&RunFilter::default()))
        .expect("lists")
        .into_iter()
        .find(|r| r.id == run)
}

/// Runs `workers` workers of `W`, each on a thread of its own (`worker-1`, …), until `run`
/// finished; their reports.
fn run_on_workers<W: flowdag::durable::DurableWorkflow>(
    store: &MemoryStore,
    run: &str,
    workers: usize,
    stop: &'static AtomicBool,
) -> Vec<WorkerReport> {
    run_on::<W>(store, run, workers, stop, |worker| worker)
}

/// [`run_on_workers`] with each worker set up by `setup` too.
fn run_on<W: flowdag::durable::DurableWorkflow>(
    store: &MemoryStore,
    run: &str,
    workers: usize,
    stop: &'static AtomicBool,
    setup: impl Fn(Worker<MemoryStore>) -> Worker<MemoryStore>,
) -> Vec<WorkerReport> {
    let threads: Vec<_> = (1..=workers)
        .map(|i| {
            let worker = Worker::new(store.clone())
                .register::<W>()
                .max_tasks(8)
                .poll_interval(Duration::from_millis(2));
            start(&format!("worker-{i}"), setup(worker), stop)
        })
        .collect();
    wait_for("the run to finish", || {
        status_of(store, run).is_some_and(|r| r.status.is_finished())
    });
    stop.store(true, Ordering::SeqCst);
    threads
        .into_iter()
        .map(|w| w.join().expect("a worker's thread"))
        .collect()
}

/// The tasks the workers completed, all together.
fn tasks(reports: &[WorkerReport]) -> u64 {
    reports.iter().map(|r| r.tasks_completed).sum()
}

/// Every step of `run` ran once: the thread each ran on, by key.
fn once_each(run: &str) -> BTreeMap<String, String> {
    ran_in(run)
        .into_iter()
        .map(|(key, mut threads)| {
            assert_eq!(threads.len(), 1, "`{key}` ran once: {threads:?}");
            (key, threads.remove(0))
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Submits a distributed run (`submit` makes it in the store it is given), runs `workers`
/// workers of `W` (each set up by `setup`) until it finished, and resumes it: its result, and
/// the workers' reports.
fn distribute<W, F, T, E>(
    run: &str,
    workers: usize,
    stop: &'static AtomicBool,
    setup: impl Fn(Worker<MemoryStore>) -> Worker<MemoryStore>,
    submit: impl FnOnce(MemoryStore) -> F,
) -> (Result<W::Output, WorkflowError>, Vec<WorkerReport>)
where
    W: flowdag::durable::DurableWorkflow,
    F: Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
{
    let store = MemoryStore::new();
    let runtime = runtime();
    runtime.block_on(submit(store.clone())).expect("submitted");
    let reports = run_on::<W>(&store, run, workers, stop, setup);
    let outcome = runtime
        .block_on(flowdag::durable::resume::<W, _>(&store, run))
        .expect("finished");
    (outcome.result, reports)
}

/// The 500 instances are 500 tasks (and `count` one more), shared by the four workers: each
/// executes some. Were the instances run by the run's decider, they would all run on its
/// thread and be no task.
#[test]
fn a_foreach_of_500_items_spreads_over_four_workers() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let (result, reports) = distribute::<Spread, _, _, _>(
        "spread-1",
        4,
        &STOP,
        |worker| worker,
        |store| async move {
            Spread::runner()
                .durable(&store, "spread-1")
                .distributed()
                .submit(500)
                .await
        },
    );
    let shipped = result.expect("shipped");
    assert_eq!(shipped, (0..500).map(|i| i * 10).collect::<Vec<u32>>());
    assert_eq!(tasks(&reports), 501, "one task per instance: {reports:?}");
    let ran = once_each("spread-1");
    let mut by_worker: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..500 {
        let key = format!("spread-1/shipped[{i}]/parcel/1");
        let thread = ran
            .get(&key)
            .unwrap_or_else(|| panic!("instance {i} ran with its own key: {ran:?}"));
        *by_worker.entry(thread.as_str()).or_default() += 1;
    }
    for i in 1..=4 {
        assert!(
            by_worker
                .get(format!("worker-{i}").as_str())
                .copied()
                .unwrap_or(0)
                > 0,
            "worker-{i} executed instances: {by_worker:?}"
        );
    }
}

/// Each iteration is a task, executed from the previous iteration's stored output: the rounds
/// chain as they do in one process, each with its own key.
#[test]
fn a_loops_iterations_are_tasks_that_chain() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let (result, reports) = distribute::<Poller, _, _, _>(
        "poller-1",
        2,
        &STOP,
        |worker| worker,
        |store| async move {
            Poller::runner()
                .durable(&store, "poller-1")
                .distributed()
                .submit(10)
                .await
        },
    );
    let polled = result.expect("polled");
    assert_eq!(polled, 15);
    assert_eq!(tasks(&reports), 5, "one task per iteration: {reports:?}");
    let ran = once_each("poller-1");
    let keys: Vec<&str> = ran.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        (0..5)
            .map(|i| format!("poller-1/polled@{i}/round/1"))
            .collect::<Vec<_>>(),
        "each iteration's step, once, with its key"
    );
}

/// A failed instance is kept in the output (`on_failure = collect`) and its error comes back
/// by its task; `max_concurrency` bounds the tasks out at once.
#[test]
fn collected_failures_and_limits_hold_across_workers() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let (result, reports) = distribute::<Collecting, _, _, _>(
        "collecting-1",
        3,
        &STOP,
        |worker| worker,
        |store| async move {
            Collecting::runner()
                .durable(&store, "collecting-1")
                .distributed()
                .submit(8)
                .await
        },
    );
    let shipped = result.expect("collected");
    let expected: Vec<Result<u32, String>> = (0..8)
        .map(|i| match i {
            4 => Err("parcel".to_owned()),
            _ => Ok(i * 10),
        })
        .collect();
    assert_eq!(shipped.len(), expected.len());
    for (got, want) in shipped.iter().zip(&expected) {
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(got), Err(node)) => assert!(
                got.contains(node.as_str()) && got.contains("shipped[4]"),
                "the failure names the instance and its step: {got}"
            ),
            _ => panic!("{shipped:?} is not {expected:?}"),
        }
    }
    assert_eq!(tasks(&reports), 8, "one task per instance: {reports:?}");
    assert_eq!(once_each("collecting-1").len(), 8);
    let peak = PEAK.load(Ordering::SeqCst);
    assert!(
        (1..=3).contains(&peak),
        "at most three instances at once (max_concurrency), on any worker: {peak}"
    );
}

/// A decider that lets the run go while its instances are out (a sticky window of 1 ms) and
/// one that takes it up again replay its journal: the instances that ended come from the
/// store, those still out are not opened again (their tasks are kept with their claims), so
/// every instance runs once, and the order of the outputs holds.
#[test]
fn a_run_unloaded_while_its_instances_run_runs_each_once() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let (result, reports) = distribute::<Packing, _, _, _>(
        "packing-1",
        2,
        &STOP,
        |worker| worker.sticky(Duration::from_millis(1)),
        |store| async move {
            Packing::runner()
                .durable(&store, "packing-1")
                .distributed()
                .submit(12)
                .await
        },
    );
    let packed = result.expect("packed");
    assert_eq!(packed, (100..112).collect::<Vec<u32>>());
    let unloaded: usize = reports.iter().map(|r| r.unloaded.len()).sum();
    assert!(
        unloaded > 1,
        "the run was let go while its instances ran: {reports:?}"
    );
    assert_eq!(tasks(&reports), 12, "one task per instance: {reports:?}");
    assert_eq!(once_each("packing-1").len(), 12);
}

/// A worker that stops (as a process that dies) in the middle of a `ForEach`: another
/// finishes the run; the instances that ended are not run again, and only those the first
/// worker was executing when it stopped run a second time, with the same keys.
#[test]
fn a_worker_that_stops_midway_leaves_only_its_instances_in_flight() {
    static STOP_FIRST: AtomicBool = AtomicBool::new(false);
    static STOP: AtomicBool = AtomicBool::new(false);
    let store = MemoryStore::new();
    let runtime = runtime();
    runtime
        .block_on(
            Packing::runner()
                .durable(&store, "packing-2")
                .distributed()
                .submit(16),
        )
        .expect("submitted");
    let first = Worker::new(store.clone())
        .register::<Packing>()
        .max_tasks(2)
        .task_lease(Duration::from_millis(100))
        .run_lease(Duration::from_millis(100))
        .poll_interval(Duration::from_millis(2));
    let first = start("first", first, &STOP_FIRST);
    wait_for("six instances to run", || ran_in("packing-2").len() >= 6);
    STOP_FIRST.store(true, Ordering::SeqCst);
    first.join().expect("the first worker's thread");
    let before = ran_in("packing-2");
    let reports = run_on_workers::<Packing>(&store, "packing-2", 1, &STOP);
    let packed = runtime
        .block_on(Packing::resume(&store, "packing-2"))
        .expect("finished")
        .result
        .expect("packed");
    assert_eq!(packed, (100..116).collect::<Vec<u32>>());
    let after = ran_in("packing-2");
    assert_eq!(after.len(), 16, "every instance ran, with attempt 1's key");
    let twice: Vec<&String> = after
        .iter()
        .filter(|(_, threads)| threads.len() > 1)
        .map(|(key, _)| key)
        .collect();
    assert!(
        twice.len() <= 2,
        "only the instances in flight when the first worker stopped (at most its two tasks) ran again: {twice:?}"
    );
    for key in &twice {
        assert_eq!(
            before.get(*key).map(Vec::len),
            Some(1),
            "`{key}` ran again after it was cut short"
        );
    }
    assert!(tasks(&reports) >= 10, "{reports:?}");
}

/// A `ForEach` over a stream keeps its instances on the decider: a worker executing one
/// instance would read the stream again up to its item. No task is opened for them; each
/// instance still runs once, with its key, and its end is journaled.
#[test]
fn a_foreach_over_a_stream_runs_on_the_decider() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let (result, reports) = distribute::<Streamed, _, _, _>(
        "streamed-1",
        2,
        &STOP,
        |worker| worker,
        |store| async move {
            Streamed::runner()
                .durable(&store, "streamed-1")
                .distributed()
                .submit(6)
                .await
        },
    );
    let shipped = result.expect("shipped");
    assert_eq!(shipped, [0, 10, 20, 30, 40, 50]);
    assert_eq!(tasks(&reports), 0, "no instance is a task: {reports:?}");
    let ran = once_each("streamed-1");
    assert_eq!(
        ran.keys().map(String::as_str).collect::<Vec<_>>(),
        (0..6)
            .map(|i| format!("streamed-1/shipped[{i}]/parcel/1"))
            .collect::<Vec<_>>()
    );
}
