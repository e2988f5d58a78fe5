//! The crash test's workflow, its "outside world" and its store wrapper (`durable/tests/durable_crash.rs`).
//!
//! - [`CrashOrder`]: a durable order with a join, a `Conditional`, a `ForEach` (one instance
//!   fails and is collected), a `Loop` with a `Delay` in each iteration, a child run
//!   ([`CrashLabel`], with a compensation of its own), a retry with backoff, a durable `Delay`,
//!   a `Signal` and compensations; the last step fails for an input that says so (the parent
//!   then compensates, and undoes its child).
//! - The world: every operation and compensation records its side effect in a SQLite file of
//!   its own (`effects.db`, not the store), keyed by its `flowdag::attempt()` key with
//!   `INSERT OR IGNORE` (an idempotent effect), and every execution in `calls`. What it finds
//!   wrong (it runs before its attempt was committed, or after the attempt's end was) goes to
//!   `violations`.
//! - [`CrashStore`]: a `Store` that passes everything to the `SqliteStore` it wraps, keeps the
//!   events committed (or loaded) in this process, run by run, and stops the process at a
//!   chosen event of the order's journal or of its child's: it prints `STOP k` and parks until
//!   the parent kills it with SIGKILL.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use flowdag::prelude::*;
use flowdag::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, Owner, RunData,
    RunFilter, RunSummary, SignalSent, Store, StoreFuture, StoredEvent, StoredSignal, WaitChange,
};
use rusqlite::{Connection, params};

// --- The workflow ------------------------------------------------------------------------------

/// The error of the workflow's operations.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// A short wait inside each operation, so that a kill at a random time can land in one.
const WORK: Duration = Duration::from_millis(3);

/// How long [`CrashStore`] holds each commit before passing it on.
const COMMIT: Duration = Duration::from_millis(2);

async fn fetch(order: u64) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(format!("item-{order}"))
}

async fn reserve(item: &str) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(format!("stock of {item}"))
}

async fn release(stock: &str) -> Result<(), Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    let _ = stock;
    Ok(())
}

async fn rate(item: &str) -> Result<u32, Refused> {
    effect();
    tokio::time::sleep(WORK * 2).await;
    Ok(item.len() as u32 * 10)
}

/// The join: reads both branches of the `Parallel`.
async fn price(stock: &str, score: u32) -> Result<u32, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(stock.len() as u32 + score)
}

async fn review(item: &str) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(format!("{item} reviewed"))
}

async fn approve(item: &str) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(format!("{item} approved"))
}

/// Packs one part of the item; part 1 does not fit (its instance fails, and is collected).
async fn pack(item: &str, part: u32) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    match part {
        1 => Err(Refused(format!("part {part} of {item} does not fit"))),
        _ => Ok(format!("{item}/{part}")),
    }
}

/// One look at the warehouse: the count of parcels ready, one more each time.
async fn count(before: u32) -> Result<u32, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(before + 1)
}

/// Fails its first attempt (the bank is down); the retry, after a backoff, charges.
async fn charge(quote: u32) -> Result<String, Refused> {
    let attempt = effect();
    tokio::time::sleep(WORK).await;
    match attempt {
        1 => Err(Refused("the bank is down".to_owned())),
        _ => Ok(format!("receipt for {quote}")),
    }
}

async fn refund(receipt: &str) -> Result<(), Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    let _ = receipt;
    Ok(())
}

/// Fails when the input says so: the completed steps are then compensated.
async fn ship(receipt: &str, confirmation: &Confirm, ship_fails: bool) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    match ship_fails {
        true => Err(Refused("no courier".to_owned())),
        false => Ok(format!(
            "shipped against {receipt}, confirmed by {}",
            confirmation.by
        )),
    }
}

/// Prints the parcel's label (the child run's first step).
async fn print_label(item: &str) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(format!("label of {item}"))
}

/// Voids a printed label: the child's compensation.
async fn void_label(label: &str) -> Result<(), Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    let _ = label;
    Ok(())
}

async fn stick(label: &str) -> Result<String, Refused> {
    effect();
    tokio::time::sleep(WORK).await;
    Ok(format!("{label}, stuck"))
}

/// The payload of the signal `confirm`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Confirm {
    /// Who confirmed.
    pub by: String,
}

workflow! {
    /// The order's child run: labels the parcel (the label is voided when the order
    /// compensates).
    #[flow(durable)]
    pub CrashLabel(item: String) -> String {
        Sequential {
            label = Operation(print_label(&item), compensate = void_label(&label)),
            stuck = Operation(stick(&label)),
        }
        => stuck.clone()
    }
}

workflow! {
    #[flow(durable)]
    pub CrashOrder(order: u64, ship_fails: bool) -> String {
        Sequential {
            item = Operation(fetch(order)),
            Parallel {
                stock = Operation(reserve(&item), compensate = release(&stock)),
                score = Operation(rate(&item)),
            },
            quote = Operation(price(&stock, score)),
            packed = ForEach(part in 0..3u32, max_concurrency = 2, on_failure = collect) {
                parcel = Operation(pack(&item, part))
                => parcel.clone()
            },
            ready = Loop(max = 5, prev = last) {
                Sequential {
                    Delay("5ms"),
                    counted = Operation(count(last.copied().unwrap_or(0))),
                }
                => counted
            } until (counted >= 2),
            labelled = Workflow(CrashLabel(item.clone())),
            Conditional(score.is_ok_and(|s| *s >= 50)) {
                Operation(review(&item)),
            } else {
                Operation(approve(&item)),
            },
            receipt = Operation(
                charge(quote),
                retries = 2,
                backoff = "20ms",
                compensate = refund(&receipt),
            ),
            Delay("30ms"),
            confirmation = Signal(confirm: Confirm),
            shipped = Operation(ship(&receipt, &confirmation, ship_fails)),
        }
        => format!(
            "{} at {} ({} parts packed, {} parcels ready, {})",
            shipped,
            quote,
            packed.iter().filter(|p| p.is_ok()).count(),
            ready,
            labelled,
        )
    }
}

/// The run's id in every store of the test.
pub const RUN: &str = "order-7";

/// The id of its child run (its step `labelled`).
pub const CHILD: &str = "order-7/labelled";

// --- Where the child stops ---------------------------------------------------------------------

/// When a child stops at event `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Before committing the first batch that holds an event numbered `k` or more.
    Before,
    /// Right after that batch committed.
    After,
    /// Inside the first operation (or compensation) attempt whose `Requested` (or
    /// `Compensating`) event is numbered `k` or more, after its side effect was written.
    Inside,
}

impl When {
    /// Its name in `FLOW_CRASH_WHEN`.
    pub fn as_str(self) -> &'static str {
        match self {
            When::Before => "before",
            When::After => "after",
            When::Inside => "inside",
        }
    }

    /// Reads `FLOW_CRASH_WHEN`'s value.
    pub fn parse(s: &str) -> Option<When> {
        [When::Before, When::After, When::Inside]
            .into_iter()
            .find(|w| w.as_str() == s)
    }
}

/// A stop point: event `at` of run `run`, `when`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    /// The run whose journal the event is in: [`RUN`] or [`CHILD`].
    pub run: &'static str,
    /// The event number.
    pub at: u64,
    /// Before or after its batch's commit, or inside its operation.
    pub when: When,
}

/// This process's configuration: set once by the child before the run.
struct Config {
    stop: Option<Stop>,
    effects: PathBuf,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Set once the process stopped (it parks; this keeps a second thread from printing twice).
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Configures this (child) process: where it stops, and the world's file.
pub fn configure(stop: Option<Stop>, effects: PathBuf) {
    let _ = CONFIG.set(Config { stop, effects });
}

/// The stop point, if it is in run `run`'s journal.
fn stop_point(run: &str) -> Option<Stop> {
    CONFIG
        .get()
        .and_then(|c| c.stop)
        .filter(|stop| stop.run == run)
}

/// Prints `STOP k` and parks the calling thread (a current-thread runtime: the whole run stops)
/// until the parent kills the process; exits on its own after a minute if nobody does.
fn park(at: u64) {
    park_at(&at.to_string());
}

/// [`park`] at a stop point named by `at` (an event number, or an attempt's key).
fn park_at(at: &str) {
    if STOPPED.swap(true, Ordering::SeqCst) {
        return;
    }
    println!("STOP {at}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(60));
    eprintln!("stopped at {at} and not killed within 60 s: exiting");
    std::process::exit(3);
}

// --- The events this process saw committed -----------------------------------------------------

/// An event as the child keeps it: (run, seq, kind, node name, attempt), a run's own events
/// only (an instance's events are not what gates its steps).
type Seen = (String, u64, String, Option<String>, u32);

static JOURNAL: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

/// The nest instances whose end this process saw committed (or loaded): `packed[1]`.
static ENDED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remember(run: &str, events: &[StoredEvent]) {
    let mut journal = JOURNAL.lock().unwrap_or_else(PoisonError::into_inner);
    for e in events.iter().filter(|e| e.path.is_none()) {
        if journal.iter().all(|(r, seq, ..)| r != run || *seq != e.seq) {
            journal.push((
                run.to_owned(),
                e.seq,
                e.kind.clone(),
                e.node_name.clone(),
                e.attempt,
            ));
        }
    }
}

fn remember_ends<'a>(instances: impl Iterator<Item = &'a str>) {
    let mut ended = ENDED.lock().unwrap_or_else(PoisonError::into_inner);
    ended.extend(instances.filter(|i| !i.is_empty()).map(str::to_owned));
}

/// The number of the committed event `kind` of `node`'s `attempt` in run `run`, if any.
fn committed(run: &str, kinds: &[&str], node: &str, attempt: u32) -> Option<u64> {
    JOURNAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(r, _, k, n, a)| {
            r == run && kinds.contains(&k.as_str()) && n.as_deref() == Some(node) && *a == attempt
        })
        .map(|(_, seq, ..)| *seq)
        .next()
}

/// A step of a nest instance, from its key: (the instance's path, the nest node at the top).
/// `order-7/packed[1]/parcel/1` is `("packed[1]", "packed")`; `None` for the run's own steps.
pub fn instance_of(key: &str) -> Option<(String, String)> {
    let rest = key.strip_prefix(RUN)?.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.len() <= 2 {
        return None;
    }
    let path = parts[..parts.len() - 2].join("/");
    let top = parts[0].split(['[', '@', '#']).next()?.to_owned();
    Some((path, top))
}

// --- The world ---------------------------------------------------------------------------------

/// The tables of `effects.db`.
pub const WORLD_SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS effects (
        key TEXT PRIMARY KEY, node TEXT NOT NULL, attempt INTEGER NOT NULL,
        compensation INTEGER NOT NULL, pid INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS calls (
        id INTEGER PRIMARY KEY, key TEXT NOT NULL, pid INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS violations (
        id INTEGER PRIMARY KEY, key TEXT NOT NULL, pid INTEGER NOT NULL, why TEXT NOT NULL);";

/// Opens the world's file, with its tables.
pub fn open_world(path: &std::path::Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // What a process crash cannot lose (the OS has every write); no wait for the disk.
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")?;
    conn.execute_batch(WORLD_SCHEMA)?;
    Ok(conn)
}

/// What every operation and compensation does first: applies its side effect under its
/// attempt's key (once per key, whatever the number of executions), records the execution,
/// checks that its attempt was committed before it ran and that the attempt had not ended;
/// in the `inside` mode, stops the process right after. Returns the attempt number.
fn effect() -> u32 {
    let Some(attempt) = flowdag::attempt() else {
        return 1;
    };
    let key = attempt.key();
    let run = attempt.run().to_owned();
    if run == RUN
        && let Some((path, top)) = instance_of(&key)
    {
        return effect_in_instance(&key, &path, &top, attempt.attempt());
    }
    let node = attempt.node();
    let (start, ends): (&[&str], &[&str]) = match attempt.is_compensation() {
        true => (
            &["Compensating"],
            &["Compensated", "CompensationRetrying", "CompensationFailed"],
        ),
        false => (
            &["Requested"],
            &["Completed", "Failed", "Retrying", "TimedOut"],
        ),
    };
    let started = committed(&run, start, node, attempt.attempt());
    let mut why = Vec::new();
    if started.is_none() {
        why.push(format!("ran before its `{}` was committed", start[0]));
    }
    if let Some(seq) = committed(&run, ends, node, attempt.attempt()) {
        why.push(format!(
            "ran again after its end (event #{seq}) was committed"
        ));
    }
    write_effect(
        &key,
        node,
        attempt.attempt(),
        attempt.is_compensation(),
        &why,
    );
    if let (Some(stop), Some(seq)) = (stop_point(&run), started)
        && stop.when == When::Inside
        && seq >= stop.at
    {
        park(stop.at);
    }
    attempt.attempt()
}

/// Writes an execution of `key` into the world: its effect once per key, the call, and what it
/// found wrong.
fn write_effect(key: &str, node: &str, attempt: u32, compensation: bool, why: &[String]) {
    let pid = std::process::id();
    let written = CONFIG.get().map(|config| -> rusqlite::Result<()> {
        let mut conn = open_world(&config.effects)?;
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT OR IGNORE INTO effects(key, node, attempt, compensation, pid) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![key, node, attempt, compensation, pid],
        )?;
        tx.execute("INSERT INTO calls(key, pid) VALUES (?1, ?2)", params![key, pid])?;
        for why in why {
            tx.execute(
                "INSERT INTO violations(key, pid, why) VALUES (?1, ?2, ?3)",
                params![key, pid, why],
            )?;
        }
        tx.commit()
    });
    if let Some(Err(error)) = written {
        // The parent sees it on the child's stderr, and the effect missing.
        eprintln!("the world's file could not be written for {key}: {error}");
    }
}

/// What a step of a nest instance does first: its effect and call, as every step; what it
/// finds wrong is that it runs before its nest step's `Requested` was committed, or after its
/// instance's end (or its nest step's end) was. An instance's steps are not gated one by one:
/// the instance is the unit the run recovers. In the `inside` mode with `FLOW_CRASH_KEY` set
/// to this key, it stops the process right after.
fn effect_in_instance(key: &str, path: &str, top: &str, attempt: u32) -> u32 {
    let mut why = Vec::new();
    let nest = JOURNAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(r, _, _, n, _)| r == RUN && n.as_deref() == Some(top))
        .map(|(_, _, k, ..)| k.clone())
        .collect::<Vec<_>>();
    if !nest.iter().any(|k| k == "Requested") {
        why.push(format!("ran before `{top}`'s `Requested` was committed"));
    }
    if nest.iter().any(|k| k == "Completed" || k == "Failed") {
        why.push(format!("ran after `{top}`'s end was committed"));
    }
    let ended = ENDED.lock().unwrap_or_else(PoisonError::into_inner);
    if ended.iter().any(|i| i == path) {
        why.push(format!("ran again after the end of `{path}` was committed"));
    }
    drop(ended);
    let node = key.rsplit('/').nth(1).unwrap_or(key);
    write_effect(key, node, attempt, false, &why);
    if std::env::var("FLOW_CRASH_KEY").as_deref() == Ok(key) {
        park_at(key);
    }
    attempt
}

// --- The store ---------------------------------------------------------------------------------

/// A `Store` that passes every call to `inner`, keeps the events this process committed or
/// loaded, prints `WAITING` when a step waits for a signal (its wait committed, or loaded open),
/// and stops the process at
/// the configured event ([`configure`]). No hook in the runtime: only the store is wrapped.
#[derive(Clone)]
pub struct CrashStore<S> {
    inner: S,
}

impl<S: Store + Clone> CrashStore<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> CrashStore<S> {
        CrashStore { inner }
    }

    /// The stop point if a batch of run `run` whose events end before `end` reaches it in
    /// `when` (it holds the event `k` or, in a resumed process that starts past `k`, the first
    /// after it).
    fn reaches(run: &str, end: u64, when: When) -> Option<u64> {
        stop_point(run)
            .filter(|stop| stop.when == when && end > stop.at)
            .map(|stop| stop.at)
    }
}

impl<S: Store + Clone> Store for CrashStore<S> {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        let end = run.events.len() as u64;
        let id = run.id.clone();
        if let Some(at) = Self::reaches(&id, end, When::Before) {
            park(at);
        }
        let events = run.events.clone();
        Box::pin(async move {
            let created = self.inner.create_run(run).await?;
            if let Created::New { .. } = created {
                remember(&id, &events);
                if let Some(at) = Self::reaches(&id, end, When::After) {
                    park(at);
                }
            }
            Ok(created)
        })
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        Box::pin(async move {
            let loaded = self.inner.load_run(run, owner, lease).await?;
            remember(run, &loaded.events);
            remember_ends(loaded.outputs.iter().map(|o| o.instance.as_str()));
            if !loaded.waits.is_empty() {
                // The step waited in a process that was killed: say it again, in case the
                // parent did not read it from that one.
                println!("WAITING");
            }
            Ok(loaded)
        })
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
        let end = batch.end_seq();
        let run = batch.run.clone();
        if let Some(at) = Self::reaches(&run, end, When::Before) {
            park(at);
        }
        let waits = batch
            .waits
            .iter()
            .any(|w| matches!(w, WaitChange::Open { .. }));
        let events = batch.events.clone();
        let ends: Vec<String> = batch.outputs.iter().map(|o| o.instance.clone()).collect();
        Box::pin(async move {
            // A slow disk: events of the steps still running meanwhile pile up in the next
            // batch, and a step whose `Requested` is in it must wait for that batch.
            tokio::time::sleep(COMMIT).await;
            let committed = self.inner.commit(batch).await?;
            remember(&run, &events);
            remember_ends(ends.iter().map(String::as_str));
            if waits {
                println!("WAITING");
            }
            if let Some(at) = Self::reaches(&run, end, When::After) {
                park(at);
            }
            Ok(committed)
        })
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
        self.inner.release(owner, held)
    }
    fn reopen<'a>(&'a self, run: &'a str, marker: StoredEvent) -> StoreFuture<'a, RunSummary> {
        // The marker that reopens an undone child is a boundary of the child's journal too.
        let end = marker.seq + 1;
        if let Some(at) = Self::reaches(run, end, When::Before) {
            park(at);
        }
        let events = vec![marker.clone()];
        Box::pin(async move {
            let reopened = self.inner.reopen(run, marker).await?;
            remember(run, &events);
            if let Some(at) = Self::reaches(run, end, When::After) {
                park(at);
            }
            Ok(reopened)
        })
    }
}
