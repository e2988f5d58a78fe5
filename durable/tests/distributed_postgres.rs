//! Workers on PostgreSQL whose database cannot be reached when they start, and goes away while
//! they run: they wait (retrying with backoff), do not exit, and finish every run once the
//! database is back. The database is reached through a TCP relay the test starts and stops;
//! the server itself is the project's test cluster (`flowdag_postgres::testing::server`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowdag::Worker;
use flowdag::prelude::*;
use flowdag::store::{RunFilter, RunStatus, Store};
use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A TCP relay from `listen` to the server; stopping it drops every connection it carries.
struct Relay {
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Relay {
    async fn start(listen: SocketAddr, server: SocketAddr) -> Relay {
        let listener = TcpListener::bind(listen).await.expect("the relay's port");
        let pipes = Arc::new(Mutex::new(Vec::new()));
        let carried = Arc::clone(&pipes);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(server).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                carried.lock().expect("the relay's pipes").push(pipe);
            }
        });
        Relay { pipes, accept }
    }

    fn stop(self) {
        self.accept.abort();
        for pipe in self.pipes.lock().expect("the relay's pipes").drain(..) {
            pipe.abort();
        }
    }
}

/// `postgres://user@host:port/db` → (`host:port`, the URL with `relay` in its place).
fn through(url: &str, relay: SocketAddr) -> (SocketAddr, String) {
    let (head, rest) = url
        .split_once('@')
        .expect("the test server's URL names its user");
    let (place, tail) = rest
        .split_once('/')
        .expect("the test server's URL names its database");
    let server = place
        .parse()
        .unwrap_or_else(|e| panic!("the test server listens on TCP at `{place}`: {e}"));
    (server, format!("{head}@{relay}/{tail}"))
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

async fn add(order: u64, n: u64) -> Result<u64, std::io::Error> {
    Ok(order + n)
}

workflow! {
    #[flow(durable)]
    Sum(order: u64) -> u64 {
        Sequential {
            Parallel {
                a = Operation(add(order, 1)),
                b = Operation(add(order, 2)),
            },
            total = Operation(add(a, b)),
        }
        => total
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_wait_for_an_unreachable_database_and_go_on() {
    let schema = testing::fresh_schema("unreachable_workers");
    let options = || PostgresOptions {
        schema: schema.clone(),
        connect_timeout: Duration::from_millis(500),
        ..PostgresOptions::default()
    };
    let direct = PostgresStore::connect_with(&testing::server(), options()).expect("a store");
    for order in 0..4 {
        Sum::runner()
            .durable(&direct, format!("sum-{order}"))
            .distributed()
            .submit(order)
            .await
            .expect("submitted");
    }
    let relay_at = free_port();
    let (server, relayed) = through(&testing::server(), relay_at);
    let store = PostgresStore::connect_with(&relayed, options()).expect("a store");
    let worker = Worker::new(store)
        .register::<Sum>()
        .poll_interval(Duration::from_millis(10))
        .task_lease(Duration::from_secs(2));
    let stop = tokio::sync::Notify::new();
    let operate = async {
        // Down at the start: the worker retries.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let relay = Relay::start(relay_at, server).await;
        // Up until a run has finished, then down again mid-run, then up for good.
        let start = Instant::now();
        let finished = |runs: &[flowdag::store::RunSummary]| {
            runs.iter()
                .filter(|r| r.status == RunStatus::Succeeded)
                .count()
        };
        while start.elapsed() < Duration::from_secs(20) {
            let runs = direct
                .list_runs(&RunFilter::default())
                .await
                .expect("lists");
            if finished(&runs) >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        relay.stop();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let relay = Relay::start(relay_at, server).await;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            let runs = direct
                .list_runs(&RunFilter::default())
                .await
                .expect("lists");
            if finished(&runs) == runs.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.notify_waiters();
        relay
    };
    let (report, relay) = tokio::join!(worker.run(stop.notified()), operate);
    let report = report.expect("the worker rode the outages out");
    relay.stop();
    assert!(
        report.store_retries >= 2,
        "the worker retried while the database was away: {report:?}"
    );
    for order in 0..4 {
        let outcome = Sum::resume(&direct, &format!("sum-{order}"))
            .await
            .expect("finished");
        assert_eq!(outcome.result.expect("succeeded"), 2 * order + 3);
    }
    testing::drop_schemas("unreachable_workers").await;
}

/// A worker hears of new work through the store's notifications (`LISTEN/NOTIFY`): with a
/// poll interval of an hour, it looks once when it starts (nothing is there), and finds the
/// runs submitted after that, their tasks and their due decisions, only because every commit
/// that opens tasks and every completion notifies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_hears_of_new_work_without_polling() {
    let store = testing::store("notified_worker");
    store.migrate().await.expect("the schema");
    let worker = Worker::new(store.clone())
        .register::<Sum>()
        .poll_interval(Duration::from_secs(3600));
    let stop = tokio::sync::Notify::new();
    let operate = async {
        // Let the worker make its first look (and start listening) before any run exists.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for order in 0..3 {
            Sum::runner()
                .durable(&store, format!("heard-{order}"))
                .distributed()
                .submit(order)
                .await
                .expect("submitted");
        }
        // Bounded: the runs finish in milliseconds when notifications work; without them,
        // not before the worker's next look, an hour away.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs.len() == 3 && runs.iter().all(|r| r.status.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.notify_waiters();
    };
    let (report, ()) = tokio::join!(worker.run(stop.notified()), operate);
    let report = report.expect("the worker ran");
    for order in 0..3 {
        let outcome = Sum::resume(&store, &format!("heard-{order}"))
            .await
            .expect("finished");
        assert_eq!(outcome.result.expect("succeeds"), 2 * order + 3);
    }
    assert_eq!(report.tasks_completed, 9);
    testing::drop_schemas("notified_worker").await;
}

/// A watch on a run wakes when a task of that run is completed, from another store (another
/// process, as far as the server can tell).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_on_a_run_wakes_when_its_task_is_done() {
    use flowdag::store::{
        Batch, Created, NewRun, Owner, StoredEvent, TaskChange, TaskOutcome, Watch, WorkflowVersion,
    };
    let store = testing::store("watched_run");
    let other = PostgresStore::connect_with(
        &testing::server(),
        PostgresOptions {
            schema: store.schema().to_owned(),
            ..PostgresOptions::default()
        },
    )
    .expect("a second store on the same schema");
    let owner = Owner::new("decider");
    let lease = Duration::from_secs(30);
    let Created::New { lease: held, .. } = store
        .create_run(NewRun::new("watched", "W", 1, owner.clone(), lease))
        .await
        .expect("creates")
    else {
        panic!("a new run")
    };
    let mut batch = Batch::new(&held, 0, lease);
    let mut requested = StoredEvent::new(0, "Requested");
    requested.node = Some(0);
    batch.events = vec![requested];
    batch.tasks = vec![TaskChange::Open {
        node: 0,
        instance: String::new(),
        attempt: 1,
    }];
    store.commit(batch).await.expect("commits");
    // The listener wakes every watcher once it listens (whatever came before was missed):
    // wait for that, so that the run's watch below is woken by the completion alone.
    let listening = store
        .watch(Watch::Tasks)
        .expect("a PostgreSQL store notifies");
    tokio::time::timeout(Duration::from_secs(30), listening)
        .await
        .expect("the listener listens");
    let woken = store
        .watch(Watch::Run("watched".to_owned()))
        .expect("a PostgreSQL store notifies");
    let woken = tokio::spawn(woken);
    let worker = Owner::new("worker");
    let claims = other
        .claim_tasks(&worker, &[WorkflowVersion::new("W", 1)], 1, lease)
        .await
        .expect("claims");
    assert_eq!(claims.len(), 1);
    other
        .complete_task(
            &claims[0],
            TaskOutcome::Completed {
                type_name: "u64".to_owned(),
                bytes: b"1".to_vec(),
            },
        )
        .await
        .expect("completes");
    tokio::time::timeout(Duration::from_secs(30), woken)
        .await
        .expect("the watch woke")
        .expect("the watch's task");
    assert_eq!(other.channel(), store.channel());
    testing::drop_schemas("watched_run").await;
}

async fn hang(order: u64) -> Result<u64, std::io::Error> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(order)
}

workflow! {
    #[flow(durable)]
    Hanging(order: u64) -> u64 {
        Sequential {
            first = Operation(add(order, 1)),
            last = Operation(hang(first)),
        }
        => last
    }
}

/// A live run hears an operator's cancel request through the store's notifications: with a
/// request poll of an hour, it is cancelled only because the request's `NOTIFY` wakes it. The
/// request is sent through another store (another process, as far as the server can tell).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_hears_a_cancel_request_without_polling() {
    use flowdag::durable::{Stop, cancel_run};
    use flowdag::store::Watch;
    let store = testing::store("cancel_heard");
    store.migrate().await.expect("the schema");
    let other = PostgresStore::connect_with(
        &testing::server(),
        PostgresOptions {
            schema: store.schema().to_owned(),
            ..PostgresOptions::default()
        },
    )
    .expect("a second store on the same schema");
    // The listener wakes every watcher once it listens: wait for that first.
    let listening = store
        .watch(Watch::Tasks)
        .expect("a PostgreSQL store notifies");
    tokio::time::timeout(Duration::from_secs(30), listening)
        .await
        .expect("the listener listens");
    let run = tokio::spawn({
        let store = store.clone();
        async move {
            Hanging::runner()
                .durable(&store, "hanging")
                .request_poll(Duration::from_secs(3600))
                .execute(1)
                .await
        }
    });
    // Bounded: wait until the run holds its second step (its `Requested` is committed).
    let start = Instant::now();
    loop {
        let events = store.events("hanging", 0).await.unwrap_or_default();
        if events
            .iter()
            .any(|e| e.kind == "Requested" && e.node_name.as_deref() == Some("last"))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run never started `last`"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stop = cancel_run(&other, "hanging", Some("heard"))
        .await
        .expect("requested");
    assert!(
        matches!(stop, Stop::Requested { holder: Some(_) }),
        "{stop:?}"
    );
    let outcome = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the request is heard long before the run's next poll, an hour away")
        .expect("joins")
        .expect("the run ends");
    assert_eq!(
        outcome.result.expect_err("cancelled").cancel_reason(),
        Some(CancelReason::Requested)
    );
    let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
    assert_eq!(runs[0].status, RunStatus::Cancelled);
    testing::drop_schemas("cancel_heard").await;
}

/// Every execution of a `Parcels` instance, by idempotency key.
static PACKED: Mutex<Vec<String>> = Mutex::new(Vec::new());

async fn pack(i: u64) -> Result<u64, std::io::Error> {
    let key = flowdag::attempt().map_or_else(|| "none".to_owned(), |a| a.key());
    PACKED.lock().unwrap_or_else(|p| p.into_inner()).push(key);
    Ok(i)
}

workflow! {
    #[flow(durable)]
    Parcels(lines: u64) -> u64 {
        packed = ForEach(i in 0..lines) {
            parcel = Operation(pack(i))
            => parcel
        }
        => packed.iter().sum::<u64>()
    }
}

/// Two workers race to pick up the same runs of a `ForEach` whose instances are tasks: the
/// worker whose load of a run is refused (the other holds it) hands the outcomes of that
/// run's tasks it executes meanwhile to the store, not to the run it did not get, so every
/// instance is executed once and none waits for its claim to lapse (a 20 s task lease here:
/// an outcome lost that way would run the instance a second time after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_workers_execute_each_instance_once() {
    let store = testing::store("racing_instances");
    store.migrate().await.expect("the schema");
    for run in 0..3 {
        Parcels::runner()
            .durable(&store, format!("parcels-{run}"))
            .distributed()
            .submit(100)
            .await
            .expect("submitted");
    }
    let worker = || {
        Worker::new(store.clone())
            .register::<Parcels>()
            .task_lease(Duration::from_secs(20))
            .poll_interval(Duration::from_millis(10))
            .max_runs(8)
            .max_tasks(8)
    };
    let finished = || async {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs.iter().all(|r| r.status.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let (first, second) = (worker(), worker());
    let (a, b) = tokio::join!(first.run(finished()), second.run(finished()));
    let executed =
        a.expect("a worker ran").tasks_completed + b.expect("a worker ran").tasks_completed;
    for run in 0..3 {
        let outcome = Parcels::resume(&store, &format!("parcels-{run}"))
            .await
            .expect("finished");
        assert_eq!(outcome.result.expect("succeeds"), (0..100).sum::<u64>());
    }
    let mut packed = std::mem::take(&mut *PACKED.lock().unwrap_or_else(|p| p.into_inner()));
    packed.sort();
    let all = packed.len();
    packed.dedup();
    assert_eq!(
        (all, packed.len(), executed),
        (300, 300, 300),
        "every instance executed once, as one task"
    );
    testing::drop_schemas("racing_instances").await;
}
