//! What the command line's tests share.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
