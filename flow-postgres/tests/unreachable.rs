//! A store whose server cannot be reached: `connect` succeeds, every call answers
//! `Unreachable` promptly (naming `host:port/dbname`, never the password), and the same store
//! works as soon as the server is back; a connection lost later is replaced on the next call.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use flowdag_store::{RunFilter, Store, StoreError};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A TCP relay from `listen` to the test server, until aborted (which drops every connection
/// it carries: the store sees them reset).
struct Relay {
    tasks: std::sync::Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Relay {
    async fn start(listen: SocketAddr, server: SocketAddr) -> Relay {
        let listener = TcpListener::bind(listen).await.expect("the relay's port");
        let tasks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let carried = std::sync::Arc::clone(&tasks);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(server).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                carried.lock().expect("the relay's tasks").push(pipe);
            }
        });
        Relay { tasks, accept }
    }

    fn stop(self) {
        self.accept.abort();
        for task in self.tasks.lock().expect("the relay's tasks").drain(..) {
            task.abort();
        }
    }
}

/// The test server's address, from its URL (`postgres://user@host:port/db`).
fn server_addr(url: &str) -> (SocketAddr, String, String) {
    let config: tokio_postgres::Config = url.parse().expect("the test server's URL");
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("the test server listens on TCP: {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let addr = format!("{host}:{port}")
        .parse()
        .or_else(|_| format!("127.0.0.1:{port}").parse())
        .expect("an address");
    let user = config.get_user().unwrap_or("postgres").to_owned();
    let db = config.get_dbname().unwrap_or("postgres").to_owned();
    (addr, user, db)
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

fn unreachable(result: Result<Vec<flowdag_store::RunSummary>, StoreError>, at: &str) {
    match result {
        Err(StoreError::Unreachable { at: found, why }) => {
            assert_eq!(found, at, "Unreachable names the place: {why}");
            assert!(!why.contains("s3cret"), "no password in {why}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_a_server_answers_unreachable_and_recovers() {
    let (server, user, db) = server_addr(&testing::server());
    let relay_at = free_port();
    // The server has no password set (trust): the one in the URL only must not leak.
    let url = format!(
        "postgres://{user}:s3cret@127.0.0.1:{}/{db}",
        relay_at.port()
    );
    let options = PostgresOptions {
        schema: testing::fresh_schema("unreachable"),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect_with(&url, options).expect("connect reads the URL only");
    let at = format!("127.0.0.1:{}/{db}", relay_at.port());
    assert_eq!(store.at(), at);

    // Nothing listens: refused, at once.
    let started = Instant::now();
    unreachable(store.list_runs(&RunFilter::default()).await, &at);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "promptly: {:?}",
        started.elapsed()
    );
    let err = store
        .load_run("r", &flowdag_store::Owner::new("a"), Duration::from_secs(1))
        .await
        .expect_err("no server");
    assert!(err.is_retryable(), "Unreachable is retryable: {err}");

    // The server is back: the same store works (and creates its schema).
    let relay = Relay::start(relay_at, server).await;
    assert_eq!(store.list_runs(&RunFilter::default()).await, Ok(vec![]));

    // The connection breaks and the server is gone again: Unreachable, no panic.
    relay.stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    unreachable(store.list_runs(&RunFilter::default()).await, &at);

    // Back again: the lost connection is replaced.
    let relay = Relay::start(relay_at, server).await;
    assert_eq!(store.list_runs(&RunFilter::default()).await, Ok(vec![]));
    relay.stop();
    testing::drop_schemas("unreachable").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_the_connection_is_an_io_error_naming_it() {
    // The server answers, and says there is no such database: a person must fix the URL.
    let (server, user, _) = server_addr(&testing::server());
    let url = format!(
        "postgres://{user}@{}:{}/flow_no_such_database",
        server.ip(),
        server.port()
    );
    let store = PostgresStore::connect(&url).expect("a store");
    match store.list_runs(&RunFilter::default()).await {
        Err(StoreError::Io { context, source }) => {
            assert!(context.starts_with("connecting to `"), "{context}");
            assert!(context.contains("/flow_no_such_database"), "{context}");
            // The server's reason, in the message itself (not only in its source).
            let shown = StoreError::Io {
                context: context.clone(),
                source: source.clone(),
            }
            .to_string();
            assert!(
                shown.contains(r#"database "flow_no_such_database" does not exist"#),
                "{shown}"
            );
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

/// Mistakes of configuration are refused when the store is made, never met later as a
/// server that cannot be reached (which a worker would try again for ever).
#[tokio::test]
async fn mistakes_of_configuration_are_invalid_at_once() {
    let invalid = |url: &str, schema: &str| {
        let options = PostgresOptions {
            schema: schema.to_owned(),
            ..PostgresOptions::default()
        };
        match PostgresStore::connect_with(url, options) {
            Err(StoreError::Invalid { why }) => why,
            other => panic!("expected Invalid for {url} / {schema:?}, got {other:?}"),
        }
    };
    let url = "postgres://flow@127.0.0.1:5432/db";
    assert!(invalid(url, "fl\0ow").contains("NUL"));
    assert!(invalid(url, &"s".repeat(64)).contains("64 bytes"));
    assert!(
        PostgresStore::connect_with(
            url,
            PostgresOptions {
                schema: "s".repeat(63),
                ..PostgresOptions::default()
            }
        )
        .is_ok()
    );
    let tls = invalid("postgres://flow@127.0.0.1:5432/db?sslmode=require", "flow");
    assert!(tls.contains("sslmode=require"), "{tls}");
}

#[tokio::test]
async fn a_malformed_url_is_invalid() {
    match PostgresStore::connect("postgres://host:notaport/db") {
        Err(StoreError::Invalid { why }) => assert!(why.contains("malformed"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_answer_is_unreachable_in_time() {
    // A socket that accepts and never speaks.
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = silent.local_addr().expect("its address").port();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            sockets.push(socket);
        }
    });
    let options = PostgresOptions {
        schema: testing::fresh_schema("silent"),
        connect_timeout: Duration::from_millis(300),
        ..PostgresOptions::default()
    };
    let store =
        PostgresStore::connect_with(&format!("postgres://flow@127.0.0.1:{port}/db"), options)
            .expect("a store");
    let started = Instant::now();
    match store.list_runs(&RunFilter::default()).await {
        Err(StoreError::Unreachable { why, .. }) => assert!(why.contains("within"), "{why}"),
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_waits_too_long_is_unreachable_and_writes_nothing() {
    let schema = testing::fresh_schema("stalled");
    let options = PostgresOptions {
        schema: schema.clone(),
        request_timeout: Duration::from_millis(300),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect_with(&testing::server(), options).expect("a store");
    let a = flowdag_store::Owner::new("a");
    let lease = Duration::from_secs(60);
    store
        .create_run(flowdag_store::NewRun::new("r", "W", 1, a.clone(), lease))
        .await
        .expect("creates");
    // Another session holds the run's row: loading it waits past the request timeout.
    let mut other = testing::client().await;
    let holder = other.transaction().await.expect("a transaction");
    holder
        .execute(
            &format!("SELECT 1 FROM \"{schema}\".runs WHERE id = 'r' FOR UPDATE"),
            &[],
        )
        .await
        .expect("locks the run");
    let started = Instant::now();
    match store.load_run("r", &a, lease).await {
        Err(StoreError::Unreachable { why, .. }) => {
            assert!(why.contains("request_timeout"), "{why}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    holder.rollback().await.expect("releases the run");
    // The stalled request wrote nothing (its connection was dropped before it committed):
    // the run's version is still the creation's, and the store goes on with a new connection.
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    assert_eq!(runs[0].version, 1, "{runs:?}");
    let loaded = store.load_run("r", &a, lease).await.expect("loads");
    assert_eq!(loaded.lease.version, 2);
    testing::drop_schemas("stalled").await;
}
