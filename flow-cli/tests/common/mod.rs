//! What the command line's tests share.

// Each test target uses some of these, none all of them.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::prelude::*;
use flowdag_runtime::store::{
    Batch, Committed, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, Owner, RunData,
    RunFilter, RunSummary, SignalSent, Store, StoreError, StoreFuture, StoredEvent, StoredSignal,
};

/// A store whose commit number `fail_at` fails: the run stops there, as after a crash.
#[derive(Clone)]
pub struct Failing<S> {
    inner: S,
    commits: Arc<AtomicUsize>,
    fail_at: usize,
}

impl<S> Failing<S> {
    /// `inner`, whose commit number `fail_at` (counted from 0) fails.
    pub fn new(inner: S, fail_at: usize) -> Failing<S> {
        Failing {
            inner,
            commits: Arc::new(AtomicUsize::new(0)),
            fail_at,
        }
    }
}

impl<S: Store> Store for Failing<S> {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        self.inner.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        self.inner.load_run(run, owner, lease)
    }
    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
        self.inner.list_runs(filter)
    }
    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
        self.inner.events(run, from_seq)
    }
    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
        self.inner.run_data(run)
    }
    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        if self.commits.fetch_add(1, Ordering::SeqCst) == self.fail_at {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        self.inner.commit(batch)
    }
    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        self.inner.due_timers(horizon, limit)
    }
    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        self.inner.send_signal(signal)
    }
    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        self.inner.signals(run, after)
    }
    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        self.inner.heartbeat(owner, held, lease)
    }
    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        self.inner.release(owner, held)
    }
}

/// An output that a test reads while a command writes it from another thread (`flow show
/// --follow`).
#[derive(Clone, Default)]
pub struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);

impl Shared {
    /// What was written so far, as text.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits until `done` holds, looking every 10 ms, at most `looks` times; panics naming `what`
/// when it never does (a bound against a hang, not a measure of speed).
pub fn wait_until(what: &str, looks: u32, mut done: impl FnMut() -> bool) {
    for _ in 0..looks {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what}: not after {looks} looks");
}

/// The error of a step that never fails.
#[derive(Debug)]
pub struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

/// Fetches an order's item.
pub async fn fetch(order: u64) -> Result<String, Never> {
    Ok(format!("item-{order}"))
}

/// Ships an item.
pub async fn ship(item: &str) -> Result<String, Never> {
    Ok(format!("shipped {item}"))
}

workflow! {
    /// Fetches an order's item and ships it.
    #[flow(durable)]
    pub Order(order: u64) -> String {
        Sequential {
            item = Operation(fetch(order)),
            sent = Operation(ship(&item)),
        }
        => sent.clone()
    }
}
