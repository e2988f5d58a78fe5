//! Durable runs and their leases and timers across processes: a live run keeps its lease
//! while it waits, a `Worker` picks up a run whose process died without waiting for timers that
//! are not what the run waits for, a step's timers leave the store when the step ends, and a
//! run refused on resume does not keep the lease it took to look at it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::Worker;
use flowdag::durable::DurableError;
use flowdag::prelude::*;
use flowdag::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunSummary, SignalSent, Store, StoreError, StoreFuture, StoredEvent,
    StoredSignal, TimerKind,
};

/// A store whose leases last `lease` (create, load and every commit), and that counts the
/// commits that write no event.
#[derive(Clone)]
struct Short {
    inner: MemoryStore,
    lease: Duration,
    empty: Arc<AtomicUsize>,
    /// The commit (counted from 0) that fails, as a killed process stops writing.
    fail_at: Option<usize>,
    commits: Arc<AtomicUsize>,
    /// What every `load_run` answers instead of loading, if anything.
    load_error: Option<StoreError>,
}

impl Short {
    fn new(inner: &MemoryStore, lease: Duration) -> Short {
        Short {
            inner: inner.clone(),
            lease,
            empty: Arc::new(AtomicUsize::new(0)),
            fail_at: None,
            commits: Arc::new(AtomicUsize::new(0)),
            load_error: None,
        }
    }
}

impl Store for Short {
    fn create_run(&self, mut run: NewRun) -> StoreFuture<'_, Created> {
        run.lease = self.lease;
        self.inner.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        _lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        if let Some(error) = &self.load_error {
            return Box::pin(std::future::ready(Err(error.clone())));
        }
        self.inner.load_run(run, owner, self.lease)
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
        if self.commits.fetch_add(1, Ordering::SeqCst) == self.fail_at.unwrap_or(usize::MAX) {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        batch.lease = self.lease;
        if batch.events.is_empty() {
            self.empty.fetch_add(1, Ordering::SeqCst);
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
        _lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        self.inner.heartbeat(owner, held, self.lease)
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

/// Takes `ms` milliseconds.
async fn slow(ms: u64) -> Result<u64, Never> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

workflow! {
    #[flow(durable)]
    Long(ms: u64) -> u64 {
        Sequential {
            took = Operation(slow(ms)),
        }
        => took
    }
}

async fn summary(store: &MemoryStore, id: &str) -> RunSummary {
    store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|run| run.id == id)
        .expect("the run exists")
}

/// A step that runs longer than the run's lease: the run renews its lease while it waits, so
/// no other owner can take the run from under it, and the run ends as it would have.
#[tokio::test]
async fn a_live_run_renews_its_lease_while_a_step_runs_longer_than_it() {
    let memory = MemoryStore::new();
    let store = Short::new(&memory, Duration::from_millis(150));
    let run = Long::runner().durable(&store, "long").execute(600);
    let intruder = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        memory
            .load_run("long", &Owner::new("intruder"), Duration::from_secs(60))
            .await
    };
    let (outcome, intruded) = tokio::join!(run, intruder);
    let err = intruded.expect_err("the run's lease is still held");
    assert!(matches!(err, StoreError::Busy { .. }), "{err}");
    let outcome = outcome.expect("the run keeps its lease to the end");
    assert_eq!(outcome.result.expect("succeeds"), 600);
    let renewals = store.empty.load(Ordering::SeqCst);
    assert!(
        (2..=12).contains(&renewals),
        "{renewals} renewals in 600 ms of a 150 ms lease"
    );
}

workflow! {
    #[flow(durable)]
    Bounded(ms: u64) -> u64 {
        Sequential {
            took = Operation(slow(ms), deadline = "60s"),
        }
        => took
    }
}

/// A run stopped while its step is in flight (the step's `Completed` never committed): the
/// step's deadline, a minute away, is a stored timer, but it is not what the run waits for; the
/// worker resumes the run at once, and the step runs again.
#[tokio::test]
async fn the_worker_resumes_a_stopped_run_at_once_whatever_its_timers_say() {
    let memory = MemoryStore::new();
    let mut stopping = Short::new(&memory, Duration::from_secs(60));
    stopping.fail_at = Some(1);
    let err = Bounded::runner()
        .durable(&stopping, "bounded")
        .execute(20)
        .await
        .expect_err("the second commit fails");
    assert!(
        matches!(err, DurableError::Store(StoreError::Closed)),
        "{err}"
    );
    let run = summary(&memory, "bounded").await;
    assert!(
        run.wake_at_ms.is_some_and(|at| at > now_ms()),
        "the step's deadline is stored: {run:?}"
    );

    let worker = Worker::new(memory.clone()).register::<Bounded>();
    let resumed = worker.resume_due().await.expect("lists");
    assert_eq!(resumed.len(), 1, "the stopped run is picked up now");
    let outcome = resumed[0].result.as_ref().expect("resumes");
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
}

async fn flaky() -> Result<u64, Never> {
    Err(Never)
}

workflow! {
    #[flow(durable)]
    Timed(ms: u64) -> u64 {
        Parallel {
            took = Operation(slow(ms), deadline = "1h"),
            Operation(flaky(), retries = 1, backoff = "1h", deadline = "50ms"),
            Operation(slow(300)),
        }
        => took
    }
}

/// When a step ends its timers leave the store: a completed step's deadline, the deadline and
/// the backoff of a step whose deadline passed between two attempts. The run's wake-up time
/// is then that of its open timers only (none here), and a run that ended has none.
#[tokio::test]
async fn a_step_that_ends_takes_its_timers_out_of_the_store() {
    let memory = MemoryStore::new();
    let run = Timed::runner().durable(&memory, "timed").execute(20);
    let look = async {
        // `took` completed at 20 ms, `flaky` failed at 50 ms; the third step runs to 300 ms.
        tokio::time::sleep(Duration::from_millis(150)).await;
        summary(&memory, "timed").await
    };
    let (outcome, during) = tokio::join!(run, look);
    assert_eq!(
        during.wake_at_ms, None,
        "the timers of the steps that ended are still stored"
    );
    let outcome = outcome.expect("the run ends");
    assert!(outcome.result.is_err(), "`flaky` fails for good");
    let ended = summary(&memory, "timed").await;
    assert_eq!(ended.wake_at_ms, None, "{ended:?}");
    let loaded = memory
        .load_run("timed", &Owner::new("look"), Duration::from_secs(1))
        .await
        .expect("loads");
    let kinds: Vec<(Option<u32>, TimerKind)> = loaded
        .timers
        .iter()
        .map(|t| (t.key.node, t.key.kind))
        .collect();
    assert!(kinds.is_empty(), "{kinds:?}");
}

/// A run refused on resume (its stored graph is not the workflow's) gives back the lease
/// that loading it took: another process may take it at once.
#[tokio::test]
async fn a_run_refused_on_resume_keeps_no_lease() {
    let memory = MemoryStore::new();
    let owner = Owner::new("gone");
    let created = memory
        .create_run(NewRun::new(
            "old",
            "Long",
            1,
            owner.clone(),
            Duration::from_secs(60),
        ))
        .await
        .expect("creates");
    let held = created.lease().expect("a new run").clone();
    memory.release(&owner, &[held]).await.expect("releases");

    let err = Long::resume(&memory, "old").await.expect_err("refused");
    assert!(matches!(err, DurableError::GraphChanged { .. }), "{err}");
    let run = summary(&memory, "old").await;
    assert_eq!(
        run.owner, None,
        "the refused resume kept the lease: {run:?}"
    );
}

/// A run whose stored content is damaged is refused with the same error at every look: the
/// worker's loop reports it once and does not resume it again at every poll.
#[tokio::test]
async fn the_worker_loop_reports_a_damaged_run_once() {
    let memory = MemoryStore::new();
    let mut stopping = Short::new(&memory, Duration::from_secs(60));
    stopping.fail_at = Some(0);
    Long::runner()
        .durable(&stopping, "damaged")
        .execute(1)
        .await
        .expect_err("the first commit fails");
    let mut damaged = Short::new(&memory, Duration::from_secs(60));
    damaged.load_error = Some(StoreError::Corrupt {
        path: "runs.db".into(),
        why: "event #3 of run `damaged`: a bad path".into(),
    });
    let worker = Worker::new(damaged)
        .register::<Long>()
        .poll_interval(Duration::from_millis(5));
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(100)))
        .await
        .expect("the store lists its runs");
    assert!(report.polls >= 5, "{} polls", report.polls);
    assert_eq!(report.resumed.len(), 1, "{:?}", report.resumed);
    let err = report.resumed[0].result.as_ref().expect_err("refused");
    assert!(
        matches!(err, DurableError::Store(StoreError::Corrupt { .. })),
        "{err}"
    );
}

workflow! {
    #[flow(durable)]
    Patient(ms: u64) -> u64 {
        Sequential {
            paid = Operation(slow(ms), timeout = "20ms"),
            Conditional(matches!(paid, Err(NodeError::TimedOut(_)))) {
                checked = Operation(slow(1)),
            } else {
                Operation(slow(2)),
            },
            Operation(slow(1)),
        }
        => checked.copied().unwrap_or(0)
    }
}

workflow! {
    #[flow(durable)]
    Late(ms: u64) -> u64 {
        Sequential {
            paid = Operation(slow(ms), deadline = "20ms"),
            Conditional(matches!(paid, Err(NodeError::DeadlineExceeded(_)))) {
                checked = Operation(slow(1)),
            } else {
                Operation(slow(2)),
            },
            Operation(slow(1)),
        }
        => checked.copied().unwrap_or(0)
    }
}

/// Runs `W` with `input` to the end, then stops a run at each of its commits in turn and
/// resumes it: each resume ends with the uninterrupted result, 1.
async fn stopped_and_resumed_at_each_commit<W>(name: &str, input: u64)
where
    W: flowdag::durable::DurableWorkflow<Stored = u64, Output = u64>,
{
    let memory = MemoryStore::new();
    let reference = flowdag::Runner::<W>::new()
        .durable(&memory, format!("{name}-ref"))
        .execute(input)
        .await
        .expect("runs");
    assert_eq!(reference.result.expect("the branch catches the failure"), 1);
    for n in 1..8 {
        let id = format!("{name}-{n}");
        let mut stopping = Short::new(&memory, Duration::from_secs(60));
        stopping.fail_at = Some(n);
        let stopped = flowdag::Runner::<W>::new()
            .durable(&stopping, id.as_str())
            .execute(input)
            .await;
        if stopped.is_ok() {
            return;
        }
        let outcome = flowdag::durable::resume::<W, _>(&memory, &id)
            .await
            .unwrap_or_else(|err| panic!("stopped at commit {n}: {err}"));
        assert_eq!(
            outcome.result.expect("the same branch"),
            1,
            "stopped at commit {n}"
        );
    }
    panic!("the run made more than 8 commits");
}

/// A step that timed out (or missed its deadline) is a `TimedOut` (`DeadlineExceeded`) error
/// on replay too, so a test that looks at how it failed decides as it did before the crash,
/// and the resume does not diverge.
#[tokio::test]
async fn a_replayed_timeout_or_deadline_is_still_one() {
    stopped_and_resumed_at_each_commit::<Patient>("patient", 500).await;
    stopped_and_resumed_at_each_commit::<Late>("late", 500).await;
}

workflow! {
    #[flow(durable)]
    Tally(counts: std::collections::HashMap<String, u64>) -> u64 {
        Sequential {
            took = Operation(slow(1)),
        }
        => took + counts.values().sum::<u64>()
    }
}

/// The same input in another `HashMap` (whose keys serialize in another order) is the same
/// input: running the id again resumes the run instead of refusing it as another input.
#[tokio::test]
async fn the_same_map_input_in_another_order_is_the_same_input() {
    let counts = || -> std::collections::HashMap<String, u64> {
        (0..32).map(|i| (format!("key-{i}"), i)).collect()
    };
    let (first, second) = (counts(), counts());
    assert_ne!(
        serde_json::to_string(&first).expect("json"),
        serde_json::to_string(&second).expect("json"),
        "two maps that serialize their keys in the same order: the test shows nothing"
    );
    let memory = MemoryStore::new();
    let mut stopping = Short::new(&memory, Duration::from_secs(60));
    stopping.fail_at = Some(0);
    Tally::runner()
        .durable(&stopping, "tally")
        .execute(first)
        .await
        .expect_err("the first commit fails");
    let outcome = Tally::runner()
        .durable(&memory, "tally")
        .execute(second)
        .await
        .expect("the same input: resumed");
    assert_eq!(outcome.result.expect("succeeds"), 1 + (0..32).sum::<u64>());
}

#[derive(Debug)]
struct Broke;

impl std::fmt::Display for Broke {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("broke")
    }
}

impl std::error::Error for Broke {}

/// Fails at once.
async fn break_now() -> Result<u64, Broke> {
    Err(Broke)
}

/// Undoes a step in `ms` milliseconds.
async fn undo_slowly(ms: u64) -> Result<(), Never> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(())
}

workflow! {
    #[flow(durable)]
    SlowUndo(ms: u64) -> u64 {
        Sequential {
            done = Operation(slow(1), compensate = undo_slowly(ms)),
            broken = Operation(break_now()),
        }
        => done + broken
    }
}

/// A compensation that runs longer than the run's lease: the run renews its lease during the
/// compensation phase too, so no other owner takes the run while it undoes its steps.
#[tokio::test]
async fn a_compensation_longer_than_the_lease_keeps_it() {
    let memory = MemoryStore::new();
    let store = Short::new(&memory, Duration::from_millis(150));
    let run = SlowUndo::runner().durable(&store, "undo").execute(600);
    let intruder = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        memory
            .load_run("undo", &Owner::new("intruder"), Duration::from_secs(60))
            .await
    };
    let (outcome, intruded) = tokio::join!(run, intruder);
    let err = intruded.expect_err("the run's lease is held through its compensation");
    assert!(matches!(err, StoreError::Busy { .. }), "{err}");
    let outcome = outcome.expect("the run keeps its lease to the end");
    let error = outcome.result.expect_err("the second step fails");
    let compensations = error.compensations();
    assert_eq!(compensations.len(), 1, "{error}");
    assert!(
        matches!(
            compensations[0].outcome(),
            flowdag::CompensationOutcome::Compensated
        ),
        "{error}"
    );
    assert!(
        store.empty.load(Ordering::SeqCst) >= 2,
        "renewals were committed"
    );
}

/// Milliseconds since the Unix epoch by this process's clock: the clock of the stores the tests
/// use (`MemoryStore`, SQLite).
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.expect("after 1970").as_millis()).expect("fits")
}
