//! Changing a workflow while its runs are in flight: a change that cannot alter a run's past
//! (a step that has not started changed or removed, a step added where the run has not
//! reached, wherever it moves the steps after it) is taken without ceremony by `resume` and
//! by a `Worker`, and stored with the run; one that could (a started step changed or
//! removed, a step added where the run has passed) is refused, naming what changed.

use std::time::Duration;

use flowdag::Worker;
use flowdag::durable::{DurableError, GraphChange, graph_rows, resume, resume_or_unload};
use flowdag::store::{MemoryStore, RunFilter, RunStatus, RunSummary, Store};

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

/// `stock` (started) removed.
mod reserve_removed {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                Delay("150ms"),
                shipped = Operation(ship(order)),
            }
            => shipped
        }
    }
}

/// Two branches, each waiting; the second's `Delay` is the second in the graph's order.
mod branches {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Parallel {
                Sequential {
                    stock = Operation(reserve(order)),
                    Delay("150ms"),
                    shipped = Operation(ship(stock)),
                },
                Sequential {
                    Delay("250ms"),
                    told = Operation(notify(order)),
                },
            }
            => shipped + told
        }
    }
}

/// A step inserted after the first branch's `Delay`, where the run has not reached: every
/// step after it in the graph's order (the second branch's, which started) moves.
mod branches_inserted {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Parallel {
                Sequential {
                    stock = Operation(reserve(order)),
                    Delay("150ms"),
                    checked = Operation(notify(stock)),
                    shipped = Operation(ship(checked)),
                },
                Sequential {
                    Delay("250ms"),
                    told = Operation(notify(order)),
                },
            }
            => shipped + told
        }
    }
}

/// A step inserted after `stock`, which has completed: the run has passed where it would have
/// run.
mod reserve_followed {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Parallel {
                Sequential {
                    stock = Operation(reserve(order)),
                    checked = Operation(notify(stock)),
                    Delay("150ms"),
                    shipped = Operation(ship(checked)),
                },
                Sequential {
                    Delay("250ms"),
                    told = Operation(notify(order)),
                },
            }
            => shipped + told
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

/// `shipped` renamed `sent`.
mod shipping_renamed {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> u64 {
            Sequential {
                stock = Operation(reserve(order)),
                Delay("150ms"),
                sent = Operation(ship(stock)),
            }
            => sent
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

/// A change to a step that has started, and a started step removed, are refused, naming the
/// change; nothing is written, and the first version's code still resumes the run.
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
    let err = resume_or_unload::<reserve_removed::Order, _>(&store, "refused", Duration::ZERO)
        .await
        .expect_err("`stock` was removed");
    assert!(err.to_string().contains("`stock` was removed"), "{err}");
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

/// A finished run is never refused: a change to a step it ran (here `stock`'s retries) does
/// not stop its result being given again, by a replay that writes nothing.
#[tokio::test]
async fn a_finished_run_gives_its_result_under_a_changed_graph() {
    let store = MemoryStore::new();
    let outcome = v1::Order::runner()
        .durable(&store, "finished")
        .execute(1)
        .await
        .expect("runs");
    assert_eq!(outcome.into_result().expect("succeeds"), 2);
    let before = summary(&store, "finished").await;
    let again = resume::<reserve_changed::Order, _>(&store, "finished")
        .await
        .expect("a finished run is not refused");
    assert_eq!(again.into_result().expect("its result"), 2);
    let again = reserve_changed::Order::runner()
        .durable(&store, "finished")
        .execute(1)
        .await
        .expect("execute on its id gives its result too");
    assert_eq!(again.into_result().expect("its result"), 2);
    assert_eq!(
        what_ran("finished"),
        vec!["reserve", "ship"],
        "nothing ran again"
    );
    let after = summary(&store, "finished").await;
    assert_eq!(
        (after.graph_hash, after.next_seq, after.status),
        (before.graph_hash, before.next_seq, RunStatus::Succeeded),
        "nothing was written"
    );
}

/// A finished run whose step was renamed replays to `Diverged`, not to a result: the renamed
/// step's events are not the new step's.
#[tokio::test]
async fn a_finished_run_with_a_renamed_step_diverges() {
    let store = MemoryStore::new();
    let outcome = v1::Order::runner()
        .durable(&store, "renamed")
        .execute(1)
        .await
        .expect("runs");
    assert_eq!(outcome.into_result().expect("succeeds"), 2);
    let err = resume::<shipping_renamed::Order, _>(&store, "renamed")
        .await
        .expect_err("`sent` is not `shipped`");
    assert!(matches!(err, DurableError::Diverged { .. }), "{err:?}");
    assert_eq!(
        what_ran("renamed"),
        vec!["reserve", "ship"],
        "nothing ran again"
    );
}

/// A step that has not started is removed: the run goes on without it.
#[tokio::test]
async fn a_step_removed_before_it_started_is_not_run() {
    let store = MemoryStore::new();
    waiting(&store, "removed").await;
    let outcome = resume::<shipping_removed::Order, _>(&store, "removed")
        .await
        .expect("the change is compatible");
    assert_eq!(outcome.into_result().expect("succeeds"), 1);
    assert_eq!(what_ran("removed"), vec!["reserve"]);
}

/// A run of `branches`, unloaded while both branches wait.
async fn both_waiting<S: Store + Clone>(store: &S, id: &str) {
    let ended = branches::Order::runner()
        .durable(store, id)
        .unload_when_waiting(Duration::ZERO)
        .execute(1)
        .await
        .expect("unloads");
    assert!(ended.is_unloaded());
    assert_eq!(what_ran(id), vec!["reserve"]);
}

/// A step inserted where the run has not reached runs when the run gets there, though every
/// step after it in the graph moved, the second branch's waiting `Delay` among them: the
/// run's stored rows move with them (a replay of the finished run meets its journal again),
/// in memory and in SQLite.
#[tokio::test]
async fn a_step_inserted_where_the_run_has_not_reached_runs_and_the_rows_move() {
    let dir = std::env::temp_dir().join(format!("flow-versions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let _ = std::fs::remove_file(&path);
    let sqlite = flowdag_sqlite::SqliteStore::open(&path).expect("opens");
    inserted(&MemoryStore::new(), "inserted-memory").await;
    inserted(&sqlite, "inserted-sqlite").await;
    drop(sqlite);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn inserted<S: Store + Clone>(store: &S, id: &str) {
    both_waiting(store, id).await;
    let delay_before = delay_events(store, id).await;
    // Loaded by the new build while both `Delay`s still wait: it adopts the graph and
    // unloads at once; the rows move with the adoption.
    let ended = resume_or_unload::<branches_inserted::Order, _>(store, id, Duration::ZERO)
        .await
        .expect("the change is compatible");
    assert!(ended.is_unloaded());
    let moved = delay_events(store, id).await;
    assert_eq!(moved.len(), delay_before.len());
    assert!(
        moved.contains(&("delay#2".to_owned(), 4)),
        "the second `Delay`'s rows moved with the adoption: {moved:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outcome = resume::<branches_inserted::Order, _>(store, id)
        .await
        .expect("the change is compatible");
    // notify(1) = 10, ship(10) = 11; told = notify(1) = 10.
    assert_eq!(outcome.into_result().expect("succeeds"), 21);
    let mut ran = what_ran(id);
    ran.sort();
    assert_eq!(ran, vec!["notify", "notify", "reserve", "ship"]);
    let (_, rows) = graph_rows(&branches_inserted::Order::GRAPH);
    let delay_after = delay_events(store, id).await;
    assert_eq!(
        delay_before.len() + 4,
        delay_after.len(),
        "both `Delay`s fired and completed: {delay_after:?}"
    );
    assert!(
        delay_after.contains(&("delay#2".to_owned(), 4)),
        "the second `Delay` moved from 3 to 4: {delay_after:?}"
    );
    for (name, node) in &delay_after {
        assert_eq!(
            rows[*node as usize].name, *name,
            "every event of the run names its step's index in the new graph"
        );
    }
    let again = resume::<branches_inserted::Order, _>(store, id)
        .await
        .expect("the finished run replays");
    assert_eq!(again.into_result().expect("succeeds"), 21);
    assert_eq!(what_ran(id).len(), 4, "nothing ran again");
}

/// The (name, index) of the run's own events of steps that start with `delay`.
async fn delay_events<S: Store>(store: &S, id: &str) -> Vec<(String, u32)> {
    store
        .events(id, 0)
        .await
        .expect("reads")
        .into_iter()
        .filter(|e| e.path.is_none())
        .filter_map(|e| Some((e.node_name?, e.node?)))
        .filter(|(name, _)| name.starts_with("delay#"))
        .collect()
}

/// A step inserted after a step that has completed is refused: it would have run already.
#[tokio::test]
async fn a_step_inserted_where_the_run_has_passed_is_refused() {
    let store = MemoryStore::new();
    both_waiting(&store, "passed").await;
    let err = resume_or_unload::<reserve_followed::Order, _>(&store, "passed", Duration::ZERO)
        .await
        .expect_err("`checked` would have run after `stock`");
    let DurableError::GraphChanged { changes, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, GraphChange::Added(node) if node == "checked")),
        "{changes:?}"
    );
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
