//! Read-only opens: `SqliteStore::open_read_only` reads a store beside its owner, or after
//! its owner died with pages still in the WAL, refuses every write, and leaves the store's
//! file as it found it, even when it is the last connection to close.

mod common;

use std::time::Duration;

use flowdag_sqlite::SqliteStore;
use flowdag_store::{NewRun, NewSignal, Owner, RunFilter, SignalMode, Store};

const LEASE: Duration = Duration::from_secs(3600);

fn signal(run: &str) -> NewSignal {
    NewSignal {
        run: run.to_owned(),
        name: "approve".into(),
        payload: b"true".to_vec(),
        mode: SignalMode::Kept,
    }
}

async fn ids(store: &SqliteStore) -> Vec<String> {
    store
        .list_runs(&RunFilter::default())
        .await
        .expect("lists")
        .into_iter()
        .map(|r| r.id)
        .collect()
}

#[tokio::test]
async fn a_read_only_store_reads_and_writes_nothing() {
    let dir = common::dir("read-only");
    let path = dir.join("runs.db");
    let owner = SqliteStore::open(&path).expect("opens");
    for id in ["a", "b"] {
        owner
            .create_run(NewRun::new(id, "Order", 1, Owner::new("o"), LEASE))
            .await
            .expect("creates");
    }
    // Beside its owner: it sees what the owner committed.
    let reader = SqliteStore::open_read_only(&path).expect("opens read-only");
    assert!(reader.is_client());
    assert_eq!(ids(&reader).await, ["a", "b"]);
    let refused = reader.send_signal(signal("a")).await;
    assert!(refused.is_err(), "a signal is a write: {refused:?}");
    assert!(owner.signals("a", 0).await.expect("reads").is_empty());
    drop(reader);

    // After its owner died with committed pages still in the WAL: a copy of the three files
    // taken while the owner is open is the file of a process killed then.
    let dead = common::dir("read-only-dead");
    for suffix in ["", "-wal", "-shm"] {
        let from = dir.join(format!("runs.db{suffix}"));
        if from.exists() {
            std::fs::copy(&from, dead.join(format!("runs.db{suffix}"))).expect("copied");
        }
    }
    drop(owner);
    let copy = dead.join("runs.db");
    let before = std::fs::read(&copy).expect("the file");
    let wal = std::fs::read(dead.join("runs.db-wal")).unwrap_or_default();
    let reader = SqliteStore::open_read_only(&copy).expect("opens read-only");
    assert_eq!(ids(&reader).await, ["a", "b"], "it reads the WAL's pages");
    drop(reader);
    // The last connection closed without a checkpoint: the file and its WAL are as they were.
    assert!(
        std::fs::read(&copy).expect("the file") == before,
        "the file is unchanged"
    );
    assert!(
        std::fs::read(dead.join("runs.db-wal")).unwrap_or_default() == wal,
        "the WAL is unchanged"
    );
    assert!(!dead.join("runs.db.lock").exists(), "no lock file");
}
