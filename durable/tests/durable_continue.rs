//! Continue as new: a workflow whose output is `Continue::Again(input)` ends its generation and
//! starts again under the same id with that input and an empty journal; the run's future goes
//! on through the generations and gives the last one's `Done`. The ended generations are kept
//! as runs `{id}~{n}` with the status `continued`, or dropped; a generation whose journal is
//! whole but whose end was not settled (a crash between the two) is settled by the next
//! resume, without running anything again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::durable::{Continue, DurableError, resume};
use flowdag::store::{MemoryStore, RunFilter, RunStatus, Store, StoreError};

#[path = "common/ran.rs"]
mod ran;

#[path = "common/faulty.rs"]
mod faulty;

use faulty::{Faulty, take};

use ran::{Never, ran, what_ran};

async fn tick(n: u32) -> Result<u32, Never> {
    ran("tick");
    Ok(n + 1)
}

mod kept {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        /// Counts to 5, one generation per step, each generation kept.
        #[flow(durable, continue_as_new)]
        pub Counter(n: u32) -> Continue<u32, u32> {
            Sequential {
                next = Operation(tick(n)),
                Delay("1ms"),
            }
            => if next >= 5 { Continue::Done(next) } else { Continue::Again(next) }
        }
    }
}

mod dropped {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        /// As `kept::Counter`, its ended generations dropped.
        #[flow(durable, continue_as_new)]
        pub Counter(n: u32) -> Continue<u32, u32> {
            Sequential {
                next = Operation(tick(n)),
                Delay("1ms"),
            }
            => if next >= 5 { Continue::Done(next) } else { Continue::AgainDropping(next) }
        }
    }
}

async fn runs(store: &dyn Store) -> Vec<(String, RunStatus)> {
    let mut runs: Vec<(String, RunStatus)> = store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .map(|r| (r.id, r.status))
        .collect();
    runs.sort_by(|a, b| a.0.cmp(&b.0));
    runs
}

/// Asserts what `store` holds after run `id` counted from 0 to 5 keeping its generations.
async fn assert_kept(store: &dyn Store, id: &str) {
    let mut expected: Vec<(String, RunStatus)> = (1..=4)
        .map(|n| (format!("{id}~{n}"), RunStatus::Continued))
        .collect();
    expected.push((id.to_owned(), RunStatus::Succeeded));
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(runs(store).await, expected);
    // Each generation's journal is its own: the live run holds only the last one's.
    let last = store.events(id, 0).await.expect("events");
    let first = store.events(&format!("{id}~1"), 0).await.expect("events");
    assert_eq!(last.len(), first.len(), "one generation's journal each");
    assert_eq!(last[0].seq, 0);
    let data = store.run_data(&format!("{id}~2")).await.expect("data");
    assert_eq!(data.input, b"1", "the second generation's input");
    assert_eq!(
        data.end.and_then(|e| e.result),
        Some(b"2".to_vec()),
        "the input it continued with"
    );
    let data = store.run_data(id).await.expect("data");
    assert_eq!(data.input, b"4", "the last generation's input");
}

#[tokio::test]
async fn a_run_goes_through_its_generations_each_kept() {
    let store = MemoryStore::new();
    let outcome = kept::Counter::runner()
        .durable(&store, "kept")
        .execute(0)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("done"), Continue::Done(5));
    assert_eq!(what_ran("kept"), ["tick"; 5]);
    assert_kept(&store, "kept").await;
    // Resumed once done, the run gives its result again, running nothing.
    let again = resume::<kept::Counter, _>(&store, "kept")
        .await
        .expect("resumes");
    assert_eq!(again.result.expect("done"), Continue::Done(5));
    // The same id and first input is the same run, in whatever generation.
    let same = kept::Counter::runner()
        .durable(&store, "kept")
        .execute(0)
        .await
        .expect("the same run");
    assert_eq!(same.result.expect("done"), Continue::Done(5));
    assert_eq!(what_ran("kept"), ["tick"; 5], "nothing ran again");
    // Another first input is another run.
    let other = kept::Counter::runner()
        .durable(&store, "kept")
        .execute(1)
        .await;
    assert!(
        matches!(other, Err(DurableError::RunExists { .. })),
        "{other:?}"
    );
}

#[tokio::test]
async fn a_run_on_sqlite_keeps_its_generations() {
    let dir = std::env::temp_dir().join(format!("flow-continue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let store = flowdag_sqlite::SqliteStore::open(dir.join("runs.db")).expect("opens");
    let outcome = kept::Counter::runner()
        .durable(&store, "on-sqlite")
        .execute(0)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("done"), Continue::Done(5));
    assert_eq!(what_ran("on-sqlite"), ["tick"; 5]);
    assert_kept(&store, "on-sqlite").await;
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn dropped_generations_leave_one_journal() {
    let store = MemoryStore::new();
    let outcome = dropped::Counter::runner()
        .durable(&store, "dropped")
        .execute(0)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("done"), Continue::Done(5));
    assert_eq!(what_ran("dropped"), ["tick"; 5]);
    assert_eq!(
        runs(&store).await,
        vec![("dropped".to_owned(), RunStatus::Succeeded)]
    );
    let single = MemoryStore::new();
    let _ = dropped::Counter::runner()
        .durable(&single, "one")
        .execute(4)
        .await
        .expect("one generation");
    let all = store.events("dropped", 0).await.expect("events").len();
    let one = single.events("one", 0).await.expect("events").len();
    assert_eq!(
        all, one,
        "the journal is one generation's, whatever their number"
    );
}

/// The process stops between a generation's last commit and its continuation: the run is
/// left `running` with its whole journal; a resume replays it (running nothing again), reads
/// the output and continues.
#[tokio::test]
async fn a_generation_stopped_before_it_continued_continues_on_resume() {
    let store = Faulty::new();
    store.fail_continue.store(1, Ordering::SeqCst);
    let stopped = kept::Counter::runner()
        .durable(&store, "stopped")
        .execute(0)
        .await;
    assert!(
        matches!(stopped, Err(DurableError::Store(StoreError::Closed))),
        "{stopped:?}"
    );
    assert_eq!(what_ran("stopped"), ["tick"], "the first generation ran");
    assert_eq!(
        runs(&store).await,
        vec![("stopped".to_owned(), RunStatus::Running)],
        "not settled"
    );
    let outcome = resume::<kept::Counter, _>(&store, "stopped")
        .await
        .expect("resumes");
    assert_eq!(outcome.result.expect("done"), Continue::Done(5));
    assert_eq!(
        what_ran("stopped"),
        ["tick"; 5],
        "the first generation's step did not run again"
    );
    assert_kept(&store, "stopped").await;
}

/// A generation that ends with `Done` is settled by the same rule: stopped before its
/// success was committed, it is `running` until a resume commits it, running nothing.
#[tokio::test]
async fn a_last_generation_stopped_before_it_was_settled_succeeds_on_resume() {
    // Its settling commit (a success with no event) fails once.
    let settle = Arc::new(AtomicUsize::new(1));
    let store = Faulty::new().failing(move |_, batch| {
        batch.events.is_empty() && batch.status == Some(RunStatus::Succeeded) && take(&settle)
    });
    let stopped = kept::Counter::runner()
        .durable(&store, "four")
        .execute(4)
        .await;
    assert!(
        matches!(stopped, Err(DurableError::Store(StoreError::Closed))),
        "{stopped:?}"
    );
    assert_eq!(
        runs(&store).await,
        vec![("four".to_owned(), RunStatus::Running)],
        "not settled"
    );
    let done = resume::<kept::Counter, _>(&store, "four")
        .await
        .expect("resumes");
    assert_eq!(done.result.expect("done"), Continue::Done(5));
    assert_eq!(what_ran("four"), ["tick"], "nothing ran again");
    assert_eq!(
        runs(&store).await,
        vec![("four".to_owned(), RunStatus::Succeeded)]
    );
}

mod waiting {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        /// As `kept::Counter`, with a wait long enough to be unloaded in each generation.
        #[flow(durable, continue_as_new)]
        pub Counter(n: u32) -> Continue<u32, u32> {
            Sequential {
                next = Operation(tick(n)),
                Delay("30ms"),
            }
            => if next >= 5 { Continue::Done(next) } else { Continue::Again(next) }
        }
    }
}

/// Runs `worker` until run `id` has the status `succeeded` (at most 20 s), then checks that it
/// counted to 5 through its generations, each kept.
async fn worked_off(store: &MemoryStore, id: &str, worker: flowdag::Worker<MemoryStore>) {
    let done = async {
        loop {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs
                .iter()
                .any(|r| r.id == id && r.status == RunStatus::Succeeded)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), worker.run(done))
        .await
        .expect("the worker finishes the run within 20 s")
        .expect("the store answers");
    assert_eq!(what_ran(id), ["tick"; 5]);
    assert_kept(store, id).await;
}

/// A run unloaded while it waits is continued by a worker: every generation is picked up when
/// its timer is due, each ended one kept.
#[tokio::test]
async fn a_worker_takes_a_run_through_its_generations() {
    let store = MemoryStore::new();
    let ended = waiting::Counter::runner()
        .durable(&store, "by-worker")
        .unload_when_waiting(Duration::ZERO)
        .execute(0)
        .await
        .expect("starts");
    assert!(ended.is_unloaded(), "{ended:?}");
    let worker = flowdag::Worker::new(store.clone())
        .register::<waiting::Counter>()
        .poll_interval(Duration::from_millis(5));
    worked_off(&store, "by-worker", worker).await;
}

/// A distributed run: its operations are tasks, its generations continued by the worker that
/// decides it.
#[tokio::test]
async fn a_distributed_run_continues_as_new() {
    let store = MemoryStore::new();
    let ended = kept::Counter::runner()
        .durable(&store, "spread")
        .distributed()
        .submit(0)
        .await
        .expect("submitted");
    assert!(ended.is_unloaded(), "{ended:?}");
    let worker = flowdag::Worker::new(store.clone())
        .register::<kept::Counter>()
        .poll_interval(Duration::from_millis(5));
    worked_off(&store, "spread", worker).await;
    let done = resume::<kept::Counter, _>(&store, "spread")
        .await
        .expect("reads the result");
    assert_eq!(done.result.expect("done"), Continue::Done(5));
}
