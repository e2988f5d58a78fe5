//! Changing a durable workflow while its runs wait, on a SQLite file: four builds of one
//! `Order` workflow meet the runs the builds before them left waiting.
//!
//! ```text
//! cargo run -p flow-durable --example versions
//! cargo run -p flowdag-cli -- runs target/versions/orders.db   # the runs, all finished
//! ```
//!
//! 1. Build 1 starts `order-1`, which reserves, ships and waits before it tells the customer.
//! 2. Build 2 changes what `order-1` has not reached: `tell` gets retries, and a `log` step is
//!    inserted before it. That is compatible without ceremony: `order-1` goes on with build 2.
//! 3. Build 3 ships faster, a change to a step the runs in flight have run, so it is written
//!    behind a version marker, `Patched("fast-ship")`: `order-2`, started by build 2, takes the
//!    old path; `order-3`, started by build 3, the new. Without the marker the change refuses
//!    `order-2`, naming what changed.
//! 4. Once no run is left without the marker, build 4 removes it; `order-3` goes on.
//!
//! Each build is a module here; in a service they are successive deploys of one crate. The
//! store is `target/versions/orders.db`, made anew on each run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use flowdag::durable::{attempt, resume, resume_or_unload, runs_without_patch};
use flowdag::store::{RunFilter, RunStatus, Store};
use flowdag_sqlite::SqliteStore;

#[derive(Debug)]
struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("refused")
    }
}

impl std::error::Error for Refused {}

fn effect(what: &str) {
    if let Some(attempt) = attempt() {
        println!("    {:<8} {what:<12} key {}", attempt.run(), attempt.key());
    }
}

async fn reserve(order: u64) -> Result<u64, Refused> {
    effect("reserve");
    Ok(order)
}

async fn ship(stock: u64) -> Result<String, Refused> {
    effect("ship");
    Ok(format!("parcel {stock} by road"))
}

async fn ship_fast(stock: u64) -> Result<String, Refused> {
    effect("ship_fast");
    Ok(format!("parcel {stock} by air"))
}

async fn log(parcel: &str) -> Result<usize, Refused> {
    effect("log");
    Ok(parcel.len())
}

async fn tell(parcel: &str) -> Result<String, Refused> {
    effect("tell");
    Ok(format!("told: {parcel}"))
}

/// Build 1.
mod build1 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> String {
            Sequential {
                stock = Operation(reserve(order)),
                parcel = Operation(ship(stock)),
                Delay("200ms"),
                told = Operation(tell(&parcel)),
            }
            => told.clone()
        }
    }
}

/// Build 2: `tell` retries, and `log` comes before it (where `order-1` has not reached).
mod build2 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> String {
            Sequential {
                stock = Operation(reserve(order)),
                parcel = Operation(ship(stock)),
                Delay("200ms"),
                Operation(log(&parcel)),
                told = Operation(tell(&parcel), retries = 3),
            }
            => told.clone()
        }
    }
}

/// Build 2 with faster shipping and no marker: refused for the runs that have shipped.
mod unmarked {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> String {
            Sequential {
                stock = Operation(reserve(order)),
                fast = Operation(ship_fast(stock)),
                Delay("200ms"),
                Operation(log(&fast)),
                told = Operation(tell(&fast), retries = 3),
            }
            => told.clone()
        }
    }
}

/// Build 3: faster shipping, behind a version marker.
mod build3 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> String {
            Sequential {
                stock = Operation(reserve(order)),
                Patched("fast-ship") {
                    fast = Operation(ship_fast(stock)),
                } else {
                    parcel = Operation(ship(stock)),
                },
                Delay("200ms"),
                Operation(log(fast.or(parcel).map_or("", String::as_str))),
                told = Operation(tell(fast.or(parcel).map_or("", String::as_str)), retries = 3),
            }
            => told.clone()
        }
    }
}

/// Build 4: the marker is gone, its new path stays.
mod build4 {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Order(order: u64) -> String {
            Sequential {
                stock = Operation(reserve(order)),
                fast = Operation(ship_fast(stock)),
                Delay("200ms"),
                Operation(log(&fast)),
                told = Operation(tell(&fast), retries = 3),
            }
            => told.clone()
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // The workspace's `target/` (this example's package is `durable/` inside it).
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/versions");
    let _ = std::fs::remove_dir_all(&dir);
    let store = match std::fs::create_dir_all(&dir).map_err(|e| e.to_string()) {
        Ok(()) => SqliteStore::open(dir.join("orders.db")).map_err(|e| e.to_string()),
        Err(error) => Err(format!("cannot make `{}`: {error}", dir.display())),
    };
    let result = match store {
        Ok(store) => go(&store).await,
        Err(error) => Err(error.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs of the Delay's length: the waiting runs are due again.
async fn later() {
    tokio::time::sleep(Duration::from_millis(250)).await;
}

fn unfinished() -> RunFilter {
    RunFilter {
        workflow: Some("Order".to_owned()),
        statuses: vec![
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Compensating,
        ],
        ..RunFilter::default()
    }
}

async fn without_marker(store: &SqliteStore) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let runs = runs_without_patch(store, &unfinished(), "fast-ship").await?;
    Ok(runs.into_iter().map(|run| run.id).collect())
}

async fn go(store: &SqliteStore) -> Result<(), Box<dyn std::error::Error>> {
    println!("build 1 starts order-1; it waits before it tells the customer");
    let waiting = build1::Order::runner()
        .durable(store, "order-1")
        .unload_when_waiting(Duration::ZERO)
        .execute(1)
        .await?;
    assert!(waiting.is_unloaded(), "order-1 waits");
    later().await;

    println!("\nbuild 2 (tell retries, log inserted) goes on with order-1: compatible");
    let outcome = resume::<build2::Order, _>(store, "order-1").await?;
    println!("  order-1: {}", outcome.into_result()?);

    println!("\nbuild 2 starts order-2; it waits");
    build2::Order::runner()
        .durable(store, "order-2")
        .unload_when_waiting(Duration::ZERO)
        .execute(2)
        .await?;

    println!("\nfaster shipping without a marker refuses order-2, which has shipped:");
    match resume_or_unload::<unmarked::Order, _>(store, "order-2", Duration::ZERO).await {
        Err(error) => println!("  {error}"),
        Ok(_) => return Err("the unmarked change should refuse order-2".into()),
    }

    println!("\nbuild 3 (Patched(\"fast-ship\")) starts order-3, which ships fast, and waits");
    build3::Order::runner()
        .durable(store, "order-3")
        .unload_when_waiting(Duration::ZERO)
        .execute(3)
        .await?;
    println!(
        "  runs without the marker: {:?} (`flow runs --without-patch fast-ship`)",
        without_marker(store).await?
    );
    later().await;
    println!("build 3 goes on with order-2 on the old path");
    let outcome = resume::<build3::Order, _>(store, "order-2").await?;
    println!("  order-2: {}", outcome.into_result()?);
    let left = without_marker(store).await?;
    println!("  runs without the marker: {left:?}: the marker can go");
    if !left.is_empty() {
        return Err("a run without the marker is left".into());
    }

    println!("\nbuild 4 (the marker removed) goes on with order-3");
    let outcome = resume::<build4::Order, _>(store, "order-3").await?;
    println!("  order-3: {}", outcome.into_result()?);

    let runs = store.list_runs(&RunFilter::default()).await?;
    println!();
    for run in runs {
        println!("{}: {}", run.id, run.status);
    }
    println!(
        "\nthe journals: `cargo run -p flowdag-cli -- show {} order-2`",
        store.path().display()
    );
    Ok(())
}
