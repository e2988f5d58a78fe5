//! Operating durable runs from outside them: cancel, terminate, redrive and delete, on a run
//! that a process drives and on one that nobody holds; and a run that this process cannot run
//! (no tokio time driver) left as it was, to be resumed where it can.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use flowdag::durable::{
    DurableError, Stop, cancel_run, delete_runs, redrive_run, resume, send_signal, terminate_run,
};
use flowdag::prelude::*;
use flowdag::store::{
    MemoryStore, Owner, RunFilter, RunStatus, RunSummary, Store, StoreError, StoredEvent,
};
use flowdag_sqlite::SqliteStore;

/// What the steps did, by test (each test uses its own run ids): the attempt keys of every
/// execution, in order.
static KEYS: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());
/// How many times the next attempts of `flaky` fail, by run.
static FAILS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());
/// The runs whose `slow` has started (and waits for a long time).
static STARTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn set_fails(run: &str, n: u32) {
    FAILS
        .lock()
        .expect("not poisoned")
        .insert(run.to_owned(), n);
}

fn run_of_attempt() -> String {
    flowdag::attempt().map_or_else(String::new, |a| a.run().to_owned())
}

fn record(what: &str) {
    let Some(attempt) = flowdag::attempt() else {
        return;
    };
    let key = attempt.key();
    KEYS.lock()
        .expect("not poisoned")
        .entry(attempt.run().to_owned())
        .or_default()
        .push(format!("{what} {key}"));
}

fn keys(run: &str) -> Vec<String> {
    KEYS.lock()
        .expect("not poisoned")
        .get(run)
        .cloned()
        .unwrap_or_default()
}

/// The error of `flaky` while its service is down.
#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the service is down")
    }
}

impl std::error::Error for Down {}

async fn fetch(n: u64) -> Result<u64, Down> {
    record("fetch");
    Ok(n)
}

async fn flaky(n: u64) -> Result<u64, Down> {
    record("flaky");
    let run = run_of_attempt();
    let failing = {
        let mut fails = FAILS.lock().expect("not poisoned");
        match fails.get_mut(&run) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    };
    match failing {
        true => Err(Down),
        false => Ok(n + 1),
    }
}

async fn slow(n: u64) -> Result<u64, Down> {
    record("slow");
    STARTED
        .lock()
        .expect("not poisoned")
        .insert(run_of_attempt());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(n)
}

/// Completes after a while: long after `flaky` failed beside it.
async fn late(n: u64) -> Result<u64, Down> {
    record("late");
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(n * 10)
}

async fn add(a: u64, b: u64) -> Result<u64, Down> {
    record("add");
    Ok(a + b)
}

/// The runs whose `breaks` has failed once (it fails the first time in each run).
static BROKE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

async fn breaks(n: u64) -> Result<u64, Down> {
    record("breaks");
    match BROKE.lock().expect("not poisoned").insert(run_of_attempt()) {
        true => Err(Down),
        false => Ok(n),
    }
}

async fn pair(a: Option<&u64>, b: Option<&u64>) -> Result<u64, Down> {
    record("pair");
    Ok(a.copied().unwrap_or(0) + b.copied().unwrap_or(0))
}

async fn undo(n: &u64) -> Result<(), Down> {
    record(&format!("undo {n}"));
    Ok(())
}

workflow! {
    #[flow(durable)]
    Fragile(n: u64) -> u64 {
        Sequential {
            fetched = Operation(fetch(n)),
            tried = Operation(flaky(fetched), retries = 1),
        }
        => tried
    }
}

workflow! {
    #[flow(durable)]
    Held(n: u64) -> u64 {
        Sequential {
            fetched = Operation(fetch(n), compensate = undo(&fetched)),
            waited = Operation(slow(fetched)),
        }
        => waited
    }
}

workflow! {
    #[flow(durable)]
    Sleepy(n: u64) -> u64 {
        Sequential {
            fetched = Operation(fetch(n), compensate = undo(&fetched)),
            Delay("1h"),
            tried = Operation(flaky(fetched)),
        }
        => tried
    }
}

workflow! {
    #[flow(durable)]
    Backoff(n: u64) -> u64 {
        Sequential {
            tried = Operation(flaky(n), retries = 2, backoff = "10ms"),
        }
        => tried
    }
}

workflow! {
    #[flow(durable)]
    Branches(n: u64) -> u64 {
        Sequential {
            Parallel {
                tried = Operation(flaky(n)),
                Sequential {
                    waited = Operation(late(n)),
                    doubled = Operation(add(waited, waited)),
                },
            },
            total = Operation(add(tried, doubled)),
        }
        => total
    }
}

workflow! {
    #[flow(durable)]
    Signalled(n: u64) -> u64 {
        Sequential {
            Parallel {
                tried = Operation(flaky(n)),
                Sequential {
                    waited = Operation(late(n)),
                    got = Signal(go: u64),
                },
            },
            total = Operation(add(tried, got)),
        }
        => total
    }
}

workflow! {
    #[flow(durable)]
    Caught(n: u64) -> u64 {
        Sequential {
            f = Operation(flaky(n)),
            Conditional(f.is_ok()) {
                a = Operation(add(n, 100)),
            } else {
                b = Operation(add(n, 1000)),
            },
            x = Operation(pair(a, b)),
            y = Operation(breaks(x)),
        }
        => y
    }
}

async fn summary<S: Store>(store: &S, id: &str) -> RunSummary {
    let filter = RunFilter {
        id: Some(id.to_owned()),
        ..RunFilter::default()
    };
    store
        .list_runs(&filter)
        .await
        .expect("lists")
        .pop()
        .expect("the run exists")
}

async fn kinds<S: Store>(store: &S, id: &str) -> Vec<String> {
    store
        .events(id, 0)
        .await
        .expect("reads the journal")
        .into_iter()
        .filter(|e: &StoredEvent| e.path.is_none())
        .map(|e| match e.node_name {
            Some(node) => format!("{} {node}#{}", e.kind, e.attempt),
            None => e.kind,
        })
        .collect()
}

/// Waits (bounded) until `slow` has started in `run`.
async fn until_started(run: &str) {
    for _ in 0..2_000 {
        if STARTED.lock().expect("not poisoned").contains(run) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("`slow` never started");
}

/// A live run is cancelled at an operator's request: its running step is aborted, its
/// completed step is compensated, it ends `cancelled`; the journal has the request where the
/// run took it, and a resume of the finished run replays it to the same outcome.
#[tokio::test]
async fn a_live_run_is_cancelled_and_compensated_at_an_operators_request() {
    let store = MemoryStore::new();
    let run = tokio::spawn({
        let store = store.clone();
        async move {
            Held::runner()
                .durable(&store, "held-cancel")
                .request_poll(Duration::from_millis(10))
                .execute(7)
                .await
        }
    });
    until_started("held-cancel").await;
    let stop = cancel_run(&store, "held-cancel", Some("the order was withdrawn"))
        .await
        .expect("requested");
    assert!(
        matches!(&stop, Stop::Requested { holder: Some(_) }),
        "a live owner holds it: {stop:?}"
    );
    let outcome = run.await.expect("joins").expect("the run ends");
    let error = outcome.into_result().expect_err("cancelled");
    assert_eq!(
        error.cancel_reason(),
        Some(CancelReason::Requested),
        "{error}"
    );
    assert!(error.to_string().contains("operator"), "{error}");
    assert_eq!(
        keys("held-cancel"),
        vec![
            "fetch held-cancel/fetched/1",
            "slow held-cancel/waited/1",
            "undo 7 held-cancel/fetched:compensate/1",
        ]
    );
    assert_eq!(
        summary(&store, "held-cancel").await.status,
        RunStatus::Cancelled
    );
    let journal = kinds(&store, "held-cancel").await;
    let at = journal
        .iter()
        .position(|k| k == "CancelRequested")
        .expect("the request is journaled");
    assert_eq!(journal[at + 1], "Aborted waited#1", "{journal:?}");
    // Resuming the finished run replays it, the request included, to the same end.
    let again = resume::<Held, _>(&store, "held-cancel")
        .await
        .expect("replays");
    assert_eq!(
        again.into_result().expect_err("cancelled").cancel_reason(),
        Some(CancelReason::Requested)
    );
    assert_eq!(keys("held-cancel").len(), 3, "nothing ran again");
}

/// A run unloaded while it waits for an hour is made due by a cancel request, and the next
/// process that loads it cancels it before anything else runs: its compensation runs once.
#[tokio::test]
async fn an_unloaded_run_is_cancelled_by_the_next_process_that_loads_it() {
    let store = MemoryStore::new();
    let ended = Sleepy::runner()
        .durable(&store, "sleepy-cancel")
        .unload_when_waiting(Duration::ZERO)
        .execute(3)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    let before = summary(&store, "sleepy-cancel").await;
    assert_eq!(before.status, RunStatus::Waiting);
    let stop = cancel_run(&store, "sleepy-cancel", None)
        .await
        .expect("requested");
    assert_eq!(stop, Stop::Requested { holder: None });
    let due = summary(&store, "sleepy-cancel").await;
    assert!(
        due.wake_at_ms < before.wake_at_ms,
        "the request makes the run due now: {:?} (was {:?})",
        due.wake_at_ms,
        before.wake_at_ms
    );
    let outcome = resume::<Sleepy, _>(&store, "sleepy-cancel")
        .await
        .expect("resumes");
    assert_eq!(
        outcome
            .into_result()
            .expect_err("cancelled")
            .cancel_reason(),
        Some(CancelReason::Requested)
    );
    assert_eq!(
        keys("sleepy-cancel"),
        vec![
            "fetch sleepy-cancel/fetched/1",
            "undo 3 sleepy-cancel/fetched:compensate/1"
        ]
    );
    assert_eq!(
        summary(&store, "sleepy-cancel").await.status,
        RunStatus::Cancelled
    );
    assert!(
        store
            .signals("sleepy-cancel", 0)
            .await
            .expect("reads")
            .is_empty(),
        "the request was consumed"
    );
}

/// A run nobody holds is terminated where the operator is: it ends `cancelled` at once, no
/// compensation runs, and a resume says it was terminated and runs nothing.
#[tokio::test]
async fn terminating_a_run_nobody_holds_ends_it_at_once_without_compensation() {
    let store = MemoryStore::new();
    let ended = Sleepy::runner()
        .durable(&store, "sleepy-terminate")
        .unload_when_waiting(Duration::ZERO)
        .execute(4)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    let stop = terminate_run(
        &store,
        "sleepy-terminate",
        Some("abandoned version"),
        &Owner::new("operator"),
    )
    .await
    .expect("terminates");
    assert_eq!(stop, Stop::Ended);
    assert_eq!(
        summary(&store, "sleepy-terminate").await.status,
        RunStatus::Cancelled
    );
    assert_eq!(
        kinds(&store, "sleepy-terminate")
            .await
            .last()
            .map(String::as_str),
        Some("Terminated")
    );
    let err = resume::<Sleepy, _>(&store, "sleepy-terminate")
        .await
        .expect_err("terminated");
    assert!(
        matches!(&err, DurableError::Terminated { reason: Some(r), .. } if r == "abandoned version"),
        "{err:?}"
    );
    assert_eq!(
        keys("sleepy-terminate"),
        vec!["fetch sleepy-terminate/fetched/1"]
    );
    let again = terminate_run(&store, "sleepy-terminate", None, &Owner::new("operator")).await;
    assert!(
        matches!(
            &again,
            Err(DurableError::Store(StoreError::Finished { .. }))
        ),
        "{again:?}"
    );
}

/// A live run is terminated by its owner at the operator's request: its caller gets
/// `Terminated`, no compensation runs.
#[tokio::test]
async fn a_live_run_is_terminated_by_its_owner_at_an_operators_request() {
    let store = MemoryStore::new();
    let run = tokio::spawn({
        let store = store.clone();
        async move {
            Held::runner()
                .durable(&store, "held-terminate")
                .request_poll(Duration::from_millis(10))
                .execute(5)
                .await
        }
    });
    until_started("held-terminate").await;
    let stop = terminate_run(&store, "held-terminate", None, &Owner::new("operator"))
        .await
        .expect("requested");
    assert!(
        matches!(&stop, Stop::Requested { holder: Some(_) }),
        "{stop:?}"
    );
    let err = run.await.expect("joins").expect_err("terminated");
    assert!(
        matches!(&err, DurableError::Terminated { reason: None, .. }),
        "{err:?}"
    );
    assert_eq!(
        summary(&store, "held-terminate").await.status,
        RunStatus::Cancelled
    );
    assert_eq!(
        keys("held-terminate"),
        vec![
            "fetch held-terminate/fetched/1",
            "slow held-terminate/waited/1"
        ]
    );
}

/// A failed run is redriven once the cause is fixed: the completed step keeps its output, the
/// failed one gets new attempts with new keys and its whole retry budget, and the run
/// succeeds; redriving a run that succeeded is refused.
#[tokio::test]
async fn a_redriven_run_keeps_its_completed_steps_and_retries_the_failed_one_with_new_keys() {
    let dir = std::env::temp_dir().join(format!("flow-redrive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let _ = std::fs::remove_file(&path);
    let store = SqliteStore::open(&path).expect("opens");
    set_fails("fragile-redrive", 2);
    let outcome = Fragile::runner()
        .durable(&store, "fragile-redrive")
        .execute(10)
        .await
        .expect("runs");
    assert!(outcome.into_result().is_err(), "both attempts fail");
    assert_eq!(
        summary(&store, "fragile-redrive").await.status,
        RunStatus::Failed
    );
    // The service is back after one more failure: a fresh retry budget (1 retry) covers it.
    set_fails("fragile-redrive", 1);
    let redriven = redrive_run(&store, "fragile-redrive")
        .await
        .expect("redrives");
    assert_eq!(redriven.failed, vec![("tried".to_owned(), 2)]);
    assert_eq!(redriven.run.status, RunStatus::Running);
    let outcome = resume::<Fragile, _>(&store, "fragile-redrive")
        .await
        .expect("resumes");
    assert_eq!(outcome.into_result().expect("succeeds"), 11);
    assert_eq!(
        keys("fragile-redrive"),
        vec![
            "fetch fragile-redrive/fetched/1",
            "flaky fragile-redrive/tried/1",
            "flaky fragile-redrive/tried/2",
            "flaky fragile-redrive/tried/3",
            "flaky fragile-redrive/tried/4",
        ]
    );
    assert_eq!(
        summary(&store, "fragile-redrive").await.status,
        RunStatus::Succeeded
    );
    // The redriven run replays to the same end.
    let again = resume::<Fragile, _>(&store, "fragile-redrive")
        .await
        .expect("replays");
    assert_eq!(again.into_result().expect("succeeds"), 11);
    assert_eq!(keys("fragile-redrive").len(), 5, "nothing ran again");
    let refused = redrive_run(&store, "fragile-redrive").await;
    assert!(
        matches!(
            &refused,
            Err(DurableError::Store(StoreError::WrongStatus {
                status: RunStatus::Succeeded,
                ..
            }))
        ),
        "{refused:?}"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A branch that went on after the failure (its steps completed after the failed one
/// failed) is not run again by a redrive: its steps take their stored outputs, and only the
/// failed step and what follows it run; a resume of the finished run replays it all.
#[tokio::test]
async fn a_redrive_keeps_the_steps_that_completed_after_the_failure() {
    let store = MemoryStore::new();
    let id = "branches-redrive";
    set_fails(id, 1);
    let outcome = Branches::runner()
        .durable(&store, id)
        .execute(2)
        .await
        .expect("runs");
    assert!(outcome.into_result().is_err(), "`tried` fails");
    let journal = kinds(&store, id).await;
    let failed = journal.iter().position(|k| k == "Failed tried#1");
    let completed = journal.iter().position(|k| k == "Completed doubled#1");
    assert!(
        failed.is_some() && completed > failed,
        "the other branch completed after the failure: {journal:?}"
    );
    redrive_run(&store, id).await.expect("redrives");
    let outcome = resume::<Branches, _>(&store, id).await.expect("resumes");
    assert_eq!(outcome.into_result().expect("succeeds"), 3 + 40);
    assert_eq!(
        keys(id),
        vec![
            format!("flaky {id}/tried/1"),
            format!("late {id}/waited/1"),
            format!("add {id}/doubled/1"),
            format!("flaky {id}/tried/2"),
            format!("add {id}/total/1"),
        ],
        "`waited` and `doubled` ran once"
    );
    let again = resume::<Branches, _>(&store, id).await.expect("replays");
    assert_eq!(again.into_result().expect("succeeds"), 43);
    assert_eq!(keys(id).len(), 5, "nothing ran again");
}

/// A `Signal` step that took its signal after the failure keeps it through a redrive: the
/// signal was consumed, and the redriven run does not wait for another.
#[tokio::test]
async fn a_redrive_keeps_a_signal_taken_after_the_failure() {
    let store = MemoryStore::new();
    let id = "signalled-redrive";
    set_fails(id, 1);
    let run = Signalled::runner()
        .durable(&store, id)
        .signal_poll(Duration::from_millis(5))
        .execute(5);
    // Sent while `late` runs: `got` takes it when it starts, after `tried` failed.
    let send = async {
        for _ in 0..400 {
            match send_signal(&store, id, Signalled::GO, 7).await {
                Err(DurableError::Store(StoreError::NotFound { .. })) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                sent => return sent.expect("sends"),
            }
        }
        panic!("the run was never stored");
    };
    let (outcome, _) = tokio::join!(run, send);
    let outcome = outcome.expect("runs");
    assert!(outcome.into_result().is_err(), "`tried` fails");
    let journal = kinds(&store, id).await;
    let failed = journal.iter().position(|k| k == "Failed tried#1");
    let got = journal.iter().position(|k| k == "Completed got#1");
    assert!(failed.is_some() && got > failed, "{journal:?}");
    redrive_run(&store, id).await.expect("redrives");
    let outcome = tokio::time::timeout(Duration::from_secs(30), resume::<Signalled, _>(&store, id))
        .await
        .expect("does not wait for another signal")
        .expect("resumes");
    assert_eq!(outcome.into_result().expect("succeeds"), 6 + 7);
    let late: Vec<String> = keys(id)
        .into_iter()
        .filter(|k| k.starts_with("late"))
        .collect();
    assert_eq!(late.len(), 1, "{late:?}");
}

/// A step that completed after the failure is not salvaged when a step before it runs
/// again: its inputs may differ. Here the failure sent a decision to its `else` branch; redriven,
/// the failed step succeeds, the decision takes the other branch, and the step after both
/// runs again on what that branch gave.
#[tokio::test]
async fn a_redrive_runs_again_a_step_whose_inputs_changed() {
    let store = MemoryStore::new();
    let id = "caught-redrive";
    set_fails(id, 1);
    let outcome = Caught::runner()
        .durable(&store, id)
        .execute(1)
        .await
        .expect("runs");
    assert!(outcome.into_result().is_err(), "`y` fails");
    let journal = kinds(&store, id).await;
    assert!(
        journal.iter().any(|k| k == "Completed x#1") && journal.iter().any(|k| k == "Failed f#1"),
        "`x` completed after `f` failed: {journal:?}"
    );
    redrive_run(&store, id).await.expect("redrives");
    let outcome = resume::<Caught, _>(&store, id).await.expect("resumes");
    // `f` succeeds now: `a` = 101 runs, `b` does not, and `x` adds them again.
    assert_eq!(outcome.into_result().expect("succeeds"), 101);
    let pairs = keys(id).iter().filter(|k| k.starts_with("pair")).count();
    assert_eq!(pairs, 2, "`x` ran again: {:?}", keys(id));
}

/// A run redriven twice: each redrive gives the failed step new attempts after its last one.
#[tokio::test]
async fn a_run_redriven_twice_numbers_its_attempts_on() {
    let store = MemoryStore::new();
    let id = "fragile-twice";
    set_fails(id, 2);
    let outcome = Fragile::runner()
        .durable(&store, id)
        .execute(1)
        .await
        .expect("runs");
    assert!(outcome.into_result().is_err());
    set_fails(id, 2);
    redrive_run(&store, id).await.expect("redrives");
    let outcome = resume::<Fragile, _>(&store, id).await.expect("resumes");
    assert!(outcome.into_result().is_err(), "fails again");
    let redriven = redrive_run(&store, id).await.expect("redrives again");
    assert_eq!(redriven.failed, vec![("tried".to_owned(), 4)]);
    let outcome = resume::<Fragile, _>(&store, id).await.expect("resumes");
    assert_eq!(outcome.into_result().expect("succeeds"), 2);
    let tried: Vec<String> = keys(id)
        .into_iter()
        .filter(|k| k.starts_with("flaky"))
        .collect();
    assert_eq!(
        tried,
        (1..=5)
            .map(|n| format!("flaky {id}/tried/{n}"))
            .collect::<Vec<_>>()
    );
}

/// A run whose compensations ran is not redriven (the steps they undid would not run again),
/// and nothing is written.
#[tokio::test]
async fn a_run_whose_compensations_ran_is_not_redriven() {
    let store = MemoryStore::new();
    let run = tokio::spawn({
        let store = store.clone();
        async move {
            Held::runner()
                .durable(&store, "held-redrive")
                .request_poll(Duration::from_millis(10))
                .execute(9)
                .await
        }
    });
    until_started("held-redrive").await;
    cancel_run(&store, "held-redrive", None)
        .await
        .expect("requested");
    let outcome = run.await.expect("joins").expect("ends");
    assert!(outcome.into_result().is_err());
    let refused = redrive_run(&store, "held-redrive").await;
    assert!(
        matches!(&refused, Err(DurableError::Redrive { why, .. }) if why.contains("compensations")),
        "{refused:?}"
    );
    assert_eq!(
        summary(&store, "held-redrive").await.status,
        RunStatus::Cancelled,
        "nothing was written"
    );
}

/// A run terminated while it waited is redriven: the step it waited in runs again (the
/// `Delay` waits anew), the completed one keeps its output.
#[tokio::test]
async fn a_run_terminated_while_it_waited_is_redriven_and_waits_again() {
    let store = MemoryStore::new();
    let id = "sleepy-redrive";
    let ended = Sleepy::runner()
        .durable(&store, id)
        .unload_when_waiting(Duration::ZERO)
        .execute(30)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    terminate_run(&store, id, None, &Owner::new("operator"))
        .await
        .expect("terminates");
    let redriven = redrive_run(&store, id).await.expect("redrives");
    assert!(redriven.failed.is_empty(), "{redriven:?}");
    let ended = flowdag::durable::resume_or_unload::<Sleepy, _>(&store, id, Duration::ZERO)
        .await
        .expect("resumes");
    assert!(ended.is_unloaded(), "waits for its hour again");
    assert_eq!(summary(&store, id).await.status, RunStatus::Waiting);
    assert_eq!(keys(id), vec![format!("fetch {id}/fetched/1")]);
}

/// `delete_runs` deletes the finished runs a filter selects, and never an unfinished one.
#[tokio::test]
async fn delete_runs_deletes_finished_runs_only() {
    let store = MemoryStore::new();
    for id in ["done-1", "done-2"] {
        Fragile::runner()
            .durable(&store, id)
            .execute(1)
            .await
            .expect("runs")
            .into_result()
            .expect("succeeds");
    }
    Sleepy::runner()
        .durable(&store, "waiting-1")
        .unload_when_waiting(Duration::ZERO)
        .execute(1)
        .await
        .expect("unloads");
    let unfinished = RunFilter {
        statuses: vec![RunStatus::Waiting],
        ..RunFilter::default()
    };
    let none = delete_runs(&store, &unfinished).await.expect("deletes");
    assert!(none.is_empty(), "an unfinished status selects nothing");
    let deleted = delete_runs(&store, &RunFilter::default())
        .await
        .expect("deletes");
    assert_eq!(deleted, vec!["done-1", "done-2"]);
    let left: Vec<String> = store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, vec!["waiting-1"]);
}

/// A run polled where no timer can be made (outside a tokio runtime) stops at its first
/// retry without writing a failure: it stays `running`, and a resume inside a runtime with
/// time finishes it.
#[test]
fn a_run_without_a_time_driver_stops_unwritten_and_resumes_where_time_is() {
    let store = MemoryStore::new();
    let id = "backoff-no-time";
    set_fails(id, 1);
    let err = futures::executor::block_on(Backoff::runner().durable(&store, id).execute(2))
        .expect_err("cannot retry without a timer");
    assert!(matches!(&err, DurableError::Environment { .. }), "{err:?}");
    assert!(err.to_string().contains("tokio runtime with time"), "{err}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        assert_eq!(summary(&store, id).await.status, RunStatus::Running);
        let outcome = resume::<Backoff, _>(&store, id).await.expect("resumes");
        assert_eq!(outcome.into_result().expect("succeeds"), 3);
    });
}

/// A run terminated by an operator loses its timers, its run deadline among them: redriven
/// after that deadline had passed, it gets its whole deadline again instead of being
/// cancelled at once.
#[tokio::test]
async fn a_terminated_run_keeps_no_timer_and_a_redrive_gets_its_whole_deadline() {
    let store = MemoryStore::new();
    let id = "deadline-redrive";
    let ended = Sleepy::runner()
        .deadline(Duration::from_millis(300))
        .durable(&store, id)
        .unload_when_waiting(Duration::ZERO)
        .execute(6)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    terminate_run(&store, id, None, &Owner::new("operator"))
        .await
        .expect("terminates");
    // The run's first deadline passes while it is terminated.
    tokio::time::sleep(Duration::from_millis(400)).await;
    redrive_run(&store, id).await.expect("redrives");
    let ended = flowdag::durable::resume_or_unload::<Sleepy, _>(&store, id, Duration::ZERO)
        .await
        .expect("resumes");
    assert!(
        ended.is_unloaded(),
        "the redriven run waits again, within a deadline of its own"
    );
}
