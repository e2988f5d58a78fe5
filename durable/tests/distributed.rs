//! Distributed runs on one shared store: a run's operations are tasks that any `Worker`
//! claims and executes, its decisions are made by whichever worker holds its lease; a worker
//! that dies loses its task to another, which runs the attempt again with the same key.
//! (`MemoryStore`, workers in this process; the PostgreSQL fleet test runs processes.)

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowdag::durable::Ended;
use flowdag::prelude::*;
use flowdag::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunStatus, RunSummary, SignalSent, Store, StoreFuture, StoredEvent,
    StoredSignal, TaskClaim, TaskCommitted, TaskInputs, TaskOutcome, TaskResult, WorkflowVersion,
};
use flowdag::{Worker, WorkerReport};

/// Every attempt executed, by idempotency key, with how many times it ran.
static EFFECTS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

/// Records the current attempt's key; returns its attempt number.
fn effect() -> u32 {
    let attempt = flowdag::attempt().expect("inside a durable run");
    let mut effects = EFFECTS.lock().unwrap_or_else(|e| e.into_inner());
    *effects.entry(attempt.key()).or_default() += 1;
    attempt.attempt()
}

fn effects_of(run: &str) -> BTreeMap<String, u32> {
    let effects = EFFECTS.lock().unwrap_or_else(|e| e.into_inner());
    effects
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{run}/")))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

async fn load(order: u64) -> Result<u64, Declined> {
    effect();
    Ok(order * 10)
}

async fn part(name: &'static str, base: &u64) -> Result<u64, Declined> {
    // Read before the first await: the key is the attempt's being polled.
    let attempt = effect();
    tokio::task::yield_now().await;
    if name == "b" && attempt == 1 {
        return Err(Declined);
    }
    Ok(base + name.len() as u64 * 100 + u64::from(name.as_bytes()[0]))
}

async fn note(order: u64) -> Result<(), Declined> {
    effect();
    let _ = order;
    Ok(())
}

async fn sum(a: &u64, b: &u64, c: &u64) -> Result<u64, Declined> {
    effect();
    Ok(a + b + c)
}

workflow! {
    #[flow(durable)]
    Fan(order: u64) -> u64 {
        Sequential {
            base = Operation(load(order)),
            Parallel {
                a = Operation(part("a", &base)),
                b = Operation(part("b", &base), retries = 2, backoff = "10ms"),
                c = Operation(part("c", &base)),
            },
            Conditional(order % 2 == 0) {
                Operation(note(order)),
            },
            total = Operation(sum(&a, &b, &c)),
        }
        => total
    }
}

fn expected(order: u64) -> u64 {
    let base = order * 10;
    3 * base + 300 + u64::from(b'a') + u64::from(b'b') + u64::from(b'c')
}

/// Runs `workers` until every run of the store has finished (at most 20 s), then stops them.
async fn until_all_finished<S: Store + Clone>(
    store: &S,
    workers: Vec<Worker<S>>,
) -> Vec<WorkerReport> {
    let done = tokio::sync::Notify::new();
    let watch = async {
        let start = Instant::now();
        loop {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs.iter().all(|r| r.status.is_finished())
                || start.elapsed() > Duration::from_secs(20)
            {
                done.notify_waiters();
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let runs = futures::future::join_all(workers.iter().map(|w| w.run(done.notified())));
    let (reports, ()) = tokio::join!(runs, watch);
    reports
        .into_iter()
        .map(|r| r.expect("the worker ran"))
        .collect()
}

/// A worker that executes two tasks at a time, so that one worker alone cannot take them all.
fn worker(store: &MemoryStore) -> Worker<MemoryStore> {
    Worker::new(store.clone())
        .register::<Fan>()
        .poll_interval(Duration::from_millis(5))
        .max_tasks(2)
}

#[tokio::test(flavor = "current_thread")]
async fn workers_share_the_tasks_of_distributed_runs() {
    let store = MemoryStore::new();
    let orders: Vec<u64> = (1..=6).collect();
    for &order in &orders {
        let ended = Fan::runner()
            .durable(&store, format!("fan-{order}"))
            .distributed()
            .submit(order)
            .await
            .expect("submitted");
        assert!(
            matches!(ended, Ended::Unloaded { wake_at_ms: None }),
            "a submitted run waits for its first task: {ended:?}"
        );
    }
    let reports =
        until_all_finished(&store, vec![worker(&store), worker(&store), worker(&store)]).await;
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Succeeded),
        "every run succeeds: {runs:?}"
    );
    let mut attempts = 0;
    for &order in &orders {
        let id = format!("fan-{order}");
        let outcome = Fan::resume(&store, &id)
            .await
            .expect("a finished run's outcome");
        assert_eq!(outcome.result.expect("succeeded"), expected(order), "{id}");
        // Each attempt ran once, with its own key; `b` twice (its first attempt failed).
        let effects = effects_of(&id);
        let mut keys: Vec<&str> = effects.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = vec![
            format!("{id}/a/1"),
            format!("{id}/b/1"),
            format!("{id}/b/2"),
            format!("{id}/base/1"),
            format!("{id}/c/1"),
            format!("{id}/total/1"),
        ];
        if order % 2 == 0 {
            want.push(format!("{id}/note/1"));
        }
        want.sort_unstable();
        assert_eq!(keys, want, "the attempts of {id}");
        assert!(
            effects.values().all(|&n| n == 1),
            "once per key: {effects:?}"
        );
        attempts += want.len() as u64;
        // The join fired once: one `Requested` of `total`.
        let events = store.events(&id, 0).await.expect("events");
        let requested = events
            .iter()
            .filter(|e| e.kind == "Requested" && e.node_name.as_deref() == Some("total"))
            .count();
        assert_eq!(requested, 1, "the join of {id} fired once");
        assert_eq!(
            store.task_results(&id).await.expect("results"),
            vec![],
            "no task is left of {id}"
        );
    }
    let executed: u64 = reports.iter().map(|r| r.tasks_completed).sum();
    assert_eq!(executed, attempts, "every attempt was a task: {reports:?}");
    let shares: Vec<u64> = reports.iter().map(|r| r.tasks_completed).collect();
    assert!(
        shares.iter().filter(|&&n| n > 0).count() >= 2,
        "the tasks were shared: {shares:?}"
    );
}

/// `Fan` as another build of the program has it: the same name, another graph.
mod other_build {
    use super::load;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Fan(order: u64) -> u64 {
            Sequential {
                base = Operation(load(order)),
                again = Operation(load(order)),
            }
            => base
        }
    }
}

/// A worker built with another graph of `Fan` neither claims the tasks of the runs started
/// with this one nor picks those runs up: they are left to the workers that have their graph,
/// which finish them as if it were not there. (A worker that claimed them would hold each task
/// for its 30 s lease without executing it.)
#[tokio::test(flavor = "current_thread")]
async fn a_worker_with_another_graph_of_the_workflow_takes_none_of_its_runs() {
    assert_eq!(other_build::Fan::GRAPH.name(), Fan::GRAPH.name());
    let store = MemoryStore::new();
    let orders: Vec<u64> = (11..=16).collect();
    for &order in &orders {
        Fan::runner()
            .durable(&store, format!("graphs-{order}"))
            .distributed()
            .submit(order)
            .await
            .expect("submitted");
    }
    let wrong = Worker::new(store.clone())
        .register::<other_build::Fan>()
        .poll_interval(Duration::from_millis(1));
    let reports = until_all_finished(
        &store,
        vec![wrong, worker(&store), worker(&store), worker(&store)],
    )
    .await;
    // Checked before `resume`, which would wait for a run's tasks with no worker left.
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Succeeded),
        "every run succeeds: {runs:?}"
    );
    for &order in &orders {
        let id = format!("graphs-{order}");
        let outcome = Fan::resume(&store, &id).await.expect("finished");
        assert_eq!(outcome.result.expect("succeeds"), expected(order), "{id}");
    }
    let wrong = &reports[0];
    assert_eq!(wrong.tasks_completed, 0, "{wrong:?}");
    assert_eq!(wrong.tasks_lost, 0, "{wrong:?}");
    assert!(wrong.resumed.is_empty(), "{wrong:?}");
    assert!(
        wrong.polls > 0,
        "the wrong worker looked at the store: {wrong:?}"
    );
    let right: u64 = reports[1..].iter().map(|r| r.tasks_completed).sum();
    assert!(right >= 6 * orders.len() as u64, "{reports:?}");
}

/// Runs once per execution: the first execution of a run's first attempt never ends.
async fn hang(label: &'static str) -> Result<String, Declined> {
    let attempt = effect();
    let key = flowdag::attempt().expect("inside a durable run").key();
    let executions = EFFECTS.lock().unwrap_or_else(|e| e.into_inner())[&key];
    if attempt == 1 && executions == 1 {
        std::future::pending::<()>().await;
    }
    Ok(format!("{label}@{attempt}"))
}

workflow! {
    #[flow(durable)]
    Stalls(order: u64) -> String {
        Sequential {
            first = Operation(hang("h"), timeout = "150ms", retries = 3),
        }
        => format!("{} for {}", first, order)
    }
}

workflow! {
    #[flow(durable)]
    Slow(order: u64) -> String {
        Sequential {
            first = Operation(hang("h"), timeout = "1h"),
        }
        => format!("{} for {}", first, order)
    }
}

workflow! {
    #[flow(durable)]
    Lonely(order: u64) -> u64 {
        Sequential {
            total = Operation(load(order)),
        }
        => total
    }
}

/// A task whose attempt hangs is timed out by the run's owner, whether the run is loaded or
/// not (the timeout is stored with the run): the task is given up (its worker loses its
/// claim) and the retry, a new task, succeeds. Another workflow's worker never takes a task
/// of a workflow it does not know.
#[tokio::test(flavor = "current_thread")]
async fn a_hung_task_times_out_and_its_retry_runs() {
    let store = MemoryStore::new();
    Stalls::runner()
        .durable(&store, "stall-1")
        .distributed()
        .submit(7)
        .await
        .expect("submitted");
    Lonely::runner()
        .durable(&store, "lonely-1")
        .distributed()
        .submit(4)
        .await
        .expect("submitted");
    let stalls = Worker::new(store.clone())
        .register::<Stalls>()
        .poll_interval(Duration::from_millis(5))
        .task_lease(Duration::from_millis(60));
    let done = tokio::sync::Notify::new();
    let watch = async {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs
                .iter()
                .any(|r| r.id == "stall-1" && r.status.is_finished())
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done.notify_waiters();
    };
    let (report, ()) = tokio::join!(stalls.run(done.notified()), watch);
    let report = report.expect("the worker ran");
    let outcome = Stalls::resume(&store, "stall-1").await.expect("finished");
    // The retry succeeds (a later one, on a machine so loaded that the retry timed out too).
    let result = outcome.result.expect("a retry succeeds");
    let attempt: u32 = result
        .strip_prefix("h@")
        .and_then(|rest| rest.strip_suffix(" for 7"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected result {result}"));
    assert!(attempt >= 2, "{result}");
    let events = store.events("stall-1", 0).await.expect("events");
    assert!(
        events.iter().any(|e| e.kind == "TimedOut"),
        "the first attempt timed out: {:?}",
        events.iter().map(|e| &e.kind).collect::<Vec<_>>()
    );
    assert!(
        report.tasks_lost >= 1,
        "the hung attempt's claim was lost: {report:?}"
    );
    assert_eq!(report.tasks_completed, 1, "{report:?}");
    let keys: Vec<String> = effects_of("stall-1").keys().cloned().collect();
    assert!(
        keys.starts_with(&["stall-1/first/1".to_owned(), "stall-1/first/2".to_owned()]),
        "{keys:?}"
    );
    // `Lonely` has no worker here: its run and task are left alone.
    let lonely = store.list_runs(&RunFilter::default()).await.expect("lists");
    let lonely = lonely.iter().find(|r| r.id == "lonely-1").expect("stored");
    assert_eq!(lonely.status, RunStatus::Waiting, "{lonely:?}");
    assert!(effects_of("lonely-1").is_empty(), "no worker executed it");
}

/// A worker that dies while it executes a task (its future dropped, as a killed process's
/// would be) loses the task once its lease lapses; another worker executes the same attempt
/// again, with the same idempotency key.
#[tokio::test(flavor = "current_thread")]
async fn a_dead_worker_s_task_runs_again_with_the_same_key() {
    let store = MemoryStore::new();
    Slow::runner()
        .durable(&store, "dead-1")
        .distributed()
        .submit(1)
        .await
        .expect("submitted");
    let lease = Duration::from_millis(60);
    let doomed = Worker::new(store.clone())
        .register::<Slow>()
        .poll_interval(Duration::from_millis(5))
        .task_lease(lease);
    // It claims the task, starts it, and dies.
    let started = async {
        let start = Instant::now();
        while effects_of("dead-1").is_empty() && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        _ = doomed.run(std::future::pending()) => panic!("the doomed worker stopped"),
        () = started => {}
    }
    assert_eq!(
        effects_of("dead-1").into_iter().collect::<Vec<_>>(),
        vec![("dead-1/first/1".to_owned(), 1)],
        "the first attempt started once"
    );
    let heir = Worker::new(store.clone())
        .register::<Slow>()
        .poll_interval(Duration::from_millis(5))
        .task_lease(lease);
    let done = tokio::sync::Notify::new();
    let watch = async {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs.iter().all(|r| r.status.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done.notify_waiters();
    };
    let (report, ()) = tokio::join!(heir.run(done.notified()), watch);
    let report = report.expect("the worker ran");
    let outcome = Slow::resume(&store, "dead-1").await.expect("finished");
    assert_eq!(
        outcome.result.expect("the re-executed attempt succeeds"),
        "h@1 for 1",
        "the same attempt, not a retry"
    );
    assert_eq!(
        effects_of("dead-1").into_iter().collect::<Vec<_>>(),
        vec![("dead-1/first/1".to_owned(), 2)],
        "the attempt ran again with the same key"
    );
    assert_eq!(report.tasks_completed, 1, "{report:?}");
}

/// A store of one process has no tasks: a distributed run on SQLite is refused with a clear
/// error, and nothing of it is left running.
#[tokio::test(flavor = "current_thread")]
async fn a_store_of_one_process_refuses_distributed_runs() {
    let dir = std::env::temp_dir().join(format!("flow-dist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("runs.db");
    let store = flowdag_sqlite::SqliteStore::open(&path).expect("opens");
    let err = Lonely::runner()
        .durable(&store, "one-process")
        .distributed()
        .submit(3)
        .await
        .expect_err("refused");
    assert!(
        err.to_string().contains("does not support `tasks`"),
        "{err}"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

workflow! {
    #[flow(durable)]
    Patient(order: u64) -> String {
        Sequential {
            base = Operation(load(order)),
            Delay("80ms"),
            word = Signal(go: String),
            total = Operation(part("a", &base)),
        }
        => format!("{} {}", word, total)
    }
}

/// A distributed run waiting for a timer and then a signal holds no worker that unloads runs
/// as they wait: the timer makes it due and a free worker picks it up; the signal, sent from
/// outside, does the same.
#[tokio::test(flavor = "current_thread")]
async fn timers_and_signals_wake_whichever_worker_is_free() {
    let store = MemoryStore::new();
    Patient::runner()
        .durable(&store, "patient-1")
        .distributed()
        .submit(2)
        .await
        .expect("submitted");
    let workers: Vec<_> = (0..2)
        .map(|_| {
            Worker::new(store.clone())
                .register::<Patient>()
                .poll_interval(Duration::from_millis(5))
                .unload_after(Duration::ZERO)
        })
        .collect();
    let done = tokio::sync::Notify::new();
    let drive = async {
        let start = Instant::now();
        let mut sent = false;
        while start.elapsed() < Duration::from_secs(10) {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            let run = &runs[0];
            if run.status.is_finished() {
                break;
            }
            // Once the run waits for its signal (the `Delay` has passed), send it.
            let events = store.events("patient-1", 0).await.expect("events");
            if !sent && events.iter().any(|e| e.kind == "TimerFired") {
                flowdag::durable::send_signal(&store, "patient-1", Patient::GO, "go".to_owned())
                    .await
                    .expect("sent");
                sent = true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done.notify_waiters();
    };
    let runs = futures::future::join_all(workers.iter().map(|w| w.run(done.notified())));
    let (reports, ()) = tokio::join!(runs, drive);
    let unloaded: usize = reports
        .iter()
        .map(|r| r.as_ref().expect("ran").unloaded.len())
        .sum();
    let outcome = Patient::resume(&store, "patient-1")
        .await
        .expect("finished");
    assert_eq!(
        outcome.result.expect("succeeds"),
        format!("go {}", expected_a(2))
    );
    assert!(
        unloaded >= 3,
        "unloaded while its tasks, its timer and its signal were awaited: {unloaded}"
    );
}

fn expected_a(order: u64) -> u64 {
    order * 10 + 100 + u64::from(b'a')
}

/// A step that takes a while, so that its run waits for it, loaded, beside a `Delay`.
async fn crawl(base: &u64) -> Result<u64, Declined> {
    effect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    Ok(*base)
}

// A worker picks the run up when `base` is done; it then waits for `crawled`, a task, beside
// a `Delay`, which keeps it loaded (a worker unloads a run that waits for tasks alone).
workflow! {
    #[flow(durable)]
    Lagging(order: u64) -> u64 {
        Sequential {
            base = Operation(load(order)),
            Parallel {
                crawled = Operation(crawl(&base)),
                Delay("250ms"),
            },
            total = Operation(part("a", &crawled)),
        }
        => total
    }
}

/// What [`Watched`] saw: the looks at task outcomes alive per run, those dropped before they
/// answered, and the commits of a run's unloading made while one of its looks was alive.
#[derive(Default)]
struct Seen {
    /// Runs loaded (`load_run`).
    loads: AtomicUsize,
    /// Task outcomes stored by the worker that executed them (`complete_task`).
    completions: AtomicUsize,
    live: Mutex<HashMap<String, usize>>,
    abandoned: AtomicUsize,
    unloaded_with_a_live_look: AtomicUsize,
}

/// A `MemoryStore` that counts the runs it loads and watches what is in flight when a run
/// unloads; with `slow`, its looks at a run's task outcomes take 500 ms (as a request waiting
/// for a connection of a busy pool does).
#[derive(Clone)]
struct Watched {
    inner: MemoryStore,
    seen: Arc<Seen>,
    slow: bool,
}

/// One look at task outcomes, counted while it lives.
struct Look {
    run: String,
    seen: Arc<Seen>,
    answered: bool,
}

impl Drop for Look {
    fn drop(&mut self) {
        let mut live = self.seen.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = live.get_mut(&self.run) {
            *n -= 1;
        }
        if !self.answered {
            self.seen.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Store for Watched {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        self.inner.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        self.seen.loads.fetch_add(1, Ordering::SeqCst);
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
        if batch.status == Some(RunStatus::Waiting) {
            let live = self.seen.live.lock().unwrap_or_else(|e| e.into_inner());
            if live.get(&batch.run).copied().unwrap_or(0) > 0 {
                self.seen
                    .unloaded_with_a_live_look
                    .fetch_add(1, Ordering::SeqCst);
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
        self.inner.claim_tasks(owner, workflows, limit, lease)
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
        self.seen.completions.fetch_add(1, Ordering::SeqCst);
        self.inner.complete_task(claim, outcome)
    }
    fn task_results<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<TaskResult>> {
        *self
            .seen
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(run.to_owned())
            .or_default() += 1;
        let look = Look {
            run: run.to_owned(),
            seen: Arc::clone(&self.seen),
            answered: false,
        };
        Box::pin(async move {
            // The whole look lives in the future (not only the field it writes).
            let mut look = look;
            if self.slow {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let results = self.inner.task_results(run).await;
            look.answered = true;
            results
        })
    }
    fn task_inputs<'a>(&'a self, run: &'a str) -> StoreFuture<'a, TaskInputs> {
        self.inner.task_inputs(run)
    }
}

/// A run that unloads while a look at its task outcomes is in flight drops that look first:
/// on PostgreSQL the look holds a connection of the pool (in the middle of its transaction)
/// that nothing would poll again, while the unloading's own commit waits for a connection.
/// With as many such runs as the pool has connections, a worker waited forever.
#[tokio::test(flavor = "current_thread")]
async fn a_run_that_unloads_drops_its_look_at_task_outcomes_first() {
    let store = Watched {
        inner: MemoryStore::new(),
        seen: Arc::default(),
        slow: true,
    };
    let orders = [1u64, 2, 3];
    for order in orders {
        Lagging::runner()
            .durable(&store, format!("lagging-{order}"))
            .distributed()
            .submit(order)
            .await
            .expect("submitted");
    }
    let lagging = |store: &Watched| {
        Worker::new(store.clone())
            .register::<Lagging>()
            .poll_interval(Duration::from_millis(5))
            .sticky(Duration::ZERO)
    };
    until_all_finished(&store, vec![lagging(&store), lagging(&store)]).await;
    for order in orders {
        let id = format!("lagging-{order}");
        let outcome = Lagging::resume(&store, &id).await.expect("finished");
        assert_eq!(outcome.result.expect("succeeds"), expected_a(order), "{id}");
    }
    // Each run waited for `crawl` beside its `Delay`, loaded, long enough to look at the
    // store for its outcome (every 100 ms); the `Delay` ended first, and the run unloaded
    // with that look unanswered.
    assert!(
        store.seen.abandoned.load(Ordering::SeqCst) >= 1,
        "a look at task outcomes was in flight when a run unloaded"
    );
    assert_eq!(
        store.seen.unloaded_with_a_live_look.load(Ordering::SeqCst),
        0,
        "no run committed its unloading while its look at task outcomes was alive"
    );
}

async fn step(n: u64) -> Result<u64, Declined> {
    Ok(n + 1)
}

workflow! {
    #[flow(durable)]
    Chain(start: u64) -> u64 {
        Sequential {
            a = Operation(step(start)),
            b = Operation(step(a)),
            c = Operation(step(b)),
            d = Operation(step(c)),
            e = Operation(step(d)),
        }
        => e
    }
}

/// Runs a distributed `Chain` on one worker that keeps runs sticky for `window`; how many
/// times the store loaded a run, and how many task outcomes the worker stored itself.
async fn loads_of_a_chain(window: Duration) -> (usize, usize) {
    let store = Watched {
        inner: MemoryStore::new(),
        seen: Arc::default(),
        slow: false,
    };
    Chain::runner()
        .durable(&store, "chain-1")
        .distributed()
        .submit(10)
        .await
        .expect("submitted");
    let worker = Worker::new(store.clone())
        .register::<Chain>()
        .poll_interval(Duration::from_millis(5))
        .sticky(window);
    let reports = until_all_finished(&store, vec![worker]).await;
    assert_eq!(reports[0].tasks_completed, 5);
    let loads = store.seen.loads.load(Ordering::SeqCst);
    let completions = store.seen.completions.load(Ordering::SeqCst);
    let outcome = Chain::resume(&store, "chain-1").await.expect("finished");
    assert_eq!(outcome.result.expect("succeeds"), 15);
    (loads, completions)
}

/// A sticky run is decided from its state in memory: the worker that picked it up takes each
/// task's outcome as it comes and requests the next step without loading the run again, and
/// the outcomes of the tasks it executes itself go to the run in memory (the batch that
/// journals one is its only write). A worker that keeps nothing sticky unloads the run after
/// each step, stores each outcome, and loads (and replays) the run for the next.
#[tokio::test(flavor = "current_thread")]
async fn a_sticky_run_is_decided_without_loading_it_again() {
    // Loaded once, by the worker, when the first task was done (the submit created it); that
    // first outcome was stored (the run was not the worker's yet), the four after it were
    // handed over.
    assert_eq!(loads_of_a_chain(Duration::from_secs(60)).await, (1, 1));
    // Loaded for each of its five steps' outcomes, each stored.
    let (loads, completions) = loads_of_a_chain(Duration::ZERO).await;
    assert!(loads >= 5, "{loads} loads");
    assert_eq!(completions, 5);
}
