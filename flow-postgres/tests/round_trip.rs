//! Values come back from PostgreSQL as they went in: `u64`s that use all 64 bits (hashes,
//! times), instance paths, payload bytes, node rows with their predecessors.

use std::time::Duration;

use flowdag_postgres::testing;
use flowdag_store::{
    Batch, Committed, Created, NewRun, NodeRow, Owner, Store, StoredEvent, StoredOutput, StoredPath,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_round_trips() {
    let store = testing::store("round_trip");
    let owner = Owner::new("a");
    let lease = Duration::from_secs(60);
    let mut run = NewRun::new("r", "W", u64::MAX, owner.clone(), lease);
    run.input_hash = 0x8000_0000_0000_0001;
    run.input = vec![0, 255, 7];
    run.options = b"{\"deadline\":null}".to_vec();
    run.nodes = vec![
        NodeRow {
            node: 0,
            name: "fetch".into(),
            label: "fetch(id)".into(),
            fingerprint: u64::MAX - 1,
            preds: vec![],
            compensate: String::new(),
            kind: "operation".into(),
            policy: "timeout = 5s, retries = 3".into(),
        },
        NodeRow {
            node: 1,
            name: "charge".into(),
            label: "charge(&order)".into(),
            fingerprint: 3,
            preds: vec![0],
            compensate: "refund(&charge)".into(),
            kind: "signal".into(),
            policy: String::new(),
        },
    ];
    let mut started = StoredEvent::new(0, "RunStarted");
    started.at_us = u64::MAX;
    run.events = vec![started];
    let Created::New { lease: held, .. } = store.create_run(run.clone()).await.expect("creates")
    else {
        panic!("a new run")
    };
    let mut nested = StoredEvent::new(1, "Completed");
    nested.node = Some(u32::MAX);
    nested.node_name = Some("poll".into());
    nested.path = Some("charge[3]/poll@2".parse::<StoredPath>().expect("a path"));
    nested.attempt = 4;
    nested.data = br#"{"ms":12}"#.to_vec();
    nested.format = u16::MAX;
    let mut batch = Batch::new(&held, 1, lease);
    batch.events = vec![nested.clone(), StoredEvent::new(2, "Requested")];
    batch.outputs = vec![StoredOutput {
        node: u32::MAX,
        instance: "charge[3]/poll@2".into(),
        type_name: "u64".into(),
        bytes: b"18446744073709551615".to_vec(),
    }];
    assert_eq!(
        store.commit(batch.clone()).await,
        Ok(Committed::Applied { next_seq: 3 })
    );
    // The same batch again is recognized event for event.
    assert_eq!(
        store.commit(batch.clone()).await,
        Ok(Committed::AlreadyApplied { next_seq: 3 })
    );
    let loaded = store.load_run("r", &owner, lease).await.expect("loads");
    assert_eq!(loaded.run.graph_hash, u64::MAX);
    assert_eq!(loaded.run.input_hash, run.input_hash);
    assert_eq!(loaded.input, run.input);
    assert_eq!(loaded.options, run.options);
    assert_eq!(loaded.nodes, run.nodes);
    assert_eq!(loaded.events[0], run.events[0]);
    assert_eq!(loaded.next_seq, 3);
    // A load reads the run's own events; the whole journal is read with `events`.
    assert_eq!(loaded.events.len(), 2);
    let journal = store.events("r", 0).await.expect("reads");
    assert_eq!(journal[1], nested);
    assert_eq!(loaded.outputs, batch.outputs);
    testing::drop_schemas("round_trip").await;
}
