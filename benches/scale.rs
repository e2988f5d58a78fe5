//! Distributed runs on one PostgreSQL server: nodes per second with 1, 2 and 4 worker
//! processes, against the raw rate of the conditional single-row update a task claim is
//! (`UPDATE … SET status = 'running', version = version + 1 WHERE id = $1 AND status = 'ready'
//! AND version = $2`) from as many connections, measured in the same run.
//!
//! ```text
//! eval "$(bash .ci/postgres start)"              # or FLOW_PG_URL=postgres://… of a server
//! cargo bench -p flow-benches --bench scale
//! ```
//!
//! Not criterion: one fleet run takes seconds, so each configuration is measured once per round,
//! end to end (submit every run, then wait until all have finished), and the program prints a
//! table.
//! Each configuration gets a fresh schema and its own worker processes (this binary again,
//! started with `FLOW_SCALE_WORKER=<schema>`), killed however the bench ends. The server is
//! found as the store's tests find it (`FLOW_PG_URL`, else `.ci/postgres start`, which runs
//! the server with `fsync=on` and the default `synchronous_commit`); the bench prints both
//! settings. `ROUNDS=3` measures every configuration three times, each just after the raw rate
//! of as many connections. Where the server preloads `pg_stat_statements`, the bench also
//! counts the statements (round trips) per node; else it prints `n/a` there.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use flowdag::prelude::*;
use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use flowdag_runtime::store::{RunFilter, Store};
use flowdag_runtime::worker::Worker;
use tokio_postgres::{Client, NoTls};

/// Runs per configuration, and nodes per run (the workflow below).
const RUNS: u64 = 100;
const NODES: u64 = 20;
/// Worker processes per configuration.
const FLEETS: [usize; 3] = [1, 2, 4];
/// Runs and tasks one worker process drives at once.
const IN_FLIGHT: usize = 8;
/// How long the raw update rate is measured for each number of connections.
const RAW_FOR: Duration = Duration::from_secs(3);
/// A configuration that takes longer than this failed.
const DEADLINE: Duration = Duration::from_secs(300);
/// The environment variable that makes this binary a worker of the schema it names.
const WORKER_ENV: &str = "FLOW_SCALE_WORKER";

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never fails")
    }
}

impl std::error::Error for Never {}

async fn op(x: u64) -> Result<u64, Never> {
    Ok(x)
}

workflow! {
    #[flow(durable)]
    Fan(x: u64) -> u64 {
        Sequential {
            first = Operation(op(x)),
            Parallel {
                Operation(op(first)), Operation(op(first)), Operation(op(first)),
                Operation(op(first)), Operation(op(first)), Operation(op(first)),
                Operation(op(first)), Operation(op(first)), Operation(op(first)),
                Operation(op(first)), Operation(op(first)), Operation(op(first)),
                Operation(op(first)), Operation(op(first)), Operation(op(first)),
                Operation(op(first)), Operation(op(first)), Operation(op(first)),
            },
            last = Operation(op(first)),
        }
        => last
    }
}

type Error = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    let worker = std::env::var(WORKER_ENV).ok();
    let runtime = match worker {
        Some(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match worker {
        Some(schema) => runtime.block_on(work(&schema)),
        None => runtime.block_on(bench()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The server's message is the source of tokio-postgres's "db error".
            let mut message = error.to_string();
            let mut source = error.source();
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = cause.source();
            }
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn store(url: &str, schema: &str) -> Result<PostgresStore, Error> {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    };
    Ok(PostgresStore::connect_with(url, options)?)
}

/// A worker process: runs until its standard input closes.
async fn work(schema: &str) -> Result<(), Error> {
    let url = std::env::var("FLOW_PG_URL").map_err(|_| "FLOW_PG_URL is not set")?;
    let store = store(&url, schema)?;
    let (closed, stop) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = closed.send(());
    });
    let report = Worker::new(store)
        .register::<Fan>()
        .poll_interval(Duration::from_millis(10))
        .max_runs(IN_FLIGHT)
        .max_tasks(IN_FLIGHT)
        .run(async {
            let _ = stop.await;
        })
        .await?;
    let _ = writeln!(std::io::stdout(), "{}", report.tasks_completed);
    Ok(())
}

/// Worker processes; dropping it kills and reaps those still running.
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
    fn start(n: usize, url: &str, schema: &str) -> Result<Fleet, Error> {
        let exe = std::env::current_exe()?;
        let mut fleet = Fleet(Vec::new());
        for _ in 0..n {
            fleet.0.push(
                Command::new(&exe)
                    .env(WORKER_ENV, schema)
                    .env("FLOW_PG_URL", url)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()?,
            );
        }
        Ok(fleet)
    }

    /// Closes the workers' input, waits for them (10 s at most); the tasks each executed.
    fn stop(mut self) -> Result<Vec<u64>, Error> {
        for child in &mut self.0 {
            drop(child.stdin.take());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut executed = Vec::new();
        for child in &mut self.0 {
            while child.try_wait()?.is_none() {
                if Instant::now() > deadline {
                    return Err(format!("worker {} did not stop in 10 s", child.id()).into());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                stdout.read_to_string(&mut out)?;
            }
            executed.push(out.trim().parse().unwrap_or(0));
        }
        Ok(executed)
    }
}

async fn connect(url: &str) -> Result<Client, Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Transactions committed or rolled back in the current database so far (flushed first).
async fn transactions(client: &Client) -> Result<i64, Error> {
    // PostgreSQL 15 flushes a backend's counters when it goes idle (at most every second).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let _ = client.simple_query("SELECT pg_stat_clear_snapshot()").await;
    let row = client
        .query_one(
            "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database
             WHERE datname = current_database()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Statements run so far, where `pg_stat_statements` is loaded; those of the bench's own
/// watching and counting left out.
async fn statements(client: &Client) -> Option<i64> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
             WHERE query NOT LIKE '%scale_bench_watch%' AND query NOT LIKE '%pg_stat%'",
            &[],
        )
        .await
        .ok()?;
    Some(row.get(0))
}

struct Fleetrun {
    workers: usize,
    submit: Duration,
    total: Duration,
    executed: Vec<u64>,
    transactions: i64,
    statements: Option<i64>,
}

/// `RUNS` runs of `Fan` on `workers` worker processes, in a fresh schema.
async fn fleet(url: &str, client: &Client, workers: usize) -> Result<Fleetrun, Error> {
    let schema = format!("flow_scale_bench_{}_{workers}", std::process::id());
    let store = store(url, &schema)?;
    // Creates the schema before the workers race to.
    store.list_runs(&RunFilter::default()).await?;
    let fleet = Fleet::start(workers, url, &schema)?;
    // The workers connect and look once before the clock starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tx_before = transactions(client).await?;
    let st_before = statements(client).await;
    let start = Instant::now();
    for x in 0..RUNS {
        Fan::runner()
            .durable(&store, format!("fan-{x:03}"))
            .distributed()
            .submit(x)
            .await?;
    }
    let submit = start.elapsed();
    let watch = format!(
        "SELECT count(*) /* scale_bench_watch */ FROM {schema}.runs
         WHERE status NOT IN ('succeeded', 'failed', 'cancelled')"
    );
    loop {
        let left: i64 = client.query_one(watch.as_str(), &[]).await?.get(0);
        if left == 0 {
            break;
        }
        if start.elapsed() > DEADLINE {
            return Err(format!("{left} runs unfinished after {DEADLINE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let total = start.elapsed();
    let executed = fleet.stop()?;
    let transactions = transactions(client).await? - tx_before;
    let statements = match (st_before, statements(client).await) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    let succeeded = store
        .list_runs(&RunFilter {
            statuses: vec![flowdag_runtime::store::RunStatus::Succeeded],
            ..RunFilter::default()
        })
        .await?
        .len();
    if succeeded as u64 != RUNS {
        return Err(format!("{succeeded} of {RUNS} runs succeeded").into());
    }
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;
    Ok(Fleetrun {
        workers,
        submit,
        total,
        executed,
        transactions,
        statements,
    })
}

/// The claim's update, raw: `connections` connections each updating rows of their own, one
/// autocommitted statement each, for `RAW_FOR`. Updates per second.
async fn raw(url: &str, client: &Client, connections: usize) -> Result<f64, Error> {
    let table = format!("scale_bench_raw_{}", std::process::id());
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table};
             CREATE TABLE {table} (id bigint PRIMARY KEY, status text NOT NULL,
               version bigint NOT NULL);
             INSERT INTO {table} SELECT g, 'ready', 0 FROM generate_series(0, 999999) g;"
        ))
        .await?;
    // Alone: VACUUM cannot run in the implicit transaction of several statements.
    client
        .batch_execute(&format!("VACUUM ANALYZE {table}"))
        .await?;
    let mut clients = Vec::new();
    for _ in 0..connections {
        clients.push(connect(url).await?);
    }
    let sql = format!(
        "UPDATE {table} SET status = 'running', version = version + 1
         WHERE id = $1 AND status = 'ready' AND version = $2"
    );
    let start = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let sql = sql.clone();
            tokio::spawn(async move {
                let statement = c.prepare(&sql).await?;
                let mut id = (i as i64) * 200_000;
                let mut done = 0u64;
                while start.elapsed() < RAW_FOR {
                    let n = c.execute(&statement, &[&id, &0i64]).await?;
                    done += n;
                    id += 1;
                }
                Ok::<u64, tokio_postgres::Error>(done)
            })
        })
        .collect();
    let mut updates = 0;
    for task in tasks {
        updates += task.await??;
    }
    let rate = updates as f64 / start.elapsed().as_secs_f64();
    client.batch_execute(&format!("DROP TABLE {table}")).await?;
    Ok(rate)
}

async fn bench() -> Result<(), Error> {
    let url = testing::server();
    let client = connect(&url).await?;
    let setting = |name: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .map(|row| row.get::<_, String>(0))
        }
    };
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    println!(
        "PostgreSQL {version}: fsync={}, synchronous_commit={}, {} cores; {RUNS} runs of {NODES} \
         no-op operations (1 -> 18 in parallel -> 1) per configuration",
        setting("fsync").await?,
        setting("synchronous_commit").await?,
        std::thread::available_parallelism().map_or(0, usize::from),
    );
    let _ = client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await;
    let rounds: usize = match std::env::var("ROUNDS") {
        Ok(n) => n
            .parse()
            .map_err(|_| format!("ROUNDS={n} is not a number"))?,
        Err(_) => 1,
    };
    println!(
        "\n| workers | submit (ms) | all finished (ms) | nodes/s | raw updates/s ({RAW_FOR:?}) | nodes/s ÷ updates/s | tasks per worker | transactions/node | statements/node |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    // The raw rate just before each fleet: the disk's flush time drifts.
    for _ in 0..rounds {
        for workers in FLEETS {
            let raw = raw(&url, &client, workers).await?;
            let run = fleet(&url, &client, workers).await?;
            row(&run, raw);
        }
    }
    Ok(())
}

/// One line of the table.
fn row(run: &Fleetrun, raw: f64) {
    {
        let nodes = (RUNS * NODES) as f64;
        let rate = nodes / run.total.as_secs_f64();
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.3} | {} | {:.1} | {} |",
            run.workers,
            run.submit.as_millis(),
            run.total.as_millis(),
            rate,
            raw,
            rate / raw,
            run.executed
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
            run.transactions as f64 / nodes,
            run.statements
                .map_or_else(|| "n/a".to_owned(), |s| format!("{:.1}", s as f64 / nodes)),
        );
    }
}
