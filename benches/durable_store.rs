//! The storage of durable runs, on SQLite: the raw rate of inserting journal rows with the
//! store's durability settings (WAL, `synchronous = FULL`) through rusqlite directly, one
//! transaction per batch, against the rate of `SqliteStore::commit` through the `Store` trait
//! (one batch per call, awaited), for batches of 1 and 64 events; and 16 runs committing one
//! event each at once (group commit: they share a transaction).
//!
//! `cargo bench -p flow-benches --bench durable_store` (criterion; throughput in events/s). The
//! files live under cargo's temporary directory for benches (`target/tmp/`). Disk-bound: the
//! numbers are the machine's fsync rate more than anything flow does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flowdag_runtime::store::{Batch, Created, Lease, NewRun, Owner, Store, StoredEvent};
use flowdag_sqlite::SqliteStore;
use rusqlite::{Connection, params};

const LEASE: Duration = Duration::from_secs(600);

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("durable_store")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the bench's files");
    dir
}

/// A journal event as a completed operation writes it.
fn event(seq: u64) -> StoredEvent {
    let mut event = StoredEvent::new(seq, "Completed");
    event.node = Some((seq % 50) as u32);
    event.node_name = Some("charge_card".to_owned());
    event.attempt = 1;
    event.data = br#"{"branch":null}"#.to_vec();
    event.at_us = seq * 17;
    event
}

/// The raw insert: the store's `events` table, the store's pragmas, rusqlite directly.
fn raw_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("sqlite");
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .expect("wal");
    conn.execute_batch(
        "PRAGMA synchronous = FULL;
         CREATE TABLE events (run TEXT NOT NULL, seq INTEGER NOT NULL, format INTEGER NOT NULL,
           node INTEGER, node_name TEXT, path TEXT, attempt INTEGER NOT NULL, kind TEXT NOT NULL,
           data BLOB NOT NULL, at_us INTEGER NOT NULL, wall_ms INTEGER NOT NULL,
           PRIMARY KEY (run, seq)) STRICT, WITHOUT ROWID;",
    )
    .expect("the events table");
    conn
}

fn raw_insert(conn: &Connection, events: &[StoredEvent]) {
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    {
        let mut stmt = conn
            .prepare_cached(
                "INSERT INTO events (run, seq, format, node, node_name, path, attempt, kind, data, at_us, wall_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .expect("prepare");
        for e in events {
            stmt.execute(params![
                "order-42",
                e.seq as i64,
                e.format,
                e.node,
                e.node_name,
                None::<String>,
                e.attempt,
                e.kind,
                e.data,
                e.at_us as i64,
                0i64
            ])
            .expect("insert");
        }
    }
    conn.execute_batch("COMMIT").expect("commit");
}

async fn new_run(store: &SqliteStore, id: &str) -> Lease {
    let run = NewRun::new(id, "Bench", 1, Owner::new("bench"), LEASE);
    match store.create_run(run).await.expect("create_run") {
        Created::New { lease, .. } => lease,
        Created::Exists(_) => panic!("a fresh store"),
    }
}

fn durable_store(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("durable_store");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));

    for size in [1u64, 64] {
        group.throughput(Throughput::Elements(size));

        let path = dir(&format!("raw-{size}")).join("raw.db");
        let conn = raw_connection(&path);
        let mut seq = 0u64;
        group.bench_function(BenchmarkId::new("raw_insert", size), |b| {
            b.iter(|| {
                let events: Vec<StoredEvent> = (seq..seq + size).map(event).collect();
                raw_insert(&conn, &events);
                seq += size;
            })
        });
        drop(conn);

        let store =
            SqliteStore::open(dir(&format!("store-{size}")).join("runs.db")).expect("a store");
        let lease = rt.block_on(new_run(&store, "order-42"));
        let mut seq = 0u64;
        group.bench_function(BenchmarkId::new("store_commit", size), |b| {
            b.iter(|| {
                let mut batch = Batch::new(&lease, seq, LEASE);
                batch.events = (seq..seq + size).map(event).collect();
                rt.block_on(store.commit(batch)).expect("commit");
                seq += size;
            })
        });
    }

    // 16 runs commit one event each at the same time: one transaction serves them.
    let runs = 16u64;
    group.throughput(Throughput::Elements(runs));
    let store = SqliteStore::open(dir("group").join("runs.db")).expect("a store");
    let leases: Vec<Lease> = (0..runs)
        .map(|n| rt.block_on(new_run(&store, &format!("order-{n}"))))
        .collect();
    let mut seq = 0u64;
    group.bench_function(BenchmarkId::new("store_commit_16_runs_at_once", 1), |b| {
        b.iter(|| {
            let commits: Vec<_> = leases
                .iter()
                .map(|lease| {
                    let mut batch = Batch::new(lease, seq, LEASE);
                    batch.events = vec![event(seq)];
                    store.commit(batch)
                })
                .collect();
            rt.block_on(async {
                for commit in commits {
                    commit.await.expect("commit");
                }
            });
            seq += 1;
        })
    });
    group.finish();
    let stats = store.stats();
    println!(
        "group commit: {} requests in {} transactions ({:.1} per transaction)",
        stats.requests,
        stats.transactions,
        stats.requests as f64 / stats.transactions.max(1) as f64
    );
}

criterion_group!(benches, durable_store);
criterion_main!(benches);
