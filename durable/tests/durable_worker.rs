//! Durable timers and `flowdag::Worker`: a `Delay` step's due time is stored with its run, a run
//! stopped while it waits resumes waiting only what is left; the worker resumes the unfinished
//! runs of the workflows it knows (on `MemoryStore` and on `SqliteStore`) once their timer is
//! due, leaves alone the runs of others and the runs that ended, and its loop stops when told
//! to, after the runs it drives have ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flowdag::durable::DurableError;
use flowdag::prelude::*;
use flowdag::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunStatus, RunSummary, SignalSent, Store, StoreError, StoreFuture,
    StoredEvent, StoredSignal,
};
use flowdag::{Worker, WorkerReport};
use flowdag_sqlite::SqliteStore;

/// A store whose commit number `fail_at` (counted from 0) fails, as a crash would stop it;
/// or whose leases are short, so that a run dropped as a killed process would be is free to
/// resume soon.
#[derive(Clone)]
struct Failing<S> {
    inner: S,
    commits: Arc<AtomicUsize>,
    fail_at: usize,
    lease: Option<Duration>,
}

impl<S: Store + Clone> Failing<S> {
    fn new(inner: &S, fail_at: usize) -> Failing<S> {
        Failing {
            inner: inner.clone(),
            commits: Arc::new(AtomicUsize::new(0)),
            fail_at,
            lease: None,
        }
    }

    /// A store whose runs' leases last `LEASE`.
    fn short_lease(inner: &S) -> Failing<S> {
        Failing {
            lease: Some(LEASE),
            ..Failing::new(inner, usize::MAX)
        }
    }
}

/// The lease of a run on a `Failing::short_lease` store.
const LEASE: Duration = Duration::from_millis(100);

impl<S: Store + Clone> Store for Failing<S> {
    fn create_run(&self, mut run: NewRun) -> StoreFuture<'_, Created> {
        run.lease = self.lease.unwrap_or(run.lease);
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
    fn commit(&self, mut batch: Batch) -> StoreFuture<'_, Committed> {
        batch.lease = self.lease.unwrap_or(batch.lease);
        if self.commits.fetch_add(1, Ordering::SeqCst) == self.fail_at {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
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
}

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

async fn fetch(order: u64) -> Result<String, Never> {
    Ok(format!("item-{order}"))
}

async fn pack(item: &str) -> Result<String, Never> {
    Ok(format!("box({item})"))
}

async fn ship(parcel: &str) -> Result<String, Never> {
    Ok(format!("shipped {parcel}"))
}

workflow! {
    #[flow(durable)]
    Order(order: u64) -> String {
        Sequential {
            item = Operation(fetch(order)),
            parcel = Operation(pack(&item)),
            sent = Operation(ship(&parcel)),
        }
        => sent.clone()
    }
}

/// Waits between two steps: the timer is journaled.
const WAIT: Duration = Duration::from_millis(300);

workflow! {
    #[flow(durable)]
    Reminder(order: u64) -> String {
        Sequential {
            item = Operation(fetch(order)),
            Delay("300ms"),
            sent = Operation(ship(&item)),
        }
        => sent.clone()
    }
}

workflow! {
    #[flow(durable)]
    Other(order: u64) -> String {
        Sequential {
            item = Operation(fetch(order)),
            sent = Operation(ship(&item)),
        }
        => sent.clone()
    }
}

/// Starts run `id` of `Order` on `store` and stops it at its commit `n`.
async fn stopped_order<S: Store + Clone>(store: &S, id: &str, n: usize) {
    let err = Order::runner()
        .durable(&Failing::new(store, n), id)
        .execute(7)
        .await
        .expect_err("the failing commit stops the run");
    assert!(
        matches!(err, DurableError::Store(StoreError::Closed)),
        "{err}"
    );
}

async fn status<S: Store>(store: &S, id: &str) -> RunStatus {
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    runs.into_iter()
        .find(|run| run.id == id)
        .expect("the run exists")
        .status
}

#[tokio::test]
async fn resume_due_resumes_the_stopped_runs_of_registered_workflows_only() {
    let store = MemoryStore::new();
    stopped_order(&store, "order-1", 2).await;
    stopped_order(&store, "order-2", 1).await;
    let other = Other::runner()
        .durable(&Failing::new(&store, 1), "other-1")
        .execute(3)
        .await;
    assert!(other.is_err());
    let done = Order::runner()
        .durable(&store, "order-3")
        .execute(9)
        .await
        .expect("runs");
    assert_eq!(done.result.expect("succeeds"), "shipped box(item-9)");

    let worker = Worker::new(store.clone()).register::<Order>();
    assert_eq!(worker.workflows(), ["Order"]);
    let mut resumed = worker.resume_due().await.expect("lists the runs");
    resumed.sort_by(|a, b| a.run.cmp(&b.run));
    let ids: Vec<&str> = resumed.iter().map(|r| r.run.as_str()).collect();
    assert_eq!(ids, ["order-1", "order-2"]);
    for run in &resumed {
        assert_eq!(run.workflow, "Order");
        let outcome = run.result.as_ref().expect("resumes");
        assert!(outcome.result.is_ok(), "{:?}", outcome.result);
        assert_eq!(status(&store, &run.run).await, RunStatus::Succeeded);
    }
    // The run of `Other`, which the worker does not know, is left as it was.
    assert_eq!(status(&store, "other-1").await, RunStatus::Running);
    // Nothing is left to pick up.
    assert!(worker.resume_due().await.expect("lists").is_empty());
}

#[tokio::test]
async fn resume_due_drives_at_most_max_runs_at_once_and_resumes_them_all() {
    let store = MemoryStore::new();
    for i in 0..5 {
        stopped_order(&store, &format!("order-{i}"), 1).await;
    }
    let worker = Worker::new(store.clone()).register::<Order>().max_runs(2);
    let resumed = worker.resume_due().await.expect("lists the runs");
    assert_eq!(resumed.len(), 5);
    for i in 0..5 {
        assert_eq!(
            status(&store, &format!("order-{i}")).await,
            RunStatus::Succeeded
        );
    }
}

/// The worker's loop on a SQLite file: it picks up a run stopped before it started and one
/// stopped while it runs, then stops when told to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_loop_on_sqlite_picks_up_runs_and_stops_on_shutdown() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("worker-loop");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the store");
    let store = SqliteStore::open(dir.join("runs.db")).expect("opens");
    stopped_order(&store, "early", 2).await;

    let worker = Worker::new(store.clone())
        .register::<Order>()
        .poll_interval(Duration::from_millis(10));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let late = {
        let store = store.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            stopped_order(&store, "late", 1).await;
            for _ in 0..500 {
                if status(&store, "late").await == RunStatus::Succeeded {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            stop.send(()).expect("the worker listens");
        }
    };
    let (report, ()) = tokio::join!(
        worker.run(async {
            let _ = stopped.await;
        }),
        late
    );
    let WorkerReport { resumed, polls, .. } = report.expect("the store answers");
    let mut ids: Vec<&str> = resumed.iter().map(|r| r.run.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["early", "late"]);
    assert!(polls >= 2, "{polls} polls");
    assert_eq!(status(&store, "early").await, RunStatus::Succeeded);
    assert_eq!(status(&store, "late").await, RunStatus::Succeeded);
}

fn kinds(events: &[StoredEvent], kind: &str) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

/// Starts a `Reminder` run and drops it (as a killed process would stop) 100 ms into its
/// `Delay`, its `TimerSet` durable; returns when it started. Its lease lapses `LEASE` later.
async fn stopped_while_waiting<S: Store + Clone>(store: &S, id: &str) -> Instant {
    let started = Instant::now();
    let run = Reminder::runner()
        .durable(&Failing::short_lease(store), id)
        .execute(5);
    let stopped = tokio::time::timeout(Duration::from_millis(100), run).await;
    assert!(stopped.is_err(), "the run is still waiting");
    let events = store.events(id, 0).await.expect("reads the journal");
    assert_eq!(kinds(&events, "TimerSet"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "TimerFired"), 0, "{events:#?}");
    started
}

/// Every stop of a run with a `Delay`, resumed: the same result, one `TimerSet` and one
/// `TimerFired` in the journal, and the whole run waited about its delay once.
#[tokio::test]
async fn a_delay_is_journaled_and_a_resumed_run_waits_only_what_is_left() {
    let store = MemoryStore::new();
    let reference = Reminder::runner()
        .durable(&store, "remind-ref")
        .execute(5)
        .await
        .expect("runs");
    assert_eq!(reference.result.expect("succeeds"), "shipped item-5");
    let events = store.events("remind-ref", 0).await.expect("reads");
    assert_eq!(kinds(&events, "TimerSet"), 1);
    assert_eq!(kinds(&events, "TimerFired"), 1);

    let id = "remind-1".to_owned();
    let stopped_at = stopped_while_waiting(&store, &id).await;
    let due = store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|run| run.id == id)
        .and_then(|run| run.wake_at_ms)
        .expect("a run waiting on a timer wakes when it is due");
    let now = now_ms();
    assert!(due > now && due <= now + 300, "due {due}, now {now}");

    // The worker leaves it alone while its lease lasts (the run renewed it while it waited).
    let worker = Worker::new(store.clone()).register::<Reminder>();
    assert!(worker.resume_due().await.expect("lists").is_empty());

    tokio::time::sleep(LEASE + Duration::from_millis(20)).await;
    let resumed_at = Instant::now();
    let outcome = Reminder::resume(&store, &id).await.expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), "shipped item-5");
    let whole = stopped_at.elapsed();
    assert!(whole >= WAIT - Duration::from_millis(20), "{whole:?}");
    assert!(
        resumed_at.elapsed() < WAIT,
        "the resumed run waited {:?} again",
        resumed_at.elapsed()
    );
    let events = store.events(&id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "TimerSet"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "TimerFired"), 1, "{events:#?}");
}

/// A run stopped while its `Delay` waits, in a SQLite file: the worker's loop picks it up
/// once its lease lapses, it waits what is left of the stored timer, and it ends with the
/// uninterrupted result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_resumes_a_waiting_run_on_sqlite_when_its_timer_is_due() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("worker-timer");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the store");
    let store = SqliteStore::open(dir.join("runs.db")).expect("opens");
    let id = "remind-1".to_owned();
    stopped_while_waiting(&store, &id).await;
    let due = store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|run| run.id == id)
        .and_then(|run| run.wake_at_ms)
        .expect("a wake-up time");

    let worker = Worker::new(store.clone())
        .register::<Reminder>()
        .poll_interval(Duration::from_millis(20));
    let shutdown = {
        let store = store.clone();
        let id = id.clone();
        async move {
            while status(&store, &id).await != RunStatus::Succeeded {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let report = tokio::time::timeout(Duration::from_secs(10), worker.run(shutdown))
        .await
        .expect("the worker resumes the run within 10 s")
        .expect("the store answers");
    assert!(now_ms() >= due);
    let resumed: Vec<&str> = report.resumed.iter().map(|r| r.run.as_str()).collect();
    assert_eq!(resumed, [id.as_str()]);
    assert!(
        report.polls >= 3,
        "ended after {} polls: before its timer was due?",
        report.polls
    );
    let events = store.events(&id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "TimerSet"), 1);
    assert_eq!(kinds(&events, "TimerFired"), 1);
    assert_eq!(kinds(&events, "RunFinished"), 1);
}

/// A run the worker cannot resume for a reason that would not change (its stored input is not
/// the workflow's parameters) is reported once, and the loop does not try it again at every
/// look.
#[tokio::test]
async fn a_run_refused_for_good_is_reported_once() {
    let store = MemoryStore::new();
    let owner = Owner::new("gone");
    let lease = Duration::from_secs(60);
    let (graph_hash, _) = flowdag::durable::graph_rows(&Order::GRAPH);
    let mut run = NewRun::new("bad", "Order", graph_hash, owner.clone(), lease);
    run.input = b"not the parameters".to_vec();
    let created = store.create_run(run).await.expect("creates");
    let held = created.lease().expect("a new run").clone();
    store.release(&owner, &[held]).await.expect("releases");

    let worker = Worker::new(store.clone())
        .register::<Order>()
        .poll_interval(Duration::from_millis(5));
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(100)))
        .await
        .expect("the store answers");
    assert!(report.polls >= 5, "{} polls", report.polls);
    assert_eq!(report.resumed.len(), 1, "{:?}", report.resumed);
    let err = report.resumed[0].result.as_ref().expect_err("refused");
    assert!(matches!(err, DurableError::Input { .. }), "{err}");
}

/// A run of a registered workflow started with another graph of it, changed in a way that
/// could alter its past, is not this worker's: the worker looks at it once (at its first look,
/// to see whether it can go on with its own graph), gives its lease back at once, reports
/// nothing, and never takes it again; the run stays as it was for a worker that has its graph.
#[tokio::test]
async fn a_run_of_another_graph_is_left_to_a_worker_that_has_it() {
    let store = MemoryStore::new();
    let owner = Owner::new("gone");
    let lease = Duration::from_secs(60);
    let mut old = NewRun::new("old", "Order", 1, owner.clone(), lease);
    old.nodes = vec![flowdag::store::NodeRow {
        node: 0,
        name: "weigh".to_owned(),
        label: "weigh(order)".to_owned(),
        fingerprint: 7,
        preds: Vec::new(),
        compensate: String::new(),
        kind: "operation".to_owned(),
        policy: String::new(),
    }];
    let created = store.create_run(old).await.expect("creates");
    let held = created.lease().expect("a new run").clone();
    store.release(&owner, &[held]).await.expect("releases");
    let before = summary(&store, "old").await;

    let worker = Worker::new(store.clone())
        .register::<Order>()
        .poll_interval(Duration::from_millis(5));
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(100)))
        .await
        .expect("the store answers");
    assert!(report.polls >= 5, "{} polls", report.polls);
    assert!(report.resumed.is_empty(), "{:?}", report.resumed);
    let after = summary(&store, "old").await;
    assert_eq!(
        (after.version, after.owner, after.status, after.graph_hash),
        (
            before.version + 1,
            before.owner,
            before.status,
            before.graph_hash
        ),
        "loaded once, given back, unchanged"
    );
}

/// A run with a `Delay` longer than the threshold: `.unload_when_waiting(..)` unloads it once
/// its timer is durable (the run is `waiting` in the store, its lease given up, nothing of it
/// held), a resume before it is due unloads it again, and one after it is due finishes it
/// with the uninterrupted result, its timer journaled once. A `Delay` shorter than the
/// threshold keeps the run loaded.
#[tokio::test]
async fn a_run_waiting_longer_than_the_threshold_is_unloaded_and_continues_when_due() {
    let store = MemoryStore::new();
    let id = "unload-1";
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&seen);
    let ended = Reminder::runner()
        .observer(move |event: &flowdag::Event| {
            sink.lock()
                .expect("not poisoned")
                .push(event.kind.name().to_owned())
        })
        .durable(&store, id)
        .unload_when_waiting(Duration::from_millis(100))
        .execute(5)
        .await
        .expect("runs");
    let flowdag::durable::Ended::Unloaded { wake_at_ms } = ended else {
        panic!("the run waits 300 ms, more than 100 ms: it is unloaded");
    };
    let wake_at_ms = wake_at_ms.expect("it waits for a timer");
    let run = summary(&store, id).await;
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(run.owner, None, "its lease is given up");
    let stored_wake = run.wake_at_ms.expect("the store knows when it is due");
    assert!(
        stored_wake.abs_diff(wake_at_ms) <= 50,
        "{stored_wake} {wake_at_ms}"
    );
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "TimerSet"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "TimerFired"), 0, "{events:#?}");
    assert_eq!(kinds(&events, "RunFinished"), 0, "{events:#?}");
    // Observers see the run stop as a process that exits: no step aborted, no end.
    let seen = seen.lock().expect("not poisoned").clone();
    assert_eq!(
        seen.last().map(String::as_str),
        Some("TimerSet"),
        "{seen:?}"
    );

    // Resumed before it is due, it waits long again: unloaded again, nothing written.
    let again = flowdag::durable::resume_or_unload::<Reminder, _>(&store, id, WAIT / 3)
        .await
        .expect("resumes");
    assert!(again.is_unloaded(), "{again:?}");
    assert_eq!(
        store.events(id, 0).await.expect("reads").len(),
        events.len()
    );

    tokio::time::sleep(WAIT).await;
    let done = flowdag::durable::resume_or_unload::<Reminder, _>(&store, id, WAIT / 3)
        .await
        .expect("resumes")
        .finished()
        .expect("its timer is due: it runs to the end");
    assert_eq!(done.result.expect("succeeds"), "shipped item-5");
    assert_eq!(status(&store, id).await, RunStatus::Succeeded);
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "TimerSet"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "TimerFired"), 1, "{events:#?}");

    // A wait shorter than the threshold does not unload the run.
    let kept = Reminder::runner()
        .durable(&store, "unload-2")
        .unload_when_waiting(Duration::from_secs(60))
        .execute(5)
        .await
        .expect("runs")
        .finished()
        .expect("the run is not unloaded");
    assert_eq!(kept.result.expect("succeeds"), "shipped item-5");
}

async fn summary<S: Store>(store: &S, id: &str) -> RunSummary {
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    runs.into_iter()
        .find(|run| run.id == id)
        .expect("the run exists")
}

/// The worker with `unload_after`, on a SQLite file: it picks up a stopped run, unloads it
/// when it comes to wait on its `Delay`, and picks it up again when the timer is due, which
/// finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_unloads_a_waiting_run_and_finishes_it_when_due() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("worker-unload");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the store");
    let store = SqliteStore::open(dir.join("runs.db")).expect("opens");
    let id = "remind-unload";
    // Stopped before its `Delay` started: the worker picks it up at once.
    let err = Reminder::runner()
        .durable(&Failing::new(&store, 1), id)
        .execute(5)
        .await
        .expect_err("the failing commit stops the run");
    assert!(matches!(err, DurableError::Store(_)), "{err}");

    let worker = Worker::new(store.clone())
        .register::<Reminder>()
        .poll_interval(Duration::from_millis(10))
        .unload_after(WAIT / 3);
    let shutdown = {
        let store = store.clone();
        async move {
            while status(&store, id).await != RunStatus::Succeeded {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let report = tokio::time::timeout(Duration::from_secs(10), worker.run(shutdown))
        .await
        .expect("the worker finishes the run within 10 s")
        .expect("the store answers");
    assert_eq!(report.unloaded.len(), 1, "{:?}", report.unloaded);
    let unloaded = &report.unloaded[0];
    assert_eq!(
        (unloaded.run.as_str(), unloaded.workflow.as_str()),
        (id, "Reminder")
    );
    assert!(unloaded.wake_at_ms.is_some());
    let resumed: Vec<&str> = report.resumed.iter().map(|r| r.run.as_str()).collect();
    assert_eq!(resumed, [id]);
    let outcome = report.resumed[0].result.as_ref().expect("finishes");
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "TimerSet"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "TimerFired"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "RunFinished"), 1, "{events:#?}");
}

workflow! {
    #[flow(durable)]
    LateReminder(order: u64) -> String {
        Sequential {
            item = Operation(fetch(order)),
            Delay("500ms"),
            sent = Operation(ship(&item)),
        }
        => sent.clone()
    }
}

/// A run started with `.deadline(300ms)` and stopped 100 ms in, while its 500 ms `Delay`
/// waits, is resumed (with no options given) after its deadline has passed: the deadline is
/// stored with the run and counts from its start, so the resumed run is cancelled at once,
/// before its `Delay` is due. Counted from the resume, it would end later than the `Delay`
/// and the run would succeed.
#[tokio::test]
async fn a_resumed_run_keeps_its_deadline_counted_from_its_start() {
    let store = MemoryStore::new();
    let id = "deadline-1";
    let deadline = Duration::from_millis(300);
    let run = LateReminder::runner()
        .deadline(deadline)
        .durable(&Failing::short_lease(&store), id)
        .execute(5);
    let stopped = tokio::time::timeout(Duration::from_millis(100), run).await;
    assert!(stopped.is_err(), "the run is still waiting");
    tokio::time::sleep(Duration::from_millis(250)).await;

    let outcome = LateReminder::resume(&store, id).await.expect("resumes");
    let err = outcome.result.expect_err("the deadline passed");
    assert_eq!(
        err.cancel_reason(),
        Some(flowdag::CancelReason::Deadline(deadline)),
        "{err}"
    );
    let events = store.events(id, 0).await.expect("reads");
    assert!(
        !events
            .iter()
            .any(|e| e.kind == "Completed" && e.node_name.as_deref() == Some("sent")),
        "{events:#?}"
    );
    assert_eq!(status(&store, id).await, RunStatus::Cancelled);
    // Executed again, the cancelled run replays its cancellation: the same result, nothing
    // run or written again.
    let journal = store.events(id, 0).await.expect("reads").len();
    let again = LateReminder::runner()
        .durable(&store, id)
        .execute(5)
        .await
        .expect("replays");
    let err = again.result.expect_err("still cancelled");
    assert_eq!(
        err.cancel_reason(),
        Some(flowdag::CancelReason::Deadline(deadline)),
        "{err}"
    );
    assert_eq!(store.events(id, 0).await.expect("reads").len(), journal);
    // The run's deadline timer ends with it.
    let loaded = store
        .load_run(id, &Owner::new("reader"), Duration::from_secs(1))
        .await
        .expect("loads");
    assert!(
        loaded
            .timers
            .iter()
            .all(|t| t.key.kind != flowdag::store::TimerKind::RunDeadline),
        "{:?}",
        loaded.timers
    );
}

/// An unloaded run with a deadline wakes at its deadline when it comes before its timer: the
/// run's earliest timer is its stored deadline, and the run resumed then is cancelled by it.
#[tokio::test]
async fn an_unloaded_run_wakes_at_its_deadline() {
    let store = MemoryStore::new();
    let id = "unload-deadline";
    let deadline = Duration::from_millis(250);
    let ended = LateReminder::runner()
        .deadline(deadline)
        .durable(&store, id)
        .unload_when_waiting(Duration::from_millis(100))
        .execute(5)
        .await
        .expect("runs");
    let flowdag::durable::Ended::Unloaded { wake_at_ms } = ended else {
        panic!("the run waits longer than 100 ms: it is unloaded");
    };
    let wake_at_ms = wake_at_ms.expect("it waits for timers");
    let run = summary(&store, id).await;
    let stored = run.wake_at_ms.expect("a wake-up time");
    // Its deadline (250 ms), not its `Delay` (500 ms).
    assert!(stored.abs_diff(wake_at_ms) <= 50, "{stored} {wake_at_ms}");
    assert!(stored < run.created_ms + 400, "{stored} {}", run.created_ms);

    tokio::time::sleep(deadline).await;
    let outcome = flowdag::durable::resume_or_unload::<LateReminder, _>(&store, id, deadline)
        .await
        .expect("resumes")
        .finished()
        .expect("its deadline passed: it ends");
    let err = outcome.result.expect_err("cancelled");
    assert_eq!(
        err.cancel_reason(),
        Some(flowdag::CancelReason::Deadline(deadline)),
        "{err}"
    );
    assert_eq!(status(&store, id).await, RunStatus::Cancelled);
}

/// Milliseconds since the Unix epoch by this process's clock: the clock of the stores the tests
/// use (`MemoryStore`, SQLite).
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.expect("after 1970").as_millis()).expect("fits")
}
