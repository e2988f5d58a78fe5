//! The fault tests of distributed runs on PostgreSQL: worker processes share a few hundred runs
//! of a workflow with a fan-out, a join, retries, a `Conditional` and a compensation, while
//!
//! - [`workers_killed_with_sigkill_lose_nothing`]: a seeded killer SIGKILLs a random worker every
//!   100–600 ms and restarts it ~50 ms later;
//! - [`workers_ride_out_a_database_restart`]: the PostgreSQL server is stopped for ~2 s and
//!   started again (this checkout's cluster of `.ci/postgres`: the test fails, saying so, when
//!   `FLOW_PG_URL` names another server).
//!
//! Then every run has the exact result (or failed and was compensated, for the inputs whose last
//! step fails), every side effect was applied once per idempotency key and only for attempts the
//! journal requested, no join fired twice, and no task or lease is left behind.
//!
//! The workers are this test binary itself, run with `--exact fleet_worker` and
//! `FLOW_FLEET_WORKER=<schema>` (`fleet_worker` returns at once without it). Every operation
//! writes its side effect into the tables `effects` (once per key: `ON CONFLICT DO NOTHING`) and
//! `calls` (every execution) of the test's schema. `FLOW_FLEET_SEED=n` replays the kills of a
//! failed run (the seed is printed, and in every failure).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use flowdag::Worker;
use flowdag::durable::Attempt;
use flowdag::prelude::*;
use flowdag::store::{RunFilter, RunStatus, Store};
use flowdag_postgres::{PostgresOptions, PostgresStore, testing};

// --- The workflow ------------------------------------------------------------------------------

/// The error of the workflow's operations.
#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

/// A short wait inside each operation, after its side effect: a kill lands in some.
const WORK: Duration = Duration::from_millis(2);

/// The attempt being executed (read before the operation's first await).
fn current() -> Attempt {
    flowdag::attempt().expect("an operation of a durable run knows its attempt")
}

/// Whether an attempt fails its first try: decided by its key, so the same in every process.
fn flaky(attempt: &Attempt) -> bool {
    attempt.attempt() == 1 && fnv1a(attempt.key().as_bytes()).is_multiple_of(4)
}

/// FNV-1a 64: the same hash in every process and every release (std's `DefaultHasher` is not
/// promised to be).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Whether the last step of the run for `order` fails for good (its attempts all fail, and the
/// charge is refunded): one order in ten.
fn ship_fails(order: u64) -> bool {
    order % 10 == 3
}

async fn load(order: u64) -> Result<u64, Refused> {
    let attempt = current();
    let value = order * 10;
    effect(attempt.key(), value).await;
    Ok(value)
}

async fn part(i: u64, base: &u64) -> Result<u64, Refused> {
    let attempt = current();
    let value = base + i * 101;
    effect(attempt.key(), value).await;
    tokio::time::sleep(WORK).await;
    match flaky(&attempt) {
        true => Err(Refused("flaky part")),
        false => Ok(value),
    }
}

async fn note(order: u64) -> Result<(), Refused> {
    let attempt = current();
    effect(attempt.key(), order).await;
    Ok(())
}

/// The join of the fan-out.
async fn sum(parts: [&u64; 6]) -> Result<u64, Refused> {
    let attempt = current();
    let value = parts.iter().copied().sum();
    effect(attempt.key(), value).await;
    Ok(value)
}

async fn charge(total: &u64) -> Result<u64, Refused> {
    let attempt = current();
    let value = total + 1;
    effect(attempt.key(), value).await;
    tokio::time::sleep(WORK).await;
    Ok(value)
}

/// The compensation of `charge`.
async fn refund(charged: &u64) -> Result<(), Refused> {
    let attempt = current();
    effect(attempt.key(), *charged).await;
    Ok(())
}

/// One parcel of the order, in an instance of the durable `ForEach`.
async fn pack(i: u64, base: &u64) -> Result<u64, Refused> {
    let attempt = current();
    let value = base + i;
    effect(attempt.key(), value).await;
    tokio::time::sleep(WORK).await;
    Ok(value)
}

async fn ship(order: u64, charged: &u64, parcels: usize) -> Result<u64, Refused> {
    let attempt = current();
    let value = charged * 2 + parcels as u64;
    effect(attempt.key(), value).await;
    match ship_fails(order) {
        true => Err(Refused("no courier")),
        false => Ok(value),
    }
}

workflow! {
    #[flow(durable)]
    Fleet(order: u64) -> u64 {
        Sequential {
            base = Operation(load(order)),
            Parallel {
                p0 = Operation(part(0, &base), retries = 2, backoff = "5ms"),
                p1 = Operation(part(1, &base), retries = 2, backoff = "5ms"),
                p2 = Operation(part(2, &base), retries = 2, backoff = "5ms"),
                p3 = Operation(part(3, &base), retries = 2, backoff = "5ms"),
                p4 = Operation(part(4, &base), retries = 2, backoff = "5ms"),
                p5 = Operation(part(5, &base), retries = 2, backoff = "5ms"),
            },
            Conditional(order % 2 == 0) {
                Operation(note(order)),
            },
            total = Operation(sum([&p0, &p1, &p2, &p3, &p4, &p5])),
            packed = ForEach(i in 0..3u64, max_concurrency = 2) {
                parcel = Operation(pack(i, &base))
                => parcel
            },
            charged = Operation(charge(&total), compensate = refund(&charged)),
            shipped = Operation(ship(order, &charged, packed.len()), retries = 1, backoff = "5ms"),
        }
        => shipped
    }
}

/// The output of the run for `order` when its last step succeeds.
fn expected(order: u64) -> u64 {
    let total = 6 * order * 10 + 101 * (1 + 2 + 3 + 4 + 5);
    (total + 1) * 2 + 3
}

// --- The side effects --------------------------------------------------------------------------

/// Where the operations of this process write their side effects.
struct World {
    url: String,
    schema: String,
    client: Mutex<Option<Arc<tokio_postgres::Client>>>,
}

static WORLD: OnceLock<World> = OnceLock::new();

/// Applies the side effect of the attempt `key`: its row in `effects` once, a row in `calls`
/// every time. Retried (a new connection each time) while the database is away, up to a minute.
async fn effect(key: String, value: u64) {
    let world = WORLD
        .get()
        .expect("the world is set before any operation runs");
    let sql = format!(
        "WITH c AS (INSERT INTO {s}.calls (key) VALUES ($1)) \
         INSERT INTO {s}.effects (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        s = world.schema
    );
    let value = i64::try_from(value).expect("a small value");
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = match world.connection().await {
            Ok(client) => client.execute(&sql, &[&key, &value]).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(_) => return,
            Err(e) if Instant::now() < give_up => {
                world.drop_connection();
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the side effect of {key} could not be written for a minute: {e}"),
        }
    }
}

impl World {
    async fn connection(&self) -> Result<Arc<tokio_postgres::Client>, tokio_postgres::Error> {
        let kept = self
            .client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(client) = kept
            && !client.is_closed()
        {
            return Ok(client);
        }
        let (client, connection) =
            tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let client = Arc::new(client);
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&client));
        Ok(client)
    }

    fn drop_connection(&self) {
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// Another build of the workflow: the same name, another graph. A worker of this build runs
/// beside the others in the SIGKILL test; it must take none of the runs or tasks (its
/// operation would write an effect no journal requested, which `check` refuses).
mod other_build {
    use super::*;

    async fn trespass(order: u64) -> Result<u64, Refused> {
        let attempt = current();
        effect(format!("other-build/{}", attempt.key()), order).await;
        Ok(order)
    }

    workflow! {
        #[flow(durable)]
        pub Fleet(order: u64) -> u64 {
            Sequential {
                taken = Operation(trespass(order)),
            }
            => taken
        }
    }
}

// --- The worker process ------------------------------------------------------------------------

/// The variable that makes this binary a worker on the schema it names.
const WORKER: &str = "FLOW_FLEET_WORKER";

/// With it, the worker has the other build of the workflow (`other_build::Fleet`).
const OTHER_BUILD: &str = "FLOW_FLEET_OTHER_BUILD";

/// Not a test of its own: a worker process of the fleet tests (`FLOW_FLEET_WORKER=<schema>`,
/// `FLOW_PG_URL` set by the parent), which runs until it is killed. Without the variable it
/// returns at once.
#[test]
fn fleet_worker() {
    let Ok(schema) = std::env::var(WORKER) else {
        return;
    };
    let url = std::env::var("FLOW_PG_URL").expect("the parent gives FLOW_PG_URL");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _ = WORLD.set(World {
        url: url.clone(),
        schema: schema.clone(),
        client: Mutex::new(None),
    });
    runtime.block_on(async {
        let options = PostgresOptions {
            schema,
            ..PostgresOptions::default()
        };
        let store = PostgresStore::connect_with(&url, options).expect("the URL is valid");
        let worker = match std::env::var(OTHER_BUILD).is_ok() {
            false => Worker::new(store).register::<Fleet>(),
            true => Worker::new(store).register::<other_build::Fleet>(),
        };
        let worker = worker
            .poll_interval(Duration::from_millis(20))
            .task_lease(Duration::from_secs(1))
            // A killed worker's runs move to another after this.
            .run_lease(Duration::from_secs(2));
        let ended = worker.run(std::future::pending()).await;
        // A worker never ends on its own: the parent sees it exit and fails.
        eprintln!("fleet worker {} ended: {ended:?}", std::process::id());
        std::process::exit(3);
    });
}

// --- The parent --------------------------------------------------------------------------------

/// The two tests share the one server (one stops it): one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How many worker processes run.
const WORKERS: usize = 4;

/// The worker processes; killed and reaped when dropped, whatever the test's end.
struct Workers {
    schema: String,
    url: String,
    workers: Vec<Child>,
    /// Workers killed by the test.
    kills: u32,
}

impl Workers {
    fn start(schema: &str, url: &str) -> Workers {
        let mut fleet = Workers {
            schema: schema.to_owned(),
            url: url.to_owned(),
            workers: Vec::new(),
            kills: 0,
        };
        for _ in 0..WORKERS {
            let worker = fleet.spawn();
            fleet.workers.push(worker);
        }
        fleet
    }

    fn spawn(&self) -> Child {
        self.command().spawn().expect("a worker process starts")
    }

    /// A worker of the other build of the workflow, beside the fleet (never killed).
    fn spawn_other_build(&self) -> Child {
        self.command()
            .env(OTHER_BUILD, "1")
            .spawn()
            .expect("a worker process starts")
    }

    fn command(&self) -> Command {
        let mut command =
            Command::new(std::env::current_exe().expect("the path of this test binary"));
        command
            .args(["--exact", "fleet_worker", "--nocapture", "--test-threads=1"])
            .env(WORKER, &self.schema)
            .env("FLOW_PG_URL", &self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        command
    }

    /// SIGKILLs worker `i` and reaps it.
    fn kill(&mut self, i: usize) {
        let worker = &mut self.workers[i];
        worker.kill().expect("kills the worker");
        worker.wait().expect("reaps the worker");
        self.kills += 1;
    }

    fn restart(&mut self, i: usize) {
        self.workers[i] = self.spawn();
    }

    /// Panics when a worker exited by itself (workers run until killed).
    fn check_alive(&mut self, context: &str) {
        for (i, worker) in self.workers.iter_mut().enumerate() {
            if let Some(status) = worker.try_wait().expect("asks the worker's status") {
                panic!("{context}: worker {i} exited by itself: {status}");
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.kill();
            let _ = worker.wait();
        }
    }
}

/// A small deterministic generator (xorshift64*), for the killer's choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed of the killer: `FLOW_FLEET_SEED`, or the clock's.
fn seed() -> u64 {
    match std::env::var("FLOW_FLEET_SEED") {
        Ok(seed) => seed.trim().parse().expect("FLOW_FLEET_SEED is a number"),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970");
            (now.as_nanos() as u64) | 1
        }
    }
}

/// A store on the test's server in the schema `schema`, with the tables of the side effects.
async fn prepare(url: &str, schema: &str) -> PostgresStore {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect_with(url, options).expect("the test server's URL");
    // The first call creates the store's schema.
    store
        .list_runs(&RunFilter::default())
        .await
        .expect("the store's schema is created");
    let client = testing::client().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE {schema}.effects (key text PRIMARY KEY, value bigint NOT NULL); \
             CREATE TABLE {schema}.calls (n bigserial PRIMARY KEY, key text NOT NULL);"
        ))
        .await
        .expect("the tables of the side effects");
    store
}

/// Submits the runs of `orders` as distributed runs.
async fn submit(store: &PostgresStore, orders: &[u64]) {
    for &order in orders {
        Fleet::runner()
            .durable(store, run_id(order))
            .distributed()
            .submit(order)
            .await
            .unwrap_or_else(|e| panic!("run {} is submitted: {e}", run_id(order)));
    }
}

fn run_id(order: u64) -> String {
    format!("order-{order}")
}

/// How many runs are not finished yet; `None` when the store cannot answer now.
async fn unfinished(store: &PostgresStore) -> Option<usize> {
    let runs = store.list_runs(&RunFilter::default()).await.ok()?;
    Some(runs.iter().filter(|r| !r.status.is_finished()).count())
}

/// Waits until every run is finished, at most `limit` (and a bounded number of looks).
async fn until_finished(store: &PostgresStore, fleet: &mut Workers, limit: Duration, what: &str) {
    let start = Instant::now();
    let mut left = None;
    for _ in 0..limit.as_millis() / 100 + 1 {
        left = unfinished(store).await;
        if left == Some(0) {
            return;
        }
        fleet.check_alive(what);
        if start.elapsed() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_default();
    let stuck: Vec<String> = runs
        .iter()
        .filter(|r| !r.status.is_finished())
        .take(10)
        .map(|r| {
            format!(
                "{} {:?} owner {:?} lease {:?} wake {:?}",
                r.id, r.status, r.owner, r.lease_until_ms, r.wake_at_ms
            )
        })
        .collect();
    panic!(
        "{what}: {left:?} runs are not finished after {:?}: {stuck:#?}",
        start.elapsed()
    );
}

/// What the checks saw.
#[derive(Debug)]
struct Seen {
    effects: usize,
    calls: usize,
    compensated: usize,
}

/// Every check of the end state: results, compensations, effects once per journaled attempt,
/// joins fired once, no task or lease left.
async fn check(store: &PostgresStore, schema: &str, orders: &[u64], context: &str) -> Seen {
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists the runs");
    assert_eq!(runs.len(), orders.len(), "{context}: every run exists");
    let mut want: BTreeSet<String> = BTreeSet::new();
    let mut compensated = 0;
    for &order in orders {
        let id = run_id(order);
        let summary = runs.iter().find(|r| r.id == id).expect("the run is listed");
        let outcome = Fleet::resume(store, &id)
            .await
            .unwrap_or_else(|e| panic!("{context}: the outcome of {id}: {e}"));
        match ship_fails(order) {
            false => {
                assert_eq!(
                    summary.status,
                    RunStatus::Succeeded,
                    "{context}: {id}: {:?}",
                    outcome.result.as_ref().err().map(ToString::to_string)
                );
                match &outcome.result {
                    Ok(value) => assert_eq!(*value, expected(order), "{context}: {id}"),
                    Err(e) => panic!("{context}: {id} failed: {e}"),
                }
            }
            true => {
                assert_eq!(summary.status, RunStatus::Failed, "{context}: {id}");
                let error = match &outcome.result {
                    Ok(value) => panic!("{context}: {id} succeeded with {value}"),
                    Err(error) => error,
                };
                let undone: Vec<(&str, bool)> = outcome
                    .report
                    .compensations()
                    .iter()
                    .map(|c| (c.node(), c.is_compensated()))
                    .collect();
                assert_eq!(
                    undone,
                    vec![("charged", true)],
                    "{context}: {id} refunded its charge: {error}"
                );
                compensated += 1;
            }
        }
        // The instances of the `ForEach` are tasks of their own: their steps are not in the
        // journal, their ends are (stored under the instance's record, `packed[2]`), and every
        // instance that ended did its step's effect under the instance's key.
        let data = store.run_data(&id).await.expect("the run's data");
        let instances: Vec<&str> = data
            .outputs
            .iter()
            .filter(|o| !o.instance.is_empty())
            .map(|o| o.instance.as_str())
            .collect();
        assert_eq!(
            instances,
            ["packed[0]", "packed[1]", "packed[2]"],
            "{context}: {id}: every instance's end is stored"
        );
        for instance in instances {
            want.insert(format!("{id}/{instance}/parcel/1"));
        }
        let events = store.events(&id, 0).await.expect("the journal");
        // Every attempt the journal started, once: its key is an expected effect.
        let mut requested: BTreeMap<(String, u32), u32> = BTreeMap::new();
        for event in &events {
            let Some(name) = &event.node_name else {
                continue;
            };
            // A step of a nest instance run by the decider: its key names the instance. An
            // instance whose decider was killed runs again whole, so its events may be
            // journaled twice.
            if let Some(path) = &event.path {
                if event.kind == "Requested" {
                    want.insert(format!("{id}/{path}/{name}/{}", event.attempt));
                }
                continue;
            }
            match event.kind.as_str() {
                "Requested" => {
                    *requested.entry((name.clone(), event.attempt)).or_default() += 1;
                    // The `ForEach` has no effect of its own: its instances' steps do.
                    if name != "packed" {
                        want.insert(format!("{id}/{name}/{}", event.attempt));
                    }
                }
                "Compensating" => {
                    want.insert(format!("{id}/{name}:compensate/{}", event.attempt));
                }
                _ => {}
            }
        }
        let twice: Vec<_> = requested.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "{context}: {id}: an attempt was requested twice (a join fired twice?): {twice:?}"
        );
        assert_eq!(
            requested.keys().filter(|(name, _)| name == "total").count(),
            1,
            "{context}: {id}: the join fired once"
        );
    }
    let client = testing::client().await;
    let rows = client
        .query(&format!("SELECT key FROM {schema}.effects"), &[])
        .await
        .expect("reads the effects");
    let effects: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let found: BTreeSet<String> = effects.iter().cloned().collect();
    assert_eq!(found.len(), effects.len(), "{context}: one effect per key");
    let missing: Vec<_> = want.difference(&found).take(10).collect();
    let extra: Vec<_> = found.difference(&want).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{context}: the effects are exactly the journaled attempts: missing {missing:?}, \
         without a journaled start {extra:?}"
    );
    let rows = client
        .query(&format!("SELECT DISTINCT key FROM {schema}.calls"), &[])
        .await
        .expect("reads the calls");
    let called: BTreeSet<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        called, found,
        "{context}: every execution was of a journaled attempt"
    );
    let calls: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.calls"), &[])
        .await
        .expect("counts the calls")
        .get(0);
    let tasks: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.tasks"), &[])
        .await
        .expect("counts the tasks")
        .get(0);
    assert_eq!(
        tasks, 0,
        "{context}: no task is left after every run finished"
    );
    let held: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM {schema}.runs WHERE status NOT IN ('succeeded', 'failed')"
            ),
            &[],
        )
        .await
        .expect("counts the unfinished runs")
        .get(0);
    assert_eq!(held, 0, "{context}: no run is left running");
    Seen {
        effects: effects.len(),
        calls: usize::try_from(calls).expect("a count"),
        compensated,
    }
}

/// The orders of the runs: 1..=RUNS.
const RUNS: u64 = 200;

/// How long the killer kills.
const KILLING: Duration = Duration::from_secs(6);

/// How long the runs may take to finish once the killing stopped: a run whose decider was killed
/// keeps its lease (60 s) until it expires.
const SETTLE: Duration = Duration::from_secs(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_with_sigkill_lose_nothing() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let seed = seed();
    eprintln!("fleet: FLOW_FLEET_SEED={seed}");
    let context = format!("FLOW_FLEET_SEED={seed}");
    let url = testing::server();
    let schema = testing::fresh_schema("fleet");
    let store = prepare(&url, &schema).await;
    let orders: Vec<u64> = (1..=RUNS).collect();
    submit(&store, &orders).await;
    let submitted = started.elapsed();
    let mut fleet = Workers::start(&schema, &url);
    // Beside the four: a worker of another build of the workflow, never killed. It takes
    // nothing (the claims and the due runs keep to the graphs a worker has).
    let other_build = fleet.spawn_other_build();
    fleet.workers.push(other_build);
    let mut rng = Rng(seed);
    let killing = Instant::now();
    while killing.elapsed() < KILLING {
        tokio::time::sleep(Duration::from_millis(100 + rng.below(500))).await;
        fleet.check_alive(&context);
        if unfinished(&store).await == Some(0) {
            break;
        }
        let victim = rng.below(WORKERS as u64) as usize;
        fleet.kill(victim);
        tokio::time::sleep(Duration::from_millis(50)).await;
        fleet.restart(victim);
    }
    let killed_for = killing.elapsed();
    until_finished(&store, &mut fleet, SETTLE, &context).await;
    let finished = killing.elapsed();
    fleet.check_alive(&context);
    let seen = check(&store, &schema, &orders, &context).await;
    let kills = fleet.kills;
    drop(fleet);
    eprintln!(
        "fleet: seed {seed}: {RUNS} runs, submitted in {submitted:?}, {kills} kills in {killed_for:?}, \
         all finished {finished:?} after the workers started; {} effects, {} calls ({} re-executions), \
         {} runs compensated; {:?} in all",
        seen.effects,
        seen.calls,
        seen.calls - seen.effects,
        seen.compensated,
        started.elapsed()
    );
    assert!(kills > 0, "{context}: the killer killed no worker");
    if seen.calls == seen.effects {
        eprintln!("fleet: seed {seed}: no kill landed inside an operation (no re-execution)");
    }
    testing::drop_schemas("fleet").await;
}

/// The port of `url` (`postgres://user@host:port/db`).
fn port_of(url: &str) -> u16 {
    let config: tokio_postgres::Config = url.parse().expect("the test server's URL");
    config.get_ports().first().copied().unwrap_or(5432)
}

/// The workspace's root (where `.ci/postgres` is).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

/// Runs `bash .ci/postgres <command>` for the server on `port`; its stdout, or why it failed.
fn postgres_script(command: &str, port: u16) -> Result<String, String> {
    let root = repository();
    let output = Command::new("bash")
        .arg(root.join(".ci").join("postgres"))
        .arg(command)
        .env("FLOW_PG_PORT", port.to_string())
        .current_dir(&root)
        .output()
        .map_err(|e| format!("running `bash .ci/postgres {command}`: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    match output.status.success() {
        true => Ok(stdout),
        false => Err(format!(
            "`bash .ci/postgres {command}` failed ({}): {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

/// Whether a new connection to `url` is accepted now.
async fn reachable(url: &str) -> bool {
    let connect = tokio_postgres::connect(url, tokio_postgres::NoTls);
    match tokio::time::timeout(Duration::from_secs(2), connect).await {
        Ok(Ok((client, connection))) => {
            drop(client);
            drop(connection);
            true
        }
        _ => false,
    }
}

/// The runs of the database test.
const RESTART_RUNS: u64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_ride_out_a_database_restart() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let url = testing::server();
    let port = port_of(&url);
    // Only this checkout's own cluster can be stopped and started again.
    let ours = postgres_script("status", port).unwrap_or_else(|why| {
        panic!(
            "this test stops and starts the PostgreSQL server, and {url} is not the cluster of \
             this checkout's `.ci/postgres` ({why}); unset FLOW_PG_URL (the test then starts \
             that cluster) or point it to the URL `bash .ci/postgres start` prints"
        )
    });
    assert!(
        ours.lines()
            .any(|l| l.trim().trim_start_matches("export FLOW_PG_URL=") == url),
        "this test stops and starts the PostgreSQL server, and {url} is not the cluster of this \
         checkout's `.ci/postgres` (which serves {ours:?}); unset FLOW_PG_URL or point it there"
    );
    let schema = testing::fresh_schema("restart");
    let store = prepare(&url, &schema).await;
    let orders: Vec<u64> = (1..=RESTART_RUNS).collect();
    submit(&store, &orders).await;
    let mut fleet = Workers::start(&schema, &url);
    // Let the workers get going, then take the server away for ~2 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = unfinished(&store).await.expect("the store answers");
    assert!(before > 0, "some runs still run when the server stops");
    postgres_script("stop", port).expect("the server stops");
    assert!(
        !reachable(&url).await,
        "the server is down after `.ci/postgres stop`"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.check_alive("while the server was down");
    postgres_script("start", port).expect("the server starts again");
    assert!(reachable(&url).await, "the server is back");
    let restarted = started.elapsed();
    until_finished(
        &store,
        &mut fleet,
        Duration::from_secs(90),
        "after the restart",
    )
    .await;
    let finished = started.elapsed();
    fleet.check_alive("after every run finished");
    let seen = check(&store, &schema, &orders, "after the restart").await;
    drop(fleet);
    eprintln!(
        "restart: {RESTART_RUNS} runs, {before} unfinished when the server stopped, back at \
         {restarted:?}, all finished at {finished:?}; {} effects, {} calls; {:?} in all",
        seen.effects,
        seen.calls,
        started.elapsed()
    );
    testing::drop_schemas("restart").await;
}

/// A worker in this process (no kill): its own requests to the store (looking for due runs,
/// claiming tasks, renewing claims) never wait for a transaction of a run or a task it drives
/// itself (a heartbeat used to wait for the row lock of a completion it had stopped polling,
/// and every worker stalled). Short claims, so that heartbeats are frequent.
#[tokio::test(flavor = "current_thread")]
async fn a_worker_keeps_driving_its_transactions_while_it_asks_the_store() {
    let _serial = SERIAL.lock().await;
    let url = testing::server();
    let schema = testing::fresh_schema("inproc");
    let store = prepare(&url, &schema).await;
    let set = WORLD.set(World {
        url: url.clone(),
        schema: schema.clone(),
        client: Mutex::new(None),
    });
    assert!(
        set.is_ok(),
        "only this test runs operations in the test process"
    );
    let orders: Vec<u64> = (1..=10).collect();
    submit(&store, &orders).await;
    let worker = Worker::new(store.clone())
        .register::<Fleet>()
        .poll_interval(Duration::from_millis(20))
        .task_lease(Duration::from_millis(300));
    let all_finished = async {
        for _ in 0..400 {
            if unfinished(&store).await == Some(0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let report = tokio::time::timeout(Duration::from_secs(40), worker.run(all_finished))
        .await
        .expect("the worker finishes the runs and stops within 40 s")
        .expect("the worker runs");
    assert_eq!(
        unfinished(&store).await,
        Some(0),
        "every run finished: {report:?}"
    );
    check(&store, &schema, &orders, "one worker in this process").await;
    testing::drop_schemas("inproc").await;
}
