//! Durable nests: a `ForEach` and a `Loop` in a `#[flow(durable)]` workflow. Each instance's
//! steps get keys of their own (`{run}/ship[3]/shipped/1`); each instance's end is stored; a
//! run stopped midway and resumed does not run the instances that ended again (their ends come
//! from the store), runs those in flight again with the same keys, and goes on with a loop from
//! the iteration it was in (a resume loads the loop's last ended iteration alone, not those
//! before it); a source that yields other items after the stop is refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::durable::DurableError;
use flowdag::prelude::*;
use flowdag::store::{MemoryStore, Store};
use flowdag_sqlite::SqliteStore;

#[derive(Debug)]
struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the carrier refused the parcel")
    }
}

impl std::error::Error for Refused {}

/// The tests share the statics below: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every key a step saw, with how often.
static KEYS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

/// Line 2 waits for ever (the process is "killed" while it runs), once.
static HANG: AtomicBool = AtomicBool::new(false);

/// The calls of `ship`, all runs together.
static SHIPS: AtomicUsize = AtomicUsize::new(0);

fn seen() {
    let key = flowdag::attempt().map_or_else(|| "none".to_owned(), |a| a.key());
    *KEYS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default() += 1;
}

fn keys() -> BTreeMap<String, usize> {
    std::mem::take(&mut *KEYS.lock().unwrap_or_else(|p| p.into_inner()))
}

async fn charge(lines: u32) -> Result<u32, Refused> {
    seen();
    Ok(lines)
}

async fn ship(line: u32) -> Result<u32, Refused> {
    seen();
    SHIPS.fetch_add(1, Ordering::SeqCst);
    if line == 2 && HANG.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    match line {
        13 => Err(Refused),
        _ => Ok(line * 10),
    }
}

/// After the nests: in a distributed run, a task whose worker restores the nests' outputs.
async fn close(shipped: &[u32], polled: u32) -> Result<u32, Refused> {
    seen();
    Ok(shipped.len() as u32 + polled)
}

async fn poll(round: u32) -> Result<u32, Refused> {
    seen();
    Ok(round + 1)
}

workflow! {
    /// Charges, ships every line (at most two at a time), then polls three times.
    #[flow(durable)]
    Order(lines: u32) -> (Vec<u32>, u32) {
        Sequential {
            charged = Operation(charge(lines)),
            shipped = ForEach(line in 0..charged, max_concurrency = 2) {
                parcel = Operation(ship(line))
                => parcel
            },
            polled = Loop(max = 5, prev = last) {
                round = Operation(poll(last.copied().unwrap_or(0)))
                => round
            } until (round >= 3),
            closed = Operation(close(&shipped, polled)),
        }
        => (shipped.clone(), closed - shipped.len() as u32)
    }
}

workflow! {
    /// Ships every line, a refused one kept as a failure (`on_failure = collect`).
    #[flow(durable)]
    Collected(lines: Vec<u32>) -> Vec<Result<u32, String>> {
        shipped = ForEach(line in lines.clone(), on_failure = collect) {
            parcel = Operation(ship(line))
            => parcel
        }
        => shipped.iter().map(|r| r.as_ref().copied().map_err(|e| e.to_string())).collect()
    }
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flow-nests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

#[tokio::test(flavor = "current_thread")]
async fn every_instance_and_iteration_has_its_own_key() {
    let _serial = SERIAL.lock().await;
    keys();
    let store = MemoryStore::new();
    let (shipped, polled) = Order::runner()
        .durable(&store, "order-1")
        .execute(3)
        .await
        .expect("the store works")
        .result
        .expect("the order ships");
    assert_eq!(shipped, [0, 10, 20]);
    assert_eq!(polled, 3);
    let keys: Vec<String> = keys().into_keys().collect();
    assert_eq!(
        keys,
        [
            "order-1/charged/1",
            "order-1/closed/1",
            "order-1/polled@0/round/1",
            "order-1/polled@1/round/1",
            "order-1/polled@2/round/1",
            "order-1/shipped[0]/parcel/1",
            "order-1/shipped[1]/parcel/1",
            "order-1/shipped[2]/parcel/1",
        ]
    );
    // Each instance's events are journaled with its path.
    let events = store.events("order-1", 0).await.expect("reads");
    let parcel_3: Vec<(String, u32)> = events
        .iter()
        .filter(|e| {
            e.path.as_ref().map(ToString::to_string).as_deref() == Some("shipped[2]")
                && e.node_name.as_deref() == Some("parcel")
        })
        .map(|e| (e.kind.clone(), e.attempt))
        .collect();
    assert_eq!(
        parcel_3,
        [("Requested".to_owned(), 1), ("Completed".to_owned(), 1)]
    );
    assert!(
        events.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "the journal is numbered without a gap"
    );
    // Each instance's end is stored under its record.
    let data = store.run_data("order-1").await.expect("reads");
    let mut instances: Vec<&str> = data
        .outputs
        .iter()
        .map(|o| o.instance.as_str())
        .filter(|i| !i.is_empty())
        .collect();
    instances.sort_unstable();
    assert_eq!(
        instances,
        [
            "polled@0",
            "polled@1",
            "polled@2",
            "shipped[0]",
            "shipped[1]",
            "shipped[2]"
        ]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_stopped_midway_runs_only_what_had_not_ended() {
    let _serial = SERIAL.lock().await;
    keys();
    let path = temp("stopped.db");
    let store = SqliteStore::open(&path).expect("opens");
    // Line 2 hangs: lines 0 and 1 end (two at a time), 2 runs, 3 and 4 end in the other
    // place. The process stops there.
    HANG.store(true, Ordering::SeqCst);
    let run = Order::runner().durable(&store, "order-2").execute(5);
    let stopped = tokio::time::timeout(Duration::from_millis(500), run).await;
    assert!(stopped.is_err(), "the run was stopped while line 2 ran");
    drop(store);
    let before = keys();
    assert_eq!(before.get("order-2/shipped[2]/parcel/1"), Some(&1));
    assert_eq!(before.get("order-2/shipped[3]/parcel/1"), Some(&1));
    assert_eq!(before.get("order-2/shipped[4]/parcel/1"), Some(&1));
    assert_eq!(before.get("order-2/polled@0/round/1"), None);

    let store = SqliteStore::open(&path).expect("opens again");
    SHIPS.store(0, Ordering::SeqCst);
    let (shipped, polled) = Order::resume(&store, "order-2")
        .await
        .expect("resumes")
        .result
        .expect("ships");
    assert_eq!(shipped, [0, 10, 20, 30, 40]);
    assert_eq!(polled, 3);
    let after = keys();
    // Lines 0, 1, 3 and 4 ended before the stop: not shipped again. Line 2 was in flight: it
    // runs again, with its key. The loop runs from its first iteration.
    assert_eq!(SHIPS.load(Ordering::SeqCst), 1, "{after:?}");
    assert_eq!(after.get("order-2/shipped[2]/parcel/1"), Some(&1));
    assert_eq!(after.get("order-2/polled@0/round/1"), Some(&1));
    assert_eq!(after.get("order-2/charged/1"), None, "charged once");
}

#[tokio::test(flavor = "current_thread")]
async fn failures_collected_are_kept_across_a_resume() {
    let _serial = SERIAL.lock().await;
    keys();
    let store = MemoryStore::new();
    let first = Collected::runner()
        .durable(&store, "collected-1")
        .execute(vec![1, 13, 2])
        .await
        .expect("the store works")
        .result
        .expect("a collecting ForEach succeeds");
    assert_eq!(first.len(), 3);
    assert_eq!(first[0], Ok(10));
    assert!(
        first[1]
            .as_ref()
            .is_err_and(|e| e.contains("`shipped[1]`") && e.contains("`parcel`")),
        "{first:?}"
    );
    // The finished run gives the same output again from the store, errors included.
    let again = Collected::resume(&store, "collected-1")
        .await
        .expect("resumes")
        .result
        .expect("the same result");
    assert_eq!(again, first);
}

#[tokio::test(flavor = "current_thread")]
async fn a_source_that_changed_is_refused() {
    let _serial = SERIAL.lock().await;
    let path = temp("changed.db");
    let store = SqliteStore::open(&path).expect("opens");
    HANG.store(true, Ordering::SeqCst);
    let run = Collected::runner()
        .durable(&store, "changed-1")
        .execute(vec![1, 5, 2]);
    let stopped = tokio::time::timeout(Duration::from_millis(500), run).await;
    assert!(stopped.is_err(), "the run was stopped while line 2 ran");
    drop(store);
    // Another process changes the stored input's line 1 behind the run's back: the same
    // workflow reads the lines from it, so instance 1's item is not the one it ended with.
    let db = rusqlite_update(&path);
    assert_eq!(db, 1, "the input was rewritten");
    let store = SqliteStore::open(&path).expect("opens again");
    let error = Collected::resume(&store, "changed-1")
        .await
        .expect_err("the changed item is refused");
    match &error {
        DurableError::Instance {
            instance, reason, ..
        } => {
            assert_eq!(instance, "shipped[1]");
            assert!(reason.contains("source"), "{reason}");
        }
        other => panic!("expected an instance error, got {other}"),
    }
}

/// Rewrites the stored input of `changed-1` (`[1,5,2]` → `[1,6,2]`), as a process that
/// edits the store would; returns the rows changed.
fn rusqlite_update(path: &std::path::Path) -> usize {
    let db = rusqlite::Connection::open(path).expect("opens the file");
    db.execute(
        "UPDATE runs SET input = CAST('[1,6,2]' AS BLOB) WHERE id = 'changed-1'",
        [],
    )
    .expect("updates")
}

#[tokio::test(flavor = "current_thread")]
async fn a_distributed_run_with_nests_finishes() {
    let _serial = SERIAL.lock().await;
    keys();
    let store = MemoryStore::new();
    Order::runner()
        .durable(&store, "order-d")
        .distributed()
        .submit(4)
        .await
        .expect("submitted");
    let worker = flowdag::Worker::new(store.clone())
        .register::<Order>()
        .poll_interval(Duration::from_millis(2));
    let finished = async {
        for _ in 0..2_000 {
            let runs = store
                .list_runs(&flowdag::store::RunFilter::default())
                .await
                .expect("lists");
            if runs.iter().all(|r| r.status.is_finished()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    worker.run(finished).await.expect("the worker runs");
    let (shipped, polled) = Order::resume(&store, "order-d")
        .await
        .expect("finished")
        .result
        .expect("shipped");
    assert_eq!(shipped, [0, 10, 20, 30]);
    assert_eq!(polled, 3);
    let keys = keys();
    assert_eq!(
        keys.get("order-d/shipped[3]/parcel/1"),
        Some(&1),
        "{keys:?}"
    );
}

/// The started, completed and failed iterations in the report of `Counter`'s loop.
fn counted(report: &flowdag::Report) -> (u64, u64, u64) {
    let nest = report
        .nests()
        .iter()
        .find(|n| n.node == "counted")
        .expect("the loop's summary");
    (nest.started, nest.completed, nest.failed)
}

/// The round of `Counter` that waits for ever, once (`u32::MAX`: none).
static HANG_ROUND: AtomicU32 = AtomicU32::new(u32::MAX);

async fn count(round: u32) -> Result<u32, Refused> {
    seen();
    if HANG_ROUND
        .compare_exchange(round, u32::MAX, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        std::future::pending::<()>().await;
    }
    Ok(round + 1)
}

/// Runs `Counter` as run `id` of the store at `path` until it stops in round `hang`
/// (resuming it when `resume`).
async fn stop_counter(path: &std::path::Path, id: &str, hang: u32, resume: bool) {
    let store = SqliteStore::open(path).expect("opens");
    HANG_ROUND.store(hang, Ordering::SeqCst);
    let stopped = match resume {
        false => {
            let run = Counter::runner().durable(&store, id).execute(0);
            tokio::time::timeout(Duration::from_millis(500), run)
                .await
                .is_err()
        }
        true => tokio::time::timeout(Duration::from_millis(500), Counter::resume(&store, id))
            .await
            .is_err(),
    };
    assert!(stopped, "the run was stopped in round {hang}");
}

workflow! {
    /// Counts to seven, one round per iteration.
    #[flow(durable)]
    Counter(start: u32) -> u32 {
        counted = Loop(max = 20, prev = last) {
            round = Operation(count(last.copied().unwrap_or(start)))
            => round
        } until (round >= 7)
        => counted
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_resumed_loop_loads_its_last_iteration_alone_and_goes_on_from_it() {
    let _serial = SERIAL.lock().await;
    keys();
    let path = temp("counter.db");
    // Rounds 0 to 3 end; round 4 runs when the process stops.
    stop_counter(&path, "count-1", 4, false).await;
    let before = keys();
    assert_eq!(before.get("count-1/counted@3/round/1"), Some(&1));
    assert_eq!(before.get("count-1/counted@4/round/1"), Some(&1));

    let store = SqliteStore::open(&path).expect("opens again");
    // What a resume reads: the run's own events and the last iteration's end; every end
    // stays stored for those who read the run.
    let loaded = store
        .load_run(
            "count-1",
            &flowdag::store::Owner::new("reader"),
            Duration::from_millis(1),
        )
        .await
        .expect("loads");
    let ends: Vec<&str> = loaded.outputs.iter().map(|o| o.instance.as_str()).collect();
    assert_eq!(
        ends,
        ["counted@3"],
        "only the last iteration's end is loaded"
    );
    assert!(loaded.events.iter().all(|e| e.path.is_none()));
    let journal = store.events("count-1", 0).await.expect("reads");
    assert!(journal.iter().any(|e| e.path.is_some()));
    assert_eq!(loaded.next_seq, journal.len() as u64);
    let data = store.run_data("count-1").await.expect("reads");
    let mut stored: Vec<&str> = data.outputs.iter().map(|o| o.instance.as_str()).collect();
    stored.sort_unstable();
    assert_eq!(stored, ["counted@0", "counted@1", "counted@2", "counted@3"]);
    tokio::time::sleep(Duration::from_millis(5)).await;

    let outcome = Counter::resume(&store, "count-1").await.expect("resumes");
    assert_eq!(outcome.result.expect("counts"), 7);
    let after = keys();
    // Rounds 0 to 3 are not run again; round 4 runs again with its key, then 5 and 6.
    for round in 0..4 {
        assert_eq!(after.get(&format!("count-1/counted@{round}/round/1")), None);
    }
    for round in 4..7 {
        assert_eq!(
            after.get(&format!("count-1/counted@{round}/round/1")),
            Some(&1),
            "{after:?}"
        );
    }
    // The report counts every iteration, those of the earlier process included.
    assert_eq!(counted(&outcome.report), (7, 7, 0));

    // The finished run replays the same way.
    let replayed = Counter::resume(&store, "count-1").await.expect("replays");
    assert_eq!(replayed.result.expect("counts"), 7);
    assert_eq!(counted(&replayed.report), (7, 7, 0));
    assert!(keys().is_empty(), "a replay runs nothing");
}

/// A run that was in a loop when its store was upgraded keeps every end it stored before (none
/// was superseded then); the ends after are superseded one by one. A later resume goes on from
/// the last iteration, not from the first: the iterations between are neither loaded nor run
/// again.
#[tokio::test(flavor = "current_thread")]
async fn a_loop_begun_before_its_store_superseded_ends_resumes_from_its_last_iteration() {
    let _serial = SERIAL.lock().await;
    keys();
    let path = temp("counter-upgraded.db");
    // Rounds 0 to 2 end, round 3 runs when the process stops.
    stop_counter(&path, "count-2", 3, false).await;
    // As a store of the version before would have them: every end live.
    let conn = rusqlite::Connection::open(&path).expect("opens the file");
    conn.execute("UPDATE outputs SET superseded = 0", [])
        .expect("unmarks");
    drop(conn);
    // Resumed: rounds 0 to 2 restored, 3 runs again and 4 runs; stopped in round 5. Ends
    // live now: 0 and 1 (from before), 4 (2 and 3 superseded by 3 and 4).
    stop_counter(&path, "count-2", 5, true).await;
    keys();

    let store = SqliteStore::open(&path).expect("opens again");
    let outcome = Counter::resume(&store, "count-2").await.expect("resumes");
    assert_eq!(outcome.result.expect("counts"), 7);
    let after = keys();
    for round in 0..5 {
        assert_eq!(
            after.get(&format!("count-2/counted@{round}/round/1")),
            None,
            "round {round} ran again: {after:?}"
        );
    }
    assert_eq!(after.get("count-2/counted@5/round/1"), Some(&1));
    assert_eq!(after.get("count-2/counted@6/round/1"), Some(&1));
    assert_eq!(counted(&outcome.report), (7, 7, 0));
    // Replayed, the finished run counts the same.
    let replayed = Counter::resume(&store, "count-2").await.expect("replays");
    assert_eq!(counted(&replayed.report), (7, 7, 0));
}
