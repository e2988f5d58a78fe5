//! The run future is `Send` when the operations' futures are, so it can be spawned on a
//! multi-thread runtime; a workflow whose operations hold an `Rc` still runs on one thread.

#[macro_use]
mod common;

use std::rc::Rc;
use std::sync::Arc;

use flowdag::prelude::*;

use common::{Boom, Log, require_send};

/// Logs start and end around a yield, so the operation really suspends.
async fn step(log: &Log, name: &'static str, n: u64) -> Result<u64, Boom> {
    log.record(name, "start");
    tokio::task::yield_now().await;
    log.record(name, "end");
    Ok(n)
}

async fn add(log: &Log, name: &'static str, a: &u64, b: &u64) -> Result<u64, Boom> {
    log.record(name, "start");
    tokio::task::yield_now().await;
    log.record(name, "end");
    Ok(a + b)
}

workflow! {
    /// Every operation's future is `Send` (`&Log` is `Send`: the log is a `Mutex`).
    Sendable(log: &Log, base: u64) -> u64 {
        Sequential {
            Parallel {
                a = Operation(step(log, "a", base)),
                b = Operation(step(log, "b", base * 10)),
            },
            sum = Operation(add(log, "sum", &a, &b)),
        }
        => sum
    }
}

/// Holds an `Rc` across an await: its future is not `Send`.
async fn local_step(n: &u64) -> Result<u64, Boom> {
    let shared = Rc::new(*n);
    tokio::task::yield_now().await;
    Ok(*shared + 1)
}

workflow! {
    /// Its operations hold an `Rc` across an await, so its run future is not `Send`.
    Local(n: u64) -> u64 {
        Sequential {
            a = Operation(local_step(&n)),
            b = Operation(local_step(&a)),
        }
        => b
    }
}

#[test]
fn run_future_is_send_when_operations_are() {
    let log = Log::new();
    // Compiles only if the futures are `Send`.
    let run = require_send(Sendable::run(&log, 1));
    let execute = require_send(Sendable::runner().execute((&log, 1)));
    assert!(is_send!(run));
    assert!(is_send!(execute));
    drop((run, execute));
    // Never polled: nothing ran.
    assert!(log.events().is_empty());
}

#[test]
fn run_future_with_an_rc_inside_an_operation_is_not_send() {
    let local = Local::run(1);
    assert!(!is_send!(local));
    let sendable_log = Log::new();
    let sendable = Sendable::run(&sendable_log, 1);
    // The probe tells the two apart, so the assertion above is meaningful.
    assert!(is_send!(sendable));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_run_future_runs_on_a_spawned_task() {
    let log = Arc::new(Log::new());
    let task_log = Arc::clone(&log);
    let handle = tokio::spawn(async move { Sendable::run(&task_log, 4).await });
    let sum = handle
        .await
        .expect("the task did not panic")
        .expect("the run succeeds");
    assert_eq!(sum, 44);
    let mut started = log.started();
    started.sort_unstable();
    assert_eq!(started, vec!["a", "b", "sum"]);
    assert!(log.index("a", "end") < log.index("sum", "start"));
    assert!(log.index("b", "end") < log.index("sum", "start"));

    // Several runs at once on the worker threads.
    let handles: Vec<_> = (0..8u64)
        .map(|base| {
            let log = Arc::new(Log::new());
            tokio::spawn(async move { Sendable::run(&log, base).await })
        })
        .collect();
    for (base, handle) in (0..8u64).zip(handles) {
        let sum = handle.await.expect("no panic").expect("run succeeds");
        assert_eq!(sum, base * 11);
    }
}

#[tokio::test]
async fn rc_workflow_runs_on_a_current_thread_runtime() {
    // 1 -> 2 -> 3
    let b = Local::run(1).await.expect("the run succeeds");
    assert_eq!(b, 3);
}

#[tokio::test]
async fn rc_workflow_runs_on_a_local_set() {
    let local = tokio::task::LocalSet::new();
    let b = local
        .run_until(async { tokio::task::spawn_local(Local::run(10)).await })
        .await
        .expect("the local task did not panic")
        .expect("the run succeeds");
    assert_eq!(b, 12);
}
