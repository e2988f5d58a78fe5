//! The contract every [`Store`] must pass (feature `contract`): the rules written on the
//! methods of [`Store`], as test cases a store crate runs from its own tests.
//!
//! The engine relies on these rules and on nothing else of a store: a store that passes the
//! suite can stand in for [`MemoryStore`](crate::MemoryStore), SQLite or PostgreSQL under any
//! durable run. `flowdag-sqlite` and `flowdag-postgres` run it, and so does this crate for
//! `MemoryStore`.
//!
//! # Running it
//!
//! Add this crate to the store crate's `[dev-dependencies]` with the feature `contract`
//! (`flowdag-store = { version = "0.1", features = ["contract"] }`), and tokio with `rt` and
//! `macros`. Then, in a test, give [`all`] a function that makes a fresh, empty store (a new
//! temporary file, a new database schema): each case runs on a store of its own.
//!
//! ```
//! use std::sync::Arc;
//! use flowdag_store::{MemoryStore, Store, contract};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! // In the store crate: `#[tokio::test] async fn my_store_passes_the_contract() { … }`.
//! contract::all(|| Arc::new(MemoryStore::new()) as Arc<dyn Store>).await;
//! # });
//! ```
//!
//! A store that implements the task methods ([`Store::claim_tasks`] and the rest, for runs
//! whose operations any worker process executes) also runs [`distributed`]; a store of one
//! process that keeps their defaults ([`StoreError::Unsupported`]) runs [`all`] alone.
//!
//! # What to expect
//!
//! - Each case is also a public function, to run one alone while a store is being written
//!   ([`all`] and [`distributed`] name theirs). A failure panics with the case's name, what was
//!   asked, and what the store answered.
//! - The cases sleep for a few tens of milliseconds where a lease must expire, so they need a
//!   tokio runtime with its time driver and a real clock (not paused): `#[tokio::test]` is
//!   right. [`tasks_exclusive_claims`] spawns eight tasks on the current runtime.
//! - The suite checks what one client sees of the store: the answers, the errors and their
//!   order, atomicity (a refused request writes nothing), idempotency, leases and fencing,
//!   timers, signals, tasks. What only the store can know, it does not: that a commit survives
//!   a crash or a power cut, that two processes exclude each other, how fast it is. A store
//!   tests those itself.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Batch, Committed, ContinueRun, Created, Lease, NewRun, NewSignal, NodeRow, Owner, RunCursor,
    RunEnd, RunFilter, RunStatus, SignalMode, SignalSent, StepKind, Store, StoreError, StoredEvent,
    StoredOutput, StoredPath, StoredStep, TaskChange, TaskClaim, TaskCommitted, TaskOutcome,
    TaskResult, TimerChange, TimerKey, TimerKind, WaitChange, WorkflowVersion,
};

const LONG: Duration = Duration::from_secs(60);

/// Runs every case, each on a fresh store from `make`.
pub async fn all(make: impl Fn() -> Arc<dyn Store>) {
    create_and_load(&*make()).await;
    missing_run(&*make()).await;
    run_data_without_a_lease(&*make()).await;
    idempotent_commit(&*make()).await;
    conflicts(&*make()).await;
    atomic_commit(&*make()).await;
    leases(&*make()).await;
    timers_due_in_order(&*make()).await;
    signals_kept_and_refused(&*make()).await;
    list_and_filter(&*make()).await;
    requests_wake_the_run(&*make()).await;
    reopen_and_delete(&*make()).await;
    graph_adopted(&*make()).await;
    graph_renumbered(&*make()).await;
    continued(&*make()).await;
    load_reads_the_decided_state(&*make()).await;
    nodes_without_a_lease(&*make()).await;
}

fn event(seq: u64, kind: &str, node: Option<u32>) -> StoredEvent {
    let mut event = StoredEvent::new(seq, kind);
    event.node = node;
    event.node_name = node.map(|n| format!("n{n}"));
    event.attempt = u32::from(node.is_some());
    event.at_us = seq * 10;
    event
}

fn new_run(id: &str, workflow: &str, owner: &Owner, lease: Duration) -> NewRun {
    let mut run = NewRun::new(id, workflow, GRAPH, owner.clone(), lease);
    run.nodes = vec![
        NodeRow {
            node: 0,
            name: "fetch".into(),
            label: "fetch(id)".into(),
            fingerprint: 11,
            preds: vec![],
            compensate: String::new(),
            kind: "operation".into(),
            policy: "timeout = 5s, retries = 3, backoff = exponential(100ms, 10s)".into(),
        },
        NodeRow {
            node: 1,
            name: "charge".into(),
            label: "charge(&fetch)".into(),
            fingerprint: 22,
            preds: vec![0],
            compensate: "refund(&charge)".into(),
            kind: "operation".into(),
            policy: String::new(),
        },
    ];
    run.input = br#"{"id":42}"#.to_vec();
    run.input_hash = 42;
    run.options = b"{}".to_vec();
    run.events = vec![event(0, "RunStarted", None), event(1, "Requested", Some(0))];
    run
}

/// Creates a run and returns its lease.
async fn create(store: &dyn Store, id: &str, workflow: &str, owner: &Owner) -> Lease {
    match store.create_run(new_run(id, workflow, owner, LONG)).await {
        Ok(Created::New { lease, next_seq }) => {
            assert_eq!(next_seq, 2, "create_run: next_seq after two first events");
            assert_eq!(
                lease.owner, *owner,
                "create_run: the lease is the creator's"
            );
            lease
        }
        other => panic!("create_run `{id}`: expected a new run, got {other:?}"),
    }
}

async fn commit(store: &dyn Store, batch: Batch) -> Result<Committed, StoreError> {
    store.commit(batch).await
}

fn completion(lease: &Lease, first_seq: u64) -> Batch {
    let mut batch = Batch::new(lease, first_seq, LONG);
    batch.events = vec![
        event(first_seq, "Completed", Some(0)),
        event(first_seq + 1, "Requested", Some(1)),
    ];
    batch.outputs = vec![StoredOutput {
        node: 0,
        instance: String::new(),
        type_name: "Order".into(),
        bytes: br#"{"total":3}"#.to_vec(),
    }];
    batch
}

/// `create_run` stores everything `load_run` gives back; creating the same id again returns the
/// stored run and writes nothing; loading takes a new lease version.
pub async fn create_and_load(store: &dyn Store) {
    let owner = Owner::new("a");
    let mut run = new_run("r1", "Checkout", &owner, LONG);
    run.timers = vec![TimerChange::Set {
        key: TimerKey {
            node: None,
            instance: String::new(),
            kind: TimerKind::RunDeadline,
        },
        after: Duration::from_secs(3600),
    }];
    let lease = match store.create_run(run.clone()).await {
        Ok(Created::New { lease, .. }) => lease,
        other => panic!("create_and_load: expected a new run, got {other:?}"),
    };
    match store.create_run(run.clone()).await {
        Ok(Created::Exists(summary)) => {
            assert_eq!(summary.id, "r1", "create_and_load: the existing run");
            assert_eq!(
                summary.graph_hash, run.graph_hash,
                "create_and_load: graph hash"
            );
            assert_eq!(summary.input_hash, 42, "create_and_load: input hash");
            assert_eq!(
                summary.next_seq, 2,
                "create_and_load: nothing written again"
            );
        }
        other => panic!("create_and_load: expected Exists on the same id, got {other:?}"),
    }
    let mut batch = completion(&lease, 2);
    batch.status = Some(RunStatus::Waiting);
    assert_eq!(
        commit(store, batch).await,
        Ok(Committed::Applied { next_seq: 4 }),
        "create_and_load: commit"
    );
    let loaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("create_and_load: load_run: {e}"));
    assert_eq!(loaded.run.workflow, "Checkout", "create_and_load: workflow");
    assert_eq!(
        loaded.run.status,
        RunStatus::Waiting,
        "create_and_load: status"
    );
    assert_eq!(loaded.run.next_seq, 4, "create_and_load: next_seq");
    assert_eq!(loaded.input, run.input, "create_and_load: input");
    assert_eq!(loaded.options, run.options, "create_and_load: options");
    assert_eq!(loaded.nodes, run.nodes, "create_and_load: node rows");
    assert_eq!(loaded.events.len(), 4, "create_and_load: events");
    assert_eq!(
        loaded.events[..2],
        run.events[..],
        "create_and_load: first events"
    );
    assert_eq!(
        loaded.events[2].kind, "Completed",
        "create_and_load: third event"
    );
    assert_eq!(loaded.outputs.len(), 1, "create_and_load: outputs");
    assert_eq!(
        loaded.outputs[0].bytes, br#"{"total":3}"#,
        "create_and_load: output"
    );
    assert_eq!(
        loaded.timers.len(),
        1,
        "create_and_load: the run's deadline timer"
    );
    assert!(
        loaded.timers[0].due_ms >= loaded.now_ms + 3_590_000,
        "create_and_load: the deadline is an hour away: {loaded:?}"
    );
    assert_eq!(loaded.end, None, "create_and_load: not ended");
    assert!(
        loaded.lease.version > lease.version,
        "create_and_load: loading takes a new lease version ({} after {})",
        loaded.lease.version,
        lease.version
    );
    let tail = store
        .events("r1", 3)
        .await
        .unwrap_or_else(|e| panic!("create_and_load: events: {e}"));
    assert_eq!(tail.len(), 1, "create_and_load: events from #3");
    assert_eq!(tail[0].seq, 3, "create_and_load: events from #3");
}

/// Every request about a run that does not exist is `NotFound`, and writes nothing.
pub async fn missing_run(store: &dyn Store) {
    let owner = Owner::new("a");
    let not_found = Err(StoreError::NotFound { run: "nope".into() });
    assert_eq!(
        store.load_run("nope", &owner, LONG).await.map(|_| ()),
        not_found,
        "missing_run: load_run"
    );
    assert_eq!(
        store.events("nope", 0).await.map(|_| ()),
        not_found,
        "missing_run: events"
    );
    assert_eq!(
        store.run_data("nope").await.map(|_| ()),
        not_found,
        "missing_run: run_data"
    );
    assert_eq!(
        store.signals("nope", 0).await.map(|_| ()),
        not_found,
        "missing_run: signals"
    );
    let lease = Lease {
        run: "nope".into(),
        owner: owner.clone(),
        version: 1,
        until_ms: 0,
    };
    assert_eq!(
        commit(store, completion(&lease, 0)).await.map(|_| ()),
        not_found,
        "missing_run: commit"
    );
    let signal = NewSignal {
        run: "nope".into(),
        name: "go".into(),
        payload: vec![],
        mode: SignalMode::Kept,
    };
    assert_eq!(
        store.send_signal(signal).await.map(|_| ()),
        not_found,
        "missing_run: send_signal"
    );
    let runs = store.list_runs(&RunFilter::default()).await;
    assert_eq!(runs, Ok(vec![]), "missing_run: nothing was created");
}

/// `run_data` reads a run's input, options, outputs (a node's and a nest instance's, an output stored
/// again replacing the first) and end without its lease: the owner's lease and version are
/// untouched and its next commit is applied.
pub async fn run_data_without_a_lease(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let read = |what: &'static str| async move {
        store
            .run_data("r1")
            .await
            .unwrap_or_else(|e| panic!("run_data_without_a_lease: {what}: {e}"))
    };
    let fresh = read("a new run").await;
    assert_eq!(
        fresh.input,
        br#"{"id":42}"#.to_vec(),
        "run_data_without_a_lease: the input"
    );
    assert_eq!(
        fresh.outputs,
        vec![],
        "run_data_without_a_lease: no output yet"
    );
    assert_eq!(fresh.end, None, "run_data_without_a_lease: not ended");
    assert_eq!(
        fresh.options,
        b"{}".to_vec(),
        "run_data_without_a_lease: the options"
    );

    let mut batch = completion(&lease, 2);
    let instance = |index: u32, bytes: &[u8]| StoredOutput {
        node: 1,
        instance: format!("n1[{index}]"),
        type_name: "Parcel".into(),
        bytes: bytes.to_vec(),
    };
    batch.outputs.push(instance(2, b"2"));
    batch.outputs.push(instance(1, b"1"));
    assert_eq!(
        commit(store, batch).await,
        Ok(Committed::Applied { next_seq: 4 }),
        "run_data_without_a_lease: a batch with outputs"
    );
    let before = store.list_runs(&RunFilter::default()).await;
    let data = read("a run with outputs").await;
    let shown: Vec<(u32, &str, &[u8])> = data
        .outputs
        .iter()
        .map(|o| (o.node, o.instance.as_str(), o.bytes.as_slice()))
        .collect();
    assert_eq!(
        shown,
        [
            (0, "", &br#"{"total":3}"#[..]),
            (1, "n1[1]", b"1"),
            (1, "n1[2]", b"2")
        ],
        "run_data_without_a_lease: outputs by node, then instance"
    );
    assert_eq!(
        data.outputs[0].type_name, "Order",
        "run_data_without_a_lease: the output's type"
    );
    assert_eq!(
        store.list_runs(&RunFilter::default()).await,
        before,
        "run_data_without_a_lease: reading changed the run (its lease, version or times)"
    );

    // The owner's lease still holds: its next batches are applied. An output stored again
    // replaces the first; the end is read back as committed.
    let mut batch = Batch::new(&lease, 4, LONG);
    batch.events = vec![
        event(4, "Completed", Some(1)),
        event(5, "RunFinished", None),
    ];
    batch.outputs = vec![instance(1, b"11")];
    batch.status = Some(RunStatus::Failed);
    batch.end = Some(RunEnd {
        result: Some(b"\"partial\"".to_vec()),
        error: Some("step `charge` failed: declined".into()),
    });
    assert_eq!(
        commit(store, batch).await,
        Ok(Committed::Applied { next_seq: 6 }),
        "run_data_without_a_lease: the owner commits after a read"
    );
    let ended = read("an ended run").await;
    assert_eq!(ended.outputs.len(), 3, "run_data_without_a_lease: replaced");
    assert_eq!(
        ended.outputs[1].bytes, b"11",
        "run_data_without_a_lease: the output stored again"
    );
    assert_eq!(
        ended.end,
        Some(RunEnd {
            result: Some(b"\"partial\"".to_vec()),
            error: Some("step `charge` failed: declined".into()),
        }),
        "run_data_without_a_lease: the end"
    );
}

/// A batch committed again (its answer was lost) is `AlreadyApplied` and writes nothing.
pub async fn idempotent_commit(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let batch = completion(&lease, 2);
    assert_eq!(
        commit(store, batch.clone()).await,
        Ok(Committed::Applied { next_seq: 4 }),
        "idempotent_commit: first commit"
    );
    assert_eq!(
        commit(store, batch.clone()).await,
        Ok(Committed::AlreadyApplied { next_seq: 4 }),
        "idempotent_commit: the same batch again"
    );
    let mut tail = Batch::new(&lease, 3, LONG);
    tail.events = vec![batch.events[1].clone()];
    assert_eq!(
        commit(store, tail).await,
        Ok(Committed::AlreadyApplied { next_seq: 4 }),
        "idempotent_commit: the last event of the batch again"
    );
    let events = store.events("r1", 0).await;
    assert_eq!(
        events.map(|e| e.len()),
        Ok(4),
        "idempotent_commit: no event written twice"
    );
    let mut next = Batch::new(&lease, 4, LONG);
    next.events = vec![event(4, "Completed", Some(1))];
    assert_eq!(
        commit(store, next).await,
        Ok(Committed::Applied { next_seq: 5 }),
        "idempotent_commit: the journal goes on"
    );
}

/// A batch that does not follow the journal is refused with `Conflict` (or `Invalid` when its
/// own numbering has a gap), naming where the journal stands.
pub async fn conflicts(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    match commit(store, completion(&lease, 3)).await {
        Err(StoreError::Conflict {
            run,
            expected: 2,
            found: 3,
            ..
        }) if run == "r1" => {}
        other => panic!("conflicts: a gap before the batch: expected Conflict, got {other:?}"),
    }
    let mut changed = completion(&lease, 0);
    changed.events[0] = event(0, "RunStarted", None);
    changed.events[1] = event(1, "Requested", Some(1));
    match commit(store, changed).await {
        Err(StoreError::Conflict {
            expected: 2,
            found: 0,
            why,
            ..
        }) => assert!(
            why.contains("#1"),
            "conflicts: the event that differs: {why}"
        ),
        other => panic!("conflicts: a different stored event: expected Conflict, got {other:?}"),
    }
    let mut overlapping = Batch::new(&lease, 1, LONG);
    overlapping.events = vec![
        event(1, "Requested", Some(0)),
        event(2, "Completed", Some(0)),
    ];
    assert!(
        matches!(
            commit(store, overlapping).await,
            Err(StoreError::Conflict { expected: 2, .. })
        ),
        "conflicts: a batch that repeats a stored event and adds one is a conflict"
    );
    let mut numbering = completion(&lease, 2);
    numbering.events[1].seq = 9;
    assert!(
        matches!(
            commit(store, numbering).await,
            Err(StoreError::Invalid { .. })
        ),
        "conflicts: a gap inside the batch is invalid"
    );
    assert_eq!(
        store.events("r1", 0).await.map(|e| e.len()),
        Ok(2),
        "conflicts: nothing was written"
    );
}

/// A batch refused for any reason writes none of its parts.
pub async fn atomic_commit(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let mut batch = completion(&lease, 2);
    batch.consumed = vec![999];
    batch.timers = vec![TimerChange::Set {
        key: TimerKey {
            node: Some(1),
            instance: String::new(),
            kind: TimerKind::Backoff,
        },
        after: Duration::ZERO,
    }];
    batch.status = Some(RunStatus::Waiting);
    assert!(
        matches!(
            commit(store, batch).await,
            Err(StoreError::SignalTaken { signal: 999, .. })
        ),
        "atomic_commit: consuming a signal that does not exist"
    );
    let loaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("atomic_commit: load_run: {e}"));
    assert_eq!(loaded.events.len(), 2, "atomic_commit: no event written");
    assert!(
        loaded.outputs.is_empty(),
        "atomic_commit: no output written"
    );
    assert!(loaded.timers.is_empty(), "atomic_commit: no timer written");
    assert_eq!(
        loaded.run.status,
        RunStatus::Running,
        "atomic_commit: status unchanged"
    );
}

/// A live lease of another owner makes `load_run` `Busy`; an expired one is taken over, and the
/// former owner's commits and heartbeats fail from then on; a released run is free at once.
pub async fn leases(store: &dyn Store) {
    let a = Owner::new("a");
    let b = Owner::new("b");
    let c = Owner::new("c");
    let held = create(store, "r1", "W", &a).await;
    match store.load_run("r1", &b, LONG).await {
        Err(StoreError::Busy { run, owner, .. }) => {
            assert_eq!(
                (run.as_str(), owner.as_str()),
                ("r1", "a"),
                "leases: who holds it"
            );
        }
        other => panic!("leases: loading a held run: expected Busy, got {other:?}"),
    }
    assert_eq!(
        store.heartbeat(&a, std::slice::from_ref(&held), LONG).await,
        Ok(vec![]),
        "leases: the holder's heartbeat"
    );

    // A short lease that expires without anyone taking the run still commits: the version is
    // the fence, not the clock.
    let short = match store
        .create_run(new_run("r2", "W", &a, Duration::from_millis(1)))
        .await
    {
        Ok(Created::New { lease, .. }) => lease,
        other => panic!("leases: create r2: {other:?}"),
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    let mut late = Batch::new(&short, 2, Duration::from_millis(1));
    late.events = vec![event(2, "Completed", Some(0))];
    assert_eq!(
        commit(store, late).await,
        Ok(Committed::Applied { next_seq: 3 }),
        "leases: an expired lease nobody took"
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    let taken = store
        .load_run("r2", &b, LONG)
        .await
        .unwrap_or_else(|e| panic!("leases: taking over an expired lease: {e}"));
    assert!(taken.lease.version > short.version, "leases: a new version");
    let mut stale = Batch::new(&short, 3, LONG);
    stale.events = vec![event(3, "Requested", Some(1))];
    match commit(store, stale).await {
        Err(StoreError::LeaseLost { run, holder, .. }) => {
            assert_eq!(run, "r2", "leases: LeaseLost names the run");
            assert_eq!(
                holder.as_deref(),
                Some("b"),
                "leases: LeaseLost names the holder"
            );
        }
        other => panic!("leases: a former owner's commit: expected LeaseLost, got {other:?}"),
    }
    assert_eq!(
        store
            .heartbeat(&a, std::slice::from_ref(&short), LONG)
            .await,
        Ok(vec![short.clone()]),
        "leases: the former owner's heartbeat reports the lease lost"
    );
    assert_eq!(
        store.release(&b, std::slice::from_ref(&taken.lease)).await,
        Ok(()),
        "leases: release"
    );
    let again = store
        .load_run("r2", &c, LONG)
        .await
        .unwrap_or_else(|e| panic!("leases: loading a released run: {e}"));
    assert!(again.lease.version > taken.lease.version, "leases: version");
    let mut released = Batch::new(&taken.lease, 3, LONG);
    released.events = vec![event(3, "Requested", Some(1))];
    assert!(
        matches!(
            commit(store, released).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "leases: a commit after release"
    );
}

fn timer(node: Option<u32>, kind: TimerKind, after: Duration) -> TimerChange {
    TimerChange::Set {
        key: TimerKey {
            node,
            instance: String::new(),
            kind,
        },
        after,
    }
}

/// `due_timers` answers the timers of unfinished runs due within the horizon, earliest first,
/// up to the limit; cleared timers and finished runs' timers are gone.
pub async fn timers_due_in_order(store: &dyn Store) {
    let owner = Owner::new("a");
    let r1 = create(store, "r1", "W", &owner).await;
    let r2 = create(store, "r2", "W", &owner).await;
    let r3 = create(store, "r3", "W", &owner).await;
    let secs = Duration::from_secs;
    let mut b1 = Batch::new(&r1, 2, LONG);
    b1.timers = vec![
        timer(Some(1), TimerKind::Delay, secs(30)),
        timer(Some(0), TimerKind::Backoff, secs(0)),
    ];
    let mut b2 = Batch::new(&r2, 2, LONG);
    b2.timers = vec![
        timer(None, TimerKind::RunDeadline, secs(0)),
        timer(Some(0), TimerKind::Delay, secs(10)),
        timer(Some(1), TimerKind::Delay, secs(20)),
    ];
    let mut b3 = Batch::new(&r3, 2, LONG);
    b3.timers = vec![timer(None, TimerKind::RunDeadline, secs(0))];
    for batch in [b1, b2, b3] {
        assert_eq!(
            commit(store, batch).await,
            Ok(Committed::Applied { next_seq: 2 }),
            "timers_due_in_order: a batch of timers only"
        );
    }
    let mut end = Batch::new(&r3, 2, LONG);
    end.events = vec![event(2, "RunFinished", None)];
    end.status = Some(RunStatus::Succeeded);
    end.end = Some(RunEnd {
        result: Some(b"1".to_vec()),
        error: None,
    });
    assert!(
        commit(store, end).await.is_ok(),
        "timers_due_in_order: r3 ends"
    );
    let mut clear = Batch::new(&r2, 2, LONG);
    clear.timers = vec![TimerChange::Clear {
        key: TimerKey {
            node: Some(1),
            instance: String::new(),
            kind: TimerKind::Delay,
        },
    }];
    assert!(
        commit(store, clear).await.is_ok(),
        "timers_due_in_order: clear"
    );

    let now = store
        .due_timers(Duration::ZERO, 100)
        .await
        .unwrap_or_else(|e| panic!("timers_due_in_order: due_timers: {e}"));
    let names = |timers: &[super::DueTimer]| {
        timers
            .iter()
            .map(|t| (t.run.clone(), t.key.node, t.key.kind))
            .collect::<Vec<_>>()
    };
    let mut due_now = names(&now);
    due_now.sort();
    assert_eq!(
        due_now,
        vec![
            ("r1".to_owned(), Some(0), TimerKind::Backoff),
            ("r2".to_owned(), None, TimerKind::RunDeadline),
        ],
        "timers_due_in_order: due now (r3 has finished)"
    );
    let all = store
        .due_timers(Duration::from_secs(3600), 100)
        .await
        .unwrap_or_else(|e| panic!("timers_due_in_order: due_timers: {e}"));
    assert!(
        all.windows(2)
            .all(|w| (w[0].due_ms, &w[0].run) <= (w[1].due_ms, &w[1].run)),
        "timers_due_in_order: earliest first: {all:?}"
    );
    assert_eq!(
        names(&all[2..]),
        vec![
            ("r2".to_owned(), Some(0), TimerKind::Delay),
            ("r1".to_owned(), Some(1), TimerKind::Delay),
        ],
        "timers_due_in_order: the later timers, cleared one gone"
    );
    let first = store
        .due_timers(Duration::from_secs(3600), 3)
        .await
        .unwrap_or_else(|e| panic!("timers_due_in_order: due_timers: {e}"));
    assert_eq!(first, all[..3], "timers_due_in_order: limit");
}

/// Kept signals are stored until consumed, transient ones only while a step waits; a signal is
/// consumed once; a finished run refuses signals.
pub async fn signals_kept_and_refused(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let other = create(store, "r2", "W", &owner).await;
    let send = |name: &str, mode| NewSignal {
        run: "r1".into(),
        name: name.into(),
        payload: br#"{"ok":true}"#.to_vec(),
        mode,
    };
    let kept = match store.send_signal(send("approve", SignalMode::Kept)).await {
        Ok(SignalSent::Stored { id }) => id,
        other => panic!("signals: a kept signal: expected Stored, got {other:?}"),
    };
    assert_eq!(
        store
            .send_signal(send("approve", SignalMode::Transient))
            .await,
        Ok(SignalSent::Dropped),
        "signals: a transient signal nobody waits for"
    );
    let wake = |runs: Vec<super::RunSummary>| runs.into_iter().find(|r| r.id == "r1")?.wake_at_ms;
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_else(|e| panic!("signals: list_runs: {e}"));
    assert_eq!(
        wake(runs),
        None,
        "signals: a kept signal no step waits for does not make the run due"
    );
    let mut wait = Batch::new(&lease, 2, LONG);
    wait.waits = vec![WaitChange::Open {
        node: 1,
        instance: String::new(),
        name: "approve".into(),
    }];
    assert!(commit(store, wait).await.is_ok(), "signals: open a wait");
    let transient = match store
        .send_signal(send("approve", SignalMode::Transient))
        .await
    {
        Ok(SignalSent::Stored { id }) => id,
        other => panic!("signals: a transient signal a step waits for: got {other:?}"),
    };
    assert!(transient > kept, "signals: ids grow");
    assert_eq!(
        store
            .send_signal(send("other", SignalMode::Transient))
            .await,
        Ok(SignalSent::Dropped),
        "signals: a transient signal of another name"
    );
    let open = store
        .signals("r1", 0)
        .await
        .unwrap_or_else(|e| panic!("signals: {e}"));
    assert_eq!(
        open.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![kept, transient],
        "signals: open, in order"
    );
    assert_eq!(open[0].payload, br#"{"ok":true}"#, "signals: payload");
    assert_eq!(open[0].mode, SignalMode::Kept, "signals: mode");
    let after = store.signals("r1", kept).await.map(|s| s.len());
    assert_eq!(after, Ok(1), "signals: after an id");
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_else(|e| panic!("signals: list_runs: {e}"));
    let r1 = runs.iter().find(|r| r.id == "r1");
    assert!(
        r1.and_then(|r| r.wake_at_ms).is_some(),
        "signals: a stored signal makes the run due: {r1:?}"
    );

    let mut take = Batch::new(&lease, 2, LONG);
    take.events = vec![event(2, "SignalReceived", Some(1))];
    take.consumed = vec![kept];
    take.waits = vec![WaitChange::Close {
        node: 1,
        instance: String::new(),
    }];
    assert_eq!(
        commit(store, take).await,
        Ok(Committed::Applied { next_seq: 3 }),
        "signals: consume"
    );
    let open = store.signals("r1", 0).await.map(|s| s.len());
    assert_eq!(open, Ok(1), "signals: the consumed one is gone");
    let mut again = Batch::new(&lease, 3, LONG);
    again.events = vec![event(3, "SignalReceived", Some(1))];
    again.consumed = vec![kept];
    assert!(
        matches!(
            commit(store, again.clone()).await,
            Err(StoreError::SignalTaken { signal, .. }) if signal == kept
        ),
        "signals: consumed twice"
    );
    let mut foreign = Batch::new(&other, 2, LONG);
    foreign.events = vec![event(2, "SignalReceived", Some(1))];
    foreign.consumed = vec![transient];
    assert!(
        matches!(
            commit(store, foreign).await,
            Err(StoreError::SignalTaken { .. })
        ),
        "signals: another run's signal"
    );
    let mut end = Batch::new(&lease, 3, LONG);
    end.events = vec![event(3, "RunFinished", None)];
    end.status = Some(RunStatus::Failed);
    end.end = Some(RunEnd {
        result: None,
        error: Some("no".into()),
    });
    assert!(commit(store, end).await.is_ok(), "signals: the run ends");
    assert_eq!(
        store.send_signal(send("approve", SignalMode::Kept)).await,
        Err(StoreError::Finished { run: "r1".into() }),
        "signals: a finished run refuses signals"
    );
}

/// A request (a signal named `flow.…`) makes a waiting run due at once, though no step waits
/// for it; consuming it leaves the run's wake-up time to its timers again.
pub async fn requests_wake_the_run(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let mut unload = Batch::new(&lease, 2, LONG);
    unload.timers = vec![timer(Some(0), TimerKind::Delay, Duration::from_secs(3600))];
    unload.status = Some(RunStatus::Waiting);
    assert!(commit(store, unload).await.is_ok(), "requests: unload");
    let wake = |runs: Vec<super::RunSummary>| runs.into_iter().find(|r| r.id == "r1")?.wake_at_ms;
    let list = || async {
        store
            .list_runs(&RunFilter::default())
            .await
            .unwrap_or_else(|e| panic!("requests: list_runs: {e}"))
    };
    let later = wake(list().await);
    assert!(later.is_some(), "requests: the timer sets the wake-up time");
    let id = match store
        .send_signal(NewSignal {
            run: "r1".into(),
            name: super::requests::CANCEL.into(),
            payload: b"{}".to_vec(),
            mode: SignalMode::Kept,
        })
        .await
    {
        Ok(SignalSent::Stored { id }) => id,
        other => panic!("requests: a request is stored: got {other:?}"),
    };
    let now = wake(list().await);
    assert!(
        now < later,
        "requests: a request makes the run due at once: {now:?}, was {later:?}"
    );
    let mut take = Batch::new(&lease, 2, LONG);
    take.events = vec![event(2, "CancelRequested", None)];
    take.consumed = vec![id];
    assert!(commit(store, take).await.is_ok(), "requests: consumed");
    assert_eq!(
        wake(list().await),
        later,
        "requests: consumed, the wake-up time is the timer's again"
    );
}

/// `reopen` sets a failed or cancelled run running again with its marker appended and no
/// owner, and refuses any other status or a stale marker; `delete_run` removes a finished run
/// with everything of it and refuses an unfinished one.
pub async fn reopen_and_delete(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let running = create(store, "r2", "W", &owner).await;
    // A request the run never carried out: cleared by the redrive.
    let leftover = store
        .send_signal(NewSignal {
            run: "r1".into(),
            name: super::requests::CANCEL.into(),
            payload: b"{}".to_vec(),
            mode: SignalMode::Kept,
        })
        .await;
    assert!(
        matches!(leftover, Ok(SignalSent::Stored { .. })),
        "reopen: a request: {leftover:?}"
    );
    assert_eq!(
        store.reopen("r2", event(2, "Redriven", None)).await,
        Err(StoreError::WrongStatus {
            run: "r2".into(),
            status: RunStatus::Running,
            needs: super::REOPENS,
        }),
        "reopen: a running run"
    );
    assert_eq!(
        store.delete_run("r2").await,
        Err(StoreError::WrongStatus {
            run: "r2".into(),
            status: RunStatus::Running,
            needs: "only a finished run can be deleted",
        }),
        "delete_run: a running run"
    );
    assert!(
        matches!(
            store.reopen("nope", event(0, "Redriven", None)).await,
            Err(StoreError::NotFound { .. })
        ),
        "reopen: an unknown run"
    );
    let mut fail = completion(&lease, 2);
    fail.events.push(event(4, "Failed", Some(1)));
    fail.events.push(event(5, "RunFinished", None));
    fail.status = Some(RunStatus::Failed);
    fail.end = Some(RunEnd {
        result: None,
        error: Some("charge failed".into()),
    });
    assert!(commit(store, fail).await.is_ok(), "reopen: the run fails");
    assert!(
        matches!(
            store.reopen("r1", event(5, "Redriven", None)).await,
            Err(StoreError::Conflict {
                expected: 6,
                found: 5,
                ..
            })
        ),
        "reopen: a marker that is not the next event"
    );
    let reopened = store
        .reopen("r1", event(6, "Redriven", None))
        .await
        .unwrap_or_else(|e| panic!("reopen: a failed run: {e}"));
    assert_eq!(reopened.status, RunStatus::Running, "reopen: status");
    assert_eq!(reopened.next_seq, 7, "reopen: the marker is appended");
    assert_eq!(reopened.owner, None, "reopen: no owner");
    assert!(reopened.is_due(u64::MAX / 2), "reopen: due at once");
    let events = store.events("r1", 6).await.map(|e| e.len());
    assert_eq!(events, Ok(1), "reopen: the marker is stored");
    let open = store.signals("r1", 0).await.map(|s| s.len());
    assert_eq!(open, Ok(0), "reopen: the leftover request is consumed");
    let loaded = store
        .load_run("r1", &Owner::new("b"), LONG)
        .await
        .unwrap_or_else(|e| panic!("reopen: load the reopened run: {e}"));
    assert_eq!(loaded.events.len(), 7, "reopen: every event stays");
    assert_eq!(loaded.outputs.len(), 1, "reopen: outputs stay");
    let mut end = Batch::new(&loaded.lease, 7, LONG);
    end.events = vec![event(7, "RunFinished", None)];
    end.status = Some(RunStatus::Succeeded);
    end.end = Some(RunEnd {
        result: None,
        error: None,
    });
    assert!(
        commit(store, end).await.is_ok(),
        "reopen: the new owner ends it"
    );
    // A succeeded run is reopened to undo it (its compensations run).
    let undone = store
        .reopen("r1", event(8, "Redriven", None))
        .await
        .unwrap_or_else(|e| panic!("reopen: a succeeded run: {e}"));
    assert_eq!(undone.status, RunStatus::Running, "reopen: a succeeded run");
    let loaded = store
        .load_run("r1", &Owner::new("c"), LONG)
        .await
        .unwrap_or_else(|e| panic!("reopen: load the reopened run again: {e}"));
    let mut end = Batch::new(&loaded.lease, 9, LONG);
    end.events = vec![event(9, "RunFinished", None)];
    end.status = Some(RunStatus::Cancelled);
    end.end = Some(RunEnd {
        result: None,
        error: Some("undone".into()),
    });
    assert!(
        commit(store, end).await.is_ok(),
        "reopen: the undone run ends"
    );
    assert_eq!(store.delete_run("r1").await, Ok(()), "delete_run");
    assert!(
        matches!(
            store.events("r1", 0).await,
            Err(StoreError::NotFound { .. })
        ),
        "delete_run: the run is gone"
    );
    assert!(
        matches!(
            store.delete_run("r1").await,
            Err(StoreError::NotFound { .. })
        ),
        "delete_run: twice"
    );
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_else(|e| panic!("delete_run: list_runs: {e}"));
    assert_eq!(
        runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["r2"],
        "delete_run: the other run stays"
    );
    drop(running);
}

/// `continue_run` ends a generation: kept as a `continued` run of its own (events, outputs,
/// nodes, consumed signals, end) or deleted; the run keeps its id, `input_hash` and unconsumed
/// signals, starts an empty journal with the new input, options and timers, and its caller
/// holds a new lease (the old one is fenced). A wrong lease, a stale sequence number, a
/// finished run or a taken archive id writes nothing.
pub async fn continued(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    assert!(
        commit(store, completion(&lease, 2)).await.is_ok(),
        "continue_run: the first generation completes a step"
    );
    let mut taken = NewSignal {
        run: "r1".into(),
        name: "go".into(),
        payload: b"1".to_vec(),
        mode: SignalMode::Kept,
    };
    let Ok(SignalSent::Stored { id: consumed, .. }) = store.send_signal(taken.clone()).await else {
        panic!("continue_run: a signal for the first generation");
    };
    taken.payload = b"2".to_vec();
    assert!(
        matches!(
            store.send_signal(taken).await,
            Ok(SignalSent::Stored { .. })
        ),
        "continue_run: a signal left for the next generation"
    );
    let mut take = Batch::new(&lease, 4, LONG);
    take.events = vec![event(4, "SignalReceived", Some(1))];
    take.consumed = vec![consumed];
    take.timers = vec![TimerChange::Set {
        key: TimerKey {
            node: None,
            instance: String::new(),
            kind: TimerKind::RunDeadline,
        },
        after: LONG,
    }];
    assert!(
        commit(store, take).await.is_ok(),
        "continue_run: the first generation takes a signal"
    );
    let next = |archive: Option<&str>, next_seq: u64| ContinueRun {
        next_seq,
        input: br#"{"id":43}"#.to_vec(),
        options: br#"{"generation":2}"#.to_vec(),
        archive: archive.map(str::to_owned),
        end: RunEnd {
            result: Some(b"43".to_vec()),
            error: None,
        },
        timers: Vec::new(),
        lease: LONG,
    };
    let stale = Lease {
        version: lease.version + 7,
        ..lease.clone()
    };
    assert!(
        matches!(
            store.continue_run(&stale, next(Some("r1~1"), 5)).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "continue_run: another lease"
    );
    assert!(
        matches!(
            store.continue_run(&lease, next(Some("r1~1"), 4)).await,
            Err(StoreError::Conflict { expected: 5, .. })
        ),
        "continue_run: a journal that is not whole"
    );
    let other = create(store, "r2", "W", &owner).await;
    assert!(
        matches!(
            store.continue_run(&lease, next(Some("r2"), 5)).await,
            Err(StoreError::Invalid { .. })
        ),
        "continue_run: an archive id that is taken"
    );
    let unchanged = store.events("r1", 0).await.map(|e| e.len());
    assert_eq!(unchanged, Ok(5), "continue_run: a refusal writes nothing");

    let new_lease = store
        .continue_run(&lease, next(Some("r1~1"), 5))
        .await
        .unwrap_or_else(|e| panic!("continue_run: keeping the generation: {e}"));
    assert_eq!(
        new_lease.owner, owner,
        "continue_run: the caller holds the run"
    );
    assert!(
        new_lease.version > lease.version,
        "continue_run: a new lease version"
    );
    let mut late = Batch::new(&lease, 0, LONG);
    late.events = vec![event(0, "RunStarted", None)];
    assert!(
        matches!(commit(store, late).await, Err(StoreError::LeaseLost { .. })),
        "continue_run: the ended generation's lease is fenced"
    );
    let data = store
        .run_data("r1")
        .await
        .unwrap_or_else(|e| panic!("continue_run: run_data: {e}"));
    assert_eq!(
        data.input,
        br#"{"id":43}"#.to_vec(),
        "continue_run: new input"
    );
    let events = store.events("r1", 0).await.map(|e| e.len());
    assert_eq!(events, Ok(0), "continue_run: an empty journal");
    assert!(data.outputs.is_empty(), "continue_run: no outputs");
    assert_eq!(data.end, None, "continue_run: no end");
    let open = store.signals("r1", 0).await.map(|s| s.len());
    assert_eq!(open, Ok(1), "continue_run: the unconsumed signal stays");
    let loaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("continue_run: load the next generation: {e}"));
    assert_eq!(
        loaded.run.status,
        RunStatus::Running,
        "continue_run: status"
    );
    assert_eq!(loaded.run.next_seq, 0, "continue_run: next_seq");
    assert_eq!(
        loaded.run.input_hash, 42,
        "continue_run: the run's input_hash stays"
    );
    assert_eq!(
        loaded.options,
        br#"{"generation":2}"#.to_vec(),
        "continue_run: new options"
    );
    assert!(
        loaded.timers.is_empty(),
        "continue_run: the old timers are gone"
    );
    assert_eq!(loaded.nodes.len(), 2, "continue_run: the graph stays");
    let kept = store
        .run_data("r1~1")
        .await
        .unwrap_or_else(|e| panic!("continue_run: run_data of the kept generation: {e}"));
    let events = store.events("r1~1", 0).await.map(|e| e.len());
    assert_eq!(events, Ok(5), "continue_run: kept events");
    assert_eq!(kept.outputs.len(), 1, "continue_run: kept outputs");
    assert_eq!(
        kept.input,
        br#"{"id":42}"#.to_vec(),
        "continue_run: kept input"
    );
    assert_eq!(
        kept.end.as_ref().and_then(|e| e.result.clone()),
        Some(b"43".to_vec()),
        "continue_run: kept end"
    );
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_else(|e| panic!("continue_run: list_runs: {e}"));
    let archived = runs.iter().find(|r| r.id == "r1~1");
    assert_eq!(
        archived.map(|r| (r.status, r.workflow.as_str(), r.owner.clone())),
        Some((RunStatus::Continued, "W", None)),
        "continue_run: the kept generation is listed"
    );
    assert!(
        matches!(
            store.reopen("r1~1", event(5, "Redriven", None)).await,
            Err(StoreError::WrongStatus {
                status: RunStatus::Continued,
                ..
            })
        ),
        "continue_run: a kept generation cannot be reopened"
    );
    // Dropping the generation: nothing is kept.
    let lease = loaded.lease;
    let new_lease = store
        .continue_run(&lease, next(None, 0))
        .await
        .unwrap_or_else(|e| panic!("continue_run: dropping the generation: {e}"));
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_else(|e| panic!("continue_run: list_runs: {e}"));
    assert_eq!(
        runs.len(),
        3,
        "continue_run: a dropped generation is not kept"
    );
    let mut end = Batch::new(&new_lease, 0, LONG);
    end.events = vec![event(0, "RunFinished", None)];
    end.status = Some(RunStatus::Succeeded);
    end.end = Some(RunEnd {
        result: None,
        error: None,
    });
    assert!(
        commit(store, end).await.is_ok(),
        "continue_run: the last generation ends"
    );
    assert!(
        matches!(
            store.continue_run(&new_lease, next(None, 1)).await,
            Err(StoreError::Finished { .. }) | Err(StoreError::LeaseLost { .. })
        ),
        "continue_run: a finished run"
    );
    assert_eq!(
        store.delete_run("r1~1").await,
        Ok(()),
        "continue_run: delete a kept generation"
    );
    drop(other);
}

/// A batch with a `graph` replaces the run's graph hash and node rows; a refused batch (a lost
/// lease) replaces nothing.
pub async fn graph_adopted(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let mut rows = new_run("r1", "W", &owner, LONG).nodes;
    rows.push(NodeRow {
        node: 2,
        name: "ship".into(),
        label: "ship(&charge)".into(),
        fingerprint: 33,
        preds: vec![1],
        compensate: String::new(),
        kind: "signal".into(),
        policy: "deadline = 1m30s".into(),
    });
    // Loaded again by its owner: a new lease version, so the first lease is stale.
    let loaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("graph: load: {e}"));
    let mut stale = Batch::new(&lease, 2, LONG);
    stale.graph = Some((GRAPH + 1, rows.clone()));
    assert!(
        matches!(
            commit(store, stale).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "graph: a lost lease"
    );
    let mut adopt = Batch::new(&loaded.lease, 2, LONG);
    adopt.graph = Some((GRAPH + 1, rows.clone()));
    assert!(
        commit(store, adopt).await.is_ok(),
        "graph: a batch adopts a graph"
    );
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_else(|e| panic!("graph: list_runs: {e}"));
    assert_eq!(runs[0].graph_hash, GRAPH + 1, "graph: the new hash");
    let again = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("graph: load again: {e}"));
    assert_eq!(again.nodes, rows, "graph: the new node rows");
}

/// A batch that adopts a graph numbering the run's steps otherwise moves every stored row of
/// the run's own steps to their new indices before its own rows are written: events (not a
/// nest instance's), outputs (the end of an instance of the run's own nest too, not of one
/// nested deeper), timers (not the run's own) and waits.
/// The move shifts `fetch` onto the index `charge` had: rows that would collide midway.
pub async fn graph_renumbered(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "W", &owner).await;
    let mut first = Batch::new(&lease, 2, LONG);
    let mut nested = event(4, "Completed", Some(1));
    nested.path = Some(StoredPath(vec![StoredStep {
        node: "n5".into(),
        kind: StepKind::ForEach,
        index: 1,
    }]));
    first.events = vec![
        event(2, "Completed", Some(0)),
        event(3, "Requested", Some(1)),
        nested,
    ];
    let output = |node: u32, instance: &str| StoredOutput {
        node,
        instance: instance.into(),
        type_name: "u8".into(),
        bytes: format!("{node}{instance}").into_bytes(),
    };
    // The end of an instance nested deeper names a node of the nest's body: it stays.
    first.outputs = vec![
        output(0, ""),
        output(1, "lines[1]"),
        output(1, "lines[1]/pack@2"),
    ];
    let key = |node: Option<u32>, kind: TimerKind| TimerKey {
        node,
        instance: String::new(),
        kind,
    };
    first.timers = vec![
        TimerChange::Set {
            key: key(Some(1), TimerKind::NodeDeadline),
            after: LONG,
        },
        TimerChange::Set {
            key: key(None, TimerKind::RunDeadline),
            after: LONG,
        },
    ];
    first.waits = vec![WaitChange::Open {
        node: 1,
        instance: String::new(),
        name: "go".into(),
    }];
    assert!(
        commit(store, first).await.is_ok(),
        "renumbered: the first batch"
    );
    let mut rows = new_run("r1", "W", &owner, LONG).nodes;
    for row in &mut rows {
        row.node += 1;
        row.preds = row.preds.iter().map(|p| p + 1).collect();
    }
    let mut adopt = Batch::new(&lease, 5, LONG);
    adopt.graph = Some((GRAPH + 1, rows.clone()));
    adopt.renumber = vec![(0, 1), (1, 2)];
    adopt.events = vec![event(5, "Requested", Some(2))];
    assert!(
        commit(store, adopt).await.is_ok(),
        "renumbered: a batch adopts a graph that moves both steps"
    );
    let loaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("renumbered: load: {e}"));
    assert_eq!(loaded.nodes, rows, "renumbered: the new node rows");
    let journal = store
        .events("r1", 0)
        .await
        .unwrap_or_else(|e| panic!("renumbered: events: {e}"));
    let nodes: Vec<(u64, Option<u32>)> = journal.iter().map(|e| (e.seq, e.node)).collect();
    assert_eq!(
        nodes,
        vec![
            (0, None),
            (1, Some(1)),
            (2, Some(1)),
            (3, Some(2)),
            (4, Some(1)),
            (5, Some(2))
        ],
        "renumbered: the run's own events moved, the instance's event did not"
    );
    let mut outputs: Vec<(u32, String, Vec<u8>)> = loaded
        .outputs
        .into_iter()
        .map(|o| (o.node, o.instance, o.bytes))
        .collect();
    outputs.sort();
    assert_eq!(
        outputs,
        vec![
            (1, String::new(), b"0".to_vec()),
            (
                1,
                "lines[1]/pack@2".to_owned(),
                b"1lines[1]/pack@2".to_vec()
            ),
            (2, "lines[1]".to_owned(), b"1lines[1]".to_vec()),
        ],
        "renumbered: the outputs moved with their bytes, not a deeper instance's end"
    );
    let mut timers: Vec<TimerKey> = loaded.timers.into_iter().map(|t| t.key).collect();
    timers.sort_by_key(|k| k.node);
    assert_eq!(
        timers,
        vec![
            key(None, TimerKind::RunDeadline),
            key(Some(2), TimerKind::NodeDeadline)
        ],
        "renumbered: the step's timer moved, the run's stayed"
    );
    assert_eq!(
        loaded.waits,
        vec![(2, String::new(), "go".to_owned())],
        "renumbered: the wait moved"
    );
}

/// `list_runs` filters by workflow and status and keeps the limit, oldest first; a finished run
/// refuses more events and keeps how it ended.
pub async fn list_and_filter(store: &dyn Store) {
    let owner = Owner::new("a");
    let r1 = create(store, "r1", "Checkout", &owner).await;
    create(store, "r2", "Checkout", &owner).await;
    create(store, "r3", "Refund", &owner).await;
    let mut end = Batch::new(&r1, 2, LONG);
    end.events = vec![event(2, "RunFinished", None)];
    end.status = Some(RunStatus::Succeeded);
    end.end = Some(RunEnd {
        result: Some(b"\"done\"".to_vec()),
        error: None,
    });
    assert!(commit(store, end).await.is_ok(), "list_and_filter: r1 ends");
    let ids = |filter: RunFilter| async move {
        store
            .list_runs(&filter)
            .await
            .map(|runs| runs.into_iter().map(|r| r.id).collect::<Vec<_>>())
    };
    assert_eq!(
        ids(RunFilter::default()).await,
        Ok(vec!["r1".into(), "r2".into(), "r3".into()]),
        "list_and_filter: all, oldest first"
    );
    let checkout = RunFilter {
        workflow: Some("Checkout".into()),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(checkout).await,
        Ok(vec!["r1".into(), "r2".into()]),
        "list_and_filter: by workflow"
    );
    let running = RunFilter {
        statuses: vec![RunStatus::Running, RunStatus::Waiting],
        ..RunFilter::default()
    };
    assert_eq!(
        ids(running).await,
        Ok(vec!["r2".into(), "r3".into()]),
        "list_and_filter: unfinished"
    );
    let done = RunFilter {
        workflow: Some("Checkout".into()),
        statuses: vec![RunStatus::Succeeded],
        ..RunFilter::default()
    };
    assert_eq!(
        ids(done).await,
        Ok(vec!["r1".into()]),
        "list_and_filter: workflow and status"
    );
    let by_id = RunFilter {
        id: Some("r2".into()),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(by_id).await,
        Ok(vec!["r2".into()]),
        "list_and_filter: by id"
    );
    let by_id_and_status = RunFilter {
        id: Some("r2".into()),
        statuses: vec![RunStatus::Succeeded],
        ..RunFilter::default()
    };
    assert_eq!(
        ids(by_id_and_status).await,
        Ok(vec![]),
        "list_and_filter: by id, in another status"
    );
    let one = RunFilter {
        limit: Some(1),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(one).await,
        Ok(vec!["r1".into()]),
        "list_and_filter: limit"
    );
    let contains = RunFilter {
        id_contains: Some("2".into()),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(contains).await,
        Ok(vec!["r2".into()]),
        "list_and_filter: by text in the id"
    );
    let all = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_default();
    let (first, last) = match (all.first(), all.last()) {
        (Some(first), Some(last)) => (first.clone(), last.clone()),
        _ => panic!("list_and_filter: three runs"),
    };
    let page = RunFilter {
        after: Some(RunCursor::of(&first)),
        limit: Some(1),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(page).await,
        Ok(vec!["r2".into()]),
        "list_and_filter: the page after the first run"
    );
    let past_the_end = RunFilter {
        after: Some(RunCursor::of(&last)),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(past_the_end).await,
        Ok(vec![]),
        "list_and_filter: nothing after the last run"
    );
    let newest = RunFilter {
        newest_first: true,
        ..RunFilter::default()
    };
    assert_eq!(
        ids(newest).await,
        Ok(vec!["r3".into(), "r2".into(), "r1".into()]),
        "list_and_filter: the newest first"
    );
    let older_page = RunFilter {
        newest_first: true,
        after: Some(RunCursor::of(&last)),
        limit: Some(1),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(older_page).await,
        Ok(vec!["r2".into()]),
        "list_and_filter: newest first, the page after the newest run"
    );
    let past_the_oldest = RunFilter {
        newest_first: true,
        after: Some(RunCursor::of(&first)),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(past_the_oldest).await,
        Ok(vec![]),
        "list_and_filter: newest first, nothing after the oldest run"
    );
    let in_time = RunFilter {
        created_from_ms: Some(first.created_ms),
        created_before_ms: Some(last.created_ms + 1),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(in_time).await,
        Ok(vec!["r1".into(), "r2".into(), "r3".into()]),
        "list_and_filter: created within a time range"
    );
    let before_any = RunFilter {
        created_before_ms: Some(first.created_ms),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(before_any).await,
        Ok(vec![]),
        "list_and_filter: created before the first run"
    );
    let mut more = Batch::new(&r1, 3, LONG);
    more.events = vec![event(3, "Requested", Some(1))];
    assert_eq!(
        commit(store, more).await,
        Err(StoreError::Finished { run: "r1".into() }),
        "list_and_filter: a finished run takes no more events"
    );
    let loaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("list_and_filter: load_run: {e}"));
    assert_eq!(
        loaded.end,
        Some(RunEnd {
            result: Some(b"\"done\"".to_vec()),
            error: None,
        }),
        "list_and_filter: how the run ended"
    );
    assert_eq!(
        loaded.run.status,
        RunStatus::Succeeded,
        "list_and_filter: status"
    );
    // Its lease (held for a minute) guards nothing any more: another owner reads it at once.
    let reader = store
        .load_run("r1", &Owner::new("reader"), LONG)
        .await
        .unwrap_or_else(|e| panic!("list_and_filter: a finished run is never busy: {e}"));
    assert_eq!(
        reader.run.status,
        RunStatus::Succeeded,
        "list_and_filter: read"
    );
}

// -- tasks (distributed runs) ----------------------------------------------------------------

/// Runs every case of the tasks of distributed runs, each on a fresh store from `make`: for the
/// stores that implement the task methods (`MemoryStore`, PostgreSQL), on top of [`all`].
pub async fn distributed(make: impl Fn() -> Arc<dyn Store>) {
    tasks_claim_and_complete(&*make()).await;
    tasks_lapse_and_fence(&*make()).await;
    tasks_exclusive_claims(make()).await;
    tasks_wake_the_run(&*make()).await;
    tasks_closed_and_reopened(&*make()).await;
    tasks_of_instances(&*make()).await;
}

/// [`Store::nodes`] reads a run's node rows without its lease (its holder commits on), the
/// rows of a graph it adopted once it did, and says [`StoreError::NotFound`] for no run.
pub async fn nodes_without_a_lease(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "wf", &owner).await;
    let read = |what: &'static str| async move {
        store
            .nodes("r1")
            .await
            .unwrap_or_else(|e| panic!("nodes_without_a_lease: {what}: {e}"))
    };
    let stored = new_run("r1", "wf", &owner, LONG).nodes;
    assert_eq!(
        read("a new run").await,
        stored,
        "nodes_without_a_lease: the rows"
    );
    let mut rows = stored.clone();
    rows[1].label = "charge(&fetch, 2)".into();
    let mut adopt = completion(&lease, 2);
    adopt.graph = Some((GRAPH + 1, rows.clone()));
    assert!(
        commit(store, adopt).await.is_ok(),
        "nodes_without_a_lease: the holder commits after the read"
    );
    assert_eq!(
        read("after a graph was adopted").await,
        rows,
        "nodes_without_a_lease: the adopted graph's rows"
    );
    assert!(
        matches!(store.nodes("nope").await, Err(StoreError::NotFound { .. })),
        "nodes_without_a_lease: no run"
    );
}

/// A load reads a run's decided state, not its history: its own events (not its nest
/// instances'), its next sequence number, and the outputs no later end superseded
/// ([`Batch::superseded`]); [`Store::events`] and [`Store::run_data`] still read everything,
/// and an end stored again is loaded again.
pub async fn load_reads_the_decided_state(store: &dyn Store) {
    let owner = Owner::new("a");
    let lease = create(store, "r1", "wf", &owner).await;
    let end = |instance: &str| StoredOutput {
        node: 1,
        instance: instance.to_owned(),
        type_name: "u64".into(),
        bytes: instance.as_bytes().to_vec(),
    };
    let in_instance = |seq: u64, kind: &str, record: &str| {
        let mut e = event(seq, kind, Some(0));
        e.path = Some(
            record
                .parse::<StoredPath>()
                .unwrap_or_else(|e| panic!("load_reads_the_decided_state: path `{record}`: {e}")),
        );
        e
    };
    // Iteration 0 of loop `n1` ends, with an instance of a nest inside it.
    let mut first = Batch::new(&lease, 2, LONG);
    first.events = vec![
        in_instance(2, "Requested", "n1@0"),
        in_instance(3, "Completed", "n1@0"),
        event(4, "Completed", Some(0)),
    ];
    first.outputs = vec![end("n1@0/n2[0]"), end("n1@0")];
    first.superseded = vec![(1, "n1@0/n2[0]".to_owned())];
    commit(store, first)
        .await
        .unwrap_or_else(|e| panic!("load_reads_the_decided_state: first batch: {e}"));
    // Iteration 1 ends: iteration 0 and what was nested in it are superseded, and a record
    // that has no end is named too.
    let mut second = Batch::new(&lease, 5, LONG);
    second.events = vec![
        in_instance(5, "Requested", "n1@1"),
        in_instance(6, "Completed", "n1@1"),
    ];
    second.outputs = vec![end("n1@1")];
    second.superseded = vec![(1, "n1@0".to_owned()), (1, "n1@9".to_owned())];
    commit(store, second)
        .await
        .unwrap_or_else(|e| panic!("load_reads_the_decided_state: second batch: {e}"));

    let loaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("load_reads_the_decided_state: load_run: {e}"));
    let seqs: Vec<u64> = loaded.events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        vec![0, 1, 4],
        "load_reads_the_decided_state: a load reads the run's own events, not its instances'"
    );
    assert_eq!(
        loaded.next_seq, 7,
        "load_reads_the_decided_state: the next sequence number counts the instances' events"
    );
    let live: Vec<&str> = loaded.outputs.iter().map(|o| o.instance.as_str()).collect();
    assert_eq!(
        live,
        vec!["n1@1"],
        "load_reads_the_decided_state: superseded ends are not loaded"
    );
    assert_eq!(
        loaded.outputs[0].bytes,
        b"n1@1".to_vec(),
        "load_reads_the_decided_state: the live end's bytes"
    );
    let all = store
        .events("r1", 0)
        .await
        .unwrap_or_else(|e| panic!("load_reads_the_decided_state: events: {e}"));
    assert_eq!(
        all.len(),
        7,
        "load_reads_the_decided_state: `events` reads the whole journal"
    );
    let data = store
        .run_data("r1")
        .await
        .unwrap_or_else(|e| panic!("load_reads_the_decided_state: run_data: {e}"));
    let mut kept: Vec<&str> = data.outputs.iter().map(|o| o.instance.as_str()).collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        vec!["n1@0", "n1@0/n2[0]", "n1@1"],
        "load_reads_the_decided_state: `run_data` reads superseded ends too"
    );

    // An end stored again is live again.
    let mut again = Batch::new(&loaded.lease, 7, LONG);
    again.events = vec![event(7, "Requested", Some(1))];
    again.outputs = vec![end("n1@0")];
    commit(store, again)
        .await
        .unwrap_or_else(|e| panic!("load_reads_the_decided_state: third batch: {e}"));
    let reloaded = store
        .load_run("r1", &owner, LONG)
        .await
        .unwrap_or_else(|e| panic!("load_reads_the_decided_state: load_run again: {e}"));
    let mut live: Vec<&str> = reloaded
        .outputs
        .iter()
        .map(|o| o.instance.as_str())
        .collect();
    live.sort_unstable();
    assert_eq!(
        live,
        vec!["n1@0", "n1@1"],
        "load_reads_the_decided_state: an end stored again is loaded again"
    );
}

/// The graph every run of this suite is created with (`new_run`).
const GRAPH: u64 = 0xF10_0001;

/// `workflows` at the graph of this suite's runs.
fn versions(workflows: &[&str]) -> Vec<WorkflowVersion> {
    workflows
        .iter()
        .map(|w| WorkflowVersion::new(*w, GRAPH))
        .collect()
}

/// Commits a batch of one `Requested` per node at `seq` with a task opened for each.
async fn open_tasks(store: &dyn Store, lease: &Lease, seq: u64, nodes: &[(u32, u32)]) -> u64 {
    let mut batch = Batch::new(lease, seq, LONG);
    for (i, &(node, attempt)) in nodes.iter().enumerate() {
        let mut requested = event(seq + i as u64, "Requested", Some(node));
        requested.attempt = attempt;
        batch.events.push(requested);
        batch.tasks.push(TaskChange::Open {
            node,
            instance: String::new(),
            attempt,
        });
    }
    let end = batch.end_seq();
    assert_eq!(
        commit(store, batch).await,
        Ok(Committed::Applied { next_seq: end }),
        "tasks: opening {nodes:?}"
    );
    end
}

async fn claim(store: &dyn Store, owner: &Owner, workflows: &[&str], limit: u32) -> Vec<TaskClaim> {
    store
        .claim_tasks(owner, &versions(workflows), limit, LONG)
        .await
        .unwrap_or_else(|e| panic!("tasks: claim_tasks by {owner}: {e}"))
}

fn completed(bytes: &[u8]) -> TaskOutcome {
    TaskOutcome::Completed {
        type_name: "Order".into(),
        bytes: bytes.to_vec(),
    }
}

/// A task opened by a batch is claimed once, by a worker that knows its workflow; its
/// completion stores the outcome with its output, once; the run's next owner sees the result
/// in `load_run` and `task_results`; the output is the node's once a batch journals it, and a
/// batch that closes the task removes it.
pub async fn tasks_claim_and_complete(store: &dyn Store) {
    let a = Owner::new("a");
    let b = Owner::new("b");
    let lease = create(store, "t1", "W", &a).await;
    let next = open_tasks(store, &lease, 2, &[(1, 1)]).await;
    assert_eq!(
        claim(store, &b, &["Other"], 10).await,
        vec![],
        "tasks: a worker that does not know the workflow claims nothing"
    );
    let other_graph = [WorkflowVersion::new("W", GRAPH + 1)];
    assert_eq!(
        store.claim_tasks(&b, &other_graph, 10, LONG).await,
        Ok(vec![]),
        "tasks: a worker with another graph of the workflow claims nothing"
    );
    let claims = claim(store, &b, &["Other", "W"], 10).await;
    assert_eq!(claims.len(), 1, "tasks: one task to claim: {claims:?}");
    let task = &claims[0];
    assert_eq!(
        (
            task.run.as_str(),
            task.workflow.as_str(),
            task.node,
            task.attempt
        ),
        ("t1", "W", 1, 1),
        "tasks: the claim names the run, workflow, node and attempt"
    );
    assert_eq!(task.owner, b, "tasks: the claim is the claimer's");
    assert!(!task.lapsed, "tasks: a first claim is not a lapsed one");
    let ready = task
        .ready_ms
        .unwrap_or_else(|| panic!("tasks: a claim says when its task became ready"));
    assert!(
        ready <= task.until_ms,
        "tasks: a task is ready before its claim's lease ends: {ready} > {}",
        task.until_ms
    );
    assert_eq!(
        claim(store, &a, &["W"], 10).await,
        vec![],
        "tasks: a claimed task is not claimed again while its lease holds"
    );
    assert_eq!(
        store
            .heartbeat_tasks(std::slice::from_ref(task), LONG)
            .await,
        Ok(vec![]),
        "tasks: the holder's heartbeat"
    );
    let inputs = store
        .task_inputs("t1")
        .await
        .unwrap_or_else(|e| panic!("tasks: task_inputs: {e}"));
    assert_eq!(inputs.input, br#"{"id":42}"#.to_vec(), "tasks: the input");
    assert_eq!(inputs.graph_hash, GRAPH, "tasks: the graph hash");
    if let Some(with) = &task.inputs {
        assert_eq!(
            (&with.input, with.graph_hash),
            (&inputs.input, inputs.graph_hash),
            "tasks: the inputs read with the claim are the run's"
        );
    }
    assert_eq!(
        store
            .complete_task(task, completed(br#"{"total":5}"#))
            .await,
        Ok(TaskCommitted::Applied),
        "tasks: completing a held claim"
    );
    assert_eq!(
        store.complete_task(task, completed(b"{}")).await,
        Ok(TaskCommitted::Stale),
        "tasks: completing twice"
    );
    let results = store
        .task_results("t1")
        .await
        .unwrap_or_else(|e| panic!("tasks: task_results: {e}"));
    assert_eq!(
        results,
        vec![TaskResult {
            node: 1,
            instance: String::new(),
            attempt: 1,
            outcome: completed(br#"{"total":5}"#),
        }],
        "tasks: the result, once"
    );
    assert_eq!(
        claim(store, &a, &["W"], 10).await,
        vec![],
        "tasks: a done task is not claimed"
    );
    let output_of_1 = |outputs: &[StoredOutput]| outputs.iter().any(|o| o.node == 1);
    let inputs = store
        .task_inputs("t1")
        .await
        .unwrap_or_else(|e| panic!("tasks: task_inputs: {e}"));
    assert!(
        !output_of_1(&inputs.outputs),
        "tasks: a task's output is not the node's before the run journals it: {:?}",
        inputs.outputs
    );
    let loaded = store
        .load_run("t1", &a, LONG)
        .await
        .unwrap_or_else(|e| panic!("tasks: load_run: {e}"));
    assert_eq!(loaded.tasks, results, "tasks: load_run gives the results");
    assert!(
        !output_of_1(&loaded.outputs),
        "tasks: load_run does not give it as the node's output"
    );
    let mut taken = Batch::new(&loaded.lease, next, LONG);
    taken.events = vec![event(next, "Completed", Some(1))];
    taken.outputs = vec![StoredOutput {
        node: 1,
        instance: String::new(),
        type_name: "Order".into(),
        bytes: br#"{"total":5}"#.to_vec(),
    }];
    taken.tasks = vec![TaskChange::Close {
        node: 1,
        instance: String::new(),
    }];
    assert_eq!(
        commit(store, taken).await,
        Ok(Committed::Applied { next_seq: next + 1 }),
        "tasks: journaling the result"
    );
    let inputs = store
        .task_inputs("t1")
        .await
        .unwrap_or_else(|e| panic!("tasks: task_inputs: {e}"));
    assert!(
        inputs
            .outputs
            .iter()
            .any(|o| o.node == 1 && o.bytes == br#"{"total":5}"#.to_vec()),
        "tasks: the journaled output is the node's: {:?}",
        inputs.outputs
    );
    assert_eq!(
        store.task_results("t1").await,
        Ok(vec![]),
        "tasks: a closed task has no result"
    );
    assert!(
        matches!(
            store.task_results("nope").await,
            Err(StoreError::NotFound { .. })
        ),
        "tasks: task_results of a missing run"
    );
    assert!(
        matches!(
            store.task_inputs("nope").await,
            Err(StoreError::NotFound { .. })
        ),
        "tasks: task_inputs of a missing run"
    );
}

/// A claim whose lease lapsed is taken over with the same attempt and a new version; the
/// former holder's heartbeat reports it lost and its completion writes nothing.
pub async fn tasks_lapse_and_fence(store: &dyn Store) {
    let a = Owner::new("a");
    let b = Owner::new("b");
    let lease = create(store, "t2", "W", &a).await;
    open_tasks(store, &lease, 2, &[(1, 1)]).await;
    let first = store
        .claim_tasks(&a, &versions(&["W"]), 1, Duration::from_millis(20))
        .await
        .unwrap_or_else(|e| panic!("tasks: claim: {e}"));
    assert_eq!(first.len(), 1, "tasks: one claim");
    tokio::time::sleep(Duration::from_millis(60)).await;
    let second = claim(store, &b, &["W"], 1).await;
    assert_eq!(second.len(), 1, "tasks: a lapsed claim is claimed again");
    assert!(second[0].lapsed, "tasks: the new claim says it lapsed");
    assert_eq!(
        second[0].ready_ms,
        Some(first[0].until_ms),
        "tasks: a lapsed claim's task was ready again when that claim's lease ended"
    );
    assert_eq!(
        second[0].attempt, first[0].attempt,
        "tasks: the same attempt (the same idempotency key)"
    );
    assert!(
        second[0].version > first[0].version,
        "tasks: a new version fences the former holder"
    );
    assert_eq!(
        store.heartbeat_tasks(&first, LONG).await,
        Ok(first.clone()),
        "tasks: the former holder's heartbeat reports the claim lost"
    );
    assert_eq!(
        store.complete_task(&first[0], completed(b"1")).await,
        Ok(TaskCommitted::Stale),
        "tasks: the former holder's completion"
    );
    assert_eq!(
        store.task_results("t2").await,
        Ok(vec![]),
        "tasks: a stale completion wrote nothing"
    );
    let inputs = store
        .task_inputs("t2")
        .await
        .unwrap_or_else(|e| panic!("tasks: task_inputs: {e}"));
    assert!(
        inputs.outputs.iter().all(|o| o.node != 1),
        "tasks: a stale completion stored no output"
    );
    let failed = TaskOutcome::Failed {
        error: "card declined".into(),
    };
    assert_eq!(
        store.complete_task(&second[0], failed.clone()).await,
        Ok(TaskCommitted::Applied),
        "tasks: the new holder's completion"
    );
    assert_eq!(
        store.task_results("t2").await,
        Ok(vec![TaskResult {
            node: 1,
            instance: String::new(),
            attempt: 1,
            outcome: failed
        }]),
        "tasks: a failure is a result too"
    );
}

/// Eight workers claiming at once never get one task twice, and together get them all.
pub async fn tasks_exclusive_claims(store: Arc<dyn Store>) {
    let a = Owner::new("a");
    let lease = create(&*store, "t3", "W", &a).await;
    let nodes: Vec<(u32, u32)> = (0..40).map(|n| (n, 1)).collect();
    open_tasks(&*store, &lease, 2, &nodes).await;
    let mut workers = Vec::new();
    for w in 0..8 {
        let store = Arc::clone(&store);
        workers.push(tokio::spawn(async move {
            let owner = Owner::new(format!("w{w}"));
            let mut mine = Vec::new();
            loop {
                let claims = claim(&*store, &owner, &["W"], 3).await;
                if claims.is_empty() {
                    return mine;
                }
                mine.extend(claims.into_iter().map(|c| c.node));
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut all = Vec::new();
    for worker in workers {
        all.extend(
            worker
                .await
                .unwrap_or_else(|e| panic!("tasks: a claimer: {e}")),
        );
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..40).collect::<Vec<u32>>(),
        "tasks: every task claimed exactly once"
    );
}

/// A completion makes the run due, even one unloaded (`waiting`) after the completion.
pub async fn tasks_wake_the_run(store: &dyn Store) {
    let a = Owner::new("a");
    let b = Owner::new("b");
    let lease = create(store, "t4", "W", &a).await;
    let next = open_tasks(store, &lease, 2, &[(1, 1)]).await;
    let claims = claim(store, &b, &["W"], 1).await;
    assert_eq!(
        store.complete_task(&claims[0], completed(b"7")).await,
        Ok(TaskCommitted::Applied),
        "tasks: completing"
    );
    // The run's owner unloads it after the completion: it must stay due.
    let mut unload = Batch::new(&lease, next, LONG);
    unload.status = Some(RunStatus::Waiting);
    assert_eq!(
        commit(store, unload).await,
        Ok(Committed::Applied { next_seq: next }),
        "tasks: unloading"
    );
    // Its owner still holds the lease: the run is due for it alone.
    let due_for = |owner: Owner| async move {
        store
            .due_runs(&owner, &versions(&["W"]), 10)
            .await
            .unwrap_or_else(|e| panic!("tasks: due_runs: {e}"))
            .into_iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        due_for(a.clone()).await,
        vec!["t4"],
        "tasks: due for its holder"
    );
    assert_eq!(
        due_for(b.clone()).await,
        Vec::<String>::new(),
        "tasks: not due for another owner while the lease holds"
    );
    assert_eq!(
        store.release(&a, std::slice::from_ref(&lease)).await,
        Ok(()),
        "tasks: release"
    );
    let due = store
        .due_runs(&b, &versions(&["W"]), 10)
        .await
        .unwrap_or_else(|e| panic!("tasks: due_runs: {e}"));
    assert_eq!(
        due.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["t4"],
        "tasks: a waiting run with a done task is due"
    );
    assert_eq!(
        store.due_runs(&b, &versions(&["Other"]), 10).await,
        Ok(vec![]),
        "tasks: due_runs keeps to the workflows asked for"
    );
    assert_eq!(
        store
            .due_runs(&b, &[WorkflowVersion::new("W", GRAPH + 1)], 10)
            .await,
        Ok(vec![]),
        "tasks: due_runs keeps to the graphs asked for"
    );
}

/// Closing a running task takes the claim away (for good: the task opened again for the next
/// attempt, even claimed by the same owner, is another); a task opened again replaces the
/// node's task; a batch that ends the run removes its tasks.
pub async fn tasks_closed_and_reopened(store: &dyn Store) {
    let a = Owner::new("a");
    let b = Owner::new("b");
    let lease = create(store, "t5", "W", &a).await;
    let next = open_tasks(store, &lease, 2, &[(0, 1), (1, 1)]).await;
    let claims = claim(store, &b, &["W"], 10).await;
    assert_eq!(claims.len(), 2, "tasks: two claims");
    let mut close = Batch::new(&lease, next, LONG);
    close.events = vec![event(next, "TimedOut", Some(0))];
    close.tasks = vec![TaskChange::Close {
        node: 0,
        instance: String::new(),
    }];
    let next = next + 1;
    assert_eq!(
        commit(store, close).await,
        Ok(Committed::Applied { next_seq: next }),
        "tasks: closing a running task"
    );
    let task0 = claims
        .iter()
        .find(|c| c.node == 0)
        .unwrap_or_else(|| panic!("tasks: node 0 claimed: {claims:?}"));
    assert_eq!(
        store
            .heartbeat_tasks(std::slice::from_ref(task0), LONG)
            .await,
        Ok(vec![task0.clone()]),
        "tasks: a closed task's claim is lost"
    );
    assert_eq!(
        store.complete_task(task0, completed(b"0")).await,
        Ok(TaskCommitted::Stale),
        "tasks: completing a closed task"
    );
    let next = open_tasks(store, &lease, next, &[(0, 2)]).await;
    let again = claim(store, &b, &["W"], 10).await;
    assert_eq!(
        again
            .iter()
            .map(|c| (c.node, c.attempt))
            .collect::<Vec<_>>(),
        vec![(0, 2)],
        "tasks: the reopened task, for the next attempt"
    );
    assert_eq!(
        store.complete_task(task0, completed(b"0")).await,
        Ok(TaskCommitted::Stale),
        "tasks: a claim on the closed task does not match the reopened one, claimed by the same owner"
    );
    let mut end = Batch::new(&lease, next, LONG);
    end.events = vec![event(next, "RunFinished", None)];
    end.status = Some(RunStatus::Failed);
    end.end = Some(RunEnd {
        result: None,
        error: Some("gave up".into()),
    });
    assert_eq!(
        commit(store, end).await,
        Ok(Committed::Applied { next_seq: next + 1 }),
        "tasks: ending the run"
    );
    let rest: Vec<TaskClaim> = again.into_iter().chain(claims).collect();
    assert_eq!(
        store
            .heartbeat_tasks(&rest, LONG)
            .await
            .map(|lost| lost.len()),
        Ok(rest.len()),
        "tasks: an ended run's claims are all lost"
    );
    assert_eq!(
        store.task_results("t5").await,
        Ok(vec![]),
        "tasks: an ended run has no tasks"
    );
}

/// Tasks of nest instances: each instance of a node is a task of its own (`charge[0]`,
/// `charge[1]`, `charge@1` beside the node's own), claimed, completed and closed alone; its
/// result names the instance; a claim that reads inputs reads the node's predecessors'
/// outputs and, for a `Loop` iteration, the stored end of the iteration before it, and no
/// other instance's; opening an instance's task again for the same attempt keeps the claim
/// on it.
pub async fn tasks_of_instances(store: &dyn Store) {
    let a = Owner::new("a");
    let b = Owner::new("b");
    let lease = create(store, "t6", "W", &a).await;
    let mut batch = completion(&lease, 2);
    let instance_output = |instance: &str| StoredOutput {
        node: 1,
        instance: instance.into(),
        type_name: "End".into(),
        bytes: format!(r#"{{"ended":"{instance}"}}"#).into_bytes(),
    };
    batch.outputs.push(instance_output("charge@0"));
    batch.outputs.push(instance_output("charge[5]"));
    let open = |instance: &str| TaskChange::Open {
        node: 1,
        instance: instance.into(),
        attempt: 1,
    };
    batch.tasks = vec![open("charge[0]"), open("charge[1]"), open("charge@1")];
    let next = batch.end_seq();
    assert_eq!(
        commit(store, batch).await,
        Ok(Committed::Applied { next_seq: next }),
        "instance tasks: opening three"
    );
    let mut claims = claim(store, &b, &["W"], 10).await;
    claims.sort_by(|x, y| x.instance.cmp(&y.instance));
    assert_eq!(
        claims
            .iter()
            .map(|c| (c.node, c.instance.as_str(), c.attempt))
            .collect::<Vec<_>>(),
        vec![(1, "charge@1", 1), (1, "charge[0]", 1), (1, "charge[1]", 1)],
        "instance tasks: one claim per instance, each naming it"
    );
    for claim in &claims {
        let Some(inputs) = &claim.inputs else {
            continue;
        };
        let mut read: Vec<(u32, &str)> = inputs
            .outputs
            .iter()
            .map(|o| (o.node, o.instance.as_str()))
            .collect();
        read.sort_unstable();
        let expected = match claim.instance.as_str() {
            "charge@1" => vec![(0, ""), (1, "charge@0")],
            _ => vec![(0, "")],
        };
        assert_eq!(
            read, expected,
            "instance tasks: what the claim of `{}` reads",
            claim.instance
        );
        if claim.instance == "charge@1" {
            let prev = inputs.outputs.iter().find(|o| o.node == 1);
            assert_eq!(
                prev.map(|o| o.bytes.as_slice()),
                Some(br#"{"ended":"charge@0"}"#.as_slice()),
                "instance tasks: the previous iteration's stored end"
            );
        }
    }
    let mut again = Batch::new(&lease, next, LONG);
    again.events = vec![event(next, "Resumed", None)];
    again.tasks = vec![open("charge[0]")];
    let next = next + 1;
    assert_eq!(
        commit(store, again).await,
        Ok(Committed::Applied { next_seq: next }),
        "instance tasks: opening an instance's task again"
    );
    assert_eq!(
        store.heartbeat_tasks(&claims, LONG).await,
        Ok(vec![]),
        "instance tasks: opening a task again for the same attempt keeps its claim"
    );
    assert_eq!(
        claim(store, &a, &["W"], 10).await,
        vec![],
        "instance tasks: and makes no task to claim"
    );
    let first = &claims[1];
    assert_eq!(
        store
            .complete_task(first, completed(br#"{"ended":"charge[0]"}"#))
            .await,
        Ok(TaskCommitted::Applied),
        "instance tasks: completing one instance"
    );
    let results = store
        .task_results("t6")
        .await
        .unwrap_or_else(|e| panic!("instance tasks: task_results: {e}"));
    assert_eq!(
        results,
        vec![TaskResult {
            node: 1,
            instance: "charge[0]".into(),
            attempt: 1,
            outcome: completed(br#"{"ended":"charge[0]"}"#),
        }],
        "instance tasks: the result names the instance"
    );
    let mut close = Batch::new(&lease, next, LONG);
    close.events = vec![event(next, "Withdrawn", Some(1))];
    close.outputs = vec![instance_output("charge[0]")];
    close.tasks = vec![
        TaskChange::Close {
            node: 1,
            instance: "charge[0]".into(),
        },
        TaskChange::Close {
            node: 1,
            instance: "charge[1]".into(),
        },
    ];
    assert_eq!(
        commit(store, close).await,
        Ok(Committed::Applied { next_seq: next + 1 }),
        "instance tasks: closing two"
    );
    assert_eq!(
        store.heartbeat_tasks(&claims, LONG).await,
        Ok(vec![claims[1].clone(), claims[2].clone()]),
        "instance tasks: the closed instances' claims are lost, the other instance's kept"
    );
    assert_eq!(
        store.task_results("t6").await,
        Ok(vec![]),
        "instance tasks: a closed instance's task has no result"
    );
}

#[cfg(test)]
mod tests {
    use std::panic::AssertUnwindSafe;

    use super::super::{
        DueTimer, Loaded, MemoryStore, RunData, RunSummary, StoreFuture, StoredSignal,
    };
    use super::*;

    /// A store that breaks one rule: a batch sent again is written as if it were new (here:
    /// answered `Applied`, as a store without the check would).
    struct Forgetful(MemoryStore);

    impl Store for Forgetful {
        fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
            self.0.create_run(run)
        }
        fn load_run<'a>(
            &'a self,
            run: &'a str,
            owner: &'a Owner,
            lease: Duration,
        ) -> StoreFuture<'a, Loaded> {
            self.0.load_run(run, owner, lease)
        }
        fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
            self.0.list_runs(filter)
        }
        fn events<'a>(&'a self, run: &'a str, from: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
            self.0.events(run, from)
        }
        fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
            self.0.run_data(run)
        }
        fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
            let inner = self.0.commit(batch);
            Box::pin(async move {
                match inner.await? {
                    Committed::AlreadyApplied { next_seq } => Ok(Committed::Applied { next_seq }),
                    applied => Ok(applied),
                }
            })
        }
        fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
            self.0.due_timers(horizon, limit)
        }
        fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
            self.0.send_signal(signal)
        }
        fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
            self.0.signals(run, after)
        }
        fn heartbeat<'a>(
            &'a self,
            owner: &'a Owner,
            held: &'a [Lease],
            lease: Duration,
        ) -> StoreFuture<'a, Vec<Lease>> {
            self.0.heartbeat(owner, held, lease)
        }
        fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
            self.0.release(owner, held)
        }
    }

    #[test]
    fn the_suite_fails_a_store_that_breaks_the_contract() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let store = Forgetful(MemoryStore::new());
        let failed = std::panic::catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(idempotent_commit(&store));
        }));
        let message = failed.expect_err("the suite must fail the forgetful store");
        let message = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            message.contains("idempotent_commit: the same batch again"),
            "{message}"
        );
        // The rest of the suite still holds for it.
        rt.block_on(leases(&Forgetful(MemoryStore::new())));
    }
}
