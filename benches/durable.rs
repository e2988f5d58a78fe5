//! The cost of durable runs: journaled nodes per second and runs per second of `#[flow(durable)]`
//! workflows on a `SqliteStore`, against the physical limit, which is rusqlite inserting **the
//! same rows** (the runs row and the node rows of `create_run`; each commit's events and outputs
//! and its update of the runs row; the release of the lease) in **the same number of
//! transactions** with the same pragmas (WAL, `synchronous = FULL`, then `NORMAL`), in the same
//! run of the bench.
//!
//! The workflows are the chain and the fan of `benches/generated/durable_*.rs`, whose operation
//! returns at once (`x + 1`): all the time is the journal's. A case runs its workflows one at a
//! time, or 16 at once (their commits meet in the store's group commit). The rows the raw side
//! writes are recorded from one run of the case through a store that keeps a copy of every
//! request; the raw side then writes them in as many transactions as the store used in the flow
//! round just before (`SqliteStore::stats`), cut evenly in request order.
//!
//! `cargo bench -p flow-benches --bench durable` prints the tables of docs/performance.md (the
//! last: the resume of a run stopped inside a durable `ForEach` or `Loop`, `ONLY=resume`).
//! `REPEAT=9 ROUNDS_SCALE=2 cargo bench -p flow-benches --bench durable` runs more rounds and
//! larger ones; `ONLY=chain_100` runs one case, `SYNC=NORMAL` one setting; `VERBOSE=1` prints
//! every round. The files live under cargo's temporary
//! directory for benches (`target/tmp/durable/`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowdag_runtime::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, NodeRow, Owner, RunData,
    RunFilter, RunSummary, SignalSent, Store, StoreFuture, StoredEvent, StoredOutput, StoredSignal,
};
use flowdag_sqlite::{Durability, SqliteOptions, SqliteStore};
use rusqlite::{Connection, params};
use tokio::runtime::Runtime;

/// The durable workflows, with the immediate operation.
mod wf {
    use crate::common::ops::imm as op;
    use flowdag::workflow;

    include!("generated/durable_chain_20.rs");
    include!("generated/durable_chain_100.rs");
    include!("generated/durable_fan_20.rs");
    include!("generated/durable_fan_100.rs");

    workflow! {
        /// A durable `ForEach`: one instance per item, 64 at a time.
        #[flow(durable)]
        pub DurableForEach(n: u64) -> u64 {
            all = ForEach(i in 0..n, max_concurrency = 64) {
                x = Operation(op(i))
                => x
            }
            => all.len() as u64
        }
    }
}

/// The nests of the resume table: a `ForEach` and a `Loop` whose instance `n` waits until
/// the process stops (the instances before it have ended).
mod stopped {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU64, Ordering};

    use flowdag::workflow;

    /// The instance that waits for ever; `u64::MAX`: none.
    pub static HANG_AT: AtomicU64 = AtomicU64::new(u64::MAX);

    /// Returns at once, but for the instance `HANG_AT`, which never does.
    pub async fn step(i: u64) -> Result<u64, Infallible> {
        if HANG_AT.load(Ordering::SeqCst) == i {
            std::future::pending::<()>().await;
        }
        Ok(i + 1)
    }

    workflow! {
        #[flow(durable)]
        pub Items(n: u64) -> u64 {
            all = ForEach(i in 0..n + 1, max_concurrency = 64) {
                x = Operation(step(i))
                => x
            }
            => all.len() as u64
        }
    }

    workflow! {
        /// As `Rounds`, continuing as new every 1,000 iterations (each generation kept).
        #[flow(durable, continue_as_new)]
        pub Generations(from: u64, n: u64) -> flowdag::durable::Continue<(u64, u64), u64> {
            last = Loop(max = 1_000, prev = before, on_max = stop) {
                x = Operation(step(before.copied().unwrap_or(from)))
                => x
            } until (x >= n)
            => match last >= n {
                true => flowdag::durable::Continue::Done(last),
                false => flowdag::durable::Continue::Again((last, n)),
            }
        }
    }

    workflow! {
        #[flow(durable)]
        pub Rounds(n: u64) -> u64 {
            last = Loop(max = 1_000_000, prev = before) {
                x = Operation(step(before.copied().unwrap_or(0)))
                => x
            } until (x > n)
            => last
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Chain20,
    Chain100,
    Fan20,
    Fan100,
    ForEach10k,
}

impl Shape {
    fn nodes(self) -> u64 {
        match self {
            Shape::Chain20 | Shape::Fan20 => 20,
            Shape::Chain100 | Shape::Fan100 => 100,
            Shape::ForEach10k => 10_000,
        }
    }

    /// What a run returns for `x = 0`.
    fn expected(self) -> u64 {
        match self {
            Shape::Chain20 => 20,
            Shape::Chain100 => 100,
            Shape::Fan20 | Shape::Fan100 => 2,
            Shape::ForEach10k => 10_000,
        }
    }
}

/// One durable run of `shape` in `store` under `id`.
async fn run_one<S: Store + Clone>(shape: Shape, store: &S, id: String) {
    let outcome = match shape {
        Shape::Chain20 => {
            wf::DurableChain20::runner()
                .durable(store, id)
                .execute(0)
                .await
        }
        Shape::Chain100 => {
            wf::DurableChain100::runner()
                .durable(store, id)
                .execute(0)
                .await
        }
        Shape::Fan20 => {
            wf::DurableFan20::runner()
                .durable(store, id)
                .execute(0)
                .await
        }
        Shape::Fan100 => {
            wf::DurableFan100::runner()
                .durable(store, id)
                .execute(0)
                .await
        }
        Shape::ForEach10k => {
            wf::DurableForEach::runner()
                .durable(store, id)
                .execute(10_000)
                .await
        }
    };
    let output = outcome
        .expect("the store works")
        .result
        .expect("the run succeeds");
    assert_eq!(output, shape.expected());
}

/// Runs `ids` in groups of `at_once` (each group at once, the groups one after another).
async fn run_all<S: Store + Clone>(shape: Shape, store: &S, ids: &[String], at_once: usize) {
    for group in ids.chunks(at_once) {
        futures::future::join_all(group.iter().map(|id| run_one(shape, store, id.clone()))).await;
    }
}

// --- The rows a run writes, recorded ---------------------------------------------------------

/// A request a run made of its store, with the rows it writes.
#[derive(Clone)]
enum Write {
    Create {
        run: usize,
        workflow: String,
        graph_hash: u64,
        input: Vec<u8>,
        input_hash: u64,
        options: Vec<u8>,
        nodes: Vec<NodeRow>,
    },
    Commit {
        run: usize,
        events: Vec<StoredEvent>,
        outputs: Vec<StoredOutput>,
        end: bool,
    },
    Release {
        run: usize,
    },
}

/// A store that keeps a copy of every write request, in the order they are made, naming the
/// run by its position in `ids`.
#[derive(Clone)]
struct Recorder {
    inner: SqliteStore,
    ids: Arc<Vec<String>>,
    writes: Arc<Mutex<Vec<Write>>>,
}

impl Recorder {
    fn index(&self, run: &str) -> usize {
        self.ids
            .iter()
            .position(|id| id == run)
            .expect("a run of the recording")
    }

    fn keep(&self, write: Write) {
        self.writes.lock().expect("not poisoned").push(write);
    }
}

impl Store for Recorder {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        assert!(run.events.is_empty() && run.timers.is_empty());
        self.keep(Write::Create {
            run: self.index(&run.id),
            workflow: run.workflow.clone(),
            graph_hash: run.graph_hash,
            input: run.input.clone(),
            input_hash: run.input_hash,
            options: run.options.clone(),
            nodes: run.nodes.clone(),
        });
        self.inner.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        self.inner.load_run(run, owner, lease)
    }
    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
        self.inner.list_runs(filter)
    }
    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
        self.inner.events(run, from_seq)
    }
    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
        self.inner.run_data(run)
    }
    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        assert!(batch.timers.is_empty() && batch.waits.is_empty() && batch.consumed.is_empty());
        self.keep(Write::Commit {
            run: self.index(&batch.run),
            events: batch.events.clone(),
            outputs: batch.outputs.clone(),
            end: batch.end.is_some(),
        });
        self.inner.commit(batch)
    }
    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        self.inner.due_timers(horizon, limit)
    }
    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        self.inner.send_signal(signal)
    }
    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        self.inner.signals(run, after)
    }
    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        self.inner.heartbeat(owner, held, lease)
    }
    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        for lease in held {
            self.keep(Write::Release {
                run: self.index(&lease.run),
            });
        }
        self.inner.release(owner, held)
    }
}

/// The write requests of one group of `at_once` runs of `shape`, in the order they were made.
fn record(rt: &Runtime, dir: &Path, shape: Shape, at_once: usize) -> Vec<Write> {
    let ids: Vec<String> = (0..at_once).map(|i| format!("record-{i}")).collect();
    let recorder = Recorder {
        inner: SqliteStore::open(dir.join("record.db")).expect("a store"),
        ids: Arc::new(ids.clone()),
        writes: Arc::new(Mutex::new(Vec::new())),
    };
    rt.block_on(run_all(shape, &recorder, &ids, at_once));
    recorder.writes.lock().expect("not poisoned").clone()
}

// --- The raw side: the same rows through rusqlite ---------------------------------------------

/// A connection to a file with the store's schema (made by opening a store on it), with the
/// store's pragmas.
fn raw_connection(path: &Path, durability: Durability) -> (Connection, RawSql) {
    drop(SqliteStore::open(path).expect("the schema"));
    let conn = Connection::open(path).expect("sqlite");
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .expect("wal");
    let synchronous = match durability {
        Durability::Power => "FULL",
        Durability::Process => "NORMAL",
    };
    conn.execute_batch(&format!("PRAGMA synchronous = {synchronous};"))
        .expect("synchronous");
    let sql = RawSql::new(&conn);
    (conn, sql)
}

/// The raw side's inserts, made once from the file's schema.
struct RawSql {
    runs: String,
    nodes: String,
    events: String,
    outputs: String,
}

impl RawSql {
    fn new(conn: &Connection) -> RawSql {
        RawSql {
            runs: insert(
                conn,
                "INSERT",
                "runs",
                &[
                    ("id", "?1"),
                    ("workflow", "?2"),
                    ("graph_hash", "?3"),
                    ("input", "?4"),
                    ("input_hash", "?5"),
                    ("options", "?6"),
                    ("status", "'running'"),
                    ("next_seq", "0"),
                    ("version", "1"),
                    ("owner", "'bench'"),
                    ("lease_until", "?7"),
                    ("created_ms", "?8"),
                    ("updated_ms", "?8"),
                ],
            ),
            nodes: insert(
                conn,
                "INSERT",
                "nodes",
                &[
                    ("run", "?1"),
                    ("node", "?2"),
                    ("name", "?3"),
                    ("label", "?4"),
                    ("fingerprint", "?5"),
                    ("preds", "?6"),
                ],
            ),
            events: insert(
                conn,
                "INSERT",
                "events",
                &[
                    ("run", "?1"),
                    ("seq", "?2"),
                    ("format", "?3"),
                    ("node", "?4"),
                    ("node_name", "?5"),
                    ("path", "?6"),
                    ("attempt", "?7"),
                    ("kind", "?8"),
                    ("data", "?9"),
                    ("at_us", "?10"),
                    ("wall_ms", "?11"),
                ],
            ),
            outputs: insert(
                conn,
                "INSERT OR REPLACE",
                "outputs",
                &[
                    ("run", "?1"),
                    ("node", "?2"),
                    ("instance", "?3"),
                    ("type_name", "?4"),
                    ("bytes", "?5"),
                ],
            ),
        }
    }
}

/// An insert into `table` of the `known` columns, plus an empty value of its type for every
/// other column that needs one (`NOT NULL`, no default): columns a newer schema may add, which
/// this bench does not know.
fn insert(conn: &Connection, verb: &str, table: &str, known: &[(&str, &str)]) -> String {
    let (mut columns, mut values): (Vec<String>, Vec<String>) = known
        .iter()
        .map(|(c, v)| (c.to_string(), v.to_string()))
        .unzip();
    let mut stmt = conn
        .prepare(&format!(
            "SELECT name, type, \"notnull\", dflt_value FROM pragma_table_info('{table}')"
        ))
        .expect("the table's columns");
    let others = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, bool>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })
        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
        .expect("the table's columns");
    for (name, kind, not_null, default) in others {
        if not_null && default.is_none() && !known.iter().any(|(c, _)| *c == name) {
            let empty = match kind.to_ascii_uppercase().as_str() {
                "INTEGER" | "REAL" => "0",
                "BLOB" => "x''",
                _ => "''",
            };
            columns.push(name);
            values.push(empty.to_owned());
        }
    }
    format!(
        "{verb} INTO {table} ({}) VALUES ({})",
        columns.join(", "),
        values.join(", ")
    )
}

/// Writes one request's rows for run `id`.
fn raw_write(conn: &Connection, sql: &RawSql, write: &Write, id: &str, next_seq: &mut u64) {
    match write {
        Write::Create {
            workflow,
            graph_hash,
            input,
            input_hash,
            options,
            nodes,
            ..
        } => {
            conn.prepare_cached(&sql.runs)
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        id,
                        workflow,
                        *graph_hash as i64,
                        input,
                        *input_hash as i64,
                        options,
                        1i64,
                        0i64
                    ])
                })
                .expect("the runs row");
            let mut stmt = conn.prepare_cached(&sql.nodes).expect("prepare");
            for node in nodes {
                let preds = node
                    .preds
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                stmt.execute(params![
                    id,
                    node.node,
                    node.name,
                    node.label,
                    node.fingerprint as i64,
                    preds
                ])
                .expect("a node row");
            }
        }
        Write::Commit {
            events,
            outputs,
            end,
            ..
        } => {
            let mut stmt = conn.prepare_cached(&sql.events).expect("prepare");
            for e in events {
                stmt.execute(params![
                    id,
                    e.seq as i64,
                    e.format,
                    e.node,
                    e.node_name,
                    e.path.as_ref().map(ToString::to_string),
                    e.attempt,
                    e.kind,
                    e.data,
                    e.at_us as i64,
                    0i64
                ])
                .expect("an event row");
            }
            let mut stmt = conn.prepare_cached(&sql.outputs).expect("prepare");
            for o in outputs {
                stmt.execute(params![id, o.node, o.instance, o.type_name, o.bytes])
                    .expect("an output row");
            }
            *next_seq += events.len() as u64;
            let (status, ended) = if *end {
                ("succeeded", 1)
            } else {
                ("running", 0)
            };
            conn.prepare_cached(
                "UPDATE runs SET status = ?2, next_seq = ?3, lease_until = ?4, updated_ms = ?5,
                    ended = ?6 WHERE id = ?1",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![id, status, *next_seq as i64, 2i64, 0i64, ended])
            })
            .expect("the runs row");
        }
        Write::Release { .. } => {
            conn.prepare_cached("UPDATE runs SET owner = NULL, lease_until = NULL WHERE id = ?1")
                .and_then(|mut stmt| stmt.execute([id]))
                .expect("the runs row");
        }
    }
}

/// Writes the rows of `writes` once per group of `at_once` runs of `ids`, in `transactions`
/// transactions cut evenly in request order.
fn raw_round(
    (conn, sql): &(Connection, RawSql),
    writes: &[Write],
    ids: &[String],
    at_once: usize,
    transactions: u64,
) -> Duration {
    let requests: Vec<(&Write, usize)> = ids
        .chunks(at_once)
        .enumerate()
        .flat_map(|(group, _)| {
            writes.iter().map(move |w| {
                let run = match w {
                    Write::Create { run, .. }
                    | Write::Commit { run, .. }
                    | Write::Release { run } => *run,
                };
                (w, group * at_once + run)
            })
        })
        .collect();
    let total = requests.len() as u64;
    let transactions = transactions.clamp(1, total);
    let mut next_seq = vec![0u64; ids.len()];
    let start = Instant::now();
    let mut done = 0u64;
    for t in 1..=transactions {
        let until = total * t / transactions;
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        while done < until {
            let (write, run) = requests[done as usize];
            raw_write(conn, sql, write, &ids[run], &mut next_seq[run]);
            done += 1;
        }
        conn.execute_batch("COMMIT").expect("commit");
    }
    start.elapsed()
}

// --- The table ---------------------------------------------------------------------------------

struct Case {
    name: &'static str,
    shape: Shape,
    at_once: usize,
    /// Runs per round (a multiple of `at_once`) under FULL; NORMAL runs four times as many.
    runs: usize,
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The CPU time of every thread of the process so far (the first field of each thread's
/// `schedstat`, in ns; Linux). `None` where it cannot be read.
fn cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("durable")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the bench's files");
    dir
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let repeat = env("REPEAT", 5).max(1);
    let scale = env("ROUNDS_SCALE", 1).max(1);
    let only = std::env::var("ONLY").ok();
    let sync_only = std::env::var("SYNC").ok();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let cases = [
        Case {
            name: "chain_100",
            shape: Shape::Chain100,
            at_once: 1,
            runs: 4,
        },
        Case {
            name: "fan_100",
            shape: Shape::Fan100,
            at_once: 1,
            runs: 16,
        },
        Case {
            name: "chain_20",
            shape: Shape::Chain20,
            at_once: 1,
            runs: 16,
        },
        Case {
            name: "fan_20",
            shape: Shape::Fan20,
            at_once: 1,
            runs: 32,
        },
        Case {
            name: "for_each_10k",
            shape: Shape::ForEach10k,
            at_once: 1,
            runs: 1,
        },
        Case {
            name: "chain_20 x16",
            shape: Shape::Chain20,
            at_once: 16,
            runs: 32,
        },
        Case {
            name: "fan_20 x16",
            shape: Shape::Fan20,
            at_once: 16,
            runs: 64,
        },
    ];
    println!(
        "median of {repeat} rounds; flow and raw alternate; ratio = flow nodes/s ÷ raw nodes/s"
    );
    println!(
        "| sync | case | tx per run | requests per tx | flow nodes/s | flow runs/s | µs per run | raw nodes/s | flow ÷ raw | CPU µs per node, flow / raw |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for durability in [Durability::Power, Durability::Process] {
        let sync = match durability {
            Durability::Power => "FULL",
            Durability::Process => "NORMAL",
        };
        if sync_only.as_deref().is_some_and(|s| s != sync) {
            continue;
        }
        for case in &cases {
            if only.as_deref().is_some_and(|o| o != case.name) {
                continue;
            }
            let runs = match durability {
                Durability::Power => case.runs,
                Durability::Process => case.runs * 4,
            } * scale;
            let slug = format!("{}-{}", case.name.replace(' ', ""), sync);
            let files = dir(&slug);
            let writes = record(&rt, &files, case.shape, case.at_once);
            let options = SqliteOptions {
                durability,
                ..SqliteOptions::default()
            };
            let store = SqliteStore::open_with(files.join("flow.db"), options).expect("a store");
            let raw = raw_connection(&files.join("raw.db"), durability);
            // One round of each first, unmeasured: the files' first pages, the caches.
            let warm: Vec<String> = (0..case.at_once).map(|i| format!("warm-{i}")).collect();
            rt.block_on(run_all(case.shape, &store, &warm, case.at_once));
            raw_round(&raw, &writes, &warm, case.at_once, writes.len() as u64);
            let (mut flow_s, mut raw_s, mut ratios, mut tx) = (vec![], vec![], vec![], vec![]);
            let mut cpu_s: Vec<(f64, f64)> = Vec::new();
            let mut requests = Vec::new();
            for round in 0..repeat {
                let ids: Vec<String> = (0..runs).map(|i| format!("r{round}-{i}")).collect();
                let before = store.stats();
                let cpu = cpu_ns();
                let start = Instant::now();
                rt.block_on(run_all(case.shape, &store, &ids, case.at_once));
                let flow = start.elapsed().as_secs_f64();
                let flow_cpu = cpu.zip(cpu_ns()).map(|(a, b)| (b - a) as f64 / 1e9);
                let after = store.stats();
                let transactions = after.transactions - before.transactions;
                requests.push((after.requests - before.requests) as f64);
                let cpu = cpu_ns();
                let raw = raw_round(&raw, &writes, &ids, case.at_once, transactions).as_secs_f64();
                let raw_cpu = cpu.zip(cpu_ns()).map(|(a, b)| (b - a) as f64 / 1e9);
                if let (Some(flow), Some(raw)) = (flow_cpu, raw_cpu) {
                    cpu_s.push((flow, raw));
                }
                flow_s.push(flow);
                raw_s.push(raw);
                ratios.push(raw / flow);
                if std::env::var_os("VERBOSE").is_some() {
                    eprintln!(
                        "  {sync} {} round {round}: flow {flow:.4} s (CPU {flow_cpu:.4?}), raw {raw:.4} s (CPU {raw_cpu:.4?}), {transactions} tx",
                        case.name
                    );
                }
                tx.push(transactions as f64);
            }
            let nodes = (runs as u64 * case.shape.nodes()) as f64;
            let flow = median(flow_s);
            let raw = median(raw_s);
            let tx = median(tx);
            let cpu = |pick: fn(&(f64, f64)) -> f64| {
                if cpu_s.is_empty() {
                    "n/a".to_owned()
                } else {
                    format!(
                        "{:.1}",
                        median(cpu_s.iter().map(pick).collect()) / nodes * 1e6
                    )
                }
            };
            println!(
                "| {sync} | {} | {:.1} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}× | {} / {} |",
                case.name,
                tx / runs as f64,
                median(requests) / tx,
                nodes / flow,
                runs as f64 / flow,
                flow / runs as f64 * 1e6,
                nodes / raw,
                median(ratios),
                cpu(|c| c.0),
                cpu(|c| c.1),
            );
        }
    }
    if only.as_deref().is_none_or(|o| o == "resume") {
        resume_table(&rt, repeat);
    }
}

// --- Resuming a nest ---------------------------------------------------------------------------

/// Which nest a resume case stops in.
#[derive(Clone, Copy)]
enum Nest {
    Items,
    Rounds,
    /// A `Loop` that continues as new every 1,000 iterations: stopped in its last
    /// generation's 1,000th iteration.
    Generations,
}

/// Starts a run of `nest` over `n` instances on the store in `file`, stops it once instance
/// `n` (which never ends) started and the `n` before it ended and were committed, as a killed
/// process would, and closes the store.
fn stop_at(rt: &Runtime, file: &Path, nest: Nest, n: u64) {
    use std::sync::atomic::Ordering;
    // The continued loop's iteration `i` computes `i + 1`: the one that would reach `n` hangs.
    let hang = match nest {
        Nest::Generations => n - 1,
        Nest::Items | Nest::Rounds => n,
    };
    stopped::HANG_AT.store(hang, Ordering::SeqCst);
    let store = SqliteStore::open(file).expect("a store");
    let run = async {
        let ended = match nest {
            Nest::Items => stopped::Items::runner()
                .durable(&store, "stopped")
                .execute(n)
                .await
                .map(drop),
            Nest::Rounds => stopped::Rounds::runner()
                .durable(&store, "stopped")
                .execute(n)
                .await
                .map(drop),
            Nest::Generations => stopped::Generations::runner()
                .durable(&store, "stopped")
                .execute((0, n))
                .await
                .map(drop),
        };
        panic!("the run ended: {ended:?}");
    };
    // The instances run at once; their ends are committed within milliseconds.
    let wait = Duration::from_millis(300 + n / 20);
    rt.block_on(async {
        let _ = tokio::time::timeout(wait, run).await;
    });
    drop(store);
    stopped::HANG_AT.store(u64::MAX, Ordering::SeqCst);
}

/// The resume table: how long resuming a run takes whose `ForEach` had `n` instances ended
/// (and one running), or whose `Loop` was at iteration `n`, for growing `n`.
fn resume_table(rt: &Runtime, repeat: usize) {
    println!();
    println!(
        "resume of a run stopped inside its nest, median of {repeat}: load, replay, restore the ended instances, run the last one"
    );
    println!(
        "| nest | instances ended | resume ms | µs per ended instance | rows stored (events + outputs) | rows a resume reads |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let nests = [
        (Nest::Items, "ForEach"),
        (Nest::Rounds, "Loop"),
        (Nest::Generations, "Loop, continued as new every 1,000"),
    ];
    for (nest, name) in nests {
        for n in [1_000u64, 10_000] {
            let files = dir(&format!("resume-{name}-{n}"));
            let mut took = Vec::new();
            let mut rows = (0, 0);
            for round in 0..repeat {
                let file = files.join(format!("r{round}.db"));
                stop_at(rt, &file, nest, n);
                let store = SqliteStore::open(&file).expect("a store");
                // What is stored, and what a load reads (its lease lapses at once).
                rows = rt.block_on(async {
                    let events = store.events("stopped", 0).await.expect("events").len();
                    let data = store.run_data("stopped").await.expect("the run's data");
                    let loaded = store
                        .load_run("stopped", &Owner::new("bench"), Duration::ZERO)
                        .await
                        .expect("loads");
                    (
                        events + data.outputs.len(),
                        loaded.events.len() + loaded.outputs.len(),
                    )
                });
                let start = Instant::now();
                let result = rt.block_on(async {
                    match nest {
                        Nest::Items => stopped::Items::resume(&store, "stopped").await,
                        Nest::Rounds => stopped::Rounds::resume(&store, "stopped").await,
                        Nest::Generations => stopped::Generations::resume(&store, "stopped")
                            .await
                            .map(|outcome| flowdag::Outcome {
                                result: outcome.result.map(|done| done.done().unwrap_or(0)),
                                report: outcome.report,
                            }),
                    }
                });
                took.push(start.elapsed().as_secs_f64());
                let output = result.expect("resumes").result.expect("succeeds");
                let expected = match nest {
                    Nest::Items | Nest::Rounds => n + 1,
                    Nest::Generations => n,
                };
                assert_eq!(output, expected, "{name} {n}");
            }
            let ms = median(took) * 1e3;
            println!(
                "| {name} | {n} | {ms:.1} | {:.1} | {} | {} |",
                ms * 1e3 / n as f64,
                rows.0,
                rows.1
            );
        }
    }
}
