//! `flow serve`, the binary: it serves the view of a SQLite store beside the process that
//! owns it, and of a PostgreSQL store; a store it cannot read is an error page on every path,
//! never a crash.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use flowdag_sqlite::SqliteStore;

mod common;
mod support {
    pub mod http;
}
use common::Order;
use support::http::{get, post};

/// A `flow serve` process; killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
    /// The lines it printed before its address.
    said: Vec<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `flow serve ARGS --addr 127.0.0.1:0` and reads its address from its first lines.
fn serve(args: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flow"))
        .arg("serve")
        .args(args)
        .args(["--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the binary runs");
    let stdout = child.stdout.take().expect("its output");
    let mut said = Vec::new();
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = match lines.next() {
            Some(Ok(line)) => line,
            other => {
                let _ = child.kill();
                panic!("flow serve ended before serving: {other:?}, said {said:?}");
            }
        };
        if let Some(rest) = line.strip_prefix("serving http://") {
            let addr = rest.split('/').next().expect("an address");
            break addr.parse().expect("an address");
        }
        said.push(line);
        assert!(said.len() < 10, "no address in {said:?}");
    };
    Served { child, addr, said }
}

fn store_with_runs(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("serve-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).expect("opens");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(async {
            for id in ["first", "second"] {
                let done = Order::runner()
                    .durable(&store, id)
                    .execute(1)
                    .await
                    .expect("runs");
                assert!(done.result.is_ok());
            }
        });
    path
}

#[test]
fn serve_reads_a_sqlite_store_its_owner_holds() {
    let path = store_with_runs("beside");
    // The application still owns the store (its lock held) while the view reads it.
    let owner = SqliteStore::open(&path).expect("owns");
    let db = path.to_str().expect("utf-8");
    let served = serve(&[db]);
    assert!(served.said.is_empty(), "{:?}", served.said);
    let list = get(served.addr, "/runs");
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(
        list.body.matches("<tr data-run=").count(),
        2,
        "{}",
        list.body
    );
    assert!(list.body.contains(">read-only<"));
    let run = get(served.addr, "/runs/first");
    assert_eq!(run.status, 200);
    assert!(
        run.body
            .contains(r#"data-node="item" data-kind="operation" data-status="completed""#)
            || run.body.contains(r#"data-status="completed""#)
    );
    // Read-only: the actions are refused, and the store says nothing was sent.
    let refused = post(served.addr, "/runs/first/cancel", "reason=x", &[]);
    assert_eq!(refused.status, 405);
    drop(owner);
}

#[test]
fn a_store_that_cannot_be_read_is_an_error_page() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-broken");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    // Of a newer flow.
    let newer = store_with_runs("newer");
    {
        let conn = rusqlite::Connection::open(&newer).expect("opens");
        conn.execute_batch("PRAGMA user_version = 999")
            .expect("set");
    }
    // Not a database at all.
    let garbage = dir.join("garbage.db");
    std::fs::write(&garbage, b"this is not a SQLite database, but it is long enough to be taken for one by a careless reader").expect("written");
    let missing = dir.join("missing.db");
    for (path, why) in [(&newer, "newer"), (&garbage, "not"), (&missing, "no store")] {
        let db = path.to_str().expect("utf-8");
        let served = serve(&[db]);
        assert!(
            served.said.iter().any(|l| l.starts_with("error: ")),
            "{:?}",
            served.said
        );
        for page in ["/runs", "/runs/first", "/workflows/Order"] {
            let answer = get(served.addr, page);
            assert_eq!(answer.status, 500, "{db} {page}: {}", answer.body);
            assert!(
                answer.body.contains("The store cannot be read"),
                "{}",
                answer.body
            );
            assert!(
                answer.body.to_lowercase().contains(why),
                "{why}: {}",
                answer.body
            );
        }
        assert!(!missing.exists(), "flow serve never creates a store");
    }
}

#[test]
fn serve_reads_a_postgres_store() {
    let url = testing::server();
    let schema = testing::fresh_schema("serve");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(async {
            let options = PostgresOptions {
                schema: schema.clone(),
                ..PostgresOptions::default()
            };
            let store = PostgresStore::connect_with(&url, options).expect("a store");
            let done = Order::runner()
                .durable(&store, "pg-run")
                .execute(2)
                .await
                .expect("runs");
            assert!(done.result.is_ok());
        });
    let served = serve(&[&url, "--schema", &schema]);
    let list = get(served.addr, "/runs");
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(
        list.body
            .contains(r#"<tr data-run="pg-run" data-status="succeeded">"#),
        "{}",
        list.body
    );
    let run = get(served.addr, "/runs/pg-run");
    assert_eq!(run.status, 200, "{}", run.body);
    assert!(
        run.body.contains(r#"<g class="node""#),
        "the store keeps the graph: {}",
        run.body
    );
    // A schema that does not exist: the error page, and the read-only view creates nothing.
    let missing = testing::fresh_schema("serve_missing");
    let served = serve(&[&url, "--schema", &missing]);
    let answer = get(served.addr, "/runs");
    assert_eq!(answer.status, 500, "{}", answer.body);
    assert!(
        answer.body.contains("holds no store of flow"),
        "{}",
        answer.body
    );
    let exists = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(async {
            let client = testing::client().await;
            client
                .query_opt(
                    "SELECT 1 FROM information_schema.schemata WHERE schema_name = $1",
                    &[&missing],
                )
                .await
                .expect("a query")
                .is_some()
        });
    assert!(!exists, "the schema was not created");
}
