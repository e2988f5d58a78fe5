//! Above a few operations in flight each operation has its own waker: when one is woken, the
//! run polls that one, not every operation in flight. A fan of gated operations, opened one at
//! a time, counts the polls; a wide fan with timeouts and retries checks that the timers of a
//! node wake that node.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use flowdag::prelude::*;

/// Gates that operations wait on, opened from outside, and a count of every poll they see.
struct Gates {
    open: Vec<AtomicBool>,
    wakers: Mutex<Vec<Option<Waker>>>,
    polls: AtomicUsize,
}

impl Gates {
    fn new(len: usize) -> Arc<Gates> {
        Arc::new(Gates {
            open: (0..len).map(|_| AtomicBool::new(false)).collect(),
            wakers: Mutex::new(vec![None; len]),
            polls: AtomicUsize::new(0),
        })
    }

    fn open(&self, gate: usize) {
        self.open[gate].store(true, Ordering::SeqCst);
        let waker = self.wakers.lock().expect("gates")[gate].take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Waits until its gate is open, counting its polls.
struct Gate<'a> {
    gates: &'a Gates,
    gate: usize,
}

impl Future for Gate<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.gates.polls.fetch_add(1, Ordering::SeqCst);
        let mut wakers = self.gates.wakers.lock().expect("gates");
        if self.gates.open[self.gate].load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        wakers[self.gate] = Some(cx.waker().clone());
        Poll::Pending
    }
}

async fn wait(gates: &Gates, gate: usize) -> Result<usize, Infallible> {
    Gate { gates, gate }.await;
    Ok(gate)
}

const GATES: usize = 24;

macro_rules! fan {
    ($($gate:literal)*) => {
        workflow! {
            /// Every operation waits on its own gate.
            Fan(gates: Arc<Gates>) {
                Parallel {
                    $( Operation(wait(&gates, $gate)), )*
                }
            }
        }
    };
}

fan!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23);

/// Opens every gate, last first, one per turn of the runtime.
async fn open_all(gates: Arc<Gates>) {
    for gate in (0..GATES).rev() {
        gates.open(gate);
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_woken_operation_is_polled_alone() {
    let gates = Gates::new(GATES);
    let opener = tokio::spawn(open_all(gates.clone()));
    Fan::run(gates.clone()).await.expect("the fan succeeds");
    opener.await.expect("the opener");
    let polls = gates.polls.load(Ordering::SeqCst);
    // One poll to start each operation and one after its gate opened: 48. Polling every
    // operation in flight on every wake-up makes 24 + (24 + 23 + .. + 1) = 324.
    assert!(
        (GATES..=2 * GATES).contains(&polls),
        "{polls} polls for {GATES} gates opened one at a time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakes_from_other_threads_are_not_lost() {
    // Miri runs one round: every interleaving it picks is a different one anyway.
    for _ in 0..if cfg!(miri) { 1 } else { 20 } {
        let gates = Gates::new(GATES);
        let opener = std::thread::spawn({
            let gates = gates.clone();
            move || {
                for gate in 0..GATES {
                    gates.open(gate);
                    std::thread::yield_now();
                }
            }
        });
        // A lost wake-up would leave the run pending forever: fail instead of hanging.
        let run = tokio::time::timeout(Duration::from_secs(60), Fan::run(gates.clone()));
        run.await
            .expect("a lost wake-up: the run never finished")
            .expect("the fan succeeds");
        opener.join().expect("the opener");
        assert!(gates.polls.load(Ordering::SeqCst) <= 2 * GATES);
    }
}

/// Fails its first attempt, after sleeping a little.
#[derive(Debug)]
struct Flaked;

impl std::fmt::Display for Flaked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("flaked")
    }
}

impl std::error::Error for Flaked {}

/// Attempts per operation of the wide fan.
struct Attempts(Vec<AtomicUsize>);

async fn flaky(attempts: &Attempts, index: usize) -> Result<usize, Flaked> {
    tokio::time::sleep(Duration::from_millis(1 + index as u64)).await;
    match attempts.0[index].fetch_add(1, Ordering::SeqCst) {
        0 => Err(Flaked),
        _ => Ok(index),
    }
}

async fn slow() -> Result<(), Infallible> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

macro_rules! wide {
    ($($index:literal)*) => {
        workflow! {
            /// More operations in flight than share the run's waker, each with its own timers.
            Wide(attempts: Arc<Attempts>) {
                Parallel {
                    $( Operation(flaky(&attempts, $index), retries = 1, backoff = "3ms"), )*
                    late = Operation(slow(), timeout = "50ms"),
                }
            }
        }
    };
}

wide!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23);

#[cfg_attr(miri, ignore = "tokio's timers are not run under miri")]
#[tokio::test(start_paused = true)]
async fn timers_of_a_node_wake_that_node() {
    let attempts = Arc::new(Attempts((0..GATES).map(|_| AtomicUsize::new(0)).collect()));
    // A timer that woke nobody would leave the run pending; the paused clock then jumps to
    // this limit and the test fails instead of hanging.
    let outcome = tokio::time::timeout(
        Duration::from_secs(3600),
        Wide::runner().execute(attempts.clone()),
    )
    .await
    .expect("a lost timer wake-up: the run never finished");
    let report = &outcome.report;
    for node in report.nodes() {
        if node.name == "late" {
            assert_eq!(node.status, NodeStatus::Failed);
            assert!(
                node.error
                    .as_deref()
                    .is_some_and(|e| e.contains("timed out")),
                "{node:?}"
            );
        } else {
            assert_eq!(node.status, NodeStatus::Completed, "{node:?}");
            assert_eq!(node.attempts, 2, "{node:?}");
            assert_eq!(node.failed_attempts, [Arc::from("flaked")], "{node:?}");
        }
    }
    assert_eq!(report.nodes().len(), GATES + 1);
    assert!(outcome.result.is_err(), "the timed-out node fails the run");
    for count in &attempts.0 {
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }
}

/// Never finishes and never wakes anyone: only its deadline, an `#[operation]` default, ends it.
#[operation(deadline = "50ms")]
async fn hangs() -> Result<(), Infallible> {
    std::future::pending::<()>().await;
    Ok(())
}

workflow! {
    /// One hanging operation alone: it shares the run's waker.
    Alone() {
        stuck = Operation(hangs())
    }
}

macro_rules! crowd {
    ($($index:literal)*) => {
        workflow! {
            /// A hanging operation among more than share the run's waker.
            Crowd(attempts: Arc<Attempts>) {
                Parallel {
                    $( Operation(flaky(&attempts, $index), retries = 1), )*
                    stuck = Operation(hangs()),
                }
            }
        }
    };
}

crowd!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23);

/// The status, error and end (on the run's clock) of the node named `stuck`.
fn stuck(report: &flowdag::Report) -> (NodeStatus, Option<Arc<str>>, Option<Duration>) {
    let node = report
        .nodes()
        .iter()
        .find(|node| node.name == "stuck")
        .expect("a node named stuck");
    (node.status, node.error.clone(), node.ended)
}

#[cfg_attr(miri, ignore = "tokio's timers are not run under miri")]
#[tokio::test(start_paused = true)]
async fn an_operation_default_deadline_ends_a_node_that_nobody_wakes() {
    // On the paused clock a hung run makes the guard jump an hour ahead (and poll the run once
    // more on the way out), so the check is on the report's clock: the node must end at its
    // 50 ms deadline, not when the guard fires.
    let limit = Duration::from_secs(3600);
    let alone = tokio::time::timeout(limit, Alone::runner().execute(()))
        .await
        .expect("the deadline never fired: the run hung");
    let attempts = Arc::new(Attempts((0..GATES).map(|_| AtomicUsize::new(0)).collect()));
    let crowd = tokio::time::timeout(limit, Crowd::runner().execute(attempts))
        .await
        .expect("the deadline never fired among many: the run hung");
    for outcome in [&alone.report, &crowd.report] {
        let (status, error, ended) = stuck(outcome);
        assert_eq!(status, NodeStatus::Failed);
        assert_eq!(ended, Some(Duration::from_millis(50)), "{error:?}");
        assert!(
            error.as_deref().is_some_and(|e| e.contains("deadline")),
            "{error:?}"
        );
    }
}
