//! The schema: created on first use, migrated from older versions (1 to 2, 2 to 3, 3 to 4, 6 to 7),
//! migrated once by many stores starting together; a newer schema and a foreign one are refused
//! and left as they were.

use std::time::Duration;

use flowdag_postgres::{MIGRATIONS, PostgresOptions, PostgresStore, SCHEMA_VERSION, testing};
use flowdag_store::{
    Batch, Committed, Created, NewRun, NodeRow, Owner, RunFilter, Store, StoreError, StoredEvent,
    TaskChange, WorkflowVersion,
};

const LEASE: Duration = Duration::from_secs(60);

fn store_in(schema: &str) -> PostgresStore {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    };
    PostgresStore::connect_with(&testing::server(), options).expect("a store")
}

async fn version(client: &tokio_postgres::Client, schema: &str) -> Vec<i32> {
    client
        .query(
            &format!("SELECT version FROM \"{schema}\".schema_version"),
            &[],
        )
        .await
        .expect("reading schema_version")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_is_migrated_to_2_keeping_its_runs() {
    let schema = testing::fresh_schema("migrate");
    let client = testing::client().await;
    // A database of a flow that knew version 1 only, with a run in it.
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"; {}
             INSERT INTO schema_version (version) VALUES (1);
             INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status,
                next_seq, version, created_ms, updated_ms)
             VALUES ('old', 'W', 1, '', 0, '', 'waiting', 0, 1, 1, 1);",
            MIGRATIONS[0]
        ))
        .await
        .expect("a version 1 schema");
    assert_eq!(version(&client, &schema).await, vec![1]);

    let store = store_in(&schema);
    let runs = store
        .list_runs(&RunFilter::default())
        .await
        .expect("the migrated store lists runs");
    assert_eq!(
        runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["old"]
    );
    assert_eq!(version(&client, &schema).await, vec![SCHEMA_VERSION as i32]);
    // Version 2's table works: a task is opened and claimed.
    let owner = Owner::new("a");
    let Created::New { lease, .. } = store
        .create_run(NewRun::new("new", "W", 1, owner.clone(), LEASE))
        .await
        .expect("creates")
    else {
        panic!("a new run")
    };
    let mut batch = Batch::new(&lease, 0, LEASE);
    let mut requested = StoredEvent::new(0, "Requested");
    requested.node = Some(0);
    batch.events = vec![requested];
    batch.tasks = vec![TaskChange::Open {
        node: 0,
        instance: String::new(),
        attempt: 1,
    }];
    assert_eq!(
        store.commit(batch).await,
        Ok(Committed::Applied { next_seq: 1 })
    );
    let claims = store
        .claim_tasks(&owner, &[WorkflowVersion::new("W", 1)], 10, LEASE)
        .await
        .expect("claims");
    assert_eq!(claims.len(), 1, "{claims:?}");
    testing::drop_schemas("migrate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_stores_starting_together_migrate_once() {
    let schema = testing::fresh_schema("together");
    let mut starting = Vec::new();
    for _ in 0..8 {
        let store = store_in(&schema);
        starting.push(tokio::spawn(async move { store.migrate().await }));
    }
    for store in starting {
        assert_eq!(store.await.expect("a task"), Ok(()));
    }
    let client = testing::client().await;
    assert_eq!(
        version(&client, &schema).await,
        vec![SCHEMA_VERSION as i32],
        "one version row"
    );
    testing::drop_schemas("together").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_and_left_alone() {
    let schema = testing::fresh_schema("newer");
    store_in(&schema).migrate().await.expect("migrates");
    let client = testing::client().await;
    let newer = SCHEMA_VERSION as i32 + 1;
    client
        .batch_execute(&format!(
            "UPDATE \"{schema}\".schema_version SET version = {newer}"
        ))
        .await
        .expect("a newer version");
    let store = store_in(&schema);
    let err = store
        .list_runs(&RunFilter::default())
        .await
        .expect_err("a newer schema");
    match &err {
        StoreError::SchemaVersion { found, known, .. } => {
            assert_eq!((*found, *known), (newer as u32, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaVersion, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("upgrade flow"), "{message}");
    assert!(message.contains(&schema), "names the schema: {message}");
    assert_eq!(version(&client, &schema).await, vec![newer], "left alone");
    testing::drop_schemas("newer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_schema_is_refused_and_left_alone() {
    let schema = testing::fresh_schema("foreign");
    let client = testing::client().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; CREATE TABLE \"{schema}\".customers (id int);"
        ))
        .await
        .expect("another application's schema");
    let store = store_in(&schema);
    match store.list_runs(&RunFilter::default()).await {
        Err(StoreError::Foreign { why, .. }) => {
            assert!(why.contains("customers"), "{why}");
        }
        other => panic!("expected Foreign, got {other:?}"),
    }
    let tables = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .await
        .expect("tables");
    assert_eq!(tables.len(), 1, "nothing was created in it");
    testing::drop_schemas("foreign").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_schema_is_migrated_to_3_keeping_its_open_tasks_claimable() {
    let schema = testing::fresh_schema("migrate_tasks");
    let client = testing::client().await;
    // A database of a flow that knew version 2, with a run whose task is open.
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"; {} {}
             INSERT INTO schema_version (version) VALUES (2);
             INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status,
                next_seq, version, created_ms, updated_ms)
             VALUES ('old', 'W', 5, '', 0, '', 'waiting', 1, 1, 1, 1);
             INSERT INTO tasks (run, node, attempt, version, opened, status)
             VALUES ('old', 0, 1, nextval('task_versions'), nextval('task_order'), 'ready');",
            MIGRATIONS[0], MIGRATIONS[1]
        ))
        .await
        .expect("a version 2 schema");
    let store = store_in(&schema);
    let claims = store
        .claim_tasks(&Owner::new("a"), &[WorkflowVersion::new("W", 5)], 10, LEASE)
        .await
        .expect("claims");
    assert_eq!(version(&client, &schema).await, vec![SCHEMA_VERSION as i32]);
    assert_eq!(
        claims
            .iter()
            .map(|c| (c.run.as_str(), c.workflow.as_str(), c.node))
            .collect::<Vec<_>>(),
        vec![("old", "W", 0)],
        "the open task took its run's workflow and graph"
    );
    testing::drop_schemas("migrate_tasks").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_schema_is_migrated_to_4_its_node_rows_without_kind_and_policy() {
    let schema = testing::fresh_schema("migrate_nodes");
    let client = testing::client().await;
    // A database of a flow that knew version 3, with a run and its node rows.
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"; {} {} {}
             INSERT INTO schema_version (version) VALUES (3);
             INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status,
                next_seq, version, created_ms, updated_ms)
             VALUES ('old', 'W', 5, '', 0, '', 'waiting', 0, 1, 1, 1);
             INSERT INTO nodes (run, node, name, label, fingerprint, preds, compensate)
             VALUES ('old', 0, 'fetch', 'fetch(id)', 11, '{{}}', ''),
                    ('old', 1, 'charge', 'charge(&fetch)', 22, '{{0}}', 'refund(&charge)');",
            MIGRATIONS[0], MIGRATIONS[1], MIGRATIONS[2]
        ))
        .await
        .expect("a version 3 schema");
    let store = store_in(&schema);
    let owner = Owner::new("a");
    let data = store
        .load_run("old", &owner, LEASE)
        .await
        .expect("loads the old run");
    assert_eq!(version(&client, &schema).await, vec![SCHEMA_VERSION as i32]);
    assert_eq!(
        data.nodes
            .iter()
            .map(|n| (
                n.name.as_str(),
                n.preds.clone(),
                n.kind.as_str(),
                n.policy.as_str()
            ))
            .collect::<Vec<_>>(),
        vec![("fetch", vec![], "", ""), ("charge", vec![0], "", "")],
        "the old rows, their kind and policy not stored"
    );
    // A run created now keeps both.
    let mut run = NewRun::new("new", "W", 5, owner.clone(), LEASE);
    run.nodes = vec![NodeRow {
        node: 0,
        name: "fetch".into(),
        label: "fetch(id)".into(),
        fingerprint: 11,
        preds: vec![],
        compensate: String::new(),
        kind: "operation".into(),
        policy: "retries = 3".into(),
    }];
    store.create_run(run.clone()).await.expect("creates");
    let data = store
        .load_run("new", &owner, LEASE)
        .await
        .expect("loads the new run");
    assert_eq!(data.nodes, run.nodes);
    testing::drop_schemas("migrate_nodes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_schema_is_migrated_to_7_every_stored_end_still_loaded() {
    let schema = testing::fresh_schema("migrate_superseded");
    let client = testing::client().await;
    // A database of a flow that knew version 6: a run stopped in a loop's third iteration,
    // the two before it ended, each with an event of its own.
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"; {}
             INSERT INTO schema_version (version) VALUES (6);
             INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status,
                next_seq, version, created_ms, updated_ms)
             VALUES ('old', 'W', 5, '', 0, '', 'running', 3, 1, 1, 1);
             INSERT INTO events (run, seq, format, node, node_name, path, attempt, kind, data,
                at_us, wall_ms)
             VALUES ('old', 0, 1, NULL, NULL, NULL, 0, 'RunStarted', '', 0, 1),
                    ('old', 1, 1, 0, 'round', 'polled@0', 1, 'Completed', '', 1, 1),
                    ('old', 2, 1, 0, 'round', 'polled@1', 1, 'Completed', '', 2, 1);
             INSERT INTO outputs (run, node, instance, type_name, bytes)
             VALUES ('old', 0, 'polled@0', 'u32', '1'), ('old', 0, 'polled@1', 'u32', '2');",
            MIGRATIONS[..6].join("\n")
        ))
        .await
        .expect("a version 6 schema");
    let store = store_in(&schema);
    let loaded = store
        .load_run("old", &Owner::new("a"), LEASE)
        .await
        .expect("loads the old run");
    assert_eq!(version(&client, &schema).await, vec![SCHEMA_VERSION as i32]);
    // Nothing was superseded before version 7: every end loads (the loop walks them all).
    let ends: Vec<&str> = loaded.outputs.iter().map(|o| o.instance.as_str()).collect();
    assert_eq!(ends, ["polled@0", "polled@1"]);
    assert_eq!(loaded.events.len(), 1, "the run's own events");
    assert_eq!(loaded.next_seq, 3);
    testing::drop_schemas("migrate_superseded").await;
}
