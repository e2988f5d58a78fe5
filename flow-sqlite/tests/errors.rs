//! Bad input gets a clear error and loses nothing: a corrupt file, a foreign database, a schema
//! from a newer flow, a run that does not exist, a store locked by another process, a full
//! disk. Also: what was committed survives closing the store, commits of many runs share
//! transactions, and a commit waiting for the disk does not block the caller's task.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use flowdag_sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
use flowdag_store::{
    Batch, Committed, Created, Lease, NewRun, NewSignal, Owner, SignalMode, Store, StoreError,
    StoredEvent, StoredOutput,
};
use rusqlite::Connection;

const LEASE: Duration = Duration::from_secs(60);

async fn new_run(store: &SqliteStore, id: &str) -> Lease {
    let mut run = NewRun::new(id, "Checkout", 1, Owner::new("me"), LEASE);
    run.events = vec![StoredEvent::new(0, "RunStarted")];
    match store.create_run(run).await {
        Ok(Created::New { lease, .. }) => lease,
        other => panic!("create_run: {other:?}"),
    }
}

fn big_output(lease: &Lease, seq: u64, bytes: usize) -> Batch {
    let mut batch = Batch::new(lease, seq, LEASE);
    let mut event = StoredEvent::new(seq, "Completed");
    event.node = Some(0);
    batch.events = vec![event];
    batch.outputs = vec![StoredOutput {
        node: 0,
        instance: String::new(),
        type_name: "Vec<u8>".into(),
        bytes: (0..bytes).map(|i| (i * 7 + i / 251) as u8).collect(),
    }];
    batch
}

#[test]
fn a_file_of_random_bytes_is_corrupt_and_left_as_it_was() {
    let dir = common::dir("corrupt");
    let path = dir.join("runs.db");
    let garbage: Vec<u8> = (0u32..16 * 1024)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &garbage).expect("write");
    match SqliteStore::open(&path) {
        Err(StoreError::Corrupt { path: p, why }) => {
            assert_eq!(p, path);
            assert!(why.contains("not a database"), "{why}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(&path).expect("read"),
        garbage,
        "file unchanged"
    );
}

#[test]
fn a_database_of_another_application_is_foreign_and_left_as_it_was() {
    let dir = common::dir("foreign");
    let path = dir.join("photos.db");
    {
        let conn = Connection::open(&path).expect("sqlite");
        conn.execute_batch(
            "CREATE TABLE photos (id INTEGER PRIMARY KEY, file TEXT);
             INSERT INTO photos (file) VALUES ('cat.jpg');",
        )
        .expect("a foreign database");
    }
    let before = std::fs::read(&path).expect("read");
    let err = SqliteStore::open(&path).expect_err("a foreign database");
    assert!(
        matches!(&err, StoreError::Foreign { why, .. } if why.contains("another application")),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "`{}` is not a store of flow: a SQLite database of another application (1 tables and indexes, no flow application id)",
            path.display()
        )
    );
    assert_eq!(
        std::fs::read(&path).expect("read"),
        before,
        "file unchanged"
    );

    let other = dir.join("other.db");
    {
        let conn = Connection::open(&other).expect("sqlite");
        conn.execute_batch("PRAGMA application_id = 305419896;")
            .expect("an application id");
    }
    let err = SqliteStore::open(&other).expect_err("another application id");
    assert!(
        err.to_string().contains("application id 0x12345678"),
        "{err}"
    );
}

#[test]
fn a_store_of_a_newer_schema_is_refused() {
    let dir = common::dir("schema");
    let path = dir.join("runs.db");
    drop(SqliteStore::open(&path).expect("a new store"));
    Connection::open(&path)
        .and_then(|conn| conn.execute_batch("PRAGMA user_version = 99;"))
        .expect("a newer schema");
    let err = SqliteStore::open(&path).expect_err("a newer schema");
    assert_eq!(
        err,
        StoreError::SchemaVersion {
            path: path.clone(),
            found: 99,
            known: SCHEMA_VERSION,
        }
    );
    assert!(err.to_string().ends_with("upgrade flow"), "{err}");
}

#[tokio::test]
async fn a_run_that_does_not_exist_is_not_found() {
    let dir = common::dir("missing");
    let store = SqliteStore::open(dir.join("runs.db")).expect("a store");
    new_run(&store, "order-1").await;
    let err = store
        .load_run("order-2", &Owner::new("me"), LEASE)
        .await
        .expect_err("no such run");
    assert_eq!(
        err,
        StoreError::NotFound {
            run: "order-2".into()
        }
    );
    assert_eq!(err.to_string(), "no run `order-2` in the store");
    let signal = NewSignal {
        run: "order-2".into(),
        name: "approve".into(),
        payload: b"true".to_vec(),
        mode: SignalMode::Kept,
    };
    assert!(matches!(
        store.send_signal(signal).await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(store.events("order-1", 0).await.map(|e| e.len()), Ok(1));
}

#[test]
fn a_second_store_on_the_same_file_in_this_process_is_locked() {
    let dir = common::dir("locked-here");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).expect("a store");
    match SqliteStore::open(&path) {
        Err(StoreError::Locked { path: p, holder }) => {
            assert_eq!(p, path);
            let holder = holder.expect("the holder wrote its name");
            assert!(
                holder.contains(&format!(":{}:", std::process::id())),
                "{holder}"
            );
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(store);
    SqliteStore::open(&path).expect("free once the first store is dropped");
}

/// Not a test of its own: the child process of `a_store_held_by_another_process_is_locked`,
/// which runs this test binary with `FLOW_SQLITE_LOCK_HOLDER` set. Without it, it returns.
#[test]
fn child_holding_a_store() {
    let Ok(path) = std::env::var("FLOW_SQLITE_LOCK_HOLDER") else {
        return;
    };
    let _store = SqliteStore::open(&path).expect("the child opens the store");
    println!("HOLDING {}", std::process::id());
    // Hold the store until the parent kills this process (or closes our stdin).
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn a_store_held_by_another_process_is_locked_until_that_process_dies() {
    let dir = common::dir("locked-child");
    let path = dir.join("runs.db");
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "child_holding_a_store", "--nocapture"])
        .env("FLOW_SQLITE_LOCK_HOLDER", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("piped");
    let holding = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.starts_with("HOLDING"));
    let pid = child.id();
    assert_eq!(
        holding,
        Some(format!("HOLDING {pid}")),
        "the child opened the store"
    );
    match SqliteStore::open(&path) {
        Err(StoreError::Locked { holder, .. }) => {
            let holder = holder.expect("the holder wrote its name");
            assert!(holder.contains(&format!(":{pid}:")), "{holder}");
        }
        other => panic!("expected Locked while the child holds the store, got {other:?}"),
    }
    // SIGKILL: the OS releases the lock of a process however it dies.
    child.kill().expect("kill the child");
    child.wait().expect("reap the child");
    SqliteStore::open(&path).expect("free once the holder is dead");
}

#[tokio::test]
async fn a_full_disk_refuses_the_commit_and_loses_nothing() {
    let dir = common::dir("full");
    let path = dir.join("runs.db");
    {
        let store = SqliteStore::open(&path).expect("a store");
        new_run(&store, "order-1").await;
    }
    {
        // `max_pages` below the file's size: SQLite keeps the size it has and grows no more.
        let options = SqliteOptions {
            max_pages: Some(1),
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&path, options).expect("a store with a size limit");
        let lease = store
            .load_run("order-1", &Owner::new("me"), LEASE)
            .await
            .expect("load")
            .lease;
        let err = store
            .commit(big_output(&lease, 1, 256 * 1024))
            .await
            .expect_err("the output does not fit");
        assert_eq!(err, StoreError::Full { path: path.clone() });
        assert!(err.is_retryable());
        assert_eq!(
            err.to_string(),
            format!(
                "the store `{}` is full (disk or size limit); nothing was written",
                path.display()
            )
        );
        // Nothing of the batch was written, and the store still answers.
        assert_eq!(store.events("order-1", 0).await.map(|e| e.len()), Ok(1));
    }
    // With room again, the same batch commits (under a new lease: opening the store freed the
    // old one, since the store that gave it is closed).
    let store = SqliteStore::open(&path).expect("the store without a limit");
    let lease = store
        .load_run("order-1", &Owner::new("me"), LEASE)
        .await
        .expect("load")
        .lease;
    assert_eq!(
        store.commit(big_output(&lease, 1, 256 * 1024)).await,
        Ok(Committed::Applied { next_seq: 2 })
    );
    let loaded = store
        .load_run("order-1", &Owner::new("me"), LEASE)
        .await
        .expect("load");
    assert_eq!(loaded.outputs[0].bytes.len(), 256 * 1024);
}

#[tokio::test]
async fn what_was_committed_survives_closing_the_store() {
    let dir = common::dir("reopen");
    let path = dir.join("runs.db");
    {
        let store = SqliteStore::open(&path).expect("a store");
        let lease = new_run(&store, "order-1").await;
        let mut batch = big_output(&lease, 1, 100);
        batch.events[0].path = Some("orders[3]/poll@2".parse().expect("a path"));
        batch.events[0].data = br#"{"branch":null}"#.to_vec();
        store.commit(batch).await.expect("commit");
    }
    let store = SqliteStore::open(&path).expect("the store again");
    let events = store.events("order-1", 0).await.expect("events");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].kind, "Completed");
    assert_eq!(
        events[1].path.as_ref().map(ToString::to_string).as_deref(),
        Some("orders[3]/poll@2")
    );
    assert_eq!(events[1].data, br#"{"branch":null}"#);
    assert_eq!(events[1].format, StoredEvent::FORMAT);
}

fn assert_in_fewer_transactions(path: &Path, stats: flowdag_sqlite::WriterStats, runs: u64) {
    assert!(
        stats.requests >= runs && stats.transactions < stats.requests,
        "{runs} commits sent together share transactions ({}): {stats:?}",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_of_many_runs_share_transactions() {
    let dir = common::dir("group");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).expect("a store");
    let mut leases = Vec::new();
    for n in 0..64 {
        leases.push(new_run(&store, &format!("order-{n}")).await);
    }
    let before = store.stats();
    // Every request is queued when its future is made: all 64 wait together.
    let commits: Vec<_> = leases
        .iter()
        .map(|lease| store.commit(big_output(lease, 1, 64)))
        .collect();
    for commit in commits {
        assert_eq!(commit.await, Ok(Committed::Applied { next_seq: 2 }));
    }
    let after = store.stats();
    let during = flowdag_sqlite::WriterStats {
        transactions: after.transactions - before.transactions,
        requests: after.requests - before.requests,
    };
    assert_in_fewer_transactions(&path, during, 64);
}

#[tokio::test(flavor = "current_thread")]
async fn a_commit_waiting_for_the_disk_does_not_block_the_callers_task() {
    let dir = common::dir("not-blocking");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).expect("a store");
    let lease = new_run(&store, "order-1").await;
    // Another connection (a reader of another tool, say) holds SQLite's write lock: the writer
    // thread waits for it (busy timeout), the caller's task does not.
    let other = Connection::open(&path).expect("another connection");
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("the write lock");
    let started = std::time::Instant::now();
    let mut commit = store.commit(big_output(&lease, 1, 10));
    let waited = tokio::time::timeout(Duration::from_millis(100), &mut commit).await;
    assert!(waited.is_err(), "the commit waits for the lock: {waited:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the task went on while the writer waited: {:?}",
        started.elapsed()
    );
    other.execute_batch("COMMIT").expect("release the lock");
    assert_eq!(commit.await, Ok(Committed::Applied { next_seq: 2 }));
}
