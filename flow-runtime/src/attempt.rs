//! The attempt being polled, and its idempotency key ([`Attempt`], `flowdag::attempt()`).
//!
//! A durable run's journal polls each attempt of its nodes inside an [`AttemptCtx`] (its key,
//! the output to restore, the output it stored, a `Signal` step's exchange); a plain run made
//! inside such an attempt polls its own steps inside contexts whose keys extend it
//! ([`KeyScope`]). This module is plain data and a thread-local: the scheduler, below the
//! durable layer, sets it for the steps of such plain runs.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

/// The attempt a node of a durable run is making: read it with `flowdag::attempt()` to make the
/// operation's side effect idempotent.
///
/// A plain workflow run inside a durable step (`Operation(ship_all(..))` whose code awaits
/// `Lines::run(..)`) gives each of its own steps an attempt too, its key extending the durable
/// step's: `"{run}/{step}/{attempt}/{inner step}/{inner attempt}"`, and, inside the plain
/// run's `ForEach` instance 3 of `lines` (`Loop` iteration 7 of `poll`),
/// `"…/lines[3]/{inner step}/{inner attempt}"` (`"…/poll@7/…"`). The plain run is not
/// journaled: when the durable step runs again (a retry, or a resume after a crash), the
/// plain run runs again whole, its steps with the same keys as before (the same attempt of
/// the durable step), so a service that deduplicates by key does each thing once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    run: Arc<str>,
    node: &'static str,
    attempt: u32,
    /// An attempt of the node's compensation (`compensate = ..`), not of the node.
    compensation: bool,
    /// A step of a plain run inside a durable step: what its key starts with instead of the
    /// run's id (the durable step's key, and the instances around the step).
    scope: Option<Arc<str>>,
}

impl Attempt {
    /// `"{run}/{node}/{attempt}"`: the same for an attempt and for its re-execution after a
    /// crash, different for each retry. For an attempt of a compensation,
    /// `"{run}/{node}:compensate/{attempt}"`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.node_key(), self.attempt)
    }

    /// `"{run}/{node}"`: the same for every attempt of the node (one key across retries, as
    /// payment APIs want); `"{run}/{node}:compensate"` for its compensation.
    pub fn node_key(&self) -> String {
        let prefix = self.scope.as_deref().unwrap_or(&self.run);
        match self.compensation {
            true => format!("{prefix}/{}:compensate", self.node),
            false => format!("{prefix}/{}", self.node),
        }
    }

    /// Whether this is an attempt of the node's compensation rather than of the node.
    pub fn is_compensation(&self) -> bool {
        self.compensation
    }

    /// Makes this an attempt of the node's compensation.
    pub(crate) fn set_compensation(&mut self) {
        self.compensation = true;
    }

    /// The attempt's number, 1 for the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The run's id.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The node's name.
    pub fn node(&self) -> &'static str {
        self.node
    }
}

/// What the scheduler tells a node of a durable run while it polls it.
pub(crate) struct AttemptCtx {
    pub(crate) attempt: Attempt,
    /// Restore the node's output from these bytes instead of running it (`Some(empty)` for a
    /// node without output).
    pub(crate) restore: Option<Vec<u8>>,
    /// The output the node stored: (its type, its JSON).
    pub(crate) captured: Option<(&'static str, Vec<u8>)>,
    /// A durable `Signal` step's exchange with the scheduler (the journal's `SignalCtx`;
    /// `None` for every other node).
    pub(crate) signal: Option<Box<dyn Any + Send>>,
    /// A nest node of a durable run, or any node of one of its instances: where the
    /// instances it starts record their ends ([`Nested`]).
    pub(crate) nest: Option<Nested>,
    /// A `Workflow` step of a durable run: what its child run is started with (the
    /// journal's `ChildCtx`; `None` for every other node).
    pub(crate) child: Option<Arc<dyn Any + Send + Sync>>,
}

/// The ends of a durable run's nest instances (`ForEach` items, `Loop` iterations), shared
/// by the run's journal and the instances' futures: those the store had when the run was
/// loaded, and those that ended since and wait for the journal's next batch.
///
/// An instance is known by its *record*: its path with the attempt of each nest node on it
/// when that is not the first (`ship[3]`, `ship#2[3]`, `ship[3]/pack@2`; a `ForEach` or
/// `Loop` has no retries today, so the first is the only attempt), so that a nest
/// node's retry runs its instances again rather than taking the ends of the attempt before.
#[derive(Default)]
pub(crate) struct Records {
    inner: Mutex<RecordsInner>,
    /// The run is distributed: the instances of its own nests whose bodies may run anywhere
    /// are executed as tasks ([`Records::want`]).
    remote: AtomicBool,
}

#[derive(Default)]
struct RecordsInner {
    /// The ends loaded with the run, by nest node and record: the stored bytes.
    loaded: HashMap<(u32, String), Vec<u8>>,
    /// Ends since the journal last took them.
    ended: Vec<InstanceEnd>,
    /// An instance could not go on: the run must stop with this (record, reason).
    broken: Option<(String, String)>,
    /// Remote instances waiting for their task's outcome, by (nest node, record): the waker
    /// of the instance's future, and whether the journal has opened its task.
    waiting: HashMap<(u32, String), (Option<Waker>, bool)>,
    /// Remote instances that began to wait since the journal last looked ([`Records::tasks`]).
    fresh: Vec<(u32, String)>,
    /// Nest nodes whose instances run where the run is decided even in a distributed run (a
    /// `ForEach` over a stream: each worker would read the stream again up to its item).
    local: Vec<u32>,
    /// Remote instances dropped before their end since the journal last looked: their tasks
    /// are closed.
    dropped: Vec<(u32, String)>,
    /// Outcomes of remote instances' tasks handed over by the journal and not taken yet.
    outcomes: HashMap<(u32, String), Result<Vec<u8>, String>>,
    /// The ends stored inside instances that have not ended yet, by the record of the
    /// instance they are nested in (`poll@6` → `(node, poll@6/items[2])`): superseded with
    /// the end of that instance ([`Records::supersede`]).
    nested: HashMap<String, Vec<(u32, String)>>,
}

/// What the journal does with the remote instances since it last looked ([`Records::tasks`]).
#[derive(Default)]
pub(crate) struct InstanceTasks {
    /// (nest node, record) of the instances whose task is to be opened.
    pub(crate) open: Vec<(u32, String)>,
    /// (nest node, record) of the instances whose task is to be closed: dropped before their
    /// end.
    pub(crate) close: Vec<(u32, String)>,
}

/// One instance's end, for the journal's next batch.
pub(crate) struct InstanceEnd {
    /// The nest node, by index in its graph.
    pub(crate) node: u32,
    /// The instance's record.
    pub(crate) record: String,
    /// The type of its output.
    pub(crate) type_name: &'static str,
    /// Its end, serialized.
    pub(crate) bytes: Vec<u8>,
    /// It ran as a task: the batch that stores its end closes the task.
    pub(crate) remote: bool,
}

impl Records {
    /// The records of a run loaded with these ends ((nest node, record) → bytes).
    pub(crate) fn loaded(loaded: HashMap<(u32, String), Vec<u8>>) -> Records {
        let mut nested = HashMap::new();
        for (node, record) in loaded.keys() {
            nest_under_parent(&mut nested, *node, record);
        }
        Records {
            inner: Mutex::new(RecordsInner {
                loaded,
                nested,
                ..RecordsInner::default()
            }),
            remote: AtomicBool::new(false),
        }
    }

    /// The records of a distributed run: its nests' instances may run as tasks.
    pub(crate) fn set_remote(&self) {
        self.remote.store(true, Ordering::Relaxed);
    }

    /// Whether the instances of nest node `node` may run as tasks (the run is distributed,
    /// and the node's driver did not keep them here).
    pub(crate) fn is_remote(&self, node: u32) -> bool {
        self.remote.load(Ordering::Relaxed) && !self.lock().local.contains(&node)
    }

    /// The instances of nest node `node` run where the run is decided.
    pub(crate) fn keep_local(&self, node: u32) {
        if self.remote.load(Ordering::Relaxed) {
            let mut inner = self.lock();
            if !inner.local.contains(&node) {
                inner.local.push(node);
            }
        }
    }

    /// A remote instance waits for its task's outcome: the outcome, once the journal handed
    /// it over (taken: asked once); else the instance is woken by `waker` when it comes, and
    /// its task is opened with the journal's next batch.
    pub(crate) fn want(
        &self,
        node: u32,
        record: &str,
        waker: &Waker,
    ) -> Option<Result<Vec<u8>, String>> {
        let mut inner = self.lock();
        let key = (node, record.to_owned());
        if let Some(outcome) = inner.outcomes.remove(&key) {
            inner.waiting.remove(&key);
            return Some(outcome);
        }
        if !inner.waiting.contains_key(&key) {
            inner.fresh.push(key.clone());
        }
        let entry = inner.waiting.entry(key).or_insert((None, false));
        match &mut entry.0 {
            Some(known) if known.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        None
    }

    /// A remote instance is dropped before its outcome came: its task is closed.
    pub(crate) fn drop_wanted(&self, node: u32, record: &str) {
        let mut inner = self.lock();
        let key = (node, record.to_owned());
        inner.outcomes.remove(&key);
        if let Some((_, opened)) = inner.waiting.remove(&key)
            && opened
        {
            inner.dropped.push(key);
        }
    }

    /// The journal hands over the outcome of a remote instance's task (the end it stored, or
    /// why the task could not run it); `false` when no instance waits for it.
    pub(crate) fn deliver(
        &self,
        node: u32,
        record: &str,
        outcome: Result<Vec<u8>, String>,
    ) -> bool {
        let mut inner = self.lock();
        let key = (node, record.to_owned());
        let Some((waker, _)) = inner.waiting.get_mut(&key) else {
            return false;
        };
        if let Some(waker) = waker.take() {
            waker.wake();
        }
        inner.outcomes.insert(key, outcome);
        true
    }

    /// The remote instances whose tasks to open and to close since the last call.
    pub(crate) fn tasks(&self) -> InstanceTasks {
        let mut inner = self.lock();
        if inner.fresh.is_empty() && inner.dropped.is_empty() {
            return InstanceTasks::default();
        }
        let mut open = std::mem::take(&mut inner.fresh);
        open.retain(|key| match inner.waiting.get_mut(key) {
            Some((_, opened)) if !*opened => {
                *opened = true;
                true
            }
            _ => false,
        });
        // In the instances' order, so that the oldest task is claimed first.
        open.sort_by(|a, b| (a.0, instance_order(&a.1)).cmp(&(b.0, instance_order(&b.1))));
        InstanceTasks {
            open,
            close: std::mem::take(&mut inner.dropped),
        }
    }

    /// Whether a remote instance waits for an outcome not handed over yet (the outcomes
    /// handed over are those of waiting instances).
    pub(crate) fn awaits_outcomes(&self) -> bool {
        let inner = self.lock();
        inner.waiting.len() > inner.outcomes.len()
    }

    /// Whether instance `record` of nest node `node` waits for its task's outcome.
    pub(crate) fn waits(&self, node: u32, record: &str) -> bool {
        let key = (node, record.to_owned());
        let inner = self.lock();
        inner.waiting.contains_key(&key) && !inner.outcomes.contains_key(&key)
    }

    /// Whether nest node `node` waits for remote instances alone as far as the records
    /// know: some instance of it waits for its task, and no outcome is handed over and not
    /// taken.
    pub(crate) fn waits_for_tasks(&self, node: u32) -> bool {
        let inner = self.lock();
        inner.waiting.keys().any(|(n, _)| *n == node)
            && !inner.outcomes.keys().any(|(n, _)| *n == node)
    }

    fn lock(&self) -> MutexGuard<'_, RecordsInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The stored ends that the end of instance `record` of nest node `node` supersedes, as
    /// (node, record), for the batch that stores it ([`flowdag_store::Batch::superseded`]):
    /// the ends nested in it (its instance restores from its own end alone), and for a `Loop`
    /// iteration after the first, the iteration before (the loop goes on from this one).
    pub(crate) fn supersede(&self, node: u32, record: &str) -> Vec<(u32, String)> {
        let mut inner = self.lock();
        let mut superseded = inner.nested.remove(record).unwrap_or_default();
        nest_under_parent(&mut inner.nested, node, record);
        if let Some(before) = flowdag_store::previous_instance(record) {
            // The iteration before, once superseded, is no longer its parent's to supersede.
            if let Some((parent, _)) = before.rsplit_once('/')
                && let Some(ends) = inner.nested.get_mut(parent)
            {
                ends.retain(|(n, r)| !(*n == node && *r == before));
            }
            superseded.push((node, before));
        }
        superseded
    }

    /// The iteration of the `Loop` node `node` that a resumed loop goes on from, among the
    /// loaded records `prefix` + iteration (`poll@`): see [`loop_start`].
    fn loop_start(&self, node: u32, prefix: &str) -> Option<u64> {
        let inner = self.lock();
        let loaded = inner
            .loaded
            .keys()
            .filter(|(n, _)| *n == node)
            .filter_map(|(_, record)| record.strip_prefix(prefix)?.parse::<u64>().ok());
        loop_start(loaded)
    }

    /// The stored end of instance `record` of nest node `node`, if the run had one when it
    /// was loaded.
    pub(crate) fn loaded_end(&self, node: u32, record: &str) -> Option<Vec<u8>> {
        self.lock().loaded.get(&(node, record.to_owned())).cloned()
    }

    /// The stored ends of nest node `name`'s instances whose records are `within` the
    /// instance `within` (`""` for the run's own nests) under attempt `attempt` of the node:
    /// (index, bytes), by index.
    pub(crate) fn loaded_of(&self, within: &str, name: &str, attempt: u32) -> Vec<(u64, Vec<u8>)> {
        let head = match (within.is_empty(), attempt > 1) {
            (true, false) => name.to_owned(),
            (true, true) => format!("{name}#{attempt}"),
            (false, false) => format!("{within}/{name}"),
            (false, true) => format!("{within}/{name}#{attempt}"),
        };
        let mut ends: Vec<(u64, Vec<u8>)> = self
            .lock()
            .loaded
            .iter()
            .filter_map(|((_, record), bytes)| {
                let rest = record.strip_prefix(&head)?;
                let index = match rest.strip_prefix('[') {
                    Some(item) => item.strip_suffix(']')?,
                    None => rest.strip_prefix('@')?,
                };
                Some((index.parse().ok()?, bytes.clone()))
            })
            .collect();
        ends.sort_by_key(|(index, _)| *index);
        ends
    }

    /// An instance ended: its end goes into the journal's next batch.
    pub(crate) fn ended(&self, end: InstanceEnd) {
        self.lock().ended.push(end);
    }

    /// The ends since the last call.
    pub(crate) fn take_ended(&self) -> Vec<InstanceEnd> {
        std::mem::take(&mut self.lock().ended)
    }

    /// An instance cannot go on (`reason`): the run stops.
    pub(crate) fn break_on(&self, record: &str, reason: String) {
        self.lock()
            .broken
            .get_or_insert_with(|| (record.to_owned(), reason));
    }

    /// Why the run must stop, once an instance said so: (record, reason).
    pub(crate) fn broken(&self) -> Option<(String, String)> {
        self.lock().broken.clone()
    }
}

/// Where the instances a node starts record their ends: the run's [`Records`], and the record
/// of the run the node belongs to (empty for the durable run's own nodes).
#[derive(Clone)]
pub(crate) struct Nested {
    pub(crate) records: Arc<Records>,
    pub(crate) within: Arc<str>,
    /// A worker executes one instance of this nest node as a task: its index (the driver
    /// starts that instance alone, see [`solo`]).
    pub(crate) solo: Option<u64>,
}

/// The nest node being polled keeps its instances where the run is decided (see
/// [`Records::keep_local`]); nothing outside a durable run's own nest node.
pub(crate) fn keep_local(node: u32) {
    let _ = CURRENT.try_with(|c| {
        if let Some(nested) = c.borrow().as_ref().and_then(|ctx| ctx.nest.as_ref())
            && nested.within.is_empty()
        {
            nested.records.keep_local(node);
        }
    });
}

/// The instance of the nest node being polled that a worker executes as a task, if it does:
/// the node's driver starts that instance alone (a `ForEach` skips the items before it, a
/// `Loop` restores the iteration before it from the store and runs that one).
pub(crate) fn solo() -> Option<u64> {
    CURRENT
        .try_with(|c| c.borrow().as_ref()?.nest.as_ref()?.solo)
        .ok()
        .flatten()
}

/// Notes the end of `record` (of nest node `node`) under the instance it is nested in, if it
/// is (`poll@6/items[2]` under `poll@6`): that instance's end supersedes it.
fn nest_under_parent(nested: &mut HashMap<String, Vec<(u32, String)>>, node: u32, record: &str) {
    if let Some((parent, _)) = record.rsplit_once('/') {
        nested
            .entry(parent.to_owned())
            .or_default()
            .push((node, record.to_owned()));
    }
}

/// Where a resumed `Loop` goes on from, given the iterations whose ends were loaded: the first
/// of the unbroken run of iterations that ends with the last one loaded. A store loads a loop's
/// last ended iteration alone (the ends before it are superseded), so the loop restores that
/// one and runs on from it. A store that kept them all (`MemoryStore::loading_history`) gives
/// 0, and the loop walks them all. A run that was in a loop when its store was upgraded to
/// superseding ends keeps the ends from before the upgrade (`0..5`) beside the last one (`7`,
/// the ones between superseded since): the loop goes on from 7. `None` when none was loaded.
pub(crate) fn loop_start(loaded: impl Iterator<Item = u64>) -> Option<u64> {
    let mut loaded: Vec<u64> = loaded.collect();
    loaded.sort_unstable();
    let mut start = *loaded.last()?;
    for &k in loaded.iter().rev().skip(1) {
        if k + 1 != start {
            break;
        }
        start = k;
    }
    Some(start)
}

/// The iteration the `Loop` node being polled (`node` by name, `index` in its graph) goes on
/// from in a resumed run ([`loop_start`] of the iterations whose ends the run was loaded
/// with); `None` when none was loaded (the loop starts at 0).
pub(crate) fn resumed_iteration(node: &str, index: u32) -> Option<u64> {
    CURRENT
        .try_with(|c| {
            let c = c.borrow();
            let ctx = c.as_ref()?;
            let nested = ctx.nest.as_ref()?;
            let prefix = record_of(&nested.within, node, "@", ctx.attempt.attempt);
            nested.records.loop_start(index, &prefix)
        })
        .ok()
        .flatten()
}

/// The index of an instance of a run's own nest, from its record: `ship[3]` → 3, `poll@7`
/// → 7, `poll#2@7` → 7.
pub(crate) fn instance_index(record: &str) -> Option<u64> {
    if let Some(item) = record.strip_suffix(']') {
        return item.rsplit_once('[')?.1.parse().ok();
    }
    record.rsplit_once('@')?.1.parse().ok()
}

/// The order of an instance record's index (`ship[12]` after `ship[3]`), for sorting.
fn instance_order(record: &str) -> (u64, &str) {
    (instance_index(record).unwrap_or(0), record)
}

/// What an instance of a durable nest records its end under: the run's [`Records`], the nest
/// node (by index in its graph), and the instance's record. Not a public API: generated code
/// hands it from the instance's setup to its future.
#[doc(hidden)]
#[derive(Clone)]
pub struct InstanceRecord {
    pub(crate) records: Arc<Records>,
    pub(crate) node: u32,
    pub(crate) record: Arc<str>,
}

thread_local! {
    pub(crate) static CURRENT: RefCell<Option<AttemptCtx>> = const { RefCell::new(None) };
}

/// The attempt being polled, if any (`durable::attempt`).
pub(crate) fn current() -> Option<Attempt> {
    CURRENT.with(|c| c.borrow().as_ref().map(|ctx| ctx.attempt.clone()))
}

/// Polls `poll` with `ctx` as the current attempt; returns what it returned and the context
/// (with what the node captured).
pub(crate) fn with_attempt<R>(ctx: AttemptCtx, poll: impl FnOnce() -> R) -> (R, AttemptCtx) {
    struct Reset(Option<AttemptCtx>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            // Also on unwind: the scheduler catches a node's panic, the context must not stay.
            let _ = CURRENT.try_with(|c| c.replace(previous));
        }
    }
    let previous = CURRENT.with(|c| c.replace(Some(ctx)));
    let reset = Reset(previous);
    let result = poll();
    let ctx = CURRENT.with(|c| c.replace(None));
    drop(reset);
    (result, ctx.unwrap_or_else(unreachable_ctx))
}

#[cold]
fn unreachable_ctx() -> AttemptCtx {
    // Only a node that replaced the context itself could remove it; give an empty one back.
    attempt_ctx(&Arc::from(""), "", 0)
}

/// The keys of a plain run's steps when the run is made inside a durable step's attempt (see
/// [`Attempt`]): the durable run, and the prefix of every key of the plain run.
#[derive(Clone)]
pub(crate) struct KeyScope {
    run: Arc<str>,
    scope: Arc<str>,
    /// An instance of a durable run's nest: where it records its end, and where the
    /// instances of its own nests record theirs.
    pub(crate) record: Option<InstanceRecord>,
}

impl std::fmt::Debug for KeyScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyScope")
            .field("run", &self.run)
            .field("scope", &self.scope)
            .field("record", &self.record.as_ref().map(|r| &r.record))
            .finish()
    }
}

impl KeyScope {
    /// The scope of a plain run made while an attempt is polled: its keys extend that
    /// attempt's key. `None` outside any attempt.
    pub(crate) fn inside_attempt() -> Option<KeyScope> {
        CURRENT.with(|current| {
            let current = current.borrow();
            let attempt = &current.as_ref()?.attempt;
            Some(KeyScope {
                run: Arc::clone(&attempt.run),
                scope: Arc::from(attempt.key()),
                record: None,
            })
        })
    }

    /// The scope of an instance of the nest node being polled (named `node`, at `index` in
    /// its graph), the instance written `{node}{open}{number}{close}` (`lines[3]`, `poll@7`):
    /// its keys extend those of the run that holds the node. In a durable run's nest it
    /// records its end ([`InstanceRecord`]). `None` outside any attempt (and then nothing is
    /// written).
    pub(crate) fn instance(
        node: &str,
        (open, number, close): (&str, Option<u64>, &str),
        index: u32,
    ) -> Option<KeyScope> {
        CURRENT.with(|current| {
            let current = current.borrow();
            let ctx = current.as_ref()?;
            let instance = match number {
                Some(number) => format!("{open}{number}{close}"),
                None => String::new(),
            };
            let instance = instance.as_str();
            let attempt = &ctx.attempt;
            // A retry of the nest node runs its instances again: with new keys, as a retry of
            // any step gets (`lines#2[3]`).
            let retry = match attempt.attempt {
                0 | 1 => String::new(),
                n => format!("#{n}"),
            };
            let around = attempt.scope.as_deref().unwrap_or(&attempt.run);
            let record = ctx.nest.as_ref().map(|nested| InstanceRecord {
                records: Arc::clone(&nested.records),
                node: index,
                record: Arc::from(record_of(&nested.within, node, instance, attempt.attempt)),
            });
            Some(KeyScope {
                run: Arc::clone(&attempt.run),
                scope: Arc::from(format!("{around}/{node}{retry}{instance}")),
                record,
            })
        })
    }

    /// The context attempt `attempt` of step `node` of the plain run is polled with.
    pub(crate) fn ctx(&self, node: &'static str, attempt: u32) -> AttemptCtx {
        let mut ctx = attempt_ctx(&self.run, node, attempt);
        ctx.attempt.scope = Some(Arc::clone(&self.scope));
        ctx.nest = self.record.as_ref().map(|record| Nested {
            records: Arc::clone(&record.records),
            within: Arc::clone(&record.record),
            solo: None,
        });
        ctx
    }
}

/// Makes the context of an attempt of `node` in run `run`.
pub(crate) fn attempt_ctx(run: &Arc<str>, node: &'static str, attempt: u32) -> AttemptCtx {
    AttemptCtx {
        attempt: Attempt {
            run: Arc::clone(run),
            node,
            attempt,
            compensation: false,
            scope: None,
        },
        restore: None,
        captured: None,
        signal: None,
        nest: None,
        child: None,
    }
}

/// The record of instance `instance` (`[3]`, `@2`) of nest node `node` on attempt `attempt`,
/// inside the instance recorded as `within` (empty at the durable run's top): `ship[3]`,
/// `ship#2[3]`, `ship[3]/pack@2`.
fn record_of(within: &str, node: &str, instance: &str, attempt: u32) -> String {
    let mut record = String::with_capacity(within.len() + node.len() + instance.len() + 4);
    if !within.is_empty() {
        record.push_str(within);
        record.push('/');
    }
    record.push_str(node);
    if attempt > 1 {
        record.push('#');
        record.push_str(&attempt.to_string());
    }
    record.push_str(instance);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_goes_on_from_the_unbroken_iterations_ending_with_its_last() {
        let start = |loaded: &[u64]| loop_start(loaded.iter().copied());
        assert_eq!(start(&[]), None);
        assert_eq!(start(&[7]), Some(7));
        // Every end kept (a store that loads the history): walk them all.
        assert_eq!(start(&[3, 0, 2, 1]), Some(0));
        // Ends from before the store superseded any (0 to 4) beside the last one.
        assert_eq!(start(&[0, 1, 2, 3, 4, 7]), Some(7));
        assert_eq!(start(&[0, 1, 2, 6, 7]), Some(6));
    }

    #[test]
    fn an_end_supersedes_the_iteration_before_and_what_ended_inside_it() {
        let records = Records::loaded(HashMap::from([
            ((1, "poll@3".to_owned()), b"3".to_vec()),
            ((2, "poll@4/items[0]".to_owned()), b"0".to_vec()),
        ]));
        assert_eq!(records.supersede(0, "poll@0"), vec![]);
        // An inner end is kept until its instance ends.
        assert_eq!(records.supersede(2, "poll@4/items[1]"), vec![]);
        let mut ended = records.supersede(1, "poll@4");
        ended.sort();
        assert_eq!(
            ended,
            vec![
                (1, "poll@3".to_owned()),
                (2, "poll@4/items[0]".to_owned()),
                (2, "poll@4/items[1]".to_owned()),
            ]
        );
        // A loop inside an instance: each iteration supersedes the one before, and the
        // instance's end supersedes only the last one.
        assert_eq!(records.supersede(3, "ship[2]/poll@0"), vec![]);
        assert_eq!(
            records.supersede(3, "ship[2]/poll@1"),
            vec![(3, "ship[2]/poll@0".to_owned())]
        );
        assert_eq!(
            records.supersede(3, "ship[2]/poll@2"),
            vec![(3, "ship[2]/poll@1".to_owned())]
        );
        assert_eq!(
            records.supersede(4, "ship[2]"),
            vec![(3, "ship[2]/poll@2".to_owned())]
        );
    }
}
