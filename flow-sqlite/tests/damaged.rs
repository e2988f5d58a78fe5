//! A store whose rows were edited by hand or damaged: a value that does not fit its column's
//! type is `StoreError::Corrupt` naming the file and what was being read, never a panic or an
//! I/O error that a `Worker` would try again at every look.

mod common;

use std::time::Duration;

use flowdag_sqlite::SqliteStore;
use flowdag_store::{Batch, Created, NewRun, NodeRow, Owner, Store, StoreError, StoredEvent};
use rusqlite::Connection;

const LEASE: Duration = Duration::from_secs(60);

/// A store at `dir/runs.db` with run `order-1` (one node row, two events), closed.
async fn stored_run(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).expect("a store");
    let owner = Owner::new("me");
    let mut run = NewRun::new("order-1", "Checkout", 1, owner, LEASE);
    run.nodes = vec![NodeRow {
        node: 0,
        name: "charge".into(),
        label: "charge()".into(),
        fingerprint: 7,
        preds: Vec::new(),
        compensate: String::new(),
    }];
    run.events = vec![StoredEvent::new(0, "RunStarted")];
    let lease = match store.create_run(run).await {
        Ok(Created::New { lease, .. }) => lease,
        other => panic!("create_run: {other:?}"),
    };
    let mut batch = Batch::new(&lease, 1, LEASE);
    let mut requested = StoredEvent::new(1, "Requested");
    requested.node = Some(0);
    requested.node_name = Some("charge".into());
    requested.attempt = 1;
    batch.events.push(requested);
    store.commit(batch).await.expect("commits");
    drop(store);
    path
}

fn edit(path: &std::path::Path, sql: &str) {
    Connection::open(path)
        .expect("sqlite")
        .execute_batch(sql)
        .expect("the edit");
}

#[tokio::test]
async fn a_node_row_edited_out_of_range_is_corrupt() {
    let dir = common::dir("damaged-node");
    let path = stored_run(&dir).await;
    edit(&path, "UPDATE nodes SET node = -5");
    let store = SqliteStore::open(&path).expect("opens");
    let err = store
        .load_run("order-1", &Owner::new("me"), LEASE)
        .await
        .expect_err("a node index of -5");
    match &err {
        StoreError::Corrupt { path: p, why } => {
            assert_eq!(p, &path);
            assert!(why.contains("nodes"), "{why}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn an_event_edited_out_of_range_is_corrupt() {
    let dir = common::dir("damaged-event");
    let path = stored_run(&dir).await;
    edit(
        &path,
        "UPDATE events SET attempt = 5000000000 WHERE seq = 1",
    );
    let store = SqliteStore::open(&path).expect("opens");
    let err = store
        .events("order-1", 0)
        .await
        .expect_err("an attempt past u32");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("events"), "{err}");
}
