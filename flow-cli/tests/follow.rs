//! `flow show --follow` on SQLite: it prints the run, then each event as it is committed by the
//! store's owner (another store in this process: the command reads as a client), once, in
//! order, and returns when the run has ended; with `--json`, one JSON object a line.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use flowdag::prelude::*;
use flowdag_cli::{Cli, CliError};
use flowdag_runtime::store::{Batch, Lease, NewRun, Owner, RunEnd, RunStatus, Store, StoredEvent};
use flowdag_sqlite::SqliteStore;
use serde_json::Value;

mod common;
use common::{Shared, fetch, wait_until};

const LEASE: Duration = Duration::from_secs(3600);

/// How many times (10 ms apart) a test looks for what it waits for before it gives up: a
/// bound against a hang, far above what a slow machine needs.
const LOOKS: u32 = 3_000;

fn path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    dir.join("runs.db")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn event(seq: u64, kind: &str, node: Option<(u32, &str)>) -> StoredEvent {
    let mut event = StoredEvent::new(seq, kind);
    if let Some((node, name)) = node {
        event.node = Some(node);
        event.node_name = Some(name.to_owned());
        event.attempt = 1;
    }
    event.at_us = seq * 1_000;
    event
}

/// Creates run `id` with its first two events (`RunStarted`, `fetch` requested).
async fn create(store: &dyn Store, id: &str) -> Lease {
    let mut run = NewRun::new(id, "Order", 1, Owner::new("worker"), LEASE);
    run.input = b"7".to_vec();
    run.events = vec![
        event(0, "RunStarted", None),
        event(1, "Requested", Some((0, "fetch"))),
    ];
    let created = store.create_run(run).await.expect("creates");
    created.lease().expect("a new run").clone()
}

/// The second batch (`fetch` completed, `charge` requested) and the last (`charge`
/// completed, the run finished).
fn batches(lease: &Lease) -> [Batch; 2] {
    let mut second = Batch::new(lease, 2, LEASE);
    second.events = vec![
        event(2, "Completed", Some((0, "fetch"))),
        event(3, "Requested", Some((1, "charge"))),
    ];
    let mut last = Batch::new(lease, 4, LEASE);
    last.events = vec![
        event(4, "Completed", Some((1, "charge"))),
        event(5, "RunFinished", None),
    ];
    last.status = Some(RunStatus::Succeeded);
    last.end = Some(RunEnd {
        result: None,
        error: None,
    });
    [second, last]
}

/// Runs `flow ARGS` on a thread of its own, writing to `out`.
fn spawn(args: Vec<String>, out: &Shared) -> JoinHandle<Result<(), CliError>> {
    let mut out = out.clone();
    std::thread::spawn(move || {
        let args = std::iter::once("flow".to_owned()).chain(args);
        Cli::new().run_with(args, &mut out)
    })
}

/// Waits for the command on `thread` to return (it must: the run has ended), and gives its
/// answer.
fn returned(thread: JoinHandle<Result<(), CliError>>) -> Result<(), CliError> {
    wait_until("the command returns after the run ended", LOOKS, || {
        thread.is_finished()
    });
    thread.join().expect("the command does not panic")
}

/// The sequence numbers of the timeline's lines in `text`, in the order printed.
fn timeline(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|line| {
            let mut cells = line.split_whitespace();
            let seq = cells.next()?.parse().ok()?;
            cells.next()?.ends_with("ms").then_some(seq)
        })
        .collect()
}

#[test]
fn follow_prints_each_new_event_once_and_returns_when_the_run_ends() {
    let db = path("follow-text");
    let runtime = runtime();
    let owner = SqliteStore::open(&db).expect("the owner opens the store");
    let lease = runtime.block_on(create(&owner, "order-1"));
    let [second, last] = batches(&lease);
    let out = Shared::default();
    let db = db.to_str().expect("utf-8").to_owned();
    let args = ["show", &db, "order-1", "--follow", "--interval", "5"];
    let follower = spawn(args.map(str::to_owned).to_vec(), &out);

    wait_until("the run is shown", LOOKS, || {
        timeline(&out.text()) == [0, 1]
    });
    assert!(out.text().contains("status    running\n"), "{}", out.text());
    runtime.block_on(owner.commit(second)).expect("commits");
    wait_until("the second batch is printed", LOOKS, || {
        timeline(&out.text()).len() == 4
    });
    runtime.block_on(owner.commit(last)).expect("commits");
    returned(follower).expect("follows to the end");

    let text = out.text();
    assert_eq!(timeline(&text), [0, 1, 2, 3, 4, 5], "{text}");
    let charge = text.lines().find(|l| l.starts_with("4 ")).expect("event 4");
    assert_eq!(
        charge.split_whitespace().collect::<Vec<_>>(),
        ["4", "4.000ms", "charge", "Completed", "1"]
    );
    assert!(
        text.ends_with("\nrun `order-1` ended: succeeded\n"),
        "{text}"
    );

    // A run that has ended: shown, and the command returns at once.
    let mut ended = Vec::new();
    Cli::new()
        .run_with(["flow", "show", &db, "order-1", "--follow"], &mut ended)
        .expect("shows");
    let ended = String::from_utf8(ended).expect("UTF-8");
    assert_eq!(timeline(&ended), [0, 1, 2, 3, 4, 5], "{ended}");
    assert!(
        ended.ends_with("\nrun `order-1` ended: succeeded\n"),
        "{ended}"
    );
    // `--interval` belongs to `--follow`; a run that does not exist is exit code 3.
    let error = Cli::new()
        .run_with(
            ["flow", "show", &db, "order-1", "--interval", "5"],
            &mut Vec::new(),
        )
        .expect_err("a usage error");
    assert_eq!(error.exit_code(), 2, "{error}");
    let error = Cli::new()
        .run_with(["flow", "show", &db, "nope", "--follow"], &mut Vec::new())
        .expect_err("no such run");
    assert_eq!(error.exit_code(), 3, "{error}");
}

#[test]
fn follow_with_json_prints_one_object_a_line() {
    let db = path("follow-json");
    let runtime = runtime();
    let owner = SqliteStore::open(&db).expect("the owner opens the store");
    let lease = runtime.block_on(create(&owner, "order-2"));
    let [second, last] = batches(&lease);
    let out = Shared::default();
    let db = db.to_str().expect("utf-8").to_owned();
    let args = ["show", &db, "order-2", "--json", "-f", "--interval", "5"];
    let follower = spawn(args.map(str::to_owned).to_vec(), &out);

    wait_until("the run is shown", LOOKS, || out.text().ends_with('\n'));
    runtime.block_on(owner.commit(second)).expect("commits");
    wait_until("the second batch is printed", LOOKS, || {
        out.text().lines().count() == 3
    });
    runtime.block_on(owner.commit(last)).expect("commits");
    returned(follower).expect("follows to the end");

    let text = out.text();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert_eq!(lines[0]["run"]["id"], "order-2");
    assert_eq!(lines[0]["input"], 7);
    assert_eq!(lines[0]["events"].as_array().map(Vec::len), Some(2));
    for (line, seq) in lines[1..5].iter().zip(2..) {
        assert_eq!(line["event"]["seq"], seq, "{line}");
    }
    assert_eq!(lines[3]["event"]["kind"], "Completed");
    assert_eq!(lines[3]["event"]["node"], "charge");
    assert_eq!(lines[5]["ended"]["status"], "succeeded");
    assert_eq!(lines[5]["ended"]["events"], 6);
}

workflow! {
    /// Waits for a confirmation.
    #[flow(durable)]
    Confirming(order: u64) -> bool {
        Sequential {
            Operation(fetch(order)),
            confirmed = Signal(confirm: bool),
        }
        => confirmed
    }
}

/// A durable run that waits for a signal, followed while its process runs it; `flow signal`
/// (a client too) sends the signal, the run ends, and so does the command.
#[test]
fn follow_a_durable_run_that_a_signal_ends() {
    let db = path("follow-durable");
    let store = SqliteStore::open(&db).expect("the owner opens the store");
    let running = {
        let store = store.clone();
        std::thread::spawn(move || {
            runtime().block_on(async {
                Confirming::runner()
                    .durable(&store, "confirm-1")
                    .execute(5)
                    .await
                    .map(|outcome| outcome.result.map_err(|e| e.to_string()))
            })
        })
    };
    let db = db.to_str().expect("utf-8").to_owned();
    wait_until("the run is created", LOOKS, || {
        let mut out = Vec::new();
        Cli::new()
            .run_with(["flow", "runs", &db], &mut out)
            .is_ok_and(|()| String::from_utf8_lossy(&out).contains("confirm-1"))
    });
    let out = Shared::default();
    let args = ["show", &db, "confirm-1", "--follow", "--interval", "5"];
    let follower = spawn(args.map(str::to_owned).to_vec(), &out);
    wait_until("the signal step waits", LOOKS, || {
        out.text()
            .lines()
            .any(|l| l.contains(" confirmed ") && l.contains("Requested"))
    });
    let mut said = Vec::new();
    Cli::new()
        .run_with(
            ["flow", "signal", &db, "confirm-1", "confirm", "true"],
            &mut said,
        )
        .expect("the signal is stored");
    returned(follower).expect("follows to the end");
    wait_until("the run returns", LOOKS, || running.is_finished());
    let result = running.join().expect("the run does not panic");
    assert_eq!(result.expect("the store works"), Ok(true));

    let text = out.text();
    let seqs = timeline(&text);
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "every event once, in order: {text}"
    );
    for kind in ["SignalReceived", "RunFinished"] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().nth(3) == Some(kind)),
            "{kind}: {text}"
        );
    }
    assert!(
        text.ends_with("\nrun `confirm-1` ended: succeeded\n"),
        "{text}"
    );
}
