//! Durable runs on `MemoryStore`: the write-ahead journal, a commit that fails, resume after a
//! crash at every commit boundary (nothing completed runs again, attempts in flight run again
//! with the same idempotency key, backoff kept), divergence and graph versioning.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowdag::durable::{DurableError, GraphChange, resume};
use flowdag::prelude::*;
use flowdag::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunStatus, RunSummary, SignalSent, Store, StoreError, StoreFuture,
    StoredEvent, StoredSignal,
};
use tokio::time::{Instant, sleep};

// --- A store that records what it committed and can fail the n-th commit ------------------

/// An event committed: (run, kind, node name, attempt).
type CommittedEvent = (String, String, Option<String>, u32);

/// Every event committed.
static COMMITTED: Mutex<Vec<CommittedEvent>> = Mutex::new(Vec::new());
/// Every attempt executed: (run, node, key), in order.
static EXECUTED: Mutex<Vec<(String, String, String)>> = Mutex::new(Vec::new());

#[derive(Clone)]
struct Probe {
    inner: MemoryStore,
    commits: Arc<AtomicUsize>,
    /// The commit (counted from 0) that fails, if any.
    fail_at: Option<usize>,
}

impl Probe {
    fn new(inner: &MemoryStore, fail_at: Option<usize>) -> Probe {
        Probe {
            inner: inner.clone(),
            commits: Arc::new(AtomicUsize::new(0)),
            fail_at,
        }
    }
}

impl Store for Probe {
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
        let n = self.commits.fetch_add(1, Ordering::SeqCst);
        if self.fail_at == Some(n) {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        Box::pin(async move {
            let events = batch.events.clone();
            let run = batch.run.clone();
            let committed = self.inner.commit(batch).await?;
            let mut log = COMMITTED.lock().expect("not poisoned");
            for event in events {
                log.push((run.clone(), event.kind, event.node_name, event.attempt));
            }
            Ok(committed)
        })
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

/// Whether `run` committed `kind` of `node` attempt `attempt`.
fn committed(run: &str, kind: &str, node: &str, attempt: u32) -> bool {
    COMMITTED
        .lock()
        .expect("not poisoned")
        .iter()
        .any(|(r, k, n, a)| {
            r == run && k == kind && n.as_deref() == Some(node) && (attempt == 0 || *a == attempt)
        })
}

/// What every operation does first: checks the write-ahead rule (its `Requested` and its
/// inputs' `Completed` are durable) and records its execution under its idempotency key.
fn effect(node: &str, inputs: &[&str]) -> u32 {
    let Some(attempt) = flowdag::attempt() else {
        return 1;
    };
    let run = attempt.run().to_owned();
    assert_eq!(attempt.node(), node);
    assert!(
        committed(&run, "Requested", node, attempt.attempt()),
        "`{node}` attempt {} started before its `Requested` was committed",
        attempt.attempt()
    );
    for input in inputs {
        assert!(
            committed(&run, "Completed", input, 0),
            "`{node}` started before the completion of its input `{input}` was committed"
        );
    }
    EXECUTED
        .lock()
        .expect("not poisoned")
        .push((run, node.to_owned(), attempt.key()));
    attempt.attempt()
}

fn executed(run: &str) -> Vec<(String, String)> {
    EXECUTED
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|(r, _, _)| r == run)
        .map(|(_, node, key)| (node.clone(), key.clone()))
        .collect()
}

// --- The workflow ---------------------------------------------------------------------------

#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("card declined")
    }
}

impl std::error::Error for Declined {}

async fn fetch(order: u64) -> Result<String, Declined> {
    effect("item", &[]);
    sleep(Duration::from_millis(10)).await;
    Ok(format!("item-{order}"))
}

async fn quote(item: &str) -> Result<u32, Declined> {
    effect("price", &["item"]);
    sleep(Duration::from_millis(20)).await;
    Ok(item.len() as u32)
}

async fn reserve(item: &str) -> Result<String, Declined> {
    effect("stock", &["item"]);
    sleep(Duration::from_millis(5)).await;
    Ok(format!("reserved {item}"))
}

async fn note() -> Result<(), Declined> {
    sleep(Duration::from_millis(1)).await;
    Ok(())
}

/// Fails its first attempt, succeeds on the next.
async fn charge(price: u32) -> Result<u32, Declined> {
    let attempt = effect("receipt", &["price", "stock"]);
    sleep(Duration::from_millis(10)).await;
    if attempt == 1 {
        return Err(Declined);
    }
    Ok(price * 100)
}

workflow! {
    #[flow(durable)]
    Order(order: u64) -> String {
        Sequential {
            item = Operation(fetch(order)),
            Parallel {
                price = Operation(quote(&item)),
                stock = Operation(reserve(&item)),
            },
            Conditional(price.is_ok_and(|p| *p > 5)) {
                Operation(note()),
            },
            receipt = Operation(charge(price), retries = 2, backoff = "100ms"),
        }
        => format!("{}: {}", receipt, stock)
    }
}

const EXPECTED: &str = "600: reserved item-7";

fn events_of(store: &MemoryStore, run: &str) -> Vec<StoredEvent> {
    let events = store.events(run, 0);
    futures::executor::block_on(events).expect("the run exists")
}

#[tokio::test(start_paused = true)]
async fn a_durable_run_journals_every_event_before_acting_on_it() {
    let store = MemoryStore::new();
    let probe = Probe::new(&store, None);
    let outcome = Order::runner()
        .durable(&probe, "journal-1")
        .execute(7)
        .await
        .expect("the store works");
    assert_eq!(outcome.result.expect("succeeds"), EXPECTED);
    let journal = events_of(&store, "journal-1");
    let log = outcome.report.log();
    assert_eq!(journal.len(), log.len(), "every event is journaled");
    assert_eq!(journal.last().map(|e| e.kind.as_str()), Some("RunFinished"));
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .expect("listed");
    let run = runs.iter().find(|r| r.id == "journal-1").expect("stored");
    assert_eq!(run.status, RunStatus::Succeeded);
    // The retry ran under a new key; every key once.
    let keys: Vec<String> = executed("journal-1").into_iter().map(|(_, k)| k).collect();
    assert_eq!(
        keys.iter().collect::<BTreeSet<_>>().len(),
        keys.len(),
        "{keys:?}"
    );
    assert!(keys.contains(&"journal-1/receipt/1".to_owned()));
    assert!(keys.contains(&"journal-1/receipt/2".to_owned()));
    // A finished run executed again gives its result without running anything.
    let before = executed("journal-1").len();
    let again = Order::runner()
        .durable(&probe, "journal-1")
        .execute(7)
        .await
        .expect("replayed");
    assert_eq!(again.result.expect("succeeds"), EXPECTED);
    assert_eq!(executed("journal-1").len(), before, "nothing ran again");
}

#[tokio::test(start_paused = true)]
async fn the_same_id_with_another_input_is_refused() {
    let store = MemoryStore::new();
    let first = Order::runner()
        .durable(&Probe::new(&store, None), "input-1")
        .execute(7)
        .await
        .expect("runs");
    assert_eq!(first.result.expect("succeeds"), EXPECTED);
    let err = Order::runner()
        .durable(&Probe::new(&store, None), "input-1")
        .execute(8)
        .await
        .expect_err("another input");
    assert!(matches!(err, DurableError::RunExists { .. }), "{err}");
    assert!(err.to_string().contains("another input"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_durable_workflow_runs_without_a_store_too() {
    // Outside a durable run there is no attempt to read.
    assert_eq!(Branchy::run(1).await.expect("succeeds"), 10);
}

/// Fails commit `n` of a run, then resumes it: same result; nothing whose completion was
/// committed runs again; the attempts that ran again have the keys they had.
#[tokio::test(start_paused = true)]
async fn a_run_stopped_at_every_commit_resumes_to_the_same_result() {
    // The uninterrupted run: its keys and its number of commits.
    let reference = MemoryStore::new();
    let probe = Probe::new(&reference, None);
    let reference_outcome = Order::runner()
        .durable(&probe, "every-ref")
        .execute(7)
        .await
        .expect("runs");
    assert_eq!(reference_outcome.result.expect("succeeds"), EXPECTED);
    let commits = probe.commits.load(Ordering::SeqCst);
    assert!(commits >= 5, "{commits} commits");
    let all_keys: BTreeSet<String> = executed("every-ref").into_iter().map(|(_, k)| k).collect();
    for n in 0..commits {
        let id = format!("every-{n}");
        let store = MemoryStore::new();
        let failing = Probe::new(&store, Some(n));
        let stopped = Order::runner()
            .durable(&failing, id.as_str())
            .execute(7)
            .await;
        let err = stopped.expect_err("the failing commit stops the run");
        assert!(
            matches!(err, DurableError::Store(StoreError::Closed)),
            "{err}"
        );
        let done: BTreeSet<String> = events_of(&store, &id)
            .into_iter()
            .filter(|e| e.kind == "Completed")
            .filter_map(|e| e.node_name)
            .collect();
        let ran_before = executed(&id).len();
        let outcome = Order::resume(&Probe::new(&store, None), &id)
            .await
            .expect("resumes");
        assert_eq!(
            outcome.result.expect("succeeds"),
            EXPECTED,
            "stopped at {n}"
        );
        let runs = executed(&id);
        for (node, _) in &runs[ran_before..] {
            assert!(
                !done.contains(node),
                "stopped at commit {n}: `{node}` completed before and ran again"
            );
        }
        let keys: BTreeSet<String> = runs
            .iter()
            .map(|(_, k)| k.replace(&id, "every-ref"))
            .collect();
        assert_eq!(keys, all_keys, "stopped at commit {n}: the same keys");
        let journal = events_of(&store, &id);
        assert_eq!(
            journal.last().map(|e| e.kind.as_str()),
            Some("RunFinished"),
            "stopped at {n}"
        );
        for (i, event) in journal.iter().enumerate() {
            assert_eq!(event.seq, i as u64, "a journal without gaps");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn resume_all_resumes_every_unfinished_run() {
    let store = MemoryStore::new();
    for id in ["all-1", "all-2"] {
        let failing = Probe::new(&store, Some(2));
        assert!(
            Order::runner()
                .durable(&failing, id)
                .execute(7)
                .await
                .is_err()
        );
    }
    let finished = Order::runner()
        .durable(&Probe::new(&store, None), "all-3")
        .execute(7)
        .await
        .expect("finished");
    assert!(finished.result.is_ok());
    let resumed = Order::resume_all(&Probe::new(&store, None))
        .await
        .expect("listed");
    let ids: Vec<&str> = resumed.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["all-1", "all-2"]);
    for (_, result) in resumed {
        let outcome = result.expect("resumed");
        assert_eq!(outcome.result.expect("succeeds"), EXPECTED);
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumed_backoff_waits_what_was_left_of_it() {
    let store = MemoryStore::new();
    // Stop the run at the commit that requests `receipt`'s second attempt: the journal ends
    // with its `Retrying` and the backoff timer.
    let mut n = 0;
    loop {
        let id = format!("backoff-{n}");
        let failing = Probe::new(&store, Some(n));
        let _ = Order::runner()
            .durable(&failing, id.as_str())
            .execute(7)
            .await;
        let journal = events_of(&store, &id);
        if journal.last().map(|e| e.kind.as_str()) == Some("Retrying") {
            let start = Instant::now();
            let outcome = Order::resume(&Probe::new(&store, None), &id)
                .await
                .expect("resumes");
            assert_eq!(outcome.result.expect("succeeds"), EXPECTED);
            let waited = start.elapsed();
            // 100 ms of backoff (less what the wall clock ran meanwhile), then 10 ms of work.
            assert!(
                waited >= Duration::from_millis(60) && waited <= Duration::from_millis(111),
                "{waited:?}"
            );
            let keys: Vec<String> = executed(&id).into_iter().map(|(_, k)| k).collect();
            assert_eq!(
                keys.last().map(String::as_str),
                Some(&*format!("{id}/receipt/2"))
            );
            break;
        }
        n += 1;
        assert!(n < 20, "no commit ends with `Retrying`");
    }
}

// --- Divergence and graph versioning ---------------------------------------------------------

static EXPENSIVE: AtomicBool = AtomicBool::new(true);

async fn price_of(node: &str, item: &str) -> Result<u32, Declined> {
    effect(node, &[]);
    Ok(item.len() as u32)
}

workflow! {
    #[flow(durable)]
    Branchy(order: u64) -> u32 {
        Sequential {
            cost = Operation(price_of("cost", "abc")),
            Conditional(EXPENSIVE.load(Ordering::SeqCst)) {
                Operation(note()),
            },
            total = Operation(price_of("total", "abcdef")),
        }
        => cost + total + order as u32
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_that_decides_otherwise_is_reported_as_diverged() {
    let store = MemoryStore::new();
    let first = Branchy::runner()
        .durable(&Probe::new(&store, None), "diverge-1")
        .execute(1)
        .await
        .expect("runs");
    assert_eq!(first.result.expect("succeeds"), 10);
    EXPENSIVE.store(false, Ordering::SeqCst);
    let err = Branchy::resume(&Probe::new(&store, None), "diverge-1")
        .await
        .expect_err("the decision went the other way");
    EXPENSIVE.store(true, Ordering::SeqCst);
    match &err {
        DurableError::Diverged { journal, .. } => {
            assert!(journal.contains("Completed"), "{err}");
        }
        other => panic!("expected Diverged, got {other}"),
    }
    assert!(
        err.to_string().contains("diverged from its journal"),
        "{err}"
    );
}

mod changed {
    use super::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> String {
            Sequential {
                item = Operation(fetch(order)),
                Parallel {
                    price = Operation(quote(&item)),
                    stock = Operation(reserve(&item)),
                },
                receipt = Operation(charge(price + 1), retries = 2, backoff = "100ms"),
                Operation(note()),
            }
            => format!("{}: {}", receipt, stock)
        }
    }
}

/// A run that has passed the steps a new version changes is refused, naming each change; a
/// run stopped before them goes on with the new version; a finished run is replayed, and
/// says where the new version would have done otherwise.
#[tokio::test(start_paused = true)]
async fn a_changed_graph_is_refused_with_what_changed() {
    let store = MemoryStore::new();
    // Stopped (its sixth commit failed) after `receipt` was requested.
    assert!(
        Order::runner()
            .durable(&Probe::new(&store, Some(5)), "changed-1")
            .execute(7)
            .await
            .is_err()
    );
    let err = changed::Order::resume(&store, "changed-1")
        .await
        .expect_err("refused");
    let DurableError::GraphChanged { changes, .. } = &err else {
        panic!("expected GraphChanged, got {err}");
    };
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, GraphChange::Changed { node, .. } if node == "receipt")),
        "{err}"
    );
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, GraphChange::EdgesChanged { node, .. } if node == "note")),
        "{err}"
    );
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, GraphChange::Removed(node) if node == "decision#1")),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("the graph of `Order` changed since run `changed-1` started"),
        "{text}"
    );
    assert!(text.contains("step `receipt` now calls"), "{text}");

    // Stopped (a commit failed) before it reached any of them: it goes on with them.
    let failing = Probe::new(&store, Some(3));
    assert!(
        Order::runner()
            .durable(&failing, "changed-2")
            .execute(7)
            .await
            .is_err()
    );
    let outcome = changed::Order::resume(&Probe::new(&store, None), "changed-2")
        .await
        .expect("the change is compatible");
    // `charge(price + 1)`: 7 × 100 on its second attempt.
    assert_eq!(
        outcome.result.expect("succeeds"),
        "700: reserved item-7",
        "the new version's step ran"
    );

    // Finished: not refused, replayed; the new version would have decided otherwise.
    let outcome = Order::runner()
        .durable(&Probe::new(&store, None), "changed-3")
        .execute(7)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("succeeds"), EXPECTED);
    let err = changed::Order::resume(&store, "changed-3")
        .await
        .expect_err("the replay meets the removed decision");
    assert!(matches!(err, DurableError::Diverged { .. }), "{err}");
}

#[test]
fn fingerprints_ignore_where_the_code_is_and_see_what_it_does() {
    let (hash, rows) = flowdag::durable::graph_rows(&Order::GRAPH);
    let (again, _) = flowdag::durable::graph_rows(&Order::GRAPH);
    assert_eq!(hash, again);
    let (other, other_rows) = flowdag::durable::graph_rows(&changed::Order::GRAPH);
    assert_ne!(hash, other);
    let changes = flowdag::durable::graph_changes(&rows, &other_rows);
    assert!(!changes.is_empty());
    // The same rows moved elsewhere (another line) have the same fingerprints: lines are not
    // part of them.
    let names: HashMap<&str, u64> = rows
        .iter()
        .map(|r| (r.name.as_str(), r.fingerprint))
        .collect();
    let item = other_rows.iter().find(|r| r.name == "item").expect("item");
    assert_eq!(names.get("item"), Some(&item.fingerprint));
    // A row keeps the step's kind and its settings as written, to name what changed.
    let receipt = rows.iter().find(|r| r.name == "receipt").expect("receipt");
    assert_eq!(
        (receipt.kind.as_str(), receipt.policy.as_str()),
        ("operation", "retries = 2, backoff = 100ms")
    );
    assert_eq!(
        (item.kind.as_str(), item.policy.as_str()),
        ("operation", "")
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_run_is_a_store_error() {
    let store = MemoryStore::new();
    let err = Order::resume(&store, "nope")
        .await
        .expect_err("no such run");
    assert!(
        matches!(err, DurableError::Store(StoreError::NotFound { .. })),
        "{err}"
    );
}

// --- Commits that complete when the test says ------------------------------------------------

/// A store whose commits wait for a permit of `gate`.
#[derive(Clone)]
struct Gated {
    probe: Probe,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Store for Gated {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        self.probe.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        self.probe.load_run(run, owner, lease)
    }
    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
        self.probe.list_runs(filter)
    }
    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
        self.probe.events(run, from_seq)
    }
    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
        self.probe.run_data(run)
    }
    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        Box::pin(async move {
            self.gate
                .acquire()
                .await
                .map_err(|_| StoreError::Closed)?
                .forget();
            self.probe.commit(batch).await
        })
    }
    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        self.probe.due_timers(horizon, limit)
    }
    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        self.probe.send_signal(signal)
    }
    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        self.probe.signals(run, after)
    }
    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        self.probe.heartbeat(owner, held, lease)
    }
    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        self.probe.release(owner, held)
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_starts_before_its_batch_commits_and_the_run_ends_after_its_last_commit() {
    let store = MemoryStore::new();
    let gated = Gated {
        probe: Probe::new(&store, None),
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
    };
    let gate = Arc::clone(&gated.gate);
    let mut run = std::pin::pin!(Order::runner().durable(&gated, "gated-1").execute(7));
    // Polls the run for 500 ms of the paused clock: long enough for every operation of a
    // round to end.
    macro_rules! step {
        () => {
            tokio::select! {
                biased;
                outcome = &mut run => Some(outcome),
                _ = sleep(Duration::from_millis(500)) => None,
            }
        };
    }
    assert!(step!().is_none());
    assert!(
        executed("gated-1").is_empty(),
        "started before the first commit"
    );
    let mut commits = 0;
    let mut seen = Vec::new();
    let outcome = loop {
        gate.add_permits(1);
        commits += 1;
        let done = step!();
        let now = executed("gated-1");
        // Each commit lets at most the nodes it requested start: never more than one wave.
        let new: Vec<String> = now[seen.len()..].iter().map(|(n, _)| n.clone()).collect();
        assert!(new.len() <= 2, "commit {commits} started {new:?}");
        seen = now;
        if let Some(outcome) = done {
            break outcome;
        }
        // The run waits for this commit: its last batch is not acknowledged yet.
        assert!(commits < 50, "the run does not end");
    };
    let outcome = outcome.expect("the store works");
    assert_eq!(outcome.result.expect("succeeds"), EXPECTED);
    // The run returned only once its last batch (with `RunFinished`) was committed.
    let journal = events_of(&store, "gated-1");
    assert_eq!(journal.last().map(|e| e.kind.as_str()), Some("RunFinished"));
    assert_eq!(journal.len(), outcome.report.log().len());
}

/// Durable runs are `Send + 'static` futures: a task of their own on a multi-thread runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_runs_and_resumes_can_be_spawned() {
    let store = MemoryStore::new();
    let probe = Probe::new(&store, None);
    let run = tokio::spawn(async move {
        Order::runner()
            .durable(&probe, "spawned-1")
            .execute(7)
            .await
    });
    let outcome = run.await.expect("no panic").expect("the store works");
    assert_eq!(outcome.result.expect("succeeds"), EXPECTED);
    let resumed = tokio::spawn(Order::resume(&Probe::new(&store, None), "spawned-1"));
    let outcome = resumed.await.expect("no panic").expect("replayed");
    assert_eq!(outcome.result.expect("succeeds"), EXPECTED);
}

// --- Deadlines across a resume ----------------------------------------------------------------

async fn always_fails() -> Result<u32, Declined> {
    sleep(Duration::from_millis(10)).await;
    Err(Declined)
}

workflow! {
    #[flow(durable)]
    Hurried(order: u64) -> u32 {
        Sequential {
            paid = Operation(always_fails(), retries = 10, backoff = "100ms", deadline = "400ms"),
        }
        => paid + order as u32
    }
}

/// The run stops after the first failed attempt; 200 ms pass (by the store's clock) before it
/// is resumed: its deadline has about 200 ms left, not 400.
#[tokio::test(start_paused = true)]
async fn a_resumed_deadline_keeps_its_due_time() {
    let store = MemoryStore::new();
    let mut n = 0;
    let id = loop {
        let id = format!("hurried-{n}");
        let failing = Probe::new(&store, Some(n));
        let stopped = Hurried::runner()
            .durable(&failing, id.as_str())
            .execute(1)
            .await;
        assert!(stopped.is_err());
        if events_of(&store, &id).iter().any(|e| e.kind == "Retrying") {
            break id;
        }
        n += 1;
        assert!(n < 10, "no commit after the first `Retrying`");
    };
    // The store's clock is the wall clock: let it run.
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let outcome = Hurried::resume(&Probe::new(&store, None), &id)
        .await
        .expect("resumes");
    let waited = start.elapsed();
    let error = outcome.result.expect_err("the deadline passes");
    assert!(
        matches!(
            error.failures()[0].error,
            flowdag::NodeError::DeadlineExceeded(_)
        ),
        "{error:?}"
    );
    assert!(
        waited <= Duration::from_millis(300),
        "the deadline started again: {waited:?}"
    );
}

// --- Steps that end in the same round replay ---------------------------------------------

async fn twin(n: u64) -> Result<u64, std::convert::Infallible> {
    Ok(n + 1)
}

workflow! {
    #[flow(durable)]
    Twins(n: u64) -> u64 {
        Parallel {
            Sequential { a = Operation(twin(n)), b = Operation(twin(a)) },
            Sequential { c = Operation(twin(n)), d = Operation(twin(c)) },
        }
        => b + d
    }
}

workflow! {
    #[flow(durable)]
    TwinDelays(n: u64) -> u64 {
        Parallel {
            Sequential { Delay("100ms"), a = Operation(twin(n)) },
            Sequential { Delay("150ms"), b = Operation(twin(n)) },
        }
        => a + b
    }
}

/// Two steps that complete in the same round of the run journal both completions before the
/// steps that follow them are requested; the replay applies both before it asks the run what
/// comes next, and meets the journal.
#[tokio::test]
async fn steps_completed_in_one_round_replay() {
    let store = MemoryStore::new();
    let outcome = Twins::runner()
        .durable(&store, "twins")
        .execute(1)
        .await
        .expect("runs");
    assert_eq!(outcome.into_result().expect("succeeds"), 6);
    let kinds: Vec<String> = store
        .events("twins", 0)
        .await
        .expect("reads")
        .into_iter()
        .map(|e| format!("{} {}", e.kind, e.node_name.unwrap_or_default()))
        .collect();
    let completed_c = kinds.iter().position(|k| k == "Completed c");
    let requested_b = kinds.iter().position(|k| k == "Requested b");
    assert!(
        completed_c < requested_b,
        "both completions come before the next requests: {kinds:?}"
    );
    let again = resume::<Twins, _>(&store, "twins")
        .await
        .expect("the finished run replays");
    assert_eq!(again.into_result().expect("succeeds"), 6);
}

/// Two `Delay`s whose timers are both due when the run is resumed fire in one round; a later
/// replay of the run meets its journal.
#[tokio::test]
async fn delays_due_together_at_a_resume_replay() {
    let store = MemoryStore::new();
    let ended = TwinDelays::runner()
        .durable(&store, "twin-delays")
        .unload_when_waiting(Duration::ZERO)
        .execute(1)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    sleep(Duration::from_millis(200)).await;
    let outcome = resume::<TwinDelays, _>(&store, "twin-delays")
        .await
        .expect("resumes");
    assert_eq!(outcome.into_result().expect("succeeds"), 4);
    let again = resume::<TwinDelays, _>(&store, "twin-delays")
        .await
        .expect("the finished run replays");
    assert_eq!(again.into_result().expect("succeeds"), 4);
}
