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
        kind: "operation".into(),
        policy: String::new(),
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

/// A store that lost a table, or whose schema was edited (found by the command line's fuzz
/// test), is `Corrupt` when it is opened, naming the table, rather than an I/O error at each
/// query that reads it.
#[tokio::test]
async fn a_store_without_its_tables_or_columns_is_corrupt() {
    let dir = common::dir("damaged-table");
    let path = stored_run(&dir).await;
    let pristine = std::fs::read(&path).expect("reads");
    for (edit_sql, why) in [
        ("DROP TABLE outputs", "its table `outputs` is missing"),
        (
            "ALTER TABLE runs RENAME COLUMN workflow TO flow",
            "its table `runs` does not have the columns flow made",
        ),
    ] {
        std::fs::write(&path, &pristine).expect("writes");
        edit(&path, edit_sql);
        for err in [
            SqliteStore::open(&path).expect_err("refused"),
            SqliteStore::open_client(&path).expect_err("refused"),
        ] {
            match &err {
                StoreError::Corrupt { path: p, why: w } => {
                    assert_eq!(p, &path);
                    assert_eq!(w, why, "{edit_sql}");
                }
                other => panic!("{edit_sql}: expected Corrupt, got {other:?}"),
            }
        }
    }
}

/// A table of the user's beside flow's is left alone.
#[tokio::test]
async fn a_table_beside_flows_is_left_alone() {
    let dir = common::dir("extra-table");
    let path = stored_run(&dir).await;
    edit(&path, "CREATE TABLE notes (run TEXT, note TEXT)");
    let store = SqliteStore::open_client(&path).expect("opens");
    assert_eq!(store.events("order-1", 0).await.expect("reads").len(), 2);
}

/// A schema whose constraint text was damaged (a CHECK that refuses a value flow writes) is
/// `Corrupt` when a write meets it, not an I/O error to try again.
#[tokio::test]
async fn a_damaged_constraint_is_corrupt() {
    let dir = common::dir("damaged-check");
    let path = stored_run(&dir).await;
    edit(
        &path,
        "PRAGMA writable_schema = ON;
         UPDATE sqlite_schema SET sql = replace(sql, '''kept''', '''kep4''') WHERE name = 'signals';
         PRAGMA writable_schema = OFF;",
    );
    let store = SqliteStore::open_client(&path).expect("opens");
    let err = store
        .send_signal(approve())
        .await
        .expect_err("the damaged CHECK");
    assert!(
        matches!(&err, StoreError::Corrupt { why, .. } if why.contains("schema")),
        "{err:?}"
    );
}

/// A header that asks for a newer file format (its write version byte damaged) makes SQLite
/// open the file read only: a write is `Corrupt`, not an I/O error to try again.
#[tokio::test]
async fn a_header_asking_for_a_newer_format_is_corrupt() {
    let dir = common::dir("damaged-header");
    let path = stored_run(&dir).await;
    let mut bytes = std::fs::read(&path).expect("reads the file");
    bytes[18] = 3;
    std::fs::write(&path, &bytes).expect("writes the file");
    let store = SqliteStore::open_client(&path).expect("opens");
    let err = store
        .send_signal(approve())
        .await
        .expect_err("the file is read only");
    assert!(
        matches!(&err, StoreError::Corrupt { why, .. } if why.contains("newer file format")),
        "{err:?}"
    );
}

/// The signal the tests send to `order-1`.
fn approve() -> flowdag_store::NewSignal {
    flowdag_store::NewSignal {
        run: "order-1".into(),
        name: "approve".into(),
        payload: b"true".to_vec(),
        mode: flowdag_store::SignalMode::Kept,
    }
}
