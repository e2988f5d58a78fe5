//! A parent that compensates undoes its child runs: the compensation of a `Workflow` step
//! reopens the child run (which had succeeded), which cancels itself and runs its own
//! compensations, in its own journal and with its own keys; the child ends `cancelled`. A child
//! whose workflow compensates nothing is left as it ended; a child whose compensation fails
//! for good fails the parent's compensation of the step; a parent stopped while its child is
//! being undone undoes it when resumed, with the same keys.

use std::sync::Mutex;
use std::time::Duration;

use flowdag::durable::resume;
use flowdag::store::{MemoryStore, RunFilter, RunStatus, Store};
use flowdag::{CompensationOutcome, WorkflowError};

#[path = "common/faulty.rs"]
mod faulty;

use faulty::Faulty;

/// What ran, with the idempotency key it ran under: `(what, key)`, in order.
static RAN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn ran(what: &str) {
    if let Some(attempt) = flowdag::attempt() {
        RAN.lock()
            .expect("not poisoned")
            .push((what.to_owned(), attempt.key()));
    }
}

/// What ran under keys of run `run` (its own steps, not its children's), in order.
fn what_ran(run: &str) -> Vec<(String, String)> {
    let prefix = format!("{run}/");
    RAN.lock()
        .expect("not poisoned")
        .iter()
        .filter(|(_, key)| {
            key.strip_prefix(&prefix)
                .is_some_and(|rest| rest.matches('/').count() == 1)
        })
        .cloned()
        .collect()
}

/// The names of what ran in `run`, in order.
fn names(run: &str) -> Vec<String> {
    what_ran(run).into_iter().map(|(what, _)| what).collect()
}

#[derive(Debug)]
struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the payment was refused")
    }
}

impl std::error::Error for Refused {}

async fn charge(order: u64) -> Result<u64, Refused> {
    ran("charge");
    Ok(order * 10)
}

async fn refund(charged: &u64) -> Result<(), Refused> {
    let _ = charged;
    ran("refund");
    Ok(())
}

async fn reserve(amount: u64) -> Result<u64, Refused> {
    ran("reserve");
    Ok(amount + 1)
}

/// The runs whose `release` never returns (their process is stopped there).
static HANG: Mutex<Vec<String>> = Mutex::new(Vec::new());

async fn release(reserved: &u64) -> Result<(), Refused> {
    let _ = reserved;
    ran("release");
    let run = flowdag::attempt().map(|a| a.run().to_owned());
    let hangs = run.is_some_and(|run| HANG.lock().expect("not poisoned").contains(&run));
    if hangs {
        std::future::pending::<()>().await;
    }
    Ok(())
}

async fn release_badly(reserved: &u64) -> Result<(), Refused> {
    let _ = reserved;
    ran("release_badly");
    Err(Refused)
}

async fn confirm(reserved: u64) -> Result<u64, Refused> {
    ran("confirm");
    Ok(reserved)
}

/// Fails in the first child run of a step (`t-6/booked`), confirms in its retry's
/// (`t-6/booked#2`).
async fn confirm_on_retry(reserved: u64) -> Result<u64, Refused> {
    ran("confirm_on_retry");
    let retry = flowdag::attempt().is_some_and(|a| a.run().contains('#'));
    match retry {
        true => Ok(reserved),
        false => Err(Refused),
    }
}

/// Refuses payments over 100.
async fn pay(booked: u64) -> Result<u64, Refused> {
    ran("pay");
    match booked > 100 {
        true => Err(Refused),
        false => Ok(booked),
    }
}

mod flows {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        /// Reserves (released when undone), confirms.
        #[flow(durable)]
        pub Book(amount: u64) -> u64 {
            Sequential {
                reserved = Operation(reserve(amount), compensate = release(&reserved)),
                confirmed = Operation(confirm(reserved)),
            }
            => confirmed
        }
    }

    workflow! {
        /// Charges (refunded when undone), books as a child run, pays.
        #[flow(durable)]
        pub Trip(order: u64) -> u64 {
            Sequential {
                charged = Operation(charge(order), compensate = refund(&charged)),
                booked = Workflow(Book(charged)),
                paid = Operation(pay(booked)),
            }
            => paid
        }
    }

    workflow! {
        /// As `Book`, failing in its step's first child run.
        #[flow(durable)]
        pub BookOnRetry(amount: u64) -> u64 {
            Sequential {
                reserved = Operation(reserve(amount), compensate = release(&reserved)),
                confirmed = Operation(confirm_on_retry(reserved)),
            }
            => confirmed
        }
    }

    workflow! {
        /// Charges (nothing to undo), books as a child run that fails the first time, pays.
        #[flow(durable)]
        pub RetriedTrip(order: u64) -> u64 {
            Sequential {
                charged = Operation(charge(order)),
                booked = Workflow(BookOnRetry(charged)),
                paid = Operation(pay(booked)),
            }
            => paid
        }
    }

    workflow! {
        /// Confirms: nothing to undo.
        #[flow(durable)]
        pub Note(amount: u64) -> u64 {
            Sequential {
                confirmed = Operation(confirm(amount)),
            }
            => confirmed
        }
    }

    workflow! {
        /// As `Trip`, its child compensating nothing.
        #[flow(durable)]
        pub NotedTrip(order: u64) -> u64 {
            Sequential {
                charged = Operation(charge(order), compensate = refund(&charged)),
                booked = Workflow(Note(charged)),
                paid = Operation(pay(booked)),
            }
            => paid
        }
    }

    workflow! {
        /// Reserves, with a release that always fails.
        #[flow(durable)]
        pub BadBook(amount: u64) -> u64 {
            Sequential {
                reserved = Operation(reserve(amount), compensate = release_badly(&reserved)),
                confirmed = Operation(confirm(reserved)),
            }
            => confirmed
        }
    }

    workflow! {
        /// As `Trip`, its child's release failing.
        #[flow(durable)]
        pub BadTrip(order: u64) -> u64 {
            Sequential {
                charged = Operation(charge(order), compensate = refund(&charged)),
                booked = Workflow(BadBook(charged)),
                paid = Operation(pay(booked)),
            }
            => paid
        }
    }
}

async fn status(store: &dyn Store, id: &str) -> Option<RunStatus> {
    let filter = RunFilter {
        id: Some(id.to_owned()),
        ..RunFilter::default()
    };
    store
        .list_runs(&filter)
        .await
        .expect("lists")
        .first()
        .map(|r| r.status)
}

/// The compensations of a failed run's error: (step, compensated).
fn compensations(error: &WorkflowError) -> Vec<(&'static str, bool)> {
    error
        .compensations()
        .iter()
        .map(|c| (c.node(), c.is_compensated()))
        .collect()
}

#[tokio::test]
async fn a_compensating_parent_undoes_its_child_run() {
    let store = MemoryStore::new();
    let outcome = flows::Trip::runner()
        .durable(&store, "t-1")
        .execute(50)
        .await
        .expect("runs");
    let error = outcome.result.expect_err("the payment is refused");
    assert_eq!(
        compensations(&error),
        [("booked", true), ("charged", true)],
        "the child is undone first, then the charge"
    );
    assert_eq!(names("t-1"), ["charge", "pay", "refund"]);
    assert_eq!(
        what_ran("t-1/booked"),
        [
            ("reserve".to_owned(), "t-1/booked/reserved/1".to_owned()),
            ("confirm".to_owned(), "t-1/booked/confirmed/1".to_owned()),
            (
                "release".to_owned(),
                "t-1/booked/reserved:compensate/1".to_owned()
            ),
        ],
        "the child's compensation runs in the child's run, with its own key"
    );
    assert_eq!(status(&store, "t-1").await, Some(RunStatus::Failed));
    assert_eq!(
        status(&store, "t-1/booked").await,
        Some(RunStatus::Cancelled),
        "the undone child is cancelled"
    );
    let events = store.events("t-1/booked", 0).await.expect("events");
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e.path.is_none())
        .map(|e| e.kind.as_str())
        .collect();
    let tail = &kinds[kinds.len() - 5..];
    assert_eq!(
        tail,
        [
            "Redriven",
            "CancelRequested",
            "Compensating",
            "Compensated",
            "RunFinished"
        ],
        "the child's journal keeps its success and goes on with its undoing: {kinds:?}"
    );
    // Resumed, the ended parent runs nothing again, and neither does its child.
    let count = || what_ran("t-1").len() + what_ran("t-1/booked").len();
    let before = count();
    let again = resume::<flows::Trip, _>(&store, "t-1")
        .await
        .expect("resumes");
    assert!(again.result.is_err());
    let child = resume::<flows::Book, _>(&store, "t-1/booked")
        .await
        .expect("resumes the child");
    assert!(child.result.is_err(), "the child stays undone");
    assert_eq!(count(), before, "nothing ran again");
}

#[tokio::test]
async fn a_child_that_compensates_nothing_is_left_as_it_ended() {
    let store = MemoryStore::new();
    let outcome = flows::NotedTrip::runner()
        .durable(&store, "t-2")
        .execute(50)
        .await
        .expect("runs");
    let error = outcome.result.expect_err("the payment is refused");
    assert_eq!(compensations(&error), [("charged", true)]);
    assert_eq!(
        status(&store, "t-2/booked").await,
        Some(RunStatus::Succeeded),
        "a child with nothing to undo is not reopened"
    );
    let events = store.events("t-2", 0).await.expect("events");
    assert!(
        !events
            .iter()
            .any(|e| e.kind == "Compensating" && e.node_name.as_deref() == Some("booked")),
        "no compensation of the child's step is journaled"
    );
}

#[tokio::test]
async fn a_child_whose_compensation_fails_fails_the_parents() {
    let store = MemoryStore::new();
    let outcome = flows::BadTrip::runner()
        .durable(&store, "t-3")
        .execute(50)
        .await
        .expect("runs");
    let error = outcome.result.expect_err("the payment is refused");
    let records = error.compensations();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].node(), "booked");
    let CompensationOutcome::Failed { error: why } = records[0].outcome() else {
        panic!("the child's undoing failed: {:?}", records[0]);
    };
    assert!(
        why.contains("t-3/booked") && why.contains("the payment was refused"),
        "names the child and its compensation's error: {why}"
    );
    assert_eq!(records[1].node(), "charged");
    assert!(
        matches!(records[1].outcome(), CompensationOutcome::NotRun),
        "compensation stops at the failed one"
    );
    assert_eq!(
        status(&store, "t-3/booked").await,
        Some(RunStatus::Cancelled),
        "the child is cancelled, its error naming the failed compensation"
    );
    assert_eq!(names("t-3/booked"), ["reserve", "confirm", "release_badly"]);
    assert!(!names("t-3").contains(&"refund".to_owned()));
}

/// The step failed with its first child; redriven, it succeeds in its second attempt, whose
/// child run is `t-6/booked#2`: that child is the one undone when the payment fails (the
/// first, which failed, compensated itself when it failed).
#[tokio::test]
async fn the_child_of_the_attempt_that_completed_the_step_is_undone() {
    let store = MemoryStore::new();
    let first = flows::RetriedTrip::runner()
        .durable(&store, "t-6")
        .execute(50)
        .await
        .expect("runs");
    let error = first.result.expect_err("the first child fails");
    assert!(
        error.failures().iter().any(|f| f.node == "booked"),
        "{error}"
    );
    flowdag::durable::redrive_run(&store, "t-6")
        .await
        .expect("redrives");
    let outcome = resume::<flows::RetriedTrip, _>(&store, "t-6")
        .await
        .expect("resumes");
    let error = outcome.result.expect_err("the payment is refused");
    assert_eq!(
        compensations(&error),
        [("booked", true)],
        "{:?}",
        error.compensations()
    );
    assert_eq!(
        names("t-6/booked"),
        ["reserve", "confirm_on_retry", "release"],
        "the failed first child compensated itself"
    );
    assert_eq!(
        names("t-6/booked#2"),
        ["reserve", "confirm_on_retry", "release"],
        "the retry's child is undone"
    );
    assert_eq!(status(&store, "t-6/booked").await, Some(RunStatus::Failed));
    assert_eq!(
        status(&store, "t-6/booked#2").await,
        Some(RunStatus::Cancelled)
    );
}

/// Leases of 100 ms (a child run's 500 ms), so that the runs of a stopped process are free
/// again soon.
fn lease(run: &str) -> Duration {
    match run.contains('/') {
        true => Duration::from_millis(500),
        false => Duration::from_millis(100),
    }
}

/// The parent's process stops while its child's compensation runs (both futures dropped,
/// their leases held): resumed, the parent undoes the child again, whose compensation runs
/// again with the same key, and the run ends as it would have.
#[tokio::test]
async fn a_parent_stopped_while_undoing_its_child_undoes_it_when_resumed() {
    let store = Faulty::new().leases(lease);
    HANG.lock()
        .expect("not poisoned")
        .push("t-5/booked".to_owned());
    let stopped = tokio::time::timeout(
        Duration::from_millis(400),
        flows::Trip::runner().durable(&store, "t-5").execute(50),
    )
    .await;
    assert!(
        stopped.is_err(),
        "the run waits in the child's release: {:?}",
        stopped.map(|r| r.map(|o| o.result.map_err(|e| e.to_string())))
    );
    assert_eq!(names("t-5/booked"), ["reserve", "confirm", "release"]);
    assert_eq!(status(&store, "t-5").await, Some(RunStatus::Compensating));
    HANG.lock()
        .expect("not poisoned")
        .retain(|r| r != "t-5/booked");
    // The parent's lease lapses first; its child is still held by the stopped process, and
    // the resumed parent waits for it.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        resume::<flows::Trip, _>(&store, "t-5"),
    )
    .await
    .expect("ends")
    .expect("resumes");
    let error = outcome.result.expect_err("the payment was refused");
    assert_eq!(compensations(&error), [("booked", true), ("charged", true)]);
    let releases: Vec<String> = what_ran("t-5/booked")
        .into_iter()
        .filter(|(what, _)| what == "release")
        .map(|(_, key)| key)
        .collect();
    assert_eq!(
        releases,
        [
            "t-5/booked/reserved:compensate/1",
            "t-5/booked/reserved:compensate/1"
        ],
        "the release runs again with the same key"
    );
    assert_eq!(names("t-5"), ["charge", "pay", "refund"]);
    assert_eq!(
        status(&store, "t-5/booked").await,
        Some(RunStatus::Cancelled)
    );
}

/// A distributed parent that compensates: a worker that knows both workflows decides the
/// parent and its child; the parent's compensation undoes the child (reopened, then driven by
/// whoever takes it: the parent's step or the worker), whose release runs once, in its own run.
#[tokio::test]
async fn a_distributed_parent_undoes_its_child() {
    let store = MemoryStore::new();
    let ended = flows::Trip::runner()
        .durable(&store, "t-7")
        .distributed()
        .submit(50)
        .await
        .expect("submitted");
    assert!(ended.is_unloaded(), "{ended:?}");
    let worker = flowdag::Worker::new(store.clone())
        .register::<flows::Trip>()
        .register::<flows::Book>()
        .poll_interval(Duration::from_millis(5));
    let done = {
        let store = store.clone();
        async move {
            loop {
                let parent = status(&store, "t-7").await;
                let child = status(&store, "t-7/booked").await;
                if parent == Some(RunStatus::Failed) && child == Some(RunStatus::Cancelled) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), worker.run(done))
        .await
        .expect("the worker ends the run within 20 s")
        .expect("the store answers");
    let outcome = resume::<flows::Trip, _>(&store, "t-7")
        .await
        .expect("reads the result");
    let error = outcome.result.expect_err("the payment is refused");
    assert_eq!(compensations(&error), [("booked", true), ("charged", true)]);
    let releases: Vec<(String, String)> = what_ran("t-7/booked")
        .into_iter()
        .filter(|(what, _)| what == "release")
        .collect();
    assert_eq!(
        releases,
        [(
            "release".to_owned(),
            "t-7/booked/reserved:compensate/1".to_owned()
        )],
        "the child's release ran once, in the child's run"
    );
}
