//! The crash test: a durable run on a SQLite file is killed with SIGKILL at every event
//! boundary, inside its operations and at random times, and resumed by a new process; the end
//! is always the uninterrupted run's, every side effect is applied once per idempotency key,
//! and the journal is consistent. `docs/durability.md`, "How the crash test works", says how.
//!
//! The child processes are this test binary itself, run with `--exact crash_child` and
//! `FLOW_CRASH_CHILD` set to the scenario's directory (`crash_child` returns at once without
//! it). `FLOW_CRASH_AT=k` and `FLOW_CRASH_WHEN=before|after|inside` give its stop point
//! (`FLOW_CRASH_RUN=child`: in the journal of the order's child run, not the order's);
//! `FLOW_CRASH_SEED=n` replays the random kills of a failed run (the seed is in every failure).

#[path = "common/crash_flow.rs"]
mod crash_flow;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crash_flow::{CHILD, Confirm, CrashOrder, CrashStore, RUN, Stop, When, configure, open_world};
use flowdag::Worker;
use flowdag::durable::send_signal;
use flowdag::store::{Owner, RunEnd, RunFilter, RunStatus, Store, StoredEvent};
use flowdag_sqlite::{Durability, SqliteOptions, SqliteStore};
use serde_json::{Value, json};

/// The order every run is for.
const ORDER: u64 = 7;

/// How long the parent waits for a child's next line (its stop, its result) before it kills it
/// and fails.
const TIMEOUT: Duration = Duration::from_secs(20);

// --- The child ---------------------------------------------------------------------------------

/// Not a test of its own: the child process of the crash tests (`FLOW_CRASH_CHILD` set), which
/// runs or resumes the run in the scenario's directory and prints `RESULT {json}`, or stops
/// where it is told to and waits to be killed; it prints `WAITING` when a step of the run waits
/// for the signal `confirm`, which the parent then sends through the store. Without
/// `FLOW_CRASH_CHILD` it returns at once.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("FLOW_CRASH_CHILD") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let stop = match (
        std::env::var("FLOW_CRASH_AT"),
        std::env::var("FLOW_CRASH_WHEN"),
    ) {
        (Ok(at), Ok(when)) => Some(Stop {
            run: match std::env::var("FLOW_CRASH_RUN").as_deref() {
                Ok("child") => CHILD,
                _ => RUN,
            },
            at: at.parse().expect("FLOW_CRASH_AT is an event number"),
            when: When::parse(&when).expect("FLOW_CRASH_WHEN is before, after or inside"),
        }),
        _ => None,
    };
    let ship_fails = std::env::var("FLOW_CRASH_INPUT").as_deref() == Ok("ship-fails");
    let by_worker = std::env::var("FLOW_CRASH_RESUME").as_deref() == Ok("worker");
    configure(stop, dir.join("effects.db"));
    // Commits reach the OS before they are acknowledged: what a SIGKILL can test.
    let options = SqliteOptions {
        durability: Durability::Process,
        ..SqliteOptions::default()
    };
    let sqlite = SqliteStore::open_with(dir.join("runs.db"), options).expect("the store opens");
    let store = CrashStore::new(sqlite);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let summary = runtime.block_on(async {
        let runs = store
            .list_runs(&RunFilter::default())
            .await
            .expect("lists the runs");
        let run = async {
            match runs.iter().any(|run| run.id == RUN) {
                false => {
                    CrashOrder::runner()
                        .durable(&store, RUN)
                        .signal_poll(Duration::from_millis(5))
                        .execute((ORDER, ship_fails))
                        .await
                }
                true if by_worker => {
                    let worker = Worker::new(store.clone())
                        .register::<CrashOrder>()
                        .poll_interval(Duration::from_millis(5));
                    let ended = async {
                        loop {
                            let runs = store.list_runs(&RunFilter::default()).await;
                            let ended = runs.map_or(true, |runs| {
                                runs.iter()
                                    .any(|run| run.id == RUN && run.status.is_finished())
                            });
                            if ended {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    };
                    let report = worker.run(ended).await.expect("the worker runs");
                    for resumed in report.resumed {
                        let _ = resumed.result.expect("the worker resumes the run");
                    }
                    // The run has ended: resuming it replays its journal and runs nothing.
                    CrashOrder::resume(&store, RUN).await
                }
                true => CrashOrder::resume(&store, RUN).await,
            }
        };
        summary(&run.await.expect("the run ends"))
    });
    println!("RESULT {summary}");
}

/// What the parent compares with the uninterrupted run: the result (or the error and the
/// compensations), and every step's status and attempts.
fn summary(outcome: &flowdag::Outcome<String>) -> Value {
    let result = match &outcome.result {
        Ok(value) => json!({ "ok": value }),
        Err(error) => json!({
            "error": error.to_string(),
            "compensations": error
                .compensations()
                .iter()
                .map(|c| json!([c.node(), c.attempts(), c.is_compensated()]))
                .collect::<Vec<_>>(),
        }),
    };
    let nodes: Vec<Value> = outcome
        .report
        .nodes()
        .iter()
        .map(|n| json!([n.name, format!("{:?}", n.status), n.attempts]))
        .collect();
    json!({ "result": result, "nodes": nodes })
}

// --- Driving children --------------------------------------------------------------------------

/// The workflow's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// Shipping fails: the charge is refunded and the stock released.
    ShipFails,
    /// Everything succeeds.
    Ships,
}

impl Input {
    fn as_str(self) -> &'static str {
        match self {
            Input::ShipFails => "ship-fails",
            Input::Ships => "ships",
        }
    }
}

/// What the parent does with one child.
#[derive(Debug, Clone)]
enum Plan {
    /// Give it this stop point and kill it when it prints `STOP`.
    Stop(Stop),
    /// Stop inside the attempt of a nest instance's step with this key (`FLOW_CRASH_KEY`),
    /// after its side effect was written, and kill it there.
    StopInside(String),
    /// Kill it after this long, wherever it is.
    KillAfter(Duration),
    /// Let it finish.
    Finish,
}

/// How a child ended.
enum Ended {
    /// Killed (at its stop point, or at a random time).
    Killed,
    /// It finished the run and printed its summary.
    Finished(Value),
}

/// One child process: its lines on stdout (read by a thread), its stderr (another thread).
struct Child {
    process: std::process::Child,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Child {
    fn spawn(dir: &Path, input: Input, plan: &Plan, by_worker: bool) -> Child {
        let stop = match plan {
            Plan::Stop(stop) => Some(*stop),
            _ => None,
        };
        let mut command =
            Command::new(std::env::current_exe().expect("the path of this test binary"));
        command
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("FLOW_CRASH_CHILD", dir)
            .env("FLOW_CRASH_INPUT", input.as_str())
            .env_remove("FLOW_CRASH_AT")
            .env_remove("FLOW_CRASH_WHEN")
            .env_remove("FLOW_CRASH_RESUME")
            .env_remove("FLOW_CRASH_KEY")
            .env_remove("FLOW_CRASH_RUN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(stop) = stop {
            command
                .env("FLOW_CRASH_AT", stop.at.to_string())
                .env("FLOW_CRASH_WHEN", stop.when.as_str());
            if stop.run == CHILD {
                command.env("FLOW_CRASH_RUN", "child");
            }
        }
        if by_worker {
            command.env("FLOW_CRASH_RESUME", "worker");
        }
        if let Plan::StopInside(key) = plan {
            command.env("FLOW_CRASH_KEY", key);
        }
        let mut process = command.spawn().expect("spawn a child");
        let stdout = process.stdout.take().expect("piped");
        let mut stderr = process.stderr.take().expect("piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Child {
            process,
            lines,
            stderr: Some(stderr),
        }
    }

    /// Kills the child (SIGKILL on Unix) and reaps it.
    fn kill(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    /// What it wrote on stderr (after it ended).
    fn stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default()
    }

    /// Runs the child according to `plan`. When it says a step waits for `confirm`, sends the
    /// signal through the store from this process (once per scenario: `sent`).
    fn drive(&mut self, plan: &Plan, dir: &Path, sent: &mut bool) -> Result<Ended, String> {
        let started = Instant::now();
        let mut result = None;
        loop {
            let wait = match plan {
                Plan::KillAfter(after) => after.saturating_sub(started.elapsed()),
                _ => TIMEOUT,
            };
            match self.lines.recv_timeout(wait) {
                Ok(line) => {
                    // libtest's `test crash_child ... ` may precede the child's first line.
                    let after =
                        |tag: &str| line.find(tag).map(|i| line[i + tag.len()..].to_owned());
                    if let Some(at) = after("STOP ") {
                        self.kill();
                        return match plan {
                            Plan::Stop(stop) if at == stop.at.to_string() => Ok(Ended::Killed),
                            Plan::StopInside(key) if at == *key => Ok(Ended::Killed),
                            _ => Err(format!(
                                "the child stopped at `{at}` under {plan:?}; stderr:\n{}",
                                self.stderr()
                            )),
                        };
                    } else if line.ends_with("WAITING") && !*sent {
                        confirm(dir)?;
                        *sent = true;
                    } else if let Some(json) = after("RESULT ") {
                        let value = serde_json::from_str(&json)
                            .map_err(|e| format!("the child's result `{json}`: {e}"))?;
                        result = Some(value);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    // What it printed before it died: a step that began to wait (a worker
                    // resumes a run waiting for a signal only once the signal is sent).
                    let mut waits = false;
                    while let Ok(line) = self.lines.recv_timeout(TIMEOUT) {
                        waits |= line.ends_with("WAITING");
                    }
                    if waits && !*sent {
                        confirm(dir)?;
                        *sent = true;
                    }
                    return match plan {
                        Plan::KillAfter(_) => Ok(Ended::Killed),
                        _ => Err(format!(
                            "the child said nothing for {TIMEOUT:?} under {plan:?}; killed it; stderr:\n{}",
                            self.stderr()
                        )),
                    };
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.process.wait().map_err(|e| e.to_string())?;
                    return match result {
                        Some(value) if status.success() => Ok(Ended::Finished(value)),
                        _ => Err(format!(
                            "the child ended ({status}) without a result under {plan:?}; stderr:\n{}",
                            self.stderr()
                        )),
                    };
                }
            }
        }
    }
}

/// Sends the signal `confirm` to the run in `dir` from this process, through a client of the
/// store (the child holds the store itself).
fn confirm(dir: &Path) -> Result<(), String> {
    let client = SqliteStore::open_client(dir.join("runs.db")).map_err(|e| e.to_string())?;
    let confirm = Confirm {
        by: "the customer".to_owned(),
    };
    futures::executor::block_on(send_signal(&client, RUN, CrashOrder::CONFIRM, confirm))
        .map_err(|e| format!("sending `confirm`: {e}"))?;
    Ok(())
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a scenario left behind, read after its last child ended.
struct Outcome {
    /// The last child's summary.
    summary: Value,
    /// The run's journal.
    events: Vec<StoredEvent>,
    /// Its child run's journal.
    child_events: Vec<StoredEvent>,
    /// How the store says its child run ended.
    child_status: Option<RunStatus>,
    /// How the store says it ended.
    end: Option<RunEnd>,
    /// The stored outputs of its steps and the ends of its nest instances: (node, instance)
    /// -> JSON.
    outputs: BTreeMap<(u32, String), Vec<u8>>,
    /// Its timers and signal waits still open.
    open: usize,
    /// Whether the store says it has ended.
    finished: bool,
    /// The world: key -> (node, attempt, compensation).
    effects: BTreeMap<String, (String, u32, bool)>,
    /// Every execution, in order: (key, pid).
    calls: Vec<(String, u32)>,
    /// What the operations found wrong.
    violations: Vec<String>,
    /// The children killed.
    killed: BTreeSet<u32>,
}

/// The directory of the crash tests' files, under the target directory.
fn base() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("crash")
}

/// Runs one scenario in `dir` (made afresh): a child per plan, then one that must finish the
/// run (a child of a plan may finish it already: its stop point lay past the run's end).
fn scenario(dir: &Path, input: Input, plans: &[Plan], by_worker: bool) -> Result<Outcome, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    open_world(&dir.join("effects.db")).map_err(|e| e.to_string())?;
    let mut killed = BTreeSet::new();
    let mut summary = None;
    let mut sent = false;
    for (i, plan) in plans.iter().chain([&Plan::Finish]).enumerate() {
        let mut child = Child::spawn(dir, input, plan, by_worker && i > 0);
        match child.drive(plan, dir, &mut sent)? {
            Ended::Killed => {
                killed.insert(child.process.id());
            }
            Ended::Finished(value) => {
                summary = Some(value);
                break;
            }
        }
    }
    let summary = summary.ok_or("no child finished the run")?;
    let store = SqliteStore::open(dir.join("runs.db")).map_err(|e| e.to_string())?;
    let (events, loaded, data, child_events, child_status) = futures::executor::block_on(async {
        let events = store.events(RUN, 0).await?;
        let loaded = store
            .load_run(RUN, &Owner::new("checker"), Duration::from_secs(1))
            .await?;
        // Every stored end, those a load leaves out (superseded) included.
        let data = store.run_data(RUN).await?;
        let child_events = store.events(CHILD, 0).await?;
        let filter = RunFilter {
            id: Some(CHILD.to_owned()),
            ..RunFilter::default()
        };
        let child_status = store.list_runs(&filter).await?.first().map(|r| r.status);
        Ok::<_, flowdag::store::StoreError>((events, loaded, data, child_events, child_status))
    })
    .map_err(|e| e.to_string())?;
    drop(store);
    let world = open_world(&dir.join("effects.db")).map_err(|e| e.to_string())?;
    let read = || -> rusqlite::Result<_> {
        let effects = world
            .prepare("SELECT key, node, attempt, compensation FROM effects")?
            .query_map([], |row| {
                Ok((row.get(0)?, (row.get(1)?, row.get(2)?, row.get(3)?)))
            })?
            .collect::<rusqlite::Result<BTreeMap<_, _>>>()?;
        let calls = world
            .prepare("SELECT key, pid FROM calls ORDER BY id")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let violations = world
            .prepare("SELECT key, pid, why FROM violations ORDER BY id")?
            .query_map([], |row| {
                Ok(format!(
                    "{} (pid {}): {}",
                    row.get::<_, String>(0)?,
                    row.get::<_, u32>(1)?,
                    row.get::<_, String>(2)?
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok((effects, calls, violations))
    };
    let (effects, calls, violations) = read().map_err(|e| e.to_string())?;
    Ok(Outcome {
        summary,
        events,
        child_events,
        child_status,
        end: loaded.end,
        outputs: data
            .outputs
            .into_iter()
            .map(|output| ((output.node, output.instance), output.bytes))
            .collect(),
        open: loaded.timers.len() + loaded.waits.len(),
        finished: loaded.run.status.is_finished(),
        effects,
        calls,
        violations,
        killed,
    })
}

// --- The uninterrupted run ---------------------------------------------------------------------

/// An uninterrupted run of one input, to compare the others with.
struct Reference {
    outcome: Outcome,
    /// The run's own events without their order: (kind, node, attempt), sorted.
    events: Vec<(String, Option<String>, u32)>,
    /// Its child run's events, the same way.
    child_events: Vec<(String, Option<String>, u32)>,
    /// The distinct events of its nest instances: (kind, step under its path, attempt).
    nested: BTreeSet<(String, Option<String>, u32)>,
    /// The nodes in the order their compensations ended.
    compensated: Vec<String>,
    /// How long its child took, from spawn to exit.
    took: Duration,
}

impl Reference {
    /// The journal of run `run` ([`RUN`] or [`CHILD`]).
    fn journal(&self, run: &str) -> &[StoredEvent] {
        match run == CHILD {
            true => &self.outcome.child_events,
            false => &self.outcome.events,
        }
    }

    /// The number of events of run `run`.
    fn len(&self, run: &str) -> u64 {
        self.journal(run).len() as u64
    }

    /// The numbers of the events of run `run` that start an attempt of one of the run's own
    /// operations or compensations (`Requested`, `Compensating`) that has a side effect.
    fn attempt_starts(&self, run: &str) -> Vec<u64> {
        self.journal(run)
            .iter()
            .filter(|e| e.path.is_none())
            .filter(|e| key_of(run, e).is_some_and(|key| self.outcome.effects.contains_key(&key)))
            .map(|e| e.seq)
            .collect()
    }

    /// The keys of the attempts of nest instances' steps that have a side effect.
    fn instance_keys(&self) -> Vec<String> {
        self.outcome
            .events
            .iter()
            .filter(|e| e.path.is_some())
            .filter_map(|e| key_of(RUN, e))
            .filter(|key| self.outcome.effects.contains_key(key))
            .collect()
    }
}

fn reference(input: Input) -> &'static Reference {
    static FAILS: OnceLock<Reference> = OnceLock::new();
    static SHIPS: OnceLock<Reference> = OnceLock::new();
    let cell = match input {
        Input::ShipFails => &FAILS,
        Input::Ships => &SHIPS,
    };
    cell.get_or_init(|| {
        let dir = base().join(format!("reference-{}", input.as_str()));
        let started = Instant::now();
        let outcome = scenario(&dir, input, &[], false).expect("the uninterrupted run");
        let took = started.elapsed();
        let reference = Reference {
            events: unordered(&outcome.events),
            child_events: unordered(&outcome.child_events),
            nested: nested(&outcome.events),
            compensated: compensated(&outcome.events),
            outcome,
            took,
        };
        if let Err(why) = consistent(&reference.outcome) {
            panic!("the uninterrupted run of {input:?}: {why}");
        }
        reference
    })
}

// --- The checks --------------------------------------------------------------------------------

/// The idempotency key of the attempt an event of run `run` starts: `Requested` of an
/// operation, `Compensating` of a compensation.
fn key_of(run: &str, event: &StoredEvent) -> Option<String> {
    let node = step_of(event)?;
    match event.kind.as_str() {
        "Requested" => Some(format!("{run}/{node}/{}", event.attempt)),
        "Compensating" => Some(format!("{run}/{node}:compensate/{}", event.attempt)),
        _ => None,
    }
}

/// An event's step: its name, under its instance's path for a step of a nest instance
/// (`packed[1]/parcel`).
fn step_of(event: &StoredEvent) -> Option<String> {
    let node = event.node_name.as_deref()?;
    Some(match &event.path {
        Some(path) => format!("{path}/{node}"),
        None => node.to_owned(),
    })
}

/// The run's own events (not its instances'), without their order.
fn unordered(events: &[StoredEvent]) -> Vec<(String, Option<String>, u32)> {
    let mut all: Vec<_> = events
        .iter()
        .filter(|e| e.path.is_none())
        .map(|e| (e.kind.clone(), e.node_name.clone(), e.attempt))
        .collect();
    all.sort();
    all
}

/// The distinct events of the nest instances (an instance that ran again after a kill
/// journals some twice).
fn nested(events: &[StoredEvent]) -> BTreeSet<(String, Option<String>, u32)> {
    events
        .iter()
        .filter(|e| e.path.is_some())
        .map(|e| (e.kind.clone(), step_of(e), e.attempt))
        .collect()
}

fn compensated(events: &[StoredEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind == "Compensated")
        .filter_map(|e| e.node_name.clone())
        .collect()
}

/// What holds of every run, interrupted or not: a consistent journal and world.
fn consistent(run: &Outcome) -> Result<(), String> {
    if !run.violations.is_empty() {
        return Err(format!("operations ran out of turn: {:#?}", run.violations));
    }
    // Sequence numbers from 0 without a gap; one `RunFinished`, last.
    for (i, event) in run.events.iter().enumerate() {
        if event.seq != i as u64 {
            return Err(format!("event #{i} has sequence number {}", event.seq));
        }
    }
    child_consistent(run)?;
    let finished = run
        .events
        .iter()
        .filter(|e| e.path.is_none() && e.kind == "RunFinished")
        .count();
    if finished != 1 || run.events.last().map(|e| e.kind.as_str()) != Some("RunFinished") {
        return Err(format!(
            "{finished} `RunFinished`, the last event is not one"
        ));
    }
    if !run.finished || run.end.is_none() {
        return Err("the store does not say the run ended".to_owned());
    }
    if run.open != 0 {
        return Err(format!(
            "{} timers or signal waits open after the end",
            run.open
        ));
    }
    // One terminal event per step; one end per compensation.
    let mut ends: BTreeMap<&str, usize> = BTreeMap::new();
    let mut undone: BTreeMap<&str, usize> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for event in run.events.iter().filter(|e| e.path.is_none()) {
        let Some(node) = event.node_name.as_deref() else {
            continue;
        };
        match event.kind.as_str() {
            "Completed" | "Failed" | "Skipped" | "Aborted" | "Withdrawn" => {
                *ends.entry(node).or_default() += 1;
            }
            "Compensated" | "CompensationFailed" => *undone.entry(node).or_default() += 1,
            _ => {}
        }
        if !event.kind.starts_with("Compensat") {
            seen.insert(node);
        }
    }
    for node in &seen {
        if ends.get(node) != Some(&1) {
            return Err(format!(
                "step `{node}` has {} terminal events",
                ends.get(node).unwrap_or(&0)
            ));
        }
    }
    if let Some((node, n)) = undone.iter().find(|(_, n)| **n != 1) {
        return Err(format!("the compensation of `{node}` ended {n} times"));
    }
    // Compensations in reverse graph order: `receipt` (charged after the parcel was labelled
    // by the child run, after the stock was reserved) is refunded, then the child undone,
    // then the stock released.
    let order = compensated(&run.events);
    if !order.is_empty() && order != ["receipt", "labelled", "stock"] {
        return Err(format!("compensations in the order {order:?}"));
    }
    // Every nest instance that journaled an event has its end stored.
    let instances: BTreeSet<String> = run
        .events
        .iter()
        .filter_map(|e| e.path.as_ref().map(ToString::to_string))
        .collect();
    for instance in &instances {
        if !run.outputs.keys().any(|(_, i)| i == instance) {
            return Err(format!(
                "instance `{instance}` ran, and its end is not stored"
            ));
        }
    }
    // An output is stored for a step that completed only.
    for (node, _) in run.outputs.keys() {
        let completed = run
            .events
            .iter()
            .any(|e| e.node == Some(*node) && e.kind == "Completed");
        if !completed {
            return Err(format!(
                "an output is stored for node {node}, which did not complete"
            ));
        }
    }
    // Every effect under a key the journal started; every step and compensation that ended
    // well has its effect under the key of its last attempt.
    let started: BTreeSet<String> = run
        .events
        .iter()
        .filter_map(|e| key_of(RUN, e))
        .chain(run.child_events.iter().filter_map(|e| key_of(CHILD, e)))
        .collect();
    if let Some(key) = run.effects.keys().find(|key| !started.contains(*key)) {
        return Err(format!(
            "an effect under `{key}`, which the journal never started"
        ));
    }
    let journals = [(RUN, &run.events), (CHILD, &run.child_events)];
    for (id, event) in journals
        .iter()
        .flat_map(|(id, events)| events.iter().map(move |e| (*id, e)))
    {
        let Some(node) = step_of(event) else {
            continue;
        };
        let node = node.as_str();
        let key = match event.kind.as_str() {
            "Completed" => format!("{id}/{node}/{}", event.attempt),
            "Compensated" => format!("{id}/{node}:compensate/{}", event.attempt),
            _ => continue,
        };
        let name = event.node_name.as_deref().unwrap_or(node);
        let effectful = run.effects.values().any(|(n, ..)| n == name);
        if effectful && !run.effects.contains_key(&key) {
            return Err(format!(
                "`{node}` completed (#{}) without the effect of `{key}`",
                event.seq
            ));
        }
    }
    // An attempt runs more than once only when the process that ran it was killed: every
    // execution of a key but its last one was in a killed child.
    let mut last: BTreeMap<&str, u32> = BTreeMap::new();
    for (key, pid) in &run.calls {
        if let Some(before) = last.insert(key, *pid)
            && !run.killed.contains(&before)
        {
            return Err(format!(
                "`{key}` ran again (pid {pid}) after pid {before}, which was not killed, ran it"
            ));
        }
    }
    Ok(())
}

/// What holds of the child run's journal: sequence numbers without a gap, each step ended
/// once, each compensation ended once, and its end: succeeded when its parent succeeded; when
/// its parent compensated, undone (reopened after its first end, cancelled, its compensation
/// done, cancelled at the end).
fn child_consistent(run: &Outcome) -> Result<(), String> {
    let events = &run.child_events;
    for (i, event) in events.iter().enumerate() {
        if event.seq != i as u64 {
            return Err(format!(
                "the child's event #{i} has sequence number {}",
                event.seq
            ));
        }
    }
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let mut ends: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for event in events {
        if let (Some(node), "Completed" | "Failed" | "Compensated" | "CompensationFailed") =
            (event.node_name.as_deref(), event.kind.as_str())
        {
            *ends.entry((node, event.kind.as_str())).or_default() += 1;
        }
    }
    if let Some(((node, kind), n)) = ends.iter().find(|(_, n)| **n != 1) {
        return Err(format!("the child's `{node}` has {n} `{kind}`: {kinds:?}"));
    }
    let undone = run.events.iter().any(|e| e.kind == "Compensating");
    let expected = match undone {
        false => (vec!["RunFinished"], RunStatus::Succeeded),
        true => (
            vec![
                "RunFinished",
                "Redriven",
                "CancelRequested",
                "Compensating",
                "Compensated",
                "RunFinished",
            ],
            RunStatus::Cancelled,
        ),
    };
    let tail = &kinds[kinds.len().saturating_sub(expected.0.len())..];
    if tail != expected.0.as_slice() || run.child_status != Some(expected.1) {
        return Err(format!(
            "the child ended {:?} with the journal {kinds:?}; expected {:?} ending {:?}",
            run.child_status, expected.1, expected.0
        ));
    }
    Ok(())
}

/// What holds of an interrupted run: `consistent`, and the same as the uninterrupted one.
fn same_as_reference(run: &Outcome, reference: &Reference) -> Result<(), String> {
    consistent(run)?;
    if run.summary != reference.outcome.summary {
        return Err(format!(
            "the result differs:\n  got       {}\n  reference {}",
            run.summary, reference.outcome.summary
        ));
    }
    if run.end != reference.outcome.end {
        return Err(format!(
            "the stored end differs: {:?}, reference {:?}",
            run.end, reference.outcome.end
        ));
    }
    if run.outputs != reference.outcome.outputs {
        return Err(format!(
            "the stored outputs differ from the uninterrupted run's: nodes {:?}, reference {:?}",
            run.outputs.keys(),
            reference.outcome.outputs.keys()
        ));
    }
    let events = unordered(&run.events);
    if events != reference.events {
        return Err(format!(
            "the journal holds other events than the uninterrupted run's:\n  got       {events:?}\n  reference {:?}",
            reference.events
        ));
    }
    let child_events = unordered(&run.child_events);
    if child_events != reference.child_events {
        return Err(format!(
            "the child's journal holds other events than the uninterrupted run's:\n  got       {child_events:?}\n  reference {:?}",
            reference.child_events
        ));
    }
    let instances = nested(&run.events);
    if instances != reference.nested {
        return Err(format!(
            "the journal holds other events of nest instances than the uninterrupted run's:\n  got       {instances:?}\n  reference {:?}",
            reference.nested
        ));
    }
    if compensated(&run.events) != reference.compensated {
        return Err("the compensations ended in another order".to_owned());
    }
    let keys: BTreeSet<&String> = run.effects.keys().collect();
    let expected: BTreeSet<&String> = reference.outcome.effects.keys().collect();
    if keys != expected {
        return Err(format!(
            "the effects differ from the uninterrupted run's:\n  got       {keys:?}\n  reference {expected:?}"
        ));
    }
    Ok(())
}

/// Runs `plans` as scenario `name` and checks it against the uninterrupted run.
fn check(name: &str, input: Input, plans: &[Plan], by_worker: bool) -> Result<Outcome, String> {
    let reference = reference(input);
    let dir = base().join(name);
    let run = scenario(&dir, input, plans, by_worker).map_err(|why| format!("{name}: {why}"))?;
    same_as_reference(&run, reference).map_err(|why| format!("{name}: {why}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(run)
}

/// Runs every scenario, collects the failures, and fails with all of them at once.
fn all(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} scenarios failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

// --- The tests ---------------------------------------------------------------------------------

#[test]
fn the_uninterrupted_runs_cover_every_construct() {
    let fails = reference(Input::ShipFails);
    assert!(fails.len(RUN) >= 20, "{} events", fails.len(RUN));
    let kinds: BTreeSet<&str> = fails
        .outcome
        .events
        .iter()
        .map(|e| e.kind.as_str())
        .collect();
    for kind in [
        "Retrying",
        "TimerSet",
        "TimerFired",
        "Skipped",
        "Compensated",
        "Failed",
    ] {
        assert!(kinds.contains(kind), "no `{kind}` in {kinds:?}");
    }
    assert_eq!(fails.compensated, ["receipt", "labelled", "stock"]);
    assert!(
        fails.len(CHILD) >= 10,
        "the child run's journal: {:?}",
        fails.child_events
    );
    let ships = reference(Input::Ships);
    assert!(
        ships.outcome.summary["result"]["ok"].is_string(),
        "{}",
        ships.outcome.summary
    );
    assert!(
        fails.outcome.summary["result"]["error"].is_string(),
        "{}",
        fails.outcome.summary
    );
}

/// Kills the run before the commit of every event in turn, then resumes it.
#[test]
fn a_kill_before_every_commit_is_resumed() {
    boundaries(Input::ShipFails, When::Before);
}

/// Kills the run right after the commit of every event in turn, then resumes it.
#[test]
fn a_kill_after_every_commit_is_resumed() {
    boundaries(Input::ShipFails, When::After);
}

/// The succeeding input, killed after every commit.
#[test]
fn a_run_that_succeeds_killed_after_every_commit_is_resumed() {
    boundaries(Input::Ships, When::After);
}

fn boundaries(input: Input, when: When) {
    let reference = reference(input);
    let mut failures = Vec::new();
    let points = (0..reference.len(RUN))
        .map(|at| (RUN, at))
        .chain((0..reference.len(CHILD)).map(|at| (CHILD, at)));
    for (run, at) in points {
        let part = match run == CHILD {
            true => "child-",
            false => "",
        };
        let name = format!("{}-{}-{part}{at}", input.as_str(), when.as_str());
        let plans = [Plan::Stop(Stop { run, at, when })];
        match check(&name, input, &plans, false) {
            // Every event is in some batch: the child stopped there and was killed.
            Ok(run) if run.killed.len() != 1 => {
                failures.push(format!("{name}: the child did not stop at event {at}"));
            }
            Ok(_) => {}
            Err(why) => failures.push(why),
        }
    }
    all(failures);
}

/// Kills the run inside every operation and compensation attempt, after its side effect was
/// written: the resumed run executes the attempt again with the same key, and the effect
/// stays applied once.
#[test]
fn a_kill_inside_every_operation_reruns_it_with_the_same_key() {
    let input = Input::ShipFails;
    let reference = reference(input);
    let mut failures = Vec::new();
    let points = reference
        .attempt_starts(RUN)
        .into_iter()
        .map(|at| (RUN, at))
        .chain(
            reference
                .attempt_starts(CHILD)
                .into_iter()
                .map(|at| (CHILD, at)),
        );
    for (id, at) in points {
        let part = match id == CHILD {
            true => "child-",
            false => "",
        };
        let name = format!("{}-inside-{part}{at}", input.as_str());
        let plans = [Plan::Stop(Stop {
            run: id,
            at,
            when: When::Inside,
        })];
        match check(&name, input, &plans, false) {
            Err(why) => failures.push(why),
            Ok(run) if run.killed.len() != 1 => {
                failures.push(format!("{name}: the child did not stop at event {at}"));
            }
            Ok(run) => {
                // The attempt it stopped in (started at `at` or later; of two started
                // together, the one polled first) ran twice: in the killed child and on
                // resume, under one key. So did any other attempt in flight at the kill
                // (`consistent` checked that each repeat follows a killed child).
                let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
                for (key, _) in &run.calls {
                    *runs.entry(key).or_default() += 1;
                }
                let twice: Vec<&str> = runs
                    .iter()
                    .filter(|(_, n)| **n > 1)
                    .map(|(key, _)| *key)
                    .collect();
                let journal = match id == CHILD {
                    true => &run.child_events,
                    false => &run.events,
                };
                let started_at = |key: &str| {
                    journal
                        .iter()
                        .find(|e| key_of(id, e).as_deref() == Some(key))
                        .map(|e| e.seq)
                };
                let ok = twice.iter().all(|key| runs[key] == 2)
                    && twice
                        .iter()
                        .any(|key| started_at(key).is_some_and(|seq| seq >= at));
                if !ok {
                    failures.push(format!(
                        "{name}: the attempts that ran more than once: {:?}",
                        twice.iter().map(|k| (k, runs[k])).collect::<Vec<_>>()
                    ));
                }
            }
        }
    }
    all(failures);
}

/// Kills the run inside every step of every nest instance (a `ForEach` part, a `Loop`
/// iteration), after its side effect was written: the resumed run runs that instance again,
/// its step under the same key, and the instances whose end was stored not at all.
#[test]
fn a_kill_inside_every_instance_reruns_the_instance_with_the_same_keys() {
    let input = Input::ShipFails;
    let reference = reference(input);
    let keys = reference.instance_keys();
    assert!(keys.len() >= 5, "the instances' steps: {keys:?}");
    let mut failures = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let name = format!("{}-instance-{i}", input.as_str());
        let plans = [Plan::StopInside(key.clone())];
        match check(&name, input, &plans, i % 2 == 1) {
            Err(why) => failures.push(why),
            Ok(run) if run.killed.len() != 1 => {
                failures.push(format!("{name}: the child did not stop inside `{key}`"));
            }
            Ok(run) => {
                let runs = run.calls.iter().filter(|(k, _)| k == key).count();
                if runs != 2 {
                    failures.push(format!("{name}: `{key}` ran {runs} times, not twice"));
                }
            }
        }
    }
    all(failures);
}

/// A seeded random generator (splitmix64).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Kills at random times (the first child, and sometimes the resuming one too), resumed by the
/// worker; then double crashes at event boundaries. The seed is in every failure;
/// `FLOW_CRASH_SEED` replays it.
#[test]
fn random_kills_and_double_crashes_are_resumed() {
    let seed = std::env::var("FLOW_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(now_ms);
    let input = Input::ShipFails;
    let reference = reference(input);
    let mut random = Random(seed);
    // Kill times are drawn within how long an uninterrupted child takes now (under the load
    // of the tests running beside this one), process start included.
    let started = Instant::now();
    let timing = scenario(&base().join("random-timing"), input, &[], false);
    if let Err(why) = timing {
        panic!("an uninterrupted run: {why}");
    }
    let took = started.elapsed().min(reference.took);
    let span = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
    let mut failures = Vec::new();
    let mut kills = 0;
    for i in 0..10 {
        let first = Duration::from_millis(random.below(span));
        let mut plans = vec![Plan::KillAfter(first)];
        if i % 3 == 2 {
            plans.push(Plan::KillAfter(Duration::from_millis(random.below(span))));
        }
        let name = format!("random-{i}");
        match check(&name, input, &plans, i % 2 == 0) {
            Ok(run) => kills += run.killed.len(),
            Err(why) => failures.push(format!("{why} (plans {plans:?})")),
        }
    }
    let n = reference.len(RUN);
    for i in 0..3u64 {
        let first = random.below(n - 2);
        let second = first + 1 + random.below(n - first - 1);
        let when = [When::Before, When::After, When::Inside][i as usize];
        let plans = [
            Plan::Stop(Stop {
                run: RUN,
                at: first,
                when: When::After,
            }),
            Plan::Stop(Stop {
                run: RUN,
                at: second,
                when,
            }),
        ];
        let name = format!("double-{i}");
        match check(&name, input, &plans, i == 1) {
            // The second stop may lie past the last attempt (`inside`): one kill then.
            Ok(run) if run.killed.is_empty() => {
                failures.push(format!("{name}: no child was killed (plans {plans:?})"));
            }
            Ok(_) => {}
            Err(why) => failures.push(format!("{why} (plans {plans:?})")),
        }
    }
    // A kill lands before the run ends most of the time (its time is drawn within the
    // uninterrupted run's, process start included).
    if failures.is_empty() && kills < 3 {
        failures.push(format!(
            "only {kills} of the random kills landed before the run ended"
        ));
    }
    if !failures.is_empty() {
        panic!(
            "FLOW_CRASH_SEED={seed} replays these:\n{}",
            failures.join("\n\n")
        );
    }
}

/// Milliseconds since the Unix epoch: a seed that differs from one run of the test to the next.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.expect("after 1970").as_millis()).expect("fits")
}
