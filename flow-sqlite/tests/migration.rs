//! Schema versions: a store of version 1 (nodes without kind and policy) is migrated when a
//! store opens it, and read as it is, unchanged, by a client; a file is checked against exactly
//! the columns of its version.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use flowdag_sqlite::{APPLICATION_ID, SCHEMA_VERSION, SqliteStore};
use flowdag_store::{
    ContinueRun, Created, NewRun, NodeRow, Owner, RunEnd, RunFilter, RunStatus, Store, StoreError,
};
use rusqlite::Connection;

const LEASE: Duration = Duration::from_secs(3600);

/// The schema of version 1, as flow wrote it.
const SCHEMA_1: &str = "
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  graph_hash INTEGER NOT NULL,
  input BLOB NOT NULL,
  input_hash INTEGER NOT NULL,
  options BLOB NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running','waiting','compensating','succeeded','failed','cancelled','stuck')),
  next_seq INTEGER NOT NULL,
  version INTEGER NOT NULL,   -- bumped each time the run is loaded: the lease's fencing token
  owner TEXT,
  lease_until INTEGER,        -- ms since the epoch, the store's clock
  wake_at INTEGER,            -- earliest timer, or when an unconsumed signal a step waits for arrived
  ended INTEGER NOT NULL DEFAULT 0,
  result BLOB,
  error TEXT,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX runs_created ON runs(created_ms, id);
CREATE INDEX runs_wake ON runs(wake_at) WHERE wake_at IS NOT NULL;

CREATE TABLE nodes (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  name TEXT NOT NULL,
  label TEXT NOT NULL,
  fingerprint INTEGER NOT NULL,
  preds TEXT NOT NULL,        -- predecessors' indices, comma-separated
  compensate TEXT NOT NULL,   -- the call that undoes the step, as written; empty for none
  PRIMARY KEY (run, node)
) STRICT, WITHOUT ROWID;

CREATE TABLE events (
  run TEXT NOT NULL,
  seq INTEGER NOT NULL,
  format INTEGER NOT NULL,
  node INTEGER,
  node_name TEXT,
  path TEXT,                  -- the instance path as shown (`charge[3]/poll@2`)
  attempt INTEGER NOT NULL,
  kind TEXT NOT NULL,
  data BLOB NOT NULL,
  at_us INTEGER NOT NULL,
  wall_ms INTEGER NOT NULL,
  PRIMARY KEY (run, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE outputs (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  instance TEXT NOT NULL,
  type_name TEXT NOT NULL,
  codec TEXT NOT NULL DEFAULT 'json',
  bytes BLOB NOT NULL,
  PRIMARY KEY (run, node, instance)
) STRICT, WITHOUT ROWID;

CREATE TABLE timers (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  instance TEXT NOT NULL,
  kind TEXT NOT NULL,
  due_ms INTEGER NOT NULL,
  PRIMARY KEY (run, node, instance, kind)
) STRICT, WITHOUT ROWID;
CREATE INDEX timers_due ON timers(due_ms);

CREATE TABLE signals (
  id INTEGER PRIMARY KEY,
  run TEXT NOT NULL,
  name TEXT NOT NULL,
  payload BLOB NOT NULL,
  mode TEXT NOT NULL CHECK (mode IN ('kept','transient')),
  sent_ms INTEGER NOT NULL,
  consumed_seq INTEGER
) STRICT;
CREATE INDEX signals_open ON signals(run, id) WHERE consumed_seq IS NULL;

CREATE TABLE waits (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  instance TEXT NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (run, node, instance)
) STRICT, WITHOUT ROWID;
";

/// A store of version 1 at `dir/runs.db`, as a flow of that version left it (WAL mode), with
/// run `old` (two node rows, one event), no process holding it.
fn store_of_version_1(dir: &Path) -> PathBuf {
    let path = dir.join("runs.db");
    let conn = Connection::open(&path).expect("a file");
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .expect("WAL");
    conn.execute_batch(&format!(
        "BEGIN;
         {SCHEMA_1}
         PRAGMA application_id = {APPLICATION_ID};
         PRAGMA user_version = 1;
         INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status,
            next_seq, version, created_ms, updated_ms)
         VALUES ('old', 'Checkout', 5, X'', 0, X'7B7D', 'waiting', 1, 1, 1, 1);
         INSERT INTO nodes (run, node, name, label, fingerprint, preds, compensate)
         VALUES ('old', 0, 'fetch', 'fetch(id)', 11, '', ''),
                ('old', 1, 'charge', 'charge(&fetch)', 22, '0', 'refund(&charge)');
         INSERT INTO events (run, seq, format, node, node_name, path, attempt, kind, data,
            at_us, wall_ms)
         VALUES ('old', 0, 1, NULL, NULL, NULL, 0, 'RunStarted', X'', 0, 1);
         COMMIT;"
    ))
    .expect("a version 1 store");
    path
}

fn user_version(path: &Path) -> i64 {
    Connection::open(path)
        .and_then(|conn| conn.query_row("PRAGMA user_version", [], |row| row.get(0)))
        .expect("reads the version")
}

/// The columns of the table `nodes`.
fn node_columns(path: &Path) -> Vec<String> {
    columns(path, "nodes")
}

/// The columns of `table`.
fn columns(path: &Path, table: &str) -> Vec<String> {
    let conn = Connection::open(path).expect("opens");
    let mut stmt = conn
        .prepare(&format!(
            "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
        ))
        .expect("prepares");
    stmt.query_map([], |row| row.get(0))
        .expect("queries")
        .collect::<rusqlite::Result<_>>()
        .expect("reads")
}

#[tokio::test]
async fn a_store_of_version_1_is_migrated_its_old_rows_without_kind_and_policy() {
    assert_eq!(SCHEMA_VERSION, 4);
    let dir = common::dir("migrate-1");
    let path = store_of_version_1(&dir);

    let store = SqliteStore::open(&path).expect("opens and migrates");
    assert_eq!(user_version(&path), 4);
    assert_eq!(
        node_columns(&path),
        [
            "run",
            "node",
            "name",
            "label",
            "fingerprint",
            "preds",
            "compensate",
            "kind",
            "policy"
        ]
    );
    // Version 4: an output can be superseded (left out of a load).
    assert_eq!(
        columns(&path, "outputs").last().map(String::as_str),
        Some("superseded")
    );
    let me = Owner::new("me");
    let loaded = store
        .load_run("old", &me, LEASE)
        .await
        .expect("loads the old run");
    assert_eq!(loaded.events.len(), 1);
    assert_eq!(
        loaded
            .nodes
            .iter()
            .map(|n| (
                n.name.as_str(),
                n.preds.clone(),
                n.compensate.as_str(),
                n.kind.as_str(),
                n.policy.as_str()
            ))
            .collect::<Vec<_>>(),
        vec![
            ("fetch", vec![], "", "", ""),
            ("charge", vec![0], "refund(&charge)", "", "")
        ],
        "the old rows, their kind and policy not stored"
    );
    // The migrated runs table takes the status `continued` (version 3), its rows kept.
    let next = store
        .continue_run(
            &loaded.lease,
            ContinueRun {
                next_seq: 1,
                input: b"2".to_vec(),
                options: Vec::new(),
                archive: Some("old~1".into()),
                end: RunEnd {
                    result: None,
                    error: None,
                },
                timers: Vec::new(),
                lease: LEASE,
            },
        )
        .await
        .expect("the old run continues as new");
    store.release(&me, &[next]).await.expect("releases");
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    assert_eq!(
        runs.iter()
            .map(|r| (r.id.as_str(), r.status))
            .collect::<Vec<_>>(),
        vec![("old", RunStatus::Running), ("old~1", RunStatus::Continued)],
        "the migrated table's rows and a continued generation"
    );

    // A run created now keeps both, also after the store is opened again.
    let mut run = NewRun::new("new", "Checkout", 6, me.clone(), LEASE);
    run.nodes = vec![NodeRow {
        node: 0,
        name: "fetch".into(),
        label: "fetch(id)".into(),
        fingerprint: 12,
        preds: Vec::new(),
        compensate: String::new(),
        kind: "operation".into(),
        policy: "timeout = 5s, retries = 3".into(),
    }];
    let Ok(Created::New { lease, .. }) = store.create_run(run.clone()).await else {
        panic!("a new run")
    };
    store.release(&me, &[lease]).await.expect("releases");
    drop(store);
    let store = SqliteStore::open(&path).expect("opens the migrated store");
    let loaded = store.load_run("new", &me, LEASE).await.expect("loads");
    assert_eq!(loaded.nodes, run.nodes);
    assert_eq!(user_version(&path), 4);
}

#[tokio::test]
async fn a_client_reads_a_store_of_version_1_and_leaves_it_as_it_was() {
    let dir = common::dir("client-1");
    let path = store_of_version_1(&dir);
    let before = std::fs::read(&path).expect("reads the file");

    let client = SqliteStore::open_client(&path).expect("a client opens a version 1 store");
    let runs = client
        .list_runs(&RunFilter::default())
        .await
        .expect("lists");
    assert_eq!(
        runs.iter()
            .map(|r| (r.id.as_str(), r.workflow.as_str()))
            .collect::<Vec<_>>(),
        vec![("old", "Checkout")]
    );
    assert_eq!(client.events("old", 0).await.expect("reads").len(), 1);
    assert_eq!(client.run_data("old").await.expect("reads").input, b"");
    // Its node rows, without the kind and policy version 1 did not store.
    let nodes = client.nodes("old").await.expect("reads the nodes");
    assert_eq!(
        nodes
            .iter()
            .map(|n| (n.name.as_str(), n.preds.clone(), n.kind.as_str()))
            .collect::<Vec<_>>(),
        vec![("fetch", vec![], ""), ("charge", vec![0], "")]
    );
    drop(client);

    assert_eq!(user_version(&path), 1, "not migrated");
    assert_eq!(
        node_columns(&path),
        [
            "run",
            "node",
            "name",
            "label",
            "fingerprint",
            "preds",
            "compensate"
        ]
    );
    assert_eq!(
        std::fs::read(&path).expect("reads the file"),
        before,
        "not written"
    );
}

/// Each version is checked exactly: a file that says it is of the current version without the
/// columns of its migration is damaged, for a store and for a client; so is a file of version
/// 1 that lost a column. Neither is changed.
#[tokio::test]
async fn a_store_without_the_columns_of_its_version_is_corrupt() {
    for (name, edit, columns) in [
        (
            "version-2-without-columns",
            format!("PRAGMA user_version = {SCHEMA_VERSION}"),
            7,
        ),
        (
            "version-1-without-a-column",
            "ALTER TABLE nodes DROP COLUMN compensate".to_owned(),
            6,
        ),
    ] {
        let dir = common::dir(name);
        let path = store_of_version_1(&dir);
        Connection::open(&path)
            .and_then(|conn| conn.execute_batch(&edit))
            .expect("edits");
        for err in [
            SqliteStore::open(&path).expect_err("refused"),
            SqliteStore::open_client(&path).expect_err("refused"),
        ] {
            match &err {
                StoreError::Corrupt { why, .. } => assert_eq!(
                    why, "its table `nodes` does not have the columns flow made",
                    "{edit}"
                ),
                other => panic!("{edit}: expected Corrupt, got {other:?}"),
            }
        }
        assert_eq!(node_columns(&path).len(), columns, "{edit}: left as it was");
    }
}
