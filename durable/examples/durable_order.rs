//! A durable order saga on a SQLite file: reserve the stock (a child run of its own, `Stock`),
//! charge the card, wait, ship. When shipping fails, the run undoes what it did, in reverse
//! order: it refunds the charge, then undoes its child run, which releases the stock in its own
//! journal. Kill it midway, run it again, and it goes on where it stopped, without reserving or
//! charging twice.
//!
//! ```text
//! cargo run -p flow-durable --example durable_order -- --fresh   # starts orders 42 and 43; kill it during the 3 s
//!                                                # wait (Ctrl-C, or `kill -9` the pid it prints)
//! cargo run -p flow-durable --example durable_order              # resumes them: reserve and charge do not run
//!                                                # again, the wait ends when its stored timer is due
//! cargo run -p flow-durable --example durable_order -- 7 8       # other orders (odd ones cannot be shipped)
//! cargo run -p flowdag-cli -- show target/durable_order/orders.db order-43   # a run's journal
//! ```
//!
//! The store is `target/durable_order/orders.db`. Running an order whose run has ended gives
//! its result from the store and runs nothing; `--fresh` deletes the store first. Here the
//! program resumes its own runs by running them again under the same ids; a long-lived service
//! lets a `Worker` resume whatever a dead process left. In your own crate these items are
//! `flowdag::attempt`, `flowdag::store` and `flowdag::Worker` (feature `durable` of `flowdag`) and
//! `flowdag_sqlite::SqliteStore`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use flowdag::durable::attempt;
use flowdag::prelude::*;
use flowdag::store::{RunFilter, Store};
use flowdag_sqlite::SqliteStore;

#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

/// What every step prints when it runs. The idempotency key is the same when an attempt runs
/// again after a crash: a real step sends it to the warehouse or payment API, which applies
/// one request per key.
fn effect(what: &str) {
    if let Some(attempt) = attempt() {
        println!("  {:<14} {what:<13} key {}", attempt.run(), attempt.key());
    }
}

async fn reserve(order: u64) -> Result<String, Refused> {
    effect("reserve");
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(format!("R-{order}"))
}

async fn release(reservation: &str) -> Result<(), Refused> {
    effect(&format!("release {reservation}"));
    Ok(())
}

async fn charge(order: u64) -> Result<String, Refused> {
    effect("charge");
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(format!("C-{order}"))
}

async fn refund(receipt: &str) -> Result<(), Refused> {
    effect(&format!("refund {receipt}"));
    Ok(())
}

async fn ship(order: u64, reservation: &str) -> Result<String, Refused> {
    effect("ship");
    match order % 2 {
        0 => Ok(format!("parcel P-{order} from {reservation}")),
        _ => Err(Refused("the courier refuses the address")),
    }
}

workflow! {
    /// Holds the order's stock: a child run of each order (`order-42/stock`), undone (its
    /// stock released) when its order compensates.
    #[flow(durable)]
    Stock(order: u64) -> String {
        held = Operation(reserve(order), compensate = release(&held))
        => held.clone()
    }
}

workflow! {
    #[flow(durable)]
    Order(order: u64) -> String {
        Sequential {
            stock = Workflow(Stock(order)),
            receipt = Operation(charge(order), compensate = refund(&receipt)),
            Delay("3s"),
            parcel = Operation(ship(order, &stock)),
        }
        => parcel.clone()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut orders = Vec::new();
    let mut fresh = false;
    for arg in std::env::args().skip(1) {
        match arg.parse::<u64>() {
            Ok(order) => orders.push(order),
            Err(_) if arg == "--fresh" => fresh = true,
            Err(_) => {
                eprintln!(
                    "error: `{arg}` is not an order number; usage: durable_order [--fresh] [ORDER]..."
                );
                return ExitCode::from(2);
            }
        }
    }
    if orders.is_empty() {
        orders = vec![42, 43];
    }
    // The workspace's `target/` (this example's package is `durable/` inside it).
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/durable_order");
    if fresh {
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Opening the store frees the leases a killed process left on its runs (the file lock
    // proves it died), so they resume at once.
    let store = match std::fs::create_dir_all(&dir).map_err(|e| e.to_string()) {
        Ok(()) => SqliteStore::open(dir.join("orders.db")).map_err(|e| e.to_string()),
        Err(error) => Err(format!("cannot make `{}`: {error}", dir.display())),
    };
    let result = match store {
        Ok(store) => go(&store, &orders).await,
        Err(error) => Err(error.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}\n(`-- --fresh` deletes the store and starts over)");
            ExitCode::FAILURE
        }
    }
}

async fn go(store: &SqliteStore, orders: &[u64]) -> Result<(), Box<dyn std::error::Error>> {
    let known = store.list_runs(&RunFilter::default()).await?;
    let mut ended = 0;
    for &order in orders {
        let id = format!("order-{order}");
        match known.iter().find(|run| run.id == id) {
            None => println!("{id}: starting"),
            Some(run) if run.status.is_finished() => {
                ended += 1;
                println!(
                    "{id}: has ended ({}); its result comes from the store, nothing runs again",
                    run.status
                );
            }
            Some(run) => println!(
                "{id}: resuming after event #{} (it was {})",
                run.next_seq.saturating_sub(1),
                run.status
            ),
        }
    }
    match ended == orders.len() {
        true => println!("(`-- --fresh` starts over)"),
        false => println!(
            "pid {}: kill me during the 3 s wait (`kill -9 {0}`), then run me again\n",
            std::process::id()
        ),
    }
    // A run of an id that exists is resumed: nothing that completed runs again.
    let runs = orders.iter().map(|&order| {
        Order::runner()
            .durable(store, format!("order-{order}"))
            .execute(order)
    });
    let outcomes = futures::future::join_all(runs).await;
    for (order, outcome) in orders.iter().zip(outcomes) {
        let outcome = outcome?;
        match &outcome.result {
            Ok(parcel) => println!("\norder-{order}: shipped: {parcel}"),
            Err(error) => {
                let undone: Vec<String> = error
                    .compensations()
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                println!("\norder-{order}: {error}; {}", undone.join(", "));
            }
        }
        print!("{}", outcome.report);
    }
    if let Some(last) = orders.last() {
        println!(
            "\na run's journal: `cargo run -p flowdag-cli -- show {} order-{last}`",
            store.path().display()
        );
    }
    Ok(())
}
