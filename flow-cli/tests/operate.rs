//! `flow cancel`, `terminate`, `redrive` and `delete` on SQLite stores made by real durable
//! runs, through `flowdag_cli::Cli` in this process: their output, what they change in the
//! store, their refusals and exit codes, and how they work beside a process that owns the
//! store.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use flowdag::prelude::*;
use flowdag_cli::{Cli, CliError};
use flowdag_sqlite::SqliteStore;
use serde_json::Value;

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the courier is down")
    }
}

impl std::error::Error for Down {}

/// The runs whose courier is down.
static DOWN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

async fn pick(order: u64) -> Result<u64, Down> {
    Ok(order)
}

async fn courier(order: u64) -> Result<u64, Down> {
    let run = flowdag_runtime::durable::attempt().map(|a| a.run().to_owned());
    match run.is_some_and(|run| DOWN.lock().expect("not poisoned").contains(&run)) {
        true => Err(Down),
        false => Ok(order * 2),
    }
}

workflow! {
    /// Picks, waits an hour, then ships.
    #[flow(durable)]
    Parcel(order: u64) -> u64 {
        Sequential {
            picked = Operation(pick(order)),
            Delay("1h"),
            shipped = Operation(courier(picked)),
        }
        => shipped
    }
}

workflow! {
    /// Picks and ships at once.
    #[flow(durable)]
    Express(order: u64) -> u64 {
        Sequential {
            picked = Operation(pick(order)),
            shipped = Operation(courier(picked)),
        }
        => shipped
    }
}

/// A fresh store for test `name` with: `waiting` (a `Parcel` unloaded in its hour), `done` (an
/// `Express` that succeeded), `failed` (an `Express` whose courier was down).
fn store(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = SqliteStore::open(&path).expect("opens");
        let waiting = Parcel::runner()
            .durable(&store, format!("{name}-waiting"))
            .unload_when_waiting(Duration::ZERO)
            .execute(1)
            .await
            .expect("unloads");
        assert!(waiting.is_unloaded());
        let done = Express::runner()
            .durable(&store, format!("{name}-done"))
            .execute(2)
            .await
            .expect("runs");
        assert_eq!(done.into_result().expect("succeeds"), 4);
        DOWN.lock()
            .expect("not poisoned")
            .insert(format!("{name}-failed"));
        let failed = Express::runner()
            .durable(&store, format!("{name}-failed"))
            .execute(3)
            .await
            .expect("runs");
        assert!(failed.into_result().is_err());
    });
    path
}

/// Runs `args` (after `flow`) through `cli`; its output, or its error.
fn run(cli: &Cli, args: &[&str]) -> Result<String, CliError> {
    let mut out = Vec::new();
    let mut all = vec!["flow"];
    all.extend_from_slice(args);
    cli.run_with(all, &mut out)?;
    Ok(String::from_utf8(out).expect("UTF-8"))
}

fn ok(cli: &Cli, args: &[&str]) -> String {
    run(cli, args).unwrap_or_else(|e| panic!("`flow {}`: {e}", args.join(" ")))
}

fn refused(cli: &Cli, args: &[&str], code: u8, says: &str) {
    match run(cli, args) {
        Ok(out) => panic!("`flow {}` succeeded: {out}", args.join(" ")),
        Err(error) => {
            assert_eq!(
                error.exit_code(),
                code,
                "`flow {}`: {error}",
                args.join(" ")
            );
            assert!(
                error.to_string().contains(says),
                "`flow {}`: {error}",
                args.join(" ")
            );
        }
    }
}

/// The status of each run, by id.
fn statuses(db: &str) -> Vec<(String, String)> {
    let out = ok(&Cli::new(), &["runs", db, "--json"]);
    let runs: Value = serde_json::from_str(&out).expect("JSON");
    runs.as_array()
        .expect("an array")
        .iter()
        .map(|run| {
            (
                run["id"].as_str().unwrap_or_default().to_owned(),
                run["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn status(db: &str, id: &str) -> String {
    statuses(db)
        .into_iter()
        .find(|(run, _)| run == id)
        .map(|(_, status)| status)
        .unwrap_or_else(|| "gone".to_owned())
}

/// The generic binary stores the cancel request; `flow resume` of a binary that registered
/// the workflow carries it out; a registered binary that owns the store cancels at once.
#[test]
fn cancel_is_requested_and_carried_out_by_the_process_that_runs_the_workflow() {
    let path = store("cancel");
    let db = path.to_str().expect("UTF-8");
    let generic = Cli::new();
    let out = ok(
        &generic,
        &["cancel", db, "cancel-waiting", "--reason", "withdrawn"],
    );
    assert!(out.contains("nobody holds it"), "{out}");
    assert_eq!(status(db, "cancel-waiting"), "waiting");
    let registered = Cli::new().register::<Parcel>();
    let out = ok(&registered, &["resume", db, "cancel-waiting"]);
    assert!(out.contains("cancelled"), "{out}");
    assert_eq!(status(db, "cancel-waiting"), "cancelled");
    let show = ok(&generic, &["show", db, "cancel-waiting"]);
    assert!(show.contains("CancelRequested"), "{show}");
    assert!(show.contains("withdrawn"), "{show}");
    refused(
        &generic,
        &["cancel", db, "cancel-waiting"],
        6,
        "has finished",
    );
    refused(&generic, &["cancel", db, "nope"], 3, "no run `nope`");
}

/// A registered binary that owns the store cancels a run nobody holds at once.
#[test]
fn a_registered_binary_cancels_a_run_nobody_holds_here() {
    let path = store("cancel-here");
    let db = path.to_str().expect("UTF-8");
    let registered = Cli::new().register::<Parcel>();
    let out = ok(&registered, &["cancel", db, "cancel-here-waiting"]);
    assert!(out.contains("cancelled here: cancelled"), "{out}");
    assert_eq!(status(db, "cancel-here-waiting"), "cancelled");
}

/// `terminate` ends a run nobody holds at once; `--workflow` with `--graph-hash` ends the
/// unfinished runs of one version of a workflow and leaves the others.
#[test]
fn terminate_ends_runs_at_once_one_or_every_run_of_a_version() {
    let path = store("terminate");
    let db = path.to_str().expect("UTF-8");
    let cli = Cli::new();
    let out = ok(
        &cli,
        &["terminate", db, "terminate-waiting", "--reason", "retired"],
    );
    assert!(out.contains("terminated"), "{out}");
    assert_eq!(status(db, "terminate-waiting"), "cancelled");
    refused(
        &cli,
        &["terminate", db, "terminate-done"],
        6,
        "has finished",
    );

    let path = store("terminate-all");
    let db = path.to_str().expect("UTF-8");
    let out = ok(&cli, &["runs", db, "--json"]);
    let runs: Value = serde_json::from_str(&out).expect("JSON");
    let hash = runs
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["workflow"] == "Parcel"))
        .and_then(|run| run["graph_hash"].as_str())
        .expect("a graph hash")
        .to_owned();
    let out = ok(
        &cli,
        &[
            "terminate",
            db,
            "--workflow",
            "Parcel",
            "--graph-hash",
            "0000000000000001",
        ],
    );
    assert!(out.contains("0 unfinished run(s) selected"), "{out}");
    assert_eq!(status(db, "terminate-all-waiting"), "waiting");
    let out = ok(
        &cli,
        &[
            "terminate",
            db,
            "--workflow",
            "Parcel",
            "--graph-hash",
            &hash,
        ],
    );
    assert!(
        out.contains("1 unfinished run(s) selected, 1 terminated"),
        "{out}"
    );
    assert_eq!(status(db, "terminate-all-waiting"), "cancelled");
    assert_eq!(status(db, "terminate-all-done"), "succeeded");
    refused(
        &cli,
        &["terminate", db, "--graph-hash", &hash],
        2,
        "--workflow",
    );
}

/// `redrive` sets a failed run going again; `flow resume` of a registered binary finishes it,
/// its completed step not run again; a succeeded run is refused with exit code 6.
#[test]
fn redrive_sets_a_failed_run_going_again_and_refuses_a_succeeded_one() {
    let path = store("redrive");
    let db = path.to_str().expect("UTF-8");
    let cli = Cli::new();
    DOWN.lock().expect("not poisoned").remove("redrive-failed");
    let out = ok(&cli, &["redrive", db, "redrive-failed"]);
    assert!(
        out.contains("step `shipped` gets a new attempt (2"),
        "{out}"
    );
    assert_eq!(status(db, "redrive-failed"), "running");
    let out = ok(
        &Cli::new().register::<Express>(),
        &["resume", db, "redrive-failed"],
    );
    assert!(out.contains("succeeded"), "{out}");
    refused(&cli, &["redrive", db, "redrive-done"], 6, "succeeded");
    let json = ok(&cli, &["show", db, "redrive-failed", "--json"]);
    let shown: Value = serde_json::from_str(&json).expect("JSON");
    let events = shown["events"].as_array().expect("events");
    assert!(
        events.iter().any(|e| e["kind"] == "Redriven"),
        "the redrive is journaled: {json}"
    );
}

/// `delete` deletes finished runs by id or by filter, refuses an unfinished one (deleting
/// nothing) and needs a selection.
#[test]
fn delete_removes_finished_runs_and_refuses_unfinished_ones() {
    let path = store("delete");
    let db = path.to_str().expect("UTF-8");
    let cli = Cli::new();
    refused(
        &cli,
        &["delete", db, "delete-done", "delete-waiting"],
        6,
        "only a finished run can be deleted",
    );
    assert_eq!(
        status(db, "delete-done"),
        "succeeded",
        "nothing was deleted"
    );
    refused(&cli, &["delete", db], 2, "required");
    let out = ok(&cli, &["delete", db, "--status", "failed", "--json"]);
    let deleted: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(deleted["deleted"], serde_json::json!(["delete-failed"]));
    let out = ok(&cli, &["delete", db, "delete-done"]);
    assert!(out.contains("1 run(s) deleted"), "{out}");
    assert_eq!(
        statuses(db),
        vec![("delete-waiting".to_owned(), "waiting".to_owned())]
    );
}

/// Beside a process that owns the store: `terminate` leaves a request (it may not write the
/// run), `redrive` and `delete` work as a client; a signal with a request's name is refused.
#[test]
fn operations_work_beside_the_process_that_owns_the_store() {
    let path = store("beside");
    let db = path.to_str().expect("UTF-8");
    let owner = SqliteStore::open(&path).expect("the application owns the store");
    let cli = Cli::new();
    let out = ok(&cli, &["terminate", db, "beside-waiting"]);
    assert!(out.contains("requested"), "{out}");
    assert_eq!(status(db, "beside-waiting"), "waiting");
    let out = ok(&cli, &["redrive", db, "beside-failed"]);
    assert!(out.contains("redriven"), "{out}");
    let out = ok(&cli, &["delete", db, "beside-done"]);
    assert!(out.contains("1 run(s) deleted"), "{out}");
    refused(
        &cli,
        &["signal", db, "beside-waiting", "flow.cancel", "{}"],
        5,
        "operator's requests",
    );
    // The owner carries the termination out when it next runs the run.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let err = runtime
        .block_on(flowdag_runtime::durable::resume::<Parcel, _>(
            &owner,
            "beside-waiting",
        ))
        .expect_err("terminated");
    assert!(
        matches!(
            err,
            flowdag_runtime::durable::DurableError::Terminated { .. }
        ),
        "{err}"
    );
    drop(owner);
    assert_eq!(status(db, "beside-waiting"), "cancelled");
}

/// `show` says of each unconsumed signal why nothing will take it: an operator's request not
/// carried out yet, a name the run's workflow does not take (in a binary that registered
/// it), or, once the run has ended, that it expired with the run.
#[test]
fn show_says_which_signals_nothing_will_take() {
    let path = store("notes");
    let db = path.to_str().expect("UTF-8");
    let generic = Cli::new();
    ok(
        &generic,
        &["signal", db, "notes-waiting", "confirm", "true"],
    );
    ok(&generic, &["cancel", db, "notes-waiting"]);
    let shown = ok(&generic, &["show", db, "notes-waiting", "--json"]);
    let notes = |shown: &str| -> Vec<Value> {
        let value: Value = serde_json::from_str(shown).expect("JSON");
        value["signals"]
            .as_array()
            .expect("signals")
            .iter()
            .map(|s| s["note"].clone())
            .collect()
    };
    let generic_notes = notes(&shown);
    assert_eq!(
        generic_notes[0],
        Value::Null,
        "the generic binary cannot tell"
    );
    assert!(
        generic_notes[1]
            .as_str()
            .is_some_and(|n| n.contains("operator's request")),
        "{generic_notes:?}"
    );
    let registered = Cli::new().register::<Parcel>();
    let shown = ok(&registered, &["show", db, "notes-waiting", "--json"]);
    assert!(
        notes(&shown)[0]
            .as_str()
            .is_some_and(|n| n.starts_with("no step will take it")),
        "{shown}"
    );
    ok(&generic, &["terminate", db, "notes-waiting"]);
    let shown = ok(&generic, &["show", db, "notes-waiting"]);
    assert!(
        shown.contains("expired: the run ended without taking it"),
        "{shown}"
    );
}
