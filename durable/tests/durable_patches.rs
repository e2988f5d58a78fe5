//! Version markers: `Patched("id") { new } else { old }` lets one build run the old path for
//! the runs that started before the marker was written and the new path for the others; the
//! marker is removed once no old run is left (`runs_without_patch` tells when), and the runs
//! that started with it go on without it.

use std::time::Duration;

use flowdag::durable::{DurableError, GraphChange, resume, resume_or_unload, runs_without_patch};
use flowdag::store::{MemoryStore, RunFilter, RunStatus, Store};

#[path = "common/ran.rs"]
mod ran;

use ran::{Never, ran, what_ran};

async fn reserve(order: u64) -> Result<u64, Never> {
    ran("reserve");
    Ok(order)
}

async fn ship(stock: u64) -> Result<u64, Never> {
    ran("ship");
    Ok(stock + 1)
}

async fn ship_faster(stock: u64) -> Result<u64, Never> {
    ran("ship_faster");
    Ok(stock + 100)
}

async fn notify(shipped: u64) -> Result<u64, Never> {
    ran("notify");
    Ok(shipped * 10)
}

/// The first version: reserve, ship, wait, tell.
mod v1 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                shipped = Operation(ship(stock)),
                Delay("150ms"),
                told = Operation(notify(shipped)),
            }
            => told
        }
    }
}

/// Shipping changes for new runs; the runs started before keep the old way.
mod v2 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                Patched("fast-ship") {
                    fast = Operation(ship_faster(stock)),
                } else {
                    shipped = Operation(ship(stock)),
                },
                Delay("150ms"),
                told = Operation(notify(*fast.or(shipped).unwrap_or(&0))),
            }
            => told
        }
    }
}

/// `shipped`, which old runs have run, moved into the marker's new branch: refused for them.
mod moved_in {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                Patched("fast-ship") {
                    shipped = Operation(ship(stock)),
                } else {
                    fast = Operation(ship_faster(stock)),
                },
                Delay("150ms"),
                told = Operation(notify(*fast.or(shipped).unwrap_or(&0))),
            }
            => told
        }
    }
}

/// No old run is left: the marker goes, the new path stays.
mod v3 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                fast = Operation(ship_faster(stock)),
                Delay("150ms"),
                told = Operation(notify(fast)),
            }
            => told
        }
    }
}

fn unfinished(workflow: &str) -> RunFilter {
    RunFilter {
        workflow: Some(workflow.to_owned()),
        statuses: vec![
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Compensating,
        ],
        ..RunFilter::default()
    }
}

/// A run of `version`, unloaded while it waits.
macro_rules! waiting {
    ($version:ty, $store:expr, $id:expr) => {{
        let ended = <$version>::runner()
            .durable($store, $id)
            .unload_when_waiting(Duration::ZERO)
            .execute(1)
            .await
            .expect("unloads");
        assert!(ended.is_unloaded());
    }};
}

/// An old run (started by the first version, past the marker's place) takes the old path
/// under the marker's build, and replays; a new run takes the new path; the query names the
/// old run until it is done; then the marker is removed and the new run goes on without it.
#[tokio::test]
async fn old_runs_take_the_old_path_and_new_runs_the_new() {
    let store = MemoryStore::new();
    waiting!(v1::Order, &store, "old");
    assert_eq!(what_ran("old"), vec!["reserve", "ship"]);

    waiting!(v2::Order, &store, "new");
    assert_eq!(what_ran("new"), vec!["reserve", "ship_faster"]);
    let old: Vec<String> = runs_without_patch(&store, &unfinished("Order"), "fast-ship")
        .await
        .expect("lists")
        .into_iter()
        .map(|run| run.id)
        .collect();
    assert_eq!(
        old,
        vec!["old"],
        "the old run is the only one without the marker"
    );

    tokio::time::sleep(Duration::from_millis(200)).await;
    let outcome = resume::<v2::Order, _>(&store, "old")
        .await
        .expect("the marker's build goes on with the old run");
    assert_eq!(
        outcome.into_result().expect("succeeds"),
        20,
        "ship(1) = 2, × 10"
    );
    assert_eq!(what_ran("old"), vec!["reserve", "ship", "notify"]);
    // The marker's decision is not journaled: the old run's journal names only its steps.
    let events = store.events("old", 0).await.expect("reads");
    assert!(
        events.iter().all(|e| e
            .node_name
            .as_deref()
            .is_none_or(|n| n != "fast" && !n.starts_with("patched:"))),
        "{events:?}"
    );
    let again = resume::<v2::Order, _>(&store, "old")
        .await
        .expect("the finished old run replays");
    assert_eq!(again.into_result().expect("succeeds"), 20);
    assert!(
        runs_without_patch(&store, &unfinished("Order"), "fast-ship")
            .await
            .expect("lists")
            .is_empty(),
        "no old run is left: the marker can go"
    );

    let outcome = resume::<v3::Order, _>(&store, "new")
        .await
        .expect("the run that started with the marker goes on without it");
    assert_eq!(
        outcome.into_result().expect("succeeds"),
        1010,
        "ship_faster(1) = 101, × 10"
    );
    assert_eq!(what_ran("new"), vec!["reserve", "ship_faster", "notify"]);
    let again = resume::<v3::Order, _>(&store, "new")
        .await
        .expect("the finished run replays");
    assert_eq!(again.into_result().expect("succeeds"), 1010);
}

/// A run that takes the old path refuses the build without the marker: its step is gone and
/// the new one would have run already.
#[tokio::test]
async fn removing_the_marker_while_an_old_run_is_left_is_refused() {
    let store = MemoryStore::new();
    waiting!(v1::Order, &store, "left");
    let err = resume_or_unload::<v3::Order, _>(&store, "left", Duration::ZERO)
        .await
        .expect_err("`shipped` ran and is gone");
    let DurableError::GraphChanged { changes, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, GraphChange::Removed(node) if node == "shipped")),
        "{changes:?}"
    );
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, GraphChange::Added(node) if node == "fast")),
        "{changes:?}"
    );
}

/// A step an old run has run, moved into a marker's new branch (which the old run does not
/// take), refuses the old run: its events would meet no step.
#[tokio::test]
async fn a_started_step_moved_into_the_new_branch_is_refused() {
    let store = MemoryStore::new();
    waiting!(v1::Order, &store, "moved");
    let err = resume_or_unload::<moved_in::Order, _>(&store, "moved", Duration::ZERO)
        .await
        .expect_err("`shipped` ran and is now on a path the run does not take");
    let DurableError::GraphChanged { changes, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, GraphChange::EdgesChanged { node, .. } if node == "shipped")),
        "{changes:?}"
    );
}

/// Outside a durable run the marker takes its new path.
#[tokio::test]
async fn a_plain_run_takes_the_new_path() {
    let outcome = v2::Order::runner().execute(1).await;
    assert_eq!(outcome.into_result().expect("succeeds"), 1010);
}
