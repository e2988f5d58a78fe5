//! Saga compensation in durable runs (on `MemoryStore`): each compensation attempt's
//! `Compensating` is committed before it runs, with its own idempotency key
//! (`{run}/{node}:compensate/{attempt}`); a run stopped at every commit of the compensation
//! phase resumes it without running again a compensation whose end was committed, and with the
//! same keys.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowdag::durable::DurableError;
use flowdag::prelude::*;
use flowdag::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunStatus, RunSummary, SignalSent, Store, StoreError, StoreFuture,
    StoredEvent, StoredSignal,
};

/// An event committed: (run, kind, node name, attempt).
type CommittedEvent = (String, String, Option<String>, u32);

/// Every event committed.
static COMMITTED: Mutex<Vec<CommittedEvent>> = Mutex::new(Vec::new());
/// Every attempt executed: (run, what, key), in order.
static EXECUTED: Mutex<Vec<(String, String, String)>> = Mutex::new(Vec::new());

/// A store that records what it committed and fails its n-th commit.
#[derive(Clone)]
struct Probe {
    inner: MemoryStore,
    commits: Arc<AtomicUsize>,
    fail_at: Option<usize>,
    /// The lease of its runs, when not the runtime's.
    lease: Option<Duration>,
}

impl Probe {
    fn new(inner: &MemoryStore, fail_at: Option<usize>) -> Probe {
        Probe {
            inner: inner.clone(),
            commits: Arc::new(AtomicUsize::new(0)),
            fail_at,
            lease: None,
        }
    }

    /// A probe whose runs' leases last `lease`: a run dropped as a killed process would be
    /// is free to resume soon.
    fn short_lease(inner: &MemoryStore, lease: Duration) -> Probe {
        Probe {
            lease: Some(lease),
            ..Probe::new(inner, None)
        }
    }
}

impl Store for Probe {
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

fn committed(run: &str, kind: &str, node: &str, attempt: u32) -> bool {
    COMMITTED
        .lock()
        .expect("not poisoned")
        .iter()
        .any(|(r, k, n, a)| r == run && k == kind && n.as_deref() == Some(node) && *a == attempt)
}

/// What every operation and compensation does first: checks that its attempt was committed
/// before it started (`Requested`, or `Compensating` for a compensation) and records its
/// execution under its idempotency key. Returns the attempt number.
fn effect(what: &str, node: &str) -> u32 {
    let Some(attempt) = flowdag::attempt() else {
        return 1;
    };
    let run = attempt.run().to_owned();
    assert_eq!(attempt.node(), node);
    let kind = match attempt.is_compensation() {
        true => "Compensating",
        false => "Requested",
    };
    assert!(
        committed(&run, kind, node, attempt.attempt()),
        "`{what}` attempt {} started before its `{kind}` was committed",
        attempt.attempt()
    );
    EXECUTED
        .lock()
        .expect("not poisoned")
        .push((run, what.to_owned(), attempt.key()));
    attempt.attempt()
}

fn executed(run: &str) -> Vec<(String, String)> {
    EXECUTED
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|(r, _, _)| r == run)
        .map(|(_, what, key)| (what.clone(), key.clone()))
        .collect()
}

#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

async fn reserve(order: u64) -> Result<String, Refused> {
    effect("reserve", "stock");
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(format!("stock-{order}"))
}

async fn release(stock: &str) -> Result<(), Refused> {
    assert_eq!(stock, "stock-7");
    effect("release", "stock");
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(())
}

async fn charge(stock: &str) -> Result<u32, Refused> {
    effect("charge", "receipt");
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(stock.len() as u32)
}

/// Its first attempt fails, the second refunds.
async fn refund(receipt: &u32) -> Result<(), Refused> {
    let attempt = effect("refund", "receipt");
    tokio::time::sleep(Duration::from_millis(5)).await;
    match attempt {
        1 => Err(Refused("the bank is down")),
        _ => {
            assert_eq!(*receipt, 7);
            Ok(())
        }
    }
}

async fn ship() -> Result<(), Refused> {
    effect("ship", "shipped");
    tokio::time::sleep(Duration::from_millis(5)).await;
    Err(Refused("no courier"))
}

workflow! {
    #[flow(durable)]
    Order(order: u64) -> u32 {
        Sequential {
            stock = Operation(reserve(order), compensate = release(&stock)),
            receipt = Operation(
                charge(&stock),
                retries = 2,
                backoff = "100ms",
                compensate = refund(&receipt),
            ),
            shipped = Operation(ship()),
        }
        => receipt
    }
}

fn events_of(store: &MemoryStore, run: &str) -> Vec<StoredEvent> {
    futures::executor::block_on(store.events(run, 0)).expect("the run exists")
}

/// The compensations (attempt keys) a run executed, with the run's id replaced by `ref`.
fn compensation_keys(run: &str) -> Vec<String> {
    executed(run)
        .into_iter()
        .filter(|(what, _)| what == "refund" || what == "release")
        .map(|(_, key)| key.replacen(run, "ref", 1))
        .collect()
}

fn check_failed(outcome: flowdag::Outcome<u32>, run: &str) {
    let error = outcome.result.expect_err("shipping fails");
    let undone: Vec<(&str, u32, bool)> = error
        .compensations()
        .iter()
        .map(|c| (c.node(), c.attempts(), c.is_compensated()))
        .collect();
    assert_eq!(undone, [("receipt", 2, true), ("stock", 1, true)], "{run}");
}

#[tokio::test(start_paused = true)]
async fn a_durable_run_journals_its_compensations() {
    let store = MemoryStore::new();
    let outcome = Order::runner()
        .durable(&Probe::new(&store, None), "saga-1")
        .execute(7)
        .await
        .expect("the store works");
    check_failed(outcome, "saga-1");
    assert_eq!(
        compensation_keys("saga-1"),
        [
            "ref/receipt:compensate/1",
            "ref/receipt:compensate/2",
            "ref/stock:compensate/1"
        ]
    );
    let tail: Vec<(String, Option<String>, u32)> = events_of(&store, "saga-1")
        .into_iter()
        .skip_while(|e| e.kind != "Failed")
        .map(|e| (e.kind, e.node_name, e.attempt))
        .collect();
    let at = |kind: &str, node: Option<&str>, attempt| {
        (kind.to_owned(), node.map(str::to_owned), attempt)
    };
    assert_eq!(
        tail,
        [
            at("Failed", Some("shipped"), 1),
            at("Compensating", Some("receipt"), 1),
            at("CompensationRetrying", Some("receipt"), 1),
            at("Compensating", Some("receipt"), 2),
            at("Compensated", Some("receipt"), 2),
            at("Compensating", Some("stock"), 1),
            at("Compensated", Some("stock"), 1),
            at("RunFinished", None, 0),
        ]
    );
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .expect("listed");
    let run = runs.iter().find(|r| r.id == "saga-1").expect("stored");
    assert_eq!(run.status, RunStatus::Failed);
    // A finished run executed again compensates nothing again.
    let before = executed("saga-1").len();
    let again = Order::runner()
        .durable(&Probe::new(&store, None), "saga-1")
        .execute(7)
        .await
        .expect("replayed");
    check_failed(again, "saga-1");
    assert_eq!(executed("saga-1").len(), before, "nothing ran again");
}

/// Fails commit `n` of a run (every commit, those of the compensation phase among them), then
/// resumes it: the compensations run in the same order with the same keys, and none whose end
/// was committed runs again.
#[tokio::test(start_paused = true)]
async fn a_run_stopped_at_every_commit_resumes_its_compensation() {
    let reference = MemoryStore::new();
    let probe = Probe::new(&reference, None);
    let outcome = Order::runner()
        .durable(&probe, "ref")
        .execute(7)
        .await
        .expect("runs");
    check_failed(outcome, "ref");
    let commits = probe.commits.load(Ordering::SeqCst);
    let reference_keys = compensation_keys("ref");
    // The compensation phase has commits of its own: each attempt's `Compensating`, the end.
    assert!(commits >= 6, "{commits} commits");
    let mut stopped_in_phase = 0;
    for n in 0..commits {
        let id = format!("stop-{n}");
        let store = MemoryStore::new();
        let stopped = Order::runner()
            .durable(&Probe::new(&store, Some(n)), id.as_str())
            .execute(7)
            .await;
        let err = stopped.expect_err("the failing commit stops the run");
        assert!(
            matches!(err, DurableError::Store(StoreError::Closed)),
            "{err}"
        );
        let journal = events_of(&store, &id);
        if journal.iter().any(|e| e.kind == "Compensating") {
            stopped_in_phase += 1;
            // A run stopped in the phase is `Compensating` in the store: `resume_all` takes it.
            let runs = store
                .list_runs(&RunFilter::default())
                .await
                .expect("listed");
            let run = runs.iter().find(|r| r.id == id).expect("stored");
            assert_eq!(run.status, RunStatus::Compensating, "stopped at {n}");
        }
        // The compensation attempts whose end is durable.
        let ended: BTreeSet<(String, u32)> = journal
            .iter()
            .filter(|e| e.kind == "Compensated" || e.kind == "CompensationRetrying")
            .filter_map(|e| Some((e.node_name.clone()?, e.attempt)))
            .collect();
        let ran_before = executed(&id).len();
        let outcome = Order::resume(&Probe::new(&store, None), &id)
            .await
            .expect("resumes");
        check_failed(outcome, &id);
        for (what, key) in &executed(&id)[ran_before..] {
            let Some((node, attempt)) = key
                .strip_prefix(&format!("{id}/"))
                .and_then(|k| k.split_once(":compensate/"))
            else {
                continue;
            };
            let attempt: u32 = attempt.parse().expect("a number");
            assert!(
                !ended.contains(&(node.to_owned(), attempt)),
                "stopped at commit {n}: `{what}` ({key}) had ended and ran again"
            );
        }
        // The same keys, in the same order, each at most twice (once more after a crash
        // between its execution and the commit of its end).
        let mut keys = compensation_keys(&id);
        keys.dedup();
        assert_eq!(keys, reference_keys, "stopped at commit {n}");
        let journal = events_of(&store, &id);
        assert_eq!(
            journal.last().map(|e| e.kind.as_str()),
            Some("RunFinished"),
            "stopped at {n}"
        );
        for (i, event) in journal.iter().enumerate() {
            assert_eq!(event.seq, i as u64, "a journal without gaps");
        }
        let compensated = journal.iter().filter(|e| e.kind == "Compensated").count();
        assert_eq!(
            compensated, 2,
            "stopped at {n}: each compensation ended once"
        );
    }
    assert!(
        stopped_in_phase >= 3,
        "{stopped_in_phase} stops in the phase"
    );
}

async fn refund_never(receipt: &u32) -> Result<(), Refused> {
    effect("refund", "receipt");
    let _ = receipt;
    Err(Refused("the bank is gone"))
}

workflow! {
    #[flow(durable)]
    Doomed(order: u64) {
        Sequential {
            stock = Operation(reserve(order), compensate = release(&stock)),
            receipt = Operation(charge(&stock), retries = 1, backoff = "10ms", compensate = refund_never(&receipt)),
            shipped = Operation(ship()),
        }
    }
}

/// A compensation that fails for good: the run fails with it listed, the compensations after
/// it do not run, and the store says `Failed` (the run's end is committed).
#[tokio::test(start_paused = true)]
async fn a_compensation_that_fails_for_good_leaves_the_run_failed() {
    let store = MemoryStore::new();
    let outcome = Doomed::runner()
        .durable(&Probe::new(&store, None), "doomed-1")
        .execute(7)
        .await
        .expect("the store works");
    let error = outcome.result.expect_err("shipping fails");
    assert!(!error.compensated());
    assert!(
        error
            .to_string()
            .contains("the compensation of `receipt` failed after 2 attempts: the bank is gone"),
        "{error}"
    );
    assert_eq!(
        compensation_keys("doomed-1"),
        ["ref/receipt:compensate/1", "ref/receipt:compensate/2"]
    );
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .expect("listed");
    let run = runs.iter().find(|r| r.id == "doomed-1").expect("stored");
    assert_eq!(run.status, RunStatus::Failed);
    let kinds: Vec<String> = events_of(&store, "doomed-1")
        .into_iter()
        .filter(|e| e.kind.starts_with("Compensat"))
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "Compensating",
            "CompensationRetrying",
            "Compensating",
            "CompensationFailed"
        ]
    );
}

mod undone_otherwise {
    use super::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u32 {
            Sequential {
                stock = Operation(reserve(order), compensate = release(&stock)),
                receipt = Operation(
                    charge(&stock),
                    retries = 2,
                    backoff = "100ms",
                    compensate = refund_never(&receipt),
                ),
                shipped = Operation(ship()),
            }
            => receipt
        }
    }
}

mod not_undone {
    use super::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u32 {
            Sequential {
                stock = Operation(reserve(order), compensate = release(&stock)),
                receipt = Operation(charge(&stock), retries = 2, backoff = "100ms"),
                shipped = Operation(ship()),
            }
            => receipt
        }
    }
}

/// The call that undoes a step is part of its fingerprint: another call, or none, changes
/// the graph's hash, `graph_changes` names it (and nothing else), and a run started with the
/// old one in which the step has started is refused.
#[tokio::test(start_paused = true)]
async fn a_changed_compensation_changes_the_graph_and_is_named() {
    use flowdag::durable::{GraphChange, graph_changes, graph_rows};
    let (hash, rows) = graph_rows(&Order::GRAPH);
    let receipt = rows.iter().find(|r| r.name == "receipt").expect("a row");
    assert_eq!(receipt.compensate, "refund(&receipt)");
    for (graph, now) in [
        (
            &undone_otherwise::Order::GRAPH,
            Some("refund_never(&receipt)"),
        ),
        (&not_undone::Order::GRAPH, None),
    ] {
        let (other, other_rows) = graph_rows(graph);
        assert_ne!(hash, other, "{now:?}");
        assert_eq!(
            graph_changes(&rows, &other_rows),
            [GraphChange::CompensationChanged {
                node: "receipt".to_owned(),
                was: Some("refund(&receipt)".to_owned()),
                now: now.map(str::to_owned),
            }]
        );
    }

    let store = MemoryStore::new();
    // Stopped once `receipt` has started (its `Requested` is in the second commit).
    let stopped = Order::runner()
        .durable(&Probe::new(&store, Some(2)), "changed-undo")
        .execute(7)
        .await;
    assert!(stopped.is_err());
    let err = undone_otherwise::Order::resume(&store, "changed-undo")
        .await
        .expect_err("refused");
    assert!(matches!(err, DurableError::GraphChanged { .. }), "{err}");
    assert!(
        err.to_string().contains(
            "step `receipt` is now undone by `refund_never(&receipt)` (was `refund(&receipt)`)"
        ),
        "{err}"
    );
}

/// The backoff before a compensation's second attempt.
const UNDO_BACKOFF: Duration = Duration::from_millis(400);

workflow! {
    #[flow(durable)]
    SlowRefund(order: u64) -> u32 {
        Sequential {
            stock = Operation(reserve(order)),
            receipt = Operation(
                charge(&stock),
                retries = 1,
                backoff = "400ms",
                compensate = refund(&receipt),
            ),
            shipped = Operation(ship()),
        }
        => receipt
    }
}

/// A compensation attempt that failed and waits for its backoff when the run is stopped: its
/// `CompensationRetrying` and its backoff's due time are durable before the wait, and the
/// resumed run waits only what is left of it (as a step's retry backoff does), then runs the
/// second attempt, once, and not the first again.
#[tokio::test]
async fn a_resumed_compensation_waits_only_what_is_left_of_its_backoff() {
    let store = MemoryStore::new();
    let id = "undo-backoff";
    let lease = Duration::from_millis(100);
    let started = std::time::Instant::now();
    let run = SlowRefund::runner()
        .durable(&Probe::short_lease(&store, lease), id)
        .execute(7);
    let stopped = tokio::time::timeout(Duration::from_millis(150), run).await;
    assert!(stopped.is_err(), "the compensation is still in its backoff");
    let journal = events_of(&store, id);
    assert!(
        journal
            .iter()
            .any(|e| e.kind == "CompensationRetrying" && e.attempt == 1),
        "the failed attempt's end is durable before the wait: {journal:#?}"
    );
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .expect("listed");
    let run = runs.iter().find(|r| r.id == id).expect("stored");
    assert_eq!(run.status, RunStatus::Compensating);
    assert!(run.wake_at_ms.is_some(), "the backoff's due time is stored");

    tokio::time::sleep(lease).await;
    let resumed_at = std::time::Instant::now();
    let outcome = SlowRefund::resume(&Probe::new(&store, None), id)
        .await
        .expect("resumes");
    let error = outcome.result.expect_err("shipping fails");
    let undone: Vec<(&str, u32, bool)> = error
        .compensations()
        .iter()
        .map(|c| (c.node(), c.attempts(), c.is_compensated()))
        .collect();
    assert_eq!(undone, [("receipt", 2, true)]);
    let whole = started.elapsed();
    assert!(whole >= UNDO_BACKOFF, "{whole:?}");
    assert!(
        resumed_at.elapsed() < UNDO_BACKOFF,
        "the resumed run waited {:?}, the whole backoff again",
        resumed_at.elapsed()
    );
    assert_eq!(
        compensation_keys(id),
        ["ref/receipt:compensate/1", "ref/receipt:compensate/2"],
        "each attempt ran once"
    );
}
