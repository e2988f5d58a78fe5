//! Distributed runs on one PostgreSQL server, side by side with what bounds them: nodes per
//! second of a 20-node fan, a 100-step chain and a `ForEach` of 500 instances (each instance
//! a task) with 1, 2 and 4 worker processes; the raw rate
//! of the conditional single-row update a task claim is (`UPDATE … SET status = 'running',
//! version = version + 1 WHERE id = $1 AND status = 'ready' AND version = $2`) from as many
//! connections; and a PostgreSQL job queue of the Rust ecosystem (apalis with its PostgreSQL
//! backend) running as many no-op jobs on as many worker processes; all in the same run.
//!
//! ```text
//! eval "$(bash .ci/postgres start)"              # or FLOW_PG_URL=postgres://… of a server
//! cargo bench -p flow-benches --bench scale
//! ```
//!
//! Not criterion: one configuration takes seconds, so each is measured once per round and the
//! program prints a table. Each works off a backlog: the runs are submitted (the jobs pushed)
//! first, then the workers (this binary again, started with `FLOW_SCALE_WORKER=<schema>`, or
//! the queue's program of `benches/queue`, which the bench builds first; killed however the
//! bench ends) are told to go, and the clock runs from
//! then until the last run (job) is done. The server is found as the store's tests find it
//! (`FLOW_PG_URL`, else `.ci/postgres start`, which runs the server with `fsync=on` and the
//! default `synchronous_commit`); the bench prints both settings. `ROUNDS=3` measures every
//! configuration three times. Where the server preloads `pg_stat_statements` (`.ci/postgres`
//! does), the bench also counts the statements (round trips) per node; else it prints `n/a`.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use flowdag::prelude::*;
use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use flowdag_runtime::store::{RunFilter, Store};
use flowdag_runtime::worker::Worker;
use tokio_postgres::{Client, NoTls};

/// Nodes per configuration: 100 runs of the fan, 20 runs of the chain, 4 runs of the `ForEach`
/// (its instances), 2,000 jobs.
const NODES: u64 = 2_000;
/// Worker processes per configuration.
const FLEETS: [usize; 3] = [1, 2, 4];
/// Runs and tasks (jobs) one worker process drives at once.
const IN_FLIGHT: usize = 8;
/// How long the raw update rate is measured for each number of connections.
const RAW_FOR: Duration = Duration::from_secs(3);
/// A configuration that takes longer than this failed.
const DEADLINE: Duration = Duration::from_secs(300);
/// The environment variable that makes this binary a flow worker of the schema it names.
const WORKER_ENV: &str = "FLOW_SCALE_WORKER";

/// What a configuration runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Distributed runs of [`Fan`]: 20 nodes each.
    Fan,
    /// Distributed runs of [`Chain`]: 100 nodes each.
    Chain,
    /// Distributed runs of [`Each`]: a `ForEach` of 500 instances, each a task.
    Each,
    /// apalis jobs (one no-op each).
    Jobs,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::Fan => "fan (20 nodes)",
            Load::Chain => "chain (100 steps)",
            Load::Each => "ForEach (500 instances)",
            Load::Jobs => "apalis jobs",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Load::Jobs => "apalis",
            Load::Fan | Load::Chain | Load::Each => "flow",
        }
    }
}

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

workflow! {
    #[flow(durable)]
    Each(x: u64) -> u64 {
        done = ForEach(i in 0..EACH) {
            one = Operation(op(x + i))
            => one
        }
        => done.len() as u64
    }
}

/// The instances of each run of [`Each`].
const EACH: u64 = 500;

workflow! {
    #[flow(durable)]
    Chain(x: u64) -> u64 {
        Sequential {
            s0 = Operation(op(x)),
            s1 = Operation(op(s0)),
            s2 = Operation(op(s1)),
            s3 = Operation(op(s2)),
            s4 = Operation(op(s3)),
            s5 = Operation(op(s4)),
            s6 = Operation(op(s5)),
            s7 = Operation(op(s6)),
            s8 = Operation(op(s7)),
            s9 = Operation(op(s8)),
            s10 = Operation(op(s9)),
            s11 = Operation(op(s10)),
            s12 = Operation(op(s11)),
            s13 = Operation(op(s12)),
            s14 = Operation(op(s13)),
            s15 = Operation(op(s14)),
            s16 = Operation(op(s15)),
            s17 = Operation(op(s16)),
            s18 = Operation(op(s17)),
            s19 = Operation(op(s18)),
            s20 = Operation(op(s19)),
            s21 = Operation(op(s20)),
            s22 = Operation(op(s21)),
            s23 = Operation(op(s22)),
            s24 = Operation(op(s23)),
            s25 = Operation(op(s24)),
            s26 = Operation(op(s25)),
            s27 = Operation(op(s26)),
            s28 = Operation(op(s27)),
            s29 = Operation(op(s28)),
            s30 = Operation(op(s29)),
            s31 = Operation(op(s30)),
            s32 = Operation(op(s31)),
            s33 = Operation(op(s32)),
            s34 = Operation(op(s33)),
            s35 = Operation(op(s34)),
            s36 = Operation(op(s35)),
            s37 = Operation(op(s36)),
            s38 = Operation(op(s37)),
            s39 = Operation(op(s38)),
            s40 = Operation(op(s39)),
            s41 = Operation(op(s40)),
            s42 = Operation(op(s41)),
            s43 = Operation(op(s42)),
            s44 = Operation(op(s43)),
            s45 = Operation(op(s44)),
            s46 = Operation(op(s45)),
            s47 = Operation(op(s46)),
            s48 = Operation(op(s47)),
            s49 = Operation(op(s48)),
            s50 = Operation(op(s49)),
            s51 = Operation(op(s50)),
            s52 = Operation(op(s51)),
            s53 = Operation(op(s52)),
            s54 = Operation(op(s53)),
            s55 = Operation(op(s54)),
            s56 = Operation(op(s55)),
            s57 = Operation(op(s56)),
            s58 = Operation(op(s57)),
            s59 = Operation(op(s58)),
            s60 = Operation(op(s59)),
            s61 = Operation(op(s60)),
            s62 = Operation(op(s61)),
            s63 = Operation(op(s62)),
            s64 = Operation(op(s63)),
            s65 = Operation(op(s64)),
            s66 = Operation(op(s65)),
            s67 = Operation(op(s66)),
            s68 = Operation(op(s67)),
            s69 = Operation(op(s68)),
            s70 = Operation(op(s69)),
            s71 = Operation(op(s70)),
            s72 = Operation(op(s71)),
            s73 = Operation(op(s72)),
            s74 = Operation(op(s73)),
            s75 = Operation(op(s74)),
            s76 = Operation(op(s75)),
            s77 = Operation(op(s76)),
            s78 = Operation(op(s77)),
            s79 = Operation(op(s78)),
            s80 = Operation(op(s79)),
            s81 = Operation(op(s80)),
            s82 = Operation(op(s81)),
            s83 = Operation(op(s82)),
            s84 = Operation(op(s83)),
            s85 = Operation(op(s84)),
            s86 = Operation(op(s85)),
            s87 = Operation(op(s86)),
            s88 = Operation(op(s87)),
            s89 = Operation(op(s88)),
            s90 = Operation(op(s89)),
            s91 = Operation(op(s90)),
            s92 = Operation(op(s91)),
            s93 = Operation(op(s92)),
            s94 = Operation(op(s93)),
            s95 = Operation(op(s94)),
            s96 = Operation(op(s95)),
            s97 = Operation(op(s96)),
            s98 = Operation(op(s97)),
            s99 = Operation(op(s98)),
        }
        => s99
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

/// The job queue's program (`benches/queue`, a workspace of its own), built in `target/queue`.
fn queue_exe() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    root.join("../target/queue/release/flow-bench-queue")
}

/// Builds the job queue's program (release), the first time quietly long: its own lock file,
/// its own dependencies (apalis, sqlx).
fn build_queue() -> Result<(), Error> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    eprintln!("building the job queue to compare with (benches/queue: apalis on PostgreSQL)…");
    let built = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(root.join("queue/Cargo.toml"))
        .arg("--target-dir")
        .arg(root.join("../target/queue"))
        .status()?;
    if !built.success() {
        return Err(format!("building benches/queue failed: {built}").into());
    }
    Ok(())
}

/// A worker's standard input: the first line says go, its end says stop.
fn gate() -> (
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (went, go) = tokio::sync::oneshot::channel::<()>();
    let (closed, stop) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut stdin = std::io::stdin().lock();
        let _ = std::io::BufRead::read_line(&mut stdin, &mut line);
        let _ = went.send(());
        let _ = stdin.read_to_end(&mut Vec::new());
        let _ = closed.send(());
    });
    (go, stop)
}

/// A flow worker process: connects, waits for the word, runs until its standard input closes.
async fn work(schema: &str) -> Result<(), Error> {
    let url = std::env::var("FLOW_PG_URL").map_err(|_| "FLOW_PG_URL is not set")?;
    let store = store(&url, schema)?;
    store.migrate().await?;
    let (go, stop) = gate();
    let _ = go.await;
    let report = Worker::new(store)
        .register::<Fan>()
        .register::<Chain>()
        .register::<Each>()
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
    fn start(n: usize, url: &str, schema: &str, load: Load) -> Result<Fleet, Error> {
        let mut fleet = Fleet(Vec::new());
        for _ in 0..n {
            let mut command = match load {
                Load::Jobs => {
                    let mut queue = Command::new(queue_exe());
                    queue.args(["work", schema, &IN_FLIGHT.to_string()]);
                    queue
                }
                Load::Fan | Load::Chain | Load::Each => {
                    let mut flow = Command::new(std::env::current_exe()?);
                    flow.env(WORKER_ENV, schema);
                    flow
                }
            };
            fleet.0.push(
                command
                    .env("FLOW_PG_URL", url)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()?,
            );
        }
        Ok(fleet)
    }

    /// Tells every worker to go.
    fn go(&mut self) -> Result<(), Error> {
        for child in &mut self.0 {
            if let Some(stdin) = child.stdin.as_mut() {
                stdin.write_all(b"go\n")?;
                stdin.flush()?;
            }
        }
        Ok(())
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

/// CPU time of the whole machine (all cores, not idle or waiting for I/O) so far, from
/// `/proc/stat`, in seconds; 0 where it cannot be read.
fn machine_busy() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().next() else {
        return 0.0;
    };
    // user nice system idle iowait irq softirq steal ...
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let busy: f64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    busy / 100.0
}

/// CPU time of this process's reaped children (the worker processes once they exited), in
/// seconds, from `/proc/self/stat` (cutime + cstime); 0 where it cannot be read.
fn children_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The fields after the command's closing parenthesis: state is field 3, cutime 16.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<f64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    (fields.get(13).copied().unwrap_or(0.0) + fields.get(14).copied().unwrap_or(0.0)) / 100.0
}

/// With `PROFILE` set: where a load's time went. The machine's CPU while the load was worked
/// off, split into the worker processes' and the rest (the server, and this program's
/// watching), and the statements the server ran most, with their total execution time.
async fn print_profile(
    client: &Client,
    load: Load,
    workers: usize,
    took: Duration,
    busy: f64,
    workers_cpu: f64,
) {
    let secs = took.as_secs_f64();
    println!(
        "profile {} on {workers}: {secs:.2} s; machine busy {:.2} of {} cores; workers {:.2} cores, server and bench {:.2} cores",
        load.name(),
        busy / secs,
        std::thread::available_parallelism().map_or(0, usize::from),
        workers_cpu / secs,
        (busy - workers_cpu) / secs,
    );
    let Ok(rows) = client
        .query(
            "SELECT calls, total_exec_time, regexp_replace(left(query, 90), '\\s+', ' ', 'g')
             FROM pg_stat_statements
             WHERE query NOT LIKE '%scale_bench_watch%' AND query NOT LIKE '%pg_stat%'
             ORDER BY total_exec_time DESC LIMIT 8",
            &[],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let calls: i64 = row.get(0);
        let ms: f64 = row.get(1);
        let query: String = row.get(2);
        println!("  {calls:>7} calls {ms:>9.1} ms  {query}");
    }
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
    load: Load,
    workers: usize,
    submit: Duration,
    total: Duration,
    executed: Vec<u64>,
    transactions: i64,
    statements: Option<i64>,
}

/// `NODES` nodes of `load` on `workers` worker processes, in a fresh schema (queue).
async fn fleet(url: &str, client: &Client, workers: usize, load: Load) -> Result<Fleetrun, Error> {
    let schema = format!(
        "flow_scale_bench_{}_{workers}_{}",
        std::process::id(),
        load.kind()
    );
    let store = store(url, &schema)?;
    // Creates the schema before the workers race to.
    store.migrate().await?;
    let mut fleet = Fleet::start(workers, url, &schema, load)?;
    // The backlog.
    let start = Instant::now();
    match load {
        Load::Fan => {
            for x in 0..NODES / 20 {
                Fan::runner()
                    .durable(&store, format!("fan-{x:03}"))
                    .distributed()
                    .submit(x)
                    .await?;
            }
        }
        Load::Chain => {
            for x in 0..NODES / 100 {
                Chain::runner()
                    .durable(&store, format!("chain-{x:03}"))
                    .distributed()
                    .submit(x)
                    .await?;
            }
        }
        Load::Each => {
            for x in 0..NODES / EACH {
                Each::runner()
                    .durable(&store, format!("each-{x:03}"))
                    .distributed()
                    .submit(x)
                    .await?;
            }
        }
        Load::Jobs => {
            let pushed = Command::new(queue_exe())
                .args(["push", &schema, &NODES.to_string()])
                .env("FLOW_PG_URL", url)
                .status()?;
            if !pushed.success() {
                return Err(format!("pushing the jobs failed: {pushed}").into());
            }
        }
    }
    let submit = start.elapsed();
    // The workers have connected (and, for flow, migrated) by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let profile = std::env::var("PROFILE").is_ok();
    if profile {
        let _ = client
            .batch_execute("SELECT pg_stat_statements_reset()")
            .await;
    }
    let tx_before = transactions(client).await?;
    let st_before = statements(client).await;
    let cpu_before = (machine_busy(), children_cpu());
    let start = Instant::now();
    fleet.go()?;
    let watch = match load {
        Load::Jobs => format!(
            "SELECT ({NODES} - count(*))::bigint /* scale_bench_watch */ FROM apalis.jobs
             WHERE job_type = '{schema}' AND done_at IS NOT NULL"
        ),
        Load::Fan | Load::Chain | Load::Each => format!(
            "SELECT count(*) /* scale_bench_watch */ FROM {schema}.runs
             WHERE status NOT IN ('succeeded', 'failed', 'cancelled')"
        ),
    };
    loop {
        let left: i64 = client.query_one(watch.as_str(), &[]).await?.get(0);
        if left == 0 {
            break;
        }
        if start.elapsed() > DEADLINE {
            return Err(format!("{left} unfinished after {DEADLINE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let total = start.elapsed();
    let busy = machine_busy() - cpu_before.0;
    let executed = fleet.stop()?;
    if profile {
        print_profile(
            client,
            load,
            workers,
            total,
            busy,
            children_cpu() - cpu_before.1,
        )
        .await;
    }
    let transactions = transactions(client).await? - tx_before;
    let statements = match (st_before, statements(client).await) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    if load != Load::Jobs {
        let succeeded = store
            .list_runs(&RunFilter {
                statuses: vec![flowdag_runtime::store::RunStatus::Succeeded],
                ..RunFilter::default()
            })
            .await?
            .len();
        let runs = match load {
            Load::Fan => NODES / 20,
            Load::Each => NODES / EACH,
            _ => NODES / 100,
        };
        if succeeded as u64 != runs {
            return Err(format!("{succeeded} of {runs} runs succeeded").into());
        }
    }
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;
    if load == Load::Jobs {
        client
            .execute("DELETE FROM apalis.jobs WHERE job_type = $1", &[&schema])
            .await?;
    }
    Ok(Fleetrun {
        load,
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
    build_queue()?;
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
        "PostgreSQL {version}: fsync={}, synchronous_commit={}, {} cores; {NODES} nodes per \
         configuration (100 runs of the fan: 1 -> 18 in parallel -> 1; 20 runs of the chain; 4 runs of a ForEach of 500; \
         {NODES} apalis jobs), worked off a backlog",
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
        "\n| load | workers | backlog made in (ms) | worked off in (ms) | nodes/s | raw updates/s ({RAW_FOR:?}) | nodes/s ÷ updates/s | nodes per worker | transactions/node | statements/node |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    // The raw rate just before each group: the disk's flush time drifts.
    for _ in 0..rounds {
        for workers in FLEETS {
            let raw = raw(&url, &client, workers).await?;
            for load in [Load::Fan, Load::Chain, Load::Each, Load::Jobs] {
                let run = fleet(&url, &client, workers, load).await?;
                row(&run, raw);
            }
        }
    }
    Ok(())
}

/// One line of the table.
fn row(run: &Fleetrun, raw: f64) {
    let nodes = NODES as f64;
    let rate = nodes / run.total.as_secs_f64();
    let per_worker = match run.load {
        // apalis's workers do not say how many jobs each ran.
        Load::Jobs => "n/a".to_owned(),
        Load::Fan | Load::Chain | Load::Each => run
            .executed
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" / "),
    };
    println!(
        "| {} | {} | {} | {} | {:.0} | {:.0} | {:.3} | {} | {:.1} | {} |",
        run.load.name(),
        run.workers,
        run.submit.as_millis(),
        run.total.as_millis(),
        rate,
        raw,
        rate / raw,
        per_worker,
        run.transactions as f64 / nodes,
        run.statements
            .map_or_else(|| "n/a".to_owned(), |s| format!("{:.1}", s as f64 / nodes)),
    );
}
