//! Client mode: `SqliteStore::open_client` opens a store that another store (in this process
//! or another) owns, reads it and sends signals, frees no lease, and refuses every owner's
//! request; a missing, foreign or damaged file is refused as `open` refuses it.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use flowdag_sqlite::{SCHEMA_VERSION, SqliteStore};
use flowdag_store::{
    Batch, Created, NewRun, NewSignal, Owner, RunFilter, SignalMode, SignalSent, Store, StoreError,
    StoredEvent, StoredOutput, WaitChange,
};
use rusqlite::Connection;

const LEASE: Duration = Duration::from_secs(3600);

fn signal(run: &str, payload: &str) -> NewSignal {
    NewSignal {
        run: run.to_owned(),
        name: "approve".into(),
        payload: payload.as_bytes().to_vec(),
        mode: SignalMode::Kept,
    }
}

fn client_mode(err: &StoreError, method: &str) -> bool {
    matches!(err, StoreError::Invalid { why } if why.contains(&format!("`{method}` is refused")) && why.contains("client mode"))
}

#[tokio::test]
async fn a_client_reads_and_sends_signals_while_the_owner_holds_the_store() {
    let dir = common::dir("client");
    let path = dir.join("runs.db");
    let owner = SqliteStore::open(&path).expect("the owner opens the store");
    let me = Owner::new("owner");
    let mut run = NewRun::new("order-1", "Order", 1, me.clone(), LEASE);
    run.events = vec![StoredEvent::new(0, "RunStarted")];
    run.input = br#"{"order":1}"#.to_vec();
    let Created::New { lease, .. } = owner.create_run(run).await.expect("creates") else {
        panic!("a new run")
    };
    // A step of the run waits for `approve`.
    let mut wait = Batch::new(&lease, 1, LEASE);
    let mut requested = StoredEvent::new(1, "Requested");
    requested.node = Some(1);
    wait.events = vec![requested];
    wait.waits = vec![WaitChange::Open {
        node: 1,
        instance: String::new(),
        name: "approve".into(),
    }];
    wait.outputs = vec![StoredOutput {
        node: 0,
        instance: String::new(),
        type_name: "u64".into(),
        bytes: b"7".to_vec(),
    }];
    owner.commit(wait).await.expect("commits");

    // The owner holds the file's lock: a second owner is refused, a client is not.
    assert!(matches!(
        SqliteStore::open(&path),
        Err(StoreError::Locked { .. })
    ));
    let client = SqliteStore::open_client(&path).expect("a client opens the owned store");
    assert!(client.is_client() && !owner.is_client());

    // It reads, and frees no lease.
    let runs = client
        .list_runs(&RunFilter::default())
        .await
        .expect("lists");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].owner.as_deref(), Some("owner"));
    assert_eq!(runs[0].wake_at_ms, None);
    assert_eq!(client.events("order-1", 0).await.expect("reads").len(), 2);
    let data = client.run_data("order-1").await.expect("reads the data");
    assert_eq!(data.input, br#"{"order":1}"#);
    assert_eq!(data.outputs.len(), 1);
    assert_eq!(data.outputs[0].bytes, b"7");
    assert_eq!(data.end, None);
    let err = client.run_data("order-404").await.expect_err("no such run");
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");

    // It sends: the owner sees the signal, and the run is due now.
    let before = now_ms();
    let sent = client
        .send_signal(signal("order-1", r#"{"by":"ann"}"#))
        .await
        .expect("sent");
    let SignalSent::Stored { id } = sent else {
        panic!("stored: {sent:?}")
    };
    let seen = owner.signals("order-1", 0).await.expect("reads");
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].id, seen[0].payload.as_slice()),
        (id, &br#"{"by":"ann"}"#[..])
    );
    let run = &owner.list_runs(&RunFilter::default()).await.expect("lists")[0];
    let wake = run.wake_at_ms.expect("a signal makes the run due");
    assert!(wake >= before && wake <= now_ms());
    assert_eq!(client.signals("order-1", 0).await.expect("reads").len(), 1);

    // The owner's requests are refused, naming the client mode; nothing is written.
    let err = client
        .create_run(NewRun::new("order-2", "Order", 1, me.clone(), LEASE))
        .await
        .expect_err("refused");
    assert!(client_mode(&err, "create_run"), "{err}");
    let err = client
        .load_run("order-1", &me, LEASE)
        .await
        .expect_err("refused");
    assert!(client_mode(&err, "load_run"), "{err}");
    let mut batch = Batch::new(&lease, 2, LEASE);
    batch.events = vec![StoredEvent::new(2, "RunFinished")];
    let err = client.commit(batch).await.expect_err("refused");
    assert!(client_mode(&err, "commit"), "{err}");
    let err = client
        .heartbeat(&me, std::slice::from_ref(&lease), LEASE)
        .await
        .expect_err("refused");
    assert!(client_mode(&err, "heartbeat"), "{err}");
    let err = client
        .release(&me, std::slice::from_ref(&lease))
        .await
        .expect_err("refused");
    assert!(client_mode(&err, "release"), "{err}");
    let err = client.due_timers(LEASE, 10).await.expect_err("refused");
    assert!(client_mode(&err, "due_timers"), "{err}");
    assert!(
        err.to_string().contains("SqliteStore::open_client"),
        "{err}"
    );
    let runs = owner.list_runs(&RunFilter::default()).await.expect("lists");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].next_seq, runs[0].owner.as_deref()),
        (2, Some("owner"))
    );

    // A signal to a run that does not exist, or that has ended, is refused as by the owner.
    let err = client
        .send_signal(signal("order-404", "true"))
        .await
        .expect_err("no such run");
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
}

#[test]
fn a_client_refuses_what_open_refuses_and_never_creates_a_store() {
    let dir = common::dir("client-refuses");
    let missing = dir.join("missing.db");
    let err = SqliteStore::open_client(&missing).expect_err("no file");
    assert!(
        err.to_string().contains("a client never creates a store"),
        "{err}"
    );
    assert!(!missing.exists(), "nothing was created");

    let empty = dir.join("empty.db");
    std::fs::write(&empty, b"").expect("an empty file");
    let err = SqliteStore::open_client(&empty).expect_err("an empty file");
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert_eq!(std::fs::read(&empty).expect("read").len(), 0, "left empty");

    let garbage = dir.join("garbage.db");
    let bytes: Vec<u8> = (0u32..16 * 1024)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&garbage, &bytes).expect("write");
    let open = SqliteStore::open(&garbage).expect_err("corrupt");
    let client = SqliteStore::open_client(&garbage).expect_err("corrupt");
    assert!(matches!(client, StoreError::Corrupt { .. }), "{client:?}");
    assert_eq!(client.to_string(), open.to_string());
    assert_eq!(std::fs::read(&garbage).expect("read"), bytes, "unchanged");

    let photos = dir.join("photos.db");
    Connection::open(&photos)
        .and_then(|conn| conn.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY);"))
        .expect("a foreign database");
    let open = SqliteStore::open(&photos).expect_err("foreign");
    let client = SqliteStore::open_client(&photos).expect_err("foreign");
    assert!(matches!(client, StoreError::Foreign { .. }), "{client:?}");
    assert_eq!(client.to_string(), open.to_string());

    let newer = dir.join("newer.db");
    drop(SqliteStore::open(&newer).expect("a store"));
    Connection::open(&newer)
        .and_then(|conn| conn.execute_batch("PRAGMA user_version = 99;"))
        .expect("a newer schema");
    let err = SqliteStore::open_client(&newer).expect_err("a newer schema");
    assert!(
        matches!(err, StoreError::SchemaVersion { found: 99, known, .. } if known == SCHEMA_VERSION),
        "{err:?}"
    );
}

/// Not a test of its own: the child process of
/// `a_client_in_another_process_sends_while_the_owner_runs`, which runs this test binary with
/// `FLOW_SQLITE_CLIENT` set to the store's path. Without it, it returns.
#[test]
fn child_sending_a_signal() {
    let Ok(path) = std::env::var("FLOW_SQLITE_CLIENT") else {
        return;
    };
    let client = SqliteStore::open_client(&path).expect("the child opens a client");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let sent = runtime
        .block_on(client.send_signal(signal("order-1", "42")))
        .expect("the child sends");
    match sent {
        SignalSent::Stored { id } => println!("SENT {id}"),
        SignalSent::Dropped => println!("DROPPED"),
    }
}

#[tokio::test]
async fn a_client_in_another_process_sends_while_the_owner_runs() {
    let dir = common::dir("client-child");
    let path = dir.join("runs.db");
    let owner = SqliteStore::open(&path).expect("the owner opens the store");
    owner
        .create_run(NewRun::new(
            "order-1",
            "Order",
            1,
            Owner::new("owner"),
            LEASE,
        ))
        .await
        .expect("creates");
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "child_sending_a_signal", "--nocapture"])
        .env("FLOW_SQLITE_CLIENT", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let output = child.wait_with_output().expect("the child ends");
    assert!(output.status.success(), "the child failed");
    let sent = BufReader::new(&output.stdout[..])
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("SENT ").map(str::to_owned))
        .expect("the child stored the signal");
    let signals = owner.signals("order-1", 0).await.expect("reads");
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].id.to_string(), sent);
    assert_eq!(signals[0].payload, b"42");
}

/// Milliseconds since the Unix epoch by this process's clock: the store's clock.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.expect("after 1970").as_millis()).expect("fits")
}
