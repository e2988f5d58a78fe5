//! Changing a workflow while its runs are in flight: a change that cannot alter a run's past
//! (a step that has not started changed, a step added after the others) is taken without
//! ceremony by `resume` and by a `Worker`, and stored with the run; one that could (a started
//! step changed, a step removed) is refused, naming what changed.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use flowdag::Worker;
use flowdag::durable::{DurableError, GraphChange, graph_rows, resume, resume_or_unload};
use flowdag::store::{MemoryStore, RunFilter, RunStatus, RunSummary, Store};

/// What ran, by run.
static RAN: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

fn ran(what: &str) {
    if let Some(attempt) = flowdag::attempt() {
        RAN.lock()
            .expect("not poisoned")
            .entry(attempt.run().to_owned())
            .or_default()
            .push(what.to_owned());
    }
}

fn what_ran(run: &str) -> Vec<String> {
    RAN.lock()
        .expect("not poisoned")
        .get(run)
        .cloned()
        .unwrap_or_default()
}

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
    Ok(stock + 2)
}

async fn notify(shipped: u64) -> Result<u64, Never> {
    ran("notify");
    Ok(shipped * 10)
}

/// The first version: reserve, wait, ship.
mod v1 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                Delay("150ms"),
                shipped = Operation(ship(stock)),
            }
            => shipped
        }
    }
}

/// `shipped` (not started while the run waits) gets retries and calls another function.
mod shipping_changed {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                Delay("150ms"),
                shipped = Operation(ship_faster(stock), retries = 3),
            }
            => shipped
        }
    }
}

/// A step added after the others.
mod notify_added {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                Delay("150ms"),
                shipped = Operation(ship(stock)),
                told = Operation(notify(shipped)),
            }
            => told
        }
    }
}

/// `stock` (started: it completed before the run waited) gets retries.
mod reserve_changed {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order), retries = 2),
                Delay("150ms"),
                shipped = Operation(ship(stock)),
            }
            => shipped
        }
    }
}

/// The first version with `stock` retried three times within a timeout.
mod retried_3 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order), timeout = "5s", retries = 3),
                Delay("150ms"),
                shipped = Operation(ship(stock)),
            }
            => shipped
        }
    }
}

/// `stock` (started) retried four times.
mod retried_4 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order), timeout = "5s", retries = 4),
                Delay("150ms"),
                shipped = Operation(ship(stock)),
            }
            => shipped
        }
    }
}

/// `shipped` removed.
mod shipping_removed {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                Delay("150ms"),
            }
            => stock
        }
    }
}

async fn summary(store: &MemoryStore, id: &str) -> RunSummary {
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

/// A run of the first version, unloaded while it waits.
async fn waiting(store: &MemoryStore, id: &str) {
    let ended = v1::Order::runner()
        .durable(store, id)
        .unload_when_waiting(Duration::ZERO)
        .execute(1)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    assert_eq!(what_ran(id), vec!["reserve"]);
}

/// A step that has not started changed its policy and its call: the run goes on with the new
/// graph, which is stored with it.
#[tokio::test]
async fn a_change_to_a_step_not_started_is_taken_and_stored() {
    let store = MemoryStore::new();
    waiting(&store, "changed").await;
    let outcome = resume::<shipping_changed::Order, _>(&store, "changed")
        .await
        .expect("the change is compatible");
    assert_eq!(outcome.into_result().expect("succeeds"), 3);
    assert_eq!(what_ran("changed"), vec!["reserve", "ship_faster"]);
    let stored = summary(&store, "changed").await;
    assert_eq!(stored.status, RunStatus::Succeeded);
    assert_eq!(
        stored.graph_hash,
        graph_rows(&shipping_changed::Order::GRAPH).0,
        "the run has the new graph"
    );
}

/// A step added after the others runs when the run gets there.
#[tokio::test]
async fn a_step_added_after_the_others_runs_when_the_run_gets_there() {
    let store = MemoryStore::new();
    waiting(&store, "added").await;
    let outcome = resume::<notify_added::Order, _>(&store, "added")
        .await
        .expect("the change is compatible");
    assert_eq!(outcome.into_result().expect("succeeds"), 20);
    assert_eq!(what_ran("added"), vec!["reserve", "ship", "notify"]);
}

/// A change to a step that has started, and a step removed, are refused, naming the change;
/// nothing is written, and the first version's code still resumes the run.
#[tokio::test]
async fn a_change_that_could_alter_the_past_is_refused_naming_it() {
    let store = MemoryStore::new();
    waiting(&store, "refused").await;
    let before = summary(&store, "refused").await;
    let err = resume_or_unload::<reserve_changed::Order, _>(&store, "refused", Duration::ZERO)
        .await
        .expect_err("`stock` has started");
    let DurableError::GraphChanged { changes, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        matches!(&changes[..], [GraphChange::PolicyChanged { node, was, now }]
            if node == "stock" && was.is_empty() && now == "retries = 2"),
        "{changes:?}"
    );
    assert!(
        err.to_string()
            .contains("step `stock` changed its policy from the defaults to `retries = 2`"),
        "{err}"
    );
    let err = resume_or_unload::<shipping_removed::Order, _>(&store, "refused", Duration::ZERO)
        .await
        .expect_err("`shipped` was removed");
    assert!(err.to_string().contains("`shipped` was removed"), "{err}");
    let after = summary(&store, "refused").await;
    assert_eq!(
        (after.graph_hash, after.next_seq),
        (before.graph_hash, before.next_seq),
        "nothing was written"
    );
    let outcome = resume::<v1::Order, _>(&store, "refused")
        .await
        .expect("the first version resumes it");
    assert_eq!(outcome.into_result().expect("succeeds"), 2);
}

/// A started step whose settings changed (`retries = 3` to `retries = 4`) is refused, naming the
/// settings it had and has.
#[tokio::test]
async fn a_changed_policy_of_a_started_step_is_refused_with_both_values() {
    let store = MemoryStore::new();
    let ended = retried_3::Order::runner()
        .durable(&store, "retried")
        .unload_when_waiting(Duration::ZERO)
        .execute(1)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    let err = resume::<retried_4::Order, _>(&store, "retried")
        .await
        .expect_err("`stock` has started");
    let DurableError::GraphChanged { changes, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(
        changes,
        &[GraphChange::PolicyChanged {
            node: "stock".into(),
            was: "timeout = 5s, retries = 3".into(),
            now: "timeout = 5s, retries = 4".into(),
        }]
    );
    assert!(
        err.to_string().contains(
            "step `stock` changed its policy from `timeout = 5s, retries = 3` to `timeout = 5s, retries = 4`"
        ),
        "{err}"
    );
    let outcome = resume::<retried_3::Order, _>(&store, "retried")
        .await
        .expect("the first version resumes it");
    assert_eq!(outcome.into_result().expect("succeeds"), 2);
}

/// A worker with the new code picks up, at its first look, the due runs started with the old
/// graph: the compatible one goes on with its graph; the other is left as it was, its lease
/// given back, and not reported.
#[tokio::test]
async fn a_worker_with_the_new_code_takes_the_compatible_runs_of_the_old_graph() {
    let store = MemoryStore::new();
    waiting(&store, "old-1").await;
    // A worker takes the runs of another graph that are due: this one once its `Delay` is.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let worker = Worker::new(store.clone()).register::<shipping_changed::Order>();
    let resumed = worker.resume_due().await.expect("looks");
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].run, "old-1");
    assert!(resumed[0].result.is_ok(), "{:?}", resumed[0].result);
    assert_eq!(summary(&store, "old-1").await.status, RunStatus::Succeeded);
    assert_eq!(what_ran("old-1"), vec!["reserve", "ship_faster"]);

    waiting(&store, "old-2").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = summary(&store, "old-2").await;
    let worker = Worker::new(store.clone()).register::<reserve_changed::Order>();
    let resumed = worker.resume_due().await.expect("looks");
    assert!(
        resumed.is_empty(),
        "a run the worker cannot go on with is not its run: {resumed:?}"
    );
    let left = summary(&store, "old-2").await;
    assert_eq!(left.status, RunStatus::Waiting, "left as it was");
    assert_eq!(left.owner, None, "its lease given back");
    assert_eq!(left.version, before.version + 1, "it was looked at once");
}
