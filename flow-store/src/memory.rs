//! `MemoryStore`: a [`Store`] in this process's memory, for tests and for runs that need the
//! journal's semantics without a disk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{
    Batch, Committed, ContinueRun, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, NodeRow,
    Owner, RunData, RunEnd, RunFilter, RunStatus, RunSummary, SignalMode, SignalSent, Store,
    StoreError, StoreFuture, StoredEvent, StoredOutput, StoredSignal, StoredTimer, TaskChange,
    TaskClaim, TaskCommitted, TaskInputs, TaskOutcome, TaskResult, TimerChange, TimerKey,
    WaitChange, WorkflowVersion, due_after, now_ms,
};

/// A [`Store`] in memory: everything a durable run stores, lost with the process. Cheap to
/// clone (the clones share the runs). It passes the same contract suite as the stores on disk.
///
/// ```
/// use flowdag_store::{MemoryStore, RunFilter, Store};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// assert!(store.list_runs(&RunFilter::default()).await.unwrap().is_empty());
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    runs: BTreeMap<String, RunRow>,
    /// Every signal sent, by id, with whether it was consumed.
    signals: BTreeMap<u64, (StoredSignal, bool)>,
    next_signal: u64,
    /// The tasks of distributed runs, by (run, node, instance).
    tasks: BTreeMap<TaskKey, TaskRow>,
    /// The order tasks were opened in (claims take the oldest first).
    next_task: u64,
    /// The last task version given: versions come from one counter, so a claim on a task
    /// that was closed and opened again never matches the new task.
    task_versions: u64,
    /// Loads read the whole history ([`MemoryStore::loading_history`]).
    history: bool,
}

/// A task's name: its run, its node, and the nest instance it runs (empty for the node's own).
type TaskKey = (String, u32, String);

#[derive(Debug)]
struct TaskRow {
    attempt: u32,
    version: u64,
    opened: u64,
    /// When it was opened (the store's clock).
    opened_ms: u64,
    state: TaskState,
}

#[derive(Debug)]
enum TaskState {
    Ready,
    Running { owner: Owner, until: u64 },
    Done { outcome: TaskOutcome, at: u64 },
}

#[derive(Debug)]
struct RunRow {
    summary: RunSummary,
    input: Vec<u8>,
    options: Vec<u8>,
    nodes: Vec<NodeRow>,
    events: Vec<StoredEvent>,
    outputs: BTreeMap<(u32, String), StoredOutput>,
    /// The positions in `events` of the run's own events (not its nest instances'): what a
    /// load reads, without going through the instances' events.
    own: Vec<usize>,
    /// The keys of the outputs a load reads: not those superseded ([`Batch::superseded`]).
    live: BTreeSet<(u32, String)>,
    timers: BTreeMap<TimerKey, u64>,
    waits: BTreeMap<(u32, String), String>,
    end: Option<RunEnd>,
}

impl RunRow {
    /// Appends events to the journal.
    fn append(&mut self, events: impl IntoIterator<Item = StoredEvent>) {
        for event in events {
            if event.path.is_none() {
                self.own.push(self.events.len());
            }
            self.events.push(event);
        }
    }

    /// What executing the task of `node` (instance `instance`) reads, as PostgreSQL's claim
    /// reads it: the run's input, the outputs of the node's predecessors, and for a `Loop`
    /// iteration the end of the iteration before it ([`crate::previous_instance`]).
    fn inputs_of(&self, node: u32, instance: &str) -> TaskInputs {
        let preds = self
            .nodes
            .iter()
            .find(|row| row.node == node)
            .map_or(&[][..], |row| row.preds.as_slice());
        let mut outputs: Vec<StoredOutput> = preds
            .iter()
            .filter_map(|&pred| self.outputs.get(&(pred, String::new())))
            .cloned()
            .collect();
        if let Some(prev) = crate::previous_instance(instance)
            && let Some(end) = self.outputs.get(&(node, prev))
        {
            outputs.push(end.clone());
        }
        TaskInputs {
            graph_hash: self.summary.graph_hash,
            input: self.input.clone(),
            outputs,
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store whose [`Store::load_run`] reads a run's whole history, as a store that keeps no
    /// decided state would: every event (its nest instances' too) and every stored end (the
    /// superseded ones too, [`Batch::superseded`]). A resumed run then replays everything from
    /// its first event and walks every `Loop` from its first iteration. For tests that check
    /// that a resume from the decided state decides as a replay of the whole history does.
    pub fn loading_history(self) -> MemoryStore {
        self.state().history = true;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every change is applied whole before the guard drops (no code between two writes
        // can panic), so a poisoned lock holds a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn ready<'a, T: Send + 'a>(result: Result<T, StoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(result))
}

fn not_found(run: &str) -> StoreError {
    StoreError::NotFound {
        run: run.to_owned(),
    }
}

impl State {
    fn row(&self, run: &str) -> Result<&RunRow, StoreError> {
        self.runs.get(run).ok_or_else(|| not_found(run))
    }

    fn open_signals(&self, run: &str, after: u64) -> Vec<StoredSignal> {
        self.signals
            .range(after.saturating_add(1)..)
            .filter(|(_, (signal, consumed))| !consumed && signal.run == run)
            .map(|(_, (signal, _))| signal.clone())
            .collect()
    }

    /// The run's wake time: its earliest timer, or the arrival of its first open signal that a
    /// step waits for.
    fn wake_at(&self, run: &str) -> Option<u64> {
        let row = self.runs.get(run)?;
        let timer = row.timers.values().min().copied();
        let signal = self
            .open_signals(run, 0)
            .into_iter()
            .find(|s| {
                super::requests::is_request(&s.name) || row.waits.values().any(|n| *n == s.name)
            })
            .map(|s| s.sent_ms);
        let task = self
            .task_range(run)
            .filter_map(|(_, task)| match task.state {
                TaskState::Done { at, .. } => Some(at),
                _ => None,
            })
            .min();
        [timer, signal, task].into_iter().flatten().min()
    }

    fn task_range(&self, run: &str) -> impl Iterator<Item = (&TaskKey, &TaskRow)> {
        self.tasks
            .range((run.to_owned(), 0, String::new())..)
            .take_while(move |((r, _, _), _)| r == run)
    }

    fn create(&mut self, run: NewRun) -> Result<Created, StoreError> {
        if let Some(row) = self.runs.get(&run.id) {
            return Ok(Created::Exists(row.summary.clone()));
        }
        let mut check = Batch::new(
            &Lease {
                run: run.id.clone(),
                owner: run.owner.clone(),
                version: 1,
                until_ms: 0,
            },
            0,
            run.lease,
        );
        check.events = run.events;
        check.check_numbering()?;
        let now = now_ms();
        let until = due_after(now, run.lease);
        let next_seq = check.events.len() as u64;
        let mut row = RunRow {
            summary: RunSummary {
                id: run.id.clone(),
                workflow: run.workflow,
                graph_hash: run.graph_hash,
                input_hash: run.input_hash,
                status: RunStatus::Running,
                next_seq,
                version: 1,
                owner: Some(run.owner.as_str().to_owned()),
                lease_until_ms: Some(until),
                wake_at_ms: None,
                created_ms: now,
                updated_ms: now,
            },
            input: run.input,
            options: run.options,
            nodes: run.nodes,
            events: Vec::new(),
            own: Vec::new(),
            outputs: BTreeMap::new(),
            live: BTreeSet::new(),
            timers: BTreeMap::new(),
            waits: BTreeMap::new(),
            end: None,
        };
        row.append(check.events);
        apply_timers(&mut row.timers, run.timers, now);
        self.runs.insert(run.id.clone(), row);
        self.set_wake(&run.id);
        Ok(Created::New {
            lease: Lease {
                run: run.id,
                owner: run.owner,
                version: 1,
                until_ms: until,
            },
            next_seq,
        })
    }

    fn set_wake(&mut self, run: &str) {
        let wake = self.wake_at(run);
        if let Some(row) = self.runs.get_mut(run) {
            row.summary.wake_at_ms = wake;
        }
    }

    fn load(&mut self, run: &str, owner: &Owner, lease: Duration) -> Result<Loaded, StoreError> {
        let now = now_ms();
        let signals = self.open_signals(run, 0);
        let tasks = self.results(run);
        let history = self.history;
        let row = self.runs.get_mut(run).ok_or_else(|| not_found(run))?;
        // A finished run's lease guards nothing: its result is read whoever held it last.
        if let (Some(holder), Some(until)) = (&row.summary.owner, row.summary.lease_until_ms)
            && holder != owner.as_str()
            && until > now
            && !row.summary.status.is_finished()
        {
            return Err(StoreError::Busy {
                run: run.to_owned(),
                owner: holder.clone(),
                until_ms: until,
            });
        }
        let until = due_after(now, lease);
        row.summary.version += 1;
        row.summary.owner = Some(owner.as_str().to_owned());
        row.summary.lease_until_ms = Some(until);
        row.summary.updated_ms = now;
        Ok(Loaded {
            run: row.summary.clone(),
            lease: Lease {
                run: run.to_owned(),
                owner: owner.clone(),
                version: row.summary.version,
                until_ms: until,
            },
            input: row.input.clone(),
            options: row.options.clone(),
            nodes: row.nodes.clone(),
            events: match history {
                true => row.events.clone(),
                false => row
                    .own
                    .iter()
                    .filter_map(|&at| row.events.get(at))
                    .cloned()
                    .collect(),
            },
            next_seq: row.summary.next_seq,
            outputs: match history {
                true => row.outputs.values().cloned().collect(),
                false => row
                    .live
                    .iter()
                    .filter_map(|key| row.outputs.get(key))
                    .cloned()
                    .collect(),
            },
            timers: row
                .timers
                .iter()
                .map(|(key, due)| StoredTimer {
                    key: key.clone(),
                    due_ms: *due,
                })
                .collect(),
            waits: row
                .waits
                .iter()
                .map(|((node, instance), name)| (*node, instance.clone(), name.clone()))
                .collect(),
            signals,
            tasks,
            end: row.end.clone(),
            now_ms: now,
        })
    }

    fn commit(&mut self, batch: Batch) -> Result<Committed, StoreError> {
        let row = self.row(&batch.run)?;
        batch.check_numbering()?;
        let next = row.summary.next_seq;
        if let Some(done) = batch.replayed(next, |seq| row.events.get(seq as usize))? {
            return Ok(done);
        }
        batch.check_lease(&row.summary)?;
        if row.summary.status.is_finished() {
            return Err(StoreError::Finished { run: batch.run });
        }
        if batch.first_seq != next {
            return Err(batch.gap(next));
        }
        for id in &batch.consumed {
            match self.signals.get(id) {
                Some((signal, false)) if signal.run == batch.run => {}
                _ => {
                    return Err(StoreError::SignalTaken {
                        run: batch.run,
                        signal: *id,
                    });
                }
            }
        }
        // Checked: apply.
        for id in &batch.consumed {
            if let Some((_, consumed)) = self.signals.get_mut(id) {
                *consumed = true;
            }
        }
        let now = now_ms();
        let run = batch.run;
        let Some(row) = self.runs.get_mut(&run) else {
            return Err(not_found(&run));
        };
        if !batch.renumber.is_empty() {
            let map = |node: u32| crate::renumbered(&batch.renumber, node);
            for event in row.events.iter_mut().filter(|e| e.path.is_none()) {
                event.node = event.node.map(map);
            }
            row.outputs = std::mem::take(&mut row.outputs)
                .into_values()
                .map(|mut output| {
                    if crate::own_output(&output.instance) {
                        output.node = map(output.node);
                    }
                    ((output.node, output.instance.clone()), output)
                })
                .collect();
            row.live = std::mem::take(&mut row.live)
                .into_iter()
                .map(|(node, instance)| match crate::own_output(&instance) {
                    true => (map(node), instance),
                    false => (node, instance),
                })
                .collect();
            row.timers = std::mem::take(&mut row.timers)
                .into_iter()
                .map(|(mut key, due)| {
                    key.node = key.node.map(map);
                    (key, due)
                })
                .collect();
            row.waits = std::mem::take(&mut row.waits)
                .into_iter()
                .map(|((node, instance), name)| ((map(node), instance), name))
                .collect();
            let keys: Vec<TaskKey> = self.task_range(&run).map(|(k, _)| k.clone()).collect();
            let moved: Vec<(u32, String, TaskRow)> = keys
                .into_iter()
                .filter_map(|key| {
                    let task = self.tasks.remove(&key)?;
                    Some((map(key.1), key.2, task))
                })
                .collect();
            for (node, instance, task) in moved {
                self.tasks.insert((run.clone(), node, instance), task);
            }
        }
        let Some(row) = self.runs.get_mut(&run) else {
            return Err(not_found(&run));
        };
        row.append(batch.events);
        for output in batch.outputs {
            row.live.insert((output.node, output.instance.clone()));
            row.outputs
                .insert((output.node, output.instance.clone()), output);
        }
        for key in &batch.superseded {
            row.live.remove(key);
        }
        apply_timers(&mut row.timers, batch.timers, now);
        for change in batch.waits {
            match change {
                WaitChange::Open {
                    node,
                    instance,
                    name,
                } => {
                    row.waits.insert((node, instance), name);
                }
                WaitChange::Close { node, instance } => {
                    row.waits.remove(&(node, instance));
                }
            }
        }
        if let Some(status) = batch.status {
            row.summary.status = status;
        }
        if let Some((hash, nodes)) = batch.graph {
            row.summary.graph_hash = hash;
            row.nodes = nodes;
        }
        let ended = batch.end.is_some();
        if ended {
            row.end = batch.end;
        }
        row.summary.next_seq = row.events.len() as u64;
        row.summary.lease_until_ms = Some(due_after(now, batch.lease));
        row.summary.updated_ms = now;
        let next_seq = row.summary.next_seq;
        // The last change of each task holds (as a store applying them at once would): a
        // close followed by an open of the same attempt keeps the task.
        let mut last: Vec<Option<TaskChange>> = Vec::with_capacity(batch.tasks.len());
        let mut at: HashMap<(u32, String), usize> = HashMap::new();
        for change in batch.tasks {
            let key = match &change {
                TaskChange::Open { node, instance, .. } | TaskChange::Close { node, instance } => {
                    (*node, instance.clone())
                }
            };
            if let Some(earlier) = at.insert(key, last.len()) {
                last[earlier] = None;
            }
            last.push(Some(change));
        }
        for change in last.into_iter().flatten() {
            match change {
                TaskChange::Open {
                    node,
                    instance,
                    attempt,
                } => {
                    let key = (run.clone(), node, instance);
                    if self.tasks.get(&key).is_some_and(|t| t.attempt == attempt) {
                        continue;
                    }
                    self.next_task += 1;
                    self.task_versions += 1;
                    let task = TaskRow {
                        attempt,
                        version: self.task_versions,
                        opened: self.next_task,
                        opened_ms: now_ms(),
                        state: TaskState::Ready,
                    };
                    self.tasks.insert(key, task);
                }
                TaskChange::Close { node, instance } => {
                    self.tasks.remove(&(run.clone(), node, instance));
                }
            }
        }
        if ended {
            self.tasks.retain(|(r, _, _), _| *r != run);
        }
        self.set_wake(&run);
        Ok(Committed::Applied { next_seq })
    }

    fn reopen(&mut self, run: &str, marker: StoredEvent) -> Result<RunSummary, StoreError> {
        let row = self.row(run)?;
        let status = row.summary.status;
        if !matches!(
            status,
            RunStatus::Failed | RunStatus::Cancelled | RunStatus::Succeeded
        ) {
            return Err(StoreError::WrongStatus {
                run: run.to_owned(),
                status,
                needs: crate::REOPENS,
            });
        }
        let next = row.summary.next_seq;
        if marker.seq != next {
            return Err(StoreError::Conflict {
                run: run.to_owned(),
                expected: next,
                found: marker.seq,
                why: "the journal changed since it was read".to_owned(),
            });
        }
        let now = now_ms();
        // Requests left from before (never carried out) would stop the redriven run at once.
        for (signal, consumed) in self.signals.values_mut() {
            if signal.run == run && super::requests::is_request(&signal.name) {
                *consumed = true;
            }
        }
        let Some(row) = self.runs.get_mut(run) else {
            return Err(not_found(run));
        };
        row.append([marker]);
        row.end = None;
        let summary = &mut row.summary;
        summary.status = RunStatus::Running;
        summary.next_seq = next + 1;
        summary.owner = None;
        summary.lease_until_ms = None;
        summary.updated_ms = now;
        let summary = summary.clone();
        self.set_wake(run);
        Ok(summary)
    }

    fn continue_run(&mut self, lease: &Lease, next: ContinueRun) -> Result<Lease, StoreError> {
        let run = lease.run.as_str();
        let row = self.row(run)?;
        let check = Batch::new(lease, next.next_seq, next.lease);
        check.check_lease(&row.summary)?;
        if row.summary.status.is_finished() {
            return Err(StoreError::Finished {
                run: run.to_owned(),
            });
        }
        if next.next_seq != row.summary.next_seq {
            return Err(check.gap(row.summary.next_seq));
        }
        if let Some(archive) = &next.archive
            && self.runs.contains_key(archive)
        {
            return Err(StoreError::Invalid {
                why: format!(
                    "run `{run}` cannot keep its ended generation as `{archive}`: a run of that id exists"
                ),
            });
        }
        // Checked: apply.
        let now = now_ms();
        let Some(row) = self.runs.get_mut(run) else {
            return Err(not_found(run));
        };
        let events = std::mem::take(&mut row.events);
        let own = std::mem::take(&mut row.own);
        let outputs = std::mem::take(&mut row.outputs);
        let live = std::mem::take(&mut row.live);
        let input = std::mem::replace(&mut row.input, next.input);
        let options = std::mem::replace(&mut row.options, next.options);
        row.timers.clear();
        row.waits.clear();
        row.end = None;
        apply_timers(&mut row.timers, next.timers, now);
        let version = row.summary.version + 1;
        let until = due_after(now, next.lease);
        let ended = row.summary.clone();
        let nodes = row.nodes.clone();
        let summary = &mut row.summary;
        summary.status = RunStatus::Running;
        summary.next_seq = 0;
        summary.version = version;
        summary.owner = Some(lease.owner.as_str().to_owned());
        summary.lease_until_ms = Some(until);
        summary.updated_ms = now;
        self.tasks.retain(|(r, _, _), _| r != run);
        match next.archive {
            Some(archive) => {
                for (signal, consumed) in self.signals.values_mut() {
                    if *consumed && signal.run == run {
                        signal.run.clone_from(&archive);
                    }
                }
                let summary = RunSummary {
                    id: archive.clone(),
                    status: RunStatus::Continued,
                    owner: None,
                    lease_until_ms: None,
                    wake_at_ms: None,
                    updated_ms: now,
                    ..ended
                };
                let kept = RunRow {
                    summary,
                    input,
                    options,
                    nodes,
                    events,
                    own,
                    outputs,
                    live,
                    timers: BTreeMap::new(),
                    waits: BTreeMap::new(),
                    end: Some(next.end),
                };
                self.runs.insert(archive, kept);
            }
            None => self
                .signals
                .retain(|_, (signal, consumed)| !(*consumed && signal.run == run)),
        }
        self.set_wake(run);
        Ok(Lease {
            run: run.to_owned(),
            owner: lease.owner.clone(),
            version,
            until_ms: until,
        })
    }

    fn delete(&mut self, run: &str) -> Result<(), StoreError> {
        let status = self.row(run)?.summary.status;
        if !status.is_finished() {
            return Err(StoreError::WrongStatus {
                run: run.to_owned(),
                status,
                needs: "only a finished run can be deleted",
            });
        }
        self.runs.remove(run);
        self.signals.retain(|_, (signal, _)| signal.run != run);
        self.tasks.retain(|(r, _, _), _| r != run);
        Ok(())
    }

    fn send_signal(&mut self, signal: NewSignal) -> Result<SignalSent, StoreError> {
        let row = self.row(&signal.run)?;
        if row.summary.status.is_finished() {
            return Err(StoreError::Finished { run: signal.run });
        }
        if signal.mode == SignalMode::Transient && !row.waits.values().any(|n| *n == signal.name) {
            return Ok(SignalSent::Dropped);
        }
        self.next_signal += 1;
        let id = self.next_signal;
        let run = signal.run.clone();
        let stored = StoredSignal {
            id,
            run: signal.run,
            name: signal.name,
            payload: signal.payload,
            mode: signal.mode,
            sent_ms: now_ms(),
        };
        self.signals.insert(id, (stored, false));
        self.set_wake(&run);
        Ok(SignalSent::Stored { id })
    }
}

impl State {
    fn results(&self, run: &str) -> Vec<TaskResult> {
        self.task_range(run)
            .filter_map(|((_, node, instance), task)| match &task.state {
                TaskState::Done { outcome, .. } => Some(TaskResult {
                    node: *node,
                    instance: instance.clone(),
                    attempt: task.attempt,
                    outcome: outcome.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    fn claim(
        &mut self,
        owner: &Owner,
        workflows: &[WorkflowVersion],
        limit: u32,
        lease: Duration,
    ) -> Vec<TaskClaim> {
        let now = now_ms();
        let until = due_after(now, lease);
        let mut free: Vec<(u64, TaskKey)> = self
            .tasks
            .iter()
            .filter(|(_, task)| match &task.state {
                TaskState::Ready => true,
                TaskState::Running { until, .. } => *until <= now,
                TaskState::Done { .. } => false,
            })
            .filter(|((run, _, _), _)| {
                self.runs.get(run).is_some_and(|row| {
                    !row.summary.status.is_finished()
                        && workflows
                            .iter()
                            .any(|w| w.covers(&row.summary.workflow, row.summary.graph_hash))
                })
            })
            .map(|(key, task)| (task.opened, key.clone()))
            .collect();
        free.sort_unstable();
        free.truncate(limit as usize);
        let mut claims = Vec::with_capacity(free.len());
        for (_, key) in free {
            let workflow = self
                .runs
                .get(&key.0)
                .map_or_else(String::new, |row| row.summary.workflow.clone());
            let Some(task) = self.tasks.get_mut(&key) else {
                continue;
            };
            let (run, node, instance) = key;
            let (lapsed, ready_ms) = match &task.state {
                TaskState::Running { until, .. } => (true, *until),
                _ => (false, task.opened_ms),
            };
            self.task_versions += 1;
            task.version = self.task_versions;
            task.state = TaskState::Running {
                owner: owner.clone(),
                until,
            };
            let inputs = self
                .runs
                .get(&run)
                .map(|row| row.inputs_of(node, &instance));
            claims.push(TaskClaim {
                run,
                workflow,
                node,
                instance,
                attempt: task.attempt,
                owner: owner.clone(),
                version: task.version,
                until_ms: until,
                lapsed,
                inputs,
                ready_ms: Some(ready_ms),
            });
        }
        claims
    }

    /// The task of `claim`, if the claim is still its own.
    fn held(&mut self, claim: &TaskClaim) -> Option<&mut TaskRow> {
        let task = self
            .tasks
            .get_mut(&(claim.run.clone(), claim.node, claim.instance.clone()))?;
        let mine = task.version == claim.version
            && matches!(&task.state, TaskState::Running { owner, .. } if *owner == claim.owner);
        mine.then_some(task)
    }

    fn complete(&mut self, claim: &TaskClaim, outcome: TaskOutcome) -> TaskCommitted {
        let now = now_ms();
        let version = self.task_versions + 1;
        let Some(task) = self.held(claim) else {
            return TaskCommitted::Stale;
        };
        task.version = version;
        task.state = TaskState::Done { outcome, at: now };
        self.task_versions = version;
        self.set_wake(&claim.run);
        TaskCommitted::Applied
    }
}

fn apply_timers(timers: &mut BTreeMap<TimerKey, u64>, changes: Vec<TimerChange>, now: u64) {
    for change in changes {
        match change {
            TimerChange::Set { key, after } => {
                timers.insert(key, due_after(now, after));
            }
            TimerChange::Clear { key } => {
                timers.remove(&key);
            }
        }
    }
}

impl Store for MemoryStore {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        ready(self.state().create(run))
    }

    fn claim_tasks<'a>(
        &'a self,
        owner: &'a Owner,
        workflows: &'a [WorkflowVersion],
        limit: u32,
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        ready(Ok(self.state().claim(owner, workflows, limit, lease)))
    }

    fn heartbeat_tasks<'a>(
        &'a self,
        held: &'a [TaskClaim],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        let mut state = self.state();
        let until = due_after(now_ms(), lease);
        let mut lost = Vec::new();
        for claim in held {
            match state.held(claim) {
                Some(task) => {
                    if let TaskState::Running { until: u, .. } = &mut task.state {
                        *u = until;
                    }
                }
                None => lost.push(claim.clone()),
            }
        }
        ready(Ok(lost))
    }

    fn complete_task<'a>(
        &'a self,
        claim: &'a TaskClaim,
        outcome: TaskOutcome,
    ) -> StoreFuture<'a, TaskCommitted> {
        ready(Ok(self.state().complete(claim, outcome)))
    }

    fn task_results<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<TaskResult>> {
        let state = self.state();
        ready(state.row(run).map(|_| state.results(run)))
    }

    fn task_inputs<'a>(&'a self, run: &'a str) -> StoreFuture<'a, TaskInputs> {
        let state = self.state();
        ready(state.row(run).map(|row| TaskInputs {
            graph_hash: row.summary.graph_hash,
            input: row.input.clone(),
            outputs: row.outputs.values().cloned().collect(),
        }))
    }

    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        ready(self.state().load(run, owner, lease))
    }

    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
        let state = self.state();
        let mut runs: Vec<RunSummary> = state
            .runs
            .values()
            .map(|row| &row.summary)
            .filter(|run| filter.matches(run))
            .cloned()
            .collect();
        runs.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        if filter.newest_first {
            runs.reverse();
        }
        if let Some(limit) = filter.limit {
            runs.truncate(limit as usize);
        }
        ready(Ok(runs))
    }

    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
        let state = self.state();
        ready(state.row(run).map(|row| {
            row.events
                .iter()
                .skip(usize::try_from(from_seq).unwrap_or(usize::MAX))
                .cloned()
                .collect()
        }))
    }

    fn nodes<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<NodeRow>> {
        let state = self.state();
        ready(state.row(run).map(|row| row.nodes.clone()))
    }

    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
        let state = self.state();
        ready(state.row(run).map(|row| RunData {
            input: row.input.clone(),
            options: row.options.clone(),
            outputs: row.outputs.values().cloned().collect(),
            end: row.end.clone(),
        }))
    }

    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        ready(self.state().commit(batch))
    }

    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        let state = self.state();
        let until = due_after(now_ms(), horizon);
        let mut due: Vec<DueTimer> = state
            .runs
            .values()
            .filter(|row| !row.summary.status.is_finished())
            .flat_map(|row| {
                row.timers
                    .iter()
                    .filter(|(_, due)| **due <= until)
                    .map(|(key, due)| DueTimer {
                        run: row.summary.id.clone(),
                        key: key.clone(),
                        due_ms: *due,
                    })
            })
            .collect();
        due.sort_by(|a, b| (a.due_ms, &a.run, &a.key).cmp(&(b.due_ms, &b.run, &b.key)));
        due.truncate(limit as usize);
        ready(Ok(due))
    }

    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        ready(self.state().send_signal(signal))
    }

    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        let state = self.state();
        ready(state.row(run).map(|_| state.open_signals(run, after)))
    }

    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        let mut state = self.state();
        let until = due_after(now_ms(), lease);
        let mut lost = Vec::new();
        for each in held {
            match state.runs.get_mut(&each.run) {
                Some(row)
                    if row.summary.owner.as_deref() == Some(owner.as_str())
                        && row.summary.version == each.version =>
                {
                    row.summary.lease_until_ms = Some(until);
                }
                _ => lost.push(each.clone()),
            }
        }
        ready(Ok(lost))
    }

    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        let mut state = self.state();
        for each in held {
            if let Some(row) = state.runs.get_mut(&each.run)
                && row.summary.owner.as_deref() == Some(owner.as_str())
                && row.summary.version == each.version
            {
                row.summary.owner = None;
                row.summary.lease_until_ms = None;
            }
        }
        ready(Ok(()))
    }

    fn reopen<'a>(&'a self, run: &'a str, marker: StoredEvent) -> StoreFuture<'a, RunSummary> {
        ready(self.state().reopen(run, marker))
    }

    fn delete_run<'a>(&'a self, run: &'a str) -> StoreFuture<'a, ()> {
        ready(self.state().delete(run))
    }

    fn continue_run<'a>(&'a self, lease: &'a Lease, next: ContinueRun) -> StoreFuture<'a, Lease> {
        ready(self.state().continue_run(lease, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_store_passes_the_tasks_contract() {
        super::super::contract::distributed(|| Arc::new(MemoryStore::new()) as Arc<dyn Store>)
            .await;
    }

    #[tokio::test]
    async fn memory_store_passes_the_contract_suite() {
        super::super::contract::all(|| Arc::new(MemoryStore::new()) as Arc<dyn Store>).await;
    }

    #[test]
    fn memory_store_is_send_sync_and_a_store_object() {
        fn assert<T: Send + Sync + Clone + 'static>() {}
        assert::<MemoryStore>();
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        drop(store);
    }
}
