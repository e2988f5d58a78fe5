//! A durable order on a SQLite file: kill it midway, run it again, and it goes on where it
//! stopped, without reserving or charging twice.
//!
//! ```text
//! cargo run --example durable_order            # starts order-42; kill it during its 3 s wait
//!                                              # (Ctrl-C, or `kill -9` the pid it prints)
//! cargo run --example durable_order            # resumes it: reserve and charge do not run again
//! cargo run --example durable_order -- --fresh # deletes the store and starts over
//! cargo run -p flow-cli -- show target/durable_order/orders.db order-42   # its journal
//! ```
//!
//! The store is `target/durable_order/orders.db`. A run killed while it waits is picked up by
//! a `Worker` when its timer is due: the due time is in the store, so the wait does not start
//! over. In your own crate the same items are `flow::Worker` and `flow::store` (feature
//! `durable` of `flow`) and `flow_sqlite::SqliteStore`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use flow::prelude::*;
use flow_runtime::durable::attempt;
use flow_runtime::store::{RunFilter, RunStatus, Store};
use flow_runtime::worker::Worker;
use flow_sqlite::SqliteStore;

#[derive(Debug)]
struct OutOfStock;

impl std::fmt::Display for OutOfStock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("out of stock")
    }
}

impl std::error::Error for OutOfStock {}

/// What an operation prints when it runs: its idempotency key, which a real one would send
/// to the payment or warehouse API so that a retry after a crash is applied once.
fn effect(what: &str) {
    let key = attempt().map_or_else(|| "-".to_owned(), |a| a.key());
    println!("  {what:<8} runs, idempotency key {key}");
}

async fn reserve(order: u64) -> Result<String, OutOfStock> {
    effect("reserve");
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(format!("reservation R-{order}"))
}

async fn charge(order: u64, stock: &str) -> Result<String, OutOfStock> {
    effect("charge");
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!(
        "  charged for {stock}; now a 3 s wait: kill me (Ctrl-C or `kill -9 {}`), then run me again",
        std::process::id()
    );
    Ok(format!("receipt C-{order}"))
}

async fn ship(order: u64, receipt: &str) -> Result<String, OutOfStock> {
    effect("ship");
    Ok(format!("order {order} shipped against {receipt}"))
}

workflow! {
    #[flow(durable)]
    Order(order: u64) -> String {
        Sequential {
            stock = Operation(reserve(order)),
            receipt = Operation(charge(order, &stock)),
            Delay("3s"),
            parcel = Operation(ship(order, &receipt)),
        }
        => parcel.clone()
    }
}

const RUN: &str = "order-42";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/durable_order");
    if std::env::args().any(|a| a == "--fresh") {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(error) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot make `{}`: {error}", dir.display());
        return ExitCode::FAILURE;
    }
    let path = dir.join("orders.db");
    // Opening frees the lease a killed process left on the run (the file lock proves it died).
    let store = match SqliteStore::open(&path) {
        Ok(store) => store,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match go(&store).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn go(store: &SqliteStore) -> Result<(), Box<dyn std::error::Error>> {
    let runs = store.list_runs(&RunFilter::default()).await?;
    match runs.iter().find(|run| run.id == RUN) {
        None => {
            println!("starting {RUN} in {}", store.path().display());
            let outcome = Order::runner().durable(store, RUN).execute(42).await?;
            println!("{RUN}: {}", outcome.result?);
        }
        Some(run) if run.status.is_finished() => {
            println!("{RUN} has ended ({}); `-- --fresh` starts over", run.status);
        }
        Some(run) => {
            match run.wake_at_ms {
                Some(due) if due > flow_runtime::store::now_ms() => println!(
                    "{RUN} was stopped while it waited; its timer is due in {} ms, the worker resumes it then",
                    due - flow_runtime::store::now_ms()
                ),
                _ => println!("{RUN} was stopped at event {}; resuming it", run.next_seq),
            }
            let worker = Worker::new(store.clone())
                .register::<Order>()
                .poll_interval(Duration::from_millis(100));
            let ended = async {
                loop {
                    let runs = store.list_runs(&RunFilter::default()).await;
                    let finished = runs.map_or(true, |runs| {
                        runs.iter()
                            .find(|r| r.id == RUN)
                            .is_none_or(|r| r.status.is_finished())
                    });
                    if finished {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            for resumed in worker.run(ended).await?.resumed {
                let outcome = resumed.result?;
                println!(
                    "{}: resumed, {:?}",
                    resumed.run,
                    outcome.result.map(|()| "succeeded")
                );
            }
        }
    }
    println!("\nits journal:");
    for event in store.events(RUN, 0).await? {
        println!(
            "  #{:<3} {:<12} {}",
            event.seq,
            event.kind,
            event.node_name.unwrap_or_default()
        );
    }
    let status = store
        .list_runs(&RunFilter::default())
        .await?
        .into_iter()
        .find(|run| run.id == RUN)
        .map_or(RunStatus::Running, |run| run.status);
    println!("status: {status}");
    Ok(())
}
