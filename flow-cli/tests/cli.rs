//! The `flow` binary on real stores: its output, its exit codes and its errors; and `resume`
//! through `flowdag_cli::Cli` with a registered workflow.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flowdag::prelude::*;
use flowdag_sqlite::SqliteStore;
use serde_json::Value;

mod common;
use common::{Failing, Never, Order, fetch};

async fn pack(line: u64) -> Result<u64, Refused> {
    match line {
        1 => Err(Refused("no box fits")),
        _ => Ok(line),
    }
}

workflow! {
    /// Packs every line; a line that cannot be packed is kept as a failure.
    #[flow(durable)]
    Packing(lines: u64) -> usize {
        packed = ForEach(line in 0..lines, on_failure = collect) {
            parcel = Operation(pack(line))
            => parcel
        }
        => packed.iter().filter(|p| p.is_ok()).count()
    }
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

/// A label wider than `flow show` prints without `--full`, with a C1 control and a
/// bidirectional override that JSON keeps as they are (it escapes only C0 controls).
async fn label(order: u64) -> Result<String, Never> {
    Ok(format!(
        "\u{9b}31m\u{202e}{}",
        "x".repeat(300 + order as usize)
    ))
}

workflow! {
    /// One step whose output is wide.
    #[flow(durable)]
    Labelling(order: u64) -> usize {
        text = Operation(label(order))
        => text.len()
    }
}

#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

async fn reserve(order: u64) -> Result<u64, Refused> {
    Ok(order)
}

async fn release(_stock: &u64) -> Result<(), Refused> {
    Ok(())
}

async fn charge(order: u64) -> Result<u64, Refused> {
    Ok(order * 10)
}

/// Order 1: the first attempt fails, the second refunds. Order 2: every attempt fails.
async fn refund(order: u64) -> Result<(), Refused> {
    let attempt = flowdag_runtime::durable::attempt().map_or(1, |a| a.attempt());
    match (order, attempt) {
        (1, 2) => Ok(()),
        _ => Err(Refused("the bank is down")),
    }
}

async fn dispatch() -> Result<(), Refused> {
    Err(Refused("no courier"))
}

workflow! {
    #[flow(durable)]
    Saga(order: u64) -> u64 {
        Sequential {
            stock = Operation(reserve(order), compensate = release(&stock)),
            receipt = Operation(
                charge(order),
                retries = 1,
                backoff = "1ms",
                compensate = refund(order),
            ),
            shipped = Operation(dispatch()),
        }
        => receipt
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

/// A fresh store file for test `name`, filled by `fill` on a runtime of its own; the store is
/// closed when this returns.
fn fresh_store<F: std::future::Future<Output = ()>>(
    name: &str,
    fill: impl FnOnce(SqliteStore) -> F,
) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let store = SqliteStore::open(&path).expect("opens");
    runtime.block_on(fill(store));
    path
}

/// A fresh store file for test `name` with run `done` (succeeded) and run `stopped` (stopped
/// at its second commit, unfinished); the store is closed when this returns.
fn store(name: &str) -> PathBuf {
    fresh_store(name, |store| async move {
        let done = Order::runner()
            .durable(&store, "done")
            .execute(1)
            .await
            .expect("runs");
        assert_eq!(done.result.expect("succeeds"), "shipped item-1");
        let failing = Failing::new(store.clone(), 1);
        let stopped = Order::runner()
            .durable(&failing, "stopped")
            .execute(2)
            .await;
        assert!(stopped.is_err());
    })
}

/// `store(name)` with two runs of `Saga` whose shipping failed: `refunded` (its refund
/// succeeds at its second attempt, then the stock is released) and `unrefunded` (its refund
/// fails for good).
fn saga_store(name: &str) -> PathBuf {
    let path = store(name);
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = SqliteStore::open(&path).expect("opens");
        for (id, order) in [("refunded", 1), ("unrefunded", 2)] {
            let outcome = Saga::runner()
                .durable(&store, id)
                .execute(order)
                .await
                .expect("the store works");
            assert!(outcome.result.is_err(), "{id} fails");
        }
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

/// `runs` filters by text in the id and by creation time, and pages with `--limit` and
/// `--after`.
#[test]
fn runs_filters_by_id_text_and_time_and_pages() {
    let path = fresh_store("runs-pages", |store| async move {
        for id in ["eu-1", "us-1", "eu-2", "eu-3", "us-2"] {
            let outcome = Order::runner()
                .durable(&store, id)
                .execute(1)
                .await
                .expect("runs");
            assert!(outcome.result.is_ok(), "{id} succeeds");
        }
    });
    let db = path.to_str().expect("utf-8");
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["runs", db, "--json"];
        all.extend_from_slice(args);
        let output = flow(&all);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let runs: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        runs.as_array()
            .expect("an array")
            .iter()
            .filter_map(|r| r["id"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(ids(&["--id-contains", "eu-"]), ["eu-1", "eu-2", "eu-3"]);
    assert_eq!(ids(&["--limit", "2"]), ["eu-1", "us-1"]);
    assert_eq!(ids(&["--limit", "2", "--after", "us-1"]), ["eu-2", "eu-3"]);
    assert_eq!(ids(&["--limit", "2", "--after", "eu-3"]), ["us-2"]);
    // Newest first, and pages towards older runs.
    assert_eq!(ids(&["--newest", "--limit", "2"]), ["us-2", "eu-3"]);
    assert_eq!(
        ids(&["--newest", "--limit", "2", "--after", "eu-3"]),
        ["eu-2", "us-1"]
    );
    assert_eq!(
        ids(&["--id-contains", "us", "--after", "eu-1"]),
        ["us-1", "us-2"]
    );
    assert!(ids(&["--from", "2999-01-01"]).is_empty());
    assert!(ids(&["--until", "2000-01-01T00:00:00Z"]).is_empty());
    assert_eq!(
        ids(&["--from", "2000-01-01", "--until", "2999-12-31"]).len(),
        5
    );
    // A page that may have more after it says how to get the next.
    let output = flow(&["runs", db, "--limit", "2"]);
    assert!(
        text(&output.stdout).contains("(a page of 2: the next with `--after us-1`)"),
        "{}",
        text(&output.stdout)
    );
    fails(&flow(&["runs", db, "--after", "nope"]), 3, "no run `nope`");
    let bad = flow(&["runs", db, "--from", "2026-13-01"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("is not a time"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn show_prints_the_steps_of_each_instance_under_its_path() {
    let path = fresh_store("show-nests", |store| async move {
        let packed = Packing::runner()
            .durable(&store, "packing")
            .execute(3)
            .await
            .expect("runs");
        assert_eq!(packed.result.expect("succeeds"), 2);
    });
    let db = path.to_str().expect("utf-8");
    let output = flow(&["show", db, "packing"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("status    succeeded"), "{stdout}");
    // The instance's failure was collected: the run has no error line.
    assert!(!stdout.contains("error "), "{stdout}");
    for (step, status) in [
        ("packed", "completed"),
        ("packed[0]/parcel", "completed"),
        ("packed[1]/parcel", "failed"),
        ("packed[2]/parcel", "completed"),
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{step} ")))
            .unwrap_or_else(|| panic!("a line for `{step}`: {stdout}"));
        assert!(line.contains(status), "{line}");
    }
    assert!(stdout.contains("no box fits"), "{stdout}");
    let output = flow(&["show", db, "packing", "--json"]);
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let events = shown["events"].as_array().expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["path"] == "packed[1]" && e["kind"] == "Failed"),
        "{events:?}"
    );
}

async fn box_line(line: u64) -> Result<u64, Never> {
    Ok(line + 1)
}

workflow! {
    /// Boxes one line.
    #[flow(durable)]
    Boxing(line: u64) -> u64 {
        boxed = Operation(box_line(line))
        => boxed
    }
}

workflow! {
    /// Boxes a line as a child run, twice as a run that continues as new.
    #[flow(durable, continue_as_new)]
    Lines(line: u64) -> flowdag_runtime::durable::Continue<u64, u64> {
        boxed = Workflow(Boxing(line))
        => match boxed >= 3 {
            true => flowdag_runtime::durable::Continue::Done(boxed),
            false => flowdag_runtime::durable::Continue::Again(boxed),
        }
    }
}

#[test]
fn show_names_a_child_runs_parent_and_a_runs_generation() {
    let path = fresh_store("show-lineage", |store| async move {
        let done = Lines::runner()
            .durable(&store, "lines")
            .execute(1)
            .await
            .expect("runs");
        assert_eq!(
            done.result.expect("succeeds"),
            flowdag_runtime::durable::Continue::Done(3)
        );
    });
    let db = path.to_str().expect("utf-8");
    let output = flow(&["show", db, "lines~2/boxed"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("parent    lines\n"), "{stdout}");
    let output = flow(&["show", db, "lines"]);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("generation 2\n"), "{stdout}");
    assert!(!stdout.contains("parent "), "{stdout}");
    let output = flow(&["show", db, "lines~1", "--json"]);
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(shown["run"]["status"], "continued");
    assert_eq!(shown["generation"], 1);
    // Each generation's child is named after the generation: `lines~1/boxed`, `lines~2/boxed`.
    let output = flow(&["runs", db, "--id-contains", "/boxed"]);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("lines~1/boxed "), "{stdout}");
    assert!(stdout.contains("lines~2/boxed "), "{stdout}");
    assert_eq!(
        stdout.lines().count(),
        3,
        "the header and two children: {stdout}"
    );
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

/// A binary that registered the run's workflow checks the signal's name and payload type
/// before it stores anything; the generic binary stores it and says what it could not check.
#[test]
fn signal_is_checked_by_a_binary_that_registered_the_workflow() {
    let path = fresh_store("signal-checked", |store| async move {
        let waiting = Confirming::runner()
            .durable(&store, "waiting")
            .unload_when_waiting(std::time::Duration::ZERO)
            .execute(1)
            .await
            .expect("runs");
        assert!(waiting.is_unloaded(), "the run waits for `confirm`");
    });
    let db = path.to_str().expect("utf-8");
    let registered = || flowdag_cli::Cli::new().register::<Confirming>();
    let refused = [
        ("confirm", "7", "its payload does not read as `bool`"),
        (
            "confirmed",
            "true",
            "the workflow has no signal `confirmed`: it declares `confirm`",
        ),
    ];
    for (name, payload, why) in refused {
        let mut out = Vec::new();
        let error = registered()
            .run_with(["flow", "signal", db, "waiting", name, payload], &mut out)
            .expect_err("refused");
        assert_eq!(error.exit_code(), 5, "{error}");
        let message = error.to_string();
        assert!(message.contains(why), "{message}");
        assert!(message.contains("nothing was stored"), "{message}");
    }
    let shown = flow(&["show", db, "waiting", "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    assert_eq!(shown["signals"].as_array().map(Vec::len), Some(0));
    let mut out = Vec::new();
    registered()
        .run_with(
            ["flow", "signal", db, "waiting", "confirm", "true"],
            &mut out,
        )
        .expect("stored");
    let said = text(&out);
    assert!(said.contains("signal `confirm` stored"), "{said}");
    assert!(!said.contains("not checked"), "{said}");
    // The generic binary cannot check: it stores, and says so.
    let output = flow(&["signal", db, "waiting", "confirm", "7"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let said = text(&output.stdout);
    assert!(
        said.contains("not checked: this binary does not have workflow `Confirming`"),
        "{said}"
    );
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
    // A payload that starts with a hyphen is a payload, not an option.
    let output = flow(&["signal", db, "stopped", "approve", "-1"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    fails(
        &flow(&["signal", db, "stopped", "approve", "-x"]),
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
    assert_eq!(shown["signals"].as_array().map(Vec::len), Some(2));
    assert_eq!(shown["signals"][1]["payload"], -1);
}

/// Asserts that every command (`runs`, `show`, `signal`, `resume`) on `db` fails with `code`
/// and an error that contains `message`, and that the file is as it was (or still absent).
fn every_command_fails(db: &Path, code: i32, message: &str) {
    commands_fail(db, code, message, true);
}

/// As [`every_command_fails`], for the commands that own the store (`signal` opens it as a
/// client when `with_signal` is false, and is left out).
fn commands_fail(db: &Path, code: i32, message: &str, with_signal: bool) {
    let before = std::fs::read(db).ok();
    let mut lock = db.as_os_str().to_owned();
    lock.push(".lock");
    let lock = PathBuf::from(lock);
    let locked_before = lock.exists();
    let path = db.to_str().expect("utf-8");
    let mut commands = vec![
        vec!["runs", path],
        vec!["show", path, "done"],
        vec!["resume", path, "done"],
    ];
    if with_signal {
        commands.push(vec!["signal", path, "done", "approve", "true"]);
    }
    for args in commands {
        let output = flow(&args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: {}",
            text(&output.stdout)
        );
    }
    assert_eq!(std::fs::read(db).ok(), before, "the file changed");
    assert_eq!(
        lock.exists(),
        locked_before,
        "a lock file was left beside it"
    );
}

#[test]
fn a_missing_file_is_refused_and_not_created() {
    let db = store("missing");
    let dir = db.parent().expect("a directory");
    let missing = dir.join("missing.db");
    every_command_fails(
        &missing,
        4,
        &format!(
            "no store at `{}`: the file does not exist",
            missing.display()
        ),
    );
    assert!(!missing.exists(), "the CLI created a store");
    let nowhere = dir.join("no-such-dir").join("runs.db");
    every_command_fails(&nowhere, 4, "no store at");
    assert!(
        !dir.join("no-such-dir").exists(),
        "the CLI made a directory"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_as_it_was() {
    let db = store("not-a-database");
    let notes = db.with_file_name("notes.txt");
    let words = "not a database, only some words that fill a page. ".repeat(100);
    std::fs::write(&notes, &words).expect("writes");
    every_command_fails(
        &notes,
        4,
        &format!(
            "the store `{}` is damaged: file is not a database",
            notes.display()
        ),
    );
}

#[test]
fn a_damaged_store_is_refused_and_left_as_it_was() {
    let db = store("damaged");
    // Every page after the first (the header and the schema) overwritten with garbage.
    let mut bytes = std::fs::read(&db).expect("reads");
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    assert!(bytes.len() > page, "the store has more than one page");
    for (i, byte) in bytes.iter_mut().enumerate().skip(page) {
        *byte = (i.wrapping_mul(131) % 251) as u8;
    }
    std::fs::write(&db, &bytes).expect("writes");
    every_command_fails(
        &db,
        4,
        &format!("the store `{}` is damaged: ", db.display()),
    );
}

#[test]
fn a_sqlite_database_of_another_application_is_refused_and_left_as_it_was() {
    let db = store("foreign");
    let photos = db.with_file_name("photos.db");
    {
        let conn = rusqlite::Connection::open(&photos).expect("sqlite");
        conn.execute_batch(
            "CREATE TABLE photos (id INTEGER PRIMARY KEY, file TEXT);
             INSERT INTO photos (file) VALUES ('cat.jpg');",
        )
        .expect("a foreign database");
    }
    every_command_fails(
        &photos,
        4,
        &format!(
            "`{}` is not a store of flow: a SQLite database of another application",
            photos.display()
        ),
    );
}

#[test]
fn a_store_held_by_another_process_is_read_and_resume_is_refused_naming_the_holder() {
    let db = store("locked");
    // Held open by this process: for the `flow` child, another process holds it.
    let held = SqliteStore::open(&db).expect("opens");
    let path = db.to_str().expect("utf-8");
    // `runs`, `show` and `signal` (tests/client.rs) read it as a client meanwhile.
    let listed = flow(&["runs", path]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(text(&listed.stdout).contains("done"));
    let shown = flow(&["show", path, "done"]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(text(&shown.stdout).contains("succeeded"));
    // `resume` owns the store: refused, naming the holder.
    let output = flow(&["resume", path, "done"]);
    fails(
        &output,
        4,
        &format!("the store `{}` is locked by `", db.display()),
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!(":{}:", std::process::id())),
        "the holder is this process: {stderr}"
    );
    {
        let _serial = serial();
        drop(held);
    }
    // Free again: `resume` opens it (and, this binary knowing no workflow, says so).
    let output = flow(&["resume", path, "done"]);
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("is locked"), "free again: {stderr}");
    assert!(
        stderr.contains("which this binary does not know"),
        "{stderr}"
    );
}

#[test]
fn an_empty_file_is_refused_left_empty_and_given_no_lock_file() {
    let db = store("empty");
    let empty = db.with_file_name("empty.db");
    std::fs::write(&empty, b"").expect("writes");
    every_command_fails(&empty, 4, "is not a store of flow");
    assert_eq!(std::fs::read(&empty).expect("reads").len(), 0);
    let mut lock = empty.as_os_str().to_owned();
    lock.push(".lock");
    assert!(
        !PathBuf::from(lock).exists(),
        "a lock file was left beside a refused file"
    );
}

#[test]
fn a_run_that_does_not_exist_is_exit_code_3() {
    let db = store("no-run");
    let db = db.to_str().expect("utf-8");
    let message = format!("no run `nope` in `{db}` (`flow runs` lists them)");
    fails(&flow(&["show", db, "nope"]), 3, &message);
    fails(&flow(&["show", db, "nope", "--json"]), 3, &message);
    fails(
        &flow(&["signal", db, "nope", "approve", "true"]),
        3,
        &message,
    );
    fails(&flow(&["resume", db, "nope"]), 3, &message);
}

#[test]
fn bad_arguments_are_usage_errors() {
    let output = flow(&[]);
    assert_eq!(output.status.code(), Some(2));
    let output = flow(&["runs"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("<DB>"),
        "{}",
        text(&output.stderr)
    );
    let output = flow(&["purge", "x.db"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("unrecognized subcommand 'purge'"),
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
    let cli = flowdag_cli::Cli::new().register::<Order>();
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

/// The ids of `flow runs <db> ARGS --json`.
fn listed(db: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec!["runs", db];
    all.extend_from_slice(args);
    all.push("--json");
    let output = flow(&all);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let runs: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    runs.as_array()
        .expect("an array")
        .iter()
        .map(|run| run["id"].as_str().expect("an id").to_owned())
        .collect()
}

#[test]
fn runs_filters_by_status_workflow_and_limit() {
    let db = saga_store("filters");
    let db = db.to_str().expect("utf-8");
    let all = ["done", "stopped", "refunded", "unrefunded"];
    assert_eq!(listed(db, &[]), all);
    assert_eq!(listed(db, &["--status", "succeeded"]), ["done"]);
    assert_eq!(
        listed(db, &["--status", "running,failed"]),
        ["stopped", "refunded", "unrefunded"]
    );
    assert_eq!(
        listed(db, &["--status", "running", "--status", "succeeded"]),
        ["done", "stopped"]
    );
    assert_eq!(
        listed(db, &["--workflow", "Saga"]),
        ["refunded", "unrefunded"]
    );
    assert_eq!(listed(db, &["--workflow", "Nope"]), Vec::<String>::new());
    assert_eq!(listed(db, &["--limit", "2"]), ["done", "stopped"]);
    assert_eq!(
        listed(
            db,
            &["--workflow", "Saga", "--status", "failed", "--limit", "1"]
        ),
        ["refunded"]
    );

    // The table too: a header and one line per run that passes.
    let output = flow(&["runs", db, "--status", "failed"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let ids: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ids, ["refunded", "unrefunded"], "{stdout}");

    let output = flow(&["runs", db, "--status", "done"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("invalid value 'done' for '--status <STATUS>'")
            && stderr
                .contains("running, waiting, compensating, succeeded, failed, cancelled, stuck"),
        "{stderr}"
    );
    let output = flow(&["runs", db, "--limit", "many"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("invalid value 'many' for '--limit <N>'"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn show_prints_the_compensations_in_their_order_and_the_run_error() {
    let db = saga_store("compensations");
    let db = db.to_str().expect("utf-8");
    let output = flow(&["show", db, "refunded"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("status    failed\n"), "{stdout}");
    assert!(
        stdout.contains("error     step `shipped` failed: no courier\n"),
        "{stdout}"
    );
    // The steps' attempts are their own, not their compensations'.
    let receipt = stdout
        .lines()
        .find(|l| l.starts_with("receipt "))
        .expect("the step `receipt`");
    assert_eq!(
        receipt.split_whitespace().collect::<Vec<_>>(),
        ["receipt", "completed", "1", "10"],
        "the step, its status, its attempts, its output"
    );
    // The compensations, in the order they ran: the refund (after a failed attempt), then the
    // release.
    let table: Vec<Vec<&str>> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("COMPENSATION"))
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        table,
        [
            vec!["COMPENSATION", "STATUS", "ATTEMPTS", "ERROR"],
            vec!["receipt", "compensated", "2", "the", "bank", "is", "down"],
            vec!["stock", "compensated", "1"],
        ],
        "{stdout}"
    );
    for kind in ["Compensating", "CompensationRetrying", "Compensated"] {
        assert!(stdout.contains(kind), "{kind} in {stdout}");
    }

    let output = flow(&["show", db, "unrefunded", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(shown["run"]["status"], "failed");
    assert_eq!(
        shown["error"],
        "step `shipped` failed: no courier; the compensation of `receipt` failed after 2 attempts: the bank is down"
    );
    // The phase stops at the compensation that failed: the stock is not released.
    let undone = shown["compensations"].as_array().expect("compensations");
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(undone[0]["step"], "receipt");
    assert_eq!(undone[0]["status"], "failed");
    assert_eq!(undone[0]["attempts"], 2);
    assert_eq!(undone[0]["error"], "the bank is down");
    let events = shown["events"].as_array().expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "CompensationFailed" && e["node"] == "receipt"),
        "{events:?}"
    );

    // A run that succeeded has no error and no compensation.
    let shown = flow(&["show", db, "done", "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    assert_eq!(shown["error"], Value::Null);
    assert_eq!(shown["compensations"], Value::Array(Vec::new()));
    let output = flow(&["show", db, "done"]);
    let stdout = text(&output.stdout);
    assert!(
        !stdout.contains("error ") && !stdout.contains("COMPENSATION"),
        "{stdout}"
    );
}

/// What a store holds may come from anyone: values wider than a format width, escapes that a
/// terminal would obey, a duration that overflows. The commands show them, never obey them,
/// never panic.
#[test]
fn hostile_stored_values_are_shown_not_obeyed_and_crash_nothing() {
    let db = store("hostile");
    let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[32mOK\u{9b}0m";
    {
        let _serial = serial();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let store = SqliteStore::open(&db).expect("opens");
            let outcome = Order::runner()
                .durable(&store, hostile)
                .execute(3)
                .await
                .expect("runs");
            assert!(outcome.result.is_ok());
        });
        // A duration no `Duration` holds, in a journaled event of run `stopped`.
        let conn = rusqlite::Connection::open(&db).expect("sqlite");
        let changed = conn
            .execute(
                "UPDATE events SET data = ?1 WHERE run = 'stopped' AND seq = 1",
                [br#"{"wait":{"secs":18446744073709551615,"nanos":4000000000}}"#.to_vec()],
            )
            .expect("updated");
        assert_eq!(changed, 1);
    }
    let db = db.to_str().expect("utf-8");
    // A signal payload wider than any format width.
    let wide = format!("\"{}\"", "w".repeat(70_000));
    let sent = flow(&["signal", db, "stopped", "approve", &wide]);
    assert!(sent.status.success(), "{}", text(&sent.stderr));

    let shown = flow(&["show", db, "stopped", "--full"]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    let out = text(&shown.stdout);
    assert!(
        out.contains(&"w".repeat(70_000)),
        "the payload is shown whole with --full"
    );
    let cut = flow(&["show", db, "stopped"]);
    assert!(cut.status.success(), "{}", text(&cut.stderr));
    let cut = text(&cut.stdout);
    assert!(
        cut.contains(&format!(
            "\"{}… (70,002 characters; --full to see all)",
            "w".repeat(199)
        )),
        "the payload is cut without --full: {}",
        &cut[..cut.len().min(2_000)]
    );
    assert!(
        out.contains(r#"wait={"nanos":4000000000,"secs":18446744073709551615}"#),
        "the impossible duration is shown as stored: {}",
        &out[..out.len().min(2_000)]
    );

    let listed = flow(&["runs", db]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let shown_hostile = flow(&["show", db, hostile]);
    assert!(
        shown_hostile.status.success(),
        "{}",
        text(&shown_hostile.stderr)
    );
    for output in [&listed, &shown_hostile] {
        assert!(
            !output.stdout.contains(&0x1b) && !output.stdout.contains(&0x07),
            "a control character reached the terminal"
        );
        assert!(
            text(&output.stdout).contains(r"\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[32mOK\u{9b}0m"),
            "{}",
            text(&output.stdout)
        );
    }
    // An error that names the run shows it escaped too.
    let refused = flow(&["signal", db, hostile, "approve", "{"]);
    assert!(!refused.stderr.contains(&0x1b), "{}", text(&refused.stderr));
}

/// `show` prints the run's input and each step's output, cut at 200 characters with a marker
/// unless `--full`, escaped either way; `--json` gives them whole, as JSON values, with the
/// ends of nest instances under `instances`.
#[test]
fn show_prints_the_input_and_the_outputs_cut_unless_full() {
    let path = fresh_store("show-data", |store| async move {
        let done = Labelling::runner()
            .durable(&store, "labelled")
            .execute(7)
            .await
            .expect("runs");
        assert_eq!(done.result.expect("succeeds"), 315, "bytes");
        let packed = Packing::runner()
            .durable(&store, "packing")
            .execute(2)
            .await
            .expect("runs");
        assert_eq!(packed.result.expect("succeeds"), 1);
    });
    let db = path.to_str().expect("utf-8");
    let wide = format!("\\u{{9b}}31m\\u{{202e}}{}", "x".repeat(307));
    let output = flow(&["show", db, "labelled"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("\ninput     7\n"), "{stdout}");
    let step = stdout
        .lines()
        .find(|l| l.starts_with("text "))
        .expect("the step `text`");
    // The JSON string is 314 characters (its quotes, the control, `31m`, the override and 307
    // `x`); the first 200 are shown, escaped.
    let cut = format!(
        "\"\\u{{9b}}31m\\u{{202e}}{}… (314 characters; --full to see all)",
        "x".repeat(194)
    );
    assert!(step.ends_with(&cut), "{step}");
    for output in [&output, &flow(&["show", db, "labelled", "--full"])] {
        assert!(
            !output.stdout.contains(&0x9b) && !text(&output.stdout).contains('\u{202e}'),
            "a control character reached the terminal"
        );
    }
    let full = text(&flow(&["show", db, "labelled", "--full"]).stdout);
    let step = full
        .lines()
        .find(|l| l.starts_with("text "))
        .expect("the step `text`");
    assert!(step.ends_with(&format!("\"{wide}\"")), "{step}");

    let output = flow(&["show", db, "labelled", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(shown["input"], 7);
    assert_eq!(
        shown["steps"][0]["output"],
        format!("\u{9b}31m\u{202e}{}", "x".repeat(307)),
        "whole, as the value it is"
    );
    // The runs of this release store no result: their result is their steps'.
    assert_eq!(shown["result"], Value::Null);
    assert_eq!(shown["instances"], Value::Array(Vec::new()));

    let output = flow(&["show", db, "packing"]);
    let stdout = text(&output.stdout);
    let packed = stdout
        .lines()
        .find(|l| l.starts_with("packed "))
        .expect("the step `packed`");
    assert!(packed.ends_with(r#"[{"Ok":0},{"Err":{"index":1,"failures":[{"node":"parcel","attempts":1,"error":"no box fits"}]}}]"#), "{packed}");
    let instances: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("OUTPUT OF"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(instances.len(), 3, "{stdout}");
    assert!(
        instances[1].starts_with("packed[0]  ") && instances[1].ends_with(r#""end":{"Ok":0}}"#),
        "{stdout}"
    );
    let output = flow(&["show", db, "packing", "--json"]);
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let instances = shown["instances"].as_array().expect("instances");
    assert_eq!(instances.len(), 2, "{instances:?}");
    assert_eq!(instances[1]["instance"], "packed[1]");
    assert_eq!(instances[1]["name"], "packed[1]");
    assert_eq!(
        instances[1]["output"]["end"]["Err"]["failures"][0]["error"],
        "no box fits"
    );
    assert_eq!(shown["steps"][0]["output"][0]["Ok"], 0);
    assert_eq!(
        shown["steps"][1]["output"],
        Value::Null,
        "an instance's step"
    );
}

/// A run whose end holds a result and an error (a store may keep them): `show` prints both.
#[test]
fn show_prints_the_stored_result_and_error() {
    use flowdag_runtime::store::{Batch, NewRun, Owner, RunEnd, RunStatus, Store, StoredEvent};
    let path = fresh_store("show-result", |store| async move {
        let lease = std::time::Duration::from_secs(60);
        for (id, status, end) in [
            (
                "shipped",
                RunStatus::Succeeded,
                RunEnd {
                    result: Some(br#"{"parcel":"P-1"}"#.to_vec()),
                    error: None,
                },
            ),
            (
                "declined",
                RunStatus::Failed,
                RunEnd {
                    result: None,
                    error: Some("the card was declined\u{1b}[2J".to_owned()),
                },
            ),
        ] {
            let mut run = NewRun::new(id, "Order", 1, Owner::process(), lease);
            run.input = b"42".to_vec();
            run.events = vec![StoredEvent::new(0, "RunStarted")];
            let created = store.create_run(run).await.expect("creates");
            let mut batch = Batch::new(created.lease().expect("a new run"), 1, lease);
            batch.events = vec![StoredEvent::new(1, "RunFinished")];
            batch.status = Some(status);
            batch.end = Some(end);
            store.commit(batch).await.expect("commits");
        }
    });
    let db = path.to_str().expect("utf-8");
    let stdout = text(&flow(&["show", db, "shipped"]).stdout);
    assert!(
        stdout.contains("input     42\nresult    {\"parcel\":\"P-1\"}\n"),
        "{stdout}"
    );
    let shown: Value =
        serde_json::from_slice(&flow(&["show", db, "shipped", "--json"]).stdout).expect("JSON");
    assert_eq!(shown["result"]["parcel"], "P-1");
    assert_eq!(shown["error"], Value::Null);

    let output = flow(&["show", db, "declined"]);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("error     the card was declined\\u{1b}[2J\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("result "), "{stdout}");
    let shown: Value =
        serde_json::from_slice(&flow(&["show", db, "declined", "--json"]).stdout).expect("JSON");
    assert_eq!(shown["error"], "the card was declined\u{1b}[2J");
    assert_eq!(shown["result"], Value::Null);
}
