//! `flow::Worker`: it resumes the unfinished runs of the workflows it knows (on `MemoryStore`
//! and on `SqliteStore`), leaves alone the runs of others and the runs that ended, and its
//! loop stops when told to, after the runs it drives have ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flow::durable::DurableError;
use flow::prelude::*;
use flow::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunFilter, RunStatus, RunSummary, SignalSent, Store, StoreError, StoreFuture, StoredEvent,
    StoredSignal,
};
use flow::{Worker, WorkerReport};
use flow_sqlite::SqliteStore;

/// A store whose commit number `fail_at` (counted from 0) fails, as a crash would stop it.
#[derive(Clone)]
struct Failing<S> {
    inner: S,
    commits: Arc<AtomicUsize>,
    fail_at: usize,
}

impl<S: Store + Clone> Failing<S> {
    fn new(inner: &S, fail_at: usize) -> Failing<S> {
        Failing {
            inner: inner.clone(),
            commits: Arc::new(AtomicUsize::new(0)),
            fail_at,
        }
    }
}

impl<S: Store + Clone> Store for Failing<S> {
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
    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
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
        .err()
        .expect("the failing commit stops the run");
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
    let WorkerReport { resumed, polls } = report.expect("the store answers");
    let mut ids: Vec<&str> = resumed.iter().map(|r| r.run.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["early", "late"]);
    assert!(polls >= 2, "{polls} polls");
    assert_eq!(status(&store, "early").await, RunStatus::Succeeded);
    assert_eq!(status(&store, "late").await, RunStatus::Succeeded);
}
