//! A durable `ForEach`: an order is charged, then each of its lines is shipped, at most two at a
//! time, on a SQLite file. The program kills itself midway and resumes the run: the lines that
//! were shipped before the kill are not shipped again (their ends come from the store), the
//! line that was in flight is shipped again with the same idempotency key, and the others for
//! the first time.
//!
//! ```text
//! cargo run -p flow-durable --example durable_batch
//! cargo run -p flowdag-cli -- show target/durable_batch/batch.db order-1   # each line's steps
//! ```
//!
//! It runs itself twice: a child process starts the run and is killed with SIGKILL (`kill -9`)
//! once three lines were shipped; then this process opens the same file and resumes the run.
//! Each step prints its key: a shipping API that applies one request per key ships each line
//! once. In your own crate these items are `flowdag::attempt`, `flowdag::store` (feature
//! `durable` of `flowdag`) and `flowdag_sqlite::SqliteStore`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use flowdag::durable::attempt;
use flowdag::prelude::*;
use flowdag_sqlite::SqliteStore;

#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

/// The run's id.
const RUN: &str = "order-1";

/// Set in the child process, which starts the run and is killed.
const CHILD: &str = "FLOW_BATCH_CHILD";

/// The keys of the steps this process ran.
static RAN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// What every step prints when it runs: who (the process), what, and the attempt's key.
fn effect(what: &str) {
    if let Some(attempt) = attempt() {
        let who = match std::env::var_os(CHILD) {
            Some(_) => "first process ",
            None => "second process",
        };
        println!("  {who}  {what:<8} key {}", attempt.key());
        RAN.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(attempt.key());
    }
}

async fn charge(lines: u32) -> Result<u32, Refused> {
    effect("charge");
    Ok(lines * 100)
}

/// Ships one line; line 4 takes long (the first process is killed while it runs).
async fn ship(line: u32) -> Result<String, Refused> {
    effect("ship");
    let took = if line == 4 { 2_000 } else { 150 };
    tokio::time::sleep(Duration::from_millis(took)).await;
    Ok(format!("parcel {line}"))
}

workflow! {
    /// Charges the order, then ships each line, at most two at a time.
    #[flow(durable)]
    Batch(lines: u32) -> Vec<String> {
        Sequential {
            charged = Operation(charge(lines)),
            shipped = ForEach(line in 0..lines, max_concurrency = 2) {
                parcel = Operation(ship(line))
                => parcel.clone()
            },
        }
        => shipped.clone()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // The workspace's `target/` (this example's package is `durable/` inside it).
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/durable_batch");
    let file = dir.join("batch.db");
    if std::env::var_os(CHILD).is_some() {
        return child(&file).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(error) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot make `{}`: {error}", dir.display());
        return ExitCode::FAILURE;
    }
    match parent(&file).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The first process: starts the run of 8 lines and runs until it is killed.
async fn child(file: &Path) -> ExitCode {
    let store = match SqliteStore::open(file) {
        Ok(store) => store,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match Batch::runner().durable(&store, RUN).execute(8).await {
        Ok(_) => println!("the first process finished: it was not killed"),
        Err(error) => eprintln!("error: {error}"),
    }
    ExitCode::FAILURE
}

/// Runs the child until three lines were shipped, kills it, then resumes the run here.
async fn parent(file: &Path) -> Result<(), Box<dyn std::error::Error>> {
    println!("a first process starts run `{RUN}` (8 lines) and is killed while line 4 ships:");
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("the child has no stdout")?;
    // The child's lines are read by a thread of their own until the child dies, so that the
    // child never writes into a closed pipe.
    let (lines, seen) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut shipped = 0;
    let mut first = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Lines 0 to 3 are shipped (two at a time) and line 4 starts: it is in flight.
    while shipped < 5 {
        let left = deadline.saturating_duration_since(Instant::now());
        match seen.recv_timeout(left) {
            Ok(line) if line.contains(" ship ") => {
                shipped += 1;
                first.extend(line.split_whitespace().last().map(str::to_owned));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    // Give line 3 time to end and be committed while line 4 runs.
    std::thread::sleep(Duration::from_millis(400));
    child.kill()?; // SIGKILL
    child.wait()?;
    let _ = reader.join();
    first.extend(
        seen.try_iter()
            .filter(|line| line.contains(" ship "))
            .filter_map(|line| line.split_whitespace().last().map(str::to_owned)),
    );
    println!("killed (SIGKILL); a second process resumes the run from the file:");
    let store = SqliteStore::open(file)?;
    let outcome = Batch::resume(&store, RUN).await?;
    let parcels = outcome.result?;
    println!("shipped: {}", parcels.join(", "));
    let again: Vec<String> = RAN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|key| key.contains("shipped["))
        .cloned()
        .collect();
    let repeated = again.iter().filter(|key| first.contains(key)).count();
    println!(
        "the second process shipped {} line(s): {repeated} in flight at the kill, again with the same key, and {} never started; the {} that ended before the kill were not shipped again",
        again.len(),
        again.len() - repeated,
        first.len() - repeated,
    );
    if parcels.len() != 8 || again.iter().any(|key| key.contains("shipped[0]")) {
        return Err("a line that had ended was shipped again".into());
    }
    Ok(())
}
