//! Durable `Signal` steps: a signal sent through the store reaches the waiting step of a live
//! run (the run polls the store while the step waits, and only then), is consumed exactly once
//! in the batch of its `SignalReceived`, and its payload is stored as the step's output so that
//! a replay restores it; a payload of the wrong type is rejected and consumed while the step
//! keeps waiting; `send_signal` refuses missing and finished runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::durable::{DurableError, send_signal, send_signal_json};
use flowdag::prelude::*;
use flowdag::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun, NewSignal, Owner,
    RunData, RunFilter, RunStatus, RunSummary, SignalMode, SignalSent, Store, StoreError,
    StoreFuture, StoredEvent, StoredSignal, WaitChange,
};
use serde::{Deserialize, Serialize};

/// How long a test lets a run wait before it looks.
const SETTLE: Duration = Duration::from_millis(150);

/// A store that counts the requests for signals, and whose leases are short (a run dropped
/// as a killed process would stop is free to resume soon).
#[derive(Clone)]
struct Counting {
    inner: MemoryStore,
    polls: Arc<AtomicUsize>,
    batches: Arc<std::sync::Mutex<Vec<Batch>>>,
    /// Signals the next request for signals answers too (as if they were the run's).
    injected: Arc<std::sync::Mutex<Vec<StoredSignal>>>,
}

/// The lease of runs on a [`Counting`] store.
const LEASE: Duration = Duration::from_millis(50);

impl Counting {
    fn new(inner: &MemoryStore) -> Counting {
        Counting {
            inner: inner.clone(),
            polls: Arc::new(AtomicUsize::new(0)),
            batches: Arc::default(),
            injected: Arc::default(),
        }
    }

    /// Every batch committed through this handle.
    fn batches(&self) -> Vec<Batch> {
        self.batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn polls(&self) -> usize {
        self.polls.load(Ordering::SeqCst)
    }
}

impl Store for Counting {
    fn create_run(&self, mut run: NewRun) -> StoreFuture<'_, Created> {
        run.lease = LEASE;
        self.inner.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        _lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        self.inner.load_run(run, owner, LEASE)
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
        batch.lease = batch.lease.min(LEASE);
        self.batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(batch.clone());
        self.inner.commit(batch)
    }
    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        self.inner.due_timers(horizon, limit)
    }
    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        self.inner.send_signal(signal)
    }
    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        let injected =
            std::mem::take(&mut *self.injected.lock().unwrap_or_else(|e| e.into_inner()));
        let signals = self.inner.signals(run, after);
        Box::pin(async move {
            let mut signals = signals.await?;
            signals.extend(injected);
            Ok(signals)
        })
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    by: String,
}

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

/// How many times `ship` ran, by run id: a replay runs nothing that completed.
static SHIPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

async fn ship(order: u64, approval: &Approval) -> Result<String, Never> {
    if let Some(attempt) = flowdag::attempt() {
        SHIPPED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(attempt.run().to_owned());
    }
    Ok(format!("order {order} approved by {}", approval.by))
}

/// Runs whose `hold` step never ends while the run's id is listed here.
static HELD: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

async fn hold() -> Result<(), Never> {
    let run = flowdag::attempt()
        .map(|a| a.run().to_owned())
        .unwrap_or_default();
    if HELD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&run)
    {
        std::future::pending::<()>().await;
    }
    Ok(())
}

workflow! {
    #[flow(durable)]
    Approve(order: u64) -> String {
        Sequential {
            approval = Signal(approve: Approval),
            Operation(hold()),
            sent = Operation(ship(order, &approval)),
        }
        => sent.clone()
    }
}

workflow! {
    #[flow(durable)]
    Later(order: u64) -> String {
        Sequential {
            Operation(hold()),
            approval = Signal(approve: Approval),
            sent = Operation(ship(order, &approval)),
        }
        => sent.clone()
    }
}

workflow! {
    #[flow(durable)]
    Ping(order: u64) -> u8 {
        Sequential {
            Operation(hold()),
            got = Signal(ping: u8, transient),
        }
        => got
    }
}

workflow! {
    #[flow(durable)]
    Plain(order: u64) -> u64 {
        Sequential {
            Operation(hold()),
        }
        => order
    }
}

fn kinds(events: &[StoredEvent], kind: &str) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

fn ann() -> Approval {
    Approval { by: "ann".into() }
}

fn shipped(run: &str) -> usize {
    SHIPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|r| *r == run)
        .count()
}

fn set_held(run: &str, held: bool) {
    let mut list = HELD.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|r| r != run);
    if held {
        list.push(run.to_owned());
    }
}

async fn status<S: Store>(store: &S, id: &str) -> RunStatus {
    store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|run| run.id == id)
        .expect("the run exists")
        .status
}

/// A signal sent through the store while the step waits reaches it within the poll
/// interval; it is consumed in the batch of the step's `SignalReceived`, whose output is the
/// payload.
#[tokio::test]
async fn a_signal_sent_through_the_store_reaches_the_waiting_step() {
    let store = MemoryStore::new();
    let counting = Counting::new(&store);
    let run = Approve::runner()
        .durable(&counting, "a-1")
        .signal_poll(Duration::from_millis(10))
        .execute(1);
    let send = async {
        tokio::time::sleep(SETTLE).await;
        let events = store.events("a-1", 0).await.expect("reads");
        assert_eq!(kinds(&events, "SignalReceived"), 0, "{events:#?}");
        send_signal(&store, "a-1", Approve::APPROVE, ann())
            .await
            .expect("sent")
    };
    let (outcome, sent) = tokio::join!(run, send);
    assert!(matches!(sent, SignalSent::Stored { .. }), "{sent:?}");
    let outcome = outcome.expect("runs");
    assert_eq!(outcome.result.expect("succeeds"), "order 1 approved by ann");
    let events = store.events("a-1", 0).await.expect("reads");
    let approval: Vec<&str> = events
        .iter()
        .filter(|e| e.node_name.as_deref() == Some("approval"))
        .map(|e| e.kind.as_str())
        .collect();
    assert_eq!(approval, ["Requested", "SignalReceived", "Completed"]);
    // The wait is opened with the step's `Requested`; the signal is consumed and the wait
    // closed in the batch of its `SignalReceived`, with the payload as the step's output.
    let SignalSent::Stored { id: signal } = sent else {
        panic!("stored: {sent:?}")
    };
    let batches = counting.batches();
    let with = |kind: &str| {
        batches
            .iter()
            .find(|b| {
                b.events
                    .iter()
                    .any(|e| e.kind == kind && e.node_name.as_deref() == Some("approval"))
            })
            .expect("a batch with the event")
    };
    assert!(
        matches!(&with("Requested").waits[..], [WaitChange::Open { name, .. }] if name == "approve")
    );
    let received = with("SignalReceived");
    assert_eq!(received.consumed, [signal]);
    assert!(matches!(&received.waits[..], [WaitChange::Close { .. }]));
    let output = &received.outputs[0];
    assert_eq!(
        serde_json::from_slice::<Approval>(&output.bytes).expect("the payload"),
        ann()
    );
    assert_eq!(batches.iter().map(|b| b.consumed.len()).sum::<usize>(), 1);
    assert!(
        store.signals("a-1", 0).await.expect("reads").is_empty(),
        "the signal is consumed"
    );
    // Sending to a finished run is refused, and nothing is stored (here through a
    // `dyn Store`, as an application that picks its store at run time holds it).
    let any: &dyn Store = &store;
    let err = send_signal(any, "a-1", Approve::APPROVE, ann())
        .await
        .expect_err("the run has ended");
    assert!(
        matches!(err, DurableError::Store(StoreError::Finished { ref run }) if run == "a-1"),
        "{err}"
    );
    // And to a run that does not exist.
    let err = send_signal(&store, "a-404", Approve::APPROVE, ann())
        .await
        .expect_err("no such run");
    assert!(
        matches!(err, DurableError::Store(StoreError::NotFound { ref run }) if run == "a-404"),
        "{err}"
    );
}

/// A signal sent before its step waits is kept and taken when the step starts.
#[tokio::test]
async fn a_kept_signal_waits_for_its_step() {
    let store = MemoryStore::new();
    let id = "k-1";
    set_held(id, true);
    // A run that has not reached its step yet, stopped: its first step is held.
    let first = tokio::time::timeout(
        SETTLE,
        Later::runner()
            .durable(&Counting::new(&store), id)
            .execute(2),
    )
    .await;
    assert!(first.is_err(), "the run waits");
    let sent = send_signal(&store, id, Later::APPROVE, ann())
        .await
        .expect("kept");
    assert!(matches!(sent, SignalSent::Stored { .. }), "{sent:?}");
    set_held(id, false);
    tokio::time::sleep(LEASE * 2).await;
    // Resumed: the step finds the signal among those loaded with the run.
    let outcome = Later::resume(&Counting::new(&store), id)
        .await
        .expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), "order 2 approved by ann");
}

/// A payload that does not deserialize into the step's type is rejected: `SignalRejected`
/// with the deserializer's message, the signal consumed, the step still waiting. A later good
/// payload completes it; a replay of the whole run consumes nothing again and runs nothing
/// that completed.
#[tokio::test]
async fn a_payload_of_the_wrong_type_is_rejected_and_the_step_keeps_waiting() {
    let store = MemoryStore::new();
    let id = "r-1";
    let counting = Counting::new(&store);
    let run = Approve::runner()
        .durable(&counting, id)
        .signal_poll(Duration::from_millis(10))
        .execute(3);
    let bad = async {
        tokio::time::sleep(SETTLE).await;
        store
            .send_signal(NewSignal {
                run: id.to_owned(),
                name: "approve".into(),
                payload: br#"{"who":"ann"}"#.to_vec(),
                mode: SignalMode::Kept,
            })
            .await
            .expect("stored");
        tokio::time::sleep(SETTLE).await;
    };
    tokio::select! {
        _ = run => panic!("the run cannot end on a rejected payload"),
        () = bad => {}
    }
    // The run was dropped while it waited (as a killed process stops).
    let events = store.events(id, 0).await.expect("reads");
    let rejected: Vec<&StoredEvent> = events
        .iter()
        .filter(|e| e.kind == "SignalRejected")
        .collect();
    assert_eq!(rejected.len(), 1, "{events:#?}");
    let data: serde_json::Value = serde_json::from_slice(&rejected[0].data).expect("JSON");
    assert_eq!(data["name"], "approve");
    let error = data["error"].as_str().expect("an error");
    assert!(error.contains("missing field `by`"), "{error}");
    assert_eq!(kinds(&events, "SignalReceived"), 0);
    assert!(
        store.signals(id, 0).await.expect("reads").is_empty(),
        "the rejected signal is consumed: it is not tried again"
    );
    assert_eq!(status(&store, id).await, RunStatus::Running);

    // Resumed: the rejection is replayed, not repeated; a good payload completes the step.
    tokio::time::sleep(LEASE * 2).await;
    send_signal(&store, id, Approve::APPROVE, ann())
        .await
        .expect("sent");
    let outcome = Approve::resume(&counting, id).await.expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), "order 3 approved by ann");
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "SignalRejected"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "SignalReceived"), 1, "{events:#?}");
    assert_eq!(shipped(id), 1);

    // A finished run replays to its result: the payload comes from the stored output.
    let again = Approve::runner()
        .durable(&store, id)
        .execute(3)
        .await
        .expect("replays");
    assert_eq!(again.result.expect("succeeds"), "order 3 approved by ann");
    assert_eq!(shipped(id), 1, "nothing ran again");
    assert_eq!(
        store.events(id, 0).await.expect("reads").len(),
        events.len()
    );
}

/// A run stopped after its signal was consumed resumes with the stored payload: the signal
/// is not consumed twice and the step does not wait again.
#[tokio::test]
async fn a_consumed_signal_is_restored_on_resume() {
    let store = MemoryStore::new();
    let counting = Counting::new(&store);
    let id = "c-1";
    set_held(id, true);
    send_signal(&store, id, Approve::APPROVE, ann())
        .await
        .expect_err("the run does not exist yet");
    let run = Approve::runner()
        .durable(&counting, id)
        .signal_poll(Duration::from_millis(10))
        .execute(4);
    let send = async {
        tokio::time::sleep(SETTLE).await;
        send_signal(&store, id, Approve::APPROVE, ann())
            .await
            .expect("sent");
        // The step takes it, then `hold` holds the run.
        tokio::time::sleep(SETTLE).await;
    };
    tokio::select! {
        _ = run => panic!("`hold` holds the run"),
        () = send => {}
    }
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "SignalReceived"), 1, "{events:#?}");
    assert!(store.signals(id, 0).await.expect("reads").is_empty());

    set_held(id, false);
    tokio::time::sleep(LEASE * 2).await;
    let outcome = Approve::resume(&counting, id).await.expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), "order 4 approved by ann");
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "SignalReceived"), 1, "{events:#?}");
}

/// The store is asked for signals only while a `Signal` step waits: never by a run without
/// one, and no more once the step has its signal.
#[tokio::test]
async fn the_store_is_polled_only_while_a_signal_step_waits() {
    let store = MemoryStore::new();
    let plain = Counting::new(&store);
    let outcome = Plain::runner()
        .durable(&plain, "n-1")
        .signal_poll(Duration::from_millis(1))
        .execute(5)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("succeeds"), 5);
    assert_eq!(plain.polls(), 0);

    let id = "n-2";
    set_held(id, true);
    let counting = Counting::new(&store);
    let run = Approve::runner()
        .durable(&counting, id)
        .signal_poll(Duration::from_millis(10))
        .execute(6);
    let send = async {
        tokio::time::sleep(SETTLE).await;
        let waiting = counting.polls();
        assert!(waiting >= 3, "polled {waiting} times while the step waited");
        send_signal(&store, id, Approve::APPROVE, ann())
            .await
            .expect("sent");
        tokio::time::sleep(SETTLE).await;
        let taken = counting.polls();
        tokio::time::sleep(SETTLE).await;
        // At most one request was in flight when the step took its signal.
        assert_eq!(
            counting.polls(),
            taken,
            "polled after the step had its signal"
        );
    };
    tokio::select! {
        _ = run => panic!("`hold` holds the run"),
        () = send => {}
    }
    set_held(id, false);
}

/// A transient signal is stored only while a step waits for it; otherwise it is dropped.
#[tokio::test]
async fn a_transient_signal_is_dropped_when_no_step_waits() {
    let store = MemoryStore::new();
    let id = "t-1";
    set_held(id, true);
    let counting = Counting::new(&store);
    let first =
        tokio::time::timeout(SETTLE, Ping::runner().durable(&counting, id).execute(7)).await;
    assert!(first.is_err(), "`hold` holds the run");
    let sent = send_signal(&store, id, Ping::PING, 1)
        .await
        .expect("answered");
    assert_eq!(sent, SignalSent::Dropped);

    set_held(id, false);
    tokio::time::sleep(LEASE * 2).await;
    let run = Ping::resume(&counting, id);
    let send = async {
        tokio::time::sleep(SETTLE).await;
        send_signal(&store, id, Ping::PING, 2)
            .await
            .expect("answered")
    };
    let (outcome, sent) = tokio::join!(run, send);
    assert!(matches!(sent, SignalSent::Stored { .. }), "{sent:?}");
    assert_eq!(outcome.expect("resumes").result.expect("succeeds"), 2);
}

/// A signal sent by name and JSON is checked against the workflow before anything is stored:
/// an undeclared name, a payload of another type and a run of another workflow are refused;
/// a good one is stored kept or transient as the workflow declares it, and the step takes it.
#[tokio::test]
async fn a_signal_sent_as_json_is_checked_before_it_is_stored() {
    let store = MemoryStore::new();
    let id = "j-1";
    set_held(id, true);
    let counting = Counting::new(&store);
    let first =
        tokio::time::timeout(SETTLE, Later::runner().durable(&counting, id).execute(3)).await;
    assert!(first.is_err(), "`hold` holds the run");
    let stored = || async { store.signals(id, 0).await.expect("reads").len() };
    let refused = [
        (
            "approv",
            br#"{"by":"ann"}"#.as_slice(),
            "no signal `approv`",
        ),
        (
            "approve",
            br#"{"who":"ann"}"#.as_slice(),
            "does not read as",
        ),
        ("approve", b"7".as_slice(), "does not read as"),
    ];
    for (name, payload, why) in refused {
        let error = send_signal_json::<Later, _>(&store, id, name, payload)
            .await
            .expect_err("refused");
        match &error {
            DurableError::Signal {
                signal, why: text, ..
            } => {
                assert_eq!(signal, name);
                assert!(text.contains(why), "{error}");
            }
            other => panic!("expected a refused signal, got {other}"),
        }
    }
    assert!(
        send_signal_json::<Approve, _>(&store, id, "approve", br#"{"by":"ann"}"#)
            .await
            .expect_err("a run of `Later`")
            .to_string()
            .contains("it is a run of `Later`, not of `Approve`")
    );
    assert_eq!(stored().await, 0, "nothing was stored");
    let sent = send_signal_json::<Later, _>(&store, id, "approve", br#"{"by":"ann"}"#)
        .await
        .expect("stored");
    assert!(matches!(sent, SignalSent::Stored { .. }), "{sent:?}");
    set_held(id, false);
    tokio::time::sleep(LEASE * 2).await;
    let outcome = Later::resume(&counting, id).await.expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), "order 3 approved by ann");
    // `ping` is declared transient: sent as JSON while no step waits, it is dropped.
    set_held("j-2", true);
    let first =
        tokio::time::timeout(SETTLE, Ping::runner().durable(&counting, "j-2").execute(1)).await;
    assert!(first.is_err(), "`hold` holds the run");
    let sent = send_signal_json::<Ping, _>(&store, "j-2", "ping", b"4")
        .await
        .expect("answered");
    assert_eq!(sent, SignalSent::Dropped);
    set_held("j-2", false);
}

/// A durable workflow with a `Signal` step still runs without a store: the step takes its
/// signals from the runner's mailbox.
#[tokio::test]
async fn a_durable_signal_step_runs_without_a_store() {
    let mut runner = Approve::runner();
    let signals = runner.signals();
    signals.send(Approve::APPROVE, ann()).expect("kept");
    let outcome = runner.execute(8).await;
    assert_eq!(outcome.result.expect("succeeds"), "order 8 approved by ann");
}

/// A fresh SQLite file for the test `name`.
fn sqlite_path(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("durable-signals")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the store");
    dir.join("runs.db")
}

/// A run waiting on a `Signal` in a SQLite store receives a signal sent through a client of
/// the same file (`open_client`: no file lock, as another process would send it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_sqlite_receives_a_signal_sent_through_a_client() {
    let path = sqlite_path("client");
    let owner = flowdag_sqlite::SqliteStore::open(&path).expect("the owner opens the store");
    let run = Approve::runner()
        .durable(&owner, "s-1")
        .signal_poll(Duration::from_millis(20))
        .execute(9);
    let send = async {
        tokio::time::sleep(SETTLE).await;
        let client = flowdag_sqlite::SqliteStore::open_client(&path).expect("a client opens it");
        send_signal(&client, "s-1", Approve::APPROVE, ann())
            .await
            .expect("sent through the client")
    };
    let (outcome, sent) = tokio::join!(run, send);
    assert!(matches!(sent, SignalSent::Stored { .. }), "{sent:?}");
    assert_eq!(
        outcome.expect("runs").result.expect("succeeds"),
        "order 9 approved by ann"
    );
    let events = owner.events("s-1", 0).await.expect("reads");
    assert_eq!(kinds(&events, "SignalReceived"), 1);
    assert!(owner.signals("s-1", 0).await.expect("reads").is_empty());
}

/// A run stopped while its `Signal` step waits (its process gone), then a signal sent
/// through a client: the signal makes the run due, and a `Worker` of a new owner resumes it
/// to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_is_resumed_by_the_worker_once_its_signal_is_sent() {
    let path = sqlite_path("worker");
    let id = "w-1";
    {
        let first = flowdag_sqlite::SqliteStore::open(&path).expect("opens");
        let run = Approve::runner().durable(&first, id).execute(10);
        let stopped = tokio::time::timeout(SETTLE, run).await;
        assert!(stopped.is_err(), "the step waits");
        let events = first.events(id, 0).await.expect("reads");
        assert_eq!(kinds(&events, "SignalReceived"), 0);
        // The process ends: its store is closed, the run's lease stays in the file.
    }
    let client = flowdag_sqlite::SqliteStore::open_client(&path).expect("a client");
    let before = now_ms();
    send_signal(&client, id, Approve::APPROVE, ann())
        .await
        .expect("sent");
    let summary = client
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|run| run.id == id)
        .expect("the run");
    assert!(
        summary.wake_at_ms.is_some_and(|at| at >= before),
        "the signal makes the run due: {summary:?}"
    );

    let store = flowdag_sqlite::SqliteStore::open(&path).expect("a new owner");
    let worker = flowdag::Worker::new(store.clone())
        .register::<Approve>()
        .poll_interval(Duration::from_millis(20));
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
        .expect("the worker resumes the run within 10 s")
        .expect("the store answers");
    let resumed: Vec<&str> = report.resumed.iter().map(|r| r.run.as_str()).collect();
    assert_eq!(resumed, [id]);
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "SignalReceived"), 1, "{events:#?}");
    assert_eq!(kinds(&events, "RunFinished"), 1);
    assert_eq!(shipped(id), 1);
}

workflow! {
    #[flow(durable)]
    Deadline(order: u64) -> bool {
        Sequential {
            Race {
                nudge = Signal(nudge: u8, transient),
                Delay("100ms"),
            },
            Operation(hold()),
        }
        => nudge.is_some()
    }
}

/// A `Signal` step withdrawn by a race it lost stops waiting: its wait is closed in the
/// store, so a transient signal sent afterwards is dropped.
#[tokio::test]
async fn a_withdrawn_signal_step_closes_its_wait() {
    let store = MemoryStore::new();
    let counting = Counting::new(&store);
    let id = "d-1";
    set_held(id, true);
    let run = Deadline::runner()
        .durable(&counting, id)
        .signal_poll(Duration::from_millis(10))
        .execute(11);
    let stopped = tokio::time::timeout(Duration::from_millis(300), run).await;
    assert!(stopped.is_err(), "`hold` holds the run");
    let events = store.events(id, 0).await.expect("reads");
    let nudge: Vec<&str> = events
        .iter()
        .filter(|e| e.node_name.as_deref() == Some("nudge"))
        .map(|e| e.kind.as_str())
        .collect();
    assert_eq!(nudge, ["Requested", "Withdrawn"]);
    let waits: Vec<WaitChange> = counting
        .batches()
        .into_iter()
        .flat_map(|b| b.waits)
        .collect();
    assert!(
        matches!(&waits[..], [WaitChange::Open { node, .. }, WaitChange::Close { node: closed, .. }] if node == closed),
        "{waits:?}"
    );
    let sent = send_signal(&store, id, Deadline::NUDGE, 1)
        .await
        .expect("answered");
    assert_eq!(sent, SignalSent::Dropped, "no step waits any more");
    set_held(id, false);
}

/// The store consumes a signal once: a batch that consumes a signal that is not the run's
/// open one (taken by another batch, or another run's) is refused with `SignalTaken`, which
/// stops the run with nothing of that batch written; resumed, the run takes a signal of its own.
#[tokio::test]
async fn a_signal_taken_elsewhere_is_refused_and_the_run_stops() {
    let store = MemoryStore::new();
    let counting = Counting::new(&store);
    // A run that holds its `hold` step keeps a signal of its own, unconsumed.
    let other = "x-other";
    set_held(other, true);
    let parked =
        tokio::time::timeout(SETTLE, Later::runner().durable(&store, other).execute(12)).await;
    assert!(parked.is_err(), "`hold` holds the other run");
    send_signal(&store, other, Later::APPROVE, ann())
        .await
        .expect("kept for the other run");
    let foreign = store.signals(other, 0).await.expect("reads").remove(0);

    // The run is handed the other run's signal by its poll, and its commit is refused.
    let id = "x-1";
    counting
        .injected
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(foreign.clone());
    let err = Approve::runner()
        .durable(&counting, id)
        .signal_poll(Duration::from_millis(10))
        .execute(12)
        .await
        .expect_err("the batch that consumes it is refused");
    assert!(
        matches!(err, DurableError::Store(StoreError::SignalTaken { signal, .. }) if signal == foreign.id),
        "{err}"
    );
    let events = store.events(id, 0).await.expect("reads");
    assert_eq!(kinds(&events, "SignalReceived"), 0, "{events:#?}");
    assert_eq!(
        store.signals(other, 0).await.expect("reads"),
        [foreign],
        "the other run's signal is still open"
    );

    // Resumed, the run waits for a signal of its own.
    tokio::time::sleep(LEASE * 2).await;
    send_signal(&store, id, Approve::APPROVE, ann())
        .await
        .expect("sent");
    let outcome = Approve::resume(&counting, id).await.expect("resumes");
    assert_eq!(
        outcome.result.expect("succeeds"),
        "order 12 approved by ann"
    );
    set_held(other, false);
}

/// A durable run with a `Signal` step, and its resume, can be spawned on a multi-threaded
/// runtime: their futures are `Send`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_runs_with_signals_can_be_spawned() {
    let store = MemoryStore::new();
    let run = tokio::spawn(
        Approve::runner()
            .durable(&store, "sp-1")
            .signal_poll(Duration::from_millis(10))
            .execute(13),
    );
    tokio::time::sleep(SETTLE).await;
    send_signal(&store, "sp-1", Approve::APPROVE, ann())
        .await
        .expect("sent");
    let outcome = run.await.expect("joins").expect("runs");
    assert_eq!(
        outcome.result.expect("succeeds"),
        "order 13 approved by ann"
    );
    let again = tokio::spawn(Approve::resume(&store, "sp-1"))
        .await
        .expect("joins")
        .expect("replays");
    assert_eq!(again.result.expect("succeeds"), "order 13 approved by ann");
}

/// Not a test of its own: the child process of `a_killed_run_resumes_once_its_signal_is_sent`,
/// which runs this test binary with `FLOW_SIGNAL_CHILD` set to a store's path. Without it, it
/// returns. It starts a run whose `Signal` step waits, says so once the wait is committed, and
/// waits until it is killed.
#[test]
fn child_waiting_for_a_signal() {
    let Ok(path) = std::env::var("FLOW_SIGNAL_CHILD") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = flowdag_sqlite::SqliteStore::open(&path).expect("the child opens the store");
        let run = Approve::runner().durable(&store, "kill-1").execute(14);
        let announce = async {
            loop {
                let events = store.events("kill-1", 0).await.unwrap_or_default();
                if events
                    .iter()
                    .any(|e| e.kind == "Requested" && e.node_name.as_deref() == Some("approval"))
                {
                    println!("WAITING {}", std::process::id());
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = run => panic!("the run cannot end without its signal"),
            () = announce => {}
        }
    });
}

/// A process whose run waits for a signal is killed (SIGKILL); the signal is sent through a
/// client of the file; a `Worker` of a new owner resumes the run, which takes the signal and
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_resumes_once_its_signal_is_sent() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let path = sqlite_path("killed");
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "child_waiting_for_a_signal", "--nocapture"])
        .env("FLOW_SIGNAL_CHILD", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("piped");
    let waiting = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.starts_with("WAITING"));
    assert_eq!(
        waiting,
        Some(format!("WAITING {}", child.id())),
        "the child's run waits"
    );
    // The owner is alive: a client sends all the same.
    let client = flowdag_sqlite::SqliteStore::open_client(&path).expect("a client");
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    send_signal(&client, "kill-1", Approve::APPROVE, ann())
        .await
        .expect("sent");

    let store = flowdag_sqlite::SqliteStore::open(&path).expect("a new owner");
    let worker = flowdag::Worker::new(store.clone())
        .register::<Approve>()
        .poll_interval(Duration::from_millis(20));
    let shutdown = {
        let store = store.clone();
        async move {
            while status(&store, "kill-1").await != RunStatus::Succeeded {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let report = tokio::time::timeout(Duration::from_secs(10), worker.run(shutdown))
        .await
        .expect("the worker resumes the run within 10 s")
        .expect("the store answers");
    let result = report.resumed[0].result.as_ref().expect("resumed");
    assert!(result.result.is_ok(), "{result:?}");
    let events = store.events("kill-1", 0).await.expect("reads");
    assert_eq!(kinds(&events, "SignalReceived"), 1, "{events:#?}");
    assert!(store.signals("kill-1", 0).await.expect("reads").is_empty());
}

/// Milliseconds since the Unix epoch by this process's clock: the clock of the stores the tests
/// use (`MemoryStore`, SQLite).
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.expect("after 1970").as_millis()).expect("fits")
}
