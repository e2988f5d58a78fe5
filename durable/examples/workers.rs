//! Distributed runs on PostgreSQL: three worker processes share the operations of 20 order
//! runs. Each run loads its order, then fans out to three operations (reserve the stock, price
//! it, screen it for fraud; pricing is refused once for every fourth order and retried), and
//! joins them in a confirmation. Any worker claims any operation as a task; the join fires once
//! per run, whoever completed the last branch.
//!
//! ```text
//! cargo run -p flow-durable --example workers            # prints the web view's address
//! cargo run -p flow-durable --example workers -- --serve # keeps the view after the runs end
//! ```
//!
//! The program finds a PostgreSQL server as the store's tests do: `FLOW_PG_URL`, else the
//! throwaway cluster of `bash .ci/postgres start` (in `target/pg`; it installs the
//! distribution's `postgresql` package when no server is installed, and keeps running for the
//! next time: `bash .ci/postgres stop` stops it). It makes a fresh schema, starts three
//! workers (this program again, as `workers --worker SCHEMA`), submits the runs, waits until
//! they have all finished (at most two minutes), prints each run's result with the worker that
//! executed each of its operations (every operation returns its process id), then stops the
//! workers, drops the schema and exits. While the runs go, the web view of the store
//! (`flowdag_cli::web::View`, what `flow serve` serves) is up on a free port of 127.0.0.1, and
//! the program prints its address first: open it to watch the runs; with `--serve` the view
//! stays up after the runs end, until Enter is pressed (then the schema is dropped). The workers are killed however the program ends; a
//! worker whose parent is gone (its standard input closed) stops by itself.
//!
//! In your own crate these items are `flowdag::Worker`, `flowdag::attempt`, `flowdag::store` (feature
//! `durable` of `flowdag`) and `flowdag_postgres::PostgresStore`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use flowdag::Worker;
use flowdag::durable::attempt;
use flowdag::prelude::*;
use flowdag::store::{RunFilter, Store};
use flowdag_cli::web::View;
use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use serde::{Deserialize, Serialize};

/// How many runs the program submits, and how many worker processes share them.
const RUNS: u64 = 20;
const WORKERS: usize = 3;
/// How long the program waits for every run to finish.
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

/// An operation's output: its value, and the process that executed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    value: u64,
    pid: u32,
    attempt: u32,
}

fn step(value: u64) -> Step {
    Step {
        value,
        pid: std::process::id(),
        attempt: attempt().map_or(1, |a| a.attempt()),
    }
}

/// A run's result: the order's total, and each operation's process and attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    total: u64,
    steps: Vec<(String, u32, u32)>,
}

async fn load(order: u64) -> Result<Step, Refused> {
    Ok(step(order % 5 + 1))
}

async fn reserve(items: &Step) -> Result<Step, Refused> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(step(items.value))
}

async fn price(order: u64, items: &Step) -> Result<Step, Refused> {
    let first = attempt().is_none_or(|a| a.attempt() == 1);
    if order.is_multiple_of(4) && first {
        return Err(Refused("the price service is busy"));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(step(items.value * 1_250))
}

async fn screen(order: u64) -> Result<Step, Refused> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(step(order % 7))
}

async fn confirm(items: &Step, stock: &Step, cost: &Step, risk: &Step) -> Result<Receipt, Refused> {
    let mine = step(cost.value);
    let steps = [
        ("load", items),
        ("reserve", stock),
        ("price", cost),
        ("screen", risk),
        ("confirm", &mine),
    ];
    Ok(Receipt {
        total: cost.value,
        steps: steps
            .iter()
            .map(|(name, s)| ((*name).to_owned(), s.pid, s.attempt))
            .collect(),
    })
}

workflow! {
    #[flow(durable)]
    Order(order: u64) -> Receipt {
        Sequential {
            items = Operation(load(order)),
            Parallel {
                stock = Operation(reserve(&items)),
                cost = Operation(price(order, &items), retries = 2, backoff = "50ms"),
                risk = Operation(screen(order)),
            },
            receipt = Operation(confirm(&items, &stock, &cost, &risk)),
        }
        => receipt.clone()
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match args.as_slice() {
        [flag, schema] if flag == "--worker" => runtime.block_on(worker(schema)),
        [] => runtime.block_on(coordinate(false)),
        [flag] if flag == "--serve" => runtime.block_on(coordinate(true)),
        _ => Err(
            "usage: workers [--serve] (the worker processes are `workers --worker SCHEMA`)".into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

type Error = Box<dyn std::error::Error>;

/// Runs and tasks a worker process drives at once.
const IN_FLIGHT: usize = 8;

fn store(url: &str, schema: &str) -> Result<PostgresStore, Error> {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    };
    Ok(PostgresStore::connect_with(url, options)?)
}

/// A worker process: runs a `Worker` until its standard input closes (the parent closes it to
/// stop the worker, and it closes by itself when the parent dies), then prints how many tasks
/// it executed.
async fn worker(schema: &str) -> Result<(), Error> {
    let url = std::env::var("FLOW_PG_URL").map_err(|_| "FLOW_PG_URL is not set")?;
    let store = store(&url, schema)?;
    let (closed, stop) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = closed.send(());
    });
    let report = Worker::new(store)
        .register::<Order>()
        .poll_interval(Duration::from_millis(20))
        .max_runs(IN_FLIGHT)
        .max_tasks(IN_FLIGHT)
        .run(async {
            let _ = stop.await;
        })
        .await?;
    // The parent reads it; a parent that is gone no longer does.
    let _ = writeln!(std::io::stdout(), "{}", report.tasks_completed);
    Ok(())
}

/// The worker processes; dropping it kills and reaps those still running.
struct Fleet(Vec<Child>);

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Fleet {
    fn start(url: &str, schema: &str) -> Result<Fleet, Error> {
        let exe = std::env::current_exe()?;
        let mut fleet = Fleet(Vec::new());
        for _ in 0..WORKERS {
            let child = Command::new(&exe)
                .args(["--worker", schema])
                .env("FLOW_PG_URL", url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            fleet.0.push(child);
        }
        Ok(fleet)
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }

    /// Closes every worker's input and waits (at most 10 s) for each to stop; answers the
    /// tasks each executed. A worker that does not stop in time is killed when `self` drops.
    fn stop(mut self) -> Result<Vec<u64>, Error> {
        for child in &mut self.0 {
            drop(child.stdin.take());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut executed = Vec::new();
        for child in &mut self.0 {
            let status = loop {
                if let Some(status) = child.try_wait()? {
                    break status;
                }
                if Instant::now() > deadline {
                    return Err(format!("worker {} did not stop in 10 s", child.id()).into());
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                stdout.read_to_string(&mut out)?;
            }
            if !status.success() {
                return Err(format!("worker {} ended with {status}", child.id()).into());
            }
            executed.push(out.trim().parse().unwrap_or(0));
        }
        Ok(executed)
    }
}

async fn coordinate(keep_serving: bool) -> Result<(), Error> {
    let url = testing::server();
    let schema = format!("flow_example_workers_{}", std::process::id());
    let store = store(&url, &schema)?;
    // The first call creates the schema, before the workers race to.
    store.list_runs(&RunFilter::default()).await?;
    // The web view of the store, read-only, on a port the system picks.
    let view = View::new(store.clone())
        .name(&format!("{} (schema {schema})", store.at()))
        .register::<Order>()
        .serve("127.0.0.1:0".parse()?)
        .await?;
    println!("view: http://{}/runs", view.addr());
    let mut result = submit_and_watch(&store, &url, &schema).await;
    if keep_serving && result.is_ok() {
        println!(
            "the view stays up at http://{}/runs: press Enter to stop",
            view.addr()
        );
        // The view runs on this thread's runtime: wait for Enter on another thread.
        let (entered, enter) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_line(&mut String::new());
            let _ = entered.send(());
        });
        if enter.await.is_err() {
            result = Err("standard input closed".into());
        }
    }
    drop(view);
    let client = testing::client().await;
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await?;
    result
}

async fn submit_and_watch(store: &PostgresStore, url: &str, schema: &str) -> Result<(), Error> {
    let fleet = Fleet::start(url, schema)?;
    let pids = fleet.pids();
    let name = |pid: u32| match pids.iter().position(|&p| p == pid) {
        Some(i) => format!("w{}", i + 1),
        None => format!("pid {pid}"),
    };
    println!(
        "{WORKERS} workers ({}) on {url}, schema {schema}",
        (0..pids.len())
            .map(|i| format!("w{} = pid {}", i + 1, pids[i]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let start = Instant::now();
    for order in 1..=RUNS {
        Order::runner()
            .durable(store, format!("order-{order:02}"))
            .distributed()
            .submit(order)
            .await?;
    }
    loop {
        let runs = store.list_runs(&RunFilter::default()).await?;
        let finished = runs.iter().filter(|r| r.status.is_finished()).count();
        if finished == runs.len() {
            break;
        }
        if start.elapsed() > DEADLINE {
            return Err(format!(
                "{finished} of {} runs finished in {} s",
                runs.len(),
                DEADLINE.as_secs()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{RUNS} runs submitted and finished in {} ms:",
        start.elapsed().as_millis()
    );
    let mut per_worker: BTreeMap<String, u32> = BTreeMap::new();
    for order in 1..=RUNS {
        let id = format!("order-{order:02}");
        let receipt = Order::resume(store, &id).await?.result?;
        let steps: Vec<String> = receipt
            .steps
            .iter()
            .map(|(op, pid, attempt)| {
                *per_worker.entry(name(*pid)).or_default() += 1;
                if *attempt > 1 {
                    format!("{op} {} (attempt {attempt})", name(*pid))
                } else {
                    format!("{op} {}", name(*pid))
                }
            })
            .collect();
        println!("  {id}  total {:>5}  {}", receipt.total, steps.join(", "));
    }
    let executed = fleet.stop()?;
    println!("tasks per worker (operations in the results above / attempts executed):");
    for (i, pid) in pids.iter().enumerate() {
        let worker = name(*pid);
        println!(
            "  {worker} (pid {pid}): {} / {}",
            per_worker.get(&worker).copied().unwrap_or(0),
            executed.get(i).copied().unwrap_or(0)
        );
    }
    Ok(())
}
