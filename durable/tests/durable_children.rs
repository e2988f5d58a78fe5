//! Child runs: a `Workflow(Child(..))` step of a durable workflow runs `Child` as a durable run
//! of its own, `"{parent}/{step}"`, in the parent's store, its parent recorded; the step's
//! output is the child's. A parent resumed after a stop resumes its child where the child
//! stopped; a child that fails fails the step with the child's error inside; a child that
//! stops (its store failed) stops the parent without failing it; a parent that ends before
//! its child asks the child to cancel.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flowdag::durable::{DurableError, resume};
use flowdag::store::{MemoryStore, RunFilter, RunStatus, Store};
use flowdag::{NodeError, WorkflowError};

#[path = "common/ran.rs"]
mod ran;

#[path = "common/faulty.rs"]
mod faulty;

use faulty::Faulty;

use ran::{Never, ran, what_ran};

#[derive(Debug)]
struct Lost;

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the parcel was lost")
    }
}

impl std::error::Error for Lost {}

async fn charge(order: u64) -> Result<u64, Never> {
    ran("charge");
    Ok(order * 10)
}

async fn pack(amount: u64) -> Result<u64, Never> {
    ran("pack");
    Ok(amount + 1)
}

/// Lines over 1,000 are lost.
async fn send(parcel: u64) -> Result<u64, Lost> {
    ran("send");
    match parcel > 1_000 {
        true => Err(Lost),
        false => Ok(parcel + 1),
    }
}

async fn tell(sent: u64) -> Result<u64, Never> {
    ran("tell");
    Ok(sent * 2)
}

/// The runs whose `wait` never returns (the process is stopped there).
static HANG: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn hang(run: &str, on: bool) {
    let mut hang = HANG.lock().expect("not poisoned");
    match on {
        true => hang.push(run.to_owned()),
        false => hang.retain(|r| r != run),
    }
}

async fn wait(parcel: u64) -> Result<u64, Never> {
    ran("wait");
    let run = flowdag::attempt().map(|a| a.run().to_owned());
    let hangs = run.is_some_and(|run| HANG.lock().expect("not poisoned").contains(&run));
    if hangs {
        std::future::pending::<()>().await;
    }
    Ok(parcel)
}

mod flows {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        /// Packs and sends one parcel.
        #[flow(durable)]
        pub Ship(amount: u64) -> u64 {
            Sequential {
                packed = Operation(pack(amount)),
                sent = Operation(send(packed)),
            }
            => sent
        }
    }

    workflow! {
        /// Charges, ships as a child run, tells.
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                charged = Operation(charge(order)),
                shipped = Workflow(Ship(charged)),
                told = Operation(tell(shipped)),
            }
            => told
        }
    }

    workflow! {
        /// Packs, waits, sends.
        #[flow(durable)]
        pub SlowShip(amount: u64) -> u64 {
            Sequential {
                packed = Operation(pack(amount)),
                waited = Operation(wait(packed)),
                sent = Operation(send(waited)),
            }
            => sent
        }
    }

    workflow! {
        /// As `Order`, shipping slowly.
        #[flow(durable)]
        pub SlowOrder(order: u64) -> u64 {
            Sequential {
                charged = Operation(charge(order)),
                shipped = Workflow(SlowShip(charged)),
                told = Operation(tell(shipped)),
            }
            => told
        }
    }
}

async fn status(store: &dyn Store, id: &str) -> Option<RunStatus> {
    store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|r| r.id == id)
        .map(|r| r.status)
}

#[tokio::test]
async fn a_child_is_a_durable_run_of_its_own() {
    let store = MemoryStore::new();
    let outcome = flows::Order::runner()
        .durable(&store, "o-1")
        .execute(5)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("succeeds"), (50 + 1 + 1) * 2);
    assert_eq!(what_ran("o-1"), ["charge", "tell"]);
    assert_eq!(
        what_ran("o-1/shipped"),
        ["pack", "send"],
        "the child's own keys"
    );
    assert_eq!(status(&store, "o-1").await, Some(RunStatus::Succeeded));
    assert_eq!(
        status(&store, "o-1/shipped").await,
        Some(RunStatus::Succeeded)
    );
    let child = store
        .run_data("o-1/shipped")
        .await
        .expect("the child's data");
    assert_eq!(child.input, b"50", "the child's input");
    let options = String::from_utf8_lossy(&child.options).into_owned();
    assert!(options.contains(r#""parent":"o-1""#), "{options}");
    let events = store.events("o-1/shipped", 0).await.expect("events");
    assert!(
        events
            .iter()
            .any(|e| e.node_name.as_deref() == Some("sent")),
        "the child's steps are in its own journal"
    );
    // Resumed once done, the parent takes the step's output from its own journal.
    let again = resume::<flows::Order, _>(&store, "o-1")
        .await
        .expect("resumes");
    assert_eq!(again.result.expect("succeeds"), 104);
    assert_eq!(
        what_ran("o-1/shipped"),
        ["pack", "send"],
        "nothing ran again"
    );
}

#[tokio::test]
async fn a_failed_child_fails_the_step_with_its_error() {
    let store = MemoryStore::new();
    let outcome = flows::Order::runner()
        .durable(&store, "o-lost")
        .execute(200)
        .await
        .expect("runs");
    let error: WorkflowError = outcome.result.expect_err("the parcel was lost");
    let failure = error
        .failures()
        .iter()
        .find(|f| f.node == "shipped")
        .expect("the step failed");
    let NodeError::Workflow(child) = &failure.error else {
        panic!("the child's error: {:?}", failure.error);
    };
    assert!(
        child.failures().iter().any(|f| f.node == "sent"),
        "the child's failing step is reachable: {child}"
    );
    assert_eq!(status(&store, "o-lost").await, Some(RunStatus::Failed));
    assert_eq!(
        status(&store, "o-lost/shipped").await,
        Some(RunStatus::Failed)
    );
    assert!(what_ran("o-lost").iter().all(|s| s != "tell"));
}

/// Leases of 100 ms (a child run's, whose id has a `/`, 500 ms), so that the runs of a stopped
/// process (its futures dropped, their leases held) are free again soon, the parent before its
/// child.
const SHORT: Duration = Duration::from_millis(100);

/// The lease of run `run` in the tests' stores.
fn lease(run: &str) -> Duration {
    match run.contains('/') {
        true => SHORT * 5,
        false => SHORT,
    }
}

/// The parent's process stops while the child waits in a step (both futures dropped, their
/// leases held): resumed, the parent takes its child back (waiting for the dead process's
/// lease to lapse), the child goes on from its own journal, and nothing that completed runs
/// again.
#[tokio::test]
async fn a_resumed_parent_resumes_its_child() {
    let store = Faulty::new().leases(lease);
    hang("o-2/shipped", true);
    let stopped = tokio::time::timeout(
        Duration::from_millis(300),
        flows::SlowOrder::runner().durable(&store, "o-2").execute(3),
    )
    .await;
    assert!(stopped.is_err(), "the run waits in the child's step");
    assert_eq!(what_ran("o-2"), ["charge"]);
    assert_eq!(what_ran("o-2/shipped"), ["pack", "wait"]);
    assert_eq!(
        status(&store, "o-2/shipped").await,
        Some(RunStatus::Running)
    );
    hang("o-2/shipped", false);
    // The parent's lease lapses first; its child is still held by the stopped process.
    tokio::time::sleep(SHORT + Duration::from_millis(50)).await;
    let child = store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|r| r.id == "o-2/shipped")
        .expect("the child");
    let held = child.lease_until_ms.expect("held");
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        resume::<flows::SlowOrder, _>(&store, "o-2"),
    )
    .await
    .expect("resumes within 10 s")
    .expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), (30 + 1 + 1) * 2);
    assert_eq!(
        what_ran("o-2"),
        ["charge", "tell"],
        "the parent's steps ran once"
    );
    assert_eq!(
        what_ran("o-2/shipped"),
        ["pack", "wait", "wait", "send"],
        "the child's step in flight ran again, the one before did not"
    );
    assert_eq!(
        status(&store, "o-2/shipped").await,
        Some(RunStatus::Succeeded)
    );
    let ended = store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .find(|r| r.id == "o-2/shipped")
        .map_or(0, |r| r.updated_ms);
    assert!(
        ended >= held,
        "the child went on once the stopped process's lease lapsed"
    );
}

/// The child's store fails: the child stops without an end, and the parent stops with it
/// (`DurableError::Child`), its step not failed; resumed, both go on.
#[tokio::test]
async fn a_stopped_child_stops_its_parent_without_failing_it() {
    let fail = Arc::new(AtomicBool::new(true));
    let failing = Arc::clone(&fail);
    let store = Faulty::new()
        .leases(lease)
        .failing(move |_, batch| batch.run == "o-3/shipped" && failing.load(Ordering::SeqCst));
    let stopped = flows::Order::runner()
        .durable(&store, "o-3")
        .execute(4)
        .await;
    match &stopped {
        Err(DurableError::Child { run, why }) => {
            assert_eq!(run, "o-3");
            assert!(why.contains("o-3/shipped"), "{why}");
        }
        other => panic!("the parent stops with its child: {other:?}"),
    }
    assert_eq!(status(&store, "o-3").await, Some(RunStatus::Running));
    fail.store(false, Ordering::SeqCst);
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        resume::<flows::Order, _>(&store, "o-3"),
    )
    .await
    .expect("resumes within 10 s")
    .expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), (40 + 1 + 1) * 2);
    assert_eq!(what_ran("o-3"), ["charge", "tell"]);
}

/// A parent cancelled while its child runs ends `cancelled`, and its child is asked to cancel:
/// resumed, the child takes the request and ends `cancelled` without its last step.
#[tokio::test]
async fn a_cancelled_parent_cancels_its_child() {
    let store = MemoryStore::new();
    hang("o-4/shipped", true);
    let token = flowdag::CancelToken::new();
    let run = flows::SlowOrder::runner()
        .cancel_on(token.clone())
        .durable(&store, "o-4")
        .execute(2);
    let cancel = async {
        while what_ran("o-4/shipped").len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        token.cancel();
    };
    let (ended, ()) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(run, cancel) })
            .await
            .expect("ends within 10 s");
    let outcome = ended.expect("the parent ends");
    assert!(outcome.result.is_err(), "cancelled");
    assert_eq!(status(&store, "o-4").await, Some(RunStatus::Cancelled));
    hang("o-4/shipped", false);
    let signals = store.signals("o-4/shipped", 0).await.expect("signals");
    assert!(
        signals.iter().any(|s| s.name == "flow.cancel"),
        "the child is asked to cancel: {signals:?}"
    );
}

/// A distributed parent: the child is distributed too, handed to the workers: a worker that
/// registered the child decides it as a run of its own, its operations are tasks, and the
/// parent's step takes the child's output once it has ended.
#[tokio::test]
async fn a_distributed_parent_runs_a_distributed_child() {
    let store = MemoryStore::new();
    let ended = flows::Order::runner()
        .durable(&store, "o-5")
        .distributed()
        .submit(6)
        .await
        .expect("submitted");
    assert!(ended.is_unloaded(), "{ended:?}");
    let worker = flowdag::Worker::new(store.clone())
        .register::<flows::Order>()
        .register::<flows::Ship>()
        .poll_interval(Duration::from_millis(5));
    let done = {
        let store = store.clone();
        async move {
            while status(&store, "o-5").await != Some(RunStatus::Succeeded) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let report = tokio::time::timeout(Duration::from_secs(20), worker.run(done))
        .await
        .expect("the worker finishes the run within 20 s")
        .expect("the store answers");
    assert_eq!(what_ran("o-5"), ["charge", "tell"]);
    assert_eq!(what_ran("o-5/shipped"), ["pack", "send"]);
    let child = store
        .run_data("o-5/shipped")
        .await
        .expect("the child's data");
    let options = String::from_utf8_lossy(&child.options).into_owned();
    assert!(options.contains(r#""distributed":true"#), "{options}");
    assert!(
        report.resumed.iter().any(|r| r.run == "o-5/shipped"),
        "a worker decided the child as a run of its own: {:?}",
        report.resumed
    );
    assert_eq!(
        status(&store, "o-5/shipped").await,
        Some(RunStatus::Succeeded)
    );
    let outcome = resume::<flows::Order, _>(&store, "o-5")
        .await
        .expect("reads the result");
    assert_eq!(outcome.result.expect("succeeds"), (60 + 1 + 1) * 2);
}

/// The parent's process stops while its child runs; an operator cancels the parent, whose
/// resume takes the request before anything of it runs (so it starts nothing in this process):
/// its children are found in the store and asked to cancel. Terminating a parent that nobody
/// holds does the same.
#[tokio::test]
async fn a_parent_stopped_and_cancelled_later_cancels_its_child() {
    let store = Faulty::new().leases(lease);
    for id in ["o-6", "o-7"] {
        hang(&format!("{id}/shipped"), true);
        let stopped = tokio::time::timeout(
            Duration::from_millis(300),
            flows::SlowOrder::runner().durable(&store, id).execute(2),
        )
        .await;
        assert!(stopped.is_err(), "the run waits in the child's step");
        hang(&format!("{id}/shipped"), false);
    }
    tokio::time::sleep(SHORT * 6).await;
    flowdag::durable::cancel_run(&store, "o-6", None)
        .await
        .expect("the request is stored");
    let outcome = resume::<flows::SlowOrder, _>(&store, "o-6")
        .await
        .expect("resumes");
    assert!(outcome.result.is_err(), "cancelled");
    assert_eq!(status(&store, "o-6").await, Some(RunStatus::Cancelled));
    flowdag::durable::terminate_run(&store, "o-7", None, &flowdag::store::Owner::new("op"))
        .await
        .expect("terminates");
    assert_eq!(status(&store, "o-7").await, Some(RunStatus::Cancelled));
    for child in ["o-6/shipped", "o-7/shipped"] {
        let signals = store.signals(child, 0).await.expect("signals");
        assert!(
            signals.iter().any(|s| s.name == "flow.cancel"),
            "{child} is asked to cancel: {signals:?}"
        );
        // Driven again, the child takes the request and ends cancelled, its last step not run.
        let ended = resume::<flows::SlowShip, _>(&store, child)
            .await
            .expect("the child resumes");
        assert!(ended.result.is_err(), "{child} cancelled");
        assert_eq!(status(&store, child).await, Some(RunStatus::Cancelled));
        assert!(
            what_ran(child).iter().all(|s| s != "send"),
            "{child}: {:?}",
            what_ran(child)
        );
    }
}

/// A child loaded after its parent ended (the parent's process stopped between its end and the
/// requests for its children) asks for its own cancellation.
#[tokio::test]
async fn a_child_whose_parent_ended_cancels_itself_when_loaded() {
    let store = Faulty::new().leases(lease);
    hang("o-8/shipped", true);
    let stopped = tokio::time::timeout(
        Duration::from_millis(300),
        flows::SlowOrder::runner().durable(&store, "o-8").execute(2),
    )
    .await;
    assert!(stopped.is_err(), "the run waits in the child's step");
    hang("o-8/shipped", false);
    tokio::time::sleep(SHORT * 6).await;
    // The parent ends with no request for its child: as if its process stopped right after.
    let parent = store
        .inner
        .load_run("o-8", &flowdag::store::Owner::new("op"), SHORT)
        .await
        .expect("loads");
    let mut end = flowdag::store::Batch::new(&parent.lease, parent.run.next_seq, SHORT);
    end.status = Some(RunStatus::Cancelled);
    end.end = Some(flowdag::store::RunEnd {
        result: None,
        error: Some("stopped".into()),
    });
    store.inner.commit(end).await.expect("ends the parent");
    let ended = tokio::time::timeout(
        Duration::from_secs(20),
        resume::<flows::SlowShip, _>(&store, "o-8/shipped"),
    )
    .await
    .expect("ends within 20 s")
    .expect("resumes");
    assert!(ended.result.is_err(), "the orphan is cancelled");
    assert_eq!(
        status(&store, "o-8/shipped").await,
        Some(RunStatus::Cancelled)
    );
    let events = store.events("o-8/shipped", 0).await.expect("events");
    assert!(
        events.iter().any(|e| e.kind == "CancelRequested"),
        "{events:?}"
    );
    assert!(
        what_ran("o-8/shipped").iter().all(|s| s != "send"),
        "its last step did not run: {:?}",
        what_ran("o-8/shipped")
    );
}

/// Any worker decides a distributed parent's child: here a worker that knows only the child
/// decides it (and executes its tasks), while another, which knows only the parent, decides
/// the parent, whose step waits for the child's end.
#[tokio::test]
async fn a_distributed_child_is_decided_by_a_worker_that_knows_it() {
    let store = MemoryStore::new();
    let ended = flows::Order::runner()
        .durable(&store, "o-9")
        .distributed()
        .submit(8)
        .await
        .expect("submitted");
    assert!(ended.is_unloaded(), "{ended:?}");
    let parents = flowdag::Worker::new(store.clone())
        .register::<flows::Order>()
        .poll_interval(Duration::from_millis(5));
    let children = flowdag::Worker::new(store.clone())
        .register::<flows::Ship>()
        .poll_interval(Duration::from_millis(5));
    let done = |store: MemoryStore| async move {
        while status(&store, "o-9").await != Some(RunStatus::Succeeded) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (parents, children) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(
            parents.run(done(store.clone())),
            children.run(done(store.clone()))
        )
    })
    .await
    .expect("the workers finish the run within 20 s");
    let (parents, children) = (
        parents.expect("the store answers"),
        children.expect("the store answers"),
    );
    assert!(
        children.resumed.iter().any(|r| r.run == "o-9/shipped"),
        "the child's worker decided it: {:?}",
        children.resumed
    );
    assert!(
        parents.resumed.iter().all(|r| r.run != "o-9/shipped"),
        "the parent's worker did not: {:?}",
        parents.resumed
    );
    assert_eq!(what_ran("o-9/shipped"), ["pack", "send"]);
    let outcome = resume::<flows::Order, _>(&store, "o-9")
        .await
        .expect("reads the result");
    assert_eq!(outcome.result.expect("succeeds"), (80 + 1 + 1) * 2);
}
