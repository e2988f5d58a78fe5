//! A `Store` that passes every call to a `MemoryStore` and fails or shortens what a test asks
//! for: a commit (the process stops there), `continue_run`, the leases. Shared by the tests of
//! continuing as new, of child runs and of nest replays.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowdag::store::{
    Batch, Committed, ContinueRun, Created, DueTimer, Lease, Loaded, MemoryStore, NewRun,
    NewSignal, Owner, RunData, RunFilter, RunSummary, SignalSent, Store, StoreError, StoreFuture,
    StoredEvent, StoredSignal,
};

/// Which commits fail.
type FailCommit = Arc<dyn Fn(usize, &Batch) -> bool + Send + Sync>;

/// See the module's documentation.
#[derive(Clone)]
pub struct Faulty {
    /// The store every call goes to.
    pub inner: MemoryStore,
    /// The commits made (failed ones too).
    pub commits: Arc<AtomicUsize>,
    /// Whether commit number `n` (from 0) of `batch` fails with `StoreError::Closed`.
    fail_commit: FailCommit,
    /// How many of the next `continue_run` calls fail with `StoreError::Closed`.
    pub fail_continue: Arc<AtomicUsize>,
    /// The lease of each run, by id, in place of the caller's (`None`: the caller's).
    lease: Option<fn(&str) -> Duration>,
}

impl Faulty {
    /// A store that fails nothing.
    pub fn new() -> Faulty {
        Faulty {
            inner: MemoryStore::new(),
            commits: Arc::new(AtomicUsize::new(0)),
            fail_commit: Arc::new(|_, _| false),
            fail_continue: Arc::new(AtomicUsize::new(0)),
            lease: None,
        }
    }

    /// Fails the commits `fail` says.
    pub fn failing(
        mut self,
        fail: impl Fn(usize, &Batch) -> bool + Send + Sync + 'static,
    ) -> Faulty {
        self.fail_commit = Arc::new(fail);
        self
    }

    /// Gives each run the lease `lease` says.
    pub fn leases(mut self, lease: fn(&str) -> Duration) -> Faulty {
        self.lease = Some(lease);
        self
    }

    fn lease_of(&self, run: &str, asked: Duration) -> Duration {
        self.lease.map_or(asked, |lease| lease(run))
    }
}

/// Whether `left` was above 0, counting it down.
pub fn take(left: &AtomicUsize) -> bool {
    left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn closed<'a, T: Send + 'a>() -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Err(StoreError::Closed)))
}

impl Store for Faulty {
    fn create_run(&self, mut run: NewRun) -> StoreFuture<'_, Created> {
        run.lease = self.lease_of(&run.id, run.lease);
        self.inner.create_run(run)
    }
    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        self.inner.load_run(run, owner, self.lease_of(run, lease))
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
    fn commit(&self, mut batch: Batch) -> StoreFuture<'_, Committed> {
        let n = self.commits.fetch_add(1, Ordering::SeqCst);
        if (self.fail_commit)(n, &batch) {
            return closed();
        }
        batch.lease = self.lease_of(&batch.run, batch.lease);
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
        let lease = held
            .first()
            .map_or(lease, |held| self.lease_of(&held.run, lease));
        self.inner.heartbeat(owner, held, lease)
    }
    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        self.inner.release(owner, held)
    }
    fn reopen<'a>(&'a self, run: &'a str, marker: StoredEvent) -> StoreFuture<'a, RunSummary> {
        self.inner.reopen(run, marker)
    }
    fn continue_run<'a>(&'a self, lease: &'a Lease, next: ContinueRun) -> StoreFuture<'a, Lease> {
        if take(&self.fail_continue) {
            return closed();
        }
        self.inner.continue_run(lease, next)
    }
}
