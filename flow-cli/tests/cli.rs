//! The `flow` binary on real stores: its output, its exit codes and its errors; and `resume`
//! through `flow_cli::Cli` with a registered workflow.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flow::prelude::*;
use flow_runtime::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, Owner, RunFilter,
    RunSummary, SignalSent, Store, StoreError, StoreFuture, StoredEvent, StoredSignal,
};
use flow_sqlite::SqliteStore;
use serde_json::Value;

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

async fn fetch(order: u64) -> Result<String, Never> {
    Ok(format!("item-{order}"))
}

async fn ship(item: &str) -> Result<String, Never> {
    Ok(format!("shipped {item}"))
}

workflow! {
    #[flow(durable)]
    Order(order: u64) -> String {
        Sequential {
            item = Operation(fetch(order)),
            sent = Operation(ship(&item)),
        }
        => sent.clone()
    }
}

/// A store whose commit number `fail_at` fails: the run stops there, as after a crash.
#[derive(Clone)]
struct Failing {
    inner: SqliteStore,
    commits: Arc<AtomicUsize>,
    fail_at: usize,
}

impl Store for Failing {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
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
    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        if self.commits.fetch_add(1, Ordering::SeqCst) == self.fail_at {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
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
        self.inner.release(owner, held)
    }
}

/// Held while a store is open in this process and while a child runs: a child forked while
/// another test's store is open holds a copy of that store's lock until it execs, which would
/// make a store dropped just then still look locked to the next child.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A fresh store file for test `name` with run `done` (succeeded) and run `stopped` (stopped
/// at its second commit, unfinished); the store is closed when this returns.
fn store(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = SqliteStore::open(&path).expect("opens");
        let done = Order::runner()
            .durable(&store, "done")
            .execute(1)
            .await
            .expect("runs");
        assert_eq!(done.result.expect("succeeds"), "shipped item-1");
        let failing = Failing {
            inner: store.clone(),
            commits: Arc::new(AtomicUsize::new(0)),
            fail_at: 1,
        };
        let stopped = Order::runner()
            .durable(&failing, "stopped")
            .execute(2)
            .await;
        assert!(stopped.is_err());
    });
    path
}

fn flow(args: &[&str]) -> Output {
    let _serial = serial();
    Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts the command failed with `code` and an error that contains `message`.
fn fails(output: &Output, code: i32, message: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert!(stderr.contains(message), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "stdout: {}", text(&output.stdout));
}

#[test]
fn runs_lists_each_run_with_its_status() {
    let db = store("runs");
    let db = db.to_str().expect("utf-8");
    let output = flow(&["runs", db]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATUS"),
        "{stdout}"
    );
    let done = lines.iter().find(|l| l.starts_with("done ")).expect("done");
    assert!(
        done.contains("Order") && done.contains("succeeded"),
        "{done}"
    );
    let stopped = lines
        .iter()
        .find(|l| l.starts_with("stopped "))
        .expect("stopped");
    assert!(stopped.contains("running"), "{stopped}");

    let output = flow(&["runs", db, "--json"]);
    assert!(output.status.success());
    let runs: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let runs = runs.as_array().expect("an array");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["id"], "done");
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[1]["status"], "running");
}

#[test]
fn show_prints_the_steps_and_the_timeline() {
    let db = store("show");
    let db = db.to_str().expect("utf-8");
    let output = flow(&["show", db, "done"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("status    succeeded"), "{stdout}");
    for step in ["item", "sent"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{step} ")))
            .unwrap_or_else(|| panic!("a line for `{step}`: {stdout}"));
        assert!(line.contains("completed"), "{line}");
    }
    for kind in ["RunStarted", "Requested", "Completed", "RunFinished"] {
        assert!(stdout.contains(kind), "{kind} in {stdout}");
    }

    let output = flow(&["show", db, "stopped", "--json"]);
    assert!(output.status.success());
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(shown["run"]["status"], "running");
    let events = shown["events"].as_array().expect("events");
    assert_eq!(Some(events.len() as u64), shown["run"]["events"].as_u64());
    assert!(events.iter().all(|e| e["kind"] != "RunFinished"));
}

#[test]
fn signal_stores_a_json_payload_and_refuses_bad_ones() {
    let db = store("signal");
    let db = db.to_str().expect("utf-8");
    let output = flow(&["signal", db, "stopped", "approve", r#"{"by":"ann"}"#]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("signal `approve` stored for run `stopped`"));
    let shown = flow(&["show", db, "stopped", "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    assert_eq!(shown["signals"][0]["name"], "approve");
    assert_eq!(shown["signals"][0]["payload"]["by"], "ann");

    fails(
        &flow(&["signal", db, "stopped", "approve", "{by: ann}"]),
        5,
        "the payload of signal `approve` is not JSON",
    );
    fails(
        &flow(&["signal", db, "done", "approve", "true"]),
        5,
        "run `done` has ended (succeeded)",
    );
    fails(
        &flow(&["signal", db, "nope", "approve", "true"]),
        3,
        "no run `nope`",
    );
    // Nothing of the refused signals was stored.
    let shown = flow(&["show", db, "stopped", "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    assert_eq!(shown["signals"].as_array().map(Vec::len), Some(1));
}

#[test]
fn errors_name_the_problem_and_set_the_exit_code() {
    let db = store("errors");
    let dir = db.parent().expect("a directory");
    let db = db.to_str().expect("utf-8");
    fails(&flow(&["show", db, "nope"]), 3, "no run `nope` in");

    let missing = dir.join("missing.db");
    fails(
        &flow(&["runs", missing.to_str().expect("utf-8")]),
        4,
        "no store at",
    );
    assert!(!missing.exists(), "the CLI created a store");

    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "not a database, only some words that fill a page").expect("writes");
    let output = flow(&["runs", foreign.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(4), "{}", text(&output.stderr));

    // A store held open by this process: the CLI is refused, names the lock, changes nothing.
    let held = SqliteStore::open(db).expect("opens");
    fails(&flow(&["runs", db]), 4, "is locked by");
    {
        let _serial = serial();
        drop(held);
    }

    let output = flow(&[]);
    assert_eq!(output.status.code(), Some(2));
    let output = flow(&["runs"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("<DB>"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn resume_needs_the_workflow_and_runs_it_when_registered() {
    let db = store("resume");
    let db = db.to_str().expect("utf-8");
    fails(
        &flow(&["resume", db, "stopped"]),
        1,
        "run `stopped` is a run of `Order`, which this binary does not know",
    );
    let cli = flow_cli::Cli::new().register::<Order>();
    let mut out = Vec::new();
    let serial = serial();
    cli.run_with(["flow", "resume", db, "stopped"], &mut out)
        .expect("resumes");
    assert_eq!(text(&out), "run `stopped` resumed: succeeded\n");
    let err = cli
        .run_with(["flow", "resume", db, "nope"], &mut Vec::new())
        .expect_err("no such run");
    drop(serial);
    assert_eq!(err.exit_code(), 3);
    let output = flow(&["runs", db, "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let runs: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(
        runs.as_array()
            .expect("runs")
            .iter()
            .all(|r| r["status"] == "succeeded")
    );
}
