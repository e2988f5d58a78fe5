//! A plain workflow run inside a durable step: each of its steps gets an idempotency key of
//! its own, extending the durable step's (never the durable step's key for every inner step),
//! distinct per `ForEach` instance, per inner attempt and per attempt of the durable step, and
//! the same when the durable step runs again after a crash.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flowdag::Worker;
use flowdag::prelude::*;
use flowdag::store::{MemoryStore, RunFilter, Store};

#[derive(Debug)]
struct Flaky;

impl std::fmt::Display for Flaky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the carrier hung up")
    }
}

impl std::error::Error for Flaky {}

/// The tests share the statics below: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The keys the inner steps saw, in order.
static KEYS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The durable step waits for ever after its plain run, once (the process "crashes" there).
static HANG: AtomicBool = AtomicBool::new(false);

/// Whether the inner `ship` of line 1 fails its first attempt, and the outer step its first.
static FAIL: Mutex<(bool, bool)> = Mutex::new((false, false));

fn seen(key: String) {
    KEYS.lock().unwrap_or_else(|p| p.into_inner()).push(key);
}

fn keys() -> Vec<String> {
    std::mem::take(&mut *KEYS.lock().unwrap_or_else(|p| p.into_inner()))
}

async fn pack(line: usize) -> Result<usize, Flaky> {
    seen(flowdag::attempt().map_or("none".into(), |a| a.key()));
    Ok(line)
}

async fn ship(line: usize) -> Result<usize, Flaky> {
    let attempt = flowdag::attempt();
    seen(attempt.as_ref().map_or("none".into(), |a| a.key()));
    let first = attempt.is_none_or(|a| a.attempt() == 1);
    let fail_first = FAIL.lock().unwrap_or_else(|p| p.into_inner()).0;
    match fail_first && line == 1 && first {
        true => Err(Flaky),
        false => Ok(line * 10),
    }
}

workflow! {
    /// Ships every line: a plain workflow, not journaled.
    Lines(count: usize) -> Vec<usize> {
        Sequential {
            packed = Operation(pack(count)),
            lines = ForEach(line in 0..packed) {
                shipped = Operation(ship(line), retries = 1, backoff = "0ms")
                => shipped
            },
        }
        => lines.clone()
    }
}

/// The durable step: runs `Lines` whole.
async fn ship_all(count: usize) -> Result<usize, Flaky> {
    let outer = flowdag::attempt().expect("a durable step");
    let shipped = Lines::run(count).await.map_err(|_| Flaky)?;
    // The durable step's own key is back once the plain run is polled.
    assert_eq!(flowdag::attempt(), Some(outer.clone()));
    if HANG.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    let fail_outer = FAIL.lock().unwrap_or_else(|p| p.into_inner()).1;
    if fail_outer && outer.attempt() == 1 {
        return Err(Flaky);
    }
    Ok(shipped.iter().sum())
}

workflow! {
    #[flow(durable)]
    Order(count: usize) -> usize {
        parcels = Operation(ship_all(count), retries = 1, backoff = "0ms")
        => parcels
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_inner_step_and_instance_has_its_own_key() {
    let _serial = SERIAL.lock().await;
    *FAIL.lock().unwrap_or_else(|p| p.into_inner()) = (true, false);
    keys();
    let store = MemoryStore::new();
    let total = Order::runner()
        .durable(&store, "order-1")
        .execute(3)
        .await
        .expect("the store works")
        .result
        .expect("the order ships");
    assert_eq!(total, 30);
    let mut keys = keys();
    keys.sort();
    assert_eq!(
        keys,
        [
            "order-1/parcels/1/lines[0]/shipped/1",
            "order-1/parcels/1/lines[1]/shipped/1",
            "order-1/parcels/1/lines[1]/shipped/2",
            "order-1/parcels/1/lines[2]/shipped/1",
            "order-1/parcels/1/packed/1",
        ]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_retry_of_the_durable_step_gives_new_keys() {
    let _serial = SERIAL.lock().await;
    *FAIL.lock().unwrap_or_else(|p| p.into_inner()) = (false, true);
    keys();
    let store = MemoryStore::new();
    let total = Order::runner()
        .durable(&store, "order-2")
        .execute(2)
        .await
        .expect("the store works")
        .result
        .expect("the second attempt succeeds");
    assert_eq!(total, 10);
    assert_eq!(
        keys(),
        [
            "order-2/parcels/1/packed/1",
            "order-2/parcels/1/lines[0]/shipped/1",
            "order-2/parcels/1/lines[1]/shipped/1",
            "order-2/parcels/2/packed/1",
            "order-2/parcels/2/lines[0]/shipped/1",
            "order-2/parcels/2/lines[1]/shipped/1",
        ]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_crash_in_the_durable_step_gives_the_same_keys_when_it_runs_again() {
    let _serial = SERIAL.lock().await;
    *FAIL.lock().unwrap_or_else(|p| p.into_inner()) = (false, false);
    keys();
    let store = MemoryStore::new();
    // A crash while the durable step runs: a worker executes the step as a task of a
    // distributed run and is dropped after the plain run's steps (`ship_all` waits then), as
    // a process killed; once its claim lapses another worker executes the step again, with
    // the same keys.
    HANG.store(true, Ordering::SeqCst);
    Order::runner()
        .durable(&store, "order-3")
        .distributed()
        .submit(2)
        .await
        .expect("submitted");
    let killed = Worker::new(store.clone())
        .register::<Order>()
        .task_lease(Duration::from_millis(100))
        .poll_interval(Duration::from_millis(5));
    let crashed = tokio::time::timeout(
        Duration::from_millis(300),
        killed.run(std::future::pending()),
    )
    .await;
    assert!(
        crashed.is_err(),
        "the worker was dropped while its task ran"
    );
    drop(killed);
    let before = keys();
    assert_eq!(
        before,
        [
            "order-3/parcels/1/packed/1",
            "order-3/parcels/1/lines[0]/shipped/1",
            "order-3/parcels/1/lines[1]/shipped/1",
        ]
    );
    let next = Worker::new(store.clone())
        .register::<Order>()
        .poll_interval(Duration::from_millis(5));
    let finished = async {
        for _ in 0..2_000 {
            let runs = store.list_runs(&RunFilter::default()).await.expect("lists");
            if runs.iter().all(|r| r.status.is_finished()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    next.run(finished).await.expect("the second worker runs");
    let total = Order::resume(&store, "order-3")
        .await
        .expect("the run is finished")
        .result
        .expect("and shipped");
    assert_eq!(total, 10);
    assert_eq!(keys(), before, "the step ran again with the same keys");
}

async fn book(line: usize) -> Result<usize, Flaky> {
    Ok(line)
}

async fn unbook(line: &usize) -> Result<(), Flaky> {
    let _ = line;
    seen(flowdag::attempt().map_or("none".into(), |a| a.key()));
    Ok(())
}

async fn refuse() -> Result<(), Flaky> {
    Err(Flaky)
}

workflow! {
    /// A plain saga: the booking is undone when the next step fails.
    Booking(line: usize) {
        Sequential {
            booked = Operation(book(line), compensate = unbook(&booked)),
            Operation(refuse()),
        }
    }
}

async fn book_all(line: usize) -> Result<bool, Flaky> {
    Ok(Booking::run(line).await.is_ok())
}

workflow! {
    #[flow(durable)]
    Trip(line: usize) -> bool {
        booked = Operation(book_all(line))
        => booked
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_compensation_inside_the_plain_run_has_its_own_key() {
    let _serial = SERIAL.lock().await;
    keys();
    let store = MemoryStore::new();
    let booked = Trip::runner()
        .durable(&store, "trip-1")
        .execute(4)
        .await
        .expect("the store works")
        .result
        .expect("the durable step ends");
    assert!(!booked, "the plain saga failed and compensated");
    assert_eq!(keys(), ["trip-1/booked/1/booked:compensate/1"]);
}

/// Outside a durable run there is no key, inside a plain run as anywhere else.
#[tokio::test(flavor = "current_thread")]
async fn a_plain_run_outside_a_durable_step_has_no_keys() {
    let _serial = SERIAL.lock().await;
    *FAIL.lock().unwrap_or_else(|p| p.into_inner()) = (false, false);
    keys();
    assert!(Lines::run(1).await.is_ok());
    assert_eq!(keys(), ["none", "none"]);
}
